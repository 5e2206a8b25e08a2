package dsm

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"unsafe"

	"github.com/rbcast/rbcast/dsm/core"
	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/link"
	"github.com/rbcast/rbcast/link/mux"
	"github.com/rbcast/rbcast/reliable"
)

// Errors; see dsm/core for their meaning.
var (
	ErrSecondLock      = core.ErrSecondLock
	ErrNotHeld         = core.ErrNotHeld
	ErrRemoved         = core.ErrRemoved
	ErrExists          = core.ErrExists
	ErrBarrierMismatch = core.ErrBarrierMismatch
	ErrNotFixed        = core.ErrNotFixed
	ErrReadOnly        = core.ErrReadOnly
	ErrJoinClosed      = core.ErrJoinClosed
	ErrLocksChannels   = core.ErrLocksChannels
	ErrLateJoin        = core.ErrLateJoin
	// ErrClosed: the node has exited (or its group stopped).
	ErrClosed = errors.New("dsm: node has exited")
)

// Error types; see dsm/core.
type (
	Geometry      = core.Geometry
	GeometryError = core.GeometryError
	RangeError    = core.RangeError
	SizeError     = core.SizeError
	LateJoinError = core.LateJoinError
)

// DefaultOutboxLimit is how many DSM messages may wait to be sent before
// writes block (back-pressure).
const DefaultOutboxLimit = 64

// DefaultWCCopies is Config.WCCopies's default: 256 KiB of one peer's
// messages on a segment channel; past it the channel's PBP core keeps
// the peer's frames, unacknowledged, in its window and delivers them at
// the release without a retransmission (docs/dsm.md, "How much WC
// copies"). Idle runs found a smaller budget (16 KiB) or none slower for
// jacobi, where copying a peer's few rows never holds its window.
const DefaultWCCopies = 256 << 10

// Config configures a Node.
type Config struct {
	// Group configures the reliable group under the node (Join; dsmsim
	// uses its protocol fields only). Deliver and OnEvent must be nil:
	// the node sets them.
	Group reliable.Config
	// Unbuffered sends every write as a message of its own at once instead
	// of collecting a segment's writes into frame-sized messages (the
	// thesis's BUFFERWRITES=0). Buffering is on by default.
	Unbuffered bool
	// MaxMessage lowers the largest DSM message below what the group
	// carries in one frame; 0 means the group's MaxMessage.
	MaxMessage int
	// OutboxLimit is how many messages may wait to be sent before Write
	// blocks; 0 means DefaultOutboxLimit.
	OutboxLimit int
	// MaxSegment bounds a segment's memory in bytes, this member's and
	// those peers announce; 0 means core.DefaultMaxSegment (1 GiB).
	MaxSegment int
	// Selective is the selective join of thesis §7.2.1: a member
	// allocates only the segments it creates or joins; a segment's
	// membership is fixed when the first barrier after its creation is
	// crossed, writes to it must come after that barrier (ErrNotFixed)
	// and a later JoinSegment is refused (ErrJoinClosed).
	Selective bool
	// Channels (implies Selective) gives every segment a reliable group
	// of its own among its members, over the same link (link/mux, whose
	// kernel filter keeps other segments' frames away), beside the global
	// group (Group) that carries announcements and barriers; a barrier
	// puts a marker on each joined segment's channel (thesis §7.2.2–
	// 7.2.3), but for segments joined read-only (JoinSegmentReadOnly).
	// A segment every member joined has no channel (AllMemberChannels). The channels' members are named from the global group's
	// static list (Group.Members), the list registration agreed on, or,
	// with Views, the group's first view; locks are refused
	// (ErrLocksChannels; docs/dsm.md says why).
	Channels bool
	// AllMemberChannels (Channels) gives a channel also to a segment
	// that every member of the group joined. By default such a segment
	// has none: its updates go on the global group, ordered with the
	// barrier messages, so a barrier costs no marker for it; WC holds
	// what a peer ahead writes to it in the global group's window past
	// WCCopies, as on a channel (with Group.Views too: the view layer
	// keeps the hold across its changes). (docs/dsm.md, "A segment every
	// member joined".)
	AllMemberChannels bool
	// WCCopies is how many bytes of one peer's messages on a channel (a
	// segment's, or the global group, which over one group carries every
	// update) the wait condition (WC, def. 7.3) copies while this member
	// has not crossed the barrier the peer crossed, before the channel
	// stops taking the peer's frames: they then wait, undelivered and
	// unacknowledged, in this member's reorder window (and block the
	// peer once its window is full) until the crossing, or over one
	// group while a lock request needs the peer's answer (a lock
	// requested here that the peer has not answered, or a peer's request
	// seen that it has not answered yet). 0 means DefaultWCCopies; a
	// negative value holds at once.
	// (docs/dsm.md, "How much WC copies", "WC over one group".)
	WCCopies int
	// Timed: the program on top relies on bounds on how late its peers'
	// messages arrive (kv's thesis mode), so WC never holds a peer in a
	// reliable layer's window: a held peer's window stops, which delays
	// its messages to every member (up to the hold's bound, a quarter of
	// the failure timeout). WC copies instead, as many bytes as the peer
	// sends before this member crosses: the one configuration where what
	// WC keeps over one group is unbounded. (docs/dsm.md, "WC over one
	// group".)
	Timed bool
	// ChannelGroup is the group id of segment key's channel; nil means
	// DefaultChannelGroup.
	ChannelGroup func(global, key uint32) uint32
	// Trace, when set, is called with every event of the thesis's model
	// (writes, updates applied, barriers, lock requests, acquires,
	// permissions, releases) as it happens at this member, with the
	// node's lock held: it must not call the node. For tests and
	// debugging.
	Trace func(TraceEvent)
	// NoExpect: Barrier does not tell the group which members it waits
	// for (reliable.Group.Expect), so a lost barrier message is found
	// only by its sender's ResendTimeout (PBP2), as before issue 24. For
	// comparisons.
	NoExpect bool

	// mutate, set only by the mutation tests (export_test.go), changes
	// the core's configuration before the core is built.
	mutate func(*core.Config)
}

// DefaultChannelGroup is the group id of segment key's channel when the
// global group is global: global+1+key (mod 2^32). Keep the ids of other
// groups on the link out of that range, or set Config.ChannelGroup.
func DefaultChannelGroup(global, key uint32) uint32 { return global + 1 + key }

// ChannelGroupID is the group id of segment key's channel under cfg.
func (cfg Config) ChannelGroupID(key uint32) uint32 {
	if cfg.ChannelGroup != nil {
		return cfg.ChannelGroup(cfg.Group.Group, key)
	}
	return DefaultChannelGroup(cfg.Group.Group, key)
}

// GlobalConfig is the reliable group configuration of the global group
// under cfg: cfg.Group, with Relay set in channel mode where it applies
// (Order FIFO without Views). The global group then carries only
// announcements and barrier messages, and a member that died with one of
// them on the wire has it reach every survivor or none (a survivor that
// missed its announcement opened a channel a failure timeout late,
// removed by the others meanwhile); and its largest message, which the
// node's updates are cut to, is no larger than a channel's.
func (cfg Config) GlobalConfig() reliable.Config {
	g := cfg.Group
	if cfg.Channels && !g.Views && g.Order == reliable.FIFO {
		g.Relay = true
	}
	return g
}

// UpdateMessage is the largest message the node cuts its updates to,
// given its global group's largest, groupMax. In channel mode with Views
// it is smaller by reliable.RelayOverhead: a channel's frames carry the ack
// vector of its own members only, but its members relay (ChannelConfig),
// so its largest message can be that much smaller than the view's (which
// leaves room for MaxMembers acks); without Views the global group relays
// too and is never larger than a channel.
func (cfg Config) UpdateMessage(groupMax int) int {
	if cfg.Channels && cfg.Group.Views {
		return groupMax - reliable.RelayOverhead
	}
	return groupMax
}

// ChannelConfig is the reliable group configuration of segment key's
// channel, whose members are those of all (the global group's list) with
// the ids in ids, for member self: a static group, even when the global
// one has Views, with the global group's settings otherwise. Its members
// relay a dead member's frames to those that lack them before removing it
// (reliable.Config.Relay), so the survivors agree on what it sent: a
// channel has no view change (docs/dsm.md, "When a member dies with
// frames on the wire"). A channel of exactly two members (Order FIFO)
// sends to the other's MAC (reliable.Config.Unicast). Deliver and OnEvent
// are left to the caller.
func (cfg Config) ChannelConfig(key uint32, all []frame.MemberInfo, ids []frame.MemberID, self frame.MemberID) reliable.Config {
	g := cfg.Group
	g.Group = cfg.ChannelGroupID(key)
	g.Members = nil
	for _, m := range all {
		if slices.Contains(ids, m.ID) {
			g.Members = append(g.Members, m)
		}
	}
	g.Self = self
	g.Size, g.Server, g.RequestID, g.Incarnation = 0, false, 0, 0
	g.Views, g.MaxMembers = false, 0
	g.Relay = g.Order == reliable.FIFO
	// A channel of two (halo's neighbour pairs) sends to the peer's MAC:
	// a switch forwards its frames to one port instead of flooding all.
	g.Unicast = g.Order == reliable.FIFO && len(g.Members) == 2
	g.Deliver, g.OnEvent = nil, nil
	return g
}

// TraceEvent is one event of a member's history; see core.Event.
type TraceEvent = core.Event

// Node is one member's BDSM system: its copy of the shared segments, its
// update buffers, its barrier and lock state. Methods are safe for
// concurrent use, but BDSM's model is one program thread per member: the
// ordering guarantees are about the program order of that thread.
type Node struct {
	mu     sync.Mutex // guards core and the fields below
	core   *core.Core
	env    Env
	self   frame.MemberID
	limit  int
	closed bool  // Exit was called
	err    error // why the node stopped working, once it has
	// barrierErr is the error of the barrier just crossed (ids differ).
	barrierErr error
	// firstView is the id of the view the node started from (Views; 0
	// if it started from a static member list), lastView the last one
	// whose event it handled. A node whose first view was not the
	// group's founding one starts unconfirmed (core.Config.Unconfirmed):
	// it may itself be an outsider, so until a member confirms it, it
	// crosses no barrier, refuses nobody and confirms nobody (it still
	// drops outsiders' messages).
	firstView, lastView uint32
	// incarnations are the members' incarnations in the last view that
	// had them (Views): one that changes is a restart (viewGone).
	incarnations map[frame.MemberID]uint32
	// left: the member's leave is done (seen by Host.OnEvent; Join's
	// leave is Group.Close, which waits for it itself).
	left bool
	// holds are the senders whose deliveries on a segment channel the
	// env holds back for WC (Holder), until a crossing ends it.
	holds []channelSender
	// wakeups: Stats.Wakeups.
	wakeups uint64
	// heldUnreliable counts unreliable writes of a held sender dropped
	// (Stats.HeldUnreliable).
	heldUnreliable uint64
}

// channelSender is one sender on one channel.
type channelSender struct {
	ch   core.Channel
	from frame.MemberID
}

// Holder is an Env whose reliable layer can stop delivering one
// sender's messages on one channel (reliable.Group.HoldFrom,
// reliable.Driver.HoldFrom). With it, what the wait condition (WC, def.
// 7.3) must keep from a peer on a segment channel waits in that peer's
// send window, which bounds it, instead of being copied by the node
// without bound. Both are called with the node's lock held and must not
// call the node; HoldFrom reports false where the layer cannot hold
// (the node then copies, as without a Holder).
type Holder interface {
	HoldFrom(ch core.Channel, from frame.MemberID) bool
	ReleaseFrom(ch core.Channel, from frame.MemberID)
}

// laneCopies is how many times Lock sends the lane's copy of a request,
// back to back: a lost datagram is not repaired, and the request then
// waits for its copy in the stream, behind the hold (docs/dsm.md, "The
// lock lane"). Receivers drop all but the first copy they get.
const laneCopies = 2

// Laner is an Env with the lock lane (docs/dsm.md, "The lock lane"):
// SendLane sends msg (a lock request the core hands out: core.Lane) once
// at the global group's Unreliable level, at once, past the send window
// and the outbox; a hold of this member at a peer does not stop it
// (reliable.Group.HoldFrom delivers a held sender's datagrams). Holding
// reports whether the reliable layer of channel ch holds from's messages
// now (reliable.Group.Holding): the node drops the unreliable writes of
// a sender held now, which arrive as datagrams past the hold, as the
// reliable layer dropped them before the lane. SendLane is called
// without the node's lock, Holding with it held (it must not call the
// node). An Env without it sends
// no lane: a held requester's request then waits in its stream.
type Laner interface {
	SendLane(msg []byte) error
	Holding(ch core.Channel, from frame.MemberID) bool
}

// Wait is what a blocked call of a Node waits for (an outbox below its
// limit, a segment's announcement, a barrier, a lock, the outbox drained,
// the leave done), passed to Env.Wait: a value, so that waiting allocates
// nothing. Host.Ready says whether it holds.
type Wait struct {
	kind waitKind
	id   int64 // segment key, barrier id, lock id
}

type waitKind uint8

const (
	waitRoom    waitKind = iota + 1 // the outbox is below its limit
	waitSegment                     // segment id has been announced
	waitBarrier                     // the current barrier is crossed
	waitLock                        // lock id is held
	waitDrained                     // the outbox is empty
	waitLeft                        // the leave is done
)

// String says what the call waits for, as a deadlock report shows it.
func (w Wait) String() string {
	switch w.kind {
	case waitRoom:
		return "writing (outbox full)"
	case waitSegment:
		return fmt.Sprintf("joining segment %d", w.id)
	case waitBarrier:
		return fmt.Sprintf("at barrier %d", w.id)
	case waitLock:
		return fmt.Sprintf("acquiring lock %d", w.id)
	case waitDrained:
		return "exiting (sending)"
	case waitLeft:
		return "exiting (leaving the group)"
	}
	return "waiting"
}

// ready reports whether w holds, or the node stopped (with n.mu held).
func (n *Node) ready(w Wait) bool {
	if n.err != nil {
		return true
	}
	switch w.kind {
	case waitRoom:
		return n.closed || n.core.Pending() < n.limit
	case waitSegment:
		return n.closed || n.core.Known(uint32(w.id))
	case waitBarrier:
		ok, err := n.core.BarrierPassed()
		if err != nil {
			n.barrierErr = err
		}
		if ok {
			n.openChannels()
			n.releaseHolds()
		}
		return ok
	case waitLock:
		return n.core.Holding(int32(w.id))
	case waitDrained:
		return n.core.Pending() == 0
	case waitLeft:
		return n.left
	}
	return true
}

// openChannels opens the segment channels whose membership the barrier
// just crossed fixed (with n.mu held).
func (n *Node) openChannels() {
	for _, o := range n.core.Opens() {
		if err := n.env.Open(o.Key, o.Members); err != nil {
			n.fail(fmt.Errorf("dsm: member %d: opening the channel of segment %d: %w", n.self, o.Key, err))
		}
	}
}

func outboxLimit(cfg Config) int {
	if cfg.OutboxLimit <= 0 {
		return DefaultOutboxLimit
	}
	return cfg.OutboxLimit
}

func wcCopies(cfg Config) int {
	switch {
	case cfg.WCCopies == 0:
		return DefaultWCCopies
	case cfg.WCCopies < 0:
		return 0
	}
	return cfg.WCCopies
}

// alignedAlloc returns zeroed 8-byte aligned memory, so that Float64s can
// view it.
func alignedAlloc(n int) []byte {
	if n == 0 {
		return nil
	}
	w := make([]uint64, (n+7)/8)
	return unsafe.Slice((*byte)(unsafe.Pointer(&w[0])), n)
}

func coreConfig(self frame.MemberID, members []frame.MemberID, groupMax int, cfg Config) core.Config {
	return coreConfigView(self, members, groupMax, cfg, false)
}

// coreConfigView is coreConfig for a node that starts from its first
// view: unconfirmed unless that view is the group's founding one.
func coreConfigView(self frame.MemberID, members []frame.MemberID, groupMax int, cfg Config, unconfirmed bool) core.Config {
	max := groupMax
	if cfg.MaxMessage > 0 && cfg.MaxMessage < max {
		max = cfg.MaxMessage
	}
	c := core.Config{Self: self, Members: members, MaxMessage: max, Unbuffered: cfg.Unbuffered,
		MaxSegment: cfg.MaxSegment, Trace: cfg.Trace, Alloc: alignedAlloc,
		Selective: cfg.Selective, Channels: cfg.Channels, AllMemberChannels: cfg.AllMemberChannels, WCCopies: wcCopies(cfg),
		Timed: cfg.Timed, Unconfirmed: unconfirmed}
	if cfg.mutate != nil {
		cfg.mutate(&c)
	}
	return c
}

// deliver is the reliable layer's Config.Deliver: updates are applied
// from data, the received frame, straight into segment memory.
func (n *Node) deliver(from frame.MemberID, data []byte) {
	n.deliverOn(core.Global, from, data)
}

// deliverOn is deliver for channel ch's group.
func (n *Node) deliverOn(ch core.Channel, from frame.MemberID, data []byte) {
	n.mu.Lock()
	n.receiveLocked(ch, from, data)
	n.mu.Unlock()
}

func (n *Node) receiveLocked(ch core.Channel, from frame.MemberID, data []byte) {
	if n.core == nil { // Join failed after the group started
		return
	}
	if core.Unreliable(data) && n.heldNow(ch, from) {
		// Unreliable writes of a sender held now, delivered past the
		// hold as datagrams (the lock lane's way through): dropped,
		// as the reliable layer dropped them before (a permitted
		// outcome: "may or may not be seen").
		n.heldUnreliable++
		return
	}
	n.core.ReceiveOn(ch, from, data) // bad messages are counted and change nothing
	if err := n.core.Refused(); err != nil && n.err == nil {
		n.fail(err)
	}
	if n.core.Holds(ch, from) {
		n.holdFrom(ch, from)
	}
	if len(n.holds) > 0 && !core.OnlyUpdates(data) {
		// A lock request seen may end the global channel's holds of
		// the peers that have not answered it (core.Holds, over one
		// group).
		n.releaseHolds()
	}
	if n.core.Pending() > 0 {
		n.env.Kick()
	}
	// An update changes nothing a blocked call waits for (outbox room, an
	// announcement, a barrier, a lock, the leave): waking the program for
	// it would cost a goroutine switch per frame, for a check that fails.
	// Nor does a barrier message or marker that leaves the barrier
	// condition unmet (barrierWaits).
	if !core.OnlyUpdates(data) && !n.barrierWaits() {
		n.changed()
	}
}

// heldNow reports whether the node asked the env to hold from on ch and
// the env's reliable layer holds it still (with n.mu held).
func (n *Node) heldNow(ch core.Channel, from frame.MemberID) bool {
	if !slices.Contains(n.holds, channelSender{ch, from}) {
		return false
	}
	l, ok := n.env.(Laner)
	return ok && l.Holding(ch, from)
}

// barrierWaiter is an Env that can tell whether every call it has
// blocked waits at a barrier.
type barrierWaiter interface{ onlyBarrier() bool }

// barrierWaits reports whether every blocked call waits at the barrier
// and the barrier cannot be crossed yet: a message that leaves it so
// need not wake them (with n.mu held). A barrier message of one peer
// among P wakes the program once instead of P-1 times (in channel mode,
// once instead of once per peer and channel).
func (n *Node) barrierWaits() bool {
	w, ok := n.env.(barrierWaiter)
	return ok && n.err == nil && w.onlyBarrier() && !n.core.BarrierReady()
}

// holdFrom has the env stop delivering from's messages on ch, which WC
// holds now (with n.mu held).
func (n *Node) holdFrom(ch core.Channel, from frame.MemberID) {
	h, ok := n.env.(Holder)
	if !ok || slices.Contains(n.holds, channelSender{ch, from}) {
		return
	}
	// Listed even when refused: asked once per sender and crossing.
	h.HoldFrom(ch, from)
	n.holds = append(n.holds, channelSender{ch, from})
}

// releaseHolds ends the holds WC no longer needs, after a crossing or
// when lock traffic starts: Self's request, a peer's request delivered,
// a requester taken back (with n.mu held).
func (n *Node) releaseHolds() {
	if len(n.holds) == 0 {
		return
	}
	h := n.env.(Holder)
	n.holds = slices.DeleteFunc(n.holds, func(cs channelSender) bool {
		if n.core.Holds(cs.ch, cs.from) {
			return false
		}
		h.ReleaseFrom(cs.ch, cs.from)
		return true
	})
}

// event is the reliable layer's Config.OnEvent.
func (n *Node) event(ev reliable.Event) {
	n.mu.Lock()
	n.eventLocked(ev)
	n.mu.Unlock()
}

func (n *Node) eventLocked(ev reliable.Event) {
	if n.core == nil {
		return
	}
	switch ev.Kind {
	case reliable.MemberFailed, reliable.MemberStalled, reliable.MemberLeft:
		n.core.MemberGone(ev.Member)
		if n.core.Pending() > 0 {
			n.env.Kick()
		}
	case reliable.MemberReturned:
		n.core.MemberBack(ev.Member)
		// A member taken back with a lock request outstanding starts
		// lock traffic again (core.Holds): its grant may need what WC
		// holds in a peer's window.
		n.releaseHolds()
	case reliable.ViewInstalled:
		// Under Views a member left out of the new view is gone even
		// when this member's core never reported it: the view's inner
		// core is replaced at the install, so a Leave that arrived
		// here with the leaver's last frames still under repair (the
		// coordinator had them all and moved on), or a suspicion at
		// another member, shows here only as the new view. Everything
		// it sent up to the cut was delivered before the install.
		if ev.View != nil && n.viewGone(ev.View.Members) && n.core.Pending() > 0 {
			n.env.Kick()
		}
		if ev.View != nil && n.outsiders(ev.View.Members) {
			n.env.Kick()
		}
		if ev.View != nil && n.confirm(ev.View) {
			n.env.Kick()
		}
	}
	n.changed()
}

// channelEvent is segment channel ch's Config.OnEvent: a member the
// channel removed (failed, stalled or left) is gone from it, with
// everything of it that the channel's members delivered delivered here;
// a barrier waits for that before counting a member gone
// (core.ChannelGone).
func (n *Node) channelEvent(ch core.Channel, ev reliable.Event) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.core == nil {
		return
	}
	switch ev.Kind {
	case reliable.MemberFailed, reliable.MemberStalled, reliable.MemberLeft:
		n.core.ChannelGone(ch, ev.Member)
	case reliable.MemberReturned:
		n.core.ChannelBack(ch, ev.Member)
	default:
		return
	}
	n.changed()
}

// viewGone removes the core's live members missing from a view's
// members, and the members there with another incarnation than in an
// earlier view, and reports whether it removed one (with n.mu held). A
// restart joins with a new incarnation and takes its old incarnation's
// place, and id, in the next view (docs/membership.md, "Joining,
// leaving, restarting"): the member of the computation is gone all the
// same — its memory, its barrier count and its Lamport clock went with
// it — and everything its old incarnation sent up to the cut was
// delivered before the install. The new process is refused, as a
// process admitted late is (core.Restarted).
func (n *Node) viewGone(members []frame.MemberInfo) bool {
	gone := false
	refuse := n.core.Confirmed() && n.err == nil && !n.closed
	for _, m := range members {
		if inc, ok := n.incarnations[m.ID]; ok && inc != m.Incarnation && m.ID != n.self && n.core.Restarted(m.ID, refuse) {
			gone = true
		}
	}
	for _, id := range n.core.Live() {
		if id == n.self || slices.ContainsFunc(members, func(m frame.MemberInfo) bool { return m.ID == id }) {
			continue
		}
		n.core.MemberGone(id)
		gone = true
	}
	if n.incarnations == nil {
		n.incarnations = make(map[frame.MemberID]uint32, len(members))
	}
	for _, m := range members {
		n.incarnations[m.ID] = m.Incarnation
	}
	return gone
}

// outsiders records the view's members that are not the core's: the
// computation's members are fixed at start (the group's first view), so
// a process the group admitted later is refused, with a Refuse message
// saying how far the computation is, unless this node may be such a
// process itself, has failed or exits (a member that leaves stays in
// the group until every member installed its last view, and sends
// nothing more). It reports whether a refusal was queued
// (with n.mu held).
func (n *Node) outsiders(members []frame.MemberInfo) bool {
	refuse := n.core.Confirmed() && n.err == nil && !n.closed
	queued := false
	for _, m := range members {
		if n.core.Outsider(m.ID, refuse) && refuse {
			queued = true
		}
	}
	return queued
}

// confirm queues a Confirm for every live member of a view installed
// after the node's first, once per view, unless the node may be an
// outsider itself, has failed or exits. A member whose first view was not the
// founding one (it missed that view's commit, and the group moved on)
// waits for one before crossing its first barrier; a process admitted
// later gets a Refuse instead (outsiders), so a member's arrival at a
// barrier sent ahead of that Refuse — taken from the outbox before the
// view that admitted it — cannot take it across. It reports whether a
// Confirm was queued (with n.mu held).
func (n *Node) confirm(v *reliable.ViewInfo) bool {
	if v.ID == n.lastView {
		return false
	}
	n.lastView = v.ID
	if v.ID == n.firstView || !n.core.Confirmed() || n.err != nil || n.closed {
		return false
	}
	queued := false
	for _, m := range v.Members {
		if n.core.Confirm(m.ID) {
			queued = true
		}
	}
	return queued
}

// changed wakes waiters (with n.mu held).
func (n *Node) changed() {
	if s, ok := n.env.(interface{ signal() }); ok {
		s.signal()
	}
}

// fail stops the node with err (with n.mu held).
func (n *Node) fail(err error) {
	if n.err == nil {
		n.err = err
	}
	n.changed()
}

// lock takes n.mu and fails if the node cannot be used.
func (n *Node) lock() error {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return ErrClosed
	}
	if n.err != nil {
		err := n.err
		n.mu.Unlock()
		return err
	}
	return nil
}

// unlock kicks the sender if there is something to send and drops n.mu.
func (n *Node) unlock() {
	if n.core.Pending() > 0 {
		n.env.Kick()
	}
	n.mu.Unlock()
}

// unlockFlush is unlock that also sends at once what is queued (after a
// synchronisation message).
func (n *Node) unlockFlush() {
	pending := n.core.Pending() > 0
	n.mu.Unlock()
	if pending {
		n.env.Flush()
	}
}

// lockRoom is lock once the outbox is below its limit: writes wait for
// the sender there (back-pressure).
func (n *Node) lockRoom() error {
	for {
		if err := n.lock(); err != nil {
			return err
		}
		if n.core.Pending() < n.limit {
			return nil
		}
		n.mu.Unlock()
		err := n.env.Wait(context.Background(), Wait{kind: waitRoom})
		if err != nil {
			return err
		}
	}
}

// Join joins the reliable group described by cfg.Group over l (the
// thesis's dsm_init; registration when cfg.Group.Members is empty, with
// exactly one member having cfg.Group.Server) and returns the member's
// node once the group has started. With cfg.Group.Views the computation's
// members are the group's first view: a process the running group admits
// later is refused by the members, and its calls return a
// *LateJoinError (ErrLateJoin; docs/dsm.md, "A process that starts
// late").
func Join(ctx context.Context, l link.Link, cfg Config) (*Node, error) {
	if cfg.Group.Deliver != nil || cfg.Group.OnEvent != nil {
		return nil, fmt.Errorf("%w: dsm sets Config.Group.Deliver and OnEvent itself; leave them nil", reliable.ErrConfig)
	}
	n := &Node{}
	e := &groupEnv{n: n, changedc: make(chan struct{}), kickc: make(chan struct{}, 1), stop: make(chan struct{}), stopped: make(chan struct{}),
		expect: !cfg.NoExpect}
	n.env = e
	gcfg := cfg.GlobalConfig()
	gcfg.Deliver = n.deliver
	gcfg.OnEvent = n.event
	// With Views the channels' static member lists (ids, MACs,
	// incarnations) come from the first view: the wrapper takes them
	// before the node sees the event (it waits for n.mu, which Join
	// holds until the core is installed).
	// The first view's id also says whether the group was founded with
	// this process (view number 1) or admitted it while running.
	var firstView chan reliable.ViewInfo
	if cfg.Group.Views {
		firstView = make(chan reliable.ViewInfo, 1)
		gcfg.OnEvent = func(ev reliable.Event) {
			if ev.Kind == reliable.ViewInstalled && ev.View != nil {
				v := *ev.View
				v.Members = slices.Clone(v.Members)
				select {
				case firstView <- v:
				default:
				}
			}
			n.event(ev)
		}
	}
	// The group may deliver as soon as Join returns, before the core
	// exists: its event loop hands deliveries and events out without the
	// group's lock, so they wait here for n.mu, in their order, until the
	// core is installed (or, if building it fails, find none and are
	// dropped with the node).
	n.mu.Lock()
	var g *reliable.Group
	var err error
	if cfg.Channels {
		// Every group of the node on one link: the global one and, as
		// barriers fix memberships, one per segment channel.
		m, merr := mux.New(l, mux.Config{})
		if merr != nil {
			n.mu.Unlock()
			return nil, merr
		}
		gl, merr := m.Open(cfg.Group.Group)
		if merr != nil {
			n.mu.Unlock()
			return nil, merr
		}
		e.mux, e.cfg, e.channels = m, cfg, map[core.Channel]*reliable.Group{}
		if gcfg.Auth == nil {
			// One event loop for all of them (a Loop cannot check
			// tags: with Auth each group runs its own).
			var w reliable.Waker
			if m.CanWake() {
				w = m
			}
			e.loop = reliable.NewLoop(reliable.LoopSourceFunc(m.RecvAll), w)
			g, err = reliable.JoinLoop(ctx, e.loop, gl, gcfg)
		} else {
			g, err = reliable.Join(ctx, gl, gcfg)
		}
	} else {
		g, err = reliable.Join(ctx, l, gcfg)
	}
	if err != nil {
		n.mu.Unlock()
		return nil, err
	}
	var ids []frame.MemberID
	for _, m := range g.Members() {
		ids = append(ids, m.ID)
	}
	members := g.MemberList()
	var first uint32
	if firstView != nil {
		// Join returns once the first view is installed; its event
		// reaches the wrapper right after.
		select {
		case v := <-firstView:
			members, first = v.Members, v.ID
		case <-ctx.Done():
			n.mu.Unlock()
			g.Close()
			return nil, fmt.Errorf("dsm: waiting for the group's first view: %w", ctx.Err())
		}
		ids = ids[:0]
		for _, m := range members {
			ids = append(ids, m.ID)
		}
	}
	c, err := core.New(coreConfigView(g.Self(), ids, cfg.UpdateMessage(g.MaxMessage()), cfg, first != 0 && !FoundingView(first)))
	if err != nil {
		n.mu.Unlock()
		g.Close()
		return nil, err
	}
	e.g, e.members = g, members
	n.install(c, g.Self(), outboxLimit(cfg))
	n.firstView = first
	go e.send()
	n.mu.Unlock()
	return n, nil
}

// FoundingView reports whether view id is a group's founding view (view
// number 1; reliable.ViewInfo.ID): the computation's members are that
// view's (Config.Group.Views).
func FoundingView(id uint32) bool { return id>>8 == 1 }

// install sets the node's core (with n.mu held): deliveries and events
// that arrived meanwhile wait for n.mu, so they come after, in order.
func (n *Node) install(c *core.Core, self frame.MemberID, limit int) {
	n.core, n.self, n.limit = c, self, limit
}

// Rank is this member's index, 0..Size()-1, in the order of member ids
// (dsm_init's return value).
func (n *Node) Rank() int { return n.core.Rank() }

// Size is the number of members the group started with (dsm_init's
// *numprocs).
func (n *Node) Size() int { return n.core.Size() }

// Self is this member's id in the reliable group.
func (n *Node) Self() frame.MemberID { return n.self }

// MaxMessage is the largest DSM message: a location may be at most
// MaxMessage()-core.UpdateOverhead bytes.
func (n *Node) MaxMessage() int { return n.core.MaxMessage() }

// CreateSegment creates the segment key with the given geometry (dsm_seg_at
// with DSM_CREATE) and announces it to the group; its memory starts zeroed.
// A key already created (here or, as far as this member has seen, by
// another member) is ErrExists; a location larger than one message can
// carry is a *SizeError.
func (n *Node) CreateSegment(key uint32, locations, locationSize int) (*Segment, error) {
	if err := n.lock(); err != nil {
		return nil, err
	}
	defer n.unlock()
	s, err := n.core.Create(key, Geometry{Locations: locations, LocationSize: locationSize})
	if err != nil {
		return nil, err
	}
	return &Segment{n: n, s: s}, nil
}

// JoinSegment attaches the segment key (dsm_seg_at with DSM_JOIN). It
// waits until the creator's announcement has been seen (or ctx ends), then
// checks the geometry: one that differs from the creator's is a
// *GeometryError showing both. The segment holds every update already
// received for it.
func (n *Node) JoinSegment(ctx context.Context, key uint32, locations, locationSize int) (*Segment, error) {
	return n.joinSegment(ctx, key, locations, locationSize, false)
}

func (n *Node) joinSegment(ctx context.Context, key uint32, locations, locationSize int, readOnly bool) (*Segment, error) {
	if err := n.lock(); err != nil {
		return nil, err
	}
	known := n.core.Known(key)
	n.mu.Unlock()
	if !known {
		err := n.env.Wait(ctx, Wait{kind: waitSegment, id: int64(key)})
		if err != nil {
			return nil, fmt.Errorf("dsm: joining segment %d: waiting for its creator: %w", key, err)
		}
	}
	if err := n.lock(); err != nil {
		return nil, err
	}
	defer n.unlock()
	join := n.core.Join
	if readOnly {
		join = n.core.JoinReadOnly
	}
	s, err := join(key, Geometry{Locations: locations, LocationSize: locationSize})
	if err != nil {
		return nil, err
	}
	return &Segment{n: n, s: s}, nil
}

// JoinSegmentReadOnly is JoinSegment for a member that will only read the
// segment: its writes to it are refused (ErrReadOnly), and under
// Channels it puts no barrier marker on the segment's channel and no
// member waits for one from it there (a marker orders a member's updates
// before its barrier; it has none). See docs/dsm.md, "Read-only joins".
func (n *Node) JoinSegmentReadOnly(ctx context.Context, key uint32, locations, locationSize int) (*Segment, error) {
	return n.joinSegment(ctx, key, locations, locationSize, true)
}

// Barrier flushes every segment's buffered writes, broadcasts this
// member's arrival at barrier id and waits until every other live member
// has arrived at it too (dsm_barrier, total barrier). Members must call
// their barriers in the same order with the same ids; a member that
// arrived at a different id as its n-th barrier makes this return an
// error wrapping ErrBarrierMismatch. Members that left or failed are not
// waited for. If ctx ends first Barrier returns ctx.Err(); calling
// Barrier again with the same id resumes the wait.
func (n *Node) Barrier(ctx context.Context, id int) error {
	_, err := n.barrier(ctx, id, 0, false)
	return err
}

// ChannelBarrier (Config.Channels) is a barrier of the segment channels
// alone: this member puts its marker on the channel of each segment it
// writes, sends nothing on the global channel, and crosses once every
// other writer of every segment it joined has put its marker on that
// segment's channel. The writes those members made before the barrier
// are then visible here, and none they make after it is applied here
// before this member crossed (axioms 2.6 and 2.7 for every two members
// that share a segment, which under channels are the only ones whose
// writes reach each other). Members that share no segment with this one
// are not waited for: it is not the global synchronisation of Barrier,
// and saves the barrier's frame on the global group (docs/dsm.md,
// "Channel barriers"). It fixes no segment membership, is refused
// after this member wrote a segment every member joined since its last
// Barrier (those writes travel on the global channel), and members call
// it where the others call it (ErrBarrierMismatch, reported by the
// members that share a channel).
func (n *Node) ChannelBarrier(ctx context.Context, id int) error {
	_, err := n.barrier(ctx, id, 0, true)
	return err
}

// PartialBarrier is dsm_barrier(id, num_procs): a barrier that this
// member crosses once procs members, itself included, have arrived at
// it (or every live one has). procs must be 1..Size(); Size() is the
// total barrier (Barrier). Every member calls the same barriers in the
// same order, as with Barrier, each partial where the others' is
// partial (ErrBarrierMismatch otherwise; the counts may differ). It
// returns the ranks of the members it counted, itself included: the
// writes they made before the barrier are visible here now; the others'
// may come later, and nobody's writes after the barrier are applied
// here before this member crossed it. A partial barrier fixes no
// segment membership (Config.Selective): only a total one does. See
// docs/dsm.md, "Partial barriers".
func (n *Node) PartialBarrier(ctx context.Context, id, procs int) ([]int, error) {
	if procs < 1 || procs > n.Size() {
		return nil, fmt.Errorf("dsm: partial barrier %d: %d members, want 1..%d (the group's members, this one included; %d is a total barrier)", id, procs, n.Size(), n.Size())
	}
	return n.barrier(ctx, id, procs, false)
}

func (n *Node) barrier(ctx context.Context, id, procs int, channel bool) ([]int, error) {
	if id != int(int32(id)) {
		return nil, fmt.Errorf("dsm: barrier id %d does not fit in 32 bits", id)
	}
	if err := n.lock(); err != nil {
		return nil, err
	}
	if cur, waiting := n.core.InBarrier(); !waiting || cur != int32(id) {
		var err error
		switch {
		case channel:
			err = n.core.EnterChannelBarrier(int32(id))
		case procs > 0:
			err = n.core.EnterPartialBarrier(int32(id), procs)
		default:
			err = n.core.EnterBarrier(int32(id))
		}
		if err != nil {
			n.unlock()
			return nil, err
		}
	}
	waiting := n.core.Waiting()
	n.unlockFlush()
	// Request-driven loss detection (PCODE's request, issue 24): each
	// member not yet arrived owes this one at least its barrier message,
	// so a lost one is asked for after a repair timeout.
	if x, ok := n.env.(expecter); ok && !channel {
		for _, p := range waiting {
			x.Expect(p, 1)
		}
	}
	err := n.env.Wait(ctx, Wait{kind: waitBarrier, id: int64(id)})
	if err != nil {
		n.mu.Lock()
		waiting, confirmed := n.core.Waiting(), n.core.Confirmed()
		n.mu.Unlock()
		if !confirmed && errors.Is(err, ErrLateJoin) {
			return nil, fmt.Errorf("dsm: barrier %d: %w", id, err)
		}
		if !confirmed {
			return nil, fmt.Errorf("dsm: barrier %d: still waiting for a member to confirm this process as one of the computation's (its first view was not the group's founding one): %w", id, err)
		}
		return nil, fmt.Errorf("dsm: barrier %d: still waiting for members %v: %w", id, waiting, err)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if err := n.barrierErr; err != nil {
		n.barrierErr = nil
		return nil, err
	}
	if n.err != nil || procs == 0 {
		return nil, n.err
	}
	return n.core.CountedRanks(), nil
}

// expecter is an Env that passes a lock-step hint to its group.
type expecter interface {
	Expect(from frame.MemberID, n int)
}

// Lock acquires lock id (dsm_lock_acquire) by Ricart–Agrawala over
// broadcast: it flushes every segment's buffer, broadcasts a request and
// waits for every other live member's reply. On return every update the
// other members wrote before replying has been applied here. Holding (or
// requesting) another lock is ErrSecondLock. If ctx ends first Lock
// returns ctx.Err() and the request is withdrawn when the lock would have
// been granted.
func (n *Node) Lock(ctx context.Context, id int) error {
	if id != int(int32(id)) {
		return fmt.Errorf("dsm: lock id %d does not fit in 32 bits", id)
	}
	if err := n.lock(); err != nil {
		return err
	}
	err := n.core.RequestLock(int32(id))
	// The peers' replies may wait behind what WC holds in their windows
	// on the global channel (core.Holds).
	n.releaseHolds()
	// The lock lane: the request goes at once as a datagram too, which
	// a peer's hold of this member (its stopped window, its reorder
	// window) does not keep from it (docs/dsm.md, "The lock lane").
	// Sent without the node's lock: a simulated driver may deliver
	// in the turn that sends it.
	var lane []byte
	l, laner := n.env.(Laner)
	if msg, ok := n.core.Lane(); ok && laner {
		lane = append(lane, msg...)
	}
	n.unlockFlush()
	if err != nil {
		return err
	}
	for range laneCopies * min(len(lane), 1) {
		// Not being sent is no error: the request is in the stream
		// too (a group without the Unreliable level).
		_ = l.SendLane(lane)
	}
	err = n.env.Wait(ctx, Wait{kind: waitLock, id: int64(id)})
	n.mu.Lock()
	defer n.unlock()
	if err != nil {
		if n.core.Holding(int32(id)) {
			n.core.Unlock(int32(id))
		} else {
			n.core.AbandonLock()
		}
		return fmt.Errorf("dsm: lock %d: %w", id, err)
	}
	return n.err
}

// Unlock releases lock id (dsm_lock_release), flushing the buffers and
// answering the requests deferred while it was held. Releasing a lock not
// held is ErrNotHeld.
func (n *Node) Unlock(id int) error {
	if id != int(int32(id)) {
		return fmt.Errorf("%w: lock id %d does not fit in 32 bits", ErrNotHeld, id)
	}
	if err := n.lock(); err != nil {
		return err
	}
	defer n.unlockFlush()
	return n.core.Unlock(int32(id))
}

// Exit flushes everything, removes every segment and leaves the group
// (dsm_exit); it returns once what was sent is acknowledged or the group's
// CloseTimeout passed. A lock still held is released first. Every later
// call on the node returns ErrClosed.
func (n *Node) Exit() error {
	if err := n.lock(); err != nil {
		if err == ErrClosed {
			return err
		}
		n.mu.Lock()
		n.closed = true
		n.mu.Unlock()
		n.env.Leave()
		return err
	}
	n.closed = true
	n.core.ReleaseAll()
	n.core.FlushAll()
	n.unlock()
	err := n.env.Wait(context.Background(), Wait{kind: waitDrained})
	if lerr := n.env.Leave(); err == nil {
		err = lerr
	}
	return err
}

// Stats are a node's counters.
type Stats struct {
	// Writes counts locations written (reliably) by this member; Updates
	// counts update messages it sent carrying them, UpdateBytes their size.
	Writes, Updates, UpdateBytes uint64
	// UnreliableWrites counts locations written with WriteUnreliable or
	// WriteBulkUnreliable; UnreliableUpdates the messages carrying them.
	UnreliableWrites, UnreliableUpdates uint64
	// Barriers, LockRequests and LockReplies count messages sent.
	Barriers, LockRequests, LockReplies uint64
	// Applied counts locations updated here from other members' messages,
	// AppliedUpdates the messages.
	Applied, AppliedUpdates uint64
	// Messages and Bytes count every DSM message this member sent.
	Messages, Bytes uint64
	// BadMessages counts received messages that failed to decode or named
	// something that does not exist here (dropped, with no effect).
	BadMessages uint64
	// Markers counts barrier markers sent on segment channels, Held the
	// messages the wait condition kept aside until a barrier was
	// crossed, Ignored the updates of segments not joined here (Selective
	// over one group).
	Markers, Held, Ignored uint64
	// HeldPeak is the most bytes of messages the wait condition kept
	// aside at once (on a segment channel, what was delivered before its
	// reliable layer stopped delivering from the peer: Holder).
	HeldPeak uint64
	// Outsiders counts messages dropped from processes the group (Views)
	// admitted after the computation began: they are no members
	// (ErrLateJoin at them).
	Outsiders uint64
	// LaneRequests counts this member's lock requests sent on the lock
	// lane too (docs/dsm.md, "The lock lane"), LaneDuplicates the lock
	// requests received twice (lane and stream), the second dropped;
	// HeldUnreliable the unreliable-write messages of a sender the
	// reliable layer held, dropped (they pass the hold as datagrams).
	LaneRequests, LaneDuplicates, HeldUnreliable uint64
	// Wakeups counts the times a blocked call (a barrier, room in the
	// outbox...) was woken to check whether it may go on (Join's node;
	// 0 on the simulator, whose scheduler checks instead).
	Wakeups uint64
	// Group is the reliable layer's counters (the global group's with
	// Channels); Channels each segment channel's, by segment key.
	Group    reliable.Stats
	Channels map[uint32]reliable.Stats
}

// Stats returns the node's counters.
func (n *Node) Stats() Stats {
	n.mu.Lock()
	c, wakeups, heldUnreliable := n.core.Counters(), n.wakeups, n.heldUnreliable
	n.mu.Unlock()
	st := Stats{
		Writes: c.Writes, Updates: c.Updates, UpdateBytes: c.UpdateBytes,
		UnreliableWrites: c.UnreliableWrites, UnreliableUpdates: c.UnreliableUpdates,
		Barriers: c.Barriers, LockRequests: c.LockRequests, LockReplies: c.LockReplies,
		Applied: c.Applied, AppliedUpdates: c.AppliedUpdates,
		Messages: c.Messages, Bytes: c.Bytes, BadMessages: c.BadMessages,
		Markers: c.Markers, Held: c.Held, Ignored: c.Ignored, HeldPeak: c.HeldPeak,
		Outsiders: c.Outsiders, Wakeups: wakeups,
		LaneRequests: c.LaneRequests, LaneDuplicates: c.LaneDuplicates, HeldUnreliable: heldUnreliable,
		Group: n.env.GroupStats(),
	}
	if cs, ok := n.env.(interface {
		ChannelStats() map[uint32]reliable.Stats
	}); ok {
		st.Channels = cs.ChannelStats()
	}
	return st
}

// Segment is one attached segment (the thesis's dsm_id).
type Segment struct {
	n *Node
	s *core.Segment
}

// Key is the segment's key.
func (s *Segment) Key() uint32 { return s.s.Key() }

// Geometry is the segment's number of locations and location size.
func (s *Segment) Geometry() Geometry { return s.s.Geometry() }

// Write sets location loc to value, whose length must be the location
// size, and queues the update (dsm_write with DSM_WRT_REL). The local copy
// changes at once; the update goes out when the segment's buffer is full,
// at the next synchronisation, at Remove or Exit — or at once when
// unbuffered. It blocks only while Config.OutboxLimit messages wait to be
// sent. A loc outside the segment is a *RangeError, a wrong value length
// a *SizeError.
func (s *Segment) Write(loc int, value []byte) error {
	if err := s.n.lockRoom(); err != nil {
		return err
	}
	defer s.n.unlock()
	return s.n.core.Write(s.s, loc, value)
}

// WriteBulk writes len(values)/LocationSize consecutive locations from loc
// (dsm_bulk_write): it flushes the segment's buffer, then sends the range
// in as few messages as fit. len(values) must be a multiple of the
// location size. It returns the number of locations written.
func (s *Segment) WriteBulk(loc int, values []byte) (int, error) {
	return s.writeBulk(loc, values, false)
}

func (s *Segment) writeBulk(loc int, values []byte, unreliable bool) (int, error) {
	if err := s.n.lockRoom(); err != nil {
		return 0, err
	}
	defer s.n.unlock()
	return s.n.core.WriteBulk(s.s, loc, values, unreliable)
}

// WriteUnreliable is Write with DSM_WRT_UNREL: the update bypasses the
// segment's buffer and is sent at once in a message of its own, so it can
// overtake the segment's buffered writes; programs must not count on other
// members seeing it. Over Join it goes at the group's Unreliable level
// (reliable.Group.SendUnreliable): once, never acknowledged or repaired,
// in no order with the writer's other messages; over a totally ordered
// group, which has no such level, it is carried reliably, in the order.
// dsmsim.Run drops them at the sender (dsmsim.Config.UnreliableLoss).
func (s *Segment) WriteUnreliable(loc int, value []byte) error {
	if err := s.n.lockRoom(); err != nil {
		return err
	}
	defer s.n.unlock()
	return s.n.core.WriteUnreliable(s.s, loc, value)
}

// WriteBulkUnreliable is WriteBulk with DSM_WRT_UNREL: the range goes at
// once in messages of its own and the segment's buffer is left alone (not
// flushed first); over Join they go at the Unreliable level, as for
// WriteUnreliable.
func (s *Segment) WriteBulkUnreliable(loc int, values []byte) (int, error) {
	return s.writeBulk(loc, values, true)
}

// Read copies location loc into dst (dsm_read) and returns dst[:size];
// dst must hold at least the location size.
func (s *Segment) Read(loc int, dst []byte) ([]byte, error) {
	s.n.mu.Lock()
	defer s.n.mu.Unlock()
	return s.n.core.Read(s.s, loc, dst)
}

// View is the segment's memory, read-only (dsm_ptr_read of location 0):
// location i is View()[i*size : (i+1)*size]. Incoming updates change it
// concurrently, so read through it only where the program has no data
// race on the locations read (thesis §2.3): after a barrier or under a
// lock that orders the writes. Writing into it is a bug: such a change is
// never propagated. Nil once the segment is removed.
func (s *Segment) View() []byte {
	s.n.mu.Lock()
	defer s.n.mu.Unlock()
	return s.s.Memory()
}

// Location is location loc of View, read-only (dsm_ptr_read); nil if loc
// is outside the segment.
func (s *Segment) Location(loc int) []byte {
	m := s.View()
	size := s.s.Geometry().LocationSize
	if m == nil || loc < 0 || loc >= s.s.Geometry().Locations {
		return nil
	}
	return m[loc*size : (loc+1)*size : (loc+1)*size]
}

// Remove flushes the segment's buffered writes to the group and detaches
// the segment (dsm_remove): incoming updates for it are ignored from then
// on and every later call on s returns ErrRemoved, until JoinSegment
// attaches it again (from zeroed memory). Other members keep their copies.
// It returns once this member's updates are handed to the reliable layer,
// which delivers them to every live member (the thesis waits for them to
// be delivered; the reliable layer does not tell when that is).
func (s *Segment) Remove() error {
	if err := s.n.lock(); err != nil {
		return err
	}
	err := s.n.core.Remove(s.s)
	s.n.unlockFlush()
	if err != nil {
		return err
	}
	return s.n.env.Wait(context.Background(), Wait{kind: waitDrained})
}

// Float64 helpers: a location of 8 bytes holds one float64, little-endian
// (the byte order of every host this runs on; Float64s relies on it).

// WriteFloat64 is Write of v into an 8-byte location.
func (s *Segment) WriteFloat64(loc int, v float64) error {
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], math.Float64bits(v))
	return s.Write(loc, b[:])
}

// WriteFloat64s is WriteBulk of vs into consecutive 8-byte locations from
// loc; it returns the number of locations written.
func (s *Segment) WriteFloat64s(loc int, vs []float64) (int, error) {
	if len(vs) == 0 {
		return 0, nil
	}
	return s.WriteBulk(loc, unsafe.Slice((*byte)(unsafe.Pointer(&vs[0])), 8*len(vs)))
}

// ReadFloat64 is Read of an 8-byte location as a float64.
func (s *Segment) ReadFloat64(loc int) (float64, error) {
	var b [8]byte
	if _, err := s.Read(loc, b[:]); err != nil {
		return 0, err
	}
	return math.Float64frombits(binary.LittleEndian.Uint64(b[:])), nil
}

// Float64s is View as float64s (nil unless the location size is a
// multiple of 8), under View's rules: read-only, and only where the
// program has no data race on what it reads.
func (s *Segment) Float64s() []float64 {
	m := s.View()
	if len(m) == 0 || s.s.Geometry().LocationSize%8 != 0 {
		return nil
	}
	return unsafe.Slice((*float64)(unsafe.Pointer(&m[0])), len(m)/8)
}
