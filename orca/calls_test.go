package orca

import (
	"math/rand/v2"
	"testing"
)

// The call table against a map: calls started in sequence and finished
// mostly in order, some waiting long (guarded writes), every get and the
// set of calls the same as the map's; the ring stays within twice the
// calls in flight.
func TestCallTable(t *testing.T) {
	for seed := range uint64(20) {
		rng := rand.New(rand.NewPCG(seed, 1))
		var tab callTable
		want := map[uint32]*call{}
		var live []uint32 // in start order
		next := uint32(rng.IntN(1 << 20))
		if seed == 0 {
			next = ^uint32(0) - 300 // request numbers wrap
		}
		maxLive := 0
		for step := range 20000 {
			if len(live) < 400 && rng.IntN(3) > 0 {
				next++
				c := &call{req: next}
				tab.put(c)
				want[next] = c
				live = append(live, next)
			} else if len(live) > 0 {
				// The oldest usually; now and then another; the first
				// few, long waiters, rarely.
				i := 0
				switch r := rng.IntN(100); {
				case r < 10:
					i = rng.IntN(len(live))
				case r < 99 && len(live) > 3:
					i = 3
				}
				req := live[i]
				live = append(live[:i], live[i+1:]...)
				tab.remove(req)
				delete(want, req)
				if tab.get(req) != nil {
					t.Fatalf("seed %d step %d: request %d found after its removal", seed, step, req)
				}
			}
			maxLive = max(maxLive, len(live))
			for _, req := range []uint32{next, next - 1, next - 300, next + 1} {
				if got := tab.get(req); got != want[req] {
					t.Fatalf("seed %d step %d: get(%d) = %v, want %v", seed, step, req, got, want[req])
				}
			}
			if tab.count != len(want) {
				t.Fatalf("seed %d step %d: count %d, want %d", seed, step, tab.count, len(want))
			}
		}
		seen := 0
		tab.all(func(c *call) {
			seen++
			if want[c.req] != c {
				t.Fatalf("seed %d: all gave request %d, not in flight", seed, c.req)
			}
		})
		if seen != len(want) {
			t.Fatalf("seed %d: all gave %d calls, want %d", seed, seen, len(want))
		}
		if len(tab.ring) > max(2*maxLive, minCallRing)*2 {
			t.Errorf("seed %d: ring of %d slots for at most %d calls in flight", seed, len(tab.ring), maxLive)
		}
	}
}
