package pbp

import (
	"encoding/binary"
	"errors"

	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/reliable/core"
)

// Errors of Propose and Step. Step's errors say why a frame was dropped;
// the frame changed no state, and the drop is counted in Stats.
var (
	// ErrWindowFull is back-pressure: Window frames are unacknowledged
	// and Window more wait for room. Retry after a later Step, Tick or
	// removal frees room (Blocked turns false).
	ErrWindowFull = core.ErrWindowFull
	// ErrLeaving: Leave was called; no new messages are accepted.
	ErrLeaving = core.ErrLeaving
	// ErrNotMember: the frame's sender id is not in the member list.
	ErrNotMember = errors.New("pbp: frame from a non-member")
	// ErrIncarnation: the sender id is a member, its incarnation is not.
	ErrIncarnation = errors.New("pbp: frame from another incarnation of a member")
	// ErrSourceMAC: the frame came from a MAC that is not its member's.
	ErrSourceMAC = errors.New("pbp: frame from a MAC that is not its sender's")
	// ErrGroup: the frame belongs to another group.
	ErrGroup = errors.New("pbp: frame of another group")
	// ErrView: the frame belongs to another view of the group.
	ErrView = errors.New("pbp: frame of another view")
	// ErrRemoved: the sender was removed from the group (failed or left).
	ErrRemoved = errors.New("pbp: frame from a removed member")
	// ErrFrameType: not a frame type PBP handles.
	ErrFrameType = errors.New("pbp: frame type not handled by PBP")
	// ErrLeft: this member has left; the core takes no more input.
	ErrLeft = errors.New("pbp: this member has left the group")
)

// The contract's types (package core): PBP's deliveries, events and
// output are the ones every core has.
type (
	TooLargeError = core.TooLargeError
	Delivery      = core.Delivery
	EventKind     = core.EventKind
	Event         = core.Event
	Ready         = core.Ready
)

// The events PBP reports (core.EventKind): Member is removed as
// MemberFailed when silent past FailureTimeout; as MemberStalled when
// heard from but ignoring us — it acknowledged none of our frames for
// FailureTimeout while some were outstanding (Reason StalledNoAcks), or its
// frames run more than a window past our acknowledgement, so it removed
// us and what we miss from it can never be repaired (StalledRemovedUs);
// as MemberLeft when its Leave arrived and everything it sent was
// delivered. SelfLeft: this member sent its Leave; the core is finished.
const (
	MemberFailed  = core.MemberFailed
	MemberStalled = core.MemberStalled
	MemberLeft    = core.MemberLeft
	SelfLeft      = core.SelfLeft
)

// Reasons of MemberStalled (Event.Reason).
const (
	StalledNoAcks    = core.StalledNoAcks
	StalledRemovedUs = core.StalledRemovedUs
)

// Stats are PBP's own counters (core.Stats.Detail). Frames and messages are counted
// separately: a bundled frame carries several messages.
type Stats struct {
	MessagesProposed uint64
	DataFramesSent   uint64 // first transmissions
	Retransmitted    uint64 // Data frames sent again
	// of Retransmitted: to the asking member's MAC only
	RetransmittedUnicast uint64
	RetransmitsHeld      uint64 // requests not honoured: the frame was just retransmitted
	AcksSent             uint64
	HeartbeatsSent       uint64
	NacksSent            uint64
	NacksRepeated        uint64 // of NacksSent: asking again for frames asked for before
	NacksReceived        uint64 // Nacks addressed to this member
	NackedStale          uint64 // requested sequence numbers already stable or never sent
	LeavesSent           uint64

	Delivered       uint64 // messages
	DeliveredFrames uint64
	OutOfOrder      uint64 // frames copied to wait for a gap to fill
	Duplicates      uint64 // frames already delivered or already buffered
	BeyondWindow    uint64 // frames more than a window past our acknowledgement (their sender removed us: StalledRemovedUs)
	GapsRepaired    uint64 // PBP2: repair states entered and left again
	// Config.Retain: frames retained for a view change, and frames not
	// because every other member held them already (needKeep). Kept
	// counts KeptHeld, those retained in the reorder ring's buffer they
	// waited in (no copy: keepHeld); the others were copied out of the
	// received bytes.
	Kept, KeepSkipped, KeptHeld uint64
	// KeptLent counts the frames Kept in the received bytes, lent by the
	// link (StepLent: no copy); LoansReclaimed those copied out of them
	// later because the link wanted its bytes back (Reclaim).
	KeptLent, LoansReclaimed uint64
	// Expected counts Expect hints that armed a repair (expect.go);
	// ExpectsWithdrawn, those dropped unanswered after expectAsks Nacks
	// (the sender had not sent the frames: it was still computing).
	Expected, ExpectsWithdrawn uint64

	NotMember        uint64
	WrongIncarnation uint64
	WrongMAC         uint64
	WrongGroup       uint64
	WrongView        uint64 // frames of another view (reliable/view)
	FromRemoved      uint64
	BadAcks          uint64 // acks for sequence numbers not yet sent
	UnhandledTypes   uint64
	EncodeErrors     uint64 // frames the core failed to build (a bug)

	// Datagrams of the Unreliable level (datagram.go): sent, delivered,
	// and dropped (duplicates, and those older than core.DatagramSpan).
	DatagramsSent, DatagramsDelivered, DatagramsDropped uint64

	// Config.Relay (relay.go): frames of a silent member relayed to the
	// group, relayed frames taken, and relays refused (not a Data frame
	// of this group, of a non-member, or a window or more ahead).
	Relayed, RelaysReceived, RelaysRefused uint64

	MembersFailed uint64
	MembersLeft   uint64
	Discarded     uint64 // messages of removed members dropped beyond a gap

	Window   int // configured window
	InFlight int // frames sent and not yet acknowledged by every live member
	Pending  int // frames accepted and waiting for window room (at most Window)
	Buffered int // out-of-order frames held, all senders
}

// MemberState is one member's protocol state as seen here (for status
// output; it allocates).
type MemberState struct {
	ID        frame.MemberID
	Live      bool
	Repairing bool   // PBP2 repair state: frames from it are missing
	Expected  uint32 // next sequence number expected from it (exp_seqno)
	KnownEnd  uint32 // one past the highest sequence number it is known to have sent
	Acked     uint32 // its acknowledgement of ours: the next it expects from us
	Buffered  int
	LastHeard Time
}

type peerState uint8

const (
	normal peerState = iota // nothing from this sender is known missing
	repair                  // PBP2 need_resend: some frames are missing
)

// peer is what this member knows of one other member.
type peer struct {
	id          frame.MemberID
	mac         [6]byte
	incarnation uint32
	slot        int // index in the ack vector
	live        bool
	state       peerState

	expected uint32 // exp_seqno[j]: next sequence number to deliver
	// turnExp is expected when this turn began (the last Advance): the
	// most any acknowledgement of ours that has left says, since frames
	// leave only in a Ready (removedUs). It is kept lazily: expected
	// moves only in delivered, which first sets turnExp to it when
	// expTurn, the batch turnExp was set in, is not this one; so turnExp
	// holds in the batch expTurn and expected in any other (turnExpOf).
	// Advance setting it for every peer cost every turn a pass.
	turnExp uint32
	expTurn uint64
	// frozenAt is expected when the core was frozen: what its Acks say
	// from then on (Freeze).
	frozenAt  uint32
	knownEnd  uint32 // one past the highest sequence number known sent
	acked     uint32 // window_base[j]: the next of ours it expects
	ackedAt   Time   // when acked last moved, or we last sent to it caught up
	lastHeard Time
	dg        core.DatagramWindow // its datagrams seen (datagram.go)
	// vec is its row of the acknowledgement matrix (acks.go): the latest
	// of its ack vectors heard, as it came (entry s: held(s)).
	vec []byte

	leaving  bool
	leaveSeq uint32
	left     bool // removed as MemberLeft (its Leave, everything before it delivered)

	// hinting: Expect raised knownEnd past sentEnd, one past the highest
	// sequence number a frame of the sender proved sent (see learnEnd).
	hinting bool
	sentEnd uint32
	// hintAsks counts the nack timer's Nacks for the hinted frames alone
	// (nothing proven missing) since Expect: expectAsks at most.
	hintAsks int

	nackDue  bool   // a Nack is to go out at the next flush
	nackFrom uint32 // it asks for what is missing from here on
	nackAt   Time   // nack timer (thesis fig. 3.9); 0 when not repairing
	// nackExpected is expected when the nack timer last fired: no
	// progress since then backs the timer off.
	nackExpected uint32
	nackBackoff  uint
	nackArmed    Time // when the nack timer was last set
	// Repair round trip (RFC 6298's estimator): from the first Nack not
	// yet answered to the first retransmission that arrives after it of
	// a frame we asked for and still miss.
	// nackSentAt is 0 when no sample is pending. A re-asking Nack keeps
	// the pending sample: if its answer is the one that comes, the sample
	// overstates the round trip by one timeout, which lengthens the timer
	// a little. Karn's rule (cancel the sample) would be exact, but where
	// the timer fires before any answer can come (retransmissions queued
	// behind a window at a slow port) no sample was ever taken, the timer
	// never grew, and every re-ask cost another retransmission
	// (TestNackTimerLearnsLongRepairRoundTrip). While the timer backs off
	// (the sender was not heard for a whole timeout) no sample is pending
	// or started: it would measure the sender's silence.
	nackSentAt Time
	nackRepeat bool // the Nack due re-asks (nack timer)
	// nackRound numbers our Nacks to this sender (held.asked); reask says
	// some frames asked for before are flagged lost (held.lost) and the
	// Nack due asks for them again.
	nackRound    uint32
	reask        bool
	timerDue     bool // the nack timer fired: ask again for frames asked long enough ago
	srtt, rttvar Duration

	// HoldFrom (hold.go): holdSet from HoldFrom to ReleaseFrom; holding
	// while its frames are kept undelivered (until holdUntil); released:
	// ReleaseFrom ended the hold, what it kept is delivered at Tick.
	holdSet, holding, released bool
	holdUntil                  Time

	ring     []held // reorder buffer (in_buffers[j]), indexed seq & mask
	buffered int
	kept     []kept // Config.Retain: the last frames delivered, indexed seq & mask
	relayAt  Time   // Config.Relay: its frames are not relayed again before then
}

// held is a received frame waiting for the frames before it; for a
// missing frame (full false, seq set), when we last asked for it.
type held struct {
	data    []byte
	seq     uint32
	full    bool
	bundled bool
	// asked is the nackRound of the last Nack that asked for this missing
	// frame (0: never); lost says a later frame's retransmission arrived
	// first, so this one's was lost: ask again at once.
	asked   uint32
	askedAt Time
	lost    bool
}

// sent is a frame of ours kept until every live member acknowledged it
// (out_buffer). buf is the frame as it is sent: Core.pre bytes of room for
// the Ethernet and rbcast headers, then the body: a lone message as it
// is, several in bundle form, each prefixed by its 16-bit length. The CRC
// goes after it when the frame is sent. emitted is the Ready (Core.batch)
// that last handed the frame out.
type sent struct {
	buf     []byte
	count   int
	emitted uint64
	retxAt  Time // last retransmission, 0 if none
	// served: the members (bit = ack vector slot, slots below 64) whose
	// Nacks the last retransmission answered. A Nack from one of them
	// again is a new request: its copy was lost.
	served uint64
	// unicast: the last retransmission went to one member's MAC only; a
	// second member asking within the hold gets a broadcast.
	unicast bool
	sentAt  Time // first transmission
	// pins counts a layer's holds on the body (Pin of this member's own
	// frame): a frame that comes to this slot meanwhile gets a new buffer.
	pins int
	// prompt: the frame holds a message proposed with ProposePrompt.
	prompt bool
}

// Core is one member's PBP protocol state machine. It does no I/O and
// reads no clock: the runtime feeds it frames (Step), the application's
// messages (Propose) and the time (Tick), and carries out what Ready
// returns, then calls Advance. Not safe for concurrent use.
type Core struct {
	cfg   settings
	mask  uint32  // reorder rings
	hmask uint32  // history
	peers []peer  // by id, Self excluded
	index []int32 // member id - ackBase -> peers index; -1 none, -2 self

	started bool
	now     Time
	// removals counts the members removed (remove): Live and HasLeft
	// change only when it grows.
	removals uint64

	// The Unreliable level (datagram.go): this member's last datagram
	// number, and the datagrams proposed since the last Ready (dgQ, each
	// dgLens long).
	dgNext uint32
	dgQ    []byte
	dgLens []int

	// Sending side (figs. 3.1, 3.5).
	nextSeq uint32 // exp_seqno[i]: sequence number of the next frame
	stable  uint32 // wb: every live member acknowledged all before it
	history []sent // out_buffer, indexed seq & mask
	// pending frames at nextSeq, nextSeq+1, … are accepted and not yet
	// numbered: they wait for window room (at most Window of them). The
	// last one collects messages (bundling); openLen is its body length
	// in bundle form, openAt when it opened.
	pending int
	// pendingMsgs is how many messages the pending frames hold
	// (PendingMessages, asked every turn by the layers over view).
	pendingMsgs int
	openLen     int
	openAt      Time
	resendAt    Time // resend timer; 0 when nothing is outstanding
	// Acknowledgement round trip (first transmission to stable, frames
	// never retransmitted), for PBP2's resend timer.
	ackSRTT, ackRTTVar Duration
	backoff            uint // resend timeouts in a row without progress
	lastSent           Time
	heartbeatNow       bool // HeartbeatNow: the next Ready sends one

	// Acknowledging (the ack timer and the half-window rule).
	ackAt    Time
	ackNow   bool
	receipts int
	// Config.PromptAcks, ProposePrompt (acks.go): asked is one past the
	// last frame of ours that a frame asked to be acknowledged at once;
	// promptTo one past the last that wants prompt acks (under
	// PromptAcks, every one); tailAt is when a probe asks for the frames
	// after asked, if nothing goes out before.
	// prompting: PromptAcks, or a message was proposed with
	// ProposePrompt; before, no frame wants prompt acks, asked and
	// promptTo stay equal (nothing unasked) and release skips askFor
	// and armTail.
	asked     uint32
	promptTo  uint32
	tailAt    Time
	prompting bool

	leaving   bool
	left      bool
	leaveLeft int // Leave frames still to repeat
	leaveAt   Time
	frozen    bool // Freeze: no new Data is numbered or accepted
	// releases counts the peers released (ReleaseFrom) whose held
	// frames the next Tick delivers; holds the peers with holdSet (a
	// peer holding has it).
	releases, holds int

	// Output until Advance.
	frames     [][]byte
	bufs       [][]byte // frame buffers, reused; the first used are in frames
	used       int
	deliveries []Delivery
	events     []Event
	lent       [][]byte // held buffers delivered from, recycled at Advance
	free       [][]byte

	// StepLent: the loan of the frame being stepped and its bytes, and
	// the loans taken and given back since Loans.
	loan            core.Loan
	loanView        frame.View
	taken, returned []core.Loan

	hdr     frame.Header
	encoded frame.Encoded
	placed  frame.Placed
	empty   frame.Empty
	nack    frame.NackBody
	// pre is the room a history frame leaves for the Ethernet and rbcast
	// headers; batch numbers the Readys (it moves at Advance).
	pre   int
	batch uint64

	stats Stats
}

// New returns the core of member cfg.Self. Call Tick once with the current
// time to start its clocks before anything else.
func New(cfg Config) (*Core, error) {
	s, err := cfg.validate()
	if err != nil {
		return nil, err
	}
	c := &Core{cfg: s, mask: s.ringSize - 1, hmask: s.histSize - 1}
	c.index = make([]int32, s.span)
	for i := range c.index {
		c.index[i] = -1
	}
	c.hdr = frame.Header{
		Group:       s.Group,
		Sender:      s.Self,
		Incarnation: s.selfInc,
		ViewID:      s.ViewID,
		AckBase:     s.ackBase,
		Acks:        make([]uint32, s.span),
	}
	c.index[int(s.Self)-int(s.ackBase)] = -2
	for _, m := range sortedMembers(s.Members) {
		if m.ID == s.Self {
			continue
		}
		c.index[int(m.ID)-int(s.ackBase)] = int32(len(c.peers))
		c.peers = append(c.peers, peer{
			id: m.ID, mac: m.MAC, incarnation: m.Incarnation,
			slot: int(m.ID) - int(s.ackBase), live: true,
			expected: s.InitialSeq, knownEnd: s.InitialSeq, acked: s.InitialSeq,
			ring: make([]held, s.ringSize),
			vec:  make([]byte, s.span*frame.AckEntryLen),
		})
		if s.Retain || s.Relay {
			c.peers[len(c.peers)-1].kept = make([]kept, s.ringSize)
		}
	}
	// Each row starts as its peer's first vector is built (header): a
	// member's entry at InitialSeq, and 0 in the slot of an id between
	// members, which no header fills. noteAcks orders a vector against
	// the row by its first entry that differs: a row of InitialSeq in a
	// gap would make each vector's 0 there look older.
	for i := range c.peers {
		for j, x := range c.index {
			if x != -1 {
				binary.BigEndian.PutUint32(c.peers[i].vec[j*frame.AckEntryLen:], s.InitialSeq)
			}
		}
	}
	c.nextSeq, c.stable, c.asked, c.promptTo = s.InitialSeq, s.InitialSeq, s.InitialSeq, s.InitialSeq
	c.prompting = s.PromptAcks
	c.history = make([]sent, s.histSize)
	c.encoded.T, c.placed.T = frame.Data, frame.Data
	// Fixed for the core's life: the ack vector always has span entries
	// and PBP sets no Auth. A header whose length could change would need
	// pre recomputed, or history frames would be sent with shifted bodies.
	c.pre = frame.EthernetHeaderLen + frame.PrefixLen(&c.hdr)
	c.batch = 1
	c.stats.Window = s.Window
	return c, nil
}

// sortedMembers returns the members by id (insertion sort: lists are
// short, and the order must not depend on the caller's).
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
	c.lastSent = now
	for i := range c.peers {
		c.peers[i].lastHeard = now
		c.peers[i].ackedAt = now
	}
}

func (c *Core) peer(id frame.MemberID) (*peer, bool) {
	i := int(id) - int(c.cfg.ackBase)
	if i < 0 || i >= len(c.index) {
		return nil, false
	}
	switch k := c.index[i]; k {
	case -1:
		return nil, false
	case -2:
		return nil, true
	default:
		return &c.peers[k], false
	}
}

// inFlight is the number of frames sent and not yet stable.
func (c *Core) inFlight() int { return int(c.nextSeq - c.stable) }

// Propose queues an application message. It is copied; msg may be reused
// at once. Messages proposed before the next Ready share frames when they
// fit (bundling). ErrWindowFull is back-pressure: the caller retries after
// a later Step or Tick.
func (c *Core) Propose(now Time, msg []byte) error { return c.propose(now, nil, msg, false) }

// ProposeFramed is Propose of the message head followed by msg, which the
// core writes into its frame as one message: a layer that puts a header
// before every message (vtotal's kind byte) need not join them first.
// The message is head's length plus msg's.
func (c *Core) ProposeFramed(now Time, head, msg []byte) error {
	return c.propose(now, head, msg, false)
}

// ProposePrompt is Propose of a message a layer above waits for every
// member to hold (vtotal: a Safe message in an Agreed group, and the
// order message that places one): the frame that carries it asks the
// members to acknowledge it at once, as every frame may under
// PromptAcks, by the same rule (acks.go): the frame asks if no frame
// that wants prompt acks is in flight, or half a window after the last
// that asked; its retransmissions ask, and so does a probe after it if
// it did not. The members answer at once under AnswerAckRequests (or
// PromptAcks). A message Freeze hands back for the next view goes
// there as any other.
func (c *Core) ProposePrompt(now Time, msg []byte) error { return c.propose(now, nil, msg, true) }

func (c *Core) propose(now Time, head, msg []byte, prompt bool) error {
	c.touch(now)
	if c.leaving || c.left {
		return ErrLeaving
	}
	if c.frozen {
		return ErrFrozen
	}
	n := len(head) + len(msg)
	if n > c.cfg.maxPayload {
		return &TooLargeError{Size: n, Max: c.cfg.maxPayload}
	}
	if prompt && !c.prompting {
		// As if askFor had run at every frame released: it keeps them
		// at stable, as of the last release, while nothing is prompt.
		c.prompting, c.promptTo, c.asked = true, c.stable, c.stable
	}
	if c.pending > 0 && c.openLen+2+n <= c.cfg.maxPayload {
		h := &c.history[(c.nextSeq+uint32(c.pending)-1)&c.hmask]
		if h.count == 1 {
			h.buf = c.toBundle(h.buf)
		}
		b := append(h.buf, byte(n>>8), byte(n))
		if len(head) > 0 { // append calls memmove even for nothing
			b = append(b, head...)
		}
		h.buf = append(b, msg...)
		h.count++
		if prompt {
			h.prompt = true
		}
		c.pendingMsgs++
		c.openLen += 2 + n
		c.stats.MessagesProposed++
		return nil
	}
	// A new frame, even when the window is full: it waits for room with
	// the ones before it, collecting messages meanwhile (bundling under
	// back-pressure), and when acknowledgements free room, Ready sends
	// as many as fit in one batch. They could not leave earlier anyway,
	// so no message waits longer; a sender of small messages is no longer
	// held to Window messages per round trip, and the runtime sends a
	// batch of frames per acknowledgement instead of one per message.
	if c.pending >= c.cfg.Window {
		return ErrWindowFull
	}
	h := &c.history[(c.nextSeq+uint32(c.pending))&c.hmask]
	// A slot whose frame this Ready handed out (it was retransmitted,
	// then became stable, in this turn) is the runtime's until Advance: a
	// Propose before Advance gives the new frame a buffer of its own.
	// A slot pinned by a layer (PinOwn: it delivers this member's message
	// from the frame) leaves its buffer to the layer as well.
	if cap(h.buf) < frame.EthernetHeaderLen+c.cfg.MTU || h.emitted == c.batch || h.pins > 0 {
		h.buf, h.emitted, h.pins = make([]byte, 0, frame.EthernetHeaderLen+c.cfg.MTU), 0, 0
	}
	b := h.buf[:c.pre]
	if len(head) > 0 {
		b = append(b, head...)
	}
	h.buf = append(b, msg...)
	h.count, h.retxAt, h.served, h.unicast, h.prompt = 1, 0, 0, false, prompt
	c.pending++
	c.pendingMsgs++
	c.openLen, c.openAt = 2+n, c.now
	c.stats.MessagesProposed++
	return nil
}

// Blocked reports whether Propose may refuse a message with
// ErrWindowFull: Window frames are outstanding and Window more wait for
// room. While it is false, every message Propose gets (up to the payload
// limit) is accepted.
func (c *Core) Blocked() bool { return c.pending >= c.cfg.Window || c.frozen }

// toBundle turns the body of a history frame holding one message (as it
// travels alone: no length prefix) into a bundle of that message, to
// which Propose appends more.
func (c *Core) toBundle(b []byte) []byte {
	n := len(b) - c.pre
	b = append(b, 0, 0)
	copy(b[c.pre+2:], b[c.pre:c.pre+n])
	b[c.pre], b[c.pre+1] = byte(n>>8), byte(n)
	return b
}

// release numbers and sends the pending frames the window has room for:
// send action 4 (thesis fig. 3.5). The last one, still collecting
// messages, goes only when it may not wait: BundleDelay is 0 or over, the
// member is leaving, or no other message fits.
func (c *Core) release() {
	for c.pending > 0 && c.inFlight() < c.cfg.Window && !c.frozen {
		if c.pending == 1 && c.cfg.BundleDelay > 0 && !c.leaving &&
			c.now < c.openAt.Add(c.cfg.BundleDelay) && c.openLen+2 <= c.cfg.maxPayload {
			return
		}
		c.pending--
		seq := c.nextSeq
		c.pendingMsgs -= c.history[seq&c.hmask].count
		for i := range c.peers {
			if p := &c.peers[i]; p.acked == seq {
				p.ackedAt = c.now // it was caught up: its ack clock starts now
			}
		}
		var flags frame.Flags
		if c.prompting {
			flags = c.askFor(seq)
		}
		c.nextSeq++
		c.sendData(seq, flags)
		c.history[seq&c.hmask].sentAt = c.now
		c.stats.DataFramesSent++
		if c.resendAt == 0 {
			c.resendAt = c.now.Add(c.resendTimeoutBase())
		}
		c.advanceStable() // with no live member left, nothing waits for acks
		if c.prompting {
			c.armTail()
		}
	}
}

// Leave starts a clean departure: no new messages are accepted, everything
// already proposed is sent and acknowledged by every live member, then a
// Leave frame announces the end (the thesis's shutdown message) and the
// core reports SelfLeft. What a hold's release (ReleaseFrom, or its
// bound) freed and the next Tick would deliver is delivered first, so
// that the Leave frame acknowledges it: after the Leave no Tick delivers,
// and the sender saw this member leave with those frames unacknowledged.
func (c *Core) Leave(now Time) {
	c.touch(now)
	if c.left {
		return
	}
	c.leaving = true
	c.expireHolds(c.now)
	c.release()
	c.maybeLeave()
}

// Left reports whether this member has sent its Leave.
func (c *Core) Left() bool { return c.left }

// leaveRepeats is how many Leave frames a departing member sends, AckDelay
// apart: a lost Leave is otherwise only noticed after FailureTimeout. One
// more, with the first, when an acknowledgement is owed (maybeLeave).
const leaveRepeats = 3

func (c *Core) maybeLeave() {
	// A core frozen for a view change does not announce its end: the
	// change decides where this member's messages end (the membership
	// layer leaves from the next view's core).
	if !c.leaving || c.left || c.pending > 0 || c.stable != c.nextSeq || c.frozen {
		return
	}
	c.left = true
	c.leaveLeft = leaveRepeats
	// An acknowledgement still owed (the ack timer runs, or an Ack is
	// due: something was delivered, or asked to be acknowledged, since
	// the last frame to the group) makes the first Leave go twice: the
	// Leave frames are then its only carrier, and a member that lost all
	// of them would wait for FailureTimeout with its last frames
	// unacknowledged, and take us for failed. A second Leave carries the
	// same ack vector as a plain Ack would, and the leave besides.
	if c.ackAt != 0 || c.ackNow {
		c.leaveLeft++
		c.sendLeave()
	}
	c.sendLeave()
	c.events = append(c.events, Event{Kind: SelfLeft, Member: c.cfg.Self, At: c.now, Delivered: c.nextSeq})
}

func (c *Core) sendLeave() {
	c.header(c.nextSeq, 0)
	c.empty.T = frame.Leave
	c.emit(c.cfg.dst, &c.empty)
	c.stats.LeavesSent++
	c.leaveLeft--
	c.leaveAt = 0
	if c.leaveLeft > 0 {
		c.leaveAt = c.now.Add(c.cfg.AckDelay)
	}
}

// Ready returns what to send, deliver and report now. With BundleDelay 0
// it first seals the frame collecting proposed messages.
func (c *Core) Ready() Ready {
	c.flush()
	return Ready{Frames: c.frames, Deliveries: c.deliveries, Events: c.events}
}

// flush turns what is due into frames: Nacks, a plain Ack, a Heartbeat,
// then the waiting Data frames the window has room for (the order the
// runtime's Ready has always had, which captures show).
func (c *Core) flush() {
	if !c.started || c.left {
		return
	}
	for i := range c.peers {
		if p := &c.peers[i]; p.nackDue {
			c.sendNack(p)
		}
	}
	if c.ackNow {
		c.sendAck(0)
	}
	if c.heartbeatNow || c.now >= c.lastSent.Add(c.cfg.HeartbeatInterval) {
		c.heartbeatNow = false
		c.header(c.nextSeq-1, 0)
		c.empty.T = frame.Heartbeat
		c.emit(c.cfg.dst, &c.empty)
		c.stats.HeartbeatsSent++
	}
	// New Data after the control frames: an Ack or Nack names the last
	// frame sent before it, so a receiver that loses the new frames
	// still learns of them from the next frame, not from this one.
	c.release()
	c.sendDatagrams()
	c.maybeLeave()
}

// Advance tells the core the runtime has sent, delivered and reported all
// of the last Ready. Buffers the Ready pointed into are reused after it.
func (c *Core) Advance() {
	c.batch++
	c.frames, c.used = c.frames[:0], 0
	clear(c.deliveries)
	c.deliveries = c.deliveries[:0]
	c.events = c.events[:0]
	for i, b := range c.lent {
		c.free = append(c.free, b[:0])
		c.lent[i] = nil
	}
	c.lent = c.lent[:0]
}

// turnExpOf is p's expected when this turn began (peer.turnExp).
func (c *Core) turnExpOf(p *peer) uint32 {
	if p.expTurn == c.batch {
		return p.turnExp
	}
	return p.expected
}

// Deadline is when Tick must next run; 0 before the first input and after
// the member has left and repeated its Leave.
func (c *Core) Deadline() Time {
	if !c.started {
		return 0
	}
	if c.left {
		return c.leaveAt
	}
	if c.releases > 0 {
		return c.now // a release delivers at Tick (hold.go)
	}
	d := c.lastSent.Add(c.cfg.HeartbeatInterval)
	d = earlier(d, c.ackAt)
	d = earlier(d, c.resendAt)
	d = earlier(d, c.tailAt)
	if c.pending == 1 && c.cfg.BundleDelay > 0 && c.inFlight() < c.cfg.Window {
		d = earlier(d, c.openAt.Add(c.cfg.BundleDelay)) // else an ack must come first
	}
	if c.cfg.Relay {
		for i := range c.peers {
			d = earlier(d, c.relayDeadline(&c.peers[i])) // removed or not (relay.go)
		}
	}
	ft, next, frozen := c.cfg.FailureTimeout, c.nextSeq, c.frozen
	for i := range c.peers {
		p := &c.peers[i]
		if !p.live {
			continue
		}
		if p.holding {
			d = earlier(d, p.holdUntil)
			if p.missing() {
				d = earlier(d, p.nackAt) // held, only while a frame is missing (hold.go)
			}
		} else {
			d = earlier(d, p.nackAt)
		}
		d = earlier(d, p.lastHeard.Add(ft))
		if p.acked != next && !frozen {
			d = earlier(d, p.ackedAt.Add(ft))
		}
	}
	return d
}

// earlier is the earlier of deadline d and t, where t == 0 is none.
func earlier(d, t Time) Time {
	if t != 0 && t < d {
		return t
	}
	return d
}

// Tick runs the timers due at now (thesis figs. 3.6 and 3.9) and the
// failure detector. Frames it produces come out of the next Ready.
func (c *Core) Tick(now Time) {
	c.touch(now)
	now = c.now
	if c.left {
		if c.leaveAt != 0 && now >= c.leaveAt {
			c.sendLeave()
		}
		return
	}
	c.expireHolds(now)
	for i := range c.peers {
		p := &c.peers[i]
		switch {
		case !p.live:
		case now >= p.lastHeard.Add(c.cfg.FailureTimeout):
			c.remove(p, MemberFailed, "")
		case p.acked != c.nextSeq && now >= p.ackedAt.Add(c.cfg.FailureTimeout) && !c.frozen:
			// Frozen, the others' acks stop where their flushes put them
			// (Freeze): a change under way, not a stall.
			c.remove(p, MemberStalled, StalledNoAcks)
		}
	}
	// Nack timer: ask again for everything still missing, so a lost Nack
	// or a lost retransmission cannot stall a receiver. Rounds without
	// progress in which the sender was not heard from either back off (up
	// to 8×), so a sender that died costs little until it is removed. A
	// sender still heard from is alive and only lost frames: backing off
	// from it stalled its window for up to 8 timeouts (32 ms in the
	// simulator at 5% loss, 7 receivers).
	for i := range c.peers {
		p := &c.peers[i]
		if p.state == repair && now >= p.nackAt && (!p.holding || p.missing()) {
			if c.hintSpent(p) {
				continue
			}
			if !p.nackDue {
				p.nackDue, p.nackFrom = true, p.knownEnd
			}
			p.nackRepeat, p.timerDue = true, true
			if p.expected == p.nackExpected && p.lastHeard <= p.nackArmed {
				p.nackBackoff = min(p.nackBackoff+1, maxNackBackoff)
				// A repair sample pending now would measure the
				// sender's silence, not a round trip: a 500 ms stall
				// set the timer to 125 ms (TestNackTimerIgnoresSilence).
				p.nackSentAt = 0
			} else {
				p.nackBackoff = 0
			}
			p.nackExpected, p.nackArmed = p.expected, now
			p.nackAt = now.Add(c.nackTimeout(p) << p.nackBackoff)
		}
	}
	if c.cfg.Relay {
		for i := range c.peers {
			c.relay(&c.peers[i], now)
		}
	}
	if c.resendAt != 0 && now >= c.resendAt {
		c.resendTimeout()
	}
	if c.tailAt != 0 && now >= c.tailAt {
		c.probeTail()
	}
	if c.ackAt != 0 && now >= c.ackAt {
		c.ackNow = true
	}
}

// resendTimeout is the resend timer of thesis fig. 3.6 (PBP1: retransmit
// the outstanding window) and fig. 3.9 (PBP2: a plain Ack naming the last
// frame sent, so that receivers see a lost tail). Both ask for a prompt
// acknowledgement, so that a lost Ack is replaced quickly.
func (c *Core) resendTimeout() {
	if c.inFlight() == 0 {
		c.resendAt = 0
		return
	}
	switch c.cfg.Mode {
	case PBP1:
		for s := c.stable; s != c.nextSeq; s++ {
			c.sendData(s, frame.FlagRetransmit|frame.FlagAckRequest)
			c.history[s&c.hmask].retxAt = c.now
			c.history[s&c.hmask].served = 0
			c.history[s&c.hmask].unicast = false
			c.stats.Retransmitted++
		}
	case PBP2:
		c.sendAck(frame.FlagAckRequest)
	}
	// Back off while nothing moves (a crashed member, until it is
	// removed, would otherwise cost a window every ResendTimeout).
	c.backoff = min(c.backoff+1, maxBackoff)
	c.resendAt = c.now.Add(c.resendTimeoutBase() << c.backoff)
}

// nackTimeout is how long a receiver waits for a repair from p before
// asking again: the measured repair round trip plus four deviations
// (RFC 6298), at least NackTimeout/16 and at most the larger of
// NackTimeout and twice the smoothed round trip; NackTimeout until a
// round trip was measured. A fixed NackTimeout of 4 ms is 40 round trips
// on a switched segment, and a lost retransmission stalled the sender's
// window for all of it. The ceiling was NackTimeout, below a repair that
// waits behind a window of jumbo frames at a 1 Gbit/s port (~9 ms): every
// Nack was asked again before it could be answered. It follows the
// smoothed round trip, not the deviation, so scheduling noise on a busy
// host (repairs of 0.1 to 5 ms) does not stretch the timer past
// NackTimeout. It stops at 8 × NackTimeout (nackCeiling), as do the
// samples: a sample spans every timeout from the first unanswered Nack,
// so where a third of the Nack rounds go unanswered each sample exceeds
// the smoothed round trip and the timer grew without bound (40% of rounds
// unanswered at random, 200 µs round trips: 56 s after 400 gaps; two of
// three unanswered: 43 ms at the fourth, TestNackTimerBoundedUnderLoss).
func (c *Core) nackTimeout(p *peer) Duration {
	if p.srtt == 0 {
		return c.cfg.NackTimeout
	}
	return min(max(p.srtt+4*p.rttvar, c.cfg.NackTimeout/minNackDivisor), max(c.cfg.NackTimeout, 2*p.srtt), c.nackCeiling())
}

// nackCeiling bounds the nack timer and its samples: the longest the timer
// waited before it learnt round trips above NackTimeout (NackTimeout
// backed off to 8×, 32 ms by default), above the ~9 ms repairs it was
// raised for.
func (c *Core) nackCeiling() Duration { return c.cfg.NackTimeout << maxNackBackoff }

// minNackDivisor bounds the adaptive nack timeout below, at NackTimeout /
// minNackDivisor (250 µs by default): scheduling delays on a loaded host
// exceed the segment's round trip, and a Nack that asks too early costs a
// retransmission.
const minNackDivisor = 16

// sampleRepair feeds one repair round trip into p's estimator.
func (p *peer) sampleRepair(r Duration) {
	if p.srtt == 0 {
		p.srtt, p.rttvar = max(r, 1), r/2
		return
	}
	d := p.srtt - r
	if d < 0 {
		d = -d
	}
	p.rttvar += (d - p.rttvar) / 4
	p.srtt += (r - p.srtt) / 8
	p.srtt = max(p.srtt, 1)
}

// resendTimeoutBase is the resend timer before backoff. PBP2's probe
// follows the measured acknowledgement round trip plus four deviations,
// between 2×AckDelay (receivers acknowledge a lone frame only after
// AckDelay) and ResendTimeout: a lost tail or a lost last Ack cost the
// fixed 10 ms before, and 30 ms when the probe was lost too. PBP1's
// timeout retransmits a whole window, so it stays ResendTimeout.
func (c *Core) resendTimeoutBase() Duration {
	if c.cfg.Mode != PBP2 || c.ackSRTT == 0 {
		return c.cfg.ResendTimeout
	}
	return min(max(c.ackSRTT+4*c.ackRTTVar, 2*c.cfg.AckDelay), c.cfg.ResendTimeout)
}

// maxBackoff caps the resend timer's doubling at 16 × ResendTimeout,
// maxNackBackoff the nack timer's at 8 × NackTimeout.
const (
	maxBackoff     = 4
	maxNackBackoff = 3
)

// Counters returns PBP's own counters.
func (c *Core) Counters() Stats {
	s := c.stats
	s.InFlight = c.inFlight()
	s.Pending = c.pending
	for i := range c.peers {
		s.Buffered += c.peers[i].buffered
	}
	return s
}

// MemberStates returns every other member's PBP state, by id.
func (c *Core) MemberStates() []MemberState {
	out := make([]MemberState, len(c.peers))
	for i := range c.peers {
		p := &c.peers[i]
		out[i] = MemberState{ID: p.id, Live: p.live, Repairing: p.state == repair, Expected: p.expected,
			KnownEnd: p.knownEnd, Acked: p.acked, Buffered: p.buffered, LastHeard: p.lastHeard}
	}
	return out
}

// Repairing reports whether member id is in the PBP2 repair state here:
// frames from it are known to be missing. It is O(1) and allocates nothing,
// so the runtime can time repairs around each Step.
func (c *Core) Repairing(id frame.MemberID) bool {
	p, _ := c.peer(id)
	return p != nil && p.state == repair
}

// The contract (core.Core).

var _ core.Core = (*Core)(nil)

// Done reports whether the core is finished: it left and repeated its
// Leave.
func (c *Core) Done() bool { return c.left && c.Deadline() == 0 }

// Info says what the runtime needs to know: the largest message, and
// that Data frames are the ones that deliver.
func (c *Core) Info() core.Info {
	return core.Info{Self: c.cfg.Self, MaxMessage: c.cfg.maxPayload, Delivers: delivers,
		InFlight: "frames not yet acknowledged by every live member"}
}

func delivers(t frame.Type) bool { return t == frame.Data }

// Stats returns the counters every core has, with PBP's own (Counters)
// as Detail.
func (c *Core) Stats() core.Stats {
	s := c.Counters()
	return core.Stats{Proposed: s.MessagesProposed, Delivered: s.Delivered, Sent: s.DataFramesSent,
		Retransmitted: s.Retransmitted, RepairRequests: s.NacksSent, RepairRequestsReceived: s.NacksReceived, Window: s.Window,
		InFlight: s.InFlight, Pending: s.Pending, Unsettled: s.InFlight + s.Pending, Detail: s}
}

// Members returns every member, this one included, by id.
func (c *Core) Members() []core.Member {
	out := make([]core.Member, 0, len(c.peers)+1)
	self := false
	for i := range c.peers {
		p := &c.peers[i]
		if !self && p.id > c.cfg.Self {
			out = append(out, core.Member{ID: c.cfg.Self, Self: true, Live: !c.left})
			self = true
		}
		out = append(out, core.Member{ID: p.id, Live: p.live, Repairing: p.state == repair})
	}
	if !self {
		out = append(out, core.Member{ID: c.cfg.Self, Self: true, Live: !c.left})
	}
	return out
}

// Repair says that a frame from member from fills from's own stream, and
// whether that stream has a gap here (the PBP2 repair state).
func (c *Core) Repair(from frame.MemberID) (frame.MemberID, bool) { return from, c.Repairing(from) }
