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
// others. An owner sends its whole block at the iteration before its
// first row (-ahead block): row j relaxed with that iteration's pivot and
// then with its own rows before it, which it has, so each row goes as
// soon as it is what its iteration needs (-ahead row: row k+1 relaxed
// first in iteration k and sent while the other rows are relaxed; none:
// row k when its iteration comes). Every replica decodes the rows into
// memory the row object made before the solve. At the end every rank writes its block to a
// result object, which keeps the blocks encoded; rank 0 waits for them
// and decodes them into its own matrix, the only replica that does (as
// the MPI peer's root gathers into its own), and checksums. With one
// process rank 0 relaxes every row itself, without objects. With
// ORCA_TRACE set (the harness) each wait for a row is a region "asp.row"
// of the rank's execution trace.
//
//	asp -n 300
//	asp -n 64 -sim -procs 4 -loss 0.05 -verify
//	asp -n 512 -iface eth0 -procs 4 -rank R
package main

import (
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"math/bits"
	"runtime/debug"
	"runtime/trace"
	"slices"
	"time"

	"github.com/rbcast/rbcast/internal/suite"
	"github.com/rbcast/rbcast/orca"
	"github.com/rbcast/rbcast/orca/examples/internal/harness"
)

func main() {
	harness.Main("asp", setup)
}

// A row's or a block's message (BytesView): the number of its first row
// and the number of its cells, 4 bytes little-endian each, then the cells
// packed: a byte w, the bits of the largest cell, and each cell's w low
// bits, little-endian, in ceil(cells·w/8) bytes (a negative cell takes
// 32). The distances are below 1000 and shrink: a row that has taken a
// block's pivots is below 128, 457 bytes at n = 512, so two or three rows
// share a message of the order (Orca's batches), where as Varint32s
// (zigzag: a bit for the sign) most took one each. The write functions
// unpack a row into memory the objects own, allocated before the solve,
// or keep a block packed: a replica allocates nothing per row, and
// unpacks a block only where it is used. Packing at a row's own width is
// a few lines; no package at hand does it.
func rowMessage(first int, cells []int32) []byte {
	return appendRow(nil, first, cells)
}

// appendRow appends a row's or a block's message to b.
func appendRow(b []byte, first int, cells []int32) []byte {
	var or uint32
	for _, c := range cells {
		or |= uint32(c)
	}
	w := bits.Len32(or)
	b = slices.Grow(b, rowHeader+(len(cells)*w+7)/8)
	b = binary.LittleEndian.AppendUint32(b, uint32(first))
	b = binary.LittleEndian.AppendUint32(b, uint32(len(cells)))
	b = append(b, byte(w))
	var acc uint64 // below 8 bits pending, then a cell's w more
	have := 0
	for _, c := range cells {
		acc |= uint64(uint32(c)) << have
		for have += w; have >= 8; have -= 8 {
			b = append(b, byte(acc))
			acc >>= 8
		}
	}
	if have > 0 {
		b = append(b, byte(acc))
	}
	return b
}

// rowHeader is a message's bytes before its packed cells.
const rowHeader = 9

// packedRow is a row's or a block's message, split (splitRow).
type packedRow struct {
	first  int32
	cells  int
	width  int
	packed []byte
}

// splitRow splits a row's or a block's message, or reports that it is
// not one: too short, a width over 32, or packed bytes other than its
// cells take.
func splitRow(b []byte) (packedRow, bool) {
	if len(b) < rowHeader {
		return packedRow{}, false
	}
	r := packedRow{
		first:  int32(binary.LittleEndian.Uint32(b)),
		cells:  int(binary.LittleEndian.Uint32(b[4:])),
		width:  int(b[8]),
		packed: b[rowHeader:],
	}
	if r.width > 32 || uint64(len(r.packed)) != (uint64(r.cells)*uint64(r.width)+7)/8 {
		return packedRow{}, false
	}
	return r, true
}

// unpack appends r's cells to dst.
func (r packedRow) unpack(dst []int32) []int32 {
	out := slices.Grow(dst, r.cells)[:len(dst)+r.cells]
	w, mask := r.width, uint64(1)<<r.width-1
	var acc uint64
	have, i := 0, 0
	for j := range out[len(dst):] {
		for ; have < w; have += 8 {
			acc |= uint64(r.packed[i]) << have
			i++
		}
		out[len(dst)+j] = int32(uint32(acc & mask))
		acc >>= w
		have -= w
	}
	return out
}

// The row object: the pivot rows sent so far, nil until added, each in
// its place in Slab (n×n, made with the object). add ignores a row number
// out of range, a row sent before, or a row that does not decode to n
// cells (every replica alike); row waits for row k and copies it into the
// caller's buffer (the caller reuses one, so a wait allocates nothing).
type pivots struct {
	N    int32
	Rows [][]int32
	Slab []int32
}

func newPivots(n int) pivots {
	p := pivots{N: int32(n), Rows: make([][]int32, n), Slab: make([]int32, n*n)}
	// Written once here, before the solve: a fresh allocation this large
	// is pages the kernel maps (and zeroes) at their first write, which
	// would otherwise come as the rows are decoded into it, in the solve.
	clear(p.Slab)
	return p
}

// addRowTo is add's function.
func addRowTo(p *pivots, b []byte) bool {
	r, ok := splitRow(b)
	k, n := r.first, int(p.N)
	if !ok || k < 0 || k >= p.N || p.Rows[k] != nil || r.cells != n {
		return false
	}
	at := int(k) * n
	p.Rows[k] = r.unpack(p.Slab[at : at : at+n])
	return true
}

// rowInto asks for row K, copied into Dst (as long as a row).
type rowInto struct {
	K   int
	Dst []int32
}

var (
	rowTable = orca.NewClass[pivots]("asp.rows")
	addRow   = orca.Write(rowTable, "add", orca.BytesView, addRowTo)
	row      = orca.Read(rowTable, "row", func(p *pivots, r rowInto) []int32 { return r.Dst[:copy(r.Dst, p.Rows[r.K])] }).
			When(func(p *pivots, r rowInto) bool { return r.K >= 0 && r.K < len(p.Rows) && p.Rows[r.K] != nil })
	// allFrom reports whether rows k..n-1 are all in, without waiting.
	allFrom = orca.Read(rowTable, "allFrom", func(p *pivots, k int) bool {
		for _, r := range p.Rows[max(k, 0):] {
			if r == nil {
				return false
			}
		}
		return true
	})
)

// The result object: the blocks of rows the ranks other than 0 add, each
// kept as it arrived, encoded (Enc[i] is the block whose first row is i,
// Rows[i] its rows): no replica decodes them but rank 0, which reads them
// into its own matrix (into), as the MPI peer's root gathers into its
// own. Rank 0 keeps its own block. block ignores a block that is not
// whole rows, out of range, or over rows already in (every replica
// alike); whole waits until the blocks hold the rows asked for.
type matrix struct {
	N    int32
	Enc  [][]byte
	Rows []int32
	Have int32 // rows in
}

func newMatrix(n int) matrix {
	return matrix{N: int32(n), Enc: make([][]byte, n), Rows: make([]int32, n)}
}

// free reports whether no block holds a row of [first, first+rows).
func (m *matrix) free(first, rows int32) bool {
	for i, r := range m.Rows {
		if r > 0 && int32(i) < first+rows && int32(i)+r > first {
			return false
		}
	}
	return true
}

// addBlockTo is block's function: it keeps the block's message, packed.
func addBlockTo(m *matrix, b []byte) bool {
	r, ok := splitRow(b)
	if !ok || r.cells%int(m.N) != 0 || r.cells/int(m.N) > int(m.N) {
		return false
	}
	first, rows := r.first, int32(r.cells)/m.N
	if rows == 0 || first < 0 || first+rows > m.N || !m.free(first, rows) {
		return false
	}
	m.Enc[first] = slices.Clone(b)
	m.Rows[first] = rows
	m.Have += rows
	return true
}

// intoMatrix is into's function: it unpacks every block into its rows of
// dst (n×n), or says which block does not fit them.
func intoMatrix(m *matrix, dst []int32) error {
	n := int(m.N)
	if len(dst) != n*n {
		return fmt.Errorf("a matrix of %d cells, want %d×%d", len(dst), n, n)
	}
	for i, e := range m.Enc {
		if e == nil {
			continue
		}
		at, end := i*n, (i+int(m.Rows[i]))*n
		r, ok := splitRow(e)
		if !ok || r.cells != end-at {
			return fmt.Errorf("the block of rows %d..%d: not %d cells", i, i+int(m.Rows[i])-1, end-at)
		}
		r.unpack(dst[at:at:end])
	}
	return nil
}

var (
	result   = orca.NewClass[matrix]("asp.result")
	addBlock = orca.Write(result, "block", orca.BytesView, addBlockTo)
	whole    = orca.Read(result, "whole", func(*matrix, int32) struct{} { return struct{}{} }).
			When(func(m *matrix, rows int32) bool { return m.Have >= rows })
	into = orca.Read(result, "into", intoMatrix)
)

func setup(fs *flag.FlagSet, o *harness.Options) (func() harness.Result, harness.Program) {
	nodes := fs.Int("n", 300, "number of nodes")
	seed := fs.Uint64("seed", 1, "seed of the weights")
	o.Bound("n", nodes, 1, 16384, "an n×n distance matrix of int32, at most 1 GiB")
	fs.BoolVar(&flushBlocks, "flush", true, "flush the node's batch of writes once a block's last row is sent (orca.Node.Flush), rather than leave it for the round trip of the message before it")
	aheadFlag := fs.String("ahead", "block", "when an owner sends its rows (Op.Go): block (all of them at the iteration before its first, each relaxed with the rows before it), row (row k+1 as soon as it is relaxed in iteration k, then the other rows) or none (row k in iteration k)")
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
		mode, ok := aheadModes[*aheadFlag]
		if !ok {
			return harness.Result{}, fmt.Errorf("-ahead is %q, want block, row or none", *aheadFlag)
		}
		return parallel(ctx, n, problem(), mode)
	}
	return seq, par
}

// gcPercent is the collector's setting while a rank solves (parallel).
const gcPercent = 400

// lastBlock returns the first row of the last rank's block that has rows.
func lastBlock(n, procs int) int {
	for r := procs - 1; r > 0; r-- {
		if lo, hi := suite.Block(n, procs, r); lo < hi {
			return lo
		}
	}
	return 0
}

// streamRows runs iterations last..n-1 of a rank other than 0 (-ahead
// block), which by then has taken pivots 0..last-1 (the last block's
// owner: each of its rows j the pivots before j, sendBlock), sending
// each row of its block to the result as it becomes final. The owner of
// the last block has every pivot left: it finishes its rows in turn, row
// i with pivots i+1..n-1 (rows still as their iterations need them: a
// row is changed only after the rows before it are final). Another rank
// takes the pivots as they come, each on all its rows, until all the
// rest are in; then it copies them (tail) and finishes its rows in turn.
// Every row takes every pivot in order: the result is the sequential
// one.
func streamRows(ctx context.Context, a *suite.ASP, d []int32, rank, lo, hi, last int, rows *orca.Object[pivots], res *orca.Object[matrix], sent *[]*orca.Pending[bool], buf []int32, owner bool) error {
	n := a.N
	if observe != nil {
		observe(rank, "pivot", last)
	}
	put := func(i int) {
		if observe != nil {
			observe(rank, "put", i)
		}
		*sent = append(*sent, addBlock.Go(ctx, res, rowMessage(i, d[i*n:(i+1)*n])))
	}
	if owner {
		for i := lo; i < hi; i++ {
			for m := i + 1; m < n; m++ {
				a.Relax(d, i, i+1, m, d[m*n:(m+1)*n])
			}
			put(i)
		}
		return nil
	}
	k := last
	for ; k < n; k++ {
		if in, err := allFrom.Call(ctx, rows, k); err != nil {
			return err
		} else if in {
			break
		}
		r := trace.StartRegion(ctx, "asp.row")
		pivot, err := row.Call(ctx, rows, rowInto{K: k, Dst: buf})
		r.End()
		if err != nil {
			return err
		}
		a.Relax(d, lo, hi, k, pivot)
	}
	tail := make([]int32, (n-k)*n)
	for m := k; m < n; m++ {
		if _, err := row.Call(ctx, rows, rowInto{K: m, Dst: tail[(m-k)*n : (m-k+1)*n]}); err != nil {
			return err
		}
	}
	for i := lo; i < hi; i++ {
		for m := k; m < n; m++ {
			a.Relax(d, i, i+1, m, tail[(m-k)*n:(m-k+1)*n])
		}
		put(i)
	}
	return nil
}

// ahead is when an owner sends its rows (-ahead).
type ahead int

const (
	aheadNone ahead = iota
	aheadRow
	aheadBlock
)

var aheadModes = map[string]ahead{"none": aheadNone, "row": aheadRow, "block": aheadBlock}

// flushBlocks (-flush): a rank flushes its node's batch (orca.Node.Flush)
// once it has sent the last row of its block to the row object, and the
// last of its rows to the result, so those rows do not wait in the batch
// for the round trip of the message before them. On by default: idle, it
// saved about a tenth of the solve at 4 processes (docs/orca.md,
// "Programs"); -flush=false leaves the rows to the batch's round trip.
var flushBlocks bool

// observe, when set (tests), is told where a rank's solve begins and where
// rank 0's ends ("solve", "solved"), of each row a rank sends and each
// pivot it relaxes its rows with, in the rank's order.
var observe func(rank int, what string, k int)

func parallel(ctx context.Context, node *orca.Node, a *suite.ASP, mode ahead) (harness.Result, error) {
	n, procs, rank := a.N, node.Size(), node.Rank()
	rows, err := orca.New(node, "rows", rowTable, newPivots(n))
	if err != nil {
		return harness.Result{}, err
	}
	res, err := orca.New(node, "result", result, newMatrix(n))
	if err != nil {
		return harness.Result{}, err
	}
	// This rank's copy of the distances, made before the start barrier
	// as the MPI peer's matrix is: a fresh 1 MB (n = 512) whose pages the
	// kernel maps and zeroes as it is written, not part of the solve.
	d := append([]int32(nil), a.Dist...)
	start, err := harness.NewBarrier(node, "start")
	if err != nil {
		return harness.Result{}, err
	}
	if err := start.Wait(ctx); err != nil {
		return harness.Result{}, err
	}
	// A rank's live data is its matrices (the distances, the row object's
	// slab: about 3 MB at n = 512), made before the solve; during it a
	// rank allocates its rows' messages and the blocks its replica keeps.
	// Each collection stops the rank's threads, which on a shared CPU
	// waits for them to be scheduled: at 400 % the collector, which ran
	// three times a solve at Go's default when every replica decoded rows
	// and blocks into new slices, no longer runs during one (traces).
	defer debug.SetGCPercent(debug.SetGCPercent(gcPercent))
	if observe != nil {
		observe(rank, "solve", 0)
	}
	began := time.Now()
	// The solve and, inside it, the gather are regions of the rank's
	// execution trace (ORCA_TRACE): endRegions ends the open ones, once.
	var regions []*trace.Region
	endRegions := func() {
		for i := len(regions) - 1; i >= 0; i-- {
			regions[i].End()
		}
		regions = nil
	}
	defer func() { endRegions() }()
	regions = append(regions, trace.StartRegion(ctx, "asp.solve"))
	lo, hi := suite.Block(n, procs, rank)
	if procs == 1 {
		for k := range n {
			a.Relax(d, 0, n, k, d[k*n:(k+1)*n])
		}
		solve := time.Since(began)
		if observe != nil {
			observe(rank, "solved", 0)
		}
		return harness.Result{Valid: true, Checksum: suite.ChecksumInt32(d), Solve: solve}, nil
	}
	mine := func(k int) bool { return k >= lo && k < hi }
	send := func(k int) *orca.Pending[bool] {
		if observe != nil {
			observe(rank, "send", k)
		}
		return addRow.Go(ctx, rows, rowMessage(k, d[k*n:(k+1)*n]))
	}
	// flush sends the rows still in the node's batch (Orca's batches:
	// they would wait for the round trip of the message before them),
	// once a block's last row is out: the others wait for them.
	var flushErr error
	flush := func() {
		if flushBlocks && flushErr == nil {
			flushErr = node.Flush()
		}
	}
	// The rows this rank sent: joined at the end (an error of one is
	// known then), not one by one as they go.
	var sent []*orca.Pending[bool]
	buf := make([]int32, n) // the pivot rows of the others, in turn
	// sendBlock sends this rank's rows at iteration lo-1 (ahead=block),
	// each as soon as it is what its own iteration needs: row j relaxed
	// with pivot k = lo-1 (none when lo is 0) and then with this rank's
	// rows lo..j-1, already sent. Each row still takes the pivots in
	// order, so the rows are the sequential run's; the other ranks have
	// the block's rows long before they need them, and an owner kept off
	// the CPU by another rank no longer holds them up row by row.
	sendBlock := func(k int, pivot []int32) {
		for j := lo; j < hi; j++ {
			if pivot != nil {
				a.Relax(d, j, j+1, k, pivot)
			}
			for m := lo; m < j; m++ {
				a.Relax(d, j, j+1, m, d[m*n:(m+1)*n])
			}
			sent = append(sent, send(j))
		}
		flush()
	}
	switch {
	case mode == aheadBlock && lo == 0:
		sendBlock(-1, nil)
	case mode == aheadRow && mine(0):
		sent = append(sent, send(0))
	}
	// With -ahead block the ranks but 0 send their rows to the result as
	// each is final, during the last block's iterations (streamRows),
	// rather than their blocks after them: the gather then overlaps the
	// end of the solve.
	last := lastBlock(n, procs)
	stream := mode == aheadBlock && rank != 0
	for k := range n {
		if stream && k == last {
			if err := streamRows(ctx, a, d, rank, lo, hi, last, rows, res, &sent, buf, mine(last)); err != nil {
				return harness.Result{}, err
			}
			flush()
			break
		}
		var pivot []int32
		if mine(k) {
			if mode == aheadNone {
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
		if observe != nil {
			observe(rank, "pivot", k)
		}
		next := k + 1
		switch {
		case mode == aheadBlock && next == lo && lo < hi:
			sendBlock(k, pivot) // every row of the block takes pivot k there
		case mode == aheadBlock && mine(k):
			a.Relax(d, lo, next, k, pivot) // the rows after k took it in sendBlock
		case mode == aheadRow && next < n && mine(next):
			a.Relax(d, next, next+1, k, pivot)
			sent = append(sent, send(next))
			a.Relax(d, lo, next, k, pivot)
			a.Relax(d, next+1, hi, k, pivot)
		default:
			a.Relax(d, lo, hi, k, pivot)
		}
	}
	regions = append(regions, trace.StartRegion(ctx, "asp.gather"))
	if flushErr != nil {
		return harness.Result{}, flushErr
	}
	for _, p := range sent {
		if _, err := p.Wait(ctx); err != nil {
			return harness.Result{}, err
		}
	}
	if rank != 0 {
		if !stream && lo < hi {
			if _, err := addBlock.Call(ctx, res, rowMessage(lo, d[lo*n:hi*n])); err != nil {
				return harness.Result{}, err
			}
		}
		return harness.Result{Solve: time.Since(began)}, nil
	}
	// The solve ends when rank 0 holds the matrix, as the MPI peer's ends
	// when its gather returns: the checksum is not part of it there.
	if _, err := whole.Call(ctx, res, int32(n-hi)); err != nil {
		return harness.Result{}, err
	}
	if bad, err := into.Call(ctx, res, d); err != nil || bad != nil {
		return harness.Result{}, errors.Join(err, bad)
	}
	solve := time.Since(began)
	endRegions()
	if observe != nil {
		observe(rank, "solved", 0)
	}
	return harness.Result{Valid: true, Checksum: suite.ChecksumInt32(d), Solve: solve}, nil
}
