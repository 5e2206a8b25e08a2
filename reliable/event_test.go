package reliable

import (
	"strings"
	"testing"
	"time"

	"github.com/rbcast/rbcast/reliable/clock/wall"
	"github.com/rbcast/rbcast/reliable/core"
)

// TestEventKindsNamed: every event kind has a distinct name (the cores
// share one kind type, so a kind added without a name shows here).
func TestEventKindsNamed(t *testing.T) {
	seen := map[string]EventKind{}
	n := 0
	for k := EventKind(1); !strings.HasPrefix(k.String(), "EventKind("); k++ {
		if prev, ok := seen[k.String()]; ok {
			t.Errorf("kinds %d and %d are both named %q", prev, k, k.String())
		}
		seen[k.String()] = k
		n++
	}
	if n != int(GroupRemoved) {
		t.Errorf("%d named kinds, want %d (GroupRemoved is the last)", n, GroupRemoved)
	}
}

// TestEventOf: a core's event keeps every field and moves to the wall
// clock.
func TestEventOf(t *testing.T) {
	epoch := time.Date(2026, 11, 27, 0, 0, 0, 0, time.UTC)
	c := wall.Clock{Epoch: epoch}
	ev := core.Event{Kind: MemberStalled, Member: 3, At: c.Core(epoch.Add(5 * time.Millisecond)), Delivered: 7, Discarded: 2,
		Epoch: 0, Reason: StalledNoAcks}
	got := eventOf(ev, c)
	want := Event{Kind: MemberStalled, Member: 3, At: epoch.Add(5 * time.Millisecond), Delivered: 7, Discarded: 2, Reason: StalledNoAcks}
	if got != want {
		t.Fatalf("eventOf = %+v, want %+v", got, want)
	}
	if s := got.String(); s != "member 3 stalled (delivered up to seq 7, 2 discarded): "+StalledNoAcks {
		t.Errorf("String() = %q", s)
	}
	ev = core.Event{Kind: SequencerChanged, Member: 1, Epoch: 4, Last: 99}
	if s := eventOf(ev, c).String(); s != "member 1 sequencer changed (epoch 4, last global 99)" {
		t.Errorf("String() = %q", s)
	}
}
