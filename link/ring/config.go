package ring

import (
	"fmt"
	"math/bits"
	"net"
	"os"
	"time"

	"github.com/rbcast/rbcast/link"
)

// Version selects the layout of the receive ring.
type Version int

const (
	// V2 is TPACKET_V2: fixed-size frame slots, each with its own status
	// word. The kernel wakes the reader once per frame, so a lone frame is
	// seen at once.
	V2 Version = 2
	// V3 is TPACKET_V3: frames packed into blocks, one status word per
	// block. The kernel wakes the reader when a block is full or its retire
	// timer (Config.BlockTimeout) fires, so a lone frame waits up to that
	// long, but a busy link costs one wake-up per block.
	V3 Version = 3
)

// DefaultVersion is the receive ring layout used when Config.Version is 0.
// It is V2 because rbcast is latency-bound: a protocol round (data, acks,
// the window moves) waits on single frames, and with V3 each of those waits
// for a block retire timer (1 ms at least) where V2 wakes within
// microseconds; V3's extra receive capacity shows only in bulk transfer to
// several receivers (docs/benchmarks.md, "Link layer").
const DefaultVersion = V2

func (v Version) String() string {
	switch v {
	case V2:
		return "TPACKET_V2"
	case V3:
		return "TPACKET_V3"
	}
	return fmt.Sprintf("Version(%d)", int(v))
}

// TxMode selects how Send hands frames to the kernel.
type TxMode int

const (
	// TxRing copies frames into an mmap'ed PACKET_TX_RING (TPACKET_V2) and
	// kicks the kernel with one sendto(2) per batch.
	TxRing TxMode = 1
	// TxSendmmsg passes the caller's frames to one sendmmsg(2) per batch
	// of up to 64; no transmit ring is mapped.
	TxSendmmsg TxMode = 2
)

// DefaultTxMode is the send path used when Config.TxMode is 0; see the
// package documentation for the measurements behind it.
const DefaultTxMode = TxRing

func (m TxMode) String() string {
	switch m {
	case TxRing:
		return "PACKET_TX_RING"
	case TxSendmmsg:
		return "sendmmsg"
	}
	return fmt.Sprintf("TxMode(%d)", int(m))
}

// Config tunes a Link. The zero value is ready to use: every zero field is
// replaced by a default derived from the interface MTU.
type Config struct {
	// Version is the receive ring layout, V2 or V3; 0 means DefaultVersion.
	Version Version
	// EtherType of the frames to receive; 0 means link.EtherTypeRbcast.
	// Send does not look at it: callers write their own headers.
	EtherType uint16

	// BlockSize is the size in bytes of one receive ring block: a power of
	// two, at least one page, and large enough for one frame of the MTU.
	// 0 derives it from the MTU (see Geometry).
	BlockSize int
	// BlockCount is the number of receive ring blocks, at least 2; 0 means
	// enough for RingBytes.
	BlockCount int
	// RingBytes is the receive ring size aimed at when BlockCount is 0
	// (rounded down to whole blocks, at least 8 of them); 0 means
	// DefaultRingBytes. Below 4 GiB.
	RingBytes int
	// BlockTimeout is how long the kernel keeps a partly filled V3 block
	// before handing it to us, rounded up to whole milliseconds (the
	// kernel's unit). 0 means DefaultBlockTimeout. Ignored by V2.
	BlockTimeout time.Duration
	// RxSpin is how long Recv keeps looking at the receive ring before it
	// sleeps in poll(2) when the ring is empty, yielding the CPU (the Go
	// scheduler, then sched_yield(2)) between looks; the time spent in
	// sched_yield counts. A frame that arrives meanwhile is read without
	// the process being put to sleep and woken. It trades CPU for latency,
	// as MPI ranks that yield-spin do, and helps programs that wait for
	// one frame at a time (BDSM barriers), most of all when there are more
	// such processes than cores. A yield longer than a millisecond (or
	// RxSpin, if longer: the CPU is busy with other work) pauses spinning
	// for 10 ms to 1 s, and a Recv that asked to wait twice RxSpin or
	// longer and ended at its deadline with nothing read has the next one
	// sleep at once, so an idle link spins once per frame that arrives, not per
	// wait (package documentation). 0 means DefaultRxSpin; a negative
	// RxSpin never spins. At most a second.
	RxSpin time.Duration

	// AdaptiveSpin has Recv's spin adapt, up to RxSpin, to how often it
	// finds a frame: the full spin while half the waits or more end with
	// a frame within RxSpin, none while three quarters do not (the
	// package documentation). Off by default: on a 2-vCPU guest it cost
	// the library's goodput a fifth to two fifths, and did not shorten
	// rbcastd's FIFO round trip (docs/local-api-history.md, "An adaptive ring
	// spin").
	AdaptiveSpin bool

	// TxMode is the send path, TxRing or TxSendmmsg; 0 means
	// DefaultTxMode.
	TxMode TxMode

	// RawKicks makes every kick's sendto(2) a raw system call, not only
	// a kick of a few frames (shortKick), for a link whose process has
	// nothing else to run meanwhile: a bulk sender (rbcastd's files'
	// link). A kick of a pass's batch lasts a millisecond or more on a
	// veth bridge (the receivers' copies are made inside it); made by
	// Syscall, the runtime's sysmon finds it still in the kernel at its
	// next look, takes the P and hands it to another thread, and each
	// such hand-off keeps sysmon waking every 20 µs (at least a
	// millisecond on a PVM guest) instead of backing off to 10 ms. Its
	// cost: the process's other goroutines wait for the kick.
	RawKicks bool

	// TxBlockSize and TxBlockCount shape the transmit ring (always
	// TPACKET_V2), with the same rules and defaults as the receive ring.
	// TxSendmmsg maps no transmit ring and ignores them.
	TxBlockSize  int
	TxBlockCount int

	// QdiscBypass sends through PACKET_QDISC_BYPASS: straight to the
	// driver, skipping the interface's queueing discipline (and any shaping
	// or loss configured there).
	QdiscBypass bool
	// MulticastGroups are Ethernet multicast addresses to receive in
	// addition to broadcast and our own unicast address
	// (PACKET_ADD_MEMBERSHIP, PACKET_MR_MULTICAST).
	MulticastGroups []net.HardwareAddr
	// KeepOutgoing delivers copies of frames this host sends on the
	// interface (Frame.Outgoing set), from this Link and any other socket.
	// The kernel copies outgoing frames only to sockets bound to every
	// protocol, so the receive socket is then bound to ETH_P_ALL and the
	// EtherType is selected by its BPF filter alone: every frame on the
	// interface costs a filter run. By default the socket is bound to
	// EtherType and never sees outgoing frames.
	KeepOutgoing bool
	// Groups, if not empty, are the rbcast groups whose frames the link
	// receives: the socket's BPF filter drops every frame whose group id
	// (at link.GroupOffset) is not one of them, in the kernel, before it
	// takes a ring slot or wakes Recv, so that groups sharing an
	// interface cost each other nothing (docs/groups.md). At most
	// link.MaxGroups; SetGroups changes them on an open link.
	Groups []uint32
}

// Defaults for zero Config fields.
const (
	// DefaultRingBytes is the receive ring size aimed at: about 10000
	// full-size frames at MTU 1500, 1800 at MTU 9000, so that a receiver
	// descheduled for a few milliseconds loses nothing of a full-speed
	// stream, which 8 MiB did not hold (BenchmarkRecvRate;
	// docs/benchmarks-history.md, "Measurements formerly in code comments").
	DefaultRingBytes = 16 << 20
	// DefaultTxRingBytes is the transmit ring size aimed at.
	DefaultTxRingBytes = 4 << 20
	// DefaultBlockTimeout is the V3 retire timeout: the smallest the
	// kernel accepts (its unit is the millisecond; 0 would make it pick
	// one from the link speed, 8 ms on a veth).
	DefaultBlockTimeout = time.Millisecond
	// DefaultRxSpin is how long Recv polls an empty ring before sleeping:
	// as long as a Linux KVM guest's kernel polls an idle vCPU before
	// halting it (haltpoll.guest_halt_poll_ns, 200 µs), which matters in a
	// VM that turns that off, where waking a sleeping receiver costs tens
	// of µs. It buys goodput and latency for CPU while traffic flows
	// (docs/benchmarks-history.md, runs 15-17 against runs 12-14).
	DefaultRxSpin = 200 * time.Microsecond
	// minBlocks keeps a ring from being a handful of huge blocks (MTU
	// 65535): the kernel must have a block to fill while we read others.
	minBlocks = 8
)

// Layout constants of <linux/if_packet.h>, see
// Documentation/networking/packet_mmap.rst, "TPACKET versions" and
// "Frame structure". They are fixed by the kernel ABI.
const (
	tpacketAlignment  = 16 // TPACKET_ALIGNMENT
	sizeofTpacket2Hdr = 32 // sizeof(struct tpacket2_hdr)
	sizeofTpacket3Hdr = 48 // sizeof(struct tpacket3_hdr)
	sizeofSockaddrLL  = 20 // sizeof(struct sockaddr_ll)
	// blockHeaderLen is BLK_HDR_LEN of net/packet/af_packet.c: the V3
	// block descriptor, ALIGN(sizeof(struct tpacket_block_desc), 8).
	blockHeaderLen = 48
)

func tpacketAlign(n int) int { return (n + tpacketAlignment - 1) &^ (tpacketAlignment - 1) }

// hdrLen is TPACKET2_HDRLEN or TPACKET3_HDRLEN: the header, aligned, then
// the sockaddr_ll the kernel writes after it.
func hdrLen(v Version) int {
	if v == V3 {
		return tpacketAlign(sizeofTpacket3Hdr) + sizeofSockaddrLL
	}
	return tpacketAlign(sizeofTpacket2Hdr) + sizeofSockaddrLL
}

// rxMacOffset is where the kernel puts the Ethernet header in a receive
// frame of a SOCK_RAW socket: tpacket_rcv computes
// netoff = TPACKET_ALIGN(tp_hdrlen + max(maclen, 16)), macoff = netoff - maclen,
// so that the network header is aligned.
func rxMacOffset(v Version) int {
	return tpacketAlign(hdrLen(v)+16) - link.EthernetHeaderLen
}

// rxRoom is what a TPACKET_V2 slot keeps behind a frame of the full MTU,
// lent with it (link.Frame.Data's capacity): link/auth puts an AES-GCM
// tag behind the body there, to decrypt from the slot in one pass.
const rxRoom = 16

// rxFrameSize is the room one received frame of a full MTU needs: header,
// sockaddr_ll, padding, Ethernet header and payload, aligned; under V2,
// and rxRoom behind it.
func rxFrameSize(v Version, mtu int) int {
	n := rxMacOffset(v) + link.EthernetHeaderLen + mtu
	if v == V2 {
		n += rxRoom
	}
	return tpacketAlign(n)
}

// txDataOffset is where the kernel reads a frame to send from a TX slot
// without PACKET_TX_HAS_OFF: tp_hdrlen - sizeof(struct sockaddr_ll), which
// is right after the aligned tpacket2_hdr.
const txDataOffset = sizeofTpacket2Hdr

func txFrameSize(mtu int) int {
	return tpacketAlign(txDataOffset + link.EthernetHeaderLen + mtu)
}

// Geometry is the shape of one mmap'ed ring as the kernel sees it
// (struct tpacket_req / tpacket_req3).
type Geometry struct {
	BlockSize  int
	BlockCount int
	FrameSize  int // V2 slot size; for V3 only the kernel's sanity check
	FrameCount int // FramesPerBlock * BlockCount
}

// FramesPerBlock is how many V2 slots one block holds (frames never span
// blocks).
func (g Geometry) FramesPerBlock() int { return g.BlockSize / g.FrameSize }

// Bytes is the size of the mapping.
func (g Geometry) Bytes() int { return g.BlockSize * g.BlockCount }

// defaultBlockSize is the smallest power of two that is at least a page,
// at least 64 KiB, and holds at least 16 frames of frameSize: small enough
// to allocate easily, large enough that the tail a block wastes stays under
// about 6 % (1/16), and for V3 one wake-up per 16 or more frames at full
// rate.
func defaultBlockSize(frameSize, extra int) int {
	n := max(64<<10, os.Getpagesize(), 16*frameSize+extra)
	return 1 << bits.Len(uint(n-1))
}

// checkBlockSize enforces what the kernel needs: a whole number of pages
// (PAGE_ALIGNED in packet_set_ring), a power of two so the page allocator
// does not round it up and waste the rest, and room for one frame.
func checkBlockSize(field string, size, need int) error {
	page := os.Getpagesize()
	if size < page || size&(size-1) != 0 {
		return fmt.Errorf("ring: Config.%s = %d: want a power of two of at least the page size %d", field, size, page)
	}
	if size < need {
		return fmt.Errorf("ring: Config.%s = %d is too small for one frame of this MTU (%d bytes)", field, size, need)
	}
	if size > 1<<30 {
		return fmt.Errorf("ring: Config.%s = %d: want at most 1 GiB", field, size)
	}
	return nil
}

func blockCount(field string, count, blockSize, ringBytes int) (int, error) {
	if count == 0 {
		return max(minBlocks, ringBytes/blockSize), nil
	}
	if count < 2 {
		return 0, fmt.Errorf("ring: Config.%s = %d: want at least 2", field, count)
	}
	if int64(count)*int64(blockSize) > 1<<32-1 {
		return 0, fmt.Errorf("ring: Config.%s = %d blocks of %d bytes is over 4 GiB", field, count, blockSize)
	}
	return count, nil
}

// resolved is a Config with every default filled in and every field
// checked, for an interface of a given MTU.
type resolved struct {
	Config
	rx, tx      Geometry
	timeoutMsec uint32
	// adaptSpin: Config.AdaptiveSpin with a spin, so Recv's spin adapts
	// (spinPolicy) up to RxSpin rather than always lasting it.
	adaptSpin bool
}

// maxMTU is the largest MTU the ring works with; Open uses an interface
// with a larger one (loopback: 65536) as if it had this one.
const maxMTU = 65535

// resolve fills defaults and validates cfg for an interface MTU. Errors name
// the Config field and value that was wrong.
func (cfg Config) resolve(mtu int) (resolved, error) {
	r := resolved{Config: cfg}
	if mtu < 1 || mtu > maxMTU {
		return r, fmt.Errorf("ring: interface MTU %d out of range 1..%d", mtu, maxMTU)
	}
	switch r.Version {
	case 0:
		r.Version = DefaultVersion
	case V2, V3:
	default:
		return r, fmt.Errorf("ring: Config.Version = %d: want ring.V2 or ring.V3", int(cfg.Version))
	}
	switch r.TxMode {
	case 0:
		r.TxMode = DefaultTxMode
	case TxRing, TxSendmmsg:
	default:
		return r, fmt.Errorf("ring: Config.TxMode = %d: want ring.TxRing or ring.TxSendmmsg", int(cfg.TxMode))
	}
	if r.EtherType == 0 {
		r.EtherType = link.EtherTypeRbcast
	} else if r.EtherType < 0x0600 {
		return r, fmt.Errorf("ring: Config.EtherType = %#04x: values below 0x0600 are 802.3 lengths, not EtherTypes", cfg.EtherType)
	}

	frame := rxFrameSize(r.Version, mtu)
	extra := 0
	if r.Version == V3 {
		extra = blockHeaderLen
	}
	if r.BlockSize == 0 {
		r.BlockSize = defaultBlockSize(frame, extra)
	}
	if err := checkBlockSize("BlockSize", r.BlockSize, frame+extra); err != nil {
		return r, err
	}
	switch {
	case r.RingBytes < 0 || int64(r.RingBytes) > 1<<32-1:
		return r, fmt.Errorf("ring: Config.RingBytes = %d: want 0 (the default, %d) up to 4 GiB - 1", cfg.RingBytes, DefaultRingBytes)
	case r.RingBytes == 0:
		r.RingBytes = DefaultRingBytes
	}
	var err error
	if r.BlockCount, err = blockCount("BlockCount", r.BlockCount, r.BlockSize, r.RingBytes); err != nil {
		return r, err
	}
	r.rx = Geometry{BlockSize: r.BlockSize, BlockCount: r.BlockCount, FrameSize: frame}
	r.rx.FrameCount = r.rx.FramesPerBlock() * r.BlockCount

	switch {
	case r.BlockTimeout < 0:
		return r, fmt.Errorf("ring: Config.BlockTimeout = %v: want >= 0", cfg.BlockTimeout)
	case r.BlockTimeout == 0:
		r.BlockTimeout = DefaultBlockTimeout
	case r.BlockTimeout > time.Minute:
		return r, fmt.Errorf("ring: Config.BlockTimeout = %v: want at most a minute", cfg.BlockTimeout)
	}
	r.timeoutMsec = uint32((r.BlockTimeout + time.Millisecond - 1) / time.Millisecond)
	switch {
	case r.RxSpin == 0:
		r.RxSpin = DefaultRxSpin
	case r.RxSpin < 0:
		r.RxSpin = 0 // never
	case r.RxSpin > time.Second:
		return r, fmt.Errorf("ring: Config.RxSpin = %v: want at most a second (0: the default, %v; negative: never spin)", cfg.RxSpin, DefaultRxSpin)
	}
	r.adaptSpin = r.AdaptiveSpin && r.RxSpin > 0

	txFrame := txFrameSize(mtu)
	if r.TxBlockSize == 0 {
		r.TxBlockSize = defaultBlockSize(txFrame, 0)
	}
	if err := checkBlockSize("TxBlockSize", r.TxBlockSize, txFrame); err != nil {
		return r, err
	}
	if r.TxBlockCount, err = blockCount("TxBlockCount", r.TxBlockCount, r.TxBlockSize, DefaultTxRingBytes); err != nil {
		return r, err
	}
	r.tx = Geometry{BlockSize: r.TxBlockSize, BlockCount: r.TxBlockCount, FrameSize: txFrame}
	r.tx.FrameCount = r.tx.FramesPerBlock() * r.TxBlockCount

	for i, g := range r.MulticastGroups {
		if len(g) != 6 || g[0]&1 == 0 {
			return r, fmt.Errorf("ring: Config.MulticastGroups[%d] = %q: want a 6-byte Ethernet multicast address (lowest bit of the first byte set)", i, g.String())
		}
	}
	if len(r.Groups) > link.MaxGroups {
		return r, fmt.Errorf("ring: Config.Groups has %d groups, more than link.MaxGroups (%d)", len(r.Groups), link.MaxGroups)
	}
	return r, nil
}
