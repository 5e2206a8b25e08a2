package seq

import (
	"fmt"

	"github.com/rbcast/rbcast/frame"
)

// Step handles one received frame, already validated by frame.Parse (the
// group is checked again here). src is the Ethernet source address. A
// frame that is dropped changes no protocol state; the returned error says
// why (errors.Is with the Err* values) and the drop is counted. Duplicates
// and frames of other epochs are normal, counted, and return nil.
//
// Nothing delivered aliases v: messages are kept in the log until stable,
// so they are copied once on arrival.
func (c *Core) Step(now Time, src, _ [6]byte, v frame.View) error {
	c.touch(now)
	if c.handed != c.nextReq {
		c.sendSealed()
	}
	if c.role == halted {
		return ErrHalted
	}
	if c.left {
		c.stepLeft(src, v)
		return nil // finished: the group goes on without us
	}
	if g := v.Group(); g != c.cfg.Group {
		c.stats.WrongGroup++
		return fmt.Errorf("%w: group %d, this member is in group %d", ErrGroup, g, c.cfg.Group)
	}
	id := v.Sender()
	m := c.member(id)
	switch {
	case m == nil:
		c.stats.NotMember++
		return fmt.Errorf("%w: sender id %d (from %x)", ErrNotMember, id, src)
	case m.self:
		if src == c.cfg.selfMAC && v.Incarnation() == c.cfg.selfInc {
			return nil // our own broadcast, looped back
		}
		c.stats.WrongMAC++
		return fmt.Errorf("%w: frame claims our own id %d from %x", ErrSourceMAC, id, src)
	case v.Incarnation() != m.inc:
		c.stats.WrongIncarnation++
		return fmt.Errorf("%w: member %d incarnation %d, expected %d", ErrIncarnation, id, v.Incarnation(), m.inc)
	case src != m.mac:
		c.stats.WrongMAC++
		return fmt.Errorf("%w: member %d from %x, its MAC is %x", ErrSourceMAC, id, src, m.mac)
	}
	t := v.Type()
	switch t {
	case frame.SeqRequest, frame.SeqData, frame.SeqAccept, frame.SeqStatusRequest,
		frame.SeqStatusReply, frame.SeqRetransmit, frame.SeqElection, frame.SeqMember, frame.Leave:
	default:
		c.stats.UnhandledTypes++
		return fmt.Errorf("%w: %v from member %d", ErrFrameType, t, id)
	}
	if c.role == sequencer && !m.live && !m.gone && (t == frame.SeqRequest || t == frame.SeqStatusReply || t == frame.SeqRetransmit) &&
		!(t == frame.SeqStatusReply && v.StatusEpoch() == c.epoch && c.readmit(m, v.StatusDelivered()+1)) {
		c.stats.FromRemoved++
		if t == frame.SeqStatusReply && frame.SeqLess(v.StatusEpoch(), c.epoch) ||
			t == frame.SeqRetransmit && frame.SeqLess(v.RetransmitEpoch(), c.epoch) {
			c.sendElected(m) // it missed our Elected: it adopts it (and is taken back) or halts
		} else {
			c.tellRemoved(m)
		}
		return fmt.Errorf("%w: member %d", ErrRemoved, id)
	}
	m.lastHeard = c.now
	if c.role == electing && c.fromOldSequencer(m, v) {
		// The sequencer we suspected is alive after all: no election can
		// finish without it noticing, so go back to following it. Our
		// votes stand; if one of them elects a sequencer anyway, Elected
		// checks that we delivered nothing beyond its agreed end.
		c.role = follower
		c.agreedSet = false
		// The timers the election stopped: ask for what is missing and
		// send what waited, at the next Tick.
		if c.next != c.knownEnd {
			c.repairAt, c.repairNext, c.repairBackoff = c.now, c.next, 0
		}
		c.resendAt, c.resendBackoff = 0, 0
		c.armResend()
		if c.resendAt != 0 {
			c.resendAt = c.now
		}
	}
	if c.role == sequencer {
		c.applyAck(m, v)
	}
	var err error
	switch t {
	case frame.SeqRequest:
		err = c.stepRequest(m, v)
	case frame.SeqData:
		err = c.stepData(m, v)
	case frame.SeqMember:
		err = c.stepMember(m, v)
	case frame.SeqAccept:
		err = c.stepAccept(m, v)
	case frame.SeqStatusRequest:
		c.stepStatusRequest(m, v)
	case frame.SeqStatusReply:
		c.stepStatusReply(m, v)
	case frame.SeqRetransmit:
		c.stepRetransmit(m, v)
	case frame.SeqElection:
		c.stepElection(m, v)
	case frame.Leave:
		c.stepLeave(m, v)
	}
	if c.role == electing {
		c.electionStep()
	}
	return err
}

// fromOldSequencer reports whether v is a frame of our current epoch from
// its sequencer, proof that it lives.
func (c *Core) fromOldSequencer(m *member, v frame.View) bool {
	if m != c.sequencerMember() || c.agreedSet || m.handing {
		return false // (a late frame of a sequencer that hands off)
	}
	switch v.Type() {
	case frame.SeqData:
		return v.SeqDataEpoch() == c.epoch && !v.Retransmission()
	case frame.SeqMember:
		return v.SeqMemberChange().Epoch == c.epoch && !v.Retransmission()
	case frame.SeqAccept:
		return v.AcceptEpoch() == c.epoch
	case frame.SeqStatusRequest:
		return v.StatusEpoch() == c.epoch
	}
	return false
}

// takesData reports whether a numbered message (global g of epoch e) from
// m may enter the log. A follower takes the current epoch from its
// sequencer, and anything below the epoch's base from it too: that is the
// agreed prefix, which the sequencer holds (catching up after an
// election). During an election only the candidate takes messages, up to
// the agreed end, from the voter it asked. So a late frame of a dead
// sequencer, whose numbers a later epoch may have reassigned, never
// enters.
func (c *Core) takesData(m *member, e, g uint32) bool {
	switch c.role {
	case follower:
		if m != c.sequencerMember() {
			return false
		}
		return e == c.epoch || frame.SeqLess(g, c.base)
	case electing:
		return c.agreedSet && c.electCand == c.cfg.Self && m == c.fetchFrom && !frame.SeqLess(c.agreed, g)
	}
	return false
}

// originOf returns the member that proposed uid, if it is one.
func (c *Core) originOf(u frame.UID) *member {
	o := c.member(u.Origin)
	if o == nil || o.inc != u.Incarnation {
		return nil
	}
	return o
}

// stepData takes a numbered message: the sequencer's broadcast (method 1,
// step 4), or a retransmission.
func (c *Core) stepData(m *member, v frame.View) error {
	e, g, u := v.SeqDataEpoch(), v.Seq(), v.SeqDataUID()
	if c.originOf(u) == nil {
		c.stats.BadOrigin++
		return fmt.Errorf("%w: global %d names origin %d incarnation %d", ErrBadOrigin, g, u.Origin, u.Incarnation)
	}
	if !c.admit(m, e, g, v.SeqDataSafe(), v.SeqDataHeld()) {
		return nil
	}
	if u.Origin == c.cfg.Self {
		c.seen(u.Seq)
	}
	en := c.logEntry(g)
	if en == nil {
		return nil
	}
	en.global, en.epoch, en.uid, en.state, en.change = g, e, u, full, 0
	en.data = append(c.reusable(en), v.Payload()...)
	en.bundled = v.Flags()&frame.FlagBundle != 0
	c.took(g)
	return nil
}

// logEntry returns the log slot for global g arriving complete, or nil
// when g is delivered, held already or beyond the history (counted).
func (c *Core) logEntry(g uint32) *entry {
	switch {
	case frame.SeqLess(g, c.next):
		c.stats.Duplicates++
		return nil
	case int(g-c.next) >= c.cfg.History:
		c.stats.BeyondHistory++
		return nil
	}
	en := &c.log[g&c.lmask]
	if en.global == g && en.state == full {
		c.stats.Duplicates++
		return nil
	}
	if en.global == g && en.state == accepted {
		c.awaiting--
	}
	return en
}

// took: global g entered the log complete.
func (c *Core) took(g uint32) {
	if frame.SeqLess(c.knownEnd, g+1) {
		c.knownEnd = g + 1 // a retransmission from a voter during an election
	}
	c.drain()
}

// admit is what SeqData and SeqMember frames share once their origin is
// known: global g numbered in epoch e is taken, or counted against its
// epoch (and a newer epoch heard by a sequencer halts it); the current
// sequencer's frames also carry its safe and all-held cursors and say
// that g exists. It reports whether to log g.
func (c *Core) admit(m *member, e, g, safe, held uint32) bool {
	if !c.takesData(m, e, g) {
		c.countEpoch(e)
		c.newerEpoch(m, e)
		return false
	}
	if e == c.epoch && m == c.sequencerMember() {
		c.learnSafe(safe)
		c.learnHeld(held)
		c.learnEnd(g+1, true)
	}
	return true
}

// stepMember takes a change of the member list numbered in the stream
// (announceChanges): like a SeqData, without a payload; delivered in its
// place as a MemberFailed or MemberReturned event.
func (c *Core) stepMember(m *member, v frame.View) error {
	b, g := v.SeqMemberChange(), v.Seq()
	u := frame.UID{Origin: b.Member, Incarnation: b.Incarnation}
	if c.originOf(u) == nil {
		c.stats.BadOrigin++
		return fmt.Errorf("%w: global %d (%v) names member %d incarnation %d", ErrBadOrigin, g, b.Change, b.Member, b.Incarnation)
	}
	if !c.admit(m, b.Epoch, g, b.Safe, b.Held) {
		return nil
	}
	en := c.logEntry(g)
	if en == nil {
		return nil
	}
	en.data = c.reusable(en)
	en.global, en.epoch, en.uid, en.state, en.bundled = g, b.Epoch, u, full, false
	en.change, en.reason = b.Change, b.Reason
	c.took(g)
	return nil
}

// newerEpoch: a sequencer that hears another member number in a newer
// epoch was replaced without its vote (it was cut off, or falsely
// suspected): it halts, as if it had crashed. A follower in that case
// learns the epoch from the Elected its next status reply brings.
func (c *Core) newerEpoch(m *member, e uint32) {
	if c.role == sequencer && frame.SeqLess(c.epoch, e) {
		c.halt(e, 0, fmt.Sprintf("member %d numbers in epoch %d, newer than ours (%d), elected without our vote", m.id, e, c.epoch))
	}
}

func (c *Core) countEpoch(e uint32) {
	if frame.SeqLess(c.epoch, e) {
		c.stats.FutureEpoch++
	} else {
		c.stats.StaleEpoch++
	}
}

// stepAccept takes Accepts (method 2): each binds a global number to a
// broadcast request, matched here by its unique id.
func (c *Core) stepAccept(m *member, v frame.View) error {
	e := v.AcceptEpoch()
	if c.role != follower || m != c.sequencerMember() || e != c.epoch {
		c.countEpoch(e)
		c.newerEpoch(m, e)
		return nil
	}
	al := v.Accepts()
	for i := range al.Len() {
		if c.originOf(al.At(i).UID) == nil {
			c.stats.BadOrigin++
			return fmt.Errorf("%w: accept %d names origin %d", ErrBadOrigin, i, al.At(i).UID.Origin)
		}
	}
	for i := range al.Len() {
		c.takeAccept(e, al.At(i))
	}
	c.learnSafe(v.AcceptSafe())
	c.learnHeld(v.AcceptHeld())
	c.learnEnd(v.Seq()+1, false) // Seq: the highest global numbered
	c.drain()
	return nil
}

func (c *Core) takeAccept(e uint32, a frame.AcceptEntry) {
	g, u := a.Global, a.UID
	if u.Origin == c.cfg.Self {
		c.seen(u.Seq)
	}
	switch {
	case frame.SeqLess(g, c.next):
		c.stats.Duplicates++
		return
	case int(g-c.next) >= c.cfg.History:
		c.stats.BeyondHistory++
		return
	}
	en := &c.log[g&c.lmask]
	if en.global == g && en.state != empty {
		c.stats.Duplicates++
		return
	}
	en.global, en.epoch, en.uid, en.state, en.change = g, e, u, accepted, 0
	c.awaiting++
	if c.fill(en) {
		return
	}
	// The broadcast request has not arrived (lost, or still on its way):
	// ask the sequencer for it when the repair timer fires.
	if c.repairAt == 0 {
		c.repairAt = c.now.Add(c.cfg.NackTimeout)
		c.repairNext, c.repairBackoff = c.next, 0
	}
}

// fill gives an accepted entry its payload from our own pending request or
// from a buffered broadcast request.
func (c *Core) fill(en *entry) bool {
	u := en.uid
	if u.Origin == c.cfg.Self {
		if frame.SeqLess(u.Seq, c.firstPend) || !frame.SeqLess(u.Seq, c.nextReq) || (c.open && u.Seq == c.nextReq) {
			return false
		}
		data, bundled := requestBody(&c.pend[u.Seq&c.rmask])
		en.data, en.bundled = append(c.reusable(en), data...), bundled
	} else {
		o := c.originOf(u)
		if o == nil || o.inbox == nil {
			return false
		}
		q := &o.inbox[u.Seq&c.rmask]
		if !q.full || q.seq != u.Seq {
			return false
		}
		// Move the buffer: the request is no longer needed apart.
		old := c.reusable(en)
		en.data, q.data = q.data, old
		en.bundled, q.full = q.bundled, false
	}
	en.state = full
	c.awaiting--
	c.stats.PayloadsMatched++
	return true
}

// stepRequest takes a request: at the sequencer to number it (step 4, and
// the duplicate check by unique id), elsewhere (method 2) to keep it for
// its Accept.
func (c *Core) stepRequest(o *member, v frame.View) error {
	r := v.Seq()
	if c.role == sequencer {
		if !frame.SeqLess(o.seqdSeq, r) {
			c.stats.DuplicateRequests++
			c.answerDuplicate(o)
			return nil
		}
		if r-o.seqdSeq > c.rmask+1 {
			c.stats.BeyondHistory++ // a correct sender stays within its window
			return nil
		}
		c.hold(o, r, v)
		c.sequenceFrom(o)
		return nil
	}
	if !frame.SeqLess(o.delivSeq, r) || r-o.delivSeq > c.rmask+1 {
		return nil
	}
	c.hold(o, r, v)
	if c.awaiting > 0 && c.role == follower { // a voter's log is frozen
		u := frame.UID{Origin: o.id, Incarnation: o.inc, Seq: r}
		for g := c.next; g != c.knownEnd; g++ {
			if en := &c.log[g&c.lmask]; en.global == g && en.state == accepted && en.uid == u {
				c.fill(en)
				break
			}
		}
		c.drain()
	}
	return nil
}

// hold copies request r of o into o's ring.
func (c *Core) hold(o *member, r uint32, v frame.View) {
	if o.inbox == nil {
		o.inbox = make([]request, c.rmask+1)
	}
	q := &o.inbox[r&c.rmask]
	if q.full && q.seq == r {
		return
	}
	q.seq, q.full, q.bundled = r, true, v.Flags()&frame.FlagBundle != 0
	q.data = append(q.data[:0], v.Payload()...)
}

// stepStatusRequest: the sequencer's heartbeat, request for status, and
// news of the highest global numbered.
func (c *Core) stepStatusRequest(m *member, v frame.View) {
	e := v.StatusEpoch()
	switch {
	case c.role == sequencer:
		c.newerEpoch(m, e)
		return
	case e == c.epoch && m == c.sequencerMember() && c.role == follower:
		c.learnSafe(v.StatusSafe())
		c.learnHeld(v.StatusHeld())
		c.learnEnd(v.StatusDelivered()+1, false)
		if v.Flags()&frame.FlagAckRequest != 0 {
			c.sendStatusReplyTo(m)
		}
		c.drain()
	case frame.SeqLess(c.epoch, e):
		// A sequencer of an epoch we have not joined: tell it our epoch,
		// it answers with its Elected.
		c.countEpoch(e)
		c.sendStatusReplyTo(m)
	}
}

// stepStatusReply: a member's delivered cursor (also in the ack entry) and
// its epoch.
func (c *Core) stepStatusReply(m *member, v frame.View) {
	if c.role != sequencer {
		return
	}
	if e := v.StatusEpoch(); frame.SeqLess(e, c.epoch) {
		c.sendElected(m)
		return
	}
	c.ack(m, v.StatusDelivered()+1)
}

// stepRetransmit answers a request for missing globals from the log, point
// to point (the paper's private retransmission). Every member answers: the
// candidate of an election fetches from the voters.
func (c *Core) stepRetransmit(m *member, v frame.View) {
	if c.role == sequencer && frame.SeqLess(v.RetransmitEpoch(), c.epoch) {
		c.sendElected(m)
	}
	rl := v.RetransmitRanges()
	budget := c.cfg.History
	for i := range rl.Len() {
		r := rl.At(i)
		for g := r.First; budget > 0; g++ {
			en := &c.log[g&c.lmask]
			if en.global == g && en.state == full {
				c.sendEntry(en, m.mac, frame.FlagRetransmit)
				c.stats.RetransmitsAnswered++
			}
			budget--
			if g == r.Last {
				break
			}
		}
	}
}

// learnEnd records that globals before end are numbered; arriving says
// end-1 is being taken now. A global newly known and not held at all (a
// gap, not an Accept waiting for its payload) is asked for at the next
// flush.
func (c *Core) learnEnd(end uint32, arriving bool) {
	if !frame.SeqLess(c.knownEnd, end) {
		return
	}
	if int(end-c.recvd) > c.cfg.History && c.role == follower {
		// The sequencer never numbers global g+History before every
		// live member delivered g: it no longer counts us. We were
		// removed (silent past FailureTimeout, or our vote came too
		// late), and what we miss is gone from its history.
		c.halt(c.epoch, end-1, fmt.Sprintf("the sequencer numbered up to global %d, more than the history (%d) beyond what we delivered (up to %d): it removed us", end-1, c.cfg.History, c.next-1))
		return
	}
	if int(end-c.next) > c.cfg.History {
		c.stats.BeyondHistory++
		end, arriving = c.next+uint32(c.cfg.History), false
		if !frame.SeqLess(c.knownEnd, end) {
			return
		}
	}
	old := c.knownEnd
	c.knownEnd = end
	if arriving {
		end--
	}
	for g := old; g != end; g++ {
		en := &c.log[g&c.lmask]
		if en.global == g && en.state == full {
			continue
		}
		if en.global != g || en.state == empty {
			c.repairDue = true
		}
		if c.repairAt == 0 {
			c.repairAt = c.now.Add(c.cfg.NackTimeout)
			c.repairNext, c.repairBackoff = c.next, 0
		}
	}
}

// repairTimeout asks again for everything still missing (gaps and
// payloads), backing off while nothing arrives.
func (c *Core) repairTimeout() {
	c.repairAt = 0
	if c.recvd == c.knownEnd {
		return
	}
	if c.recvd == c.repairNext {
		c.repairBackoff = min(c.repairBackoff+1, maxRepairBackoff)
	} else {
		c.repairBackoff = 0
	}
	c.repairNext = c.recvd
	c.sendRetransmit(c.sequencerMember(), c.epoch)
	c.repairAt = c.now.Add(c.cfg.NackTimeout << c.repairBackoff)
}

// seen marks our request r as numbered.
func (c *Core) seen(r uint32) {
	if frame.SeqLess(r, c.firstPend) || !frame.SeqLess(r, c.nextReq) {
		return
	}
	if p := &c.pend[r&c.rmask]; !p.known {
		p.known = true
		c.progress()
	}
}

// drain advances the received cursor over complete entries and delivers
// the log in order from next up to it and the safe cursor.
func (c *Core) drain() {
	for c.recvd != c.knownEnd {
		en := &c.log[c.recvd&c.lmask]
		if en.global != c.recvd || en.state != full {
			break
		}
		c.recvd++
	}
	if c.recvd == c.knownEnd {
		c.repairAt, c.repairBackoff = 0, 0
	}
	if c.role == sequencer {
		c.members[c.self].rcvd = c.recvd
		c.computeSafe()
		c.computeHeld()
	}
	from := c.next
	gated := c.gated()
	for c.next != c.recvd && (!gated || frame.SeqLess(c.next, c.safe)) && c.cutAt != c.batch {
		c.deliverEntry(&c.log[c.next&c.lmask])
	}
	if c.role == sequencer && c.next != from && c.waiting {
		// Our own deliveries free history slots too (computeStable).
		if c.computeStable() && !c.historyFull() {
			c.sequenceAll()
		}
	}
}

// learnSafe takes the safe cursor our sequencer announced.
func (c *Core) learnSafe(s uint32) {
	if frame.SeqLess(c.safe, s) {
		c.safe = s
	}
}

func (c *Core) deliverEntry(en *entry) {
	if en.change != 0 {
		c.deliverChange(en)
		return
	}
	g := c.next
	en.lentAt = c.batch
	b := en.data
	if !en.bundled {
		c.deliveries = append(c.deliveries, Delivery{Global: g, Epoch: en.epoch, From: en.uid.Origin, Seq: en.uid.Seq, Data: b})
		c.stats.Delivered++
	} else {
		for i := 0; len(b) >= 2; i++ {
			n := int(b[0])<<8 | int(b[1])
			c.deliveries = append(c.deliveries, Delivery{Global: g, Epoch: en.epoch, From: en.uid.Origin, Seq: en.uid.Seq, Index: i, Data: b[2 : 2+n]})
			c.stats.Delivered++
			b = b[2+n:]
		}
	}
	c.stats.DeliveredGlobals++
	if o := c.originOf(en.uid); o != nil && frame.SeqLess(o.delivSeq, en.uid.Seq) {
		o.delivSeq = en.uid.Seq
	}
	if en.uid.Origin == c.cfg.Self && !frame.SeqLess(en.uid.Seq, c.firstPend) && frame.SeqLess(en.uid.Seq, c.nextReq) {
		// Our own message in its place: the request is done.
		n := 0
		for r := c.firstPend; r != en.uid.Seq+1; r++ {
			n += c.pend[r&c.rmask].count
		}
		c.deliveredMine(g, n)
		c.firstPend = en.uid.Seq + 1
		c.progress()
	}
	c.next++
	c.sinceReport++
	if c.role == sequencer {
		c.members[c.self].acked = c.next
	}
}

// deliverChange delivers a change of the member list in its place: the
// event follows the messages of this Ready, and nothing more is delivered
// in it (cutAt). A change of ourselves is not reported: a removed member
// that still hears the stream is taken back (its readmission follows) or
// halts.
func (c *Core) deliverChange(en *entry) {
	g := c.next
	c.next++
	c.sinceReport++
	c.stats.DeliveredGlobals++
	if c.role == sequencer {
		c.members[c.self].acked = c.next
	}
	c.cutAt = c.batch
	m := c.originOf(en.uid)
	if m == nil {
		return
	}
	if m.self {
		// Not reported, but remembered: were we elected, we would owe
		// the group our readmission (announceChanges).
		m.failed = en.change == frame.MemberRemoved
		return
	}
	if m.gone {
		// It left, and is reported so (MemberLeft): the sequencer that
		// removed it had missed its Leave.
		m.failed = en.change == frame.MemberRemoved
		return
	}
	ev := Event{Kind: MemberReturned, Member: m.id, Epoch: en.epoch, Last: g - 1, At: c.now}
	if en.change == frame.MemberRemoved {
		ev.Kind, ev.Reason = MemberFailed, en.reason.String()
		if en.reason == frame.ReasonNoVote {
			ev.Reason = fmt.Sprintf("did not vote in the election of epoch %d", en.epoch)
		}
		m.failed = true
		c.stats.MembersFailed++
	} else {
		m.failed = false
		c.stats.MembersReturned++
	}
	c.events = append(c.events, ev)
}
