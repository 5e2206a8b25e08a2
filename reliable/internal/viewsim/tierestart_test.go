package viewsim

import (
	"slices"
	"testing"
	"time"

	"github.com/rbcast/rbcast/frame"
)

// TestTieLeaverRestarts: in a view of two, a loses l's Data frames (m
// among them) and l loses every frame of a. l's core fails a, and l,
// leaving at 1 of 2, leaves cleanly (leaveAtTie). a still hears l's
// other frames, its Leave among them, but cannot count it out as left
// without m. l's process restarts at once with a new incarnation and asks
// to join: a must not count that restart as the old incarnation's
// presence and go on without m (docs/membership.md, "The last other
// member left unseen", the limit named by seeds33).
func TestTieLeaverRestarts(t *testing.T) {
	for _, level := range []Level{Agreed, Safe} {
		t.Run(level.String(), func(t *testing.T) {
			r, ps := group(t, 2, level)
			slices.SortFunc(ps, func(x, y *process) int { return int(x.id(t)) - int(y.id(t)) })
			a, l := ps[0], ps[1]
			from := func(f []byte, p *process) bool { return [6]byte(f[6:12]) == p.mac }
			l.drop = func(f []byte) bool { return from(f, a) }
			a.drop = func(f []byte) bool { return sentBy(f, frame.Data, l) }
			m := l.send(t)
			l.top.Leave(l.clk.Core(r.net.Now()))
			l.ep.Bind(l)
			start := r.net.Now()
			for !l.left && l.err == nil && r.net.Now().Sub(start) < 3*time.Second {
				r.net.RunFor(time.Millisecond)
			}
			t.Logf("l: left %v err %v after %v", l.left, l.err, r.net.Now().Sub(start))
			if !l.left || l.err != nil {
				return // not the case (no tie-leave): nothing to check
			}
			l.ep.Crash()
			l.ep.Restart()
			l2 := r.newProcess(l.ep, l.inc+100, 1, 0)
			l2.markerAt = r.start.Add(time.Hour)
			r.procs = append(r.procs, l2)
			r.net.RunFor(3 * time.Second)
			t.Logf("a: err %v views %v members %v delivered m %v; l2 view %d", a.err, a.views, a.core.View().Members, a.delivered(m), l2.view)
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
