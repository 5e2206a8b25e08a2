package pbp

import (
	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/reliable/core"
)

// Holding one sender inside the core (core.Holder; docs/runtime.md,
// "Holding one sender"): its Data frames are received into the reorder
// ring as usual — the frame at expected too, copied once instead of
// delivered from the received bytes — but nothing of it is delivered, so
// expected, and with it our acknowledgement of its stream, stays where
// the hold began. Its window therefore holds it: it cannot send a
// window past our acknowledgement. A frame of it that is lost is still
// asked for at once, and its nack timer runs while a frame is missing,
// so that the ring holds all it sent: a sender that dies while held has
// its frames delivered at the release as if it had not been held (no
// hold at a member that lost a frame left a gap only the dead sender
// could fill, while another member delivered past it: docs/dsm.md,
// "When a held sender dies"). With nothing missing, its nack timer waits
// for the release. Its acknowledgements, heartbeats, Nacks and Leave are
// handled as ever, so its acks of our frames count and it is never
// suspected for being held. At the release (ReleaseFrom, or the hold's
// bound) the frames in the ring are delivered at the next Tick, without
// a retransmission. Its datagrams (the Unreliable level) are
// delivered while it is held, as from any member: they take no window
// room, so the hold does not stop them, and they are how a held sender
// still reaches its holders (dsm's lock lane: docs/dsm.md, "The lock
// lane"); an application that does not want them drops them itself.

var _ core.Holder = (*Core)(nil)

// HoldFrom holds member from's messages (see above) until ReleaseFrom, or
// until the core's clock reaches until, whichever comes first: a bound
// below FailureTimeout keeps from from removing this member for
// acknowledging nothing. A hold that exists already, ended by its bound
// or not, is left as it is: one hold per sender until ReleaseFrom. It
// reports false, and holds nothing, for an id that is not a live member
// other than this one, or once this member left.
func (c *Core) HoldFrom(from frame.MemberID, until Time) bool {
	p, _ := c.peer(from)
	if p == nil || !p.live || c.left {
		return false
	}
	if p.holdSet {
		return true
	}
	p.holdSet, p.holding, p.holdUntil = true, true, until
	c.holds++
	// A repair sample pending would measure the hold.
	p.nackSentAt = 0
	return true
}

// ReleaseFrom ends HoldFrom(from). What the hold kept is delivered at the
// next Tick (Deadline is then the core's last input time), not now: the
// runtime may be handing out a Ready.
func (c *Core) ReleaseFrom(from frame.MemberID) {
	p, _ := c.peer(from)
	if p == nil || !p.holdSet {
		return
	}
	p.holdSet = false
	c.holds--
	if p.holding {
		p.holding, p.released = false, true
		c.releases++
	}
}

// Holding reports whether member id's messages are held now (HoldFrom,
// before its release or bound).
func (c *Core) Holding(id frame.MemberID) bool {
	p, _ := c.peer(id)
	return p != nil && p.holding
}

// expireHolds ends the holds whose bound passed (at Tick, and before a
// frame of the sender is accepted) and delivers what the released ones
// kept.
func (c *Core) expireHolds(now Time) {
	// Without a peer holding (it has holdSet) or released there is
	// nothing to do, and the check inlines into Tick.
	if c.holds != 0 || c.releases != 0 {
		c.expireHeld(now)
	}
}

func (c *Core) expireHeld(now Time) {
	for i := range c.peers {
		p := &c.peers[i]
		if p.holding && now >= p.holdUntil {
			p.holding = false
			c.unhold(p)
		}
		if p.released {
			p.released = false
			c.releases--
			c.unhold(p)
		}
	}
}

// missing reports whether a frame p is known to have sent is neither
// delivered nor in the ring: the ring holds only frames in [expected,
// knownEnd), buffered of them.
func (p *peer) missing() bool {
	return int(p.knownEnd-p.expected) > p.buffered
}

// unhold delivers what a hold of p kept and restarts its repair: a gap
// that appeared while it was held is asked for at once.
func (c *Core) unhold(p *peer) {
	if !p.live {
		return
	}
	c.drain(p)
	if p.state == repair {
		if !p.nackDue {
			p.nackDue, p.nackFrom = true, p.expected
		}
		p.nackAt = c.now.Add(c.nackTimeout(p))
		p.nackExpected, p.nackBackoff, p.nackArmed = p.expected, 0, c.now
	}
}
