package ring

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rbcast/rbcast/link"
)

// TestBroadcast sends numbered frames of every size from h0 to the
// broadcast address at full speed and checks that h1 and h2 each get them
// byte for byte, in order, without duplicates, and that every frame missing
// is one the kernel counted as dropped.
func TestBroadcast(t *testing.T) {
	for _, tc := range []struct {
		tag   string
		mtu   int
		count int
	}{
		{"b1", 1500, 100000},
		{"b9", 9000, 30000},
		{"b6", 65535, 4000},
	} {
		t.Run(fmt.Sprint("mtu", tc.mtu), func(t *testing.T) {
			topo := up(t, tc.tag, 3, tc.mtu)
			for _, v := range versions {
				for _, m := range txModes {
					t.Run(v.String()+"/"+m.String(), func(t *testing.T) {
						testBroadcast(t, topo.Hosts[0], topo.Hosts[1:], Config{Version: v, TxMode: m}, tc.count)
					})
				}
			}
		})
	}
}

var txModes = []TxMode{TxRing, TxSendmmsg}

func testBroadcast(t *testing.T, from hostT, to []hostT, cfg Config, count int) {
	tx := openOn(t, from, cfg)
	rs := make([]*receiver, len(to))
	for i, h := range to {
		rs[i] = &receiver{l: openOn(t, h, cfg), src: from.MAC, et: link.EtherTypeRbcast, mtu: tx.MTU()}
	}
	// A receiver stops once it has every frame, or after a quiet second
	// that began once the sender was done: a sender starved for a second
	// (a loaded CI host) left frames in the rings after their receivers
	// had stopped, missing and not dropped.
	var wg sync.WaitGroup
	var sendDone atomic.Bool
	for _, r := range rs {
		wg.Go(func() {
			for {
				finished := sendDone.Load()
				r.run(time.Second, func(r *receiver) bool { return r.received == uint64(count) })
				if r.err != nil || r.received == uint64(count) || finished {
					return
				}
			}
		})
	}
	sent := sendAll(t, tx, count, 64, link.EtherTypeRbcast)
	sendDone.Store(true)
	wg.Wait()
	if sent != count {
		t.Fatalf("sent %d of %d frames", sent, count)
	}
	st, err := tx.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if st.FramesSent != uint64(count) {
		t.Errorf("sender Stats.FramesSent = %d, want %d", st.FramesSent, count)
	}
	t.Logf("sender: %+v", st)
	for i, r := range rs {
		if r.err != nil {
			t.Errorf("h%d: %v", i+1, r.err)
			continue
		}
		st, err := r.l.Stats()
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("h%d: received %d (%d with room lent), gaps %d, %+v", i+1, r.received, r.roomy, r.gaps, st)
		if st.FramesReceived != r.received {
			t.Errorf("h%d: Stats.FramesReceived = %d, counted %d", i+1, st.FramesReceived, r.received)
		}
		// Frames missing at the end show up as a short count, not a gap.
		missing := r.gaps + uint64(count) - r.next
		if r.received+missing != uint64(count) {
			t.Errorf("h%d: received %d + missing %d != sent %d", i+1, r.received, missing, count)
		}
		if missing != st.KernelDrops {
			t.Errorf("h%d: %d frames missing but the kernel counted %d drops", i+1, missing, st.KernelDrops)
		}
	}
}

// TestV3Lent: the room a TPACKET_V3 frame is lent with. A frame of 100
// bytes at 80 in its header's slice of 4 096 (the rest of the block), the
// next header at 192 (48 bytes).
func TestV3Lent(t *testing.T) {
	for _, c := range []struct {
		name              string
		next              int
		blockLast, goesOn bool
		want              int
	}{
		{"the block's last frame: the rest of the block", 0, true, false, 4096},
		{"the block's last, more in the batch", 0, true, true, 4096},
		{"another frame in the batch: padding and its header", 192, false, true, 240},
		{"the batch's last: the padding only", 192, false, false, 192},
		{"a next offset past the block: up to its end", 8192, false, true, 4096},
		{"a corrupt next offset: nothing", 0, false, true, 180},
		{"a next offset inside the frame: nothing", 100, false, true, 180},
	} {
		if got := v3Lent(180, c.next, 48, 4096, c.blockLast, c.goesOn); got != c.want {
			t.Errorf("%s: lent up to %d, want %d", c.name, got, c.want)
		}
	}
}
