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
// dropped as stale) and is asked for again until it arrives. A shorter
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
	p.knownEnd = end
	c.stats.Expected++
	c.enterRepair(p)
}
