package dsm_test

import (
	"fmt"
	"net/netip"
	"os/exec"
	"testing"

	"github.com/rbcast/rbcast/dsm"
	"github.com/rbcast/rbcast/link"
	"github.com/rbcast/rbcast/link/udp"
	"github.com/rbcast/rbcast/testnet/netns"
	"github.com/rbcast/rbcast/testnet/netns/netnstest"
)

// BDSM over link/udp beyond one segment: three namespaces, two on one
// bridge and one behind the routed topology's smcroute router, the group
// in IP multicast with TTL 2; 5% loss on what the router forwards and 10%
// bursty loss into host 1. The sequential-consistency and lock programs
// must pass as on the ring.
func TestNetnsBDSMOverUDP(t *testing.T) {
	netnstest.RequireRoot(t)
	if _, err := exec.LookPath("smcrouted"); err != nil {
		t.Skip("needs smcrouted (Debian package smcroute; scripts/ensure-deps.sh installs it)")
	}
	topo := netnstest.Up(t, netns.Options{Hosts: 3, Split: 2, Routed: "smcroute", Prefix: "rbudsm"})
	if err := topo.SetRouterLoss(netns.BothWays, netns.Loss{Percent: 5, UDP: true}); err != nil {
		t.Fatal(err)
	}
	if err := topo.Hosts[1].SetLoss(netns.In, netns.Loss{Percent: 10, BurstLen: 4, UDP: true}); err != nil {
		t.Fatal(err)
	}
	cfg := udp.Config{Group: netip.MustParseAddrPort("239.77.0.9:7009"), Interface: "eth0", TTL: 2, NoLoopback: true}
	links := make([]link.Link, len(topo.Hosts))
	for i, h := range topo.Hosts {
		err := h.Do(func() error {
			l, err := udp.Open(cfg)
			links[i] = l
			return err
		})
		if err != nil {
			t.Fatalf("host %d: %v", i, err)
		}
		t.Cleanup(func() { links[i].Close() })
	}
	runNetnsBDSM(t, links, 0xd6, "3 members over UDP multicast across a router", func(i int, st dsm.Stats) string {
		return fmt.Sprintf("host %d (segment %d): %d messages, %d bytes sent; retransmitted %d, nacks sent %d; link %+v",
			i, topo.Hosts[i].Segment, st.Messages, st.Bytes, st.Group.Protocol.Retransmitted, st.Group.Protocol.RepairRequests, links[i].(*udp.Link).Counters())
	})
}
