package viewsim

import (
	"slices"
	"testing"
	"time"
)

// Holding one sender across a view change (view.Core.HoldFrom,
// reliable/view/hold.go): member h holds sender a while a third member
// leaves. The change must not wait for the hold (its freeze releases
// the inner core's hold, so a's messages up to the cut are delivered at
// h as at a), and the hold must go on in the new view's inner core
// until h releases it.

// from is the messages of sender s among those p delivered in view v.
func (p *process) from(s *process, v uint32) []msgID {
	var out []msgID
	for _, m := range p.inView[v] {
		if m.mac == s.mac && m.inc == s.inc {
			out = append(out, m)
		}
	}
	return out
}

// sendDatagram proposes a datagram of p's (the Unreliable level).
func (p *process) sendDatagram(t *testing.T) msgID {
	t.Helper()
	id := msgID{p.mac, p.inc, dgFlag | p.dgSent}
	if err := p.st.ProposeUnreliable(p.clk.Core(p.run.net.Now()), encodeMsg(id, 20)); err != nil {
		t.Fatalf("process %x.%d: ProposeUnreliable: %v", p.mac, p.inc, err)
	}
	p.run.dgView[id] = p.core.View().ID
	p.dgSent++
	return id
}

func TestHoldAcrossViewChange(t *testing.T) {
	r, ps := group(t, 3, FIFO)
	slices.SortFunc(ps, func(a, b *process) int { return int(a.id(t)) - int(b.id(t)) })
	a, h, l := ps[0], ps[1], ps[2]
	net := r.net
	first := h.view
	// The bound is a quarter of the failure timeout (400 ms), as the
	// runtime's.
	start := net.Now()
	if !h.st.HoldFrom(a.id(t), h.clk.Core(start.Add(100*time.Millisecond))) {
		t.Fatal("HoldFrom refused")
	}
	for range r.window / 2 {
		a.send(t)
	}
	dg := a.sendDatagram(t)
	net.RunFor(10 * time.Millisecond)
	if got := h.from(a, first); len(got) != 0 {
		t.Fatalf("h delivered %d of a's messages while holding it", len(got))
	}
	// Its datagrams are dropped while it is held, as pbp's hold drops
	// them: nothing repairs them, and nothing of a's is taken now.
	if h.dgGot[dg] || !l.dgGot[dg] {
		t.Fatalf("a's datagram delivered at h %v (holding a), at l %v; want false, true", h.dgGot[dg], l.dgGot[dg])
	}
	if got := len(l.from(a, first)); got != r.window/2 {
		t.Fatalf("l delivered %d of a's messages, want %d", got, r.window/2)
	}
	l.leaving = true
	l.top.Leave(l.clk.Core(net.Now()))
	leftAt := net.Now()
	for h.view == first && net.Now().Sub(leftAt) < 200*time.Millisecond {
		net.RunFor(time.Millisecond)
	}
	installed := net.Now().Sub(leftAt)
	t.Logf("the view without l installed at h %v after its Leave, %v after the hold began", installed, net.Now().Sub(start))
	if h.view == first || net.Now().Sub(start) >= 100*time.Millisecond {
		t.Fatalf("h installed the next view %v after the hold began (view %d): the change waited for the hold's bound (100 ms)", net.Now().Sub(start), h.view)
	}
	// Virtual synchrony: h delivered in the old view what a and l did.
	if got, want := h.from(a, first), l.from(a, first); !slices.Equal(got, want) {
		t.Fatalf("h delivered %v of a's in view %d, l %v", idStrings(got), first, idStrings(want))
	}
	second := h.view
	for range r.window / 2 {
		a.send(t)
	}
	net.RunFor(20 * time.Millisecond) // the hold's bound not reached
	if got := h.from(a, second); len(got) != 0 {
		t.Fatalf("h delivered %d of a's messages in view %d while holding it: the hold ended at the change", len(got), second)
	}
	if held := h.st.Counters().Held; held == 0 {
		t.Fatal("the stepper counted no held frame")
	}
	h.st.ReleaseFrom(a.id(t))
	h.wake() // a step now: it delivers what the hold kept
	net.RunFor(5 * time.Millisecond)
	if got := len(h.from(a, second)); got != r.window/2 {
		t.Fatalf("h delivered %d of a's %d messages of view %d after the release", got, r.window/2, second)
	}
	// Delivered from h's window, as pbp's hold does: none sent twice
	// (held unstepped by the stepper instead, they are repaired).
	if n := a.top.Stats().Retransmitted; n != 0 {
		t.Fatalf("a retransmitted %d frames in view %d: the held frames were not kept in h's window", n, second)
	}
	if r.failed != nil {
		t.Fatal(r.failed)
	}
}

// A held sender that crashes while held is left out of the next view
// having delivered, at the holder, what the other survivor delivered of
// it: the same messages, in order (virtual synchrony), though the holder
// delivered none of them before the change.
func TestHoldSenderCrashes(t *testing.T) {
	r, ps := group(t, 3, FIFO)
	slices.SortFunc(ps, func(a, b *process) int { return int(a.id(t)) - int(b.id(t)) })
	a, h, o := ps[0], ps[1], ps[2]
	net := r.net
	first := h.view
	start := net.Now()
	if !h.st.HoldFrom(a.id(t), h.clk.Core(start.Add(100*time.Millisecond))) {
		t.Fatal("HoldFrom refused")
	}
	for range r.window / 2 {
		a.send(t)
	}
	net.RunFor(5 * time.Millisecond)
	a.dead = true
	a.ep.Crash()
	net.RunFor(2 * time.Second)
	if h.view == first || o.view != h.view {
		t.Fatalf("views after the crash: h %d, o %d (from %d)", h.view, o.view, first)
	}
	got, want := h.from(a, first), o.from(a, first)
	if !slices.Equal(got, want) || len(want) != r.window/2 {
		t.Fatalf("h delivered %v of the dead sender's, o %v: want the same %d", idStrings(got), idStrings(want), r.window/2)
	}
	if r.failed != nil {
		t.Fatal(r.failed)
	}
}
