package localapi

import (
	"net"
	"reflect"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestReadRecvfromRaw: PacketReader's recvfrom is a raw system call (it
// never waits, and by Syscall it was the call that woke the runtime's
// sysmon after every wait), made through recvfromSyscall: a packet
// read after a wait in the poller is one raw recvfrom that found it,
// after one that found nothing.
func TestReadRecvfromRaw(t *testing.T) {
	if reflect.ValueOf(recvfromSyscall).Pointer() != reflect.ValueOf(unix.RawSyscall6).Pointer() {
		t.Fatal("recvfromSyscall is not unix.RawSyscall6")
	}
	var calls int
	recvfromSyscall = func(trap, a1, a2, a3, a4, a5, a6 uintptr) (r1, r2 uintptr, err unix.Errno) {
		if trap == unix.SYS_RECVFROM {
			calls++
		}
		return unix.RawSyscall6(trap, a1, a2, a3, a4, a5, a6)
	}
	defer func() { recvfromSyscall = unix.RawSyscall6 }()
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_SEQPACKET, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(fds[1])
	c, _ := socketConn(t, fds[0])
	defer c.Close()
	r, err := NewPacketReader(c.(*net.UnixConn), 0)
	if err != nil {
		t.Fatal(err)
	}
	// Were no packet written (recv past recvfromSyscall), Read would wait
	// for ever.
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	// The packet comes as the reader is about to wait in the poller,
	// after its first recvfrom found nothing.
	r.SetReady(func(sleep bool) bool {
		if sleep && calls == 1 {
			if _, err := syscall.Write(fds[1], []byte("ding")); err != nil {
				t.Error(err)
			}
		}
		return false
	})
	buf := make([]byte, 64)
	n, trunc, err := r.Read(buf)
	if err != nil || trunc || string(buf[:n]) != "ding" {
		t.Fatalf("Read: %q, truncated %v, %v", buf[:n], trunc, err)
	}
	if calls != 2 {
		t.Errorf("%d recvfroms through recvfromSyscall, want 2 (none ready, then the packet)", calls)
	}
}
