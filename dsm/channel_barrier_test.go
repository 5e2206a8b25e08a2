package dsm_test

import (
	"context"
	"errors"
	"maps"
	"strings"
	"sync"
	"testing"

	"github.com/rbcast/rbcast/dsm"
	"github.com/rbcast/rbcast/dsm/core"
	"github.com/rbcast/rbcast/dsm/dsmsim"
	"github.com/rbcast/rbcast/internal/seeds"
)

// Channel barriers (Node.ChannelBarrier): markers on the segment
// channels, nothing on the global channel.

// chanSegsNoGlobal are chanSegs without segment 23, which every member
// joined: its updates travel on the global channel, which a channel
// barrier does not mark.
var chanSegsNoGlobal = func() map[uint32][]int {
	m := maps.Clone(chanSegs)
	delete(m, 23)
	return m
}()

// channelThenTotal crosses the rounds' barriers as channel barriers, but
// for every other round's second one (an odd round's 200+round), a total
// barrier: a peer's global barrier numbers then skip the channel
// barriers between.
func channelThenTotal(ctx context.Context, n *dsm.Node, id int) error {
	if id >= 200 && id%2 == 1 {
		return n.Barrier(ctx, id)
	}
	return n.ChannelBarrier(ctx, id)
}

// Theorem 2.2 and axioms 2.2, 2.3, 2.6 and 2.7 over channel barriers, 4
// members at 5 % loss, 2 % duplication and 5 % reordering, with a reader
// (rank 1 on segment 22): every read after a barrier equals the
// sequential program's, every write is one update at every other member
// of its segment, before a barrier → seen before crossing it, after it →
// after; and a channel barrier puts no arrival on the global channel.
// RBCAST_SEEDS sets the number of seeds (4 by default).
func TestChannelBarrierAxioms(t *testing.T) {
	readers := map[uint32][]int{22: {1}}
	for seed := range uint64(seeds.Count(t, axiomSeeds, axiomSeeds)) {
		h := newHistory(4)
		res, err := dsmsim.Run(dsmsim.Config{Members: 4, Seed: seed, In: lossy, Node: dsm.Config{Channels: true}, Trace: h.record},
			chanProgramWith(chanSegsNoGlobal, readers, 6, channelThenTotal))
		if err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		if err := checkChannelAxioms(h, chanSegsNoGlobal); err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		for r, evs := range h.byRank {
			arrivals, passes := 0, 0
			for _, e := range evs {
				switch e.Kind {
				case core.EvArrival:
					arrivals++
				case core.EvBarrierPass:
					passes++
				}
			}
			// The fixing barrier and rounds 1, 3, 5's second barriers
			// are total: 4 arrivals from each of 3 peers.
			if passes != 13 || arrivals != 4*3 {
				t.Fatalf("seed %d: rank %d crossed %d barriers and handled %d arrivals on the global channel, want 13 and 12", seed, r, passes, arrivals)
			}
		}
		for r, st := range res.Stats {
			if st.BadMessages != 0 {
				t.Fatalf("seed %d: rank %d: %d bad messages", seed, r, st.BadMessages)
			}
		}
	}
}

// The errors of channel barriers: without Channels; after writing a
// segment every member joined; and members entering a barrier as
// different kinds.
func TestChannelBarrierErrors(t *testing.T) {
	ctx := context.Background()
	_, err := dsmsim.Run(dsmsim.Config{Members: 2, Seed: 1}, func(n *dsm.Node) error {
		return n.ChannelBarrier(ctx, 1)
	})
	if err == nil || !strings.Contains(err.Error(), "dsm: channel barrier 1: the node does not run Channels") {
		t.Fatalf("without Channels: %v", err)
	}
	_, err = dsmsim.Run(dsmsim.Config{Members: 2, Seed: 1, Node: dsm.Config{Channels: true}}, func(n *dsm.Node) error {
		var s *dsm.Segment
		var err error
		if n.Rank() == 0 {
			s, err = n.CreateSegment(9, 4, 8)
		} else {
			s, err = n.JoinSegment(ctx, 9, 4, 8)
		}
		if err != nil {
			return err
		}
		if err := n.Barrier(ctx, 1); err != nil {
			return err
		}
		if err := s.WriteFloat64(n.Rank(), 1); err != nil {
			return err
		}
		return n.ChannelBarrier(ctx, 2)
	})
	if err == nil || !strings.Contains(err.Error(), "dsm: channel barrier 2: this member wrote a segment every member joined since its last total barrier") {
		t.Fatalf("after a global segment's write: %v", err)
	}
	_, err = dsmsim.Run(dsmsim.Config{Members: 3, Seed: 1, Node: dsm.Config{Channels: true}}, func(n *dsm.Node) error {
		if n.Rank() < 2 {
			var err error
			if n.Rank() == 0 {
				_, err = n.CreateSegment(9, 4, 8)
			} else {
				_, err = n.JoinSegment(ctx, 9, 4, 8)
			}
			if err != nil {
				return err
			}
		}
		if err := n.Barrier(ctx, 1); err != nil {
			return err
		}
		if n.Rank() == 1 {
			return n.Barrier(ctx, 2)
		}
		return n.ChannelBarrier(ctx, 2)
	})
	if !errors.Is(err, dsm.ErrBarrierMismatch) || !strings.Contains(err.Error(), "member 2 entered barrier 2 (its barrier number 2) as a barrier with a global message, this member as a channel barrier") {
		t.Fatalf("kinds differ: %v", err)
	}
	// The member that entered the total barrier learns it from the
	// marker, without waiting for a global message that will not come.
	var mu sync.Mutex
	errs := map[int]error{}
	dsmsim.Run(dsmsim.Config{Members: 3, Seed: 1, Node: dsm.Config{Channels: true}}, func(n *dsm.Node) error {
		var err error
		switch n.Rank() {
		case 0:
			_, err = n.CreateSegment(9, 4, 8)
		case 1:
			_, err = n.JoinSegment(ctx, 9, 4, 8)
		}
		if err == nil {
			err = n.Barrier(ctx, 1)
		}
		if err == nil && n.Rank() == 0 {
			err = n.Barrier(ctx, 2)
		} else if err == nil {
			err = n.ChannelBarrier(ctx, 2)
		}
		mu.Lock()
		errs[n.Rank()] = err
		mu.Unlock()
		return err
	})
	if err := errs[0]; !errors.Is(err, dsm.ErrBarrierMismatch) || !strings.Contains(err.Error(), "member 2 entered barrier 2 (its barrier number 2) as a channel barrier, this member as a barrier with a global message") {
		t.Fatalf("total against channel: %v", err)
	}
}
