package main

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/rbcast/rbcast/link"
	"github.com/rbcast/rbcast/link/linktest"
	"github.com/rbcast/rbcast/link/ring"
	"github.com/rbcast/rbcast/testnet/netns"
	"github.com/rbcast/rbcast/testnet/netns/netnstest"
)

var quietLog = slog.New(slog.NewTextHandler(io.Discard, nil))

// gatedSockets is ring.Sockets whose Setup waits for gate to close.
type gatedSockets struct {
	ringSockets
	gate chan struct{}
}

func (g gatedSockets) Setup() (link.Link, error) {
	<-g.gate
	return g.ringSockets.Setup()
}

// openLate opens a lateLink on host h's eth0 with a ring link of cfg;
// with gate, its setup waits for gate to close.
func openLate(t *testing.T, h *netns.Host, cfg ring.Config, gate chan struct{}) *lateLink {
	t.Helper()
	var l *lateLink
	if err := h.Do(func() (err error) {
		l, err = openLateRing(h.Iface, cfg, "test", quietLog)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if gate != nil {
		l.pending = gatedSockets{l.pending.(ringSockets), gate}
	}
	return l
}

func openRingOn(t *testing.T, h *netns.Host, cfg ring.Config) *ring.Link {
	t.Helper()
	var l *ring.Link
	if err := h.Do(func() (err error) {
		l, err = ring.Open(h.Iface, cfg)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return l
}

// TestLateLinkConformance runs the link conformance suite on lateLinks:
// before their rings are set up (early serves), after, and set up at
// their first use, during the checks.
func TestLateLinkConformance(t *testing.T) {
	topo := netnstest.Up(t, netns.Options{Hosts: 2, Prefix: "rbll"})
	for _, cfg := range []ring.Config{{Version: ring.V2}, {Version: ring.V3}} {
		t.Run(cfg.Version.String(), func(t *testing.T) {
			t.Run("early", func(t *testing.T) {
				linktest.Run(t, func(t *testing.T) linktest.Pair {
					gate := make(chan struct{})
					a := openLate(t, topo.Hosts[0], cfg, gate)
					t.Cleanup(func() { close(gate) }) // after Run closed a: the setup closes its link
					return linktest.Pair{A: a, B: openRingOn(t, topo.Hosts[1], cfg)}
				})
			})
			t.Run("ring", func(t *testing.T) {
				linktest.Run(t, func(t *testing.T) linktest.Pair {
					a := openLate(t, topo.Hosts[0], cfg, nil)
					a.Start()
					<-a.setupDone
					if a.ringLink() == nil {
						t.Fatal("the rings were not set up")
					}
					return linktest.Pair{A: a, B: openLate(t, topo.Hosts[1], cfg, nil)}
				})
			})
			t.Run("switching", func(t *testing.T) {
				linktest.Run(t, func(t *testing.T) linktest.Pair {
					return linktest.Pair{A: openLate(t, topo.Hosts[0], cfg, nil), B: openLate(t, topo.Hosts[1], cfg, nil)}
				})
			})
		})
	}
}

// TestLateLinkSwitchKeepsFrames: frames that reach a lateLink before its
// rings are set up, while they are, and after, are all received, once
// each, in the order sent.
func TestLateLinkSwitchKeepsFrames(t *testing.T) {
	topo := netnstest.Up(t, netns.Options{Hosts: 2, Prefix: "rbls"})
	for _, v := range []ring.Version{ring.V2, ring.V3} {
		t.Run(v.String(), func(t *testing.T) {
			cfg := ring.Config{Version: v}
			tx := openRingOn(t, topo.Hosts[0], cfg)
			defer tx.Close()
			gate := make(chan struct{})
			rx := openLate(t, topo.Hosts[1], cfg, gate)
			defer rx.Close()
			mk := func(seq int) []byte {
				b := make([]byte, 100)
				copy(b, "\xff\xff\xff\xff\xff\xff")
				copy(b[6:], tx.HardwareAddr())
				binary.BigEndian.PutUint16(b[12:], link.EtherTypeRbcast)
				binary.BigEndian.PutUint64(b[20:], uint64(seq))
				return b
			}
			var sent [][]byte
			send := func(n int) {
				t.Helper()
				for range n {
					f := mk(len(sent))
					if _, err := tx.Send([][]byte{f}); err != nil {
						t.Fatal(err)
					}
					sent = append(sent, f)
				}
			}
			frames := make([]link.Frame, 4)
			var got []int
			recv := func(until func() bool) {
				t.Helper()
				end := time.Now().Add(5 * time.Second)
				for !until() {
					n, err := rx.Recv(end, frames)
					if err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
						t.Fatalf("Recv: %v", err)
					}
					if time.Now().After(end) {
						t.Fatalf("received %v of %d frames by the deadline", got, len(sent))
					}
					for _, f := range frames[:n] {
						seq := int(binary.BigEndian.Uint64(f.Data[20:]))
						if !bytes.Equal(f.Data, sent[seq]) {
							t.Fatalf("frame %d: bytes differ", seq)
						}
						got = append(got, seq)
					}
				}
			}
			seen := func(n int) func() bool {
				return func() bool {
					m := map[int]bool{}
					for _, s := range got {
						m[s] = true
					}
					return len(m) >= n
				}
			}
			// Before the setup (gated): 10 frames through early; the
			// first Recv starts the setup, which waits.
			send(10)
			recv(seen(5))
			// 10 more queue in early while the setup runs.
			send(10)
			close(gate)
			<-rx.setupDone
			if rx.ringLink() == nil {
				t.Fatal("the rings were not set up")
			}
			select {
			case <-rx.Settled():
				t.Fatal("Settled before early was closed")
			default:
			}
			// Both bound now: these may come twice.
			send(10)
			recv(seen(30))
			// Early empty, the next Recv closes it and reads the ring,
			// which has nothing new: its copies are skipped.
			if n, err := rx.Recv(time.Now().Add(50*time.Millisecond), frames); n != 0 || !errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatalf("Recv after the frames sent: %d frames (the first %x...), %v; want nothing more", n, frames[0].Data[20:28], err)
			}
			if !rx.drained {
				t.Fatal("early was not drained and closed")
			}
			select {
			case <-rx.Settled():
			default:
				t.Fatal("not Settled once early was closed")
			}
			// Only the ring now.
			send(10)
			recv(seen(40))
			next, dups := 0, 0
			for _, s := range got {
				switch {
				case s == next:
					next++
				case s < next:
					dups++
					if s < 20 {
						t.Errorf("frame %d, which came before the rings were bound, came twice", s)
					}
				default:
					t.Fatalf("frame %d came before frame %d: %v", s, next, got)
				}
			}
			if dups > 0 {
				t.Errorf("%d frames came twice: %v", dups, got)
			}
			st, err := rx.Stats()
			if err != nil {
				t.Fatal(err)
			}
			if st.FramesReceived != uint64(len(got)) {
				t.Errorf("Stats.FramesReceived = %d, received %d", st.FramesReceived, len(got))
			}
		})
	}
}

// TestLinksLate: rbcastd's links (ring links), the group's and the
// files', map no ring before their first use; the first Recv sets them
// up. Before, openFilesLink and openLink mapped them at once, on the
// join's path (docs/benchmarks-history.md, "View changes: the
// fourteenth session idle (18:40 UTC), the join split, helpers join19
// and fail19 (loaded)", its paragraph "Where a join's 100 ms goes").
func TestLinksLate(t *testing.T) {
	topo := netnstest.Up(t, netns.Options{Hosts: 1, Prefix: "rblf"})
	h := topo.Hosts[0]
	for _, c := range []struct {
		name string
		open func() (link.Link, error)
	}{
		{"group", func() (link.Link, error) { return openGroupLink("ring", h.Iface, 0, -1, false, []uint32{7}, quietLog) }},
		{"files", func() (link.Link, error) {
			return openFilesLink("ring", h.Iface, 0, []uint32{7}, defaultFilesRingMB, quietLog)
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var l link.Link
			if err := h.Do(func() (err error) {
				l, err = c.open()
				return err
			}); err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			ll, ok := l.(*lateLink)
			if !ok {
				t.Fatalf("the %s link is a %T, want a *lateLink: its rings are set up on the join's path", c.name, l)
			}
			if ll.MTU() != 1500 || ll.HardwareAddr().String() != h.MAC.String() {
				t.Errorf("MTU %d, address %s; want 1500, %s", ll.MTU(), ll.HardwareAddr(), h.MAC)
			}
			if _, err := ll.Stats(); err != nil {
				t.Fatal(err)
			}
			select {
			case <-ll.setupDone:
				t.Fatal("the rings were set up before the link's first use")
			default:
			}
			if !ll.started.IsZero() {
				t.Fatal("MTU, HardwareAddr or Stats started the setup")
			}
			ll.Recv(time.Now().Add(time.Millisecond), make([]link.Frame, 1))
			<-ll.setupDone
			if ll.ringLink() == nil {
				t.Fatal("the first Recv did not set the rings up")
			}
			if r, ok := ll.ringLink().(*ring.Link); !ok {
				t.Fatalf("the ring link is a %T", ll.ringLink())
			} else if _, err := r.Stats(); err != nil {
				t.Fatal(err)
			}
		})
	}
}
