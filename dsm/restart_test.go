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
// at that view, as for a member left out: barriers stop waiting for it,
// nobody confirms the new process as that member, and its old lock
// request no longer counts as a wait (its new requests would carry
// timestamps below the old one's, core's reqTS). Before, the node compared
// only ids: it confirmed the restarted process as member 3 and its
// barrier waited for the new process's arrival, which would have been
// counted as the old member's.
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
	if got, want := drain(h), [][]byte{core.AppendConfirm(nil, 2)}; !slices.EqualFunc(got, want, bytes.Equal) {
		t.Fatalf("the view of member 3's restart queued %x, want a Confirm of 2 only: %x", got, want)
	}
	if err := n.Barrier(context.Background(), 1); err != nil {
		t.Fatalf("barrier 1 once member 3 restarted: %v, want crossed (the member is gone)", err)
	}
	if st := n.Stats(); st.BadMessages != 0 {
		t.Fatalf("%d bad messages", st.BadMessages)
	}
}
