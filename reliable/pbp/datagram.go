package pbp

import "github.com/rbcast/rbcast/frame"

// The Unreliable level in a group of fixed membership (core.UnreliableCore;
// docs/membership.md, "Delivery levels"; Liu's weak groups, thesis §3.1,
// and BDSM's DSM_WRT_UNREL): a message goes out once, as a Datagram frame
// (0x28) to the group, and every live member delivers it at most once,
// uncorrupted (the frame's CRC), in no order with the sender's Data
// frames; nothing acknowledges, numbers in the window or repairs it. The
// frame's sequence number is the sender's datagram number, apart from its
// Data numbers. Its header carries the ack vector like every frame, but a
// receiver takes neither acknowledgements nor a sent end from it (its seq
// is not a Data number), and sending one does not stand in for an Ack or a
// Heartbeat: the reliable stream's timers ignore datagrams. The view core
// (reliable/view) has its own, checked against the view.

// ProposeUnreliable queues msg (copied) as a datagram; the next Ready
// sends it. Like Propose it produces no output by itself, so a runtime may
// call it between Ready and Advance. It never waits for window room.
func (c *Core) ProposeUnreliable(now Time, msg []byte) error {
	c.touch(now)
	if c.leaving || c.left {
		return ErrLeaving
	}
	if len(msg) > c.cfg.maxPayload {
		return &TooLargeError{Size: len(msg), Max: c.cfg.maxPayload}
	}
	c.dgQ = append(c.dgQ, msg...)
	c.dgLens = append(c.dgLens, len(msg))
	return nil
}

// sendDatagrams turns the queued datagrams into frames (from flush).
// Without any queued (most turns) the check inlines into flush.
func (c *Core) sendDatagrams() {
	if len(c.dgLens) != 0 {
		c.encodeDatagrams()
	}
}

func (c *Core) encodeDatagrams() {
	off := 0
	for _, n := range c.dgLens {
		msg := c.dgQ[off : off+n]
		off += n
		c.dgNext++
		c.header(c.dgNext, 0)
		if c.used == len(c.bufs) {
			c.bufs = append(c.bufs, make([]byte, 0, frame.EthernetHeaderLen+c.cfg.MTU))
		}
		b := frame.AppendEthernet(c.bufs[c.used][:0], c.cfg.dst, c.cfg.selfMAC, c.cfg.etherType)
		b, err := frame.Append(b, &c.hdr, &frame.Payload{T: frame.Datagram, Data: msg})
		if err != nil {
			c.stats.EncodeErrors++
			continue
		}
		c.bufs[c.used] = b
		c.used++
		c.frames = append(c.frames, b)
		c.stats.DatagramsSent++
	}
	c.dgQ, c.dgLens = c.dgQ[:0], c.dgLens[:0]
}

// onDatagram delivers a live member's datagram, once. The data aliases the
// received frame, as a Data frame delivered in order does.
func (c *Core) onDatagram(p *peer, v frame.View) {
	if !p.dg.Fresh(v.Incarnation(), v.Seq()) {
		c.stats.DatagramsDropped++
		return
	}
	c.deliveries = append(c.deliveries, Delivery{From: p.id, Seq: v.Seq(), Data: v.Body(), Unreliable: true})
	c.stats.DatagramsDelivered++
}
