package ring

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/rbcast/rbcast/link"
)

// epollTargets is how many file descriptors the epoll instance epfd of
// this process holds: its "tfd:" lines in /proc/self/fdinfo.
func epollTargets(t *testing.T, epfd int) int {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/self/fdinfo/%d", epfd))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "tfd:") {
			n++
		}
	}
	return n
}

// TestRecvSocketInEpollOnlyAsleep: the receive socket is in the ring's
// epoll instance only while Recv sleeps. Merely disarmed there, it kept an
// entry on the socket's wait queue, and every frame delivered to it ran
// epoll's callback inside the sender's sendto, with interrupts off, to
// find nothing armed. Before any Recv, while one sleeps, after a frame
// ended the sleep and after a sleep that ended at its deadline.
func TestRecvSocketInEpollOnlyAsleep(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (network namespaces, AF_PACKET)")
	}
	topo := up(t, "ep", 2, 1500)
	for _, v := range versions {
		for _, spin := range []time.Duration{-1, 50 * time.Microsecond} {
			name := v.String() + "/spin"
			if spin < 0 {
				name = v.String() + "/nospin"
			}
			t.Run(name, func(t *testing.T) {
				rx := openOn(t, topo.Hosts[1], Config{Version: v, RxSpin: spin})
				tx := openOn(t, topo.Hosts[0], Config{Version: v})
				ep := rx.rxEp.fd
				if n := epollTargets(t, ep); n != 0 {
					t.Fatalf("after Open the epoll instance holds %d descriptors, want 0", n)
				}
				type result struct {
					n   int
					err error
				}
				done := make(chan result, 1)
				go func() {
					n, err := rx.Recv(time.Now().Add(20*time.Second), make([]Frame, 4))
					done <- result{n, err}
				}()
				// Wait for the sleep: the socket enters the instance.
				for end := time.Now().Add(10 * time.Second); epollTargets(t, ep) != 1; {
					if time.Now().After(end) {
						t.Fatal("Recv did not add its socket to the epoll instance within 10 s")
					}
					time.Sleep(time.Millisecond)
				}
				size := frameLen(1, tx.MTU())
				if _, err := tx.Send([][]byte{buildFrame(make([]byte, size), tx.HardwareAddr(), link.EtherTypeRbcast, 1, size)}); err != nil {
					t.Fatal(err)
				}
				if r := <-done; r.n != 1 || r.err != nil {
					t.Fatalf("Recv = %d, %v; want the frame", r.n, r.err)
				}
				if n := epollTargets(t, ep); n != 0 {
					t.Fatalf("after a frame ended the sleep the epoll instance holds %d descriptors, want 0", n)
				}
				// A sleep that ends at its deadline removes it too.
				if n, err := rx.Recv(time.Now().Add(5*time.Millisecond), make([]Frame, 4)); n != 0 || err == nil {
					t.Fatalf("Recv on a quiet link = %d, %v; want its deadline", n, err)
				}
				if n := epollTargets(t, ep); n != 0 {
					t.Fatalf("after a sleep ended at its deadline the epoll instance holds %d descriptors, want 0", n)
				}
			})
		}
	}
}
