package collective

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/link"
	"github.com/rbcast/rbcast/link/ring"
	"github.com/rbcast/rbcast/reliable"
	"github.com/rbcast/rbcast/testnet/netns"
	"github.com/rbcast/rbcast/testnet/netns/netnstest"
)

// Real network: four namespaces on a bridge (prefix rbp), the mmap ring
// link on each host, nftables loss on three of them (2 %, 5 %, and 10 %
// in bursts of 4), registration with host 0 the server. Every collective
// and the bare calls run 40 rounds, each result checked byte for byte.
// Needs root (skips otherwise).
func TestNetnsCollectives(t *testing.T) {
	topo := netnstest.Up(t, netns.Options{Hosts: 4, Prefix: "rbp"})
	loss := []netns.Loss{{}, {Percent: 2, EtherType: frame.EtherType}, {Percent: 5, EtherType: frame.EtherType},
		{Percent: 10, BurstLen: 4, EtherType: frame.EtherType}}
	links := make([]link.Link, len(topo.Hosts))
	for i, h := range topo.Hosts {
		if loss[i].Percent > 0 {
			if err := h.SetLoss(netns.In, loss[i]); err != nil {
				t.Fatal(err)
			}
		}
		err := h.Do(func() error {
			l, err := ring.Open(h.Iface, ring.Config{})
			links[i] = l
			return err
		})
		if err != nil {
			t.Fatalf("host %d: %v", i, err)
		}
		t.Cleanup(func() { links[i].Close() })
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	comms := make([]*Comm, len(links))
	errs := make([]error, len(links))
	var wg sync.WaitGroup
	for i, l := range links {
		wg.Add(1)
		go func() {
			defer wg.Done()
			comms[i], errs[i] = Join(ctx, l, reliable.Config{Group: 0x24, Size: len(links), Server: i == 0,
				Logger: slog.New(slog.DiscardHandler)})
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("host %d: Join: %v", i, err)
		}
	}
	start := time.Now()
	for i, c := range comms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = everyCollective(c, 40)
			if errs[i] == nil {
				errs[i] = c.Close()
			}
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("host %d (loss %+v): %v", i, loss[i], err)
		}
	}
	t.Logf("4 members, 40 rounds of Bcast, Allgather, Alltoall, a multicast to two and Barrier in %v", time.Since(start))
	for i, c := range comms {
		st := c.Group().Stats()
		t.Logf("host %d (loss %+v): sent %d, resent %d, nacks %d", i, loss[i], st.Protocol.Sent, st.Protocol.Retransmitted, st.Protocol.RepairRequests)
	}
}
