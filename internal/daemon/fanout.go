package daemon

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/rbcast/rbcast/internal/hops"
	"github.com/rbcast/rbcast/internal/localapi"
	"github.com/rbcast/rbcast/reliable"
)

// subscriber is one Subscribe: the connection the fan-out writes to and
// whose messages it wants.
type subscriber struct {
	c    *conn
	from uint16 // localapi.AllMembers: every member's
}

// wants reports whether the subscriber takes a message from sender.
func (s *subscriber) wants(sender uint16) bool {
	return s.from == localapi.AllMembers || s.from == sender
}

// outBatch is the DeliverBatch packet the fan-out fills: the Group copies
// each delivered message straight into it (RecvAppend), once, and the
// same packet is written to every subscriber that wants all of it.
type outBatch struct {
	p     []byte // type byte, then entries: from u16, len u32, data
	n     int    // entries
	from  uint16 // the sender of every entry, unless mixed
	mixed bool   // entries from more than one sender
	// one is the packet as a Deliver when it holds one message (a
	// message that arrived alone goes out as what every client reads):
	// its header rewritten in place, p[4:].
	one []byte
}

const entryLen = localapi.DeliverBatchEntryLen

func newOutBatch(maxMessage int) *outBatch {
	b := &outBatch{p: make([]byte, 1, max(localapi.MaxBatch, 1+entryLen+maxMessage))}
	b.p[0] = byte(localapi.TDeliverBatch)
	return b
}

// fits reports whether a message of n bytes fits into the packet.
func (b *outBatch) fits(n int) bool { return len(b.p)+entryLen+n <= cap(b.p) }

func (b *outBatch) reset() { b.p, b.n, b.mixed, b.one = b.p[:1], 0, false, nil }

// single rewrites a packet of one entry as a Deliver packet, b.one: the
// entry's from u16 and len u32 at p[1:7] become the type byte and from at
// p[4:7], followed by the data.
func (b *outBatch) single() {
	from := b.from
	b.one = b.p[4:]
	b.one[0] = byte(localapi.TDeliver)
	binary.BigEndian.PutUint16(b.one[1:], from)
}

// fanout hands every delivered message to every matching subscriber. It
// takes what the Group has delivered without waiting (a done context), so
// that one packet carries everything that waits, writes the packet when
// nothing more waits (or it is full), and only then waits for the next
// delivery: a message that arrives alone goes out at once, a stream goes
// out 64 KiB at a time. A subscriber whose socket is full blocks the
// write, and so the fan-out: never dropping is what makes a slow reader
// slow the group.
func (d *Daemon) fanout(g *reliable.Group) {
	largest := g.MaxMessage()
	b := newOutBatch(largest)
	now, cancel := context.WithCancel(context.Background())
	cancel()
	wait := context.Background()
	waited := uint32(0) // the next delivery taken is one the fan-out waited for (hops)
	for {
		// One subscriber with a deliver ring (recv's case): what waits
		// goes straight into its ring, copied once, from the Group.
		if s, gen := d.soleRingSubscriber(); s != nil {
			if b.n > 0 {
				d.writeOut(b)
			}
			n, empty, err := s.c.ringRecv(g, now, s.from, largest, func() bool { return d.subsGen.Load() == gen })
			if err != nil {
				d.endStreams(err)
				return
			}
			if n > 0 {
				continue
			}
			if empty {
				// Nothing waits: wait for the next delivery without
				// taking it, so that it too goes straight into the ring
				// with whatever follows it, not through the packet (a
				// second copy, and a publish and doorbell of its own).
				if err := g.WaitRecv(wait); err != nil {
					d.endStreams(err)
					return
				}
				hops.At(hops.FanoutRecv, 1)
				continue
			}
		}
		if !b.fits(largest) {
			d.writeOut(b)
		}
		off := len(b.p)
		from, data, err := g.RecvAppend(now, b.p[:off+entryLen])
		if err != nil && err == now.Err() {
			d.writeOut(b)
			// Wait without taking the next delivery: the subscribers may
			// be one with a ring by then.
			if err := g.WaitRecv(wait); err != nil {
				d.endStreams(err)
				return
			}
			waited = 1
			continue
		}
		hops.At(hops.FanoutRecv, waited)
		waited = 0
		if err != nil {
			d.writeOut(b)
			d.endStreams(err)
			return
		}
		sender := uint16(from)
		binary.BigEndian.PutUint16(data[off:], sender)
		binary.BigEndian.PutUint32(data[off+2:], uint32(len(data)-off-entryLen))
		b.p = data
		if b.n == 0 {
			b.from = sender
		} else if sender != b.from {
			b.mixed = true
		}
		b.n++
	}
}

// soleRingSubscriber is the one subscriber when there is exactly one and
// it reads a deliver ring, and the generation of the list it was in.
func (d *Daemon) soleRingSubscriber() (*subscriber, uint64) {
	gen := d.subsGen.Load()
	subs := d.subscribers()
	if len(subs) != 1 || !subs[0].c.hasDeliverRing.Load() {
		return nil, 0
	}
	return subs[0], gen
}

// writeOut writes the packet to every subscriber and empties it.
func (d *Daemon) writeOut(b *outBatch) {
	if b.n == 0 {
		return
	}
	d.packets.Add(1)
	if b.n == 1 {
		b.single()
	}
	for _, s := range d.subscribers() {
		if err := s.c.deliver(b, s.from); errors.Is(err, localapi.ErrRecordTooLarge) {
			s.c.ringTooSmall(err)
		} else if err != nil {
			s.c.close()
		}
	}
	hops.At(hops.FanoutWrote, uint32(b.n))
	b.reset()
}

// endStreams tells every subscriber why its stream ended, and closes its
// connection. When the daemon joins again (rejoin.go), the code says so:
// what the group delivers meanwhile is missing here.
func (d *Daemon) endStreams(err error) {
	if d.rejoinable(err) {
		for _, s := range d.subscribers() {
			s.c.fail(localapi.CodeRejoining, false, "%s", s.c.rejoinText(err, 0))
		}
		return
	}
	reason := errors.New("the daemon left the group")
	if !errors.Is(err, reliable.ErrClosed) {
		reason = fmt.Errorf("the group stopped: %w", err)
	}
	for _, s := range d.subscribers() {
		s.c.fail(localapi.CodeClosed, false, "%v", reason)
	}
}

// deliver writes what the subscriber wants of b: all of b in one write
// when it wants every entry, else the entries it wants, copied into one
// packet; a message alone as a Deliver; to a client that did not say
// HelloBatch (or messages too large for a batch), one Deliver packet per
// message.
func (c *conn) deliver(b *outBatch, from uint16) error {
	all := from == localapi.AllMembers || !b.mixed && from == b.from
	if !all && !b.mixed {
		return nil // every entry is another sender's
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.rings.deliver != nil {
		if c.ringFailed.Load() {
			// ringTooSmall is ending the connection: the stream stops at
			// the delivery the ring could not take, not after a gap.
			return nil
		}
		return c.deliverRing(b, from)
	}
	if b.one != nil {
		_, err := c.c.Write(b.one)
		return err
	}
	if c.batch && len(b.p) <= localapi.MaxBatch {
		if all {
			_, err := c.c.Write(b.p)
			return err
		}
		c.wbuf = append(c.wbuf[:0], byte(localapi.TDeliverBatch))
		for off := 1; off < len(b.p); {
			n := entryLen + int(binary.BigEndian.Uint32(b.p[off+2:]))
			if binary.BigEndian.Uint16(b.p[off:]) == from {
				c.wbuf = append(c.wbuf, b.p[off:off+n]...)
			}
			off += n
		}
		if len(c.wbuf) == 1 {
			return nil
		}
		_, err := c.c.Write(c.wbuf)
		return err
	}
	for off := 1; off < len(b.p); {
		sender := binary.BigEndian.Uint16(b.p[off:])
		n := int(binary.BigEndian.Uint32(b.p[off+2:]))
		if from == localapi.AllMembers || from == sender {
			m := localapi.Deliver{From: sender, Data: b.p[off+entryLen : off+entryLen+n]}
			c.wbuf = m.Append(c.wbuf[:0])
			if _, err := c.c.Write(c.wbuf); err != nil {
				return err
			}
		}
		off += entryLen + n
	}
	return nil
}
