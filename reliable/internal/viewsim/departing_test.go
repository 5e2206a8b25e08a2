package viewsim

import (
	"slices"
	"testing"
	"time"

	"github.com/rbcast/rbcast/frame"
)

// TestDepartingSenderRepairedAfterCommit is issue 19's possible double
// delivery at a view change: member m lost sender d's frame, which member
// h delivered; h stops hearing d (a one-way cut) and the change leaves d
// out, its cut past the frame m lacks, h its holder. A copy of d's frame
// that was delayed on the wire reaches m's frozen inner core after the
// commit, before h's relay (dropped at m until then): the inner core
// delivers it, and the completion must not deliver it again from the
// inner core's retained copy, nor from h's relay when that comes.
func TestDepartingSenderRepairedAfterCommit(t *testing.T) {
	r, ps := group(t, 3, FIFO)
	slices.SortFunc(ps, func(a, b *process) int { return int(a.id(t)) - int(b.id(t)) })
	m, h, d := ps[0], ps[1], ps[2]
	from := d.id(t)
	var late []byte // d's frame, held back from m
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
				if late == nil {
					late = slices.Clone(f)
				}
				return true
			}
		case frame.ViewRelay:
			return !injected
		}
		return false
	}
	msg := d.send(t)
	r.net.RunFor(50 * time.Millisecond)
	if !h.delivered(msg) || m.delivered(msg) || late == nil {
		t.Fatalf("before the cut: h delivered %v, m %v, m held back d's frame %v; want true, false, true", h.delivered(msg), m.delivered(msg), late != nil)
	}
	h.drop = func(f []byte) bool { return [6]byte(f[6:12]) == d.mac }
	old := m.view
	for i := 0; !committed; i++ {
		if i == 3000 {
			t.Fatalf("no commit of a view after %d at m in 3 s", old)
		}
		r.net.RunFor(time.Millisecond)
	}
	r.net.RunFor(time.Millisecond)
	if m.view != old {
		t.Fatalf("m installed view %d before d's frame came: the case was not driven", m.view)
	}
	now := r.net.Now()
	ct := m.clk.Core(now)
	m.checkHanded()
	m.st.Step(ct, late[:len(late):len(late)])
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
	var n int
	for _, ids := range m.inView {
		for _, id := range ids {
			if id == msg {
				n++
			}
		}
	}
	if n != 1 {
		t.Fatalf("m delivered d's message %d times, want once", n)
	}
}
