package seq

import "github.com/rbcast/rbcast/frame"

// The all-held point. The safe cursor (Config.Resilience) says when enough
// members hold a global to deliver it; a sender that wants to know that
// every live member holds its messages (rbcastd's Flush, and so
// `rbcastd send`, under Order Total) needs more: the all-held cursor,
// the lowest received cursor of the live members. The sequencer has every
// member's received cursor (the ack vector's ack[1], and status replies),
// computes it, and announces it next to the safe cursor in SeqData,
// SeqAccept and SeqStatusRequest (wire format v3). While it numbers and
// broadcasts, the cursor travels in those frames at no cost; a status
// request carries a move no such frame carried: at once when the cursor
// reaches the end of the numbered stream (every live member holds
// everything: the moment a waiting sender wants, and in a saturated
// stream a rare one), else NackTimeout after the last broadcast. A member
// removed (silent past FailureTimeout,
// left out of an election) or departed no longer holds it back.
//
// The cursor never moves back. A member taken back after a removal
// (MemberReturned) may hold less than it when it returns: it was not live
// when the cursor passed, and catches up from the history. So may a voter
// the sequencer before an election had removed when no voter holds the
// removal: the new sequencer counts it live without an entry (takeover).
//
// Each member counts its own messages not yet below the cursor
// (Stats.NotHeldByAll): those not yet delivered back, and those delivered
// back at a global number at or beyond it (the ring mine).

// computeHeld (at the sequencer) moves the all-held cursor to the lowest
// received cursor of the live members, itself included.
func (c *Core) computeHeld() {
	h := c.recvd
	for i := range c.members {
		if m := &c.members[i]; m.live && !m.self && frame.SeqLess(m.rcvd, h) {
			h = m.rcvd
		}
	}
	c.learnHeld(h)
}

// learnHeld takes an all-held cursor: computed here, or announced by our
// sequencer of the current epoch.
func (c *Core) learnHeld(h uint32) {
	if !frame.SeqLess(c.held, h) {
		return
	}
	c.held = h
	c.releaseMine()
}

// heldDue reports whether the sequencer owes the group an announcement of
// the all-held cursor: it moved since the last broadcast carried it, or
// (under SafeSequencer, where members report their received cursor only
// with the heartbeat) it lags the numbered stream and nobody was asked
// since the stream last grew.
func (c *Core) heldDue() bool {
	return c.held != c.heldSent || c.askHeld()
}

func (c *Core) askHeld() bool {
	return !c.gated() && c.held != c.nextGlobal && c.heldAsked != c.nextGlobal
}

// announceHeld broadcasts a status request carrying the all-held cursor
// (and the safe cursor), asking for status when the members would
// otherwise report late (askHeld).
func (c *Core) announceHeld() {
	c.sendStatusRequest(c.cfg.dst, c.askHeld())
}

// deliveredMine records that our request carrying count messages was
// delivered back at global g.
func (c *Core) deliveredMine(g uint32, count int) {
	if frame.SeqLess(g, c.held) {
		c.heldMsgs += uint64(count)
		return
	}
	if c.mineLen == len(c.mine) {
		// Grows only while more of our requests wait for a slow member
		// than ever before: no allocation in steady state.
		grown := make([]mine, 2*len(c.mine))
		for i := range c.mineLen {
			grown[i] = c.mine[(c.mineHead+i)%len(c.mine)]
		}
		c.mine, c.mineHead = grown, 0
	}
	c.mine[(c.mineHead+c.mineLen)%len(c.mine)] = mine{global: g, count: count}
	c.mineLen++
}

// releaseMine counts our requests now below the all-held cursor.
func (c *Core) releaseMine() {
	for c.mineLen > 0 {
		m := &c.mine[c.mineHead]
		if !frame.SeqLess(m.global, c.held) {
			return
		}
		c.heldMsgs += uint64(m.count)
		c.mineHead = (c.mineHead + 1) % len(c.mine)
		c.mineLen--
	}
}
