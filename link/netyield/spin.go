package netyield

import (
	"runtime"
	"time"
)

// Spin paces the yields of a poll of memory (a ring's status word, a
// socket read without blocking) and backs it off when the CPU is
// contended. Between two looks the poll lets the process's runnable
// goroutines run (Turn), then gives the CPU to other processes
// (GiveCPU). Only one Turn per Poller asks the network poller (Yield: at
// one P an eventfd write, a park and the scheduler's epoll_pwait); the
// others are runtime.Gosched, which costs no system call. A goroutine the
// poller holds (a client whose doorbell came) then runs within Poller of
// its wake-up rather than at the next look.
//
// A give-away that kept the CPU away for longer than the poll (or than
// Contended, if longer) means other work holds it for whole scheduler
// slices: a process that yields then waits for the slice to end, where
// one asleep in the poller would be woken when its data lands. The poll
// then stops (Contended) for a pause that starts at PauseMin and doubles
// with each contended poll up to PauseMax, and halves with each poll that
// ended without contention (Calm).
//
// A Spin is used by one goroutine at a time. Its zero value asks the
// poller at every Turn.
type Spin struct {
	// Poller is how often a Turn lets the network poller run.
	Poller time.Duration
	// Clock and Yield are time.Now and Yield when nil (a test counts the
	// poller's looks on a clock of its own).
	Clock func() time.Time
	Yield func()

	polled time.Time // when a Turn last let the poller run
	off    time.Time // no polling before this
	pause  time.Duration
}

// Back-off of a poll under contention: a give-away longer than Contended
// (or than the poll, if that is longer) counts as contention; the first
// pause, and the longest.
const (
	Contended = time.Millisecond
	PauseMin  = 10 * time.Millisecond
	PauseMax  = time.Second
)

// Now reads the Spin's clock.
func (s *Spin) Now() time.Time {
	if s.Clock != nil {
		return s.Clock()
	}
	return time.Now()
}

// Paused reports whether a contended poll's pause holds at now: the
// caller should sleep at once rather than poll.
func (s *Spin) Paused(now time.Time) bool { return now.Before(s.off) }

// Pause is the current back-off pause (0: no contention since the pauses
// halved away).
func (s *Spin) Pause() time.Duration { return s.pause }

// Polled is when a Turn last let the network poller run.
func (s *Spin) Polled() time.Time { return s.polled }

// Turn is the first half of a yield between two looks, at now: it lets
// the process's runnable goroutines run, and those the network poller
// holds when Poller has passed since a Turn last let it (a poll's first
// Turn too, when the last was longer ago). It returns the Mark for the
// GiveCPU that ends the yield.
func (s *Spin) Turn(now time.Time) (mark uint64) {
	mark = Mark()
	if now.Sub(s.polled) >= s.Poller {
		s.polled = now
		if s.Yield != nil {
			s.Yield()
		} else {
			Yield()
		}
	} else {
		runtime.Gosched()
	}
	return mark
}

// Contended judges a give-away that began at from and kept the CPU away
// for away, in a poll of d: longer than d and than Contended is
// contention, and the poll stops until from+away plus a pause twice the
// last (PauseMin to PauseMax). It reports whether it was.
func (s *Spin) Contended(from time.Time, away, d time.Duration) bool {
	if away <= max(d, Contended) {
		return false
	}
	s.pause = min(max(2*s.pause, PauseMin), PauseMax)
	s.off = from.Add(away).Add(s.pause)
	return true
}

// Calm halves the pause: a poll ended without contention.
func (s *Spin) Calm() { s.pause /= 2 }

// Between is a whole yield between two looks of a poll of d, at now:
// Turn, GiveCPU, and the time both took judged by Contended. It reports
// false when that was contention (the poll should end).
func (s *Spin) Between(now time.Time, d time.Duration) bool {
	GiveCPU(s.Turn(now))
	return !s.Contended(now, s.Now().Sub(now), d)
}

// PauseUntil stops polls until t, as a contended poll would (a test's
// back-off); the zero t resumes them at once, the pause forgotten.
func (s *Spin) PauseUntil(t time.Time) {
	s.off = t
	if t.IsZero() {
		s.pause = 0
	}
}
