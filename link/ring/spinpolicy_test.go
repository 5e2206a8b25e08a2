package ring

import (
	"testing"
	"time"
)

// The waits a spinPolicy is fed, in virtual time, and the spins it chooses.
func TestSpinPolicy(t *testing.T) {
	const top = DefaultRxSpin
	hit := func(p *spinPolicy) { p.Waited(true, top/4) }
	late := func(p *spinPolicy) { p.Waited(true, 3*top) } // a frame, after top
	empty := func(p *spinPolicy) { p.Waited(false, 5*top) }
	wake := func(p *spinPolicy) { p.Waited(false, top/10) }
	feed := func(p *spinPolicy, n int, wait func(*spinPolicy)) []time.Duration {
		var spins []time.Duration
		for range n {
			wait(p)
			spins = append(spins, p.Spin())
		}
		return spins
	}

	t.Run("starts full, and hits keep it", func(t *testing.T) {
		p := newSpinPolicy(top)
		if got := p.Spin(); got != top {
			t.Fatalf("a new policy spins %v, want %v", got, top)
		}
		for i, s := range feed(&p, 1000, hit) {
			if s != top {
				t.Fatalf("after %d hits: spin %v, want %v", i+1, s, top)
			}
		}
		// A frame exactly at top is still one a full spin catches.
		p.Waited(true, top)
		if got := p.Spin(); got != top {
			t.Fatalf("after a frame at top: %v", got)
		}
	})

	t.Run("misses shorten it to none", func(t *testing.T) {
		p := newSpinPolicy(top)
		spins := feed(&p, 12, late)
		for i := 1; i < len(spins); i++ {
			if spins[i] > spins[i-1] {
				t.Fatalf("spins grew on a miss: %v", spins)
			}
		}
		if spins[4] != top || spins[5] >= top || spins[5] == 0 {
			t.Errorf("5 misses should keep the full spin, the 6th shorten it: %v", spins)
		}
		if spins[9] == 0 || spins[10] != 0 {
			t.Errorf("11 misses in a row, not 10, should stop the spin: %v", spins)
		}
		// Waits that end empty after top are misses too.
		q := newSpinPolicy(top)
		if got := feed(&q, 11, empty)[10]; got != 0 {
			t.Errorf("11 empty waits longer than top: spin %v, want 0", got)
		}
	})

	t.Run("hits bring it back", func(t *testing.T) {
		p := newSpinPolicy(top)
		feed(&p, 100, late)
		if got := p.Spin(); got != 0 {
			t.Fatalf("after 100 misses: spin %v", got)
		}
		spins := feed(&p, 20, hit)
		n := 0
		for n < len(spins) && spins[n] != top {
			n++
		}
		if n == len(spins) || n > 5 {
			t.Fatalf("hits after 100 misses: %v, want the full spin within 6", spins)
		}
		if spins[0] != 0 {
			t.Errorf("one hit after 100 misses already spins: %v", spins)
		}
	})

	t.Run("waits that end early say nothing", func(t *testing.T) {
		p := newSpinPolicy(top)
		feed(&p, 1000, wake)
		if got := p.Spin(); got != top {
			t.Fatalf("1000 Wakes before top: spin %v, want %v", got, top)
		}
		feed(&p, 100, late)
		feed(&p, 1000, wake)
		if got := p.Spin(); got != 0 {
			t.Fatalf("1000 Wakes after 100 misses: spin %v, want 0", got)
		}
	})

	t.Run("misses dominate: none; hits dominate: full", func(t *testing.T) {
		for _, c := range []struct {
			hits, misses int // per round
			want         string
		}{
			{1, 5, "none"}, {1, 8, "none"}, {1, 2, "short"}, {1, 1, "some"},
			{2, 1, "full"}, {9, 1, "full"}, {1, 0, "full"},
		} {
			p := newSpinPolicy(top)
			var lo, hi time.Duration = top, 0
			for round := range 200 {
				for i := range c.hits + c.misses {
					if i < c.hits {
						hit(&p)
					} else {
						late(&p)
					}
					if round >= 100 { // settled
						lo, hi = min(lo, p.Spin()), max(hi, p.Spin())
					}
				}
			}
			switch {
			case c.want == "none" && hi != 0:
				t.Errorf("%d hits to %d misses: spins up to %v, want none", c.hits, c.misses, hi)
			case c.want == "short" && (hi > top*3/4 || lo == 0):
				t.Errorf("%d hits to %d misses: spins %v to %v, want some, at most %v", c.hits, c.misses, lo, hi, top*3/4)
			case c.want == "some" && lo == 0:
				t.Errorf("%d hits to %d misses: spins down to none", c.hits, c.misses)
			case c.want == "full" && lo != top:
				t.Errorf("%d hits to %d misses: spins down to %v, want always %v", c.hits, c.misses, lo, top)
			}
		}
	})

	t.Run("between, the spin grows with the share of hits", func(t *testing.T) {
		var prev time.Duration
		for share := int32(0); share <= spinScale; share += 16 {
			p := spinPolicy{max: top, share: share}
			s := p.Spin()
			if s < prev || s < 0 || s > top {
				t.Fatalf("share %d/%d: spin %v after %v", share, spinScale, s, prev)
			}
			prev = s
		}
	})
}
