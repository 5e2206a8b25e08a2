package capture

import "encoding/binary"

// A record is what a wrapped link hands to a Writer or Recorder: one
// frame, one interface, or one set of interface statistics. Records live
// in a byte ring, header then data, each padded to 8 bytes, so that
// queueing a frame is one copy into memory allocated up front:
//
//	0  size (4)   whole record, header and padding included
//	4  kind (1) | direction (1) | reception (1) | reserved (1)
//	8  interface (4)
//	12 data length (4)
//	16 timestamp, Unix nanoseconds (8)
//	24 data
const recordHeaderLen = 24

// recordKind says what a record holds.
type recordKind uint8

const (
	kindPacket    recordKind = 1 // data is an Ethernet frame
	kindInterface recordKind = 2 // no data; the interface was added
	kindStats     recordKind = 3 // data is packets (8) | drops (8) | start (8)
	// kindLost: data is a count (8) of the interface's frames the sink
	// lost (its queue was full) since the interface's previous packet; it
	// goes out as the next packet's epb_dropcount.
	kindLost recordKind = 4
)

// maxRecordLen is the largest record the rings ever need: a 65535-byte
// rbcast frame (the length field's limit) behind an Ethernet header with two
// VLAN tags, plus the record header, rounded up.
const maxRecordLen = recordHeaderLen + 65535 + 14 + 8 + 8

func recordLen(data int) int { return (recordHeaderLen + data + 7) &^ 7 }

type record struct {
	kind      recordKind
	dir       uint8 // pcapng EPB direction: 1 inbound, 2 outbound
	reception uint8 // pcapng EPB reception type: 1 unicast, 2 multicast, 3 broadcast
	iface     uint32
	ts        int64
	data      []byte // a view into the ring
}

// ring is a FIFO of variable-length records in a fixed buffer. Records
// are contiguous: one that does not fit before the end of the buffer
// starts again at offset 0, and the bytes it skipped (from end) are
// unused until the records before them are gone.
//
// Live records are in [head, tail) when !wrapped, and in [head, end)
// followed by [0, tail) when wrapped.
type ring struct {
	buf       []byte
	head      int
	tail      int
	end       int
	wrapped   bool
	count     int // records held
	dataBytes int // bytes of frame data held (for Stats)
}

func newRing(size int) *ring { return &ring{buf: make([]byte, size&^7)} }

// alloc reserves n bytes (a multiple of 8) at the tail and returns their
// offset, or -1 when they do not fit now.
func (r *ring) alloc(n int) int {
	if r.count == 0 {
		r.head, r.tail, r.wrapped = 0, 0, false
	}
	if !r.wrapped {
		if len(r.buf)-r.tail >= n {
			off := r.tail
			r.tail += n
			return off
		}
		if r.head >= n {
			r.end, r.wrapped = r.tail, true
			r.tail = n
			return 0
		}
		return -1
	}
	if r.head-r.tail >= n {
		off := r.tail
		r.tail += n
		return off
	}
	return -1
}

// push writes rec with its data at the tail. It reports false, leaving the
// ring as it was, when there is no room.
func (r *ring) push(rec *record) bool {
	n := recordLen(len(rec.data))
	off := r.alloc(n)
	if off < 0 {
		return false
	}
	b := r.buf[off : off+n]
	binary.LittleEndian.PutUint32(b[0:], uint32(n))
	b[4], b[5], b[6], b[7] = byte(rec.kind), rec.dir, rec.reception, 0
	binary.LittleEndian.PutUint32(b[8:], rec.iface)
	binary.LittleEndian.PutUint32(b[12:], uint32(len(rec.data)))
	binary.LittleEndian.PutUint64(b[16:], uint64(rec.ts))
	copy(b[recordHeaderLen:], rec.data)
	r.count++
	r.dataBytes += len(rec.data)
	return true
}

// at decodes the record at offset off; its data is a view into the ring.
func (r *ring) at(off int) (rec record, next int) {
	b := r.buf[off:]
	n := int(binary.LittleEndian.Uint32(b))
	dl := int(binary.LittleEndian.Uint32(b[12:]))
	rec = record{
		kind:      recordKind(b[4]),
		dir:       b[5],
		reception: b[6],
		iface:     binary.LittleEndian.Uint32(b[8:]),
		ts:        int64(binary.LittleEndian.Uint64(b[16:])),
		data:      b[recordHeaderLen : recordHeaderLen+dl : recordHeaderLen+dl],
	}
	next = off + n
	if r.wrapped && next == r.end {
		next = 0
	}
	return rec, next
}

// front returns the oldest record. The ring must not be empty.
func (r *ring) front() record {
	rec, _ := r.at(r.head)
	return rec
}

// pop discards the oldest record.
func (r *ring) pop() {
	rec, next := r.at(r.head)
	r.dataBytes -= len(rec.data)
	r.count--
	if r.wrapped && next == 0 {
		r.wrapped = false
	}
	r.head = next
	if r.count == 0 {
		r.head, r.tail, r.wrapped = 0, 0, false
	}
}

// each calls fn for every record, oldest first.
func (r *ring) each(fn func(record)) {
	off := r.head
	for range r.count {
		rec, next := r.at(off)
		fn(rec)
		off = next
	}
}

// snapshot returns a ring holding a copy of r's records.
func (r *ring) snapshot() *ring {
	c := *r
	c.buf = append([]byte(nil), r.buf...)
	return &c
}

// receptionType classifies an Ethernet frame by its destination address,
// as the pcapng EPB flags word does (bits 2-4).
func receptionType(frame []byte) uint8 {
	if len(frame) < 6 {
		return 0
	}
	if frame[0]&1 == 0 {
		return 1 // unicast
	}
	if frame[0]&frame[1]&frame[2]&frame[3]&frame[4]&frame[5] == 0xff {
		return 3 // broadcast
	}
	return 2 // multicast
}
