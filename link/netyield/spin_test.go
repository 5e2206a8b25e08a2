package netyield

import (
	"testing"
	"time"
)

// stepClock is a clock of a test's own: each reading step after the last.
func stepClock(start time.Time, step time.Duration) (func() time.Time, *time.Time) {
	now := start
	return func() time.Time { now = now.Add(step); return now }, &now
}

// A Turn lets the network poller run at most once per Poller, at the
// first Turn and then every Poller; the Turns between are
// runtime.Gosched. A zero Poller asks at every Turn. A Turn after a gap
// of Poller or more asks at once, one within Poller of the last ask does
// not.
func TestSpinTurnAsksThePollerOncePerPoller(t *testing.T) {
	for _, c := range []struct {
		poller time.Duration
		want   int
	}{
		{20 * time.Microsecond, 50},
		{50 * time.Microsecond, 20},
		{0, 1000},
	} {
		polls := 0
		clock, _ := stepClock(time.Unix(1000, 0), time.Microsecond)
		s := Spin{Poller: c.poller, Clock: clock, Yield: func() { polls++ }}
		for range 1000 {
			s.Turn(s.Now())
		}
		if polls != c.want {
			t.Errorf("Poller %v: 1000 Turns 1 µs apart asked the poller %d times, want %d", c.poller, polls, c.want)
		}
	}

	polls := 0
	s := Spin{Poller: 20 * time.Microsecond, Yield: func() { polls++ }}
	at := time.Unix(1000, 0)
	s.Turn(at)
	if polls != 1 || !s.Polled().Equal(at) {
		t.Fatalf("the first Turn asked %d times (Polled %v), want once at %v", polls, s.Polled(), at)
	}
	s.Turn(at.Add(19 * time.Microsecond))
	if polls != 1 {
		t.Errorf("a Turn 19 µs after the last ask asked again")
	}
	s.Turn(at.Add(20 * time.Microsecond))
	if polls != 2 {
		t.Errorf("a Turn 20 µs after the last ask did not ask")
	}
	s.Turn(at.Add(time.Hour))
	if polls != 3 || !s.Polled().Equal(at.Add(time.Hour)) {
		t.Errorf("a Turn an hour later: %d asks, Polled %v; want 3, the Turn's time", polls, s.Polled())
	}
}

// Contended: a give-away longer than the poll and than Contended stops
// polls for PauseMin, twice that after the next, up to PauseMax; Calm
// halves the pause; shorter give-aways change nothing.
func TestSpinContendedBacksOff(t *testing.T) {
	var s Spin
	from := time.Unix(1000, 0)
	d := 200 * time.Microsecond
	for _, away := range []time.Duration{0, d, Contended} {
		if s.Contended(from, away, d) || s.Pause() != 0 || s.Paused(from) {
			t.Fatalf("a give-away of %v in a poll of %v counted as contention (pause %v)", away, d, s.Pause())
		}
	}
	if s.Contended(from, 3*time.Millisecond, 5*time.Millisecond) {
		t.Fatal("a give-away of 3 ms in a poll of 5 ms counted as contention")
	}

	away := 2 * time.Millisecond
	if !s.Contended(from, away, d) {
		t.Fatalf("a give-away of %v in a poll of %v was not contention", away, d)
	}
	end := from.Add(away).Add(PauseMin)
	if s.Pause() != PauseMin || !s.Paused(end.Add(-time.Nanosecond)) || s.Paused(end) {
		t.Fatalf("after contention: pause %v, paused until %v? want %v, until the give-away's end plus it", s.Pause(), end, PauseMin)
	}
	s.Contended(from, away, d)
	if s.Pause() != 2*PauseMin {
		t.Errorf("a second contended poll: pause %v, want %v", s.Pause(), 2*PauseMin)
	}
	for range 20 {
		s.Contended(from, away, d)
	}
	if s.Pause() != PauseMax {
		t.Errorf("after 22 contended polls: pause %v, want the longest, %v", s.Pause(), PauseMax)
	}
	s.Calm()
	if s.Pause() != PauseMax/2 {
		t.Errorf("Calm: pause %v, want %v", s.Pause(), PauseMax/2)
	}

	s.PauseUntil(time.Time{})
	if s.Pause() != 0 || s.Paused(from) {
		t.Errorf("PauseUntil(zero): pause %v, paused %v; want neither", s.Pause(), s.Paused(from))
	}
	s.PauseUntil(from.Add(time.Hour))
	if !s.Paused(from) || s.Paused(from.Add(time.Hour)) {
		t.Error("PauseUntil(an hour on) did not pause polls for the hour")
	}
}

// Between is a Turn and a give-away, judged by the Spin's clock: true
// when the two took no longer than the poll (or than Contended), false
// and a back-off when they did.
func TestSpinBetween(t *testing.T) {
	polls := 0
	d := 100 * time.Microsecond
	clock, now := stepClock(time.Unix(1000, 0), 10*time.Microsecond)
	s := Spin{Poller: 20 * time.Microsecond, Clock: clock, Yield: func() { polls++ }}
	for range 4 {
		if !s.Between(s.Now(), d) {
			t.Fatal("a yield of 10 µs in a poll of 100 µs ended the poll")
		}
	}
	// Looks 20 µs apart (two readings of 10 µs each): every one asks.
	if polls != 4 || s.Pause() != 0 {
		t.Fatalf("4 yields 20 µs apart asked the poller %d times (pause %v); want 4, none", polls, s.Pause())
	}
	s.Clock = func() time.Time { *now = now.Add(5 * time.Millisecond); return *now }
	if s.Between(*now, d) {
		t.Fatal("a yield of 5 ms in a poll of 100 µs did not end the poll")
	}
	if s.Pause() != PauseMin || !s.Paused(now.Add(PauseMin-time.Nanosecond)) {
		t.Fatalf("after a contended yield: pause %v, want %v from its end", s.Pause(), PauseMin)
	}
}
