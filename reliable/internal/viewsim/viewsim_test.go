package viewsim

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/reliable/view"
	"github.com/rbcast/rbcast/testnet"
)

// The churn simulations themselves run from the packages they test:
// reliable/view (TestSim, FIFO) and reliable/vtotal (TestSim, Agreed and
// Safe). Here: the harness's own scenarios.

// TestDatagrams: on a lossless segment with no churn the members of a
// view receive the datagrams sent in it (all but those sent before a
// receiver installed the view: it drops another view's); with loss and
// duplication, each at most once (the churn simulation checks that,
// and the view, in every seed). With batch the processes propose while a
// Ready's output is handed out, before Advance, as the runtime lets an
// application send: a datagram proposed then goes out in the next Ready
// (it was emitted at once and dropped by Advance unsent before).
func TestDatagrams(t *testing.T) {
	for _, tc := range []struct {
		name      string
		loss, dup float64
		batch     time.Duration
		least     float64 // the share of the others' datagrams each must get
	}{{"lossless", 0, 0, 0, 0.95}, {"lossless-proposed-in-turn", 0, 0, 2 * time.Millisecond, 0.95}, {"loss-10-dup-10", 0.1, 0.1, 0, 0.7}} {
		t.Run(tc.name, func(t *testing.T) {
			r := runScenario(t, scenario{seed: 7, founders: 3, msgs: 200, loss: tc.loss, dup: tc.dup, batch: tc.batch})
			if err := r.verdict(scenario{}); err != nil {
				t.Fatal(err)
			}
			for _, p := range r.procs {
				var want, got int
				for _, q := range r.procs {
					if q == p {
						continue
					}
					want += int(q.dgSent)
					for id := range p.dgGot {
						if id.mac == q.mac && id.inc == q.inc {
							got++
						}
					}
				}
				t.Logf("%x: %d of the others' %d datagrams", p.mac, got, want)
				if want == 0 || float64(got) < tc.least*float64(want) {
					t.Errorf("%x got %d of the others' %d datagrams, want at least %.0f %%", p.mac, got, want, 100*tc.least)
				}
			}
		})
	}
}

// A process that has no view yet refuses a datagram, saying why.
func TestDatagramBeforeView(t *testing.T) {
	net, err := testnet.New(1, testnet.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ep, err := net.Attach(testnet.EndpointConfig{})
	if err != nil {
		t.Fatal(err)
	}
	r := &simRun{t: t, net: net, views: map[eraView][]frame.MemberInfo{}, start: net.Now(), window: 16, dgView: map[msgID]uint32{}}
	p := r.newProcess(ep, 1, 2, 10) // founding waits for a second process
	net.RunFor(10 * time.Millisecond)
	if err := p.st.ProposeUnreliable(p.clk.Core(net.Now()), []byte("early")); !errors.Is(err, view.ErrNoView) || !strings.Contains(err.Error(), "not in a view yet") {
		t.Fatalf("ProposeUnreliable before any view = %v, want ErrNoView", err)
	}
}

// A partition splits five members two from three: under total order only
// the majority goes on (a primary component). The two stop with an error
// that says so and deliver nothing of their own side after the split; the
// three install a view of three and deliver every message of it alike.
func TestPartitionMinorityStops(t *testing.T) {
	net, err := testnet.New(7, testnet.Config{})
	if err != nil {
		t.Fatal(err)
	}
	r := &simRun{t: t, seed: 7, net: net, views: map[eraView][]frame.MemberInfo{}, start: net.Now(), window: 16, dgView: map[msgID]uint32{}, level: Agreed}
	var eps []*testnet.Endpoint
	for i := range 5 {
		ep, err := net.Attach(testnet.EndpointConfig{})
		if err != nil {
			t.Fatal(err)
		}
		eps = append(eps, ep)
		r.procs = append(r.procs, r.newProcess(ep, uint32(700+i), 5, 30))
	}
	const first = 1 << 8 // view number 1, proposed (founded) by member 0
	founded := func() bool {
		for _, p := range r.procs {
			if p.view != first {
				return false
			}
		}
		return true
	}
	for !founded() && net.Now().Before(r.start.Add(2*time.Second)) {
		net.RunFor(10 * time.Millisecond)
	}
	if !founded() || len(r.views[eraView{r.era, first}]) != 5 {
		t.Fatalf("the five did not found one view")
	}
	net.RunFor(100 * time.Millisecond) // some messages in view 1
	if err := net.Partition(eps[:2], eps[2:]); err != nil {
		t.Fatal(err)
	}
	net.RunFor(4 * time.Second)
	if r.failed != nil {
		t.Fatal(r.failed)
	}
	for _, p := range r.procs[:2] {
		if p.err == nil || !strings.Contains(p.err.Error(), "of the 5 members of view 256 are reachable: under total order only a majority goes on (a primary component)") {
			t.Errorf("minority process %x: err %v, want it stopped for want of a majority", p.mac, p.err)
		}
	}
	for _, p := range r.procs[2:] {
		if p.err != nil || len(r.views[eraView{r.era, p.view}]) != 3 {
			t.Errorf("majority process %x: err %v, view %d of %d members; want a view of 3", p.mac, p.err, p.view, len(r.views[eraView{r.era, p.view}]))
		}
	}
	a, b := idStrings(r.procs[2].inView[r.procs[2].view]), idStrings(r.procs[3].inView[r.procs[3].view])
	if len(a) == 0 || !slices.Equal(a, b) {
		t.Errorf("the majority's view of 3: %d and %d messages delivered (first difference %s)", len(a), len(b), firstDiff(a, b))
	}
}

// The one-way cuts of the churn simulation make members report their
// suspicions (ViewSuspect), and the seeds still finish with every live
// process in one view: without the reports a cut between two members
// that are not the coordinator left both in the view for ever.
func TestOneWayCutsReport(t *testing.T) {
	var reports uint64
	deaf := 0
	for seed := uint64(1); seed <= 400; seed++ {
		s := newScenario(seed, FIFO)
		if !s.deaf {
			continue
		}
		deaf++
		r := runScenario(t, s)
		if err := r.verdict(s); err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		for _, p := range r.procs {
			reports += p.core.Counters().Reports
		}
	}
	if deaf == 0 || reports == 0 {
		t.Fatalf("%d seeds with a one-way cut sent %d suspicion reports; want some", deaf, reports)
	}
	t.Logf("%d seeds with a one-way cut, %d suspicion reports", deaf, reports)
}

// RemoveGroup called while a Ready's output is handed out, before
// Advance (as reliable.Group.RemoveGroup may be, from another goroutine):
// the GroupRemove frames go out in the next Ready and every member stops
// with ErrGroupRemoved. Emitted at once, they were dropped by Advance
// unsent, and the others ran on (reliable's TestViewsRemoveGroup failed
// under load for it).
func TestRemoveGroupDuringTurn(t *testing.T) {
	net, err := testnet.New(11, testnet.Config{})
	if err != nil {
		t.Fatal(err)
	}
	r := &simRun{t: t, seed: 11, net: net, views: map[eraView][]frame.MemberInfo{}, start: net.Now(), window: 16, dgView: map[msgID]uint32{}}
	for i := range 3 {
		ep, err := net.Attach(testnet.EndpointConfig{})
		if err != nil {
			t.Fatal(err)
		}
		r.procs = append(r.procs, r.newProcess(ep, uint32(500+i), 3, 10))
	}
	for net.Now().Before(r.start.Add(2 * time.Second)) {
		net.RunFor(10 * time.Millisecond)
		if r.procs[0].view != 0 && r.procs[1].view == r.procs[0].view && r.procs[2].view == r.procs[0].view {
			break
		}
	}
	p := r.procs[0]
	if p.view == 0 {
		t.Fatal("the three did not found a view")
	}
	rd := p.st.Ready()
	p.ep.Send(rd.Frames)
	p.core.RemoveGroup() // between Ready and Advance
	p.st.Advance()
	p.flush(net.Now(), p.clk.Core(net.Now()))
	net.RunFor(50 * time.Millisecond)
	for _, q := range r.procs {
		if err := q.core.Err(); !errors.Is(err, view.ErrGroupRemoved) {
			t.Errorf("process %x: err %v, want ErrGroupRemoved", q.mac, err)
		}
	}
}

// A joiner that takes the lowest member id is the coordinator of the view
// that admits it. When the commit of that view is lost on its way to the
// joiner, the joiner goes on sending Joins, and only the coordinator
// answered a Join (with the commit again, catchUp): nobody resent it, the
// members' cores heard nothing from the joiner's and removed it as failed
// one failure timeout later. rbcastd's TestNetnsViewsChurn/udp met it in
// CI: the restarted member 0 was in view 3 and left out of view 4 1.3 s
// later. Any member now answers a Join from a member of its view.
func TestJoinerCoordinatorMissesCommit(t *testing.T) {
	net, err := testnet.New(13, testnet.Config{})
	if err != nil {
		t.Fatal(err)
	}
	r := &simRun{t: t, seed: 13, net: net, views: map[eraView][]frame.MemberInfo{}, start: net.Now(), window: 16, dgView: map[msgID]uint32{}}
	var eps []*testnet.Endpoint
	for i := range 3 {
		ep, err := net.Attach(testnet.EndpointConfig{})
		if err != nil {
			t.Fatal(err)
		}
		eps = append(eps, ep)
		r.procs = append(r.procs, r.newProcess(ep, uint32(600+i), 3, 10))
	}
	// all: every one of ps is in a view of number v (view ids pair a
	// number with the proposer: reliable/view, id.go).
	all := func(v uint32, ps ...*process) bool {
		for _, p := range ps {
			if view.Number(p.view) != v || p.err != nil {
				return false
			}
		}
		return true
	}
	for !all(1, r.procs...) && net.Now().Before(r.start.Add(2*time.Second)) {
		net.RunFor(10 * time.Millisecond)
	}
	if !all(1, r.procs...) {
		t.Fatal("the three did not found view 1")
	}
	// Crash member 0's process; the other two go on in view 2.
	var victim *process
	for _, p := range r.procs {
		if selfID(p) == 0 {
			victim = p
		}
	}
	if victim == nil {
		t.Fatal("no process is member 0")
	}
	var rest []*process
	for _, p := range r.procs {
		if p != victim {
			rest = append(rest, p)
		}
	}
	victim.dead = true
	victim.ep.Crash()
	for !all(2, rest...) && net.Now().Before(r.start.Add(4*time.Second)) {
		net.RunFor(10 * time.Millisecond)
	}
	if !all(2, rest...) {
		t.Fatalf("the two survivors did not install view 2 without member 0")
	}
	// It restarts as a new incarnation, takes member id 0 again, and loses
	// the first commit that admits it.
	victim.ep.Restart()
	joiner := r.newProcess(victim.ep, 700, 1, 10)
	r.procs = append(r.procs, joiner)
	dropped := 0
	joiner.drop = func(b []byte) bool {
		_, f, err := frame.SplitEthernet(b, frame.EtherType)
		if err != nil || len(f) < 16 {
			return false
		}
		v, err := frame.Parse(f)
		if err != nil || v.Type() != frame.ViewCommit || dropped > 0 {
			return false
		}
		dropped++
		return true
	}
	net.RunFor(3 * time.Second)
	if dropped != 1 {
		t.Fatalf("dropped %d commits at the joiner, want 1", dropped)
	}
	if joiner.err != nil || view.Number(joiner.view) < 3 || selfID(joiner) != 0 {
		t.Fatalf("joiner: view %#x, member %d, err %v; want member 0 of view number 3 or later", joiner.view, selfID(joiner), joiner.err)
	}
	if !all(view.Number(joiner.view), append(rest, joiner)...) || joiner.view != rest[0].view || joiner.view != rest[1].view || len(r.views[eraView{r.era, joiner.view}]) != 3 {
		t.Fatalf("views: joiner %#x, others %#x and %#x; want one view of three", joiner.view, rest[0].view, rest[1].view)
	}
	if view.Number(joiner.view) != 3 {
		t.Errorf("the joiner is in view %#x, want number 3 (it was removed and joined again)", joiner.view)
	}
	if r.failed != nil {
		t.Fatal(r.failed)
	}
}

// selfID is p's member id in its current view (NoMember without one).
func selfID(p *process) frame.MemberID {
	for _, m := range p.core.Members() {
		if m.Self {
			return m.ID
		}
	}
	return frame.NoMember
}

// Under a primary component a group whose last view lost its majority for
// good cannot go on, and a process that asks to join then is never
// admitted: the simulation must recognise that and say how, not report a
// run that did not finish. Three found a view under Agreed, two crash,
// the third stops for want of a majority, and a process that waits for a
// second one to found with waits for ever.
func TestPrimaryLostRecognised(t *testing.T) {
	net, err := testnet.New(17, testnet.Config{})
	if err != nil {
		t.Fatal(err)
	}
	r := &simRun{t: t, seed: 17, net: net, views: map[eraView][]frame.MemberInfo{}, start: net.Now(), window: 16, dgView: map[msgID]uint32{}, level: Agreed}
	for i := range 3 {
		ep, err := net.Attach(testnet.EndpointConfig{})
		if err != nil {
			t.Fatal(err)
		}
		r.procs = append(r.procs, r.newProcess(ep, uint32(800+i), 3, 10))
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
		net.RunFor(10 * time.Millisecond)
	}
	if !founded() {
		t.Fatal("the three did not found a view")
	}
	for _, p := range r.procs[:2] {
		p.dead = true
		p.ep.Crash()
	}
	ep, err := net.Attach(testnet.EndpointConfig{})
	if err != nil {
		t.Fatal(err)
	}
	r.procs = append(r.procs, r.newProcess(ep, 900, 2, 10))
	net.RunFor(3 * time.Second)
	last := r.procs[2]
	if last.err == nil || !strings.Contains(last.err.Error(), "1 of the 3 members of view 256 are reachable") {
		t.Fatalf("the last member: err %v, want it stopped for want of a majority", last.err)
	}
	if err := r.verdict(scenario{seed: 17, level: Agreed}); err != nil {
		t.Fatal(err)
	}
	if want := "of the 3 members of view 256 (0 more left it cleanly), 1 installed it and did not crash [2=3.802] (crashed [0=1.800 1=2.801], never installed it []), no majority; every member stopped, and the processes still joining [4.900] cannot be admitted"; r.lost != want {
		t.Errorf("lost primary: %q\nwant %q", r.lost, want)
	}
}
