package dsm_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/rbcast/rbcast/dsm"
	"github.com/rbcast/rbcast/dsm/dsmsim"
	"github.com/rbcast/rbcast/internal/seeds"
)

const (
	randMembers = 4
	randRounds  = 6
	randLocks   = 2
	randData    = 1024
)

// randRun is what a randLockProgram run shares between its members
// (dsmsim runs one at a time): the barriers each program crossed, who is
// inside each lock's critical section, and the lock waits.
type randRun struct {
	maxCompute time.Duration
	crossed    [randMembers]int
	inside     [randLocks]int // rank+1 inside, 0 none
	slowWait   time.Duration  // longest Lock of a requester no member was behind
	aheadWait  time.Duration  // longest Lock of a requester some member was behind
	sections   int
}

// randLockProgram: rounds of a random mix, the same kind of barrier for
// every rank and random timing: compute, maybe a burst of writes, a
// barrier (partial with a random count, or total), then up to two
// critical sections of a random lock (of two), each with maybe a burst
// of writes and a short computation inside.
func randLockProgram(seed uint64, run *randRun) func(*dsm.Node) error {
	return func(n *dsm.Node) error {
		ctx := context.Background()
		s, err := attach(n, wcKey, randData, 8)
		if err != nil {
			return err
		}
		if err := n.Barrier(ctx, 99); err != nil {
			return err
		}
		me := n.Rank()
		own := rand.New(rand.NewPCG(seed, uint64(me)+1))
		burst := func(round int) error {
			for loc := range own.IntN(randData) {
				if err := s.Write(loc, wcValue(round, me)); err != nil {
					return err
				}
			}
			return nil
		}
		for round := range randRounds {
			shared := rand.New(rand.NewPCG(seed, 1000+uint64(round)))
			procs := 1 + shared.IntN(randMembers)
			if err := dsmsim.Compute(n, time.Duration(own.Int64N(int64(run.maxCompute)))); err != nil {
				return err
			}
			if own.IntN(2) == 0 {
				if err := burst(round); err != nil {
					return err
				}
			}
			if procs == randMembers {
				if err := n.Barrier(ctx, round); err != nil {
					return err
				}
			} else if _, err := n.PartialBarrier(ctx, round, procs); err != nil {
				return err
			}
			run.crossed[me] = round + 1
			for range own.IntN(3) {
				id := own.IntN(randLocks)
				slowest := true
				for r, c := range run.crossed {
					if r != me && c < run.crossed[me] {
						slowest = false
					}
				}
				start := dsmsim.Elapsed(n)
				if err := n.Lock(ctx, id); err != nil {
					return err
				}
				wait := dsmsim.Elapsed(n) - start
				if slowest {
					run.slowWait = max(run.slowWait, wait)
				} else {
					run.aheadWait = max(run.aheadWait, wait)
				}
				if in := run.inside[id]; in != 0 {
					return fmt.Errorf("round %d: granted lock %d while rank %d holds it", round, id, in-1)
				}
				run.inside[id] = me + 1
				run.sections++
				if own.IntN(3) == 0 {
					if err := burst(round); err != nil {
						return err
					}
				}
				if own.IntN(3) == 0 {
					if err := dsmsim.Compute(n, time.Duration(own.IntN(3000))*time.Microsecond); err != nil {
						return err
					}
				}
				run.inside[id] = 0
				if err := n.Unlock(id); err != nil {
					return err
				}
			}
		}
		return n.Barrier(ctx, 500)
	}
}

// Seeded random programs of locks, partial and total barriers and writes
// over one group at 5 % loss, every WC hold at once (WCCopies -1, a
// window of 8): no run deadlocks or fails, no lock is granted to two
// members at once, and a request made by a member no other member is
// behind (a member nobody holds: docs/dsm.md, "Why Ricart–Agrawala stays
// live under holds") never waits 200 ms, in rows whose rounds compute
// up to 20, 200 and 700 ms (holds that reach their bound, 500 ms). A
// member ahead whose lane datagram to a holder is lost waits for its
// holders' crossings or the bound ("The lock lane"): only logged, with
// the lane's counts (700 ms row, 400 seeds: 61 seeds over 200 ms, 365
// before the lane). RBCAST_SEEDS sets the number of seeds
// (4 by default; 3000 passed the first two rows and 1000 the third on
// 2026-12-01). With lockNeeds asking only about Self's request (a peer's
// request never releasing a hold), 6 of the first 100 seeds of the 700
// ms row fail, waiting up to 500 ms.
func TestOneGroupRandomLocksHeld(t *testing.T) {
	n := seeds.Count(t, 4, 2)
	for _, maxCompute := range []time.Duration{20 * time.Millisecond, 200 * time.Millisecond, 700 * time.Millisecond} {
		var slow, ahead time.Duration
		var held, lane, dups uint64
		var sections, over int
		for seed := range uint64(n) {
			run := &randRun{maxCompute: maxCompute}
			w := wcSim{members: randMembers, seed: seed, in: lossy, copies: -1, window: 8, what: "random locks and barriers"}
			res := w.run(t, randLockProgram(seed, run))
			for _, st := range res.Stats {
				held += st.Group.HeldData
				lane, dups = lane+st.LaneRequests, dups+st.LaneDuplicates
			}
			sections += run.sections
			slow, ahead = max(slow, run.slowWait), max(ahead, run.aheadWait)
			if run.slowWait > 200*time.Millisecond {
				t.Errorf("compute up to %v, seed %d: a Lock of a member nobody was behind took %v", maxCompute, seed, run.slowWait)
			}
			if run.aheadWait > 200*time.Millisecond {
				over++
			}
			if run.aheadWait > 520*time.Millisecond {
				t.Logf("compute up to %v, seed %d: a Lock of a member ahead took %v", maxCompute, seed, run.aheadWait)
			}
		}
		t.Logf("compute up to %v, %d seeds: %d critical sections, %d frames held, %d lane requests (%d duplicates dropped); longest Lock %v (requester nobody behind), %v (requester ahead of someone; %d seeds over 200 ms)",
			maxCompute, n, sections, held, lane, dups, slow, ahead, over)
	}
}
