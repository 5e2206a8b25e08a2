// Package mmsg sends batches of frames on a packet socket with one
// sendmmsg(2) per batch, waiting out back-pressure: EAGAIN (send buffer
// full) parks the caller in the runtime poller until the socket is
// writable; ENOBUFS (device queue full, which gives no wakeup) backs off
// from MinBackoff to MaxBackoff. Nothing is dropped. It is shared by the
// AF_PACKET link backends and allocates nothing per frame.
package mmsg

import (
	"os"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Backoff bounds after ENOBUFS.
const (
	MinBackoff = 50 * time.Microsecond
	MaxBackoff = 2 * time.Millisecond
)

// Sender holds the preallocated message headers for batches of up to
// Cap() frames. It is for one goroutine at a time.
type Sender struct {
	hdrs []unix.Mmsghdr
	iov  []unix.Iovec
	fn   func(uintptr) bool // the RawConn.Write callback, bound once

	done, count int
	retries     uint64
	errno       syscall.Errno
	noBufs      bool
}

// NewSender returns a Sender for batches of up to n frames.
func NewSender(n int) *Sender {
	s := &Sender{hdrs: make([]unix.Mmsghdr, n), iov: make([]unix.Iovec, n)}
	for i := range s.hdrs {
		s.hdrs[i].Hdr.Iov = &s.iov[i]
		s.hdrs[i].Hdr.SetIovlen(1)
	}
	s.fn = s.sendmmsg
	return s
}

// Cap is the largest batch one Send moves.
func (s *Sender) Cap() int { return len(s.hdrs) }

// Result is what one Send did.
type Result struct {
	Sent    int    // frames the kernel took, from the start of the batch
	Bytes   uint64 // their bytes
	Retries uint64 // EAGAIN and ENOBUFS met and waited out
	// PollErr is an error of the runtime poller (the socket was closed);
	// SysErr is sendmmsg's own failure. At most one is set.
	PollErr error
	SysErr  error
}

// Send transmits batch (at most Cap() frames, each non-empty) on rc.
func (s *Sender) Send(rc syscall.RawConn, batch [][]byte) Result {
	for i, f := range batch {
		s.iov[i].Base = &f[0]
		s.iov[i].SetLen(len(f))
	}
	s.done, s.count, s.retries = 0, len(batch), 0
	var res Result
	backoff, done := MinBackoff, 0
	for {
		s.errno, s.noBufs = 0, false
		if err := rc.Write(s.fn); err != nil {
			res.PollErr = err
			break
		}
		if s.errno != 0 {
			res.SysErr = os.NewSyscallError("sendmmsg", s.errno)
			break
		}
		if !s.noBufs {
			break
		}
		// Back off harder only while the queue stays full; once frames
		// move again, the next wait starts short.
		if s.done > done {
			done, backoff = s.done, MinBackoff
		}
		time.Sleep(backoff)
		backoff = min(2*backoff, MaxBackoff)
	}
	// Let go of the caller's buffers once the kernel has copied them.
	for i := range batch {
		s.iov[i].Base = nil
	}
	res.Sent, res.Retries = s.done, s.retries
	for _, f := range batch[:s.done] {
		res.Bytes += uint64(len(f))
	}
	return res
}

// sendmmsg is the RawConn.Write callback. It pushes the rest of the batch;
// on EAGAIN it reports false so the poller waits for POLLOUT, on ENOBUFS
// it returns to Send, which sleeps.
func (s *Sender) sendmmsg(fd uintptr) bool {
	for s.done < s.count {
		r, _, e := unix.Syscall6(unix.SYS_SENDMMSG, fd, uintptr(unsafe.Pointer(&s.hdrs[s.done])), uintptr(s.count-s.done), 0, 0, 0)
		switch e {
		case 0:
			s.done += int(r)
		case unix.EINTR:
		case unix.EAGAIN:
			s.retries++
			return false
		case unix.ENOBUFS:
			s.retries++
			s.noBufs = true
			return true
		default:
			s.errno = e
			return true
		}
	}
	return true
}
