package viewsim

import (
	"slices"
	"testing"
	"time"

	"github.com/rbcast/rbcast/frame"
)

// TestDepartingSenderRepairedAfterCommit is issue 19's double delivery
// at a view change: member m lost sender d's two frames, which member h
// delivered; h stops hearing d (a one-way cut) and the change leaves d
// out, its cut past both frames, h their holder. A copy of d's first
// frame that was delayed on the wire reaches m's frozen inner core after
// the commit. The inner core delivered it and the completion, finding it
// among the retained copies (repair-first) or having taken h's relay of
// it already (relay-first: the second frame's relay is held back, so the
// completion waits), delivered it too: twice.
func TestDepartingSenderRepairedAfterCommit(t *testing.T) {
	for _, relayFirst := range []bool{false, true} {
		name := map[bool]string{false: "repair-first", true: "relay-first"}[relayFirst]
		t.Run(name, func(t *testing.T) { departingRepairedAfterCommit(t, relayFirst) })
	}
}

func departingRepairedAfterCommit(t *testing.T, relayFirst bool) {
	r, ps := group(t, 3, FIFO)
	slices.SortFunc(ps, func(a, b *process) int { return int(a.id(t)) - int(b.id(t)) })
	m, h, d := ps[0], ps[1], ps[2]
	from := d.id(t)
	var late []byte // d's first frame, held back from m
	committed, injected := false, false
	m.drop = func(f []byte) bool {
		v, err := frame.Parse(f[frame.EthernetHeaderLen:])
		if err != nil {
			return false
		}
		switch v.Type() {
		case frame.ViewCommit:
			committed = committed || v.ViewBase() == m.view && v.ViewNext() != m.view
		case frame.Data:
			if v.Sender() == from {
				if late == nil && v.Seq() == 0 {
					late = slices.Clone(f)
				}
				return true
			}
		case frame.ViewRelay:
			return !injected && !(relayFirst && v.RelayFrame().Seq() == 0)
		}
		return false
	}
	msgs := []msgID{d.send(t)}
	r.net.RunFor(20 * time.Millisecond)
	msgs = append(msgs, d.send(t))
	r.net.RunFor(50 * time.Millisecond)
	for _, msg := range msgs {
		if !h.delivered(msg) || m.delivered(msg) {
			t.Fatalf("before the cut: h delivered %v, m %v; want true, false", h.delivered(msg), m.delivered(msg))
		}
	}
	if late == nil {
		t.Fatal("m never received d's first frame")
	}
	h.drop = func(f []byte) bool { return [6]byte(f[6:12]) == d.mac }
	old := m.view
	for i := 0; !committed; i++ {
		if i == 3000 {
			t.Fatalf("no commit of a view after %d at m in 3 s", old)
		}
		r.net.RunFor(time.Millisecond)
	}
	r.net.RunFor(5 * time.Millisecond)
	if m.view != old || relayFirst && !m.delivered(msgs[0]) || !relayFirst && m.delivered(msgs[0]) {
		t.Fatalf("after the commit: m in view %d (was %d), delivered d's first message %v: the case was not driven", m.view, old, m.delivered(msgs[0]))
	}
	now := r.net.Now()
	ct := m.clk.Core(now)
	m.checkHanded()
	if err := m.st.Step(ct, late); err != nil {
		t.Fatalf("m stepping d's delayed frame: %v", err)
	}
	m.st.Tick(ct)
	m.flush(now, ct)
	injected = true
	r.net.RunFor(time.Second)
	if m.view == old || slices.ContainsFunc(m.core.View().Members, func(x frame.MemberInfo) bool { return x.MAC == d.mac }) {
		t.Fatalf("m is in view %d of %v; want a view after %d without d", m.view, m.core.View().Members, old)
	}
	if r.failed != nil {
		t.Fatal(r.failed)
	}
	for _, msg := range msgs {
		var n int
		for _, ids := range m.inView {
			n += len(slices.DeleteFunc(slices.Clone(ids), func(id msgID) bool { return id != msg }))
		}
		if n != 1 {
			t.Fatalf("m delivered d's message %d %d times, want once", msg.n, n)
		}
	}
}
