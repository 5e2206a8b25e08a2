package pbp

import "github.com/rbcast/rbcast/frame"

// header prepares c.hdr for a frame with sequence number seq: the full
// ack vector, exp_seqno[0..n-1] (thesis fig. 3.3), goes on every frame.
// SkipCRC leaves every frame's CRC to the link (core.CRCSkipper).
func (c *Core) SkipCRC() { c.hdr.SkipCRC = true }

func (c *Core) header(seq uint32, flags frame.Flags) {
	c.hdr.Seq = seq
	c.hdr.Flags = flags
	acks := c.hdr.Acks
	for i := range c.peers {
		acks[c.peers[i].slot] = c.peers[i].expected
	}
	if c.frozen {
		c.frozenAcks() // out of the loop, which inlines: issue 18
	}
	acks[int(c.cfg.Self)-int(c.cfg.ackBase)] = c.nextSeq
}

// frozenAcks puts in c.hdr's ack vector what a frozen core acknowledges:
// what it held when frozen (Freeze).
func (c *Core) frozenAcks() {
	for i := range c.peers {
		c.hdr.Acks[c.peers[i].slot] = c.peers[i].frozenAt
	}
}

// emit encodes c.hdr and body into a frame buffer and queues it for the
// next Ready. Every frame carries the ack vector, so any frame settles a
// pending acknowledgement.
func (c *Core) emit(dst [6]byte, body frame.Body) {
	if c.used == len(c.bufs) {
		c.bufs = append(c.bufs, make([]byte, 0, frame.EthernetHeaderLen+c.cfg.MTU))
	}
	if b, ok := c.encode(c.bufs[c.used][:0], dst, body); ok {
		c.bufs[c.used] = b
		c.used++
		c.frames = append(c.frames, b)
	}
}

// encode builds the frame of c.hdr and body to dst in b and reports
// whether it could.
func (c *Core) encode(b []byte, dst [6]byte, body frame.Body) ([]byte, bool) {
	b = frame.AppendEthernet(b, dst, c.cfg.selfMAC, c.cfg.etherType)
	b, err := frame.Append(b, &c.hdr, body)
	// Only a frame to the group tells the group we live and acknowledges
	// to all; a Nack reaches one member. The timers move even if encoding
	// failed (a bug, counted), so a failing frame cannot make the core ask
	// to run again at once forever.
	if dst == c.cfg.dst {
		c.lastSent, c.heartbeatNow = c.now, false
		c.ackAt, c.ackNow, c.receipts = 0, false, 0
	}
	if err != nil {
		c.stats.EncodeErrors++
		return b, false
	}
	return b, true
}

// sendData sends (or resends) our frame seq from the history to the
// group.
func (c *Core) sendData(seq uint32, flags frame.Flags) {
	c.sendDataTo(c.cfg.dst, seq, flags)
}

// sendDataTo sends our frame seq to dst: the group, or one member's MAC.
// The history keeps each frame's body where the frame is built (after
// c.pre bytes of room for the Ethernet and rbcast headers), so a send
// writes only the headers and the CRC around it: the payload is copied
// once, by Propose, and the frame handed to the runtime is the history
// slot itself. A frame already handed out in this Ready (asked for twice
// in one turn, by two members) must stay as it is until Advance; the
// second copy is encoded apart.
func (c *Core) sendDataTo(dst [6]byte, seq uint32, flags frame.Flags) {
	h := &c.history[seq&c.hmask]
	c.header(seq, flags)
	if h.emitted == c.batch {
		c.encoded.Data, c.encoded.Bundled = h.buf[c.pre:], h.count > 1
		c.emit(dst, &c.encoded)
		c.encoded.Data = nil
		return
	}
	c.placed.N, c.placed.Bundled = len(h.buf)-c.pre, h.count > 1
	if b, ok := c.encode(h.buf[:0], dst, &c.placed); ok {
		h.emitted = c.batch
		c.frames = append(c.frames, b)
	}
}

// sendAck sends a plain Ack; its Seq is the last frame we sent, so that
// receivers see a lost tail (thesis fig. 3.9).
func (c *Core) sendAck(flags frame.Flags) {
	c.header(c.nextSeq-1, flags)
	c.empty.T = frame.Ack
	c.emit(c.cfg.dst, &c.empty)
	c.stats.AcksSent++
}

// sendNack asks p, at its unicast MAC, for every frame missing from
// p.nackFrom on: all gaps at once, in one frame (the thesis asked for one
// gap of one sender at a time, fig. 3.8). Ranges that do not fit one frame
// are asked for when the nack timer fires.
func (c *Core) sendNack(p *peer) {
	p.nackDue = false
	from := p.nackFrom
	if frame.SeqLess(from, p.expected) {
		from = p.expected
	}
	// Frames flagged lost (their retransmission was overtaken) are asked
	// for again together with the new gaps.
	scan := from
	if p.reask || p.timerDue {
		scan = p.expected
	}
	timer := p.timerDue
	old := c.now - Time(c.nackTimeout(p)/nackAgeDivisor)
	p.reask, p.timerDue = false, false
	p.nackRound++
	if p.nackRound == 0 {
		p.nackRound = 1
	}
	maxRanges := (c.cfg.linkMax - 4) / 8
	ranges := c.nack.Ranges[:0]
	for s := scan; frame.SeqLess(s, p.knownEnd) && len(ranges) < maxRanges; s++ {
		h := &p.ring[s&c.mask]
		if h.full {
			continue
		}
		if frame.SeqLess(s, from) && !(h.seq == s && h.lost) &&
			!(timer && (h.seq != s || h.asked == 0 || h.askedAt <= old)) {
			continue
		}
		h.seq, h.asked, h.askedAt, h.lost = s, p.nackRound, c.now, false
		if n := len(ranges); n > 0 && ranges[n-1].Last == s-1 {
			ranges[n-1].Last = s
		} else {
			ranges = append(ranges, frame.Range{First: s, Last: s})
		}
	}
	c.nack.Ranges = ranges
	repeat := p.nackRepeat
	p.nackRepeat = false
	if len(ranges) == 0 {
		return
	}
	if repeat {
		c.stats.NacksRepeated++
	}
	if p.nackSentAt == 0 && p.nackBackoff == 0 {
		p.nackSentAt = c.now
	}
	c.nack.Target = p.id
	c.header(c.nextSeq-1, 0)
	c.emit(p.mac, &c.nack)
	c.stats.NacksSent++
}

// nackAgeDivisor: when the nack timer fires, frames asked for less than
// nackTimeout/nackAgeDivisor ago are not asked for again yet (their
// retransmissions may be on the way). 2 did better than 1 and as well as
// 4 in the simulator at 5 % loss (docs/benchmarks-history.md,
// "Measurements formerly in code comments").
const nackAgeDivisor = 2

// answerNack retransmits what p asked for (thesis fig. 3.8, "resend
// message with seqno data[1]"): to p's MAC alone when it is the first to
// ask, by broadcast when a second member asks within NackTimeout/2 of
// that (others may miss the same frame). Within NackTimeout/2 of a
// broadcast retransmission, another member's Nack for the frame is held:
// the Nacks of many receivers for one frame lost by all arrive together,
// and one retransmission serves them all. A member that asks again after
// a retransmission answered it lost its copy, and gets another, to it
// alone, at once: with the adaptive nack timer it asks again well inside
// NackTimeout/2. Members in ack vector slots from 64 on (no bit in
// sent.served) get broadcasts, held by time alone behind a broadcast.
func (c *Core) answerNack(p *peer, rl frame.RangeList) {
	c.stats.NacksReceived++
	hold := c.cfg.NackTimeout / 2
	var bit uint64 // p's bit in sent.served; 0: p is beyond 64 slots, time alone decides
	if p.slot < 64 {
		bit = 1 << p.slot
	}
	for i := range rl.Len() {
		r := rl.At(i)
		first, last := r.First, r.Last
		if frame.SeqLess(first, c.stable) {
			c.stats.NackedStale++
			if frame.SeqLess(last, c.stable) {
				continue
			}
			first = c.stable
		}
		if !frame.SeqLess(last, c.nextSeq) {
			c.stats.NackedStale++
			if !frame.SeqLess(first, c.nextSeq) {
				continue
			}
			last = c.nextSeq - 1
		}
		for s := first; ; s++ {
			h := &c.history[s&c.hmask]
			recent := h.retxAt != 0 && c.now < h.retxAt.Add(hold)
			switch {
			case bit == 0:
				// Beyond the served bitmask: broadcast, held by time
				// alone, and only behind a broadcast (a recent unicast
				// went to another member, not to p).
				if recent && !h.unicast {
					c.stats.RetransmitsHeld++
					break
				}
				c.sendData(s, c.retransmitFlags(h))
				if !recent {
					h.served = 0
				}
				h.retxAt, h.unicast = c.now, false
				c.stats.Retransmitted++
			case recent && h.served&bit == 0 && !h.unicast:
				// A broadcast retransmission is on its way to p too.
				h.served |= bit
				c.stats.RetransmitsHeld++
			case recent && h.served&bit == 0:
				// A second member asks within the hold: one broadcast
				// serves it and anyone else who lost the frame.
				c.sendData(s, c.retransmitFlags(h))
				h.retxAt, h.served, h.unicast = c.now, h.served|bit, false
				c.stats.Retransmitted++
			default:
				// The first to ask, or p lost the copy it was sent: to
				// p alone.
				c.sendDataTo(p.mac, s, c.retransmitFlags(h))
				h.retxAt, h.served, h.unicast = c.now, bit, true
				c.stats.Retransmitted++
				c.stats.RetransmittedUnicast++
			}
			if s == last {
				break
			}
		}
	}
}
