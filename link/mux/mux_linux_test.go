package mux_test

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rbcast/rbcast/link"
	"github.com/rbcast/rbcast/link/afpacket"
	"github.com/rbcast/rbcast/link/linktest"
	"github.com/rbcast/rbcast/link/mux"
	"github.com/rbcast/rbcast/link/ring"
	"github.com/rbcast/rbcast/testnet/netns"
	"github.com/rbcast/rbcast/testnet/netns/netnstest"
)

// openLink opens kind ("ring" or "afpacket") on eth0 in host h.
func openLink(t testing.TB, h *netns.Host, kind string) link.Link {
	t.Helper()
	var l link.Link
	err := h.Do(func() (err error) {
		if kind == "afpacket" {
			l, err = afpacket.Open(h.Iface, afpacket.Config{})
		} else {
			l, err = ring.Open(h.Iface, ring.Config{})
		}
		return err
	})
	if err != nil {
		t.Fatalf("opening %s in %s: %v", kind, h.Namespace, err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// noise sends frames of groups 8 and 9 from l until the test ends, a few
// hundred a second.
func noise(t *testing.T, l link.Link) {
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		src := l.HardwareAddr()
		for seq := uint32(0); ; seq++ {
			select {
			case <-stop:
				return
			case <-time.After(2 * time.Millisecond):
			}
			l.Send([][]byte{groupFrame(src, 8, seq, 200), groupFrame(src, 9, seq, 60)})
		}
	}()
	t.Cleanup(func() {
		close(stop)
		<-done
	})
}

// Views of group 7 on two hosts pass the link conformance suite over
// ring and afpacket links, while a third host sends frames of groups 8
// and 9 to both: B's mux has a view of group 8 that nobody reads.
func TestConformance(t *testing.T) {
	topo := netnstest.Up(t, netns.Options{Hosts: 3})
	group := uint32(7)
	for _, kind := range []string{"ring", "afpacket"} {
		t.Run(kind, func(t *testing.T) {
			linktest.Run(t, func(t *testing.T) linktest.Pair {
				ma := newMux(t, openLink(t, topo.Hosts[0], kind), mux.Config{})
				mb := newMux(t, openLink(t, topo.Hosts[1], kind), mux.Config{Queue: 64})
				a, b := open(t, ma, group), open(t, mb, group)
				open(t, mb, 8)
				noise(t, openLink(t, topo.Hosts[2], kind))
				return linktest.Pair{A: a, B: b, Group: &group}
			})
		})
	}
}

// Two groups' streams to one host, each view read by its own goroutine
// as two event loops would: every frame arrives at its view, in order and
// intact, or is counted dropped; a third group's frames, which no view
// wants, are dropped by the kernel filter (the shared link's kernel
// counters see none of them), or, without it, by the Mux.
func TestConcurrentViews(t *testing.T) {
	topo := netnstest.Up(t, netns.Options{Hosts: 2})
	for _, filter := range []bool{true, false} {
		t.Run(fmt.Sprintf("kernel filter %v", filter), func(t *testing.T) {
			tx := openLink(t, topo.Hosts[0], "ring")
			shared := openLink(t, topo.Hosts[1], "ring")
			m := newMux(t, shared, mux.Config{NoKernelFilter: !filter})
			views := []link.Link{open(t, m, 1), open(t, m, 2)}
			const perGroup, noiseFrames = 20000, 5000
			var wg sync.WaitGroup
			var stop atomic.Bool
			got := make([]atomic.Int64, 2)
			drops := make([]uint64, 2)
			errs := make([]error, 2)
			for i, v := range views {
				wg.Go(func() {
					rx := make([]link.Frame, 32)
					next := uint32(0)
					for !stop.Load() {
						n, err := v.Recv(time.Now().Add(20*time.Millisecond), rx)
						if err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
							errs[i] = err
							return
						}
						for _, f := range rx[:n] {
							g, _ := link.FrameGroup(f.Data)
							seq := binary.BigEndian.Uint32(f.Data[link.GroupOffset+4:])
							if g != uint32(i+1) || seq < next || len(f.Data) != 60+int(seq%1000) {
								errs[i] = fmt.Errorf("view %d: frame %d of group %d (%d bytes) after frame %d", i+1, seq, g, len(f.Data), next)
								return
							}
							next = seq + 1
							got[i].Add(1)
						}
					}
				})
			}
			src := tx.HardwareAddr()
			batch := make([][]byte, 0, 30)
			seq := []uint32{0, 0}
			for sent := 0; sent < 2*perGroup; {
				batch = batch[:0]
				for range 10 {
					for g := range 2 {
						batch = append(batch, groupFrame(src, uint32(g+1), seq[g], 60+int(seq[g]%1000)))
						seq[g]++
						sent++
					}
					if sent%8 == 0 {
						batch = append(batch, groupFrame(src, 3, uint32(sent), 500))
					}
				}
				if _, err := tx.Send(batch); err != nil {
					t.Fatal(err)
				}
				if sent%2000 == 0 {
					time.Sleep(time.Millisecond) // let the receivers keep up, mostly
				}
			}
			// Wait until both have everything or nothing more comes.
			for last, quiet := 0, 0; quiet < 20; {
				time.Sleep(10 * time.Millisecond)
				now := int(got[0].Load() + got[1].Load())
				if now == last {
					quiet++
				} else {
					quiet = 0
				}
				last = now
			}
			stop.Store(true)
			wg.Wait()
			for i, v := range views {
				st, _ := v.Stats()
				drops[i] = st.KernelDrops
				if errs[i] != nil {
					t.Fatal(errs[i])
				}
				// A view's KernelDrops is its queue's drops plus all the
				// shared ring's, whose group the kernel does not say: with
				// the ring dropping (a loaded machine), received and
				// dropped add up to between perGroup and perGroup plus
				// the ring's drops.
				ring, _ := shared.Stats()
				if sum := uint64(got[i].Load()) + st.KernelDrops; sum < perGroup || sum > perGroup+ring.KernelDrops {
					t.Errorf("view %d: %d frames received, %d counted dropped (%d of them the shared ring's), of %d", i+1, got[i].Load(), st.KernelDrops, ring.KernelDrops, perGroup)
				}
			}
			ls, _ := shared.Stats()
			ms := m.Stats()
			t.Logf("received %v, dropped %v; shared link: %d queued by the kernel, %d dropped there; mux: %d of no view",
				[]int64{got[0].Load(), got[1].Load()}, drops, ls.KernelPackets, ls.KernelDrops, ms.NoView)
			noiseSent := uint64(2 * perGroup / 8)
			if filter {
				if ls.KernelPackets > 2*perGroup || ms.NoView != 0 {
					t.Errorf("with the kernel filter, the kernel queued %d frames (%d sent to the views' groups) and the mux dropped %d of no view, want none of group 3", ls.KernelPackets, 2*perGroup, ms.NoView)
				}
			} else if ms.NoView+ls.KernelDrops < noiseSent {
				t.Errorf("without the kernel filter, the mux dropped %d frames of no view, %d of group 3 were sent", ms.NoView, noiseSent)
			}
		})
	}
}

// A view whose loop waits long (an idle group, until its next heartbeat)
// reads the link for the others: another view's Recv gets its frame at
// once, not at the idle one's deadline.
func TestReaderHandsFramesOn(t *testing.T) {
	topo := netnstest.Up(t, netns.Options{Hosts: 2})
	tx := openLink(t, topo.Hosts[0], "ring")
	m := newMux(t, openLink(t, topo.Hosts[1], "ring"), mux.Config{})
	idle, busy := open(t, m, 1), open(t, m, 2)
	done := make(chan error, 1)
	go func() {
		_, err := idle.Recv(time.Now().Add(5*time.Second), make([]link.Frame, 4))
		done <- err
	}()
	time.Sleep(50 * time.Millisecond) // the idle view is the reader by now
	rx := make([]link.Frame, 4)
	for i := range 20 {
		start := time.Now()
		if _, err := tx.Send([][]byte{groupFrame(tx.HardwareAddr(), 2, uint32(i), 80)}); err != nil {
			t.Fatal(err)
		}
		n, err := busy.Recv(start.Add(time.Second), rx)
		if n != 1 || err != nil {
			t.Fatalf("frame %d: Recv = %d, %v", i, n, err)
		}
		if d := time.Since(start); d > 500*time.Millisecond {
			t.Fatalf("frame %d took %v to reach its view while another view read the link", i, d)
		}
	}
	idle.(link.Waker).Wake()
	if err := <-done; !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("the idle view's Recv, woken: %v", err)
	}
}
