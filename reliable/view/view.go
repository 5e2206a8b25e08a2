// Package view is a group's membership as a sequence of agreed views, a
// deterministic core on the one core contract (reliable/core). Each view
// runs a fresh protocol core (the inner core: PBP for FIFO) built for
// exactly its member list; this core admits joiners, notices members that
// failed or left, agrees on the next view with a prepare, flush and commit
// (Liu's thesis §3.1 and §3.2.7: the second-round confirmation and the
// deletion of failed members; the view-synchronous systems after it), and
// hands the application every message the members that move on together
// delivered in the old view — the same set at each of them. The design is
// docs/membership.md.
//
// Like every core it does no I/O and reads no clock.
package view

import (
	"errors"
	"fmt"

	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/reliable/clock"
	"github.com/rbcast/rbcast/reliable/core"
)

// View is one agreed membership of a group.
type View struct {
	ID      uint32
	Members []frame.MemberInfo // by id
}

// Inner is a protocol core that runs one view: the data protocol, with
// the hooks a view change needs. reliable/pbp's Core is one.
type Inner interface {
	core.Core
	// Freeze stops numbering and accepting new messages and returns those
	// accepted and not yet sent, for the next view.
	Freeze() [][]byte
	// Sent is this member's next sequence number in the view.
	Sent() uint32
	// DeliveredFrom is the next sequence number to deliver from member id.
	DeliveredFrom(id frame.MemberID) (uint32, bool)
	// Live reports whether the core still takes member id's frames (it
	// did not remove it as failed, stalled or left).
	Live(id frame.MemberID) bool
	// Left reports whether this member sent its Leave (SelfLeft is in
	// the next Ready).
	Left() bool
	// HasLeft reports whether the core removed member id because it
	// left cleanly, from the Step that removed it on (its MemberLeft
	// event comes with the next Ready).
	HasLeft(id frame.MemberID) bool
	// Removals counts the members the core removed: Live and HasLeft
	// change only when it grows.
	Removals() uint64
	// Retained is a frame of member id as delivered here, for relaying.
	Retained(id frame.MemberID, seq uint32) (data []byte, bundled, ok bool)
	// Pin keeps data, delivered from frame seq of member id, unchanged
	// until Unpin; false if it cannot (pbp.Core.Pin).
	Pin(id frame.MemberID, seq uint32, data []byte) bool
	// Unpin ends a Pin.
	Unpin(id frame.MemberID, seq uint32)
	// PendingMessages is how many accepted messages are not numbered
	// yet (what Freeze would return).
	PendingMessages() int
	// Holds is how far member m holds sender s's frames as m last
	// acknowledged them (the acknowledgement matrix): the next sequence
	// number of s's it expects. A frozen core acknowledges no more than
	// it had delivered when frozen (what its flush reports).
	Holds(m, s frame.MemberID) (uint32, bool)
}

// Config is one process's membership settings.
type Config struct {
	Group uint32
	// MAC and Incarnation identify this process; Nonce its Joins.
	MAC         [6]byte
	Incarnation uint32
	Nonce       uint64
	// Requested is the member id asked for (frame.NoMember: any).
	Requested frame.MemberID
	// ConfigHash must match the coordinator's: every setting members must
	// share, hashed by the runtime.
	ConfigHash uint64
	MTU        int
	EtherType  uint16 // 0 means frame.EtherType
	// Found is how many processes (this one included) to wait for before
	// founding the first view when no group runs (>= 1).
	Found int
	// Listen is how long a process listens for a running group before
	// it founds one (0: FailureTimeout/2). A running group's members
	// send at least every heartbeat interval, well inside it.
	Listen clock.Duration
	// MaxMembers bounds a view (ids 0..MaxMembers-1); joiners beyond it
	// are refused.
	MaxMembers int
	// Window is the inner core's window (frames): how far back retained
	// frames reach.
	Window int
	// Retry is how often Joins, Prepares, Flushes and Commits repeat
	// until answered; FailureTimeout how long a change may wait for a
	// member before it is left out.
	Retry, FailureTimeout clock.Duration
	// Start returns the inner core of view v for member self.
	Start func(v View, self frame.MemberID) (Inner, error)
	// MaxMessage is the largest message the inner cores accept.
	MaxMessage int
	// MaxQueue bounds the messages held while no view runs (joining, or
	// frozen by a change).
	MaxQueue int
	// Primary: only a majority of a view goes on to the next one (a
	// primary component, for total order): a member that can reach no
	// more than half of its view's members (those that left cleanly
	// aside) stops with ErrMinority instead of installing a view of its
	// own.
	Primary bool
	// Delivers says which inner frame types deliver (core.Info.Delivers).
	Delivers func(frame.Type) bool
	// InFlight names what the inner core's Stats.InFlight counts.
	InFlight string
}

// Errors.
var (
	ErrConfig = errors.New("view: invalid configuration")
	// ErrRefused: the coordinator refused this process (Err says why).
	ErrRefused = errors.New("view: admission refused")
	// ErrRemoved: the group went on without this member.
	ErrRemoved = errors.New("view: removed from the group")
	// ErrGroupRemoved: the group was removed.
	ErrGroupRemoved = errors.New("view: the group was removed")
)

type state uint8

const (
	joining state = iota
	member
	done
)

// joiner is a process asking to join (or, before a group runs, one of
// the founders), as heard.
type joiner struct {
	mac         [6]byte
	incarnation uint32
	nonce       uint64
	requested   frame.MemberID
	heardAt     clock.Time
}

// flushInfo is a member's ViewFlush for the change in progress.
type flushInfo struct {
	id        frame.MemberID
	sent      uint32
	delivered []frame.Delivered
}

// proposal is the change this member coordinates.
type proposal struct {
	next, base uint32
	members    []frame.MemberInfo // the new view
	staying    []frame.MemberID   // members of base in the new view
	flushes    []flushInfo
	startedAt  clock.Time
	sentAt     clock.Time
	commit     *frame.ViewCommitBody // once computed
}

// relayKey names a departing sender's frame in a view: base, sender,
// sequence number.
type relayKey struct {
	base uint32
	from frame.MemberID
	seq  uint32
}

// completion is a commit this member is completing: delivering up to the
// cuts in its current view before installing the next.
type completion struct {
	commit   frame.ViewCommitBody
	next     []uint32 // per cut: the next sequence number to deliver
	departed []bool   // per cut: its sender does not stay
	// at is, per cut, how far the inner core had delivered the sender's
	// frames at the commit. A departing sender's frames from there on
	// are delivered by complete alone (filterCut drops the inner core's
	// own deliveries of them), from the inner core's retained copy or a
	// holder's relay, whichever comes first, in order, once each.
	at     []uint32
	relays []relayed
	// progressAt is when the completion last moved (a message delivered
	// up to a cut), sum what had been delivered then: a completion that
	// does not move for twice the failure timeout is given up (its
	// holders are gone), and the member stops.
	progressAt clock.Time
	sum        uint64
}

// relayed is a relayed frame that arrived ahead of its turn.
type relayed struct {
	from    frame.MemberID
	seq     uint32
	bundled bool
	data    []byte
}

// Core is one process's membership state machine.
type Core struct {
	cfg     Config
	now     clock.Time
	started bool
	skipCRC bool // the link writes every frame's CRC (SkipCRC)
	state   state
	err     error
	self    frame.MemberID
	view    View
	inner   Inner
	// prev is the view before's core, kept running (answering repairs,
	// relaying) while members still complete it: until every member of
	// the current view was heard in it, or prevUntil.
	prev      Inner
	prevID    uint32
	prevUntil clock.Time
	prevTaken bool // install took prev's Ready this turn
	// replaced are the cores of the views installs replaced this turn,
	// until Advance: Own reads their frames for the layer above, which
	// learns of the messages they sent in this turn's Ready.
	replaced []replacedCore
	// installed: a view was installed since the last Advance. The new
	// view's frames are then held (copied, in later) until after it,
	// so that one Ready never holds the new view's deliveries beside
	// the old view's last ones and its ViewInstalled event: what the
	// old core delivered goes out first, then the event, and the new
	// view's messages only in a later Ready.
	installed bool
	later     []heldFrame
	laterBufs [][]byte
	heard     []frame.MemberID // members heard in the current view
	// early are senders heard in a view later than the installed one
	// before this member installed it (earlyIn); earlyHeard the members
	// of the current view among them, heard in it before this member
	// installed it: they count toward its acceptance (acceptedBy), not
	// as heard (checkHeard: the view before's core stays for them).
	early      []earlySender
	earlyHeard []frame.MemberID
	// Under Config.Primary a view is acted on only once it is accepted:
	// a majority of the view it was formed from is known to have
	// installed it (heard in it). Until then this member hands its core
	// nothing to send (accept.go). fromBase are the current view's
	// members that were members of that view (same MAC and incarnation),
	// baseTotal how many members it had (those that left cleanly aside).
	unaccepted bool
	fromBase   []frame.MemberID
	baseTotal  int
	// formed is the commit that formed the current view, sent again to a
	// member that shows it has not installed it.
	formed     *frame.ViewCommitBody
	sentFormed []sentAt

	joiners   []joiner
	joinAt    clock.Time
	joinSince clock.Time // when this process started to join
	groupAt   clock.Time // frames of a running group were last heard then

	suspects []frame.MemberID
	// gen counts the changes of what reachable and coordinator read in
	// this layer: the view and self, the suspects, the leavers and the
	// joiners (each changes through suspect, addLeaver, setJoiners or
	// install); reach holds their last counts.
	gen   uint64
	reach reachCache
	// askingSince: when this member counted no majority of its view and
	// began to ask, frozen, whether the members it took for failed left
	// (primary, askLeft): as the coordinator, by preparing the next view;
	// otherwise by waiting for the coordinator's Prepare, the Flushes or
	// the commit. 0 when not.
	askingSince clock.Time
	// reportAt is when this member may next report its suspects to the
	// coordinator (ViewSuspect); reportBuf holds the report.
	reportAt  clock.Time
	reportBuf []frame.MemberID
	// foreignSince is when frames of another component of the group that
	// wins (see foreign) began to be heard; foreignLast when last.
	foreignSince, foreignLast clock.Time
	// The Unreliable level (datagram.go): this member's last datagram
	// number, the numbers seen per sender, the turn's delivered bytes, and
	// the datagrams proposed since the last Ready (dgQ; each one's length
	// and the view it was proposed in, dgOut).
	dgNext  uint32
	dgSeen  []dgSeen
	dgBuf   []byte
	dgQ     []byte
	dgOut   []dgOut
	leavers []frame.MemberID
	leaving bool
	// innerLeaving: the installed view's inner core was told to leave
	// (leaveInner).
	innerLeaving bool
	// leftAtTie: this member left, frozen, at one of two (leaveAtTie);
	// its core, which announced nothing, runs no more.
	leftAtTie bool
	// removeDue: RemoveGroup was called; the next Ready removes the group.
	removeDue bool
	maxSeen   uint32 // the highest view id seen proposed or installed

	prop *proposal
	// holds are the senders held (HoldFrom, hold.go) across views.
	holds []senderHold
	// promise is the prepare this member answered; promisedAt when.
	// Frozen with promiseBy NoMember: frozen while asking (askLeft), no
	// Prepare answered yet.
	promise    frame.ViewPrepareBody
	promiseBy  frame.MemberID
	promisedAt clock.Time
	// gaveWay: the coordinator promised to was heard flushing for
	// another one's proposal on this base: its own will never commit,
	// so this member is free to follow a higher proposal (onPrepare).
	gaveWay  bool
	flushAt  clock.Time
	frozen   bool
	frozenAt []frame.Delivered // delivered per member when frozen
	stash    []core.Delivery   // delivered by the inner core since, held
	stashOut int               // deliver's first entries: the stash, out this turn
	unsent   [][]byte          // the frozen core's unsent messages
	// flushedOther: this member sent a Flush for another coordinator's
	// proposal in the current view, which may commit with it (leaveAtTie).
	flushedOther bool
	// ownOut counts this member's messages numbered in the views before
	// the current one; handed the ones the current inner core accepted.
	ownOut, handed uint64
	queue          [][]byte // proposed while joining or frozen
	comp           *completion

	hdr     frame.Header
	frames  [][]byte
	bufs    [][]byte
	used    int
	deliver []core.Delivery
	events  []core.Event
	merged  core.Ready
	stats   Stats
	// relayedAt is when this member last relayed each frame of a
	// departing sender (relay), since it installed its view.
	relayedAt map[relayKey]clock.Time

	// loan is the link's loan of the frame StepLent steps; borrowers the
	// inner cores stepped with one, which may keep lent bytes (loan.go).
	loan      core.Loan
	borrowers []Inner
}

// earlySender is a process heard sending in view id before this member
// installed it.
type earlySender struct {
	view uint32
	id   frame.MemberID
	mac  [6]byte
	inc  uint32
}

type replacedCore struct {
	id uint32
	in Inner
}

// heldFrame is a frame of the new view held until after the Ready of
// the turn that installed it.
type heldFrame struct {
	src, dst [6]byte
	v        frame.View
}

type sentAt struct {
	mac [6]byte
	at  clock.Time
}

// Stats are the membership layer's own counters.
type Stats struct {
	Views          uint64 // views installed
	Changes        uint64 // changes this member coordinated
	Joins          uint64 // ViewJoins sent
	Relayed        uint64 // frames relayed to others
	RelayDelivered uint64 // messages delivered from relays
	// RelaysUnused counts relayed frames received that this member did
	// not need: no completion of their view under way here (it has not
	// the commit yet, or installed already), or delivered or received
	// already.
	RelaysUnused uint64
	// RelaysSkipped counts frames a Flush asked for that were not
	// relayed again: this member relayed them less than half a Retry
	// before (the asker's Flush crossed that relay).
	RelaysSkipped uint64
	Refused       uint64 // joiners refused (coordinator)
	Accepted      uint64 // views acted on only after a majority of their base was heard in them (Primary)
	Dropped       uint64 // frames of other views dropped
	Reports       uint64 // ViewSuspect reports sent
	// Datagrams of the Unreliable level: sent, delivered, and dropped
	// (duplicates, another view's, or a non-member's; own ones proposed
	// in a view this member left before they went out).
	DatagramsSent, DatagramsDelivered, DatagramsDropped uint64
	ViewID                                              uint32
	Members                                             int
}

// New returns the membership core of one process, joining (or founding)
// its group.
func New(cfg Config) (*Core, error) {
	switch {
	case cfg.Found < 1:
		return nil, fmt.Errorf("%w: Found is %d, want >= 1", ErrConfig, cfg.Found)
	case cfg.MaxMembers < 1 || cfg.MaxMembers > 0xfffe:
		return nil, fmt.Errorf("%w: MaxMembers is %d", ErrConfig, cfg.MaxMembers)
	case cfg.Retry <= 0 || cfg.FailureTimeout <= cfg.Retry:
		return nil, fmt.Errorf("%w: Retry %d ns and FailureTimeout %d ns (want 0 < Retry < FailureTimeout)", ErrConfig, int64(cfg.Retry), int64(cfg.FailureTimeout))
	case cfg.Start == nil:
		return nil, fmt.Errorf("%w: no Start", ErrConfig)
	case cfg.MAC[0]&1 != 0 || cfg.MAC == [6]byte{}:
		return nil, fmt.Errorf("%w: MAC %x is not a unicast address", ErrConfig, cfg.MAC)
	case cfg.Window < 1:
		return nil, fmt.Errorf("%w: Window is %d", ErrConfig, cfg.Window)
	}
	if cfg.EtherType == 0 {
		cfg.EtherType = frame.EtherType
	}
	if cfg.Listen <= 0 {
		cfg.Listen = cfg.FailureTimeout / 2
	}
	if cfg.MaxQueue < 1 {
		cfg.MaxQueue = 1
	}
	if cfg.Delivers == nil {
		cfg.Delivers = func(frame.Type) bool { return false }
	}
	c := &Core{cfg: cfg, self: frame.NoMember}
	c.hdr = frame.Header{Group: cfg.Group, Sender: frame.NoMember, Incarnation: cfg.Incarnation}
	return c, nil
}

var _ core.Core = (*Core)(nil)

func (c *Core) touch(now clock.Time) {
	if now > c.now {
		c.now = now
	}
	if !c.started {
		c.joinSince = c.now // 0 when the first step is at 0
	}
	c.started = true
}

// Err says why the core stopped: refused, removed, the group removed.
func (c *Core) Err() error { return c.err }

// View returns the installed view (ID 0 while joining).
func (c *Core) View() View { return c.view }

// Installed reports whether a view is installed.
func (c *Core) Installed() bool { return c.state == member }

// Inner returns the current view's inner core (nil while joining).
func (c *Core) Inner() Inner { return c.inner }

// DebugState describes the change under way here, for test failures and
// debugging; its format is not stable.
func (c *Core) DebugState() string {
	s := fmt.Sprintf("frozen=%v queue=%d unsent=%d prop=%v comp=%v joiners=%d suspects=%v maxSeen=%d promise=%+v by %d",
		c.frozen, len(c.queue), len(c.unsent), c.prop != nil, c.comp != nil, len(c.joiners), c.suspects, c.maxSeen, c.promise, c.promiseBy)
	if cp := c.comp; cp != nil {
		s += fmt.Sprintf("\n    completing %+v next=%v departed=%v relays=%d", cp.commit, cp.next, cp.departed, len(cp.relays))
	}
	return s
}

// Counters returns the membership layer's own counters.
func (c *Core) Counters() Stats {
	s := c.stats
	s.ViewID, s.Members = c.view.ID, len(c.view.Members)
	return s
}

func (c *Core) memberOf(v View, id frame.MemberID) (frame.MemberInfo, bool) {
	for _, m := range v.Members {
		if m.ID == id {
			return m, true
		}
	}
	return frame.MemberInfo{}, false
}

func containsID(ids []frame.MemberID, id frame.MemberID) bool {
	for _, x := range ids {
		if x == id {
			return true
		}
	}
	return false
}

func addID(ids []frame.MemberID, id frame.MemberID) []frame.MemberID {
	if containsID(ids, id) {
		return ids
	}
	return append(ids, id)
}

// coordinator is the lowest member of the view this member does not
// suspect. It is computed again only once gen moved.
func (c *Core) coordinator() frame.MemberID {
	r := &c.reach
	if !r.coordOK || r.coordGen != c.gen {
		r.coord, r.coordOK, r.coordGen = c.lowestUnsuspected(), true, c.gen
	} else if r.check {
		if want := c.lowestUnsuspected(); want != r.coord && r.err == nil {
			r.err = fmt.Errorf("view %d, member %d: cached coordinator %d, computed %d (suspects %v, leavers %v)", c.view.ID, c.self, r.coord, want, c.suspects, c.leavers)
		}
	}
	return r.coord
}

func (c *Core) lowestUnsuspected() frame.MemberID {
	best := frame.NoMember
	for _, m := range c.view.Members {
		if containsID(c.suspects, m.ID) || containsID(c.leavers, m.ID) && m.ID != c.self {
			continue
		}
		if best == frame.NoMember || m.ID < best {
			best = m.ID
		}
	}
	return best
}

// emit encodes a frame of the membership layer (view id: the installed
// view's, 0 while joining).
func (c *Core) emit(dst [6]byte, body frame.Body) {
	h := c.hdr
	h.Sender, h.ViewID = c.self, c.view.ID
	c.emitTo(dst, &h, body)
}

// emitHeader broadcasts a frame with header h.
func (c *Core) emitHeader(h *frame.Header, body frame.Body) { c.emitTo(frame.Broadcast, h, body) }

// SkipCRC leaves the CRC of this core's frames, and of every view's
// core's, to the link (core.CRCSkipper). A ViewRelay's relayed frame
// keeps its CRC: its receivers check it.
func (c *Core) SkipCRC() {
	c.skipCRC = true
	for _, in := range []Inner{c.inner, c.prev} {
		skipCRC(in)
	}
}

// skipCRC passes SkipCRC on to a view's core.
func skipCRC(in Inner) {
	if s, ok := in.(core.CRCSkipper); ok {
		s.SkipCRC()
	}
}

func (c *Core) emitTo(dst [6]byte, h *frame.Header, body frame.Body) {
	h.SkipCRC = c.skipCRC
	var b []byte
	if c.used < len(c.bufs) {
		b = c.bufs[c.used][:0]
	}
	b = frame.AppendEthernet(b, dst, c.cfg.MAC, c.cfg.EtherType)
	b, err := frame.Append(b, h, body)
	if err != nil {
		return // cannot happen: every body here is bounded by MaxMembers
	}
	if c.used < len(c.bufs) {
		c.bufs[c.used] = b
	} else {
		c.bufs = append(c.bufs, b)
	}
	c.used++
	c.frames = append(c.frames, b)
}

func (c *Core) event(ev core.Event) {
	ev.At = c.now
	c.events = append(c.events, ev)
}
