package dsm_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/rbcast/rbcast/dsm"
	"github.com/rbcast/rbcast/dsm/dsmsim"
	"github.com/rbcast/rbcast/internal/seeds"
	"github.com/rbcast/rbcast/reliable"
	"github.com/rbcast/rbcast/testnet"
)

// WC's hold on the global channel of a group with Views (the view layer
// keeps the hold across its changes: reliable/view/hold.go; docs/dsm.md,
// "Holding under Views"). Before, the node copied a peer's messages
// there without bound.

// A held sender on the global channel that dies while held, under
// Views: TestChannelsHeldSenderCrashesGlobal's program (rank 0 fills its
// window while ranks 1 and 2 hold it, then crashes), the crash removed
// by a view change. The change delivers, at both survivors, rank 0's
// messages up to the commit's cut (the freeze releases the inner core's
// hold), so they read the same memory, a prefix of its writes.
func TestChannelsHeldSenderCrashesViews(t *testing.T) {
	n := uint64(seeds.Count(t, axiomSeeds*4, axiomSeeds*4))
	var held uint64
	for seed := range n {
		res, mem := wcSim{seed: seed, in: lossy, views: true, channels: true, copies: -1}.crash(t, 50*time.Millisecond)
		held += res.checkCrash(t, mem, false)
		for r := 1; r < crashMembers; r++ {
			if bound := uint64(2 * wcWindow * testnet.DefaultMTU); res.Stats[r].HeldPeak > bound {
				t.Errorf("seed %d: rank %d copied up to %d B for WC, want at most two windows (%d B)", seed, r, res.Stats[r].HeldPeak, bound)
			}
		}
	}
	if held == 0 {
		t.Fatal("no survivor held a frame: WC never held in the global window under Views")
	}
	t.Logf("%d frames held by WC holds on the global channel over %d seeds", held, n)
}

// A view change while rank 1 holds rank 0 on the global channel: the
// wcProgram of TestChannelsWCHoldsGlobalInWindow under Views, and a
// process starting late (30 ms after the members' nodes), whose
// admission installs a new view in the middle of the hold. The late
// process is refused; rank 1 reads rank 0's writes byte for byte; the
// hold goes on in the new view (the change lets through at most what
// rank 0 had in flight, a window: 44 KB of its 90 KB here), and the run
// ends at rank 1's crossing, not at the hold's bound.
func TestChannelsWCHoldsGlobalViewChange(t *testing.T) {
	for _, in := range []testnet.Impairment{{}, lossy} {
		var lateErr error
		w := wcSim{seed: 1, in: in, views: true, channels: true, copies: -1, lateAt: 30 * time.Millisecond,
			late: func(n *dsm.Node) error {
				lateErr = n.Barrier(context.Background(), 99)
				n.Exit()
				return nil
			}}
		res := w.hold(t, 100*time.Millisecond)
		if !errors.Is(lateErr, dsm.ErrLateJoin) {
			t.Errorf("loss %v: the late process's barrier returned %v, want ErrLateJoin", in.Loss, lateErr)
		}
		slow, fast := res.Stats[1], res.Stats[0]
		views := 0
		for _, ev := range slow.Group.Events {
			if ev.Kind == reliable.ViewInstalled {
				views++
			}
		}
		t.Logf("loss %v: rank 1 installed %d views, copied %d messages (peak %d B), held %d frames; rank 0 sent %d update messages, %d frames, retransmitted %d; %v virtual",
			in.Loss, views, slow.Held, slow.HeldPeak, slow.Group.HeldData, fast.Updates, fast.Group.Protocol.Sent, fast.Group.Protocol.Retransmitted, res.Elapsed)
		if views < 2 {
			t.Errorf("loss %v: rank 1 installed %d views: the late process caused no view change", in.Loss, views)
		}
		if slow.Group.HeldData == 0 {
			t.Errorf("loss %v: rank 1's global group held no frame", in.Loss)
		}
		// WCCopies -1 copies nothing before the hold; the change lets
		// through what rank 0 had in flight, at most a window. (Without
		// the hold in the new view's inner core: all 90 KB.)
		if bound := uint64(wcWindow * testnet.DefaultMTU); slow.HeldPeak > bound {
			t.Errorf("loss %v: rank 1 copied up to %d B for WC, want at most a window (%d B): the hold did not go on after the change", in.Loss, slow.HeldPeak, bound)
		}
		// The founding listens 1 s (TestChannelsWCHoldsGlobalInWindow).
		if limit := time.Second + 150*time.Millisecond; res.Elapsed > limit {
			t.Errorf("loss %v: the run took %v, want at most %v: the hold was not released at the crossing", in.Loss, res.Elapsed, limit)
		}
	}
}

// TestChannelsAxiomsHeldInWindow's programs over a global group with
// Views, where the segment every member joined travels on the global
// channel and WC holds there too: axioms 2.2, 2.3, 2.6 and 2.7 at 5 %
// loss, with frames held in the global group's windows. RBCAST_SEEDS
// sets the number of seeds (4 by default).
func TestChannelsAxiomsHeldInWindowViews(t *testing.T) {
	cfg := dsm.Config{Channels: true, WCCopies: -1}
	for _, tc := range []struct {
		name  string
		run   func(seed uint64, h *history) (dsmsim.Result, error)
		check func(h *history) error
	}{
		{"total barriers", func(seed uint64, h *history) (dsmsim.Result, error) {
			return dsmsim.Run(dsmsim.Config{Members: 4, Seed: seed, In: lossy, Views: true, Node: cfg, Trace: h.record}, chanProgram(chanSegs, 4))
		}, func(h *history) error { return checkChannelAxioms(h, chanSegs) }},
		{"partial barriers", func(seed uint64, h *history) (dsmsim.Result, error) {
			return dsmsim.Run(dsmsim.Config{Members: 4, Seed: seed, In: lossy, Views: true, Node: cfg, Trace: h.record}, partialProgram(chanSegs, 9))
		}, func(h *history) error { return checkPartialAxioms(h, chanSegs, 9) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var held uint64
			for seed := range uint64(seeds.Count(t, axiomSeeds, axiomSeeds)) {
				h := newHistory(4)
				res, err := tc.run(seed, h)
				if err != nil {
					t.Fatalf("seed %d: %v", seed, err)
				}
				if err := tc.check(h); err != nil {
					t.Fatalf("seed %d: %v", seed, err)
				}
				for _, st := range res.Stats {
					held += st.Group.HeldData
				}
			}
			if held == 0 {
				t.Fatal("no global group held a frame: WC never held in the global window under Views")
			}
			t.Logf("%d frames held by WC holds on the global channel", held)
		})
	}
}
