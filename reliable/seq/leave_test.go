package seq

import (
	"strings"
	"testing"

	"github.com/rbcast/rbcast/frame"
)

func kinds(evs []Event) string {
	var s []string
	for _, e := range evs {
		s = append(s, e.Kind.String())
	}
	return strings.Join(s, ",")
}

// An ordinary member leaves after its message is delivered back; then the
// sequencer leaves: it hands off to member 2, which the two left elect
// within a few ElectionRetry (not FailureTimeout), with the departing
// sequencer's vote; they go on without it. Nobody reports the sequencer
// failed.
func TestLeave(t *testing.T) {
	g := newGroup(t, 4, nil)
	g.propose(1, "a")
	g.cores[1].Leave(g.now)
	if err := g.cores[1].Propose(g.now, []byte("late")); err != ErrLeaving {
		t.Fatalf("Propose after Leave: %v, want ErrLeaving", err)
	}
	g.run(g.now.Add(20*Millisecond), nil)
	if !g.cores[1].Left() || kinds(g.evs[1]) != "self left" {
		t.Fatalf("member 1: left %v, events %v", g.cores[1].Left(), g.evs[1])
	}
	for _, i := range []int{0, 2, 3} {
		if got := g.delivered(i); got != "1000:1/1=a" {
			t.Errorf("member %d delivered %q", i, got)
		}
		if kinds(g.evs[i]) != "left" {
			t.Errorf("member %d: events %v, want member 1 left", i, g.evs[i])
		}
	}

	g.propose(0, "b")
	g.cores[0].Leave(g.now)
	start := g.now
	g.run(g.now.Add(200*Millisecond), nil)
	if !g.cores[0].Left() || kinds(g.evs[0]) != "left,self left" {
		t.Fatalf("the sequencer: left %v, events %v", g.cores[0].Left(), g.evs[0])
	}
	for _, i := range []int{2, 3} {
		if got := g.delivered(i); got != "1000:1/1=a 1001:0/1=b" {
			t.Errorf("member %d delivered %q", i, got)
		}
		if k := kinds(g.evs[i]); k != "left,sequencer changed,left" || g.evs[i][2].Member != 0 {
			t.Errorf("member %d: events %v, want member 1 left, sequencer changed, member 0 left", i, g.evs[i])
		}
		if c := g.cores[i]; c.Sequencer() != 2 {
			t.Errorf("member %d follows %d, want 2", i, c.Sequencer())
		}
	}
	if d := Duration(g.evs[2][1].At - start); d > 10*DefaultElectionRetry {
		t.Errorf("the election after the sequencer's Leave took %v", d)
	}
	g.propose(3, "c")
	g.run(g.now.Add(20*Millisecond), nil)
	for _, i := range []int{2, 3} {
		if got := g.delivered(i); got != "1000:1/1=a 1001:0/1=b 1002:3/1=c" {
			t.Errorf("after the handover, member %d delivered %q", i, got)
		}
	}
}

// The bug of issue 22's Orca runs: member 1 leaves and member 2 misses
// every one of its Leave frames; then the sequencer leaves. Member 2
// counts members 1 and 2 as the group: a majority is both. When the
// sequencer simply left, member 2 waited for member 1's vote in an
// election that could never complete (and its Close never finished).
// The sequencer now hands off and votes: member 2 has two votes of three,
// waits FailureTimeout for member 1 as for any silent member, takes over,
// removes member 1 (it did not vote), and carries on alone.
func TestLeaveMissedThenSequencerLeaves(t *testing.T) {
	g := newGroup(t, 3, nil)
	g.propose(1, "a")
	g.cores[1].Leave(g.now)
	missLeave := func(from, to int, o out) bool { return from == 1 && to == 2 && o.v.Type() == frame.Leave }
	g.run(g.now.Add(30*Millisecond), missLeave)
	if !g.cores[1].Left() || kinds(g.evs[0]) != "left" || kinds(g.evs[2]) != "" {
		t.Fatalf("member 1 left %v; events at the sequencer %v, at member 2 %v", g.cores[1].Left(), g.evs[0], g.evs[2])
	}
	g.cores[0].Leave(g.now)
	// Member 2 votes for member 1 until it suspects it, then for itself,
	// and waits for it FailureTimeout from then (a candidate's death
	// starts the wait afresh).
	g.run(g.now.Add(2*DefaultFailureTimeout+200*Millisecond), nil)
	if !g.cores[0].Left() {
		t.Fatal("the sequencer did not leave")
	}
	c := g.cores[2]
	if !c.IsSequencer() || kinds(g.evs[2]) != "sequencer changed,failed,left" {
		t.Fatalf("member 2: sequencer %v electing %v, events %v; want it elected, member 1 failed, member 0 left", c.IsSequencer(), c.Counters().Electing, g.evs[2])
	}
	if ev := g.evs[2][1]; ev.Member != 1 || !strings.Contains(ev.Reason, "did not vote") {
		t.Fatalf("member 2: %v, want member 1 removed as a non-voter", ev)
	}
	g.propose(2, "alone")
	g.run(g.now.Add(10*Millisecond), nil)
	if got := g.delivered(2); got != "1000:1/1=a 1002:2/1=alone" {
		t.Fatalf("member 2 delivered %q", got)
	}
}

// A leaving member whose messages are delivered back does not wait for an
// election that follows its sequencer's clean departure: the sequencer
// waited until every live member delivered everything it numbered. Here
// member 2 still waits for the all-held cursor (its announcement lost)
// when the sequencer hands off to member 1: member 2 leaves at once, and
// member 1 takes over with the sequencer's vote and its own.
func TestLeaveDuringHandOff(t *testing.T) {
	g := newGroup(t, 3, nil)
	g.propose(2, "x")
	noHeld := func(from, to int, o out) bool {
		return from == 0 && to == 2 && o.v.Type() == frame.SeqStatusRequest
	}
	g.run(g.now.Add(DefaultHeartbeatInterval+20*Millisecond), noHeld)
	if got := g.delivered(2); got != "1000:2/1=x" || g.cores[2].Counters().NotHeldByAll != 1 || g.cores[0].Counters().AllHeld != 1001 {
		t.Fatalf("member 2 delivered %q, %+v; the sequencer %+v", got, g.cores[2].Counters(), g.cores[0].Counters())
	}
	g.cores[2].Leave(g.now)
	g.cores[0].Leave(g.now)
	g.run(g.now.Add(10*Millisecond), noHeld)
	for i, c := range g.cores {
		if i != 1 && !c.Left() {
			t.Errorf("member %d did not leave: %+v", i, c.Counters())
		}
	}
	g.run(g.now.Add(100*Millisecond), nil)
	if c := g.cores[1]; !c.IsSequencer() || kinds(g.evs[1]) != "sequencer changed,left,left" {
		t.Fatalf("member 1: sequencer %v, events %v", c.IsSequencer(), g.evs[1])
	}
}

// A member the sequencer removed for a silence it survived is taken back
// when it is heard again and what it lacks is still in the history.
func TestRemovedMemberReturns(t *testing.T) {
	g := newGroup(t, 3, nil)
	cut := func(from, to int, o out) bool { return from == 2 || to == 2 }
	g.run(g.now.Add(DefaultFailureTimeout+100*Millisecond), cut)
	if k := kinds(g.evs[0]); k != "failed" {
		t.Fatalf("sequencer events %v, want member 2 failed", g.evs[0])
	}
	g.propose(2, "back")
	g.run(g.now.Add(100*Millisecond), nil)
	if k := kinds(g.evs[0]); k != "failed,returned" {
		t.Fatalf("sequencer events %v, want member 2 returned", g.evs[0])
	}
	// Both changes are in the stream (1000 and 1001): member 1 reports
	// them too; member 2 delivers them without reporting itself.
	if k := kinds(g.evs[1]); k != "failed,returned" || g.evs[1][1].Last != 1000 || !g.cores[1].MemberStates()[2].Live {
		t.Fatalf("member 1 events %v, members %+v", g.evs[1], g.cores[1].MemberStates())
	}
	if k := kinds(g.evs[2]); strings.Contains(k, "member") {
		t.Fatalf("member 2 reported its own removal: %v", g.evs[2])
	}
	for i := range 3 {
		if got := g.delivered(i); got != "1002:2/1=back" {
			t.Errorf("member %d delivered %q", i, got)
		}
	}
	if g.cores[2].Halted() {
		t.Fatal("member 2 halted")
	}
}

// A removed member that fell more than History behind halts when it hears
// how far the sequencer numbers.
func TestRemovedMemberBeyondHistoryHalts(t *testing.T) {
	g := newGroup(t, 3, func(c *Config) { c.History = 8 })
	cut := func(from, to int, o out) bool { return from == 2 || to == 2 }
	g.run(g.now.Add(DefaultFailureTimeout+100*Millisecond), cut)
	for i := range 20 {
		g.propose(1, string(rune('a'+i)))
		g.run(g.now.Add(Millisecond), cut)
	}
	g.run(g.now.Add(DefaultHeartbeatInterval+10*Millisecond), nil)
	// Cut off, it also suspected the sequencer and called an election
	// nobody answered; back, it follows the sequencer again and halts.
	last := g.evs[2][len(g.evs[2])-1]
	if !g.cores[2].Halted() || kinds(g.evs[2]) != "sequencer failed,self removed" || !strings.Contains(last.Reason, "it removed us") {
		t.Fatalf("member 2: halted %v, events %v", g.cores[2].Halted(), g.evs[2])
	}
	if g.cores[0].Halted() || g.cores[1].Halted() {
		t.Fatal("a member that was never removed halted")
	}
}

// The sequencer misses every Leave of member 2 and removes it as silent
// past FailureTimeout, in the stream; member 1, which got the Leave and
// reported MemberLeft, delivers the removal without reporting the member
// a second time.
func TestLeftMemberNotReportedFailed(t *testing.T) {
	g := newGroup(t, 3, nil)
	g.propose(2, "a")
	g.run(g.now.Add(2*Millisecond), nil)
	g.cores[2].Leave(g.now)
	missLeave := func(from, to int, o out) bool { return from == 2 && to == 0 && o.v.Type() == frame.Leave }
	g.run(g.now.Add(DefaultFailureTimeout+200*Millisecond), missLeave)
	if !g.cores[2].Left() {
		t.Fatal("member 2 did not leave")
	}
	if k := kinds(g.evs[0]); k != "failed" {
		t.Fatalf("sequencer events %v, want member 2 failed", g.evs[0])
	}
	if k := kinds(g.evs[1]); k != "left" {
		t.Fatalf("member 1 events %v, want only member 2 left", g.evs[1])
	}
	if g.cores[1].Counters().Next != g.cores[0].Counters().Next {
		t.Fatalf("member 1 delivered up to %d, the sequencer %d", g.cores[1].Counters().Next, g.cores[0].Counters().Next)
	}
}

// A member leaves only once every live member holds its messages (the
// all-held cursor passed them), not as soon as they are delivered back
// to it: else a sequencer crash right after could lose them with the
// departure (nobody left in the election held them) under SafeSequencer.
func TestLeaveWaitsUntilHeldByAll(t *testing.T) {
	g := newGroup(t, 3, func(c *Config) { c.Method = Method1 })
	g.propose(1, "a")
	g.cores[1].Leave(g.now)
	lost := func(from, to int, o out) bool { return from == 0 && to == 2 }
	g.run(g.now.Add(20*Millisecond), lost)
	if got := g.delivered(1); got != "1000:1/1=a" {
		t.Fatalf("member 1 delivered %q", got)
	}
	if g.cores[1].Left() {
		t.Fatal("member 1 left while member 2 did not hold its message")
	}
	// Member 2 learns of the gap from the next heartbeat and repairs it;
	// under SafeSequencer it reports what it holds with its own next
	// heartbeat, and the sequencer announces the all-held cursor then.
	g.run(g.now.Add(2*DefaultHeartbeatInterval+20*Millisecond), nil)
	if got := g.delivered(2); got != "1000:1/1=a" {
		t.Fatalf("member 2 delivered %q", got)
	}
	if !g.cores[1].Left() {
		t.Fatalf("member 1 did not leave once every member held its message: %+v", g.cores[1].Counters())
	}
}

// A Leave that overtakes the leaver's last message at member 2 (held there
// but not yet delivered: the sequencer's announcements of the safe point
// lost on the way, under SafeMajority) does not make member 2 report
// MemberLeft before it delivered it: the event waits until member 2 has
// delivered up to the leaver's cursor. (It used to be reported at once,
// and the dsm layer, taking it as the end of that member's stream, lost
// the updates delivered after it.)
func TestMemberLeftAfterItsMessages(t *testing.T) {
	g := newGroup(t, 3, func(c *Config) { c.Resilience = SafeMajority })
	g.propose(1, "a")
	g.run(g.now.Add(Millisecond), nil)
	g.propose(1, "b")
	g.cores[1].Leave(g.now)
	lose := func(from, to int, o out) bool {
		return from == 0 && to == 2 && o.v.Type() == frame.SeqStatusRequest
	}
	g.run(g.now.Add(20*Millisecond), lose)
	if !g.cores[1].Left() {
		t.Fatal("member 1 did not leave")
	}
	if k := kinds(g.evs[2]); k != "" || g.delivered(2) != "1000:1/1=a" || g.cores[2].Counters().Received != 1002 {
		t.Fatalf("member 2 before the announcement: delivered %q, events %v, %+v; want b held, not delivered, and no event yet", g.delivered(2), g.evs[2], g.cores[2].Counters())
	}
	if k := kinds(g.evs[0]); k != "left" {
		t.Fatalf("sequencer events %v, want left", g.evs[0])
	}
	g.run(g.now.Add(DefaultHeartbeatInterval+20*Millisecond), nil)
	if got := g.delivered(2); got != "1000:1/1=a 1001:1/2=b" {
		t.Fatalf("member 2 delivered %q", got)
	}
	if k := kinds(g.evs[2]); k != "left" || g.evs[2][0].Last != 1001 {
		t.Fatalf("member 2 events %v, want member 1 left with last 1001", g.evs[2])
	}
}

// A member that missed the epoch in which the departing sequencer was
// elected still counts it out as a candidate: only a member that hands
// off votes for a higher id than its own. Member 0 hands off to member 1
// (epoch 2), but member 3 misses every Elected of epoch 2 and stays in
// that election, following member 0; then member 1 hands off to member 2
// (epoch 3). Member 3 took member 1 for a candidate and voted for it in
// epoch 3 for as long as member 1's election frames came, and member 2
// waited for member 3's vote for ever.
func TestHandOffSeenFromAnOlderEpoch(t *testing.T) {
	g := newGroup(t, 4, nil)
	noElected2 := func(from, to int, o out) bool {
		return to == 3 && o.v.Type() == frame.SeqElection && o.v.Election().Phase == frame.ElectionElected && o.v.Election().Epoch == 2
	}
	g.cores[0].Leave(g.now)
	g.run(g.now.Add(20*Millisecond), noElected2)
	if !g.cores[0].Left() || !g.cores[1].IsSequencer() || g.cores[1].Counters().Epoch != 2 {
		t.Fatalf("member 0 left %v; member 1 sequencer %v, %+v", g.cores[0].Left(), g.cores[1].IsSequencer(), g.cores[1].Counters())
	}
	if c := g.cores[3]; !c.Counters().Electing || c.Sequencer() != 0 {
		t.Fatalf("member 3: electing %v, follows %d; want it still in the election of epoch 2", c.Counters().Electing, c.Sequencer())
	}
	g.cores[1].Leave(g.now)
	g.run(g.now.Add(200*Millisecond), noElected2)
	if !g.cores[1].Left() || !g.cores[2].IsSequencer() || g.cores[2].Counters().Epoch != 3 {
		t.Fatalf("member 1 left %v; member 2 sequencer %v, %+v", g.cores[1].Left(), g.cores[2].IsSequencer(), g.cores[2].Counters())
	}
	if c := g.cores[3]; c.Halted() || c.Sequencer() != 2 || kinds(g.evs[3]) != "left,sequencer changed,left" {
		t.Fatalf("member 3: halted %v, follows %d, events %v", c.Halted(), c.Sequencer(), g.evs[3])
	}
	g.propose(3, "x")
	g.run(g.now.Add(10*Millisecond), nil)
	for _, i := range []int{2, 3} {
		if got := g.delivered(i); got != "1000:3/1=x" {
			t.Errorf("member %d delivered %q", i, got)
		}
	}
}

// The last two members leave and the sequencer misses all six Leave
// frames, then leaves too. It removes both as silent after FailureTimeout,
// in the stream; alone under the majority quorum it cannot deliver those
// removals (it may be on the minority side of a partition), so it must
// not wait for its own delivery of them: nobody else is live to deliver
// what it numbered. It used to ask for status for ever, its Close never
// returning (seed 11510 of the simulation).
func TestSequencerLeavesAloneAfterMissedLeaves(t *testing.T) {
	g := newGroup(t, 3, func(c *Config) { c.Resilience = SafeMajority })
	g.propose(1, "a")
	g.propose(2, "b")
	g.run(g.now.Add(20*Millisecond), nil)
	g.cores[1].Leave(g.now)
	g.cores[2].Leave(g.now)
	missLeaves := func(from, to int, o out) bool { return to == 0 && o.v.Type() == frame.Leave }
	g.run(g.now.Add(20*Millisecond), missLeaves)
	if !g.cores[1].Left() || !g.cores[2].Left() || kinds(g.evs[0]) != "" {
		t.Fatalf("members 1 and 2 left %v %v; sequencer events %v", g.cores[1].Left(), g.cores[2].Left(), g.evs[0])
	}
	g.cores[0].Leave(g.now)
	g.run(g.now.Add(DefaultFailureTimeout+100*Millisecond), missLeaves)
	c := g.cores[0]
	if !c.Left() || kinds(g.evs[0]) != "self left" || c.Counters().MembersFailed != 0 {
		t.Fatalf("sequencer: left %v, events %v, %+v", c.Left(), g.evs[0], c.Counters())
	}
	if got := g.delivered(0); got != "1000:1/1=a 1001:2/1=b" {
		t.Fatalf("sequencer delivered %q", got)
	}
}
