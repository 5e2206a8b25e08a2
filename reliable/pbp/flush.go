package pbp

import (
	"errors"

	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/reliable/core"
)

// The view change's hooks (reliable/view, docs/membership.md): a core
// runs one view; when the view changes, the membership layer freezes it,
// reads how far it sent and delivered, has it finish up to the agreed cut
// and relays what a departing member sent from the frames it retained.

// ErrFrozen: the core was frozen for a view change; messages go to the
// next view's core.
var ErrFrozen = errors.New("pbp: frozen for a view change")

// kept is a delivered frame retained for relaying (Config.Retain).
type kept struct {
	seq     uint32
	full    bool
	bundled bool
	// pins counts the layers' holds on data (Pin): a frame kept in
	// this slot later gets a new buffer, leaving data to them.
	pins int
	// turn is the Ready (Core.batch) whose deliveries data was handed
	// out in: until its Advance, a frame kept here gets a new buffer.
	turn uint64
	data []byte
	// loan is the link's loan data lies in (StepLent), or none: data is
	// then a view of the received frame, kept from the kernel until the
	// loan goes back (giveBack).
	loan core.Loan
}

// keep copies the payload of the frame from p being delivered now
// (p.expected), which lies in the received bytes (valid only until
// Advance: on a ring link, the kernel's receive ring), into its
// retention ring and returns the copy, which the frame's messages are
// delivered from. The last Window frames of every sender are enough: a
// sender numbers frame s+Window only once every member acknowledged s,
// so whatever one member delivered beyond what another has, the other is
// less than a window behind. For the same reason one turn (Ready to
// Advance) delivers at most a window of a sender's frames, none sharing a
// slot; one that no longer counts us is not bounded so, and a slot whose
// buffer this turn handed out already gets a new one.
//
// A frame every other member holds already is not copied (needKeep):
// keep marks its slot empty and returns body itself, so its messages are
// delivered from where the frame lies, as without Retain.
func (c *Core) keep(p *peer, body []byte, bundled bool) []byte {
	k := c.keepSlot(p)
	if k == nil {
		return body
	}
	if k.turn == c.batch {
		// This turn delivered from data already: a sender that no
		// longer counts us (removedUs lets its frames in order pass)
		// sent more than a window of frames to the turn.
		c.lendKept(k)
		k.data = nil
	}
	k.seq, k.full, k.bundled, k.turn = p.expected, true, bundled, c.batch
	if c.loan != core.NoLoan && sameArray(body, c.loanView) {
		// The link lends the frame's bytes (StepLent): kept where they
		// lie, no copy. Bytes of another frame (a relay's copy) are not
		// under the loan: sameArray.
		c.lendKept(k)
		k.data, k.loan = body, c.loan
		c.taken = append(c.taken, c.loan)
		c.stats.KeptLent++
		return k.data
	}
	if k.loan != core.NoLoan {
		c.giveBack(k)
		k.data = c.buffer()
	}
	k.data = append(k.data[:0], body...)
	return k.data
}

// giveBack returns k's loan (Loans reports it): its bytes are the
// link's again from its next Recv on, after this turn's deliveries from
// them were handed out.
func (c *Core) giveBack(k *kept) {
	c.returned = append(c.returned, k.loan)
	k.data, k.loan = nil, core.NoLoan
}

// StepLent implements core.Borrower: Step, and a frame retained from v
// (Config.Retain) is kept in v's bytes, lent under loan, instead of
// copied (Stats.KeptLent).
func (c *Core) StepLent(now Time, src, dst [6]byte, v frame.View, loan core.Loan) error {
	c.loan, c.loanView = loan, v
	err := c.Step(now, src, dst, v)
	c.loan, c.loanView = core.NoLoan, nil
	return err
}

// Borrows implements core.Borrower: only a core that retains
// (Config.Retain) keeps received bytes past the turn.
func (c *Core) Borrows() bool { return c.cfg.Retain }

// Loans implements core.Borrower.
func (c *Core) Loans(taken, returned []core.Loan) ([]core.Loan, []core.Loan) {
	taken, returned = append(taken, c.taken...), append(returned, c.returned...)
	c.taken, c.returned = c.taken[:0], c.returned[:0]
	return taken, returned
}

// Reclaim implements core.Borrower: every retained frame under a loan
// before before is copied into a frame buffer of the core's (or, with
// forget, dropped from retention) and its loan given back
// (Stats.LoansReclaimed).
func (c *Core) Reclaim(before core.Loan, forget bool) {
	for i := range c.peers {
		for j := range c.peers[i].kept {
			k := &c.peers[i].kept[j]
			if k.loan == core.NoLoan || k.loan >= before {
				continue
			}
			data := k.data
			c.giveBack(k)
			if forget {
				k.full = false
				continue
			}
			// A new buffer, not one of the pool: those may hold the
			// last turn's deliveries until the next Step.
			k.data = append(make([]byte, 0, c.cfg.linkMax), data...)
			c.stats.LoansReclaimed++
		}
	}
}

// keepHeld retains the frame from p being delivered now (p.expected)
// that waited in the reorder ring, in buf, the ring's buffer of its own:
// the retention slot takes buf itself instead of a copy (Stats.KeptHeld),
// and the caller must not recycle it. The slot's previous buffer goes
// back to the pool of frame buffers at Advance (lendKept). False if the
// frame need not be retained (needKeep): the caller recycles buf.
func (c *Core) keepHeld(p *peer, buf []byte, bundled bool) bool {
	k := c.keepSlot(p)
	if k == nil {
		return false
	}
	c.stats.KeptHeld++
	c.lendKept(k)
	k.seq, k.full, k.bundled, k.data, k.turn = p.expected, true, bundled, buf, c.batch
	return true
}

// lendKept gives k's buffer, which is leaving the slot, back to the pool
// of frame buffers at Advance (this Ready's deliveries may lie in it), if
// it is one of theirs (a copy keep sized to its frame is left to the
// collector).
func (c *Core) lendKept(k *kept) {
	if k.loan != core.NoLoan {
		c.giveBack(k)
		return
	}
	if k.data != nil && cap(k.data) >= c.cfg.linkMax {
		c.lent = append(c.lent, k.data)
	}
}

// keepSlot is the retention slot of p's frame being delivered now, and
// counts it (Stats.Kept); a buffer a layer still pins there is left to
// the layer. Nil, the slot marked empty (Stats.KeepSkipped), if the
// frame need not be retained (needKeep).
func (c *Core) keepSlot(p *peer) *kept {
	k := &p.kept[p.expected&c.mask]
	if k.pins > 0 {
		k.data, k.pins = nil, 0 // the pinned buffer is the layer's now
	}
	if !c.needKeep(p) {
		k.full = false
		if k.loan != core.NoLoan {
			c.giveBack(k)
		}
		c.stats.KeepSkipped++
		return nil
	}
	c.stats.Kept++
	return k
}

// needKeep reports whether the frame of p's being delivered now
// (p.expected) must be retained for a view change: the core is frozen
// (a change is under way: what it delivers now may be relayed, and the
// membership layer may deliver it again from here), or some member other
// than p and this one may lack it, as far as its last ack vector heard
// says. A view change relays a departing sender's frames only to members
// whose flush reports them missing, and a member's flush reports at least
// what it acknowledged, so a frame every other member acknowledged before
// the freeze is never relayed by this one: with two members no frame is
// kept. (A layer that holds a message past the turn, vtotal, pins it in
// the retained copy; a frame not kept is copied there instead.)
func (c *Core) needKeep(p *peer) bool {
	if c.frozen {
		return true
	}
	col := int(p.id) - int(c.cfg.ackBase)
	for i := range c.peers {
		q := &c.peers[i]
		if q != p && !frame.SeqLess(p.expected, q.held(col)) {
			return true
		}
	}
	return false
}

// Pin keeps data, a message this core delivered from frame seq of
// member id (with Config.Retain its deliveries lie in the frame's
// retained copy), unchanged until Unpin: a layer that holds a message
// beyond the turn (the total order's) keeps it there instead of copying
// it. The copy stays the core's for relaying (Retained); a frame that
// comes to its slot while it is pinned gets a new buffer. False if data
// is not in the retained copy of that frame (not retained, or delivered
// from elsewhere: the membership layer's relays): the layer copies it.
//
// Of this member's own frames (id Self), data must lie in the body of
// frame seq as Own returns it: a layer that delivers its own messages
// (the total order) reads them there instead of keeping a copy.
func (c *Core) Pin(id frame.MemberID, seq uint32, data []byte) bool {
	if id == c.cfg.Self {
		h, ok := c.ownSlot(seq)
		if !ok || !sameArray(h.buf, data) {
			return false
		}
		h.pins++
		return true
	}
	p, _ := c.peer(id)
	if p == nil || p.kept == nil {
		return false
	}
	k := &p.kept[seq&c.mask]
	if !k.full || k.seq != seq || k.loan != core.NoLoan || !sameArray(k.data, data) {
		// Lent bytes go back to the link when the core says: a layer
		// cannot hold them past that.
		return false
	}
	k.pins++
	return true
}

// Unpin ends one Pin of frame seq of member id (nothing if its slot
// holds another frame by now).
func (c *Core) Unpin(id frame.MemberID, seq uint32) {
	if id == c.cfg.Self {
		if h, ok := c.ownSlot(seq); ok && h.pins > 0 {
			h.pins--
		}
		return
	}
	p, _ := c.peer(id)
	if p == nil || p.kept == nil {
		return
	}
	if k := &p.kept[seq&c.mask]; k.full && k.seq == seq && k.pins > 0 {
		k.pins--
	}
}

// Own is the body of this member's frame seq as sent (bundled: each
// message after its 2-byte length), while the core holds it: numbered,
// and its slot not yet taken by a later frame. It stays unchanged while
// the core runs until a later frame takes its slot, Window frames or more
// on, or, pinned (Pin), until Unpin.
func (c *Core) Own(seq uint32) (body []byte, bundled, ok bool) {
	h, ok := c.ownSlot(seq)
	if !ok {
		return nil, false, false
	}
	return h.buf[c.pre:], h.count > 1, true
}

// ownSlot is the history slot of this member's numbered frame seq, if it
// holds it still.
func (c *Core) ownSlot(seq uint32) (*sent, bool) {
	if !frame.SeqLess(seq, c.nextSeq) || int(c.nextSeq+uint32(c.pending)-seq) > len(c.history) {
		return nil, false
	}
	return &c.history[seq&c.hmask], true
}

// sameArray reports whether a and b are slices of one array: their
// capacities end at the same element (b a slice of a, without a limit
// on its capacity).
func sameArray(a, b []byte) bool {
	return cap(a) > 0 && cap(b) > 0 && &a[:cap(a)][cap(a)-1] == &b[:cap(b)][cap(b)-1]
}

// Freeze stops the core from numbering and accepting new messages: it
// keeps repairing and delivering, so that what was sent reaches everyone,
// but sends no new Data (Propose returns ErrFrozen). It returns the
// messages accepted and not yet sent, in order, copied, for the next
// view's core.
//
// From now on its frames acknowledge what it had delivered when frozen,
// no more: that is what the membership layer's flush reports (it reads
// DeliveredFrom just before), so an ack never says this member holds a
// frame that the view change's cut may leave out. Safe stability is read
// from the others' acks (the acknowledgement matrix, acks.go): a member
// that delivered a message because every member acknowledged it must be
// able to count on every survivor delivering it in the view, also when
// its sender fails (the cut of a departing sender is the most any
// survivor's flush reports). Its senders' windows and the stall detector
// wait meanwhile: acks that stopped moving during a change are not a
// stall.
func (c *Core) Freeze() [][]byte {
	if c.frozen {
		return nil
	}
	c.frozen = true
	for i := range c.peers {
		c.peers[i].frozenAt = c.peers[i].expected
	}
	var out [][]byte
	for i := range c.pending {
		h := &c.history[(c.nextSeq+uint32(i))&c.hmask]
		body := h.buf[c.pre:]
		if h.count == 1 {
			out = append(out, append([]byte(nil), body...))
			continue
		}
		for len(body) >= 2 {
			n := int(body[0])<<8 | int(body[1])
			out = append(out, append([]byte(nil), body[2:2+n]...))
			body = body[2+n:]
		}
	}
	c.pending, c.pendingMsgs, c.openLen = 0, 0, 0
	return out
}

// PendingMessages is how many accepted messages are not numbered yet:
// those Freeze would return.
func (c *Core) PendingMessages() int { return c.pendingMsgs }

// Frozen reports whether Freeze was called.
func (c *Core) Frozen() bool { return c.frozen }

// Sent is this member's next sequence number: it sent every frame before
// it.
func (c *Core) Sent() uint32 { return c.nextSeq }

// DeliveredFrom is the next sequence number to deliver from member id (it
// delivered every frame before it); false if id is not another member.
func (c *Core) DeliveredFrom(id frame.MemberID) (uint32, bool) {
	p, _ := c.peer(id)
	if p == nil {
		return 0, false
	}
	return p.expected, true
}

// Live reports whether member id is another member this core has not
// removed (failed, stalled or left).
func (c *Core) Live(id frame.MemberID) bool {
	p, _ := c.peer(id)
	return p != nil && p.live
}

// HasLeft reports whether this core removed member id because it left
// cleanly (MemberLeft: its Leave arrived and everything it sent before was
// delivered), as soon as it did: a layer above learns it in the Step that
// removed it, not only from the Ready's event.
func (c *Core) HasLeft(id frame.MemberID) bool {
	p, _ := c.peer(id)
	return p != nil && p.left
}

// Removals counts the members this core removed (failed, stalled or
// left): Live and HasLeft change only when it grows, so a layer above may
// keep what it computed from them until it does.
func (c *Core) Removals() uint64 { return c.removals }

// AllSent reports whether every frame this member sent is acknowledged by
// every live member.
func (c *Core) AllSent() bool { return c.stable == c.nextSeq }

// Retained returns frame seq of member id as it was delivered here (with
// Config.Retain): its payload, in bundle form if bundled. False if it is
// not retained (not delivered yet, or more than a window back).
func (c *Core) Retained(id frame.MemberID, seq uint32) (data []byte, bundled, ok bool) {
	p, _ := c.peer(id)
	if p == nil || p.kept == nil {
		return nil, false, false
	}
	k := &p.kept[seq&c.mask]
	if !k.full || k.seq != seq || !frame.SeqLess(seq, p.expected) {
		return nil, false, false
	}
	return k.data, k.bundled, true
}

// Member returns member id's entry in this core's member list.
func (c *Core) Member(id frame.MemberID) (frame.MemberInfo, bool) {
	for _, m := range c.cfg.Members {
		if m.ID == id {
			return m, true
		}
	}
	return frame.MemberInfo{}, false
}

// ViewID is the view this core runs.
func (c *Core) ViewID() uint32 { return c.cfg.ViewID }
