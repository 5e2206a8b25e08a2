package seq

import "github.com/rbcast/rbcast/frame"

// The sequencer's side: numbering requests, the history buffer and its
// garbage collection, duplicates, member failure.

// historyFull reports whether numbering one more global would reuse the
// log slot of a global some live member has not delivered.
func (c *Core) historyFull() bool { return int(c.nextGlobal-c.stable) >= c.cfg.History }

// claimGlobal takes the next global number and its log slot, which the
// caller fills. With the history full (after counting our own deliveries)
// it returns nil and marks the sequencer waiting for status.
func (c *Core) claimGlobal() (uint32, *entry) {
	if c.historyFull() {
		c.computeStable() // our own deliveries count too
	}
	if c.historyFull() {
		if !c.waiting {
			c.stats.HistoryFull++
		}
		c.waiting, c.wantStatus = true, true
		return 0, nil
	}
	g := c.nextGlobal
	c.nextGlobal++
	if !c.gated() {
		c.safe = c.nextGlobal // the frame the caller sends carries it
	}
	return g, &c.log[g&c.lmask]
}

// method2 reports whether a request of n payload bytes goes by method 2:
// broadcast by its sender and answered with an Accept.
func (c *Core) method2(n int) bool {
	switch c.cfg.Method {
	case Method1:
		return false
	case Method2:
		return true
	}
	return n >= c.cfg.Threshold
}

// sequenceFrom numbers o's requests that are next in o's order. Requests
// are numbered in the order their origin made them: the duplicate filter
// is "highest request number sequenced" per origin, which must not skip.
func (c *Core) sequenceFrom(o *member) {
	if c.leaving && !o.self {
		// A leaving sequencer numbers nothing more: its successor will,
		// once the senders resubmit after the election.
		return
	}
	for {
		r := o.seqdSeq + 1
		var data []byte
		var bundled bool
		var q *request
		if o.self {
			if !frame.SeqLess(r, c.nextReq) || frame.SeqLess(r, c.firstPend) {
				return
			}
			data, bundled = requestBody(&c.pend[r&c.rmask])
		} else {
			if o.inbox == nil {
				return
			}
			q = &o.inbox[r&c.rmask]
			if !q.full || q.seq != r {
				return
			}
			data, bundled = q.data, q.bundled
		}
		g, en := c.claimGlobal()
		if en == nil {
			return
		}
		en.global, en.epoch, en.state, en.bundled, en.change = g, c.epoch, full, bundled, 0
		en.uid = frame.UID{Origin: o.id, Incarnation: o.inc, Seq: r}
		if q != nil {
			old := c.reusable(en)
			en.data, q.data = q.data, old // move, do not copy
			q.full = false
		} else {
			en.data = append(c.reusable(en), data...)
		}
		o.seqdSeq = r
		c.stats.Sequenced++
		if !o.self && c.method2(len(en.data)) {
			c.accepts = append(c.accepts, frame.AcceptEntry{Global: g, UID: en.uid})
			if len(c.accepts) >= c.maxAccepts() {
				c.flushAccepts()
			}
		} else {
			c.flushAccepts() // Accepts for lower numbers go first: no false gap
			c.sendData(en, c.cfg.dst, 0)
			c.stats.DataSent++
		}
		c.knownEnd = c.nextGlobal
		c.drain()
		if 2*int(c.nextGlobal-c.stable) >= c.cfg.History {
			// Half the history in use: ask for status before it fills
			// (the paper's sequencer asks every 64 messages when nobody
			// piggybacks acknowledgements).
			c.wantStatus = true
		}
	}
}

// sequenceAll numbers whatever waits, origins in turn.
func (c *Core) sequenceAll() {
	c.waiting = false
	c.announceChanges()
	if c.waiting {
		return
	}
	n := len(c.members)
	for k := range n {
		o := &c.members[(c.rr+k)%n]
		if o.live {
			c.sequenceFrom(o)
		}
	}
	c.rr = (c.rr + 1) % n
}

// maxAccepts is how many Accept entries fit one frame.
func (c *Core) maxAccepts() int {
	return (frame.MaxPayload(c.cfg.MTU, ackEntries, 0) - acceptHead) / 14
}

// flushAccepts sends the collected Accepts in one frame ("accepts for
// several messages share one frame").
func (c *Core) flushAccepts() {
	if len(c.accepts) == 0 {
		return
	}
	c.accept.Epoch, c.accept.Safe, c.accept.Held, c.accept.Entries = c.epoch, c.safe, c.held, c.accepts
	c.safeSent, c.heldSent = c.safe, c.held
	c.header(c.nextGlobal-1, 0)
	c.emit(c.cfg.dst, &c.accept)
	c.stats.AcceptsSent += uint64(len(c.accepts))
	c.stats.AcceptFrames++
	c.accepts = c.accepts[:0]
	c.accept.Entries = nil
}

// applyAck takes the piggybacked acknowledgement: ack[0] of every frame
// is the sender's delivered cursor, ack[1] its received cursor.
func (c *Core) applyAck(m *member, v frame.View) {
	if v.AckCount() >= 2 {
		c.received(m, v.Ack(1))
	}
	if v.AckCount() >= 1 {
		c.ack(m, v.Ack(0))
	}
}

// received takes m's received cursor: the safe point may move.
func (c *Core) received(m *member, a uint32) {
	if !m.live || !frame.SeqLess(m.rcvd, a) || frame.SeqLess(c.nextGlobal, a) {
		return
	}
	m.rcvd = a
	c.drain()
}

func (c *Core) ack(m *member, a uint32) {
	if !m.live || !frame.SeqLess(m.acked, a) || frame.SeqLess(c.nextGlobal, a) {
		return
	}
	m.acked = a
	if frame.SeqLess(m.rcvd, a) {
		m.rcvd = a
	}
	c.advanceStable()
}

// gated reports whether delivery waits for the safe point: under
// SafeMajority with more than one holder needed (groups of one or two
// members, or what is left of a group after leaves, deliver at once).
func (c *Core) gated() bool { return c.cfg.Resilience == SafeMajority && c.holders > 1 }

// safeHolders is how many members must hold a global before it is safe:
// enough that every election completing with quorum() votes has a holder
// among its voters (n - quorum + 1: ⌈n/2⌉ with the default majority).
// With the default quorum, fewer live members than that stop delivery
// (computeSafe); with a lowered Quorum, which trusts the failure
// detector, the live members suffice.
func (c *Core) safeHolders() int {
	n := 0
	for i := range c.members {
		if !c.members[i].gone {
			n++
		}
	}
	return max(1, n-c.quorum()+1)
}

// computeSafe (at the sequencer): the safe cursor is the k-th highest
// received cursor of the live members, itself included.
func (c *Core) computeSafe() {
	if !c.gated() {
		c.safe = c.nextGlobal
		return
	}
	k := c.holders
	d := c.scratch[:0]
	for i := range c.members {
		if m := &c.members[i]; m.live || m.self {
			d = append(d, c.nextGlobal-m.rcvd)
		}
	}
	c.scratch = d
	if k > len(d) {
		if c.cfg.majority {
			// Fewer live members than a majority needs: we may be cut
			// off on a minority side. Deliver nothing more (the others
			// may be electing); the removed come back or we halt.
			return
		}
		k = len(d) // a lowered Quorum trusts the failure detector
	}
	for i := 1; i < len(d); i++ { // insertion sort: a handful of members
		for j := i; j > 0 && d[j] < d[j-1]; j-- {
			d[j], d[j-1] = d[j-1], d[j]
		}
	}
	if s := c.nextGlobal - d[k-1]; frame.SeqLess(c.safe, s) {
		c.safe = s
	}
}

// advanceStable recomputes stable, the least delivered cursor of the live
// members, and frees the history below it; waiting requests are numbered.
func (c *Core) advanceStable() {
	if c.computeStable() && c.waiting && !c.historyFull() {
		c.sequenceAll()
	}
	if c.role == sequencer {
		c.drain() // the safe point may have moved (acks, removals)
	}
}

func (c *Core) computeStable() (moved bool) {
	s := c.nextGlobal
	for i := range c.members {
		if m := &c.members[i]; m.live && frame.SeqLess(m.acked, s) {
			s = m.acked
		}
	}
	if frame.SeqLess(c.next, s) {
		s = c.next // (our own entry's acked is c.next too)
	}
	moved = s != c.stable
	c.stable = s
	return moved
}

// removeMember takes m out of the group: it no longer holds back the
// history, and its frames are refused. The group learns it from a
// SeqMember entry in the stream (announceChanges); MemberFailed is
// reported where it is delivered, here too.
func (c *Core) removeMember(m *member, why frame.RemovalReason) {
	if !m.live {
		return
	}
	m.live, m.removedFor = false, why
	c.advanceStable()
	c.announceChanges()
}

// announceChanges numbers a SeqMember entry for each member whose
// liveness here differs from what the numbered stream says (removed,
// or taken back) and broadcasts it: every member delivers it at its
// place in the total order and reports MemberFailed or MemberReturned
// then. A removal and a readmission that both wait for history room
// cancel out. Repairs, and the elections' agreement on the last global,
// treat the entry as any numbered message: a lost one is asked for, and
// one no voter holds is announced again by the next sequencer, which
// finds the member not live (takeover). Ourselves included: a member the
// stream removed that is then elected (it still heard the stream, its
// frames to the old sequencer were lost) numbers its own readmission.
func (c *Core) announceChanges() {
	for i := range c.members {
		m := &c.members[i]
		if m.gone || m.live == m.streamLive {
			continue
		}
		g, en := c.claimGlobal()
		if en == nil {
			return
		}
		en.data = c.reusable(en)
		en.global, en.epoch, en.state, en.bundled = g, c.epoch, full, false
		en.uid = frame.UID{Origin: m.id, Incarnation: m.inc}
		en.change, en.reason = frame.MemberReadmitted, frame.ReasonNone
		if !m.live {
			en.change, en.reason = frame.MemberRemoved, m.removedFor
		}
		m.streamLive = m.live
		c.stats.Sequenced++
		c.flushAccepts() // Accepts for lower numbers go first: no false gap
		c.sendChange(en, c.cfg.dst, 0)
		c.knownEnd = c.nextGlobal
		c.drain()
	}
}

// answerDuplicate answers a request already numbered: its sender has not
// seen the number. It gets the SeqData (method 1) or Accept (method 2) of
// its latest numbered request, point to point; from it the sender learns
// how far the stream goes and asks for any gap. At most one answer per
// NackTimeout/2 per origin: a burst of retransmitted requests needs one.
func (c *Core) answerDuplicate(o *member) {
	if o.dupAt != 0 && c.now < o.dupAt.Add(c.cfg.NackTimeout/2) {
		return
	}
	for g := c.nextGlobal - 1; frame.SeqLess(g, c.nextGlobal) && !frame.SeqLess(g, c.stable) && int(c.nextGlobal-g) <= c.cfg.History; g-- {
		en := &c.log[g&c.lmask]
		if en.global != g || en.state != full || en.uid.Origin != o.id || en.change != 0 {
			continue
		}
		o.dupAt = c.now
		c.stats.DuplicatesAnswered++
		if c.method2(len(en.data)) {
			c.flushAccepts()
			c.accept.Epoch, c.accept.Safe, c.accept.Held = c.epoch, c.safe, c.held
			c.accept.Entries = append(c.accepts[:0], frame.AcceptEntry{Global: g, UID: en.uid})
			c.header(c.nextGlobal-1, frame.FlagRetransmit)
			c.emit(o.mac, &c.accept)
			c.accept.Entries = nil
			return
		}
		c.sendData(en, o.mac, frame.FlagRetransmit)
		return
	}
	// Nothing of it in the history (all stable): a status request tells
	// it how far the stream goes.
	o.dupAt = c.now
	c.sendStatusRequest(o.mac, true)
}

// readmit takes back a removed member that reports (in a status reply of
// our epoch) having delivered every global before a, when every global
// from a on is still in the history: it was removed for a silence it
// survived (a burst of loss, a stall, a vote that came late), and can
// catch up. Otherwise it stays removed, and tellRemoved lets it find out.
func (c *Core) readmit(m *member, a uint32) bool {
	if frame.SeqLess(c.nextGlobal, a) || int(c.nextGlobal-a) > c.cfg.History {
		return false
	}
	m.live, m.acked, m.rcvd, m.probeAt = true, a, a, 0
	c.computeStable()
	c.announceChanges() // MemberReturned, where the group delivers it
	return true
}

// tellRemoved answers a removed member, at most four times a heartbeat,
// with a status request: it replies, and is taken back (readmit) if what
// it lacks is still in the history; if not, the status request shows it
// numbers more than History beyond what it delivered, and it halts.
func (c *Core) tellRemoved(m *member) {
	if c.now < m.probeAt {
		return
	}
	m.probeAt = c.now.Add(c.cfg.HeartbeatInterval / 4)
	c.sendStatusRequest(m.mac, true)
}
