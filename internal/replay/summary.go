package replay

import (
	"fmt"
	"io"
	"net"
	"sort"
	"time"

	"github.com/rbcast/rbcast/frame"
)

// WriteSummary writes, per sender (member id and incarnation): its
// sequence range, first transmissions and retransmissions, the Nacks it
// received; then per receiver: gaps, when each was repaired, repair
// latency percentiles, and the estimated loss from the receiver's inbound
// capture and from its Nack ranges. A capture of the sequencer protocol
// gets its own part (writeSeqSummary).
func WriteSummary(w io.Writer, c *Capture) error {
	a := analyse(c)
	ew := &errWriter{w: w}
	var t0 time.Time
	if len(a.order) > 0 {
		t0 = a.order[0].Time
	}
	rel := func(t time.Time) float64 { return t.Sub(t0).Seconds() }
	bad, foreign := 0, 0
	for _, r := range a.order {
		if r.Err != nil {
			if isForeignEtherType(r.Err) {
				foreign++
			} else {
				bad++
			}
		}
	}
	ew.printf("# %s: %s, %d frames (%d undecodable, %d of other EtherTypes), %d interfaces, direction flags: %v\n",
		c.Path, c.Format, len(c.Records), bad, foreign, len(c.Interfaces), c.HasDirection)
	for i := range c.Interfaces {
		intf := &c.Interfaces[i]
		ew.printf("# interface %d %s: %q", i, intf.Label(), intf.Description)
		if intf.HasStats {
			ew.printf(" kernel received %d dropped %d", intf.Received, intf.Dropped)
		}
		if intf.CaptureLost > 0 {
			ew.printf("; the capture lost %d of its frames (not in this file)", intf.CaptureLost)
		}
		ew.printf("\n")
	}

	type txStats struct {
		first, retx, msgs, acks, hbs, nacksIn, leaves int
		lo, hi                                        uint32
		has                                           bool
		nacked                                        map[uint32]bool
	}
	tx := map[senderKey]*txStats{}
	get := func(k senderKey) *txStats {
		s := tx[k]
		if s == nil {
			s = &txStats{nacked: map[uint32]bool{}}
			tx[k] = s
		}
		return s
	}
	// nackBy[target][requester] = distinct seqs requested
	nackBy := map[frame.MemberID]map[frame.MemberID]map[uint32]bool{}
	nackWork := gapBudget // seqs named by Nack ranges that are counted
	for _, r := range a.txs {
		v := r.View
		if v == nil || !a.isPBP(v) {
			continue
		}
		k := senderKey{v.Sender(), v.Incarnation(), v.ViewID()}
		switch v.Type() {
		case frame.Data:
			s := get(k)
			if v.Retransmission() {
				s.retx++
			} else {
				s.first++
				for it := v.Messages(); ; s.msgs++ {
					if _, ok := it.Next(); !ok {
						break
					}
				}
			}
			if !s.has || frame.SeqLess(v.Seq(), s.lo) {
				s.lo = v.Seq()
			}
			if !s.has || frame.SeqLess(s.hi, v.Seq()) {
				s.hi = v.Seq()
			}
			s.has = true
		case frame.Ack:
			get(k).acks++
		case frame.Heartbeat:
			get(k).hbs++
		case frame.Leave:
			get(k).leaves++
		case frame.Nack:
			get(k) // the requester is a sender too
			tgt := v.NackTarget()
			if nackBy[tgt] == nil {
				nackBy[tgt] = map[frame.MemberID]map[uint32]bool{}
			}
			if nackBy[tgt][v.Sender()] == nil {
				nackBy[tgt][v.Sender()] = map[uint32]bool{}
			}
			rl := v.NackRanges()
			for i := range rl.Len() {
				rg := rl.At(i)
				for q, n := rg.First, 0; n < maxJump && nackWork > 0; q, n, nackWork = q+1, n+1, nackWork-1 {
					nackBy[tgt][v.Sender()][q] = true
					if q == rg.Last {
						break
					}
				}
			}
			for tk := range tx {
				if tk.ID == tgt {
					tx[tk].nacksIn++
				}
			}
		}
	}
	for _, k := range sortedKeys(tx) {
		s := tx[k]
		mac := a.macs[k]
		ew.printf("\nsender %s (%v)\n", k, net.HardwareAddr(mac[:]))
		if s.has {
			span := int(s.hi-s.lo) + 1
			ew.printf("  data: seq %d..%d (%d seqs), %d first transmissions carrying %d messages, %d retransmissions (%.1f%%)\n",
				s.lo, s.hi, span, s.first, s.msgs, s.retx, pct(s.retx, s.first))
		} else {
			ew.printf("  data: none\n")
		}
		ew.printf("  control: %d acks, %d heartbeats, %d leaves; %d nacks addressed to it\n", s.acks, s.hbs, s.leaves, s.nacksIn)
		span := 0
		if s.has {
			span = int(s.hi-s.lo) + 1
		}
		var reqs []frame.MemberID
		for req := range nackBy[k.ID] {
			reqs = append(reqs, req)
		}
		sort.Slice(reqs, func(i, j int) bool { return reqs[i] < reqs[j] })
		for _, req := range reqs {
			ew.printf("  nacked by member %d: %d distinct seqs (est. loss %.2f%% of %d)\n", req, len(nackBy[k.ID][req]), pct(len(nackBy[k.ID][req]), span), span)
		}
		var all []time.Duration
		for _, vw := range a.views {
			st := vw.streams[k]
			if st == nil {
				continue
			}
			gc := countGaps(st.gaps)
			all = append(all, gc.lat...)
			known := int(st.next - a.base[k])
			lost := known - len(st.original)
			ew.printf("  at %-8s received %d frames (%d duplicates), %d seqs known sent; gaps %d (repaired %d, %d first seen as retransmissions, never repaired %d); loss est. %.2f%% (%d first transmissions missed); repair latency %s\n",
				vw.name, st.received, st.dups, known, len(st.gaps), gc.repaired, gc.viaRetx, gc.open, pct(lost, known), lost, percentiles(gc.lat))
			for gi, g := range st.gaps {
				if gi == maxGapLines {
					ew.printf("    ... %d more gaps\n", len(st.gaps)-gi)
					break
				}
				if g.Repaired.IsZero() {
					ew.printf("    gap seq %d opened at %.9f (frame %d), never repaired\n", g.Seq, rel(g.Opened), g.OpenFrame)
				} else if !g.ViaRetransmit {
					ew.printf("    gap seq %d opened at %.9f (frame %d), repaired at %.9f (frame %d) after %v\n", g.Seq, rel(g.Opened), g.OpenFrame, rel(g.Repaired), g.RepairFrame, g.Repaired.Sub(g.Opened))
				} else {
					ew.printf("    seq %d first seen as a retransmission at %.9f (frame %d)\n", g.Seq, rel(g.Repaired), g.RepairFrame)
				}
			}
		}
		if len(all) > 0 {
			ew.printf("  repair latency, all receivers: %s\n", percentiles(all))
		}
	}
	if a.seq.frames > 0 {
		writeSeqSummary(ew, a, rel)
	}
	return ew.err
}

// writeSeqSummary is the sequencer protocol's part: each epoch's
// sequencer and the globals it numbered, elections, each member's
// requests and repair requests, and per receiver the globals it missed,
// when each was repaired, and repair latency percentiles.
func writeSeqSummary(ew *errWriter, a *analysis, rel func(time.Time) float64) {
	s := a.seq
	ew.printf("\nsequencer protocol: %d frames, first global %d\n", s.frames, s.base)
	epochs := make([]uint32, 0, len(s.epochs))
	for e := range s.epochs {
		epochs = append(epochs, e)
	}
	sort.Slice(epochs, func(i, j int) bool { return frame.SeqLess(epochs[i], epochs[j]) })
	for _, e := range epochs {
		ep := s.epochs[e]
		if !ep.has {
			ew.printf("  epoch %d: sequencer %d (from frame %d), numbered nothing; %d status requests\n", e, ep.sequencer, ep.firstFrame, ep.statusReqs)
			continue
		}
		changes := ""
		if ep.changes > 0 {
			changes = fmt.Sprintf(", %d member changes by SeqMember (%d retransmissions)", ep.changes, ep.changeRetx)
		}
		ew.printf("  epoch %d: sequencer %d (from frame %d), globals %d..%d: %d numbered by SeqData, %d by Accept%s; %d SeqData retransmissions, %d status requests\n",
			e, ep.sequencer, ep.firstFrame, ep.lo, ep.hi, ep.byData, ep.byAccept, changes, ep.retx, ep.statusReqs)
	}
	for _, el := range s.elections {
		ew.printf("  elected: member %d sequencer of epoch %d at %.9f (frame %d), agreed last global %d\n", el.candidate, el.epoch, rel(el.at), el.frame, el.last)
	}
	for _, k := range sortedKeys(s.requesters) {
		q := s.requesters[k]
		mac := a.macs[k]
		ew.printf("  member %s (%v): ", k, net.HardwareAddr(mac[:]))
		if q.has {
			ew.printf("requests %d..%d, %d first transmissions carrying %d messages, %d resent", q.lo, q.hi, q.first, q.msgs, q.resent)
		} else {
			ew.printf("no requests")
		}
		ew.printf("; %d retransmit requests (%d globals), %d status replies, %d election frames, %d leaves", q.retransmitReqs, q.retransmitGlobals, q.statusReplies, q.electionFrames, q.leaves)
		if q.hasCursor {
			ew.printf("; delivered up to global %d", q.highestCursor-1)
		}
		ew.printf("\n")
	}
	var all []time.Duration
	for _, vw := range s.views {
		gc := countGaps(vw.gaps)
		all = append(all, gc.lat...)
		known := int(vw.end - s.base)
		ew.printf("  at %-8s %d globals known numbered, had %d (%d duplicates); gaps %d (repaired %d, %d first seen as retransmissions, never repaired %d, discarded by an election %d); repair latency %s\n",
			vw.name, known, len(vw.filled), vw.dups, len(vw.gaps), gc.repaired, gc.viaRetx, gc.open, gc.discarded, percentiles(gc.lat))
		for gi, g := range vw.gaps {
			if gi == maxGapLines {
				ew.printf("    ... %d more gaps\n", len(vw.gaps)-gi)
				break
			}
			switch {
			case g.Discarded:
				ew.printf("    gap global %d opened at %.9f (frame %d), discarded by an election\n", g.Seq, rel(g.Opened), g.OpenFrame)
			case g.Repaired.IsZero():
				ew.printf("    gap global %d opened at %.9f (frame %d), never repaired\n", g.Seq, rel(g.Opened), g.OpenFrame)
			case !g.ViaRetransmit:
				ew.printf("    gap global %d opened at %.9f (frame %d), repaired at %.9f (frame %d) after %v\n", g.Seq, rel(g.Opened), g.OpenFrame, rel(g.Repaired), g.RepairFrame, g.Repaired.Sub(g.Opened))
			default:
				ew.printf("    global %d first seen as a retransmission at %.9f (frame %d)\n", g.Seq, rel(g.Repaired), g.RepairFrame)
			}
		}
	}
	if len(all) > 0 {
		ew.printf("  repair latency, all receivers: %s\n", percentiles(all))
	}
}

// maxGapLines bounds the gaps listed per sender and receiver.
const maxGapLines = 20

func pct(n, of int) float64 {
	if of <= 0 {
		return 0
	}
	return 100 * float64(n) / float64(of)
}

// percentiles formats p50, p90, p99 and max (nearest rank).
func percentiles(d []time.Duration) string {
	if len(d) == 0 {
		return "n/a (no timed repairs)"
	}
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	p := func(q float64) time.Duration {
		i := int(q*float64(len(s))+0.999999) - 1
		return s[max(0, min(i, len(s)-1))]
	}
	return fmt.Sprintf("n=%d p50 %v p90 %v p99 %v max %v", len(s), p(0.5), p(0.9), p(0.99), s[len(s)-1])
}

// gapCounts sorts one receiver's gaps: repaired (viaRetx of them first
// seen as retransmissions, so without a repair latency), never repaired
// (open), discarded by an election (sequencer only), and the repair
// latencies of the others.
type gapCounts struct {
	repaired, open, viaRetx, discarded int
	lat                                []time.Duration
}

func countGaps(gaps []*Gap) gapCounts {
	var c gapCounts
	for _, g := range gaps {
		switch {
		case g.Discarded:
			c.discarded++
		case g.Repaired.IsZero():
			c.open++
		case g.ViaRetransmit:
			c.viaRetx++
			c.repaired++
		default:
			c.repaired++
			c.lat = append(c.lat, g.Repaired.Sub(g.Opened))
		}
	}
	return c
}
