package replay

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
)

// errNotCarriage is the decode error of a packet that is not a datagram
// of link/udp's carriage (ReadOptions.UDP).
var errNotCarriage = errors.New("not a UDP datagram of the carriage")

// unwrapUDP replaces r.Data, a packet captured on a link of type lt, by
// the Ethernet frame its UDP datagram carries (link/udp: the whole frame
// is the payload), and notes the datagram's addresses. ports, if not
// empty, are the UDP ports of the carriage: a datagram to or from none of
// them is not ours.
func (r *Record) unwrapUDP(lt layers.LinkType, ports []uint16) error {
	first, ok := firstLayer(lt, r.Data)
	if !ok {
		return fmt.Errorf("%w: link type %v (want Ethernet, Linux cooked (-i any) or raw IP)", errLinkType, lt)
	}
	p := gopacket.NewPacket(r.Data, first, gopacket.DecodeOptions{NoCopy: true, Lazy: true})
	var src, dst netip.Addr
	switch ip := p.NetworkLayer().(type) {
	case *layers.IPv4:
		if ip.Flags&layers.IPv4MoreFragments != 0 || ip.FragOffset != 0 {
			return fmt.Errorf("%w: an IPv4 fragment (offset %d): reassembly is not done; give the path's MTU to the link (-udp-mtu)", errNotCarriage, ip.FragOffset*8)
		}
		src, _ = netip.AddrFromSlice(ip.SrcIP)
		dst, _ = netip.AddrFromSlice(ip.DstIP)
	case *layers.IPv6:
		src, _ = netip.AddrFromSlice(ip.SrcIP)
		dst, _ = netip.AddrFromSlice(ip.DstIP)
	default:
		return fmt.Errorf("%w: no IP header", errNotCarriage)
	}
	u, ok := p.Layer(layers.LayerTypeUDP).(*layers.UDP)
	if !ok {
		return fmt.Errorf("%w: not UDP", errNotCarriage)
	}
	if len(ports) > 0 && !slices.Contains(ports, uint16(u.SrcPort)) && !slices.Contains(ports, uint16(u.DstPort)) {
		return fmt.Errorf("%w: ports %d -> %d", errNotCarriage, u.SrcPort, u.DstPort)
	}
	r.UDPSrc = netip.AddrPortFrom(src.Unmap(), uint16(u.SrcPort))
	r.UDPDst = netip.AddrPortFrom(dst.Unmap(), uint16(u.DstPort))
	r.Data = u.Payload
	return nil
}

// firstLayer is how to decode a packet of link type lt.
func firstLayer(lt layers.LinkType, data []byte) (gopacket.Decoder, bool) {
	switch lt {
	case layers.LinkTypeEthernet:
		return layers.LayerTypeEthernet, true
	case layers.LinkTypeLinuxSLL:
		return layers.LayerTypeLinuxSLL, true
	case layers.LinkTypeLinuxSLL2:
		return layers.LayerTypeLinuxSLL2, true
	case layers.LinkTypeIPv4:
		return layers.LayerTypeIPv4, true
	case layers.LinkTypeIPv6:
		return layers.LayerTypeIPv6, true
	case layers.LinkTypeRaw, 12: // 12: DLT_RAW as some systems number it
		if len(data) > 0 && data[0]>>4 == 6 {
			return layers.LayerTypeIPv6, true
		}
		return layers.LayerTypeIPv4, true
	}
	return nil, false
}
