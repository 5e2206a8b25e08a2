package udp

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/rbcast/rbcast/link"
	"golang.org/x/sys/unix"
)

var _ link.Waker = (*Link)(nil)

// Link carries rbcast's Ethernet frames in UDP datagrams. It is safe for
// one goroutine calling Recv and one calling Send (or SendNow) at a time,
// with Stage and Kick on others as link.Stager allows; Stats, Counters,
// Wake and Close may be called from any goroutine.
type Link struct {
	cfg       Config
	fam       int
	multicast bool
	local     netip.AddrPort
	mac       [6]byte
	hw        net.HardwareAddr
	mtu       int // link MTU: the carried Ethernet frame's payload
	ipMTU     int
	addr      net.Addr // the local address, for errors
	peers     *peers
	group     *peer // multicast mode: the group as a destination

	// usock sends everything and receives unicast; msock (multicast
	// mode) receives the group's datagrams. Recv waits on wait: usock's
	// file, or, with two sockets, an epoll instance holding both.
	usock, msock *socket
	wait         *os.File
	waitRC       syscall.RawConn
	closed       atomic.Bool
	errTimeout   error

	rx receiver // owned by the goroutine in Recv
	// tx is the sender's state, used by Send, SendNow and Kick in turn
	// (txMu); stage is the queue Stage fills.
	tx    sender
	txMu  sync.Mutex
	stage stageQueue

	gso atomic.Bool // UDP_SEGMENT in use (off for good after EIO)
	gro bool

	// ctl sends hellos (Recv's goroutine and the maintenance goroutine).
	ctlMu  sync.Mutex
	ctlBuf []byte
	stop   chan struct{}
	done   chan struct{}

	c counters
}

// socket is one UDP socket of the link.
type socket struct {
	fd   int
	file *os.File
	rc   syscall.RawConn
	// drops is the socket's drop counter as the last datagram read from it
	// reported it (SO_RXQ_OVFL, cumulative); owned by Recv.
	drops atomic.Uint32
}

// counters are the link's own counts; Stats and Counters read them.
type counters struct {
	framesSent, framesReceived atomic.Uint64
	bytesSent, bytesReceived   atomic.Uint64
	sendRetries, filtered      atomic.Uint64
	datagramsSent              atomic.Uint64
	datagramsReceived          atomic.Uint64
	gsoSends, groReceives      atomic.Uint64
	sendErrors                 atomic.Uint64
	lastSendError              atomic.Pointer[error]
	foreign, spoofed           atomic.Uint64
	hellosSent, hellosReceived atomic.Uint64
	forgotten                  atomic.Uint64
}

// Counters are the link's own counts, beyond link.Stats.
type Counters struct {
	// DatagramsSent and DatagramsReceived count UDP datagrams (a fan-out
	// frame is one per member; a GSO send or GRO receive is several).
	DatagramsSent, DatagramsReceived uint64
	// GSOSends are sends of several datagrams in one (UDP_SEGMENT);
	// GROReceives receives of several in one (UDP_GRO).
	GSOSends, GROReceives uint64
	// SendErrors are datagrams to one member the kernel refused (no
	// route, port unreachable, too large for the path): dropped like a
	// lossy network would, and LastSendError says why.
	SendErrors    uint64
	LastSendError error
	// Foreign are datagrams from addresses the link does not admit (a
	// static member list's outsiders); Spoofed those whose carried source
	// MAC is not the one their address gives (MACOf).
	Foreign, Spoofed uint64
	// Hellos sent and received (fan-out with Learn).
	HellosSent, HellosReceived uint64
	// Peers is how many members the link knows now (this one not
	// counted); Learned and Forgotten how many it learned and forgot.
	Peers, Learned, Forgotten int
	// Collisions are addresses not admitted because their MAC is
	// another's (MACOf's five hash bytes collided).
	Collisions uint64
	// GSO and GRO say whether the offloads are in use.
	GSO, GRO bool
}

// Open opens a UDP link as cfg says. It needs no privilege.
func Open(cfg Config) (*Link, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	l := &Link{cfg: cfg, multicast: cfg.Multicast(), stop: make(chan struct{}), done: make(chan struct{})}
	if l.multicast {
		l.fam = family(cfg.Group)
	} else {
		l.fam = family(cfg.Peers[0])
	}
	if err := l.open(); err != nil {
		l.closeSockets()
		return nil, err
	}
	go l.maintain()
	return l, nil
}

// opError names the operation and the link's local address (or the mode
// it was opening).
func (l *Link) opError(op string, err error) error {
	addr := l.addr
	if addr == nil {
		addr = udpAddr(l.describe())
	}
	return &net.OpError{Op: op, Net: "udp", Addr: addr, Err: err}
}

func (l *Link) describe() string {
	if l.multicast {
		return fmt.Sprintf("group %s on %s", l.cfg.Group, l.cfg.Interface)
	}
	return fmt.Sprintf("fan-out to %d peers", len(l.cfg.Peers))
}

// open makes the sockets, finds the local address and the MTU.
func (l *Link) open() error {
	cfg := &l.cfg
	var ifi *net.Interface
	if cfg.Interface != "" {
		var err error
		if ifi, err = link.LookupInterface(cfg.Interface); err != nil {
			return err
		}
	}
	ufd, err := newSocket(l.fam, cfg)
	if err != nil {
		return l.opError("socket", err)
	}
	l.usock = &socket{fd: ufd}
	local, scope := cfg.Local, uint32(0)
	switch {
	case local.IsValid():
		if local.Addr().Is6() && local.Addr().IsLinkLocalUnicast() && ifi != nil {
			scope = uint32(ifi.Index)
		}
	case ifi != nil:
		ip, s, err := interfaceAddr(ifi, l.fam)
		if err != nil {
			return l.opError("listen", err)
		}
		local, scope = netip.AddrPortFrom(ip, 0), s
		if !l.multicast {
			// The entry of Peers with this address names the port.
			for _, p := range cfg.Peers {
				if p.Addr() == ip {
					local = p
					break
				}
			}
			if local.Port() == 0 {
				return l.opError("listen", fmt.Errorf("no address of Peers is %s's %s: give this member's address with Config.Local", ifi.Name, ip))
			}
		}
	}
	if local.IsValid() {
		if local, scope, err = bindLocal(ufd, local, scope); err != nil {
			return l.opError("listen", fmt.Errorf("binding %s: %w", cfg.Local, err))
		}
	} else {
		if local, err = bindPeer(ufd, cfg.Peers); err != nil {
			return l.opError("listen", err)
		}
	}
	l.local = netip.AddrPortFrom(local.Addr().WithZone(""), local.Port())
	l.addr = udpAddr(l.local.String())
	l.mac = [6]byte(MACOf(l.local))
	l.hw = net.HardwareAddr(l.mac[:])

	// The MTU: the interface's, or the smallest route's to a peer.
	ipMTU := maxIPPacket
	switch {
	case l.multicast:
		ipMTU = ifi.MTU
	default:
		// A peer with no route now (its network is down) does not stop
		// the others; sends to it fail and are counted.
		found := false
		for _, p := range cfg.Peers {
			if p == l.local {
				continue
			}
			if m, err := routeMTU(l.fam, p, scope); err == nil {
				ipMTU, found = min(ipMTU, m), true
			}
		}
		if !found && cfg.MTU == 0 {
			m, err := localMTU(l.local.Addr())
			if err != nil {
				return l.opError("listen", err)
			}
			ipMTU = m
		}
		if ifi != nil {
			ipMTU = min(ipMTU, ifi.MTU)
		}
	}
	if cfg.MTU != 0 {
		ipMTU = min(ipMTU, cfg.MTU)
	}
	l.ipMTU = min(ipMTU, maxIPPacket)
	l.mtu = LinkMTU(l.ipMTU, l.fam == 6)
	if l.mtu < link.MinMTU {
		return l.opError("listen", fmt.Errorf("%w: the path MTU %d leaves %d bytes for rbcast frames after %d bytes of IP, UDP and Ethernet headers (need at least %d)",
			link.ErrMTUTooSmall, l.ipMTU, l.mtu, headerLen(l.fam)+link.EthernetHeaderLen, link.MinMTU))
	}

	if l.multicast {
		if err := setMulticastSend(ufd, l.fam, ifi, cfg); err != nil {
			return l.opError("listen", err)
		}
		mfd, err := newSocket(l.fam, cfg)
		if err != nil {
			return l.opError("socket", err)
		}
		l.msock = &socket{fd: mfd}
		if err := joinGroup(mfd, l.fam, cfg.Group, ifi); err != nil {
			return l.opError("listen", err)
		}
		gscope := uint32(0)
		if l.fam == 6 && (cfg.Group.Addr().IsLinkLocalMulticast() || cfg.Group.Addr().IsInterfaceLocalMulticast()) {
			gscope = uint32(ifi.Index)
		}
		l.group = &peer{addr: cfg.Group, sa: makeSockaddr(cfg.Group, gscope)}
	}
	l.peers = newPeers(l.local, l.mac, cfg.Peers, scope, l.multicast || cfg.Learn, cfg.PeerTimeout)

	// Offloads, then the files that put the sockets in Go's netpoller.
	if !cfg.NoGSO && hasGSO(ufd) {
		l.gso.Store(true)
	}
	if !cfg.NoGRO {
		l.gro = enableGRO(ufd)
		if l.msock != nil {
			l.gro = l.gro && enableGRO(l.msock.fd)
		}
	}
	for _, s := range []*socket{l.usock, l.msock} {
		if s == nil {
			continue
		}
		s.file = os.NewFile(uintptr(s.fd), "udp "+l.local.String())
		if s.rc, err = s.file.SyscallConn(); err != nil {
			return l.opError("listen", err)
		}
	}
	l.wait, l.waitRC = l.usock.file, l.usock.rc
	if l.msock != nil {
		if err := l.openEpoll(); err != nil {
			return l.opError("listen", err)
		}
	}
	l.rx.init(l)
	l.tx.init(l)
	l.stage.init(4 * cfg.BatchSize)
	l.errTimeout = l.opError("recv", os.ErrDeadlineExceeded)
	return nil
}

// openEpoll makes the epoll instance Recv waits on with two sockets: Go's
// netpoller cannot wait for either of two files, but it can wait for an
// epoll file that holds both (level-triggered, so a socket Recv left with
// datagrams in it keeps the instance readable).
func (l *Link) openEpoll() error {
	efd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return os.NewSyscallError("epoll_create1", err)
	}
	if err := unix.SetNonblock(efd, true); err != nil {
		unix.Close(efd)
		return os.NewSyscallError("fcntl", err)
	}
	for _, s := range []*socket{l.usock, l.msock} {
		ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(s.fd)}
		if err := unix.EpollCtl(efd, unix.EPOLL_CTL_ADD, s.fd, &ev); err != nil {
			unix.Close(efd)
			return os.NewSyscallError("epoll_ctl", err)
		}
	}
	l.wait = os.NewFile(uintptr(efd), "udp epoll "+l.local.String())
	rc, err := l.wait.SyscallConn()
	if err != nil {
		return err
	}
	l.waitRC = rc
	return nil
}

// closeSockets closes what open made: the epoll file first, which waits
// for a Recv using the sockets to leave, then the sockets.
func (l *Link) closeSockets() error {
	var errs []error
	if l.wait != nil && l.msock != nil {
		errs = append(errs, l.wait.Close())
	}
	for _, s := range []*socket{l.usock, l.msock} {
		switch {
		case s == nil:
		case s.file != nil:
			errs = append(errs, s.file.Close())
		case s.fd >= 0:
			errs = append(errs, unix.Close(s.fd))
		}
	}
	return errors.Join(errs...)
}

// MTU is the largest Ethernet payload the link carries: the path MTU
// less the IP, UDP and carried Ethernet headers.
func (l *Link) MTU() int { return l.mtu }

// HardwareAddr is MACOf(LocalAddr()).
func (l *Link) HardwareAddr() net.HardwareAddr { return l.hw }

// LocalAddr is this member's address: the source of its datagrams.
func (l *Link) LocalAddr() netip.AddrPort { return l.local }

// PeerAddr is the address of the member with Ethernet address mac, if
// the link knows it (for status displays: who is 02:…).
func (l *Link) PeerAddr(mac net.HardwareAddr) (netip.AddrPort, bool) {
	if len(mac) != 6 {
		return netip.AddrPort{}, false
	}
	if [6]byte(mac) == l.mac {
		return l.local, true
	}
	if p := l.peers.byMAC([6]byte(mac)); p != nil {
		return p.addr, true
	}
	return netip.AddrPort{}, false
}

// Stats returns the link's counters. KernelDrops are the datagrams the
// sockets' receive buffers overflowed with (SO_RXQ_OVFL, as the last
// datagram received reported it); KernelPackets every datagram the
// sockets queued, dropped ones included.
func (l *Link) Stats() (link.Stats, error) {
	var s link.Stats
	s.FramesSent = l.c.framesSent.Load()
	s.FramesReceived = l.c.framesReceived.Load()
	s.BytesSent = l.c.bytesSent.Load()
	s.BytesReceived = l.c.bytesReceived.Load()
	s.SendRetries = l.c.sendRetries.Load()
	s.Filtered = l.c.filtered.Load()
	for _, so := range []*socket{l.usock, l.msock} {
		if so != nil {
			s.KernelDrops += uint64(so.drops.Load())
		}
	}
	s.KernelPackets = l.c.datagramsReceived.Load() + s.KernelDrops
	return s, nil
}

// Counters returns the link's own counts.
func (l *Link) Counters() Counters {
	c := Counters{
		DatagramsSent:     l.c.datagramsSent.Load(),
		DatagramsReceived: l.c.datagramsReceived.Load(),
		GSOSends:          l.c.gsoSends.Load(),
		GROReceives:       l.c.groReceives.Load(),
		SendErrors:        l.c.sendErrors.Load(),
		Foreign:           l.c.foreign.Load(),
		Spoofed:           l.c.spoofed.Load(),
		HellosSent:        l.c.hellosSent.Load(),
		HellosReceived:    l.c.hellosReceived.Load(),
		Peers:             len(l.peers.list()),
		Learned:           int(l.peers.learned.Load()),
		Forgotten:         int(l.c.forgotten.Load()),
		Collisions:        l.peers.collisions.Load(),
		GSO:               l.gso.Load(),
		GRO:               l.gro,
	}
	if e := l.c.lastSendError.Load(); e != nil {
		c.LastSendError = *e
	}
	return c
}

// Wake implements link.Waker, as link/afpacket does: a Recv sleeping in
// the netpoller is woken by a read deadline in the past, and one not yet
// waiting takes the flag and returns at once.
func (l *Link) Wake() {
	l.rx.woken.Store(true)
	_ = l.wait.SetReadDeadline(wakeDeadline)
}

// wakeDeadline is the read deadline Wake sets: long past.
var wakeDeadline = time.Unix(1, 0)

// Close closes the sockets, which wakes a Recv or Send blocked in the
// poller; they then return net.ErrClosed.
func (l *Link) Close() error {
	if l.closed.Swap(true) {
		return nil
	}
	close(l.stop)
	<-l.done
	if err := l.closeSockets(); err != nil {
		return l.opError("close", err)
	}
	return nil
}

// ioError reports an error from a socket, as net.ErrClosed once the link
// has been closed.
func (l *Link) ioError(op string, err error) error {
	if l.closed.Load() || errors.Is(err, os.ErrClosed) {
		return l.opError(op, net.ErrClosed)
	}
	var pe *os.PathError
	if errors.As(err, &pe) {
		err = pe.Err
	}
	return l.opError(op, err)
}

// udpAddr names the link in errors.
type udpAddr string

func (a udpAddr) Network() string { return "udp" }
func (a udpAddr) String() string  { return string(a) }

// AddrOf is the UDP address of the member whose MAC (MACOf) is mac, if
// the link knows it: a peer it was given or learned, or this member. It
// lets a status show an address instead of the MAC the protocols use.
func (l *Link) AddrOf(mac [6]byte) (netip.AddrPort, bool) {
	if mac == l.mac {
		return l.local, true
	}
	if p := l.peers.byMAC(mac); p != nil {
		return p.addr, true
	}
	return netip.AddrPort{}, false
}
