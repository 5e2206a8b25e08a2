package ring

import "time"

// spinGate decides, each time Recv finds the receive ring empty, whether
// it spins (Config.RxSpin) before it sleeps, from how many frames the link
// received since the previous time it found the ring empty: a burst.
//
// A request/response exchange (a ping, a BDSM barrier, an Orca call)
// brings a frame or a few per wait, and whoever waits for them waits for
// the first one: the spin saves each of them a sleep and a wake-up (tens
// of µs in a VM whose idle vCPUs halt), which is the latency of every such
// table. A stream's receiver reads bursts of frames, tens at a time,
// between waits: a wake-up per burst costs it little, and spinning costs
// CPU that a CPU-bound sender on the same machine needs (at MTU 9000
// with a group key, a tenth of the goodput on 2 vCPUs:
// docs/benchmarks.md, "Authenticated groups"). So
// Recv spins only while the recent bursts, a moving average, are short.
//
// The average weighs the latest burst 1/8 (spinBurstShift) and counts a
// burst as at most spinBurstCap frames, so a stream that stops and gives
// way to request/response traffic spins again after a dozen or so waits
// instead of after as many as the stream's biggest bursts; a wait that
// follows another with nothing read between them (a deadline, a Wake)
// counts a burst of 0. It is written by the goroutine in Recv only.
type spinGate struct {
	// avg is the moving average of bursts, in 1/spinBurstOne frames.
	avg int32
	// since counts the frames received since the ring was last found
	// empty.
	since uint32
}

const (
	// spinBurst is the average burst (frames between waits) from which
	// Recv stops spinning.
	spinBurst = 8
	// spinBurstCap is the most frames one burst counts as.
	spinBurstCap = 64
	// spinBurstShift: the latest burst weighs 1/2^spinBurstShift.
	spinBurstShift = 3
	// spinBurstOne is the average's fixed-point unit (1 frame).
	spinBurstOne = 16
)

// received records n frames returned by Recv.
func (g *spinGate) received(n int) {
	g.since = uint32(min(uint64(g.since)+uint64(max(n, 0)), spinBurstCap))
}

// wait records that Recv found the ring empty, ending the burst, and
// reports whether it should spin before sleeping.
func (g *spinGate) wait() bool {
	// An arithmetic shift: a falling average rounds down, to 0 at last.
	g.avg += (int32(g.since)*spinBurstOne - g.avg) >> spinBurstShift
	g.since = 0
	return g.avg < spinBurst*spinBurstOne
}

// spinLimit is how long the next spin may yield, between max/spinLimitMin
// and max (Config.RxSpin), as Linux's haltpoll governor sizes its poll: a
// spin that yielded its whole limit and found nothing halves it, a spin
// that found its frame doubles it. A ping, whose reply comes within the
// spin, keeps all of it; a wait that is often longer than the spin (a
// sender waiting on acknowledgements its receivers send after a
// wake-up) spins about as long as its waits usually take, and a spin that
// misses wastes an eighth of what it did.
type spinLimit struct {
	// cur is the current limit; 0 means max.
	cur time.Duration
}

// spinLimitMin: the limit falls to max/spinLimitMin at the least.
const spinLimitMin = 8

func (s *spinLimit) get(max time.Duration) time.Duration {
	if s.cur <= 0 || s.cur > max {
		return max
	}
	return s.cur
}

// missed records a spin that yielded its whole limit and found nothing.
func (s *spinLimit) missed(max time.Duration) {
	s.cur = s.get(max) / 2
	if lo := max / spinLimitMin; s.cur < lo {
		s.cur = lo
	}
}

// found records a spin that found a frame.
func (s *spinLimit) found(max time.Duration) {
	s.cur = min(2*s.get(max), max)
}
