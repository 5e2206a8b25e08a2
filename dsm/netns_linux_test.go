package dsm_test

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/rbcast/rbcast/dsm"
	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/link"
	"github.com/rbcast/rbcast/link/ring"
	"github.com/rbcast/rbcast/reliable"
	"github.com/rbcast/rbcast/testnet/netns"
	"github.com/rbcast/rbcast/testnet/netns/netnstest"
)

// Real network: three namespaces on a bridge, the mmap ring link on each
// host's eth0, nftables loss on two of them (5% random, 10% in bursts of
// 4), registration with host 0 the server; hosts 1 and 2 poll their
// rings before sleeping (ring.Config.RxSpin: host 1 the default, host 2
// set to 200 µs), host 0 does not (RxSpin -1). The
// sequential-consistency program and the two-member-exact lock program
// must pass, as on the simulator. Needs root (skips otherwise).
func TestNetnsBDSM(t *testing.T) {
	topo := netnstest.Up(t, netns.Options{Hosts: 3, Prefix: "rbcdsm"})
	loss := []netns.Loss{{}, {Percent: 5, EtherType: frame.EtherType}, {Percent: 10, BurstLen: 4, EtherType: frame.EtherType}}
	spin := []time.Duration{-1, 0, 200 * time.Microsecond} // never, ring.DefaultRxSpin, set
	links := make([]link.Link, len(topo.Hosts))
	for i, h := range topo.Hosts {
		if loss[i].Percent > 0 {
			if err := h.SetLoss(netns.In, loss[i]); err != nil {
				t.Fatal(err)
			}
		}
		err := h.Do(func() error {
			l, err := ring.Open(h.Iface, ring.Config{RxSpin: spin[i]})
			links[i] = l
			return err
		})
		if err != nil {
			t.Fatalf("host %d: %v", i, err)
		}
		t.Cleanup(func() { links[i].Close() })
	}
	runNetnsBDSM(t, links, 0xd5, "3 members", func(i int, st dsm.Stats) string {
		return fmt.Sprintf("host %d (loss %+v): %d messages, %d bytes sent; %d locations applied; retransmitted %d, nacks sent %d",
			i, loss[i], st.Messages, st.Bytes, st.Applied, st.Group.Protocol.Retransmitted, st.Group.Protocol.RepairRequests)
	})
}

// runNetnsBDSM joins one node per link as group id group, host 0 the
// registration server, runs the sequential-consistency program (20 phases)
// and the lock program (10 rounds of 300 writes) on all of them, logs how
// long that took after what, then logs describe's line for each host and
// fails on any bad message. The namespaces' tests differ only in links,
// loss and what they log per host.
func runNetnsBDSM(t *testing.T, links []link.Link, group uint32, what string, describe func(i int, st dsm.Stats) string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	nodes := make([]*dsm.Node, len(links))
	errs := make([]error, len(links))
	var wg sync.WaitGroup
	for i, l := range links {
		wg.Add(1)
		go func() {
			defer wg.Done()
			nodes[i], errs[i] = dsm.Join(ctx, l, dsm.Config{Group: reliable.Config{Group: group, Size: len(links), Server: i == 0,
				Logger: slog.New(slog.DiscardHandler)}})
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("host %d: Join: %v", i, err)
		}
	}
	start := time.Now()
	runLive(t, nodes, func(n *dsm.Node) error {
		if err := scProgram(20)(n); err != nil {
			return err
		}
		return barrierProgram(10, 300)(n)
	})
	t.Logf("%s, 20 phases of the SC program and 10 rounds of 300 writes each in %v", what, time.Since(start))
	for i, n := range nodes {
		st := n.Stats()
		t.Log(describe(i, st))
		if st.BadMessages != 0 {
			t.Errorf("host %d: %d bad messages", i, st.BadMessages)
		}
	}
}
