//go:build dsmmutate

package dsm_test

import (
	"context"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rbcast/rbcast/dsm"
	"github.com/rbcast/rbcast/dsm/core"
	"github.com/rbcast/rbcast/dsm/dsmsim"
)

// The mutation tests (go test -tags dsmmutate ./dsm -run Mutation):
// the channel protocol run without one of its parts must fail the axiom
// check that the unmutated protocol passes, on the same program and
// seeds. Without the wait condition (WC, def. 7.3) a peer's writes after
// a barrier are applied before this member crosses it: axiom 2.7; without
// the markers in the barrier condition (BC, def. 7.2) this member crosses
// on the barrier messages of the global channel while a peer's writes
// before the barrier are still on their way on a segment channel: axiom
// 2.6. Each fails within mutationSeeds seeds (the checker's first failure
// must name the axiom), and no seed of the unmutated run fails.

// mutationSeeds bounds the seeds a mutation has to fail within.
const mutationSeeds = 16

// chanWrites is chanProgram without its reads: rounds of writes to the
// member's lanes of each of its segments, each round ending at a
// barrier. A mutated protocol would fail chanProgram's reads before the
// axiom checker saw the history; this program leaves the judging to it.
func chanWrites(segs map[uint32][]int, rounds int) func(*dsm.Node) error {
	return func(n *dsm.Node) error {
		ctx := context.Background()
		mine, err := joinChanSegs(n, segs)
		if err != nil {
			return err
		}
		keys := slices.Sorted(maps.Keys(mine))
		for round := range rounds {
			for _, key := range keys {
				for loc := n.Rank(); loc < chanLocs; loc += n.Size() {
					if err := mine[key].Write(loc, chanValue(n.Rank(), round, loc)); err != nil {
						return err
					}
				}
			}
			if err := n.Barrier(ctx, 100+round); err != nil {
				return err
			}
		}
		return nil
	}
}

func TestMutationChannelAxioms(t *testing.T) {
	for _, m := range []struct {
		name            string
		noWC, noMarkers bool
		want            string // the axiom the checker must name
	}{
		{"without WC", true, false, "(axiom 2.7)"},
		{"without markers", false, true, "(axiom 2.6)"},
	} {
		t.Run(m.name, func(t *testing.T) {
			found := -1
			for seed := range uint64(mutationSeeds) {
				for _, mutated := range []bool{false, true} {
					cfg := dsm.Config{Channels: true}
					if mutated {
						cfg = dsm.WithCoreMutation(cfg, func(c *core.Config) { core.Mutate(c, m.noWC, m.noMarkers) })
					}
					h := newHistory(4)
					_, err := dsmsim.Run(dsmsim.Config{Members: 4, Seed: seed, In: lossy, Node: cfg, Trace: h.record, Timeout: time.Minute}, chanWrites(chanSegs, 6))
					if err != nil {
						t.Fatalf("seed %d, mutated %v: %v", seed, mutated, err)
					}
					err = checkChannelAxioms(h, chanSegs)
					switch {
					case !mutated && err != nil:
						t.Fatalf("seed %d, not mutated: %v", seed, err)
					case mutated && err != nil && strings.Contains(err.Error(), m.want):
						t.Logf("seed %d: %v", seed, err)
						if found < 0 {
							found = int(seed)
						}
					case mutated && err != nil:
						t.Logf("seed %d fails another axiom first: %v", seed, err)
					}
				}
				if found >= 0 {
					break
				}
			}
			if found < 0 {
				t.Fatalf("%s the axiom checker passed %d seeds: it does not catch the mutation %s", m.name, mutationSeeds, m.want)
			}
		})
	}
}
