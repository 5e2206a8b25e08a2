// Package core is the one contract every protocol core of rbcast
// implements, and the one stepper that drives any of them.
//
// A core is a deterministic state machine in the manner of etcd-raft's
// RawNode (DESIGN.md, decision 1): it does no I/O, reads no clock, starts
// no goroutine. The runtime feeds it received frames (Step), the passing
// of time (Tick) and the application's messages (Propose), and carries
// out what Ready returns — frames to send, messages to deliver, events to
// report — then calls Advance. PBP (reliable/pbp), the sequencer
// (reliable/seq) and registration (reliable/member) implement Core.
//
// The Stepper is the glue every driver of a core shares: it decodes
// received Ethernet frames, counts the bad ones, steps the core, times
// repairs and keeps per-member delivery counters. The live runtime
// (package reliable), its simulator Driver, pcap-replay's re-run, the
// in-memory segment of the benchmarks and the simulation tests all drive
// their cores through it, so the glue tested in the simulator is the glue
// that runs live.
//
// This package imports only frame and reliable/clock.
package core

import (
	"errors"
	"fmt"

	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/reliable/clock"
)

// Time and Duration are the cores' clock (package clock): nanoseconds on
// the runtime's monotonic clock, 0 meaning "no deadline".
type (
	Time     = clock.Time
	Duration = clock.Duration
)

// Core is a protocol state machine. Its methods are not safe for
// concurrent use; the runtime serialises them.
//
// The order of calls: Step, Tick and Leave may produce output (frames,
// deliveries, events); Ready hands that output out, valid until Advance.
// Step, Tick and Leave must not be called between Ready and Advance.
// Propose never produces output by itself (the message goes out of a
// later Ready), so it may be called at any time, also between Ready and
// Advance: a runtime hands out a Ready's deliveries without holding the
// core, and the application may Send meanwhile.
// UnreliableCore is a core that can also send at the Unreliable level
// (Liu's weak groups; docs/membership.md, "Delivery levels"): a message
// sent once to the members of the sender's view, never acknowledged or
// repaired, delivered at most once and uncorrupted. The view core has it.
type UnreliableCore interface {
	// ProposeUnreliable sends msg (copied) at the Unreliable level. It
	// never waits for window room and, like Propose, produces no output
	// by itself: the next Ready sends it.
	ProposeUnreliable(now Time, msg []byte) error
}

// ErrNoUnreliable is returned by Stepper.ProposeUnreliable for a core
// without the Unreliable level.
var ErrNoUnreliable = errors.New("core: this group has no Unreliable level: it needs views (reliable.Config.Views) or FIFO order")

// LevelCore is a total-order core that sends each message at the Agreed
// or the Safe level, whatever its group's (reliable/vtotal): one order
// holds both, and a Safe message, with every message after it in the
// order, is delivered once every member of the view holds it.
type LevelCore interface {
	// ProposeLevel is Propose at the Safe level (safe) or the Agreed.
	ProposeLevel(now Time, msg []byte, safe bool) error
}

// ErrNoLevel is returned by Stepper.ProposeLevel for a core without a
// level per message.
var ErrNoLevel = errors.New("core: this group has no reliable level per message: Agreed and Safe per message need total order over views (reliable.Config.Views, Order Total)")

type Core interface {
	// Step handles one received frame, already validated by frame.Parse.
	// src and dst are its Ethernet source and destination. An error says
	// why the frame was dropped; it changed no state. Deliveries it
	// causes may alias v's bytes: the runtime keeps them unchanged until
	// Advance.
	Step(now Time, src, dst [6]byte, v frame.View) error
	// Tick runs the timers due at now.
	Tick(now Time)
	// Propose queues an application message, copying it. ErrWindowFull
	// is back-pressure (retry once Blocked is false); a message larger
	// than MaxMessage is refused with a *TooLargeError; after Leave,
	// ErrLeaving.
	Propose(now Time, msg []byte) error
	// Leave starts a clean departure: nothing new is accepted, what was
	// accepted is finished, then the core announces its departure and
	// reports SelfLeft.
	Leave(now Time)
	// Ready returns what to do now; see Ready.
	Ready() Ready
	// Advance says the last Ready was carried out.
	Advance()
	// Deadline is when Tick must next run; 0 when nothing is pending.
	Deadline() Time
	// Blocked reports whether Propose may refuse a message with
	// ErrWindowFull. While it is false, Propose accepts any message of
	// up to MaxMessage bytes.
	Blocked() bool
	// Done reports whether the core is finished: it left (and its last
	// frames are out), or it halted (SelfRemoved).
	Done() bool
	// Info returns what does not change while the core runs.
	Info() Info
	// Stats returns the counters.
	Stats() Stats
	// Members returns every member as seen here, this one included, by
	// id. It allocates; it is for status output.
	Members() []Member
	// Repair says whose stream a frame from member from fills, and
	// whether that stream has a gap here now: the runtime times each
	// repair from the Step that revealed a gap to the one that filled it.
	// Under FIFO every sender has its own stream; under total order there
	// is one, answered by the sequencer.
	Repair(from frame.MemberID) (stream frame.MemberID, repairing bool)
}

// A CRCSkipper is a core that can leave its frames' CRC32C to the link
// they go out on, when that link writes every frame's CRC itself
// (link.CRCSealer: link/auth encrypting). After SkipCRC every frame it
// encodes carries a zero CRC (frame.Header.SkipCRC). A core that wraps or
// starts others passes it on to them, also to those it starts later. A
// core without it writes the CRC as always; so does any frame a core
// embeds in another (a ViewRelay's), whose CRC its receivers check.
type CRCSkipper interface {
	SkipCRC()
}

// Info is what a core's runtime needs to know of it and that does not
// change while it runs.
type Info struct {
	// Self is this member's id.
	Self frame.MemberID
	// MaxMessage is the largest message Propose accepts.
	MaxMessage int
	// SelfDelivery: this member's own messages are delivered here too,
	// in their place (total order). A runtime that queues deliveries for
	// the application must then not accept messages while its queue is
	// full, or a member that sends and does not read grows it without
	// bound.
	SelfDelivery bool
	// Delivers reports whether frames of type t carry messages to
	// deliver. While the application is not reading, the runtime leaves
	// such frames unstepped (they are repaired later, like losses) and
	// steps the rest, so that acknowledgements and liveness go on.
	Delivers func(t frame.Type) bool
	// InFlight names what Stats.InFlight counts, for error messages
	// ("frames not yet acknowledged by every live member").
	InFlight string
}

// Ready is what the runtime must do now. Everything in it is valid until
// Advance.
type Ready struct {
	// Frames are complete Ethernet frames to send, in order. A frame
	// flagged as a retransmission (frame.View.Retransmission) may be sent
	// ahead of frames the link has queued before it (link.NowSender);
	// all others go out in this order.
	Frames [][]byte
	// Deliveries are messages for the application, in the order the
	// core promises (FIFO per sender, or one total order).
	Deliveries []Delivery
	// Events are changes of membership, in the order they happened.
	Events []Event
}

// Empty reports whether there is nothing to do.
func (r Ready) Empty() bool {
	return len(r.Frames) == 0 && len(r.Deliveries) == 0 && len(r.Events) == 0
}

// Delivery is one application message. Data aliases either the received
// frame or a buffer of the core; both stay unchanged until Advance, and
// until the core's next Step or Tick after it. Copy it to keep it.
type Delivery struct {
	From frame.MemberID
	// Unreliable marks a message of the Unreliable level (a Datagram
	// frame; Seq numbers the sender's datagrams): delivered at most once,
	// in no order with the others. Layers that order messages pass it
	// through. (Beside From, in From's padding: a Delivery stays 48
	// bytes; at the end it made it 56, and the cores' reused delivery
	// slices grew by as much.)
	Unreliable bool
	// Seq is the sequence number, at From, of the frame (FIFO) or the
	// request (total order) that carried the message; Index its position
	// within a bundle (0 for a lone message).
	Seq   uint32
	Index int
	// Global and Epoch place the message in a total order (zero under
	// FIFO): its global sequence number, and the epoch of the sequencer
	// that numbered it.
	Global, Epoch uint32
	Data          []byte
}

// EventKind says what happened to a member, or to the sequencer.
type EventKind uint8

const (
	// MemberFailed: silent past FailureTimeout, removed. Under total
	// order the sequencer decides it and numbers it in the global
	// stream, so every member reports it at the same place.
	MemberFailed EventKind = iota + 1
	// MemberStalled (FIFO): heard from, but ignoring this member, so
	// removed; Reason says how it showed (StalledNoAcks or
	// StalledRemovedUs).
	MemberStalled
	// MemberLeft: its Leave arrived; everything it sent was delivered.
	MemberLeft
	// SelfLeft: this member sent its Leave; the core is finished.
	SelfLeft
	// SequencerFailed: nothing heard from the sequencer (Member) for
	// FailureTimeout; an election started.
	SequencerFailed
	// SequencerChanged: Member became the sequencer of Epoch; Last is
	// the agreed last global number of the epochs before.
	SequencerChanged
	// SelfRemoved: this member was left out of an election (cut off, or
	// believed dead) and halted. Reason says which.
	SelfRemoved
	// MemberReturned: a member removed as failed was heard again while
	// everything it lacked was still in the history; it is a member
	// again.
	MemberReturned
	// JoinRefused: a process asked to join and was refused (at the
	// registration server, or, reported to the joiner, by the view's
	// coordinator); Reason says who and why (the group is full, or its
	// configuration differs).
	JoinRefused
	// ViewInstalled (reliable/view): a new view is installed; View says
	// which (Epoch is its id too), Member is this member's id in it.
	ViewInstalled
	// GroupRemoved (reliable/view): Member removed the group; it stops.
	GroupRemoved

	// eventKinds is one past the last kind (EventCounts' length): a kind
	// added goes above it.
	eventKinds
)

// Reasons of MemberStalled (Event.Reason).
const (
	StalledNoAcks    = "it acknowledged none of our frames for FailureTimeout"
	StalledRemovedUs = "it removed this member: its frames run more than a window past our acknowledgement"
)

func (k EventKind) String() string {
	switch k {
	case MemberFailed:
		return "failed"
	case MemberStalled:
		return "stalled"
	case MemberLeft:
		return "left"
	case SelfLeft:
		return "self left"
	case SequencerFailed:
		return "sequencer failed"
	case SequencerChanged:
		return "sequencer changed"
	case SelfRemoved:
		return "self removed"
	case MemberReturned:
		return "returned"
	case JoinRefused:
		return "join refused"
	case ViewInstalled:
		return "view installed"
	case GroupRemoved:
		return "group removed"
	}
	return fmt.Sprintf("EventKind(%d)", uint8(k))
}

// Removal reports whether k takes a member out of the group (this one
// included).
func (k EventKind) Removal() bool {
	switch k {
	case MemberFailed, MemberStalled, MemberLeft, SelfLeft, SelfRemoved, GroupRemoved:
		return true
	}
	return false
}

// Event reports a change of membership, or of the sequencer.
type Event struct {
	Kind   EventKind
	Member frame.MemberID
	At     Time
	// FIFO: Delivered is the next sequence number that was expected from
	// Member when it was removed (everything before it was delivered
	// here); Discarded counts messages received from it beyond a gap that
	// could no longer be filled, dropped undelivered.
	Delivered uint32
	Discarded int
	// Total order: the sequencer's epoch, and Last: for SequencerChanged
	// the agreed last global number before the epoch, for SelfRemoved the
	// agreed end this member had gone beyond, for MemberFailed and
	// MemberReturned the global number before the change's own (the same
	// at every member), otherwise the last global number delivered.
	Epoch uint32
	Last  uint32
	// Reason says why, where a kind has several causes.
	Reason string
	// View is the installed view (ViewInstalled), nil otherwise.
	View *ViewInfo
}

// ViewInfo is a view of a group that changes (reliable/view): its id and
// its members.
type ViewInfo struct {
	ID      uint32
	Members []frame.MemberInfo // by id
	// OwnBefore is how many of this member's messages went out in the
	// views before this one (view.Core.OwnOut then): a layer above
	// learns which of its messages the view before delivered.
	OwnBefore uint64
}

func (e Event) String() string {
	var s string
	if e.Epoch == 0 {
		s = fmt.Sprintf("member %d %v at %d (delivered up to seq %d, %d discarded)", e.Member, e.Kind, int64(e.At), e.Delivered, e.Discarded)
	} else {
		s = fmt.Sprintf("member %d %v at %d (epoch %d, last global %d)", e.Member, e.Kind, int64(e.At), e.Epoch, e.Last)
	}
	if e.Reason != "" {
		s += ": " + e.Reason
	}
	return s
}

// Member is one member as a core sees it.
type Member struct {
	ID   frame.MemberID
	Self bool
	// Live: not removed, not left (for Self: not left, not halted).
	Live bool
	// Repairing: messages from it (total order: numbered messages,
	// answered by the sequencer) are known to be missing here.
	Repairing bool
	// Sequencer: the sequencer this member follows (total order).
	Sequencer bool
}

// Stats are a core's counters: the ones every core keeps, and its own.
type Stats struct {
	Proposed  uint64 // messages accepted by Propose
	Delivered uint64 // messages delivered
	// Sent counts first transmissions of frames that carry this member's
	// messages, Retransmitted the frames sent again (this member's, or
	// others' it answered for), RepairRequests the frames asking others
	// for what is missing here (Nacks, retransmission requests).
	Sent, Retransmitted, RepairRequests uint64
	// RepairRequestsReceived counts the repair requests addressed to
	// this member (where the core counts them).
	RepairRequestsReceived uint64
	// Epoch is the core's epoch where it has one: the sequencer's under
	// total order.
	Epoch uint32
	// Window bounds InFlight (Propose waits beyond it).
	Window int
	// InFlight is what this member sent and is not yet done with (what a
	// clean leave waits for; Info.InFlight names it); Pending what it
	// accepted and has not yet sent for want of window room.
	InFlight, Pending int
	// Unsettled counts this member's messages not yet known to be held
	// by every live member: when it is 0, everything it sent has reached
	// everyone (what rbcastd's flush waits for).
	Unsettled int
	// Detail is the core's own counters (a pbp.Stats, a seq.Stats, ...).
	Detail any
}

// Errors every core shares. A core wraps or returns them; test with
// errors.Is.
var (
	// ErrWindowFull is back-pressure: the window is full. Retry after a
	// later Step or Tick frees room (Blocked turns false).
	ErrWindowFull = errors.New("send window full")
	// ErrLeaving: Leave was called; no new messages are accepted.
	ErrLeaving = errors.New("member is leaving the group")
	// ErrHalted: this member was removed from the group and takes no
	// more input.
	ErrHalted = errors.New("member halted: removed from the group")
	// ErrNotAccepting: this core carries no application messages (for
	// example registration).
	ErrNotAccepting = errors.New("this protocol carries no application messages")
)

// TooLargeError refuses a message larger than one frame carries.
type TooLargeError struct {
	Size, Max int
}

func (e *TooLargeError) Error() string {
	return fmt.Sprintf("message of %d bytes exceeds the %d bytes one frame carries", e.Size, e.Max)
}
