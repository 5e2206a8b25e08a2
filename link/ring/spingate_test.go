package ring

import (
	"testing"
	"time"
)

// TestSpinGate drives the spin's gate with the frames a receiver reads
// between waits, as Recv does, and checks when it lets Recv spin: a ping
// (one frame a wait) always spins; a stream (tens of frames between
// waits) stops spinning after its first burst and keeps sleeping; request
// and response traffic after the stream spins again within a bounded
// number of waits; deadlines and Wakes with nothing read (bursts of 0)
// never close the gate.
func TestSpinGate(t *testing.T) {
	// run feeds bursts (frames read between two waits; each burst may be
	// spread over Recvs of up to 4 frames) and returns the gate's answer
	// at every wait.
	run := func(g *spinGate, bursts ...int) []bool {
		var spins []bool
		for _, b := range bursts {
			for b > 0 {
				n := min(b, 4)
				g.received(n)
				b -= n
			}
			spins = append(spins, g.wait())
		}
		return spins
	}
	repeat := func(b, n int) []int {
		s := make([]int, n)
		for i := range s {
			s[i] = b
		}
		return s
	}
	count := func(s []bool) (n int) {
		for _, b := range s {
			if b {
				n++
			}
		}
		return n
	}

	var ping spinGate
	if got := run(&ping, repeat(1, 1000)...); count(got) != 1000 {
		t.Errorf("a ping-pong (1 frame a wait) spun at %d of 1000 waits, want all", count(got))
	}
	var idle spinGate
	if got := run(&idle, repeat(0, 100)...); count(got) != 100 {
		t.Errorf("waits that read nothing spun at %d of 100, want all", count(got))
	}
	// A few frames a wait (a barrier among a few processes) spins too.
	var barrier spinGate
	if got := run(&barrier, repeat(spinBurst-1, 1000)...); count(got) != 1000 {
		t.Errorf("bursts of %d frames spun at %d of 1000 waits, want all", spinBurst-1, count(got))
	}

	var stream spinGate
	got := run(&stream, repeat(40, 1000)...)
	if n := count(got[1:]); n != 0 {
		t.Errorf("a stream (40 frames a wait) spun at %d of its 999 waits after the first, want none", n)
	}
	// A stream's bursts longer than spinBurstCap count as spinBurstCap:
	// request/response traffic after it spins again as soon as after a
	// stream of spinBurstCap-frame bursts, however long its bursts were.
	var huge, capped spinGate
	run(&huge, repeat(100000, 100)...)
	run(&capped, repeat(spinBurstCap, 100)...)
	if huge != capped {
		t.Errorf("after bursts of 100000 frames the gate is %+v, after bursts of %d %+v: want the same", huge, spinBurstCap, capped)
	}
	after := run(&huge, repeat(1, 30)...)
	first := -1
	for i, s := range after {
		if s && first < 0 {
			first = i
		}
		if !s && first >= 0 {
			t.Fatalf("after a stream, pings spun at wait %d and then slept at %d: %v", first, i, after)
		}
	}
	if first < 0 || first > 20 {
		t.Errorf("after a stream, pings spun first at wait %d of 30 (-1: never), want within 20", first)
	}
	t.Logf("after a stream, pings spin from wait %d", first)

	// Steady bursts just over and under spinBurst.
	var over, under spinGate
	if got := run(&over, repeat(spinBurst+1, 200)...); count(got[50:]) != 0 {
		t.Errorf("bursts of %d frames spun at %d of 150 waits once settled, want none", spinBurst+1, count(got[50:]))
	}
	if got := run(&under, repeat(spinBurst, 200)...); count(got) != 200 {
		t.Errorf("bursts of %d frames spun at %d of 200 waits, want all", spinBurst, count(got))
	}
	// Negative counts (never passed by Recv) are ignored rather than wrapping.
	var neg spinGate
	neg.received(-5)
	if !neg.wait() || neg.avg != 0 {
		t.Errorf("received(-5) left the gate %+v, want it open at 0", neg)
	}
}

// TestSpinLimit: a spin that finds its frame keeps the whole RxSpin (a
// ping); misses halve the limit down to RxSpin/8, never below; hits
// double it back, never above RxSpin; a limit left over from a larger
// RxSpin is read as RxSpin.
func TestSpinLimit(t *testing.T) {
	const max = 200 * time.Microsecond
	var s spinLimit
	if got := s.get(max); got != max {
		t.Fatalf("a new limit is %v, want RxSpin (%v)", got, max)
	}
	for range 1000 {
		s.found(max)
	}
	if got := s.get(max); got != max {
		t.Errorf("after 1000 spins that found their frame the limit is %v, want %v", got, max)
	}
	want := []time.Duration{100 * time.Microsecond, 50 * time.Microsecond, 25 * time.Microsecond, 25 * time.Microsecond, 25 * time.Microsecond}
	for i, w := range want {
		s.missed(max)
		if got := s.get(max); got != w {
			t.Errorf("after %d misses the limit is %v, want %v", i+1, got, w)
		}
	}
	for i, w := range []time.Duration{50 * time.Microsecond, 100 * time.Microsecond, 200 * time.Microsecond, 200 * time.Microsecond} {
		s.found(max)
		if got := s.get(max); got != w {
			t.Errorf("after %d hits following the misses the limit is %v, want %v", i+1, got, w)
		}
	}
	// Alternating misses and hits hold it between half and all of RxSpin.
	for i := range 100 {
		if i%2 == 0 {
			s.missed(max)
		} else {
			s.found(max)
		}
		if got := s.get(max); got < max/2 || got > max {
			t.Fatalf("alternating, step %d: limit %v, want within [%v, %v]", i, got, max/2, max)
		}
	}
	big := spinLimit{cur: time.Second}
	if got := big.get(max); got != max {
		t.Errorf("a limit of 1s read with RxSpin %v gives %v, want %v", max, got, max)
	}
}
