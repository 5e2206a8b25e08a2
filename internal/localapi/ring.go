package localapi

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync/atomic"
	"unsafe"
)

// A ring is a single-producer, single-consumer queue of messages in memory
// that the daemon and one client share (local API version 2,
// docs/local-api.md, "Rings"): the send ring carries a client's messages
// to the daemon, the deliver ring the group's deliveries to a subscriber,
// without a system call or a copy through the kernel per packet. The
// memory is a memfd the daemon creates, sized, sealed against shrinking
// and growing, and passes over the socket. Either side may be hostile to
// the other: each keeps its own index to itself and checks the other's,
// and every record is checked before it is used; what is wrong is a
// *RingError naming the ring, the position and the fault, never a panic.
//
// Layout: a header page, then the data area of Size bytes (a power of
// two). In the header, at byte offsets, each on a cache line of its own:
//
//	 64  head       uint64  bytes the producer has published, ever
//	128  tail       uint64  bytes the consumer has released, ever
//	192  wantData   uint32  1: the consumer sleeps until the producer rings
//	256  wantSpace  uint32  1: the producer sleeps until the consumer rings
//
// (native byte order: both ends run on one host). Records follow each
// other from data offset head mod Size; each is an 8-byte header, little
// endian — len uint32, from uint16, kind uint16 — then len bytes of data,
// padded to a multiple of 8. A record never wraps: where the next one
// would not fit before the end of the area, a padding record (kind 1)
// fills the rest and the next starts at offset 0. head − tail ≤ Size
// always.
//
// Sleeping and waking: a consumer that finds the ring empty sets
// wantData, looks again, and only then waits for a Doorbell on the socket;
// a producer that publishes and finds wantData set clears it and sends
// the Doorbell. A consumer that polls (Waiting) leaves wantData clear,
// so the producer publishes without one. Space is the same the other way
// round (wantSpace). The flags and indices are read and written with
// sequentially consistent atomics, so one of the two always sees the
// other's store.

// Ring header offsets and sizes.
const (
	RingHeader   = 4096 // bytes before the data area
	offHead      = 64
	offTail      = 128
	offWantData  = 192
	offWantSpace = 256

	RecordHeader = 8 // len u32, from u16, kind u16
	kindMessage  = 0
	kindPad      = 1

	// MinRing and MaxRing bound a ring's data area.
	MinRing = 64 << 10
	MaxRing = 64 << 20
	// DefaultRing is the data area the clients ask for.
	DefaultRing = 4 << 20
)

// Ring names, the ring byte of RingSetup, RingReady and Doorbell.
const (
	RingSend    uint8 = 0 // client → daemon: messages to broadcast
	RingDeliver uint8 = 1 // daemon → client: delivered messages
)

// RingError says what is wrong with a ring's shared state, and where.
type RingError struct {
	Ring   uint8  // RingSend or RingDeliver
	Pos    uint64 // the position (bytes since the start) of the fault
	Reason string
}

func (e *RingError) Error() string {
	return fmt.Sprintf("localapi: %s ring corrupt at position %d: %s", ringName(e.Ring), e.Pos, e.Reason)
}

// ErrRingFull is returned by Reserve when the ring has no room now.
var ErrRingFull = errors.New("localapi: ring full")

// ErrRecordTooLarge is Add's and Reserve's error for a record larger
// than half the ring's data area: it never fits (RingFor).
var ErrRecordTooLarge = errors.New("localapi: record larger than the ring takes")

func ringName(r uint8) string {
	switch r {
	case RingSend:
		return "send"
	case RingDeliver:
		return "deliver"
	}
	return fmt.Sprintf("ring(%d)", r)
}

// Ring is one end (producer or consumer) of a ring over shared memory.
// A Ring is used by one goroutine at a time.
type Ring struct {
	which     uint8
	mem       []byte // the mapping: header, then data
	data      []byte
	size      uint64 // a power of two (RingSize): offsets are pos&(size-1)
	head      *atomic.Uint64
	tail      *atomic.Uint64
	wantData  *atomic.Uint32
	wantSpace *atomic.Uint32
	maxLen    int // the longest record a consumer accepts

	// pos is this end's own index (the producer's head, the consumer's
	// position), never read back from the shared memory; other is the
	// other end's index as last read and checked.
	pos   uint64
	other uint64
}

// RingSize checks a ring's data area size and returns the mapping's
// length.
func RingSize(size int) (int, error) {
	if size < MinRing || size > MaxRing || size&(size-1) != 0 {
		return 0, fmt.Errorf("ring size %d bytes: want a power of two from %d to %d", size, MinRing, MaxRing)
	}
	return RingHeader + size, nil
}

// RingFor is the smallest ring data area (MinRing at least, a power of
// two) that holds a message of maxMessage bytes: a ring takes records of
// up to half its data area. 0 when no ring does (beyond MaxRing).
func RingFor(maxMessage int) int {
	size := MinRing
	for uint64(size/2) < recordLen(maxMessage) {
		if size *= 2; size > MaxRing {
			return 0
		}
	}
	return size
}

// NewRing returns an end of the ring in mem (a whole mapping, header and
// data: RingSize's length, page-aligned so that the indices are aligned).
// maxLen bounds the records a consumer accepts.
func NewRing(which uint8, mem []byte, maxLen int) (*Ring, error) {
	if len(mem) <= RingHeader {
		return nil, fmt.Errorf("ring mapping of %d bytes: no data area", len(mem))
	}
	size := len(mem) - RingHeader
	if _, err := RingSize(size); err != nil {
		return nil, err
	}
	if uintptr(unsafe.Pointer(&mem[0]))%64 != 0 {
		return nil, errors.New("ring mapping not aligned to 64 bytes")
	}
	r := &Ring{which: which, mem: mem, data: mem[RingHeader:], size: uint64(size), maxLen: maxLen,
		head:      (*atomic.Uint64)(unsafe.Pointer(&mem[offHead])),
		tail:      (*atomic.Uint64)(unsafe.Pointer(&mem[offTail])),
		wantData:  (*atomic.Uint32)(unsafe.Pointer(&mem[offWantData])),
		wantSpace: (*atomic.Uint32)(unsafe.Pointer(&mem[offWantSpace])),
	}
	return r, nil
}

// Size is the ring's data area in bytes.
func (r *Ring) Size() int { return int(r.size) }

func (r *Ring) fault(pos uint64, format string, args ...any) error {
	return &RingError{Ring: r.which, Pos: pos, Reason: fmt.Sprintf(format, args...)}
}

func align8(n uint64) uint64 { return (n + 7) &^ 7 }

// recordLen is a record's length in the ring, header and padding
// included.
func recordLen(n int) uint64 { return align8(RecordHeader + uint64(n)) }

// --- the producer ---------------------------------------------------

// consumed reads and checks the consumer's tail: it never moves back
// and never passes what was published.
func (r *Ring) consumed() (uint64, error) {
	t := r.tail.Load()
	if t < r.other || t > r.pos {
		return 0, r.fault(t, "the consumer's index %d is outside %d..%d", t, r.other, r.pos)
	}
	r.other = t
	return t, nil
}

// Reserve returns room for up to k records of n bytes of data each, one
// after the other without wrapping, appended to slots[:0] (at least one,
// or ErrRingFull when the ring has no room for one now): slot i is the
// i-th record's data. Commit then adds them in order. A padding record to
// the end of the area goes first where a record would not fit there.
func (r *Ring) Reserve(slots [][]byte, n, k int) ([][]byte, error) {
	off, fit, err := r.room(n, k)
	if err != nil {
		return slots[:0], err
	}
	rec := recordLen(n)
	slots = slots[:0]
	for i := range fit {
		s := off + i*rec + RecordHeader
		slots = append(slots, r.data[s:s+uint64(n):s+uint64(n)])
	}
	return slots, nil
}

// room finds room for up to k records of n bytes at the producer's
// position (after a padding record, which it writes, if need be): the
// data offset of the first and how many fit.
func (r *Ring) room(n, k int) (off, fit uint64, err error) {
	rec := recordLen(n)
	if n < 0 || rec > r.size/2 {
		return 0, 0, fmt.Errorf("%w: a record of %d bytes does not fit a ring of %d", ErrRecordTooLarge, n, r.size)
	}
	off = r.pos & (r.size - 1)
	pad := uint64(0)
	if off+rec > r.size {
		pad = r.size - off
	}
	// The tail last read is a lower bound of the consumer's: read it
	// again (an atomic load of a line the consumer writes) only when
	// that does not leave room enough.
	free := r.size - (r.pos - r.other)
	if pad+rec > free {
		t, err := r.consumed()
		if err != nil {
			return 0, 0, err
		}
		if free = r.size - (r.pos - t); pad+rec > free {
			return 0, 0, ErrRingFull
		}
	}
	if pad > 0 {
		r.putHeader(off, uint32(pad-RecordHeader), 0, kindPad)
		r.pos += pad
		off = 0
		free -= pad
	}
	if k <= 1 {
		return off, 1, nil // without the divisions: one record fits
	}
	return off, max(1, min(uint64(k), free/rec, (r.size-off)/rec)), nil
}

// Commit adds the next reserved record, with k bytes of data (at most
// what was reserved for it) from sender from; Publish makes the records
// committed so far visible to the consumer. Records are laid out as
// their lengths say, so every slot of a Reserve but the last committed
// must be full: after a shorter one, Reserve again.
func (r *Ring) Commit(from uint16, k int) {
	off := r.pos & (r.size - 1)
	r.putHeader(off, uint32(k), from, kindMessage)
	end := off + RecordHeader + uint64(k)
	if end&7 != 0 {
		clear(r.data[end:min(align8(end), r.size)]) // the padding to 8, not stale bytes
	}
	r.pos += recordLen(k)
}

// Add copies d into the ring as one record (ErrRingFull: no room now).
func (r *Ring) Add(from uint16, d []byte) error {
	off, _, err := r.room(len(d), 1)
	if err != nil {
		return err
	}
	copy(r.data[off+RecordHeader:], d)
	r.Commit(from, len(d))
	return nil
}

func (r *Ring) putHeader(off uint64, n uint32, from, kind uint16) {
	h := r.data[off : off+RecordHeader]
	binary.LittleEndian.PutUint32(h, n)
	binary.LittleEndian.PutUint16(h[4:], from)
	binary.LittleEndian.PutUint16(h[6:], kind)
}

// Publish makes every committed record visible to the consumer, and
// reports whether the consumer sleeps and must be rung (a Doorbell).
func (r *Ring) Publish() (ring bool) {
	r.head.Store(r.pos)
	return r.wantData.Load() != 0 && r.wantData.CompareAndSwap(1, 0)
}

// Published is how much the producer has published, ever (its own index).
func (r *Ring) Published() uint64 { return r.pos }

// WaitSpace prepares the producer to sleep for room for a record of n
// bytes: it sets wantSpace and looks again. False means there is room
// now (wantSpace is cleared again); true, that the producer may sleep
// until a Doorbell.
func (r *Ring) WaitSpace(n int) (bool, error) {
	r.wantSpace.Store(1)
	t, err := r.consumed()
	if err != nil {
		return false, err
	}
	rec := recordLen(n)
	off := r.pos & (r.size - 1)
	need := rec
	if off+rec > r.size {
		need += r.size - off
	}
	if need <= r.size-(r.pos-t) {
		r.wantSpace.CompareAndSwap(1, 0)
		return false, nil
	}
	return true, nil
}

// --- the consumer ---------------------------------------------------

// published reads and checks the producer's head: it never moves back
// and never runs more than the ring's size ahead.
func (r *Ring) published() (uint64, error) {
	h := r.head.Load()
	if h < r.other || h-r.pos > r.size {
		return 0, r.fault(h, "the producer's index %d is outside %d..%d", h, max(r.other, r.pos), r.pos+r.size)
	}
	r.other = h
	return h, nil
}

// Next returns the next record's sender and data, ok false when the ring
// is empty. The data is in the shared memory (the producer may not touch
// it, and a hostile one that does only changes its own message): it is
// valid until Release.
func (r *Ring) Next() (from uint16, data []byte, ok bool, err error) {
	for {
		// The head last read bounds what may be read; read it again
		// (an atomic load of a line the producer writes) only once
		// everything up to it is read.
		h := r.other
		if h == r.pos {
			if h, err = r.published(); err != nil {
				return 0, nil, false, err
			}
			if h == r.pos {
				return 0, nil, false, nil
			}
		}
		off := r.pos & (r.size - 1)
		avail := h - r.pos
		if avail < RecordHeader || r.size-off < RecordHeader {
			return 0, nil, false, r.fault(r.pos, "%d bytes published, not a whole record header", avail)
		}
		hd := r.data[off : off+RecordHeader]
		n := uint64(binary.LittleEndian.Uint32(hd))
		from = binary.LittleEndian.Uint16(hd[4:])
		kind := binary.LittleEndian.Uint16(hd[6:])
		switch kind {
		case kindPad:
			if off+RecordHeader+n != r.size {
				return 0, nil, false, r.fault(r.pos, "padding of %d bytes does not end at the end of the ring", n)
			}
			if RecordHeader+n > avail {
				return 0, nil, false, r.fault(r.pos, "padding of %d bytes, only %d published", n, avail-RecordHeader)
			}
			r.pos += RecordHeader + n
			continue
		case kindMessage:
		default:
			return 0, nil, false, r.fault(r.pos, "record kind %d, want 0 (message) or 1 (padding)", kind)
		}
		rec := align8(RecordHeader + n)
		switch {
		case n > uint64(r.maxLen):
			return 0, nil, false, r.fault(r.pos, "message of %d bytes, at most %d", n, r.maxLen)
		case rec > avail:
			return 0, nil, false, r.fault(r.pos, "message of %d bytes, only %d published", n, avail-RecordHeader)
		case off+rec > r.size:
			return 0, nil, false, r.fault(r.pos, "message of %d bytes runs past the end of the ring", n)
		}
		s := off + RecordHeader
		r.pos += rec
		return from, r.data[s : s+n : s+n], true, nil
	}
}

// Release frees every record Next returned so far, and reports whether
// the producer sleeps for room and must be rung (a Doorbell).
func (r *Ring) Release() (ring bool) {
	r.tail.Store(r.pos)
	return r.wantSpace.Load() != 0 && r.wantSpace.CompareAndSwap(1, 0)
}

// ReleaseFree is Release for a consumer that goes on reading: it frees
// what was read, and rings only a producer that sleeps for room once
// room of at least free bytes waits for it (by the producer's index,
// read anew when the producer sleeps), not for every record it frees. A
// producer asleep on a full ring is then woken once per that much room,
// not once per release. A consumer that stops reading must Release,
// which rings whatever room there is.
func (r *Ring) ReleaseFree(free int) (ring bool) {
	r.tail.Store(r.pos)
	if r.wantSpace.Load() == 0 {
		return false
	}
	if h, err := r.published(); err == nil && r.size-(h-r.pos) < uint64(free) {
		return false
	}
	return r.wantSpace.CompareAndSwap(1, 0)
}

// Waiting reports whether a record may wait to be read (the consumer,
// polling: one atomic load of the producer's index, which Next checks).
// It leaves wantData alone, so that a producer that publishes meanwhile
// sends no Doorbell.
func (r *Ring) Waiting() bool {
	return r.other != r.pos || r.head.Load() != r.pos
}

// Unread reports whether the consumer knows of published bytes it has
// not read yet (without looking at the producer's index again): false
// means the next Next reads the index anew.
func (r *Ring) Unread() bool { return r.other != r.pos }

// WaitData prepares the consumer to sleep: it sets wantData and looks
// again. False means a record waits now (wantData is cleared again);
// true, that the consumer may sleep until a Doorbell.
func (r *Ring) WaitData() (bool, error) {
	r.wantData.Store(1)
	h, err := r.published()
	if err != nil {
		return false, err
	}
	if h != r.pos {
		r.wantData.CompareAndSwap(1, 0)
		return false, nil
	}
	return true, nil
}
