package seq

import (
	"errors"

	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/reliable/core"
)

// Errors of Propose and Step. Step's errors say why a frame was dropped;
// the frame changed no state, and the drop is counted in Stats.
var (
	// ErrWindowFull is back-pressure: Window requests are proposed and
	// not yet delivered back. Retry after a later Step or Tick.
	ErrWindowFull = core.ErrWindowFull
	// ErrHalted: this member was left out of an election or found it had
	// delivered beyond what the group agreed; it takes no more input.
	ErrHalted = core.ErrHalted
	// ErrNotMember: the frame's sender id is not in the member list.
	ErrNotMember = errors.New("seq: frame from a non-member")
	// ErrIncarnation: the sender id is a member, its incarnation is not.
	ErrIncarnation = errors.New("seq: frame from another incarnation of a member")
	// ErrSourceMAC: the frame came from a MAC that is not its member's.
	ErrSourceMAC = errors.New("seq: frame from a MAC that is not its sender's")
	// ErrGroup: the frame belongs to another group.
	ErrGroup = errors.New("seq: frame of another group")
	// ErrRemoved: the sequencer removed the sender (silent, or left out
	// of an election).
	ErrRemoved = errors.New("seq: frame from a removed member")
	// ErrFrameType: not a frame type the sequencer protocol handles.
	ErrFrameType = errors.New("seq: frame type not handled by the sequencer protocol")
	// ErrBadOrigin: a SeqData or Accept names an origin that is not a
	// member (or not its incarnation).
	ErrBadOrigin = errors.New("seq: sequenced message from an unknown origin")
	// ErrLeaving: Propose after Leave.
	ErrLeaving = core.ErrLeaving
)

// The contract's types (package core): the sequencer's deliveries,
// events and output are the ones every core has. A Delivery carries its
// place in the total order (Global, Epoch) besides its origin's request
// number (Seq); Data aliases a buffer of the core, valid until Advance.
type (
	TooLargeError = core.TooLargeError
	Delivery      = core.Delivery
	EventKind     = core.EventKind
	Event         = core.Event
	Ready         = core.Ready
)

// The events the sequencer core reports (core.EventKind):
//   - MemberFailed: the sequencer removed Member (silent past
//     FailureTimeout, or it did not vote in the election of Epoch, or it
//     was the sequencer that election replaced); it no longer holds back
//     the history. The removal is numbered in the global stream (a
//     SeqMember entry), so every member reports it once, at the same
//     place of the total order: after every message numbered before it
//     (Last is the global number before the entry's), before any after.
//     Reason says why, the same text everywhere.
//   - SequencerFailed: this member heard nothing from the sequencer
//     (Member) for FailureTimeout and started an election.
//   - SequencerChanged: Member became the sequencer of Epoch; Last is the
//     agreed last global number of the epochs before.
//   - SelfRemoved: this member was left out of the election of Epoch, or
//     had delivered beyond its agreed end; it halted.
//   - MemberLeft: Member's Leave arrived; everything it proposed was
//     delivered back to it before it left. When Member was the
//     sequencer, an election follows at once.
//   - SelfLeft: this member sent its Leave; the core is finished.
//   - MemberReturned: a member removed as failed was heard again by the
//     sequencer while every global it lacked was still in the history;
//     it is a member again. Numbered in the global stream like
//     MemberFailed, and reported at its place at every member.
const (
	MemberFailed     = core.MemberFailed
	SequencerFailed  = core.SequencerFailed
	SequencerChanged = core.SequencerChanged
	SelfRemoved      = core.SelfRemoved
	MemberLeft       = core.MemberLeft
	SelfLeft         = core.SelfLeft
	MemberReturned   = core.MemberReturned
)

// Stats are the core's counters.
type Stats struct {
	MessagesProposed uint64
	RequestsSent     uint64 // first transmissions
	RequestsResent   uint64 // retransmitted or resubmitted after an election
	Delivered        uint64 // messages
	DeliveredGlobals uint64 // global numbers (a bundle is one)

	Sequenced          uint64 // sequencer: global numbers assigned
	DataSent           uint64 // sequencer: SeqData broadcasts (method 1 and own)
	AcceptsSent        uint64 // sequencer: Accept entries
	AcceptFrames       uint64
	DuplicateRequests  uint64 // sequencer: requests already sequenced
	DuplicatesAnswered uint64
	HistoryFull        uint64 // sequencer: times sequencing waited for the history to drain
	StatusRequests     uint64
	StatusReplies      uint64

	RetransmitsAsked    uint64 // SeqRetransmit frames sent
	RetransmitsAnswered uint64 // SeqData sent in answer
	PayloadsMatched     uint64 // method 2: Accept matched to a buffered request
	Duplicates          uint64 // global numbers received again
	BeyondHistory       uint64 // global numbers further ahead than the history
	StaleEpoch          uint64 // frames of an epoch this member has left, or inconsistent with its epochs
	FutureEpoch         uint64 // frames of an epoch this member has not joined

	NotMember        uint64
	WrongIncarnation uint64
	WrongMAC         uint64
	WrongGroup       uint64
	FromRemoved      uint64
	BadOrigin        uint64
	UnhandledTypes   uint64
	EncodeErrors     uint64 // frames the core failed to build (a bug)

	Elections uint64 // elections this member took part in (epochs voted in)
	// MembersFailed and MembersReturned count the removals and
	// readmissions of other members delivered here (the MemberFailed and
	// MemberReturned events; this member's own are delivered silently).
	MembersFailed   uint64
	MembersLeft     uint64
	MembersReturned uint64
	LeavesSent      uint64

	Epoch       uint32
	Sequencer   frame.MemberID
	IsSequencer bool
	Electing    bool
	Halted      bool
	Left        bool   // this member sent its Leave
	Outstanding int    // own requests proposed and not yet delivered back
	InHistory   int    // sequencer: global numbers not yet stable
	Next        uint32 // next global number to deliver
	Received    uint32 // every global before it is held here
	Safe        uint32 // the safe cursor known here (Config.Resilience)
	// AllHeld is the all-held cursor known here: every global before it
	// is held by every live member (the sequencer computes it from the
	// received cursors it is told, the others learn it from the
	// sequencer). A member removed or departed no longer holds it back.
	AllHeld uint32
	// NotHeldByAll counts this member's messages (proposed, sealed or
	// not) that are not yet known here to be held by every live member:
	// not yet numbered and delivered back, or numbered at or beyond
	// AllHeld. When it is 0, every live member holds everything this
	// member proposed (what rbcastd's Flush waits for under Order Total).
	NotHeldByAll int
}

type role uint8

const (
	follower role = iota
	sequencer
	electing
	halted
)

// request is a request held by a member other than its origin: at the
// sequencer until it is numbered, elsewhere (method 2) until its Accept
// arrives.
type request struct {
	seq     uint32
	data    []byte
	bundled bool
	full    bool
}

// member is what this member knows of one member, itself included.
type member struct {
	id        frame.MemberID
	mac       [6]byte
	inc       uint32
	self      bool
	lastHeard Time
	gone      bool   // its Leave arrived: never a candidate, never waited for
	sawLeave  bool   // (at a departed sequencer) it was heard electing: it knows we left
	leftPend  bool   // its Leave arrived, MemberLeft waits until we delivered up to leftEnd
	leftEnd   uint32 // its delivered cursor in its Leave: every message it proposed is below
	// failed: the stream removed it (a SeqMember removal of it was
	// delivered here, and no readmission after); ourselves too.
	failed bool
	// handing: it was our sequencer and called an election to leave (we,
	// when we do): never a candidate, its vote counts, and it has left
	// once the election completes.
	handing bool

	// At the sequencer.
	live       bool // counted in stable; false once removed
	streamLive bool // live as the numbered stream has it (announceChanges)
	removedFor frame.RemovalReason
	acked      uint32 // its delivered cursor: it has delivered every global before
	rcvd       uint32 // its received cursor: it holds every global before (safe point)
	seqdSeq    uint32 // highest request number of this origin sequenced
	dupAt      Time   // last answer to a duplicate request of it
	probeAt    Time   // next status request to it while it is quiet
	electedAt  Time   // last Elected sent to it

	// At every member: the origin's highest request number delivered here
	// (the new sequencer's duplicate filter after an election).
	delivSeq uint32
	inbox    []request // ring by request number, allocated on first use

	// Its latest election frame as seen here.
	voted     bool
	voteEpoch uint32
	voteCand  frame.MemberID
	voteH     uint32 // its highest global held contiguously
	voteNext  uint32 // its delivered cursor then (the frame's ack[0])
}

type entryState uint8

const (
	empty    entryState = iota
	accepted            // method 2: number known, payload not yet here
	full
)

// entry is one globally numbered message in the log. Every member keeps
// the last History of them: the sequencer's history buffer, and at the
// others what an election may need (the sequencer never numbers g+History
// before g is delivered by every live member, so the ring slot of a
// global is reused only once it is stable).
//
// A change of the member list (SeqMember) is an entry too: change is set,
// uid names the member (Seq 0) and data is empty.
type entry struct {
	global  uint32
	epoch   uint32
	uid     frame.UID
	data    []byte
	bundled bool
	state   entryState
	change  frame.MemberChange // 0: an application message
	reason  frame.RemovalReason
	lentAt  uint64 // the Ready (batch) whose deliveries point into data
}

// pending is one of our requests, proposed and not yet delivered back.
// buf holds the messages in bundle form; a lone message travels without
// the length prefix.
type pending struct {
	buf   []byte
	count int
	known bool // seen numbered (its SeqData or Accept arrived)
}

// mine is one of our requests delivered back: its global number and how
// many messages it carried, kept until every live member holds it.
type mine struct {
	global uint32
	count  int
}

// vote is one of our election votes.
type vote struct {
	epoch uint32
	cand  frame.MemberID
}

// Core is one member's sequencer protocol state machine: ordinary member
// and sequencer in one, switching roles at elections. It does no I/O and
// reads no clock: the runtime feeds it frames (Step), the application's
// messages (Propose) and the time (Tick), carries out what Ready returns,
// then calls Advance. Not safe for concurrent use.
type Core struct {
	cfg     settings
	members []member // by id
	byID    map[frame.MemberID]int
	self    int
	rmask   uint32 // request rings
	lmask   uint32 // log

	started bool
	now     Time
	role    role
	epoch   uint32
	seqr    int    // the sequencer of epoch (index in members)
	base    uint32 // the first global numbered in epoch

	// The log: every member's copy of the ordered stream.
	log      []entry
	next     uint32 // next global number to deliver
	knownEnd uint32 // one past the highest global known numbered
	awaiting int    // accepted entries in [next, knownEnd) whose payload is missing

	repairDue     bool   // ask for new gaps at the next flush
	repairAt      Time   // repair timer; 0 when nothing is missing
	repairNext    uint32 // next when the timer last fired
	repairBackoff uint

	// Sender side.
	pend          []pending // ring by request number
	firstPend     uint32    // oldest request not delivered back
	nextReq       uint32    // number of the next request
	open          bool      // the request at nextReq is collecting messages
	handed        uint32    // requests before it were sent (sequenced, at the sequencer); Propose seals without sending
	openLen       int
	resendAt      Time
	resendBackoff uint
	lastToSeq     Time // last frame we sent the sequencer
	sinceReport   int  // globals delivered since then

	// Sequencer side.
	nextGlobal uint32
	stable     uint32 // every live member delivered every global before
	accepts    []frame.AcceptEntry
	lastBcast  Time
	statusAt   Time // history-full status requests are rate-limited
	wantStatus bool
	waiting    bool // requests wait for the history to drain
	rr         int  // round-robin start among origins

	// Election.
	votes      []vote
	electEpoch uint32
	electCand  frame.MemberID
	electAt    Time
	seenEpoch  uint32 // highest election epoch seen
	agreed     uint32 // candidate: the agreed last global
	agreedSet  bool
	fetchAt    Time
	fetchFrom  *member // the voter the candidate fetches from
	waitFrom   Time    // when we last moved to a new election epoch

	// Output until Advance.
	frames     [][]byte
	bufs       [][]byte
	deliveries []Delivery
	events     []Event
	batch      uint64   // counts Advance calls
	lent       [][]byte // entry buffers deliveries point into, recycled at Advance
	free       [][]byte

	// cutAt is the batch in which a member change was delivered: that
	// Ready delivers nothing after it, so that its event follows exactly
	// the messages numbered before it (the runtime hands a Ready's
	// deliveries over before its events).
	cutAt uint64

	hdr      frame.Header
	payload  frame.Payload
	bundle   frame.Bundle
	seqData  frame.SeqDataBody
	accept   frame.SeqAcceptBody
	status   frame.StatusBody
	retx     frame.RetransmitBody
	election frame.ElectionBody
	change   frame.SeqMemberBody

	// Leave.
	leaving    bool
	left       bool // Leave sent: the core is finished
	leaveLeft  int  // Leave repeats still to send
	leaveAt    Time
	leaveUntil Time // a departed sequencer repeats its Leave until then, or until every live member elects
	leftsPend  int  // members whose MemberLeft waits for our deliveries (see stepLeave)

	// Safe delivery (Config.Resilience).
	recvd    uint32   // received cursor: every global before it is held here (next <= recvd <= knownEnd)
	safe     uint32   // safe cursor: the sequencer's, or the highest it announced; delivery stops there
	safeSent uint32   // sequencer: the safe cursor last broadcast
	ackSent  uint32   // follower: the received cursor last reported to the sequencer
	scratch  []uint32 // sequencer: computeSafe's workspace
	holders  int      // safeHolders(), recomputed when a member leaves
	leave    frame.Empty

	// All-held point: what rbcastd's Flush waits for under Order Total.
	held      uint32 // all-held cursor: every global before it is held by every live member (the sequencer's, or the highest it announced)
	heldSent  uint32 // sequencer: the all-held cursor last broadcast
	heldAsked uint32 // sequencer: nextGlobal when it last asked for status to move held (SafeSequencer)
	mine      []mine // ring of our requests delivered back at or beyond held, oldest first
	mineHead  int
	mineLen   int
	heldMsgs  uint64 // our messages known held by every live member

	sealAhead int // sealAhead; tests change it

	stats Stats
}

// firstRequest is the number of every member's first request; the
// duplicate filters start just below it.
const firstRequest = 1

// New returns the core of member cfg.Self. Call Tick once with the current
// time to start its clocks before anything else.
func New(cfg Config) (*Core, error) {
	s, err := cfg.validate()
	if err != nil {
		return nil, err
	}
	c := &Core{batch: 1, sealAhead: sealAhead, cfg: s, rmask: s.ringSize - 1, lmask: uint32(s.History) - 1, byID: map[frame.MemberID]int{}}
	for _, m := range sortedMembers(s.Members) {
		c.byID[m.ID] = len(c.members)
		c.members = append(c.members, member{
			id: m.ID, mac: m.MAC, inc: m.Incarnation, self: m.ID == s.Self, live: true, streamLive: true,
			acked: s.InitialGlobal, rcvd: s.InitialGlobal, seqdSeq: firstRequest - 1, delivSeq: firstRequest - 1,
		})
	}
	c.self = c.byID[s.Self]
	c.epoch, c.seqr = s.InitialEpoch, 0 // the lowest id starts as sequencer
	c.base = s.InitialGlobal
	if c.seqr == c.self {
		c.role = sequencer
	}
	c.log = make([]entry, s.History)
	c.next, c.knownEnd, c.nextGlobal, c.stable = s.InitialGlobal, s.InitialGlobal, s.InitialGlobal, s.InitialGlobal
	c.recvd, c.safe, c.safeSent, c.ackSent = s.InitialGlobal, s.InitialGlobal, s.InitialGlobal, s.InitialGlobal
	c.held, c.heldSent, c.heldAsked = s.InitialGlobal, s.InitialGlobal, s.InitialGlobal
	c.mine = make([]mine, s.ringSize)
	c.scratch = make([]uint32, 0, len(s.Members))
	c.holders = c.safeHolders()
	c.pend = make([]pending, s.ringSize)
	c.firstPend, c.nextReq, c.handed = firstRequest, firstRequest, firstRequest
	c.hdr = frame.Header{Group: s.Group, Sender: s.Self, Incarnation: s.selfInc, Acks: make([]uint32, ackEntries)}
	c.payload.T, c.bundle.T = frame.SeqRequest, frame.SeqRequest
	return c, nil
}

func sortedMembers(ms []frame.MemberInfo) []frame.MemberInfo {
	out := append([]frame.MemberInfo(nil), ms...)
	for i := 1; i < len(out); i++ {
		for j := i; j > 0 && out[j].ID < out[j-1].ID; j-- {
			out[j], out[j-1] = out[j-1], out[j]
		}
	}
	return out
}

// touch records the time of an input and starts the clocks on the first.
func (c *Core) touch(now Time) {
	if now > c.now {
		c.now = now
	}
	if c.started {
		return
	}
	c.started = true
	c.lastToSeq, c.lastBcast = c.now, c.now
	for i := range c.members {
		c.members[i].lastHeard = c.now
	}
}

func (c *Core) member(id frame.MemberID) *member {
	i, ok := c.byID[id]
	if !ok {
		return nil
	}
	return &c.members[i]
}

func (c *Core) sequencerMember() *member { return &c.members[c.seqr] }

// outstanding is the number of sealed requests not yet delivered back.
func (c *Core) outstanding() int { return int(c.nextReq - c.firstPend) }

// Propose queues an application message. It is copied; msg may be reused
// at once. Messages proposed before the next Ready share one request (a
// bundle) when they fit, and so one global number; while Window requests
// are in flight, one more request collects messages until room frees.
// ErrWindowFull is back-pressure (the window is full and so is the
// collecting request): the caller retries after a later Step or Tick.
func (c *Core) Propose(now Time, msg []byte) error {
	c.touch(now)
	if c.role == halted {
		return ErrHalted
	}
	if c.leaving {
		return ErrLeaving
	}
	if len(msg) > c.cfg.maxPayload {
		return &TooLargeError{Size: len(msg), Max: c.cfg.maxPayload}
	}
	if c.open {
		if c.openLen+2+len(msg) <= c.cfg.maxPayload {
			p := &c.pend[c.nextReq&c.rmask]
			p.buf = appendMsg(p.buf, msg)
			p.count++
			c.openLen += 2 + len(msg)
			c.stats.MessagesProposed++
			return nil
		}
		if c.outstanding() >= c.cfg.Window {
			return ErrWindowFull
		}
		// Sealed, not sent: Propose produces no output (the core
		// contract); the next Step, Tick or Ready sends it (sendSealed).
		c.open = false
		c.nextReq++
	}
	// A new request opens even when the window is full: it collects
	// messages (a bundle) until room frees, so that a sender of small
	// messages that outruns the sequencer sends fewer, fuller requests.
	p := &c.pend[c.nextReq&c.rmask]
	p.buf = appendMsg(p.buf[:0], msg)
	p.count, p.known = 1, false
	c.open, c.openLen = true, 2+len(msg)
	c.stats.MessagesProposed++
	return nil
}

func appendMsg(b, msg []byte) []byte {
	b = append(b, byte(len(msg)>>8), byte(len(msg)))
	return append(b, msg...)
}

// requestBody returns the wire form of request p: one message bare, a
// bundle in bundle form.
func requestBody(p *pending) (data []byte, bundled bool) {
	if p.count == 1 {
		return p.buf[2:], false
	}
	return p.buf, true
}

// seal numbers the open request and sends it (step 3 of the paper's
// sequence of events: to the sequencer), or, at the sequencer, numbers it
// at once.
func (c *Core) seal() {
	if !c.open || c.outstanding() >= c.cfg.Window {
		return // the open request waits for window room
	}
	c.open = false
	c.nextReq++
	c.sendSealed()
}

// sendSealed hands the sealed requests not yet sent to the role: a
// follower sends them to the sequencer, the sequencer numbers them at
// once; while electing they wait for the new sequencer (resubmit).
func (c *Core) sendSealed() {
	if c.handed == c.nextReq || c.role == halted {
		return
	}
	switch c.role {
	case sequencer:
		c.sequenceFrom(&c.members[c.self])
	case follower:
		for r := c.handed; r != c.nextReq; r++ {
			c.sendRequest(r, 0)
			c.stats.RequestsSent++
		}
	}
	c.handed = c.nextReq
	c.armResend()
}

// armResend starts the resend timer when a request waits unseen.
func (c *Core) armResend() {
	if c.resendAt != 0 || c.role == sequencer {
		return
	}
	for r := c.firstPend; r != c.nextReq; r++ {
		if !c.pend[r&c.rmask].known {
			c.resendAt = c.now.Add(c.cfg.ResendTimeout << c.resendBackoff)
			return
		}
	}
}

// sealAhead: Ready seals the request collecting proposed messages only
// while fewer than this many of ours are in flight, or once it is half
// full; otherwise it keeps collecting until one comes back (Nagle's rule
// for requests). A lone message goes at once; a sender of many small
// messages sends fuller requests, and makes one system call per request,
// not per message.
const sealAhead = 2

// Ready returns what to send, deliver and report now. It first seals the
// request collecting proposed messages (see sealAhead).
func (c *Core) Ready() Ready {
	c.flush()
	return Ready{Frames: c.frames, Deliveries: c.deliveries, Events: c.events}
}

// flush turns what is due into frames.
func (c *Core) flush() {
	if !c.started || c.role == halted || c.left {
		return
	}
	if c.handed != c.nextReq {
		c.sendSealed()
	}
	if c.cutAt != 0 && c.cutAt != c.batch {
		c.cutAt = 0
		c.drain() // what the last member change held back
	}
	if c.outstanding() < c.sealAhead || 2*c.openLen >= c.cfg.maxPayload {
		c.seal()
	}
	switch c.role {
	case sequencer:
		c.flushAccepts()
		if c.safe != c.safeSent && c.gated() {
			c.sendStatusRequest(c.cfg.dst, false) // announce the safe point
		}
		if c.waiting {
			c.wantStatus = true
		}
		if c.wantStatus && c.now >= c.statusAt {
			c.sendStatusRequest(c.cfg.dst, true)
			c.statusAt = c.now.Add(c.cfg.NackTimeout / 4)
			c.wantStatus = false
		}
		if c.now >= c.lastBcast.Add(c.cfg.HeartbeatInterval) {
			c.sendStatusRequest(c.cfg.dst, true)
		}
		if c.heldDue() && (c.now >= c.lastBcast.Add(c.cfg.NackTimeout) || c.held == c.nextGlobal && c.held != c.heldSent) {
			c.announceHeld()
		}
	case follower:
		if c.repairDue {
			c.sendRetransmit(c.sequencerMember(), c.epoch)
		}
		if c.sinceReport >= c.cfg.History/4 || c.now >= c.lastToSeq.Add(c.cfg.HeartbeatInterval) ||
			c.gated() && c.ackSent != c.recvd {
			// (Under SafeMajority the sequencer waits for our received
			// cursor to declare messages safe: report it at once, one
			// frame per Ready at most, unless a request carried it.)
			c.sendStatusReply()
		}
	}
	c.repairDue = false
	if c.leftsPend > 0 {
		c.reportLeft()
	}
	c.maybeLeave()
}

// Advance tells the core the runtime has sent, delivered and reported all
// of the last Ready.
func (c *Core) Advance() {
	c.frames = c.frames[:0]
	clear(c.deliveries)
	c.deliveries = c.deliveries[:0]
	c.events = c.events[:0]
	c.batch++
	for i, b := range c.lent {
		c.free = append(c.free, b[:0])
		c.lent[i] = nil
	}
	c.lent = c.lent[:0]
}

// reusable returns en's buffer emptied for new contents, or, when a
// delivery of the current Ready still points into it, a free buffer: the
// old one is recycled at Advance. A log slot can be reused within one
// batch of input when a member catches up.
func (c *Core) reusable(en *entry) []byte {
	if en.lentAt != c.batch || en.data == nil {
		return en.data[:0]
	}
	c.lent = append(c.lent, en.data)
	en.data = nil
	if n := len(c.free); n > 0 {
		b := c.free[n-1]
		c.free = c.free[:n-1]
		return b
	}
	return nil
}

// Deadline is when Tick must next run; 0 before the first input and once
// halted.
func (c *Core) Deadline() Time {
	if !c.started || c.role == halted {
		return 0
	}
	if c.left {
		return c.leaveAt
	}
	var d Time
	early := func(t Time) {
		if t != 0 && (d == 0 || t < d) {
			d = t
		}
	}
	if c.cutAt != 0 && c.cutAt != c.batch {
		early(c.now) // deliver what the last member change held back
	}
	switch c.role {
	case sequencer:
		early(c.lastBcast.Add(c.cfg.HeartbeatInterval))
		if c.heldDue() {
			early(c.lastBcast.Add(c.cfg.NackTimeout))
		}
		if c.wantStatus || c.waiting {
			early(c.statusAt)
		}
		for i := range c.members {
			if m := &c.members[i]; m.live && !m.self {
				early(m.lastHeard.Add(c.cfg.FailureTimeout))
				early(max(m.probeAt, m.lastHeard.Add(c.cfg.FailureTimeout/2)))
			}
		}
	case follower:
		early(c.lastToSeq.Add(c.cfg.HeartbeatInterval))
		early(c.sequencerMember().lastHeard.Add(c.cfg.FailureTimeout))
		early(c.repairAt)
		early(c.resendAt)
	case electing:
		early(c.electAt)
		early(c.fetchAt)
		if w := c.waitFrom.Add(c.cfg.FailureTimeout); w > c.now {
			early(w)
		}
		for i := range c.members {
			if m := &c.members[i]; !m.self && !c.suspected(m) {
				early(m.lastHeard.Add(c.cfg.FailureTimeout))
			}
		}
	}
	return d
}

// Tick runs the timers due at now and the failure detector. Frames it
// produces come out of the next Ready.
func (c *Core) Tick(now Time) {
	c.touch(now)
	if c.handed != c.nextReq {
		c.sendSealed()
	}
	now = c.now
	if c.left {
		if c.leaveAt != 0 && now >= c.leaveAt {
			c.sendLeave()
		}
		return
	}
	switch c.role {
	case sequencer:
		for i := range c.members {
			m := &c.members[i]
			switch {
			case !m.live || m.self:
			case now >= m.lastHeard.Add(c.cfg.FailureTimeout):
				c.removeMember(m, frame.ReasonSilent)
			case now >= m.lastHeard.Add(c.cfg.FailureTimeout/2) && now >= m.probeAt:
				// Quiet for half the failure timeout: ask it directly,
				// four times a heartbeat, so that a burst of loss on its
				// path is not taken for a crash.
				c.sendStatusRequest(m.mac, true)
				m.probeAt = now.Add(c.cfg.HeartbeatInterval / 4)
			}
		}
	case follower:
		if now >= c.sequencerMember().lastHeard.Add(c.cfg.FailureTimeout) {
			c.startElection()
			c.electionStep()
			return
		}
		if c.repairAt != 0 && now >= c.repairAt {
			c.repairTimeout()
		}
		if c.resendAt != 0 && now >= c.resendAt {
			c.resendTimeout()
		}
	case electing:
		if c.fetchAt != 0 && now >= c.fetchAt {
			c.fetchAt = 0
		}
		if now >= c.electAt {
			c.sendElection(frame.ElectionVote, c.cfg.dst)
		}
		c.electionStep()
	}
}

// Backoff caps: the resend timer doubles up to 16× without progress, the
// repair timer up to 8×.
const (
	maxResendBackoff = 4
	maxRepairBackoff = 3
)

// resendTimeout sends again every request not yet seen numbered: the
// request or its SeqData/Accept was lost (the paper's sender
// retransmission timer).
func (c *Core) resendTimeout() {
	c.resendAt = 0
	n := 0
	for r := c.firstPend; r != c.nextReq; r++ {
		if !c.pend[r&c.rmask].known {
			c.sendRequest(r, frame.FlagRetransmit)
			c.stats.RequestsResent++
			n++
		}
	}
	if n > 0 {
		c.resendBackoff = min(c.resendBackoff+1, maxResendBackoff)
		c.armResend()
	}
}

// progress resets the resend backoff when a request of ours was seen
// numbered.
func (c *Core) progress() {
	c.resendBackoff = 0
	c.resendAt = 0
	c.armResend()
}

// Counters returns the sequencer core's own counters.
func (c *Core) Counters() Stats {
	s := c.stats
	s.Epoch = c.epoch
	s.Sequencer = c.sequencerMember().id
	s.IsSequencer = c.role == sequencer
	s.Electing = c.role == electing
	s.Halted = c.role == halted
	s.Left = c.left
	s.Outstanding = c.outstanding()
	if c.role == sequencer {
		s.InHistory = int(c.nextGlobal - c.stable)
	}
	s.Next, s.Received, s.Safe = c.next, c.recvd, c.safe
	s.AllHeld = c.held
	s.NotHeldByAll = int(c.stats.MessagesProposed - c.heldMsgs)
	return s
}

// MemberState is one member as this member sees it (for status output;
// Members allocates).
type MemberState struct {
	ID        frame.MemberID
	Self      bool
	Sequencer bool // the sequencer of our epoch
	// Live: the member has not left, and no removal of it was delivered
	// here (MemberFailed) since it was last taken back (MemberReturned):
	// the same at every member once it delivered the same stream, the
	// sequencer included (it decides a removal earlier, and reports it,
	// like everyone, where the stream has it). At a follower, the
	// sequencer is also not live once silent past FailureTimeout.
	Live bool
	// Acked is the sequencer's view of the member's delivered cursor; 0
	// elsewhere.
	Acked     uint32
	Delivered uint32 // its highest request number delivered here
	LastHeard Time
}

// MemberStates returns every member's state, by id.
func (c *Core) MemberStates() []MemberState {
	out := make([]MemberState, len(c.members))
	for i := range c.members {
		m := &c.members[i]
		live := !m.gone && (m.self || !m.failed)
		if c.role != sequencer && i == c.seqr && c.suspected(m) {
			live = false
		}
		out[i] = MemberState{ID: m.id, Self: m.self, Sequencer: i == c.seqr, Live: live,
			Delivered: m.delivSeq, LastHeard: m.lastHeard}
		if c.role == sequencer {
			out[i].Acked = m.acked
		}
	}
	return out
}

// Blocked reports whether Propose may refuse a message: Window requests
// are in flight and another collects messages (it refuses one that does
// not fit).
func (c *Core) Blocked() bool { return c.outstanding() >= c.cfg.Window && c.open }

// MaxMessage is the largest message Propose accepts.
func (c *Core) MaxMessage() int { return c.cfg.maxPayload }

// Repairing reports whether global numbers known to be sequenced are
// missing here (a gap, or method 2 payloads not yet arrived).
func (c *Core) Repairing() bool { return c.role == follower && c.repairAt != 0 }

// IsSequencer reports whether this member is the sequencer now.
func (c *Core) IsSequencer() bool { return c.role == sequencer }

// Halted reports whether this member halted (SelfRemoved).
func (c *Core) Halted() bool { return c.role == halted }

func (c *Core) halt(epoch, last uint32, reason string) {
	c.role = halted
	c.events = append(c.events, Event{Kind: SelfRemoved, Member: c.cfg.Self, Epoch: epoch, Last: last, At: c.now, Reason: reason})
}

// Sequencer is the sequencer this member follows (itself, when it is).
func (c *Core) Sequencer() frame.MemberID { return c.sequencerMember().id }

// The contract (core.Core).

var _ core.Core = (*Core)(nil)

// Done reports whether the core is finished: it halted, or it left and
// repeated its Leave.
func (c *Core) Done() bool { return c.role == halted || c.left && c.Deadline() == 0 }

// Info says what the runtime needs to know: the largest message, that
// this member's own messages are delivered here too, and which frames
// deliver.
func (c *Core) Info() core.Info {
	return core.Info{Self: c.cfg.Self, MaxMessage: c.cfg.maxPayload, SelfDelivery: true, Delivers: delivers,
		InFlight: "requests not yet sequenced and delivered back"}
}

func delivers(t frame.Type) bool {
	return t == frame.SeqData || t == frame.SeqAccept || t == frame.SeqRequest
}

// Stats returns the counters every core has, with the sequencer core's
// own (Counters) as Detail.
func (c *Core) Stats() core.Stats {
	s := c.Counters()
	return core.Stats{Proposed: s.MessagesProposed, Delivered: s.Delivered, Sent: s.RequestsSent + s.DataSent,
		Retransmitted: s.RequestsResent + s.RetransmitsAnswered, RepairRequests: s.RetransmitsAsked, Epoch: s.Epoch, Window: c.cfg.Window,
		InFlight: s.Outstanding, Unsettled: s.NotHeldByAll, Detail: s}
}

// Members returns every member, this one included, by id: the sequencer
// decides who is live (see MemberState.Live); gaps in the one global
// stream are counted against the sequencer.
func (c *Core) Members() []core.Member {
	ms := c.MemberStates()
	out := make([]core.Member, len(ms))
	for i, m := range ms {
		out[i] = core.Member{ID: m.ID, Self: m.Self, Live: m.Live, Sequencer: m.Sequencer}
		if m.Self {
			out[i].Live = !c.left && c.role != halted
		}
		if m.Sequencer && !m.Self {
			out[i].Repairing = c.Repairing()
		}
	}
	return out
}

// Repair says that every frame fills the one global stream, whose gaps
// the sequencer answers, and whether it has a gap here.
func (c *Core) Repair(frame.MemberID) (frame.MemberID, bool) { return c.Sequencer(), c.Repairing() }
