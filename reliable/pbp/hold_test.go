package pbp

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/rbcast/rbcast/frame"
)

// holdPair is a sender (member 0) and a receiver (member 1) wired back to
// back in virtual time; drop says which of the sender's first
// transmissions are lost on the way.
type holdPair struct {
	t         *testing.T
	a, b      *Core
	now       Time
	drop      map[uint32]bool
	delivered []Delivery // at b, copied
	bSent     []out      // every frame b sent
	events    []Event
	// dropNacks: b's next dropNacks Nacks are lost; aDown: a crashed
	// (it neither runs nor receives); dropLeaves: b's next dropLeaves
	// Leave frames are lost.
	dropNacks  int
	aDown      bool
	dropLeaves int
}

const holdWindow = 8

func newHoldPair(t *testing.T) *holdPair {
	cfg := func(self frame.MemberID) Config {
		c := testConfig(PBP2, self, 2)
		c.Window = holdWindow
		return c
	}
	return &holdPair{t: t, a: newCore(t, cfg(0)), b: newCore(t, cfg(1)), now: t0, drop: map[uint32]bool{}}
}

// turn runs one turn of each core at p.now: its timers when due, its
// Ready's frames into the other core.
func (p *holdPair) turn() {
	t := p.t
	t.Helper()
	for _, c := range []*Core{p.a, p.b} {
		if c == p.a && p.aDown {
			continue
		}
		if d := c.Deadline(); d != 0 && d <= p.now {
			c.Tick(p.now)
		}
		rd := c.Ready()
		other := p.b
		if c == p.b {
			other = p.a
			p.bSent = append(p.bSent, decodeFrames(t, rd.Frames)...)
			for _, d := range rd.Deliveries {
				d.Data = append([]byte(nil), d.Data...)
				p.delivered = append(p.delivered, d)
			}
		}
		p.events = append(p.events, rd.Events...)
		for _, raw := range rd.Frames {
			eth, rest, err := frame.SplitEthernet(raw, frame.EtherType)
			if err != nil {
				t.Fatal(err)
			}
			v, err := frame.ParseGroup(rest, testGroup)
			if err != nil {
				t.Fatal(err)
			}
			if c == p.a && v.Type() == frame.Data && !v.Retransmission() && p.drop[v.Seq()] {
				continue
			}
			if c == p.b && p.dropLeaves > 0 && v.Type() == frame.Leave {
				p.dropLeaves--
				continue
			}
			if c == p.b && (p.aDown || v.Type() == frame.Nack && p.dropNacks > 0) {
				if !p.aDown {
					p.dropNacks--
				}
				continue
			}
			// A repeated Leave reaches a core that removed its sender; a
			// frame of a, which saw no Leave, reaches b that left.
			if err := other.Step(p.now, eth.Src(), eth.Dst(), v); err != nil && !errors.Is(err, ErrRemoved) && !errors.Is(err, ErrLeft) {
				t.Fatalf("step: %v", err)
			}
		}
		c.Advance()
	}
}

// send proposes msg at c and turns: a frame of its own (unless the
// window is full).
func (p *holdPair) send(c *Core, msg []byte) {
	p.t.Helper()
	if err := c.Propose(p.now, msg); err != nil {
		p.t.Fatal(err)
	}
	p.turn()
}

// run turns the pair every 50 µs until until.
func (p *holdPair) run(until Time) {
	for ; p.now < until; p.now = p.now.Add(50 * Microsecond) {
		p.turn()
	}
}

func (p *holdPair) nacks() int {
	n := 0
	for _, f := range p.bSent {
		if f.t == frame.Nack {
			n++
		}
	}
	return n
}

// ackOf0 is the highest acknowledgement of member 0's stream b sent.
func (p *holdPair) ackOf0() uint32 {
	a := uint32(100)
	for _, f := range p.bSent {
		if len(f.h.Acks) > 0 && frame.SeqLess(a, f.h.Acks[0]) {
			a = f.h.Acks[0]
		}
	}
	return a
}

func wantMsgs(n int) string {
	s := make([]string, n)
	for i := range s {
		s[i] = fmt.Sprintf("m%d", i)
	}
	return strings.Join(s, ",")
}

// A sender held inside the core: a window of its frames is received and
// kept, none delivered, acknowledged or asked for again, for longer than
// many nack and resend timeouts; at the release all are delivered in
// order from the window, and nothing is retransmitted.
func TestHoldFromKeepsFramesInWindow(t *testing.T) {
	p := newHoldPair(t)
	if !p.b.HoldFrom(0, t0.Add(500*Millisecond)) {
		t.Fatal("HoldFrom(0) refused")
	}
	for i := range holdWindow + 4 { // 4 more than a window: they wait at the sender
		p.send(p.a, []byte(fmt.Sprintf("m%d", i)))
	}
	p.run(t0.Add(100 * Millisecond))
	if len(p.delivered) != 0 || p.nacks() != 0 || p.ackOf0() != 100 {
		t.Fatalf("while held: %d delivered, %d Nacks, ack of 0's stream %d; want none, none, 100",
			len(p.delivered), p.nacks(), p.ackOf0())
	}
	if s := p.a.Counters(); s.DataFramesSent != holdWindow || s.Retransmitted != 0 || s.InFlight != holdWindow {
		t.Fatalf("sender while held: sent %d, retransmitted %d, in flight %d; want %d, 0, %d",
			s.DataFramesSent, s.Retransmitted, s.InFlight, holdWindow, holdWindow)
	}
	if s := p.b.Counters(); s.Buffered != holdWindow {
		t.Fatalf("receiver keeps %d frames, want the window (%d)", s.Buffered, holdWindow)
	}
	if !p.b.Holding(0) {
		t.Fatal("Holding(0) false while held")
	}
	p.b.ReleaseFrom(0)
	if d := p.b.Deadline(); d > p.now {
		t.Fatalf("Deadline after ReleaseFrom = %d, want now (%d): the release delivers at Tick", d, p.now)
	}
	p.turn()
	if got := len(p.delivered); got != holdWindow {
		t.Fatalf("the turn after the release delivered %d messages, want the window (%d)", got, holdWindow)
	}
	p.run(p.now.Add(50 * Millisecond))
	if got, want := msgs(p.delivered), wantMsgs(holdWindow+4); got != want {
		t.Fatalf("delivered %q, want %q", got, want)
	}
	if s := p.a.Counters(); s.Retransmitted != 0 || s.InFlight != 0 || p.nacks() != 0 {
		t.Fatalf("after the release: %d retransmitted, %d in flight, %d Nacks; want none", s.Retransmitted, s.InFlight, p.nacks())
	}
	if len(p.events) != 0 {
		t.Fatalf("events %v: nobody should be removed", p.events)
	}
}

// A frame lost while its sender is held is asked for at once, and again
// by the nack timer when the Nack is lost, so that the ring holds all the
// sender sent: when the sender then crashes, the release delivers all of
// it in order. (Before, nothing was asked for until the release, and a
// sender that died meanwhile left the gap, and everything behind it,
// undelivered here while a member that did not hold it had it all:
// docs/dsm.md, "When a held sender dies".) Nothing is delivered or
// acknowledged while held.
func TestHoldFromRepairsGapWhileHeld(t *testing.T) {
	for _, lostNacks := range []int{0, 1, 2} {
		t.Run(fmt.Sprintf("%d Nacks lost", lostNacks), func(t *testing.T) {
			p := newHoldPair(t)
			p.drop[102] = true // the third frame's first transmission
			p.dropNacks = lostNacks
			p.b.HoldFrom(0, t0.Add(500*Millisecond))
			for i := range holdWindow {
				p.send(p.a, []byte(fmt.Sprintf("m%d", i)))
			}
			p.run(t0.Add(100 * Millisecond))
			if len(p.delivered) != 0 {
				t.Fatalf("while held: %d delivered; want none", len(p.delivered))
			}
			if a := p.ackOf0(); a != 100 {
				t.Fatalf("while held b acknowledged member 0's stream up to %d, want 100 (the hold point)", a)
			}
			if s := p.a.Counters(); s.Retransmitted != 1 || p.nacks() != 1+lostNacks {
				t.Fatalf("while held: %d retransmitted, %d Nacks; want 1 and %d (the lost frame, asked for again after each lost Nack)", s.Retransmitted, p.nacks(), 1+lostNacks)
			}
			p.aDown = true // the sender crashes; the release delivers what it sent
			p.b.ReleaseFrom(0)
			p.turn()
			if got, want := msgs(p.delivered), wantMsgs(holdWindow); got != want {
				t.Fatalf("the turn after the release delivered %q, want %q", got, want)
			}
		})
	}
}

// A held sender removed while still held (a hold bound past the failure
// timeout: dsm's never is) has what the hold kept in order delivered
// before the removal, as without the hold: a removal drops only what
// lies beyond a gap.
func TestHoldFromRemovedDeliversKept(t *testing.T) {
	p := newHoldPair(t)
	p.drop[105] = true
	p.b.HoldFrom(0, t0.Add(100*Second))
	for i := range 7 {
		p.send(p.a, []byte(fmt.Sprintf("m%d", i)))
	}
	p.aDown = true // crashes before it answers the Nack for m5
	p.run(t0.Add(3 * Second))
	if len(p.events) != 1 || p.events[0].Kind != MemberFailed {
		t.Fatalf("events %v, want member 0 failed", p.events)
	}
	if got := msgs(p.delivered); got != "m0,m1,m2,m3,m4" {
		t.Fatalf("delivered %q, want the frames before the gap (m0..m4)", got)
	}
	if ev := p.events[0]; ev.Delivered != 105 || ev.Discarded != 1 {
		t.Fatalf("removal event: delivered up to %d, %d discarded; want 105 and 1 (m6)", ev.Delivered, ev.Discarded)
	}
}

// With nothing missing (the lost frame repaired while held), a held
// sender's nack timer waits for the release: the core is not woken for
// it, only for its heartbeat, acks or the hold's bound.
func TestHoldFromNoTimerWithoutGap(t *testing.T) {
	p := newHoldPair(t)
	p.drop[102] = true
	bound := t0.Add(500 * Millisecond)
	p.b.HoldFrom(0, bound)
	for i := range holdWindow {
		p.send(p.a, []byte(fmt.Sprintf("m%d", i)))
	}
	p.run(t0.Add(10 * Millisecond))
	if s := p.a.Counters(); s.Retransmitted != 1 {
		t.Fatalf("%d retransmitted, want 1 (the lost frame, while held)", s.Retransmitted)
	}
	p.aDown = true
	if d := p.b.Deadline(); d.Sub(p.now) <= p.b.nackCeiling() {
		t.Fatalf("b's deadline is %v from now: a nack timer with nothing missing", d.Sub(p.now))
	}
}

// A hold ends by itself at its bound (Deadline asks for the Tick), and a
// second HoldFrom before ReleaseFrom does not renew it.
func TestHoldFromEndsAtBound(t *testing.T) {
	p := newHoldPair(t)
	bound := t0.Add(20 * Millisecond)
	p.b.HoldFrom(0, bound)
	for i := range 3 {
		p.send(p.a, []byte(fmt.Sprintf("m%d", i)))
	}
	p.run(t0.Add(10 * Millisecond))
	if len(p.delivered) != 0 {
		t.Fatalf("delivered %q before the bound", msgs(p.delivered))
	}
	if p.b.HoldFrom(0, bound.Add(time1s)) != true {
		t.Fatal("a second HoldFrom refused")
	}
	if d := p.b.Deadline(); d > bound {
		t.Fatalf("Deadline %d is past the hold's bound %d", d, bound)
	}
	p.run(bound.Add(50 * Microsecond))
	if got := msgs(p.delivered); got != "m0,m1,m2" {
		t.Fatalf("at the bound delivered %q, want m0,m1,m2", got)
	}
	if p.b.Holding(0) {
		t.Fatal("still holding past the bound")
	}
	// Not renewed until ReleaseFrom: new frames are delivered.
	p.b.HoldFrom(0, bound.Add(time1s))
	p.send(p.a, []byte("m3"))
	p.run(p.now.Add(5 * Millisecond))
	if got := msgs(p.delivered); got != "m0,m1,m2,m3" {
		t.Fatalf("after the bound delivered %q, want m0,m1,m2,m3", got)
	}
	// After ReleaseFrom a hold holds again.
	p.b.ReleaseFrom(0)
	if !p.b.HoldFrom(0, p.now.Add(time1s)) || !p.b.Holding(0) {
		t.Fatal("no new hold after ReleaseFrom")
	}
	if p.b.HoldFrom(1, p.now.Add(time1s)) || p.b.HoldFrom(9, p.now.Add(time1s)) {
		t.Fatal("HoldFrom accepted this member or a non-member")
	}
}

const time1s = 1000 * Millisecond

// The held sender's acknowledgements of our frames still count, and a
// hold as long as its bound (a quarter of the failure timeout) has nobody
// removed on either side.
func TestHoldFromKeepsAcksAndMembers(t *testing.T) {
	p := newHoldPair(t)
	// b is held by a: b's frames to a are held, a's acks of them do not
	// move, and b's window of frames to a stalls; a's frames to b go on.
	bound := t0.Add(DefaultFailureTimeout / 4)
	p.a.HoldFrom(1, bound)
	for i := range holdWindow {
		p.send(p.b, []byte(fmt.Sprintf("b%d", i)))
		p.send(p.a, []byte(fmt.Sprintf("m%d", i)))
	}
	p.run(bound.Add(-Millisecond))
	if got, want := msgs(p.delivered), wantMsgs(holdWindow); got != want {
		t.Fatalf("b delivered %q, want %q", got, want)
	}
	if s := p.a.Counters(); s.InFlight != 0 || s.Retransmitted != 0 {
		t.Fatalf("a: %d in flight, %d retransmitted; want b's acks to have settled all, none retransmitted", s.InFlight, s.Retransmitted)
	}
	if s := p.b.Counters(); s.InFlight != holdWindow || s.Retransmitted != 0 {
		t.Fatalf("b: %d in flight, %d retransmitted; want its window held, none retransmitted", s.InFlight, s.Retransmitted)
	}
	p.run(bound.Add(20 * Millisecond))
	if s := p.b.Counters(); s.InFlight != 0 || s.Retransmitted != 0 {
		t.Fatalf("b after the bound: %d in flight, %d retransmitted; want none", s.InFlight, s.Retransmitted)
	}
	if len(p.events) != 0 {
		t.Fatalf("events %v: nobody should be removed", p.events)
	}
}

// A held sender's datagrams (the Unreliable level) are delivered: a hold
// stops its window, and a datagram takes no room in it (dsm's lock lane
// carries a held requester's request so: docs/dsm.md, "The lock lane").
// Its Data frames stay held meanwhile. Until 2026-12-02 they were dropped.
func TestHoldFromDeliversDatagrams(t *testing.T) {
	p := newHoldPair(t)
	p.b.HoldFrom(0, t0.Add(500*Millisecond))
	if err := p.a.Propose(p.now, []byte("data")); err != nil {
		t.Fatal(err)
	}
	if err := p.a.ProposeUnreliable(p.now, []byte("dg")); err != nil {
		t.Fatal(err)
	}
	p.turn()
	if got := msgs(p.delivered); got != "dg" || p.b.Counters().DatagramsDropped != 0 {
		t.Fatalf("held: delivered %q, %d datagrams dropped; want dg alone, none dropped", got, p.b.Counters().DatagramsDropped)
	}
	p.delivered = p.delivered[:0]
	p.b.ReleaseFrom(0)
	if err := p.a.ProposeUnreliable(p.now, []byte("dg2")); err != nil {
		t.Fatal(err)
	}
	p.turn()
	p.turn()
	if got := msgs(p.delivered); got != "dg2,data" {
		t.Fatalf("after the release delivered %q, want dg2,data (the held frame at the Tick)", got)
	}
}

// A Leave right after ReleaseFrom delivers what the hold kept before the
// Leave frame goes out, and the Leave acknowledges it: the sender sees
// this member leave with all its frames acknowledged, and nothing is
// retransmitted. (Before, the release's frames waited for a Tick that a
// left core no longer runs: they were never delivered here, and the Leave
// acknowledged none of them.)
func TestHoldFromReleaseThenLeave(t *testing.T) {
	p := newHoldPair(t)
	releaseThenLeave(t, p)
	leaves := p.bLeaveAcks()
	if len(leaves) == 0 || leaves[0] != 103 {
		t.Fatalf("b's Leave frames ack 0's stream at %v, want 103 (all three delivered)", leaves)
	}
	p.run(p.now.Add(20 * Millisecond))
	var left bool
	for _, ev := range p.events {
		left = left || ev.Kind == MemberLeft && ev.Member == 1
	}
	if s := p.a.Counters(); !left || s.InFlight != 0 || s.Retransmitted != 0 {
		t.Fatalf("sender: b left %v, %d in flight, %d retransmitted; want b left, none, none (events %v)", left, s.InFlight, s.Retransmitted, p.events)
	}
}

// TestLeaveOwingAckSendsFourLeaves: b delivers a's last frames (a
// hold's release) and leaves at once, so its ack of them is owed when it
// leaves, and its Leave frames are their only carrier. b's first Leave
// goes twice; the three Leave frames b sent before are lost at a, and
// the fourth still tells a that its frames arrived and that b left:
// MemberLeft, nothing in flight, no retransmission. (With three, a kept
// the frames in flight until FailureTimeout took b for failed.)
func TestLeaveOwingAckSendsFourLeaves(t *testing.T) {
	p := newHoldPair(t)
	p.dropLeaves = 3
	releaseThenLeave(t, p)
	first := p.bLeaveAcks()
	if len(first) != 2 || first[0] != 103 || first[1] != 103 {
		t.Fatalf("b's Leave frames in its leaving turn ack 0's stream at %v, want two, at 103", first)
	}
	p.run(p.now.Add(200 * Millisecond))
	leaves := len(p.bLeaveAcks())
	var left bool
	for _, ev := range p.events {
		left = left || ev.Kind == MemberLeft && ev.Member == 1
	}
	if s := p.a.Counters(); leaves != 4 || !left || s.InFlight != 0 || s.Retransmitted != 0 {
		t.Fatalf("b sent %d Leaves, the first 3 lost; a: b left %v, %d in flight, %d retransmitted; want 4, true, 0, 0 (events %v)", leaves, left, s.InFlight, s.Retransmitted, p.events)
	}
}

// TestLeaveOwingNothingSendsThree: a Leave that owes no acknowledgement
// (everything b delivered was acknowledged by a frame it sent) sends the
// usual three Leave frames.
func TestLeaveOwingNothingSendsThree(t *testing.T) {
	p := newHoldPair(t)
	for i := range 3 {
		p.send(p.a, []byte(fmt.Sprintf("m%d", i)))
	}
	p.run(t0.Add(5 * Millisecond))
	p.b.Leave(p.now)
	p.run(p.now.Add(20 * Millisecond))
	leaves := len(p.bLeaveAcks())
	if leaves != 3 || p.ackOf0() != 103 {
		t.Fatalf("b sent %d Leaves, acked 0 up to %d; want 3, 103", leaves, p.ackOf0())
	}
}

// releaseThenLeave holds 0 at b, has 0 send m0..m2, then releases it and
// has b leave in one turn: b must deliver the three first.
func releaseThenLeave(t *testing.T, p *holdPair) {
	t.Helper()
	p.b.HoldFrom(0, t0.Add(500*Millisecond))
	for i := range 3 {
		p.send(p.a, []byte(fmt.Sprintf("m%d", i)))
	}
	p.run(t0.Add(5 * Millisecond))
	if len(p.delivered) != 0 {
		t.Fatalf("delivered %q while held", msgs(p.delivered))
	}
	p.b.ReleaseFrom(0)
	p.b.Leave(p.now)
	p.turn()
	if got := msgs(p.delivered); got != "m0,m1,m2" {
		t.Fatalf("released then left: delivered %q, want m0,m1,m2", got)
	}
}

// bLeaveAcks is, for each Leave frame b sent so far, its ack of 0's
// stream.
func (p *holdPair) bLeaveAcks() []uint32 {
	var acks []uint32
	for _, f := range p.bSent {
		if f.t == frame.Leave {
			acks = append(acks, f.h.Acks[0])
		}
	}
	return acks
}
