//go:build linux

package afpacket

import (
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/mdlayher/packet"
	"github.com/rbcast/rbcast/link"
	"github.com/rbcast/rbcast/link/internal/mmsg"
	"golang.org/x/sys/unix"
)

var (
	_ link.Waker       = (*Link)(nil)
	_ link.GroupFilter = (*Link)(nil)
)

// ethPAll is ETH_P_ALL: binding to it is what makes the kernel hand packet
// sockets copies of outgoing frames (dev_queue_xmit_nit only feeds ptype_all).
const ethPAll = 0x0003

// Link is an AF_PACKET link on one interface. It is safe for one goroutine
// calling Recv and one calling Send at a time; Stats and Close may be called
// from any goroutine.
//
// Frame.Time is the kernel's receive timestamp (SO_TIMESTAMPNS, read from
// the control message recvmmsg returns with each frame); if a frame comes
// without one, Recv uses time.Now() when the batch arrives.
type Link struct {
	conn   *packet.Conn
	rc     syscall.RawConn
	ifname string
	addr   net.Addr // ifname, for errors
	// errTimeout is what Recv returns when its deadline passes; made once,
	// since an idle runtime times out on every tick.
	errTimeout error
	mac        net.HardwareAddr
	mtu        int
	cfg        Config
	closed     atomic.Bool
	// groups is Config.Groups or the last SetGroups', sorted; empty: every
	// group.
	groups atomic.Pointer[[]uint32]

	// Receive side, owned by the goroutine in Recv. Slot i is rxHdrs[i],
	// which points at rxIov[i] -> rxBuf[i], rxAddr[i] (for sll_pkttype)
	// and rxCtl[i] (for the timestamp). All of it is allocated in Open.
	rxHdrs   []unix.Mmsghdr
	rxIov    []unix.Iovec
	rxAddr   []unix.RawSockaddrLinklayer
	rxBuf    [][]byte
	rxCtl    []byte
	rxCtlLen int
	rxWant   int // slots offered to the next recvmmsg
	rxGot    int // frames the last recvmmsg returned
	rxErr    syscall.Errno
	rxWoken  bool                  // the last recvmmsg found nothing, and a Wake
	rxFn     func(fd uintptr) bool // l.recvmmsg, bound once so Recv does not allocate
	deadline time.Time             // read deadline currently set on the socket (wakeDeadline: maybe a Wake's)
	woken    atomic.Bool           // set by Wake, taken by Recv

	// Send side, owned by the goroutine in Send.
	// tx sends batches with sendmmsg(2); ENOBUFS comes from a full device
	// queue (NET_XMIT_DROP) with no poll event for room, so it backs off.
	tx *mmsg.Sender

	framesSent, framesReceived atomic.Uint64
	bytesSent, bytesReceived   atomic.Uint64
	sendRetries, filtered      atomic.Uint64

	statsMu sync.Mutex
	kernel  link.Stats // accumulated PACKET_STATISTICS (it resets on read)
}

// Open opens an AF_PACKET link on the named interface. The interface must
// exist, be up and have an MTU of at least link.MinMTU; otherwise the error
// is a *link.InterfaceError. Without CAP_NET_RAW the error matches
// link.ErrPermission.
func Open(ifname string, cfg Config) (*Link, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	ifi, err := link.LookupInterface(ifname)
	if err != nil {
		return nil, err
	}
	groups := groupSet(cfg.Groups)
	filter, err := socketFilter(cfg, groups)
	if err != nil {
		return nil, fmt.Errorf("afpacket: assembling the socket filter: %w", err)
	}

	// Bound to our EtherType, the kernel demultiplexes for us. KeepOutgoing
	// needs ETH_P_ALL instead. Either way the filter is attached before
	// bind(2) (packet.Config.Filter), so nothing unfiltered is queued.
	proto := int(cfg.EtherType)
	if cfg.KeepOutgoing {
		proto = ethPAll
	}
	conn, err := packet.Listen(ifi, packet.Raw, proto, &packet.Config{Filter: filter})
	if err != nil {
		return nil, link.SocketError("listen", ifname, innermost(err))
	}
	l := &Link{
		conn:   conn,
		ifname: ifname,
		addr:   ifaceAddr(ifname),
		mac:    append(net.HardwareAddr(nil), ifi.HardwareAddr...),
		mtu:    ifi.MTU,
		cfg:    cfg,
	}
	l.groups.Store(&groups)
	if err := l.setup(); err != nil {
		conn.Close()
		return nil, err
	}
	return l, nil
}

// setup configures the socket and allocates the batch buffers.
func (l *Link) setup() error {
	for _, g := range l.cfg.MulticastGroups {
		if err := l.conn.JoinGroup(g); err != nil {
			return fmt.Errorf("afpacket: joining multicast group %s on %q: %w", g, l.ifname, err)
		}
	}
	rc, err := l.conn.SyscallConn()
	if err != nil {
		return link.SocketError("syscall-conn", l.ifname, err)
	}
	l.rc = rc
	var serr error
	err = rc.Control(func(fd uintptr) {
		s := int(fd)
		if serr = setBuffer(s, unix.SO_RCVBUFFORCE, unix.SO_RCVBUF, l.cfg.RecvBuffer); serr != nil {
			serr = fmt.Errorf("afpacket: setting the receive buffer of %q to %d bytes: %w", l.ifname, l.cfg.RecvBuffer, serr)
			return
		}
		if serr = setBuffer(s, unix.SO_SNDBUFFORCE, unix.SO_SNDBUF, l.cfg.SendBuffer); serr != nil {
			serr = fmt.Errorf("afpacket: setting the send buffer of %q to %d bytes: %w", l.ifname, l.cfg.SendBuffer, serr)
			return
		}
		if err := unix.SetsockoptInt(s, unix.SOL_SOCKET, unix.SO_TIMESTAMPNS, 1); err != nil {
			serr = fmt.Errorf("afpacket: enabling SO_TIMESTAMPNS on %q: %w", l.ifname, err)
		}
	})
	if err != nil {
		return link.SocketError("setsockopt", l.ifname, err)
	}
	if serr != nil {
		return serr
	}

	n := l.cfg.BatchSize
	l.rxHdrs = make([]unix.Mmsghdr, n)
	l.rxIov = make([]unix.Iovec, n)
	l.rxAddr = make([]unix.RawSockaddrLinklayer, n)
	l.rxBuf = make([][]byte, n)
	// One cmsg per frame: SCM_TIMESTAMPNS carrying a struct timespec.
	l.rxCtlLen = unix.CmsgSpace(int(unsafe.Sizeof(unix.Timespec{})))
	l.rxCtl = make([]byte, n*l.rxCtlLen)
	frameLen := link.EthernetHeaderLen + l.mtu
	backing := make([]byte, n*frameLen)
	for i := range n {
		l.rxBuf[i] = backing[i*frameLen : (i+1)*frameLen : (i+1)*frameLen]
		l.rxIov[i].Base = &l.rxBuf[i][0]
		l.rxIov[i].SetLen(frameLen)
		h := &l.rxHdrs[i].Hdr
		h.Name = (*byte)(unsafe.Pointer(&l.rxAddr[i]))
		h.Iov = &l.rxIov[i]
		h.SetIovlen(1)
		h.Control = &l.rxCtl[i*l.rxCtlLen]
	}
	// No msg_name: a bound packet socket sends to its own interface and
	// protocol, and SOCK_RAW frames carry their own MAC header.
	l.tx = mmsg.NewSender(n)
	l.rxFn = l.recvmmsg
	l.errTimeout = l.opError("recv", os.ErrDeadlineExceeded)
	return nil
}

// setBuffer sets a socket buffer size, forcing it past the sysctl limit
// when we may (CAP_NET_ADMIN) and settling for the capped size otherwise.
func setBuffer(fd, force, plain, size int) error {
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, force, size); err == nil {
		return nil
	}
	return unix.SetsockoptInt(fd, unix.SOL_SOCKET, plain, size)
}

// innermost digs the system call error out of the *net.OpError that
// packet.Listen returns, so link.SocketError can wrap it exactly once.
func innermost(err error) error {
	var se *os.SyscallError
	if errors.As(err, &se) {
		return se
	}
	return err
}

// MTU is the interface MTU when the link was opened.
func (l *Link) MTU() int { return l.mtu }

// HardwareAddr is the interface's MAC address.
func (l *Link) HardwareAddr() net.HardwareAddr { return l.mac }

// Recv waits for frames until deadline (zero: no limit) and returns them as
// views into the link's own buffers, valid until the next Recv or Close.
// One recvmmsg returns the first frame and whatever else is already queued,
// up to len(frames) or the batch size. Receiving allocates nothing; a
// timeout costs one allocation, the *net.OpError mdlayher/packet wraps
// around the poller's error.
func (l *Link) Recv(deadline time.Time, frames []link.Frame) (int, error) {
	if len(frames) == 0 {
		return 0, l.opError("recv", errors.New("no room: Recv was given an empty frames slice"))
	}
	if l.closed.Load() {
		return 0, l.opError("recv", net.ErrClosed)
	}
	// Setting a deadline arms a runtime timer; skip it when nothing changed
	// so the steady state does not touch the poller at all.
	if !deadline.Equal(l.deadline) {
		if err := l.conn.SetReadDeadline(deadline); err != nil {
			return 0, l.ioError("recv", err)
		}
		l.deadline = deadline
	}
	l.rxWant = min(len(frames), len(l.rxHdrs))
	for {
		if err := l.rc.Read(l.rxFn); err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) && !l.closed.Load() {
				// Our deadline or a Wake's: that Wake is done, and the
				// next Recv sets its deadline again.
				l.woken.Store(false)
				l.deadline = wakeDeadline
				return 0, l.errTimeout
			}
			return 0, l.ioError("recv", err)
		}
		if l.rxWoken {
			l.rxWoken = false
			l.deadline = wakeDeadline // Wake sets it, now or soon
			return 0, l.errTimeout
		}
		if l.rxErr != 0 {
			return 0, l.ioError("recvmmsg", os.NewSyscallError("recvmmsg", l.rxErr))
		}
		if n := l.collect(frames); n > 0 {
			return n, nil
		}
		// Everything in the batch was filtered out; wait for more.
	}
}

// SetGroups implements link.GroupFilter: from now on the kernel passes
// only frames of these groups (every group if none), replacing the socket
// filter in one step. Frames of other groups already queued are dropped
// by Recv and counted in Stats.Filtered. It may run concurrently with
// Recv and Send.
func (l *Link) SetGroups(groups []uint32) error {
	if len(groups) > link.MaxGroups {
		return l.opError("set groups", fmt.Errorf("%d groups, more than link.MaxGroups (%d)", len(groups), link.MaxGroups))
	}
	set := groupSet(groups)
	filter, err := socketFilter(l.cfg, set)
	if err != nil {
		return fmt.Errorf("afpacket: %s: assembling the socket filter: %w", l.ifname, err)
	}
	if l.closed.Load() {
		return l.opError("set groups", net.ErrClosed)
	}
	// Recv checks frames against both sets while the kernel's filter
	// changes, so that it drops none the new filter passed.
	if old := *l.groups.Load(); len(old) > 0 && len(set) > 0 {
		both := groupSet(append(slices.Clone(old), set...))
		l.groups.Store(&both)
	} else {
		l.groups.Store(&[]uint32{})
	}
	if err := l.conn.SetBPF(filter); err != nil {
		return l.ioError("setsockopt SO_ATTACH_FILTER", err)
	}
	l.groups.Store(&set)
	return nil
}

// Wake implements link.Waker: a Recv sleeping in the netpoller is woken
// by a read deadline in the past, and one not yet waiting takes the flag
// and returns at once. After Close it does nothing.
func (l *Link) Wake() {
	l.woken.Store(true)
	_ = l.conn.SetReadDeadline(wakeDeadline) // on a closed socket: an error, ignored
}

// wakeDeadline is the read deadline Wake sets: long past.
var wakeDeadline = time.Unix(1, 0)

// recvmmsg is the syscall.RawConn.Read callback: one non-blocking
// recvmmsg(2) into the preallocated slots. It reports false on EAGAIN so
// the runtime poller parks us until the socket is readable.
func (l *Link) recvmmsg(fd uintptr) bool {
	for i := range l.rxWant {
		h := &l.rxHdrs[i].Hdr
		h.Namelen = unix.SizeofSockaddrLinklayer
		h.SetControllen(l.rxCtlLen)
		h.Flags = 0
	}
	for {
		r, _, e := unix.Syscall6(unix.SYS_RECVMMSG, fd, uintptr(unsafe.Pointer(&l.rxHdrs[0])), uintptr(l.rxWant), unix.MSG_DONTWAIT, 0, 0)
		switch e {
		case unix.EINTR:
			continue
		case unix.EAGAIN:
			// Nothing to read. A Wake that came before this look (its
			// past deadline may have been overwritten by ours since)
			// ends the Recv now; a later one wakes the poller.
			if l.woken.Swap(false) {
				l.rxGot, l.rxErr, l.rxWoken = 0, 0, true
				return true
			}
			return false
		case 0:
			l.rxGot, l.rxErr = int(r), 0
		default:
			l.rxGot, l.rxErr = 0, e
		}
		return true
	}
}

// collect turns the last recvmmsg's slots into Frames, dropping (and
// counting) what is not ours: truncated frames, and whatever the socket
// filter would have rejected (see wanted).
func (l *Link) collect(frames []link.Frame) int {
	var now time.Time
	n := 0
	var bytes uint64
	groups := *l.groups.Load()
	for i := range l.rxGot {
		m := &l.rxHdrs[i]
		size := int(m.Len)
		data := l.rxBuf[i][:size]
		pktType := l.rxAddr[i].Pkttype
		if m.Hdr.Flags&unix.MSG_TRUNC != 0 || !wanted(&l.cfg, groups, data, pktType) {
			l.filtered.Add(1)
			continue
		}
		ts, ok := l.timestamp(i)
		if !ok {
			if now.IsZero() {
				now = time.Now()
			}
			ts = now
		}
		frames[n] = link.Frame{Data: data, Time: ts, Outgoing: pktType == packetOutgoing}
		n++
		bytes += uint64(size)
	}
	l.rxGot = 0
	if n > 0 {
		l.framesReceived.Add(uint64(n))
		l.bytesReceived.Add(bytes)
	}
	return n
}

// timestamp finds the SCM_TIMESTAMPNS control message of slot i. It parses
// the cmsg headers in place because unix.ParseSocketControlMessage
// allocates.
func (l *Link) timestamp(i int) (time.Time, bool) {
	ctl := l.rxCtl[i*l.rxCtlLen : i*l.rxCtlLen+int(l.rxHdrs[i].Hdr.Controllen)]
	hdrLen := unix.CmsgLen(0)
	for len(ctl) >= hdrLen {
		h := (*unix.Cmsghdr)(unsafe.Pointer(&ctl[0]))
		clen := int(h.Len)
		if clen < hdrLen || clen > len(ctl) {
			return time.Time{}, false
		}
		if h.Level == unix.SOL_SOCKET && h.Type == unix.SCM_TIMESTAMPNS &&
			clen-hdrLen >= int(unsafe.Sizeof(unix.Timespec{})) {
			ts := (*unix.Timespec)(unsafe.Pointer(&ctl[hdrLen]))
			return time.Unix(int64(ts.Sec), int64(ts.Nsec)), true
		}
		next := unix.CmsgSpace(clen - hdrLen)
		if next > len(ctl) {
			break
		}
		ctl = ctl[next:]
	}
	return time.Time{}, false
}

// Send transmits frames in order, BatchSize per sendmmsg(2). Frames are
// checked first: if any is shorter than an Ethernet header or longer than
// 14+MTU bytes, nothing is sent. Back-pressure is waited out, never dropped:
// EAGAIN (send buffer full) parks us in the runtime poller until the socket
// is writable; ENOBUFS (device queue full) backs off from 50µs to 2ms. Both
// count in Stats.SendRetries.
func (l *Link) Send(frames [][]byte) (int, error) {
	maxLen := link.EthernetHeaderLen + l.mtu
	for i, f := range frames {
		if len(f) > maxLen {
			return 0, l.opError("send", fmt.Errorf("frame %d is %d bytes, more than the %d a %d-byte MTU allows (%d-byte header + MTU): %w",
				i, len(f), maxLen, l.mtu, link.EthernetHeaderLen, link.ErrFrameTooLarge))
		}
		if len(f) < link.EthernetHeaderLen {
			return 0, l.opError("send", fmt.Errorf("frame %d is %d bytes, shorter than the %d-byte Ethernet header", i, len(f), link.EthernetHeaderLen))
		}
	}
	if l.closed.Load() {
		return 0, l.opError("send", net.ErrClosed)
	}
	sent := 0
	for sent < len(frames) {
		batch := frames[sent:min(len(frames), sent+l.tx.Cap())]
		n, err := l.sendBatch(batch)
		sent += n
		if err != nil {
			return sent, err
		}
	}
	return sent, nil
}

// sendBatch sends at most BatchSize frames, waiting out back-pressure.
func (l *Link) sendBatch(batch [][]byte) (int, error) {
	r := l.tx.Send(l.rc, batch)
	if r.Retries > 0 {
		l.sendRetries.Add(r.Retries)
	}
	l.framesSent.Add(uint64(r.Sent))
	l.bytesSent.Add(r.Bytes)
	switch {
	case r.PollErr != nil:
		return r.Sent, l.ioError("send", r.PollErr)
	case r.SysErr != nil:
		return r.Sent, l.opError("sendmmsg", r.SysErr)
	}
	return r.Sent, nil
}

// Stats returns the link's counters. The kernel's PACKET_STATISTICS are
// added to running totals because reading them resets them; KernelPackets
// counts every frame the kernel queued for us, including the dropped ones.
func (l *Link) Stats() (link.Stats, error) {
	l.statsMu.Lock()
	defer l.statsMu.Unlock()
	var err error
	if !l.closed.Load() {
		err = l.readKernelStats()
	}
	s := l.kernel
	s.FramesSent = l.framesSent.Load()
	s.FramesReceived = l.framesReceived.Load()
	s.BytesSent = l.bytesSent.Load()
	s.BytesReceived = l.bytesReceived.Load()
	s.SendRetries = l.sendRetries.Load()
	s.Filtered = l.filtered.Load()
	return s, err
}

// readKernelStats folds PACKET_STATISTICS into l.kernel; statsMu is held.
func (l *Link) readKernelStats() error {
	ks, err := l.conn.Stats()
	if err != nil {
		return l.ioError("stats", err)
	}
	l.kernel.KernelPackets += uint64(ks.Packets)
	l.kernel.KernelDrops += uint64(ks.Drops)
	l.kernel.KernelFreezes += uint64(ks.FreezeQueueCount)
	return nil
}

// Close closes the socket, which wakes a Recv or Send blocked in the
// poller; they then return net.ErrClosed. The kernel counters are read one
// last time so Stats keeps them.
func (l *Link) Close() error {
	l.statsMu.Lock()
	if l.closed.Swap(true) {
		l.statsMu.Unlock()
		return nil
	}
	_ = l.readKernelStats()
	l.statsMu.Unlock()
	if err := l.conn.Close(); err != nil {
		return l.ioError("close", err)
	}
	return nil
}

// ioError reports an error from the socket, as net.ErrClosed once the link
// has been closed (the poller reports a closed file otherwise).
func (l *Link) ioError(op string, err error) error {
	if l.closed.Load() {
		return l.opError(op, net.ErrClosed)
	}
	var oe *net.OpError
	if errors.As(err, &oe) {
		err = oe.Err
	}
	return l.opError(op, err)
}

func (l *Link) opError(op string, err error) error {
	return &net.OpError{Op: op, Net: "packet", Addr: l.addr, Err: err}
}

// ifaceAddr names the interface in errors.
type ifaceAddr string

func (a ifaceAddr) Network() string { return "packet" }
func (a ifaceAddr) String() string  { return string(a) }
