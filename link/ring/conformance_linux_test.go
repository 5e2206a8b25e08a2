package ring

import (
	"testing"

	"github.com/rbcast/rbcast/link/linktest"
	"github.com/rbcast/rbcast/testnet/netns"
	"github.com/rbcast/rbcast/testnet/netns/netnstest"
)

// TestConformance runs the link conformance suite on ring links between
// two hosts, for both receive layouts and both send paths.
func TestConformance(t *testing.T) {
	topo := netnstest.Up(t, netns.Options{Hosts: 2})
	for _, cfg := range []Config{{Version: V2, TxMode: TxRing}, {Version: V3, TxMode: TxRing}, {Version: V2, TxMode: TxSendmmsg}} {
		t.Run(cfg.Version.String()+"/"+cfg.TxMode.String(), func(t *testing.T) {
			linktest.Run(t, func(t *testing.T) linktest.Pair {
				return linktest.Pair{A: openOn(t, topo.Hosts[0], cfg), B: openOn(t, topo.Hosts[1], cfg)}
			})
		})
	}
}
