package reliable

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"hash"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/link"
	"github.com/rbcast/rbcast/link/ring"
	"github.com/rbcast/rbcast/testnet/netns"
)

// Real network: four namespaces on a bridge, a ring link on each host's
// eth0, nftables loss that differs per member (restricted to our
// EtherType), every member sending several MB at once. Every receiver's
// SHA-256 of each sender's stream must equal the sender's.

// lossFor is host i's inbound loss: one clean, one 5% random, one 10% in
// bursts of 4, one clean.
var lossFor = []netns.Loss{
	{},
	{Percent: 5, EtherType: frame.EtherType},
	{Percent: 10, BurstLen: 4, EtherType: frame.EtherType},
	{},
}

// openRings opens a ring link on every host of topo.
func openRings(t *testing.T, topo *netns.Topology) []link.Link {
	t.Helper()
	links := make([]link.Link, len(topo.Hosts))
	for i, h := range topo.Hosts {
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
	return links
}

// hashMessage adds one message to a stream hash with its length, so that
// message boundaries count.
func hashMessage(h hash.Hash, msg []byte) {
	var n [4]byte
	binary.BigEndian.PutUint32(n[:], uint32(len(msg)))
	h.Write(n[:])
	h.Write(msg)
}

// joinAll joins a group on every link: with registration (host 0 the
// server) unless static is set.
func joinAll(t *testing.T, ctx context.Context, topo *netns.Topology, links []link.Link, base Config, static bool) []*Group {
	t.Helper()
	groups := make([]*Group, len(links))
	errs := make([]error, len(links))
	var members []frame.MemberInfo
	for i, h := range topo.Hosts {
		members = append(members, frame.MemberInfo{ID: frame.MemberID(i), MAC: [6]byte(h.MAC), Incarnation: 1})
	}
	var wg sync.WaitGroup
	for i, l := range links {
		cfg := base
		cfg.Logger = quiet
		switch {
		case static:
			cfg.Members, cfg.Self = members, frame.MemberID(i)
		case base.Views:
			cfg.Size, cfg.RequestID = len(links), frame.MemberID(i)
		default:
			cfg.Size, cfg.Server = len(links), i == 0
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			groups[i], errs[i] = Join(ctx, l, cfg)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("host %d: Join: %v", i, err)
		}
	}
	t.Cleanup(func() {
		for _, g := range groups {
			g.abort()
			<-g.Done()
		}
	})
	return groups
}

// allToAll sends perSender bytes from every member at once, in messages of
// random size, and checks every stream's SHA-256 at every receiver.
func allToAll(t *testing.T, ctx context.Context, groups []*Group, perSender int) time.Duration {
	t.Helper()
	sent := make(map[frame.MemberID][]byte)
	count := make(map[frame.MemberID]int)
	var mu sync.Mutex
	var wg sync.WaitGroup
	errs := make(chan error, 2*len(groups))
	start := time.Now()
	for gi, g := range groups {
		wg.Add(2)
		go func() {
			defer wg.Done()
			h := sha256.New()
			rng := rand.New(rand.NewPCG(uint64(g.Self()), 99))
			buf := make([]byte, g.MaxMessage())
			n := 0
			for total := 0; total < perSender; n++ {
				m := buf[:min(rng.IntN(g.MaxMessage()+1), perSender-total)]
				for i := range m {
					m[i] = byte(rng.Uint32())
				}
				hashMessage(h, m)
				if err := g.Send(ctx, m); err != nil {
					errs <- fmt.Errorf("member %d: Send after %d bytes: %w", g.Self(), total, err)
					return
				}
				total += len(m)
			}
			mu.Lock()
			sent[g.Self()], count[g.Self()] = h.Sum(nil), n
			mu.Unlock()
		}()
		go func() {
			defer wg.Done()
			hs := map[frame.MemberID]hash.Hash{}
			bytes := map[frame.MemberID]int{}
			var buf []byte
			done := 0
			for done < len(groups)-1 {
				from, data, err := g.RecvAppend(ctx, buf[:0])
				if err != nil {
					errs <- fmt.Errorf("member %d: Recv: %w (have %v bytes)", g.Self(), err, bytes)
					return
				}
				buf = data
				if hs[from] == nil {
					hs[from] = sha256.New()
				}
				hashMessage(hs[from], data)
				bytes[from] += len(data)
				if bytes[from] == perSender {
					done++
				}
			}
			// Compare once every sender has finished hashing.
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					mu.Lock()
					ready := len(sent) == len(groups)
					mu.Unlock()
					if ready || ctx.Err() != nil {
						break
					}
					time.Sleep(time.Millisecond)
				}
				mu.Lock()
				defer mu.Unlock()
				for from, h := range hs {
					if got, want := h.Sum(nil), sent[from]; string(got) != string(want) {
						errs <- fmt.Errorf("host %d (member %d): stream of member %d: SHA-256 %x, sender's %x", gi, g.Self(), from, got, want)
					}
				}
			}()
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	return elapsed
}

func testNetns(t *testing.T, base Config, static bool) {
	topo, links := lossyRings(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	groups := joinAll(t, ctx, topo, links, base, static)
	const perSender = 4 << 20
	elapsed := allToAll(t, ctx, groups, perSender)
	closeAll(t, groups)
	t.Logf("%v: 4 members × %d MB all-to-all in %v (%.1f MB/s sent per member)", base.Mode, perSender>>20, elapsed, float64(perSender)/elapsed.Seconds()/1e6)
	for i, g := range groups {
		st := g.Stats()
		t.Logf("host %d (loss %+v): retransmitted %d, nacks sent %d received %d, repair p50 %v p99 %v, kernel drops %d, held %d, events %v",
			i, lossFor[i], st.Protocol.Retransmitted, fifo(st).NacksSent, fifo(st).NacksReceived, st.RepairP50, st.RepairP99,
			st.Link.KernelDrops, st.HeldData, st.Events)
	}
}

// Registered groups: host 0 is the server.
func TestNetnsAllToAllPBP2(t *testing.T) { testNetns(t, Config{Group: 5, Mode: PBP2}, false) }
func TestNetnsAllToAllPBP1(t *testing.T) { testNetns(t, Config{Group: 6, Mode: PBP1}, false) }

// Static member list: no registration.
func TestNetnsAllToAllStatic(t *testing.T) {
	testNetns(t, Config{Group: 7, Mode: PBP2}, true)
}

// closeAll closes every group at once (each Close waits for the others'
// acknowledgements) and reports the ones that fail.
func closeAll(t *testing.T, groups []*Group) {
	t.Helper()
	var wg sync.WaitGroup
	for _, g := range groups {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := g.Close(); err != nil {
				t.Errorf("member %d: Close: %v", g.Self(), err)
			}
		}()
	}
	wg.Wait()
}
