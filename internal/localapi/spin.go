package localapi

import (
	"time"

	"github.com/rbcast/rbcast/link/netyield"
)

// spinner bounds a poll (a RingReceiver's of its deliver ring, a
// PacketReader's of its socket): it lasts at most d, yields the CPU
// between looks and backs off under contention (netyield.Spin).
type spinner struct {
	d     time.Duration
	start time.Time
	pace  netyield.Spin
}

// spinPoller is how often a spinner's yield lets the network poller run
// (netyield.Spin). A client's poll rarely has a goroutine the poller
// holds (its doorbell is not read while it polls), so it asks less often
// than the daemon's spins (readerPoller, link/ring's spinPoller); one
// woken by the poller still runs within spinPoller.
const spinPoller = 50 * time.Microsecond

// begin starts a poll at now: false while backing off (sleep at once).
func (s *spinner) begin(now time.Time) bool {
	if s.pace.Paused(now) {
		return false
	}
	s.start = now
	return true
}

// over reports whether the poll's time has run out at now (then it ended
// without contention: the back-off's pause halves).
func (s *spinner) over(now time.Time) bool {
	if now.Sub(s.start) < s.d {
		return false
	}
	s.pace.Calm()
	return true
}

// yield gives the CPU away once between looks: false when the poll is
// over (its time ran out, or the CPU is contended).
func (s *spinner) yield() bool {
	now := s.pace.Now()
	return !s.over(now) && s.pace.Between(now, s.d)
}
