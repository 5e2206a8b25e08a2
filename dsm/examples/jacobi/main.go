// Command jacobi is the thesis's Jacobi solver (Auld 2001, §6.3 and
// appendix A) on BDSM: solve Ax = b for the dense five-diagonal A, every
// rank sweeping its block of rows each iteration from the whole previous x.
//
// Shared memory: one segment of 2n float64 locations, x double-buffered, so
// that one barrier per iteration suffices: iteration k reads buffer k%2 and
// writes its rows of buffer (k+1)%2, and no rank writes a buffer before
// every rank has finished reading it (the barrier between). After the
// barrier every rank tests convergence over the whole vector, so all stop
// together without a "done" location.
//
// Channel mode (-channels; thesis §7.2): A is five-diagonal, so row i
// needs x[i-2..i+2] only, and a rank needs its neighbours' blocks, not the
// whole x. Each rank then has a segment of its own (its block, double
// buffered), which it creates and its neighbours join read-only: a
// reliable group of two or three ranks, a halo exchange, on which only
// the owner puts a barrier marker. The rest of x stays zero here,
// which changes no sum (its coefficients are zero), so the result is the
// sequential one bit for bit. Convergence needs the whole x, so -eps is
// refused; at the end every rank writes its block into a segment that
// all join, and holds the result.
//
//	jacobi -n 512 -iters 500                      sequential
//	jacobi -n 64 -iters 50 -sim -procs 4 -loss 0.05 -verify
//	jacobi -n 64 -iters 50 -sim -procs 4 -loss 0.05 -channels -verify
//	jacobi -n 512 -iters 500 -iface eth0 -procs 4 -rank R   one process per host, R = 0..3
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

const segX = 0x4a430001

// In channel mode, rank r's block is segment segBlock+r, and the result
// is gathered in segX.
const segBlock = 0x4a431000

func main() {
	harness.Main("jacobi", setup)
}

func setup(fs *flag.FlagSet, o *harness.Options) (func() harness.Result, harness.Program) {
	n := fs.Int("n", 512, "matrix size (n×n, vectors of n)")
	iters := fs.Int("iters", 500, "maximum sweeps")
	eps := fs.Float64("eps", 0, "stop when no element moves by eps or more (0: run all -iters)")
	seed := fs.Uint64("seed", 1, "seed of b")
	o.Bound("n", n, 1, harness.MaxSide, "an n×n matrix of float64, at most 2 GiB")
	o.Bound("iters", iters, 0, harness.MaxIters, "sweeps")
	o.AllowChannels(true)
	o.SetDefaultGOMAXPROCS(1) // microseconds of computation between barriers
	var p *suite.Jacobi
	problem := func() *suite.Jacobi {
		if p == nil {
			o.SetParams("n=%d iters=%d eps=%g seed=%d", *n, *iters, *eps, *seed)
			p = suite.NewJacobi(*n, *seed)
		}
		return p
	}
	seq := func() harness.Result {
		p := problem()
		start := time.Now()
		x, done := p.Sequential(*iters, *eps)
		return harness.Result{Valid: true, Checksum: suite.Checksum(x), Detail: fmt.Sprintf("done=%d", done), Solve: time.Since(start)}
	}
	par := func(ctx context.Context, node *dsm.Node) (harness.Result, error) {
		if o.Channels {
			return channels(ctx, node, problem(), *iters, *eps, o.ChannelBarriers)
		}
		return parallel(ctx, node, problem(), *iters, *eps)
	}
	return seq, par
}

func parallel(ctx context.Context, node *dsm.Node, p *suite.Jacobi, iters int, eps float64) (harness.Result, error) {
	n := p.N
	lo, hi := suite.Block(n, node.Size(), node.Rank())
	seg, err := harness.Attach(ctx, node, segX, 2*n, 8)
	if err != nil {
		return harness.Result{}, err
	}
	// x starts as b: every rank writes its block into buffer 0.
	if _, err := seg.WriteFloat64s(lo, p.B[lo:hi]); err != nil {
		return harness.Result{}, err
	}
	sync := harness.Barriers(ctx, node)
	if err := sync(); err != nil {
		return harness.Result{}, err
	}
	start, cpu0 := time.Now(), harness.ProcessCPU()
	ph := harness.NewPhases(node.Rank(), "compute", "write", "barrier")
	defer ph.Report()
	ph.Start()
	old, next := make([]float64, n), make([]float64, n)
	cur, done := 0, 0
	for done < iters {
		copy(old, seg.Float64s()[cur*n:cur*n+n])
		p.Rows(old, next, lo, hi)
		ph.Mark(0)
		if _, err := seg.WriteFloat64s((1-cur)*n+lo, next[lo:hi]); err != nil {
			return harness.Result{}, err
		}
		ph.Mark(1)
		if err := sync(); err != nil {
			return harness.Result{}, err
		}
		ph.Mark(2)
		done++
		cur = 1 - cur
		if suite.Converged(old, seg.Float64s()[cur*n:cur*n+n], eps) {
			break
		}
	}
	x := seg.Float64s()[cur*n : cur*n+n]
	return harness.Result{Valid: true, Checksum: suite.Checksum(x), Detail: fmt.Sprintf("done=%d", done), Solve: time.Since(start), CPU: harness.ProcessCPU() - cpu0}, nil
}

// channels is the channel mode: each rank's block in a segment of its own,
// joined by the ranks whose rows reach into it (the block's neighbours).
func channels(ctx context.Context, node *dsm.Node, p *suite.Jacobi, iters int, eps float64, channelBarriers bool) (harness.Result, error) {
	n, size, rank := p.N, node.Size(), node.Rank()
	if eps != 0 {
		return harness.Result{}, fmt.Errorf("-eps %g: convergence is tested over the whole x, which a rank does not hold with -channels (use -eps 0)", eps)
	}
	if n < 2*size {
		return harness.Result{}, fmt.Errorf("-channels needs at least 2 rows per rank (row i reads x[i-2..i+2] from the neighbours' blocks only): -n %d, -procs %d", n, size)
	}
	// blocks[r] is rank r's block segment if this rank holds it: its own,
	// created here, and its neighbours', joined (creates first, so that
	// every join finds its announcement coming).
	blocks := make([]*dsm.Segment, size)
	lo, hi := suite.Block(n, size, rank)
	var err error
	if blocks[rank], err = node.CreateSegment(segBlock+uint32(rank), 2*(hi-lo), 8); err != nil {
		return harness.Result{}, err
	}
	for _, r := range []int{rank - 1, rank + 1} {
		if r < 0 || r >= size {
			continue
		}
		blo, bhi := suite.Block(n, size, r)
		// Read-only: no barrier marker on a neighbour's channel.
		if blocks[r], err = node.JoinSegmentReadOnly(ctx, segBlock+uint32(r), 2*(bhi-blo), 8); err != nil {
			return harness.Result{}, err
		}
	}
	result, err := harness.Attach(ctx, node, segX, n, 8)
	if err != nil {
		return harness.Result{}, err
	}
	// Channel barriers only where no block is every rank's (4 ranks or
	// more): a block every rank joined travels on the global group,
	// which only a total barrier marks.
	sync, loop := harness.BarrierPair(ctx, node, channelBarriers && size >= 4)
	if err := sync(); err != nil { // fixes the segments' members
		return harness.Result{}, err
	}
	// x starts as b: buffer 0 of every block.
	if _, err := blocks[rank].WriteFloat64s(0, p.B[lo:hi]); err != nil {
		return harness.Result{}, err
	}
	if err := sync(); err != nil {
		return harness.Result{}, err
	}
	start, cpu0 := time.Now(), harness.ProcessCPU()
	ph := harness.NewPhases(rank, "compute", "write", "barrier")
	defer ph.Report()
	ph.Start()
	old, next := make([]float64, n), make([]float64, n)
	cur, done := 0, 0
	for done < iters {
		for r, b := range blocks {
			if b != nil {
				blo, bhi := suite.Block(n, size, r)
				copy(old[blo:bhi], b.Float64s()[cur*(bhi-blo):])
			}
		}
		p.Rows(old, next, lo, hi)
		ph.Mark(0)
		if _, err := blocks[rank].WriteFloat64s((1-cur)*(hi-lo), next[lo:hi]); err != nil {
			return harness.Result{}, err
		}
		ph.Mark(1)
		if err := loop(); err != nil {
			return harness.Result{}, err
		}
		ph.Mark(2)
		done++
		cur = 1 - cur
	}
	if _, err := result.WriteFloat64s(lo, blocks[rank].Float64s()[cur*(hi-lo):cur*(hi-lo)+hi-lo]); err != nil {
		return harness.Result{}, err
	}
	if err := sync(); err != nil {
		return harness.Result{}, err
	}
	x := result.Float64s()
	return harness.Result{Valid: true, Checksum: suite.Checksum(x), Detail: fmt.Sprintf("done=%d", done), Solve: time.Since(start), CPU: harness.ProcessCPU() - cpu0}, nil
}
