package dsm_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rbcast/rbcast/dsm"
	"github.com/rbcast/rbcast/dsm/core"
	"github.com/rbcast/rbcast/dsm/dsmsim"
	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/reliable"
	"github.com/rbcast/rbcast/testnet"
	"github.com/rbcast/rbcast/testnet/rtnet"
)

// The per-segment channels of thesis §7.2 on the simulator: selective
// join, a reliable group per segment among its members, barrier markers
// (def. 7.2 BC) and the wait condition (def. 7.3 WC).

// chanSegs are the segments of the channel tests: key → member ranks
// (the first creates it). Key 25 has one member: no channel.
var chanSegs = map[uint32][]int{
	21: {0, 1},
	22: {1, 2, 3},
	23: {0, 1, 2, 3},
	24: {2, 3},
	25: {3},
}

const chanLocs, chanSize = 64, 8

// joinChanSegs creates or joins this member's segments of segs, then
// crosses barrier 99, which fixes their membership.
func joinChanSegs(n *dsm.Node, segs map[uint32][]int) (map[uint32]*dsm.Segment, error) {
	return joinChanSegsReaders(n, segs, nil)
}

// joinChanSegsReaders is joinChanSegs where the ranks of readers[key]
// join segment key read-only.
func joinChanSegsReaders(n *dsm.Node, segs, readers map[uint32][]int) (map[uint32]*dsm.Segment, error) {
	ctx := context.Background()
	mine := map[uint32]*dsm.Segment{}
	for _, key := range slices.Sorted(maps.Keys(segs)) {
		ranks := segs[key]
		if !slices.Contains(ranks, n.Rank()) {
			continue
		}
		var s *dsm.Segment
		var err error
		switch {
		case ranks[0] == n.Rank():
			s, err = n.CreateSegment(key, chanLocs, chanSize)
		case slices.Contains(readers[key], n.Rank()):
			s, err = n.JoinSegmentReadOnly(ctx, key, chanLocs, chanSize)
		default:
			s, err = n.JoinSegment(ctx, key, chanLocs, chanSize)
		}
		if err != nil {
			return nil, err
		}
		mine[key] = s
	}
	return mine, n.Barrier(ctx, 99)
}

// chanValue is what owner writes to loc in round.
func chanValue(owner, round, loc int) []byte { return writeValue(owner, round*1000+loc, chanSize) }

// chanProgram: rounds in which every member writes its lanes (locations
// loc with loc%size == rank) of each of its segments, a few of them twice
// and some in bulk, then crosses a barrier and checks every location of
// its segments against the sequential program: the owner's last value of
// the round, or zero where the owner is not a member (theorem 2.2), and
// crosses a second barrier before the next round's writes.
func chanProgram(segs map[uint32][]int, rounds int) func(*dsm.Node) error {
	return chanProgramReaders(segs, nil, rounds)
}

// chanProgramReaders is chanProgram where the ranks of readers[key] join
// segment key read-only and write nothing to it: their lanes stay zero.
func chanProgramReaders(segs, readers map[uint32][]int, rounds int) func(*dsm.Node) error {
	return chanProgramWith(segs, readers, rounds, func(ctx context.Context, n *dsm.Node, id int) error { return n.Barrier(ctx, id) })
}

// chanProgramWith is chanProgramReaders crossing the rounds' barriers
// with barrier (the fixing barrier is n.Barrier).
func chanProgramWith(segs, readers map[uint32][]int, rounds int, barrier func(context.Context, *dsm.Node, int) error) func(*dsm.Node) error {
	return chanProgramSegs(segs, readers, rounds, barrier, nil)
}

// chanProgramSegs is chanProgramWith handing the member's segments to
// joined, when set, once it has joined them.
func chanProgramSegs(segs, readers map[uint32][]int, rounds int, barrier func(context.Context, *dsm.Node, int) error, joined func(map[uint32]*dsm.Segment)) func(*dsm.Node) error {
	return func(n *dsm.Node) error {
		ctx := context.Background()
		mine, err := joinChanSegsReaders(n, segs, readers)
		if err != nil {
			return err
		}
		if joined != nil {
			joined(mine)
		}
		keys := slices.Sorted(maps.Keys(mine))
		buf := make([]byte, chanSize)
		for round := range rounds {
			for _, key := range keys {
				s := mine[key]
				if slices.Contains(readers[key], n.Rank()) {
					continue
				}
				for loc := n.Rank(); loc < chanLocs; loc += n.Size() {
					if loc%3 == 0 { // an older value, overwritten below
						if err := s.Write(loc, chanValue(n.Rank(), round+50, loc)); err != nil {
							return err
						}
					}
					if loc%5 == 0 {
						if _, err := s.WriteBulk(loc, chanValue(n.Rank(), round, loc)); err != nil {
							return err
						}
						continue
					}
					if err := s.Write(loc, chanValue(n.Rank(), round, loc)); err != nil {
						return err
					}
				}
			}
			if err := barrier(ctx, n, 100+round); err != nil {
				return err
			}
			for _, key := range keys {
				for loc := range chanLocs {
					owner := loc % n.Size()
					want := make([]byte, chanSize)
					if slices.Contains(segs[key], owner) && !slices.Contains(readers[key], owner) {
						want = chanValue(owner, round, loc)
					}
					got, err := mine[key].Read(loc, buf)
					if err != nil {
						return err
					}
					if !bytes.Equal(got, want) {
						return fmt.Errorf("round %d: segment %d location %d is %x, want %x (rank %d's write)", round, key, loc, got, want, owner)
					}
				}
			}
			// The next round's writes must not race with these reads.
			if err := barrier(ctx, n, 200+round); err != nil {
				return err
			}
		}
		return nil
	}
}

// Theorem 2.2 with channels at 5 % loss: every read equals the
// sequential program's; a member opens channels only for its segments
// with another member, allocates only its segments, and no update of a
// segment reaches a member outside it.
//
// Segment 23, which every member joined, has no channel by default (its
// updates go on the global channel and need no marker), one with
// AllMemberChannels.
func TestChannelsSequentialConsistency(t *testing.T) {
	for _, all := range []bool{false, true} {
		for seed := range uint64(axiomSeeds) {
			res, err := dsmsim.Run(dsmsim.Config{Members: 4, Seed: seed, In: lossy, Node: dsm.Config{Channels: true, AllMemberChannels: all}}, chanProgram(chanSegs, 5))
			if err != nil {
				t.Fatalf("AllMemberChannels %v, seed %d: %v", all, seed, err)
			}
			for r, st := range res.Stats {
				var want []uint32
				for key, ranks := range chanSegs {
					if wantChannel(ranks, r, 4, all) {
						want = append(want, key)
					}
				}
				slices.Sort(want)
				if got := slices.Sorted(maps.Keys(st.Channels)); !slices.Equal(got, want) {
					t.Fatalf("AllMemberChannels %v, seed %d: rank %d has channels %v, want %v", all, seed, r, got, want)
				}
				if st.BadMessages != 0 || st.Ignored != 0 {
					t.Fatalf("AllMemberChannels %v, seed %d: rank %d: %d bad messages, %d ignored updates, want 0", all, seed, r, st.BadMessages, st.Ignored)
				}
				// One marker per channel per barrier after the fixing one.
				if want := uint64(len(want) * 2 * 5); st.Markers != want {
					t.Fatalf("AllMemberChannels %v, seed %d: rank %d sent %d markers, want %d", all, seed, r, st.Markers, want)
				}
			}
		}
	}
}

// wantChannel reports whether rank r of a group of size members opens a
// channel for a segment joined by ranks: when it is one of at least two
// of them, and not every member (unless all: AllMemberChannels).
func wantChannel(ranks []int, r, size int, all bool) bool {
	return len(ranks) > 1 && slices.Contains(ranks, r) && (all || len(ranks) < size)
}

// Axioms 2.2, 2.3, 2.6 and 2.7 with channels at 5 % loss: every write
// becomes exactly one update at every other member of its segment and at
// no one else, in the order written; before a barrier → seen before
// crossing it; after it → seen after crossing it.
func TestChannelsAxioms(t *testing.T) {
	for seed := range uint64(axiomSeeds) {
		h := newHistory(4)
		_, err := dsmsim.Run(dsmsim.Config{Members: 4, Seed: seed, In: lossy, Node: dsm.Config{Channels: true}, Trace: h.record}, chanProgram(chanSegs, 4))
		if err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		if err := checkChannelAxioms(h, chanSegs); err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
	}
}

func checkChannelAxioms(h *history, segs map[uint32][]int) error {
	type wr struct {
		key   writeKey
		order int    // the writer's write number for its segment
		enter uint32 // barriers entered before the write
		pass  uint32 // barriers passed before the write
	}
	n := len(h.byRank)
	writes := make([]map[writeKey]wr, n)
	passAt := make([]map[uint32]int, n)
	for r, evs := range h.byRank {
		writes[r], passAt[r] = map[writeKey]wr{}, map[uint32]int{}
		var entered, passed uint32
		count := map[uint32]int{}
		for _, e := range evs {
			switch e.Kind {
			case core.EvBarrierEnter:
				entered = e.Seq
			case core.EvBarrierPass:
				passed = e.Seq
				passAt[r][e.Seq] = e.index
			case core.EvWrite:
				count[e.Key]++
				writes[r][wkey(e.Event)] = wr{wkey(e.Event), count[e.Key], entered, passed}
			}
		}
	}
	for j, evs := range h.byRank {
		seen := map[writeKey]int{}
		last := map[[2]uint32]int{} // (writer, key) → last order seen
		for _, e := range evs {
			if e.Kind != core.EvUpdate {
				continue
			}
			i := int(e.From) - 1
			w, ok := writes[i][wkey(e.Event)]
			if !ok {
				return fmt.Errorf("rank %d applied %+v from rank %d, which never wrote it", j, wkey(e.Event), i)
			}
			if !slices.Contains(segs[e.Key], j) {
				return fmt.Errorf("rank %d, not a member of segment %d, applied an update of it", j, e.Key)
			}
			seen[w.key]++
			lk := [2]uint32{uint32(i), e.Key}
			if w.order < last[lk] {
				return fmt.Errorf("rank %d applied rank %d's write %d to segment %d after its write %d (axiom 2.3)", j, i, w.order, e.Key, last[lk])
			}
			last[lk] = w.order
			if pass, ok := passAt[j][w.enter+1]; ok && pass < e.index {
				return fmt.Errorf("rank %d wrote %+v before barrier %d, rank %d saw it after crossing that barrier (axiom 2.6)", i, w.key, w.enter+1, j)
			}
			if w.pass > 0 && passAt[j][w.pass] > e.index {
				return fmt.Errorf("rank %d wrote %+v after barrier %d, rank %d saw it before crossing that barrier (axiom 2.7)", i, w.key, w.pass, j)
			}
		}
		for i := range n {
			if i == j {
				continue
			}
			for k, w := range writes[i] {
				if !slices.Contains(segs[k.key], j) {
					continue
				}
				if seen[k] != 1 {
					return fmt.Errorf("rank %d saw rank %d's write %+v (number %d) %d times, want once (axiom 2.2)", j, i, k, w.order, seen[k])
				}
			}
		}
	}
	return nil
}

// Selective join's errors: a join after the fixing barrier, a write
// before it, a lock with channels; and a member that did not join a
// segment allocates nothing for it.
func TestChannelsErrors(t *testing.T) {
	ctx := context.Background()
	_, err := dsmsim.Run(dsmsim.Config{Members: 3, Seed: 1, Node: dsm.Config{Channels: true}}, func(n *dsm.Node) error {
		var s *dsm.Segment
		var err error
		switch n.Rank() {
		case 0:
			s, err = n.CreateSegment(7, 10, 8)
		case 1:
			s, err = n.JoinSegment(ctx, 7, 10, 8)
		}
		if err != nil {
			return err
		}
		if s != nil {
			err := s.WriteFloat64(0, 1)
			if !errors.Is(err, dsm.ErrNotFixed) || !strings.Contains(err.Error(), "segment 7 was created in barrier phase 0; write after barrier 1") {
				return fmt.Errorf("write before the fixing barrier: %v", err)
			}
		}
		if err := n.Barrier(ctx, 1); err != nil {
			return err
		}
		if n.Rank() == 2 {
			_, err := n.JoinSegment(ctx, 7, 10, 8)
			if !errors.Is(err, dsm.ErrJoinClosed) || !strings.Contains(err.Error(), "segment 7: its membership [1 2] was fixed at barrier 1") {
				return fmt.Errorf("late join: %v", err)
			}
		}
		if err := n.Lock(ctx, 1); !errors.Is(err, dsm.ErrLocksChannels) {
			return fmt.Errorf("lock: %v", err)
		}
		if s != nil {
			if err := s.WriteFloat64(0, float64(n.Rank()+1)); err != nil {
				return err
			}
		}
		return n.Barrier(ctx, 2)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// The same program over Join: real reliable.Groups, one per channel, on a
// mux over each member's link of a real-time lossy segment.
func TestJoinChannels(t *testing.T) {
	nodes := joinAll(t, 4, 3, dsm.Config{Channels: true})
	runLive(t, nodes, chanProgram(chanSegs, 4))
	for r, n := range nodes {
		st := n.Stats()
		for key, ranks := range chanSegs {
			_, open := st.Channels[key]
			if want := wantChannel(ranks, r, 4, false); open != want {
				t.Errorf("rank %d: channel of segment %d open: %v, want %v", r, key, open, want)
			}
		}
		if st.BadMessages != 0 {
			t.Errorf("rank %d: %d bad messages", r, st.BadMessages)
		}
	}
}

// TestJoinChannelsRegistered: channels over a registered global group
// (no static list): the channels take the member list registration
// agreed on (reliable.Group.MemberList), as the example programs do on
// real hosts.
func TestJoinChannelsRegistered(t *testing.T) {
	const size = 4
	nodes := joinRanked(t, rtnet.New(t, 5), lossy3, size, func(i int) dsm.Config {
		return dsm.Config{Channels: true, Group: reliable.Config{Group: 1, Size: size, Server: i == 0, RequestID: frame.MemberID(i)}}
	})
	runLive(t, nodes, chanProgram(chanSegs, 2))
	for r, n := range nodes {
		st := n.Stats()
		for key, ranks := range chanSegs {
			if _, open := st.Channels[key]; open != wantChannel(ranks, r, size, false) {
				t.Errorf("rank %d: channel of segment %d open: %v", r, key, open)
			}
		}
	}
}

// TestJoinChannelsViews: channels over a global group with Views (it
// is founded by the 4 processes): the channels' static member lists come
// from the first view. Also with WCCopies -1, every WC hold in the
// window, the global group's too (reliable/view's hold, live, under the
// race detector in CI's runs).
func TestJoinChannelsViews(t *testing.T) {
	for _, copies := range []int{0, -1} {
		t.Run(fmt.Sprintf("WCCopies=%d", copies), func(t *testing.T) { joinChannelsViews(t, copies) })
	}
}

func joinChannelsViews(t *testing.T, copies int) {
	const size = 4
	nodes := joinRanked(t, rtnet.New(t, 6), lossy3, size, func(i int) dsm.Config {
		return dsm.Config{Channels: true, WCCopies: copies, Group: reliable.Config{Group: 1, Views: true, Size: size, RequestID: frame.MemberID(i)}}
	})
	for r, n := range nodes {
		if n.Rank() != r || n.Size() != size {
			t.Fatalf("node %d: rank %d of %d", r, n.Rank(), n.Size())
		}
	}
	runLive(t, nodes, chanProgram(chanSegs, 2))
	var held uint64
	for _, n := range nodes {
		held += n.Stats().Group.HeldData
	}
	t.Logf("%d frames held by WC holds on the global groups", held)
	for r, n := range nodes {
		st := n.Stats()
		for key, ranks := range chanSegs {
			if _, open := st.Channels[key]; open != wantChannel(ranks, r, size, false) {
				t.Errorf("rank %d: channel of segment %d open: %v", r, key, open)
			}
		}
		if st.BadMessages != 0 {
			t.Errorf("rank %d: %d bad messages", r, st.BadMessages)
		}
	}
}

// TestJoinChannelsViewsLeave: under Views a member that exits is
// reported gone, and the others stop waiting for it at barriers (its
// marker on a shared channel included); its last write before the
// barrier it crossed is seen.
func TestJoinChannelsViewsLeave(t *testing.T) {
	const size = 3
	nodes := joinRanked(t, rtnet.New(t, 7), lossy3, size, func(i int) dsm.Config {
		return dsm.Config{Channels: true, Group: reliable.Config{Group: 1, Views: true, Size: size, RequestID: frame.MemberID(i)}}
	})
	runLive(t, nodes, func(n *dsm.Node) error {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		s, err := attach(n, 5, 4, 8)
		if err != nil {
			return err
		}
		if err := n.Barrier(ctx, 1); err != nil {
			return err
		}
		if err := s.Write(n.Rank(), writeValue(n.Rank(), 1, 8)); err != nil {
			return err
		}
		if err := n.Barrier(ctx, 2); err != nil {
			return err
		}
		if n.Rank() == 2 {
			return nil // exits: the others go on without it
		}
		if err := s.Write(n.Rank(), writeValue(n.Rank(), 2, 8)); err != nil {
			return err
		}
		if err := n.Barrier(ctx, 3); err != nil {
			return err
		}
		for r, want := range [][]byte{writeValue(0, 2, 8), writeValue(1, 2, 8), writeValue(2, 1, 8)} {
			if got := s.Location(r); !bytes.Equal(got, want) {
				return fmt.Errorf("location %d is %x, want %x", r, got, want)
			}
		}
		return nil
	})
}

// A member that exits right after the barrier following its last write
// on a channel: the others must still see that write when they cross
// (harness.completed's pattern). dsmsim used to start the global leave
// with the channels' leaves: a member saw the leaver go (MemberLeft) and
// stopped waiting for its marker while its last update was still under
// repair on the channel (seed 14 failed: [1 1 0] after barrier 2).
func TestChannelsLastWriteBeforeExit(t *testing.T) {
	for seed := range uint64(16) {
		_, err := dsmsim.Run(dsmsim.Config{Members: 3, Seed: seed, In: lossy, Node: dsm.Config{Channels: true}}, func(n *dsm.Node) error {
			ctx := context.Background()
			var s *dsm.Segment
			var err error
			if n.Rank() == 0 {
				s, err = n.CreateSegment(31, n.Size(), 1)
			} else {
				s, err = n.JoinSegment(ctx, 31, n.Size(), 1)
			}
			if err != nil {
				return err
			}
			if err := n.Barrier(ctx, 1); err != nil {
				return err
			}
			if err := s.Write(n.Rank(), []byte{1}); err != nil {
				return err
			}
			if err := n.Barrier(ctx, 2); err != nil {
				return err
			}
			if got := s.View(); !bytes.Equal(got, bytes.Repeat([]byte{1}, n.Size())) {
				return fmt.Errorf("after barrier 2: %v, want every member's 1", got)
			}
			return nil
		})
		if err != nil {
			t.Errorf("seed %d: %v", seed, err)
		}
	}
}

// TestJoinChannelsViewsWideIDs: channels over a global group with Views
// whose members' ids span the view's MaxMembers (0 and 15): the channel's
// frames carry 16 acks and leave room for a relay (pbp.Config.Relay), so
// its largest message is 36 bytes below the view's (1368 against 1404
// bytes). The node cuts its updates to the smaller (Config.UpdateMessage):
// before, full update buffers exceeded what the channel carries.
func TestJoinChannelsViewsWideIDs(t *testing.T) {
	const size, locs = 2, 2000
	// AllMemberChannels: segment 5 has both members, and the test is
	// about its channel.
	nodes := joinRanked(t, rtnet.New(t, 8), testnet.EndpointConfig{}, size, func(i int) dsm.Config {
		return dsm.Config{Channels: true, AllMemberChannels: true, Group: reliable.Config{Group: 1, Views: true, Size: size, RequestID: frame.MemberID(15 * i)}}
	})
	runLive(t, nodes, func(n *dsm.Node) error {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		s, err := attach(n, 5, locs, 8)
		if err != nil {
			return err
		}
		if err := n.Barrier(ctx, 1); err != nil {
			return err
		}
		if n.Rank() == 0 {
			for loc := range locs {
				if err := s.Write(loc, writeValue(0, loc, 8)); err != nil {
					return err
				}
			}
		}
		if err := n.Barrier(ctx, 2); err != nil {
			return err
		}
		for loc := range locs {
			if got, want := s.Location(loc), writeValue(0, loc, 8); !bytes.Equal(got, want) {
				return fmt.Errorf("location %d is %x, want %x", loc, got, want)
			}
		}
		return nil
	})
	if st := nodes[1].Stats(); st.Channels[5].Protocol.Delivered == 0 {
		t.Error("rank 1's channel of segment 5 delivered nothing")
	}
	t.Logf("largest update message %d bytes", nodes[0].MaxMessage())
}
