package localapi

import (
	"net"
	"os"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// WriteBell writes p, a packet of a few bytes (a Doorbell or a
// DaemonDoorbell), to the socket behind rc by a raw system call: one
// sendto(2) with MSG_DONTWAIT, which never waits, so that the Go runtime
// does not count the caller as in a system call. With one P (rbcastd and
// its clients run on one) a write that outlasts a look of sysmon's (20
// µs and up) loses the P to another thread; a doorbell's write wakes the
// other end's process, which may take the CPU from the writer inside the
// call, and then the writer waits for that other thread on its return
// (docs/local-api.md, "Kicks that lose the P"). A full socket waits in
// the poller as Write does.
func WriteBell(rc syscall.RawConn, p []byte) error {
	var e syscall.Errno
	err := rc.Write(func(fd uintptr) bool {
		for {
			_, _, e = unix.RawSyscall6(unix.SYS_SENDTO, fd, uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)), unix.MSG_DONTWAIT|unix.MSG_NOSIGNAL, 0, 0)
			if e != unix.EINTR {
				return e != unix.EAGAIN
			}
		}
	})
	if err == nil && e != 0 {
		err = os.NewSyscallError("sendto", e)
	}
	if err != nil {
		return &net.OpError{Op: "write", Net: "unixpacket", Err: err}
	}
	return nil
}
