package frame

import "encoding/binary"

// Ethernet header layout (IEEE 802.3 Ethernet II).
const (
	EthernetHeaderLen = 14
	vlanTagLen        = 4
	etherTypeVLAN     = 0x8100
	etherTypeQinQ     = 0x88a8
	// EtherType is rbcast's default EtherType: IEEE 802 local
	// experimental EtherType 1.
	EtherType = 0x88B5
)

// Broadcast is the Ethernet broadcast address.
var Broadcast = [6]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}

// AppendEthernet appends an untagged Ethernet II header.
func AppendEthernet(b []byte, dst, src [6]byte, etherType uint16) []byte {
	b = append(b, dst[:]...)
	b = append(b, src[:]...)
	return binary.BigEndian.AppendUint16(b, etherType)
}

// Ethernet is a view of an Ethernet frame's header.
type Ethernet []byte

func (e Ethernet) Dst() (a [6]byte) { copy(a[:], e[0:6]); return }
func (e Ethernet) Src() (a [6]byte) { copy(a[:], e[6:12]); return }

// SplitEthernet returns the Ethernet header and the rbcast frame inside an
// Ethernet frame of the given EtherType. It skips 802.1Q and 802.1ad tags,
// which captures may keep. It copies nothing.
func SplitEthernet(b []byte, etherType uint16) (Ethernet, []byte, error) {
	if len(b) < EthernetHeaderLen {
		return nil, nil, decodeErr(ErrEthernet, "ethernet", 0, "%d bytes, an Ethernet header needs %d", len(b), EthernetHeaderLen)
	}
	off := 12
	for {
		et := binary.BigEndian.Uint16(b[off:])
		if et == etherTypeVLAN || et == etherTypeQinQ {
			off += vlanTagLen
			if off+2 > len(b) {
				return nil, nil, decodeErr(ErrEthernet, "ethernet.vlan", off, "truncated VLAN tag")
			}
			continue
		}
		if et != etherType {
			return nil, nil, decodeErr(ErrEthernet, "ethernet.type", off, "EtherType 0x%04x, want 0x%04x", et, etherType)
		}
		return Ethernet(b[:off+2]), b[off+2:], nil
	}
}

// EtherType returns the header's (innermost) EtherType.
func (e Ethernet) EtherType() uint16 { return binary.BigEndian.Uint16(e[len(e)-2:]) }
