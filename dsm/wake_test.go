package dsm_test

import (
	"context"
	"testing"

	"github.com/rbcast/rbcast/dsm"
)

// A member waiting at a barrier is woken once, when it may cross, not
// for every peer's barrier message or marker that leaves the barrier
// condition unmet, nor for each message its sender goroutine hands to the
// group (dsm.Stats.Wakeups). Over Join, 4 members, each writing the
// segment it created and its neighbour's before each of 60 barriers:
// without the check a member was woken 91-94 times over one group and
// 191-199 times with channels (a barrier message and a marker each), now
// 54-62 times.
func TestJoinBarrierWakesOnce(t *testing.T) {
	const barriers = 60
	for _, channels := range []bool{false, true} {
		nodes := joinAll(t, 4, 5, dsm.Config{Channels: channels, Selective: true})
		runLive(t, nodes, func(n *dsm.Node) error {
			ctx := context.Background()
			var segs []*dsm.Segment
			for _, key := range []uint32{uint32(n.Rank()), uint32((n.Rank() + 3) % 4)} {
				var s *dsm.Segment
				var err error
				if key == uint32(n.Rank()) {
					s, err = n.CreateSegment(key, 16, 8)
				} else {
					s, err = n.JoinSegment(ctx, key, 16, 8)
				}
				if err != nil {
					return err
				}
				segs = append(segs, s)
			}
			if err := n.Barrier(ctx, 0); err != nil {
				return err
			}
			for b := 1; b <= barriers; b++ {
				for _, s := range segs {
					if err := s.WriteFloat64(n.Rank(), float64(b)); err != nil {
						return err
					}
				}
				if err := n.Barrier(ctx, b); err != nil {
					return err
				}
			}
			return nil
		})
		for r, n := range nodes {
			st := n.Stats()
			t.Logf("channels %v: rank %d woken %d times over %d barriers", channels, r, st.Wakeups, st.Barriers)
			if st.Wakeups > st.Barriers+st.Barriers/4 {
				t.Errorf("channels %v: rank %d woken %d times over %d barriers: want at most about one a barrier", channels, r, st.Wakeups, st.Barriers)
			}
		}
	}
}
