package seq

import (
	"testing"

	"github.com/rbcast/rbcast/frame"
)

// The all-held cursor (held.go): a sender learns when every live member
// holds its messages, which is later than their delivery under
// SafeMajority (a majority suffices there).
func TestAllHeldWaitsForEveryMember(t *testing.T) {
	g := newGroup(t, 3, func(c *Config) { c.Resilience = SafeMajority; c.Method = Method1 })
	slow := func(from, to int, o out) bool { return to == 2 } // member 2 hears nothing
	g.propose(1, "everyone")
	if st := g.cores[1].Counters(); st.NotHeldByAll != 1 {
		t.Fatalf("before sending: NotHeldByAll %d, want 1", st.NotHeldByAll)
	}
	g.pump(slow)
	if got := g.delivered(1); got != "1000:1/1=everyone" {
		t.Fatalf("sender delivered %q (a majority, members 0 and 1, holds it)", got)
	}
	if st := g.cores[1].Counters(); st.NotHeldByAll != 1 || st.AllHeld != 1000 {
		t.Fatalf("member 2 lacks global 1000, but the sender has NotHeldByAll %d, AllHeld %d; want 1 and 1000", st.NotHeldByAll, st.AllHeld)
	}
	// Member 2 gets it (the sequencer's heartbeat reveals the tail, it
	// asks, it reports its received cursor); the sequencer announces the
	// new cursor, which reaches the end of the stream, at once
	// (TestAllHeldAnnouncedAtOnceAtTheEnd).
	g.run(t0.Add(DefaultHeartbeatInterval+10*DefaultNackTimeout), nil)
	for i := range 3 {
		if st := g.cores[i].Counters(); st.AllHeld != 1001 || st.Received != 1001 {
			t.Fatalf("member %d: AllHeld %d, Received %d; want 1001 and 1001", i, st.AllHeld, st.Received)
		}
	}
	if st := g.cores[1].Counters(); st.NotHeldByAll != 0 {
		t.Fatalf("sender: NotHeldByAll %d once every member holds its message, want 0", st.NotHeldByAll)
	}
}

// A crashed member holds the cursor back until the sequencer removes it;
// then the cursor reaches the end and the sender's count drops to 0.
func TestAllHeldAfterMemberCrash(t *testing.T) {
	g := newGroup(t, 3, func(c *Config) { c.Resilience = SafeMajority; c.Method = Method1 })
	dead := func(from, to int, o out) bool { return to == 2 || from == 2 }
	g.propose(1, "a")
	g.propose(1, "b")
	g.run(t0.Add(DefaultFailureTimeout/2), dead)
	if st := g.cores[1].Counters(); st.NotHeldByAll != 2 {
		t.Fatalf("member 2 silent: NotHeldByAll %d, want 2 (%+v)", st.NotHeldByAll, st)
	}
	g.run(t0.Add(DefaultFailureTimeout+DefaultHeartbeatInterval), dead)
	if st := g.cores[0].Counters(); st.MembersFailed != 1 {
		t.Fatalf("sequencer: MembersFailed %d, want 1", st.MembersFailed)
	}
	st := g.cores[1].Counters()
	if st.NotHeldByAll != 0 || st.AllHeld != st.Received {
		t.Fatalf("after member 2's removal: NotHeldByAll %d, AllHeld %d, Received %d; want 0 and AllHeld = Received", st.NotHeldByAll, st.AllHeld, st.Received)
	}
}

// Under SafeSequencer members report their received cursor only with the
// heartbeat: once the group is quiet the sequencer asks for it (one
// status request with ACK_REQUEST per growth of the stream), so a sender
// learns within a few NackTimeouts, not a heartbeat.
func TestAllHeldSafeSequencerAsks(t *testing.T) {
	g := newGroup(t, 3, func(c *Config) { c.Method = Method1 })
	g.propose(2, "quick")
	g.pump(nil)
	if st := g.cores[2].Counters(); st.NotHeldByAll != 1 {
		t.Fatalf("at once: NotHeldByAll %d, want 1 (the others have not reported)", st.NotHeldByAll)
	}
	g.advance(t0.Add(DefaultNackTimeout))
	ask := g.ready(0)
	only(t, ask, frame.SeqStatusRequest)
	if ask[0].v.Flags()&frame.FlagAckRequest == 0 {
		t.Fatalf("the held ask %v has no ACK_REQUEST", ask[0])
	}
	for _, j := range []int{1, 2} {
		g.to(j, ask[0])
	}
	g.pump(nil)
	g.run(t0.Add(3*DefaultNackTimeout), nil)
	if st := g.cores[2].Counters(); st.NotHeldByAll != 0 || st.AllHeld != 1001 {
		t.Fatalf("after the ask: NotHeldByAll %d, AllHeld %d; want 0 and 1001", st.NotHeldByAll, st.AllHeld)
	}
	// Quiet from now on: no more asks until the stream grows.
	st0 := g.cores[0].Counters().StatusRequests
	g.run(t0.Add(DefaultHeartbeatInterval/2), nil)
	if n := g.cores[0].Counters().StatusRequests - st0; n != 0 {
		t.Fatalf("%d more status requests in a quiet group before the heartbeat, want 0", n)
	}
}

// Once the cursor reaches the end of the numbered stream (every live
// member holds everything), the sequencer announces it at once, not
// NackTimeout after its last broadcast: a sender waiting for it (rbcastd
// send) does not pay that delay. Here member 1's report moves the safe
// cursor (announced), member 2's, in the sequencer's next Ready, the
// all-held cursor to the end.
func TestAllHeldAnnouncedAtOnceAtTheEnd(t *testing.T) {
	g := newGroup(t, 3, func(c *Config) { c.Resilience = SafeMajority; c.Method = Method1 })
	g.propose(1, "everyone")
	step := func(from int, to ...int) []out {
		outs := g.ready(from)
		for _, o := range outs {
			for _, j := range to {
				if err := g.to(j, o); err != nil {
					t.Fatalf("%v to member %d: %v", o, j, err)
				}
			}
		}
		return outs
	}
	step(1, 0)    // the request
	step(0, 1, 2) // SeqData 1000
	step(1, 0)    // member 1 holds it: the safe cursor moves
	step(0, 1, 2)
	r2 := step(2, 0) // member 2 holds it: every live member does
	if len(r2) == 0 {
		t.Fatal("member 2 sent no report")
	}
	last := step(0, 1, 2)
	var held []uint32
	for _, o := range last {
		if o.v.Type() == frame.SeqStatusRequest {
			held = append(held, o.v.StatusHeld())
		}
	}
	if len(held) != 1 || held[0] != 1001 {
		t.Fatalf("the sequencer's Ready after the last report announced the all-held cursor %v, want [1001] at once", held)
	}
	if st := g.cores[1].Counters(); st.AllHeld != 1001 || st.NotHeldByAll != 0 {
		t.Fatalf("sender: AllHeld %d, NotHeldByAll %d at the same instant; want 1001 and 0", st.AllHeld, st.NotHeldByAll)
	}
}
