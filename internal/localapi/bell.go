package localapi

import (
	"net"
	"os"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// A Bell writes doorbells (a Doorbell or a DaemonDoorbell, a packet of a
// few bytes) to one socket by a raw system call: one sendto(2) with
// MSG_DONTWAIT, which never waits, so that the Go runtime does not count
// the caller as in a system call. With one P (rbcastd and its clients run
// on one) a write that outlasts a look of sysmon's (20 µs and up) loses
// the P to another thread; a doorbell's write wakes the other end's
// process, which may take the CPU from the writer inside the call, and
// then the writer waits for that other thread on its return
// (docs/local-api-history.md, "Kicks that lose the P"). A full socket waits in
// the poller as Write does.
//
// The callback RawConn.Write runs is made once, in NewBell: a closure
// made per write escapes to the heap, one allocation per doorbell. A Bell
// is not for concurrent use; its users write under the lock that guards
// the buffer they encode the doorbell in.
type Bell struct {
	rc syscall.RawConn
	p  []byte
	e  syscall.Errno
	fn func(fd uintptr) bool
}

// NewBell returns a Bell writing to the socket behind rc.
func NewBell(rc syscall.RawConn) *Bell {
	b := &Bell{rc: rc}
	b.fn = b.send
	return b
}

func (b *Bell) send(fd uintptr) bool {
	for {
		_, _, b.e = unix.RawSyscall6(unix.SYS_SENDTO, fd, uintptr(unsafe.Pointer(&b.p[0])), uintptr(len(b.p)), unix.MSG_DONTWAIT|unix.MSG_NOSIGNAL, 0, 0)
		if b.e != unix.EINTR {
			return b.e != unix.EAGAIN
		}
	}
}

// Write writes p, one packet.
func (b *Bell) Write(p []byte) error {
	b.p, b.e = p, 0
	err := b.rc.Write(b.fn)
	if err == nil && b.e != 0 {
		err = os.NewSyscallError("sendto", b.e)
	}
	b.p = nil
	if err != nil {
		return &net.OpError{Op: "write", Net: "unixpacket", Err: err}
	}
	return nil
}
