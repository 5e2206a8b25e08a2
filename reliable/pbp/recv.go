package pbp

import (
	"fmt"

	"github.com/rbcast/rbcast/frame"
)

// Step handles one received frame, already validated by frame.Parse (the
// group is checked again here). src and dst are its Ethernet addresses: a
// retransmission addressed to our own MAC answers one of our Nacks, and
// the frames we asked for before it and still miss are then known lost
// (findLost). An ordinary Data frame to our MAC (a pair's, Config.Unicast)
// is no repair: the Retransmit flag tells them apart. A frame that is dropped changes no protocol state; the
// returned error says why (errors.Is with the Err* values) and the drop
// is counted. Duplicates are normal, counted, and return nil. A View
// shorter than a header, which Parse never returns, is refused with
// frame.ErrShort and not counted.
//
// Messages delivered by this frame may alias v: the runtime keeps v's
// bytes valid until Advance.
func (c *Core) Step(now Time, src, dst [6]byte, v frame.View) error {
	c.touch(now)
	if c.left {
		return ErrLeft
	}
	if len(v) < frame.HeaderLen {
		// Not from frame.Parse. Also proves to the compiler every
		// header field read below in bounds: no check at each.
		return fmt.Errorf("%w: %d bytes, need at least %d", frame.ErrShort, len(v), frame.HeaderLen)
	}
	if g := v.Group(); g != c.cfg.Group {
		c.stats.WrongGroup++
		return fmt.Errorf("%w: group %d, this member is in group %d", ErrGroup, g, c.cfg.Group)
	}
	if w := v.ViewID(); w != c.cfg.ViewID {
		c.stats.WrongView++
		return fmt.Errorf("%w: view %d, this core runs view %d", ErrView, w, c.cfg.ViewID)
	}
	id := v.Sender()
	p, self := c.peer(id)
	switch {
	case self:
		if src == c.cfg.selfMAC && v.Incarnation() == c.cfg.selfInc {
			return nil // our own broadcast, looped back
		}
		c.stats.WrongMAC++
		return fmt.Errorf("%w: frame claims our own id %d from %x", ErrSourceMAC, id, src)
	case p == nil:
		c.stats.NotMember++
		return fmt.Errorf("%w: sender id %d (from %x)", ErrNotMember, id, src)
	case v.Incarnation() != p.incarnation:
		c.stats.WrongIncarnation++
		return fmt.Errorf("%w: member %d incarnation %d, expected %d", ErrIncarnation, id, v.Incarnation(), p.incarnation)
	case src != p.mac:
		c.stats.WrongMAC++
		return fmt.Errorf("%w: member %d from %x, its MAC is %x", ErrSourceMAC, id, src, p.mac)
	case !p.live:
		c.stats.FromRemoved++
		return fmt.Errorf("%w: member %d", ErrRemoved, id)
	}
	t := v.Type()
	if p.holding && c.now >= p.holdUntil {
		p.holding = false // the hold's bound passed (hold.go)
		c.unhold(p)
	}
	if t != frame.Data { // Data, the most frames, is tested once
		switch t {
		case frame.Ack, frame.Heartbeat, frame.Nack, frame.Leave:
		case frame.Datagram:
			p.lastHeard = c.now
			c.onDatagram(p, v) // a hold does not stop them (hold.go)
			return nil
		case frame.ViewRelay:
			if !c.cfg.Relay {
				c.stats.UnhandledTypes++
				return fmt.Errorf("%w: %v from member %d (Relay is not set)", ErrFrameType, t, id)
			}
		default:
			c.stats.UnhandledTypes++
			return fmt.Errorf("%w: %v from member %d", ErrFrameType, t, id)
		}
	}
	p.lastHeard = c.now
	if c.removedUs(p, t, v.Seq()) {
		c.stats.BeyondWindow++
		c.remove(p, MemberStalled, StalledRemovedUs)
		return nil
	}
	// Receive action 1, first step in every state: apply the piggybacked
	// acknowledgement (window_base[j] = max(...), figs. 3.4, 3.8, 3.10),
	// and keep the whole vector (the acknowledgement matrix, acks.go).
	a, ok := c.noteAcks(p, v)
	if !ok {
		a, ok = v.AckFor(c.cfg.Self)
	}
	if ok {
		c.applyAck(p, a)
	}
	switch t {
	case frame.Data:
		// A repair for us is a retransmission (its flag: what the frame
		// carries) addressed to our MAC. The address alone tells nothing:
		// in a pair (Config.Unicast) every frame comes to our MAC.
		repairToUs := v.Retransmission() && dst == c.cfg.selfMAC
		switch p.state {
		case normal:
			c.stepNormal(p, v, repairToUs)
		case repair:
			c.stepRepair(p, v, repairToUs)
		}
		if v.Flags()&frame.FlagAckRequest != 0 && c.cfg.answerAsks() {
			c.ackNow = true
		}
	case frame.Ack, frame.Heartbeat:
		// Seq is the last frame the sender sent: a lost tail shows here.
		c.learnEnd(p, v.Seq()+1, false)
		if v.Flags()&frame.FlagAckRequest != 0 {
			c.askedAck()
		}
	case frame.Nack:
		c.learnEnd(p, v.Seq()+1, false)
		if v.NackTarget() == c.cfg.Self {
			c.answerNack(p, v.NackRanges())
		}
	case frame.ViewRelay:
		// Seq is the last frame the relaying member sent, as an Ack's.
		c.learnEnd(p, v.Seq()+1, false)
		return c.onRelay(v)
	case frame.Leave:
		// Seq is the next sequence number the sender would have used.
		c.learnEnd(p, v.Seq(), false)
		p.leaving, p.leaveSeq = true, v.Seq()
		c.checkLeft(p)
	}
	return nil
}

// removedUs reports whether p's frame of type t with sequence number seq
// shows it more than a window past the acknowledgement we last sent it;
// Step then removes p. (removedUs inlines: every frame passes it.)
// A sender that counts us waits for us: its window starts at most at
// what it knows we acknowledged, which is at most p.turnExp (our frames
// leave only in a Ready, so nothing acknowledging more than we had
// delivered when this turn began has left), so it never sends a frame at
// p.turnExp+Window or later, nor names one in an Ack, Heartbeat, Nack or
// Leave. One that does has removed us (we started late, or were silent
// or stalled past its FailureTimeout) and ignores us from now on: what
// we miss from it can never be repaired, and nothing we send reaches it.
// So it is removed here too, at once, as MemberStalled with
// StalledRemovedUs, instead of being asked for lost frames forever. (A
// member configured with a larger Window than ours looks the same; every
// member must use the same.) Judged against expected as it moves, frames
// that arrive in order passed however far they went: a turn that read
// two windows of them delivered both (TestRemovedUsWithinOneTurn). This
// also keeps every sequence number handled after it within a window of
// p.expected (which is at least p.turnExp), as the reorder ring needs,
// and one turn's deliveries from p within a window.
//
// An old frame passes: one that does not end after p.knownEnd, which
// learnEnd ignores and accept takes for a duplicate. Old is judged
// against knownEnd, as learnEnd judges it, not against expected: half the
// number space from expected, serial arithmetic calls a frame both before
// expected and after knownEnd (up to a window further), and such a frame,
// let through, would make learnEnd set knownEnd half the number space
// away (a Nack scan of 2^31 ring slots, or gaps never seen again) or put
// a Data frame in a ring slot of the window.
func (c *Core) removedUs(p *peer, t frame.Type, seq uint32) bool {
	end := seq + 1 // Data: this frame; Ack, Heartbeat, Nack: the last one sent
	if t == frame.Leave {
		end = seq // the next it would have sent
	}
	return end-c.turnExpOf(p) > uint32(c.cfg.Window) && frame.SeqLess(p.knownEnd, end)
}

// applyAck takes p's acknowledgement of our frames, a (its vector's
// entry for us), and slides our window (send action 3, fig. 3.5).
func (c *Core) applyAck(p *peer, a uint32) {
	if frame.SeqLess(p.acked, a) {
		c.ackMoved(p, a)
	}
}

// ackMoved takes p's acknowledgement a, past the last (applyAck, which
// inlines without it).
func (c *Core) ackMoved(p *peer, a uint32) {
	if frame.SeqLess(c.nextSeq, a) {
		c.stats.BadAcks++ // acknowledges frames we never sent
		return
	}
	p.acked, p.ackedAt = a, c.now
	c.advanceStable()
}

// advanceStable recomputes wb, the minimum acknowledgement of the live
// members (a removed member counts as having acknowledged everything), and
// frees the history below it (send action 3, fig. 3.5).
func (c *Core) advanceStable() {
	m := c.nextSeq
	for i := range c.peers {
		p := &c.peers[i]
		if p.live && frame.SeqLess(p.acked, m) {
			m = p.acked
		}
	}
	if m == c.stable {
		return
	}
	if h := &c.history[(m-1)&c.hmask]; h.retxAt == 0 && h.sentAt != 0 {
		c.sampleAck(c.now.Sub(h.sentAt)) // Karn: never a retransmitted frame
	}
	for s := c.stable; s != m; s++ {
		h := &c.history[s&c.hmask]
		// The body stays until a later frame takes the slot (Own).
		h.retxAt, h.served, h.sentAt, h.unicast = 0, 0, 0, false
	}
	c.stable = m
	c.resendAt, c.backoff = 0, 0
	if c.inFlight() > 0 {
		c.resendAt = c.now.Add(c.resendTimeoutBase())
	}
	c.maybeLeave()
}

// sampleAck feeds one acknowledgement round trip into the estimator of
// the resend timer (RFC 6298).
func (c *Core) sampleAck(r Duration) {
	if c.ackSRTT == 0 {
		c.ackSRTT, c.ackRTTVar = max(r, 1), r/2
		return
	}
	d := c.ackSRTT - r
	if d < 0 {
		d = -d
	}
	c.ackRTTVar += (d - c.ackRTTVar) / 4
	c.ackSRTT = max(c.ackSRTT+(r-c.ackSRTT)/8, 1)
}

// stepNormal is receive action 1 in PBP2's normal state (thesis fig. 3.8),
// and PBP1's (fig. 3.4), which has no other state: an old frame is a
// duplicate to acknowledge again, the expected one is delivered with what
// it unblocks (action 2), a later one is held, and in PBP2 the gap before
// it is asked for at once and the sender enters the repair state.
func (c *Core) stepNormal(p *peer, v frame.View, repairToUs bool) {
	c.accept(p, v, repairToUs) // a gap moves p to repair, in learnEnd
}

// stepRepair is receive action 6, PBP2's need_resend state (thesis fig.
// 3.10), for one sender. Unlike the thesis, nothing is queued: frames
// filling the gap and frames beyond it are all held in the reorder ring,
// acks and Nacks of every member are handled, and other senders have
// repair states of their own. A new gap beyond what was asked for is asked
// for at once; the state ends when nothing from this sender is missing.
func (c *Core) stepRepair(p *peer, v frame.View, repairToUs bool) {
	c.accept(p, v, repairToUs)
	c.checkRepaired(p)
}

// accept is the part of receive actions 1 and 2 common to all states;
// repairToUs: the frame is a retransmission addressed to our MAC (the
// answer to one of our Nacks: a sender answers the first Nack for a frame
// at the asker's MAC, and in a pair every retransmission answers ours).
func (c *Core) accept(p *peer, v frame.View, repairToUs bool) {
	_ = v[frame.HeaderLen-1] // Step checked it: one bounds check, not one a field
	n := v.Seq()
	switch {
	case frame.SeqLess(n, p.expected):
		// Already delivered: the sender may be retransmitting because
		// our acknowledgement was lost; acknowledge again ("set ack
		// timer", fig. 3.4).
		c.stats.Duplicates++
		c.requestAck()
		return
	}
	// n is less than a window ahead of p.expected (removedUs).
	if h := &p.ring[n&c.mask]; v.Retransmission() && !h.full && h.seq == n && h.asked != 0 {
		// A retransmission of a frame we asked for and miss ends the
		// pending sample; one of a frame we hold or never asked for
		// answers another member's Nack, and taken as a sample it
		// pulled the timer below the round trip.
		if p.nackSentAt != 0 {
			p.sampleRepair(min(c.now.Sub(p.nackSentAt), c.nackCeiling()))
			p.nackSentAt = 0
		}
		if repairToUs {
			c.findLost(p, n, h.asked)
		}
	}
	c.learnEnd(p, n+1, true)
	if n == p.expected && !p.holding {
		c.deliverView(p, v)
		c.drain(p)
		return
	}
	h := &p.ring[n&c.mask]
	if h.full {
		c.stats.Duplicates++
		return
	}
	h.data = append(c.buffer(), v.Payload()...)
	h.seq, h.full, h.bundled = n, true, v.Flags()&frame.FlagBundle != 0
	p.buffered++
	c.stats.OutOfOrder++
}

// findLost flags the frames before n that are still missing although a
// Nack no later than the one that asked for n (round) asked for them. n's
// retransmission was addressed to us, so it answers one of our Nacks; the
// sender answers Nacks in order and the path keeps it, so their
// retransmissions (to us, or to the group, before it) came before n's and
// were lost. (A retransmission to the group may answer another member's
// Nack sent before ours, ahead of our frames: it proves nothing.) They are asked for again
// at the next Ready instead of after the nack timer (a repair timeout,
// 250 µs–4 ms; at 5% loss and 7 receivers a frame's retransmission is lost
// at some receiver once every ~70 frames, and each such loss held the
// sender's window for the whole timeout). Reordering on the path costs a
// needless retransmission, never a lost frame.
func (c *Core) findLost(p *peer, n, round uint32) {
	for m := p.expected; m != n; m++ {
		h := &p.ring[m&c.mask]
		if h.full || h.seq != m || h.asked == 0 || h.lost || int32(h.asked-round) > 0 {
			continue
		}
		h.lost = true
		if !p.nackDue {
			p.nackDue, p.nackFrom = true, p.knownEnd
		}
		p.reask, p.nackRepeat = true, true
	}
}

// learnEnd records that p has sent everything before end; arriving says
// the frame end-1 is being accepted now. In PBP2 a gap that appears is
// asked for at once, all of it in one Nack (flushed at the next Ready, so
// the gaps one batch of frames reveals share it).
//
// Frames Expect assumed sent are known missing only once a later frame
// (or the sender's Ack) proves them sent: then they are asked for at once,
// as a gap that appears is, instead of when the nack timer Expect armed
// fires (up to a NackTimeout later: before, a lost barrier frame whose
// successor arrived waited for the timer, where without the hint the
// successor's gap was asked for at once).
func (c *Core) learnEnd(p *peer, end uint32, arriving bool) {
	if p.hinting && frame.SeqLess(p.sentEnd, end) {
		from, last := p.sentEnd, end
		if frame.SeqLess(from, p.expected) {
			from = p.expected
		}
		if arriving {
			last--
		}
		p.sentEnd = end
		p.hinting = frame.SeqLess(end, p.knownEnd)
		if c.cfg.Mode == PBP2 && frame.SeqLess(from, last) && !p.nackDue {
			p.nackDue, p.nackFrom = true, from
		}
	}
	if !frame.SeqLess(p.knownEnd, end) {
		return
	}
	old := p.knownEnd
	p.knownEnd = end
	if arriving {
		end--
	}
	if c.cfg.Mode != PBP2 || old == end {
		return
	}
	// [old, end) is newly known and missing: nothing beyond knownEnd is
	// ever held.
	if !p.nackDue {
		p.nackDue, p.nackFrom = true, old
	}
	if p.state == normal {
		c.enterRepair(p)
	}
}

// enterRepair moves p to the repair state (need_resend) and starts its
// nack timer.
func (c *Core) enterRepair(p *peer) {
	p.state = repair
	p.nackAt = c.now.Add(c.nackTimeout(p))
	p.nackExpected, p.nackBackoff, p.nackArmed = p.expected, 0, c.now
}

// checkRepaired ends p's repair state when nothing is missing.
func (c *Core) checkRepaired(p *peer) {
	if p.state == repair && !frame.SeqLess(p.expected, p.knownEnd) {
		p.state, p.nackAt, p.nackDue, p.nackSentAt = normal, 0, false, 0
		p.hinting = false
		// A nack timer or lost retransmission the Nack never went out
		// for: the next gap's first Nack is a new request.
		p.nackRepeat, p.reask, p.timerDue = false, false, false
		c.stats.GapsRepaired++
	}
}

// deliverView delivers the frame at p.expected straight from the received
// bytes (receive action 2, fig. 3.4).
func (c *Core) deliverView(p *peer, v frame.View) {
	if p.kept != nil {
		// From the retained copy: a layer may hold its messages (Pin).
		c.deliverBody(p, c.keep(p, v.Body(), v.Flags()&frame.FlagBundle != 0), v.Flags()&frame.FlagBundle != 0)
		c.delivered(p)
		return
	}
	it := v.Messages()
	for i := 0; ; i++ {
		msg, ok := it.Next()
		if !ok {
			break
		}
		c.deliver(Delivery{From: p.id, Seq: p.expected, Index: i, Data: msg})
	}
	c.delivered(p)
}

// deliverBody delivers the messages of p's frame at p.expected from b,
// its body.
func (c *Core) deliverBody(p *peer, b []byte, bundled bool) {
	if !bundled {
		c.deliver(Delivery{From: p.id, Seq: p.expected, Data: b})
		return
	}
	for i := 0; len(b) >= 2; i++ {
		n := int(b[0])<<8 | int(b[1])
		c.deliver(Delivery{From: p.id, Seq: p.expected, Index: i, Data: b[2 : 2+n]})
		b = b[2+n:]
	}
}

// drain delivers held frames that are now in order (receive action 2).
func (c *Core) drain(p *peer) {
	for {
		h := &p.ring[p.expected&c.mask]
		if !h.full || h.seq != p.expected {
			break
		}
		// Retained, the frame stays in the buffer it waited in.
		if p.kept == nil || !c.keepHeld(p, h.data, h.bundled) {
			c.lent = append(c.lent, h.data)
		}
		c.deliverBody(p, h.data, h.bundled)
		*h = held{}
		p.buffered--
		c.delivered(p)
	}
	c.checkRepaired(p)
	c.checkLeft(p)
}

func (c *Core) deliver(d Delivery) {
	c.deliveries = append(c.deliveries, d)
	c.stats.Delivered++
}

// delivered advances exp_seqno[j] past a delivered frame and arranges
// for it to be acknowledged.
func (c *Core) delivered(p *peer) {
	if p.expTurn != c.batch {
		p.turnExp, p.expTurn = p.expected, c.batch // the first move this turn
	}
	p.expected++
	c.stats.DeliveredFrames++
	c.receipts++
	c.requestAck()
	// Half a window of receipts with nothing sent to carry the ack: ack
	// now, so a streaming sender never stops for the ack timer.
	if c.receipts >= max(1, c.cfg.Window/2) {
		c.ackNow = true
	}
}

// requestAck starts the ack timer, unless it runs already.
func (c *Core) requestAck() {
	if c.ackAt == 0 {
		c.ackAt = c.now.Add(c.cfg.AckDelay)
	}
}

// checkLeft removes p once its Leave arrived and everything before it was
// delivered.
func (c *Core) checkLeft(p *peer) {
	if p.live && p.leaving && !frame.SeqLess(p.expected, p.leaveSeq) {
		c.remove(p, MemberLeft, "")
	}
}

// remove takes p out of the group: from now on it counts as having
// acknowledged everything (thesis ch. 3), and what it sent beyond a gap is
// dropped, since only it could have filled the gap. reason is the
// Event's.
func (c *Core) remove(p *peer, kind EventKind, reason string) {
	p.live = false
	c.removals++
	if p.holding {
		// What a hold kept in order is delivered, as it would have been
		// without the hold (hold.go; not live, so drain cannot remove p
		// again).
		p.holding = false
		c.drain(p)
	}
	discarded := 0
	for i := range p.ring {
		h := &p.ring[i]
		if h.full {
			discarded += countMsgs(h.data, h.bundled)
			c.free = append(c.free, h.data[:0])
			*h = held{}
		}
	}
	p.buffered = 0
	p.state, p.nackDue, p.nackAt = normal, false, 0
	c.stats.Discarded += uint64(discarded)
	if kind == MemberLeft {
		p.left = true
		c.stats.MembersLeft++
	} else {
		c.stats.MembersFailed++
	}
	c.events = append(c.events, Event{Kind: kind, Member: p.id, At: c.now, Delivered: p.expected, Discarded: discarded, Reason: reason})
	c.advanceStable()
}

func countMsgs(b []byte, bundled bool) int {
	if !bundled {
		return 1
	}
	n := 0
	for len(b) >= 2 {
		b = b[2+(int(b[0])<<8|int(b[1])):]
		n++
	}
	return n
}

// buffer returns an empty buffer for a held frame.
func (c *Core) buffer() []byte {
	if n := len(c.free); n > 0 {
		b := c.free[n-1]
		c.free = c.free[:n-1]
		return b
	}
	return make([]byte, 0, c.cfg.linkMax)
}
