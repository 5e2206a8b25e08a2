// Command nbody is the thesis's N-body simulation (Auld 2001, §6.3) on
// BDSM: each rank computes the forces on its block of particles from all
// particles and moves them; positions are exchanged all-to-all once per
// time step (the thesis's BDSM version; its MPI version rotates blocks
// around a ring instead).
//
// Shared memory: one segment of 2·3n float64 locations, the positions
// double-buffered as in jacobi, one barrier per step. Masses are constant
// and every rank generates them; velocities stay with the particle's owner.
//
//	nbody -n 1024 -steps 30
//	nbody -n 48 -steps 5 -sim -procs 4 -loss 0.05 -verify
//	nbody -n 1024 -steps 30 -iface eth0 -procs 4 -rank R
package main

import (
	"context"
	"flag"
	"time"

	"github.com/rbcast/rbcast/dsm"
	"github.com/rbcast/rbcast/dsm/examples/internal/harness"
	"github.com/rbcast/rbcast/internal/suite"
)

const segPos = 0x4e420001

func main() {
	harness.Main("nbody", setup)
}

func setup(fs *flag.FlagSet, o *harness.Options) (func() harness.Result, harness.Program) {
	n := fs.Int("n", 1024, "particles")
	steps := fs.Int("steps", 30, "time steps")
	seed := fs.Uint64("seed", 1, "seed of the particles")
	o.Bound("n", n, 1, 1<<20, "particles; a step computes n² interactions")
	o.Bound("steps", steps, 0, harness.MaxIters, "time steps")
	param := func() {
		o.SetParams("n=%d steps=%d seed=%d", *n, *steps, *seed)
	}
	seq := func() harness.Result {
		param()
		b := suite.NewNBody(*n, *seed)
		start := time.Now()
		pos := b.Sequential(*steps)
		return harness.Result{Valid: true, Checksum: suite.Checksum(pos), Solve: time.Since(start)}
	}
	par := func(ctx context.Context, node *dsm.Node) (harness.Result, error) {
		param()
		return parallel(ctx, node, suite.NewNBody(*n, *seed), *steps)
	}
	return seq, par
}

func parallel(ctx context.Context, node *dsm.Node, b *suite.NBody, steps int) (harness.Result, error) {
	n3 := 3 * b.N
	lo, hi := suite.Block(b.N, node.Size(), node.Rank())
	seg, err := harness.Attach(ctx, node, segPos, 2*n3, 8)
	if err != nil {
		return harness.Result{}, err
	}
	if _, err := seg.WriteFloat64s(3*lo, b.Pos[3*lo:3*hi]); err != nil {
		return harness.Result{}, err
	}
	sync := harness.Barriers(ctx, node)
	if err := sync(); err != nil {
		return harness.Result{}, err
	}
	start := time.Now()
	next := make([]float64, n3)
	cur := 0
	for range steps {
		// Only the next buffer is written before the barrier, so reading
		// the current one in place is race-free.
		b.Advance(seg.Float64s()[cur*n3:cur*n3+n3], next, lo, hi)
		if _, err := seg.WriteFloat64s((1-cur)*n3+3*lo, next[3*lo:3*hi]); err != nil {
			return harness.Result{}, err
		}
		if err := sync(); err != nil {
			return harness.Result{}, err
		}
		cur = 1 - cur
	}
	pos := seg.Float64s()[cur*n3 : cur*n3+n3]
	return harness.Result{Valid: true, Checksum: suite.Checksum(pos), Solve: time.Since(start)}, nil
}
