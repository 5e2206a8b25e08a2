package kv

import (
	"fmt"
	"slices"
	"testing"

	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/reliable"
)

// orderGroup is a total order in a test: every message a member of the
// current view sends is delivered to every member, in one order.
type orderGroup struct {
	t        *testing.T
	nodes    map[frame.MemberID]*Node
	members  []frame.MemberID
	restored map[frame.MemberID][]string // OnRestore calls
}

func newOrderGroup(t *testing.T, replicas int, candidates map[frame.MemberID][]byte, ids ...frame.MemberID) *orderGroup {
	g := &orderGroup{t: t, nodes: map[frame.MemberID]*Node{}, restored: map[frame.MemberID][]string{}}
	for _, id := range ids {
		n, err := NewNode(NodeConfig{MaxMessage: 40, Replicas: replicas, Candidate: candidates[id],
			OnRestore: func(applied, ordered uint64) {
				g.restored[id] = append(g.restored[id], fmt.Sprintf("applied %d ordered %d", applied, ordered))
			}})
		if err != nil {
			t.Fatal(err)
		}
		g.nodes[id] = n
	}
	return g
}

// install installs view id with members ids at each of them.
func (g *orderGroup) install(id uint32, ids ...frame.MemberID) {
	g.members = ids
	v := &reliable.ViewInfo{ID: id}
	for _, m := range ids {
		v.Members = append(v.Members, frame.MemberInfo{ID: m, Incarnation: 1})
	}
	for _, m := range ids {
		g.nodes[m].OnEvent(reliable.Event{Kind: reliable.ViewInstalled, Member: m, View: v})
	}
}

// outbox takes every member's messages, by member id.
func (g *orderGroup) outbox() (from []frame.MemberID, msgs [][]byte) {
	for _, m := range g.members {
		for _, b := range g.nodes[m].Outbox() {
			from, msgs = append(from, m), append(msgs, b)
		}
	}
	return from, msgs
}

// deliver delivers msgs to every member of the view, in order. Each
// member gets the message in a buffer of its own that is poisoned (filled
// with 0xEE) once Deliver returns, as a group's buffer is reused then
// (reliable.Config.Deliver: data is valid only during the call): a node
// that keeps a delivered message without copying it sees the poison.
func (g *orderGroup) deliver(from []frame.MemberID, msgs [][]byte) {
	for i, b := range msgs {
		for _, m := range g.members {
			buf := slices.Clone(b)
			g.nodes[m].Deliver(from[i], buf)
			for j := range buf {
				buf[j] = 0xEE
			}
		}
	}
}

// pump sends and delivers until no member has anything to send.
func (g *orderGroup) pump() {
	for {
		from, msgs := g.outbox()
		if len(msgs) == 0 {
			return
		}
		g.deliver(from, msgs)
	}
}

// state is member m's replica snapshot ("" without state).
func (g *orderGroup) state(m frame.MemberID) string {
	if !g.nodes[m].Ready() {
		return ""
	}
	return string(g.nodes[m].Replica().Snapshot())
}

// candidate is the state of a replica that executed puts of keys
// (a session opened, then seq 1, 2, ...).
func candidate(keys ...string) []byte {
	r := NewReplica(NewStore(), 0)
	c := r.Open()
	for i, k := range keys {
		r.Execute(c, uint64(i+1), AppendOp(nil, Op{Kind: OpPut, Key: k, Value: []byte(k)}))
	}
	return r.Snapshot()
}

// The whole group re-forms from the most advanced candidate, and a
// request ordered before its snapshot is applied after it, not lost and
// not applied to an empty state.
func TestReformFromMostAdvanced(t *testing.T) {
	cands := map[frame.MemberID][]byte{0: candidate("a", "b", "c"), 2: candidate("a", "b", "c", "d", "e")}
	g := newOrderGroup(t, 3, cands, 0, 1, 2)
	g.install(1, 0, 1, 2)
	from, msgs := g.outbox()
	if len(msgs) != 3 {
		t.Fatalf("%d messages after the founding view, want 3 announcements", len(msgs))
	}
	g.deliver(from, msgs)
	from, msgs = g.outbox()
	if len(msgs) < 2 || slices.ContainsFunc(from, func(m frame.MemberID) bool { return m != 2 }) {
		t.Fatalf("after the announcements %v sent %d messages; want member 2's snapshot in chunks", from, len(msgs))
	}
	held := AppendRequest([]byte{msgRequest}, Request{Client: 1, Seq: 6, Op: Op{Kind: OpPut, Key: "f", Value: []byte("f")}})
	g.deliver([]frame.MemberID{1}, [][]byte{held})
	for m := range g.nodes {
		if g.nodes[m].Ready() {
			t.Fatalf("member %d serves before the snapshot is complete", m)
		}
	}
	g.deliver(from, msgs)
	want := NewReplica(NewStore(), 0)
	want.Restore(cands[2])
	if _, fresh := want.Execute(1, 6, AppendOp(nil, Op{Kind: OpPut, Key: "f", Value: []byte("f")})); !fresh {
		t.Fatal("the held put (the candidate's session, its next request) is not executed")
	}
	for _, m := range []frame.MemberID{0, 1, 2} {
		if got := g.state(m); got != string(want.Snapshot()) {
			t.Errorf("member %d's state %q, want %q (candidate of member 2, then the held put)", m, got, want.Snapshot())
		}
	}
	wantRestored := map[frame.MemberID][]string{0: {"applied 5 ordered 6"}, 1: {"applied 5 ordered 6"}}
	if fmt.Sprint(g.restored) != fmt.Sprint(wantRestored) {
		t.Errorf("OnRestore calls %v, want %v (none at member 2: its own state)", g.restored, wantRestored)
	}
	if c := g.nodes[1].Candidate(); string(c) != string(want.Snapshot()) {
		t.Errorf("member 1's Candidate after the re-forming is not its state")
	}
	// A member that joins later gets a snapshot as usual.
	g.nodes[3], _ = NewNode(NodeConfig{MaxMessage: 40, Replicas: 3})
	g.install(2, 0, 1, 2, 3)
	g.pump()
	if g.state(3) != string(want.Snapshot()) {
		t.Errorf("a joiner after the re-forming: state %q", g.state(3))
	}
}

// Without any candidate the replicas start empty once every one has
// announced; equal candidates go to the lowest id.
func TestReformEmptyAndTies(t *testing.T) {
	g := newOrderGroup(t, 2, nil, 4, 7)
	g.install(1, 4, 7)
	g.pump()
	empty := string(NewReplica(NewStore(), 0).Snapshot())
	if g.state(4) != empty || g.state(7) != empty || len(g.restored) != 0 {
		t.Fatalf("no candidates: states %q %q, restored %v; want both empty, no restore", g.state(4), g.state(7), g.restored)
	}

	c := candidate("x")
	g = newOrderGroup(t, 2, map[frame.MemberID][]byte{4: c, 7: c}, 4, 7)
	g.install(3, 4, 7)
	from, msgs := g.outbox()
	g.deliver(from, msgs)
	if from, _ = g.outbox(); len(from) == 0 || from[0] != 4 {
		t.Fatalf("equal candidates: snapshot from %v, want member 4 (the lower id)", from)
	}
}

// A view with fewer members than replicas decides nothing (a missing
// replica may hold the most advanced state); the next view with all of
// them does. An announcement of an earlier view counts for nothing.
func TestReformWaitsForEveryReplica(t *testing.T) {
	g := newOrderGroup(t, 3, map[frame.MemberID][]byte{1: candidate("a")}, 0, 1, 2)
	g.install(1, 0, 1)
	g.pump()
	if g.nodes[0].Ready() || g.nodes[1].Ready() {
		t.Fatal("a view of 2 of 3 replicas re-formed the state")
	}
	g.install(2, 0, 1, 2)
	from, msgs := g.outbox()
	late := binary32Announce(1)
	g.deliver(append([]frame.MemberID{2}, from[:2]...), append([][]byte{late}, msgs[:2]...))
	if from, _ := g.outbox(); len(from) != 0 {
		t.Fatalf("an announcement of view 1 counted in view 2: %v sent", from)
	}
	g.deliver(from[2:], msgs[2:])
	g.pump()
	for _, m := range []frame.MemberID{0, 1, 2} {
		if g.state(m) != string(candidate("a")) {
			t.Errorf("member %d's state %q, want member 1's candidate", m, g.state(m))
		}
	}
}

// binary32Announce is an announcement of view v without a candidate.
func binary32Announce(v uint32) []byte {
	b := []byte{msgAnnounce, byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v), 0}
	return append(b, make([]byte, 16)...)
}

// A candidate that does not decode is refused with the field named.
func TestNodeCandidateErrors(t *testing.T) {
	_, err := NewNode(NodeConfig{MaxMessage: 40, Candidate: []byte{0, 0, 1}})
	if err == nil || err.Error() != "kv: NodeConfig.Candidate: kv: malformed candidate: field applied at offset 0: 3 bytes left, want 8" {
		t.Fatalf("NewNode with a 3-byte candidate: %v", err)
	}
}
