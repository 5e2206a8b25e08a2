package ring

import (
	"errors"
	"os"
	"testing"
	"time"

	"github.com/rbcast/rbcast/link"
)

// TestWake: Wake ends a Recv that sleeps in the netpoller or spins, and
// makes the next Recv return at once if none is waiting; wakes do not add
// up; frames already in the ring come before a wake; after a wake, Recv
// waits for its own deadline again (Wake's past deadline does not stick);
// Wake after Close does nothing.
func TestWake(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (network namespaces, AF_PACKET)")
	}
	topo := up(t, "w", 2, 1500)
	for _, v := range versions {
		for _, spin := range []time.Duration{-1, time.Second} {
			name := v.String() + "/spin"
			if spin < 0 {
				name = v.String() + "/nospin"
			}
			t.Run(name, func(t *testing.T) {
				rx := openOn(t, topo.Hosts[1], Config{Version: v, RxSpin: spin})
				tx := openOn(t, topo.Hosts[0], Config{Version: v})
				frames := make([]Frame, 4)
				send := func(seq uint64) error {
					size := frameLen(seq, tx.MTU())
					_, err := tx.Send([][]byte{buildFrame(make([]byte, size), tx.HardwareAddr(), link.EtherTypeRbcast, seq, size)})
					return err
				}
				recvFrame := func(seq uint64) {
					t.Helper()
					n, err := rx.Recv(time.Now().Add(10*time.Second), frames)
					if err != nil || n != 1 {
						t.Fatalf("Recv = %d, %v; want frame %d", n, err, seq)
					}
					if got, err := checkFrame(frames[0].Data, tx.HardwareAddr(), link.EtherTypeRbcast, tx.MTU()); err != nil || got != seq {
						t.Fatalf("received frame %d (%v), want %d", got, err, seq)
					}
				}
				woken := func(what string, deadline time.Time) {
					t.Helper()
					n, err := rx.Recv(deadline, frames)
					if n != 0 || !errors.Is(err, os.ErrDeadlineExceeded) {
						t.Fatalf("%s: Recv = %d, %v; want 0 and a deadline error", what, n, err)
					}
					if time.Now().After(deadline) {
						t.Fatalf("%s: Recv returned at its deadline, not at the Wake", what)
					}
				}

				// A Recv waiting (spinning for up to a second, then in
				// the netpoller) with a minute to go ends at a Wake.
				done := make(chan struct{})
				go func() {
					defer close(done)
					time.Sleep(20 * time.Millisecond)
					rx.Wake()
				}()
				woken("a Wake 20 ms into a 1-minute Recv", time.Now().Add(time.Minute))
				<-done

				// A Wake with no Recv waiting ends the next one; three
				// end one only: the one after waits for its frame.
				rx.Wake()
				rx.Wake()
				rx.Wake()
				woken("a Recv after 3 Wakes", time.Now().Add(time.Minute))
				sent := make(chan error, 1)
				go func() {
					time.Sleep(5 * time.Millisecond)
					sent <- send(1)
				}()
				recvFrame(1)
				if err := <-sent; err != nil {
					t.Fatal(err)
				}

				// Frames in the ring come before a Wake; the wake then
				// ends the next Recv.
				if err := send(2); err != nil {
					t.Fatal(err)
				}
				// Frames cross the bridge asynchronously (and a V3 block
				// retires on a timer): wait until it is ours to read.
				for end := time.Now().Add(10 * time.Second); !rx.rxReady(); time.Sleep(time.Millisecond) {
					if time.Now().After(end) {
						t.Fatal("frame 2 was not in the ring 10 s after it was sent")
					}
				}
				rx.Wake()
				recvFrame(2)
				woken("the Recv after one that read frames past a Wake", time.Now().Add(time.Minute))

				// Wake's past deadline does not stick: a Recv with a short
				// deadline waits for it, and the same deadline twice
				// (cached, not set again) too.
				deadline := time.Now().Add(30 * time.Millisecond)
				for i := range 2 {
					if n, err := rx.Recv(deadline, frames); n != 0 || !errors.Is(err, os.ErrDeadlineExceeded) {
						t.Fatalf("Recv %d with a 30 ms deadline = %d, %v", i, n, err)
					}
					if time.Now().Before(deadline) {
						t.Fatalf("Recv %d returned before its deadline, with no Wake", i)
					}
				}

				// After Close, Wake does nothing (and does not panic).
				rx.Close()
				rx.Wake()
				if _, err := rx.Recv(time.Now().Add(time.Second), frames); err == nil {
					t.Fatal("Recv after Close succeeded")
				}
			})
		}
	}
}
