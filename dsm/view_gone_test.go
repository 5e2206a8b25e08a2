package dsm_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/rbcast/rbcast/dsm"
	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/reliable"
)

// stepEnv is an Env whose Wait does not block: it returns errNotYet
// when the call could not go on, so a test steps the node by hand.
type stepEnv struct{ h *dsm.Host }

var errNotYet = errors.New("not yet")

func (e *stepEnv) Kick()  {}
func (e *stepEnv) Flush() {}
func (e *stepEnv) Wait(_ context.Context, w dsm.Wait) error {
	if ok, err := e.h.Ready(w); !ok {
		return errNotYet
	} else {
		return err
	}
}
func (e *stepEnv) Leave() error               { return nil }
func (e *stepEnv) GroupStats() reliable.Stats { return reliable.Stats{} }
func (e *stepEnv) Open(uint32, []frame.MemberID) error {
	return errors.New("no channels here")
}

func viewOf(ids ...frame.MemberID) reliable.Event {
	v := &reliable.ViewInfo{ID: 0x0200}
	for _, id := range ids {
		v.Members = append(v.Members, frame.MemberInfo{ID: id, Incarnation: 1})
	}
	return reliable.Event{Kind: reliable.ViewInstalled, Member: 1, View: v}
}

// Issue 21 (TestJoinChannelsViewsLeave stalled at barrier 3 "still
// waiting for members [2]"): under Views a member left out of a new view
// is gone, though this member's core never reported MemberLeft or
// MemberFailed for it — the view's inner core, which would have, is
// replaced at the install (its Leave here while its last frames were
// still under repair, the coordinator already done with it).
func TestViewInstalledReleasesBarrier(t *testing.T) {
	env := &stepEnv{}
	n, h := dsm.NewHosted(env, dsm.Config{})
	env.h = h
	if err := h.Start(1, []frame.MemberID{1, 2, 3}, 1400); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	err := n.Barrier(ctx, 1)
	if err == nil || !strings.Contains(err.Error(), "still waiting for members [2 3]") {
		t.Fatalf("barrier 1 alone: %v, want still waiting for members [2 3]", err)
	}
	h.OnEvent(viewOf(1, 2, 3)) // a view that keeps everyone changes nothing
	if err := n.Barrier(ctx, 1); err == nil || !strings.Contains(err.Error(), "[2 3]") {
		t.Fatalf("after a view of all three: %v, want still waiting for members [2 3]", err)
	}
	h.OnEvent(viewOf(1, 3))
	if err := n.Barrier(ctx, 1); err == nil || !strings.Contains(err.Error(), "still waiting for members [3]") {
		t.Fatalf("after a view without member 2: %v, want still waiting for members [3]", err)
	}
	h.OnEvent(viewOf(1))
	if err := n.Barrier(ctx, 1); err != nil {
		t.Fatalf("after a view of member 1 alone: %v", err)
	}
	if err := n.Barrier(ctx, 2); err != nil {
		t.Fatalf("barrier 2 alone: %v", err)
	}
}
