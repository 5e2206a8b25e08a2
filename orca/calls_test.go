package orca

import (
	"math/rand/v2"
	"testing"
)

// The call table against a map: calls started in sequence and finished
// mostly in order, some waiting long (guarded writes) and, in some seeds,
// more calls in flight than the ring has slots; every get and the set of
// calls the same as the map's, whether a call went to its slot or to the
// overflow map.
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
		most := 400
		if seed%4 == 1 {
			most = callRing + 300 // more than the ring holds
		}
		overflowed := 0
		for step := range 20000 {
			if len(live) < most && rng.IntN(3) > 0 {
				next++
				c := &call{req: next}
				if !tab.tryPut(c) {
					tab.putLocked(c)
					overflowed++
				}
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
				c := want[req]
				if rng.IntN(2) == 0 || !tab.tryRemove(c) {
					tab.remove(c)
				}
				delete(want, req)
				if tab.get(req) != nil {
					t.Fatalf("seed %d step %d: request %d found after its removal", seed, step, req)
				}
			}
			for _, req := range []uint32{next, next - 1, next - 300, next + 1, next - callRing} {
				if got := tab.get(req); got != want[req] {
					t.Fatalf("seed %d step %d: get(%d) = %v, want %v", seed, step, req, got, want[req])
				}
			}
			if step%100 == 0 && tab.size() != len(want) {
				t.Fatalf("seed %d step %d: %d calls in the table, want %d", seed, step, tab.size(), len(want))
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
		if seed%4 == 1 && overflowed == 0 {
			t.Errorf("seed %d: up to %d calls in flight, none in the overflow map", seed, most)
		}
	}
}
