package viewsim

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/reliable/pbp"
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

// TestLeaveInTurnOfPrepare is issue 19's leaver mid-change. Of four
// members (a the coordinator, b, l, d), d's last two messages reach l
// alone (a and b drop d's Data frames), and d crashes. When a's core
// fails d, a prepares a view without it; l calls Leave in the turn that
// brings the Prepare, its PBP core sends its Leave at once (everything it
// sent is acknowledged) and, before this fix, its membership layer then
// froze for the Prepare and flushed: l reported d's two messages
// delivered. a lost l's first Leave frame and took the Flush first, so
// it committed a view that kept l, with d's cut past both messages and l
// their holder. l had finished (SelfLeft) and relayed nothing: a and b
// waited for the relays and stopped with ErrRemoved ("could not complete
// view ...: no member relayed member 3's 0..1 (holder 2)"). A member whose
// core sent its Leave now takes part in no change of the view: the
// change goes on without l once its next Leave frame arrives.
func TestLeaveInTurnOfPrepare(t *testing.T) {
	for _, level := range []Level{FIFO, Agreed, Safe} {
		t.Run(level.String(), func(t *testing.T) { leaveInTurnOfPrepare(t, level) })
	}
}

func leaveInTurnOfPrepare(t *testing.T, level Level) {
	r, a, b, l, d := fourByID(t, level)
	base := a.view
	dropD := func(f []byte) bool { return sentBy(f, frame.Data, d) }
	b.drop = dropD
	leaveDropped := false
	a.drop = func(f []byte) bool {
		if dropD(f) {
			return true
		}
		if sentBy(f, frame.Leave, l) && !leaveDropped {
			leaveDropped = true // lost on the way
			return true
		}
		return false
	}
	prepare := holdPrepare(l, base) // a's Prepare, held back from l until it leaves
	d.send(t)
	r.net.RunFor(2 * time.Millisecond)
	d.send(t)
	r.net.RunFor(20 * time.Millisecond)
	// l's core delivered both (under Agreed and Safe the layer above
	// holds them for the orderer, a, which lacks them), a's and b's none.
	did := d.id(t)
	for _, p := range []*process{a, b, l} {
		want := uint32(0)
		if p == l {
			want = 2
		}
		if got, _ := p.core.Inner().(*pbp.Core).DeliveredFrom(did); got != want {
			t.Fatalf("before the crash: %x.%d's core delivered %d of d's frames, want %d", p.mac, p.inc, got, want)
		}
	}
	d.dead = true
	d.ep.Crash()
	for i := 0; *prepare == nil; i++ {
		if i == 20000 {
			t.Fatalf("no Prepare of a view after %#x reached l in 2 s", base)
		}
		r.net.RunFor(100 * time.Microsecond)
	}
	// The Prepare arrives in the turn l leaves: its core's Leave goes out
	// at once (l sent nothing), and the Prepare is stepped after it.
	now := r.net.Now()
	ct := l.clk.Core(now)
	l.checkHanded()
	l.leaving = true
	l.top.Leave(ct)
	l.st.Step(ct, *prepare)
	l.st.Tick(ct)
	l.flush(now, ct)
	r.net.RunFor(3 * time.Second)
	if r.failed != nil {
		t.Fatal(r.failed)
	}
	if !l.left || l.err != nil {
		t.Fatalf("l: left %v, err %v; want a clean leave", l.left, l.err)
	}
	if !leaveDropped {
		t.Fatal("l's Leave never reached a: the case was not driven")
	}
	for _, p := range []*process{a, b} {
		if p.err != nil {
			t.Fatalf("%x.%d stopped: %v", p.mac, p.inc, p.err)
		}
		ids := slices.Collect(func(yield func(string) bool) {
			for _, m := range p.core.View().Members {
				if !yield(fmt.Sprint(m.ID)) {
					return
				}
			}
		})
		if p.view == base || strings.Join(ids, ",") != fmt.Sprintf("%d,%d", a.id(t), b.id(t)) {
			t.Fatalf("%x.%d is in view %#x of members %v; want a view after %#x of a and b", p.mac, p.inc, p.view, ids, base)
		}
	}
}

// TestLeaveUnheardAtChange is seed 2019 of TestSimLeaveAtChange under
// Agreed and Safe, scripted. Of four members (a the coordinator, b, l,
// d), d crashes; a prepares a view without it, and l leaves before the
// Prepare reaches it. Every Leave frame of l is lost on its way to a, so
// a's core takes l for failed, as it would a crash; b's core takes the
// Leave. Before the Flush could say "left", b's Flush said only that l
// was gone there: a suspected l, counted 2 of its view's 4 reachable and
// stopped with ErrMinority, and b, alone with a gone, stopped too. b's
// Flush now says l left (frame.Delivered's Left), and a counts l as left:
// 2 of 3, a majority. l's message, sent before it left, reaches both.
func TestLeaveUnheardAtChange(t *testing.T) {
	for _, level := range []Level{FIFO, Agreed, Safe} {
		t.Run(level.String(), func(t *testing.T) { leaveUnheardAtChange(t, level) })
	}
}

func leaveUnheardAtChange(t *testing.T, level Level) {
	r, a, b, l, d := fourByID(t, level)
	base := a.view
	leaves := loseLeaves(a, l)
	prepare := holdPrepare(l, base) // a's Prepare, held back from l until it leaves
	msg := l.send(t)
	r.net.RunFor(50 * time.Millisecond)
	d.dead = true
	d.ep.Crash()
	for i := 0; *prepare == nil; i++ {
		if i == 20000 {
			t.Fatalf("no Prepare of a view after %#x reached l in 2 s", base)
		}
		r.net.RunFor(100 * time.Microsecond)
	}
	l.leaving = true
	l.top.Leave(l.clk.Core(r.net.Now()))
	l.ep.Bind(l) // step it now
	r.net.RunFor(3 * time.Second)
	checkLeftUnheard(t, r, a, b, l, base, *leaves, msg)
}

// TestLeaveUnheardAtCrash is what TestLeaveUnheardAtChange left open: of
// four members (a the coordinator, b, l, d), d crashes and l leaves in the
// same millisecond; every Leave frame of l is lost on its way to a, and
// b's core takes the Leave. a's core fails d and l within a round trip of
// each other, before b's Flush (which says l left) can reach a. Before
// the coordinator asked, a counted 2 of 4 reachable as soon as its core
// failed both and stopped with ErrMinority, and b after it (Agreed, Safe;
// FIFO has no primary component). A coordinator that counts no majority
// now prepares the next view, frozen, and waits a failure timeout for the
// Flushes: b's says l left, and a counts 2 of 3.
func TestLeaveUnheardAtCrash(t *testing.T) {
	for _, level := range []Level{FIFO, Agreed, Safe} {
		t.Run(level.String(), func(t *testing.T) { leaveUnheardAtCrash(t, level) })
	}
}

func leaveUnheardAtCrash(t *testing.T, level Level) {
	r, a, b, l, d := fourByID(t, level)
	base := a.view
	leaves := loseLeaves(a, l)
	msg := l.send(t)
	r.net.RunFor(50 * time.Millisecond)
	crashThenLeave(r, d, l)
	checkLeftUnheard(t, r, a, b, l, base, *leaves, msg)
}

// TestLeaveUnheardAtMember is the other side of TestLeaveUnheardAtCrash:
// of four members (a the coordinator, b, l, d), d crashes and l leaves in
// the same millisecond, and every Leave frame of l is lost on its way to
// b, not to a. a's core takes the Leave, and a prepares a view without l
// at once; b's core fails d and l a failure timeout later. Before, b
// counted 2 of 4 reachable and stopped with ErrMinority at once (only the
// coordinator asked, and its own Flush, which says l left, is not sent),
// and a, alone then, stopped after it (Agreed, Safe). b, which reaches a,
// now waits for a's commit (a counts 2 of 3) before it stops.
func TestLeaveUnheardAtMember(t *testing.T) {
	for _, level := range []Level{FIFO, Agreed, Safe} {
		t.Run(level.String(), func(t *testing.T) { leaveUnheardAtMember(t, level, false) })
	}
}

// TestLeaveUnheardAtMemberRelayed is TestLeaveUnheardAtMember with d's
// last two messages lost on their way to b: a's commit cuts d's messages
// after them, with a their holder, and b, waiting (it counts 2 of 4),
// must complete that commit from a's relays, which arrive in later turns.
// A waiting member completes the commit it flushed for; one that did not
// (only a commit complete on arrival was installed) waited for the end
// of the asking and stopped with ErrMinority (under Safe here).
func TestLeaveUnheardAtMemberRelayed(t *testing.T) {
	for _, level := range []Level{FIFO, Agreed, Safe} {
		t.Run(level.String(), func(t *testing.T) { leaveUnheardAtMember(t, level, true) })
	}
}

// crashThenLeave crashes d, has l leave a millisecond later, and runs the
// segment for 3 s: the crash and the leave of the LeaveUnheard scripts.
func crashThenLeave(r *simRun, d, l *process) {
	d.dead = true
	d.ep.Crash()
	r.net.RunFor(time.Millisecond)
	l.leaving = true
	l.top.Leave(l.clk.Core(r.net.Now()))
	l.ep.Bind(l) // step it now
	r.net.RunFor(3 * time.Second)
}

func leaveUnheardAtMember(t *testing.T, level Level, relayed bool) {
	r, a, b, l, d := fourByID(t, level)
	base := a.view
	leaves := loseLeaves(b, l)
	msg := l.send(t)
	r.net.RunFor(50 * time.Millisecond)
	var dm []msgID // d's messages b completes from relays
	if relayed {
		lose := b.drop
		b.drop = func(f []byte) bool { return lose(f) || sentBy(f, frame.Data, d) }
		dm = append(dm, d.send(t))
		r.net.RunFor(2 * time.Millisecond)
		dm = append(dm, d.send(t))
		r.net.RunFor(20 * time.Millisecond)
		// a's core delivered them (in one frame or two), b's nothing.
		did := d.id(t)
		atA, _ := a.core.Inner().(*pbp.Core).DeliveredFrom(did)
		atB, _ := b.core.Inner().(*pbp.Core).DeliveredFrom(did)
		if atA == 0 || atB != 0 {
			t.Fatalf("before the crash: a's core delivered %d of d's frames, b's %d; want some and none", atA, atB)
		}
	}
	crashThenLeave(r, d, l)
	checkLeftUnheard(t, r, a, b, l, base, *leaves, msg)
	for _, m := range dm {
		for _, p := range []*process{a, b} {
			if !slices.ContainsFunc(p.views, func(v uint32) bool { return v == base && slices.Contains(p.inView[v], m) }) {
				t.Fatalf("%x.%d did not deliver d's message %v in view %#x", p.mac, p.inc, m, base)
			}
		}
	}
}

// checkLeftUnheard is the outcome of the unheard-leave cases: l left
// cleanly (its Leave reached a or b leaves times, every one dropped), and a
// and b, neither stopped, are in a view after base of the two of them,
// having delivered l's message msg.
func checkLeftUnheard(t *testing.T, r *simRun, a, b, l *process, base uint32, leaves int, msg msgID) {
	t.Helper()
	if r.failed != nil {
		t.Fatal(r.failed)
	}
	if !l.left || l.err != nil {
		t.Fatalf("l: left %v, err %v; want a clean leave", l.left, l.err)
	}
	if leaves == 0 {
		t.Fatal("l's Leave was never dropped: the case was not driven")
	}
	for _, p := range []*process{a, b} {
		if p.err != nil {
			t.Fatalf("%x.%d stopped: %v", p.mac, p.inc, p.err)
		}
		if m := p.core.View().Members; p.view == base || len(m) != 2 || m[0].MAC != a.mac || m[1].MAC != b.mac {
			t.Fatalf("%x.%d is in view %#x of %v; want a view after %#x of a and b", p.mac, p.inc, p.view, m, base)
		}
		if !slices.ContainsFunc(p.views, func(v uint32) bool { return slices.Contains(p.inView[v], msg) }) {
			t.Fatalf("%x.%d never delivered l's message", p.mac, p.inc)
		}
	}
}

// fourByID makes a group of four at level and names its members by id:
// a, the lowest (the coordinator), b, l and d.
func fourByID(t *testing.T, level Level) (r *simRun, a, b, l, d *process) {
	t.Helper()
	r, ps := group(t, 4, level)
	slices.SortFunc(ps, func(x, y *process) int { return int(x.id(t)) - int(y.id(t)) })
	return r, ps[0], ps[1], ps[2], ps[3]
}

// sentBy reports whether f, an Ethernet frame, is a frame of type typ
// from p's MAC.
func sentBy(f []byte, typ frame.Type, p *process) bool {
	v, err := frame.Parse(f[frame.EthernetHeaderLen:])
	return err == nil && v.Type() == typ && [6]byte(f[6:12]) == p.mac
}

// loseLeaves drops every Leave frame of l on its way to p, and counts
// them.
func loseLeaves(p, l *process) *int {
	leaves := new(int)
	p.drop = func(f []byte) bool {
		if sentBy(f, frame.Leave, l) {
			*leaves++
			return true
		}
		return false
	}
	return leaves
}

// holdPrepare keeps the first Prepare of a view after base from l: the
// frame is in *prepare once it came.
func holdPrepare(l *process, base uint32) *[]byte {
	prepare := new([]byte)
	l.drop = func(f []byte) bool {
		v, err := frame.Parse(f[frame.EthernetHeaderLen:])
		if err == nil && v.Type() == frame.ViewPrepare && v.ViewBase() == base && *prepare == nil {
			*prepare = slices.Clone(f)
			return true
		}
		return false
	}
	return prepare
}
