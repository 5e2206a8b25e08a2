package seq

import "github.com/rbcast/rbcast/frame"

// header prepares c.hdr. Every frame carries a one-entry ack vector:
// ack_base is the sequencer the sender follows (the candidate during an
// election) and ack[0] the sender's delivered cursor, the next global
// number it expects from the sequencer: every global before it is
// delivered here. That is the piggybacked acknowledgement the sequencer
// garbage-collects its history with.
// SkipCRC leaves every frame's CRC to the link (core.CRCSkipper).
func (c *Core) SkipCRC() { c.hdr.SkipCRC = true }

func (c *Core) header(seq uint32, flags frame.Flags) {
	c.hdr.Seq = seq
	c.hdr.Flags = flags
	c.hdr.AckBase = c.sequencerMember().id
	if c.role == electing {
		c.hdr.AckBase = c.electCand
	}
	c.hdr.Acks[0] = c.next
	c.hdr.Acks[1] = c.recvd
}

// emit encodes c.hdr and body into a frame buffer and queues it for the
// next Ready.
func (c *Core) emit(dst [6]byte, body frame.Body) {
	if len(c.frames) == len(c.bufs) {
		c.bufs = append(c.bufs, make([]byte, 0, frame.EthernetHeaderLen+c.cfg.MTU))
	}
	b := c.bufs[len(c.frames)][:0]
	b = frame.AppendEthernet(b, dst, c.cfg.selfMAC, c.cfg.etherType)
	b, err := frame.Append(b, &c.hdr, body)
	if dst == c.cfg.dst {
		c.lastBcast = c.now
	}
	if c.role != sequencer && (dst == c.cfg.dst || dst == c.sequencerMember().mac) {
		c.lastToSeq, c.sinceReport, c.ackSent = c.now, 0, c.hdr.Acks[1]
	}
	if err != nil {
		c.stats.EncodeErrors++
		return
	}
	c.bufs[len(c.frames)] = b
	c.frames = append(c.frames, b)
}

// sendData sends log entry en as SeqData: Seq is its global number.
func (c *Core) sendData(en *entry, dst [6]byte, flags frame.Flags) {
	c.header(en.global, flags)
	c.seqData = frame.SeqDataBody{Epoch: en.epoch, Safe: c.safe, Held: c.held, UID: en.uid, Data: en.data, Bundled: en.bundled}
	if c.role == sequencer && dst == c.cfg.dst {
		c.safeSent, c.heldSent = c.safe, c.held
	}
	c.emit(dst, &c.seqData)
	c.seqData.Data = nil
}

// sendChange sends log entry en, a change of the member list, as
// SeqMember: Seq is its global number.
func (c *Core) sendChange(en *entry, dst [6]byte, flags frame.Flags) {
	c.header(en.global, flags)
	c.change = frame.SeqMemberBody{Epoch: en.epoch, Safe: c.safe, Held: c.held, Change: en.change, Reason: en.reason,
		Member: en.uid.Origin, Incarnation: en.uid.Incarnation}
	if c.role == sequencer && dst == c.cfg.dst {
		c.safeSent, c.heldSent = c.safe, c.held
	}
	c.emit(dst, &c.change)
}

// sendEntry sends log entry en as what it is: SeqData or SeqMember.
func (c *Core) sendEntry(en *entry, dst [6]byte, flags frame.Flags) {
	if en.change != 0 {
		c.sendChange(en, dst, flags)
		return
	}
	c.sendData(en, dst, flags)
}

// sendRequest sends our request r: point to point to the sequencer
// (method 1) or broadcast (method 2).
func (c *Core) sendRequest(r uint32, flags frame.Flags) {
	p := &c.pend[r&c.rmask]
	data, bundled := requestBody(p)
	dst := c.sequencerMember().mac
	if c.method2(len(data)) {
		dst = c.cfg.dst
	}
	c.header(r, flags)
	if !bundled {
		c.payload.Data = data
		c.emit(dst, &c.payload)
		c.payload.Data = nil
		return
	}
	msgs := c.bundle.Msgs[:0]
	for b := p.buf; len(b) >= 2; {
		n := int(b[0])<<8 | int(b[1])
		msgs = append(msgs, b[2:2+n])
		b = b[2+n:]
	}
	c.bundle.Msgs = msgs
	c.emit(dst, &c.bundle)
	clear(msgs)
}

// sendStatusRequest: the sequencer's heartbeat and request for status
// (ask: with ACK_REQUEST, members answer with a status reply), or the
// announcement of a new safe point (no answer wanted); the body names the
// highest global numbered, so a lost tail shows, and the safe and
// all-held cursors.
func (c *Core) sendStatusRequest(dst [6]byte, ask bool) {
	var fl frame.Flags
	if ask {
		fl = frame.FlagAckRequest
	}
	c.header(0, fl)
	c.status = frame.StatusBody{T: frame.SeqStatusRequest, Epoch: c.epoch, Delivered: c.nextGlobal - 1, Safe: c.safe, Held: c.held}
	if dst == c.cfg.dst {
		c.safeSent, c.heldSent = c.safe, c.held
		if ask {
			c.heldAsked = c.nextGlobal
		}
	}
	c.emit(dst, &c.status)
	c.stats.StatusRequests++
}

// sendStatusReply reports our delivered cursor and epoch to the sequencer.
func (c *Core) sendStatusReply() { c.sendStatusReplyTo(c.sequencerMember()) }

func (c *Core) sendStatusReplyTo(m *member) {
	c.header(0, 0)
	c.status = frame.StatusBody{T: frame.SeqStatusReply, Epoch: c.epoch, Delivered: c.next - 1}
	c.emit(m.mac, &c.status)
	c.stats.StatusReplies++
}

// sendRetransmit asks m, point to point, for every global missing in
// [next, end): gaps, and (method 2) payloads whose request never came.
// end is knownEnd, or the agreed end during an election.
func (c *Core) sendRetransmit(m *member, epoch uint32) {
	end := c.knownEnd
	if c.role == electing {
		end = c.agreed + 1
	}
	maxRanges := (frame.MaxPayload(c.cfg.MTU, ackEntries, 0) - 6) / 8
	ranges := c.retx.Ranges[:0]
	for g := c.recvd; frame.SeqLess(g, end) && len(ranges) < maxRanges; g++ {
		if en := &c.log[g&c.lmask]; en.global == g && en.state == full {
			continue
		}
		if n := len(ranges); n > 0 && ranges[n-1].Last == g-1 {
			ranges[n-1].Last = g
		} else {
			ranges = append(ranges, frame.Range{First: g, Last: g})
		}
	}
	c.retx.Ranges = ranges
	if len(ranges) == 0 {
		return
	}
	c.retx.Epoch = epoch
	c.header(0, 0)
	c.emit(m.mac, &c.retx)
	c.stats.RetransmitsAsked++
}

// sendElection broadcasts (or sends to one member) our election state.
func (c *Core) sendElection(phase frame.ElectionPhase, dst [6]byte) {
	c.header(0, 0)
	c.election = frame.ElectionBody{Epoch: c.electEpoch, Phase: phase, Candidate: c.electCand, LastGlobal: c.recvd - 1}
	c.emit(dst, &c.election)
	c.electAt = c.now.Add(c.cfg.ElectionRetry)
}

// sendElected announces (again) who is the sequencer of our epoch and where
// the epochs before it end: to the group after the election, to one member
// still behind afterwards (at most once per ElectionRetry each). Followers
// relay it too, to a voter that missed it while the sequencer died.
func (c *Core) sendElected(m *member) {
	if m != nil {
		if m.electedAt != 0 && c.now < m.electedAt.Add(c.cfg.ElectionRetry) {
			return
		}
		m.electedAt = c.now
	}
	dst := c.cfg.dst
	if m != nil {
		dst = m.mac
	}
	c.header(0, 0)
	c.election = frame.ElectionBody{Epoch: c.epoch, Phase: frame.ElectionElected, Candidate: c.sequencerMember().id, LastGlobal: c.base - 1}
	c.emit(dst, &c.election)
}
