// Command matmult is the thesis's matrix multiplication (Auld 2001, §6.3)
// on BDSM: C = A B for m×m integer matrices that every rank generates
// itself; each rank computes its block of rows of C and bulk-writes them,
// and rank 0, after one barrier, holds the whole result. The pattern is a
// single all-to-one round, which broadcast serves worst: every rank
// receives every row (thesis fig. 6.1).
//
//	matmult -m 512
//	matmult -m 48 -sim -procs 4 -loss 0.05 -verify
//	matmult -m 512 -iface eth0 -procs 4 -rank R
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

const segC = 0x4d4d0001

func main() {
	harness.Main("matmult", setup)
}

func setup(fs *flag.FlagSet, o *harness.Options) (func() harness.Result, harness.Program) {
	m := fs.Int("m", 512, "matrix size (m×m)")
	seed := fs.Uint64("seed", 1, "seed of A and B")
	o.Bound("m", m, 1, harness.MaxSide, "m×m matrices of int32, at most 1 GiB each")
	problem := func() *suite.MatMult {
		o.SetParams("m=%d seed=%d", *m, *seed)
		return suite.NewMatMult(*m, *seed)
	}
	seq := func() harness.Result {
		p := problem()
		start := time.Now()
		c := p.Sequential()
		return harness.Result{Valid: true, Checksum: suite.ChecksumInt32(c), Solve: time.Since(start)}
	}
	par := func(ctx context.Context, node *dsm.Node) (harness.Result, error) {
		return parallel(ctx, node, problem())
	}
	return seq, par
}

func parallel(ctx context.Context, node *dsm.Node, p *suite.MatMult) (harness.Result, error) {
	m := p.M
	lo, hi := suite.Block(m, node.Size(), node.Rank())
	seg, err := harness.Attach(ctx, node, segC, m*m, 4)
	if err != nil {
		return harness.Result{}, err
	}
	if err := node.Barrier(ctx, 1); err != nil {
		return harness.Result{}, err
	}
	start := time.Now()
	c := make([]int32, m*m)
	p.Rows(c, lo, hi)
	rows := make([]byte, 0, 4*m*(hi-lo))
	for _, v := range c[lo*m : hi*m] {
		rows = binary.LittleEndian.AppendUint32(rows, uint32(v))
	}
	if _, err := seg.WriteBulk(lo*m, rows); err != nil {
		return harness.Result{}, err
	}
	if err := node.Barrier(ctx, 2); err != nil {
		return harness.Result{}, err
	}
	if node.Rank() != 0 {
		return harness.Result{Solve: time.Since(start)}, nil
	}
	view := seg.View()
	for i := range c {
		c[i] = int32(binary.LittleEndian.Uint32(view[4*i:]))
	}
	return harness.Result{Valid: true, Checksum: suite.ChecksumInt32(c), Solve: time.Since(start)}, nil
}
