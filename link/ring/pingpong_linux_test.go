package ring

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rbcast/rbcast/link"
)

// TestPingPongWake: two links bounce frames back and forth, one frame in
// flight at a time, while another goroutine keeps calling Wake on both.
// Every frame arrives, byte for byte and in order, and no Recv waits for
// its deadline with a frame in the ring (a lost wake-up): each waits 10 s,
// and a round trip takes microseconds. The receivers alternate between
// spinning and sleeping at once (a spin back-off), so the socket joins
// and leaves the epoll instance in every order.
func TestPingPongWake(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (network namespaces, AF_PACKET)")
	}
	topo := up(t, "pw", 2, 1500)
	for _, v := range versions {
		for _, spin := range []time.Duration{-1, 50 * time.Microsecond} {
			name := v.String() + "/spin"
			if spin < 0 {
				name = v.String() + "/nospin"
			}
			t.Run(name, func(t *testing.T) {
				// A V3 frame waits in its block for the retire timer: a
				// round trip takes two of them.
				rounds := 20000
				if v == V3 {
					rounds = 1000
				}
				if testing.Short() {
					rounds /= 10
				}
				cfg := Config{Version: v, RxSpin: spin, BlockTimeout: time.Millisecond}
				a := openOn(t, topo.Hosts[0], cfg)
				b := openOn(t, topo.Hosts[1], cfg)

				var wakes atomic.Uint64 // Recvs a Wake ended
				// recv returns the next frame's sequence number, checked
				// byte for byte, retrying when a Wake ended the Recv.
				recv := func(l *Link, from *Link, frames []Frame, i int) (uint64, error) {
					for {
						// Every other Recv starts in a spin back-off
						// (sleeps at once), the rest may spin.
						if i%2 == 1 {
							l.spinPace.PauseUntil(time.Now().Add(time.Hour))
						} else {
							l.spinPace.PauseUntil(time.Time{})
						}
						deadline := time.Now().Add(10 * time.Second)
						n, err := l.Recv(deadline, frames)
						if errors.Is(err, os.ErrDeadlineExceeded) && n == 0 {
							if !time.Now().Before(deadline) {
								return 0, fmt.Errorf("Recv %d waited 10 s for its frame (a lost wake-up)", i)
							}
							wakes.Add(1)
							continue
						}
						if err != nil || n != 1 {
							return 0, fmt.Errorf("Recv %d = %d, %v; want one frame", i, n, err)
						}
						return checkFrame(frames[0].Data, from.HardwareAddr(), link.EtherTypeRbcast, from.MTU())
					}
				}
				send := func(l *Link, buf []byte, seq uint64) error {
					size := frameLen(seq, l.MTU())
					_, err := l.Send([][]byte{buildFrame(buf, l.HardwareAddr(), link.EtherTypeRbcast, seq, size)})
					return err
				}

				stop := make(chan struct{})
				var wg sync.WaitGroup
				wg.Add(2)
				go func() { // the waker
					defer wg.Done()
					for {
						select {
						case <-stop:
							return
						default:
						}
						a.Wake()
						b.Wake()
						time.Sleep(20 * time.Microsecond)
					}
				}()
				echoErr := make(chan error, 1)
				go func() { // b echoes every frame back
					defer wg.Done()
					frames, buf := make([]Frame, 4), make([]byte, 2*a.MTU())
					for i := range rounds {
						seq, err := recv(b, a, frames, i)
						if err == nil && seq != uint64(i) {
							err = fmt.Errorf("b received frame %d, want %d", seq, i)
						}
						if err == nil {
							err = send(b, buf, seq)
						}
						if err != nil {
							echoErr <- err
							return
						}
					}
					echoErr <- nil
				}()

				frames, buf := make([]Frame, 4), make([]byte, 2*a.MTU())
				var err error
				for i := 0; i < rounds && err == nil; i++ {
					if err = send(a, buf, uint64(i)); err != nil {
						break
					}
					var seq uint64
					if seq, err = recv(a, b, frames, i); err == nil && seq != uint64(i) {
						err = fmt.Errorf("a received frame %d back, want %d", seq, i)
					}
				}
				if err != nil {
					// Unblock b, which may wait for a frame a never sent.
					b.Close()
				}
				eerr := <-echoErr
				close(stop)
				wg.Wait()
				if err != nil {
					t.Fatalf("a: %v (b: %v)", err, eerr)
				}
				if eerr != nil {
					t.Fatalf("b: %v", eerr)
				}
				if wakes.Load() == 0 {
					t.Errorf("no Recv of %d round trips was ended by a Wake: the test did not race them", rounds)
				}
				t.Logf("%d round trips, %d Recvs ended by a Wake", rounds, wakes.Load())
			})
		}
	}
}
