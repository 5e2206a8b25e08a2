package udp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/rbcast/rbcast/link"
)

// A hello is the link's one control message (unicast fan-out with Learn):
// an Ethernet frame of ControlEtherType, broadcast destination, the
// sender's MAC as source, and this body:
//
//	version (1) | kind (1) | count (2) | count × entry
//	entry: family (1: 4 or 6) | address (4 or 16) | port (2) | age in ms (4)
//
// Each entry is a member the sender has heard from, and how long ago
// (saturating at 2³²−1 ms). A hello of kind helloAsk asks a receiver that
// did not know the sender to answer at once with its own (helloAnswer),
// so that a newcomer learns the group within a round trip instead of a
// HelloInterval. Multi-byte fields are big-endian.
const (
	helloVersion = 1
	helloAsk     = 1
	helloAnswer  = 2
	helloHeader  = 4
)

// helloEntry is one member a hello names.
type helloEntry struct {
	Addr netip.AddrPort
	Age  time.Duration
}

// errHello is the error of every malformed hello.
var errHello = errors.New("malformed hello")

// appendHello appends a hello frame from src naming entries to b.
func appendHello(b []byte, src [6]byte, kind byte, entries []helloEntry) []byte {
	b = append(b, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff)
	b = append(b, src[:]...)
	b = binary.BigEndian.AppendUint16(b, ControlEtherType)
	b = append(b, helloVersion, kind)
	b = binary.BigEndian.AppendUint16(b, uint16(len(entries)))
	for _, e := range entries {
		a := e.Addr.Addr()
		if a.Is4() {
			b = append(b, 4)
			ip := a.As4()
			b = append(b, ip[:]...)
		} else {
			b = append(b, 6)
			ip := a.As16()
			b = append(b, ip[:]...)
		}
		b = binary.BigEndian.AppendUint16(b, e.Addr.Port())
		ms := e.Age.Milliseconds()
		b = binary.BigEndian.AppendUint32(b, uint32(min(max(ms, 0), 1<<32-1)))
	}
	return b
}

// entryLen is the encoded size of an entry of family fam.
func entryLen(fam int) int {
	if fam == 6 {
		return 1 + 16 + 2 + 4
	}
	return 1 + 4 + 2 + 4
}

// parseHello decodes a hello frame (Ethernet header included), calling fn
// for each entry. It checks the whole frame before calling fn once.
func parseHello(frame []byte, fn func(helloEntry)) (kind byte, err error) {
	bad := func(off int, format string, args ...any) (byte, error) {
		return 0, fmt.Errorf("%w: byte %d: %s", errHello, off, fmt.Sprintf(format, args...))
	}
	b := frame[min(len(frame), link.EthernetHeaderLen):]
	const base = link.EthernetHeaderLen
	if len(b) < helloHeader {
		return bad(base, "%d bytes after the Ethernet header, want at least %d", len(b), helloHeader)
	}
	if b[0] != helloVersion {
		return bad(base, "version %d, want %d", b[0], helloVersion)
	}
	kind = b[1]
	if kind != helloAsk && kind != helloAnswer {
		return bad(base+1, "kind %d, want %d (ask) or %d (answer)", kind, helloAsk, helloAnswer)
	}
	count := int(binary.BigEndian.Uint16(b[2:]))
	off := helloHeader
	for i := range count {
		if off >= len(b) {
			return bad(base+off, "entry %d of %d is missing", i, count)
		}
		fam := int(b[off])
		if fam != 4 && fam != 6 {
			return bad(base+off, "entry %d: family %d, want 4 or 6", i, fam)
		}
		if off+entryLen(fam) > len(b) {
			return bad(base+off, "entry %d: %d bytes left, an IPv%d entry is %d", i, len(b)-off, fam, entryLen(fam))
		}
		off += entryLen(fam)
	}
	if off != len(b) {
		return bad(base+off, "%d bytes after the last of %d entries", len(b)-off, count)
	}
	off = helloHeader
	for range count {
		fam := int(b[off])
		var a netip.Addr
		if fam == 4 {
			a = netip.AddrFrom4([4]byte(b[off+1 : off+5]))
		} else {
			a = netip.AddrFrom16([16]byte(b[off+1 : off+17])).Unmap()
		}
		p := off + entryLen(fam) - 6
		fn(helloEntry{
			Addr: netip.AddrPortFrom(a, binary.BigEndian.Uint16(b[p:])),
			Age:  time.Duration(binary.BigEndian.Uint32(b[p+2:])) * time.Millisecond,
		})
		off += entryLen(fam)
	}
	return kind, nil
}
