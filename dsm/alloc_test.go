package dsm_test

import (
	"context"
	"runtime"
	"testing"

	"github.com/rbcast/rbcast/dsm"
	"github.com/rbcast/rbcast/dsm/dsmsim"
)

// End to end on the simulator: writes buffered into messages, sent
// through the reliable layer's engine, received and applied into the
// other members' segments, allocate less than once per message. (The DSM
// layer allocates nothing, TestZeroAllocs in dsm/core; what remains, about
// one allocation per two messages here, is pbp.appendMsg growing history
// buffers for this mix of full and tiny messages.)
func TestUpdatesAllocateNothing(t *testing.T) {
	const rounds, perRound = 20, 180 * 4 // 4 full messages a round
	var mallocs uint64
	_, err := dsmsim.Run(dsmsim.Config{Members: 3, Seed: 1}, func(n *dsm.Node) error {
		ctx := context.Background()
		s, err := attach(n, 1, 4*perRound, 8)
		if err != nil {
			return err
		}
		v := make([]byte, 8)
		var ms runtime.MemStats
		for round := range rounds {
			if round == rounds/2 && n.Rank() == 0 {
				runtime.ReadMemStats(&ms)
				mallocs = ms.Mallocs
			}
			if n.Rank() == 0 {
				for i := range perRound {
					if err := s.Write(i+perRound*(round%4), v); err != nil {
						return err
					}
				}
			}
			if err := n.Barrier(ctx, round); err != nil {
				return err
			}
		}
		if n.Rank() == 0 {
			runtime.ReadMemStats(&ms)
			mallocs = ms.Mallocs - mallocs
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	msgs := uint64(rounds / 2 * (4 + 1) * 3) // updates and barriers, all members
	t.Logf("%d allocations for %d messages sent and applied twice each", mallocs, msgs)
	if mallocs > msgs {
		t.Errorf("%d allocations for %d messages: the update path allocates", mallocs, msgs)
	}
}
