package ring

import (
	"encoding/binary"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/rbcast/rbcast/link"
)

// TestStageKick: one goroutine stages frames (more than the TX ring
// holds, so Stage waits for slots too) and kicks after every batch,
// while another kicks all the time, as reliable's kicker goroutine does
// (so Kicks find each other kicking, and leave their frames to the
// other); every frame
// must arrive, in
// order and intact, at two receivers (or be counted dropped by their
// kernel: a receiver slower than the sender, under -race, overflows its
// ring), and be counted sent.
func TestStageKick(t *testing.T) {
	topo := up(t, "k", 3, 1500)
	for _, v := range versions {
		t.Run(v.String(), func(t *testing.T) {
			const count, batch = 60000, 16
			tx := openOn(t, topo.Hosts[0], Config{Version: v})
			rs := make([]*receiver, 2)
			var wg sync.WaitGroup
			for i, h := range topo.Hosts[1:] {
				rs[i] = &receiver{l: openOn(t, h, Config{Version: v}), src: topo.Hosts[0].MAC, et: link.EtherTypeRbcast, mtu: tx.MTU()}
				wg.Go(func() {
					rs[i].run(time.Second, func(r *receiver) bool { return r.received == count })
				})
			}
			stop := make(chan struct{})
			kerr := make(chan error, 1)
			go func() {
				for {
					select {
					case <-stop:
						kerr <- nil
						return
					default:
					}
					if err := tx.Kick(); err != nil {
						kerr <- err
						return
					}
				}
			}()
			bufs := make([][]byte, batch)
			for i := range bufs {
				bufs[i] = make([]byte, link.EthernetHeaderLen+tx.MTU())
			}
			frames := make([][]byte, batch)
			src := tx.HardwareAddr()
			for sent := 0; sent < count; sent += batch {
				for i := range frames {
					seq := uint64(sent + i)
					frames[i] = buildFrame(bufs[i], src, link.EtherTypeRbcast, seq, frameLen(seq, tx.MTU()))
				}
				if n, err := tx.Stage(frames); n != batch || err != nil {
					t.Fatalf("Stage after %d frames = %d, %v; want %d, nil", sent, n, err, batch)
				}
				if err := tx.Kick(); err != nil {
					t.Fatalf("Kick after %d frames: %v", sent, err)
				}
			}
			close(stop)
			if err := <-kerr; err != nil {
				t.Fatalf("Kick: %v", err)
			}
			wg.Wait()
			for i, r := range rs {
				st, err := r.l.Stats()
				if err != nil {
					t.Fatal(err)
				}
				missing := r.gaps + count - r.next
				if r.err != nil || r.received+missing != count || missing != st.KernelDrops {
					t.Errorf("h%d received %d of %d frames, %d missing, %d kernel drops: %v", i+1, r.received, count, missing, st.KernelDrops, r.err)
				}
			}
			if st, _ := tx.Stats(); st.FramesSent != count {
				t.Errorf("Stats.FramesSent = %d, want %d", st.FramesSent, count)
			}
		})
	}
}

// TestStageKickEdges: Kick with nothing staged does nothing; a frame of
// the wrong size is refused by Stage as by Send, after the frames before
// it; Stage and Kick after Close say the link is closed; the pair
// allocates nothing.
func TestStageKickEdges(t *testing.T) {
	topo := up(t, "e", 2, 1500)
	tx := openOn(t, topo.Hosts[0], Config{})
	rx := openOn(t, topo.Hosts[1], Config{})
	if err := tx.Kick(); err != nil {
		t.Fatalf("Kick with nothing staged: %v", err)
	}
	src := tx.HardwareAddr()
	ok := buildFrame(make([]byte, 1000), src, link.EtherTypeRbcast, 0, 1000)
	big := make([]byte, link.EthernetHeaderLen+tx.MTU()+1)
	n, err := tx.Stage([][]byte{ok, big})
	if n != 1 || !errors.Is(err, link.ErrFrameTooLarge) {
		t.Fatalf("Stage of a good and an oversize frame = %d, %v; want 1 and ErrFrameTooLarge", n, err)
	}
	if err := tx.Kick(); err != nil {
		t.Fatalf("Kick: %v", err)
	}
	got := make([]Frame, 64)
	if n, err := rx.Recv(time.Now().Add(time.Second), got); n != 1 || err != nil {
		t.Fatalf("Recv after Stage+Kick = %d, %v; want the one good frame", n, err)
	}

	frames := make([][]byte, 64)
	for i := range frames {
		frames[i] = buildFrame(make([]byte, 1000), src, link.EtherTypeRbcast, uint64(i), 1000)
	}
	var lost bool
	allocs := testing.AllocsPerRun(100, func() {
		if n, err := tx.Stage(frames); n != len(frames) || err != nil {
			lost = true
			return
		}
		if tx.Kick() != nil {
			lost = true
			return
		}
		for received := 0; received < len(frames); {
			n, err := rx.Recv(time.Now().Add(time.Second), got)
			if err != nil {
				lost = true
				return
			}
			received += n
		}
	})
	if lost {
		t.Fatal("a batch was not staged, kicked or received in full")
	}
	if allocs != 0 {
		t.Errorf("Stage+Kick+Recv of %d frames: %v allocations, want 0", len(frames), allocs)
	}

	tx.Close()
	if _, err := tx.Stage(frames); !errors.Is(err, net.ErrClosed) {
		t.Errorf("Stage after Close: %v, want net.ErrClosed", err)
	}
	if err := tx.Kick(); !errors.Is(err, net.ErrClosed) {
		t.Errorf("Kick after Close: %v, want net.ErrClosed", err)
	}
}

// TestStageAfterRefusedKick: a Kick met the kernel's refusal of a staged
// frame (the device's MTU shrank under the link) but has not yet taken the
// ring back (dropRefused waits for l.txMu, which a Stage holds); that Stage
// then finds the ring full. The kernel's head is the refused slot, so it
// sends nothing more and never signals POLLOUT: the Stage must return an
// error, not wait for ever (holding the reliable runtime's group lock), and
// once the Kick has taken the ring back the link must work again.
func TestStageAfterRefusedKick(t *testing.T) {
	topo := up(t, "q", 2, 1500)
	for _, v := range versions {
		t.Run(v.String(), func(t *testing.T) {
			tx, rx, mk := refusingPair(t, topo, v)
			if n, err := tx.Stage([][]byte{mk(0, 500), mk(1, 1200)}); n != 2 || err != nil {
				t.Fatalf("Stage = %d, %v; want 2, nil", n, err)
			}
			// The first half of Kick: the kernel sends frame 0 and refuses 1.
			if err := tx.kickPending(); err == nil {
				t.Fatal("kickPending of a frame over the device's MTU: no error")
			}
			frames := make([][]byte, tx.TXGeometry().FrameCount)
			for i := range frames {
				frames[i] = mk(uint64(10+i), 500)
			}
			done := make(chan error, 1)
			go func() {
				_, err := tx.Stage(frames)
				done <- err
			}()
			select {
			case err := <-done:
				if err == nil {
					t.Fatal("Stage into a ring stuck at a refused frame: no error")
				}
				t.Logf("Stage: %v", err)
			case <-time.After(5 * time.Second):
				t.Fatal("Stage into a ring stuck at a refused frame still waits after 5 s")
			}
			// The second half of Kick.
			tx.txMu.Lock()
			tx.dropRefused()
			tx.txMu.Unlock()
			if n, err := tx.Stage([][]byte{mk(2, 500)}); n != 1 || err != nil {
				t.Fatalf("Stage after the ring was taken back = %d, %v", n, err)
			}
			if err := tx.Kick(); err != nil {
				t.Fatalf("Kick after the ring was taken back: %v", err)
			}
			got, err := recvUntil(rx, 2, time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != 2 || binary.BigEndian.Uint64(got[0][14:]) != 0 || binary.BigEndian.Uint64(got[1][14:]) != 2 {
				t.Errorf("received %d frames, want frames 0 and 2", len(got))
			}
		})
	}
}
