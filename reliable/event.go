package reliable

import (
	"fmt"
	"time"

	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/reliable/clock/wall"
	"github.com/rbcast/rbcast/reliable/core"
)

// EventKind says what happened to a member or to the sequencer (the
// kinds every core reports: package core).
type EventKind = core.EventKind

const (
	// MemberFailed: silent past FailureTimeout, removed. Under Order
	// Total only the sequencer removes members (it is the one they talk
	// to); it also removes those that did not vote in its election. It
	// numbers the removal in the global stream, so every member reports
	// it, once, at the same place of the total order: after the messages
	// numbered before it (Last is the global number before it), before
	// those after.
	MemberFailed = core.MemberFailed
	// MemberStalled (FIFO): heard from, but ignoring this member, so
	// removed. Reason says how it showed: StalledNoAcks, it acknowledged
	// none of our frames for FailureTimeout while some were outstanding;
	// or StalledRemovedUs, its frames run more than a window past our
	// acknowledgement, which a member that counts us never does: it
	// removed this member (which started late, or was cut off or did not
	// read for its FailureTimeout), and what this member misses from it
	// can never be repaired. Reported at once, on its first such frame.
	MemberStalled = core.MemberStalled
	// MemberLeft: its Leave arrived; everything it sent was delivered.
	MemberLeft = core.MemberLeft
	// SelfLeft: this member sent its Leave; the group is finished.
	SelfLeft = core.SelfLeft
	// SequencerFailed (Total): nothing heard from the sequencer (Member)
	// for FailureTimeout; an election started.
	SequencerFailed = core.SequencerFailed
	// SequencerChanged (Total): Member became the sequencer of Epoch;
	// Last is the agreed last global number of the epochs before.
	SequencerChanged = core.SequencerChanged
	// SelfRemoved (Total): this member was left out of an election (it
	// was cut off, or believed dead) and halted; the group stops with an
	// error. Reason says which.
	SelfRemoved = core.SelfRemoved
	// MemberReturned (Total): a member removed as failed was heard again
	// by the sequencer while everything it lacked was still in the
	// history; it is a member again. Numbered in the stream like
	// MemberFailed, reported by every member at its place. A member is
	// not told of its own removal or return.
	MemberReturned = core.MemberReturned
	// JoinRefused (registration server): a process asked to join and was
	// refused; Reason says who and why (the group is full, or its
	// configuration differs). Member is not set.
	JoinRefused = core.JoinRefused
	// ViewInstalled: a new view of a group that changes is installed:
	// View says which; Member is this member's id in it.
	ViewInstalled = core.ViewInstalled
	// GroupRemoved: Member removed the group; this member stops.
	GroupRemoved = core.GroupRemoved
)

// EventCounts counts events by kind: c[k] is the number of events of
// kind k (Stats.EventCounts).
type EventCounts = core.EventCounts

const (
	// EventTail is how many of the most recent events Stats lists
	// (core.EventTail says why that many).
	EventTail = core.EventTail
	// ViewsKept is how many of the latest ViewInstalled events Stats
	// lists (RecentViews).
	ViewsKept = core.ViewsKept
)

// Reasons of a FIFO MemberStalled (Event.Reason).
const (
	StalledNoAcks    = core.StalledNoAcks
	StalledRemovedUs = core.StalledRemovedUs
)

// Event reports a change of membership, or of the sequencer (Order
// Total): a core's event (core.Event) on the wall clock.
type Event struct {
	Kind   EventKind
	Member frame.MemberID
	At     time.Time
	// FIFO: Delivered is the next sequence number that was expected from
	// Member when it was removed (everything before it was delivered
	// here); Discarded counts messages received from it beyond a gap
	// that could no longer be filled, dropped undelivered.
	Delivered uint32
	Discarded int
	// Total: the sequencer's epoch, and Last: for SequencerChanged the
	// agreed last global number before the epoch, for SelfRemoved the
	// agreed end this member had gone beyond, for MemberFailed and
	// MemberReturned the global number before the change's own (the same
	// at every member), otherwise the last global number delivered.
	Epoch uint32
	Last  uint32
	// Reason says why, where a kind has several causes: Total's
	// MemberFailed and SelfRemoved, FIFO's MemberStalled (StalledNoAcks
	// or StalledRemovedUs), JoinRefused.
	Reason string
	// View is the view installed (ViewInstalled): its id and members.
	View *ViewInfo
}

// ViewInfo is a view of a group that changes: its id and its members,
// with their MACs and incarnations.
type ViewInfo = core.ViewInfo

func (e Event) String() string {
	var s string
	switch {
	case e.Kind == JoinRefused:
		s = e.Kind.String()
	case e.Kind == ViewInstalled && e.View != nil:
		s = fmt.Sprintf("view %d installed: %d members, this one %d", e.View.ID, len(e.View.Members), e.Member)
	case e.Epoch == 0:
		s = fmt.Sprintf("member %d %v (delivered up to seq %d, %d discarded)", e.Member, e.Kind, e.Delivered, e.Discarded)
	default:
		s = fmt.Sprintf("member %d %v (epoch %d, last global %d)", e.Member, e.Kind, e.Epoch, e.Last)
	}
	if e.Reason != "" {
		s += ": " + e.Reason
	}
	return s
}

// eventOf is a core's event on the wall clock c.
func eventOf(ev core.Event, c wall.Clock) Event {
	return Event{Kind: ev.Kind, Member: ev.Member, At: c.Wall(ev.At), Delivered: ev.Delivered, Discarded: ev.Discarded,
		Epoch: ev.Epoch, Last: ev.Last, Reason: ev.Reason, View: ev.View}
}

// eventsOf is a core's events on the wall clock c (nil if none).
func eventsOf(evs []core.Event, c wall.Clock) []Event {
	if len(evs) == 0 {
		return nil
	}
	out := make([]Event, len(evs))
	for i, ev := range evs {
		out[i] = eventOf(ev, c)
	}
	return out
}
