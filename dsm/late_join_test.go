package dsm_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
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
	nodes := make([]*dsm.Node, size)
	errs := make([]error, size)
	var wg sync.WaitGroup
	for i := range size {
		l := r.Attach(t, imp)
		t.Cleanup(func() { l.Close() })
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			nodes[i], errs[i] = dsm.Join(ctx, l, cfgOf(i))
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(nodes, func(a, b *dsm.Node) int { return a.Rank() - b.Rank() })

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
	h.OnEvent(viewOf(1, 2, 3, 4)) // refused once
	var refusals [][]byte
	for {
		b, _, ok := h.Next()
		if !ok {
			break
		}
		refusals = append(refusals, bytes.Clone(b))
		h.Sent(nil)
	}
	if want := core.AppendRefuse(nil, 4, 0); len(refusals) != 1 || !bytes.Equal(refusals[0], want) {
		t.Fatalf("queued %x, want one Refuse %x", refusals, want)
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
