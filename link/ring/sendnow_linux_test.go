package ring

import (
	"errors"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/rbcast/rbcast/link"
)

// TestSendNow: frames sent with SendNow do not wait behind frames staged
// and not yet kicked (they arrive first), everything arrives intact and is
// counted sent; an oversize frame is refused after the ones before it;
// with TxSendmmsg SendNow sends as Send does; after Close it says the link
// is closed; a SendNow and its Recv allocate nothing.
func TestSendNow(t *testing.T) {
	topo := up(t, "n", 2, 1500)
	for _, mode := range []TxMode{TxRing, TxSendmmsg} {
		t.Run(mode.String(), func(t *testing.T) {
			tx := openOn(t, topo.Hosts[0], Config{TxMode: mode})
			rx := openOn(t, topo.Hosts[1], Config{})
			src := tx.HardwareAddr()
			mk := func(seq uint64) []byte { return testFrames(tx, seq, 1)[0] }
			const staged = 32
			if n, err := tx.Stage(testFrames(tx, 0, staged)); n != staged || err != nil {
				t.Fatalf("Stage = %d, %v; want %d, nil", n, err, staged)
			}
			urgent := mk(1000)
			if n, err := tx.SendNow([][]byte{urgent}); n != 1 || err != nil {
				t.Fatalf("SendNow = %d, %v; want 1, nil", n, err)
			}
			if err := tx.Kick(); err != nil {
				t.Fatalf("Kick: %v", err)
			}
			var order []uint64
			got := make([]Frame, 64)
			for len(order) < staged+1 {
				n, err := rx.Recv(time.Now().Add(time.Second), got)
				if err != nil {
					t.Fatalf("Recv after %d frames: %v", len(order), err)
				}
				for _, f := range got[:n] {
					seq, err := checkFrame(f.Data, src, link.EtherTypeRbcast, tx.MTU())
					if err != nil {
						t.Fatal(err)
					}
					order = append(order, seq)
				}
			}
			// With the TX ring, the staged frames wait for the Kick and the
			// SendNow frame goes first; with sendmmsg Stage sends at once,
			// so it goes last.
			want := uint64(1000)
			at := 0
			if mode == TxSendmmsg {
				at = staged
			}
			if order[at] != want {
				t.Errorf("frame order %v: want the SendNow frame (%d) at position %d", order, want, at)
			}
			if st, _ := tx.Stats(); st.FramesSent != staged+1 {
				t.Errorf("Stats.FramesSent = %d, want %d", st.FramesSent, staged+1)
			}

			big := make([]byte, link.EthernetHeaderLen+tx.MTU()+1)
			n, err := tx.SendNow([][]byte{mk(2000), big})
			if n != 1 || !errors.Is(err, link.ErrFrameTooLarge) {
				t.Fatalf("SendNow of a good and an oversize frame = %d, %v; want 1 and ErrFrameTooLarge", n, err)
			}
			if n, err := rx.Recv(time.Now().Add(time.Second), got); n != 1 || err != nil {
				t.Fatalf("Recv after SendNow = %d, %v; want the one good frame", n, err)
			}

			one := [][]byte{mk(3000)}
			var lost bool
			allocs := testing.AllocsPerRun(100, func() {
				if n, err := tx.SendNow(one); n != 1 || err != nil {
					lost = true
					return
				}
				if n, err := rx.Recv(time.Now().Add(time.Second), got); n != 1 || err != nil {
					lost = true
				}
			})
			if lost {
				t.Fatal("a SendNow frame was not sent or not received")
			}
			if allocs != 0 {
				t.Errorf("SendNow+Recv: %v allocations, want 0", allocs)
			}

			tx.Close()
			if _, err := tx.SendNow(one); !errors.Is(err, net.ErrClosed) {
				t.Errorf("SendNow after Close: %v, want net.ErrClosed", err)
			}
		})
	}
}

// SendNow may run concurrently with Stage (and Send) in both modes: with
// TxSendmmsg both send on the TX socket, each with a batch sender of its
// own (a shared one raced). Every frame arrives, intact, and is counted.
func TestSendNowConcurrentWithStage(t *testing.T) {
	topo := up(t, "nc", 2, 1500)
	for _, mode := range []TxMode{TxRing, TxSendmmsg} {
		t.Run(mode.String(), func(t *testing.T) {
			tx := openOn(t, topo.Hosts[0], Config{TxMode: mode})
			rx := openOn(t, topo.Hosts[1], Config{})
			src := tx.HardwareAddr()
			const rounds, per = 20, 8
			mk := func(base uint64) [][]byte { return testFrames(tx, base, per) }
			errs := make(chan error, 2)
			go func() {
				for r := range rounds {
					if n, err := tx.Stage(mk(uint64(r * per))); n != per || err != nil {
						errs <- fmt.Errorf("Stage = %d, %v", n, err)
						return
					}
					if err := tx.Kick(); err != nil {
						errs <- fmt.Errorf("Kick: %v", err)
						return
					}
				}
				errs <- nil
			}()
			go func() {
				for r := range rounds {
					if n, err := tx.SendNow(mk(uint64(10000 + r*per))); n != per || err != nil {
						errs <- fmt.Errorf("SendNow = %d, %v", n, err)
						return
					}
				}
				errs <- nil
			}()
			for range 2 {
				if err := <-errs; err != nil {
					t.Fatal(err)
				}
			}
			seen := map[uint64]bool{}
			got := make([]Frame, 64)
			for len(seen) < 2*rounds*per {
				n, err := rx.Recv(time.Now().Add(time.Second), got)
				if err != nil {
					t.Fatalf("Recv after %d of %d frames: %v", len(seen), 2*rounds*per, err)
				}
				for _, f := range got[:n] {
					seq, err := checkFrame(f.Data, src, link.EtherTypeRbcast, tx.MTU())
					if err != nil {
						t.Fatal(err)
					}
					seen[seq] = true
				}
			}
			if st, _ := tx.Stats(); st.FramesSent != 2*rounds*per {
				t.Errorf("Stats.FramesSent = %d, want %d", st.FramesSent, 2*rounds*per)
			}
		})
	}
}
