package seq

import "github.com/rbcast/rbcast/frame"

// The sequencer's side: numbering requests, the history buffer and its
// garbage collection, duplicates, member failure.

// historyFull reports whether numbering one more global would reuse the
// log slot of a global some live member has not delivered.
func (c *Core) historyFull() bool { return int(c.nextGlobal-c.stable) >= c.cfg.History }

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
		if c.historyFull() {
			c.computeStable() // our own deliveries count too
		}
		if c.historyFull() {
			if !c.waiting {
				c.stats.HistoryFull++
			}
			c.waiting, c.wantStatus = true, true
			return
		}
		g := c.nextGlobal
		c.nextGlobal++
		en := &c.log[g&c.lmask]
		en.global, en.epoch, en.state, en.bundled = g, c.epoch, full, bundled
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
	return (frame.MaxPayload(c.cfg.MTU, ackEntries, 0) - 6) / 14
}

// flushAccepts sends the collected Accepts in one frame ("accepts for
// several messages share one frame").
func (c *Core) flushAccepts() {
	if len(c.accepts) == 0 {
		return
	}
	c.accept.Epoch, c.accept.Entries = c.epoch, c.accepts
	c.header(c.nextGlobal-1, 0)
	c.emit(c.cfg.dst, &c.accept)
	c.stats.AcceptsSent += uint64(len(c.accepts))
	c.stats.AcceptFrames++
	c.accepts = c.accepts[:0]
	c.accept.Entries = nil
}

// applyAck takes the piggybacked acknowledgement: ack[0] of every frame
// is the sender's delivered cursor.
func (c *Core) applyAck(m *member, v frame.View) {
	if v.AckCount() >= 1 {
		c.ack(m, v.Ack(0))
	}
}

func (c *Core) ack(m *member, a uint32) {
	if !m.live || !frame.SeqLess(m.acked, a) || frame.SeqLess(c.nextGlobal, a) {
		return
	}
	m.acked = a
	c.advanceStable()
}

// advanceStable recomputes stable, the least delivered cursor of the live
// members, and frees the history below it; waiting requests are numbered.
func (c *Core) advanceStable() {
	if c.computeStable() && c.waiting && !c.historyFull() {
		c.sequenceAll()
	}
}

func (c *Core) computeStable() (moved bool) {
	s := c.nextGlobal
	for i := range c.members {
		if m := &c.members[i]; m.live && frame.SeqLess(m.acked, s) {
			s = m.acked
		}
	}
	moved = s != c.stable
	c.stable = s
	return moved
}

// removeMember takes m out of the group: it no longer holds back the
// history, and its frames are refused.
func (c *Core) removeMember(m *member, reason string) {
	if !m.live {
		return
	}
	m.live = false
	c.stats.MembersFailed++
	c.events = append(c.events, Event{Kind: MemberFailed, Member: m.id, Epoch: c.epoch, Last: m.acked, At: c.now, Reason: reason})
	c.advanceStable()
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
		if en.global != g || en.state != full || en.uid.Origin != o.id {
			continue
		}
		o.dupAt = c.now
		c.stats.DuplicatesAnswered++
		if c.method2(len(en.data)) {
			c.flushAccepts()
			c.accept.Epoch = c.epoch
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
	c.sendStatusRequest(o.mac)
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
	m.live, m.acked, m.probeAt = true, a, 0
	c.computeStable()
	c.stats.MembersReturned++
	c.events = append(c.events, Event{Kind: MemberReturned, Member: m.id, Epoch: c.epoch, Last: a - 1, At: c.now})
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
	c.sendStatusRequest(m.mac)
}
