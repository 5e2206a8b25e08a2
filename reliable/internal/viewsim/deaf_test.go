package viewsim

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/reliable/view"
	"github.com/rbcast/rbcast/testnet"
)

// deafRun is the scripted run of TestDeafCoordinatorLateCommit: five
// processes found a group under Agreed, member 4 crashes, and the
// coordinator (member 0) falls asleep (starved of CPU: it is not stepped,
// what arrives waits in its queue) right after it sends the Prepare of the
// change that leaves 4 out. Its promisers suspect it after the failure
// timeout and member 1 prepares a change of the same base without it.
// Member 2 flushes for member 1's proposal but loses member 1's Commit
// until the sleeper's has come. Member 1 installs its view; then the
// sleeper wakes, reads its backlog oldest first — the promisers' Flushes
// for its own proposal come before everything that says they moved on —
// and commits.
type deafRun struct {
	r                  *simRun
	byID               map[frame.MemberID]*process
	lateAt             time.Time // when the sleeper woke
	lateSeen           bool      // member 2 received the sleeper's commit
	viewA, viewB       uint32    // the sleeper's view, member 1's
	membersA           []frame.MemberID
	membersB           []frame.MemberID
	deliveredAfter     map[frame.MemberID]int // messages delivered in the current view since the wake
	installersA        []frame.MemberID       // processes that installed viewA
	installersB        []frame.MemberID
	primaryA, primaryB bool // each view's member list is a majority of view 1
}

func runDeaf(t *testing.T) deafRun {
	net, err := testnet.New(19, testnet.Config{})
	if err != nil {
		t.Fatal(err)
	}
	r := &simRun{t: t, seed: 19, net: net, views: map[eraView][]frame.MemberInfo{}, start: net.Now(), window: 16, dgView: map[msgID]uint32{}, level: Agreed}
	for i := range 5 {
		ep, err := net.Attach(testnet.EndpointConfig{})
		if err != nil {
			t.Fatal(err)
		}
		r.procs = append(r.procs, r.newProcess(ep, uint32(1900+i), 5, 100000))
	}
	founded := func() bool {
		for _, p := range r.procs {
			if view.Number(p.view) != 1 {
				return false
			}
		}
		return true
	}
	for !founded() && net.Now().Before(r.start.Add(2*time.Second)) {
		net.RunFor(5 * time.Millisecond)
	}
	if !founded() {
		t.Fatal("the five did not found view 1")
	}
	base := r.procs[0].view
	d := deafRun{r: r, byID: map[frame.MemberID]*process{}, deliveredAfter: map[frame.MemberID]int{}}
	for _, p := range r.procs {
		d.byID[selfID(p)] = p
	}
	if len(d.byID) != 5 {
		t.Fatalf("member ids %v, want five", d.byID)
	}
	net.RunFor(50 * time.Millisecond) // messages in view 1
	sleeper, x := d.byID[0], d.byID[2]
	sleeper.sleepAfter = func(v frame.View) bool { return v.Type() == frame.ViewPrepare }
	x.drop = func(b []byte) bool {
		_, f, err := frame.SplitEthernet(b, frame.EtherType)
		if err != nil {
			return false
		}
		v, err := frame.Parse(f)
		if err != nil || v.Type() != frame.ViewCommit || v.ViewBase() != base {
			return false
		}
		if v.Sender() == 0 {
			d.lateSeen = true
			return false
		}
		return !d.lateSeen
	}
	victim := d.byID[4]
	victim.dead = true
	victim.ep.Crash()
	for !sleeper.asleep && net.Now().Before(r.start.Add(4*time.Second)) {
		net.RunFor(time.Millisecond)
	}
	if !sleeper.asleep {
		t.Fatal("the coordinator never prepared the change that leaves member 4 out")
	}
	one := d.byID[1]
	for view.Number(one.view) < 2 && net.Now().Before(r.start.Add(6*time.Second)) {
		net.RunFor(time.Millisecond)
	}
	if one.view == base {
		t.Fatal("member 1 never installed a view without the sleeping coordinator")
	}
	sleeper.wake()
	d.lateAt = net.Now()
	net.RunFor(300 * time.Millisecond) // within the failure timeout (400 ms)
	d.viewA, d.viewB = sleeper.view, one.view
	for _, p := range r.procs {
		if p.dead {
			continue
		}
		id := frame.MemberID(0xffff)
		for k, q := range d.byID {
			if q == p {
				id = k
			}
		}
		if slices.Contains(p.views, d.viewA) && d.viewA != base {
			d.installersA = append(d.installersA, id)
		}
		if slices.Contains(p.views, d.viewB) && d.viewB != base {
			d.installersB = append(d.installersB, id)
		}
		if p.view != base {
			d.deliveredAfter[id] = len(p.inView[p.view]) // all after the split
		}
	}
	slices.Sort(d.installersA)
	slices.Sort(d.installersB)
	ids := func(v uint32) []frame.MemberID {
		var out []frame.MemberID
		for _, m := range r.views[eraView{r.era, v}] {
			out = append(out, m.ID)
		}
		return out
	}
	d.membersA, d.membersB = ids(d.viewA), ids(d.viewB)
	d.primaryA, d.primaryB = 2*len(d.membersA) > 5, 2*len(d.membersB) > 5
	t.Logf("from view %#x: the sleeper's view %#x members %v installed by %v (delivered since the wake %v); member 1's view %#x members %v installed by %v",
		base, d.viewA, d.membersA, d.installersA, d.deliveredAfter, d.viewB, d.membersB, d.installersB)
	return d
}

func (d deafRun) String() string {
	return fmt.Sprintf("views %#x %v (installed by %v) and %#x %v (installed by %v), delivered since the wake %v",
		d.viewA, d.membersA, d.installersA, d.viewB, d.membersB, d.installersB, d.deliveredAfter)
}

// TestDeafCoordinatorLateCommit: a coordinator starved of CPU while
// its promisers moved on commits from their earlier Flushes when it wakes
// (docs/membership.md, "Two coordinators at once"). Before the rules,
// member 2, which had flushed for member 1's proposal but not yet got its
// Commit, installed the sleeper's view 0x200 {0,1,2,3} with it while 1
// and 3 installed 0x301 {1,2,3}: two views formed from view 1, each
// naming a majority of it, both delivering (56 and 62 messages) — a split
// brain that the pairwise checkers do not see (no process moves through
// both views) and onePrimary does. Now member 2 ignores the late commit
// (it promised member 1's proposal), the sleeper's view is installed by
// it alone and never accepted (it hears no majority of view 1 in it), so
// it delivers nothing there and stops; the three go on.
func TestDeafCoordinatorLateCommit(t *testing.T) {
	d := runDeaf(t)
	if d.viewA == d.viewB || view.Number(d.viewA) != 2 || view.Proposer(d.viewA) != 0 {
		t.Fatalf("%v: want the sleeper in a view of its own proposal, number 2", d)
	}
	if !slices.Equal(d.installersA, []frame.MemberID{0}) || !slices.Equal(d.installersB, []frame.MemberID{1, 2, 3}) {
		t.Fatalf("%v: want the sleeper's view installed by it alone, member 1's by 1, 2 and 3", d)
	}
	if d.deliveredAfter[0] != 0 || d.deliveredAfter[1] == 0 || d.deliveredAfter[2] == 0 || d.deliveredAfter[3] == 0 {
		t.Fatalf("%v: want nothing delivered in the sleeper's view, and the others' view to deliver", d)
	}
	if err := d.r.onePrimary(); err != nil {
		t.Fatal(err)
	}
	sleeper := d.byID[0]
	d.r.net.RunFor(3 * time.Second)
	if sleeper.err == nil || !strings.Contains(sleeper.err.Error(), "under total order only a majority goes on") || len(sleeper.inView[d.viewA]) != 0 {
		t.Fatalf("the sleeper: err %v, %d messages delivered in view %#x; want it stopped, none delivered", sleeper.err, len(sleeper.inView[d.viewA]), d.viewA)
	}
	t.Logf("the sleeper stopped: %v", sleeper.err)
	if err := d.r.agreed(); err != nil { // the runs never end (the budget): the checks of what was delivered
		t.Fatal(err)
	}
}

// TestUnacceptedViewFormsNoOther: the second half of acceptance — no
// view is formed from one that no majority of its own base installed.
// Five members under Agreed; 3 and 4 crash, the coordinator prepares
// {0,1,2}, and member 1 crashes once its Flush is out (the coordinator is
// held asleep meanwhile, so that the Flush is in its queue): the view of
// {0,1,2} is installed by 0 and 2, two of view 1's five, and is never
// accepted. Once both lose member 1, the coordinator would form {0,2} —
// two of its view's three, a majority of the list — and go on as the
// primary component with two of the five; it stops instead, saying why,
// and nothing is delivered after view 1.
func TestUnacceptedViewFormsNoOther(t *testing.T) {
	net, err := testnet.New(23, testnet.Config{})
	if err != nil {
		t.Fatal(err)
	}
	r := &simRun{t: t, seed: 23, net: net, views: map[eraView][]frame.MemberInfo{}, start: net.Now(), window: 16, dgView: map[msgID]uint32{}, level: Agreed}
	for i := range 5 {
		ep, err := net.Attach(testnet.EndpointConfig{})
		if err != nil {
			t.Fatal(err)
		}
		r.procs = append(r.procs, r.newProcess(ep, uint32(2300+i), 5, 100000))
	}
	for net.Now().Before(r.start.Add(2 * time.Second)) {
		net.RunFor(5 * time.Millisecond)
		if view.Number(r.procs[0].view) == 1 && slices.IndexFunc(r.procs, func(p *process) bool { return p.view != r.procs[0].view }) < 0 {
			break
		}
	}
	byID := map[frame.MemberID]*process{}
	for _, p := range r.procs {
		byID[selfID(p)] = p
	}
	if len(byID) != 5 || byID[0] == nil {
		t.Fatalf("the five did not found one view: %v", byID)
	}
	base := byID[0].view
	net.RunFor(50 * time.Millisecond)
	coord, one, two := byID[0], byID[1], byID[2]
	coord.sleepAfter = func(v frame.View) bool {
		return v.Type() == frame.ViewPrepare && v.ViewBase() == base && v.ViewMembers().Len() == 3
	}
	for _, id := range []frame.MemberID{3, 4} {
		byID[id].dead = true
		byID[id].ep.Crash()
	}
	for !coord.asleep && net.Now().Before(r.start.Add(4*time.Second)) {
		net.RunFor(time.Millisecond)
	}
	if !coord.asleep {
		t.Fatal("the coordinator never prepared the change that leaves 3 and 4 out")
	}
	net.RunFor(5 * time.Millisecond) // the Flushes reach its queue
	one.dead = true
	one.ep.Crash()
	coord.wake()
	net.RunFor(3 * time.Second)
	if len(coord.views) < 2 || len(two.views) < 2 || coord.views[1] != two.views[1] || len(r.views[eraView{r.era, coord.views[1]}]) != 3 {
		t.Fatalf("views: the coordinator %#x, member 2 %#x; want both in the coordinator's view of three", coord.views, two.views)
	}
	const why = "was installed by 2 of the 5 members of the view it was formed from: it is not the primary component"
	if coord.err == nil || !strings.Contains(coord.err.Error(), why) {
		t.Fatalf("the coordinator: err %v, want it stopped: %q", coord.err, why)
	}
	for _, p := range []*process{coord, two} {
		for _, v := range p.views[1:] {
			if n := len(p.inView[v]); n != 0 {
				t.Errorf("%x delivered %d messages in view %#x, want none after view 1", p.mac, n, v)
			}
		}
	}
	t.Logf("the coordinator: %v; member 2: views %#x, %v", coord.err, two.views, two.err)
	if err := r.agreed(); err != nil {
		t.Fatal(err)
	}
}
