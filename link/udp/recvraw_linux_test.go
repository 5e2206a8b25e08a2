package udp

import (
	"bytes"
	"reflect"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestRecvmmsgRaw: the receiver's recvmmsg is a raw system call (it
// never waits, and by Syscall it was the call that woke the runtime's
// sysmon after every wait of a daemon on this link), made through
// recvmmsgSyscall: a frame received after a wait in the poller is one raw
// recvmmsg that found it, after one that found nothing. Each asks for at
// most rawRecvBytes of slots: one at a time on loopback, whose frames
// are up to 64 KiB.
func TestRecvmmsgRaw(t *testing.T) {
	if reflect.ValueOf(recvmmsgSyscall).Pointer() != reflect.ValueOf(unix.RawSyscall6).Pointer() {
		t.Fatal("recvmmsgSyscall is not unix.RawSyscall6")
	}
	ports := freePorts(t, lo4, 2)
	a := open(t, Config{Peers: ports, Local: ports[0]})
	b := open(t, Config{Peers: ports, Local: ports[1]})
	// Hellos and the like settle first; then only the frame below moves.
	receive(t, b, 1<<10, 100*time.Millisecond, 8)
	var calls, vlen int
	recvmmsgSyscall = func(trap, a1, a2, a3, a4, a5, a6 uintptr) (r1, r2 uintptr, err unix.Errno) {
		if trap == unix.SYS_RECVMMSG {
			calls++
			vlen = max(vlen, int(a3))
		}
		return unix.RawSyscall6(trap, a1, a2, a3, a4, a5, a6)
	}
	defer func() { recvmmsgSyscall = unix.RawSyscall6 }()
	f := ethFrame(b.HardwareAddr(), a.HardwareAddr(), 1, 100)
	go func() {
		time.Sleep(20 * time.Millisecond)
		a.Send([][]byte{f})
	}()
	got := receive(t, b, 1, 2*time.Second, 8)
	if len(got) != 1 || !bytes.Equal(got[0], f) {
		t.Fatalf("received %d frames, want the one sent", len(got))
	}
	if calls != 2 {
		t.Errorf("%d recvmmsgs through recvmmsgSyscall, want 2 (none ready, then the frame)", calls)
	}
	calls = 0
	stream := make([][]byte, 32)
	for i := range stream {
		stream[i] = ethFrame(b.HardwareAddr(), a.HardwareAddr(), uint32(i), 100)
	}
	sendAll(t, a, stream) // on loopback, queued at b by the time Send returns
	got = receive(t, b, len(stream), 2*time.Second, 64)
	if len(got) != len(stream) || !bytes.Equal(got[len(got)-1], stream[len(stream)-1]) {
		t.Fatalf("received %d frames of a queued stream of %d", len(got), len(stream))
	}
	if calls == 0 || vlen != 1 {
		t.Errorf("a queued stream of %d frames: %d recvmmsgs through recvmmsgSyscall for up to %d datagrams, want each for 1", len(stream), calls, vlen)
	}
}

// TestSendmmsgRawWhenShort: a round of at most rawSendMax datagrams and
// rawSendBytes bytes is sent by a raw sendmmsg through sendmmsgSyscall (by
// Syscall it woke the runtime's sysmon whenever it was a daemon's first
// system call after a wait); a longer or larger one keeps Syscall, and
// every frame arrives either way.
func TestSendmmsgRawWhenShort(t *testing.T) {
	if reflect.ValueOf(sendmmsgSyscall).Pointer() != reflect.ValueOf(unix.RawSyscall6).Pointer() {
		t.Fatal("sendmmsgSyscall is not unix.RawSyscall6")
	}
	ports := freePorts(t, lo4, 2)
	a := open(t, Config{Peers: ports, Local: ports[0]})
	b := open(t, Config{Peers: ports, Local: ports[1]})
	receive(t, b, 1<<10, 100*time.Millisecond, 8)
	var calls int
	sendmmsgSyscall = func(trap, a1, a2, a3, a4, a5, a6 uintptr) (r1, r2 uintptr, err unix.Errno) {
		if trap == unix.SYS_SENDMMSG {
			calls++
		}
		return unix.RawSyscall6(trap, a1, a2, a3, a4, a5, a6)
	}
	defer func() { sendmmsgSyscall = unix.RawSyscall6 }()
	for _, c := range []struct {
		frames, size, raw int
	}{{1, 100, 1}, {rawSendMax, 100, 1}, {4 * rawSendMax, 100, 0}, {2, rawSendBytes/2 + 100, 0}} {
		calls = 0
		fs := make([][]byte, c.frames)
		for i := range fs {
			fs[i] = ethFrame(b.HardwareAddr(), a.HardwareAddr(), uint32(i), c.size)
		}
		sendAll(t, a, fs)
		if got := receive(t, b, c.frames, 2*time.Second, 64); len(got) != c.frames {
			t.Errorf("%d frames sent, %d received", c.frames, len(got))
		}
		if calls != c.raw {
			t.Errorf("%d frames of %d bytes: %d sendmmsgs through sendmmsgSyscall, want %d", c.frames, c.size, calls, c.raw)
		}
	}
}
