package pbp

import (
	"testing"
	"time"

	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/reliable/internal/simtest"
	"github.com/rbcast/rbcast/testnet"
)

// unicastRun runs seed's group of members at 5 % loss with duplication
// and reordering, with Unicast set or not, and returns its Nacks and how
// many frames the members sent to broadcast and to one MAC.
func unicastRun(t *testing.T, seed uint64, members int, unicast bool) (nacks uint64, toGroup, toOne int) {
	t.Helper()
	s := scenario{seed: seed, mode: PBP2, members: members, k: 2000, crash: -1, leaver: -1, unicast: unicast,
		link: simtest.Link{MTU: 1500}}
	s.link.In.Loss, s.link.In.Duplicate = 0.05, 0.01
	s.link.In.Reorder, s.link.In.ReorderDelay = 0.01, 100*time.Microsecond
	r := runScenario(t, s, func(e testnet.Event) {
		if e.Kind != testnet.EventSend {
			return
		}
		if [6]byte(e.Frame[:6]) == frame.Broadcast {
			toGroup++
		} else {
			toOne++
		}
	})
	if err := r.verdict(); err != nil {
		t.Fatalf("%v: %v", s, err)
	}
	for _, m := range r.Members {
		nacks += m.Core.Counters().NacksSent
	}
	return nacks, toGroup, toOne
}

// TestSimUnicastPair: a group of two with Unicast sends no frame to
// broadcast (each goes to the peer's MAC), delivers everything in order
// at 5 % loss (the harness checks every delivery), and asks for repairs
// as often as the same seed broadcasting: a Data frame to our MAC is no
// repair, so no Nack storm (recv.go, repairToUs).
func TestSimUnicastPair(t *testing.T) {
	for seed := uint64(1); seed <= 6; seed++ {
		bn, bGroup, _ := unicastRun(t, seed, 2, false)
		un, uGroup, uOne := unicastRun(t, seed, 2, true)
		if uGroup != 0 || bGroup == 0 {
			t.Errorf("seed %d: %d frames to broadcast with Unicast (want 0, %d to the peer), %d without", seed, uGroup, uOne, bGroup)
		}
		if un == 0 || un > bn+bn/10+5 {
			t.Errorf("seed %d: %d Nacks with Unicast, %d broadcasting (5 %% loss: want some, and no more than broadcasting's)", seed, un, bn)
		}
	}
}

// TestUnicastThreeBroadcast: Unicast does nothing in a group of three.
func TestUnicastThreeBroadcast(t *testing.T) {
	_, group, one := unicastRun(t, 3, 3, true)
	_, group0, one0 := unicastRun(t, 3, 3, false)
	if group != group0 || one != one0 || group == 0 {
		t.Errorf("a group of three with Unicast sent %d frames to broadcast and %d to one MAC, without %d and %d", group, one, group0, one0)
	}
}
