package viewsim

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rbcast/rbcast/reliable/view"
)

// TestLeaverCutOffWhileWaiting: of four members (a, b, l, d), l is cut
// off from a and b (every frame, both ways) just before it sends m; d
// leaves, heard by all, and l leaves while d is still listed, so it waits
// for the change that leaves d out (leaverListed). a and b, 2 of the 3
// members left, go on in a view of their own without m. l, when its core
// fails a and b, counts 1 of 3: it must not report a clean leave
// (SelfLeft says every member that goes on delivered its messages). It
// did when a leaver handed its core the Leave before judging its
// majority whatever the count: the Leave, with nobody left to
// acknowledge it, completed at once (review31 of exit31). FIFO has no
// majority: there l leaves its own component, as before.
func TestLeaverCutOffWhileWaiting(t *testing.T) {
	for _, level := range []Level{Agreed, Safe} {
		t.Run(level.String(), func(t *testing.T) {
			r, a, b, l, d := fourByID(t, level)
			from := func(f []byte, p *process) bool { return [6]byte(f[6:12]) == p.mac }
			l.drop = func(f []byte) bool { return from(f, a) || from(f, b) }
			a.drop = func(f []byte) bool { return from(f, l) }
			b.drop = func(f []byte) bool { return from(f, l) }
			m := l.send(t)
			for _, p := range []*process{d, l} {
				p.top.Leave(p.clk.Core(r.net.Now()))
				p.ep.Bind(p) // step it now
				r.net.RunFor(5 * time.Millisecond)
			}
			r.net.RunFor(3 * time.Second)
			if r.failed != nil {
				t.Fatal(r.failed)
			}
			if !d.left || d.err != nil {
				t.Fatalf("d: left %v, err %v; want a clean leave", d.left, d.err)
			}
			for _, p := range []*process{a, b} {
				if p.err != nil || len(p.core.View().Members) != 2 {
					t.Fatalf("%x: err %v, view %v; want it to go on with the other of a and b", p.mac, p.err, p.core.View().Members)
				}
				if p.delivered(m) {
					t.Fatalf("%x delivered m, which was cut off: the test no longer makes the case", p.mac)
				}
			}
			if l.left {
				t.Fatalf("l reported a clean leave (err %v) while a and b went on without its message", l.err)
			}
			if l.err == nil {
				t.Fatal("l neither left nor stopped")
			}
		})
	}
}

// TestLeaverCutOffAtLeave: of three, l sends m, calls Leave and is cut
// off from a and b (every frame, both ways) before either takes m. l's
// core, its Leave handed while all three ran the view, fails a and b a
// failure timeout later, and with nobody left to acknowledge m its Leave
// completes in that same Tick. a and b, 2 of 3, go on without m, so l
// must not report a clean leave: it counts 1 of 3 and stops with
// ErrMinority. It reported SelfLeft when the majority went unjudged in
// the turn the Leave completed (docs/membership.md, "A leaver cut off
// in the Tick of its Leave").
func TestLeaverCutOffAtLeave(t *testing.T) {
	for _, level := range []Level{Agreed, Safe} {
		t.Run(level.String(), func(t *testing.T) {
			r, ps := group(t, 3, level)
			slices.SortFunc(ps, func(x, y *process) int { return int(x.id(t)) - int(y.id(t)) })
			a, b, l := ps[0], ps[1], ps[2]
			cutOff(l, a, b)
			m := l.send(t)
			l.top.Leave(l.clk.Core(r.net.Now()))
			l.ep.Bind(l) // step it now
			r.net.RunFor(3 * time.Second)
			if r.failed != nil {
				t.Fatal(r.failed)
			}
			for _, p := range []*process{a, b} {
				if p.err != nil || len(p.core.View().Members) != 2 {
					t.Fatalf("%x: err %v, view %v; want it to go on with the other of a and b", p.mac, p.err, p.core.View().Members)
				}
				if p.delivered(m) {
					t.Fatalf("%x delivered m, which was cut off: the test no longer makes the case", p.mac)
				}
			}
			if l.left {
				t.Fatalf("l reported a clean leave (err %v) while a and b, 2 of 3, went on without its message", l.err)
			}
			if !errors.Is(l.err, view.ErrMinority) || !strings.Contains(l.err.Error(), "1 of the 3 members") {
				t.Fatalf("l: err %v; want ErrMinority, 1 of the 3 members reachable", l.err)
			}
			if err := r.leaversDelivered(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestLeaverCutOffFromOne is TestLeaverCutOffAtLeave's control: of four,
// l is cut off from a alone. Its core fails a and its Leave completes in
// that Tick, acknowledged by b and d: 3 of 4, a majority, so the leave
// is clean, and a, which goes on with b and d, has m from them (the
// change's cut). The judgment only refuses a leave whose reachable
// members are no majority.
func TestLeaverCutOffFromOne(t *testing.T) {
	for _, level := range []Level{Agreed, Safe} {
		t.Run(level.String(), func(t *testing.T) {
			r, a, b, l, d := fourByID(t, level)
			cutOff(l, a)
			m := l.send(t)
			l.top.Leave(l.clk.Core(r.net.Now()))
			l.ep.Bind(l)
			r.net.RunFor(3 * time.Second)
			if r.failed != nil {
				t.Fatal(r.failed)
			}
			if !l.left || l.err != nil {
				t.Fatalf("l: left %v, err %v; want a clean leave", l.left, l.err)
			}
			for _, p := range []*process{a, b, d} {
				if p.err != nil || len(p.core.View().Members) != 3 || !slices.Contains(p.inView[p.views[0]], m) && !p.delivered(m) {
					t.Fatalf("%x: err %v, view %v, views %v, delivered m %v; want it to go on with the others and m", p.mac, p.err, p.core.View().Members, p.views, p.delivered(m))
				}
			}
			if err := r.leaversDelivered(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestLeaverCutOffOfTwo: in a view of two the rule of a tie stays. l,
// cut off from a after sending m, leaves at 1 of 2: a cannot go on
// without m, since it counts 1 of 2 too and counts l out as left only
// once it delivered all l sent; it stops with ErrMinority.
func TestLeaverCutOffOfTwo(t *testing.T) {
	for _, level := range []Level{Agreed, Safe} {
		t.Run(level.String(), func(t *testing.T) {
			r, ps := group(t, 2, level)
			slices.SortFunc(ps, func(x, y *process) int { return int(x.id(t)) - int(y.id(t)) })
			a, l := ps[0], ps[1]
			cutOff(l, a)
			l.send(t)
			l.top.Leave(l.clk.Core(r.net.Now()))
			l.ep.Bind(l)
			r.net.RunFor(3 * time.Second)
			if r.failed != nil {
				t.Fatal(r.failed)
			}
			if !l.left || l.err != nil {
				t.Fatalf("l: left %v, err %v; want a clean leave (1 of 2)", l.left, l.err)
			}
			if !errors.Is(a.err, view.ErrMinority) {
				t.Fatalf("a: err %v, view %v; want ErrMinority", a.err, a.core.View().Members)
			}
		})
	}
}

// cutOff drops every frame between l and each of ps, both ways.
func cutOff(l *process, ps ...*process) {
	from := func(f []byte, p *process) bool { return [6]byte(f[6:12]) == p.mac }
	l.drop = func(f []byte) bool {
		return slices.ContainsFunc(ps, func(p *process) bool { return from(f, p) })
	}
	for _, p := range ps {
		p.drop = func(f []byte) bool { return from(f, l) }
	}
}
