package ring

import "time"

// spinPolicy chooses how long Recv spins before it sleeps with
// Config.AdaptiveSpin: the full RxSpin while most waits end with a frame
// that a spin that long would have caught, nothing while most do not.
//
// A spin pays when the frame comes while it lasts: the process is then not
// put to sleep and woken. It costs where no CPU is free for the spinner:
// with more polling processes than cores, one that yields the CPU between
// looks (sched_yield) waits behind the others for its turn, and keeps the
// CPU from the process that would produce what it waits for, where a
// sleeper is woken at once (docs/local-api-history.md, "An adaptive ring spin").
// There a round trip outgrows the spin, and the spins end empty.
//
// Each wait is judged by what a spin of max would have done, whatever the
// spin was: a frame within max of the ring being found empty is a hit
// (caught by the spin, or a sleep that a longer spin would have saved), a
// wait that lasted longer than max without one is a miss. A wait that
// ended sooner without a frame (a Wake, a near deadline) says neither. So
// the judgement does not depend on the spin chosen, and a policy that
// stopped spinning sees when spinning would pay again, as Linux KVM's
// halt polling grows its poll when a wake-up came within the longest poll
// (virt/kvm/kvm_main.c, grow_halt_poll_ns). The recent waits count through
// a running share of hits (each wait moves it 1/8 of the way to 1 or 0, as
// glibc's adaptive mutexes average their spin counts): at or above
// spinFull (half the waits hit) the spin is max, at or below spinNone
// (three quarters miss) there is none, and between it grows in
// proportion. A spin that catches every other frame still pays; on a
// 2-vCPU machine under load, total order's self-delivery and 3-sender
// rate fell with the spin off at half (docs/local-api-history.md, "An adaptive
// ring spin").
//
// It is a deterministic value: the waits and their lengths are arguments.
type spinPolicy struct {
	max time.Duration
	// share is the running share of hits, in 1/spinScale.
	share int32
}

// The share of hits in 1/spinScale: its weight per wait, and the shares at
// and above which the spin is full, at and below which there is none.
const (
	spinScale  = 1 << 10
	spinWeight = 3 // each wait moves the share 1/2^spinWeight of the way
	spinFull   = spinScale / 2
	spinNone   = spinScale / 4
)

// newSpinPolicy starts at a full spin of max: a link spins until its waits
// say otherwise.
func newSpinPolicy(max time.Duration) spinPolicy {
	return spinPolicy{max: max, share: spinScale}
}

// Spin is how long the next wait may spin; 0: sleep at once.
func (p *spinPolicy) Spin() time.Duration {
	switch {
	case p.share >= spinFull:
		return p.max
	case p.share <= spinNone:
		return 0
	}
	return p.max * time.Duration(p.share-spinNone) / (spinFull - spinNone)
}

// Waited records how a wait ended: found says a frame ended it, waited is
// how long after the ring was found empty.
func (p *spinPolicy) Waited(found bool, waited time.Duration) {
	switch {
	case found && waited <= p.max:
		p.share += (spinScale - p.share) >> spinWeight
		// The shift rounds down: from just below the top a hit would
		// move the share no more, and a full spin would never return.
		if p.share > spinScale-(1<<spinWeight) {
			p.share = spinScale
		}
	case waited > p.max:
		p.share -= p.share >> spinWeight
	}
}
