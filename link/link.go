// Package link moves batches of raw Ethernet frames between rbcast and a
// network segment. It knows nothing of the protocol above it: a Link carries
// complete Ethernet II frames (header included) and reports the limits and
// counters a protocol runtime needs to respect.
//
// Implementations:
//   - link/afpacket: a plain AF_PACKET socket on github.com/mdlayher/packet.
//   - link/ring: AF_PACKET with mmap'ed PACKET_RX_RING (TPACKET_V2 or V3) and
//     PACKET_TX_RING.
//   - link/mux: one link's frames demultiplexed by group into a link per
//     group, for a process that runs several groups.
//   - testnet: a simulated segment on virtual time; testnet/rtnet runs it
//     in real time.
//
// Decorators (capture.Link, the daemon's monitor) wrap a Link and are Links
// themselves, so the protocol never knows which one it runs on.
//
// # Capabilities
//
// Beyond Link, a link may offer six optional capabilities, each an
// interface declared here:
//
//   - Stager: Send in two halves, Stage (fill the transmit queue) and Kick
//     (have the kernel transmit it), so that one goroutine fills the queue
//     while another spends the kernel's transmit time (link/ring).
//   - NowSender: SendNow, a send that skips the frames staged and not yet
//     transmitted (link/ring; reliable sends retransmissions with it).
//   - Waker: Wake, which ends a waiting Recv early (link/ring,
//     link/afpacket, testnet/rtnet).
//   - GroupFilter: SetGroups, which has the kernel pass only some rbcast
//     groups' frames (link/ring, link/afpacket; docs/groups.md).
//   - CRCSealer: SealsCRC, a link that writes every frame's CRC itself
//     (link/auth encrypting), so that cores need not (frame.Header.SkipCRC).
//   - Lender: Loan, Lend, Return and Due, a link whose received frames can
//     be kept past the next Recv without a copy, within a bound (link/ring;
//     reliable's retention of delivered frames for view changes).
//
// A runtime finds them with StagerOf, NowSenderOf, WakerOf,
// GroupFilterOf, LenderOf and SealsCRC, never by a type assertion of its own, because of
// decorators. A decorator is a Wrapper: it has Unwrap, returning the link
// it wraps. The rules are:
//
//   - Send-side capabilities (Stager, NowSender, CRCSealer) are never passed through
//     Unwrap: the runtime would send past the decorator, which would miss
//     the frames (capture records every frame sent). A decorator offers them
//     by having the methods itself: it observes the frames and forwards the
//     call with the package functions Stage, Kick and SendNow, which use
//     the wrapped link's capability or fall back to its Send. StagerOf(l)
//     then reports l only if the link l unwraps to reports one too, down
//     the whole chain, so a decorator has the methods always but reports
//     the capability truthfully; a decorator without them hides it (the
//     runtime then uses Send, which it observes anyway).
//   - Receive-side capabilities (Waker, GroupFilter) pass through Unwrap:
//     a decorator's Recv calls the wrapped link's, so waking that one ends
//     both, and what that one's filter drops never reaches the decorator.
//     WakerOf and GroupFilterOf return the first on the Unwrap chain.
//   - Lender is received-side but follows the send-side rule: a decorator
//     offers it only by having the methods (LenderOf), since one whose
//     frames are not its wrapped link's last Recv's (link/mux) must not
//     lend that link's memory.
//
// A link that provides a send-side capability itself, rather than
// forwarding it, is not a Wrapper (it has no Unwrap). link/linktest holds
// the conformance tests every link and decorator passes.
package link

import (
	"errors"
	"net"
	"time"
)

// EtherTypeRbcast is the default EtherType of rbcast frames: IEEE 802
// "local experimental Ethertype 1". It is configurable per link.
const EtherTypeRbcast = 0x88B5

// EthernetHeaderLen is the length of an untagged Ethernet II header.
const EthernetHeaderLen = 14

// Frame is one received Ethernet frame.
type Frame struct {
	// Data is the whole Ethernet frame, header included. On ring-backed links
	// it is a view into memory shared with the kernel: it is valid only until
	// the next call to Recv or Close on the same Link (see Link.Recv). Copy it
	// to keep it.
	//
	// Its capacity may reach past the frame, into room of the same receive
	// buffer (link/ring: the rest of a TPACKET_V2 slot, which keeps 16
	// bytes behind the largest frame; under TPACKET_V3, the alignment and
	// the next frame's header once read, or the rest of the block). No other goroutine reads or writes
	// those bytes until the next Recv, but they may hold the link's own
	// state or the next frame: a caller may write there for a moment if it
	// puts them back before it returns from handling the frame (link/auth
	// puts a tag behind the body while it decrypts).
	Data []byte
	// Time is when the kernel (or the simulator) received the frame.
	Time time.Time
	// Outgoing is set when the frame is a copy of one this host sent
	// (PACKET_OUTGOING); links filter these out unless asked to keep them.
	Outgoing bool
	// Authenticated is set by an authenticating decorator (link/auth) on
	// a frame whose tag verified. The tag covers every byte the frame's
	// CRC32C does, so a runtime parses such a frame without the CRC
	// (frame.ParseNoCRC); after decryption in place the CRC no longer
	// matches the bytes. Every other link leaves it false.
	Authenticated bool
}

// Stats are a link's counters. Counters only grow; kernel counters are
// accumulated across reads (PACKET_STATISTICS resets on each read).
type Stats struct {
	FramesSent     uint64 // frames handed to the kernel (or the segment)
	FramesReceived uint64 // frames returned by Recv
	BytesSent      uint64
	BytesReceived  uint64
	// KernelPackets and KernelDrops are tp_packets and tp_drops from
	// PACKET_STATISTICS: frames the kernel queued for us, and frames it
	// dropped because our receive buffer or ring was full.
	KernelPackets uint64
	KernelDrops   uint64
	// KernelFreezes is tp_freeze_q_cnt (TPACKET_V3 only): times the ring
	// was frozen because no block was free.
	KernelFreezes uint64
	// SendRetries counts sends that met back-pressure (ENOBUFS, EAGAIN or a
	// full TX ring) and were retried after waiting. Nothing is dropped.
	SendRetries uint64
	// Filtered counts frames the link itself discarded (wrong EtherType
	// or group that slipped past the socket filter, as frames queued
	// before a SetGroups do, our own outgoing copies, frames shorter than
	// an Ethernet header). Frames the kernel's filter drops are counted
	// nowhere: they never reach the socket (docs/groups.md).
	Filtered uint64
	// Lent counts the loans of received frames taken (link.Lender.Lend);
	// LoansCalled those Due asked back before their holder returned
	// them, which the holder then copied (a holder slower than the bound
	// allows); LoanHeld is how many receive slots (TPACKET_V2) or blocks
	// (V3) are kept from the kernel for loans now, read and not yet
	// given back because of a loan at or before them.
	Lent, LoansCalled, LoanHeld uint64
	// SpinHits, SpinMisses and SpinSkips count the waits of a polling
	// link (link/ring's Config.RxSpin): spins that found a frame, spins
	// that ended without one (the link then slept), and waits that
	// slept at once because its adaptive spin (link/ring's
	// Config.AdaptiveSpin) was off. (Waits in a
	// back-off from contention count in none.) Links that do not poll
	// leave them 0.
	SpinHits, SpinMisses, SpinSkips uint64
}

// Link is a batch-oriented raw Ethernet link. Implementations are safe for
// one receiving goroutine and one sending goroutine at a time; Stats and
// Close may be called from any goroutine.
type Link interface {
	// Send transmits complete Ethernet frames, in order. Each frame must be
	// no longer than EthernetHeaderLen+MTU(). It returns the number of frames
	// sent. Back-pressure (ENOBUFS, a full TX ring) is waited out and counted
	// in Stats.SendRetries, never reported as a silent drop; an error is
	// returned only when the link cannot send at all, and then n says how
	// many frames went out before it.
	Send(frames [][]byte) (n int, err error)

	// Recv waits until at least one frame is available or the deadline
	// passes, then fills frames[:n] and returns n >= 1. If the deadline
	// passes first it returns 0 and an error that matches
	// os.ErrDeadlineExceeded. A zero deadline waits without limit.
	//
	// The frames returned stay valid until the next call to Recv or Close
	// on this Link. This is the ring-reuse rule: a ring-backed link returns
	// its slots to the kernel only at the start of the next Recv, so a
	// caller may decode and deliver in place, and must copy whatever it
	// keeps longer.
	Recv(deadline time.Time, frames []Frame) (n int, err error)

	// MTU is the largest Ethernet payload (the frame without its 14-byte
	// header) the link carries.
	MTU() int

	// HardwareAddr is this link's own MAC address.
	HardwareAddr() net.HardwareAddr

	// Stats returns the link's counters, including the kernel's. After
	// Close it returns the last counters.
	Stats() (Stats, error)

	// Close releases the link. A blocked Recv returns net.ErrClosed, and
	// so do Recv and Send (and Stage, Kick, SendNow) called after it.
	Close() error
}

// Errors reported when opening a link. They are wrapped with the interface
// name and operation; test them with errors.Is.
var (
	// ErrPermission means the process lacks CAP_NET_RAW.
	ErrPermission = errors.New("opening an AF_PACKET socket needs CAP_NET_RAW: run as root or grant it with `setcap cap_net_raw+ep <binary>`")
	// ErrNoInterface means no interface has the given name.
	ErrNoInterface = errors.New("no such network interface")
	// ErrInterfaceDown means the interface exists but is not up.
	ErrInterfaceDown = errors.New("network interface is down")
	// ErrMTUTooSmall means the interface MTU cannot carry an rbcast header
	// and a useful payload.
	ErrMTUTooSmall = errors.New("interface MTU too small for rbcast frames")
	// ErrNotEthernet means the interface carries no Ethernet frames: it
	// has no 6-byte hardware address and is not loopback (a tun device,
	// an IP tunnel). Loopback is allowed: it has no address, but its
	// frames have Ethernet headers.
	ErrNotEthernet = errors.New("interface has no Ethernet address, so it carries no Ethernet frames")
	// ErrFrameTooLarge means Send was given a frame longer than the MTU
	// allows.
	ErrFrameTooLarge = errors.New("frame larger than link MTU")
)
