package dsm_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rbcast/rbcast/dsm"
	"github.com/rbcast/rbcast/dsm/core"
	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/reliable"
	"github.com/rbcast/rbcast/testnet"
	"github.com/rbcast/rbcast/testnet/rtnet"
)

// Issue 21: a process that starts after the computation began (Views:
// the reliable layer admits it into the running group) is not one of
// the computation's members, which are the group's first view. Before,
// its node took the view it was admitted in as its members: it waited
// for an announcement made before it joined (JoinSegment hung until its
// context ended), or, admitted before the first barrier, crossed
// barriers with the others while they dropped its writes as bad
// messages. Now a member refuses it (a Refuse message): its calls return
// a *LateJoinError saying how far the computation is, and the members go
// on undisturbed, their memory byte-exact.
func TestJoinLateRefused(t *testing.T) {
	for _, at := range []int{0, 2} {
		for _, channels := range []bool{false, true} {
			t.Run(fmt.Sprintf("after=%d/channels=%v", at, channels), func(t *testing.T) { testJoinLateRefused(t, at, channels) })
		}
	}
}

// testJoinLateRefused: the late process starts once the members have
// passed barrier at (0: none yet, the segment created and joined).
func testJoinLateRefused(t *testing.T, at int, channels bool) {
	r := rtnet.New(t, 8)
	const size = 3
	imp := testnet.EndpointConfig{In: testnet.Impairment{Loss: 0.03}}
	cfgOf := func(i int) dsm.Config {
		return dsm.Config{Channels: channels, Group: reliable.Config{Group: 1, Views: true, Size: size,
			RequestID: frame.MemberID(i), Logger: slog.New(slog.DiscardHandler)}}
	}
	nodes := joinRanked(t, r, imp, size, cfgOf)

	// The members pass barriers 1..at, then wait while the late process
	// joins and is refused, then go on to barrier 5.
	arrived := make(chan struct{}, size)
	lateDone := make(chan struct{})
	var lateErr error
	var lateStats dsm.Stats
	go func() {
		defer close(lateDone)
		for range size {
			<-arrived
		}
		l := r.Attach(t, imp)
		t.Cleanup(func() { l.Close() })
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		n, err := dsm.Join(ctx, l, cfgOf(size))
		if err != nil {
			lateErr = fmt.Errorf("late Join: %w", err)
			return
		}
		if at == 0 {
			// Admitted before the first barrier: its node used to
			// cross barriers with the members, who dropped its writes.
			if _, lateErr = n.JoinSegment(ctx, 5, size, 8); lateErr == nil {
				lateErr = n.Barrier(ctx, 1)
			}
		} else {
			_, lateErr = n.JoinSegment(ctx, 5, size, 8)
		}
		lateStats = n.Stats()
		n.Exit()
	}()
	runLive(t, nodes, func(n *dsm.Node) error {
		ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
		defer cancel()
		s, err := attach(n, 5, size, 8)
		if err != nil {
			return err
		}
		phase := func(b int) error {
			if err := n.Barrier(ctx, b); err != nil {
				return err
			}
			return s.Write(n.Rank(), writeValue(n.Rank(), b, 8))
		}
		for b := 1; b <= at; b++ {
			if err := phase(b); err != nil {
				return err
			}
		}
		arrived <- struct{}{}
		<-lateDone
		for b := at + 1; b <= 4; b++ {
			if err := phase(b); err != nil {
				return err
			}
		}
		if err := n.Barrier(ctx, 5); err != nil {
			return err
		}
		for r := range size {
			if got, want := s.Location(r), writeValue(r, 4, 8); !bytes.Equal(got, want) {
				return fmt.Errorf("rank %d: location %d is %x, want %x", n.Rank(), r, got, want)
			}
		}
		if st := n.Stats(); st.BadMessages != 0 {
			return fmt.Errorf("rank %d: %d bad messages", n.Rank(), st.BadMessages)
		}
		return nil
	})
	var lj *dsm.LateJoinError
	if !errors.As(lateErr, &lj) || !errors.Is(lateErr, dsm.ErrLateJoin) {
		t.Fatalf("late process: %v, want a *LateJoinError", lateErr)
	}
	passed := "has passed barrier 2"
	if at == 0 {
		passed = "has not crossed its first barrier yet"
	}
	for _, want := range []string{"joined the running group after the computation began", passed,
		"joining later needs a snapshot of the segments, which is not supported"} {
		if !strings.Contains(lateErr.Error(), want) {
			t.Errorf("late process: %q, want it to say %q", lateErr, want)
		}
	}
	if lateStats.BadMessages != 0 {
		t.Errorf("late process: %d bad messages", lateStats.BadMessages)
	}
}

// The node's side of TestJoinLateRefused, stepped by hand: a view with a
// process the node's members do not hold queues one Refuse for it and
// drops its messages; the process refused stops at its next call.
func TestHostLateRefused(t *testing.T) {
	env := &stepEnv{}
	n, h := dsm.NewHosted(env, dsm.Config{})
	env.h = h
	if err := h.Start(1, []frame.MemberID{1, 2, 3}, 1400); err != nil {
		t.Fatal(err)
	}
	h.OnEvent(viewOf(1, 2, 3, 4))
	h.OnEvent(viewOf(1, 2, 3, 4)) // refused and confirmed once
	refusals := drain(h)
	want := [][]byte{core.AppendRefuse(nil, 4, 0), core.AppendConfirm(nil, 2), core.AppendConfirm(nil, 3)}
	if !slices.EqualFunc(refusals, want, bytes.Equal) {
		t.Fatalf("queued %x, want one Refuse of 4 and a Confirm of 2 and of 3: %x", refusals, want)
	}
	h.Deliver(4, core.AppendSegment(nil, 9, core.Geometry{Locations: 1, LocationSize: 1}, true))
	if st := n.Stats(); st.Outsiders != 1 || st.BadMessages != 0 {
		t.Fatalf("outsiders %d, bad messages %d; want 1, 0", st.Outsiders, st.BadMessages)
	}

	lenv := &stepEnv{}
	late, lh := dsm.NewHosted(lenv, dsm.Config{})
	lenv.h = lh
	if err := lh.Start(4, []frame.MemberID{1, 2, 3, 4}, 1400); err != nil {
		t.Fatal(err)
	}
	lh.Deliver(1, refusals[0])
	err := late.Barrier(context.Background(), 1)
	if !errors.Is(err, dsm.ErrLateJoin) || !strings.Contains(err.Error(), "(member 1) has not crossed its first barrier yet") {
		t.Fatalf("late Barrier: %v, want ErrLateJoin", err)
	}
	if _, err := late.CreateSegment(9, 1, 1); !errors.Is(err, dsm.ErrLateJoin) {
		t.Fatalf("late CreateSegment: %v, want ErrLateJoin", err)
	}
}

// drain takes every message out of h's outbox.
func drain(h *dsm.Host) [][]byte {
	var out [][]byte
	for {
		b, _, ok := h.Next()
		if !ok {
			return out
		}
		out = append(out, bytes.Clone(b))
		h.Sent(nil)
	}
}

// Issue 21, the positive signal: a node whose first view is not the
// group's founding one may be a member that missed the founding commit
// or a process admitted later, and its members' arrivals at a barrier
// can come before a Refuse (TestSimLateRefusedBeforeBarrier). It crosses
// its first barrier only once a member's Confirm names it; a Refuse
// fails it instead. Once confirmed it confirms the members of the views
// it installs later, as a founder does.
func TestHostUnconfirmedWaits(t *testing.T) {
	ctx := context.Background()
	later := reliable.ViewInfo{ID: 0x0200}
	for _, id := range []frame.MemberID{1, 2, 3} {
		later.Members = append(later.Members, frame.MemberInfo{ID: id, Incarnation: 1})
	}

	// A member that missed view 1: confirmed, it crosses.
	env := &stepEnv{}
	n, h := dsm.NewHosted(env, dsm.Config{})
	env.h = h
	if err := h.StartView(3, later, 1400); err != nil {
		t.Fatal(err)
	}
	h.OnEvent(reliable.Event{Kind: reliable.ViewInstalled, Member: 3, View: &later})
	if out := drain(h); len(out) != 0 {
		t.Fatalf("an unconfirmed node queued %x at its first view, want nothing", out)
	}
	h.Deliver(1, core.AppendBarrier(nil, 1, 1))
	h.Deliver(2, core.AppendBarrier(nil, 1, 1))
	err := n.Barrier(ctx, 1)
	if !errors.Is(err, errNotYet) || !strings.Contains(err.Error(), "still waiting for a member to confirm this process as one of the computation's") {
		t.Fatalf("Barrier with every arrival but no Confirm: %v, want it waiting for a Confirm", err)
	}
	h.Deliver(2, core.AppendConfirm(nil, 1)) // another's
	if err := n.Barrier(ctx, 1); !errors.Is(err, errNotYet) {
		t.Fatalf("Barrier after a Confirm of member 1: %v, want it still waiting", err)
	}
	h.Deliver(2, core.AppendConfirm(nil, 3))
	if err := n.Barrier(ctx, 1); err != nil {
		t.Fatalf("Barrier after its Confirm: %v", err)
	}
	drain(h)
	next := reliable.ViewInfo{ID: 0x0300, Members: later.Members}
	h.OnEvent(reliable.Event{Kind: reliable.ViewInstalled, Member: 3, View: &next})
	want := [][]byte{core.AppendConfirm(nil, 1), core.AppendConfirm(nil, 2)}
	if out := drain(h); !slices.EqualFunc(out, want, bytes.Equal) {
		t.Fatalf("confirmed, it queued %x at the next view, want %x", out, want)
	}

	// A process admitted later: every member's arrival came ahead of
	// the Refuse; it does not cross, and fails with the Refuse.
	lenv := &stepEnv{}
	late, lh := dsm.NewHosted(lenv, dsm.Config{})
	lenv.h = lh
	admitted := reliable.ViewInfo{ID: 0x0200, Members: append(slices.Clone(later.Members), frame.MemberInfo{ID: 4, Incarnation: 1})}
	if err := lh.StartView(4, admitted, 1400); err != nil {
		t.Fatal(err)
	}
	for _, id := range []frame.MemberID{1, 2, 3} {
		lh.Deliver(id, core.AppendBarrier(nil, 1, 1))
	}
	if err := late.Barrier(ctx, 1); !errors.Is(err, errNotYet) {
		t.Fatalf("late Barrier with every arrival before the Refuse: %v, want it waiting", err)
	}
	lh.Deliver(2, core.AppendRefuse(nil, 4, 0))
	if err := late.Barrier(ctx, 1); !errors.Is(err, dsm.ErrLateJoin) || !strings.Contains(err.Error(), "(member 2) has not crossed its first barrier yet") {
		t.Fatalf("late Barrier after the Refuse: %v, want ErrLateJoin", err)
	}
	if st := late.Stats(); st.BadMessages != 0 {
		t.Fatalf("late process: %d bad messages", st.BadMessages)
	}
}
