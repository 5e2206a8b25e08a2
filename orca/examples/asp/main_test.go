package main

import (
	"context"
	"fmt"
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
// count (rank 0 holds the result).
func TestVerifyOnLossySimulator(t *testing.T) {
	for procs := 1; procs <= 4; procs++ {
		args := []string{"-n", "40", "-sim", "-procs", fmt.Sprint(procs), "-loss", "0.05", "-simseed", fmt.Sprint(procs), "-verify"}
		ok, out, err := harness.Verified("asp", setup, args...)
		if err != nil || ok != 1 {
			t.Fatalf("%v: %d lines verify=ok, error %v; output:\n%s", args, ok, err, out)
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
	for _, lookahead := range []bool{true, false} {
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
				writes[r][ev.Args.(rowArgs).First]++
			}
		}
		sums := make([]uint64, procs)
		_, err := orcasim.Run(cfg, func(node *orca.Node) error {
			r, err := parallel(context.Background(), node, suite.NewASP(n, 1), lookahead)
			sums[node.Rank()] = r.Checksum
			return err
		})
		if err != nil {
			t.Fatalf("lookahead %v: %v", lookahead, err)
		}
		if sums[0] != want {
			t.Errorf("lookahead %v: rank 0's checksum %016x, want the sequential %016x", lookahead, sums[0], want)
		}
		for rank := range procs {
			lo, hi := suite.Block(n, procs, rank)
			for k := range n {
				mine := k >= lo && k < hi
				if got, want := reads[rank][k], b2i(!mine); got != want {
					t.Errorf("lookahead %v: rank %d (rows %d..%d) read row %d %d times, want %d", lookahead, rank, lo, hi-1, k, got, want)
				}
				if got, want := writes[rank][int32(k)], b2i(mine); got != want {
					t.Errorf("lookahead %v: rank %d (rows %d..%d) wrote row %d %d times, want %d", lookahead, rank, lo, hi-1, k, got, want)
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

// The result object keeps each block as it came: a block over rows
// already in, out of range, or not whole rows is refused at every replica
// alike; whole waits for the rows asked for, and the checksum of the
// blocks is the matrix's.
func TestResultBlocks(t *testing.T) {
	const n = 4
	m := make([]int32, n*n)
	for i := range m {
		m[i] = int32(i * 7)
	}
	_, err := orcasim.Run(orcasim.Config{Members: 2, Seed: 1, Stay: true}, func(node *orca.Node) error {
		ctx := context.Background()
		res, err := orca.New(node, "result", result, matrix{N: n, Blocks: make([][]int32, n)})
		if err != nil {
			return err
		}
		// Rank 0's own first rows, given to checksum, and the others'
		// blocks in the object after them.
		rest, err := orca.New(node, "rest", result, matrix{N: n, Blocks: make([][]int32, n)})
		if err != nil {
			return err
		}
		if node.Rank() != 0 {
			if _, err := addBlock.Call(ctx, rest, rowArgs{First: 1, Cells: m[n:]}); err != nil {
				return err
			}
			_, err := whole.Call(ctx, res, n)
			return err
		}
		if _, err := whole.Call(ctx, rest, n-1); err != nil {
			return err
		}
		if sum, err := checksum.Call(ctx, rest, m[:n]); err != nil || sum != suite.ChecksumInt32(m) {
			return fmt.Errorf("checksum of row 0 given and rows 1..3 in the object %016x (error %v), of the matrix %016x", sum, err, suite.ChecksumInt32(m))
		}
		for _, c := range []struct {
			first int32
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
			got, err := addBlock.Call(ctx, res, rowArgs{First: c.first, Cells: c.cells})
			if err != nil {
				return err
			}
			if got != c.want {
				return fmt.Errorf("block of %d cells from row %d: %v, want %v", len(c.cells), c.first, got, c.want)
			}
		}
		if _, err := whole.Call(ctx, res, n); err != nil {
			return err
		}
		want := suite.ChecksumInt32(m)
		if sum, err := checksum.Call(ctx, res, nil); err != nil || sum != want {
			return fmt.Errorf("checksum of the blocks %016x (error %v), of the matrix %016x", sum, err, want)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
