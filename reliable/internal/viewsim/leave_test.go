package viewsim

import (
	"slices"
	"testing"
	"time"
)

// TestLeaveOfTwo: of a view of two, one member leaves cleanly; the other
// goes on alone. Under Agreed and Safe it judged its majority in the Step
// that took the leaver's Leave, before the Ready that reports the leave
// (MemberLeft), counted the leaver as unreachable, and stopped with
// ErrMinority ("1 of the 2 members ... are reachable"): a clean leave
// stopped the group (found by TestSimExit's check that nobody stops in a
// program whose processes only leave).
func TestLeaveOfTwo(t *testing.T) {
	for _, level := range []Level{FIFO, Agreed, Safe} {
		t.Run(level.String(), func(t *testing.T) {
			r, ps := group(t, 2, level)
			stay, leaver := ps[0], ps[1]
			msg := leaver.send(t)
			r.net.RunFor(50 * time.Millisecond)
			leaver.top.Leave(leaver.clk.Core(r.net.Now()))
			leaver.ep.Bind(leaver) // step it now
			r.net.RunFor(time.Second)
			if r.failed != nil {
				t.Fatal(r.failed)
			}
			if !leaver.left || leaver.err != nil {
				t.Fatalf("leaver: left %v, err %v; want a clean leave", leaver.left, leaver.err)
			}
			if stay.err != nil {
				t.Fatalf("the member that stays stopped: %v", stay.err)
			}
			if m := stay.core.View().Members; len(m) != 1 || m[0].MAC != stay.mac {
				t.Fatalf("the member that stays is in view %#x of %v (views %v); want a view of itself alone", stay.view, m, stay.views)
			}
			if !slices.ContainsFunc(stay.views, func(v uint32) bool { return slices.Contains(stay.inView[v], msg) }) {
				t.Fatalf("the member that stays never delivered the leaver's message")
			}
			// It goes on: its own message is delivered in its view of one
			// (FIFO delivers nobody its own).
			if level != FIFO {
				own := stay.send(t)
				r.net.RunFor(100 * time.Millisecond)
				if !stay.delivered(own) {
					t.Fatalf("the member that stays did not deliver its own message in view %#x", stay.view)
				}
			}
		})
	}
}
