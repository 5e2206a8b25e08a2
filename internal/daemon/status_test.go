package daemon

import (
	"testing"
	"time"

	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/reliable"
)

// A member shown dead always carries a reason: the removal's event kind,
// or, before any event (total order only), what Members' liveness means
// then; a readmission forgets the removal, and a SequencerFailed is no
// removal (a follower that hears its sequencer again follows it on
// without an event).
func TestDeadReason(t *testing.T) {
	t0 := time.Date(2026, 11, 27, 0, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	events := []reliable.Event{
		{Kind: reliable.MemberFailed, Member: 2, At: at(1)},
		{Kind: reliable.MemberStalled, Member: 3, At: at(2)},
		{Kind: reliable.MemberLeft, Member: 4, At: at(3)},
		{Kind: reliable.SequencerFailed, Member: 5, At: at(4)},
		{Kind: reliable.MemberFailed, Member: 6, At: at(5)},
		{Kind: reliable.MemberReturned, Member: 6, At: at(6)},
		{Kind: reliable.SequencerChanged, Member: 7, At: at(7)},
	}
	why, died := removals(events)
	for _, c := range []struct {
		m    reliable.MemberStatus
		want string
		at   time.Time
	}{
		{reliable.MemberStatus{ID: 2}, "failed", at(1)},
		{reliable.MemberStatus{ID: 3}, "stalled", at(2)},
		{reliable.MemberStatus{ID: 4}, "left", at(3)},
		{reliable.MemberStatus{ID: 5, Sequencer: true}, reasonSequencerSilent, time.Time{}}, // suspected, heard again, then left
		{reliable.MemberStatus{ID: 6}, reasonLeaving, time.Time{}},                          // returned, then gone without an event yet
		{reliable.MemberStatus{ID: 7}, reasonLeaving, time.Time{}},                          // SequencerChanged is no removal
		{reliable.MemberStatus{ID: 8, Sequencer: true}, reasonSequencerSilent, time.Time{}},
	} {
		if got := deadReason(why, c.m); got != c.want {
			t.Errorf("member %d: reason %q, want %q", c.m.ID, got, c.want)
		}
		if got := died[c.m.ID]; !got.Equal(c.at) {
			t.Errorf("member %d: died at %v, want %v", c.m.ID, got, c.at)
		}
	}
	if _, ok := why[frame.MemberID(6)]; ok {
		t.Error("member 6 returned, but its removal is still listed")
	}
	if got := selfReason(events); got != "left" {
		t.Errorf("self: reason %q, want left", got)
	}
	if got := selfReason(append(events, reliable.Event{Kind: reliable.SelfRemoved, Member: 1, At: at(8)})); got != "self removed" {
		t.Errorf("self after SelfRemoved: reason %q, want self removed", got)
	}
}
