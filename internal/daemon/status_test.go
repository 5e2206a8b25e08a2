package daemon

import (
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/reliable"
	"github.com/rbcast/rbcast/testnet"
	"github.com/rbcast/rbcast/testnet/rtnet"
)

// A member shown dead always carries a reason: its removal's event kind
// (Stats.Removals: the runtime forgets a removal at a readmission and
// keeps no SequencerFailed, core.TestStepperEventLog), or, before any
// event (total order only), what Members' liveness means then.
func TestDeadReason(t *testing.T) {
	t0 := time.Date(2026, 11, 27, 0, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	why, died := removals([]reliable.Event{
		{Kind: reliable.MemberFailed, Member: 2, At: at(1)},
		{Kind: reliable.MemberStalled, Member: 3, At: at(2)},
		{Kind: reliable.MemberLeft, Member: 4, At: at(3)},
	})
	for _, c := range []struct {
		m    reliable.MemberStatus
		want string
		at   time.Time
	}{
		{reliable.MemberStatus{ID: 2}, "failed", at(1)},
		{reliable.MemberStatus{ID: 3}, "stalled", at(2)},
		{reliable.MemberStatus{ID: 4}, "left", at(3)},
		{reliable.MemberStatus{ID: 5, Sequencer: true}, reasonSequencerSilent, time.Time{}}, // suspected, heard again, then left
		{reliable.MemberStatus{ID: 6}, reasonLeaving, time.Time{}},                          // returned, then gone without an event yet
		{reliable.MemberStatus{ID: 8, Sequencer: true}, reasonSequencerSilent, time.Time{}},
	} {
		if got := deadReason(why, c.m); got != c.want {
			t.Errorf("member %d: reason %q, want %q", c.m.ID, got, c.want)
		}
		if got := died[c.m.ID]; !got.Equal(c.at) {
			t.Errorf("member %d: died at %v, want %v", c.m.ID, got, c.at)
		}
	}
	if got := selfReason(reliable.Stats{}); got != "left" {
		t.Errorf("self: reason %q, want left", got)
	}
	if got := selfReason(reliable.Stats{SelfRemoved: &reliable.Event{Kind: reliable.SelfRemoved, Member: 1, At: at(8)}}); got != "self removed" {
		t.Errorf("self after SelfRemoved: reason %q, want self removed", got)
	}
}

// Status and metrics read the runtime's counters, not its list of recent
// events, so they stay exact once that list has dropped the events they
// count: at the registration server of a group of three, member 2 fails,
// then a host floods it with Joins it refuses, well past Stats' tail of
// EventTail events. Member 2 is still dead for having failed, at the
// time of its MemberFailed; rbcastd_membership_events_total counts every
// event of each kind the group handed out, and rbcastd_view_changes_total
// the one removal.
func TestStatusExactPastEventTail(t *testing.T) {
	r := rtnet.New(t, 61)
	var mu sync.Mutex
	var seen []reliable.Event // the server's events, as OnEvent hands them out
	ds := startGroup(t, r, 3, nil, func(i int, c *Config) {
		crashTimeout(i, c)
		if i == 0 {
			c.Group.OnEvent = func(ev reliable.Event) { mu.Lock(); seen = append(seen, ev); mu.Unlock() }
		}
	})
	events := func() []reliable.Event { mu.Lock(); defer mu.Unlock(); return slices.Clone(seen) }
	ds[0].self(t)
	ds[1].self(t)
	victim := ds[2].self(t)
	ds[2].link.Crash()
	awaitStatus(t, ds[0], "with the crashed member dead", func(st Status) bool { return member(st, victim).State == StateDead })

	rogue := r.Attach(t, testnet.EndpointConfig{})
	join := func(nonce uint64) []byte {
		b := frame.AppendEthernet(nil, frame.Broadcast, [6]byte(rogue.HardwareAddr()), frame.EtherType)
		b, err := frame.Append(b, &frame.Header{Group: 7, Sender: frame.NoMember, Incarnation: 1},
			&frame.JoinBody{Requested: frame.NoMember, Window: 64, MTU: 1500, Nonce: nonce, ConfigHash: 0xbad})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	refused := func(evs []reliable.Event) (n int) {
		for _, ev := range evs {
			if ev.Kind == reliable.JoinRefused {
				n++
			}
		}
		return n
	}
	deadline := time.Now().Add(20 * time.Second)
	for nonce := uint64(1); refused(events()) < reliable.EventTail+50; nonce += 8 {
		if time.Now().After(deadline) {
			t.Fatalf("the server refused %d Joins in 20 s", refused(events()))
		}
		batch := make([][]byte, 8) // the server logs 16 refusals a turn at most
		for i := range batch {
			batch[i] = join(nonce + uint64(i))
		}
		rogue.Send(batch)
		time.Sleep(2 * time.Millisecond) // paces the flood; asserts nothing by time
	}
	// Once the last refusals are handed out, Stats counts what OnEvent saw.
	g := ds[0].d.g.Load()
	for end := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if st := g.Stats(); st.EventCounts.Total() == uint64(len(events())) {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("Stats counts %d events, OnEvent handed out %d", g.Stats().EventCounts.Total(), len(events()))
		}
	}

	all := events()
	st := g.Stats()
	failed := slices.IndexFunc(all, func(ev reliable.Event) bool { return ev.Kind == reliable.MemberFailed })
	if failed < 0 || len(st.Events) != reliable.EventTail || st.EventsDropped != uint64(len(all)-reliable.EventTail) || failed >= len(all)-reliable.EventTail {
		t.Fatalf("%d events (member %d's failure the %dth): Stats lists %d, %d dropped; want the last %d, the failure among those dropped",
			len(all), victim, failed+1, len(st.Events), st.EventsDropped, reliable.EventTail)
	}
	m := member(ds[0].d.Status(), victim)
	if want := stamp(all[failed].At); m.State != StateDead || m.Reason != "failed" || m.DiedAt != want {
		t.Errorf("member %d: %s (%q) at %q; want dead, failed, at %q", victim, m.State, m.Reason, m.DiedAt, want)
	}
	fams := scrape(t, ds[0])
	kinds := map[string]int{}
	for _, ev := range all {
		kinds[ev.Kind.String()]++
	}
	for k, n := range kinds {
		if got, _ := sample(fams, "rbcastd_membership_events_total", map[string]string{"kind": k}); got != float64(n) {
			t.Errorf("rbcastd_membership_events_total{kind=%q} = %v, want %d", k, got, n)
		}
	}
	if got := len(fams["rbcastd_membership_events_total"].GetMetric()); got != len(kinds) {
		t.Errorf("rbcastd_membership_events_total has %d kinds, want %d (%v)", got, len(kinds), kinds)
	}
	if got, _ := sample(fams, "rbcastd_view_changes_total", nil); got != 1 {
		t.Errorf("rbcastd_view_changes_total = %v, want 1 (member %d failed)", got, victim)
	}
	t.Logf("%d events at the server, %d refused Joins; Stats lists the last %d", len(all), kinds["join refused"], len(st.Events))
}
