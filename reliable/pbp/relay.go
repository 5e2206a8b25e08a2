package pbp

import (
	"fmt"

	"github.com/rbcast/rbcast/frame"
)

// Relaying a silent member's frames (Config.Relay; docs/protocols.md,
// "Relay: the survivors agree on a dead sender's frames"). In a group
// of fixed membership a frame that one member lost and another
// delivered can be repaired only by its sender; once the sender is dead, the one member
// delivers past the gap and the other removes the sender having dropped
// everything behind it, and the survivors disagree on what it sent. So
// a member that has heard nothing from a sender for half the failure
// timeout (suspected: a live member heartbeats every HeartbeatInterval)
// relays, from the copies Retain keeps, the sender's frames it delivered
// and a live member's acknowledgement (the acknowledgement matrix,
// acks.go) says that member lacks: a ViewRelay frame (0x24) of base 0, the
// relayed frame whole, as the view change relays a departing member's
// (reliable/view). The receiver takes the relayed frame as a
// retransmission of its sender's, without counting it as a sign of life.
// The relay repeats every FailureTimeout/16 while a member still lacks a
// frame, and ends two failure timeouts after the sender was last heard:
// every member removed it by then. A member lacks at most a window of
// what another delivered (a sender numbers s+Window only once every
// member acknowledged s), and the copies hold the last window, so what
// any survivor delivered reaches every survivor before its failure
// detector removes the sender, half a failure timeout later. Frames that
// no survivor received are lost to all of them alike.

// RelayOverhead is what a relay adds around the relayed frame's
// payload: the base view (4) and the relayed frame's header, without an
// ack vector, and CRC. With Relay the largest message is this much
// smaller than the MTU and the ack vector allow.
const RelayOverhead = 4 + frame.Overhead

// relaySuspect reports whether p's frames are due to be relayed now: p was
// silent for half the failure timeout, not yet for two, and it did not
// leave (a Leave comes only once every member acknowledged all).
func (c *Core) relaySuspect(p *peer, now Time) bool {
	silent := now.Sub(p.lastHeard)
	return c.cfg.Relay && !p.leaving && silent >= c.cfg.FailureTimeout/2 && silent < 2*c.cfg.FailureTimeout
}

// relayInterval is how often the relay of one sender's frames repeats.
func (c *Core) relayInterval() Duration { return max(c.cfg.FailureTimeout/16, 1) }

// lagging returns the earliest of p's frames that this member delivered
// and a live member other than p lacks, as last heard; false if none.
func (c *Core) lagging(p *peer) (uint32, bool) {
	from, any := p.expected, false
	for i := range c.peers {
		q := &c.peers[i]
		if q == p || !q.live {
			continue
		}
		h := q.held(p.slot)
		if frame.SeqLess(h, from) && p.expected-h <= c.mask+1 {
			from, any = h, true
		}
	}
	return from, any
}

// relayDeadline is when the relay of p's frames next needs a Tick; 0 if
// never.
func (c *Core) relayDeadline(p *peer) Time {
	if !c.cfg.Relay || p.leaving {
		return 0
	}
	if _, ok := c.lagging(p); !ok {
		return 0
	}
	start := p.lastHeard.Add(c.cfg.FailureTimeout / 2)
	if p.relayAt > start {
		start = p.relayAt
	}
	if start >= p.lastHeard.Add(2*c.cfg.FailureTimeout) {
		return 0
	}
	return start
}

// relay broadcasts what a live member lacks of p's frames, if p is
// suspected and the relay is due (at Tick).
func (c *Core) relay(p *peer, now Time) {
	if !c.relaySuspect(p, now) || now < p.relayAt {
		return
	}
	from, ok := c.lagging(p)
	if !ok {
		return
	}
	p.relayAt = now.Add(c.relayInterval())
	for s := from; frame.SeqLess(s, p.expected); s++ {
		data, bundled, ok := c.Retained(p.id, s)
		if !ok {
			continue
		}
		h := frame.Header{Group: c.cfg.Group, Sender: p.id, Incarnation: p.incarnation, ViewID: c.cfg.ViewID, Seq: s}
		f, err := frame.Append(nil, &h, &frame.Encoded{T: frame.Data, Data: data, Bundled: bundled})
		if err != nil {
			c.stats.EncodeErrors++
			continue
		}
		c.header(c.nextSeq-1, 0)
		c.emit(c.cfg.dst, &frame.ViewRelayBody{Base: c.cfg.ViewID, Frame: f})
		c.stats.Relayed++
	}
}

// onRelay takes a frame another member relayed (its own header was
// handled as an Ack's): a frame of a third member's, as its sender's
// retransmission would be, except that it says nothing of that member's
// being alive.
func (c *Core) onRelay(v frame.View) error {
	in := v.RelayFrame()
	if len(in) == 0 || v.RelayBase() != c.cfg.ViewID || in.Type() != frame.Data ||
		in.Group() != c.cfg.Group || in.ViewID() != c.cfg.ViewID {
		c.stats.RelaysRefused++
		return fmt.Errorf("%w: a relay from member %d that is not a Data frame of group %d, view %d",
			ErrFrameType, v.Sender(), c.cfg.Group, c.cfg.ViewID)
	}
	d, self := c.peer(in.Sender())
	switch {
	case self:
		return nil // our own frame: we have it
	case d == nil || in.Incarnation() != d.incarnation:
		c.stats.RelaysRefused++
		return fmt.Errorf("%w: member %d relayed a frame of %d.%d", ErrNotMember, v.Sender(), in.Sender(), in.Incarnation())
	case !d.live:
		c.stats.FromRemoved++
		return nil // removed here already: what it sent beyond was dropped
	}
	n := in.Seq()
	if !frame.SeqLess(n, d.expected) && n-d.expected >= uint32(c.cfg.Window) {
		c.stats.RelaysRefused++
		return fmt.Errorf("%w: member %d relayed frame %d of member %d, a window or more past %d",
			ErrFrameType, v.Sender(), n, d.id, d.expected)
	}
	c.stats.RelaysReceived++
	switch d.state {
	case normal:
		c.stepNormal(d, in, false)
	case repair:
		c.stepRepair(d, in, false)
	}
	return nil
}
