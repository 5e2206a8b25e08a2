// Command asp is all-pairs shortest paths (the Orca papers' sidebar
// program; Floyd–Warshall, suite.ASP) on BDSM: the distance matrix is a
// segment of n×n int32 locations; each rank relaxes its block of rows.
// Iteration k needs row k everywhere: its owner bulk-writes row k into
// the segment, and a barrier makes every rank wait for it (BDSM has no
// other way to wait for data: thesis §5.1.1); every rank then relaxes
// with row k read from its copy of the segment. At the end every rank
// bulk-writes its final block, and rank 0, after one more barrier, holds
// the whole result. With one process rank 0 relaxes every row itself.
//
//	asp -n 300
//	asp -n 64 -sim -procs 4 -loss 0.05 -verify
//	asp -n 512 -iface eth0 -procs 4 -rank R
package main

import (
	"context"
	"encoding/binary"
	"flag"
	"time"

	"github.com/rbcast/rbcast/dsm"
	"github.com/rbcast/rbcast/dsm/examples/internal/harness"
	"github.com/rbcast/rbcast/internal/suite"
)

const segMatrix = 0x41535001

func main() {
	harness.Main("asp", setup)
}

func setup(fs *flag.FlagSet, o *harness.Options) (func() harness.Result, harness.Program) {
	nodes := fs.Int("n", 300, "number of nodes")
	seed := fs.Uint64("seed", 1, "seed of the weights")
	o.Bound("n", nodes, 1, 16384, "an n×n distance matrix of int32, at most 1 GiB")
	problem := func() *suite.ASP {
		o.SetParams("n=%d seed=%d", *nodes, *seed)
		return suite.NewASP(*nodes, *seed)
	}
	seq := func() harness.Result {
		a := problem()
		start := time.Now()
		d := a.Sequential()
		return harness.Result{Valid: true, Checksum: suite.ChecksumInt32(d), Solve: time.Since(start)}
	}
	par := func(ctx context.Context, node *dsm.Node) (harness.Result, error) {
		return parallel(ctx, node, problem())
	}
	return seq, par
}

func int32Bytes(b []byte, v []int32) []byte {
	for _, x := range v {
		b = binary.LittleEndian.AppendUint32(b, uint32(x))
	}
	return b
}

func parallel(ctx context.Context, node *dsm.Node, a *suite.ASP) (harness.Result, error) {
	n, procs, rank := a.N, node.Size(), node.Rank()
	seg, err := harness.Attach(ctx, node, segMatrix, max(n*n, 1), 4)
	if err != nil {
		return harness.Result{}, err
	}
	barrier := harness.Barriers(ctx, node)
	if err := barrier(); err != nil {
		return harness.Result{}, err
	}
	start := time.Now()
	d := append([]int32(nil), a.Dist...) // this rank's rows are current
	if procs == 1 {
		for k := range n {
			a.Relax(d, 0, n, k, d[k*n:(k+1)*n])
		}
		return harness.Result{Valid: true, Checksum: suite.ChecksumInt32(d), Solve: time.Since(start)}, nil
	}
	lo, hi := suite.Block(n, procs, rank)
	buf := make([]byte, 0, 4*n)
	pivot := make([]int32, n)
	for k := range n {
		if k >= lo && k < hi {
			if _, err := seg.WriteBulk(k*n, int32Bytes(buf[:0], d[k*n:(k+1)*n])); err != nil {
				return harness.Result{}, err
			}
		}
		if err := barrier(); err != nil {
			return harness.Result{}, err
		}
		view := seg.View()[4*k*n:]
		for j := range pivot {
			pivot[j] = int32(binary.LittleEndian.Uint32(view[4*j:]))
		}
		a.Relax(d, lo, hi, k, pivot)
	}
	if _, err := seg.WriteBulk(lo*n, int32Bytes(make([]byte, 0, 4*n*(hi-lo)), d[lo*n:hi*n])); err != nil {
		return harness.Result{}, err
	}
	if err := barrier(); err != nil {
		return harness.Result{}, err
	}
	if rank != 0 {
		return harness.Result{Solve: time.Since(start)}, nil
	}
	view := seg.View()
	for i := range d {
		d[i] = int32(binary.LittleEndian.Uint32(view[4*i:]))
	}
	return harness.Result{Valid: true, Checksum: suite.ChecksumInt32(d), Solve: time.Since(start)}, nil
}
