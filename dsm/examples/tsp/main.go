// Command tsp is the thesis's travelling salesman solver (Auld 2001, §6.3)
// on BDSM, master and slaves: rank 0 writes the jobs — every path of
// suite.JobDepth cities from city 0 — into a shared segment, dealt to the
// slaves in strict rotation; each slave searches its jobs by branch and
// bound keeping only its own best tour (as the thesis's MPI version must),
// and writes that tour into its slot of a result segment; after a barrier
// rank 0 picks the best. With one process rank 0 does every job itself,
// which is the sequential program.
//
//	tsp -cities 12
//	tsp -cities 9 -sim -procs 4 -loss 0.05 -verify
//	tsp -cities 12 -iface eth0 -procs 4 -rank R
package main

import (
	"context"
	"encoding/binary"
	"flag"
	"fmt"
	"time"

	"github.com/rbcast/rbcast/dsm"
	"github.com/rbcast/rbcast/dsm/examples/internal/harness"
	"github.com/rbcast/rbcast/internal/suite"
)

const (
	segJobs = 0x54530001 + iota
	segBest
)

func main() {
	harness.Main("tsp", setup)
}

func setup(fs *flag.FlagSet, o *harness.Options) (func() harness.Result, harness.Program) {
	cities := fs.Int("cities", 12, "number of cities")
	seed := fs.Uint64("seed", 1, "seed of the distances")
	o.Bound("cities", cities, 1, 4096, "an n×n distance matrix; the search grows as n!")
	problem := func() *suite.TSP {
		o.SetParams("cities=%d seed=%d", *cities, *seed)
		return suite.NewTSP(*cities, *seed)
	}
	seq := func() harness.Result {
		t := problem()
		start := time.Now()
		best, _ := t.Sequential()
		return result(best, time.Since(start))
	}
	par := func(ctx context.Context, node *dsm.Node) (harness.Result, error) {
		return parallel(ctx, node, problem())
	}
	return seq, par
}

// result reports a tour: its length and path are the compared detail, the
// checksum is over the path.
func result(t suite.Tour, solve time.Duration) harness.Result {
	path := make([]float64, len(t.Path))
	for i, c := range t.Path {
		path[i] = float64(c)
	}
	return harness.Result{Valid: true, Checksum: suite.Checksum(path), Detail: fmt.Sprintf("length=%d", t.Len), Solve: solve}
}

func int32s(b []byte, v []int32) []byte {
	for _, x := range v {
		b = binary.LittleEndian.AppendUint32(b, uint32(x))
	}
	return b
}

func parallel(ctx context.Context, node *dsm.Node, t *suite.TSP) (harness.Result, error) {
	procs, rank := node.Size(), node.Rank()
	jobs := t.Jobs()
	depth := min(suite.JobDepth, t.N)
	jobSeg, err := harness.Attach(ctx, node, segJobs, max(len(jobs), 1), 4*depth)
	if err != nil {
		return harness.Result{}, err
	}
	// A slot per rank: the tour's length, then its n cities.
	bestSeg, err := harness.Attach(ctx, node, segBest, procs, 4*(1+t.N))
	if err != nil {
		return harness.Result{}, err
	}
	if err := node.Barrier(ctx, 1); err != nil {
		return harness.Result{}, err
	}
	start := time.Now()
	if procs == 1 {
		best, _ := t.Worker(jobs, 0, 1)
		return result(best, time.Since(start)), nil
	}
	if rank == 0 {
		// Deal the jobs: job j goes to slave 1 + j%(procs-1), in order.
		var buf []byte
		for _, j := range jobs {
			buf = int32s(buf, j)
		}
		if _, err := jobSeg.WriteBulk(0, buf); err != nil {
			return harness.Result{}, err
		}
	}
	if err := node.Barrier(ctx, 2); err != nil {
		return harness.Result{}, err
	}
	if rank > 0 {
		view := jobSeg.View()
		mine := make([][]int32, 0, len(jobs)/(procs-1)+1)
		for j := rank - 1; j < len(jobs); j += procs - 1 {
			job := make([]int32, depth)
			for k := range job {
				job[k] = int32(binary.LittleEndian.Uint32(view[4*(j*depth+k):]))
			}
			mine = append(mine, job)
		}
		best, _ := t.Worker(mine, 0, 1)
		slot := binary.LittleEndian.AppendUint32(nil, uint32(best.Len))
		path := best.Path
		if path == nil {
			path = make([]int32, t.N) // no job, no tour: length says so
		}
		if err := bestSeg.Write(rank, int32s(slot, path)); err != nil {
			return harness.Result{}, err
		}
	}
	if err := node.Barrier(ctx, 3); err != nil {
		return harness.Result{}, err
	}
	if rank != 0 {
		return harness.Result{Solve: time.Since(start)}, nil
	}
	best := suite.NoTour()
	view := bestSeg.View()
	size := 4 * (1 + t.N)
	for s := 1; s < procs; s++ {
		slot := view[s*size : (s+1)*size]
		tour := suite.Tour{Len: int32(binary.LittleEndian.Uint32(slot)), Path: make([]int32, t.N)}
		if tour.Len == 0 {
			// Every slave writes its slot (MaxInt32 when it found no
			// tour), and a tour of n > 1 cities has a length of at least n.
			return harness.Result{}, fmt.Errorf("slave %d's result never arrived", s)
		}
		for k := range tour.Path {
			tour.Path[k] = int32(binary.LittleEndian.Uint32(slot[4*(1+k):]))
		}
		if suite.Better(tour, best) {
			best = tour
		}
	}
	return result(best, time.Since(start)), nil
}
