package view

import (
	"errors"

	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/reliable/clock"
	"github.com/rbcast/rbcast/reliable/core"
)

// The Unreliable level (docs/membership.md, "Delivery levels"; Liu's weak
// groups, thesis §3.1): a message goes out once, as a Datagram frame of the
// sender's view, and a member of that view delivers it at most once,
// uncorrupted (the frame's CRC), in no order with the view's other
// messages; nothing acknowledges or repairs it, and a member in another
// view (before or after a change) drops it. It runs beside the inner
// core, not through it, so it costs the reliable levels nothing and needs
// no window.

// ErrNoView is returned by ProposeUnreliable before this process is in a
// view: a datagram goes only to the members of its sender's view.
var ErrNoView = errors.New("view: not in a view yet: a datagram goes only to the members of its sender's view")

// dgSeen is the datagram numbers seen from one sender.
type dgSeen struct {
	id frame.MemberID
	w  core.DatagramWindow
}

// ProposeUnreliable queues msg (copied) as a datagram to the members of
// the current view (core.UnreliableCore); the next Ready sends it. Like
// Propose it produces no output by itself (docs/runtime.md): a runtime may
// call it between Ready and Advance, and a frame emitted then would be
// dropped by Advance unsent.
func (c *Core) ProposeUnreliable(now clock.Time, msg []byte) error {
	c.touch(now)
	switch {
	case c.state == done:
		if c.err != nil {
			return c.err
		}
		return core.ErrLeaving
	case c.leaving:
		return core.ErrLeaving
	case len(msg) > c.cfg.MaxMessage:
		return &core.TooLargeError{Size: len(msg), Max: c.cfg.MaxMessage}
	case c.state != member:
		return ErrNoView
	}
	c.dgQ = append(c.dgQ, msg...)
	c.dgOut = append(c.dgOut, dgOut{n: len(msg), view: c.view.ID})
	return nil
}

// dgOut is a datagram proposed and not sent yet.
type dgOut struct {
	n    int    // its length in dgQ
	view uint32 // the view it was proposed in
}

// sendDatagrams sends the datagrams queued since the last Ready, each in
// the view it was proposed in; one whose view this member left meanwhile
// (a view installed since, a leave) is dropped: it was for that view's
// members, and at most once allows it.
func (c *Core) sendDatagrams() {
	if len(c.dgOut) == 0 {
		return
	}
	off := 0
	for _, d := range c.dgOut {
		msg := c.dgQ[off : off+d.n]
		off += d.n
		if c.state != member || c.leaving || c.view.ID != d.view {
			c.stats.DatagramsDropped++
			continue
		}
		c.dgNext++
		h := c.hdr
		h.Sender, h.ViewID, h.Seq = c.self, c.view.ID, c.dgNext
		c.emitHeader(&h, &frame.Payload{T: frame.Datagram, Data: msg})
		c.stats.DatagramsSent++
	}
	c.dgQ, c.dgOut = c.dgQ[:0], c.dgOut[:0]
}

// onDatagram delivers a datagram of the current view's member, once.
func (c *Core) onDatagram(src [6]byte, v frame.View) {
	id := v.Sender()
	if c.state != member || v.ViewID() != c.view.ID || id == c.self {
		c.stats.DatagramsDropped++
		return
	}
	m, ok := c.memberOf(c.view, id)
	if !ok || m.MAC != src || m.Incarnation != v.Incarnation() {
		c.stats.DatagramsDropped++
		return
	}
	if c.installed {
		c.hold(src, frame.Broadcast, v) // after the Ready of the install
		return
	}
	if !c.dgFresh(id, v.Incarnation(), v.Seq()) {
		c.stats.DatagramsDropped++
		return
	}
	start := len(c.dgBuf)
	c.dgBuf = append(c.dgBuf, v.Body()...)
	c.deliver = append(c.deliver, core.Delivery{From: id, Seq: v.Seq(), Data: c.dgBuf[start:len(c.dgBuf):len(c.dgBuf)], Unreliable: true})
	c.stats.DatagramsDelivered++
}

// dgFresh reports whether datagram seq of member id's incarnation inc is
// new here, and notes it.
func (c *Core) dgFresh(id frame.MemberID, inc, seq uint32) bool {
	i := 0
	for i < len(c.dgSeen) && c.dgSeen[i].id != id {
		i++
	}
	if i == len(c.dgSeen) {
		c.dgSeen = append(c.dgSeen, dgSeen{id: id})
	}
	return c.dgSeen[i].w.Fresh(inc, seq)
}
