// Package eventtest is the tests' reference model of what a stepper
// keeps of its membership events (core.Stepper's EventCounts, Removals,
// Removed and RecentViews, which reliable's Stats hands out): what
// reading every event ever reported, in order, gives. The tests of
// reliable/core and of reliable compare the stepper's bounded record
// with it; only tests import it.
package eventtest

import (
	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/reliable/core"
)

// Model is what the events reported give; E is core.Event or
// reliable.Event.
type Model[E any] struct {
	Counts core.EventCounts // by kind
	// Removed is each member's removal in force: its last failure,
	// stall or leave, unless it returned after it.
	Removed map[frame.MemberID]E
	Self    *E  // the last SelfRemoved; nil if none
	Views   []E // the ViewInstalled events that carry a view, in order
}

// Replay reads all, in order; of gives an event's kind, its member and
// whether it carries a view.
func Replay[E any](all []E, of func(E) (kind core.EventKind, member frame.MemberID, view bool)) Model[E] {
	m := Model[E]{Removed: map[frame.MemberID]E{}}
	for _, ev := range all {
		kind, member, view := of(ev)
		m.Counts[kind]++
		switch kind {
		case core.MemberFailed, core.MemberStalled, core.MemberLeft:
			m.Removed[member] = ev
		case core.MemberReturned:
			delete(m.Removed, member)
		case core.SelfRemoved:
			m.Self = &ev
		case core.ViewInstalled:
			if view {
				m.Views = append(m.Views, ev)
			}
		}
	}
	return m
}
