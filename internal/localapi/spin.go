package localapi

import (
	"runtime"
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
	// polled is when a yield last let the network poller run.
	polled time.Time
}

// spinPoller is how often a spinner's yield lets the network poller run
// (netyield.Yield: at one P two system calls and a park); between, the
// yield is runtime.Gosched, which runs what else of the process is
// runnable, and then gives the CPU to other processes as before. A
// client's poll rarely has a goroutine the poller holds (its doorbell
// is not read while it polls), so a look costs a sched_yield, not three
// system calls; one woken by the poller still runs within spinPoller.
const spinPoller = 50 * time.Microsecond

// pollerYield is netyield.Yield (a test counts its calls).
var pollerYield = netyield.Yield

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
	if now.Sub(s.polled) >= spinPoller {
		pollerYield()
		s.polled = now
	} else {
		runtime.Gosched()
	}
	netyield.GiveCPU(mark)
	if away := time.Since(now); away > max(s.d, spinContended) {
		s.pause = min(max(2*s.pause, spinPauseMin), spinPauseMax)
		s.off = now.Add(away).Add(s.pause)
		return false
	}
	return true
}
