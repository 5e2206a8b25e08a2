// Command cg is the thesis's conjugate gradient program (Auld 2001, §6.3)
// on BDSM, on the jacobi problem: per iteration each rank computes its
// rows of q = A p and writes them (all-to-all exchange 1), every rank
// forms p·q over the whole vector and updates its rows of x and r, writes
// its r (exchange 2), and every rank forms r·r and the next p over the
// whole vector (see suite.CG for why the exchanges are whole vectors).
//
// Shared memory: segments q and r, n float64 locations each, and x, written
// once at the end. Two barriers per iteration and no double buffering: q is
// rewritten only after the barrier that follows every rank's last read of
// it (the r barrier), and r likewise after the q barrier.
//
//	cg -n 512 -iters 500
//	cg -n 64 -iters 40 -sim -procs 4 -loss 0.05 -verify
//	cg -n 512 -iters 500 -iface eth0 -procs 4 -rank R
package main

import (
	"context"
	"flag"
	"fmt"
	"time"

	"github.com/rbcast/rbcast/dsm"
	"github.com/rbcast/rbcast/dsm/examples/internal/harness"
	"github.com/rbcast/rbcast/internal/suite"
)

const (
	segQ = 0x43470001 + iota
	segR
	segX
)

func main() {
	harness.Main("cg", setup)
}

func setup(fs *flag.FlagSet, o *harness.Options) (func() harness.Result, harness.Program) {
	n := fs.Int("n", 512, "matrix size (n×n, vectors of n)")
	iters := fs.Int("iters", 500, "iterations")
	seed := fs.Uint64("seed", 1, "seed of b")
	o.Bound("n", n, 1, harness.MaxSide, "an n×n matrix of float64, at most 2 GiB")
	o.Bound("iters", iters, 0, harness.MaxIters, "iterations")
	// A rank computes its rows of A p between two barriers: 30-110 µs at
	// n = 512 on 2-4 ranks, so one P, as jacobi and halo.
	o.SetDefaultGOMAXPROCS(1)
	var c *suite.CG
	problem := func() *suite.CG {
		if c == nil {
			o.SetParams("n=%d iters=%d seed=%d", *n, *iters, *seed)
			c = suite.NewCG(*n, *seed)
		}
		return c
	}
	seq := func() harness.Result {
		c := problem()
		start := time.Now()
		x, done := c.Sequential(*iters)
		return harness.Result{Valid: true, Checksum: suite.Checksum(x), Detail: fmt.Sprintf("done=%d", done), Solve: time.Since(start)}
	}
	par := func(ctx context.Context, node *dsm.Node) (harness.Result, error) {
		return parallel(ctx, node, problem(), *iters)
	}
	return seq, par
}

func parallel(ctx context.Context, node *dsm.Node, c *suite.CG, iters int) (harness.Result, error) {
	n := c.N
	lo, hi := suite.Block(n, node.Size(), node.Rank())
	var segs [3]*dsm.Segment
	for i, key := range []uint32{segQ, segR, segX} {
		s, err := harness.Attach(ctx, node, key, n, 8)
		if err != nil {
			return harness.Result{}, err
		}
		segs[i] = s
	}
	q, r, x := segs[0], segs[1], segs[2]
	sync := harness.Barriers(ctx, node)
	if err := sync(); err != nil {
		return harness.Result{}, err
	}
	start := time.Now()
	ph := harness.NewPhases(node.Rank(), "matvec", "writeq", "barrierq", "step", "writer", "barrierr", "direction")
	defer ph.Report()
	ph.Start()
	s := c.Start()
	done := 0
	for done < iters {
		c.MatVec(s, lo, hi)
		ph.Mark(0)
		if _, err := q.WriteFloat64s(lo, s.Q[lo:hi]); err != nil {
			return harness.Result{}, err
		}
		ph.Mark(1)
		if err := sync(); err != nil {
			return harness.Result{}, err
		}
		ph.Mark(2)
		copy(s.Q, q.Float64s())
		if !c.Step(s, lo, hi) {
			break
		}
		done++
		ph.Mark(3)
		if _, err := r.WriteFloat64s(lo, s.R[lo:hi]); err != nil {
			return harness.Result{}, err
		}
		ph.Mark(4)
		if err := sync(); err != nil {
			return harness.Result{}, err
		}
		ph.Mark(5)
		copy(s.R, r.Float64s())
		if !c.Direction(s) {
			break
		}
		ph.Mark(6)
	}
	if _, err := x.WriteFloat64s(lo, s.X[lo:hi]); err != nil {
		return harness.Result{}, err
	}
	if err := sync(); err != nil {
		return harness.Result{}, err
	}
	return harness.Result{Valid: true, Checksum: suite.Checksum(x.Float64s()), Detail: fmt.Sprintf("done=%d", done), Solve: time.Since(start)}, nil
}
