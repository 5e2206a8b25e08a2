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
	// Markers counts barrier markers sent on segment channels (riding
	// on an update or a message of their own); Held counts messages
	// kept aside by the wait condition (WC, def. 7.3) until a barrier
	// was crossed; Ignored counts updates of segments this member has
	// not joined (selective join over one group).
	Markers, Held, Ignored uint64
	// Outsiders counts messages from processes admitted into the group
	// after the computation began (Outsider), dropped.
	Outsiders uint64
	// HeldBytes is the bytes of the messages WC keeps aside now,
	// HeldPeak the most it kept at once.
	HeldBytes, HeldPeak uint64
	// LaneRequests counts lock requests handed out for the lane (Lane);
	// LaneDuplicates the lock requests received that were seen already
	// (the other copy of a request: lane and stream), dropped.
	LaneRequests, LaneDuplicates uint64
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
	// Selective is the selective join of thesis §7.2.1: only members
	// that create or join a segment allocate it; its membership is fixed
	// when the first barrier after its creation is crossed, writes to it
	// wait for that (ErrNotFixed) and a later join is refused
	// (ErrJoinClosed).
	Selective bool
	// Channels (implies Selective) sends every segment's updates on a
	// channel of its own among its members (thesis §7.2.2): the outbox
	// tags each message with its Channel, a barrier puts a marker on
	// every joined segment's channel (§7.2.3) and Opens reports the
	// channels to open. Locks are refused (ErrLocksChannels).
	Channels bool
	// AllMemberChannels (Channels): a segment every member joined gets a
	// channel too. Without it such a segment's updates go on the global
	// channel and its barriers need no marker.
	AllMemberChannels bool
	// WCCopies is how many bytes of one peer's messages on a channel WC
	// copies aside before Holds asks the runtime to hold the rest in the
	// peer's send window; 0 holds at once. It applies on the global
	// channel too, which carries the updates over one group and, with
	// Channels, those of segments every member joined. What must overtake
	// a held peer there: lock messages over one group, only while a lock
	// request seen here lacks that peer's answer (lockNeeds), and with
	// Views a Confirm or Refuse, only at a process not yet confirmed
	// (admissionMessage); Holds is false then.
	WCCopies int
	// Timed: the program relies on bounds on how late a peer's messages
	// arrive (kv's thesis mode), so WC never has a peer held in a
	// reliable layer's window (Holds is always false): a held peer's
	// window stops, which delays its messages to every member, up to the
	// hold's bound. WC copies instead, without bound over one group.
	Timed bool
	// Unconfirmed: Self's first view (Views) was not the group's
	// founding one, so it may be a process the running group admitted
	// after the computation began rather than a member that missed the
	// founding view: it crosses no barrier until a member's Confirm
	// names it (Confirmed). A process that is no member gets a Refuse
	// instead, and a member's arrival at a barrier sent ahead of that
	// Refuse can no longer take it across.
	Unconfirmed bool

	// mutation is zero but in the mutation tests (mutate.go).
	mutation mutation
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
	EvMarker                            // (bm, Seq, From) handled on Key's channel (Channels)
	EvArrival                           // (bar, Seq, From) handled on the global channel
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
	// N: EvBarrierEnter, EvBarrierPass of a partial barrier: the number
	// of members (Self included) it waits for; 0 for a total barrier.
	N int
	// Counted: EvBarrierPass: the peers whose arrival (and, with
	// Channels, markers on the channels shared with Self) had been
	// handled when Self crossed, in id order.
	Counted []frame.MemberID
	Lock    int32
	TS      uint64
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
	// index is its position in Core.peers (fixed at New).
	index int
	// restarted: the process under its id is a restart (Restarted), an
	// outsider.
	restarted bool
	// barriers counts the Barrier messages received from it; barrierIDs
	// holds the ids of the last two, indexed by seq&1 (it can be at most
	// one barrier ahead of this member: the thesis's alternating bit).
	barriers   uint32
	barrierIDs [2]int32
	// barrierSeqs are the numbers of the arrivals in barrierIDs: with
	// channel barriers (which send no global message) a peer's global
	// arrivals skip numbers, so a slot is found by its number.
	barrierSeqs [2]uint32
	// partial: the last two were partial barriers (by seq&1).
	partial [2]bool
	// replied: it answered this member's current lock request.
	replied bool
	// held are its global messages kept aside by the wait condition,
	// heldBytes their size.
	held      [][]byte
	heldBytes int
	// lockWait (over one group): it may be blocked in dsm_lock_acquire
	// (lockNeeds): reqTS, the timestamp of its last lock request seen
	// here (0: none), lacks the reply of a live member. Replies are
	// broadcast, so every member sees each of them (updateLockWait):
	// answered[k] is the highest request timestamp of its that member
	// c.peers[k] answered (nil until a reply to it is seen),
	// selfAnswered Self's. Whatever else it sends meanwhile (a write
	// from another goroutine, the program of an abandoned request) says
	// nothing of its wait.
	lockWait     bool
	reqTS        uint64
	answered     []uint64
	selfAnswered uint64
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

	out   [][]byte  // outbox: out[head:], oldest first
	outCh []Channel // the channel of each message of out
	head  int
	// taken: Next handed out out[head] and Sent has not come yet.
	taken bool
	free  [][]byte
	keys  []uint32 // the segments' keys in order, for flushing

	selective, channels bool
	allMemberChannels   bool // Config.AllMemberChannels
	wcCopies            int  // Config.WCCopies
	timed               bool // Config.Timed
	mutation            mutation
	// opens are the segment channels to open (Opens), in order.
	opens []Open

	// Barrier: barriers entered by Self; waiting while in one; need is
	// the number of members (Self included) the current one waits for,
	// 0 for a total barrier.
	barriers  uint32
	barrierID int32
	inBarrier bool
	need      int
	counted   []frame.MemberID // Counted
	// chanBarrier: the current barrier is a channel barrier
	// (EnterChannelBarrier). globalDirty: Self queued an update on the
	// global channel since its last global barrier message.
	chanBarrier, globalDirty bool

	// Lock: Ricart–Agrawala state of the one lock Self may hold.
	clock   uint64 // Lamport clock: the highest timestamp seen
	lock    lockState
	lockID  int32
	lockTS  uint64
	abandon bool // the requester gave up: release when granted
	// lane is the current request's copy for the lane (Lane), laneDue
	// whether Lane has yet to hand it out.
	lane     []byte
	laneDue  bool
	leaving  bool // ReleaseAll: Self is exiting
	deferred []deferred

	// outsiders: processes admitted into the running group that are not
	// members (Outsider); refused: this process is one (Refused).
	outsiders []frame.MemberID
	refused   *LateJoinError
	// unconfirmed: Config.Unconfirmed until a Confirm names Self.
	unconfirmed bool

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
	c.channels = cfg.Channels
	c.allMemberChannels = cfg.AllMemberChannels
	c.unconfirmed = cfg.Unconfirmed
	c.wcCopies = cfg.WCCopies
	c.timed = cfg.Timed
	c.mutation = cfg.mutation
	c.selective = cfg.Selective || cfg.Channels
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
		c.peers = append(c.peers, &peer{id: id, live: true, index: len(c.peers)})
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

func (c *Core) queue(b []byte) { c.queueOn(Global, b) }

func (c *Core) queueOn(ch Channel, b []byte) {
	c.out = append(c.out, b)
	c.outCh = append(c.outCh, ch)
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

// NextChannel is the channel Next's message goes on (Global unless
// Config.Channels).
func (c *Core) NextChannel() Channel {
	if c.head == len(c.out) {
		return Global
	}
	return c.outCh[c.head]
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
		c.out, c.outCh, c.head = c.out[:0], c.outCh[:0], 0
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

// Receive handles one message delivered by the reliable layer from a peer
// on the global channel: ReceiveOn(Global, from, msg).
func (c *Core) Receive(from frame.MemberID, msg []byte) error {
	return c.ReceiveOn(Global, from, msg)
}

// ReceiveOn handles one message delivered by the reliable layer from a
// peer on channel ch: updates are applied from msg straight into segment
// memory, barrier and lock messages change the synchronisation state (and
// may queue replies). A message that must wait (WC, below) is copied and
// handled once the barrier is crossed. A message that does not decode, or
// does not fit what it names, changes nothing and is counted in
// BadMessages; the error says why.
func (c *Core) ReceiveOn(ch Channel, from frame.MemberID, msg []byte) error {
	err := c.receiveOn(ch, from, msg)
	if err != nil {
		c.c.BadMessages++
	}
	return err
}

func (c *Core) receiveOn(ch Channel, from frame.MemberID, msg []byte) error {
	if from == c.self {
		// A totally ordered group delivers this member's own messages
		// too; their effect is already here.
		return nil
	}
	p := c.peer(from)
	if p == nil || p.restarted && ch == Global {
		// A restarted member's segment channels are its old process's
		// (static groups, which drop a new incarnation): what they
		// still deliver of it was sent before the restart.
		if slices.Contains(c.outsiders, from) {
			c.c.Outsiders++
			return nil
		}
		return fmt.Errorf("dsm: message from member %d, which is not in the group", from)
	}
	if ch == Global {
		if c.mustHold(p.barriers, p.held) && !lockMessage(msg) && !admissionMessage(msg) {
			p.held = c.hold(p.held, msg)
			p.heldBytes += len(msg)
			return nil
		}
		return c.receive(p, msg)
	}
	key := ch.Key()
	s := c.segs[key]
	if s == nil || !s.channel {
		return fmt.Errorf("dsm: message from member %d on the channel of segment %d, which this member has not joined", from, key)
	}
	sp := s.peer(from)
	if sp == nil {
		return fmt.Errorf("dsm: message from member %d on the channel of segment %d, of which it is not a member", from, key)
	}
	if c.mustHold(sp.marks, sp.held) && c.mutation&mutationNoWC == 0 {
		sp.held = c.hold(sp.held, msg)
		sp.heldBytes += len(msg)
		return nil
	}
	return c.receiveSegmentChannel(s, sp, msg)
}

// The wait condition (WC, thesis def. 7.3): once a peer's arrival at the
// barrier this member waits at has been received on a channel (its
// barrier message on the global channel, its marker on a segment's),
// nothing more from it on that channel is handled until this member has
// crossed the barrier. Without it, a peer that crossed first could have
// its next phase's writes applied here before a third member's writes of
// the phase before, which are still being repaired, and those would then
// overwrite the newer values. While this member is not in a barrier, a
// peer that arrived at the next one is blocked there and sends no
// writes, unless that was a partial barrier it crossed without this
// member: its later messages are held too, until this member crosses it.
// So a peer's handled arrivals are never more than one ahead of the
// barriers Self crossed (the alternating bit stays enough).
func (c *Core) mustHold(arrived uint32, held [][]byte) bool {
	return len(held) > 0 || arrived > c.crossed()
}

// crossed is the number of barriers Self has crossed.
func (c *Core) crossed() uint32 {
	if c.inBarrier {
		return c.barriers - 1
	}
	return c.barriers
}

// Holds reports whether WC holds member from's messages on channel ch
// now and has copied at least Config.WCCopies bytes of them aside: the
// runtime should stop the channel's reliable layer from delivering more
// of them (reliable.Group.HoldFrom) until Holds is false again, so that
// they wait in the sender's window instead of being copied here (what
// is delivered meanwhile is still held, by copy). It turns false at the
// crossing that ends WC and, on the global channel over one group,
// while a lock request seen here lacks from's answer (lockNeeds): a
// lock message there must overtake the messages WC holds (lockMessage),
// and the reliable layer cannot hand out one message past another of
// the same sender. The
// runtime asks again after every message that is not only updates,
// after RequestLock and after MemberBack, and releases the holds no
// longer wanted. False on the global channel too while Self is
// unconfirmed: a Confirm or Refuse (admissionMessage) must overtake
// then, for Self cannot cross without it. A confirmed member needs
// neither (a Confirm names the process it admits, a Refuse an
// outsider). What an unconfirmed one copies from a
// peer is bounded all the same: the peer queues its Confirm of Self at
// its install of Self's first view, behind only what it had queued
// before (its outbox), and Self is confirmed once that is delivered.
// Always false with Config.Timed.
func (c *Core) Holds(ch Channel, from frame.MemberID) bool {
	if c.timed {
		return false
	}
	if ch == Global {
		p := c.peer(from)
		return !c.unconfirmed && p != nil && c.mustHold(p.barriers, p.held) && p.heldBytes >= c.wcCopies && !c.lockNeeds(p)
	}
	s := c.segs[ch.Key()]
	if s == nil || !s.channel {
		return false
	}
	sp := s.peer(from)
	return sp != nil && c.mustHold(sp.marks, sp.held) && sp.heldBytes >= c.wcCopies && c.mutation&mutationNoWC == 0
}

// lockNeeds reports whether a lock message of p, which a hold of p in
// Self's window would keep behind WC's messages and which the hold's
// stopped window would keep p from sending to anybody, could be needed
// before the crossing that ends WC (over one group; with Channels locks
// are refused). Only an answer of p to a request can be: Self's request
// lacks p's reply, or a live peer's last request seen here lacks it
// (lockWait, answered) — an answer at once, or one p defers to its
// Unlock or until its own earlier request is granted. Every other
// message of p after its arrival is held by WC at every member that has
// not crossed (so none waits for it before crossing), and a request
// that has p's answer and lacks others' waits for those members, not
// for p: the hold stays. A request p makes while held reaches its
// holders past its stopped window on the lock lane (Lane; docs/dsm.md,
// "The lock lane"). O(P), and only past WC's other tests.
func (c *Core) lockNeeds(p *peer) bool {
	if c.lock == lockRequesting && !p.replied {
		return true
	}
	for _, r := range c.peers {
		if r != p && r.live && r.lockWait && (r.answered == nil || r.answered[p.index] < r.reqTS) {
			return true
		}
	}
	return false
}

// updateLockWait sets r.lockWait: r's last lock request seen here still
// lacks the reply of Self or of a live peer other than r. Ricart–Agrawala
// grants a request once every live member answered it, and the replies
// are broadcast, so Self sees the end of a peer's wait exactly, from
// messages the protocol sends anyway: no flag on the wire, and what r
// sends meanwhile (a write from another goroutine of its program) does
// not end it. A reply may arrive before the request it answers (they
// come from different senders); answered keeps it. A request
// timestamp grows with every request of one member (Lamport clock), so a
// reply with a timestamp at least reqTS answers the request waited for.
// That holds for one run of the member: a process restarted under its
// old id starts its clock again, and the runtime removes the member at
// the view that shows the restart (Restarted) before its messages come.
func (c *Core) updateLockWait(r *peer) {
	r.lockWait = false
	if r.reqTS == 0 {
		return
	}
	if r.selfAnswered < r.reqTS {
		r.lockWait = true
		return
	}
	for i, q := range c.peers {
		if q != r && q.live && (r.answered == nil || r.answered[i] < r.reqTS) {
			r.lockWait = true
			return
		}
	}
}

// noteReply records that member by (Self included) answered member to's
// lock request of timestamp ts, and updates to's lockWait.
func (c *Core) noteReply(by, to frame.MemberID, ts uint64) {
	r := c.peer(to)
	if r == nil {
		return
	}
	if by == c.self {
		r.selfAnswered = max(r.selfAnswered, ts)
	} else {
		i, ok := slices.BinarySearchFunc(c.peers, by, func(p *peer, id frame.MemberID) int { return int(p.id) - int(id) })
		if !ok || c.peers[i] == r {
			return
		}
		if r.answered == nil {
			r.answered = make([]uint64, len(c.peers))
		}
		r.answered[i] = max(r.answered[i], ts)
	}
	c.updateLockWait(r)
}

// lockMessage reports whether msg is a LockRequest or LockReply: WC
// does not hold them (they change no memory). A peer a partial barrier
// ahead answers or requests a lock while this member computes; holding
// that until this member's next crossing would deadlock Ricart–Agrawala.
// The price: a lock granted by a peer that is a partial barrier ahead
// brings its writes up to that barrier, not the ones after it (those
// wait for this member's crossing, axiom 2.7 over 2.11).
func lockMessage(msg []byte) bool {
	return len(msg) > 1 && (Type(msg[1]) == TypeLockRequest || Type(msg[1]) == TypeLockReply)
}

// admissionMessage reports whether msg is a Refuse or a Confirm: WC
// does not hold them either (they change no memory). A process admitted
// before a barrier may have a member's arrival at it before the member's
// Refuse or Confirm; held, the message would wait for a crossing that
// the process cannot make without it (an unconfirmed one), or never
// makes (one waiting for an announcement made before it joined).
func admissionMessage(msg []byte) bool {
	return len(msg) > 1 && (Type(msg[1]) == TypeRefuse || Type(msg[1]) == TypeConfirm)
}

// hold keeps a copy of msg aside: the reliable layer's message is valid
// only during its delivery. What is held is bounded by what one peer
// sends between crossing a barrier and this member's crossing of it, and
// further by what the reliable layer delivered before the runtime
// stopped its deliveries from that peer (Holds).
func (c *Core) hold(held [][]byte, msg []byte) [][]byte {
	c.c.Held++
	c.c.HeldBytes += uint64(len(msg))
	c.c.HeldPeak = max(c.c.HeldPeak, c.c.HeldBytes)
	var b []byte
	if len(msg) <= c.max {
		b = c.buffer()
	}
	return append(held, append(b, msg...))
}

// releaseHeld handles the messages held while Self waited at the barrier
// it just crossed, in their order.
func (c *Core) releaseHeld() {
	for _, p := range c.peers {
		if len(p.held) == 0 {
			continue
		}
		held := p.held
		p.held, p.heldBytes = nil, 0
		for i, m := range held {
			if c.mustHold(p.barriers, p.held) {
				p.held = append(p.held, m)
				p.heldBytes += len(m)
				continue
			}
			if c.receive(p, m) != nil {
				c.c.BadMessages++
			}
			c.recycle(m)
			held[i] = nil
		}
	}
	for _, key := range c.keys {
		s := c.segs[key]
		if !s.channel {
			continue
		}
		for _, sp := range s.peers {
			if len(sp.held) == 0 {
				continue
			}
			held := sp.held
			sp.held, sp.heldBytes = nil, 0
			for i, m := range held {
				if c.mustHold(sp.marks, sp.held) {
					sp.held = append(sp.held, m)
					sp.heldBytes += len(m)
					continue
				}
				if c.receiveSegmentChannel(s, sp, m) != nil {
					c.c.BadMessages++
				}
				c.recycle(m)
				held[i] = nil
			}
		}
	}
}

func (c *Core) recycle(b []byte) {
	c.c.HeldBytes -= uint64(len(b))
	if cap(b) == c.max && len(c.free) < 64 {
		c.free = append(c.free, b)
	}
}

func (c *Core) receive(p *peer, msg []byte) error {
	from := p.id
	m, err := Decode(msg)
	if err != nil {
		return err
	}
	if c.channels {
		switch m.Type {
		case TypeUpdate, TypeUnreliable, TypeUpdateBarrier:
			if s := c.segs[m.Key]; s == nil || !s.global {
				return fmt.Errorf("dsm: update from member %d for segment %d on the global channel (updates travel on the segment's channel unless every member joined it)", from, m.Key)
			}
		case TypeLockRequest, TypeLockReply:
			return fmt.Errorf("dsm: lock message from member %d: %w", from, ErrLocksChannels)
		}
	}
	switch m.Type {
	case TypeSegment:
		return c.receiveSegment(p, &m)
	case TypeUpdate, TypeUnreliable:
		return c.receiveUpdate(from, &m)
	case TypeUpdateBarrier:
		// The updates, then the arrival, which counts even when the
		// updates are refused (they would have been a message of their
		// own).
		if err := c.checkArrival(p, &m); err != nil {
			return err
		}
		uerr := c.receiveUpdate(from, &m)
		c.receiveBarrier(p, &m)
		return uerr
	case TypeBarrier:
		return c.receiveBarrier(p, &m)
	case TypeRefuse:
		if m.To == c.self && c.refused == nil {
			c.refused = &LateJoinError{Self: c.self, By: from, Crossed: m.Crossed}
		}
	case TypeConfirm:
		if m.To == c.self {
			c.unconfirmed = false
		}
	case TypeLockRequest:
		if m.TS <= p.reqTS {
			// Seen already: the other copy of a request that came
			// first on the lane or in the stream (Lane). A member's
			// request timestamps grow (Lamport clock), and its next
			// request leaves only once every member answered this
			// one, so a request not above reqTS is never a new one.
			c.c.LaneDuplicates++
			return nil
		}
		p.reqTS = m.TS
		c.receiveLockRequest(from, &m)
		c.updateLockWait(p)
	case TypeLockReply:
		if m.To == c.self && c.lock == lockRequesting && m.Lock == c.lockID && m.TS == c.lockTS {
			p.replied = true
			c.checkGrant()
		}
		c.noteReply(p.id, m.To, m.TS)
	}
	return nil
}

// receiveSegmentChannel handles a message on segment s's channel: an
// update, or a barrier marker (a Barrier message, or an UpdateBarrier:
// the marker riding on the channel's last update).
func (c *Core) receiveSegmentChannel(s *Segment, sp *segPeer, msg []byte) error {
	m, err := Decode(msg)
	if err != nil {
		return err
	}
	if m.Type != TypeBarrier && m.Key != s.key {
		return fmt.Errorf("dsm: update from member %d for segment %d on the channel of segment %d", sp.id, m.Key, s.key)
	}
	switch m.Type {
	case TypeUpdate, TypeUnreliable:
		return c.receiveUpdate(sp.id, &m)
	case TypeUpdateBarrier, TypeBarrier:
		if m.Seq <= sp.marks || m.Seq <= s.fixedAt {
			return fmt.Errorf("dsm: barrier marker %d from member %d on the channel of segment %d, want one after %d", m.Seq, sp.id, s.key, max(sp.marks, s.fixedAt))
		}
		var uerr error
		if m.Type == TypeUpdateBarrier {
			uerr = c.receiveUpdate(sp.id, &m)
		}
		sp.marks, sp.markID, sp.markChannel = m.Seq, m.ID, m.ChannelBarrier
		if c.trace != nil {
			c.trace(Event{Kind: EvMarker, From: sp.id, Key: s.key, ID: m.ID, Seq: m.Seq})
		}
		return uerr
	}
	return fmt.Errorf("dsm: message of type %d from member %d on the channel of segment %d", m.Type, sp.id, s.key)
}

// checkArrival refuses a global barrier message out of order: the next
// number, or with Channels any later one (channel barriers send no
// global message), never a channel barrier's.
func (c *Core) checkArrival(p *peer, m *Message) error {
	switch {
	case m.ChannelBarrier:
		return fmt.Errorf("dsm: barrier message %d from member %d on the global channel is marked as a channel barrier's, which sends none there", m.Seq, p.id)
	case m.Seq == p.barriers+1, c.channels && m.Seq > p.barriers:
		return nil
	case c.channels:
		return fmt.Errorf("dsm: barrier message %d from member %d, want one after %d (its messages arrive in order)", m.Seq, p.id, p.barriers)
	}
	return fmt.Errorf("dsm: barrier message %d from member %d, want %d (its messages arrive in order)", m.Seq, p.id, p.barriers+1)
}

func (c *Core) receiveBarrier(p *peer, m *Message) error {
	if err := c.checkArrival(p, m); err != nil {
		return err
	}
	// A peer's handled arrivals are at most one global barrier ahead of
	// Self's crossings (WC), so the slot of its arrival before the
	// previous one is free; the slot of the previous one is kept.
	slot := m.Seq & 1
	if p.barriers > 0 && p.barrierSeqs[slot] == p.barriers {
		slot ^= 1
	}
	p.barriers = m.Seq
	p.barrierIDs[slot] = m.ID
	p.barrierSeqs[slot] = m.Seq
	p.partial[slot] = m.Partial
	if c.trace != nil {
		c.trace(Event{Kind: EvArrival, From: p.id, ID: m.ID, Seq: m.Seq})
	}
	return nil
}

// MemberGone removes a member that left or failed: barriers and locks no
// longer wait for it (the global group has delivered everything it sent
// before it went; with Channels a barrier still waits for each segment
// channel's removal of it, ChannelGone). Replies deferred to it are kept (sent at the
// release, one message each): under reliable.Total a member removed as
// failed can come back (MemberBack) still waiting for them.
func (c *Core) MemberGone(id frame.MemberID) {
	p := c.peer(id)
	if p == nil || !p.live {
		return
	}
	p.live = false
	c.checkGrant()
	for _, r := range c.peers {
		c.updateLockWait(r) // r no longer waits for p's reply
	}
}

// ChannelGone records that segment channel ch removed member id (it
// failed or left): its reliable layer has delivered every message of id
// that a member of the channel delivered (its relay, reliable.Config.Relay)
// and will deliver no more. MemberGone is the global group's report; a
// barrier counts a member gone only once every channel it shares with
// Self, where its marker has not come, has removed it too: a write of it
// from before the barrier still under relay is then applied before the
// crossing (axiom 2.7), not after.
func (c *Core) ChannelGone(ch Channel, id frame.MemberID) {
	if sp := c.channelPeer(ch, id); sp != nil {
		sp.gone = true
	}
}

// ChannelBack undoes ChannelGone: the channel took member id back
// (reliable's MemberReturned).
func (c *Core) ChannelBack(ch Channel, id frame.MemberID) {
	if sp := c.channelPeer(ch, id); sp != nil {
		sp.gone = false
	}
}

func (c *Core) channelPeer(ch Channel, id frame.MemberID) *segPeer {
	if ch == Global {
		return nil
	}
	s := c.segs[ch.Key()]
	if s == nil || !s.channel {
		return nil
	}
	return s.peer(id)
}

// MemberBack takes back a member MemberGone removed (reliable's
// MemberReturned, Order Total: it missed nothing and is a member again):
// barriers and lock requests wait for it again. What was decided without
// it while it was gone (a barrier crossed, a lock granted) stands.
func (c *Core) MemberBack(id frame.MemberID) {
	if p := c.peer(id); p != nil && !p.restarted {
		p.live = true
		for _, r := range c.peers {
			c.updateLockWait(r) // r waits for p's reply again
		}
	}
}

// Outsider records id, a process the reliable layer admitted into the
// running group (Views) that is not among the core's members, which are
// fixed at start: its messages are dropped (counted in Outsiders, not
// BadMessages), and, with refuse, a Refuse message on the global channel
// tells it so and how many barriers Self has crossed. It reports whether
// id was new. Members and Self are no outsiders.
func (c *Core) Outsider(id frame.MemberID, refuse bool) bool {
	if id == c.self || c.peer(id) != nil || slices.Contains(c.outsiders, id) {
		return false
	}
	c.outsiders = append(c.outsiders, id)
	if refuse {
		c.queue(AppendRefuse(c.buffer(), id, c.crossed()))
	}
	return true
}

// Restarted records that the process now under member id's id is a
// restart of it (Views: a new incarnation in the old one's place, the
// same id): the member is gone (MemberGone), for its memory, barrier
// count and Lamport clock went with the old process, and the new process
// is an outsider: its messages on the global channel are dropped
// (counted in Outsiders) and, with refuse, a Refuse tells it so. A
// segment channel is a static group that drops a new incarnation: what
// it still delivers of id is the old process's, handled as a gone
// member's (ChannelGone). The runtime calls it at the view that shows
// the restart, once the global group delivered everything the old
// process sent. It reports whether id was a member not yet restarted.
func (c *Core) Restarted(id frame.MemberID, refuse bool) bool {
	p := c.peer(id)
	if p == nil || p.restarted {
		return false
	}
	c.MemberGone(id)
	p.restarted = true
	c.outsiders = append(c.outsiders, id)
	if refuse {
		c.queue(AppendRefuse(c.buffer(), id, c.crossed()))
	}
	return true
}

// Confirm queues a Confirm message on the global channel telling member
// id, one of the core's live peers, that it is a member of the
// computation; it reports whether it queued one. The runtime confirms
// the members of every view it installs after its first (an unconfirmed
// core confirms nobody: it may be no member itself).
func (c *Core) Confirm(id frame.MemberID) bool {
	p := c.peer(id)
	if c.unconfirmed || p == nil || !p.live {
		return false
	}
	c.queue(AppendConfirm(c.buffer(), id))
	return true
}

// Confirmed reports whether Self is known to be a member of the
// computation: always, unless Config.Unconfirmed and no Confirm naming
// Self has come yet.
func (c *Core) Confirmed() bool { return !c.unconfirmed }

// Refused is a *LateJoinError once a member refused Self (its Refuse
// message): this process joined the running group too late; nil before.
func (c *Core) Refused() error {
	if c.refused == nil {
		return nil
	}
	return c.refused
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
// id. BarrierPassed says when it may be crossed. With Channels, a marker
// goes first on the channel of every segment Self is a member of whose
// membership was fixed before this barrier (thesis §7.2.3, (bm, b, i)),
// then the barrier message on the global channel ((bar, b, i)).
func (c *Core) EnterBarrier(id int32) error { return c.enterBarrier(id, 0, false) }

// EnterChannelBarrier (Channels) is a barrier of the segment channels
// alone: it puts a marker on the channel of every joined, fixed segment
// Self writes, as EnterBarrier does, and sends nothing on the global
// channel; BarrierPassed holds once every other writer of every channel
// Self is on has put its marker there (or been removed by it). So Self
// waits only for the members it shares a segment with, and WC and the
// markers keep axioms 2.6 and 2.7 between every two of them — the only
// members between which updates travel. It is not the thesis's global
// synchronisation: members that share no segment do not wait for each
// other (docs/dsm.md, "Channel barriers"). It fixes no membership (like
// a partial barrier), and it is refused after Self queued an update of
// a segment every member joined since its last total barrier (those
// travel on the global channel, whose barrier message is their marker).
// Members enter their k-th barrier alike (the marker's SeqChannel bit
// shows it to the members Self shares a channel with).
func (c *Core) EnterChannelBarrier(id int32) error {
	if !c.channels {
		return fmt.Errorf("dsm: channel barrier %d: the node does not run Channels", id)
	}
	return c.enterBarrier(id, 0, true)
}

// EnterPartialBarrier is EnterBarrier for a partial barrier (the thesis's
// dsm_barrier(id, num_procs)): BarrierPassed holds once n members, Self
// included, have arrived (with Channels: with their markers on every
// channel they share with Self), or every live one has. n must be
// 1..Size(); n = Size() is the total barrier. Members enter their k-th
// barrier alike, partial or total (the seq field's SeqPartial bit says
// which; a difference is ErrBarrierMismatch), because only a total
// barrier fixes segment memberships (Selective): a partial one crossed
// without a member cannot know that member's joins.
func (c *Core) EnterPartialBarrier(id int32, n int) error {
	if n < 1 || n > c.size {
		return fmt.Errorf("dsm: partial barrier %d: %d members, want 1..%d (the group's members, this one included; %d is a total barrier)", id, n, c.size, c.size)
	}
	if n == c.size {
		n = 0
	}
	return c.enterBarrier(id, n, false)
}

func (c *Core) enterBarrier(id int32, need int, channel bool) error {
	if c.inBarrier {
		return fmt.Errorf("dsm: barrier %d entered while waiting at barrier %d", id, c.barrierID)
	}
	if c.barriers+1 >= SeqChannel {
		return fmt.Errorf("dsm: barrier %d: this member has entered %d barriers, the most a barrier number counts", id, c.barriers)
	}
	c.FlushAll()
	if channel && c.globalDirty {
		return fmt.Errorf("dsm: channel barrier %d: this member wrote a segment every member joined since its last total barrier; those updates travel on the global channel, which only a barrier with a global message (Barrier, PartialBarrier) marks", id)
	}
	c.barriers++
	c.barrierID = id
	c.inBarrier = true
	c.need = need
	c.chanBarrier = channel
	c.c.Barriers++
	seq := barrierSeq(c.barriers, need > 0, channel)
	if c.channels {
		for _, key := range c.keys {
			if s := c.segs[key]; s.channel && s.fixedAt < c.barriers && !s.readOnly {
				c.c.Markers++
				if !c.ride(SegmentChannel(key), id, seq) {
					c.queueOn(SegmentChannel(key), AppendBarrier(c.buffer(), id, seq))
				}
			}
		}
	}
	if !channel {
		if !c.ride(Global, id, seq) {
			c.queue(AppendBarrier(c.buffer(), id, seq))
		}
		c.globalDirty = false
	}
	if c.trace != nil {
		c.trace(Event{Kind: EvBarrierEnter, ID: id, Seq: c.barriers, N: need})
	}
	return nil
}

// ride puts the arrival at the current barrier on the last update queued
// on channel ch when it fits and nobody is sending that message yet (Next
// hands a message out untouched until Sent): the updates and the barrier
// (or marker) then cost one message.
func (c *Core) ride(ch Channel, id int32, seq uint32) bool {
	for last := len(c.out) - 1; last >= c.head; last-- {
		if c.outCh[last] != ch {
			continue
		}
		if last == c.head && c.taken {
			return false
		}
		b := c.out[last]
		if Type(b[1]) != TypeUpdate || len(b)+BarrierTrailer > c.max {
			return false
		}
		c.out[last] = AppendBarrierTrailer(b, id, seq)
		c.c.Bytes += BarrierTrailer
		c.c.UpdateBytes += BarrierTrailer
		return true
	}
	return false
}

// InBarrier reports whether Self waits at a barrier, and which.
func (c *Core) InBarrier() (int32, bool) { return c.barrierID, c.inBarrier }

// BarrierPassed reports whether every live peer has arrived at the barrier
// Self waits at (with Channels: and every other member of each segment
// channel has put its marker on it or been removed by the channel, a
// member the global group reported gone included: the barrier condition
// BC, thesis def. 7.2, with ChannelGone); once it returns true (or an error) Self is past it:
// the messages WC held are handled, and segments created in the phase
// just ended have their membership fixed (their channels appear in
// Opens). A peer whose message for this barrier names another id is an
// error wrapping ErrBarrierMismatch.
func (c *Core) BarrierPassed() (bool, error) {
	if !c.inBarrier {
		return true, nil
	}
	ok, err := c.barrierCheck()
	switch {
	case err != nil:
		c.cross(false)
		return true, err
	case !ok:
		return false, nil
	}
	c.cross(true)
	return true, nil
}

// BarrierReady reports whether BarrierPassed would return true now (the
// barrier condition holds, or the barrier fails), without crossing: the
// runtime wakes a program waiting at a barrier only then.
func (c *Core) BarrierReady() bool {
	if !c.inBarrier {
		return true
	}
	ok, err := c.barrierCheck()
	return ok || err != nil
}

// barrierCheck is BarrierPassed's condition while Self waits at a
// barrier, with no effect: whether it holds, or why the barrier fails.
func (c *Core) barrierCheck() (bool, error) {
	if c.unconfirmed {
		// Every peer's arrival may be here, sent ahead of the Refuse
		// that says Self is no member: only a Confirm lets Self cross.
		return false, nil
	}
	if c.chanBarrier {
		return c.channelBarrierCheck()
	}
	arrived, all := 1, true // Self
	for _, p := range c.peers {
		if !p.live {
			// Gone from the global group, but maybe not yet from a
			// channel, whose relay may still bring a write of it
			// from before this barrier (ChannelGone).
			if c.channels && c.markerMissing(p.id) {
				all = false
			}
			continue
		}
		if c.channels {
			// A marker of the other kind tells it before a global
			// message that will not come.
			if err := c.markerKind(p.id); err != nil {
				return false, err
			}
		}
		if p.barriers < c.barriers {
			all = false
			continue
		}
		slot := c.barriers & 1
		if p.barrierSeqs[slot] != c.barriers {
			slot ^= 1
		}
		if p.barrierSeqs[slot] != c.barriers {
			return false, fmt.Errorf("%w: member %d sent no global barrier message for its barrier number %d (it entered it as a channel barrier), this member entered barrier %d as a %s one", ErrBarrierMismatch, p.id, c.barriers, c.barrierID, kind(c.need > 0))
		}
		if id := p.barrierIDs[slot]; id != c.barrierID {
			return false, fmt.Errorf("%w: member %d arrived at barrier %d as its barrier number %d, this member at barrier %d", ErrBarrierMismatch, p.id, id, c.barriers, c.barrierID)
		}
		if partial := p.partial[slot]; partial != (c.need > 0) {
			return false, fmt.Errorf("%w: member %d entered barrier %d (its barrier number %d) as a %s barrier, this member as a %s one", ErrBarrierMismatch, p.id, c.barrierID, c.barriers, kind(partial), kind(c.need > 0))
		}
		if c.channels && c.markerMissing(p.id) {
			all = false
			continue
		}
		arrived++
	}
	return all || (c.need > 0 && arrived >= c.need), nil
}

// channelBarrierCheck is barrierCheck for a channel barrier: every other
// writer of every channel Self is on has put its marker for it there, as
// a channel barrier's, or been removed by the channel.
func (c *Core) channelBarrierCheck() (bool, error) {
	all := true
	for _, p := range c.peers {
		if c.markerMissing(p.id) {
			all = false
			continue
		}
		if err := c.markerKind(p.id); err != nil {
			return false, err
		}
	}
	return all, nil
}

// markerKind is an ErrBarrierMismatch if member id's marker for the
// current barrier on a channel shared with Self is of another kind
// (channel barrier or not) than Self's barrier.
func (c *Core) markerKind(id frame.MemberID) error {
	for _, key := range c.keys {
		s := c.segs[key]
		if !s.channel || s.fixedAt >= c.barriers {
			continue
		}
		if sp := s.peer(id); sp != nil && !sp.reader && !sp.gone && sp.marks == c.barriers && sp.markChannel != c.chanBarrier {
			return fmt.Errorf("%w: member %d entered barrier %d (its barrier number %d) as a %s, this member as a %s", ErrBarrierMismatch, id, sp.markID, c.barriers, channelKind(sp.markChannel), channelKind(c.chanBarrier))
		}
	}
	return nil
}

func channelKind(channel bool) string {
	if channel {
		return "channel barrier"
	}
	return "barrier with a global message"
}

func kind(partial bool) string {
	if partial {
		return "partial"
	}
	return "total"
}

// arrivedPeers appends the live peers that have arrived at Self's
// current barrier (with Channels: with every marker).
func (c *Core) arrivedPeers(out []frame.MemberID) []frame.MemberID {
	for _, p := range c.peers {
		if c.chanBarrier {
			// A channel barrier counts the writers Self shares a
			// channel with.
			if p.live && c.writerOnChannel(p.id) && !c.markerMissing(p.id) {
				out = append(out, p.id)
			}
			continue
		}
		if p.live && p.barriers >= c.barriers && !(c.channels && c.markerMissing(p.id)) {
			out = append(out, p.id)
		}
	}
	return out
}

// markerMissing reports whether member id's marker for the current
// barrier has not come on some segment channel Self shares with it that
// has not removed it.
func (c *Core) markerMissing(id frame.MemberID) bool {
	if c.mutation&mutationNoMarkers != 0 {
		return false
	}
	for _, key := range c.keys {
		s := c.segs[key]
		if !s.channel || s.fixedAt >= c.barriers {
			continue
		}
		if sp := s.peer(id); sp != nil && !sp.reader && !sp.gone && sp.marks < c.barriers {
			return true
		}
	}
	return false
}

// writerOnChannel reports whether member id writes on a segment channel
// Self is on, fixed before the current barrier.
func (c *Core) writerOnChannel(id frame.MemberID) bool {
	for _, key := range c.keys {
		s := c.segs[key]
		if !s.channel || s.fixedAt >= c.barriers {
			continue
		}
		if sp := s.peer(id); sp != nil && !sp.reader {
			return true
		}
	}
	return false
}

// markersMissing appends the members whose marker for the current
// barrier has not come on some segment channel that has not removed
// them.
func (c *Core) markersMissing(out []frame.MemberID) []frame.MemberID {
	for _, key := range c.keys {
		s := c.segs[key]
		if !s.channel || s.fixedAt >= c.barriers {
			continue
		}
		for _, sp := range s.peers {
			if !sp.reader && !sp.gone && sp.marks < c.barriers {
				if p := c.peer(sp.id); p != nil && !slices.Contains(out, sp.id) {
					out = append(out, sp.id)
				}
			}
		}
	}
	return out
}

// cross takes Self past the barrier it waits at (traced unless the
// barrier failed).
func (c *Core) cross(trace bool) {
	c.counted = c.arrivedPeers(c.counted[:0])
	if trace && c.trace != nil {
		c.trace(Event{Kind: EvBarrierPass, ID: c.barrierID, Seq: c.barriers, N: c.need, Counted: slices.Clone(c.counted)})
	}
	c.inBarrier = false
	if c.selective && c.need == 0 && !c.chanBarrier {
		c.fix()
	}
	c.releaseHeld()
}

// Counted lists the live peers whose arrival (with Channels: and
// markers) Self had handled when it crossed its last barrier, in id
// order — for a partial barrier, the members whose writes before the
// barrier Self is sure to have. The slice is valid until the next
// crossing.
func (c *Core) Counted() []frame.MemberID { return c.counted }

// CountedRanks is Counted as ranks, Self's included, in order.
func (c *Core) CountedRanks() []int {
	out := []int{c.rank}
	for _, id := range c.counted {
		r, _ := slices.BinarySearchFunc(c.peers, id, func(p *peer, id frame.MemberID) int { return int(p.id) - int(id) })
		if id > c.self {
			r++
		}
		out = append(out, r)
	}
	slices.Sort(out)
	return out
}

// fix fixes the membership of the segments created before the barrier
// just crossed, a total one (the first barrier after a creation is the
// thesis's consistency point, §7.2.1; a partial barrier fixes nothing,
// since it may be crossed before some member's arrival): every member's
// join announcement came before its arrival. With Channels, each such segment that Self and
// another member joined gets its channel (Opens).
func (c *Core) fix() {
	for _, key := range c.keys {
		s := c.segs[key]
		if s.fixed || s.epoch >= c.barriers {
			continue
		}
		s.fixed, s.fixedAt = true, c.barriers
		if !c.channels || len(s.members) < 2 || !slices.Contains(s.members, c.self) {
			continue
		}
		if len(s.members) == c.size && !c.allMemberChannels {
			// Every member joined: a channel would reach the global
			// channel's members, and cost each of them a marker per
			// barrier besides. The segment's updates go on the global
			// channel, ordered with the barrier messages, as without
			// Channels (its members are the group's at start, which
			// every member knows alike).
			s.global = true
			continue
		}
		s.channel = true
		for _, id := range s.members {
			if id != c.self {
				s.peers = append(s.peers, &segPeer{id: id, reader: slices.Contains(s.readers, id)})
			}
		}
		c.opens = append(c.opens, Open{Key: key, Members: slices.Clone(s.members)})
	}
}

// Waiting lists the live peers that have not arrived at Self's current
// barrier, or whose marker has not come on a segment channel (for error
// messages).
func (c *Core) Waiting() []frame.MemberID {
	var out []frame.MemberID
	for _, p := range c.peers {
		if p.live && c.inBarrier && !c.chanBarrier && p.barriers < c.barriers {
			out = append(out, p.id)
		}
	}
	if c.channels && c.inBarrier {
		out = c.markersMissing(out)
		slices.Sort(out)
	}
	return out
}

// Locks: Ricart–Agrawala over broadcast (thesis §5.1.1)

// RequestLock flushes every buffer and queues a request for lock id.
// Holding says when it is granted.
func (c *Core) RequestLock(id int32) error {
	if c.channels {
		return fmt.Errorf("dsm: acquiring lock %d: %w", id, ErrLocksChannels)
	}
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
	c.lane = AppendLockRequest(c.lane[:0], id, c.lockTS)
	c.laneDue = c.mayBeHeld()
	if c.trace != nil {
		c.trace(Event{Kind: EvLockRequest, Lock: id, TS: c.lockTS})
	}
	c.checkGrant()
	return nil
}

// mayBeHeld reports whether a live peer may hold Self's messages (WC,
// Holds at the peer): one whose arrivals seen here are fewer than the
// barriers Self crossed, so that it has not arrived at a partial barrier
// Self crossed without it (or its arrival is still on the way). A peer
// that arrived at every barrier Self crossed holds Self at most until it
// has the arrivals Self crossed with, which are on the wire already: a
// total barrier makes no peer hold Self for longer. Never with Timed
// (nobody holds).
func (c *Core) mayBeHeld() bool {
	if c.timed {
		return false
	}
	crossed := c.crossed()
	for _, p := range c.peers {
		if p.live && p.barriers < crossed {
			return true
		}
	}
	return false
}

// Lane hands out, once per request, a copy of the lock request
// RequestLock just queued, for the runtime to send past the send window
// at once (the lock lane: docs/dsm.md, "The lock lane"): at the global
// group's Unreliable level, whose datagrams a hold of this member at its
// peers does not stop, while the queued copy waits behind what this
// member queued before. Whichever copy a peer receives first is the
// request; the other is dropped there as a duplicate (its timestamp is
// not above the last one seen of this member). The bytes stay valid
// until the next RequestLock. ok is false when there is none to send:
// no live peer may hold Self (mayBeHeld: it is not a partial barrier
// ahead of anybody), or it was handed out already. Only then does the
// lane change anything; elsewhere the request's copy in the stream is
// not held anywhere, and a lane copy would only hand the lock over
// sooner than today under loss, which programs that pass data from one
// holder to the next through memory would feel (docs/dsm.md, "What the
// model promises", 2).
func (c *Core) Lane() (msg []byte, ok bool) {
	if !c.laneDue {
		return nil, false
	}
	c.laneDue = false
	c.c.LaneRequests++
	return c.lane, true
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
// Lock requests received afterwards are not answered: the member is
// leaving the group.
func (c *Core) ReleaseAll() {
	c.leaving = true
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
	if c.leaving {
		// The group is being left: a reply could not be sent, and the
		// requester stops waiting for this member when it sees it leave.
		return
	}
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
	c.noteReply(c.self, to, ts)
	c.c.LockReplies++
	if c.trace != nil {
		c.trace(Event{Kind: EvLockPermit, To: to, Lock: lock, TS: ts})
	}
}

// Channels (thesis §7.2.2)

// Channel names what a message travels on: the global channel (every
// member; segment announcements, barriers, locks) or, with
// Config.Channels, a segment's own channel among its members.
type Channel uint64

// Global is the channel every member is on.
const Global Channel = 0

// SegmentChannel is the channel of segment key.
func SegmentChannel(key uint32) Channel { return Channel(key) + 1 }

// Key is the segment a segment channel belongs to.
func (ch Channel) Key() uint32 { return uint32(ch - 1) }

func (ch Channel) String() string {
	if ch == Global {
		return "global"
	}
	return fmt.Sprintf("segment %d", ch.Key())
}

// Open is a segment channel to open: the segment's members are fixed and
// Self is one of them, with at least one other.
type Open struct {
	Key     uint32
	Members []frame.MemberID // sorted, Self included
}

// Opens returns, and forgets, the channels to open since the last call.
// The runtime must open them before it sends Next's messages on them.
func (c *Core) Opens() []Open {
	o := c.opens
	c.opens = nil
	return o
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

	// Selective join: members are the creator and the joiners (sorted),
	// epoch the creator's barrier count when it created the segment;
	// fixed once the barrier after it (fixedAt) is crossed here.
	members []frame.MemberID
	epoch   uint32
	fixed   bool
	fixedAt uint32
	// channel: the segment has a channel of its own here (Channels, Self
	// and at least one other member joined); peers are the other members.
	channel bool
	peers   []*segPeer
	// global: every member of the group joined (Channels): the segment
	// has no channel, its updates go on the global channel.
	global bool
	// readers are the members that joined read-only (JoinReadOnly;
	// Self's own such join is readOnly): they write nothing, so under
	// Channels they put no marker on the channel.
	readers  []frame.MemberID
	readOnly bool

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

// segPeer is another member of a segment channel as seen here.
type segPeer struct {
	id frame.MemberID
	// marks is the barrier number of its last marker on the channel,
	// markID that barrier's id.
	marks  uint32
	markID int32
	// markChannel: that marker was a channel barrier's (SeqChannel).
	markChannel bool
	// reader: it joined read-only; it sends nothing on the channel, and
	// no marker.
	reader bool
	// gone: the channel removed it (ChannelGone): everything of it that
	// any member of the channel delivered was delivered here.
	gone bool
	// held are its messages kept aside by WC, heldBytes their size.
	held      [][]byte
	heldBytes int
}

func (s *Segment) peer(id frame.MemberID) *segPeer {
	for _, p := range s.peers {
		if p.id == id {
			return p
		}
	}
	return nil
}

// addReader records that member id joined s read-only.
func (s *Segment) addReader(id frame.MemberID) {
	if !slices.Contains(s.readers, id) {
		s.readers = append(s.readers, id)
	}
}

func (s *Segment) addMember(id frame.MemberID) {
	if i, found := slices.BinarySearch(s.members, id); !found {
		s.members = slices.Insert(s.members, i, id)
	}
}

// Members are the members that created or joined the segment as far as
// Self knows (with Selective; final once Fixed).
func (s *Segment) Members() []frame.MemberID { return s.members }

// Fixed reports whether the segment's membership is fixed (Selective).
func (s *Segment) Fixed() bool { return s.fixed }

// newSegment records a segment; its memory is allocated at once unless
// the join is selective (then at the local Create or Join).
func (c *Core) newSegment(key uint32, g Geometry, local bool) *Segment {
	s := &Segment{key: key, geo: g}
	if local || !c.selective {
		s.mem = c.alloc(g.Bytes())
	}
	return s
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
	s := c.newSegment(key, g, true)
	s.creator, s.announce, s.attached = c.self, c.self, true
	s.epoch = c.barriers
	s.addMember(c.self)
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
	return c.join(key, g, false)
}

// JoinReadOnly is Join by a member that will never write the segment:
// its writes are refused (ErrReadOnly), and its announcement says so
// (SegmentFlagReadOnly), so that under Channels it puts no marker on the
// segment's channel and its peers wait for none from it there — a
// marker orders a member's updates on a channel before its barrier,
// and it has none. Joining again read-write after a read-only join is
// refused.
func (c *Core) JoinReadOnly(key uint32, g Geometry) (*Segment, error) {
	return c.join(key, g, true)
}

func (c *Core) join(key uint32, g Geometry, readOnly bool) (*Segment, error) {
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
	if s.attached && !s.removed {
		if s.readOnly && !readOnly {
			return nil, fmt.Errorf("%w: segment %d: joined read-write after a read-only join", ErrReadOnly, key)
		}
		return s, nil
	}
	if c.selective && s.fixed {
		return nil, fmt.Errorf("%w: segment %d: its membership %v was fixed at barrier %d, the first after its creation (a later join would need a snapshot, which is not supported)", ErrJoinClosed, key, s.members, s.fixedAt)
	}
	if s.removed {
		// Attached again after Remove: the copy starts over from zero
		// (updates that came while it was removed were dropped).
		s.removed, s.mem = false, c.alloc(g.Bytes())
	} else if s.mem == nil {
		s.mem = c.alloc(g.Bytes())
	}
	s.attached = true
	s.addMember(c.self)
	if readOnly {
		s.readOnly = true
		s.addReader(c.self)
		c.queue(AppendSegmentReadOnly(c.buffer(), key, g))
	} else {
		c.queue(AppendSegment(c.buffer(), key, g, false))
	}
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

func (c *Core) receiveSegment(p *peer, m *Message) error {
	from := p.id
	s := c.segs[m.Key]
	if s == nil {
		if m.Geometry.Bytes() > c.maxSeg {
			return fmt.Errorf("dsm: member %d announced segment %d of %v: %d bytes, more than MaxSegment (%d)", from, m.Key, m.Geometry, m.Geometry.Bytes(), c.maxSeg)
		}
		s = c.newSegment(m.Key, m.Geometry, false)
		s.announce = from
		if m.Create {
			s.creator = from
		}
		// The creator's barrier count when it created the segment is
		// the number of its barrier messages before the announcement
		// (FIFO on the global channel).
		s.epoch = p.barriers
		s.addMember(from)
		if m.ReadOnly {
			s.addReader(from)
		}
		c.addSegment(s)
		return nil
	}
	if c.selective {
		if s.fixed && !slices.Contains(s.members, from) {
			return fmt.Errorf("%w: member %d joined segment %d after its membership %v was fixed at barrier %d", ErrJoinClosed, from, m.Key, s.members, s.fixedAt)
		}
		s.addMember(from)
		if m.ReadOnly && !s.fixed {
			s.addReader(from)
		}
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
	if s.mem == nil { // selective: not joined here
		c.c.Ignored++
		return nil
	}
	if slices.Contains(s.readers, from) {
		return fmt.Errorf("dsm: update from member %d for segment %d, which it joined read-only", from, m.Key)
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
	if s.readOnly {
		return fmt.Errorf("%w: segment %d", ErrReadOnly, s.key)
	}
	if loc < 0 || count < 0 || loc+count > s.geo.Locations || loc+count < loc {
		return &RangeError{Key: s.key, Location: loc, Count: count, Locations: s.geo.Locations}
	}
	if c.selective && !s.fixed {
		if c.crossed() > s.epoch {
			return fmt.Errorf("%w: segment %d was created in barrier phase %d; write after the next total barrier (partial barriers fix no membership)", ErrNotFixed, s.key, s.epoch)
		}
		return fmt.Errorf("%w: segment %d was created in barrier phase %d; write after barrier %d (a total one: partial barriers fix no membership)", ErrNotFixed, s.key, s.epoch, s.epoch+1)
	}
	return nil
}

// sends reports whether writes to s go to other members: not under
// Channels when Self is the segment's only member.
func (c *Core) sends(s *Segment) bool { return !c.channels || s.channel || s.global }

// channelOf is the channel s's updates go on.
func (c *Core) channelOf(s *Segment) Channel {
	if c.channels && !s.global {
		return SegmentChannel(s.key)
	}
	return Global
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
	if !c.sends(s) {
		return nil
	}
	if !c.buffered {
		b := AppendUpdateHeader(c.buffer(), TypeUpdate, s.key, size)
		c.queueUpdate(c.channelOf(s), AppendRecord(b, loc, 1, value))
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

func (c *Core) queueUpdate(ch Channel, b []byte) {
	if ch == Global && c.channels {
		c.globalDirty = true
	}
	c.queueOn(ch, b)
	c.c.Updates++
	c.c.UpdateBytes += uint64(len(b))
}

// flush queues the segment's collected updates.
func (s *Segment) flush(c *Core) {
	if s.buf == nil {
		return
	}
	c.queueUpdate(c.channelOf(s), s.buf)
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
	if !c.sends(s) {
		return count, nil
	}
	per := min((c.max-UpdateOverhead)/size, MaxRecord)
	for done := 0; done < count; {
		n := min(per, count-done)
		b := AppendUpdateHeader(c.buffer(), t, s.key, size)
		b = AppendRecord(b, loc+done, n, values[done*size:(done+n)*size])
		if unreliable {
			c.queueOn(c.channelOf(s), b)
			c.c.UnreliableUpdates++
		} else {
			c.queueUpdate(c.channelOf(s), b)
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
