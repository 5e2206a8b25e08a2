package afpacket

import (
	"testing"

	"github.com/rbcast/rbcast/link/linktest"
	"github.com/rbcast/rbcast/testnet/netns"
	"github.com/rbcast/rbcast/testnet/netns/netnstest"
)

// TestConformance runs the link conformance suite on AF_PACKET links
// between two hosts.
func TestConformance(t *testing.T) {
	topo := netnstest.Up(t, netns.Options{Hosts: 2})
	linktest.Run(t, func(t *testing.T) linktest.Pair {
		return linktest.Pair{A: open(t, topo.Hosts[0], Config{}), B: open(t, topo.Hosts[1], Config{})}
	})
}
