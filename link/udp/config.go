package udp

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/rbcast/rbcast/link"
)

const (
	// ControlEtherType marks the link's own datagrams (hello messages of
	// unicast fan-out with Learn; see package doc): IEEE 802 "local
	// experimental Ethertype 2", next to rbcast's default. They never
	// leave the link: Recv does not return them.
	ControlEtherType = 0x88B6

	// DefaultBufferSize is the socket buffer asked for when Config leaves
	// RecvBuffer or SendBuffer zero. Without CAP_NET_ADMIN the kernel caps
	// it at net.core.rmem_max / wmem_max.
	DefaultBufferSize = 4 << 20

	// DefaultBatchSize is how many datagrams one recvmmsg moves and how
	// many messages one sendmmsg carries when Config leaves BatchSize zero.
	DefaultBatchSize = 64

	// MaxBatchSize is UIO_MAXIOV, the kernel's cap on recvmmsg's and
	// sendmmsg's vlen.
	MaxBatchSize = 1024

	// DefaultTTL is the multicast TTL (hop limit) when Config leaves TTL
	// zero: the local segment only, as IP multicast sockets default to.
	DefaultTTL = 1

	// DefaultHelloInterval and DefaultPeerTimeout are Learn's timers.
	DefaultHelloInterval = time.Second
	DefaultPeerTimeout   = 10 * time.Second

	// MaxPeers bounds the members one link knows (static, learned).
	MaxPeers = 1024

	// maxIPPacket is the largest IPv4 or IPv6 packet (without jumbograms).
	maxIPPacket   = 65535
	udpHeaderLen  = 8
	ipv4HeaderLen = 20
	ipv6HeaderLen = 40
	minEtherType  = 0x0600
)

// Config selects the mode and tunes a Link. Exactly one of Group
// (multicast) and Peers (unicast fan-out) is set.
type Config struct {
	// Group is the IP multicast group and UDP port of the rbcast group,
	// IPv4 (224.0.0.0/4) or IPv6 (ff00::/8): every broadcast frame is one
	// datagram to it, which the network copies to every member.
	Group netip.AddrPort
	// Interface is the name of the interface the group is joined on and
	// multicast leaves by (required with Group). With Peers it is
	// optional and only picks the local address when Local is unset.
	Interface string
	// TTL is the multicast TTL (IPv6 hop limit), 1..255; zero means
	// DefaultTTL, the local segment. Each router on the way takes one.
	TTL int
	// NoLoopback turns IP_MULTICAST_LOOP off: this host's other sockets
	// then do not receive the group's datagrams sent from here. Leave it
	// on when several members run on one host; off saves every sender
	// the receive of its own datagrams.
	NoLoopback bool

	// Peers are the members' addresses in unicast fan-out mode: every
	// broadcast frame is sent to each of them but this member itself
	// (Peers may, and usually does, list it: one list for all members).
	// Datagrams from other addresses are dropped, unless Learn is set.
	Peers []netip.AddrPort
	// Learn makes Peers seeds: the link says hello to them and to every
	// member it learns of (HelloInterval), each hello listing the members
	// the sender has heard from and how long ago, and admits any member
	// that sends to it. Members heard from by nobody for PeerTimeout are
	// forgotten; Peers never are.
	Learn bool

	// Local is this member's unicast address: the source of every
	// datagram it sends, where point-to-point frames (and, in fan-out
	// mode, everything) come to, and so its identity: HardwareAddr is
	// derived from it (MACOf). Unset, multicast mode takes the first
	// address of Interface in the group's family and a free port; fan-out
	// mode takes the first entry of Peers that this host can bind.
	Local netip.AddrPort

	// MTU caps the IP packets the link sends, headers included: the
	// link's MTU is this less the IP, UDP and carried Ethernet headers.
	// Zero means the path MTU found at Open: the interface's MTU
	// (multicast) or the smallest route MTU to any static peer.
	MTU int

	// EtherType of the frames carried; zero means link.EtherTypeRbcast.
	EtherType uint16

	// RecvBuffer and SendBuffer are socket buffer sizes in bytes; zero
	// means DefaultBufferSize (forced past the sysctl limits with
	// CAP_NET_ADMIN, capped at them without).
	RecvBuffer, SendBuffer int

	// BatchSize is the most datagrams one recvmmsg returns and the most
	// messages one sendmmsg sends; zero means DefaultBatchSize.
	BatchSize int

	// NoGSO and NoGRO turn off UDP segmentation offload (UDP_SEGMENT:
	// one send of several equal-sized frames to one destination) and
	// receive offload (UDP_GRO: one receive of several), which the link
	// otherwise uses where the kernel has them.
	NoGSO, NoGRO bool

	// HelloInterval and PeerTimeout are Learn's timers; zero means
	// DefaultHelloInterval and DefaultPeerTimeout.
	HelloInterval, PeerTimeout time.Duration
}

// Check reports what is wrong with c, as Open would before touching a
// socket (so a command line can refuse bad flags as usage errors).
func (c Config) Check() error {
	_, err := c.withDefaults()
	return err
}

// Multicast reports whether c is in multicast mode.
func (c *Config) Multicast() bool { return c.Group.IsValid() }

// withDefaults fills the zero fields of c and checks the rest.
func (c Config) withDefaults() (Config, error) {
	bad := func(format string, args ...any) (Config, error) {
		return c, fmt.Errorf("udp: Config."+format, args...)
	}
	switch {
	case c.Group.IsValid() && len(c.Peers) > 0:
		return bad("Group (%s) and Peers (%d addresses) are both set: a link is either multicast or unicast fan-out", c.Group, len(c.Peers))
	case !c.Group.IsValid() && len(c.Peers) == 0:
		return bad("Group and Peers are both empty: give a multicast group (Group) or the members' addresses (Peers)")
	}
	if c.Group.IsValid() {
		c.Group = unmap(c.Group)
		g := c.Group.Addr()
		switch {
		case !g.IsMulticast():
			return bad("Group %s is not a multicast address (224.0.0.0/4, ff00::/8)", c.Group)
		case c.Group.Port() == 0:
			return bad("Group %s has no port", c.Group)
		case c.Interface == "":
			return bad("Interface is empty: multicast mode needs the interface to join Group %s on", c.Group)
		case c.Learn:
			return bad("Learn applies to unicast fan-out (Peers) only; a multicast group needs no seeds")
		}
	}
	fam := family(c.Group)
	c.Peers = slices.Clone(c.Peers)
	for i, p := range c.Peers {
		p = unmap(p)
		c.Peers[i] = p
		switch {
		case !p.IsValid() || p.Addr().IsUnspecified():
			return bad("Peers[%d] %s is not an address", i, p)
		case p.Port() == 0:
			return bad("Peers[%d] %s has no port", i, p)
		case p.Addr().IsMulticast():
			return bad("Peers[%d] %s is a multicast address: for multicast, set Group instead", i, p)
		}
		if i == 0 {
			fam = family(p)
		} else if family(p) != fam {
			return bad("Peers[%d] %s is IPv%d, Peers[0] %s IPv%d: one link speaks one IP version", i, p, family(p), c.Peers[0], fam)
		}
	}
	if len(c.Peers) > MaxPeers {
		return bad("Peers has %d addresses, more than %d", len(c.Peers), MaxPeers)
	}
	if c.Local.IsValid() {
		c.Local = unmap(c.Local)
		switch {
		case c.Local.Addr().IsUnspecified() || c.Local.Addr().IsMulticast():
			return bad("Local %s is not a unicast address of this host: it is the member's identity, so it must be one the others can send to", c.Local)
		case family(c.Local) != fam:
			return bad("Local %s is IPv%d, the group's addresses IPv%d", c.Local, family(c.Local), fam)
		}
	}
	switch {
	case c.TTL < 0 || c.TTL > 255:
		return bad("TTL %d is outside 1..255", c.TTL)
	case c.TTL == 0:
		c.TTL = DefaultTTL
	}
	if c.EtherType == 0 {
		c.EtherType = link.EtherTypeRbcast
	}
	switch {
	case c.EtherType < minEtherType:
		return bad("EtherType 0x%04x is an IEEE 802.3 length, not an EtherType (must be at least 0x%04x)", c.EtherType, minEtherType)
	case c.EtherType == ControlEtherType:
		return bad("EtherType 0x%04x is the link's own (ControlEtherType)", c.EtherType)
	}
	minIP := headerLen(fam) + link.EthernetHeaderLen + link.MinMTU
	switch {
	case c.MTU != 0 && (c.MTU < minIP || c.MTU > maxIPPacket):
		return bad("MTU %d is outside %d..%d (IPv%d: %d bytes of IP, UDP and Ethernet headers, and rbcast's minimum MTU %d)",
			c.MTU, minIP, maxIPPacket, fam, headerLen(fam)+link.EthernetHeaderLen, link.MinMTU)
	case c.RecvBuffer < 0:
		return bad("RecvBuffer %d is negative", c.RecvBuffer)
	case c.SendBuffer < 0:
		return bad("SendBuffer %d is negative", c.SendBuffer)
	case c.BatchSize < 0 || c.BatchSize > MaxBatchSize:
		return bad("BatchSize %d is outside 0..%d", c.BatchSize, MaxBatchSize)
	case c.HelloInterval < 0 || c.PeerTimeout < 0:
		return bad("HelloInterval %v and PeerTimeout %v must not be negative", c.HelloInterval, c.PeerTimeout)
	}
	if c.RecvBuffer == 0 {
		c.RecvBuffer = DefaultBufferSize
	}
	if c.SendBuffer == 0 {
		c.SendBuffer = DefaultBufferSize
	}
	if c.BatchSize == 0 {
		c.BatchSize = DefaultBatchSize
	}
	if c.HelloInterval == 0 {
		c.HelloInterval = DefaultHelloInterval
	}
	if c.PeerTimeout == 0 {
		c.PeerTimeout = DefaultPeerTimeout
	}
	if c.PeerTimeout < 2*c.HelloInterval {
		return bad("PeerTimeout %v is shorter than two HelloIntervals (%v): members would be forgotten between hellos", c.PeerTimeout, c.HelloInterval)
	}
	return c, nil
}

// unmap turns an IPv4-mapped IPv6 address into IPv4, so that one address
// has one identity.
func unmap(a netip.AddrPort) netip.AddrPort {
	return netip.AddrPortFrom(a.Addr().Unmap(), a.Port())
}

// family is 4 or 6 (4 for an invalid address).
func family(a netip.AddrPort) int {
	if a.Addr().Is6() {
		return 6
	}
	return 4
}

// headerLen is the IP and UDP header bytes of a datagram of family fam.
func headerLen(fam int) int {
	if fam == 6 {
		return ipv6HeaderLen + udpHeaderLen
	}
	return ipv4HeaderLen + udpHeaderLen
}

// LinkMTU is the link MTU (the carried Ethernet frame's payload) that IP
// packets of ipMTU bytes give: ipMTU less the IP header (20 or 40 bytes),
// the UDP header (8) and the carried Ethernet header (14).
func LinkMTU(ipMTU int, ipv6 bool) int {
	fam := 4
	if ipv6 {
		fam = 6
	}
	return min(ipMTU, maxIPPacket) - headerLen(fam) - link.EthernetHeaderLen
}

// MACOf is the Ethernet address of the member at addr: 02 (locally
// administered, unicast) followed by the first five bytes of the SHA-256
// of the address's 16-byte form and port (big-endian). Every member
// computes every other's from its address, so a static peer list names
// everyone's MAC up front, and a receiver checks that a frame's source
// MAC is its datagram's source's. The zone of an IPv6 link-local address
// is not part of it: it names an interface of the receiver.
func MACOf(addr netip.AddrPort) net.HardwareAddr {
	a := addr.Addr().Unmap().WithZone("")
	var in [18]byte
	ip := a.As16()
	copy(in[:16], ip[:])
	binary.BigEndian.PutUint16(in[16:], addr.Port())
	sum := sha256.Sum256(in[:])
	return net.HardwareAddr{0x02, sum[0], sum[1], sum[2], sum[3], sum[4]}
}

// ParseAddrPorts parses a comma-separated list of ADDR:PORT (IPv6 in
// brackets, as [fd00::1]:5000), as the command line gives -udp-peers.
// Host names are not resolved: a member's identity is its address.
func ParseAddrPorts(s string) ([]netip.AddrPort, error) {
	var out []netip.AddrPort
	for i, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			return nil, fmt.Errorf("address %d of %q is empty", i+1, s)
		}
		a, err := netip.ParseAddrPort(f)
		if err != nil {
			return nil, fmt.Errorf("address %d %q: want IP:PORT ([IPv6]:PORT for IPv6): %v", i+1, f, err)
		}
		out = append(out, unmap(a))
	}
	return out, nil
}
