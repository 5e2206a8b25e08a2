// Package core is BDSM's protocol logic as a deterministic state machine
// (DESIGN.md, decision 1): segment memory and the application of updates,
// per-segment write buffers, barrier counting and the Ricart–Agrawala lock
// state (Auld, ch. 5). It does no I/O, starts no goroutine, reads no
// clock: the runtime in package dsm feeds it the local program's calls and
// the messages the reliable FIFO broadcast delivers, and sends what it
// queues in its outbox, in order.
//
// The ordering the model needs comes from one rule: every message this
// member sends leaves through one FIFO outbox, and every segment's buffer
// is flushed into it before any Barrier, LockRequest or LockReply is
// queued (thesis §5.1.1). With the reliable layer's per-sender FIFO
// delivery, a member that has a peer's barrier or lock message has every
// update that peer wrote before it.
package core

import (
	"encoding/binary"
	"fmt"
	"slices"

	"github.com/rbcast/rbcast/frame"
)

// Counters are a core's statistics.
type Counters struct {
	Writes, Updates, UpdateBytes        uint64
	UnreliableWrites, UnreliableUpdates uint64
	Barriers, LockRequests, LockReplies uint64
	Applied, AppliedUpdates             uint64
	Messages, Bytes                     uint64
	BadMessages                         uint64
}

// Config describes a core.
type Config struct {
	Self frame.MemberID
	// Members are the group's members at start, Self included.
	Members []frame.MemberID
	// MaxMessage is the largest message the reliable layer carries.
	MaxMessage int
	// Unbuffered sends every write at once in a message of its own.
	Unbuffered bool
	// MaxSegment bounds a segment's memory in bytes, the local program's
	// and the ones peers announce (a hostile announcement must not make
	// this member allocate without bound); 0 means DefaultMaxSegment.
	MaxSegment int
	// Trace, when set, is called for every event of the thesis's model
	// (§2.2.2.1) as it happens here; tests check the axioms on these
	// histories.
	Trace func(Event)
	// Alloc returns the zeroed memory of a segment; nil means make. (The
	// runtime allocates 8-byte aligned memory so that it can offer typed
	// views.)
	Alloc func(n int) []byte
}

// EventKind names an event of the model.
type EventKind uint8

const (
	EvWrite        EventKind = iota + 1 // w: a local write (Key, Location, Data)
	EvUpdate                            // u: a peer's write applied here (From, Key, Location, Data)
	EvBarrierEnter                      // Self arrived at barrier ID (Seq)
	EvBarrierPass                       // b: Self crossed barrier ID (Seq)
	EvLockRequest                       // Self requested Lock at TS
	EvLockAcquire                       // a: Self acquired Lock (TS its request's)
	EvLockPermit                        // a at a peer: Self let To acquire Lock (request TS)
	EvLockRelease                       // v: Self released Lock
)

// Event is one event of a member's history. Data is valid only during
// the Trace call.
type Event struct {
	Kind     EventKind
	From     frame.MemberID // EvUpdate: the writer
	To       frame.MemberID // EvLockPermit: the requester
	Key      uint32
	Location int
	Data     []byte
	ID       int32  // barrier id
	Seq      uint32 // barrier number
	Lock     int32
	TS       uint64
}

// DefaultMaxSegment is the default bound of a segment's memory: 1 GiB.
const DefaultMaxSegment = 1 << 30

type lockState uint8

const (
	lockIdle lockState = iota
	lockRequesting
	lockHeld
)

// peer is what the core tracks of another member.
type peer struct {
	id   frame.MemberID
	live bool
	// barriers counts the Barrier messages received from it; barrierIDs
	// holds the ids of the last two, indexed by seq&1 (it can be at most
	// one barrier ahead of this member: the thesis's alternating bit).
	barriers   uint32
	barrierIDs [2]int32
	// replied: it answered this member's current lock request.
	replied bool
}

// deferred is a lock request answered only at Unlock.
type deferred struct {
	from frame.MemberID
	lock int32
	ts   uint64
}

// Core is one member's BDSM state.
type Core struct {
	self     frame.MemberID
	rank     int
	size     int
	max      int
	buffered bool
	alloc    func(n int) []byte
	maxSeg   int
	trace    func(Event)
	peers    []*peer // sorted by id, Self excluded
	segs     map[uint32]*Segment

	out  [][]byte // outbox: out[head:], oldest first
	head int
	// taken: Next handed out out[head] and Sent has not come yet.
	taken bool
	free  [][]byte
	keys  []uint32 // the segments' keys in order, for flushing

	// Barrier: barriers entered by Self; waiting while in one.
	barriers  uint32
	barrierID int32
	inBarrier bool

	// Lock: Ricart–Agrawala state of the one lock Self may hold.
	clock    uint64 // Lamport clock: the highest timestamp seen
	lock     lockState
	lockID   int32
	lockTS   uint64
	abandon  bool // the requester gave up: release when granted
	deferred []deferred

	c Counters
}

// New returns the core of cfg.Self.
func New(cfg Config) (*Core, error) {
	if cfg.MaxMessage < UpdateOverhead+1 {
		return nil, fmt.Errorf("dsm: MaxMessage is %d, want at least %d", cfg.MaxMessage, UpdateOverhead+1)
	}
	ids := slices.Clone(cfg.Members)
	slices.Sort(ids)
	ids = slices.Compact(ids)
	c := &Core{self: cfg.Self, max: cfg.MaxMessage, buffered: !cfg.Unbuffered, alloc: cfg.Alloc, segs: map[uint32]*Segment{}, rank: -1, size: len(ids)}
	c.trace = cfg.Trace
	c.maxSeg = cfg.MaxSegment
	if c.maxSeg <= 0 {
		c.maxSeg = DefaultMaxSegment
	}
	if c.alloc == nil {
		c.alloc = func(n int) []byte { return make([]byte, n) }
	}
	for i, id := range ids {
		if id == cfg.Self {
			c.rank = i
			continue
		}
		c.peers = append(c.peers, &peer{id: id, live: true})
	}
	if c.rank < 0 {
		return nil, fmt.Errorf("dsm: Self (member %d) is not among Members %v", cfg.Self, ids)
	}
	return c, nil
}

// Rank is Self's index among the members ordered by id.
func (c *Core) Rank() int { return c.rank }

// Size is the number of members at start.
func (c *Core) Size() int { return c.size }

// MaxMessage is the largest message the core queues.
func (c *Core) MaxMessage() int { return c.max }

// Counters returns the core's statistics.
func (c *Core) Counters() Counters { return c.c }

func (c *Core) peer(id frame.MemberID) *peer {
	i, ok := slices.BinarySearchFunc(c.peers, id, func(p *peer, id frame.MemberID) int { return int(p.id) - int(id) })
	if !ok {
		return nil
	}
	return c.peers[i]
}

// Outbox

func (c *Core) buffer() []byte {
	if n := len(c.free); n > 0 {
		b := c.free[n-1]
		c.free = c.free[:n-1]
		return b[:0]
	}
	return make([]byte, 0, c.max)
}

func (c *Core) queue(b []byte) {
	c.out = append(c.out, b)
	c.c.Messages++
	c.c.Bytes += uint64(len(b))
}

// Pending is the number of messages in the outbox.
func (c *Core) Pending() int { return len(c.out) - c.head }

// Next returns the oldest message of the outbox without removing it.
func (c *Core) Next() ([]byte, bool) {
	if c.head == len(c.out) {
		return nil, false
	}
	c.taken = true
	return c.out[c.head], true
}

// Sent removes the oldest message from the outbox once it has been handed
// to the reliable layer (which copies it); its buffer is reused.
func (c *Core) Sent() {
	if c.head == len(c.out) {
		return
	}
	b := c.out[c.head]
	c.out[c.head] = nil
	c.head++
	c.taken = false
	if c.head == len(c.out) {
		c.out, c.head = c.out[:0], 0
	}
	if cap(b) == c.max && len(c.free) < 64 {
		c.free = append(c.free, b)
	}
}

// Unreliable reports whether msg (from Next) carries unreliable writes.
func Unreliable(msg []byte) bool { return len(msg) > 1 && Type(msg[1]) == TypeUnreliable }

// OnlyUpdates reports whether receiving msg can change nothing but segment
// memory (an Update or Unreliable message): no barrier, lock or segment
// state, nothing queued.
func OnlyUpdates(msg []byte) bool {
	return len(msg) > 1 && (Type(msg[1]) == TypeUpdate || Type(msg[1]) == TypeUnreliable)
}

// FlushAll queues every segment's buffered writes (before any
// synchronisation message, and at exit).
func (c *Core) FlushAll() {
	for _, key := range c.keys {
		c.segs[key].flush(c)
	}
}

// addSegment records a new segment; keys stay sorted so that flushing
// is deterministic.
func (c *Core) addSegment(s *Segment) {
	c.segs[s.key] = s
	i, _ := slices.BinarySearch(c.keys, s.key)
	c.keys = slices.Insert(c.keys, i, s.key)
}

// Receive handles one message delivered by the reliable layer from a peer:
// updates are applied from msg straight into segment memory, barrier and
// lock messages change the synchronisation state (and may queue replies).
// A message that does not decode, or does not fit what it names, changes
// nothing and is counted in BadMessages; the error says why.
func (c *Core) Receive(from frame.MemberID, msg []byte) error {
	err := c.receive(from, msg)
	if err != nil {
		c.c.BadMessages++
	}
	return err
}

func (c *Core) receive(from frame.MemberID, msg []byte) error {
	if from == c.self {
		// A totally ordered group delivers this member's own messages
		// too; their effect is already here.
		return nil
	}
	p := c.peer(from)
	if p == nil {
		return fmt.Errorf("dsm: message from member %d, which is not in the group", from)
	}
	m, err := Decode(msg)
	if err != nil {
		return err
	}
	switch m.Type {
	case TypeSegment:
		return c.receiveSegment(from, &m)
	case TypeUpdate, TypeUnreliable:
		return c.receiveUpdate(from, &m)
	case TypeUpdateBarrier:
		// The updates, then the arrival, which counts even when the
		// updates are refused (they would have been a message of their
		// own).
		if m.Seq != p.barriers+1 {
			return fmt.Errorf("dsm: barrier message %d from member %d, want %d (its messages arrive in order)", m.Seq, from, p.barriers+1)
		}
		uerr := c.receiveUpdate(from, &m)
		c.receiveBarrier(p, &m)
		return uerr
	case TypeBarrier:
		return c.receiveBarrier(p, &m)
	case TypeLockRequest:
		c.receiveLockRequest(from, &m)
	case TypeLockReply:
		if m.To == c.self && c.lock == lockRequesting && m.Lock == c.lockID && m.TS == c.lockTS {
			p.replied = true
			c.checkGrant()
		}
	}
	return nil
}

func (c *Core) receiveBarrier(p *peer, m *Message) error {
	if m.Seq != p.barriers+1 {
		return fmt.Errorf("dsm: barrier message %d from member %d, want %d (its messages arrive in order)", m.Seq, p.id, p.barriers+1)
	}
	p.barriers = m.Seq
	p.barrierIDs[m.Seq&1] = m.ID
	return nil
}

// MemberGone removes a member that left or failed: barriers and locks no
// longer wait for it (the reliable layer has delivered everything it
// sent before it went). Replies deferred to it are kept (sent at the
// release, one message each): under reliable.Total a member removed as
// failed can come back (MemberBack) still waiting for them.
func (c *Core) MemberGone(id frame.MemberID) {
	p := c.peer(id)
	if p == nil || !p.live {
		return
	}
	p.live = false
	c.checkGrant()
}

// MemberBack takes back a member MemberGone removed (reliable's
// MemberReturned, Order Total: it missed nothing and is a member again):
// barriers and lock requests wait for it again. What was decided without
// it while it was gone (a barrier crossed, a lock granted) stands.
func (c *Core) MemberBack(id frame.MemberID) {
	if p := c.peer(id); p != nil {
		p.live = true
	}
}

// Live lists the members still in the group, Self included.
func (c *Core) Live() []frame.MemberID {
	out := []frame.MemberID{c.self}
	for _, p := range c.peers {
		if p.live {
			out = append(out, p.id)
		}
	}
	slices.Sort(out)
	return out
}

// Barriers (thesis fig. 5.2)

// EnterBarrier flushes every buffer and queues Self's arrival at barrier
// id. BarrierPassed says when it may be crossed.
func (c *Core) EnterBarrier(id int32) error {
	if c.inBarrier {
		return fmt.Errorf("dsm: barrier %d entered while waiting at barrier %d", id, c.barrierID)
	}
	c.FlushAll()
	c.barriers++
	c.barrierID = id
	c.inBarrier = true
	c.c.Barriers++
	// The arrival rides on the last update just queued when it fits and
	// nobody is sending that message yet (Next hands it out untouched
	// until Sent): the updates and the barrier then cost one message.
	if last := len(c.out) - 1; last >= c.head && (last > c.head || !c.taken) {
		if b := c.out[last]; Type(b[1]) == TypeUpdate && len(b)+BarrierTrailer <= c.max {
			c.out[last] = AppendBarrierTrailer(b, id, c.barriers)
			c.c.Bytes += BarrierTrailer
			c.c.UpdateBytes += BarrierTrailer
			if c.trace != nil {
				c.trace(Event{Kind: EvBarrierEnter, ID: id, Seq: c.barriers})
			}
			return nil
		}
	}
	c.queue(AppendBarrier(c.buffer(), id, c.barriers))
	if c.trace != nil {
		c.trace(Event{Kind: EvBarrierEnter, ID: id, Seq: c.barriers})
	}
	return nil
}

// InBarrier reports whether Self waits at a barrier, and which.
func (c *Core) InBarrier() (int32, bool) { return c.barrierID, c.inBarrier }

// BarrierPassed reports whether every live peer has arrived at the barrier
// Self waits at; once it returns true (or an error) Self is past it. A peer
// whose message for this barrier names another id is an error wrapping
// ErrBarrierMismatch.
func (c *Core) BarrierPassed() (bool, error) {
	if !c.inBarrier {
		return true, nil
	}
	for _, p := range c.peers {
		if !p.live {
			continue
		}
		if p.barriers < c.barriers {
			return false, nil
		}
		if id := p.barrierIDs[c.barriers&1]; id != c.barrierID {
			c.inBarrier = false
			return true, fmt.Errorf("%w: member %d arrived at barrier %d as its barrier number %d, this member at barrier %d", ErrBarrierMismatch, p.id, id, c.barriers, c.barrierID)
		}
	}
	c.inBarrier = false
	if c.trace != nil {
		c.trace(Event{Kind: EvBarrierPass, ID: c.barrierID, Seq: c.barriers})
	}
	return true, nil
}

// Waiting lists the live peers that have not arrived at Self's current
// barrier (for error messages).
func (c *Core) Waiting() []frame.MemberID {
	var out []frame.MemberID
	for _, p := range c.peers {
		if p.live && c.inBarrier && p.barriers < c.barriers {
			out = append(out, p.id)
		}
	}
	return out
}

// Locks: Ricart–Agrawala over broadcast (thesis §5.1.1)

// RequestLock flushes every buffer and queues a request for lock id.
// Holding says when it is granted.
func (c *Core) RequestLock(id int32) error {
	switch c.lock {
	case lockHeld:
		return fmt.Errorf("%w: acquiring lock %d while holding lock %d", ErrSecondLock, id, c.lockID)
	case lockRequesting:
		if c.abandon {
			// A request given up that is still out: it must finish
			// first or the two requests would mix their replies.
			return fmt.Errorf("%w: acquiring lock %d while an abandoned request for lock %d is still answered", ErrSecondLock, id, c.lockID)
		}
		return fmt.Errorf("%w: acquiring lock %d while requesting lock %d", ErrSecondLock, id, c.lockID)
	}
	c.FlushAll()
	c.clock++
	c.lock, c.lockID, c.lockTS, c.abandon = lockRequesting, id, c.clock, false
	for _, p := range c.peers {
		p.replied = false
	}
	c.queue(AppendLockRequest(c.buffer(), id, c.lockTS))
	c.c.LockRequests++
	if c.trace != nil {
		c.trace(Event{Kind: EvLockRequest, Lock: id, TS: c.lockTS})
	}
	c.checkGrant()
	return nil
}

// Holding reports whether Self holds lock id.
func (c *Core) Holding(id int32) bool { return c.lock == lockHeld && c.lockID == id }

// Requesting reports whether Self waits for a lock (abandoned requests
// included).
func (c *Core) Requesting() bool { return c.lock == lockRequesting }

// AbandonLock gives up the current request: the lock is released as soon
// as it is granted (the request cannot be taken back from the peers).
func (c *Core) AbandonLock() {
	if c.lock == lockRequesting {
		c.abandon = true
	}
}

// checkGrant grants the requested lock once every live peer replied.
func (c *Core) checkGrant() {
	if c.lock != lockRequesting {
		return
	}
	for _, p := range c.peers {
		if p.live && !p.replied {
			return
		}
	}
	c.lock = lockHeld
	if c.trace != nil {
		c.trace(Event{Kind: EvLockAcquire, Lock: c.lockID, TS: c.lockTS})
	}
	if c.abandon {
		c.release()
	}
}

// ReleaseAll releases a held lock and gives up a requested one (at exit).
func (c *Core) ReleaseAll() {
	switch c.lock {
	case lockHeld:
		c.release()
	case lockRequesting:
		c.abandon = true
	}
}

// Unlock releases lock id: flush, then answer every deferred request.
func (c *Core) Unlock(id int32) error {
	if c.lock != lockHeld || c.lockID != id {
		if c.lock == lockHeld {
			return fmt.Errorf("%w: releasing lock %d while holding lock %d", ErrNotHeld, id, c.lockID)
		}
		return fmt.Errorf("%w: releasing lock %d, which this member does not hold", ErrNotHeld, id)
	}
	c.release()
	return nil
}

func (c *Core) release() {
	if c.trace != nil {
		c.trace(Event{Kind: EvLockRelease, Lock: c.lockID, TS: c.lockTS})
	}
	c.lock, c.abandon = lockIdle, false
	for _, d := range c.deferred {
		c.reply(d.from, d.lock, d.ts)
	}
	c.deferred = c.deferred[:0]
}

// receiveLockRequest answers at once unless Self holds the lock or
// requested it first ((timestamp, id) order); then it defers the answer.
func (c *Core) receiveLockRequest(from frame.MemberID, m *Message) {
	c.clock = max(c.clock, m.TS)
	contending := c.lock != lockIdle && c.lockID == m.Lock
	first := c.lock == lockHeld || c.lockTS < m.TS || (c.lockTS == m.TS && c.self < from)
	if contending && first {
		c.deferred = append(c.deferred, deferred{from: from, lock: m.Lock, ts: m.TS})
		return
	}
	c.reply(from, m.Lock, m.TS)
}

func (c *Core) reply(to frame.MemberID, lock int32, ts uint64) {
	c.FlushAll()
	c.queue(AppendLockReply(c.buffer(), lock, to, ts))
	c.c.LockReplies++
	if c.trace != nil {
		c.trace(Event{Kind: EvLockPermit, To: to, Lock: lock, TS: ts})
	}
}

// Segments

// Segment is a segment as one member holds it.
type Segment struct {
	key      uint32
	geo      Geometry
	creator  frame.MemberID // 0 until a creator's announcement is seen
	announce frame.MemberID // who announced it first
	mem      []byte
	attached bool // the local program created or joined it
	removed  bool // the local program removed it: updates are ignored

	// buf is the update message being collected (nil when empty); last is
	// the offset of its last record, extended while writes are
	// consecutive.
	buf  []byte
	last int
}

// Key is the segment's key.
func (s *Segment) Key() uint32 { return s.key }

// Geometry is the segment's shape.
func (s *Segment) Geometry() Geometry { return s.geo }

// Memory is the segment's memory (nil once removed).
func (s *Segment) Memory() []byte { return s.mem }

// Attached reports whether the local program holds the segment.
func (s *Segment) Attached() bool { return s.attached && !s.removed }

func (c *Core) newSegment(key uint32, g Geometry) *Segment {
	return &Segment{key: key, geo: g, mem: c.alloc(g.Bytes())}
}

// checkGeometry validates a geometry the local program asks for.
func (c *Core) checkGeometry(g Geometry) error {
	if g.Locations < 1 || g.Locations > MaxLocations {
		return &SizeError{What: "number of locations", Size: g.Locations, Want: fmt.Sprintf("1..%d", MaxLocations)}
	}
	if most := c.max - UpdateOverhead; g.LocationSize < 1 || g.LocationSize > most {
		return &SizeError{What: "location size", Size: g.LocationSize, Want: fmt.Sprintf("1..%d bytes (what one %d-byte message carries after its %d bytes of header)", most, c.max, UpdateOverhead)}
	}
	if g.Bytes() > c.maxSeg {
		return &SizeError{What: fmt.Sprintf("segment of %v", g), Size: g.Bytes(), Want: fmt.Sprintf("at most %d bytes (MaxSegment)", c.maxSeg)}
	}
	return nil
}

// Create creates segment key (DSM_CREATE) and queues its announcement.
func (c *Core) Create(key uint32, g Geometry) (*Segment, error) {
	if err := c.checkGeometry(g); err != nil {
		return nil, err
	}
	if s := c.segs[key]; s != nil {
		switch {
		case s.creator == c.self:
			return nil, fmt.Errorf("%w: segment %d was created by this member", ErrExists, key)
		case s.creator != 0:
			return nil, fmt.Errorf("%w: segment %d was created by member %d (%v)", ErrExists, key, s.creator, s.geo)
		default:
			return nil, fmt.Errorf("%w: segment %d was announced by member %d (%v)", ErrExists, key, s.announce, s.geo)
		}
	}
	s := c.newSegment(key, g)
	s.creator, s.announce, s.attached = c.self, c.self, true
	c.addSegment(s)
	c.queue(AppendSegment(c.buffer(), key, g, true))
	return s, nil
}

// Known reports whether segment key has been announced (by a creator or a
// joiner) so that a join can proceed.
func (c *Core) Known(key uint32) bool { return c.segs[key] != nil }

// Join attaches segment key (DSM_JOIN), which must be Known, checking the
// geometry against the announced one, and queues the announcement of the
// join (peers that see this member's updates before the creator's
// announcement learn the geometry from it).
func (c *Core) Join(key uint32, g Geometry) (*Segment, error) {
	if err := c.checkGeometry(g); err != nil {
		return nil, err
	}
	s := c.segs[key]
	if s == nil {
		return nil, fmt.Errorf("dsm: segment %d has not been created", key)
	}
	if s.geo != g {
		by := s.creator
		if by == 0 {
			by = s.announce
		}
		return nil, &GeometryError{Key: key, Creator: by, Have: s.geo, Want: g}
	}
	if s.removed {
		// Attached again after Remove: the copy starts over from zero
		// (updates that came while it was removed were dropped).
		s.removed, s.mem = false, c.alloc(g.Bytes())
	} else if s.attached {
		return s, nil
	}
	s.attached = true
	c.queue(AppendSegment(c.buffer(), key, g, false))
	return s, nil
}

// Remove flushes the segment's buffer and detaches it: its memory is
// dropped and updates for it are ignored until it is joined again (Join
// then starts from zeroed memory).
func (c *Core) Remove(s *Segment) error {
	if s.removed || !s.attached {
		return fmt.Errorf("%w: segment %d", ErrRemoved, s.key)
	}
	s.flush(c)
	s.removed, s.mem = true, nil
	return nil
}

func (c *Core) receiveSegment(from frame.MemberID, m *Message) error {
	s := c.segs[m.Key]
	if s == nil {
		if m.Geometry.Bytes() > c.maxSeg {
			return fmt.Errorf("dsm: member %d announced segment %d of %v: %d bytes, more than MaxSegment (%d)", from, m.Key, m.Geometry, m.Geometry.Bytes(), c.maxSeg)
		}
		s = c.newSegment(m.Key, m.Geometry)
		s.announce = from
		if m.Create {
			s.creator = from
		}
		c.addSegment(s)
		return nil
	}
	if s.removed {
		return nil
	}
	if s.geo != m.Geometry {
		return &GeometryError{Key: m.Key, Creator: s.creator, Have: s.geo, Want: m.Geometry}
	}
	if m.Create {
		if s.creator != 0 && s.creator != from {
			return fmt.Errorf("%w: member %d created segment %d, already created by member %d", ErrExists, from, m.Key, s.creator)
		}
		s.creator = from
	}
	return nil
}

// receiveUpdate applies an update from the message's bytes into segment
// memory, every record in order, after checking them all.
func (c *Core) receiveUpdate(from frame.MemberID, m *Message) error {
	s := c.segs[m.Key]
	if s == nil {
		return fmt.Errorf("dsm: update from member %d for segment %d, which was never announced", from, m.Key)
	}
	if s.removed {
		return nil
	}
	size := s.geo.LocationSize
	if m.Geometry.LocationSize != size {
		return fmt.Errorf("dsm: update from member %d for segment %d has %d-byte locations, the segment %d-byte ones", from, m.Key, m.Geometry.LocationSize, size)
	}
	var bad error
	m.Records(func(r Record) {
		if bad == nil && r.Location+r.Count() > s.geo.Locations {
			bad = &RangeError{Key: m.Key, Location: r.Location, Count: r.Count(), Locations: s.geo.Locations}
		}
	})
	if bad != nil {
		return fmt.Errorf("dsm: update from member %d: %w", from, bad)
	}
	m.Records(func(r Record) {
		copy(s.mem[r.Location*size:], r.Data)
		c.c.Applied += uint64(r.Count())
		if c.trace != nil {
			for i := range r.Count() {
				c.trace(Event{Kind: EvUpdate, From: from, Key: m.Key, Location: r.Location + i, Data: r.Data[i*size : (i+1)*size]})
			}
		}
	})
	c.c.AppliedUpdates++
	return nil
}

// Writes

func (c *Core) checkWrite(s *Segment, loc, count int) error {
	if s.removed || !s.attached {
		return fmt.Errorf("%w: segment %d", ErrRemoved, s.key)
	}
	if loc < 0 || count < 0 || loc+count > s.geo.Locations || loc+count < loc {
		return &RangeError{Key: s.key, Location: loc, Count: count, Locations: s.geo.Locations}
	}
	return nil
}

// Write sets location loc of s to value (len == location size) locally
// and buffers (or queues, unbuffered) the update.
func (c *Core) Write(s *Segment, loc int, value []byte) error {
	if err := c.checkWrite(s, loc, 1); err != nil {
		return err
	}
	size := s.geo.LocationSize
	if len(value) != size {
		return &SizeError{What: "value", Size: len(value), Want: fmt.Sprintf("%d bytes (segment %d's location size)", size, s.key)}
	}
	copy(s.mem[loc*size:], value)
	c.c.Writes++
	if c.trace != nil {
		c.trace(Event{Kind: EvWrite, Key: s.key, Location: loc, Data: value})
	}
	if !c.buffered {
		b := AppendUpdateHeader(c.buffer(), TypeUpdate, s.key, size)
		c.queueUpdate(AppendRecord(b, loc, 1, value))
		return nil
	}
	if s.buf != nil {
		// Extend the last record when this write follows it.
		r := s.buf[s.last:]
		first := int(binary.BigEndian.Uint32(r))
		n := int(binary.BigEndian.Uint16(r[4:]))
		if first+n == loc && n < MaxRecord && len(s.buf)+size <= c.max {
			binary.BigEndian.PutUint16(r[4:], uint16(n+1))
			s.buf = append(s.buf, value...)
			return nil
		}
		if len(s.buf)+RecordHeader+size > c.max {
			s.flush(c)
		}
	}
	if s.buf == nil {
		s.buf = AppendUpdateHeader(c.buffer(), TypeUpdate, s.key, size)
	}
	s.last = len(s.buf)
	s.buf = AppendRecord(s.buf, loc, 1, value)
	if len(s.buf)+RecordHeader+size > c.max {
		s.flush(c) // full: nothing more fits
	}
	return nil
}

func (c *Core) queueUpdate(b []byte) {
	c.queue(b)
	c.c.Updates++
	c.c.UpdateBytes += uint64(len(b))
}

// flush queues the segment's collected updates.
func (s *Segment) flush(c *Core) {
	if s.buf == nil {
		return
	}
	c.queueUpdate(s.buf)
	s.buf = nil
}

// WriteBulk sets len(values)/size consecutive locations from loc: it
// flushes the segment's buffer, then queues the range in as few messages
// as fit (dsm_bulk_write). With unreliable, the messages are
// TypeUnreliable and the buffer is left alone.
func (c *Core) WriteBulk(s *Segment, loc int, values []byte, unreliable bool) (int, error) {
	size := s.geo.LocationSize
	if len(values)%size != 0 {
		return 0, &SizeError{What: "bulk value", Size: len(values), Want: fmt.Sprintf("a multiple of %d bytes (segment %d's location size)", size, s.key)}
	}
	count := len(values) / size
	if err := c.checkWrite(s, loc, count); err != nil {
		return 0, err
	}
	copy(s.mem[loc*size:], values)
	if c.trace != nil {
		for i := range count {
			c.trace(Event{Kind: EvWrite, Key: s.key, Location: loc + i, Data: values[i*size : (i+1)*size]})
		}
	}
	t := TypeUpdate
	if unreliable {
		t = TypeUnreliable
		c.c.UnreliableWrites += uint64(count)
	} else {
		s.flush(c)
		c.c.Writes += uint64(count)
	}
	per := min((c.max-UpdateOverhead)/size, MaxRecord)
	for done := 0; done < count; {
		n := min(per, count-done)
		b := AppendUpdateHeader(c.buffer(), t, s.key, size)
		b = AppendRecord(b, loc+done, n, values[done*size:(done+n)*size])
		if unreliable {
			c.queue(b)
			c.c.UnreliableUpdates++
		} else {
			c.queueUpdate(b)
		}
		done += n
	}
	return count, nil
}

// WriteUnreliable sets location loc locally and queues its update at once
// as an unreliable message of its own (DSM_WRT_UNREL).
func (c *Core) WriteUnreliable(s *Segment, loc int, value []byte) error {
	if len(value) != s.geo.LocationSize {
		return &SizeError{What: "value", Size: len(value), Want: fmt.Sprintf("%d bytes (segment %d's location size)", s.geo.LocationSize, s.key)}
	}
	_, err := c.WriteBulk(s, loc, value, true)
	return err
}

// Read copies location loc into dst.
func (c *Core) Read(s *Segment, loc int, dst []byte) ([]byte, error) {
	if s.removed || !s.attached {
		return nil, fmt.Errorf("%w: segment %d", ErrRemoved, s.key)
	}
	size := s.geo.LocationSize
	if loc < 0 || loc >= s.geo.Locations {
		return nil, &RangeError{Key: s.key, Location: loc, Count: 1, Locations: s.geo.Locations}
	}
	if len(dst) < size {
		return nil, &SizeError{What: "read buffer", Size: len(dst), Want: fmt.Sprintf("at least %d bytes (segment %d's location size)", size, s.key)}
	}
	return dst[:copy(dst, s.mem[loc*size:(loc+1)*size])], nil
}
