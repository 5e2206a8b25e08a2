package core

import (
	"cmp"
	"slices"

	"github.com/rbcast/rbcast/frame"
)

// EventTail is how many of the most recent events a Stepper lists
// (Events). A core reports an event only when the membership changes — a
// view installed, a member failed, stalled, left or returned, the
// sequencer changed, a Join refused — so 256 hold the last few dozen view
// changes with their removals, more than anyone reads (rbcastd status
// shows the last eight view changes; tests and logs read a handful), in
// 16 KiB of events plus the member lists of the views among them. What
// is read beyond the tail is kept apart, exact and bounded: the count of
// every kind (EventCounts), each member's removal in force (Removals),
// the self-removal (Removed) and the latest views (RecentViews).
const EventTail = 256

// ViewsKept is how many of the latest ViewInstalled events a Stepper
// keeps (RecentViews), however many other events came since: at least
// the eight view changes rbcastd status lists.
const ViewsKept = 16

// EventCounts counts events by kind: c[k] is the number of events of
// kind k; c[0] counts those of a kind this package does not name.
type EventCounts [eventKinds]uint64

// Total is the number of events of every kind.
func (c EventCounts) Total() uint64 {
	var n uint64
	for _, x := range c {
		n += x
	}
	return n
}

// eventLog is what a Stepper keeps of the events its core reported: a
// count per kind, the facts later events leave standing, and the most
// recent, each bounded.
type eventLog struct {
	counts EventCounts
	recent eventRing // the last EventTail
	views  eventRing // the last ViewsKept ViewInstalled with a view
	// removals are each member's removal in force (MemberFailed,
	// MemberStalled, MemberLeft, until a MemberReturned), by id.
	removals []Event
	// self is the last SelfRemoved (selfRemoved: there was one).
	self        Event
	selfRemoved bool
}

func (l *eventLog) add(ev Event) {
	if int(ev.Kind) < len(l.counts) {
		l.counts[ev.Kind]++
	} else {
		l.counts[0]++
	}
	l.recent.add(ev, EventTail)
	switch ev.Kind {
	case ViewInstalled:
		if ev.View != nil {
			l.views.add(ev, ViewsKept)
		}
	case SelfRemoved:
		l.self, l.selfRemoved = ev, true
	case MemberFailed, MemberStalled, MemberLeft, MemberReturned:
		i, found := slices.BinarySearchFunc(l.removals, ev.Member, func(e Event, id frame.MemberID) int { return cmp.Compare(e.Member, id) })
		switch {
		case ev.Kind == MemberReturned:
			if found {
				l.removals = slices.Delete(l.removals, i, i+1)
			}
		case found:
			l.removals[i] = ev
		default:
			l.removals = slices.Insert(l.removals, i, ev)
		}
	}
}

// eventRing keeps the last events added, up to a size.
type eventRing struct {
	ev    []Event // once full, ev[next] is the oldest
	next  int
	total uint64 // events ever added
}

func (r *eventRing) add(ev Event, size int) {
	r.total++
	if len(r.ev) < size {
		r.ev = append(r.ev, ev)
		return
	}
	r.ev[r.next] = ev
	r.next = (r.next + 1) % size
}

// list returns the events kept, oldest first (a copy; nil if none).
func (r *eventRing) list() []Event {
	if len(r.ev) == 0 {
		return nil
	}
	return append(append(make([]Event, 0, len(r.ev)), r.ev[r.next:]...), r.ev[:r.next]...)
}

// dropped is how many events were added but are no longer kept.
func (r *eventRing) dropped() uint64 { return r.total - uint64(len(r.ev)) }

// Events returns the most recent events, oldest first: the last
// EventTail (a copy). EventsDropped counts the earlier ones, EventCounts
// every one.
func (s *Stepper) Events() []Event { return s.events.recent.list() }

// EventsDropped is how many events came before those Events lists.
func (s *Stepper) EventsDropped() uint64 { return s.events.recent.dropped() }

// EventCounts counts every event so far by kind.
func (s *Stepper) EventCounts() EventCounts { return s.events.counts }

// Removals returns each member's removal in force, by id: its last
// MemberFailed, MemberStalled or MemberLeft, unless a MemberReturned
// came after it (a copy; nil if none).
func (s *Stepper) Removals() []Event { return slices.Clone(s.events.removals) }

// RecentViews returns the last ViewsKept ViewInstalled events that name
// a view, oldest first (a copy; nil if none).
func (s *Stepper) RecentViews() []Event { return s.events.views.list() }

// Removed returns the last SelfRemoved event, if the core halted.
func (s *Stepper) Removed() (Event, bool) { return s.events.self, s.events.selfRemoved }
