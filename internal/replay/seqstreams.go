package replay

import (
	"fmt"
	"time"

	"github.com/rbcast/rbcast/capture/invariant"
	"github.com/rbcast/rbcast/frame"
)

// The sequencer protocol (reliable/seq) as a capture shows it. Its frames
// number messages with global sequence numbers: a SeqData carries global g
// with its payload (method 1), a SeqAccept binds globals to requests whose
// payload travelled in a broadcast SeqRequest (method 2), a SeqMember
// numbers a change of the member list (a removal, a readmission) in the
// same stream. A member has global g when its interface saw a SeqData or
// SeqMember for g, or an Accept for g and the request it names. What
// tells a member that globals before some end exist: a SeqData or
// SeqMember (g+1), an Accept's header seq (the highest numbered),
// a SeqStatusRequest's highest sequenced, an Elected's agreed last global.
// Every sequencer frame's one-entry ack vector is the sender's delivered
// cursor: every global before it is delivered there.

// isSeqType and isPBPType: the frame types of each protocol.
func isSeqType(t frame.Type) bool { return invariant.IsSeqType(t) }
func isPBPType(t frame.Type) bool { return invariant.IsPBPType(t) }

// seqLeave reports a Leave of a member of a total-order group.
func (a *analysis) seqLeave(v frame.View) bool {
	return v.Type() == frame.Leave && a.seqSenders[senderKey{v.Sender(), v.Incarnation(), v.ViewID()}]
}

// seqEpoch is one sequencer's term as the capture shows it.
type seqEpoch struct {
	epoch            uint32
	sequencer        frame.MemberID
	lo, hi           uint32
	has              bool
	byData, byAccept int // globals first numbered by SeqData, by Accept
	changes          int // globals first numbered by SeqMember (member changes)
	retx             int // SeqData retransmissions
	changeRetx       int // SeqMember retransmissions
	statusReqs       int
	firstFrame       int
}

// seqRequester is one member's requests and control frames.
type seqRequester struct {
	first, resent, msgs int
	retransmitReqs      int
	retransmitGlobals   int
	statusReplies       int
	electionFrames      int
	leaves              int
	lo, hi              uint32 // request numbers
	has                 bool
	highestCursor       uint32
	hasCursor           bool
}

// seqElection is one Elected frame.
type seqElection struct {
	frame     int
	at        time.Time
	epoch     uint32
	candidate frame.MemberID
	last      uint32
}

// seqView is what one receiver had of the global sequence.
type seqView struct {
	name    string
	iface   int
	self    frame.MemberID // the member whose interface this is; NoMember if unknown
	end     uint32         // one past the highest global known numbered
	filled  map[uint32]bool
	missing map[uint32]*Gap
	gaps    []*Gap
	uids    map[frame.UID]bool
	waiting map[frame.UID][]uint32 // accepted globals waiting for their request
	jumps   []int
	budget  *int
	// received counts SeqData and Accept entries, duplicates included.
	received, dups int
	// The delivered-cursor check.
	cursor          uint32
	hasCursor       bool
	cursorBad       bool
	cursorViolation *Violation
	cursorMissing   bool // cursorViolation names a global the interface had not received
	pending         []pendingCursor
}

// learn records that every global before end is numbered.
func (v *seqView) learn(end uint32, r *Record) {
	if !frame.SeqLess(v.end, end) {
		return
	}
	if frame.SeqDiff(end, v.end) > maxJump || *v.budget <= 0 {
		v.jumps = append(v.jumps, r.N)
		return
	}
	*v.budget -= int(end - v.end)
	for g := v.end; g != end; g++ {
		if !v.filled[g] && v.missing[g] == nil {
			gp := &Gap{Seq: g, Opened: r.Time, OpenFrame: r.N}
			v.missing[g] = gp
			v.gaps = append(v.gaps, gp)
		}
	}
	v.end = end
}

// fill records that the view has global g.
func (v *seqView) fill(g uint32, r *Record) {
	v.received++
	if v.filled[g] {
		v.dups++
		return
	}
	if gp := v.missing[g]; gp != nil {
		gp.Repaired, gp.RepairFrame = r.Time, r.N
		delete(v.missing, g)
	} else if r.View != nil && r.View.Retransmission() && !frame.SeqLess(g, v.end) {
		v.learn(g, r)
		v.gaps = append(v.gaps, &Gap{Seq: g, Opened: r.Time, OpenFrame: r.N, Repaired: r.Time, RepairFrame: r.N, ViaRetransmit: true})
	} else {
		v.learn(g, r)
	}
	v.filled[g] = true
	if !frame.SeqLess(g, v.end) {
		v.end = g + 1
	}
}

// accepted records an Accept of global g for request u: the view has g
// once it has u's payload too.
func (v *seqView) accepted(g uint32, u frame.UID, r *Record) {
	if v.uids[u] {
		v.fill(g, r)
		return
	}
	if v.filled[g] {
		v.received++
		v.dups++
		return
	}
	v.learn(g+1, r)
	v.waiting[u] = append(v.waiting[u], g)
}

// request records that the view has request u's payload.
func (v *seqView) request(u frame.UID, r *Record) {
	v.uids[u] = true
	for _, g := range v.waiting[u] {
		v.fill(g, r)
	}
	delete(v.waiting, u)
}

// discard forgets globals after last: an election agreed that nothing
// beyond it was numbered, so a later epoch numbers them again.
func (v *seqView) discard(last uint32) {
	if !frame.SeqLess(last+1, v.end) {
		return
	}
	// Over the maps, not the range: a hostile capture can make the range
	// long.
	for g, gp := range v.missing {
		if frame.SeqLess(last, g) {
			gp.Discarded = true
			delete(v.missing, g)
		}
	}
	for g := range v.filled {
		if frame.SeqLess(last, g) {
			delete(v.filled, g)
		}
	}
	for u, gs := range v.waiting {
		kept := gs[:0]
		for _, g := range gs {
			if !frame.SeqLess(last, g) {
				kept = append(kept, g)
			}
		}
		if len(kept) == 0 {
			delete(v.waiting, u)
		} else {
			v.waiting[u] = kept
		}
	}
	v.end = last + 1
}

// seqAnalysis is everything summary and check need of the sequencer
// protocol.
type seqAnalysis struct {
	frames     int
	base       uint32
	hasBase    bool
	epochs     map[uint32]*seqEpoch
	elections  []seqElection
	requesters map[senderKey]*seqRequester
	views      []*seqView
}

func analyseSeq(c *Capture, a *analysis) *seqAnalysis {
	s := &seqAnalysis{epochs: map[uint32]*seqEpoch{}, requesters: map[senderKey]*seqRequester{}}
	// Base: the lowest global numbered, or a lower delivered cursor (the
	// initial global, before the first delivery).
	var minCursor uint32
	hasCursor := false
	for _, r := range a.order {
		v := r.View
		if v == nil || !isSeqType(v.Type()) {
			continue
		}
		s.frames++
		lowest := func(g uint32) {
			if !s.hasBase || frame.SeqLess(g, s.base) {
				s.base, s.hasBase = g, true
			}
		}
		switch v.Type() {
		case frame.SeqData, frame.SeqMember:
			lowest(v.Seq())
		case frame.SeqAccept:
			al := v.Accepts()
			for i := range al.Len() {
				lowest(al.At(i).Global)
			}
		}
		if v.AckCount() >= 1 {
			if !hasCursor || frame.SeqLess(v.Ack(0), minCursor) {
				minCursor, hasCursor = v.Ack(0), true
			}
		}
	}
	if s.frames == 0 {
		return s
	}
	switch {
	case !s.hasBase && hasCursor:
		s.base, s.hasBase = minCursor, true
	case hasCursor && frame.SeqLess(minCursor, s.base) && frame.SeqDiff(s.base, minCursor) < maxJump:
		s.base = minCursor
	}

	s.transmissions(a)

	budget := gapBudget
	newView := func(name string, iface int) *seqView {
		return &seqView{name: name, iface: iface, self: frame.NoMember, end: s.base, filled: map[uint32]bool{}, missing: map[uint32]*Gap{},
			uids: map[frame.UID]bool{}, waiting: map[frame.UID][]uint32{}, budget: &budget}
	}
	if c.HasDirection {
		for i := range c.Interfaces {
			s.views = append(s.views, newView(c.Interfaces[i].Label(), i))
		}
	} else {
		s.views = append(s.views, newView("capture", -1))
	}
	for _, r := range a.order {
		v := r.View
		if v == nil || !(isSeqType(v.Type()) || a.seqLeave(v)) {
			continue
		}
		if !c.HasDirection {
			s.views[0].step(r, false)
			continue
		}
		if r.Dir == DirIn || r.Dir == DirOut {
			s.views[r.Iface].step(r, r.Dir == DirOut)
		}
	}
	for _, vw := range s.views {
		vw.flushCursors(time.Time{}, true)
	}
	// A gap filled at the instant it opened was no loss: an Accept names
	// the highest global numbered, including the SeqData sent right
	// after it.
	for _, vw := range s.views {
		kept := vw.gaps[:0]
		for _, g := range vw.gaps {
			if g.ViaRetransmit || g.Repaired.IsZero() || !g.Repaired.Equal(g.Opened) {
				kept = append(kept, g)
			}
		}
		vw.gaps = kept
	}
	return s
}

// step applies one frame of the view's interface (out: sent by it).
func (vw *seqView) step(r *Record, out bool) {
	vw.flushCursors(r.Time, false)
	v := r.View
	if out && vw.self == frame.NoMember {
		vw.self = v.Sender()
	}
	switch v.Type() {
	case frame.SeqRequest:
		vw.request(frame.UID{Origin: v.Sender(), Incarnation: v.Incarnation(), Seq: v.Seq()}, r)
	case frame.SeqData, frame.SeqMember:
		vw.fill(v.Seq(), r)
	case frame.SeqAccept:
		al := v.Accepts()
		for i := range al.Len() {
			e := al.At(i)
			vw.accepted(e.Global, e.UID, r)
		}
		if !out { // the sequencer's own: it numbers them, it misses none
			vw.learn(v.Seq()+1, r)
		}
	case frame.SeqStatusRequest:
		if !out {
			vw.learn(v.StatusDelivered()+1, r)
		}
	case frame.SeqElection:
		if e := v.Election(); e.Phase == frame.ElectionElected {
			vw.discard(e.LastGlobal)
			vw.learn(e.LastGlobal+1, r)
		}
	}
	if out && v.AckCount() >= 1 && v.Sender() == vw.self {
		// Checked once every frame of this instant is in: one Ready's
		// frames share a send time, and each carries the cursor at Ready,
		// past globals its later frames (an Accept) number.
		vw.pending = append(vw.pending, pendingCursor{v.Ack(0), r})
	}
}

// pendingCursor is a delivered cursor to check once its instant is over.
type pendingCursor struct {
	cursor uint32
	r      *Record
}

// flushCursors checks the cursors of frames sent before now.
func (vw *seqView) flushCursors(now time.Time, all bool) {
	k := 0
	for ; k < len(vw.pending) && (all || vw.pending[k].r.Time.Before(now)); k++ {
		vw.checkCursor(vw.pending[k].cursor, vw.pending[k].r)
	}
	vw.pending = vw.pending[k:]
}

// checkCursor: the member delivered every global before cursor, so its
// interface must have had each of them (from the cursor its first frame
// showed on); and a cursor never goes back.
func (vw *seqView) checkCursor(cursor uint32, r *Record) {
	if vw.cursorBad {
		return
	}
	if !vw.hasCursor {
		vw.cursor, vw.hasCursor = cursor, true
		return
	}
	if frame.SeqLess(cursor, vw.cursor) {
		vw.cursorBad = true
		vw.cursorViolation = &Violation{Kind: invariant.KindOrder, Frames: []int{r.N}, Time: r.Time,
			Detail: fmt.Sprintf("at %s: member %d's delivered cursor went back from %d to %d", vw.name, vw.self, vw.cursor, cursor)}
		return
	}
	if frame.SeqDiff(cursor, vw.cursor) > maxJump {
		vw.cursor = cursor
		return
	}
	for g := vw.cursor; g != cursor; g++ {
		if !vw.filled[g] {
			vw.cursorBad, vw.cursorMissing = true, true
			vw.cursorViolation = &Violation{Kind: invariant.KindOrder, Frames: []int{r.N}, Time: r.Time,
				Detail: fmt.Sprintf("at %s: member %d's delivered cursor is %d, so it delivered global %d, which its interface had not received", vw.name, vw.self, cursor, g)}
			return
		}
	}
	vw.cursor = cursor
}

// transmissions counts epochs, elections and each member's requests over
// the frames as transmitted.
func (s *seqAnalysis) transmissions(a *analysis) {
	firstNumbered := map[[2]uint32]bool{}
	for _, r := range a.txs {
		v := r.View
		if v == nil || !(isSeqType(v.Type()) || a.seqLeave(v)) {
			continue
		}
		k := senderKey{v.Sender(), v.Incarnation(), v.ViewID()}
		req := s.requesters[k]
		if req == nil {
			req = &seqRequester{}
			s.requesters[k] = req
		}
		if v.AckCount() >= 1 && (!req.hasCursor || frame.SeqLess(req.highestCursor, v.Ack(0))) {
			req.highestCursor, req.hasCursor = v.Ack(0), true
		}
		epoch := func(e uint32) *seqEpoch {
			ep := s.epochs[e]
			if ep == nil {
				ep = &seqEpoch{epoch: e, sequencer: v.Sender(), firstFrame: r.N}
				s.epochs[e] = ep
			}
			return ep
		}
		number := func(ep *seqEpoch, g uint32, by *int) {
			if !ep.has || frame.SeqLess(g, ep.lo) {
				ep.lo = g
			}
			if !ep.has || frame.SeqLess(ep.hi, g) {
				ep.hi = g
			}
			ep.has = true
			if firstNumbered[[2]uint32{ep.epoch, g}] {
				return
			}
			firstNumbered[[2]uint32{ep.epoch, g}] = true
			*by++
		}
		switch v.Type() {
		case frame.SeqRequest:
			if v.Retransmission() {
				req.resent++
			} else {
				req.first++
				for it := v.Messages(); ; req.msgs++ {
					if _, ok := it.Next(); !ok {
						break
					}
				}
			}
			if !req.has || frame.SeqLess(v.Seq(), req.lo) {
				req.lo = v.Seq()
			}
			if !req.has || frame.SeqLess(req.hi, v.Seq()) {
				req.hi = v.Seq()
			}
			req.has = true
		case frame.SeqData:
			ep := epoch(v.SeqDataEpoch())
			if v.Retransmission() {
				ep.retx++
			}
			number(ep, v.Seq(), &ep.byData)
		case frame.SeqMember:
			ep := epoch(v.SeqMemberChange().Epoch)
			if v.Retransmission() {
				ep.changeRetx++
			}
			number(ep, v.Seq(), &ep.changes)
		case frame.SeqAccept:
			ep := epoch(v.AcceptEpoch())
			al := v.Accepts()
			for i := range al.Len() {
				number(ep, al.At(i).Global, &ep.byAccept)
			}
		case frame.SeqStatusRequest:
			epoch(v.StatusEpoch()).statusReqs++
		case frame.SeqStatusReply:
			req.statusReplies++
		case frame.SeqRetransmit:
			req.retransmitReqs++
			rl := v.RetransmitRanges()
			for i := range rl.Len() {
				rg := rl.At(i)
				req.retransmitGlobals += int(min(rg.Last-rg.First, maxJump)) + 1
			}
		case frame.Leave:
			req.leaves++
		case frame.SeqElection:
			req.electionFrames++
			if e := v.Election(); e.Phase == frame.ElectionElected {
				s.elections = append(s.elections, seqElection{frame: r.N, at: r.Time, epoch: e.Epoch, candidate: e.Candidate, last: e.LastGlobal})
			}
		}
	}
}

// check returns the sequencer protocol's violations that need the whole
// capture: gaps never repaired, cursor violations, implausible jumps.
func (s *seqAnalysis) check(a *analysis) []Violation {
	var out []Violation
	for _, vw := range s.views {
		for _, g := range vw.gaps {
			if g.Repaired.IsZero() && !g.Discarded {
				out = append(out, Violation{Kind: invariant.KindGap, Frames: []int{g.OpenFrame}, Time: g.Opened, Doubt: a.doubt(vw.iface, -1),
					Detail: fmt.Sprintf("at %s: global %d, missing since frame %d, never received by the end of the capture", vw.name, g.Seq, g.OpenFrame)})
			}
		}
		for _, n := range vw.jumps {
			out = append(out, Violation{Kind: invariant.KindImplausible, Frames: []int{n}, Doubt: a.doubt(vw.iface, n),
				Detail: fmt.Sprintf("at %s: the global sequence jumps more than %d past %d", vw.name, maxJump, vw.end)})
		}
		if v := vw.cursorViolation; v != nil {
			if vw.cursorMissing {
				v.Doubt = a.doubt(vw.iface, v.Frames[0])
			}
			out = append(out, *v)
		}
	}
	return out
}
