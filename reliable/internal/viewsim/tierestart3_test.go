package viewsim

import (
	"slices"
	"testing"
	"time"

	"github.com/rbcast/rbcast/frame"
)

// TestTieLeaverOtherRestarts: of three (a, l, x), x leaves and a loses
// every Leave frame of it; a loses l's Data frames and l every frame of
// a. l counts x left and a absent: 1 of 2, it leaves at the tie. x
// restarts and asks to join: a must not count it, nor l's old
// incarnation it still hears, and go on without l's message.
func TestTieLeaverOtherRestarts(t *testing.T) {
	for _, level := range []Level{Agreed, Safe} {
		t.Run(level.String(), func(t *testing.T) {
			r, ps := group(t, 3, level)
			slices.SortFunc(ps, func(x, y *process) int { return int(x.id(t)) - int(y.id(t)) })
			a, l, x := ps[0], ps[1], ps[2]
			from := func(f []byte, p *process) bool { return [6]byte(f[6:12]) == p.mac }
			l.drop = func(f []byte) bool { return from(f, a) }
			a.drop = func(f []byte) bool { return sentBy(f, frame.Data, l) || sentBy(f, frame.Leave, x) }
			x.top.Leave(x.clk.Core(r.net.Now()))
			x.ep.Bind(x)
			r.net.RunFor(50 * time.Millisecond)
			m := l.send(t)
			l.top.Leave(l.clk.Core(r.net.Now()))
			l.ep.Bind(l)
			start := r.net.Now()
			for !l.left && l.err == nil && r.net.Now().Sub(start) < 3*time.Second {
				r.net.RunFor(time.Millisecond)
			}
			t.Logf("x: left %v err %v; l: left %v err %v after %v", x.left, x.err, l.left, l.err, r.net.Now().Sub(start))
			if !l.left || l.err != nil {
				return
			}
			x.ep.Crash()
			x.ep.Restart()
			x2 := r.newProcess(x.ep, x.inc+100, 1, 0)
			x2.markerAt = r.start.Add(time.Hour)
			r.procs = append(r.procs, x2)
			r.net.RunFor(3 * time.Second)
			t.Logf("a: err %v views %v members %v delivered m %v", a.err, a.views, a.core.View().Members, a.delivered(m))
			if r.failed != nil {
				t.Fatal(r.failed)
			}
			if a.err == nil && r.wentOnWithout(a, l) && a.next[key10(l.mac, l.inc)] != l.sent {
				t.Fatalf("l left cleanly after sending %d messages; a went on (views %v) having delivered %d of them",
					l.sent, a.views, a.next[key10(l.mac, l.inc)])
			}
		})
	}
}
