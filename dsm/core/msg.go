package core

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/rbcast/rbcast/frame"
)

// The DSM messages travel as the payload of reliable broadcast messages,
// one DSM message per reliable message; docs/dsm.md has the layout. All
// integers are big-endian.

// Version is the DSM message format version.
const Version = 1

// Type is a DSM message's type.
type Type uint8

const (
	// TypeSegment announces that its sender attached a segment (created
	// it, or joined it), with the segment's geometry.
	TypeSegment Type = iota + 1
	// TypeUpdate carries a segment's updates, reliable, in the writer's
	// order.
	TypeUpdate
	// TypeUnreliable carries the updates of unreliable writes
	// (DSM_WRT_UNREL): same layout as TypeUpdate.
	TypeUnreliable
	// TypeBarrier announces its sender's arrival at a barrier.
	TypeBarrier
	// TypeLockRequest is a Ricart–Agrawala request for a lock.
	TypeLockRequest
	// TypeLockReply is a Ricart–Agrawala reply ("go ahead") to one request.
	TypeLockReply
	// TypeUpdateBarrier is a TypeUpdate message followed by a barrier
	// arrival (BarrierTrailer bytes: id, seq): the updates, then the
	// Barrier, in one message. A member entering a barrier appends its
	// arrival to its last buffered update when it fits, so that the
	// barrier costs no message (and no frame) of its own.
	TypeUpdateBarrier
	// TypeRefuse tells a process the reliable layer admitted into the
	// running group (Views) after the computation began that it is not a
	// member: the core's members are fixed at start (Refuse).
	TypeRefuse
	// TypeConfirm tells a process whose first view was not the group's
	// founding one that it is a member of the computation: until one
	// comes, it crosses no barrier (Config.Unconfirmed, Confirm).
	TypeConfirm
)

func (t Type) String() string {
	switch t {
	case TypeSegment:
		return "Segment"
	case TypeUpdate:
		return "Update"
	case TypeUnreliable:
		return "Unreliable"
	case TypeBarrier:
		return "Barrier"
	case TypeLockRequest:
		return "LockRequest"
	case TypeLockReply:
		return "LockReply"
	case TypeUpdateBarrier:
		return "UpdateBarrier"
	case TypeRefuse:
		return "Refuse"
	case TypeConfirm:
		return "Confirm"
	}
	return fmt.Sprintf("Type(%d)", uint8(t))
}

// Sizes of the fixed parts.
const (
	headerLen      = 2 // version, type
	SegmentLen     = headerLen + 4 + 4 + 2 + 1
	UpdateHeader   = headerLen + 4 + 2 // key, location size
	RecordHeader   = 4 + 2             // first location, count
	BarrierLen     = headerLen + 4 + 4
	LockRequestLen = headerLen + 4 + 8
	LockReplyLen   = headerLen + 4 + 2 + 8
	RefuseLen      = headerLen + 2 + 4
	ConfirmLen     = headerLen + 2
	// BarrierTrailer is what a barrier arrival adds to an update message
	// (TypeUpdateBarrier): barrier id, seq.
	BarrierTrailer = 4 + 4
	// UpdateOverhead is what an update message with one record spends
	// besides the location's bytes: a location may be at most
	// MaxMessage-UpdateOverhead bytes.
	UpdateOverhead = UpdateHeader + RecordHeader
	// MaxRecord is the most locations one record carries.
	MaxRecord = 0xffff
)

// SeqPartial is the bit of a barrier's seq field that marks a partial
// barrier (EnterPartialBarrier): members check that they entered their
// k-th barrier alike, since only total barriers fix segment memberships.
// Barrier counts stay below it.
const SeqPartial = 1 << 31

// SeqChannel is the bit of a marker's seq field that marks a channel
// barrier (EnterChannelBarrier), which sends no message on the global
// channel: a member that entered its k-th barrier as another kind
// learns it from the marker. Barrier counts stay below it.
const SeqChannel = 1 << 30

// barrierSeq is the seq field of barrier seq.
func barrierSeq(seq uint32, partial, channel bool) uint32 {
	if partial {
		seq |= SeqPartial
	}
	if channel {
		seq |= SeqChannel
	}
	return seq
}

// SegmentFlagCreate marks a Segment message sent by the segment's creator.
const SegmentFlagCreate = 1

// SegmentFlagReadOnly marks a Segment message of a join that will never
// write the segment (Core.JoinReadOnly): under Channels its sender puts
// no marker on the segment's channel, and nobody waits for one.
const SegmentFlagReadOnly = 2

// ErrMessage is wrapped by every decoding error.
var ErrMessage = errors.New("dsm: malformed message")

// MessageError says what was wrong with a message, and where.
type MessageError struct {
	Field  string
	Offset int
	Reason string
}

func (e *MessageError) Error() string {
	return fmt.Sprintf("dsm: malformed message: %s at byte %d: %s", e.Field, e.Offset, e.Reason)
}

func (e *MessageError) Unwrap() error { return ErrMessage }

func msgErr(field string, off int, format string, args ...any) error {
	return &MessageError{Field: field, Offset: off, Reason: fmt.Sprintf(format, args...)}
}

// Message is a decoded DSM message. Records of an update are a view into
// the decoded bytes: valid as long as they are.
type Message struct {
	Type Type

	// Segment, Update, Unreliable
	Key uint32
	// Segment
	Geometry Geometry
	Create   bool
	ReadOnly bool // a join that never writes (SegmentFlagReadOnly)
	// Update, Unreliable, UpdateBarrier: LocationSize is Geometry.LocationSize, records
	// is the validated record area (see Records).
	records []byte

	// Barrier, UpdateBarrier: ID is the program's barrier id, Seq counts
	// the sender's barriers (1 for its first); Partial: the sender entered
	// it as a partial barrier (bit 31 of the seq field, SeqPartial);
	// ChannelBarrier: a marker of a channel barrier (bit 30, SeqChannel).
	ID             int32
	Seq            uint32
	Partial        bool
	ChannelBarrier bool

	// LockRequest, LockReply
	Lock int32
	TS   uint64         // the request's Lamport timestamp
	To   frame.MemberID // LockReply: the requester answered; Refuse, Confirm: the process refused, confirmed

	// Refuse: the barriers its sender had crossed (Seq above is unused).
	Crossed uint32
}

// Record is one run of consecutive locations in an update.
type Record struct {
	Location int
	Data     []byte // Count() locations
	size     int
}

// Count is the number of locations the record sets.
func (r Record) Count() int { return len(r.Data) / r.size }

// Records calls fn for every record of an update message in order.
func (m *Message) Records(fn func(Record)) {
	b, size := m.records, m.Geometry.LocationSize
	for len(b) > 0 {
		loc := int(binary.BigEndian.Uint32(b))
		n := int(binary.BigEndian.Uint16(b[4:])) * size
		fn(Record{Location: loc, Data: b[RecordHeader : RecordHeader+n], size: size})
		b = b[RecordHeader+n:]
	}
}

// Decode parses b, checking every length and field, and returns the
// message; update records are views into b. A message that decodes has
// well-formed records, so applying it cannot fail halfway on its format.
func Decode(b []byte) (Message, error) {
	var m Message
	if len(b) < headerLen {
		return m, msgErr("header", 0, "%d bytes, want at least %d", len(b), headerLen)
	}
	if b[0] != Version {
		return m, msgErr("version", 0, "%d, want %d", b[0], Version)
	}
	m.Type = Type(b[1])
	want := 0
	switch m.Type {
	case TypeSegment:
		want = SegmentLen
	case TypeUpdate, TypeUnreliable, TypeUpdateBarrier:
		want = -1
	case TypeBarrier:
		want = BarrierLen
	case TypeLockRequest:
		want = LockRequestLen
	case TypeLockReply:
		want = LockReplyLen
	case TypeRefuse:
		want = RefuseLen
	case TypeConfirm:
		want = ConfirmLen
	default:
		return m, msgErr("type", 1, "unknown type %d", b[1])
	}
	if want >= 0 && len(b) != want {
		return m, msgErr("length", 0, "%v message is %d bytes, want %d", m.Type, len(b), want)
	}
	p := b[headerLen:]
	switch m.Type {
	case TypeSegment:
		m.Key = binary.BigEndian.Uint32(p)
		locs := binary.BigEndian.Uint32(p[4:])
		m.Geometry = Geometry{Locations: int(locs), LocationSize: int(binary.BigEndian.Uint16(p[8:]))}
		flags := p[10]
		if locs == 0 || locs > MaxLocations {
			return m, msgErr("locations", 6, "%d, want 1..%d", locs, MaxLocations)
		}
		if m.Geometry.LocationSize == 0 {
			return m, msgErr("location size", 10, "0, want at least 1")
		}
		if unknown := flags &^ (SegmentFlagCreate | SegmentFlagReadOnly); unknown != 0 {
			return m, msgErr("flags", 12, "unknown flags 0x%02x", unknown)
		}
		m.Create, m.ReadOnly = flags&SegmentFlagCreate != 0, flags&SegmentFlagReadOnly != 0
		if m.Create && m.ReadOnly {
			return m, msgErr("flags", 12, "0x%02x: a creator's announcement cannot be read-only", flags)
		}
	case TypeUpdate, TypeUnreliable, TypeUpdateBarrier:
		end, minLen := len(b), UpdateHeader+RecordHeader
		if m.Type == TypeUpdateBarrier {
			end, minLen = len(b)-BarrierTrailer, minLen+BarrierTrailer
		}
		if len(b) < minLen {
			return m, msgErr("length", 0, "%v message is %d bytes, want at least %d", m.Type, len(b), minLen)
		}
		m.Key = binary.BigEndian.Uint32(p)
		size := int(binary.BigEndian.Uint16(p[4:]))
		if size == 0 {
			return m, msgErr("location size", 6, "0, want at least 1")
		}
		m.Geometry.LocationSize = size
		m.records = b[UpdateHeader:end]
		if m.Type == TypeUpdateBarrier {
			m.ID = int32(binary.BigEndian.Uint32(b[end:]))
			m.Seq = binary.BigEndian.Uint32(b[end+4:])
			m.Partial, m.ChannelBarrier, m.Seq = m.Seq&SeqPartial != 0, m.Seq&SeqChannel != 0, m.Seq&^(SeqPartial|SeqChannel)
			if m.Seq == 0 {
				return m, msgErr("barrier seq", end+4, "0, want at least 1")
			}
		}
		for off, r := UpdateHeader, m.records; len(r) > 0; {
			if len(r) < RecordHeader {
				return m, msgErr("record", off, "%d bytes left, want a %d-byte record header", len(r), RecordHeader)
			}
			loc := binary.BigEndian.Uint32(r)
			count := int(binary.BigEndian.Uint16(r[4:]))
			if count == 0 {
				return m, msgErr("record count", off+4, "0, want at least 1")
			}
			if uint64(loc)+uint64(count) > MaxLocations {
				return m, msgErr("record location", off, "locations %d..%d pass the largest segment (%d locations)", loc, uint64(loc)+uint64(count)-1, MaxLocations)
			}
			n := count * size
			if len(r)-RecordHeader < n {
				return m, msgErr("record data", off+RecordHeader, "%d locations of %d bytes need %d bytes, %d left", count, size, n, len(r)-RecordHeader)
			}
			off += RecordHeader + n
			r = r[RecordHeader+n:]
		}
	case TypeBarrier:
		m.ID = int32(binary.BigEndian.Uint32(p))
		m.Seq = binary.BigEndian.Uint32(p[4:])
		m.Partial, m.ChannelBarrier, m.Seq = m.Seq&SeqPartial != 0, m.Seq&SeqChannel != 0, m.Seq&^(SeqPartial|SeqChannel)
		if m.Seq == 0 {
			return m, msgErr("barrier seq", 6, "0, want at least 1")
		}
	case TypeLockRequest:
		m.Lock = int32(binary.BigEndian.Uint32(p))
		m.TS = binary.BigEndian.Uint64(p[4:])
	case TypeLockReply:
		m.Lock = int32(binary.BigEndian.Uint32(p))
		m.To = frame.MemberID(binary.BigEndian.Uint16(p[4:]))
		m.TS = binary.BigEndian.Uint64(p[6:])
	case TypeRefuse:
		m.To = frame.MemberID(binary.BigEndian.Uint16(p))
		m.Crossed = binary.BigEndian.Uint32(p[2:])
	case TypeConfirm:
		m.To = frame.MemberID(binary.BigEndian.Uint16(p))
	}
	return m, nil
}

// MaxLocations is the most locations a segment has (location numbers
// travel as 32-bit values; this keeps loc+count from wrapping).
const MaxLocations = 1 << 31

func appendHeader(b []byte, t Type) []byte { return append(b, Version, byte(t)) }

// AppendSegment appends a Segment message.
func AppendSegment(b []byte, key uint32, g Geometry, create bool) []byte {
	var flags byte
	if create {
		flags |= SegmentFlagCreate
	}
	return appendSegment(b, key, g, flags)
}

// AppendSegmentReadOnly appends the Segment message of a read-only join.
func AppendSegmentReadOnly(b []byte, key uint32, g Geometry) []byte {
	return appendSegment(b, key, g, SegmentFlagReadOnly)
}

func appendSegment(b []byte, key uint32, g Geometry, flags byte) []byte {
	b = appendHeader(b, TypeSegment)
	b = binary.BigEndian.AppendUint32(b, key)
	b = binary.BigEndian.AppendUint32(b, uint32(g.Locations))
	b = binary.BigEndian.AppendUint16(b, uint16(g.LocationSize))
	return append(b, flags)
}

// AppendUpdateHeader appends the header of an update message (t is
// TypeUpdate or TypeUnreliable); records follow with AppendRecord.
func AppendUpdateHeader(b []byte, t Type, key uint32, locationSize int) []byte {
	b = appendHeader(b, t)
	b = binary.BigEndian.AppendUint32(b, key)
	return binary.BigEndian.AppendUint16(b, uint16(locationSize))
}

// AppendRecord appends a record setting len(data)/locationSize locations
// from loc.
func AppendRecord(b []byte, loc int, count int, data []byte) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(loc))
	b = binary.BigEndian.AppendUint16(b, uint16(count))
	return append(b, data...)
}

// AppendBarrier appends a Barrier message (seq's field: SeqPartial set for
// a partial barrier).
func AppendBarrier(b []byte, id int32, seq uint32) []byte {
	b = appendHeader(b, TypeBarrier)
	b = binary.BigEndian.AppendUint32(b, uint32(id))
	return binary.BigEndian.AppendUint32(b, seq)
}

// AppendBarrierTrailer turns the update message b (TypeUpdate) into a
// TypeUpdateBarrier by appending the barrier arrival (id, seq).
func AppendBarrierTrailer(b []byte, id int32, seq uint32) []byte {
	b[1] = byte(TypeUpdateBarrier)
	b = binary.BigEndian.AppendUint32(b, uint32(id))
	return binary.BigEndian.AppendUint32(b, seq)
}

// AppendLockRequest appends a LockRequest message.
func AppendLockRequest(b []byte, lock int32, ts uint64) []byte {
	b = appendHeader(b, TypeLockRequest)
	b = binary.BigEndian.AppendUint32(b, uint32(lock))
	return binary.BigEndian.AppendUint64(b, ts)
}

// AppendLockReply appends a LockReply message answering to's request ts.
func AppendLockReply(b []byte, lock int32, to frame.MemberID, ts uint64) []byte {
	b = appendHeader(b, TypeLockReply)
	b = binary.BigEndian.AppendUint32(b, uint32(lock))
	b = binary.BigEndian.AppendUint16(b, uint16(to))
	return binary.BigEndian.AppendUint64(b, ts)
}

// AppendRefuse appends a Refuse message telling process to that it is
// not a member of the computation, whose sender has crossed crossed
// barriers.
func AppendRefuse(b []byte, to frame.MemberID, crossed uint32) []byte {
	b = appendHeader(b, TypeRefuse)
	b = binary.BigEndian.AppendUint16(b, uint16(to))
	return binary.BigEndian.AppendUint32(b, crossed)
}

// AppendConfirm appends a Confirm message telling process to that it is
// a member of the computation.
func AppendConfirm(b []byte, to frame.MemberID) []byte {
	b = appendHeader(b, TypeConfirm)
	return binary.BigEndian.AppendUint16(b, uint16(to))
}

// Append re-encodes a decoded message (the inverse of Decode).
func (m *Message) Append(b []byte) []byte {
	switch m.Type {
	case TypeSegment:
		if m.ReadOnly {
			return AppendSegmentReadOnly(b, m.Key, m.Geometry)
		}
		return AppendSegment(b, m.Key, m.Geometry, m.Create)
	case TypeUpdate, TypeUnreliable:
		b = AppendUpdateHeader(b, m.Type, m.Key, m.Geometry.LocationSize)
		return append(b, m.records...)
	case TypeUpdateBarrier:
		b = AppendUpdateHeader(b, TypeUpdateBarrier, m.Key, m.Geometry.LocationSize)
		b = append(b, m.records...)
		b = binary.BigEndian.AppendUint32(b, uint32(m.ID))
		return binary.BigEndian.AppendUint32(b, barrierSeq(m.Seq, m.Partial, m.ChannelBarrier))
	case TypeBarrier:
		return AppendBarrier(b, m.ID, barrierSeq(m.Seq, m.Partial, m.ChannelBarrier))
	case TypeLockRequest:
		return AppendLockRequest(b, m.Lock, m.TS)
	case TypeLockReply:
		return AppendLockReply(b, m.Lock, m.To, m.TS)
	case TypeRefuse:
		return AppendRefuse(b, m.To, m.Crossed)
	case TypeConfirm:
		return AppendConfirm(b, m.To)
	}
	return b
}
