package daemon

import (
	"bytes"
	"fmt"
	"io"
	"path/filepath"
	"testing"
	"time"

	"github.com/gopacket/gopacket/pcapgo"
	"github.com/rbcast/rbcast/capture"
	"github.com/rbcast/rbcast/link"
	"github.com/rbcast/rbcast/link/linktest"
	"github.com/rbcast/rbcast/link/ring"
	"github.com/rbcast/rbcast/reliable"
	"github.com/rbcast/rbcast/testnet/netns"
	"github.com/rbcast/rbcast/testnet/netns/netnstest"
)

// openRing opens a ring link on host h's interface.
func openRing(t *testing.T, h *netns.Host) *ring.Link {
	t.Helper()
	var l *ring.Link
	if err := h.Do(func() (err error) {
		l, err = ring.Open(h.Iface, ring.Config{})
		return err
	}); err != nil {
		t.Fatalf("ring.Open(%s) in %s: %v", h.Iface, h.Namespace, err)
	}
	return l
}

// TestWatchConformanceRing runs the link conformance suite on the
// daemon's monitor over ring links between two hosts.
func TestWatchConformanceRing(t *testing.T) {
	topo := netnstest.Up(t, netns.Options{Hosts: 2})
	linktest.Run(t, func(t *testing.T) linktest.Pair {
		return watchPair(openRing(t, topo.Hosts[0]), openRing(t, topo.Hosts[1]), nil)
	})
}

// TestDaemonStagesOnRing: rbcastd's link — the monitor over a capture
// over a ring, as `rbcastd run -capture` builds it — reports the ring's
// staged fast path with the monitor as the Stager, and a group of two
// daemons on ring links sends its frames staged (and records them in the
// capture) while a message stream arrives byte for byte.
func TestDaemonStagesOnRing(t *testing.T) {
	topo := netnstest.Up(t, netns.Options{Hosts: 2})
	var file bytes.Buffer
	cw, err := capture.NewWriter(&file, capture.WriterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cw.Close() })
	dir := t.TempDir()
	ds := make([]*running, 2)
	for i, h := range topo.Hosts {
		var l link.Link = openRing(t, h)
		if i == 0 {
			if l, err = capture.Wrap(l, cw, capture.Options{Node: "0", Interface: h.Iface}); err != nil {
				t.Fatal(err)
			}
		}
		t.Cleanup(func() { l.Close() })
		cfg := Config{Logger: quiet, Group: reliable.Config{Group: 7, Size: 2, Server: i == 0, FailureTimeout: 2 * time.Second}}
		ds[i] = startDaemon(t, l, filepath.Join(dir, fmt.Sprintf("d%d.sock", i)), cfg)
	}
	ds[0].self(t) // Run has given the monitor its link
	w := ds[0].d.watch
	st, sok := link.StagerOf(w)
	now, nok := link.NowSenderOf(w)
	_, wok := link.WakerOf(w)
	if !sok || !nok || !wok || st != link.Stager(w) || now != link.NowSender(w) {
		t.Fatalf("the daemon's link (monitor over capture over ring): StagerOf %T %v, NowSenderOf %T %v, WakerOf %v; want the monitor, the monitor, true",
			st, sok, now, nok, wok)
	}
	if ln, ok := link.LenderOf(w); !ok || ln != link.Lender(w) {
		t.Fatalf("the daemon's link: LenderOf %T %v; want the monitor (its group keeps delivered frames in the ring)", ln, ok)
	}

	from0 := subscribe(t, ds[1].socket, 0)
	c, welcome := dial(t, ds[0].socket, true)
	data := randomBytes(3, 200_000)
	if _, err := sendAll(t, c, data, int(welcome.MaxMessage)); err != nil {
		t.Fatal(err)
	}
	got, err := collect(from0, len(data))
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("daemon 1 delivered %d of %d bytes from daemon 0 (equal: %v): %v", len(got), len(data), bytes.Equal(got, data), err)
	}
	sent, staged, sentNow := w.sent.Load(), w.staged.Load(), w.sentNow.Load()
	t.Logf("daemon 0 sent %d frames with Send, staged %d, sent %d past the queue", sent, staged, sentNow)
	if staged < uint64(len(data)/int(welcome.MaxMessage)) {
		t.Errorf("daemon 0 staged %d frames for %d messages: not on the staged path", staged, len(data)/int(welcome.MaxMessage))
	}
	if err := ds[0].stop(t); err != nil {
		t.Fatal(err)
	}
	if err := cw.Flush(); err != nil {
		t.Fatal(err)
	}
	if cs := cw.Stats(); cs.Dropped != 0 {
		t.Fatalf("the capture dropped %d frames", cs.Dropped)
	}
	// The capture is under the monitor: every frame the monitor passed on
	// is in it, the staged ones included.
	sent, staged, sentNow = w.sent.Load(), w.staged.Load(), w.sentNow.Load()
	if out := outbound(t, file.Bytes()); out != sent+staged+sentNow {
		t.Errorf("the capture holds %d frames sent; the monitor passed on %d sent, %d staged, %d sent now", out, sent, staged, sentNow)
	}
}

// outbound counts the outbound frames of a pcapng file.
func outbound(t *testing.T, file []byte) uint64 {
	t.Helper()
	r, err := pcapgo.NewNgReader(bytes.NewReader(file), pcapgo.DefaultNgReaderOptions)
	if err != nil {
		t.Fatal(err)
	}
	var n uint64
	for {
		_, _, opts, err := r.ReadPacketDataWithOptions()
		if err == io.EOF {
			return n
		}
		if err != nil {
			t.Fatal(err)
		}
		if opts.Flags != nil && opts.Flags.Direction == pcapgo.NgEpbFlagDirectionOutbound {
			n++
		}
	}
}
