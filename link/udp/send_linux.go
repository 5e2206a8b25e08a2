package udp

import (
	"errors"
	"fmt"
	"net"
	"os"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Backoff bounds after ENOBUFS, as link/internal/mmsg.
const (
	minBackoff = 50 * time.Microsecond
	maxBackoff = 2 * time.Millisecond
	// maxSegments is UDP_MAX_SEGMENTS of the kernels that have GSO: the
	// most datagrams one UDP_SEGMENT send carries.
	maxSegments = 64
)

// send is one planned message: frames[a:b] to one destination, as one
// datagram, or with UDP_SEGMENT as b-a datagrams of len(frames[a]) bytes
// (the last may be shorter). Once it is sent, the frames before done have
// reached every destination. A send to nil has nowhere to go (a frame to
// this member itself, or a fan-out with no other member): it only
// completes its frames.
type send struct {
	to   *peer
	a, b int
	done int
}

// sender holds Send's plan and preallocated sendmmsg messages.
type sender struct {
	l      *Link
	plan   []send
	hdrs   []unix.Mmsghdr
	iov    []unix.Iovec
	ctl    []byte // one UDP_SEGMENT cmsg per message
	ctlLen int
	maxGSO int // the most bytes one GSO send carries

	// One sendmmsg round: messages [pos, count) of hdrs.
	pos, count int
	retries    uint64
	errno      unix.Errno
	noBufs     bool
	fn         func(fd uintptr) bool
}

func (s *sender) init(l *Link) {
	s.l = l
	n := l.cfg.BatchSize
	s.hdrs = make([]unix.Mmsghdr, n)
	s.iov = make([]unix.Iovec, n*maxSegments)
	s.ctlLen = unix.CmsgSpace(2)
	s.ctl = make([]byte, n*s.ctlLen)
	for i := range n {
		h := (*unix.Cmsghdr)(unsafe.Pointer(&s.ctl[i*s.ctlLen]))
		h.Level = unix.IPPROTO_UDP
		h.Type = unix.UDP_SEGMENT
		h.SetLen(unix.CmsgLen(2))
	}
	s.maxGSO = maxIPPacket - headerLen(l.fam)
	s.fn = s.sendmmsg
}

// Send transmits complete Ethernet frames, in order: a frame to a
// multicast or broadcast MAC goes to the group (multicast mode) or to
// every other member (fan-out); a frame to a member's MAC to that member
// alone (to the group, or every member, if the link does not know it).
// Frames are checked first: if any is shorter than an Ethernet header or
// longer than 14+MTU bytes, nothing is sent. Frames staged before
// (Stage) go out first. Runs of equal-sized frames to
// one destination leave in one UDP_SEGMENT send where the kernel has it.
// A full socket buffer (EAGAIN) is waited out; a datagram the kernel
// refuses for one member (no route to it, say) is dropped and counted
// (Counters.SendErrors), as a lossy network would drop it.
func (l *Link) Send(frames [][]byte) (int, error) {
	for i, f := range frames {
		if err := l.check(i, f); err != nil {
			return 0, l.opError("send", err)
		}
	}
	if l.closed.Load() {
		return 0, l.opError("send", net.ErrClosed)
	}
	l.txMu.Lock()
	defer l.txMu.Unlock()
	// After the frames staged before it.
	if err := l.flushStaged(); err != nil {
		return 0, err
	}
	return l.send(frames)
}

// send transmits frames that were checked; txMu is held.
func (l *Link) send(frames [][]byte) (int, error) {
	if len(frames) == 0 {
		return 0, nil
	}
	s := &l.tx
	s.planSends(frames)
	done, err := s.run(frames)
	var bytes uint64
	for _, f := range frames[:done] {
		bytes += uint64(len(f))
	}
	l.c.framesSent.Add(uint64(done))
	l.c.bytesSent.Add(bytes)
	return done, err
}

// planSends fills s.plan for frames: runs of frames to one destination,
// each run to each of its targets in turn, cut into GSO sends.
func (s *sender) planSends(frames [][]byte) {
	l := s.l
	s.plan = s.plan[:0]
	gso := l.gso.Load()
	for a := 0; a < len(frames); {
		dst := [6]byte(frames[a][:6])
		to := l.destination(dst)
		b := a + 1
		for b < len(frames) && l.destination([6]byte(frames[b][:6])) == to {
			b++
		}
		var targets []*peer
		switch {
		case to != nil:
			targets = []*peer{to}
		case dst == l.mac:
		case l.multicast:
			targets = []*peer{l.group}
		default:
			targets = l.peers.list()
		}
		if len(targets) == 0 {
			s.plan = append(s.plan, send{a: a, b: b, done: b})
		}
		for k, t := range targets {
			last := k == len(targets)-1
			for i := a; i < b; {
				j := i + 1
				if gso {
					j = s.segments(frames, i, b)
				}
				done := a
				if last {
					done = j
				}
				s.plan = append(s.plan, send{to: t, a: i, b: j, done: done})
				i = j
			}
		}
		a = b
	}
}

// destination is the member a frame to dst goes to alone, or nil when it
// goes to the group (multicast and broadcast MACs, and members not known).
func (l *Link) destination(dst [6]byte) *peer {
	if dst[0]&1 != 0 {
		return nil
	}
	return l.peers.byMAC(dst)
}

// segments is the end of the GSO send that starts at frames[i] and ends
// by b: frames of len(frames[i]) bytes, the last of them possibly
// shorter, at most maxSegments of them and maxGSO bytes.
func (s *sender) segments(frames [][]byte, i, b int) int {
	size := len(frames[i])
	total := size
	j := i + 1
	for j < b && j-i < maxSegments && len(frames[j]) <= size && total+len(frames[j]) <= s.maxGSO {
		total += len(frames[j])
		j++
		if len(frames[j-1]) < size {
			break
		}
	}
	return j
}

// run sends the plan, as many messages per sendmmsg as fit, and returns
// how many frames reached every destination.
func (s *sender) run(frames [][]byte) (int, error) {
	l := s.l
	done := 0
	for p := 0; p < len(s.plan); {
		// Fill the messages.
		m, v := 0, 0
		first := p
		for ; p < len(s.plan) && m < len(s.hdrs); p++ {
			d := &s.plan[p]
			if d.to == nil {
				if m == 0 {
					done = max(done, d.done)
					first = p + 1
					continue
				}
				break
			}
			if v+(d.b-d.a) > len(s.iov) {
				break
			}
			h := &s.hdrs[m].Hdr
			h.Name = d.to.sa.ptr()
			h.Namelen = d.to.sa.len
			h.Iov = &s.iov[v]
			h.SetIovlen(d.b - d.a)
			for _, f := range frames[d.a:d.b] {
				s.iov[v].Base = &f[0]
				s.iov[v].SetLen(len(f))
				v++
			}
			if d.b-d.a > 1 {
				c := s.ctl[m*s.ctlLen:]
				*(*uint16)(unsafe.Pointer(&c[unix.CmsgLen(0)])) = uint16(len(frames[d.a]))
				h.Control = &c[0]
				h.SetControllen(s.ctlLen)
			} else {
				h.Control = nil
				h.SetControllen(0)
			}
			m++
		}
		if m == 0 {
			continue
		}
		sent, err := s.flush(m)
		for i := range v {
			s.iov[i].Base = nil
		}
		for _, d := range s.plan[first : first+sent] {
			done = max(done, d.done)
			l.c.datagramsSent.Add(uint64(d.b - d.a))
			if d.b-d.a > 1 {
				l.c.gsoSends.Add(1)
			}
		}
		if err == nil {
			continue
		}
		// Message first+sent failed.
		d := s.plan[first+sent]
		var errno unix.Errno
		errors.As(err, &errno)
		switch {
		case errno == unix.EIO && d.b-d.a > 1:
			// The device cannot checksum a GSO send: do without from
			// here on.
			l.gso.Store(false)
			s.unbatch(first + sent)
			p = first + sent
		case d.to != l.group && perDestination(errno):
			l.c.sendErrors.Add(1)
			e := error(fmt.Errorf("to %s: %w", d.to.addr, err))
			l.c.lastSendError.Store(&e)
			done = max(done, d.done)
			p = first + sent + 1
		default:
			return done, err
		}
	}
	return done, nil
}

// perDestination reports whether errno is about one destination, not the
// link: a datagram to a member that cannot be reached is lost, like one a
// router drops.
func perDestination(errno unix.Errno) bool {
	switch errno {
	case unix.EHOSTUNREACH, unix.ENETUNREACH, unix.EHOSTDOWN, unix.ECONNREFUSED,
		unix.EMSGSIZE, unix.EPERM, unix.EACCES, unix.EADDRNOTAVAIL:
		return true
	}
	return false
}

// unbatch replaces the GSO sends of the plan from p on by one send per
// frame.
func (s *sender) unbatch(p int) {
	rest := append([]send(nil), s.plan[p:]...)
	s.plan = s.plan[:p]
	for _, d := range rest {
		if d.b-d.a <= 1 {
			s.plan = append(s.plan, d)
			continue
		}
		for i := d.a; i < d.b; i++ {
			done := d.done
			if d.done == d.b {
				done = i + 1
			}
			s.plan = append(s.plan, send{to: d.to, a: i, b: i + 1, done: done})
		}
	}
}

// flush sends messages [0, m) with sendmmsg, waiting out a full socket
// buffer (EAGAIN: the poller waits for room) and ENOBUFS (backing off).
// It returns how many went before an error.
func (s *sender) flush(m int) (int, error) {
	l := s.l
	s.pos, s.count, s.retries = 0, m, 0
	backoff, pos := minBackoff, 0
	var err error
	for {
		s.errno, s.noBufs = 0, false
		if werr := l.usock.rc.Write(s.fn); werr != nil {
			err = l.ioError("send", werr)
			break
		}
		if s.errno != 0 {
			err = l.opError("sendmmsg", os.NewSyscallError("sendmmsg", s.errno))
			break
		}
		if !s.noBufs {
			break
		}
		if s.pos > pos {
			pos, backoff = s.pos, minBackoff
		}
		time.Sleep(backoff)
		backoff = min(2*backoff, maxBackoff)
	}
	if s.retries > 0 {
		l.c.sendRetries.Add(s.retries)
	}
	return s.pos, err
}

// sendmmsg is the RawConn.Write callback.
func (s *sender) sendmmsg(fd uintptr) bool {
	for s.pos < s.count {
		r, _, e := unix.Syscall6(unix.SYS_SENDMMSG, fd, uintptr(unsafe.Pointer(&s.hdrs[s.pos])), uintptr(s.count-s.pos), 0, 0, 0)
		switch e {
		case 0:
			s.pos += int(r)
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
