package pbp

import "github.com/rbcast/rbcast/frame"

// Expect is a hint from a lock-step program (PCODE's request, Bruck et
// al. §2, brought to PBP2): the application waits for the next n frames
// of member from. PBP2 learns of a lost frame only from a later one, or
// from the sender's Ack after ResendTimeout (thesis fig. 3.9), so a lost
// last frame of a round — a barrier message — costs that timeout. With
// the hint the frames count as known sent: the repair state starts, and
// if they have not arrived one nack timeout later (srtt + 4·rttvar of
// this sender's repairs) a Nack asks for them and repeats as for any
// gap; a later frame of the sender (or its Ack) that shows them missing
// first has them asked for at once (learnEnd). A frame not yet sent when
// asked for costs its sender nothing (a Nack beyond its last frame is
// dropped as stale) and is asked for again, expectAsks times in all
// (hintSpent). A shorter
// first timer (half or two round trips of the segment) gained in the
// simulator and lost on real hosts: docs/pcode.md, "What Expect gains".
//
// n counts frames, not messages: a bundle carries several. A barrier
// waits for one. n is capped at Window; Expect does nothing under PBP1,
// for a member that is not live, or while a gap of from is known (its
// repair runs already). Like Propose it produces no output itself; it
// arms the nack timer (Deadline).
func (c *Core) Expect(now Time, from frame.MemberID, n int) {
	if c.cfg.Mode != PBP2 || c.left || n < 1 {
		return
	}
	c.touch(now)
	p, _ := c.peer(from)
	if p == nil || !p.live || p.leaving {
		return
	}
	end := p.expected + uint32(min(n, c.cfg.Window))
	if !frame.SeqLess(p.knownEnd, end) || p.state == repair {
		return
	}
	if !p.hinting {
		p.hinting, p.sentEnd = true, p.knownEnd
	}
	p.hintAsks = 0
	p.knownEnd = end
	c.stats.Expected++
	c.enterRepair(p)
}

// expectAsks is how many Nacks the nack timer sends for frames Expect
// alone announced (none proven sent) before the hint is withdrawn. The
// first repairs a lost last frame one nack timeout after the hint; the
// second, one lost Nack or retransmission. A member that waits at a
// barrier for one still computing re-asked every timeout (backed off to
// 8 NackTimeouts while the sender was silent) until the sender's frame
// came: each Nack was stale at the sender, which had not sent it yet
// (halo on the netns bridge: 85 to 170 a run, issue 21).
const expectAsks = 2

// hintSpent is the nack timer's check for Expect's hint on p: while
// every frame p proved sent is here (all that is missing is the hint's),
// the timer's Nack counts against expectAsks; once they are spent the
// hint is withdrawn (knownEnd back to sentEnd, the repair state left)
// and hintSpent reports true: no Nack goes out. A frame of p sent
// after that and lost is known missing from p's next frame (learnEnd
// asks at once), at the latest its resend timer's Ack (ResendTimeout,
// thesis fig. 3.9): the bound without the hint, shorter than the
// backed-off nack timer it replaces.
func (c *Core) hintSpent(p *peer) bool {
	if !p.hinting || p.expected != p.sentEnd {
		return false
	}
	if p.hintAsks < expectAsks {
		p.hintAsks++
		return false
	}
	p.knownEnd, p.hinting = p.sentEnd, false
	p.state, p.nackAt, p.nackDue, p.nackSentAt = normal, 0, false, 0
	p.nackRepeat, p.reask, p.timerDue = false, false, false
	c.stats.ExpectsWithdrawn++
	return true
}
