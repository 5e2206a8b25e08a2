package reliable

import (
	"fmt"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/reliable/internal/eventtest"
	"github.com/rbcast/rbcast/testnet"
)

// churnSim is a group with views of three Drivers on a simulated segment
// in which member 2 crashes and comes back as a new incarnation, again
// and again: every cycle installs two views at the others and removes it
// once. all are member 0's events, as OnEvent handed them out.
type churnSim struct {
	t       testing.TB
	net     *testnet.Network
	eps     []*testnet.Endpoint
	drivers []*Driver
	all     []Event
	inc     uint32
}

func newChurnSim(t testing.TB) *churnSim {
	net, err := testnet.New(5, testnet.Config{})
	if err != nil {
		t.Fatal(err)
	}
	c := &churnSim{t: t, net: net, drivers: make([]*Driver, 3), inc: 1}
	for range 3 {
		ep, err := net.Attach(testnet.EndpointConfig{})
		if err != nil {
			t.Fatal(err)
		}
		c.eps = append(c.eps, ep)
	}
	for i := range c.eps {
		c.start(i, 3)
	}
	c.await("founded", 3)
	return c
}

// start runs member i as a new incarnation (size: the group it founds).
func (c *churnSim) start(i, size int) {
	c.inc++
	cfg := Config{Group: 23, Views: true, Size: size, RequestID: frame.MemberID(i), Incarnation: c.inc,
		FailureTimeout: 300 * time.Millisecond, HeartbeatInterval: 20 * time.Millisecond, Logger: quiet}
	if i == 0 {
		cfg.OnEvent = func(ev Event) { c.all = append(c.all, ev) }
	}
	d, err := NewDriver(c.eps[i], cfg, c.net.Now())
	if err != nil {
		c.t.Fatal(err)
	}
	c.drivers[i] = d
	c.eps[i].Bind(testnet.NodeFunc(d.Step))
}

// await runs the segment until member 0's view has n members.
func (c *churnSim) await(what string, n int) {
	c.t.Helper()
	for end := c.net.Now().Add(10 * time.Second); ; c.net.RunFor(10 * time.Millisecond) {
		if v := c.view(); v != nil && len(v.Members) == n {
			return
		}
		if c.net.Now().After(end) {
			c.t.Fatalf("%s: member 0 not in a view of %d after 10 s (virtual); its last events %v", what, n, c.drivers[0].Stats().Events)
		}
	}
}

// view is member 0's last view installed (a Driver's Stats has no View).
func (c *churnSim) view() *ViewInfo {
	for i := len(c.all) - 1; i >= 0; i-- {
		if c.all[i].Kind == ViewInstalled {
			return c.all[i].View
		}
	}
	return nil
}

// cycle crashes member 2 and brings it back.
func (c *churnSim) cycle() {
	c.eps[2].Crash()
	c.await("member 2 crashed", 2)
	c.eps[2].Restart()
	c.start(2, 1)
	c.await("member 2 back", 3)
}

// A member's Stats under churn: however many membership events there
// were, Events lists the last EventTail and EventsDropped counts the
// rest, while EventCounts, Removals, SelfRemoved and RecentViews are what
// every event the member handed out (OnEvent) gives (eventtest's model,
// as in reliable/core's TestStepperEventLog); and Stats costs as
// many allocations, and as many bytes, after hundreds of events as after
// the first few.
func TestStatsEventsBoundedUnderChurn(t *testing.T) {
	c := newChurnSim(t)
	c.cycle()
	cost := func() (allocs float64, bytes uint64) {
		d := c.drivers[0]
		allocs = testing.AllocsPerRun(50, func() { d.Stats() })
		var m0, m1 runtime.MemStats
		runtime.ReadMemStats(&m0)
		for range 50 {
			d.Stats()
		}
		runtime.ReadMemStats(&m1)
		return allocs, (m1.TotalAlloc - m0.TotalAlloc) / 50
	}
	fewAllocs, _ := cost()
	few := len(c.all)
	for len(c.all) < 2*EventTail+50 {
		c.cycle()
	}
	// The tail is full from here on: a Stats costs the same bytes
	// whatever more events come.
	manyAllocs, fullBytes := cost()
	for range 40 {
		c.cycle()
	}
	_, moreBytes := cost()

	st := c.drivers[0].Stats()
	all := c.all
	tail := all[len(all)-EventTail:]
	if len(st.Events) != EventTail || st.EventsDropped != uint64(len(all)-EventTail) || !slices.EqualFunc(st.Events, tail, sameEvent) {
		t.Errorf("%d events: Stats lists %d, %d dropped; want the last %d, %d dropped", len(all), len(st.Events), st.EventsDropped, EventTail, len(all)-EventTail)
	}
	m := eventtest.Replay(all, func(ev Event) (EventKind, frame.MemberID, bool) { return ev.Kind, ev.Member, ev.View != nil })
	counts, removed, views := m.Counts, m.Removed, m.Views
	if st.EventCounts != counts || counts[ViewInstalled] < 100 || counts[MemberFailed]+counts[MemberStalled] < 50 {
		t.Errorf("counts %v, want %v (at least 100 views installed, 50 removals)", st.EventCounts, counts)
	}
	if len(st.Removals) != len(removed) || len(removed) == 0 {
		t.Errorf("removals %v, want %d", st.Removals, len(removed))
	}
	for _, r := range st.Removals {
		if !sameEvent(r, removed[r.Member]) {
			t.Errorf("member %d's removal %v, want %v", r.Member, r, removed[r.Member])
		}
	}
	if !slices.EqualFunc(st.RecentViews, views[len(views)-ViewsKept:], sameEvent) {
		t.Errorf("recent views %v, want the last %d of %d", st.RecentViews, ViewsKept, len(views))
	}
	if st.SelfRemoved != nil {
		t.Errorf("self removed %v in a group that never removed member 0", st.SelfRemoved)
	}
	t.Logf("Stats: %v allocations after %d events, %v after %d; %d bytes after %d events, %d after %d",
		fewAllocs, few, manyAllocs, 2*EventTail+50, fullBytes, 2*EventTail+50, moreBytes, len(all))
	if fewAllocs != manyAllocs {
		t.Errorf("Stats allocates %v times after %d events, %v after more than %d", fewAllocs, few, manyAllocs, 2*EventTail+50)
	}
	if moreBytes > fullBytes+fullBytes/100 {
		t.Errorf("Stats allocates %d bytes with its tail full, %d after %d events", fullBytes, moreBytes, len(all))
	}
}

func sameEvent(a, b Event) bool {
	return a.Kind == b.Kind && a.Member == b.Member && a.At.Equal(b.At) && a.Reason == b.Reason && a.View == b.View &&
		a.Epoch == b.Epoch && a.Last == b.Last && a.Delivered == b.Delivered && a.Discarded == b.Discarded
}

// BenchmarkStatsAfterEvents is a member's Stats after about n membership
// events (member 2 crashing and coming back, three events a cycle): its
// cost stays that of EventTail events however many came before.
func BenchmarkStatsAfterEvents(b *testing.B) {
	for _, n := range []int{10, 300, 3000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			c := newChurnSim(b)
			for len(c.all) < n {
				c.cycle()
			}
			d := c.drivers[0]
			b.ReportAllocs()
			for b.Loop() {
				d.Stats()
			}
		})
	}
}
