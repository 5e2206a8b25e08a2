package dsm_test

import (
	"bytes"
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/rbcast/rbcast/dsm"
	"github.com/rbcast/rbcast/dsm/core"
	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/reliable"
)

// Under Views a process that restarts (a new incarnation, the same MAC)
// replaces its old incarnation in the next view under the same id
// (docs/membership.md, "Joining, leaving, restarting"): the member of the
// computation is gone — its memory, barrier count and Lamport clock went
// with it — though the id stays in the view. The node takes it for gone
// at that view, as for a member left out — barriers stop waiting for
// it, and its old lock request no longer counts as a wait — and refuses
// the new process as a process admitted late: it is confirmed by nobody,
// and its messages are dropped (its requests would carry timestamps
// below the old run's, which core's lock wait takes for answered).
// Before, the node compared only ids: it confirmed the restarted process
// as member 3, its barrier waited for the new process's arrival, and
// that arrival and its requests were handled as the old member's.
func TestViewRestartIsGone(t *testing.T) {
	env := &stepEnv{}
	n, h := dsm.NewHosted(env, dsm.Config{})
	env.h = h
	if err := h.Start(1, []frame.MemberID{1, 2, 3}, 1400); err != nil {
		t.Fatal(err)
	}
	view := func(id uint32, inc3 uint32) reliable.Event {
		v := &reliable.ViewInfo{ID: id, Members: []frame.MemberInfo{{ID: 1, Incarnation: 1}, {ID: 2, Incarnation: 1}, {ID: 3, Incarnation: inc3}}}
		return reliable.Event{Kind: reliable.ViewInstalled, Member: 1, View: v}
	}
	h.OnEvent(view(0x0200, 1))
	if got, want := drain(h), [][]byte{core.AppendConfirm(nil, 2), core.AppendConfirm(nil, 3)}; !slices.EqualFunc(got, want, bytes.Equal) {
		t.Fatalf("a view of the three queued %x, want a Confirm of 2 and of 3: %x", got, want)
	}
	h.Deliver(2, core.AppendBarrier(nil, 1, 1))
	if err := n.Barrier(context.Background(), 1); err == nil || !strings.Contains(err.Error(), "still waiting for members [3]") {
		t.Fatalf("barrier 1 with member 2 arrived: %v, want still waiting for members [3]", err)
	}
	drain(h)                   // Self's arrival
	h.OnEvent(view(0x0300, 2)) // member 3 restarted
	if got, want := drain(h), [][]byte{core.AppendRefuse(nil, 3, 0), core.AppendConfirm(nil, 2)}; !slices.EqualFunc(got, want, bytes.Equal) {
		t.Fatalf("the view of member 3's restart queued %x, want a Refuse of 3 and a Confirm of 2: %x", got, want)
	}
	h.OnEvent(view(0x0400, 2)) // refused once
	if got, want := drain(h), [][]byte{core.AppendConfirm(nil, 2)}; !slices.EqualFunc(got, want, bytes.Equal) {
		t.Fatalf("the view after queued %x, want a Confirm of 2: %x", got, want)
	}
	if err := n.Barrier(context.Background(), 1); err != nil {
		t.Fatalf("barrier 1 once member 3 restarted: %v, want crossed (the member is gone)", err)
	}
	drain(h)
	// The new process's messages are an outsider's: its arrival at its
	// barrier 1 and its lock request (a Lamport clock started again)
	// are dropped, not answered.
	h.Deliver(3, core.AppendBarrier(nil, 1, 1))
	h.Deliver(3, core.AppendLockRequest(nil, 0, 1))
	if got := drain(h); len(got) != 0 {
		t.Fatalf("the restarted process's messages queued %x, want nothing", got)
	}
	if st := n.Stats(); st.BadMessages != 0 || st.Outsiders != 2 {
		t.Fatalf("%d bad messages, %d outsiders' messages; want 0, 2", st.BadMessages, st.Outsiders)
	}
}
