package localapi

import (
	"net"
	"os"
	"runtime"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// A Bell keeps the P through its system call: with GOMAXPROCS=1 no
// other goroutine runs while the call is in the kernel, however long it
// takes there. A write through the net package (Syscall) lets sysmon hand
// the P to another thread once the call outlasts one of its looks, and
// the counting goroutine then runs during the call, many times over. The calls here are
// made long on purpose: 16 MiB sendto(2)s into a stream socket with room
// for them, each a copy of milliseconds.
func TestWriteBellKeepsP(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(fds[1])
	const size = 16 << 20
	for _, fd := range fds {
		syscall.SetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_SNDBUFFORCE, 64<<20)
		syscall.SetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_RCVBUFFORCE, 64<<20)
	}
	c, rc := socketConn(t, fds[0])
	defer c.Close()
	count := pCounter(t)
	p := make([]byte, size)
	ran := 0
	for range 10 {
		drain(t, fds[1])
		time.Sleep(time.Millisecond) // the counter runs, and sysmon sees an idle spell
		before := count.Load()
		if err := NewBell(rc).Write(p); err != nil {
			t.Fatal(err)
		}
		// One look of the counter may be under way at the call's start;
		// a P handed over runs it for the whole call, hundreds of times.
		if d := count.Load() - before; d > 10 {
			ran++
		}
	}
	if ran > 0 {
		t.Errorf("with GOMAXPROCS=1 another goroutine ran during %d of 10 Bell writes of 16 MiB; want none (the P kept through the call)", ran)
	}
}

// drain reads what waits on fd without waiting.
func drain(t *testing.T, fd int) {
	buf := make([]byte, 1<<20)
	for {
		n, _, err := syscall.Recvfrom(fd, buf, syscall.MSG_DONTWAIT)
		if err == syscall.EAGAIN || n == 0 {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

// socketConn makes fd a net.Conn (in the runtime's poller, as a client's
// or the daemon's connection is) and returns its RawConn.
func socketConn(t *testing.T, fd int) (net.Conn, syscall.RawConn) {
	t.Helper()
	f := os.NewFile(uintptr(fd), "socket")
	c, err := net.FileConn(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	rc, err := c.(*net.UnixConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	return c, rc
}

// pCounter starts a goroutine that counts while it gets the P and yields
// it at once, until the test ends: with GOMAXPROCS 1, how far the count
// moves during a call tells whether the call kept the P.
func pCounter(t *testing.T) *atomic.Uint64 {
	count := new(atomic.Uint64)
	stop := make(chan struct{})
	t.Cleanup(func() { close(stop) })
	go func() {
		for {
			select {
			case <-stop:
				return
			default:
				count.Add(1)
				runtime.Gosched()
			}
		}
	}()
	return count
}
