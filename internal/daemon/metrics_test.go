package daemon

import (
	"fmt"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/rbcast/rbcast/reliable"
	"github.com/rbcast/rbcast/testnet"
	"github.com/rbcast/rbcast/testnet/rtnet"
)

// scrape fetches x's metrics and parses them.
func scrape(t *testing.T, x *running) map[string]*dto.MetricFamily {
	t.Helper()
	rec := httptest.NewRecorder()
	x.d.MetricsHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if ct := rec.Header().Get("Content-Type"); !strings.HasPrefix(ct, "text/plain; version=0.0.4") {
		t.Fatalf("Content-Type %q", ct)
	}
	p := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(rec.Body.String()))
	if err != nil {
		t.Fatalf("the exposition does not parse: %v\n%s", err, rec.Body.String())
	}
	return fams
}

// sample returns the value of the sample of family name whose labels
// include want (a counter's, a gauge's, or a histogram's count).
func sample(fams map[string]*dto.MetricFamily, name string, want map[string]string) (float64, bool) {
	f, ok := fams[name]
	if !ok {
		return 0, false
	}
next:
	for _, m := range f.GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		for k, v := range want {
			if labels[k] != v {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			return m.Counter.GetValue(), true
		case m.Gauge != nil:
			return m.Gauge.GetValue(), true
		case m.Histogram != nil:
			return float64(m.Histogram.GetSampleCount()), true
		}
	}
	return 0, false
}

// The names of the hand-written exposition, which dashboards and alerts
// may use: client_golang keeps them.
var keptNames = []string{"rbcastd_ready", "rbcastd_self", "rbcastd_accepted_total", "rbcastd_sent_messages_total",
	"rbcastd_delivered_messages_total", "rbcastd_data_frames_sent_total", "rbcastd_retransmissions_total",
	"rbcastd_nacks_sent_total", "rbcastd_nacks_received_total", "rbcastd_in_flight_frames", "rbcastd_pending_frames",
	"rbcastd_queued_messages", "rbcastd_held_data_frames_total", "rbcastd_repair_p50_seconds", "rbcastd_repair_p99_seconds",
	"rbcastd_kernel_drops_total", "rbcastd_bad_frames_total", "rbcastd_clients", "rbcastd_member_state",
	"rbcastd_member_delivered_bytes_total"}

// Three daemons, member 2 losing 10 % of its frames, member 0 sending:
// the exposition parses; the old names are there with the group label;
// the Go runtime's and the process's metrics are there; member 2's repair
// latency histogram for member 0 counts every gap it repaired, and the
// repair traffic shows per (sender, receiver) pair at both ends.
func TestMetrics(t *testing.T) {
	r := rtnet.New(t, 9)
	ds := startGroup(t, r, 3, []testnet.Impairment{{}, {}, {Loss: 0.1}}, nil)
	ids := []int{ds[0].self(t), ds[1].self(t), ds[2].self(t)}
	sub := subscribe(t, ds[2].socket, uint16(ids[0]))
	c, w := dial(t, ds[0].socket, true)
	data := randomBytes(5, 400_000)
	if _, err := sendAll(t, c, data, int(w.MaxMessage)); err != nil {
		t.Fatal(err)
	}
	if got, err := collect(sub, len(data)); err != nil || len(got) != len(data) {
		t.Fatalf("member 2 received %d of %d bytes: %v", len(got), len(data), err)
	}

	g := map[string]string{"group": "7"}
	lossy := scrape(t, ds[2])
	for _, name := range keptNames {
		if _, ok := sample(lossy, name, g); !ok {
			t.Errorf("metric %s{group=\"7\"} is missing", name)
		}
	}
	for _, name := range []string{"go_goroutines", "go_memstats_alloc_bytes", "process_cpu_seconds_total", "process_resident_memory_bytes"} {
		if _, ok := lossy[name]; !ok {
			t.Errorf("metric %s is missing", name)
		}
	}
	if v, _ := sample(lossy, "rbcastd_ready", g); v != 1 {
		t.Errorf("rbcastd_ready = %v", v)
	}
	sender := map[string]string{"group": "7", "sender": itoa(ids[0])}
	repairs, ok := sample(lossy, "rbcastd_repair_latency_seconds", sender)
	gaps, _ := sample(lossy, "rbcastd_member_gaps_repaired_total", map[string]string{"member": itoa(ids[0])})
	if !ok || repairs == 0 || repairs != gaps {
		t.Errorf("member 2's repair latency histogram of member 0 counts %v repairs (present: %v), its gap counter %v; want equal and > 0", repairs, ok, gaps)
	}
	if f := lossy["rbcastd_repair_latency_seconds"]; f.GetType() != dto.MetricType_HISTOGRAM || len(f.GetMetric()[0].GetHistogram().GetBucket()) < 17 {
		t.Errorf("rbcastd_repair_latency_seconds: %v", f)
	}
	pair := map[string]string{"sender": itoa(ids[0]), "receiver": itoa(ids[2])}
	if n, _ := sample(lossy, "rbcastd_pair_nacks_total", pair); n == 0 {
		t.Errorf("member 2 counts no NACK it sent to member 0")
	}
	if n, _ := sample(lossy, "rbcastd_pair_retransmitted_frames_total", pair); n == 0 {
		t.Errorf("member 2 counts no retransmission it received from member 0")
	}
	source := scrape(t, ds[0])
	if n, _ := sample(source, "rbcastd_pair_nacks_total", pair); n == 0 {
		t.Errorf("member 0 counts no NACK it received from member 2")
	}
	retx, _ := sample(source, "rbcastd_pair_retransmitted_frames_total", pair)
	all, _ := sample(source, "rbcastd_pair_retransmitted_frames_total", map[string]string{"sender": itoa(ids[0]), "receiver": "all"})
	if retx+all == 0 {
		t.Errorf("member 0 counts no retransmission it sent to member 2 or to all")
	}
	// The acknowledgement matrix: a gauge per (member, sender) pair of
	// live members, nine here.
	if f := source["rbcastd_ack_lag_frames"]; len(f.GetMetric()) != 9 {
		t.Errorf("rbcastd_ack_lag_frames has %d samples, want 9: %v", len(f.GetMetric()), f)
	}
	if _, ok := sample(source, "rbcastd_ack_lag_frames", map[string]string{"member": itoa(ids[2]), "sender": itoa(ids[0])}); !ok {
		t.Errorf("rbcastd_ack_lag_frames has no sample of member 2 behind member 0")
	}
	if v, _ := sample(source, "rbcastd_members", map[string]string{"state": "alive"}); v != 3 {
		t.Errorf("rbcastd_members{state=alive} = %v, want 3", v)
	}

	// Names, units, types and help texts pass promlint.
	problems, err := testutil.CollectAndLint(&collector{d: ds[2].d})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}
}

// Under -order total the delivery latency of this member's own messages
// is a histogram with one sample per message it sent.
func TestMetricsSelfDelivery(t *testing.T) {
	r := rtnet.New(t, 10)
	ds := startGroup(t, r, 2, nil, func(i int, c *Config) { c.Group.Order = reliable.Total })
	ds[0].self(t)
	ds[1].self(t)
	c, w := dial(t, ds[1].socket, true)
	data := randomBytes(6, 50_000)
	if _, err := sendAll(t, c, data, int(w.MaxMessage)); err != nil {
		t.Fatal(err)
	}
	sent := (len(data) + int(w.MaxMessage) - 1) / int(w.MaxMessage)
	fams := scrape(t, ds[1])
	if n, ok := sample(fams, "rbcastd_self_delivery_latency_seconds", nil); !ok || int(n) != sent {
		t.Errorf("self-delivery latency histogram counts %v (present: %v), want the %d messages sent", n, ok, sent)
	}
	if v, ok := sample(fams, "rbcastd_group_info", map[string]string{"order": "total", "mode": "sequencer"}); !ok || v != 1 {
		t.Errorf("rbcastd_group_info: %v, %v", v, ok)
	}
}

func itoa(i int) string { return strconv.Itoa(i) }

// Under -membership views every view installed here is counted in
// rbcastd_membership_events_total{kind="view installed"} (docs/metrics.md):
// the views that founded the group of three, then the view without the
// member cut off.
func TestMetricsViewsInstalled(t *testing.T) {
	cuts := newCuts(t, rtnet.New(t, 47), 3)
	ds := startViews(t, cuts, nil, nil)
	awaitAll(t, ds, "in one view of three", func(sts []Status) bool {
		for _, st := range sts {
			if !st.Ready || len(viewOf(st)) != 3 || st.View.ID != sts[0].View.ID {
				return false
			}
		}
		return true
	})
	installed := func() float64 {
		t.Helper()
		v, ok := sample(scrape(t, ds[0]), "rbcastd_membership_events_total", map[string]string{"kind": "view installed"})
		if !ok {
			t.Fatal(`rbcastd_membership_events_total{kind="view installed"} is missing`)
		}
		return v
	}
	founded := len(ds[0].d.Status().View.Changes)
	if got := installed(); founded < 1 || got != float64(founded) {
		t.Fatalf("in the group of three: %v views installed counted, status lists %d", got, founded)
	}

	cuts[2].set(func(c *cutLink) { c.deaf, c.mute = true, true })
	st := awaitStatus(t, ds[0], "in a view of two", func(st Status) bool { return st.View != nil && len(viewOf(st)) == 2 })
	if got, want := installed(), len(st.View.Changes); want <= founded || got != float64(want) {
		t.Fatalf("after member 2 was cut off: %v views installed counted, status lists %d (%d before)", got, want, founded)
	}
	if v, _ := sample(scrape(t, ds[0]), "rbcastd_members", map[string]string{"state": "alive"}); v != 2 {
		t.Errorf("rbcastd_members{state=alive} = %v in a view of two, want 2", v)
	}
}

// viewMetrics reads rbcastd_view, rbcastd_view_members and
// rbcastd_view_changes_total from fams; ok is whether the gauges are
// there.
func viewMetrics(t *testing.T, fams map[string]*dto.MetricFamily) (id, members, changes float64, ok bool) {
	t.Helper()
	id, okID := sample(fams, "rbcastd_view", map[string]string{"group": "9"})
	members, okMembers := sample(fams, "rbcastd_view_members", map[string]string{"group": "9"})
	changes, okChanges := sample(fams, "rbcastd_view_changes_total", map[string]string{"group": "9"})
	if !okChanges {
		t.Fatal("rbcastd_view_changes_total is missing")
	}
	return id, members, changes, okID && okMembers
}

// checkViewMetrics holds x's view gauges to the view its status lists,
// and rbcastd_view_changes_total to the views installed here after the
// first: before, those of its earlier memberships.
func checkViewMetrics(t *testing.T, name string, x *running, before int) {
	t.Helper()
	st := x.d.Status()
	id, members, changes, ok := viewMetrics(t, scrape(t, x))
	if st.View == nil || len(st.View.Changes) >= maxViewChanges {
		t.Fatalf("%s: status lists view %+v; want a view with fewer than %d changes", name, st.View, maxViewChanges)
	}
	installed := before + len(st.View.Changes)
	t.Logf("%s: view %d of %d members, %d views installed here", name, st.View.ID, len(st.View.Members), installed)
	if again := x.d.Status(); again.View.ID != st.View.ID || len(again.View.Changes) != len(st.View.Changes) {
		t.Fatalf("%s: the view changed while the test read it (%d, then %d)", name, st.View.ID, again.View.ID)
	}
	if !ok || id != float64(st.View.ID) || members != float64(len(st.View.Members)) {
		t.Errorf("%s: rbcastd_view %v, rbcastd_view_members %v (present: %v); status lists view %d of %d members",
			name, id, members, ok, st.View.ID, len(st.View.Members))
	}
	if changes != float64(installed-1) || st.ViewsInstalled != installed {
		t.Errorf("%s: rbcastd_view_changes_total %v, status views_installed %d; %d views installed here (%d in earlier memberships, %d now), want %d changes",
			name, changes, st.ViewsInstalled, installed, before, len(st.View.Changes), installed-1)
	}
}

// Under -membership views rbcastd_view and rbcastd_view_members are the
// view each daemon installed, and rbcastd_view_changes_total counts every
// view installed after the first, whatever changed: daemons 0 and 1 found
// the group, daemon 2 joins, daemon 1 is left out (daemon 2 stops hearing
// it: to the group a failure), and daemon 1 joins again as a new
// incarnation. While it joins again its gauges are absent and its
// counter keeps the views of its first membership.
func TestMetricsViewChanges(t *testing.T) {
	cuts := newCuts(t, rtnet.New(t, 53), 3)
	rejoining, resume := make(chan struct{}), make(chan struct{})
	ds := startViews(t, cuts[:2], nil, func(i int) func() {
		if i != 1 {
			return nil
		}
		return func() {
			select {
			case rejoining <- struct{}{}:
				<-resume
			case <-resume:
			}
		}
	})
	var once sync.Once
	resumeOnce := func() { once.Do(func() { close(resume) }) }
	t.Cleanup(resumeOnce)
	awaitAll(t, ds, "in one view of two", func(sts []Status) bool {
		for _, st := range sts {
			if !st.Ready || len(viewOf(st)) != 2 || st.View.ID != sts[0].View.ID {
				return false
			}
		}
		return true
	})
	for i, x := range ds {
		checkViewMetrics(t, fmt.Sprintf("founded, daemon %d", i), x, 0)
	}

	cfg := Config{Logger: quiet, Group: reliable.Config{Group: 9, Views: true, Size: 2, RequestID: 2,
		Incarnation: 21, FailureTimeout: time.Second, HeartbeatInterval: 20 * time.Millisecond}}
	ds = append(ds, startDaemon(t, cuts[2], filepath.Join(t.TempDir(), "v2.sock"), cfg))
	three := func(what string) []Status {
		return awaitAll(t, ds, what, func(sts []Status) bool {
			for _, st := range sts {
				if !st.Ready || len(viewOf(st)) != 3 || st.View.ID != sts[0].View.ID {
					return false
				}
			}
			return true
		})
	}
	joined := three("in one view of three, daemon 2 joined")
	for i, x := range ds {
		checkViewMetrics(t, fmt.Sprintf("daemon 2 joined, daemon %d", i), x, 0)
	}

	// Daemon 2 stops hearing daemon 1: the others install a view without
	// it, and daemon 1 joins again.
	cuts[2].set(func(c *cutLink) { c.deafTo[mac6(cuts[1].Link)] = true })
	<-rejoining
	id, members, changes, ok := viewMetrics(t, scrape(t, ds[1]))
	if ok || changes != float64(len(joined[1].View.Changes)-1) {
		t.Errorf("daemon 1 joining again: rbcastd_view %v, rbcastd_view_members %v (present: %v), rbcastd_view_changes_total %v; want no view and the %d changes of its first membership",
			id, members, ok, changes, len(joined[1].View.Changes)-1)
	}
	for _, i := range []int{0, 2} {
		awaitStatus(t, ds[i], "in a view without daemon 1", func(st Status) bool { _, in := viewOf(st)[1]; return st.View != nil && !in })
		checkViewMetrics(t, fmt.Sprintf("daemon 1 left out, daemon %d", i), ds[i], 0)
	}
	cuts[2].set(func(c *cutLink) { c.deafTo = map[[6]byte]bool{} })
	resumeOnce()

	sts := three("in one view of three, daemon 1 back")
	if sts[1].Rejoins != 1 || sts[1].LastRejoin == nil || sts[1].LastRejoin.View != joined[1].View.ID {
		t.Fatalf("daemon 1 back: rejoins %d, last %+v; want 1, out of view %d (its last before, as the test counted it)", sts[1].Rejoins, sts[1].LastRejoin, joined[1].View.ID)
	}
	for i, x := range ds {
		before := 0
		if i == 1 {
			before = len(joined[1].View.Changes)
		}
		checkViewMetrics(t, fmt.Sprintf("daemon 1 back, daemon %d", i), x, before)
	}
}

// A fixed group (registration) has one view: rbcastd_view is 0 and
// rbcastd_view_members its size, a dead member included, while
// rbcastd_view_changes_total counts removals as before.
func TestMetricsViewFixedGroup(t *testing.T) {
	ds := startGroup(t, rtnet.New(t, 54), 3, nil, crashTimeout)
	for _, x := range ds {
		x.self(t)
	}
	g := map[string]string{"group": "7"}
	check := func(what string, wantChanges float64) {
		t.Helper()
		fams := scrape(t, ds[0])
		id, okID := sample(fams, "rbcastd_view", g)
		members, okMembers := sample(fams, "rbcastd_view_members", g)
		changes, _ := sample(fams, "rbcastd_view_changes_total", g)
		if !okID || !okMembers || id != 0 || members != 3 || changes != wantChanges {
			t.Errorf("%s: rbcastd_view %v (%v), rbcastd_view_members %v (%v), rbcastd_view_changes_total %v; want 0, 3, %v",
				what, id, okID, members, okMembers, changes, wantChanges)
		}
	}
	check("three live", 0)
	if err := ds[2].stop(t); err != nil {
		t.Fatal(err)
	}
	awaitStatus(t, ds[0], "with a dead member", func(st Status) bool {
		for _, m := range st.Members {
			if m.State == StateDead {
				return true
			}
		}
		return false
	})
	check("one dead", 1)
}

// Every kind label rbcastd_membership_events_total can carry (one per
// bucket of Stats.EventCounts) is a name, listed in the metric's help:
// none is "EventKind(N)", bucket 0 included.
func TestEventKindLabels(t *testing.T) {
	help := descEvents.String()
	for k := range len(reliable.EventCounts{}) {
		l := eventKindLabel(k)
		if strings.Contains(l, "(") || !strings.Contains(help, l) {
			t.Errorf("bucket %d's label %q is not a name the help lists: %s", k, l, help)
		}
	}
}
