package main

import (
	"context"
	"fmt"
	"math"
	"runtime/metrics"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/rbcast/rbcast/internal/suite"
	"github.com/rbcast/rbcast/orca"
	"github.com/rbcast/rbcast/orca/examples/internal/harness"
	"github.com/rbcast/rbcast/orca/orcasim"
	"github.com/rbcast/rbcast/testnet"
)

// The parallel run on the simulated segment, with 5% of frames lost at
// every receiver, gives exactly the sequential result, for every process
// count (rank 0 holds the result), with -flush too.
func TestVerifyOnLossySimulator(t *testing.T) {
	defer func() { flushBlocks = true }()
	for _, flush := range []string{"-flush=false", "-flush"} {
		for procs := 1; procs <= 4; procs++ {
			args := []string{"-n", "40", "-sim", "-procs", fmt.Sprint(procs), "-loss", "0.05", "-simseed", fmt.Sprint(procs), "-verify", flush}
			ok, out, err := harness.Verified("asp", setup, args...)
			if err != nil || ok != 1 {
				t.Fatalf("%v: %d lines verify=ok, error %v; output:\n%s", args, ok, err, out)
			}
		}
	}
}

// A rank reads through the row object only the rows it does not own: the
// owner goes on with its own copy of each of its rows (as the paper's
// owner does) rather than wait for its write's round trip through the
// order, and the result is still the sequential one. Each rank writes
// each of its rows once.
func TestOwnerDoesNotWaitForItsRows(t *testing.T) {
	const n, procs = 40, 4
	want := suite.ChecksumInt32(suite.NewASP(n, 1).Sequential())
	for name, lookahead := range aheadModes {
		var mu sync.Mutex
		reads := make([]map[int]int, procs)    // by rank: row read -> times
		writes := make([]map[int32]int, procs) // by rank: row written -> times
		cfg := orcasim.Config{Members: procs, Seed: 3, In: testnet.Impairment{Loss: 0.05}, Stay: true}
		cfg.Node.Trace = func(ev orca.TraceEvent) {
			if ev.Kind != orca.TraceCall || ev.Object != "rows" {
				return
			}
			mu.Lock()
			defer mu.Unlock()
			r := int(ev.Member) - 1 // member ids 1..procs follow ranks
			if reads[r] == nil {
				reads[r], writes[r] = map[int]int{}, map[int32]int{}
			}
			switch ev.Op {
			case "row":
				reads[r][ev.Args.(rowInto).K]++
			case "add":
				m, _ := splitRow(ev.Args.([]byte))
				writes[r][m.first]++
			}
		}
		sums := make([]uint64, procs)
		_, err := orcasim.Run(cfg, func(node *orca.Node) error {
			r, err := parallel(context.Background(), node, suite.NewASP(n, 1), lookahead)
			sums[node.Rank()] = r.Checksum
			return err
		})
		if err != nil {
			t.Fatalf("ahead %s: %v", name, err)
		}
		if sums[0] != want {
			t.Errorf("ahead %s: rank 0's checksum %016x, want the sequential %016x", name, sums[0], want)
		}
		for rank := range procs {
			lo, hi := suite.Block(n, procs, rank)
			for k := range n {
				mine := k >= lo && k < hi
				if got, want := reads[rank][k], b2i(!mine); got != want {
					t.Errorf("ahead %s: rank %d (rows %d..%d) read row %d %d times, want %d", name, rank, lo, hi-1, k, got, want)
				}
				if got, want := writes[rank][int32(k)], b2i(mine); got != want {
					t.Errorf("ahead %s: rank %d (rows %d..%d) wrote row %d %d times, want %d", name, rank, lo, hi-1, k, got, want)
				}
			}
		}
	}
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// The result object keeps each block as it came, encoded: a block over
// rows already in, out of range, or not whole rows is refused at every
// replica alike; whole waits for the rows asked for, and into decodes the
// blocks into the rows of rank 0's matrix, leaving its own first rows
// alone. A block with the right number of cells that does not decode is
// taken (the replicas count its cells, they do not decode it) and into
// names it.
func TestResultBlocks(t *testing.T) {
	const n = 4
	m := make([]int32, n*n)
	for i := range m {
		m[i] = int32(i * 7)
	}
	_, err := orcasim.Run(orcasim.Config{Members: 2, Seed: 1, Stay: true}, func(node *orca.Node) error {
		ctx := context.Background()
		res, err := orca.New(node, "result", result, newMatrix(n))
		if err != nil {
			return err
		}
		// Rank 0's own first row in its matrix, the other's rows 1..3
		// in the object.
		rest, err := orca.New(node, "rest", result, newMatrix(n))
		if err != nil {
			return err
		}
		bad, err := orca.New(node, "bad", result, newMatrix(n))
		if err != nil {
			return err
		}
		if node.Rank() != 0 {
			if _, err := addBlock.Call(ctx, rest, rowMessage(1, m[n:])); err != nil {
				return err
			}
			_, err := whole.Call(ctx, res, n)
			return err
		}
		if _, err := whole.Call(ctx, rest, n-1); err != nil {
			return err
		}
		got := append(slices.Clone(m[:n]), make([]int32, n*n-n)...)
		if e, err := into.Call(ctx, rest, got); err != nil || e != nil || !slices.Equal(got, m) {
			return fmt.Errorf("row 0 kept and rows 1..3 read into the matrix: %v (%v, %v), want %v", got, e, err, m)
		}
		for _, c := range []struct {
			first int
			cells []int32
			want  bool
		}{
			{2, m[2*n:], true},
			{2, m[2*n:], false},            // again
			{1, m[n : 3*n], false},         // over row 2
			{3, make([]int32, 2*n), false}, // past the end
			{0, m[:n-1], false},            // not a whole row
			{0, nil, false},                // empty
			{-1, m[:n], false},             // before the start
			{0, m[:2*n], true},
		} {
			got, err := addBlock.Call(ctx, res, rowMessage(c.first, c.cells))
			if err != nil {
				return err
			}
			if got != c.want {
				return fmt.Errorf("block of %d cells from row %d: %v, want %v", len(c.cells), c.first, got, c.want)
			}
		}
		if ok, err := addBlock.Call(ctx, res, []byte{1, 2}); err != nil || ok {
			return fmt.Errorf("a 2-byte block: %v, %v; want refused", ok, err)
		}
		if _, err := whole.Call(ctx, res, n); err != nil {
			return err
		}
		got = make([]int32, n*n)
		if e, err := into.Call(ctx, res, got); err != nil || e != nil || !slices.Equal(got, m) {
			return fmt.Errorf("the blocks read into a matrix: %v (%v, %v), want %v", got, e, err, m)
		}
		if e, _ := into.Call(ctx, res, got[:n]); e == nil || !strings.Contains(e.Error(), "a matrix of 4 cells, want 4×4") {
			return fmt.Errorf("into a short matrix: %v", e)
		}
		// Row 1 of 4 cells a byte short of what they take packed, and
		// of a width over 32: refused, as every replica checks.
		short := rowMessage(1, m[n:2*n])
		wide := slices.Clone(short)
		wide[8] = 33
		for name, msg := range map[string][]byte{"short": short[:len(short)-1], "wider than 32 bits": wide} {
			if ok, err := addBlock.Call(ctx, bad, msg); err != nil || ok {
				return fmt.Errorf("a %s block: %v, %v; want refused", name, ok, err)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// A kept block whose cells are not its rows' (no replica keeps one:
	// addBlockTo checks) is named by into.
	m2 := newMatrix(n)
	m2.Enc[1], m2.Rows[1] = rowMessage(1, m[:n-1]), 1
	want := "the block of rows 1..1: not 4 cells"
	if err := intoMatrix(&m2, make([]int32, n*n)); err == nil || err.Error() != want {
		t.Errorf("into with a block of 3 cells for a row of 4: %v, want %q", err, want)
	}
}

// A pivot row is decoded into its place in the row object's slab, made
// with the object: adding one allocates nothing at a replica. A row out of
// range, sent before, of another length or that does not decode is
// ignored, and its place stays empty.
func TestRowsIntoSlab(t *testing.T) {
	const n = 8
	p := newPivots(n)
	cells := func(k int) []int32 {
		r := make([]int32, n)
		for j := range r {
			r[j] = int32(100*k + 37*j)
		}
		return r
	}
	msgs := make([][]byte, n)
	for k := range msgs {
		msgs[k] = rowMessage(k, cells(k))
	}
	k := 0
	allocs := testing.AllocsPerRun(n-1, func() {
		if !addRowTo(&p, msgs[k]) {
			t.Fatalf("row %d refused", k)
		}
		k++
	})
	if allocs != 0 {
		t.Errorf("%v allocations a row, want 0", allocs)
	}
	for k := range n {
		if !slices.Equal(p.Rows[k], cells(k)) || &p.Rows[k][0] != &p.Slab[k*n] {
			t.Fatalf("row %d: %v, want %v in its place of the slab", k, p.Rows[k], cells(k))
		}
	}
	q := newPivots(n)
	for _, c := range []struct {
		name string
		msg  []byte
	}{
		{"short", rowMessage(1, cells(1)[:n-1])},
		{"long", rowMessage(1, append(cells(1), 5))},
		{"past the end", rowMessage(n, cells(1))},
		{"before the start", rowMessage(-1, cells(1))},
		{"no row number", []byte{1, 0}},
		{"a byte short", msgs[1][:len(msgs[1])-1]},
		{"a byte long", append(rowMessage(1, cells(1)), 0)},
		{"wider than 32 bits", append(rowMessage(1, nil)[:8], 33)},
	} {
		if addRowTo(&q, c.msg) || q.Rows[1] != nil {
			t.Errorf("%s row: taken", c.name)
		}
	}
	if !addRowTo(&q, msgs[1]) || addRowTo(&q, rowMessage(1, cells(2))) || !slices.Equal(q.Rows[1], cells(1)) {
		t.Errorf("row 1 after a second add: %v, want the first, %v", q.Rows[1], cells(1))
	}
}

// With -ahead block an owner sends every row of its block before it
// relaxes its rows with the first of them (at the iteration before it),
// where -ahead row sends row k+1 in iteration k; with none, in iteration
// k; and the ranks other than 0 put their rows to the result one by one
// as they become final. The result is the sequential one in each mode
// (above).
func TestBlockSentAhead(t *testing.T) {
	const n, procs = 24, 3
	for name, mode := range aheadModes {
		var mu sync.Mutex
		events := make([][]string, procs)
		observe = func(rank int, what string, k int) {
			mu.Lock()
			defer mu.Unlock()
			events[rank] = append(events[rank], fmt.Sprintf("%s %d", what, k))
		}
		_, err := orcasim.Run(orcasim.Config{Members: procs, Seed: 1, Stay: true}, func(node *orca.Node) error {
			_, err := parallel(context.Background(), node, suite.NewASP(n, 1), mode)
			return err
		})
		observe = nil
		if err != nil {
			t.Fatalf("ahead %s: %v", name, err)
		}
		for rank := range procs {
			lo, hi := suite.Block(n, procs, rank)
			// Where each event falls in the rank's sequence.
			at := map[string]int{}
			var puts []string
			for i, e := range events[rank] {
				at[e] = i
				if strings.HasPrefix(e, "put ") {
					puts = append(puts, e)
				}
			}
			// With block the ranks but 0 put their rows to the result
			// one by one, in order, during the last block's
			// iterations; otherwise the block goes after them.
			var want []string
			if mode == aheadBlock && rank != 0 {
				for k := lo; k < hi; k++ {
					want = append(want, fmt.Sprintf("put %d", k))
				}
			}
			if !slices.Equal(puts, want) {
				t.Errorf("ahead %s: rank %d put %v, want %v", name, rank, puts, want)
			}
			for k := lo; k < hi; k++ {
				send, ok := at[fmt.Sprintf("send %d", k)]
				if !ok {
					t.Fatalf("ahead %s: rank %d never sent row %d", name, rank, k)
				}
				// The pivot the row must be sent before: with block
				// the block's first, lo (or right away for rank 0);
				// with row, k itself; with none, the one after it.
				before := map[ahead]int{aheadBlock: lo, aheadRow: k, aheadNone: k + 1}[mode]
				pivot, ok := at[fmt.Sprintf("pivot %d", before)]
				if before == n {
					pivot, ok = len(events[rank]), true
				}
				if !ok || send > pivot {
					t.Errorf("ahead %s: rank %d (rows %d..%d) sent row %d at step %d, after pivot %d (step %d)", name, rank, lo, hi-1, k, send, before, pivot)
				}
				if mode != aheadBlock || k == lo {
					continue
				}
				// Not earlier than needed either: after the pivot
				// before its block.
				if lo > 0 && send < at[fmt.Sprintf("pivot %d", lo-1)] {
					t.Errorf("ahead block: rank %d sent row %d before it had pivot %d", rank, k, lo-1)
				}
			}
		}
	}
}

// A rank's solve allocates no matrix: its copy of the distances is made
// before the start barrier (as the MPI peer's is), so the fresh memory's
// first writes, the kernel mapping and zeroing its pages, are not part
// of the solve. One process, where the solve is the relaxation alone:
// what the heap gives out between "solve" and "solved" is far below the
// matrix's n×n cells.
func TestSolveAllocatesNoMatrix(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates on its own account (make test runs this without it)")
	}
	const n = 256
	sample := []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}}
	var began, solved uint64
	observe = func(rank int, what string, k int) {
		metrics.Read(sample)
		switch what {
		case "solve":
			began = sample[0].Value.Uint64()
		case "solved":
			solved = sample[0].Value.Uint64()
		}
	}
	defer func() { observe = nil }()
	var res harness.Result
	_, err := orcasim.Run(orcasim.Config{Members: 1, Seed: 1, Stay: true}, func(node *orca.Node) error {
		var err error
		res, err = parallel(context.Background(), node, suite.NewASP(n, 1), aheadBlock)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := suite.ChecksumInt32(suite.NewASP(n, 1).Sequential()); res.Checksum != want {
		t.Fatalf("checksum %016x, want the sequential %016x", res.Checksum, want)
	}
	if began == 0 || solved < began {
		t.Fatalf("observed solve at %d, solved at %d bytes allocated", began, solved)
	}
	// Below a matrix, not a quarter of one: the runtime's own
	// allocations during the solve (timers, the simulator's goroutines,
	// a GC cycle) reached 90–100 KB in one run of twenty.
	if got, matrix := solved-began, uint64(n*n*4); got >= matrix {
		t.Errorf("the solve allocated %d bytes; a matrix is %d", got, matrix)
	}
}

// A message packs its cells at the width of the largest and unpacks to
// them, for every width from 0 (all zero) to 32 (a negative cell) and
// lengths that leave a partial last byte.
func TestPackedRows(t *testing.T) {
	for _, cells := range [][]int32{
		nil,
		{0, 0, 0},
		{1},
		{1, 0, 1, 1, 0, 1, 1},
		{999, 3, 0, 512, 7},
		{1 << 20, 5, 1<<20 - 1},
		{math.MaxInt32, 0, 1},
		{-1, 5, math.MinInt32, 0},
	} {
		msg := rowMessage(7, cells)
		r, ok := splitRow(msg)
		if !ok || r.first != 7 || r.cells != len(cells) {
			t.Fatalf("%v: split as %+v, %v", cells, r, ok)
		}
		if got := r.unpack([]int32{42}); !slices.Equal(got, append([]int32{42}, cells...)) {
			t.Errorf("%v (width %d, %d bytes): unpacked after 42 as %v", cells, r.width, len(msg), got)
		}
	}
}

// The pivot rows of a 512-node problem as they are sent (row k with
// pivots 0..k-1 taken) take at most 7 bits a cell once a block's pivots
// are in (k ≥ n/4), three to a message of the order (Orca's batches); as
// Varint32s they took at least a byte a cell, and 1.4 times these bytes
// in all (599 bytes a row against 431).
func TestRowsPackSmall(t *testing.T) {
	const n = 512
	a := suite.NewASP(n, 1)
	d := slices.Clone(a.Dist)
	packed, varints := 0, 0
	for k := range n {
		row := d[k*n : (k+1)*n]
		msg := rowMessage(k, row)
		packed += len(msg)
		v, _ := orca.Varint32s.Append(nil, row)
		varints += 4 + len(v)
		if r, _ := splitRow(msg); k >= n/4 && r.width > 7 {
			t.Errorf("row %d: %d bits a cell (%d bytes), want at most 7", k, r.width, len(msg))
		}
		a.Relax(d, 0, n, k, row)
	}
	if ratio := float64(varints) / float64(packed); ratio < 1.3 {
		t.Errorf("rows packed in %d bytes, as Varint32s %d: %.2f times, want at least 1.3", packed, varints, ratio)
	}
}
