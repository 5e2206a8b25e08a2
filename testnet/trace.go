package testnet

import (
	"encoding/binary"
	"fmt"
	"time"
)

// EventKind says what happened to a frame.
type EventKind uint8

const (
	// EventSend: From handed the frame to the segment.
	EventSend EventKind = iota + 1
	// EventDeliver: the frame landed in To's receive queue.
	EventDeliver
	// EventDrop: the frame was lost; Reason says why. To is -1 when it was
	// lost on the sending side (Out), before any receiver was chosen.
	EventDrop
	// EventDuplicate: an extra copy of the frame was made.
	EventDuplicate
	// EventCorrupt: a byte of the frame was flipped; Frame is the corrupted
	// copy.
	EventCorrupt
	// EventReorder: the frame was held back so later frames overtake it.
	EventReorder
)

func (k EventKind) String() string {
	switch k {
	case EventSend:
		return "send"
	case EventDeliver:
		return "deliver"
	case EventDrop:
		return "drop"
	case EventDuplicate:
		return "duplicate"
	case EventCorrupt:
		return "corrupt"
	case EventReorder:
		return "reorder"
	}
	return fmt.Sprintf("EventKind(%d)", uint8(k))
}

// DropReason says why a frame was lost.
type DropReason uint8

const (
	DropNone      DropReason = iota
	DropLoss                 // Impairment.Loss
	DropBurst                // Impairment.Burst (Gilbert–Elliott)
	DropOverflow             // the receive queue was full
	DropPartition            // sender and receiver are in different partitions
	DropCrashed              // the receiver is crashed or closed
)

func (r DropReason) String() string {
	switch r {
	case DropNone:
		return "none"
	case DropLoss:
		return "loss"
	case DropBurst:
		return "burst"
	case DropOverflow:
		return "overflow"
	case DropPartition:
		return "partition"
	case DropCrashed:
		return "crashed"
	}
	return fmt.Sprintf("DropReason(%d)", uint8(r))
}

// Event is one traced happening on the segment.
type Event struct {
	Time   time.Time
	Kind   EventKind
	Reason DropReason // for EventDrop
	// Dir is the side whose impairment or state caused the event (Out for
	// EventSend).
	Dir Direction
	// From and To are endpoint indexes (Endpoint.Index); To is -1 for
	// events on the sending side.
	From, To int
	// Frame is the frame's bytes. It is only valid during the callback.
	Frame []byte
}

func (ev Event) String() string {
	s := fmt.Sprintf("%s %s %d->%d %s len=%d", ev.Time.Format("15:04:05.000000000"), ev.Kind, ev.From, ev.To, ev.Dir, len(ev.Frame))
	if ev.Kind == EventDrop {
		s += " reason=" + ev.Reason.String()
	}
	return s
}

// Trace registers fn to be called, synchronously, for every event from now
// on. Several tracers may be registered; they run in registration order.
func (n *Network) Trace(fn func(Event)) { n.tracers = append(n.tracers, fn) }

func (n *Network) trace(kind EventKind, reason DropReason, dir Direction, from *Endpoint, to *Endpoint, frame []byte) {
	if len(n.tracers) == 0 {
		return
	}
	ev := Event{Time: n.Now(), Kind: kind, Reason: reason, Dir: dir, From: from.index, To: -1, Frame: frame}
	if to != nil {
		ev.To = to.index
	}
	for _, fn := range n.tracers {
		fn(ev)
	}
}

// TraceHash folds every event of a run, frame bytes included, into one
// 64-bit hash; two runs are identical, frame for frame, when their hashes
// are (up to collisions, which do not matter for a regression check). Use it
// as n.Trace(h.Add). The hash is FNV-1a over 64-bit little-endian words
// rather than bytes, eight times faster; an xorshift after each multiply
// folds high bits back down, which a plain word-wise multiply would never
// do.
type TraceHash struct {
	sum    uint64
	events uint64
}

// NewTraceHash returns an empty hash.
func NewTraceHash() *TraceHash { return &TraceHash{sum: fnvOffset} }

const (
	fnvOffset = 14695981039346656037
	fnvPrime  = 1099511628211
)

func (h *TraceHash) write(b []byte) {
	s := h.sum
	for len(b) >= 8 {
		s ^= binary.LittleEndian.Uint64(b)
		s *= fnvPrime
		s ^= s >> 32
		b = b[8:]
	}
	for _, c := range b {
		s ^= uint64(c)
		s *= fnvPrime
	}
	h.sum = s
}

// Add folds ev into the hash.
func (h *TraceHash) Add(ev Event) {
	var hdr [8 + 4 + 4 + 4 + 4]byte
	binary.LittleEndian.PutUint64(hdr[0:], uint64(ev.Time.UnixNano()))
	hdr[8], hdr[9], hdr[10] = byte(ev.Kind), byte(ev.Reason), byte(ev.Dir)
	binary.LittleEndian.PutUint32(hdr[12:], uint32(ev.From))
	binary.LittleEndian.PutUint32(hdr[16:], uint32(ev.To))
	binary.LittleEndian.PutUint32(hdr[20:], uint32(len(ev.Frame)))
	h.write(hdr[:])
	h.write(ev.Frame)
	h.events++
}

// Sum returns the hash so far.
func (h *TraceHash) Sum() uint64 { return h.sum }

// Events returns how many events were added.
func (h *TraceHash) Events() uint64 { return h.events }

// Counters count what the impairments and the segment did to frames in one
// direction of an endpoint. Out counts frames this endpoint sent (one count
// per frame, whatever the number of receivers); In counts frames addressed
// to it.
type Counters struct {
	Lost        uint64 // DropLoss
	BurstLost   uint64 // DropBurst
	Overflow    uint64 // DropOverflow (In only); also in Stats.KernelDrops
	Partitioned uint64 // DropPartition (In only)
	Crashed     uint64 // DropCrashed (In only)
	Duplicated  uint64
	Corrupted   uint64
	Reordered   uint64
}

// Dropped is the sum of all drop counters.
func (c Counters) Dropped() uint64 {
	return c.Lost + c.BurstLost + c.Overflow + c.Partitioned + c.Crashed
}

func (c Counters) String() string {
	return fmt.Sprintf("lost=%d burst=%d overflow=%d partition=%d crashed=%d dup=%d corrupt=%d reorder=%d",
		c.Lost, c.BurstLost, c.Overflow, c.Partitioned, c.Crashed, c.Duplicated, c.Corrupted, c.Reordered)
}

func (c *Counters) countDrop(r DropReason) {
	switch r {
	case DropLoss:
		c.Lost++
	case DropBurst:
		c.BurstLost++
	case DropOverflow:
		c.Overflow++
	case DropPartition:
		c.Partitioned++
	case DropCrashed:
		c.Crashed++
	}
}
