// Command asp is all-pairs shortest paths (the Orca paper's sidebar, after
// Bal, Kaashoek and Tanenbaum's Orca program) on replicated shared
// objects: Floyd–Warshall over n nodes, each rank relaxing its block of
// rows (suite.Block). Iteration k needs row k everywhere: its owner adds
// it to a shared row object (one write, broadcast through the total
// order: the point of the sidebar — with multicast the pivot row costs a
// few messages, not one per processor) and goes on with its own copy, as
// the paper's owner does; every other rank waits for it with a guarded
// read. The owner's writes are forked (Op.Go: as a forked Orca process
// would) and joined at the end, so the owner never waits for a round
// trip through the order during its block: its rows stream to the
// others. The owner of row k+1 relaxes that row first in iteration k and
// starts its write at once, then relaxes its other rows while the row
// travels (-lookahead=false: write each pivot row when its iteration
// comes). At the end every rank writes its block to a result object,
// which rank 0 waits to be complete and checksums. With one process rank
// 0 relaxes every row itself, without objects. With ORCA_TRACE set (the
// harness) each wait for a row is a region "asp.row" of the rank's
// execution trace.
//
//	asp -n 300
//	asp -n 64 -sim -procs 4 -loss 0.05 -verify
//	asp -n 512 -iface eth0 -procs 4 -rank R
package main

import (
	"context"
	"encoding/binary"
	"flag"
	"fmt"
	"runtime/debug"
	"runtime/trace"
	"time"

	"github.com/rbcast/rbcast/internal/suite"
	"github.com/rbcast/rbcast/orca"
	"github.com/rbcast/rbcast/orca/examples/internal/harness"
)

func main() {
	harness.Main("asp", setup)
}

// rowArgs is a row and where it goes: the pivot row k, or a block of
// rows from row First on.
type rowArgs struct {
	First int32
	Cells []int32
}

var rowCodec = orca.CodecFuncs(
	func(b []byte, r rowArgs) ([]byte, error) {
		b = binary.LittleEndian.AppendUint32(b, uint32(r.First))
		return orca.Varint32s.Append(b, r.Cells)
	},
	func(b []byte) (rowArgs, error) {
		if len(b) < 4 {
			return rowArgs{}, fmt.Errorf("%d bytes, shorter than a row number", len(b))
		}
		cells, err := orca.Varint32s.Decode(b[4:])
		return rowArgs{First: int32(binary.LittleEndian.Uint32(b)), Cells: cells}, err
	})

// The row object: the pivot rows sent so far, nil until added. add
// ignores a row number out of range or a row sent before (every replica
// alike); row waits for row k and copies it into the caller's buffer
// (the caller reuses one, so a wait allocates nothing).
type pivots struct {
	Rows [][]int32
}

// rowInto asks for row K, copied into Dst (as long as a row).
type rowInto struct {
	K   int
	Dst []int32
}

var (
	rowTable = orca.NewClass[pivots]("asp.rows")
	addRow   = orca.Write(rowTable, "add", rowCodec, func(p *pivots, r rowArgs) bool {
		if r.First < 0 || int(r.First) >= len(p.Rows) || p.Rows[r.First] != nil {
			return false
		}
		p.Rows[r.First] = r.Cells
		return true
	})
	row = orca.Read(rowTable, "row", func(p *pivots, r rowInto) []int32 { return r.Dst[:copy(r.Dst, p.Rows[r.K])] }).
		When(func(p *pivots, r rowInto) bool { return r.K >= 0 && r.K < len(p.Rows) && p.Rows[r.K] != nil })
)

// The result object: the blocks of rows the ranks other than 0 add, each
// kept as it arrived (Blocks[i] is the block whose first row is i): no
// copy into one matrix at every replica. Rank 0 keeps its own block, as
// the MPI peer's root gathers in place, so it does not send it through
// the order. block ignores a block that is not whole rows, out of range,
// or over rows already in (every replica alike). whole waits until the
// blocks hold the rows asked for; checksum sums the block given (rank
// 0's, the matrix's first rows) and then the object's in row order, as
// suite.ChecksumInt32 the whole matrix.
type matrix struct {
	N      int32
	Blocks [][]int32
	Have   int32 // rows in
}

// free reports whether no block holds a row of [first, first+rows).
func (m *matrix) free(first, rows int32) bool {
	for i, b := range m.Blocks {
		if b != nil && int32(i) < first+rows && int32(i)+int32(len(b))/m.N > first {
			return false
		}
	}
	return true
}

var (
	result   = orca.NewClass[matrix]("asp.result")
	addBlock = orca.Write(result, "block", rowCodec, func(m *matrix, r rowArgs) bool {
		rows := int32(len(r.Cells)) / m.N
		if rows == 0 || r.First < 0 || r.First+rows > m.N || int32(len(r.Cells))%m.N != 0 || !m.free(r.First, rows) {
			return false
		}
		m.Blocks[r.First] = r.Cells
		m.Have += rows
		return true
	})
	whole = orca.Read(result, "whole", func(*matrix, int32) struct{} { return struct{}{} }).
		When(func(m *matrix, rows int32) bool { return m.Have >= rows })
	checksum = orca.Read(result, "checksum", func(m *matrix, first []int32) uint64 {
		var parts [][]int32
		for _, b := range m.Blocks {
			if b != nil {
				parts = append(parts, b)
			}
		}
		return suite.ChecksumInt32(first, parts...)
	})
)

func setup(fs *flag.FlagSet, o *harness.Options) (func() harness.Result, harness.Program) {
	nodes := fs.Int("n", 300, "number of nodes")
	seed := fs.Uint64("seed", 1, "seed of the weights")
	lookahead := fs.Bool("lookahead", true, "send pivot row k+1 as soon as it is relaxed in iteration k (Op.Go), while relaxing the other rows")
	problem := func() *suite.ASP {
		o.SetParams("n=%d seed=%d", *nodes, *seed)
		return suite.NewASP(*nodes, *seed)
	}
	seq := func() harness.Result {
		a := problem()
		start := time.Now()
		d := a.Sequential()
		solve := time.Since(start)
		return harness.Result{Valid: true, Checksum: suite.ChecksumInt32(d), Solve: solve}
	}
	par := func(ctx context.Context, n *orca.Node) (harness.Result, error) {
		return parallel(ctx, n, problem(), *lookahead)
	}
	return seq, par
}

// gcPercent is the collector's setting while a rank solves (parallel).
const gcPercent = 400

func parallel(ctx context.Context, node *orca.Node, a *suite.ASP, lookahead bool) (harness.Result, error) {
	n, procs, rank := a.N, node.Size(), node.Rank()
	rows, err := orca.New(node, "rows", rowTable, pivots{Rows: make([][]int32, n)})
	if err != nil {
		return harness.Result{}, err
	}
	res, err := orca.New(node, "result", result, matrix{N: int32(n), Blocks: make([][]int32, n)})
	if err != nil {
		return harness.Result{}, err
	}
	start, err := harness.NewBarrier(node, "start")
	if err != nil {
		return harness.Result{}, err
	}
	if err := start.Wait(ctx); err != nil {
		return harness.Result{}, err
	}
	// A rank's live data is its matrices (the distances, the row object's
	// rows, the result's blocks: about 4 MB at n = 512), most of it made
	// during the solve. At Go's default (GOGC=100, from a 4 MB heap) the
	// collector runs three times a solve over data that is all live, each
	// time stopping the rank's threads, which on a shared CPU waits for
	// them to be scheduled; at 400 it runs about once.
	defer debug.SetGCPercent(debug.SetGCPercent(gcPercent))
	began := time.Now()
	d := append([]int32(nil), a.Dist...) // this rank's rows are current
	lo, hi := suite.Block(n, procs, rank)
	if procs == 1 {
		for k := range n {
			a.Relax(d, 0, n, k, d[k*n:(k+1)*n])
		}
		solve := time.Since(began)
		return harness.Result{Valid: true, Checksum: suite.ChecksumInt32(d), Solve: solve}, nil
	}
	mine := func(k int) bool { return k >= lo && k < hi }
	send := func(k int) *orca.Pending[bool] {
		return addRow.Go(ctx, rows, rowArgs{First: int32(k), Cells: d[k*n : (k+1)*n]})
	}
	// The rows this rank sent: joined at the end (an error of one is
	// known then), not one by one as they go.
	var sent []*orca.Pending[bool]
	buf := make([]int32, n) // the pivot rows of the others, in turn
	if lookahead && mine(0) {
		sent = append(sent, send(0))
	}
	for k := range n {
		var pivot []int32
		if mine(k) {
			if !lookahead {
				sent = append(sent, send(k))
			}
			// Row k is this rank's, final since iteration k-1 (iteration
			// k leaves it as it is: d[k][k] is 0), and what it sent: use
			// it here, as the paper's owner does, rather than wait for
			// its write's round trip through the order.
			pivot = d[k*n : (k+1)*n]
		} else {
			var err error
			r := trace.StartRegion(ctx, "asp.row")
			pivot, err = row.Call(ctx, rows, rowInto{K: k, Dst: buf})
			r.End()
			if err != nil {
				return harness.Result{}, err
			}
		}
		if next := k + 1; lookahead && next < n && mine(next) {
			a.Relax(d, next, next+1, k, pivot)
			sent = append(sent, send(next))
			a.Relax(d, lo, next, k, pivot)
			a.Relax(d, next+1, hi, k, pivot)
			continue
		}
		a.Relax(d, lo, hi, k, pivot)
	}
	gather := trace.StartRegion(ctx, "asp.gather")
	defer gather.End()
	for _, p := range sent {
		if _, err := p.Wait(ctx); err != nil {
			return harness.Result{}, err
		}
	}
	if rank != 0 {
		if _, err := addBlock.Call(ctx, res, rowArgs{First: int32(lo), Cells: d[lo*n : hi*n]}); err != nil {
			return harness.Result{}, err
		}
		return harness.Result{Solve: time.Since(began)}, nil
	}
	// The solve ends when rank 0 holds the matrix, as the MPI peer's ends
	// when its gather returns: the checksum is not part of it there.
	if _, err := whole.Call(ctx, res, int32(n-hi)); err != nil {
		return harness.Result{}, err
	}
	solve := time.Since(began)
	sum, err := checksum.Call(ctx, res, d[lo*n:hi*n])
	if err != nil {
		return harness.Result{}, err
	}
	return harness.Result{Valid: true, Checksum: sum, Solve: solve}, nil
}
