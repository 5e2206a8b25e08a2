package pbp

import "github.com/rbcast/rbcast/frame"

// Expect is a hint from a lock-step program (PCODE's request, Bruck et
// al. §2, brought to PBP2): the application waits for the next n frames
// of member from. PBP2 learns of a lost frame only from a later one, or
// from the sender's Ack after ResendTimeout (thesis fig. 3.9), so a lost
// last frame of a round — a barrier message — costs that timeout. With
// the hint the frames count as known sent: the repair state starts, and
// if they have not arrived half a round trip later (hintTimeout) a Nack
// asks for them and repeats as for any gap; a later frame of the sender
// that arrives first has them asked for at once (learnEnd). A frame not
// yet sent when asked for costs its sender nothing (a Nack beyond its
// last frame is dropped as stale) and is asked for again until it
// arrives. docs/pcode.md, "What Expect gains", has the measurements.
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
	// The hinted frame is due now (the program waits for it), not a gap
	// found late: ask after half a round trip of the segment, as PCODE's
	// request does (Bruck et al. §5.7), the shortest measured of any
	// sender (the path is every sender's), not after this sender's repair
	// timer, which waits for scheduling noise (a floor of NackTimeout/16,
	// 250 µs) and, before its first repair, the whole NackTimeout (4 ms):
	// both longer than a lock-step program's round, where the sender's
	// next frame finds the loss first. Asking early costs a Nack the
	// sender drops as stale (the frame not sent yet) or one retransmission
	// (it is on its way).
	p.nackAt = now.Add(c.hintTimeout())
}

// minHintDivisor bounds the hinted repair's timer below, at NackTimeout /
// minHintDivisor (62.5 µs by default).
const minHintDivisor = 64

// hintTimeout is how long a frame Expect announced is waited for before
// it is asked for: half the repair round trip of the quickest sender
// whose repairs were measured, within [NackTimeout/minHintDivisor,
// NackTimeout], or NackTimeout if none was.
func (c *Core) hintTimeout() Duration {
	d := c.cfg.NackTimeout
	for i := range c.peers {
		if q := &c.peers[i]; q.srtt != 0 {
			d = min(d, max(q.srtt/2, c.cfg.NackTimeout/minHintDivisor))
		}
	}
	return d
}
