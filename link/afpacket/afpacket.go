// Package afpacket is the plain AF_PACKET link: one SOCK_RAW packet socket
// per interface, opened with github.com/mdlayher/packet, moving batches of
// whole Ethernet frames with recvmmsg(2) and sendmmsg(2).
//
// It is the simplest Link that runs on a real segment. The mmap'ed ring
// (link/ring) replaces its per-frame copy; this one needs no ring setup and
// works on every kernel with packet sockets. See packet(7) and the kernel's
// Documentation/networking/packet_mmap.rst for the socket it wraps.
package afpacket

import (
	"encoding/binary"
	"fmt"
	"net"
	"slices"

	"github.com/rbcast/rbcast/link"
	"golang.org/x/net/bpf"
)

const (
	// DefaultBufferSize is the socket buffer asked for when Config leaves
	// RecvBuffer or SendBuffer zero. Frames arrive in bursts (a window of a
	// sender's frames, then repairs), and a burst that overflows the receive
	// buffer is lost to every frame in it, so the default is generous.
	DefaultBufferSize = 4 << 20

	// DefaultBatchSize is how many frames one recvmmsg or sendmmsg moves when
	// Config leaves BatchSize zero.
	DefaultBatchSize = 64

	// MaxBatchSize is UIO_MAXIOV: the kernel caps the vlen of recvmmsg and
	// sendmmsg at it.
	MaxBatchSize = 1024

	// MaxMulticastGroups bounds Config.MulticastGroups: each group costs
	// five instructions of the socket filter, which the kernel caps at
	// BPF_MAXINSNS (4096).
	MaxMulticastGroups = 256

	// minEtherType is the smallest EtherType: values below 0x0600 in the
	// type/length field are IEEE 802.3 lengths, not types.
	minEtherType = 0x0600
)

// Config tunes a Link. The zero value is ready to use.
type Config struct {
	// EtherType is the type of the frames the link carries and receives;
	// zero means link.EtherTypeRbcast. It must be at least 0x0600.
	EtherType uint16

	// MulticastGroups are Ethernet multicast addresses to accept besides
	// broadcast and our own unicast address (PACKET_ADD_MEMBERSHIP with
	// PACKET_MR_MULTICAST, so the NIC filters for us and we need no
	// promiscuous mode). Memberships end when the link is closed.
	MulticastGroups []net.HardwareAddr

	// RecvBuffer and SendBuffer are the socket buffer sizes in bytes; zero
	// means DefaultBufferSize. As root (CAP_NET_ADMIN) they are forced past
	// net.core.rmem_max/wmem_max with SO_RCVBUFFORCE/SO_SNDBUFFORCE; without
	// it the kernel caps them at those limits. The kernel doubles the value
	// for its bookkeeping (socket(7)).
	RecvBuffer int
	SendBuffer int

	// KeepOutgoing asks for copies of the frames this host transmits on the
	// interface (PACKET_OUTGOING), marked Frame.Outgoing. Seeing them needs
	// a socket bound to ETH_P_ALL, which the kernel feeds every frame the
	// interface sends and receives before our filter drops the foreign ones,
	// so leave it off unless capturing.
	KeepOutgoing bool

	// BatchSize is the most frames one recvmmsg or sendmmsg moves; zero
	// means DefaultBatchSize. The link keeps BatchSize receive buffers of
	// 14+MTU bytes each.
	BatchSize int

	// Groups, if not empty, are the rbcast groups whose frames the link
	// receives: the socket filter drops every frame whose group id (at
	// link.GroupOffset) is not one of them, in the kernel (docs/groups.md).
	// At most link.MaxGroups; SetGroups changes them on an open link.
	Groups []uint32
}

// withDefaults fills the zero fields of c and checks the rest.
func (c Config) withDefaults() (Config, error) {
	if c.EtherType == 0 {
		c.EtherType = link.EtherTypeRbcast
	}
	if c.EtherType < minEtherType {
		return c, fmt.Errorf("afpacket: Config.EtherType 0x%04x is an IEEE 802.3 length, not an EtherType (must be at least 0x%04x)", c.EtherType, minEtherType)
	}
	if len(c.Groups) > link.MaxGroups {
		return c, fmt.Errorf("afpacket: Config.Groups has %d groups, more than link.MaxGroups (%d)", len(c.Groups), link.MaxGroups)
	}
	if len(c.MulticastGroups) > MaxMulticastGroups {
		return c, fmt.Errorf("afpacket: Config.MulticastGroups has %d addresses, more than %d", len(c.MulticastGroups), MaxMulticastGroups)
	}
	for i, g := range c.MulticastGroups {
		if len(g) != 6 {
			return c, fmt.Errorf("afpacket: Config.MulticastGroups[%d] %q is %d bytes long, not a 6-byte Ethernet address", i, g.String(), len(g))
		}
		if g[0]&1 == 0 {
			return c, fmt.Errorf("afpacket: Config.MulticastGroups[%d] %s is not a multicast address (the low bit of the first byte must be set)", i, g)
		}
	}
	switch {
	case c.RecvBuffer < 0:
		return c, fmt.Errorf("afpacket: Config.RecvBuffer %d is negative", c.RecvBuffer)
	case c.RecvBuffer == 0:
		c.RecvBuffer = DefaultBufferSize
	}
	switch {
	case c.SendBuffer < 0:
		return c, fmt.Errorf("afpacket: Config.SendBuffer %d is negative", c.SendBuffer)
	case c.SendBuffer == 0:
		c.SendBuffer = DefaultBufferSize
	}
	switch {
	case c.BatchSize < 0 || c.BatchSize > MaxBatchSize:
		return c, fmt.Errorf("afpacket: Config.BatchSize %d is outside 0..%d", c.BatchSize, MaxBatchSize)
	case c.BatchSize == 0:
		c.BatchSize = DefaultBatchSize
	}
	return c, nil
}

// Packet types (skb->pkt_type, <linux/if_packet.h>) as the socket filter
// and sll_pkttype see them.
const (
	packetHost      = 0 // to our unicast address
	packetBroadcast = 1
	packetMulticast = 2
	packetOtherHost = 3 // to someone else's unicast address
	packetOutgoing  = 4 // a copy of a frame this host sent
)

// socketFilter assembles the classic BPF program the socket carries for
// the rbcast groups given (every group if none). It keeps whole frames of
// our EtherType (bytes 12-13; a VLAN tag has already been stripped into
// skb metadata by then), of one of the groups, that are addressed to us:
// our unicast address, broadcast, a multicast group we joined, or, with
// KeepOutgoing, copies of our own transmissions. The multicast check
// repeats the NIC's address filter in the kernel because not every device
// has one: a veth passes every multicast frame, and a bridge floods
// non-IP multicast to every port.
func socketFilter(c Config, groups []uint32) ([]bpf.RawInstruction, error) {
	const (
		accept = 0xFFFFFFFF // return value: keep this many bytes, i.e. all
		drop   = 0
	)
	prog := []bpf.Instruction{
		bpf.LoadAbsolute{Off: 12, Size: 2},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: uint32(c.EtherType), SkipTrue: 1},
		bpf.RetConstant{Val: drop},
	}
	if len(groups) > 0 {
		// A frame too short for a group id ends the program at the load,
		// with 0: dropped.
		prog = append(prog, bpf.LoadAbsolute{Off: link.GroupOffset, Size: 4})
		for i, g := range groups {
			prog = append(prog,
				bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: g, SkipTrue: 1},
				bpf.Jump{Skip: uint32(2*(len(groups)-1-i) + 1)}) // past the drop below
		}
		prog = append(prog, bpf.RetConstant{Val: drop})
	}
	prog = append(prog, bpf.LoadExtension{Num: bpf.ExtType})
	keep := []uint32{packetHost, packetBroadcast}
	if c.KeepOutgoing {
		keep = append(keep, packetOutgoing)
	}
	for _, t := range keep {
		prog = append(prog,
			bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: t, SkipTrue: 1},
			bpf.RetConstant{Val: accept})
	}
	prog = append(prog,
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: packetMulticast, SkipTrue: 1},
		bpf.RetConstant{Val: drop})
	for _, g := range c.MulticastGroups {
		prog = append(prog,
			bpf.LoadAbsolute{Off: 0, Size: 4},
			bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: binary.BigEndian.Uint32(g[0:4]), SkipTrue: 3},
			bpf.LoadAbsolute{Off: 4, Size: 2},
			bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: uint32(binary.BigEndian.Uint16(g[4:6])), SkipTrue: 1},
			bpf.RetConstant{Val: accept})
	}
	return bpf.Assemble(append(prog, bpf.RetConstant{Val: drop}))
}

// wanted is socketFilter again, in Go, for frames that were queued before
// the filter took effect; Recv counts what it rejects in Stats.Filtered.
// groups is sorted.
func wanted(c *Config, groups []uint32, frame []byte, pktType uint8) bool {
	if len(frame) < link.EthernetHeaderLen || binary.BigEndian.Uint16(frame[12:14]) != c.EtherType {
		return false
	}
	if len(groups) > 0 {
		g, ok := link.FrameGroup(frame)
		if _, found := slices.BinarySearch(groups, g); !ok || !found {
			return false
		}
	}
	switch pktType {
	case packetHost, packetBroadcast:
		return true
	case packetOutgoing:
		return c.KeepOutgoing
	case packetMulticast:
		for _, g := range c.MulticastGroups {
			if string(g) == string(frame[:6]) {
				return true
			}
		}
	}
	return false
}

// groupSet is groups sorted, without duplicates, in a new slice.
func groupSet(groups []uint32) []uint32 {
	s := slices.Clone(groups)
	slices.Sort(s)
	return slices.Compact(s)
}
