package replay

import (
	"bytes"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/rbcast/rbcast/capture"
	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/reliable"
	"github.com/rbcast/rbcast/testnet"
)

// A static group whose members relay a silent member's frames
// (reliable.Config.Relay): member 1 sends at 5 % loss and crashes with
// frames on the wire; the survivors relay them to one another. The re-run
// of each survivor, with Relay found from the capture's relays, delivers
// what it delivered live, in order.
func TestSimulateRelays(t *testing.T) {
	const n, k = 3, 60
	total := 0
	for seed := uint64(0); seed < 4; seed++ {
		path := filepath.Join(t.TempDir(), fmt.Sprintf("relay%d.pcapng", seed))
		inv := capture.NewInvariants(0, nil)
		g := newStaticCaptured(t, path, seed, n, 0.05, inv, reliable.Config{Group: 7, Relay: true, Window: 16})
		net, eps, members, got, drivers := g.net, g.eps, g.members, g.got, g.drivers
		for m := range k {
			if err := drivers[0].Propose(net.Now(), fmt.Appendf(nil, "message %d, seed %d", m, seed)); err != nil {
				t.Fatal(err)
			}
			net.RunFor(20 * time.Microsecond)
		}
		eps[0].Crash()
		net.RunFor(3 * time.Second) // past the failure timeout
		g.close(t)
		if c := inv.Counts(); len(c) != 0 {
			t.Errorf("seed %d: the online invariant checks found %v", seed, c)
		}
		if !bytes.Equal(flatten(got[1]), flatten(got[2])) {
			t.Fatalf("seed %d: the survivors delivered %d and %d messages", seed, len(got[1]), len(got[2]))
		}
		c, err := ReadFile(path, ReadOptions{})
		if err != nil {
			t.Fatal(err)
		}
		relays := 0
		for _, r := range c.Records {
			if r.View != nil && r.View.Type() == frame.ViewRelay {
				relays++
			}
		}
		total += relays
		for i := 1; i < n; i++ {
			res, err := Simulate(c, SimOptions{Node: members[i].ID, Members: members, Iface: -1})
			if err != nil {
				t.Fatal(err)
			}
			if relays > 0 && !res.Config.Relay {
				t.Errorf("seed %d: member %d re-run without Relay; notes %q", seed, members[i].ID, res.Notes)
			}
			if len(res.Deliveries) != len(got[i]) {
				t.Fatalf("seed %d: member %d re-run delivered %d messages, the live node %d (notes %q)", seed, members[i].ID, len(res.Deliveries), len(got[i]), res.Notes)
			}
			for j, d := range res.Deliveries {
				if want := got[i][j]; d.From != want.From || !bytes.Equal(d.Data, want.Data) {
					t.Fatalf("seed %d: member %d delivery %d: re-run %d %q, live %d %q", seed, members[i].ID, j, d.From, d.Data, want.From, want.Data)
				}
			}
		}
		t.Logf("seed %d: %d relays captured, the survivors delivered %d of %d messages", seed, relays, len(got[1]), k)
	}
	if total == 0 {
		t.Fatal("no run relayed a frame")
	}
}

func flatten(ds []delivered) []byte {
	var b []byte
	for _, d := range ds {
		b = fmt.Appendf(b, "%d:%s\n", d.From, d.Data)
	}
	return b
}

// staticCaptured is a static group of n members on a simulated segment
// (seed; loss at every receiver) with every member's frames captured to
// one file: each member a reliable.Driver of cfg (Members, Self, Logger
// and Deliver set here) over a capture.Link, its deliveries in got.
type staticCaptured struct {
	net     *testnet.Network
	w       *capture.Writer
	eps     []*testnet.Endpoint
	links   []*capture.Link
	drivers []*reliable.Driver
	members []frame.MemberInfo
	got     [][]delivered
}

func newStaticCaptured(t *testing.T, path string, seed uint64, n int, loss float64, inv *capture.Invariants, cfg reliable.Config) *staticCaptured {
	t.Helper()
	seg := newSimSegment(t, path, seed, n, loss, inv, 1)
	g := &staticCaptured{net: seg.net, w: seg.w, eps: seg.eps, links: seg.links, members: seg.members, got: make([][]delivered, n)}
	for i, l := range g.links {
		c := cfg
		c.Members, c.Self, c.Logger = g.members, frame.MemberID(i+1), quietLogger()
		c.Deliver = func(from frame.MemberID, data []byte) {
			g.got[i] = append(g.got[i], delivered{from, bytes.Clone(data)})
		}
		d, err := reliable.NewDriver(l, c, g.net.Now())
		if err != nil {
			t.Fatal(err)
		}
		g.drivers = append(g.drivers, d)
		g.eps[i].Bind(d)
	}
	return g
}

// close ends the capture: every link, then the file.
func (g *staticCaptured) close(t *testing.T) {
	t.Helper()
	for _, l := range g.links {
		l.Close()
	}
	if err := g.w.Close(); err != nil {
		t.Fatal(err)
	}
}
