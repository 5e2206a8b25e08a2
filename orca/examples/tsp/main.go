// Command tsp is the Orca paper's travelling salesman solver (Tanenbaum,
// Kaashoek and Bal, "Orca", fig. 5) on replicated shared objects: a
// best-path object holds the shortest tour found so far, read by every
// worker at every node of its branch-and-bound search (a local read) and
// written, through the total order, only when a worker finds a better
// tour; a job queue object holds the jobs — every path of suite.JobDepth
// cities from city 0 — which rank 0 puts in one write, and every rank,
// rank 0 included, takes one at a time with a guarded get (Orca's
// replicated workers). A worker starts the get of its next job (Op.Go: a
// forked process's call) before it searches the one in hand, so that the
// round trip through the order overlaps the search (-prefetch=false: get
// each job when the last is done). With one process rank 0 does every job
// itself. The result is the sequential program's tour
// (suite.SearchShared).
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
	"slices"
	"time"

	"github.com/rbcast/rbcast/internal/suite"
	"github.com/rbcast/rbcast/orca"
	"github.com/rbcast/rbcast/orca/examples/internal/harness"
)

func main() {
	harness.Main("tsp", setup)
}

// tourCodec encodes a tour: its length, then its cities.
var tourCodec = orca.CodecFuncs(
	func(b []byte, t suite.Tour) ([]byte, error) {
		b = binary.LittleEndian.AppendUint32(b, uint32(t.Len))
		return orca.Int32s.Append(b, t.Path)
	},
	func(b []byte) (suite.Tour, error) {
		if len(b) < 4 {
			return suite.Tour{}, fmt.Errorf("a tour of %d bytes, shorter than its length", len(b))
		}
		path, err := orca.Int32s.Decode(b[4:])
		return suite.Tour{Len: int32(binary.LittleEndian.Uint32(b)), Path: path}, err
	})

// The best-path object: the shortest tour so far (suite.NoTour at
// first). offer keeps a tour if it is suite.Better; bound is the length
// every search node reads.
var (
	bestPath = orca.NewClass[suite.Tour]("tsp.best")
	offer    = orca.Write(bestPath, "offer", tourCodec, func(b *suite.Tour, t suite.Tour) bool {
		if !suite.Better(t, *b) {
			return false
		}
		*b = t
		return true
	})
	bound = orca.Read(bestPath, "bound", func(b *suite.Tour, _ struct{}) int32 { return b.Len })
	best  = orca.Read(bestPath, "best", func(b *suite.Tour, _ struct{}) suite.Tour {
		return suite.Tour{Len: b.Len, Path: slices.Clone(b.Path)}
	})
)

// The job queue: jobs of Depth cities each, end to end; get waits until
// there is a job (and takes it) or the queue is closed and empty (nil).
type jobQueue struct {
	Depth  int32
	Jobs   []int32
	Closed bool
}

var (
	jobs    = orca.NewClass[jobQueue]("tsp.jobs")
	putJobs = orca.Write(jobs, "put", orca.Int32s, func(q *jobQueue, add []int32) int {
		q.Jobs = append(q.Jobs, add...)
		return len(q.Jobs) / int(q.Depth)
	})
	closeJobs = orca.Write(jobs, "close", orca.NoArgs, func(q *jobQueue, _ struct{}) bool { q.Closed = true; return true })
	getJob    = orca.Write(jobs, "get", orca.NoArgs, func(q *jobQueue, _ struct{}) []int32 {
		if len(q.Jobs) == 0 {
			return nil
		}
		job := slices.Clone(q.Jobs[:q.Depth])
		q.Jobs = q.Jobs[q.Depth:]
		return job
	}).When(func(q *jobQueue, _ struct{}) bool { return len(q.Jobs) > 0 || q.Closed })
)

func setup(fs *flag.FlagSet, o *harness.Options) (func() harness.Result, harness.Program) {
	cities := fs.Int("cities", 12, "number of cities")
	seed := fs.Uint64("seed", 1, "seed of the distances")
	o.Bound("cities", cities, 1, 4096, "an n×n distance matrix; the search grows as n!")
	prefetch := fs.Bool("prefetch", true, "start getting the next job before searching the one in hand (Op.Go)")
	problem := func() *suite.TSP {
		o.SetParams("cities=%d seed=%d", *cities, *seed)
		return suite.NewTSP(*cities, *seed)
	}
	seq := func() harness.Result {
		t := problem()
		start := time.Now()
		tour, _ := t.Sequential()
		return result(tour, time.Since(start))
	}
	par := func(ctx context.Context, n *orca.Node) (harness.Result, error) {
		return parallel(ctx, n, problem(), *prefetch)
	}
	return seq, par
}

// result reports a tour as dsm/examples/tsp does: its length is the
// compared detail, the checksum is over the path.
func result(t suite.Tour, solve time.Duration) harness.Result {
	path := make([]float64, len(t.Path))
	for i, c := range t.Path {
		path[i] = float64(c)
	}
	return harness.Result{Valid: true, Checksum: suite.Checksum(path), Detail: fmt.Sprintf("length=%d", t.Len), Solve: solve}
}

func parallel(ctx context.Context, n *orca.Node, t *suite.TSP, prefetch bool) (harness.Result, error) {
	depth := min(suite.JobDepth, t.N)
	bestObj, err := orca.New(n, "best", bestPath, suite.NoTour())
	if err != nil {
		return harness.Result{}, err
	}
	queue, err := orca.New(n, "jobs", jobs, jobQueue{Depth: int32(depth)})
	if err != nil {
		return harness.Result{}, err
	}
	start, err := harness.NewBarrier(n, "start")
	if err != nil {
		return harness.Result{}, err
	}
	if err := start.Wait(ctx); err != nil {
		return harness.Result{}, err
	}
	began := time.Now()
	if n.Rank() == 0 {
		var all []int32
		for _, j := range t.Jobs() {
			all = append(all, j...)
		}
		if _, err := putJobs.Call(ctx, queue, all); err != nil {
			return harness.Result{}, err
		}
		if _, err := closeJobs.Call(ctx, queue, struct{}{}); err != nil {
			return harness.Result{}, err
		}
	}
	var failed error
	readBound := func() int32 {
		b, _ := bound.Call(ctx, bestObj, struct{}{}) // a local read: never fails
		return b
	}
	offerTour := func(tour suite.Tour) {
		if failed != nil {
			return
		}
		// Offered only when no longer than the bound: write it only if it
		// beats the best path here, ties included (a local read).
		if cur, _ := best.Call(ctx, bestObj, struct{}{}); suite.Better(tour, cur) {
			_, failed = offer.Call(ctx, bestObj, tour)
		}
	}
	next := getJob.Go(ctx, queue, struct{}{})
	for failed == nil {
		job, err := next.Wait(ctx)
		if err != nil {
			return harness.Result{}, err
		}
		if job == nil {
			break
		}
		if prefetch {
			next = getJob.Go(ctx, queue, struct{}{})
		}
		t.SearchShared(job, readBound, offerTour)
		if !prefetch {
			next = getJob.Go(ctx, queue, struct{}{})
		}
	}
	if failed != nil {
		return harness.Result{}, failed
	}
	// Every rank's offers are in before rank 0 reads the best path.
	if err := start.Wait(ctx); err != nil {
		return harness.Result{}, err
	}
	if n.Rank() != 0 {
		return harness.Result{Solve: time.Since(began)}, nil
	}
	tour, _ := best.Call(ctx, bestObj, struct{}{})
	return result(tour, time.Since(began)), nil
}
