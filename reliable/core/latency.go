package core

import (
	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/reliable/clock"
)

// LatencyBounds returns the upper bounds (inclusive) of a Histogram's buckets,
// from 10 µs to 2.5 s in steps of about 2.5: repairs on a segment take
// from tens of microseconds (a Nack answered at once) to the failure
// timeout (a member that stopped answering), self-delivery under total
// order from tens of microseconds to a sequencer election.
func LatencyBounds() [LatencyBuckets]Duration {
	return [LatencyBuckets]Duration{
		10 * µs, 25 * µs, 50 * µs,
		100 * µs, 250 * µs, 500 * µs,
		1 * ms, 2500 * µs, 5 * ms,
		10 * ms, 25 * ms, 50 * ms,
		100 * ms, 250 * ms, 500 * ms,
		1000 * ms, 2500 * ms,
	}
}

// LatencyBuckets is the number of LatencyBounds.
const LatencyBuckets = 17

const (
	µs = clock.Microsecond
	ms = clock.Millisecond
)

// Histogram counts latencies in the buckets of LatencyBounds: Counts[i]
// those in (bound i-1, bound i], the last one those
// above every bound. It never forgets, unlike the percentiles of the
// recent repairs, so a monitor can take rates of it (Prometheus
// histograms). The zero value is empty; it does not allocate.
type Histogram struct {
	Counts [LatencyBuckets + 1]uint64
	Sum    Duration
}

// Observe counts one latency.
func (h *Histogram) Observe(d Duration) {
	bounds := LatencyBounds()
	i := 0
	for i < len(bounds) && d > bounds[i] {
		i++
	}
	h.Counts[i]++
	h.Sum += d
}

// Count is the number of latencies observed.
func (h *Histogram) Count() uint64 {
	var n uint64
	for _, c := range h.Counts {
		n += c
	}
	return n
}

// Add adds o's counts to h.
func (h *Histogram) Add(o *Histogram) {
	for i := range h.Counts {
		h.Counts[i] += o.Counts[i]
	}
	h.Sum += o.Sum
}

// selfLatency measures self-delivery latency for a core with
// Info.SelfDelivery: from the Propose that accepted a message to the
// Ready that delivers it back. A member's own messages are delivered back
// in the order it proposed them (total order keeps each sender's order),
// so the times wait in a queue.
type selfLatency struct {
	proposed []Time // times of accepted messages not yet delivered back, oldest first
	head     int
	hist     Histogram
}

func (s *selfLatency) propose(now Time) {
	if s.head > 0 && s.head == len(s.proposed) {
		s.proposed, s.head = s.proposed[:0], 0
	}
	s.proposed = append(s.proposed, now)
}

func (s *selfLatency) delivered(now Time) {
	if s.head == len(s.proposed) {
		return // a message not proposed through this stepper
	}
	s.hist.Observe(now.Sub(s.proposed[s.head]))
	s.head++
	if s.head > 1024 && 2*s.head > len(s.proposed) {
		s.proposed = append(s.proposed[:0], s.proposed[s.head:]...)
		s.head = 0
	}
}

// Latencies are the latency histograms a stepper keeps (Stepper.Latencies).
type Latencies struct {
	// Repair is every member's repairs together, from detecting a gap
	// to filling it (as PeerCounters' percentiles); Peers are per member,
	// by id, this one included, like Counters.Peers.
	Repair Histogram
	Peers  []PeerLatency
	// SelfDelivery, for a core with Info.SelfDelivery (total order):
	// from Propose accepting a message to its delivery back here, in
	// its place of the order. Empty for other cores.
	SelfDelivery Histogram
}

// PeerLatency is one member's repair latencies.
type PeerLatency struct {
	ID     frame.MemberID
	Repair Histogram
}

// Latencies returns the latency histograms measured so far (it
// allocates).
func (s *Stepper) Latencies() Latencies {
	l := Latencies{SelfDelivery: s.self.hist}
	for i := range s.peers {
		p := &s.peers[i]
		if !p.member {
			continue
		}
		l.Repair.Add(&p.repairHist)
		l.Peers = append(l.Peers, PeerLatency{ID: s.base + frame.MemberID(i), Repair: p.repairHist})
	}
	return l
}
