package ring

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"net"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"

	"github.com/rbcast/rbcast/link"
	"github.com/rbcast/rbcast/link/internal/mmsg"
	"github.com/rbcast/rbcast/link/netyield"
)

// Link is an AF_PACKET link with an mmap'ed receive ring (TPACKET_V2 or V3)
// and an mmap'ed TPACKET_V2 transmit ring, on two sockets of one interface.
type Link struct {
	ifname string
	mtu    int
	mac    net.HardwareAddr
	cfg    resolved

	// mu is held shared by Recv, Send and Stats while they touch the rings
	// or sockets, and exclusively by Close to unmap the rings, so memory is
	// never unmapped under a running Recv or Send.
	mu     sync.RWMutex
	closed atomic.Bool

	// rx is the receive socket: a bare file descriptor, not in the Go
	// runtime's netpoller; rxEp is an epoll instance that holds it,
	// armed only while Recv sleeps, and is in the netpoller (sleep).
	rx       socket
	rxEp     socket                   // fd: the epoll instance; file, raw: its netpoller side
	armed    bool                     // rx is armed (EPOLLIN) in rxEp
	groups   atomic.Pointer[[]uint32] // Config.Groups or SetGroups', sorted; empty: every group
	deadline time.Time                // the read deadline last set on rxEp.file (wakeDeadline: maybe a Wake's)
	woken    atomic.Bool              // set by Wake, taken by Recv
	sleeping atomic.Bool              // Recv is about to sleep, or sleeps, in the netpoller
	ready    func(uintptr) bool
	expired  error // returned on deadline; built once so timeouts do not allocate
	// rxSlot is the byte offset of every V2 frame slot, or of every V3
	// block, in rx.ring.
	rxSlot []int
	// rxNext is the sequence number of the next V2 slot or V3 block to read;
	// its index in rxSlot is rxNext % len(rxSlot). Slots or blocks
	// [rxHeld, rxNext) have been read but not yet given back to the kernel.
	rxNext, rxHeld uint64
	// loans counts the loans (link.Lender) taken of every V2 slot or V3
	// block, by its index in rxSlot: release gives back [rxHeld, rxNext)
	// only up to the first slot or block on loan.
	loans []int32
	// V3 only: the block rxNext is open with blkLeft frames left, the next
	// of them at offset blkOff.
	blkOpen bool
	blkLeft uint32
	blkOff  int
	// spinPace paces a spin's yields (the poller once per spinPoller)
	// and holds Config.RxSpin's back-off under contention.
	spinPace netyield.Spin
	// spinFound counts the spins that found a frame (the receiving
	// goroutine's own; for tests).
	spinFound uint64
	// spinPolicy chooses each spin's length when cfg.adaptSpin.
	spinPolicy spinPolicy
	// rxIdle: the last Recv asked to wait at least idleSpins RxSpins
	// (deadline minus when it found the ring empty) and ended at its
	// deadline with nothing read, so the next one sleeps at once
	// rather than spinning: a link with no traffic spins once after each
	// frame that arrives, not per wait.
	rxIdle bool

	tx     socket
	txSlot []int // byte offset of every TX slot in tx.ring
	// txMu is held by Send and Stage while they fill slots: it guards
	// txNext. Send holds it until the kernel has taken its frames.
	txMu   sync.Mutex
	txNext uint64 // sequence number of the next TX slot to fill
	// txRefused is what the last wait took back (dropRefused), nil if
	// nothing; guarded by txMu.
	txRefused error
	// txPub is txNext as last published, for waits that do not hold txMu
	// (Kick): every slot before it is filled.
	txPub atomic.Uint64
	// kickMu is held by whoever kicks the kernel and waits on the TX ring
	// (wait: Send, Stage on a full ring, Kick); it guards the fields below.
	kickMu   sync.Mutex
	txTarget uint64 // slot txProgress waits for
	txFree   bool   // txProgress waits for txTarget to be AVAILABLE (else: taken by the kernel)
	txErrno  syscall.Errno
	// txStuck: txProgress found the kernel stopped at a refused frame.
	txStuck bool
	// txBackoff is the current pause between kicks refused with ENOBUFS.
	txBackoff time.Duration
	progress  func(uintptr) bool
	// mmsg sends instead of the TX ring when cfg.TxMode is TxSendmmsg.
	mmsg *mmsg.Sender
	// now is SendNow's socket (TxRing mode): protocol 0 and no ring, so
	// what it sends skips the frames queued in the TX ring. nowMmsg is
	// SendNow's batch sender (both modes), guarded by nowMu.
	now     socket
	nowMu   sync.Mutex
	nowMmsg *mmsg.Sender

	framesSent, framesReceived atomic.Uint64
	bytesSent, bytesReceived   atomic.Uint64
	sendRetries, filtered      atomic.Uint64
	// Stats.SpinHits, SpinMisses and SpinSkips.
	spinHits, spinMisses, spinSkips atomic.Uint64
	lent, loansCalled               atomic.Uint64
	loanHeld                        atomic.Uint64

	statsMu sync.Mutex
	kernel  struct{ packets, drops, freezes uint64 }
}

var (
	_ link.Waker       = (*Link)(nil)
	_ link.Stager      = (*Link)(nil)
	_ link.NowSender   = (*Link)(nil)
	_ link.GroupFilter = (*Link)(nil)
	_ link.Lender      = (*Link)(nil)
)

// socket is one AF_PACKET socket with its ring (or, rxEp, the receive
// socket's epoll instance). fd is valid until file is closed (use raw for
// system calls that may race Close); the receive socket has no file, and
// Close closes its fd under l.mu's write lock, so it is used under the
// read lock.
type socket struct {
	fd   int
	file *os.File
	raw  syscall.RawConn
	ring []byte
}

func (s *socket) close() error {
	var err error
	if s.file != nil {
		err = s.file.Close()
		s.file = nil
	} else if s.fd > 0 {
		err = unix.Close(s.fd)
	}
	s.fd = -1
	return err
}

func (s *socket) unmap() error {
	if s.ring == nil {
		return nil
	}
	err := unix.Munmap(s.ring)
	s.ring = nil
	return err
}

// Open opens a ring link on the named interface. The interface must exist,
// be up and have an MTU of at least link.MinMTU; the process needs
// CAP_NET_RAW. Errors name the interface and the step that failed, and
// match link.ErrNoInterface, link.ErrInterfaceDown, link.ErrMTUTooSmall or
// link.ErrPermission with errors.Is.
func Open(ifname string, cfg Config) (*Link, error) {
	s, err := OpenSockets(ifname, cfg)
	if err != nil {
		return nil, err
	}
	return s.Setup()
}

// Sockets is a ring link in two steps: OpenSockets creates its packet
// sockets, the only step that needs CAP_NET_RAW and a fast one; Setup
// maps the rings and binds the sockets, which needs no privilege (Linux
// checks the capability when a packet socket is created, not when its
// ring is configured) and takes the kernel tens of milliseconds for the
// default rings (it allocates and zeroes their memory). A daemon opens
// the sockets before it drops its privileges and sets the rings up
// later, off its start's path. The sockets receive nothing before
// Setup: until bind, a packet socket is hooked into no receive path.
type Sockets struct {
	l       *Link
	ifindex int
	mu      sync.Mutex
	done    bool // Setup or Close ran
}

// OpenSockets checks the interface and cfg as Open does and creates the
// link's sockets; Setup makes them a Link, or Close releases them.
func OpenSockets(ifname string, cfg Config) (*Sockets, error) {
	ifi, err := link.LookupInterface(ifname)
	if err != nil {
		return nil, err
	}
	// Loopback's MTU is 65536, one more than an Ethernet frame's payload
	// can be described with in the ring's 16-bit lengths; no rbcast frame
	// is that large, so such an interface is used as if its MTU were 65535
	// (before, lo was refused, and an unprivileged user saw that MTU error
	// instead of the capability error).
	mtu := min(ifi.MTU, maxMTU)
	r, err := cfg.resolve(mtu)
	if err != nil {
		return nil, fmt.Errorf("ring: opening %s: %w", ifname, err)
	}
	l := &Link{
		ifname: ifname,
		mtu:    mtu,
		mac:    slices.Clone(ifi.HardwareAddr),
		cfg:    r,
		rx:     socket{fd: -1},
		tx:     socket{fd: -1},
		now:    socket{fd: -1},
		rxEp:   socket{fd: -1},
	}
	l.spinPolicy = newSpinPolicy(r.RxSpin)
	l.spinPace.Poller = spinPoller
	l.ready = l.rxArmedReady
	l.progress = l.txProgress
	l.expired = &net.OpError{Op: "recv", Net: "packet", Addr: ifaceAddr(ifname), Err: os.ErrDeadlineExceeded}
	socks := []*socket{&l.rx, &l.tx}
	if r.TxMode == TxRing {
		socks = append(socks, &l.now)
	}
	for _, s := range socks {
		if err := l.newSocket(s); err != nil {
			l.abort()
			return nil, err
		}
	}
	return &Sockets{l: l, ifindex: ifi.Index}, nil
}

// MTU is the MTU of the Link Setup returns.
func (s *Sockets) MTU() int { return s.l.mtu }

// HardwareAddr is the interface's MAC address, the Link's.
func (s *Sockets) HardwareAddr() net.HardwareAddr { return s.l.mac }

// Setup maps the rings, attaches the filter and binds the sockets, and
// returns the link; from then on it receives. It may run on any
// goroutine, once; after Close (or a second time) it fails with
// net.ErrClosed. On failure the sockets are closed.
func (s *Sockets) Setup() (*Link, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.done {
		return nil, link.SocketError("setup", s.l.ifname, net.ErrClosed)
	}
	s.done = true
	l := s.l
	if err := l.openRX(s.ifindex); err != nil {
		l.abort()
		return nil, err
	}
	if err := l.openTX(s.ifindex); err != nil {
		l.abort()
		return nil, err
	}
	return l, nil
}

// Close closes the sockets if Setup has not made them a Link (then the
// Link's Close does); it waits for a Setup running on another goroutine.
func (s *Sockets) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.done {
		s.done = true
		s.l.abort()
	}
	return nil
}

// abort releases whatever a failed Open had set up.
func (l *Link) abort() {
	l.rxEp.close()
	l.rx.close()
	l.tx.close()
	l.now.close()
	l.rx.unmap()
	l.tx.unmap()
}

func (l *Link) sockErr(op string, err error) error {
	if errors.Is(err, unix.ENOMEM) {
		err = fmt.Errorf("%w (the kernel could not allocate the ring; try smaller Config.BlockSize/BlockCount)", err)
	}
	return link.SocketError(op, l.ifname, err)
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// newSocket makes a non-blocking SOCK_RAW packet socket that receives
// nothing yet: with protocol 0 the kernel hooks it into no receive path
// until bind gives it one, so no frame of another interface slips into the
// ring between socket and bind (packet(7)). It is the step that needs
// CAP_NET_RAW.
func (l *Link) newSocket(s *socket) error {
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return l.sockErr("socket", err)
	}
	s.fd = fd
	return nil
}

// setVersion sets the ring layout of s, which must come before the ring
// is requested (packet_mmap.rst, "AF_PACKET TPACKET_V3 example").
func (l *Link) setVersion(s *socket, version int) error {
	if err := unix.SetsockoptInt(s.fd, unix.SOL_PACKET, unix.PACKET_VERSION, version); err != nil {
		return l.sockErr("setsockopt PACKET_VERSION", err)
	}
	return nil
}

func (l *Link) mmap(s *socket, g Geometry) error {
	b, err := unix.Mmap(s.fd, 0, g.Bytes(), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return l.sockErr("mmap", err)
	}
	s.ring = b
	return nil
}

// pollable wraps a sending socket in an *os.File so that waiting goes through Go's
// netpoller: poll(2) on a packet socket reports EPOLLIN when the ring holds
// a frame (V2) or a retired block (V3), and EPOLLOUT when the TX ring has
// room (packet_poll in net/packet/af_packet.c).
func (l *Link) pollable(s *socket, name string) error {
	s.file = os.NewFile(uintptr(s.fd), name)
	raw, err := s.file.SyscallConn()
	if err != nil {
		return l.sockErr("SyscallConn", err)
	}
	s.raw = raw
	return nil
}

func (l *Link) openRX(ifindex int) error {
	s, g := &l.rx, l.cfg.rx
	version := unix.TPACKET_V2
	if l.cfg.Version == V3 {
		version = unix.TPACKET_V3
	}
	if err := l.setVersion(s, version); err != nil {
		return err
	}
	var err error
	if l.cfg.Version == V3 {
		err = unix.SetsockoptTpacketReq3(s.fd, unix.SOL_PACKET, unix.PACKET_RX_RING, &unix.TpacketReq3{
			Block_size:     uint32(g.BlockSize),
			Block_nr:       uint32(g.BlockCount),
			Frame_size:     uint32(g.FrameSize),
			Frame_nr:       uint32(g.FrameCount),
			Retire_blk_tov: l.cfg.timeoutMsec,
		})
	} else {
		err = unix.SetsockoptTpacketReq(s.fd, unix.SOL_PACKET, unix.PACKET_RX_RING, &unix.TpacketReq{
			Block_size: uint32(g.BlockSize),
			Block_nr:   uint32(g.BlockCount),
			Frame_size: uint32(g.FrameSize),
			Frame_nr:   uint32(g.FrameCount),
		})
	}
	if err != nil {
		return l.sockErr("setsockopt PACKET_RX_RING", err)
	}
	if err := l.mmap(s, g); err != nil {
		return err
	}
	if l.cfg.Version == V3 {
		l.rxSlot = make([]int, g.BlockCount)
		for i := range l.rxSlot {
			l.rxSlot[i] = i * g.BlockSize
		}
	} else {
		l.rxSlot = slotOffsets(g)
	}
	l.loans = make([]int32, len(l.rxSlot))

	groups := groupSet(l.cfg.Groups)
	prog, err := socketFilter(l.cfg.EtherType, groups)
	if err != nil {
		return fmt.Errorf("ring: opening %s: assembling the socket filter: %w", l.ifname, err)
	}
	if err := unix.SetsockoptSockFprog(s.fd, unix.SOL_SOCKET, unix.SO_ATTACH_FILTER, prog); err != nil {
		return l.sockErr("setsockopt SO_ATTACH_FILTER", err)
	}
	l.groups.Store(&groups)
	// The kernel copies outgoing frames only to ETH_P_ALL sockets
	// (dev_queue_xmit_nit walks ptype_all), so keeping them means
	// binding to every protocol and leaving the EtherType to the filter.
	// Otherwise bind to the EtherType, and the kernel hands us nothing else.
	proto := l.cfg.EtherType
	if l.cfg.KeepOutgoing {
		proto = unix.ETH_P_ALL
	}
	if err := unix.Bind(s.fd, &unix.SockaddrLinklayer{Protocol: htons(proto), Ifindex: ifindex}); err != nil {
		return l.sockErr("bind", err)
	}
	for _, g := range l.cfg.MulticastGroups {
		mreq := unix.PacketMreq{Ifindex: int32(ifindex), Type: unix.PACKET_MR_MULTICAST, Alen: 6}
		copy(mreq.Address[:], g)
		if err := unix.SetsockoptPacketMreq(s.fd, unix.SOL_PACKET, unix.PACKET_ADD_MEMBERSHIP, &mreq); err != nil {
			return l.sockErr("setsockopt PACKET_ADD_MEMBERSHIP "+g.String(), err)
		}
	}
	// The socket stays a bare file descriptor, out of the netpoller; an
	// epoll instance of its own holds it while Recv sleeps (sleep).
	ep, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return l.sockErr("epoll_create1", err)
	}
	l.rxEp.fd = ep
	if err := unix.SetNonblock(ep, true); err != nil {
		return l.sockErr("fcntl O_NONBLOCK", err)
	}
	return l.pollable(&l.rxEp, "packet-rx-epoll:"+l.ifname)
}

// openTX opens the sending socket. It is a socket of its own, always
// TPACKET_V2, bound with protocol 0 so it receives nothing: a V3 socket's
// TX ring would also be V3, whose only gain (variable-size frames) we do
// not need, and one TX code path serves both receive layouts.
func (l *Link) openTX(ifindex int) error {
	s, g := &l.tx, l.cfg.tx
	if err := l.setVersion(s, unix.TPACKET_V2); err != nil {
		return err
	}
	if l.cfg.QdiscBypass {
		if err := unix.SetsockoptInt(s.fd, unix.SOL_PACKET, unix.PACKET_QDISC_BYPASS, 1); err != nil {
			return l.sockErr("setsockopt PACKET_QDISC_BYPASS", err)
		}
	}
	if l.cfg.TxMode == TxSendmmsg {
		l.mmsg = mmsg.NewSender(64)
		// SendNow sends on this socket too, with a batch sender of its
		// own, since it may run concurrently with Stage and Send.
		l.nowMmsg = mmsg.NewSender(16)
		if err := unix.Bind(s.fd, &unix.SockaddrLinklayer{Ifindex: ifindex}); err != nil {
			return l.sockErr("bind", err)
		}
		return l.pollable(s, "packet-tx:"+l.ifname)
	}
	err := unix.SetsockoptTpacketReq(s.fd, unix.SOL_PACKET, unix.PACKET_TX_RING, &unix.TpacketReq{
		Block_size: uint32(g.BlockSize),
		Block_nr:   uint32(g.BlockCount),
		Frame_size: uint32(g.FrameSize),
		Frame_nr:   uint32(g.FrameCount),
	})
	if err != nil {
		return l.sockErr("setsockopt PACKET_TX_RING", err)
	}
	if err := l.mmap(s, g); err != nil {
		return err
	}
	l.txSlot = slotOffsets(g)
	if err := unix.Bind(s.fd, &unix.SockaddrLinklayer{Ifindex: ifindex}); err != nil {
		return l.sockErr("bind", err)
	}
	if err := l.pollable(s, "packet-tx:"+l.ifname); err != nil {
		return err
	}
	return l.openNow(ifindex)
}

// openNow sets up SendNow's socket: like the TX socket in TxSendmmsg mode
// (protocol 0, so it receives nothing; bound to the interface), without a
// ring.
func (l *Link) openNow(ifindex int) error {
	s := &l.now
	fd := s.fd
	if l.cfg.QdiscBypass {
		if err := unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_QDISC_BYPASS, 1); err != nil {
			return l.sockErr("setsockopt PACKET_QDISC_BYPASS", err)
		}
	}
	if err := unix.Bind(fd, &unix.SockaddrLinklayer{Ifindex: ifindex}); err != nil {
		return l.sockErr("bind", err)
	}
	l.nowMmsg = mmsg.NewSender(16)
	return l.pollable(s, "packet-now:"+l.ifname)
}

// slotOffsets lists where each V2 frame slot starts: frames are packed into
// blocks and never span two (packet_mmap.rst, "Frame structure").
func slotOffsets(g Geometry) []int {
	per := g.FramesPerBlock()
	off := make([]int, 0, g.FrameCount)
	for b := range g.BlockCount {
		for f := range per {
			off = append(off, b*g.BlockSize+f*g.FrameSize)
		}
	}
	return off
}

// socketFilter accepts whole frames of one EtherType, and of one of the
// groups if there are any, and drops the rest before they take ring space.
// It is what selects the EtherType when the socket is bound to ETH_P_ALL
// (KeepOutgoing), and a second check otherwise. A frame too short to hold
// a group id fails the group check (a load past the end ends the program
// with 0).
func socketFilter(etherType uint16, groups []uint32) (*unix.SockFprog, error) {
	const (
		accept = math.MaxUint32 // the snap length: never cut a frame
		drop   = 0
	)
	prog := []bpf.Instruction{
		bpf.LoadAbsolute{Off: 12, Size: 2},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: uint32(etherType), SkipTrue: 1},
		bpf.RetConstant{Val: drop},
	}
	if len(groups) == 0 {
		prog = append(prog, bpf.RetConstant{Val: accept})
	} else {
		prog = append(prog, bpf.LoadAbsolute{Off: link.GroupOffset, Size: 4})
		for _, g := range groups {
			prog = append(prog,
				bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: g, SkipTrue: 1},
				bpf.RetConstant{Val: accept})
		}
		prog = append(prog, bpf.RetConstant{Val: drop})
	}
	raw, err := bpf.Assemble(prog)
	if err != nil {
		return nil, err
	}
	filter := make([]unix.SockFilter, len(raw))
	for i, ins := range raw {
		filter[i] = unix.SockFilter{Code: ins.Op, Jt: ins.Jt, Jf: ins.Jf, K: ins.K}
	}
	return &unix.SockFprog{Len: uint16(len(filter)), Filter: &filter[0]}, nil
}

// groupSet is groups sorted, without duplicates, in a new slice.
func groupSet(groups []uint32) []uint32 {
	s := slices.Clone(groups)
	slices.Sort(s)
	return slices.Compact(s)
}

// SetGroups implements link.GroupFilter: from now on the kernel passes
// only frames of these groups (every group if none), replacing the socket
// filter in one step. Frames of other groups already in the ring are
// dropped by Recv and counted in Stats.Filtered. It may run concurrently
// with Recv and Send.
func (l *Link) SetGroups(groups []uint32) error {
	if len(groups) > link.MaxGroups {
		return &net.OpError{Op: "set groups", Net: "packet", Addr: ifaceAddr(l.ifname),
			Err: fmt.Errorf("%d groups, more than link.MaxGroups (%d)", len(groups), link.MaxGroups)}
	}
	set := groupSet(groups)
	prog, err := socketFilter(l.cfg.EtherType, set)
	if err != nil {
		return fmt.Errorf("ring: %s: assembling the socket filter: %w", l.ifname, err)
	}
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.closed.Load() {
		return &net.OpError{Op: "set groups", Net: "packet", Addr: ifaceAddr(l.ifname), Err: net.ErrClosed}
	}
	// Recv checks frames against both sets while the kernel's filter
	// changes, so that it drops none the new filter passed.
	if old := *l.groups.Load(); len(old) > 0 && len(set) > 0 {
		both := groupSet(append(slices.Clone(old), set...))
		l.groups.Store(&both)
	} else {
		l.groups.Store(&[]uint32{})
	}
	if serr := unix.SetsockoptSockFprog(l.rx.fd, unix.SOL_SOCKET, unix.SO_ATTACH_FILTER, prog); serr != nil {
		return l.sockErr("setsockopt SO_ATTACH_FILTER", serr)
	}
	l.groups.Store(&set)
	return nil
}

// status is a ring status word: the kernel and we hand slots back and forth
// through it, so loads acquire and stores release (packet_mmap.rst,
// "TPACKET_V2 --> TPACKET_V3" and the smp_wmb/smp_rmb pairing in
// __packet_set_status); Go's atomics are at least that strong.
func status(ring []byte, off int) *uint32 {
	return (*uint32)(unsafe.Pointer(&ring[off]))
}

var nativeEndian = binary.NativeEndian

// Offsets of fields in struct tpacket2_hdr and tpacket3_hdr, and of
// sll_pkttype in the sockaddr_ll that follows the aligned header.
const (
	v2Len, v2Snaplen, v2Mac, v2Sec, v2Nsec         = 4, 8, 12, 16, 20
	v3Next, v3Sec, v3Nsec, v3Snaplen, v3Len, v3Mac = 0, 4, 8, 12, 16, 24
	sllPkttype                                     = 10
	// struct tpacket_block_desc: version, offset_to_priv, then
	// struct tpacket_hdr_v1.
	blkStatus, blkNumPkts, blkFirst = 8, 12, 16
)

// MTU is the interface MTU at Open.
func (l *Link) MTU() int { return l.mtu }

// HardwareAddr returns the interface's MAC address.
func (l *Link) HardwareAddr() net.HardwareAddr { return slices.Clone(l.mac) }

// Version is the receive ring layout in use.
func (l *Link) Version() Version { return l.cfg.Version }

// RXGeometry and TXGeometry describe the rings as requested from the
// kernel.
func (l *Link) RXGeometry() Geometry { return l.cfg.rx }
func (l *Link) TXGeometry() Geometry { return l.cfg.tx }

var errNoFrames = errors.New("ring: Recv needs a frames slice of length at least 1")

// errRefusedAhead: the kernel's transmit head is a frame it refused in an
// earlier kick (TP_STATUS_WRONG_FORMAT), not yet taken back (dropRefused):
// it sends nothing more until then.
var errRefusedAhead = errors.New("the kernel stopped at a frame it refused earlier (TP_STATUS_WRONG_FORMAT)")

// Recv implements link.Link. It first gives back to the kernel the slots
// (V2) or blocks (V3) of the frames the previous Recv returned, then
// returns the frames the ring holds, spinning (Config.RxSpin) and then
// sleeping in the netpoller if it holds none (sleep).
func (l *Link) Recv(deadline time.Time, frames []Frame) (int, error) {
	if len(frames) == 0 {
		return 0, errNoFrames
	}
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.closed.Load() {
		return 0, net.ErrClosed
	}
	l.release()
	var waitFrom time.Time // when Recv first found the ring empty
	for {
		n, bytes, filtered := l.fill(frames)
		if filtered > 0 {
			l.filtered.Add(filtered)
		}
		if n > 0 {
			l.framesReceived.Add(uint64(n))
			l.bytesReceived.Add(bytes)
			l.rxIdle = false
			if !waitFrom.IsZero() {
				l.spinPolicy.Waited(true, time.Since(waitFrom))
			}
			return n, nil
		}
		// Only discarded frames were read: hand them back before sleeping,
		// or a ring full of them would never drain.
		l.release()
		if l.woken.Swap(false) {
			l.deadline = wakeDeadline // Wake may have set it
			l.waitEnded(waitFrom, time.Now())
			return 0, l.expired
		}
		if l.cfg.RxSpin > 0 && waitFrom.IsZero() {
			waitFrom = time.Now()
		}
		if l.cfg.RxSpin > 0 && !l.rxIdle && l.spin(deadline, l.spinLength()) {
			continue
		}
		if !deadline.Equal(l.deadline) {
			if err := l.rxEp.file.SetReadDeadline(deadline); err != nil {
				return 0, l.recvErr(err)
			}
			l.deadline = deadline
		}
		// Wake sets woken before it looks at sleeping, Recv sleeping
		// before it looks at woken: either this sees the Wake, or the
		// Wake sets its past deadline after ours and ends the sleep.
		l.sleeping.Store(true)
		if l.woken.Swap(false) {
			l.sleeping.Store(false)
			l.deadline = wakeDeadline // Wake sets it, maybe
			l.waitEnded(waitFrom, time.Now())
			return 0, l.expired
		}
		err := l.sleep()
		l.sleeping.Store(false)
		if err != nil {
			err = l.recvErr(err)
			if err != l.expired {
				return 0, err
			}
			// Our deadline or a Wake's (maybe one that came after we read
			// the ring and set ours): that Wake is done, and the next Recv
			// sets its deadline again.
			l.woken.Store(false)
			l.deadline = wakeDeadline
			// A short wait that ended (a caller's near timer, a bundling
			// delay) says nothing about idleness; an event loop's idle
			// wait (until a heartbeat, in package reliable) does, and a
			// Wake's early return (before the deadline) does not. The
			// wait asked for counts, not the time it took: on a loaded
			// machine a 300 µs timer can fire milliseconds late, and a
			// busy stream is exactly where the spin must stay on.
			now := time.Now()
			l.rxIdle = l.cfg.RxSpin > 0 && deadline.Sub(waitFrom) >= idleSpins*l.cfg.RxSpin && !now.Before(deadline)
			l.waitEnded(waitFrom, now)
			return 0, err
		}
	}
}

// spinLength is how long the next spin may last: Config.RxSpin, or with
// Config.AdaptiveSpin what spinPolicy chooses.
func (l *Link) spinLength() time.Duration {
	if l.cfg.adaptSpin {
		return l.spinPolicy.Spin()
	}
	return l.cfg.RxSpin
}

// waitEnded tells spinPolicy of a wait that began at from (zero: none, or
// no spin configured) and ended at now without a frame.
func (l *Link) waitEnded(from, now time.Time) {
	if !from.IsZero() {
		l.spinPolicy.Waited(false, now.Sub(from))
	}
}

// sleep waits in the netpoller until the ring has a frame, the read
// deadline passes (a Wake sets one in the past) or Close.
//
// The receive socket is not in the Go runtime's netpoller: rxEp, an epoll
// instance, is. The socket is added to rxEp (EPOLLIN) only for the sleep,
// and removed after it, so a frame that lands while Recv spins or works
// wakes no thread: with the socket in the netpoller every frame made it
// readable and woke the runtime's epoll_wait thread, also while Recv spun
// and needed no wake-up, and the sender paid for that wake-up inside its
// sendto (docs/local-api-history.md, "Latency"). Removed, not merely disarmed
// (no events): an epoll instance that holds the socket, armed or not, has
// an entry on its wait queue, and for every frame the sender's sendto
// took that queue's lock and ran epoll's callback, with interrupts off,
// only to find it disarmed; without a sleeper the kernel skips both
// (sock_def_readable). Adding and removing cost two epoll_ctl(2) per
// sleep. Waiting stays the netpoller's, so the goroutine parks as before
// and its P runs other goroutines.
func (l *Link) sleep() error {
	err := l.rxEp.raw.Read(l.ready)
	if l.armed {
		l.armed = false
		if derr := epollCtl(l.rxEp.fd, unix.EPOLL_CTL_DEL, l.rx.fd, nil); derr != nil && err == nil {
			err = os.NewSyscallError("epoll_ctl", derr)
		}
	}
	return err
}

// rxArmedReady is sleep's RawConn.Read callback: whether the ring has a
// frame, once the socket is armed in rxEp. It runs after the netpoller's
// readiness was reset; arming (epoll_ctl, adding the socket) queues
// rxEp's readiness if the socket is readable then, and every frame after
// it wakes rxEp's watchers, the netpoller among them, so no frame that
// lands after the check is missed.
func (l *Link) rxArmedReady(uintptr) bool {
	if l.rxReady() {
		return true
	}
	if l.armed {
		return false
	}
	l.armed = true
	ev := &unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(l.rx.fd)}
	err := epollCtl(l.rxEp.fd, unix.EPOLL_CTL_ADD, l.rx.fd, ev)
	if err == unix.EEXIST {
		// A removal that failed (sleep reported it) left it there.
		err = epollCtl(l.rxEp.fd, unix.EPOLL_CTL_MOD, l.rx.fd, ev)
	}
	if err != nil {
		// Cannot happen for a valid socket and instance; spin rather
		// than sleep past frames.
		l.armed = false
		return true
	}
	return l.rxReady()
}

// epollCtl is epoll_ctl(2) by RawSyscall: it never blocks, and by
// Syscall (unix.EpollCtl) each of a sleep's two calls could wake the
// runtime's sysmon thread (see shortKick).
func epollCtl(epfd, op, fd int, ev *unix.EpollEvent) error {
	_, _, e := rawSyscall6(unix.SYS_EPOLL_CTL, uintptr(epfd), uintptr(op), uintptr(fd), uintptr(unsafe.Pointer(ev)), 0, 0)
	if e != 0 {
		return e
	}
	return nil
}

func (l *Link) recvErr(err error) error {
	switch {
	case l.closed.Load() || errors.Is(err, os.ErrClosed):
		return net.ErrClosed
	case errors.Is(err, os.ErrDeadlineExceeded):
		return l.expired
	}
	return &net.OpError{Op: "recv", Net: "packet", Addr: ifaceAddr(l.ifname), Err: err}
}

// Frame is link.Frame, for brevity.
type Frame = link.Frame

// release gives the slots or blocks [rxHeld, rxNext) back to the kernel,
// up to the first on loan (Lend): the kernel fills them in ring order, so
// those after it would be of no use to it before it anyway.
func (l *Link) release() {
	n := uint64(len(l.rxSlot))
	for ; l.rxHeld < l.rxNext && l.loans[l.rxHeld%n] == 0; l.rxHeld++ {
		off := l.rxSlot[l.rxHeld%n]
		if l.cfg.Version == V3 {
			off += blkStatus
		}
		atomic.StoreUint32(status(l.rx.ring, off), unix.TP_STATUS_KERNEL)
	}
	l.loanHeld.Store(l.rxNext - l.rxHeld)
}

// rxReady reports whether Recv has something to read: the next V2 slot or
// V3 block belongs to us.
func (l *Link) rxReady() bool {
	if l.blkOpen {
		return true
	}
	off := l.rxSlot[l.rxNext%uint64(len(l.rxSlot))]
	if l.cfg.Version == V3 {
		off += blkStatus
	}
	return atomic.LoadUint32(status(l.rx.ring, off))&unix.TP_STATUS_USER != 0
}

// Wake implements link.Waker: a Recv sleeping in the netpoller is woken
// by a read deadline in the past, one spinning sees the flag, and one not
// yet waiting takes the flag and returns at once; only a Recv about to
// sleep, or sleeping, costs Wake the deadline (see Recv). After Close it
// does nothing.
func (l *Link) Wake() {
	l.woken.Store(true)
	// The waker's own poll (a daemon's read of its client, after a Send
	// that left its frame to the loop) would otherwise give the CPU to
	// other processes before the loop has taken its turn.
	netyield.Hold()
	if !l.sleeping.Load() {
		return
	}
	// Safe beside Recv and Close: the file's deadline is the poller's,
	// and on a closed file SetReadDeadline only reports that.
	_ = l.rxEp.file.SetReadDeadline(wakeDeadline)
}

// wakeDeadline is the read deadline Wake sets: long past.
var wakeDeadline = time.Unix(1, 0)

// idleSpins: a Recv whose deadline was this many RxSpins or more after it
// found the ring empty, and that ended at it with nothing read, marks the
// link idle (rxIdle).
const idleSpins = 2

// giveCPU is netyield.GiveCPU (a test makes it find the CPU given).
var giveCPU = netyield.GiveCPU

// spinPoller is how often a spin's yield lets the network poller run
// (netyield.Spin); between, the yield is runtime.Gosched, which runs what
// else of the process is runnable (a Wake's sender, the fan-out), then
// the sched_yield. A goroutine the poller holds (a daemon's client whose
// doorbell came) runs within spinPoller of its wake-up.
const spinPoller = 20 * time.Microsecond

// syscall6 and rawSyscall6 make a kick's sendto and a sleep's epoll_ctl
// (a test counts which).
var (
	syscall6    = unix.Syscall6
	rawSyscall6 = unix.RawSyscall6
)

// spin looks at the next slot or block until it is ours (true), for at
// most d of yielding (Config.RxSpin, or spinPolicy's choice) and never
// past deadline (false: Recv then sleeps in the netpoller, which also
// reports the deadline or Close). It counts itself in Stats: a hit, a
// miss, or a skip (d is 0); not while the back-off below holds.
// Between looks it lets this process's other goroutines run
// (runtime.Gosched, and once per spinPoller link/netyield.Yield, which
// with one P also looks at the network poller, so that a goroutine woken
// by a socket runs while we spin; not counted against RxSpin: a program
// that computes meanwhile is not waiting) and gives the CPU to other
// processes (sched_yield), so that processes sharing a core take turns instead of
// burning it. It only reads the status word fill reads next, so frames are
// taken in ring order as without it.
//
// A sched_yield that kept us off the CPU for more than a millisecond
// (netyield.Contended, or RxSpin if longer) means other work holds the CPU for
// whole scheduler slices: a process that yields then waits for the slice
// to end, where one asleep in poll(2) would be woken (and usually run at
// once) when its frame lands. Spinning then costs latency instead of
// saving it, so it stops for netyield.PauseMin, doubling up to
// netyield.PauseMax while the contention lasts (a spin without it halves the pause). Shorter
// yields count against RxSpin: with more processes than cores a yield often
// hands the core to another process's turn, which is worth waiting for
// rather than sleeping; backing off at RxSpin lost most of the spin's gain
// (docs/benchmarks-history.md, "Polling the ring before sleeping").
func (l *Link) spin(deadline time.Time, d time.Duration) bool {
	if d <= 0 {
		l.spinSkips.Add(1)
		return false
	}
	if l.spinPace.Paused(time.Now()) {
		return false
	}
	if l.spinRun(deadline, d) {
		l.spinHits.Add(1)
		return true
	}
	l.spinMisses.Add(1)
	return false
}

// spinRun is spin's loop.
func (l *Link) spinRun(deadline time.Time, d time.Duration) bool {
	pace := &l.spinPace
	var spent time.Duration
	for !l.closed.Load() && !l.woken.Load() {
		if l.rxReady() {
			pace.Calm()
			l.spinFound++
			return true
		}
		ty := pace.Now()
		mark := pace.Turn(ty)
		if l.rxReady() {
			pace.Calm()
			l.spinFound++
			return true
		}
		// A Wake during the Yield (a Send that left its frame to the
		// loop) ends the spin now: giving the CPU away first would make
		// the loop's turn, and the frame, wait for the other processes.
		if l.woken.Load() || l.closed.Load() {
			return false
		}
		t0 := pace.Now()
		if spent >= d || (!deadline.IsZero() && !t0.Before(deadline)) {
			pace.Calm()
			return false
		}
		// sched_yield, by RawSyscall, not Syscall: it never blocks, and
		// Syscall's entersyscall lets sysmon take this thread's P when the
		// other process on the core keeps the CPU past 20 µs, start another
		// thread (which then sleeps in epoll and is woken by every frame)
		// and move the loop between threads (docs/benchmarks-history.md,
		// "Where a 4-process jacobi iteration goes"). Not when another
		// poll of this process at one P gave the CPU away during the
		// Yield: that time away was then ours too.
		if !giveCPU(mark) {
			spent += t0.Sub(ty)
			continue
		}
		away := pace.Now().Sub(t0)
		if !pace.Contended(t0, away, l.cfg.RxSpin) {
			spent += away
			continue
		}
		return l.rxReady()
	}
	return false
}

func (l *Link) fill(frames []Frame) (n int, bytes, filtered uint64) {
	groups := *l.groups.Load()
	if l.cfg.Version == V3 {
		return l.fillV3(frames, groups)
	}
	return l.fillV2(frames, groups)
}

func (l *Link) fillV2(frames []Frame, groups []uint32) (n int, bytes, filtered uint64) {
	ring, slots := l.rx.ring, uint64(len(l.rxSlot))
	frameSize := l.cfg.rx.FrameSize
	// Never read further than one lap: the slot after that is one we
	// handed out and still hold.
	for n < len(frames) && l.rxNext-l.rxHeld < slots {
		off := l.rxSlot[l.rxNext%slots]
		if atomic.LoadUint32(status(ring, off))&unix.TP_STATUS_USER == 0 {
			break
		}
		l.rxNext++
		h := ring[off : off+frameSize]
		mac := int(nativeEndian.Uint16(h[v2Mac:]))
		snap := int(nativeEndian.Uint32(h[v2Snaplen:]))
		length := int(nativeEndian.Uint32(h[v2Len:]))
		pkttype := h[tpacketAlign(sizeofTpacket2Hdr)+sllPkttype]
		if !l.accept(h, mac, snap, length, pkttype, groups) {
			filtered++
			continue
		}
		frames[n] = Frame{
			Data:     h[mac : mac+snap : frameSize], // the slot's rest is lent too (link.Frame)
			Time:     time.Unix(int64(nativeEndian.Uint32(h[v2Sec:])), int64(nativeEndian.Uint32(h[v2Nsec:]))),
			Outgoing: pkttype == unix.PACKET_OUTGOING,
		}
		n++
		bytes += uint64(snap)
	}
	return n, bytes, filtered
}

// accept checks one received frame in place, as the socket filter did
// (frames queued before a SetGroups met the filter before it). Frames
// that fail are counted as filtered: cut short (snap < length: the slot
// was too small), not our EtherType or groups, our own copies when not
// kept, or malformed offsets.
func (l *Link) accept(h []byte, mac, snap, length int, pkttype byte, groups []uint32) bool {
	if mac < 0 || snap < link.EthernetHeaderLen || mac+snap > len(h) || snap != length {
		return false
	}
	if nativeEndian.Uint16(h[mac+12:]) != htons(l.cfg.EtherType) {
		return false
	}
	if len(groups) > 0 {
		g, ok := link.FrameGroup(h[mac : mac+snap])
		if _, found := slices.BinarySearch(groups, g); !ok || !found {
			return false
		}
	}
	return pkttype != unix.PACKET_OUTGOING || l.cfg.KeepOutgoing
}

// fillV3 walks the frames of retired blocks (packet_mmap.rst, "TPACKET_V3
// example": block_status, num_pkts, offset_to_first_pkt, tp_next_offset).
// A block is given back only when all its frames were read and a later
// Recv starts; a block partly read when frames is full stays open.
func (l *Link) fillV3(frames []Frame, groups []uint32) (n int, bytes, filtered uint64) {
	ring, blocks := l.rx.ring, uint64(len(l.rxSlot))
	blockSize := l.cfg.rx.BlockSize
	hdrLen := tpacketAlign(sizeofTpacket3Hdr)
	for n < len(frames) {
		if !l.blkOpen {
			if l.rxNext-l.rxHeld >= blocks {
				break
			}
			boff := l.rxSlot[l.rxNext%blocks]
			if atomic.LoadUint32(status(ring, boff+blkStatus))&unix.TP_STATUS_USER == 0 {
				break
			}
			l.blkOpen = true
			l.blkLeft = nativeEndian.Uint32(ring[boff+blkNumPkts:])
			l.blkOff = boff + int(nativeEndian.Uint32(ring[boff+blkFirst:]))
		}
		if l.blkLeft == 0 {
			l.blkOpen = false
			l.rxNext++
			continue
		}
		boff := l.rxSlot[l.rxNext%blocks]
		end := boff + blockSize
		off := l.blkOff
		if off < boff+blockHeaderLen || off+hdrLen+sllPkttype >= end {
			// Corrupt offsets: skip the rest of the block rather than read
			// outside it.
			filtered += uint64(l.blkLeft)
			l.blkLeft = 0
			continue
		}
		h := ring[off:end]
		next := int(nativeEndian.Uint32(h[v3Next:]))
		mac := int(nativeEndian.Uint16(h[v3Mac:]))
		snap := int(nativeEndian.Uint32(h[v3Snaplen:]))
		length := int(nativeEndian.Uint32(h[v3Len:]))
		pkttype := h[hdrLen+sllPkttype]
		l.blkLeft--
		l.blkOff = off + next
		if l.blkLeft > 0 && next <= 0 {
			filtered += uint64(l.blkLeft)
			l.blkLeft = 0
		}
		if !l.accept(h, mac, snap, length, pkttype, groups) {
			filtered++
			continue
		}
		frames[n] = Frame{
			Data:     h[mac : mac+snap : v3Lent(mac+snap, next, hdrLen, len(h), l.blkLeft == 0, n+1 < len(frames))],
			Time:     time.Unix(int64(nativeEndian.Uint32(h[v3Sec:])), int64(nativeEndian.Uint32(h[v3Nsec:]))),
			Outgoing: pkttype == unix.PACKET_OUTGOING,
		}
		n++
		bytes += uint64(snap)
	}
	return n, bytes, filtered
}

// v3Lent is the capacity a TPACKET_V3 frame is lent with (link.Frame.Data),
// as an index into its header's slice h (len hLen), the frame ending at
// frameEnd: behind a block's last frame, the rest of the block; behind
// another, the padding up to the next frame's header, and that header
// (hdrLen bytes) too when this Recv reads it before it returns (another
// frame follows in the batch: fillV3 reads each header as it fills the
// frame). A caller that writes there, even for good, spoils nothing the
// ring still reads; link/auth puts a GCM tag behind the body there.
func v3Lent(frameEnd, next, hdrLen, hLen int, blockLast, batchGoesOn bool) int {
	end := frameEnd
	switch {
	case blockLast:
		end = hLen
	case next > 0 && batchGoesOn:
		end = next + hdrLen
	case next > 0:
		end = next
	}
	return max(frameEnd, min(end, hLen))
}

// Send implements link.Link. Each frame is copied into the next free TX
// slot (TP_STATUS_AVAILABLE → data, tp_len → TP_STATUS_SEND_REQUEST); one
// sendto(2) without data then asks the kernel to transmit all filled slots
// (packet_mmap.rst, "Transmission process"). It returns once the kernel has
// taken every frame, so the caller may reuse them; a full ring, ENOBUFS or
// EAGAIN are waited out through the netpoller (POLLOUT) and counted in
// Stats.SendRetries.
func (l *Link) Send(frames [][]byte) (int, error) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.closed.Load() {
		return 0, net.ErrClosed
	}
	if l.mmsg != nil {
		return l.sendmmsg(frames)
	}
	l.txMu.Lock()
	defer l.txMu.Unlock()
	first := l.txNext
	i, bytes, err := l.fillTX(frames)
	if err != nil {
		return i, err
	}
	if i < len(frames) {
		n, err := l.flush(first, i, bytes)
		if err != nil {
			return n, err
		}
		return i, l.frameSizeErr(i, len(frames[i]), link.EthernetHeaderLen+l.mtu)
	}
	return l.flush(first, len(frames), bytes)
}

// fillTX copies frames into the next TX slots and marks them
// TP_STATUS_SEND_REQUEST, waiting for a slot whenever the ring is full.
// It stops before a frame of the wrong size (i < len(frames), no error),
// on an error met while waiting (then as sendErr says), or when a wait
// took back frames it had filled (then as ownRefused says, which counts
// in Stats the frames that went out). l.txMu is held.
func (l *Link) fillTX(frames [][]byte) (i int, bytes uint64, err error) {
	ring, slots := l.tx.ring, uint64(len(l.txSlot))
	maxLen := link.EthernetHeaderLen + l.mtu
	first := l.txNext
	for i, f := range frames {
		if len(f) < link.EthernetHeaderLen || len(f) > maxLen {
			return i, bytes, nil
		}
		off := l.txSlot[l.txNext%slots]
		if atomic.LoadUint32(status(ring, off)) != unix.TP_STATUS_AVAILABLE {
			// The ring is full: let the kernel drain it and wait for this
			// slot to come back.
			l.sendRetries.Add(1)
			if err := l.wait(l.txNext, true); err != nil {
				n, err := l.sendErr(first, i, bytes, err)
				return n, bytes, err
			}
			// wait may have taken refused frames back (dropRefused),
			// moving txNext back: those of earlier Stages only when this
			// call has filled nothing yet (then fill the slot txNext
			// names now); otherwise this call's own frames too.
			if l.txRefused != nil && i > 0 {
				n, err := l.ownRefused(first, i, bytes, l.txRefused)
				return n, bytes, err
			}
			off = l.txSlot[l.txNext%slots]
		}
		copy(ring[off+txDataOffset:], f)
		nativeEndian.PutUint32(ring[off+v2Len:], uint32(len(f)))
		atomic.StoreUint32(status(ring, off), unix.TP_STATUS_SEND_REQUEST)
		l.txNext++
		l.txPub.Store(l.txNext)
		bytes += uint64(len(f))
	}
	return len(frames), bytes, nil
}

// Stage is the first half of Send: it copies frames into the TX ring and
// marks them for sending, waiting only when the ring is full, but does not
// ask the kernel to transmit them; Kick does, and may run on another
// goroutine meanwhile, so that one goroutine fills the ring while another
// spends the kernel's transmit time (on a veth bridge, the receivers'
// copies are made inside that sendto). Frames may be reused once Stage
// returns. Frames staged are counted in Stats as sent (and taken off again
// if the kernel refuses one and Kick drops it and those after it). Errors
// are those of Send; with TxSendmmsg, Stage is Send and Kick does nothing.
func (l *Link) Stage(frames [][]byte) (int, error) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.closed.Load() {
		return 0, net.ErrClosed
	}
	if l.mmsg != nil {
		return l.sendmmsg(frames)
	}
	l.txMu.Lock()
	defer l.txMu.Unlock()
	i, bytes, err := l.fillTX(frames)
	if err != nil {
		return i, err
	}
	l.framesSent.Add(uint64(i))
	l.bytesSent.Add(bytes)
	if i < len(frames) {
		return i, l.frameSizeErr(i, len(frames[i]), link.EthernetHeaderLen+l.mtu)
	}
	return i, nil
}

// Kick asks the kernel to transmit every frame staged so far and waits
// until it has taken them (the sendto(2) of Send); frames staged while it
// runs are transmitted too. It may run concurrently with Stage, Send and
// other Kicks: if another goroutine is kicking already, Kick returns at
// once and that one transmits these frames too (it looks for frames
// staged meanwhile after it has finished), so a goroutine that stages
// and kicks never waits for another's sendto.
func (l *Link) Kick() error {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.closed.Load() {
		return net.ErrClosed
	}
	if l.mmsg != nil {
		return nil
	}
	if err := l.kickPending(); err != nil {
		if l.closed.Load() || errors.Is(err, os.ErrClosed) {
			return net.ErrClosed
		}
		l.txMu.Lock()
		refused := l.dropRefused()
		l.txMu.Unlock()
		if refused != nil {
			err = fmt.Errorf("%w: %w", refused, err)
		}
		return &net.OpError{Op: "send", Net: "packet", Addr: ifaceAddr(l.ifname), Err: err}
	}
	return nil
}

// SendNow transmits frames at once, each with its own copy, on a socket of
// its own (sendmmsg(2), as TxSendmmsg sends): they do not wait behind the
// frames staged in the TX ring and not yet taken by the kernel, and may
// overtake them. It is for frames whose order relative to the queued ones
// does not matter and whose delay does: reliable sends retransmissions
// with it, which on a busy sender otherwise waited behind a window of new
// frames (docs/protocols.md). Back-pressure is waited out as in Send; the
// frames are counted in Stats like any sent. With TxSendmmsg there is no
// queue to skip and SendNow sends as Send does, on the same socket. It may
// run concurrently with Stage, Send and Kick; like Send, one goroutine at
// a time.
func (l *Link) SendNow(frames [][]byte) (int, error) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.closed.Load() {
		return 0, net.ErrClosed
	}
	rc := l.now.raw
	if l.mmsg != nil {
		rc = l.tx.raw
	}
	l.nowMu.Lock()
	defer l.nowMu.Unlock()
	return l.sendmmsgOn(rc, l.nowMmsg, frames)
}

// dropRefused makes the ring usable again after the kernel refused a
// staged frame (takeBackRefused, as sendErr does for Send). It returns what
// was refused and dropped (nil if no slot was refused), for Kick's error.
// l.txMu is held.
func (l *Link) dropRefused() error {
	next, slots := l.txNext, uint64(len(l.txSlot))
	seq, size, dropped, ok := l.takeBackRefused(next - min(next, slots))
	if !ok {
		return nil
	}
	// Stage counted them as sent. (From wait, they may be the caller's own
	// frames, not counted yet: fillTX's ownRefused counts them back.)
	l.framesSent.Add(-(next - seq))
	l.bytesSent.Add(-dropped)
	return fmt.Errorf("kernel refused the staged frame in TX slot %d (%d bytes, TP_STATUS_WRONG_FORMAT; the link allows %d for its MTU of %d, the device now less?); it and the %d frames staged after it were dropped unsent",
		seq%slots, size, link.EthernetHeaderLen+l.mtu, l.mtu, next-seq-1)
}

// takeBackRefused looks for the first slot in [from, txNext) the kernel
// refused: it left that slot TP_STATUS_WRONG_FORMAT and stopped there
// (tpacket_snd without PACKET_LOSS). That slot and the ones after it are
// taken back, unsent, so that our next slot is again the kernel's head.
// It returns the refused slot's sequence number, the frame's length and
// the bytes of all the frames taken back (ok false: no slot was refused).
// l.txMu is held.
func (l *Link) takeBackRefused(from uint64) (seq uint64, size uint32, dropped uint64, ok bool) {
	ring, slots := l.tx.ring, uint64(len(l.txSlot))
	for seq = from; seq < l.txNext; seq++ {
		off := l.txSlot[seq%slots]
		if atomic.LoadUint32(status(ring, off))&unix.TP_STATUS_WRONG_FORMAT == 0 {
			continue
		}
		size = nativeEndian.Uint32(ring[off+v2Len:])
		for s := seq; s < l.txNext; s++ {
			off := l.txSlot[s%slots]
			dropped += uint64(nativeEndian.Uint32(ring[off+v2Len:]))
			atomic.StoreUint32(status(ring, off), unix.TP_STATUS_AVAILABLE)
		}
		l.txNext = seq
		l.txPub.Store(seq)
		return seq, size, dropped, true
	}
	return 0, 0, 0, false
}

// kickPending kicks until no published frame waits for the kernel, unless
// another goroutine holds l.kickMu: every holder runs kickPending after
// unlocking, which happens after the frames of whoever found it locked
// were published, so they are never left waiting.
func (l *Link) kickPending() error {
	for l.txPending() {
		if !l.kickMu.TryLock() {
			return nil
		}
		err := l.waitLocked(l.txPub.Load()-1, false)
		l.kickMu.Unlock()
		if err != nil {
			return err
		}
	}
	return nil
}

// txPending reports whether the newest staged frame still waits for the
// kernel.
func (l *Link) txPending() bool {
	last := l.txPub.Load() - 1
	return atomic.LoadUint32(status(l.tx.ring, l.txSlot[last%uint64(len(l.txSlot))])) == unix.TP_STATUS_SEND_REQUEST
}

// sendmmsg is Send for TxSendmmsg: one sendmmsg(2) per 64 frames, the
// same size checks and the same back-pressure rules as the ring path.
func (l *Link) sendmmsg(frames [][]byte) (int, error) {
	return l.sendmmsgOn(l.tx.raw, l.mmsg, frames)
}

// sendmmsgOn is sendmmsg on the socket rc with the batch sender m.
func (l *Link) sendmmsgOn(rc syscall.RawConn, m *mmsg.Sender, frames [][]byte) (int, error) {
	maxLen := link.EthernetHeaderLen + l.mtu
	sent := 0
	for sent < len(frames) {
		batch := frames[sent:min(len(frames), sent+m.Cap())]
		for i, f := range batch {
			if len(f) < link.EthernetHeaderLen || len(f) > maxLen {
				if i > 0 {
					n, err := l.sendmmsgOn(rc, m, batch[:i])
					if sent += n; err != nil {
						return sent, err
					}
				}
				return sent, l.frameSizeErr(sent, len(f), maxLen)
			}
		}
		r := m.Send(rc, batch)
		sent += r.Sent
		l.framesSent.Add(uint64(r.Sent))
		l.bytesSent.Add(r.Bytes)
		l.sendRetries.Add(r.Retries)
		switch {
		case r.PollErr != nil:
			if l.closed.Load() || errors.Is(r.PollErr, os.ErrClosed) {
				return sent, net.ErrClosed
			}
			return sent, &net.OpError{Op: "send", Net: "packet", Addr: ifaceAddr(l.ifname), Err: r.PollErr}
		case r.SysErr != nil:
			return sent, &net.OpError{Op: "sendmmsg", Net: "packet", Addr: ifaceAddr(l.ifname), Err: r.SysErr}
		}
	}
	return sent, nil
}

// flush waits until the kernel has taken the frames [first, txNext), the
// n frames of this Send; it returns how many frames went out.
func (l *Link) flush(first uint64, n int, bytes uint64) (int, error) {
	if l.txNext == first {
		return 0, nil
	}
	if err := l.wait(l.txNext-1, false); err != nil {
		return l.sendErr(first, n, bytes, err)
	}
	l.framesSent.Add(uint64(n))
	l.bytesSent.Add(bytes)
	return n, nil
}

// wait kicks the kernel and waits until slot seq is free (free) or taken
// by the kernel (!free); l.txMu is held. If the kernel refused a staged
// frame meanwhile, it and the frames after it are taken back
// (dropRefused), txNext moves back to it and l.txRefused says so.
func (l *Link) wait(seq uint64, free bool) error {
	l.txRefused = nil
	l.kickMu.Lock()
	err := l.waitLocked(seq, free)
	l.kickMu.Unlock()
	if waitHook != nil {
		waitHook(l)
	}
	if err == nil && l.kickPending() != nil {
		// Frames staged before, left to us (see kickPending), were
		// refused: they are dropped (rbcast repairs them as lost; a
		// Stager's Kick has returned already). If this caller filled
		// slots before waiting, they are among them (fillTX).
		l.txRefused = l.dropRefused()
	}
	return err
}

// waitHook, when set (tests), runs in wait between the awaited slot's
// wait and the kick of what is still pending.
var waitHook func(*Link)

// ownRefused is the result of a Send or Stage when dropRefused took back
// frames this call filled (n frames of bytes bytes, from slot first on):
// the kernel refused one of them or one staged before them (the device's
// MTU shrank under the link); refused is what dropRefused said. The
// frames before txNext went out; the rest were dropped unsent.
// dropRefused took all of them off Stats, these too, which the caller had
// not counted yet: they are counted here, those that went out as sent.
func (l *Link) ownRefused(first uint64, n int, bytes uint64, refused error) (int, error) {
	kept := 0
	if l.txNext > first {
		kept = int(l.txNext - first)
	}
	l.framesSent.Add(uint64(n))
	l.bytesSent.Add(bytes)
	err := fmt.Errorf("frames %d to %d of the batch were dropped unsent: %w", kept, n-1, refused)
	if n == 0 {
		err = fmt.Errorf("no frame of the batch was sent: %w", refused)
	}
	return kept, &net.OpError{Op: "send", Net: "packet", Addr: ifaceAddr(l.ifname), Err: err}
}

// waitLocked is wait with l.kickMu held.
func (l *Link) waitLocked(seq uint64, free bool) error {
	l.txTarget, l.txFree, l.txErrno, l.txStuck = seq, free, 0, false
	err := l.tx.raw.Write(l.progress)
	if err == nil && l.txErrno != 0 {
		err = l.txErrno
	}
	if err == nil && l.txStuck {
		err = errRefusedAhead
	}
	if err == nil && l.closed.Load() {
		err = net.ErrClosed
	}
	return err
}

// txProgress runs inside RawConn.Write. If the newest filled slot still
// waits for the kernel it kicks the kernel with sendto(fd, NULL, 0), then
// reports whether the awaited slot has reached the wanted state. Returning
// false waits for POLLOUT: the kernel signals it as transmitted frames are
// freed (sock_wfree) and their slots turn TP_STATUS_AVAILABLE. l.kickMu is
// held.
func (l *Link) txProgress(fd uintptr) bool {
	ring, slots := l.tx.ring, uint64(len(l.txSlot))
	newest := func() *uint32 { return status(ring, l.txSlot[(l.txPub.Load()-1)%slots]) }
	for last := newest(); atomic.LoadUint32(last) == unix.TP_STATUS_SEND_REQUEST && !l.closed.Load(); last = newest() {
		sendto := syscall6
		if l.cfg.RawKicks || l.shortKick() {
			sendto = rawSyscall6
		}
		sent, _, e := sendto(unix.SYS_SENDTO, fd, 0, 0, unix.MSG_DONTWAIT, 0, 0)
		if e == 0 {
			l.txBackoff = 0
			if sent == 0 && atomic.LoadUint32(last) == unix.TP_STATUS_SEND_REQUEST {
				// Nothing sent, no error, though a frame waits: the
				// kernel's head is a slot it refused (WRONG_FORMAT) in
				// an earlier kick, whose caller has not taken the ring
				// back yet (dropRefused). No POLLOUT would ever come.
				l.txStuck = true
				return true
			}
			break
		}
		if e == unix.EINTR {
			continue
		}
		if e == unix.EAGAIN {
			// The socket's send buffer is full; POLLOUT comes when sent
			// frames are freed.
			l.sendRetries.Add(1)
			break
		}
		if e != unix.ENOBUFS {
			l.txErrno = e
			return true
		}
		// The queueing discipline or driver refused the frame at the
		// kernel's head; tpacket_snd put it back as SEND_REQUEST, so
		// nothing is lost, but nothing will signal when there is room
		// again either: back off briefly and kick again.
		l.sendRetries.Add(1)
		l.txBackoff = min(max(2*l.txBackoff, 10*time.Microsecond), time.Millisecond)
		time.Sleep(l.txBackoff)
	}
	st := atomic.LoadUint32(status(ring, l.txSlot[l.txTarget%slots]))
	if l.txFree {
		return st == unix.TP_STATUS_AVAILABLE || l.closed.Load()
	}
	return st != unix.TP_STATUS_SEND_REQUEST || l.closed.Load()
}

// rawKickMax is the most frames a kick's sendto(2) sends by a raw system
// call (shortKick).
const rawKickMax = 8

// shortKick reports whether at most rawKickMax frames wait for the
// kernel (l.kickMu is held). Their sendto is made by RawSyscall: with
// MSG_DONTWAIT it never blocks, and a few frames take microseconds. By
// Syscall, its entersyscall woke the runtime's sysmon thread whenever it
// slept (a futex wake-up: every kick of a process that had been waiting
// for frames), and sysmon, finding the call still in the kernel 20 µs
// later (the receivers' wake-ups are made inside it, and a receiver woken
// on our CPU can preempt us there), took the P and started another thread
// for it; with one P per rank each such kick cost a thread wake-up or two
// and the next hand-over back (docs/dsm-history.md, "Sysmon's wake-ups"). A larger
// kick (a stream's batch, up to a ring of frames) keeps Syscall, so that
// the process's other goroutines get the P meanwhile.
func (l *Link) shortKick() bool {
	ring, slots := l.tx.ring, uint64(len(l.txSlot))
	pub := l.txPub.Load()
	for waiting := uint64(0); waiting < min(pub, slots); waiting++ {
		if atomic.LoadUint32(status(ring, l.txSlot[(pub-1-waiting)%slots])) != unix.TP_STATUS_SEND_REQUEST {
			break
		}
		if waiting == rawKickMax {
			return false
		}
	}
	return true
}

// sendErr turns an error met while frames [first, txNext) were in the
// ring into Send's result (l.txMu is held). If the kernel refused one of
// them, the slots from it on are taken back (takeBackRefused) and
// reported unsent; if it refused one staged before them, whose Kick has
// not taken the ring back yet, the ring is taken back from there
// (dropRefused), these frames with it (ownRefused).
func (l *Link) sendErr(first uint64, n int, bytes uint64, err error) (int, error) {
	ring, slots := l.tx.ring, uint64(len(l.txSlot))
	if l.closed.Load() || errors.Is(err, os.ErrClosed) {
		// Count the frames the kernel took before Close stopped us.
		seq := first
		for seq < l.txNext && atomic.LoadUint32(status(ring, l.txSlot[seq%slots])) != unix.TP_STATUS_SEND_REQUEST {
			seq++
		}
		return int(seq - first), net.ErrClosed
	}
	if seq, size, dropped, ok := l.takeBackRefused(first); ok {
		sent := int(seq - first)
		l.framesSent.Add(uint64(sent))
		l.bytesSent.Add(bytes - dropped)
		return sent, &net.OpError{Op: "send", Net: "packet", Addr: ifaceAddr(l.ifname),
			Err: fmt.Errorf("kernel refused frame %d of the batch (%d bytes, TP_STATUS_WRONG_FORMAT): %w", sent, size, err)}
	}
	if refused := l.dropRefused(); refused != nil {
		return l.ownRefused(first, n, bytes, fmt.Errorf("%w: %w", refused, err))
	}
	return 0, &net.OpError{Op: "send", Net: "packet", Addr: ifaceAddr(l.ifname), Err: err}
}

func (l *Link) frameSizeErr(i, size, maxLen int) error {
	if size > maxLen {
		return &net.OpError{Op: "send", Net: "packet", Addr: ifaceAddr(l.ifname),
			Err: fmt.Errorf("frame %d is %d bytes, more than the %d an MTU of %d allows: %w", i, size, maxLen, l.mtu, link.ErrFrameTooLarge)}
	}
	return &net.OpError{Op: "send", Net: "packet", Addr: ifaceAddr(l.ifname),
		Err: fmt.Errorf("frame %d is %d bytes, shorter than an Ethernet header (%d)", i, size, link.EthernetHeaderLen)}
}

// Stats implements link.Link. The kernel counters come from
// PACKET_STATISTICS, which resets them on every read, so they are
// accumulated here.
func (l *Link) Stats() (link.Stats, error) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	var err error
	if !l.closed.Load() {
		err = l.readKernelStats()
	}
	l.statsMu.Lock()
	s := link.Stats{
		KernelPackets: l.kernel.packets,
		KernelDrops:   l.kernel.drops,
		KernelFreezes: l.kernel.freezes,
	}
	l.statsMu.Unlock()
	s.FramesSent = l.framesSent.Load()
	s.FramesReceived = l.framesReceived.Load()
	s.BytesSent = l.bytesSent.Load()
	s.BytesReceived = l.bytesReceived.Load()
	s.SendRetries = l.sendRetries.Load()
	s.Filtered = l.filtered.Load()
	s.Lent, s.LoansCalled, s.LoanHeld = l.lent.Load(), l.loansCalled.Load(), l.loanHeld.Load()
	s.SpinHits, s.SpinMisses, s.SpinSkips = l.spinHits.Load(), l.spinMisses.Load(), l.spinSkips.Load()
	return s, err
}

func (l *Link) readKernelStats() error {
	l.statsMu.Lock()
	defer l.statsMu.Unlock()
	fd := l.rx.fd
	err := func() error {
		if l.cfg.Version == V3 {
			st, err := unix.GetsockoptTpacketStatsV3(fd, unix.SOL_PACKET, unix.PACKET_STATISTICS)
			if err != nil {
				return err
			}
			// tp_packets counts frames dropped too (packet_getsockopt adds
			// tp_drops to it).
			l.kernel.packets += uint64(st.Packets)
			l.kernel.drops += uint64(st.Drops)
			l.kernel.freezes += uint64(st.Freeze_q_cnt)
			return nil
		}
		st, err := unix.GetsockoptTpacketStats(fd, unix.SOL_PACKET, unix.PACKET_STATISTICS)
		if err != nil {
			return err
		}
		l.kernel.packets += uint64(st.Packets)
		l.kernel.drops += uint64(st.Drops)
		return nil
	}()
	if err != nil {
		return &net.OpError{Op: "getsockopt PACKET_STATISTICS", Net: "packet", Addr: ifaceAddr(l.ifname), Err: err}
	}
	return nil
}

// Close implements link.Link: it wakes a blocked Recv or Send (they return
// net.ErrClosed), waits for them to leave, then unmaps the rings. Frames
// returned by the last Recv become invalid. Closing twice returns nil.
func (l *Link) Close() error {
	if l.closed.Swap(true) {
		return nil
	}
	// Keep the last kernel counters for Stats after Close.
	kerr := l.readKernelStats()
	// A Recv, Send or Kick waiting in the netpoller wakes.
	err := errors.Join(l.rxEp.file.Close(), l.tx.file.Close())
	if l.now.file != nil {
		// A SendNow waiting on it is woken with ErrClosed, as a Kick is
		// by the TX socket's Close.
		err = errors.Join(err, l.now.file.Close())
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	err = errors.Join(err, l.rx.close(), l.rx.unmap(), l.tx.unmap())
	if err != nil {
		return &net.OpError{Op: "close", Net: "packet", Addr: ifaceAddr(l.ifname), Err: errors.Join(err, kerr)}
	}
	return nil
}

type ifaceAddr string

func (a ifaceAddr) Network() string { return "packet" }
func (a ifaceAddr) String() string  { return string(a) }
