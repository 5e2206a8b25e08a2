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
		net, err := testnet.New(seed, testnet.Config{})
		if err != nil {
			t.Fatal(err)
		}
		w, err := capture.CreateFile(path, capture.WriterOptions{QueueBytes: 64 << 20})
		if err != nil {
			t.Fatal(err)
		}
		inv := capture.NewInvariants(0, nil)
		var eps []*testnet.Endpoint
		var members []frame.MemberInfo
		for range n {
			ep, err := net.Attach(testnet.EndpointConfig{In: testnet.Impairment{Loss: 0.05}})
			if err != nil {
				t.Fatal(err)
			}
			eps = append(eps, ep)
			members = append(members, frame.MemberInfo{ID: frame.MemberID(len(eps)), MAC: [6]byte(ep.HardwareAddr()), Incarnation: 1})
		}
		got := make([][]delivered, n)
		var drivers []*reliable.Driver
		var links []*capture.Link
		for i, ep := range eps {
			l, err := capture.Wrap(ep, w, capture.Options{Node: fmt.Sprint(i + 1), Interface: fmt.Sprintf("sim%d", i+1), Clock: net.Now, Invariants: inv})
			if err != nil {
				t.Fatal(err)
			}
			links = append(links, l)
			d, err := reliable.NewDriver(l, reliable.Config{Group: 7, Members: members, Self: frame.MemberID(i + 1), Relay: true,
				Window: 16, Logger: quietLogger(),
				Deliver: func(from frame.MemberID, data []byte) { got[i] = append(got[i], delivered{from, bytes.Clone(data)}) },
			}, net.Now())
			if err != nil {
				t.Fatal(err)
			}
			drivers = append(drivers, d)
			ep.Bind(d)
		}
		for m := range k {
			if err := drivers[0].Propose(net.Now(), fmt.Appendf(nil, "message %d, seed %d", m, seed)); err != nil {
				t.Fatal(err)
			}
			net.RunFor(20 * time.Microsecond)
		}
		eps[0].Crash()
		net.RunFor(3 * time.Second) // past the failure timeout
		for _, l := range links {
			l.Close()
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
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
