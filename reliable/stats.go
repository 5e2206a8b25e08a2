package reliable

import (
	"slices"
	"time"

	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/link"
	"github.com/rbcast/rbcast/reliable/pbp"
	"github.com/rbcast/rbcast/reliable/seq"
)

// Stats is a snapshot of one member's counters.
type Stats struct {
	Self  frame.MemberID
	Order Order
	// Protocol is the FIFO core's counters (zero under Order Total):
	// messages proposed, Data frames sent and retransmitted, Acks, Nacks
	// sent and received, deliveries, drops by reason, and the window's
	// occupancy (InFlight of Window).
	Protocol pbp.Stats
	// Total is the sequencer core's counters (zero under Order FIFO): the
	// epoch and its sequencer, requests sent and resent, global numbers
	// assigned (at the sequencer), status requests and replies,
	// retransmissions asked for and answered, elections, members failed
	// and left, and drops by reason.
	Total seq.Stats
	// Link is the link's counters; KernelDrops are frames the kernel
	// dropped because we did not read fast enough.
	Link    link.Stats
	LinkErr error
	// BadFrames are frames dropped before the core, by decode error.
	BadFrames BadFrames
	// HeldData counts Data frames left unstepped because the receive
	// queue was full (they are repaired later, like losses).
	HeldData uint64
	// RetransmitsSentNow counts the Data retransmissions of Protocol's
	// Retransmitted that went out past the link's transmit queue
	// (link/ring's SendNow); the rest were queued behind new frames.
	RetransmitsSentNow uint64
	// Queued is the number of delivered messages waiting for Recv.
	Queued int
	// Members is per other member: what was delivered from it and how
	// long its repairs took.
	Members []MemberStats
	// RepairP50 and RepairP99 are over the recent repairs of all members.
	RepairP50, RepairP99 time.Duration
	// Events are all membership events so far; EventsLost counts those
	// the Events channel could not hold.
	Events     []Event
	EventsLost uint64
}

// MemberStats is what this member received from another (under Order
// Total, from every member, itself included).
type MemberStats struct {
	ID             frame.MemberID
	Live           bool
	Delivered      uint64 // messages
	DeliveredBytes uint64
	// Repairs counts gaps detected and filled (PBP2; under Order Total,
	// gaps in the global order, counted against the sequencer that was
	// asked); RepairP50/P99 are the time from detecting a gap (the Step
	// that revealed it) to filling it, over the most recent 256 repairs.
	Repairs              uint64
	RepairP50, RepairP99 time.Duration
}

// Stats returns a snapshot of the counters.
func (g *Group) Stats() Stats {
	g.mu.Lock()
	s := g.eng.stats()
	s.EventsLost = g.lost
	g.mu.Unlock()
	s.Link, s.LinkErr = g.l.Stats()
	g.queue.mu.Lock()
	s.Queued = g.queue.n
	g.queue.mu.Unlock()
	return s
}

func (e *engine) stats() Stats {
	s := Stats{BadFrames: e.bad, HeldData: e.held, RetransmitsSentNow: e.nowSent, Events: slices.Clone(e.events)}
	var all []time.Duration
	live := map[frame.MemberID]bool{}
	if e.total != nil {
		s.Order, s.Total = Total, e.total.Stats()
		for _, m := range e.total.Members() {
			live[m.ID] = m.Live
			if m.Self {
				s.Self = m.ID
				live[m.ID] = !e.total.Left() && !e.total.Halted()
			}
		}
	} else {
		s.Protocol = e.core.Stats()
		for _, m := range e.core.Members() {
			live[m.ID] = m.Live
		}
	}
	for i := range e.peers {
		p := &e.peers[i]
		id := e.ackBase + frame.MemberID(i)
		l, other := live[id]
		if !p.member || !other {
			if p.member {
				s.Self = id
			}
			continue
		}
		d := p.latency.samples()
		all = append(all, d...)
		p50, p99 := percentiles(d)
		s.Members = append(s.Members, MemberStats{ID: id, Live: l, Delivered: p.delivered, DeliveredBytes: p.bytes,
			Repairs: p.repairs, RepairP50: p50, RepairP99: p99})
	}
	s.RepairP50, s.RepairP99 = percentiles(all)
	return s
}

// percentiles returns the 50th and 99th percentile (nearest rank).
func percentiles(d []time.Duration) (p50, p99 time.Duration) {
	if len(d) == 0 {
		return 0, 0
	}
	slices.Sort(d)
	rank := func(p int) time.Duration { return d[max(0, (p*len(d)+99)/100-1)] }
	return rank(50), rank(99)
}
