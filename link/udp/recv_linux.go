package udp

import (
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
	"os"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/rbcast/rbcast/link"
	"golang.org/x/sys/unix"
)

// receiver holds Recv's preallocated recvmmsg slots. Slot i is hdrs[i],
// which points at iov[i] -> buf[i], names[i] (the sender's address) and
// ctl[i*ctlLen:] (timestamp, drop counter, GRO segment size). A slot
// filled with a GRO receive holds several frames; those Recv had no room
// for wait in pending, and the slots are not refilled until they are
// handed out.
type receiver struct {
	l      *Link
	hdrs   []unix.Mmsghdr
	iov    []unix.Iovec
	names  []unix.RawSockaddrInet6
	buf    [][]byte
	ctl    []byte
	ctlLen int
	from   []*socket // the socket each filled slot came from

	// One Read callback's work: fill slots [0, want) from the sockets.
	want, got int
	errno     unix.Errno
	woken     atomic.Bool // set by Wake, taken by Recv
	wasWoken  bool
	fn        func(fd uintptr) bool
	deadline  time.Time // read deadline set on the wait file

	// pending: slots [next, got) of the last recvmmsg, and within slot
	// next the frames from offset seg on, not yet handed out.
	next, seg int
}

func (r *receiver) init(l *Link) {
	r.l = l
	n := l.cfg.BatchSize
	size := link.EthernetHeaderLen + l.mtu
	if l.gro {
		size = maxIPPacket // a GRO receive is up to 64 KiB of datagrams
	}
	r.hdrs = make([]unix.Mmsghdr, n)
	r.iov = make([]unix.Iovec, n)
	r.names = make([]unix.RawSockaddrInet6, n)
	r.buf = make([][]byte, n)
	r.from = make([]*socket, n)
	// SCM_TIMESTAMPNS (a timespec), SO_RXQ_OVFL (a uint32) and UDP_GRO
	// (an int).
	r.ctlLen = unix.CmsgSpace(int(unsafe.Sizeof(unix.Timespec{}))) + 2*unix.CmsgSpace(4)
	r.ctl = make([]byte, n*r.ctlLen)
	backing := make([]byte, n*size)
	for i := range n {
		r.buf[i] = backing[i*size : (i+1)*size : (i+1)*size]
		r.iov[i].Base = &r.buf[i][0]
		r.iov[i].SetLen(size)
		h := &r.hdrs[i].Hdr
		h.Name = (*byte)(unsafe.Pointer(&r.names[i]))
		h.Iov = &r.iov[i]
		h.SetIovlen(1)
		h.Control = &r.ctl[i*r.ctlLen]
	}
	r.fn = r.recvmmsg
}

// Recv waits for frames until deadline (zero: no limit) and returns them
// as views into the link's buffers, valid until the next Recv or Close.
// Datagrams that are not frames of the group (other EtherTypes, senders
// not admitted, a source MAC that is not the sender's, unicast to
// another member, this member's own multicast looped back) are dropped
// and counted in Stats.Filtered; hellos are handled and not returned.
func (l *Link) Recv(deadline time.Time, frames []link.Frame) (int, error) {
	if len(frames) == 0 {
		return 0, l.opError("recv", errors.New("no room: Recv was given an empty frames slice"))
	}
	if l.closed.Load() {
		return 0, l.opError("recv", net.ErrClosed)
	}
	r := &l.rx
	if r.next < r.got {
		if n := r.collect(frames); n > 0 {
			return n, nil
		}
	}
	if !deadline.Equal(r.deadline) {
		if err := l.wait.SetReadDeadline(deadline); err != nil {
			return 0, l.ioError("recv", err)
		}
		r.deadline = deadline
	}
	r.want = min(len(frames), len(r.hdrs))
	for {
		if err := l.waitRC.Read(r.fn); err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) && !l.closed.Load() {
				r.woken.Store(false)
				r.deadline = wakeDeadline
				return 0, l.errTimeout
			}
			return 0, l.ioError("recv", err)
		}
		if r.wasWoken {
			r.wasWoken = false
			r.deadline = wakeDeadline
			return 0, l.errTimeout
		}
		if r.errno != 0 {
			return 0, l.ioError("recvmmsg", os.NewSyscallError("recvmmsg", r.errno))
		}
		if n := r.collect(frames); n > 0 {
			return n, nil
		}
		// Everything was filtered out or a hello; wait for more.
	}
}

// recvmmsg is the RawConn.Read callback: one non-blocking recvmmsg(2) per
// socket into the free slots. It reports false, so the poller waits, only
// when every socket had nothing.
func (r *receiver) recvmmsg(uintptr) bool {
	r.got, r.next, r.seg, r.errno = 0, 0, 0, 0
	for _, s := range [2]*socket{r.l.usock, r.l.msock} {
		if s == nil || r.got == r.want {
			continue
		}
		for i := r.got; i < r.want; i++ {
			h := &r.hdrs[i].Hdr
			h.Namelen = unix.SizeofSockaddrInet6
			h.SetControllen(r.ctlLen)
			h.Flags = 0
		}
		for {
			n, _, e := unix.Syscall6(unix.SYS_RECVMMSG, uintptr(s.fd), uintptr(unsafe.Pointer(&r.hdrs[r.got])), uintptr(r.want-r.got), unix.MSG_DONTWAIT, 0, 0)
			switch e {
			case unix.EINTR:
				continue
			case 0:
				for i := r.got; i < r.got+int(n); i++ {
					r.from[i] = s
				}
				r.got += int(n)
			case unix.EAGAIN:
			default:
				r.errno = e
				return true
			}
			break
		}
	}
	if r.got > 0 {
		return true
	}
	if r.woken.Swap(false) {
		r.wasWoken = true
		return true
	}
	return false
}

// collect hands out the frames of the filled slots, dropping (and
// counting) what is not the group's, until frames is full.
func (r *receiver) collect(frames []link.Frame) int {
	l := r.l
	var now time.Time
	n := 0
	var bytes uint64
	for ; r.next < r.got && n < len(frames); r.next, r.seg = r.next+1, 0 {
		i := r.next
		m := &r.hdrs[i]
		size := int(m.Len)
		data := r.buf[i][:size]
		ts, segSize, drops := r.cmsgs(i)
		if drops > 0 {
			r.from[i].drops.Store(drops)
		}
		if r.seg == 0 {
			datagrams := 1
			if segSize > 0 && size > segSize {
				datagrams = (size + segSize - 1) / segSize
				l.c.groReceives.Add(1)
			}
			l.c.datagramsReceived.Add(uint64(datagrams))
		}
		if m.Hdr.Flags&unix.MSG_TRUNC != 0 {
			l.c.filtered.Add(1)
			continue
		}
		src, scope, ok := parseSockaddr(&r.names[i])
		if !ok || src == l.local {
			// Our own multicast, looped back.
			l.c.filtered.Add(1)
			continue
		}
		if segSize <= 0 || segSize > size {
			segSize = size
		}
		if ts.IsZero() {
			if now.IsZero() {
				now = time.Now()
			}
			ts = now
		}
		var from *peer
		for ; r.seg < size && n < len(frames); r.seg += segSize {
			f := data[r.seg:min(r.seg+segSize, size)]
			if !r.accept(f, src, scope, &from) {
				continue
			}
			frames[n] = link.Frame{Data: f, Time: ts}
			n++
			bytes += uint64(len(f))
		}
		if r.seg < size {
			break // frames is full; the rest of this slot comes next time
		}
	}
	if n > 0 {
		l.c.framesReceived.Add(uint64(n))
		l.c.bytesReceived.Add(bytes)
	}
	return n
}

// accept checks one received frame: a frame of the group from a member
// admitted, whose source MAC its address gives, to the group or to us.
// Hellos are handled here. *from caches the sender's lookup for the
// frames of one GRO receive.
func (r *receiver) accept(f []byte, src netip.AddrPort, scope uint32, from **peer) bool {
	l := r.l
	if len(f) < link.EthernetHeaderLen {
		l.c.filtered.Add(1)
		return false
	}
	et := binary.BigEndian.Uint16(f[12:14])
	if et != l.cfg.EtherType && et != ControlEtherType {
		l.c.filtered.Add(1)
		return false
	}
	p := *from
	if p == nil {
		if p = l.peers.lookup(src, scope); p == nil {
			l.c.foreign.Add(1)
			l.c.filtered.Add(1)
			return false
		}
		*from = p
		l.peers.heard(p)
	}
	if [6]byte(f[6:12]) != p.mac {
		l.c.spoofed.Add(1)
		l.c.filtered.Add(1)
		return false
	}
	if et == ControlEtherType {
		l.c.filtered.Add(1)
		l.hello(p, f)
		return false
	}
	if f[0]&1 == 0 && [6]byte(f[0:6]) != l.mac {
		// Unicast to another member: flooded by a fan-out sender that
		// did not know the target, or sent to the group for want of it.
		l.c.filtered.Add(1)
		return false
	}
	return true
}

// cmsgs reads slot i's control messages: the kernel's receive time, the
// GRO segment size (0: one datagram), and the socket's drop counter (0 if
// not reported). It parses in place: unix.ParseSocketControlMessage
// allocates.
func (r *receiver) cmsgs(i int) (ts time.Time, segSize int, drops uint32) {
	ctl := r.ctl[i*r.ctlLen : i*r.ctlLen+int(r.hdrs[i].Hdr.Controllen)]
	hdrLen := unix.CmsgLen(0)
	for len(ctl) >= hdrLen {
		h := (*unix.Cmsghdr)(unsafe.Pointer(&ctl[0]))
		clen := int(h.Len)
		if clen < hdrLen || clen > len(ctl) {
			break
		}
		body := ctl[hdrLen:clen]
		switch {
		case h.Level == unix.SOL_SOCKET && h.Type == unix.SCM_TIMESTAMPNS && len(body) >= int(unsafe.Sizeof(unix.Timespec{})):
			t := (*unix.Timespec)(unsafe.Pointer(&body[0]))
			ts = time.Unix(int64(t.Sec), int64(t.Nsec))
		case h.Level == unix.SOL_SOCKET && h.Type == unix.SO_RXQ_OVFL && len(body) >= 4:
			drops = *(*uint32)(unsafe.Pointer(&body[0]))
		case h.Level == unix.IPPROTO_UDP && h.Type == unix.UDP_GRO && len(body) >= 4:
			segSize = int(*(*int32)(unsafe.Pointer(&body[0])))
		}
		next := unix.CmsgSpace(clen - hdrLen)
		if next > len(ctl) {
			break
		}
		ctl = ctl[next:]
	}
	return ts, segSize, drops
}
