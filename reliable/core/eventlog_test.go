package core_test

import (
	"slices"
	"testing"

	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/reliable/core"
	"github.com/rbcast/rbcast/reliable/internal/eventtest"
)

// What the stepper keeps of its events stays bounded and exact: the
// last EventTail events, the count of the earlier ones, every kind's
// count, each member's removal in force, the last self-removal and the
// last ViewsKept views are what reading every event ever reported gives
// (eventtest's model, which reliable's TestStatsEventsBoundedUnderChurn
// holds a runtime's Stats to as well).
func TestStepperEventLog(t *testing.T) {
	for _, n := range []int{0, 10, core.EventTail, core.EventTail + 1, 10_000} {
		s, all := core.Churn(n)

		tail := all[max(0, len(all)-core.EventTail):]
		if got := s.Events(); !slices.EqualFunc(got, tail, core.SameEvent) || s.EventsDropped() != uint64(len(all)-len(tail)) {
			t.Errorf("%d events: Events lists %d, %d dropped; want the last %d, %d dropped", n, len(got), s.EventsDropped(), len(tail), len(all)-len(tail))
		}
		m := eventtest.Replay(all, func(ev core.Event) (core.EventKind, frame.MemberID, bool) { return ev.Kind, ev.Member, ev.View != nil })
		if got := s.EventCounts(); got != m.Counts || got.Total() != uint64(n) {
			t.Errorf("%d events: counts %v (total %d), want %v", n, got, got.Total(), m.Counts)
		}
		rs := s.Removals()
		if len(rs) != len(m.Removed) || !slices.IsSortedFunc(rs, func(a, b core.Event) int { return int(a.Member) - int(b.Member) }) {
			t.Errorf("%d events: removals %v, want %d by member", n, rs, len(m.Removed))
		}
		for _, r := range rs {
			if !core.SameEvent(r, m.Removed[r.Member]) {
				t.Errorf("%d events: member %d's removal %v, want %v", n, r.Member, r, m.Removed[r.Member])
			}
		}
		if ev, ok := s.Removed(); ok != (m.Self != nil) || ok && !core.SameEvent(ev, *m.Self) {
			t.Errorf("%d events: Removed() = %v, %v; want %v", n, ev, ok, m.Self)
		}
		if got, want := s.RecentViews(), m.Views[max(0, len(m.Views)-core.ViewsKept):]; !slices.EqualFunc(got, want, core.SameEvent) {
			t.Errorf("%d events: recent views %v, want %v", n, got, want)
		}
	}
}
