package viewsim

import (
	"slices"
	"testing"
	"time"

	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/reliable/view"
	"github.com/rbcast/rbcast/testnet"
)

// TestDeafCoordinatorLateJoiner: the deaf coordinator's late commit
// (TestDeafCoordinatorLateCommit) with a joiner in it, which becomes the
// orderer of the late view. Five members found a group under Agreed;
// member 0 crashes and the other four form view 2. A process J asks to
// join; member 1, the coordinator, prepares the view that admits it (J
// takes the lowest free id, 0, and so is the sequencer) and falls asleep
// right after the Prepare. Members 2, 3 and 4 flush for it, suspect it,
// and member 2 forms views without it (0x402 of the three, then 0x502
// admitting J, whose copies of every commit but the sleeper's are lost
// until the sleeper's has come). The sleeper wakes, commits 0x301 from
// the earlier Flushes, and J installs it: a view that only 1 of the four
// members of its base installed. A joiner that took its first view as
// accepted ordered its own messages there and delivered 2 of them, while
// 2, 3 and 4 went on delivering from 0x402: two branches from view 0x201
// delivering, a split brain (onePrimary). Now the joiner too waits for a
// majority of the base to be heard in its first view, delivers nothing in
// the sleeper's, and stops once the group goes on without it.
func TestDeafCoordinatorLateJoiner(t *testing.T) {
	net, err := testnet.New(29, testnet.Config{})
	if err != nil {
		t.Fatal(err)
	}
	r := &simRun{t: t, seed: 29, net: net, views: map[eraView][]frame.MemberInfo{}, start: net.Now(), window: 16, dgView: map[msgID]uint32{}, level: Agreed}
	for i := range 5 {
		ep, err := net.Attach(testnet.EndpointConfig{})
		if err != nil {
			t.Fatal(err)
		}
		r.procs = append(r.procs, r.newProcess(ep, uint32(2900+i), 5, 100000))
	}
	inOne := func(ps []*process, number uint32) bool {
		for _, p := range ps {
			if view.Number(p.view) != number || p.view != ps[0].view {
				return false
			}
		}
		return true
	}
	for !inOne(r.procs, 1) && net.Now().Before(r.start.Add(2*time.Second)) {
		net.RunFor(5 * time.Millisecond)
	}
	if !inOne(r.procs, 1) {
		t.Fatal("the five did not found view 1")
	}
	byID := map[frame.MemberID]*process{}
	for _, p := range r.procs {
		byID[selfID(p)] = p
	}
	if len(byID) != 5 || byID[0] == nil {
		t.Fatalf("member ids %v, want 0..4", byID)
	}
	net.RunFor(50 * time.Millisecond)
	byID[0].dead = true
	byID[0].ep.Crash()
	four := []*process{byID[1], byID[2], byID[3], byID[4]}
	for !inOne(four, 2) && net.Now().Before(r.start.Add(4*time.Second)) {
		net.RunFor(5 * time.Millisecond)
	}
	if !inOne(four, 2) {
		t.Fatal("the four did not form view 2 without member 0")
	}
	base := byID[1].view
	net.RunFor(100 * time.Millisecond) // view 2 accepted everywhere, messages in it

	ep, err := net.Attach(testnet.EndpointConfig{})
	if err != nil {
		t.Fatal(err)
	}
	jmac := [6]byte(ep.HardwareAddr())
	sleeper := byID[1]
	sleeper.sleepAfter = func(v frame.View) bool {
		if v.Type() != frame.ViewPrepare || v.ViewBase() != base {
			return false
		}
		ml := v.ViewMembers()
		for i := range ml.Len() {
			if ml.At(i).MAC == jmac {
				return true
			}
		}
		return false
	}
	lateSeen := false
	j := r.newProcess(ep, 2905, 1, 100000)
	r.procs = append(r.procs, j)
	j.drop = func(b []byte) bool {
		eth, f, err := frame.SplitEthernet(b, frame.EtherType)
		if err != nil {
			return false
		}
		v, err := frame.Parse(f)
		if err != nil || v.Type() != frame.ViewCommit {
			return false
		}
		if eth.Src() == sleeper.mac {
			lateSeen = true
			return false
		}
		return !lateSeen
	}
	for !sleeper.asleep && net.Now().Before(r.start.Add(6*time.Second)) {
		net.RunFor(time.Millisecond)
	}
	if !sleeper.asleep {
		t.Fatal("member 1 never prepared the change that admits J")
	}
	two := byID[2]
	for two.view == base && net.Now().Before(r.start.Add(8*time.Second)) {
		net.RunFor(time.Millisecond)
	}
	if two.view == base {
		t.Fatal("member 2 never installed a view without the sleeping coordinator")
	}
	viewB := two.view
	sleeper.wake()
	net.RunFor(300 * time.Millisecond) // within the failure timeout (400 ms)
	viewA := sleeper.view
	if !lateSeen || viewA == viewB || viewA == base || len(j.views) == 0 || j.views[0] != viewA {
		t.Fatalf("the sleeper in view %#x, member 2 in %#x, J's views %#x (late commit seen %v): want J to install the sleeper's late view first", viewA, viewB, j.views, lateSeen)
	}
	members := r.views[eraView{r.era, viewA}]
	if i := slices.IndexFunc(members, func(m frame.MemberInfo) bool { return m.MAC == jmac }); i < 0 || members[i].ID != members[0].ID {
		t.Fatalf("the sleeper's view %#x: members %v; want J (%x) the lowest id, the sequencer", viewA, members, jmac)
	}
	t.Logf("from view %#x: the sleeper's view %#x %v (J's first), member 2's %#x; J delivered %d there, member 2 %d in its view",
		base, viewA, members, viewB, len(j.inView[viewA]), len(two.inView[viewB]))
	net.RunFor(2 * time.Second)
	if n := len(j.inView[viewA]); n != 0 {
		t.Errorf("J delivered %d messages in the sleeper's view %#x, which no majority of view %#x installed; want none", n, viewA, base)
	}
	if err := r.onePrimary(); err != nil {
		t.Fatal(err)
	}
	if j.err == nil || len(two.views) < 3 || len(two.inView[two.view]) == 0 {
		t.Fatalf("J: err %v; member 2: views %#x, %d delivered in the last; want J stopped and the majority going on", j.err, two.views, len(two.inView[two.view]))
	}
	t.Logf("J: views %#x, err %v; the sleeper: %v", j.views, j.err, sleeper.err)
}
