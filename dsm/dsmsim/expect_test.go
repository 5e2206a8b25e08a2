package dsmsim_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/rbcast/rbcast/dsm"
	"github.com/rbcast/rbcast/dsm/dsmsim"
	"github.com/rbcast/rbcast/testnet"
)

// lockstep is a jacobi-shaped program: every round each rank writes its
// row of a shared segment, computes for compute, and meets the others at
// a barrier; after it, it checks its neighbour's row of that round (or
// of the next, which the neighbour may be writing already).
func lockstep(rounds, row int, compute time.Duration) func(n *dsm.Node) error {
	return func(n *dsm.Node) error {
		ctx := context.Background()
		var s *dsm.Segment
		var err error
		if n.Rank() == 0 {
			s, err = n.CreateSegment(1, n.Size()*row, 8)
		} else {
			s, err = n.JoinSegment(ctx, 1, n.Size()*row, 8)
		}
		if err != nil {
			return err
		}
		if err := n.Barrier(ctx, 0); err != nil {
			return err
		}
		next := (n.Rank() + 1) % n.Size()
		for r := 1; r <= rounds; r++ {
			for i := range row {
				if err := s.WriteFloat64(n.Rank()*row+i, float64(r*1000+n.Rank()*row+i)); err != nil {
					return err
				}
			}
			if err := dsmsim.Compute(n, compute); err != nil {
				return err
			}
			if err := n.Barrier(ctx, r); err != nil {
				return err
			}
			// The neighbour may be past the barrier and writing the next
			// round's row already.
			if got, want := s.Float64s()[next*row+row-1], float64(r*1000+next*row+row-1); got != want && got != want+1000 {
				return fmt.Errorf("round %d: rank %d's last value is %v, want %v (or the next round's)", r, next, got, want)
			}
		}
		return nil
	}
}

// TestExpectGain measures, in virtual time, what Expect in dsm.Barrier
// gains a lock-step program under loss (docs/pcode.md, "What Expect
// gains"): 4 and 8 members, 100 rounds of a 512-byte row each, a
// computation of 0, 0.1 and 2 ms per round, 0 and 1 % loss, 4 seeds.
// Lossless the hint changes nothing (the same virtual time to the
// nanosecond); at 1 % it must never lose. The report sets the gain
// beside its ceiling, the time loss adds without the hint: a lost last
// frame of a round (the barrier's) costs the round its sender's next
// frame (after its computation) without the hint, a nack timeout with it.
func TestExpectGain(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	const rounds, row, seeds = 100, 64, 4
	var report strings.Builder
	fmt.Fprintf(&report, "\n| members | compute per round | lossless | 1 %%, without Expect | 1 %%, with Expect | gain | ceiling (loss's cost) |\n|---|---|---|---|---|---|---|\n")
	for _, members := range []int{4, 8} {
		for _, compute := range []time.Duration{0, 100 * time.Microsecond, 2 * time.Millisecond} {
			var elapsed [2][2]time.Duration // [lossy][noExpect]
			for seed := uint64(1); seed <= seeds; seed++ {
				for l, loss := range []float64{0, 0.01} {
					for k, noExpect := range []bool{false, true} {
						res, err := dsmsim.Run(dsmsim.Config{Members: members, Seed: seed, In: testnet.Impairment{Loss: loss},
							Node: dsm.Config{NoExpect: noExpect}}, lockstep(rounds, row, compute))
						if err != nil {
							t.Fatalf("%d members, compute %v, loss %g, seed %d, NoExpect %v: %v", members, compute, loss, seed, noExpect, err)
						}
						elapsed[l][k] += res.Elapsed
					}
				}
			}
			lossless, without, with := elapsed[0][1], elapsed[1][1], elapsed[1][0]
			if elapsed[0][0] != lossless {
				t.Errorf("%d members, lossless, compute %v: %v with Expect, %v without; the hint must change nothing", members, compute, elapsed[0][0]/seeds, lossless/seeds)
			}
			if with > without {
				t.Errorf("%d members, 1 %% loss, compute %v: %v with Expect, slower than %v without", members, compute, with/seeds, without/seeds)
			}
			fmt.Fprintf(&report, "| %d | %v | %v | %v | %v | %+.1f %% | %.1f %% |\n", members, compute, lossless/seeds, without/seeds, with/seeds,
				100*(1-float64(with)/float64(without)), 100*(1-float64(lossless)/float64(without)))
		}
	}
	t.Log(report.String())
}

// Compute takes exactly its virtual time, and refuses a node that is not
// one of a run under way.
func TestCompute(t *testing.T) {
	res, err := dsmsim.Run(dsmsim.Config{Members: 2, Seed: 1}, func(n *dsm.Node) error {
		return dsmsim.Compute(n, time.Duration(n.Rank()+1)*3*time.Millisecond)
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Elapsed < 6*time.Millisecond || res.Elapsed > 7*time.Millisecond {
		t.Errorf("two members computing 3 and 6 ms took %v of virtual time, want 6 ms and the exit", res.Elapsed)
	}
	var kept *dsm.Node
	dsmsim.Run(dsmsim.Config{Members: 1, Seed: 1}, func(n *dsm.Node) error { kept = n; return nil })
	if err := dsmsim.Compute(kept, time.Millisecond); err == nil || !strings.Contains(err.Error(), "not one of a run under way") {
		t.Errorf("Compute after the run: %v, want an error saying the node is not in a run", err)
	}
}
