package replay

import (
	"bytes"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/reliable"
)

// A static pair under reliable.Config.Unicast (each member sends to the
// other's MAC) at 5 % loss: the re-run of each member finds Unicast in
// the capture's frames, delivers what the live member delivered, and
// sends nothing to the broadcast address, as the live member did not.
func TestSimulateUnicastPair(t *testing.T) {
	const k = 60
	for seed := uint64(0); seed < 3; seed++ {
		path := filepath.Join(t.TempDir(), fmt.Sprintf("pair%d.pcapng", seed))
		g := newStaticCaptured(t, path, seed, 2, 0.05, nil, reliable.Config{Group: 7, Unicast: true, Window: 16})
		net, eps, members, got, drivers := g.net, g.eps, g.members, g.got, g.drivers
		for m := range k {
			for i, d := range drivers {
				if err := d.Propose(net.Now(), fmt.Appendf(nil, "message %d of %d, seed %d", m, i+1, seed)); err != nil {
					t.Fatal(err)
				}
				eps[i].Bind(d)
			}
			net.RunFor(50 * time.Microsecond)
		}
		net.RunFor(time.Second)
		g.close(t)
		c, err := ReadFile(path, ReadOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for i := range 2 {
			if len(got[i]) != k { // the peer's: a static group delivers no member its own
				t.Fatalf("seed %d: member %d delivered %d of the peer's %d messages live", seed, i+1, len(got[i]), k)
			}
			res, err := Simulate(c, SimOptions{Node: members[i].ID, Members: members, Iface: -1})
			if err != nil {
				t.Fatal(err)
			}
			if !res.Config.Unicast {
				t.Errorf("seed %d: member %d re-run without Unicast; notes %q", seed, members[i].ID, res.Notes)
			}
			if !bytes.Equal(flattenDeliveries(res.Deliveries), flatten(got[i])) {
				t.Fatalf("seed %d: member %d re-run delivered %d messages, the live member %d (notes %q)", seed, members[i].ID, len(res.Deliveries), len(got[i]), res.Notes)
			}
			for _, s := range res.Sent {
				if s.Data[0]&1 != 0 {
					t.Fatalf("seed %d: member %d re-run sent a frame to %x, a group address; the live pair sent to each other's MAC", seed, members[i].ID, s.Data[:6])
				}
			}
		}
	}
}

func flattenDeliveries(ds []SimDelivery) []byte {
	var b []byte
	for _, d := range ds {
		b = fmt.Appendf(b, "%d:%s\n", d.From, d.Data)
	}
	return b
}

// A group with views under Unicast that is a pair, then three, then a
// pair again: every process's re-run finds Unicast (its Join's config
// hash) and sends what it sent live, byte for byte, the pair's frames to
// the peer's MAC and the three's to broadcast.
func TestSimulateViewsUnicast(t *testing.T) {
	run := runViewsLiveWith(t, filepath.Join(t.TempDir(), "views.pcapng"), 5, 0.05, ViewFIFO, true)
	c, err := ReadFile(run.path, ReadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pairs, threes := 0, 0
	for _, r := range c.Records {
		if r.View != nil && r.View.Type() == frame.Data && !r.View.Retransmission() {
			if r.Dst[0]&1 == 0 {
				pairs++
			} else {
				threes++
			}
		}
	}
	if pairs == 0 || threes == 0 {
		t.Fatalf("the capture holds %d Data frames to a member's MAC and %d to the group: want both", pairs, threes)
	}
	checkViewsReruns(t, run, ViewFIFO, false)
}
