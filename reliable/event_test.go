package reliable

import (
	"strings"
	"testing"
	"time"

	"github.com/rbcast/rbcast/reliable/pbp"
	"github.com/rbcast/rbcast/reliable/seq"
)

// TestEventKindsMapped: every event kind of the two cores has a distinct
// public kind, so a kind added to a core but not to fifoEvent/totalEvent
// (which would report EventKind(0)) fails here.
func TestEventKindsMapped(t *testing.T) {
	check := func(core string, n int, public func(k uint8) EventKind) {
		t.Helper()
		seen := map[EventKind]uint8{}
		for k := uint8(1); k <= uint8(n); k++ {
			p := public(k)
			if strings.HasPrefix(p.String(), "EventKind(") {
				t.Errorf("%s kind %d maps to unnamed public kind %v", core, k, p)
			}
			if prev, ok := seen[p]; ok {
				t.Errorf("%s kinds %d and %d both map to %v", core, prev, k, p)
			}
			seen[p] = k
		}
	}
	var now time.Time
	// Count each core's kinds by their String: the first unnamed one ends them.
	count := func(name func(k uint8) string) int {
		n := 0
		for !strings.HasPrefix(name(uint8(n+1)), "EventKind(") {
			n++
		}
		return n
	}
	nf := count(func(k uint8) string { return pbp.EventKind(k).String() })
	nt := count(func(k uint8) string { return seq.EventKind(k).String() })
	if nf != 4 || nt != 7 {
		t.Errorf("cores have %d FIFO and %d Total event kinds, want 4 and 7 (update this test and event.go together)", nf, nt)
	}
	check("pbp", nf, func(k uint8) EventKind { return fifoEvent(pbp.Event{Kind: pbp.EventKind(k)}, now).Kind })
	check("seq", nt, func(k uint8) EventKind { return totalEvent(seq.Event{Kind: seq.EventKind(k)}, now).Kind })
}
