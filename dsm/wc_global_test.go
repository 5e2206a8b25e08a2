package dsm_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/rbcast/rbcast/dsm"
	"github.com/rbcast/rbcast/dsm/dsmsim"
	"github.com/rbcast/rbcast/reliable"
	"github.com/rbcast/rbcast/testnet"
)

// WC over one group (docs/dsm.md, "How much WC copies"): the updates
// travel on the global channel, so a peer a partial barrier ahead that
// writes a whole phase there was copied without bound. Now, past
// Config.WCCopies, its frames wait in the global group's window as on a
// segment channel, unless lock traffic needs what is behind them.

// A peer crosses partial barrier 1 alone and writes 4096 messages
// (90 KB) while the other computes 100 ms: what the slow member keeps is
// at most WCCopies and a window, and it reads every value.
func TestOneGroupWCHoldsInWindow(t *testing.T) {
	for _, tc := range []struct {
		name   string
		in     testnet.Impairment
		copies int
	}{
		{"at once", testnet.Impairment{}, -1},
		{"at once lossy", lossy, -1},
		{"copies first lossy", lossy, 16 << 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := dsmsim.Config{Members: 2, Seed: 1, In: tc.in, Node: dsm.Config{Unbuffered: true, WCCopies: tc.copies,
				Group: reliable.Config{Window: wcWindow}}}
			res, err := dsmsim.Run(cfg, wcProgram(100*time.Millisecond))
			if err != nil {
				t.Fatal(err)
			}
			slow, fast := res.Stats[1], res.Stats[0]
			t.Logf("rank 0 sent %d update messages (%d B); rank 1 copied %d (peak %d B), held %d frames; rank 0 retransmitted %d; %v virtual",
				fast.Updates, fast.UpdateBytes, slow.Held, slow.HeldPeak, slow.Group.HeldData, fast.Group.Protocol.Retransmitted, res.Elapsed)
			if slow.Group.HeldData == 0 {
				t.Errorf("rank 1's global group held no frame: the hold never took effect")
			}
			if bound := uint64(max(tc.copies, 0) + wcWindow*testnet.DefaultMTU); slow.HeldPeak > bound {
				t.Errorf("rank 1 copied up to %d B for WC of rank 0's %d B, want at most WCCopies (%d B) and a window (%d frames of %d B): %d B",
					slow.HeldPeak, fast.UpdateBytes, max(tc.copies, 0), wcWindow, testnet.DefaultMTU, bound)
			}
			if tc.copies < 0 && slow.HeldPeak >= fast.UpdateBytes/4 {
				t.Errorf("rank 1 copied up to %d B of rank 0's %d B: the hold did not bound it", slow.HeldPeak, fast.UpdateBytes)
			}
			if tc.copies > 0 && slow.HeldPeak < uint64(tc.copies) {
				t.Errorf("rank 1 copied up to %d B, want at least WCCopies (%d B) before the window holds", slow.HeldPeak, tc.copies)
			}
			if limit := 120 * time.Millisecond; res.Elapsed > limit {
				t.Errorf("the run took %v, want at most %v: the hold was not released at the crossing", res.Elapsed, limit)
			}
		})
	}
}

// aheadLockProgram: in every round rank 0 crosses a partial barrier
// alone and writes far more than a window of its lanes, while the others
// compute, take a lock (with a counter under it) and cross the barrier
// (held in the window until they need a lock reply or see a request);
// a total barrier ends the round, after which every lane holds rank 0's
// value of the round. Rank 0 takes the lock too, a partial barrier ahead.
// Without simulate (a live run) the others write as much as rank 0 to
// a segment of their own instead of computing.
func aheadLockProgram(rounds int, seed uint64, simulate bool) func(*dsm.Node) error {
	return func(n *dsm.Node) error {
		ctx := context.Background()
		s, err := attach(n, wcKey, 1+wcLocs, 8)
		if err != nil {
			return err
		}
		busy, err := attach(n, wcKey+1, wcLocs/4, 8)
		if err != nil {
			return err
		}
		if err := n.Barrier(ctx, 99); err != nil {
			return err
		}
		rng := rand.New(rand.NewPCG(uint64(n.Rank()), seed))
		buf := make([]byte, 8)
		for round := range rounds {
			if n.Rank() != 0 && simulate {
				if err := dsmsim.Compute(n, time.Duration(5000+rng.IntN(20000))*time.Microsecond); err != nil {
					return err
				}
			}
			if n.Rank() == n.Size()-1 && !simulate {
				for loc := range wcLocs / 4 {
					if err := busy.Write(loc, wcValue(round, loc)); err != nil {
						return err
					}
				}
			}
			if _, err := n.PartialBarrier(ctx, 2*round, 1); err != nil {
				return err
			}
			if n.Rank() == 0 {
				for loc := range wcLocs / 4 {
					if err := s.Write(1+loc, wcValue(round, loc)); err != nil {
						return err
					}
				}
			}
			if err := n.Lock(ctx, 0); err != nil {
				return err
			}
			if _, err := s.Read(0, buf); err != nil {
				return err
			}
			if err := s.Write(0, buf); err != nil {
				return err
			}
			if err := n.Unlock(0); err != nil {
				return err
			}
			if err := n.Barrier(ctx, 2*round+1); err != nil {
				return err
			}
			for loc := range wcLocs / 4 {
				got, err := s.Read(1+loc, buf)
				if err != nil {
					return err
				}
				if want := wcValue(round, loc); string(got) != string(want) {
					return fmt.Errorf("round %d: location %d is %x, want %x", round, 1+loc, got, want)
				}
			}
		}
		return nil
	}
}

// Over one group with every WC hold in the window at once (WCCopies
// -1), at 5 % loss, many seeds: a peer a partial barrier ahead writing
// more than a window, locks taken by the slow members (their request
// releases the holds: the held peer's reply is behind its writes) and by
// the peer ahead; barrier and update axioms (2.1–2.7, through the
// partial program's checker), lock axioms (2.8–2.11) and the reads.
func TestOneGroupAxiomsHeldInWindow(t *testing.T) {
	const heldSeeds, aheadRounds = 16, 6
	cfg := dsm.Config{WCCopies: -1, Group: reliable.Config{Window: wcWindow}}
	var held uint64
	count := func(res dsmsim.Result) {
		for _, st := range res.Stats {
			held += st.Group.HeldData
		}
	}
	for seed := range uint64(heldSeeds) {
		t.Run(fmt.Sprintf("seed %d", seed), func(t *testing.T) {
			// A peer ahead, locks, reads.
			res, err := dsmsim.Run(dsmsim.Config{Members: 3, Seed: seed, In: lossy, Node: cfg, Timeout: time.Minute}, aheadLockProgram(aheadRounds, seed, true))
			if err != nil {
				t.Fatalf("ahead with locks: %v", err)
			}
			// The rounds compute 5–25 ms each; a hold that kept a lock
			// reply until its bound (500 ms) would show.
			if limit := aheadRounds * 60 * time.Millisecond; res.Elapsed > limit {
				t.Errorf("ahead with locks took %v, want at most %v: a hold kept what a lock needed", res.Elapsed, limit)
			}
			var ahead uint64
			for _, st := range res.Stats[1:] {
				ahead += st.Group.HeldData
			}
			if ahead == 0 {
				t.Errorf("ahead with locks: no frame of the peer ahead was held in the window")
			}
			count(res)
			// Partial barriers: reads and axioms 2.4–2.7.
			h := newHistory(4)
			res, err = dsmsim.Run(dsmsim.Config{Members: 4, Seed: seed, In: lossy, Node: cfg, Trace: h.record, Timeout: time.Minute}, partialProgram(chanSegs, 9))
			if err != nil {
				t.Fatalf("partial barriers: %v", err)
			}
			if err := checkPartialAxioms(h, chanSegs, 9); err != nil {
				t.Fatalf("partial barriers: %v", err)
			}
			count(res)
			// Locks: axioms 2.8–2.11.
			h = newHistory(4)
			res, err = dsmsim.Run(dsmsim.Config{Members: 4, Seed: seed, In: lossy, Node: cfg, Trace: h.record, Timeout: time.Minute}, lockProgram(25, nil))
			if err != nil {
				t.Fatalf("locks: %v", err)
			}
			checkLockAxioms(t, seed, h, 4, 25)
			count(res)
		})
	}
	// The test is about holds: make sure there were some.
	if held == 0 {
		t.Fatal("no global group held a frame: WC never held in the window")
	}
	t.Logf("%d frames held by WC holds", held)
}

// A lock request seen ends the global channel's holds: ranks 0 and 1
// wait at barrier 1, so rank 1 holds rank 0 in the window at once
// (WCCopies -1); rank 2 takes and releases a lock 60 times before it
// arrives. Rank 0's replies fill its window of 8 frames, which rank 1
// does not acknowledge while it holds rank 0: rank 2 would then wait for
// rank 0's reply until the hold's bound (500 ms), and rank 1 for rank
// 2's arrival. Rank 1 sees rank 2's requests and releases the hold.
func TestOneGroupWCLockRequestReleases(t *testing.T) {
	const cycles = 60
	for seed := range uint64(4) {
		cfg := dsmsim.Config{Members: 3, Seed: seed, In: lossy, Timeout: time.Minute,
			Node: dsm.Config{WCCopies: -1, Group: reliable.Config{Window: 8}}}
		res, err := dsmsim.Run(cfg, func(n *dsm.Node) error {
			ctx := context.Background()
			s, err := attach(n, 1, 4, 8)
			if err != nil {
				return err
			}
			if err := n.Barrier(ctx, 99); err != nil {
				return err
			}
			if n.Rank() == 2 {
				buf := make([]byte, 8)
				for range cycles {
					if err := n.Lock(ctx, 0); err != nil {
						return err
					}
					if _, err := s.Read(0, buf); err != nil {
						return err
					}
					if err := n.Unlock(0); err != nil {
						return err
					}
					if err := dsmsim.Compute(n, 200*time.Microsecond); err != nil {
						return err
					}
				}
			}
			return n.Barrier(ctx, 1)
		})
		if err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		t.Logf("seed %d: %v virtual, rank 1 held %d frames of rank 0", seed, res.Elapsed, res.Stats[1].Group.HeldData)
		if limit := 200 * time.Millisecond; res.Elapsed > limit {
			t.Errorf("seed %d: the run took %v, want at most %v: rank 0's lock replies waited behind a hold", seed, res.Elapsed, limit)
		}
	}
}

// The peer-ahead program with locks over Join, one group, every WC hold
// in the window (reliable.Group.HoldFrom and ReleaseFrom on the global
// group, from deliveries and from Lock; live, with the race detector in
// CI's runs): the reads are rank 0's values.
func TestJoinOneGroupHeldInWindow(t *testing.T) {
	nodes := joinAll(t, 3, 5, dsm.Config{WCCopies: -1, Group: reliable.Config{Window: wcWindow}})
	runLive(t, nodes, aheadLockProgram(6, 5, false))
	var held uint64
	for r, n := range nodes {
		st := n.Stats()
		if st.BadMessages != 0 {
			t.Errorf("rank %d: %d bad messages", r, st.BadMessages)
		}
		held += st.Group.HeldData
	}
	t.Logf("%d frames held by WC holds", held)
}
