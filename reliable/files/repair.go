package files

import "maps"

// When a repair is due (docs/protocols.md, "Files (IBRMP)", Repairs).
//
// A receiver's report lists the blocks it lacks; between the report and
// the block's arrival lie the link's queues, which on real sockets hold
// the pacer's frames far longer than the round trip the offers and ends
// measure (the 1 GB netns runs sent 1.0–1.1 M repairs for 733 k blocks:
// repairs still queued were sent again when the timer ran out, and the
// tail of the pass still in flight at its end was repaired at once).
// So a block is not due again on a timer alone, but as RACK (RFC 8985)
// decides loss: a block sent to a receiver and still missing is lost
// once a block sent after it has arrived (the receiver's reports show
// it held), frames of one sender to one receiver arriving in order but
// for a reordering allowance, and on one path: the frames to the group
// and those to the receiver alone may not keep their order between them
// (link/udp's multicast mode receives them on two sockets). The timer
// remains for the last blocks,
// after which nothing arrives, and is measured per receiver on the
// deliveries themselves: from the send of the latest block a report
// shows held to that report, queues and the report's delay included.

// sentAt is when a block was last sent to a receiver, whether it had
// been sent to it before (its round trip is then ambiguous: Karn), and
// whether it went to it alone.
type sentAt struct {
	at           Time
	again, alone bool
}

// The paths of a receiver's rack: frames to the group and frames to it
// alone may not keep their order between them (link/udp's multicast mode
// receives them on two sockets).
const (
	pathGroup = 0
	pathAlone = 1
)

func (s sentAt) path() int {
	if s.alone {
		return pathAlone
	}
	return pathGroup
}

// markEvery is how many pass blocks one mark covers: the pass's send
// times are kept at this granularity (a mark per 64 blocks is 12 KiB of
// marks per GB at a 1500-byte MTU).
const markEvery = 64

// mark notes the send time of the pass's block f.next, about to be
// counted sent.
func (f *outFile) mark(now Time) {
	if f.next%markEvery == 0 {
		f.marks = append(f.marks, now)
	}
}

// passSent bounds when the pass sent block b: at or after lo, at or
// before hi. ok is false for a block the pass has not sent.
func (f *outFile) passSent(b uint32, now Time) (lo, hi Time, ok bool) {
	k := int(b / markEvery)
	if b >= f.next || k >= len(f.marks) {
		return 0, 0, false
	}
	lo, hi = f.marks[k], now
	switch {
	case k+1 < len(f.marks):
		hi = f.marks[k+1]
	case f.ended:
		hi = f.endedAt
	}
	return lo, hi, true
}

// due reports whether block b, which r lacks, should be sent to it now:
// never sent to it, or lost by RACK's rule, or not heard of for the
// repair timeout. A block at or above r's reported top that it was
// never sent alone is in flight from the pass, sent by its mark's end.
func (r *receiver) due(now Time, f *outFile, b uint32, tm repairTimers) bool {
	var last Time
	path := pathGroup
	if s, ok := r.sent[b]; ok {
		last, path = s.at, s.path()
	} else if b < r.top {
		return true // listed missing below a block it holds: lost
	} else if _, hi, ok := f.passSent(b, now); ok {
		last = hi
	} else {
		return true
	}
	return last.Add(tm.reorder) < r.rack[path] || now.Sub(last) >= r.timeout(tm)
}

// delivered takes what a report of r shows held — every block below
// cover it does not list — to advance r.rack and r.rackRTT per path, and forgets
// the repairs that arrived. prevTop is its top before this report: the
// pass blocks up to the new top arrived since, if the new top's block is
// held (a receiver that took the offer late has a top from the blocks it
// dropped, and lists them missing: no round trip is measured from them).
func (c *Core) delivered(now Time, f *outFile, r *receiver, prevTop, cover uint32) {
	var latest [2]Time
	var sample [2]Duration
	// Maxima only: the result does not depend on the map's order.
	maps.DeleteFunc(r.sent, func(b uint32, s sentAt) bool {
		if b >= cover || r.lacks(b) {
			return false
		}
		// A block sent again tells nothing: the first copy may be the
		// one that arrived (Karn; RFC 8985 §6.2's spurious check).
		if p := s.path(); !s.again && s.at > latest[p] {
			latest[p], sample[p] = s.at, now.Sub(s.at)
		}
		return true
	})
	if r.top > prevTop && r.top > 0 && r.top-1 < cover && !r.lacks(r.top-1) {
		if lo, hi, ok := f.passSent(r.top-1, now); ok && lo > latest[pathGroup] {
			latest[pathGroup], sample[pathGroup] = lo, now.Sub(hi)
		}
	}
	for p := range latest {
		if latest[p] > r.rack[p] {
			r.rack[p] = latest[p]
		}
		if sample[p] > 0 {
			r.rackRTT[p] = sample[p]
		}
	}
}

// lacks reports whether r's reported missing ranges hold b.
func (r *receiver) lacks(b uint32) bool {
	lo, hi := 0, len(r.todo)
	for lo < hi {
		m := (lo + hi) / 2
		switch rg := r.todo[m]; {
		case rg.Last < b:
			lo = m + 1
		case rg.First > b:
			hi = m
		default:
			return true
		}
	}
	return false
}

// repairTimers are due's: the rto, RACK's reordering allowance (a
// quarter of the smoothed round trip, as RFC 8985's min_rtt/4), and the
// cap of a receiver's timeout.
type repairTimers struct{ rto, reorder, most Duration }

func (c *Core) repairTimers() repairTimers {
	return repairTimers{rto: c.rto(), reorder: c.srtt / 4, most: 10 * c.cfg.MaxTimer}
}

// timeout is how long a block sent to r on a path waits, when nothing
// sent after it on that path has arrived, before it is due again: the
// round trip of the latest block r's reports showed held (RACK's
// rack.rtt: the queues as they are now, and the report's delay), the
// longer of the two paths' (over link/udp multicast the group's socket
// may lag the unicast one by a fifth of a second at a busy receiver, and
// a path not measured yet, or whose blocks all went twice, has no
// sample of its own), ×5/4 with the reordering allowance; at least the
// rto, at most ten times MaxTimer (a queue may hold more than
// MaxTimer's worth).
func (r *receiver) timeout(tm repairTimers) Duration {
	rtt := max(r.rackRTT[pathGroup], r.rackRTT[pathAlone])
	return max(tm.rto, min(rtt+rtt/4+tm.reorder, tm.most))
}
