package replay

import (
	"bytes"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rbcast/rbcast/capture"
	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/link/auth"
	"github.com/rbcast/rbcast/reliable"
	"github.com/rbcast/rbcast/reliable/pbp"
)

// delivered is one message as the live (simulated) node delivered it.
type delivered struct {
	From frame.MemberID
	Data []byte
}

// lossyRun is a PBP group on the simulator, every endpoint wrapped by
// capture.Wrap into one pcapng file on the virtual clock.
type lossyRun struct {
	path    string
	members []frame.MemberInfo
	got     [][]delivered // by member index
}

// runLossy runs n members sending k messages each with receive loss, and
// returns the capture and what every member delivered.
func runLossy(t testing.TB, path string, seed uint64, n, k int, loss float64) *lossyRun {
	t.Helper()
	return runLossyAuth(t, path, seed, n, k, loss, nil)
}

// runLossyAuth is runLossy in an authenticated group (a nil a: without):
// the capture holds the frames as the wire carries them, sealed.
func runLossyAuth(t testing.TB, path string, seed uint64, n, k int, loss float64, a *auth.Config) *lossyRun {
	t.Helper()
	return runLossyWith(t, path, seed, n, k, loss, a, false)
}

// runLossyWith is runLossyAuth where, with datagrams, every member also
// sends a datagram of the Unreliable level each round it proposes, and 20
// more after its messages.
func runLossyWith(t testing.TB, path string, seed uint64, n, k int, loss float64, a *auth.Config, datagrams bool) *lossyRun {
	t.Helper()
	run := &lossyRun{path: path, got: make([][]delivered, n)}
	inv := capture.NewInvariants(0, nil)
	seg := newSimSegment(t, run.path, seed, n, loss, inv, 1)
	net, eps, links := seg.net, seg.eps, seg.links
	run.members = seg.members
	var drivers []*reliable.Driver
	for i, l := range links {
		ep := eps[i]
		var ac *auth.Config
		if a != nil {
			c := *a
			c.Now = net.Now
			ac = &c
		}
		d, err := reliable.NewDriver(l, reliable.Config{Group: 7, Members: run.members, Self: frame.MemberID(i + 1),
			Logger: quietLogger(), Auth: ac,
			Deliver: func(from frame.MemberID, data []byte) {
				run.got[i] = append(run.got[i], delivered{from, bytes.Clone(data)})
			},
		}, net.Now())
		if err != nil {
			t.Fatal(err)
		}
		drivers = append(drivers, d)
		ep.Bind(d)
	}
	next := make([]int, n)
	for round := 0; ; round++ {
		busy := false
		for i, d := range drivers {
			if datagrams && next[i] < k {
				dg := fmt.Appendf(nil, "datagram of member %d in round %d, seed %d", i+1, round, seed)
				if err := d.ProposeUnreliable(net.Now(), dg); err != nil {
					t.Fatal(err)
				}
			}
			for next[i] < k {
				msg := fmt.Appendf(nil, "message %d from member %d, seed %d", next[i], i+1, seed)
				if err := d.Propose(net.Now(), msg); err != nil {
					if err != pbp.ErrWindowFull {
						t.Fatal(err)
					}
					break
				}
				next[i]++
			}
			busy = busy || next[i] < k
		}
		if !busy {
			break
		}
		if round > 100000 {
			t.Fatal("senders stuck")
		}
		net.RunFor(200 * time.Microsecond)
	}
	for round := 0; datagrams && round < 20; round++ {
		for i, d := range drivers {
			dg := fmt.Appendf(nil, "datagram %d of member %d after the messages, seed %d", round, i+1, seed)
			if err := d.ProposeUnreliable(net.Now(), dg); err != nil {
				t.Fatal(err)
			}
		}
		net.RunFor(500 * time.Microsecond)
	}
	net.RunFor(300 * time.Millisecond) // repairs finish, acks settle
	seg.close(t)
	// Encrypted bodies do not decode without the key: the online checker
	// (which has none) counts them corrupt.
	if n := inv.Counts(); len(n) != 0 && (a == nil || !a.Encrypt) {
		t.Fatalf("the online invariant checks found %v in a correct run", n)
	}
	return run
}

// The re-run of each member delivers what the live member delivered, in
// its order, and sends what it sent, byte for byte; with datagrams (a
// registered group's Unreliable level, PBP's) among the messages too, in
// their places.
func TestSimulateReproducesDeliveries(t *testing.T) {
	for _, datagrams := range []bool{false, true} {
		t.Run(fmt.Sprintf("datagrams=%v", datagrams), func(t *testing.T) { testSimulateReproduces(t, datagrams) })
	}
}

func testSimulateReproduces(t *testing.T, datagrams bool) {
	run := runLossyWith(t, filepath.Join(t.TempDir(), "lossy.pcapng"), 3, 4, 300, 0.05, nil, datagrams)
	c, err := ReadFile(run.path, ReadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i, m := range run.members {
		res, err := Simulate(c, SimOptions{Node: m.ID, Members: run.members, Iface: -1})
		if err != nil {
			t.Fatal(err)
		}
		if res.Protocol != ProtocolPBP {
			t.Fatalf("member %d: simulated as %v, want PBP", m.ID, res.Protocol)
		}
		reliable, unreliable := 0, 0
		for _, d := range run.got[i] {
			if bytes.HasPrefix(d.Data, []byte("datagram ")) {
				unreliable++
			} else {
				reliable++
			}
		}
		if reliable != 3*300 || datagrams && unreliable == 0 || !datagrams && unreliable != 0 {
			t.Fatalf("member %d delivered %d messages and %d datagrams live, want %d messages and datagrams %v", m.ID, reliable, unreliable, 900, datagrams)
		}
		if datagrams {
			var got int
			for _, d := range res.Deliveries {
				if d.Unreliable {
					got++
				}
			}
			if got != unreliable {
				t.Errorf("member %d: the re-run delivered %d datagrams as unreliable, the live node %d datagrams", m.ID, got, unreliable)
			}
		}
		if len(res.Deliveries) != len(run.got[i]) {
			t.Fatalf("member %d: re-run delivered %d messages, the live node %d (notes %q)", m.ID, len(res.Deliveries), len(run.got[i]), res.Notes)
		}
		for k, d := range res.Deliveries {
			if want := run.got[i][k]; d.From != want.From || !bytes.Equal(d.Data, want.Data) {
				t.Fatalf("member %d delivery %d: re-run %d %q, live %d %q", m.ID, k, d.From, d.Data, want.From, want.Data)
			}
		}
		for _, n := range res.Notes {
			if bytes.Contains([]byte(n), []byte("diverge")) {
				t.Errorf("member %d: %s", m.ID, n)
			}
		}
		// The re-run sends exactly what the live node sent, byte for byte.
		if d := sentAsCaptured(c, res); d != "" {
			t.Errorf("member %d: %s", m.ID, d)
		}
		var a, b bytes.Buffer
		res.Write(&a, c, false)
		res2, _ := Simulate(c, SimOptions{Node: m.ID, Members: run.members, Iface: -1})
		res2.Write(&b, c, false)
		if a.String() != b.String() {
			t.Fatalf("member %d: two re-runs print differently", m.ID)
		}
		if i == 1 {
			t.Logf("member %d re-run:\n%s", m.ID, tail(a.String(), 3))
		}
	}
}

func tail(s string, n int) string {
	lines := bytes.Split([]byte(s), []byte("\n"))
	if len(lines) > n+1 {
		lines = lines[len(lines)-n-1:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}

// A registered group's Join frames carry the members' send window; the
// re-run uses it unless -window says otherwise, so a capture taken under
// another default (128 before 2026-11-22) is re-run as it was recorded.
func TestSimulateWindowFromJoin(t *testing.T) {
	run := runLossy(t, filepath.Join(t.TempDir(), "join.pcapng"), 5, 2, 20, 0)
	c, err := ReadFile(run.path, ReadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	res, err := Simulate(c, SimOptions{Node: 1, Members: run.members, Iface: -1})
	if err != nil {
		t.Fatal(err)
	}
	if res.Config.Window != 0 || slices.ContainsFunc(res.Notes, func(n string) bool { return strings.Contains(n, "Join") }) {
		t.Fatalf("no Join frame: window %d, notes %q; want the default and no note", res.Config.Window, res.Notes)
	}
	// A Join of group 7 asking for window 64, as registration sends it.
	body, err := frame.Append(nil, &frame.Header{Group: 7, Sender: frame.NoMember, Incarnation: 9},
		&frame.JoinBody{Requested: frame.NoMember, Window: 64, MTU: 1500, Nonce: 1, ConfigHash: 2})
	if err != nil {
		t.Fatal(err)
	}
	data := append(frame.AppendEthernet(nil, frame.Broadcast, [6]byte{2, 0, 0, 0, 0, 9}, frame.EtherType), body...)
	v, err := frame.Parse(body)
	if err != nil {
		t.Fatal(err)
	}
	first := c.Records[0]
	c.Records = append([]Record{{N: 0, Time: first.Time, Iface: first.Iface, Data: data, Src: [6]byte{2, 0, 0, 0, 0, 9}, Dst: frame.Broadcast, View: v}}, c.Records...)
	res, err = Simulate(c, SimOptions{Node: 1, Members: run.members, Iface: -1})
	if err != nil {
		t.Fatal(err)
	}
	if res.Config.Window != 64 || !slices.Contains(res.Notes, "window 64, from the Join frame 0") {
		t.Fatalf("with a Join for window 64: window %d, notes %q", res.Config.Window, res.Notes)
	}
	// The node's own Join wins over another joiner's (a refused one's
	// may carry another window), wherever it comes.
	own, err := frame.Append(nil, &frame.Header{Group: 7, Sender: frame.NoMember, Incarnation: 1},
		&frame.JoinBody{Requested: frame.NoMember, Window: 96, MTU: 1500, Nonce: 3, ConfigHash: 2})
	if err != nil {
		t.Fatal(err)
	}
	ov, err := frame.Parse(own)
	if err != nil {
		t.Fatal(err)
	}
	self := run.members[0].MAC
	c.Records = append(c.Records, Record{N: 99999, Time: first.Time, Iface: first.Iface,
		Data: append(frame.AppendEthernet(nil, frame.Broadcast, self, frame.EtherType), own...), Src: self, Dst: frame.Broadcast, View: ov})
	res, err = Simulate(c, SimOptions{Node: 1, Members: run.members, Iface: -1})
	if err != nil {
		t.Fatal(err)
	}
	if res.Config.Window != 96 || !slices.Contains(res.Notes, "window 96, from the Join frame 99999") {
		t.Fatalf("with its own Join for 96 after another's for 64: window %d, notes %q", res.Config.Window, res.Notes)
	}
	res, err = Simulate(c, SimOptions{Node: 1, Members: run.members, Iface: -1, Window: 32})
	if err != nil {
		t.Fatal(err)
	}
	if res.Config.Window != 32 {
		t.Fatalf("-window 32 with a Join for 64: window %d, want 32", res.Config.Window)
	}
}

// A capture that starts mid-run (a flight-recorder dump) holds frames of
// senders far past what a freshly built core expects. More than a window
// past it reads, to the core, as a sender that has removed this member
// (docs/protocols.md, "Static member lists and a late start"), so the
// re-run removes each such sender with that reason, and from then on
// stops Nacking it for frames the capture cannot hold (before, while its
// frames are within a window, the gap is Nacked like any other);
// docs/debugging.md says so.
func TestSimulateMidRunCaptureRemovesSenders(t *testing.T) {
	run := runLossy(t, filepath.Join(t.TempDir(), "midrun.pcapng"), 9, 3, 3000, 0)
	c, err := ReadFile(run.path, ReadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c.Records = c.Records[len(c.Records)*2/3:]
	res, err := Simulate(c, SimOptions{Node: 1, Members: run.members, Iface: -1})
	if err != nil {
		t.Fatal(err)
	}
	removed := map[string]bool{}
	removedAt := map[frame.MemberID]time.Time{}
	for _, e := range res.Events {
		s := e.Event.String()
		if strings.Contains(s, pbp.StalledRemovedUs) {
			removed[strings.Fields(s)[1]] = true
			removedAt[e.Event.(pbp.Event).Member] = e.At
		}
	}
	if !removed["2"] || !removed["3"] {
		var b bytes.Buffer
		res.Write(&b, c, false)
		t.Fatalf("removed %v, want members 2 and 3 removed with %q; re-run:\n%s", removed, pbp.StalledRemovedUs, tail(b.String(), 12))
	}
	// Nothing of theirs is delivered (and under FIFO none of our own), and
	// nothing of theirs is asked for once they are removed.
	if len(res.Deliveries) != 0 {
		t.Errorf("re-run delivered %d messages, the first from member %d, whose earlier frames the capture lacks", len(res.Deliveries), res.Deliveries[0].From)
	}
	for _, sent := range res.Sent {
		_, rest, err := frame.SplitEthernet(sent.Data, frame.EtherType)
		if err != nil {
			t.Fatal(err)
		}
		v, err := frame.ParseGroup(rest, 7)
		if err != nil {
			t.Fatal(err)
		}
		if v.Type() != frame.Nack {
			continue
		}
		if at, ok := removedAt[v.NackTarget()]; ok && !sent.At.Before(at) {
			t.Errorf("re-run sent a Nack to member %d at %v, after removing it at %v", v.NackTarget(), sent.At, at)
		}
	}
	t.Logf("%d events, %d frames sent; first event: %v", len(res.Events), len(res.Sent), res.Events[0].Event)
}
