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
	var count atomic.Uint64
	stop := make(chan struct{})
	defer close(stop)
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

// TryWrite never waits: into a socket with no room it returns false at
// once (a Write would wait in the poller), and true again once the
// other end read a packet; the packets it did write arrive whole.
func TestTryWriteFullSocket(t *testing.T) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_SEQPACKET, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(fds[1])
	c, rc := socketConn(t, fds[0])
	defer c.Close()
	b := NewBell(rc)
	p := []byte{1, 2, 3, 4}
	n := 0
	for ; ; n++ {
		sent, err := b.TryWrite(p)
		if err != nil {
			t.Fatalf("TryWrite %d: %v", n, err)
		}
		if !sent {
			break
		}
		if n > 1<<20 {
			t.Fatal("the socket never filled")
		}
	}
	if n == 0 {
		t.Fatal("no packet fitted into an empty socket")
	}
	buf := make([]byte, 16)
	if m, err := syscall.Read(fds[1], buf); err != nil || m != len(p) || string(buf[:m]) != string(p) {
		t.Fatalf("read %d bytes %v (%v), want %v", m, buf[:max(m, 0)], err, p)
	}
	var sent bool
	for i := 0; i < 100 && !sent; i++ { // the room a read frees may take a moment to show
		if sent, err = b.TryWrite(p); err != nil {
			t.Fatal(err)
		}
		if !sent {
			runtime.Gosched()
		}
	}
	if !sent {
		t.Fatal("TryWrite found no room after a packet was read")
	}
	t.Logf("%d packets filled the socket", n)
}
