package seq

import (
	"fmt"
	"strings"
	"testing"

	"github.com/rbcast/rbcast/frame"
)

// changes lists core i's MemberFailed/MemberReturned events as
// "kind member@last".
func (g *group) changes(i int) string {
	var s []string
	for _, e := range g.evs[i] {
		if e.Kind == MemberFailed || e.Kind == MemberReturned {
			s = append(s, fmt.Sprintf("%v %d@%d", e.Kind, e.Member, e.Last))
		}
	}
	return strings.Join(s, ", ")
}

// The removal's SeqMember frame is lost at member 1: the status request
// that follows reveals the tail, member 1 asks for it and reports the
// removal at its place, between the message before and the one after.
func TestRemovalAnnouncementLost(t *testing.T) {
	g := newGroup(t, 4, func(c *Config) { c.Method = Method1 })
	g.propose(1, "before")
	g.pump(nil)
	lost := 0
	dead := func(from, to int, o out) bool {
		if o.v.Type() == frame.SeqMember && to == 1 && !o.v.Retransmission() {
			lost++
			return true
		}
		return from == 3 || to == 3
	}
	start := g.now
	g.run(start.Add(DefaultFailureTimeout+DefaultHeartbeatInterval/2), dead)
	g.propose(2, "after")
	g.run(g.now.Add(DefaultHeartbeatInterval+10*Millisecond), dead)
	if lost != 1 {
		t.Fatalf("%d SeqMember frames dropped, want 1", lost)
	}
	for i := range 3 {
		if got, want := g.changes(i), "failed 3@1000"; got != want {
			t.Errorf("member %d: changes %q, want %q", i, got, want)
		}
		if got, want := g.delivered(i), "1000:1/1=before 1002:2/1=after"; got != want {
			t.Errorf("member %d delivered %q, want %q", i, got, want)
		}
		if ms := g.cores[i].MemberStates(); ms[3].Live {
			t.Errorf("member %d shows member 3 live", i)
		}
		if d := Duration(g.evs[i][0].At - start); d > DefaultFailureTimeout+DefaultHeartbeatInterval+20*Millisecond {
			t.Errorf("member %d learnt of the removal %v after the last frame of member 3", i, d)
		}
	}
	if st := g.cores[1].Counters(); st.RetransmitsAsked == 0 {
		t.Fatalf("member 1 never asked for the lost announcement: %+v", st)
	}
}

// The sequencer removes member 3 and crashes before anyone holds the
// announcement: the new sequencer finds member 3 did not vote and
// announces it again, with the old sequencer; each survivor reports each
// once, at the same places.
func TestRemovalLostWithTheSequencer(t *testing.T) {
	g := newGroup(t, 4, func(c *Config) { c.Method = Method1; c.Quorum = 1 })
	seqDown := false
	drop := func(from, to int, o out) bool {
		if from == 3 || to == 3 {
			return true
		}
		if o.v.Type() == frame.SeqMember && from == 0 {
			seqDown = true // the announcement, then nothing more
		}
		return seqDown && (from == 0 || to == 0)
	}
	g.run(t0.Add(DefaultFailureTimeout+DefaultHeartbeatInterval/2), drop)
	if !seqDown || kinds(g.evs[0]) != "failed" {
		t.Fatalf("the sequencer did not remove member 3: %v", g.evs[0])
	}
	g.run(g.now.Add(3*DefaultFailureTimeout), drop)
	for _, i := range []int{1, 2} {
		if got, want := g.changes(i), "failed 0@999, failed 3@1000"; got != want {
			t.Errorf("member %d: changes %q, want %q", i, got, want)
		}
		ms := g.cores[i].MemberStates()
		if ms[0].Live || ms[3].Live || !ms[1].Live || !ms[2].Live {
			t.Errorf("member %d: %+v", i, ms)
		}
	}
}

// The announcement reached member 2 before the sequencer crashed: the
// election's agreed prefix carries it (member 2's vote holds it), and the
// new sequencer announces only the old sequencer: member 3's removal is
// reported once, at the same place at both survivors.
func TestRemovalCarriedByTheElection(t *testing.T) {
	g := newGroup(t, 4, func(c *Config) { c.Method = Method1; c.Quorum = 1 })
	seqDown := false
	drop := func(from, to int, o out) bool {
		if from == 3 || to == 3 {
			return true
		}
		if o.v.Type() == frame.SeqMember && from == 0 && !o.v.Retransmission() && o.v.Seq() == 1000 {
			seqDown = true
			return to != 2 // only member 2 gets it
		}
		return seqDown && (from == 0 || to == 0)
	}
	g.run(t0.Add(DefaultFailureTimeout+DefaultHeartbeatInterval/2), drop)
	g.run(g.now.Add(3*DefaultFailureTimeout), drop)
	for _, i := range []int{1, 2} {
		if got, want := g.changes(i), "failed 3@999, failed 0@1000"; got != want {
			t.Errorf("member %d: changes %q, want %q", i, got, want)
		}
	}
}

// cutThenSequencerDown loses member cut's frames to the sequencer
// (member 0), so that it removes cut while cut still hears the stream;
// once *down, the sequencer is crashed (nothing to or from it).
func cutThenSequencerDown(cut int, down *bool) func(from, to int, o out) bool {
	return func(from, to int, _ out) bool {
		if *down {
			return from == 0 || to == 0
		}
		return from == cut && to == 0
	}
}

// Member 3 is removed while alive (its frames to the sequencer are lost)
// and learns it; then the sequencer crashes and member 3 votes: the new
// sequencer takes it back, numbered in the stream (MemberReturned at
// every survivor, after the removal and before the old sequencer's), and
// member 3 delivers the same sequence of changes (silently for its own).
func TestRemovedVoterReadmittedByTheElection(t *testing.T) {
	g := newGroup(t, 4, func(c *Config) { c.Method = Method1 })
	seqDown := false
	drop := cutThenSequencerDown(3, &seqDown)
	g.run(t0.Add(DefaultFailureTimeout+DefaultHeartbeatInterval/2), drop)
	for i := range 4 {
		if got, want := g.changes(i), "failed 3@999"; i != 3 && got != want {
			t.Fatalf("member %d: changes %q, want %q", i, got, want)
		}
	}
	if st := g.cores[3].Counters(); st.Next != 1001 || st.Halted {
		t.Fatalf("member 3 (removed, still hearing): %+v", st)
	}
	seqDown = true
	g.run(g.now.Add(3*DefaultFailureTimeout), drop)
	for _, i := range []int{1, 2} {
		if got, want := g.changes(i), "failed 3@999, failed 0@1000, returned 3@1001"; got != want {
			t.Errorf("member %d: changes %q, want %q", i, got, want)
		}
		if ms := g.cores[i].MemberStates(); ms[0].Live || !ms[3].Live {
			t.Errorf("member %d: %+v", i, ms)
		}
	}
	if got, want := g.changes(3), "failed 0@1000"; got != want {
		t.Errorf("member 3: changes %q, want %q", got, want)
	}
	g.propose(3, "back")
	g.run(g.now.Add(DefaultHeartbeatInterval), drop)
	for _, i := range []int{1, 2, 3} {
		if got, want := g.delivered(i), "1003:3/1=back"; got != want {
			t.Errorf("member %d delivered %q, want %q", i, got, want)
		}
	}
	if st := g.cores[3].Counters(); st.Halted || st.NotHeldByAll != 0 || st.AllHeld != 1004 || st.MembersReturned != 0 {
		t.Errorf("member 3 after its message: Halted %v, NotHeldByAll %d, AllHeld %d (want 1004), MembersReturned %d (its own: not reported)",
			st.Halted, st.NotHeldByAll, st.AllHeld, st.MembersReturned)
	}
}

// As above, but the removed member is the one elected (the lowest live):
// it numbers its own readmission, so that the followers, which delivered
// its removal, do not list their sequencer dead.
func TestRemovedCandidateReadmitsItself(t *testing.T) {
	g := newGroup(t, 4, func(c *Config) { c.Method = Method1 })
	seqDown := false
	drop := cutThenSequencerDown(1, &seqDown)
	g.run(t0.Add(DefaultFailureTimeout+DefaultHeartbeatInterval/2), drop)
	for _, i := range []int{2, 3} {
		if got, want := g.changes(i), "failed 1@999"; got != want {
			t.Fatalf("member %d: changes %q, want %q", i, got, want)
		}
	}
	seqDown = true
	g.run(g.now.Add(3*DefaultFailureTimeout), drop)
	if g.cores[1].role != sequencer {
		t.Fatalf("member 1 is not the sequencer: %+v", g.cores[1].Counters())
	}
	for _, i := range []int{2, 3} {
		if got, want := g.changes(i), "failed 1@999, failed 0@1000, returned 1@1001"; got != want {
			t.Errorf("member %d: changes %q, want %q", i, got, want)
		}
		if ms := g.cores[i].MemberStates(); ms[0].Live || !ms[1].Live || !ms[1].Sequencer {
			t.Errorf("member %d: %+v", i, ms)
		}
	}
	if got, want := g.changes(1), "failed 0@1000"; got != want {
		t.Errorf("member 1: changes %q, want %q", got, want)
	}
	g.propose(1, "seq")
	g.propose(2, "two")
	g.run(g.now.Add(DefaultHeartbeatInterval), drop)
	for _, i := range []int{1, 2, 3} {
		if got, want := g.delivered(i), "1003:1/1=seq 1004:2/1=two"; got != want {
			t.Errorf("member %d delivered %q, want %q", i, got, want)
		}
	}
}
