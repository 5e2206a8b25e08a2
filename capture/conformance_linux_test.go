package capture

import (
	"testing"

	"github.com/rbcast/rbcast/link"
	"github.com/rbcast/rbcast/link/afpacket"
	"github.com/rbcast/rbcast/link/linktest"
	linkring "github.com/rbcast/rbcast/link/ring"
	"github.com/rbcast/rbcast/testnet/netns"
	"github.com/rbcast/rbcast/testnet/netns/netnstest"
)

// openIn opens a link on eth0 inside host h with open.
func openIn(t *testing.T, h *netns.Host, open func(string) (link.Link, error)) link.Link {
	t.Helper()
	var l link.Link
	if err := h.Do(func() (err error) {
		l, err = open(h.Iface)
		return err
	}); err != nil {
		t.Fatalf("opening a link on %s in %s: %v", h.Iface, h.Namespace, err)
	}
	return l
}

func openRing(ifname string) (link.Link, error) { return linkring.Open(ifname, linkring.Config{}) }

func openAFPacket(ifname string) (link.Link, error) {
	return afpacket.Open(ifname, afpacket.Config{})
}

// TestConformanceRing runs the link conformance suite on capture.Link over
// ring links between two hosts: staged and now-sent frames are recorded.
func TestConformanceRing(t *testing.T) {
	topo := netnstest.Up(t, netns.Options{Hosts: 2})
	linktest.Run(t, func(t *testing.T) linktest.Pair {
		return wrapPair(t, openIn(t, topo.Hosts[0], openRing), openIn(t, topo.Hosts[1], openRing), nil)
	})
}

// TestRingFastPathKept: capture.Link over a ring link reports the ring's
// staged fast path, send-now and wake, with the capture.Link itself as the
// Stager and NowSender (so what the runtime stages is recorded); over
// afpacket it reports only Wake.
func TestRingFastPathKept(t *testing.T) {
	topo := netnstest.Up(t, netns.Options{Hosts: 1})
	for _, tc := range []struct {
		name  string
		open  func(string) (link.Link, error)
		stage bool
	}{{"ring", openRing, true}, {"afpacket", openAFPacket, false}} {
		l := openIn(t, topo.Hosts[0], tc.open)
		c, err := Wrap(l, nil, Options{Recorder: newRecorderForTest(1 << 20)})
		if err != nil {
			t.Fatal(err)
		}
		st, sok := link.StagerOf(c)
		now, nok := link.NowSenderOf(c)
		w, wok := link.WakerOf(c)
		if sok != tc.stage || nok != tc.stage || !wok {
			t.Errorf("capture over %s: StagerOf %v, NowSenderOf %v, WakerOf %v; want %v, %v, true", tc.name, sok, nok, wok, tc.stage, tc.stage)
		}
		if sok && (st != link.Stager(c) || now != link.NowSender(c)) {
			t.Errorf("capture over %s: the Stager and NowSender found are %T and %T, not the capture.Link", tc.name, st, now)
		}
		if wok && w != l {
			t.Errorf("capture over %s: the Waker found is %T, not the link under it", tc.name, w)
		}
		if err := c.Close(); err != nil {
			t.Error(err)
		}
	}
}
