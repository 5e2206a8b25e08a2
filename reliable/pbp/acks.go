package pbp

import "github.com/rbcast/rbcast/frame"

// The acknowledgement matrix (Liu's acknowledgement diffusion, pipelined):
// every PBP frame carries its sender's whole ack vector — for each member,
// the next sequence number it expects from that member's stream (thesis
// fig. 3.3) — and each core keeps the last vector heard from every member,
// not only the entry for its own stream that slides its window. Row m,
// column s is how far m holds s's stream, as last heard; this member's own
// row is its live state. So any member knows, for any sender, which
// members still lack its frames (status, a repair from a peer, a message
// stable everywhere) without a message of its own.

// noteAcks keeps p's ack vector, entry by entry never moving back
// (frames of one sender may arrive reordered). A vector of another shape
// (a member configured with another member list) is ignored.
func (c *Core) noteAcks(p *peer, v frame.View) {
	if v.AckBase() != c.cfg.ackBase || v.AckCount() != len(p.heard) {
		return
	}
	for i := range p.heard {
		if a := v.Ack(i); frame.SeqLess(p.heard[i], a) {
			p.heard[i] = a
		}
	}
}

// Holds reports how far member m holds sender s's stream: the next
// sequence number of s's it expects (for m == s, the next s will send), as
// last heard from m, or this member's own state when m is this member (as
// its acks say it: frozen, what it held when frozen). ok
// is false when either is not a member of the configuration.
func (c *Core) Holds(m, s frame.MemberID) (next uint32, ok bool) {
	sp, sSelf := c.peer(s)
	if sp == nil && !sSelf {
		return 0, false
	}
	mp, mSelf := c.peer(m)
	switch {
	case mSelf && sSelf:
		return c.nextSeq, true
	case mSelf && c.frozen:
		return sp.frozenAt, true // what its acks say (Freeze)
	case mSelf:
		return sp.expected, true
	case mp == nil:
		return 0, false
	}
	return mp.heard[int(s)-int(c.cfg.ackBase)], true
}

// AckNow has the next Ready acknowledge at once what was delivered since
// this member last sent a frame to the group, instead of after AckDelay
// (or half a window of receipts), and reports whether such an
// acknowledgement is due. A layer that waits for every member to hold a
// message (Safe, from the matrix) asks it: the last frames of a burst
// are then known held after a round trip, not a round trip and the ack
// timer. Under a stream it costs at most one Ack per turn, and none when
// a frame of its own carried the vector.
func (c *Core) AckNow() bool {
	if c.ackAt == 0 || c.left {
		return false
	}
	c.ackNow = true
	return true
}

// HeartbeatNow has the next Ready send a Heartbeat unless another frame
// to the group goes first: a membership layer that waits to hear the
// members of a new view (view.Core under a primary component) has every
// member say at once that it runs the view, not a heartbeat interval
// later.
func (c *Core) HeartbeatNow() {
	if !c.left {
		c.heartbeatNow = true
	}
}

// StableFrom reports how far every live member holds sender s's stream
// (this member included; a removed member no longer counts): the lowest
// Holds(m, s) over them. Frames of s before it are held everywhere. ok is
// false when s is not a member of the configuration.
func (c *Core) StableFrom(s frame.MemberID) (next uint32, ok bool) {
	low, ok := c.Holds(c.cfg.Self, s)
	if !ok {
		return 0, false
	}
	for i := range c.peers {
		p := &c.peers[i]
		if !p.live {
			continue
		}
		if h, _ := c.Holds(p.id, s); frame.SeqLess(h, low) {
			low = h
		}
	}
	return low, true
}
