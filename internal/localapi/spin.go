package localapi

import (
	"time"

	"github.com/rbcast/rbcast/link/netyield"
)

// spinner bounds a poll of shared memory: it lasts at most d, yields the
// CPU between looks, and backs off under contention as PacketReader's
// spin does (a yield that kept the CPU away longer than spinContended,
// or d if longer, stops polling for a pause that doubles with each
// contended spin, and halves with each spin that ran out uncontended).
type spinner struct {
	d     time.Duration
	start time.Time
	off   time.Time
	pause time.Duration
}

// begin starts a poll: false while backing off (sleep at once).
func (s *spinner) begin() bool {
	now := time.Now()
	if now.Before(s.off) {
		return false
	}
	s.start = now
	return true
}

// yield gives the CPU away once between looks: false when the poll is
// over (its time ran out, or the CPU is contended).
func (s *spinner) yield() bool {
	now := time.Now()
	if now.Sub(s.start) >= s.d {
		s.pause /= 2
		return false
	}
	mark := netyield.Mark()
	netyield.Yield()
	netyield.GiveCPU(mark)
	if away := time.Since(now); away > max(s.d, spinContended) {
		s.pause = min(max(2*s.pause, spinPauseMin), spinPauseMax)
		s.off = now.Add(away).Add(s.pause)
		return false
	}
	return true
}
