package seq

import "github.com/rbcast/rbcast/frame"

// A clean departure. A member that leaves proposes nothing more, waits
// until every request it proposed was delivered back to it (numbered, so
// in the sequencer's history), then broadcasts Leave (an empty frame)
// leaveRepeats times and is finished. A leaving sequencer also stops
// numbering other members' requests and waits until every live member
// has delivered everything it numbered (stable reaches the end), so
// that nothing it numbered is lost with it.
//
// Then, while another member is live, the sequencer hands off instead of
// vanishing: it calls an election and votes in it for the lowest live
// member, never for itself. Its followers, seeing their sequencer call
// an election, join it at once and count it out as a candidate, while its
// vote counts as any voter's. It leaves when the successor announces
// itself (Elected), or when nobody is left to hand off to. Before, the
// sequencer simply left and the others elected among themselves: its
// vote was lost to the quorum, so a member that counted a departed or
// crashed member among the others (it missed a Leave; the stream's
// removals do not shrink the quorum) could be left short of a majority,
// and wait in that election for ever. The departing sequencer's vote is
// the one that every such member still counts.
//
// A member that missed the epoch in which the departing sequencer was
// elected tells it hands off by its vote: nobody else votes for a higher
// id than its own (stepElection). A leaving sequencer with no other live
// member does not wait for its own delivery of what it numbered
// (othersLive).
//
// At the sequencer a Leave removes its sender (MemberLeft), and so does
// the election at the successor for a sequencer that handed off. At the
// others the sender is marked gone, and a sequencer that handed off once
// they adopt the successor; a gone sequencer starts an election at once,
// and a gone member is never a candidate nor waited for.
//
// A leaving member whose requests are all delivered back leaves in the
// middle of an election that follows its sequencer's clean departure
// (handed off or gone): that sequencer waited until every live member
// delivered everything it numbered, so nothing this member holds is
// needed by another, and the election's outcome no longer matters to it.
//
// A departed sequencer that had nobody to hand off to repeats its Leave
// (NackTimeout apart) until it has heard every live member vote in a
// newer epoch, or for FailureTimeout.

// leaveRepeats is how many Leave frames a departing member sends,
// NackTimeout apart: a lost Leave is otherwise noticed only after
// FailureTimeout.
const leaveRepeats = 3

// Leave starts a clean departure; Ready reports SelfLeft once the Leave is
// sent. Propose refuses new messages from now on (ErrLeaving).
func (c *Core) Leave(now Time) {
	c.touch(now)
	if c.handed != c.nextReq {
		c.sendSealed()
	}
	if c.leaving || c.role == halted {
		return
	}
	c.leaving = true
}

// Left reports whether this member has sent its Leave.
func (c *Core) Left() bool { return c.left }

// maybeLeave sends the Leave once nothing of ours is in flight; a
// sequencer hands off first.
func (c *Core) maybeLeave() {
	if !c.leaving || c.left || c.open || c.outstanding() > 0 {
		return
	}
	switch c.role {
	case halted:
		return
	case follower:
		if c.stats.MessagesProposed != c.heldMsgs {
			return // (NotHeldByAll) not yet held by every live member
		}
	case electing:
		if !c.leavesElection() {
			return
		}
	case sequencer:
		c.flushAccepts()
		c.computeStable()
		if c.stable != c.nextGlobal && c.othersLive() {
			c.wantStatus = true // ask for the acknowledgements we wait for
			return
		}
		c.members[c.self].handing = true // never a candidate from now on
		if _, ok := c.lowestLive(); ok {
			c.startElection() // hand off
			return
		}
	}
	c.depart()
}

// othersLive reports whether, at the sequencer, a member other than us is
// live: one that must deliver what we numbered before we leave. With none
// (every other member left or was removed), nobody is there to deliver
// it, and our own delivery of it need not be awaited: our own messages
// are delivered back already (outstanding is 0); the rest — typically the
// removals of members whose Leave frames we all missed — waits for a safe
// point that a sequencer alone under the majority quorum never reaches
// (computeSafe: we may be on the minority side of a partition), so the
// wait would never end.
func (c *Core) othersLive() bool {
	for i := range c.members {
		if m := &c.members[i]; m.live && !m.self {
			return true
		}
	}
	return false
}

// leavesElection reports whether a leaving member, with nothing in
// flight, need not wait for the election it is in: the election follows
// its sequencer's clean departure (see above), or, at the sequencer that
// hands off, nobody is left to hand off to.
func (c *Core) leavesElection() bool {
	s := c.sequencerMember()
	if s.self {
		_, ok := c.lowestLive()
		return !ok
	}
	return s.gone || s.handing
}

// depart sends the Leave: this member is finished.
func (c *Core) depart() {
	c.left = true
	c.leaveLeft = leaveRepeats
	if c.role == sequencer {
		c.leaveUntil = c.now.Add(c.cfg.FailureTimeout)
	}
	c.sendLeave()
	c.events = append(c.events, Event{Kind: SelfLeft, Member: c.cfg.Self, Epoch: c.epoch, Last: c.next - 1, At: c.now})
}

func (c *Core) sendLeave() {
	c.header(0, 0)
	c.leave.T = frame.Leave
	c.emit(c.cfg.dst, &c.leave)
	c.stats.LeavesSent++
	c.leaveLeft--
	c.leaveAt = 0
	if c.leaveLeft > 0 || c.now < c.leaveUntil && !c.leaveKnown() {
		c.leaveAt = c.now.Add(c.cfg.NackTimeout)
	}
}

// leaveKnown reports whether every live member was heard electing since
// our Leave as sequencer.
func (c *Core) leaveKnown() bool {
	for i := range c.members {
		if m := &c.members[i]; m.live && !m.self && !m.gone && !m.sawLeave {
			return false
		}
	}
	return true
}

// stepLeft: after our Leave as sequencer, a member's vote in a newer
// epoch shows it knows we left.
func (c *Core) stepLeft(src [6]byte, v frame.View) {
	if c.leaveUntil == 0 || v.Type() != frame.SeqElection {
		return
	}
	m := c.member(v.Sender())
	if m == nil || m.self || src != m.mac || v.Incarnation() != m.inc {
		return
	}
	if b := v.Election(); frame.SeqLess(c.epoch, b.Epoch) {
		m.sawLeave = true
		if c.leaveLeft == 0 && c.leaveKnown() {
			c.leaveAt = 0 // finished
		}
	}
}

// stepLeave: m left the group. Its Leave's ack entry is its delivered
// cursor: everything it proposed was delivered back to it, so numbered
// below that cursor. A gone sequencer starts an election.
func (c *Core) stepLeave(m *member, v frame.View) {
	if m.gone {
		return
	}
	end := c.next
	if v.AckCount() >= 1 {
		end = v.Ack(0)
	}
	if c.role == sequencer && frame.SeqLess(c.nextGlobal, end) {
		end = c.nextGlobal // nothing beyond what we numbered exists
	}
	c.departed(m, end)
	if c.role == follower && m == c.sequencerMember() {
		c.startElection()
	}
}

// departed: m left; every message it proposed is numbered below end.
// MemberLeft is reported only once this member has delivered up to there
// (reportLeft): a Leave often overtakes the leaver's last messages (lost
// and repaired, or still waiting for a method-2 payload), and a
// MemberLeft before them would tell the application the member's stream
// is complete when it is not. A member the stream removed already
// (MemberFailed: the sequencer missed its Leave) is not reported twice.
func (c *Core) departed(m *member, end uint32) {
	m.gone = true
	c.holders = c.safeHolders()
	if c.role == sequencer && m.live {
		m.live = false
		c.advanceStable()
	}
	if m.failed {
		return
	}
	c.stats.MembersLeft++
	m.leftEnd = end
	if !m.leftPend {
		m.leftPend = true
		c.leftsPend++
	}
}

// handedOff: the election of a new epoch completed (we adopted it, or
// took over): a sequencer that handed off to it has left.
func (c *Core) handedOff(last uint32) {
	for i := range c.members {
		if m := &c.members[i]; m.handing && !m.gone && !m.self {
			c.departed(m, last+1) // it had delivered everything it numbered
		}
	}
}

// reportLeft reports MemberLeft for each departed member whose messages
// are all delivered here (with the deliveries of the same Ready, which
// the runtime hands over first).
func (c *Core) reportLeft() {
	for i := range c.members {
		m := &c.members[i]
		if !m.leftPend || frame.SeqLess(c.next, m.leftEnd) {
			continue
		}
		m.leftPend = false
		c.leftsPend--
		c.events = append(c.events, Event{Kind: MemberLeft, Member: m.id, Epoch: c.epoch, Last: m.leftEnd - 1, At: c.now})
	}
}

// clampLeft: the group agreed on last as the end of the epochs before;
// a departed member's messages beyond it are lost (outside the
// guarantee), so its MemberLeft waits for nothing beyond.
func (c *Core) clampLeft(last uint32) {
	for i := range c.members {
		if m := &c.members[i]; m.leftPend && frame.SeqLess(last+1, m.leftEnd) {
			m.leftEnd = last + 1
		}
	}
}
