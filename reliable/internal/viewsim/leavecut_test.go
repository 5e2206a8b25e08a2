package viewsim

import (
	"testing"
	"time"
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
