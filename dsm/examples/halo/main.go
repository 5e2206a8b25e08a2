// Command halo is a halo exchange on BDSM whose segments are shared by
// neighbour pairs only (issue 21, thesis §7.2): Jacobi relaxation of
// Laplace's equation on an n×n grid, u'[i][j] = 0.25·((u[i-1][j] +
// u[i+1][j]) + (u[i][j-1] + u[i][j+1])) inside, the border fixed. Ranks
// own blocks of rows; a rank needs only the row above and the row below
// its block, which its neighbours own.
//
// Shared memory: for each neighbour pair (r, r+1) one segment, created by
// r and joined by r+1: their two edge rows (r's last, r+1's first),
// double buffered as in jacobi, so one barrier per sweep suffices. With
// -channels each pair's segment is a reliable group of two, and a rank
// receives only its neighbours' rows; without, every rank holds and
// receives every pair's. At the end every rank writes its block into a
// grid segment that all join, and checks the whole grid.
//
//	halo -n 256 -iters 200                                  sequential
//	halo -n 64 -iters 50 -sim -procs 4 -loss 0.05 -channels -verify
//	halo -n 512 -iters 500 -iface eth0 -procs 4 -rank R -channels
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
	segPair = 0x48410000 // + r: the edge rows of ranks r and r+1
	segGrid = 0x48414752 // the whole grid, gathered at the end
)

func main() {
	harness.Main("halo", setup)
}

func setup(fs *flag.FlagSet, o *harness.Options) (func() harness.Result, harness.Program) {
	n := fs.Int("n", 256, "grid size (n×n)")
	iters := fs.Int("iters", 200, "sweeps")
	seed := fs.Uint64("seed", 1, "seed of the initial grid")
	o.Bound("n", n, 1, harness.MaxSide, "an n×n grid of float64, at most 2 GiB")
	o.Bound("iters", iters, 0, harness.MaxIters, "sweeps")
	o.AllowChannels(true)
	o.SetDefaultGOMAXPROCS(1) // microseconds of computation between barriers
	params := func() {
		o.SetParams("n=%d iters=%d seed=%d", *n, *iters, *seed)
	}
	seq := func() harness.Result {
		params()
		start := time.Now()
		u := sequential(initial(*n, *seed), *n, *iters)
		return harness.Result{Valid: true, Checksum: suite.Checksum(u), Detail: fmt.Sprintf("done=%d", *iters), Solve: time.Since(start)}
	}
	par := func(ctx context.Context, node *dsm.Node) (harness.Result, error) {
		params()
		return parallel(ctx, node, *n, *iters, *seed, o.ChannelBarriers)
	}
	return seq, par
}

// initial is the starting grid: random values in [0, 1), border included.
func initial(n int, seed uint64) []float64 {
	u := make([]float64, n*n)
	r := suite.NewRand(seed)
	for i := range u {
		u[i] = r.Float64()
	}
	return u
}

// sweep computes rows lo..hi-1 of next from u (rows lo-1..hi of u are
// read); border cells are copied.
func sweep(u, next []float64, n, lo, hi int) {
	for i := lo; i < hi; i++ {
		row := next[i*n : i*n+n]
		if i == 0 || i == n-1 {
			copy(row, u[i*n:i*n+n])
			continue
		}
		up, mid, down := u[(i-1)*n:i*n], u[i*n:i*n+n], u[(i+1)*n:(i+2)*n]
		row[0], row[n-1] = mid[0], mid[n-1]
		for j := 1; j < n-1; j++ {
			row[j] = 0.25 * ((up[j] + down[j]) + (mid[j-1] + mid[j+1]))
		}
	}
}

func sequential(u []float64, n, iters int) []float64 {
	next := make([]float64, n*n)
	for range iters {
		sweep(u, next, n, 0, n)
		u, next = next, u
	}
	return u
}

// parallel is one rank's program. The rank keeps its rows and the two
// ghost rows around them in a grid of its own (rows outside stay zero and
// are never read).
func parallel(ctx context.Context, node *dsm.Node, n, iters int, seed uint64, channelBarriers bool) (harness.Result, error) {
	size, rank := node.Size(), node.Rank()
	if n < size || n < 3 {
		return harness.Result{}, fmt.Errorf("halo needs at least one row per rank and n >= 3: -n %d, -procs %d", n, size)
	}
	lo, hi := suite.Block(n, size, rank)
	// below is the pair (rank-1, rank), above (rank, rank+1). A pair's
	// location (b*2+side)*n+j: buffer b, side 0 the lower rank's last
	// row, side 1 the upper rank's first row.
	var below, above *dsm.Segment
	var err error
	if rank+1 < size {
		if above, err = node.CreateSegment(segPair+uint32(rank), 4*n, 8); err != nil {
			return harness.Result{}, err
		}
	}
	if rank > 0 {
		if below, err = node.JoinSegment(ctx, segPair+uint32(rank-1), 4*n, 8); err != nil {
			return harness.Result{}, err
		}
	}
	grid, err := harness.Attach(ctx, node, segGrid, n*n, 8)
	if err != nil {
		return harness.Result{}, err
	}
	// Channel barriers only where no pair is every rank (3 ranks or
	// more): a segment every rank joined travels on the global group,
	// which only a total barrier marks.
	sync, loop := harness.BarrierPair(ctx, node, channelBarriers && node.Size() >= 3)
	if err := sync(); err != nil { // fixes the segments' members
		return harness.Result{}, err
	}
	u, next := initial(n, seed), make([]float64, n*n)
	// publish writes this rank's edge rows of u into buffer b.
	publish := func(u []float64, b int) error {
		if above != nil {
			if _, err := above.WriteFloat64s((b*2+0)*n, u[(hi-1)*n:hi*n]); err != nil {
				return err
			}
		}
		if below != nil {
			if _, err := below.WriteFloat64s((b*2+1)*n, u[lo*n:(lo+1)*n]); err != nil {
				return err
			}
		}
		return nil
	}
	if err := publish(u, 0); err != nil {
		return harness.Result{}, err
	}
	if err := sync(); err != nil {
		return harness.Result{}, err
	}
	start, cpu0 := time.Now(), harness.ProcessCPU()
	ph := harness.NewPhases(rank, "compute", "write", "barrier")
	defer ph.Report()
	ph.Start()
	cur := 0
	for range iters {
		if below != nil {
			copy(u[(lo-1)*n:lo*n], below.Float64s()[(cur*2+0)*n:])
		}
		if above != nil {
			copy(u[hi*n:(hi+1)*n], above.Float64s()[(cur*2+1)*n:])
		}
		sweep(u, next, n, lo, hi)
		u, next = next, u
		cur = 1 - cur
		ph.Mark(0)
		if err := publish(u, cur); err != nil {
			return harness.Result{}, err
		}
		ph.Mark(1)
		if err := loop(); err != nil {
			return harness.Result{}, err
		}
		ph.Mark(2)
	}
	if _, err := grid.WriteFloat64s(lo*n, u[lo*n:hi*n]); err != nil {
		return harness.Result{}, err
	}
	if err := sync(); err != nil {
		return harness.Result{}, err
	}
	return harness.Result{Valid: true, Checksum: suite.Checksum(grid.Float64s()), Detail: fmt.Sprintf("done=%d", iters), Solve: time.Since(start), CPU: harness.ProcessCPU() - cpu0}, nil
}
