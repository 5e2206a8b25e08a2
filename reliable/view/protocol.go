package view

import (
	"bytes"
	"errors"
	"fmt"
	"slices"

	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/reliable/clock"
	"github.com/rbcast/rbcast/reliable/core"
)

// Step handles one received frame: the view protocol's own, or a frame of
// the current view's inner core.
func (c *Core) Step(now clock.Time, src, dst [6]byte, v frame.View) error {
	c.touch(now)
	if c.state == done || c.innerLeft() {
		return c.err
	}
	switch v.Type() {
	case frame.ViewJoin:
		c.onJoin(src, v)
	case frame.ViewPrepare:
		c.onPrepare(src, v)
	case frame.ViewFlush:
		c.onFlush(src, v)
	case frame.ViewCommit:
		c.onCommit(src, v)
	case frame.ViewRelay:
		c.onRelay(v)
	case frame.ViewRefuse:
		c.onRefuse(v)
	case frame.GroupRemove:
		c.onRemove(v)
	case frame.ViewSuspect:
		c.onSuspect(v)
	case frame.Datagram:
		c.onDatagram(src, v)
	case frame.Join, frame.Welcome, frame.Start:
		return fmt.Errorf("view: %v frame: registration is not used by groups that change", v.Type())
	default:
		return c.stepInner(now, src, dst, v)
	}
	if c.state == member && v.ViewID() == c.view.ID && v.Sender() != frame.NoMember {
		c.heardIn(v.Sender())
	} else {
		c.earlyIn(src, v)
	}
	c.progress()
	return nil
}

// stepInner hands a data protocol frame to the inner core of its view.
func (c *Core) stepInner(now clock.Time, src, dst [6]byte, v frame.View) error {
	w := v.ViewID()
	if c.state == joining {
		if w != 0 {
			c.groupAt = c.now
		}
		return fmt.Errorf("view: %v frame of view %d while joining", v.Type(), w)
	}
	if w != c.view.ID {
		if c.prev != nil && w == c.prevID {
			// A member still completing the view before: its repairs.
			return c.stepCore(c.prev, now, src, dst, v)
		}
		c.stats.Dropped++
		if frame.SeqLess(w, c.view.ID) {
			c.catchUp(src, v.Sender(), v.Incarnation())
		} else if w != 0 && !c.isMember(src, v.Sender()) {
			c.foreign(src, w)
		}
		c.earlyIn(src, v)
		return fmt.Errorf("view: %v frame of view %d, this member is in view %d", v.Type(), w, c.view.ID)
	}
	if !c.isMember(src, v.Sender()) {
		// Another component of the group that formed a view with the same
		// id: the one with the lower MAC among its members wins.
		if src != c.cfg.MAC && bytes.Compare(src[:], c.lowestMAC()) < 0 {
			c.foreign(src, w)
		}
		c.stats.Dropped++
		return fmt.Errorf("view: %v frame of view %d from %x, not a member of it here", v.Type(), w, src)
	}
	if c.installed {
		c.hold(src, dst, v)
		return nil
	}
	c.stepLater(now)
	if err := c.stepCore(c.inner, now, src, dst, v); err != nil {
		return err
	}
	c.heardIn(v.Sender())
	c.progress()
	return nil
}

// isMember reports whether a frame from MAC src with sender id is from a
// member of the current view.
func (c *Core) isMember(src [6]byte, id frame.MemberID) bool {
	m, ok := c.memberOf(c.view, id)
	return ok && m.MAC == src
}

// lowestMAC is the lowest MAC among the current view's members.
func (c *Core) lowestMAC() []byte {
	low := c.view.Members[0].MAC
	for _, m := range c.view.Members[1:] {
		if bytes.Compare(m.MAC[:], low[:]) < 0 {
			low = m.MAC
		}
	}
	return low[:]
}

// foreign takes note of a frame from another component of the group:
// a process that is not a member of this view sends in a view with a
// higher id (or the same id, from a lower MAC than any of this view's).
// Two components form when the members split and each side leaves out
// the other (a one-way cut, a false suspicion); under FIFO both go on.
// When they hear each other again, the losing component ends: each of its
// members, having heard the winner for FailureTimeout with no change of
// its own under way, stops with ErrRemoved, and its application joins
// again as a new incarnation, which the winner's coordinator admits. (A
// member of the winning view that only missed its commit is told within
// that time: the commit repeats until every new member is heard.)
func (c *Core) foreign(src [6]byte, w uint32) {
	if src == c.cfg.MAC || c.frozen || c.comp != nil || c.prop != nil {
		return
	}
	if c.foreignLast == 0 || c.now > c.foreignLast.Add(c.cfg.FailureTimeout) {
		c.foreignSince = c.now
	}
	c.foreignLast = c.now
	if c.now < c.foreignSince.Add(c.cfg.FailureTimeout) {
		return
	}
	c.removed(fmt.Sprintf("another component of the group runs view %d (heard from %x for %v); this member's component, in view %d, ends so that its members join that one", w, src, c.cfg.FailureTimeout, c.view.ID))
}

// hold keeps a copy of a frame of the view installed this turn for the
// turn after (see Core.installed).
func (c *Core) hold(src, dst [6]byte, v frame.View) {
	i := len(c.later)
	if i == len(c.laterBufs) {
		c.laterBufs = append(c.laterBufs, nil)
	}
	c.laterBufs[i] = append(c.laterBufs[i][:0], v...)
	c.later = append(c.later, heldFrame{src: src, dst: dst, v: frame.View(c.laterBufs[i])})
}

// stepLater steps the frames held in the turn that installed the view,
// once that turn's Ready is out.
func (c *Core) stepLater(now clock.Time) {
	if c.installed || len(c.later) == 0 {
		return
	}
	later := c.later
	c.later = c.later[:0]
	for _, h := range later {
		if c.state != member || h.v.ViewID() != c.view.ID {
			continue
		}
		if h.v.Type() == frame.Datagram {
			c.onDatagram(h.src, h.v)
			continue
		}
		if c.inner.Step(now, h.src, h.dst, h.v) == nil {
			c.heardIn(h.v.Sender())
		}
	}
	clear(later)
	c.progress()
}

// maxEarly bounds earlyIn's list.
const maxEarly = 64

// earlyIn notes the sender of a frame of a view later than the installed
// one: it installed that view (a process sends in a view only once it
// installed it). Should this member install the same view, the sender
// counts toward its acceptance (heardEarly), though the frame itself was
// dropped: a member that installs a view of two and leaves at once may
// send no other frame in it that arrives here (its one frame there, the
// new core's Heartbeat, may come before the commit, and its Leave frames
// may all be lost), and without it the view was never accepted here and
// this member, unable to leave from it, stopped with ErrMinority a
// failure timeout later (seeds 28450 and 55434 of TestSimExitAtOnce).
//
// The sender must be listed in the view installed with the same id, MAC
// and incarnation: what heardIn trusts of a frame of the installed view
// (a process installs one view per id, and a view id names one
// membership), here for a frame that came early.
func (c *Core) earlyIn(src [6]byte, v frame.View) {
	w, id := v.ViewID(), v.Sender()
	if c.state != member || !frame.SeqLess(c.view.ID, w) || id == frame.NoMember || src == c.cfg.MAC {
		return
	}
	e := earlySender{view: w, id: id, mac: src, inc: v.Incarnation()}
	if slices.Contains(c.early, e) {
		return
	}
	if len(c.early) >= min(c.cfg.MaxMembers, maxEarly) {
		// Bounded: frames of a later view come in the turns around a
		// commit, and a stream of them (another component's) keeps
		// the latest. A small bound, not MaxMembers (up to 0xfffe):
		// every foreign frame scans the list and shifts it. A sender
		// pushed out only leaves its view's acceptance to heardIn, as
		// before earlyIn.
		c.early = slices.Delete(c.early, 0, 1)
	}
	c.early = append(c.early, e)
}

// heardEarly takes the members of the view just installed that were
// heard sending in it before (earlyIn) as having installed it, toward
// its acceptance, and forgets the rest.
func (c *Core) heardEarly() {
	c.earlyHeard = c.earlyHeard[:0]
	for _, e := range c.early {
		if e.view != c.view.ID || e.id == c.self {
			continue
		}
		if m, ok := c.memberOf(c.view, e.id); ok && m.MAC == e.mac && m.Incarnation == e.inc {
			c.earlyHeard = addID(c.earlyHeard, e.id)
		}
	}
	c.early = c.early[:0]
}

// installedHere reports whether member id is known to have installed the
// current view: heard in it, or heard sending in it before this member
// installed it.
func (c *Core) installedHere(id frame.MemberID) bool {
	return containsID(c.heard, id) || containsID(c.earlyHeard, id)
}

// heardIn notes that member id sent in the current view: it installed it.
// Once every member was heard, the view before's core is dropped.
func (c *Core) heardIn(id frame.MemberID) {
	if containsID(c.heard, id) {
		return
	}
	c.heard = append(c.heard, id)
	c.checkHeard()
	if c.unaccepted {
		c.checkAccepted()
	}
}

// checkHeard drops the view before's core once every member of the
// current view was heard in it: nobody needs its repairs or relays.
func (c *Core) checkHeard() {
	for _, m := range c.view.Members {
		if m.ID != c.self && !containsID(c.heard, m.ID) {
			return
		}
	}
	c.prev = nil
}

// catchUp sends the commit that formed the current view to a member of it
// that still sends in an older view (it missed the commit), at most once
// per Retry.
//
// A process that sends in a view before and is not in the current one
// was left out of it (the others went on without it, believing it failed)
// and gets the same commit: it learns from it that it was removed, instead
// of completing a change that is over for ever.
func (c *Core) catchUp(src [6]byte, id frame.MemberID, inc uint32) {
	if c.formed == nil || src == c.cfg.MAC {
		return
	}
	if m, ok := c.memberOf(c.view, id); ok && m.MAC == src && m.Incarnation == inc {
		if containsID(c.heard, id) {
			return // heard in this view: its old core's frames
		}
	} else {
		for _, m := range c.view.Members {
			if m.MAC == src && m.Incarnation == inc {
				return // a member under another id: not from a view before
			}
		}
	}
	for i := range c.sentFormed {
		if c.sentFormed[i].mac == src {
			if c.now < c.sentFormed[i].at.Add(c.cfg.Retry) {
				return
			}
			c.sentFormed[i].at = c.now
			c.emit(src, c.formed)
			return
		}
	}
	c.sentFormed = append(c.sentFormed, sentAt{src, c.now})
	c.emit(src, c.formed)
}

// Tick runs the timers: Join and Prepare repeats, the change's timeouts,
// the inner core's timers.
func (c *Core) Tick(now clock.Time) {
	c.touch(now)
	switch c.state {
	case joining:
		c.tickJoining()
	case member:
		c.stepLater(now)
		c.inner.Tick(now)
		if c.prev != nil {
			if now >= c.prevUntil {
				c.prev = nil
			} else {
				c.prev.Tick(now)
			}
		}
		if !c.innerLeft() {
			c.tickMember()
		}
	case done:
		if c.err == nil && c.inner != nil && !c.leftAtTie {
			c.inner.Tick(now) // a clean leave's last frames
		}
	}
	c.progress()
}

func (c *Core) tickJoining() {
	// Founders that fell silent are forgotten.
	c.joiners = slices.DeleteFunc(c.joiners, func(j joiner) bool { return c.now >= j.heardAt.Add(c.cfg.FailureTimeout) })
	c.gen++
	if c.joinAt == 0 || c.now >= c.joinAt {
		c.sendJoin()
	}
}

func (c *Core) sendJoin() {
	c.emit(frame.Broadcast, &frame.ViewJoinBody{Requested: c.cfg.Requested, Nonce: c.cfg.Nonce, ConfigHash: c.cfg.ConfigHash, MTU: uint32(c.cfg.MTU)})
	c.stats.Joins++
	c.joinAt = c.now.Add(c.cfg.Retry)
}

func (c *Core) tickMember() {
	if p := c.prop; p != nil {
		if c.now >= p.sentAt.Add(c.cfg.Retry) {
			c.sendProposal()
		}
		if p.commit == nil && c.unaccepted && c.now >= p.startedAt.Add(c.cfg.FailureTimeout) && c.allFlushed(p) {
			c.neverAccepted()
			return
		}
		if p.commit == nil && c.now >= p.startedAt.Add(c.cfg.FailureTimeout) {
			// Members of base that did not flush in time are left out;
			// prepare again without them.
			for _, id := range p.staying {
				if !c.flushed(p, id) {
					c.suspect(id)
				}
			}
			c.prop = nil
		}
		if p.commit != nil && c.now >= p.startedAt.Add(4*c.cfg.FailureTimeout) {
			c.prop = nil // every member heard or gone: stop repeating
		}
	}
	if c.frozen && c.comp == nil && c.promiseBy != c.self && c.promiseBy != frame.NoMember {
		if c.now >= c.flushAt.Add(c.cfg.Retry) {
			c.sendFlush()
		}
		if c.now >= c.promisedAt.Add(c.cfg.FailureTimeout) {
			// The coordinator went silent in the middle of the change.
			c.suspect(c.promiseBy)
			c.promisedAt = c.now
		}
	}
	if c.comp != nil && c.stuck() {
		return
	}
	if c.comp != nil && c.now >= c.flushAt.Add(c.cfg.Retry) {
		c.sendFlush() // asks the holders again for what is still missing
	}
	if c.reportDue() && c.now >= c.reportAt {
		c.emit(frame.Broadcast, &frame.ViewSuspectBody{Suspects: c.reported()})
		c.stats.Reports++
		c.reportAt = c.now.Add(c.cfg.Retry)
	}
}

// reportDue reports whether this member must tell the coordinator of
// the members its inner core removed: it is not the coordinator, and no
// change is under way here (a Prepare from the coordinator answers the
// report; the new view's fresh core ends the suspicion).
func (c *Core) reportDue() bool {
	return c.state == member && c.prop == nil && !c.frozen && c.comp == nil &&
		c.coordinator() != c.self && len(c.reported()) > 0
}

// reported is the members of the view this member suspects.
func (c *Core) reported() []frame.MemberID {
	c.reportBuf = c.reportBuf[:0]
	for _, m := range c.view.Members {
		if m.ID != c.self && containsID(c.suspects, m.ID) {
			c.reportBuf = append(c.reportBuf, m.ID)
		}
	}
	return c.reportBuf
}

// onSuspect takes a member's report of the members its inner core
// removed. Once a core removed a member, the two can no longer run one
// view's core together (the reporter drops the suspect's frames and no
// longer acknowledges them), so one of them must leave the view, even if
// the coordinator still hears both: without this a false suspicion at a
// member other than the coordinator stalled the group until the
// coordinator's own core happened to suspect someone. The coordinator
// leaves out the suspects of the first report it takes; a later report by
// a member it already leaves out is ignored, so mutual suspicion costs one
// member, not two. A report that suspects the coordinator itself leaves
// out the reporter: a member that cannot hear the coordinator cannot
// complete a change it runs.
func (c *Core) onSuspect(v frame.View) {
	if c.state != member || v.ViewID() != c.view.ID || c.coordinator() != c.self {
		return
	}
	from := v.Sender()
	m, ok := c.memberOf(c.view, from)
	if !ok || m.Incarnation != v.Incarnation() || from == c.self ||
		containsID(c.suspects, from) || containsID(c.leavers, from) {
		return
	}
	ids := v.Suspects()
	if slices.Contains(ids, c.self) {
		c.suspect(from)
		return
	}
	for _, id := range ids {
		if _, in := c.memberOf(c.view, id); in {
			c.suspect(id)
		}
	}
}

// Propose hands a message to the current view's inner core, or holds it
// while no view runs (joining, or frozen by a change).
func (c *Core) Propose(now clock.Time, msg []byte) error {
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
	case c.state == member && !c.frozen && !c.unaccepted && len(c.queue) == 0:
		err := c.inner.Propose(now, msg)
		if err == nil {
			c.handed++
		}
		return err
	}
	if len(c.queue)+len(c.unsent) >= c.cfg.MaxQueue {
		return core.ErrWindowFull
	}
	c.queue = append(c.queue, append([]byte(nil), msg...))
	return nil
}

// prompter is what ProposePrompt uses of an inner core (pbp.Core).
type prompter interface {
	ProposePrompt(now clock.Time, msg []byte) error
}

// ProposePrompt is Propose of a message the layer above waits for every
// member to hold: its frame asks the members to acknowledge it at once
// (pbp.Core.ProposePrompt). Held (joining, frozen, unaccepted), or with
// an inner core that cannot, it is Propose's.
func (c *Core) ProposePrompt(now clock.Time, msg []byte) error {
	p, ok := c.inner.(prompter)
	if !ok || c.state != member || c.leaving || c.frozen || c.unaccepted || len(c.queue) > 0 ||
		len(msg) > c.cfg.MaxMessage {
		return c.Propose(now, msg)
	}
	c.touch(now)
	err := p.ProposePrompt(now, msg)
	if err == nil {
		c.handed++
	}
	return err
}

// framer is what ProposeFramed and Own use of an inner core (pbp.Core).
type framer interface {
	ProposeFramed(now clock.Time, head, msg []byte) error
	Own(seq uint32) (body []byte, bundled, ok bool)
}

// ProposeFramed is Propose of head followed by msg as one message: the
// inner core writes both into its frame (pbp.Core.ProposeFramed), so that
// a layer that puts a header before every message need not join them
// first. Held (joining, frozen, unaccepted) they are joined.
func (c *Core) ProposeFramed(now clock.Time, head, msg []byte) error {
	f, ok := c.inner.(framer)
	if !ok || c.state != member || c.leaving || c.frozen || c.unaccepted || len(c.queue) > 0 ||
		len(head)+len(msg) > c.cfg.MaxMessage {
		return c.Propose(now, append(append(make([]byte, 0, len(head)+len(msg)), head...), msg...))
	}
	c.touch(now)
	err := f.ProposeFramed(now, head, msg)
	if err == nil {
		c.handed++
	}
	return err
}

// Own is the body of this member's frame seq of view as its core sent it
// (pbp.Core.Own): of the installed view, or of a view this turn replaced
// (until Advance). A layer that delivers its own messages reads them
// there, pinned (Pin), instead of keeping a copy.
func (c *Core) Own(view, seq uint32) (body []byte, bundled, ok bool) {
	if c.inner != nil && c.view.ID == view {
		if f, is := c.inner.(framer); is {
			return f.Own(seq)
		}
		return nil, false, false
	}
	for _, r := range c.replaced {
		if r.id == view {
			if f, is := r.in.(framer); is {
				return f.Own(seq)
			}
		}
	}
	return nil, false, false
}

// OwnOut is how many of this member's messages went out, in the order
// Propose accepted them: numbered by the core of the view they were sent
// in (a member that stays delivers them there, and so does every member
// that moves to the next view with it). A message accepted and not yet
// numbered when a view changes goes out in the next view, and counts
// once it is numbered there.
func (c *Core) OwnOut() uint64 {
	switch {
	case c.inner == nil, c.frozen:
		return c.ownOut
	}
	return c.ownOut + c.handed - uint64(c.inner.PendingMessages())
}

// HeldByAll reports how far every member of the installed view holds
// member s's frames in it, as their acknowledgements say (the inner
// core's acknowledgement matrix, Liu's acknowledgement diffusion): s's
// frames before next are held by all. A member's acknowledgement never
// goes past what its flush reports (Inner.Holds), so a view change's cut
// delivers those frames at every member that completes the view, also
// when s fails. Every member of the view counts, also one the inner core
// removed (with the last it acknowledged): until a view leaves it out,
// it may be a survivor. ok is false while no view runs, or when s is not
// a member of it.
func (c *Core) HeldByAll(s frame.MemberID) (next uint32, ok bool) {
	next, _, ok = c.HeldByAllLow(s)
	return next, ok
}

// HeldByAllLow is HeldByAll with the member of the view whose
// acknowledgement sets it (the first of the lowest): until HeldBy(low, s)
// moves past a sequence number, HeldByAll(s) does not either, and a
// layer waiting for it need ask only that one member.
func (c *Core) HeldByAllLow(s frame.MemberID) (next uint32, low frame.MemberID, ok bool) {
	if c.inner == nil || c.state != member {
		return 0, frame.NoMember, false
	}
	low = frame.NoMember
	for i, m := range c.view.Members {
		h, ok := c.inner.Holds(m.ID, s)
		if !ok {
			return 0, frame.NoMember, false
		}
		if i == 0 || frame.SeqLess(h, next) {
			next, low = h, m.ID
		}
	}
	return next, low, len(c.view.Members) > 0
}

// HeldBy reports how far member m holds member s's frames in the
// installed view, as its acknowledgements say (what HeldByAll takes the
// lowest of). ok is false while no view runs, or when either is not a
// member of the inner core's configuration.
func (c *Core) HeldBy(m, s frame.MemberID) (next uint32, ok bool) {
	if c.inner == nil || c.state != member {
		return 0, false
	}
	return c.inner.Holds(m, s)
}

// Pin keeps data, a message the installed view's core delivered from
// frame seq of member id in view, unchanged until Unpin (pbp.Core.Pin):
// a layer holds it there instead of copying it. False if it cannot
// (another view, or data not in the core's retained copy of the frame:
// a message this layer relayed or stashed).
func (c *Core) Pin(view uint32, id frame.MemberID, seq uint32, data []byte) bool {
	if c.inner == nil || c.state != member || c.view.ID != view {
		return false
	}
	return c.inner.Pin(id, seq, data)
}

// Unpin ends a Pin (nothing once the view changed: the old core's
// buffers are left to the layer).
func (c *Core) Unpin(view uint32, id frame.MemberID, seq uint32) {
	if c.inner != nil && c.state == member && c.view.ID == view {
		c.inner.Unpin(id, seq)
	}
}

// SentInView is the next sequence number of this member's frames in the
// installed view (0 while none runs): every message OwnOut counts in it
// went out in a frame before it.
func (c *Core) SentInView() uint32 {
	if c.inner == nil {
		return 0
	}
	return c.inner.Sent()
}

// Leave starts a clean departure: the inner core finishes what was sent
// and announces it; the others leave this member out of the next view.
// The inner core is told once this layer holds nothing more to send and
// every member of the view installed it (leaveInner).
func (c *Core) Leave(now clock.Time) {
	c.touch(now)
	c.leaving = true
	switch c.state {
	case joining:
		c.state = done
		c.event(core.Event{Kind: core.SelfLeft, Member: c.self})
	case member:
		c.leaveInner()
		if c.innerLeft() {
			c.judgeLeft()
		}
	}
}

// leaveInner has the inner core of the installed view leave, once
// nothing of this member waits outside it and the view before is over:
//
//   - no change is under way (frozen: the frozen core's unsent messages
//     and those proposed since go out in the next view) and the view is
//     accepted, with no message waiting in the queue: the inner core's
//     Leave completes only once what it was handed is acknowledged by
//     every live member, and what it was not handed would be lost;
//   - the inner core numbered every message it was handed: a change
//     that starts after its Leave takes the unnumbered ones out (Freeze)
//     for the next view, while the inner core, left with nothing
//     pending, announced its end to the others, who took the member for
//     gone with those messages still to come;
//   - every member of the view was heard in it (or the view before's
//     core was dropped after its time, see checkHeard): a member that
//     has not installed the view may still need this member's frames of
//     the view before (the cut of the commit, which it completes by
//     Nacks and relays), or the commit itself (catchUp). A member that
//     stopped at once, as the inner core of a new view with nothing to
//     send does, answered neither: a member that missed the commit
//     formed another view without it, its last frames cut off, and
//     reported it failed (issue 19);
//   - no member of the view left that the view still lists, while a
//     member this one still runs the view with remains (leaverListed):
//     the change that leaves the leaver out is this member's to see
//     through. A member that lost every Leave frame of the leaver learns
//     that it left only from a Flush of a member whose core took the
//     Leave (leftIn); had every such member left too, it would take the
//     leaver for failed a failure timeout later, and the last member of
//     the view, one of two reachable, stopped with ErrMinority (seed
//     34664 of TestSimExit). With no such member left there is nobody to
//     tell, and waiting on ended in ErrMinority (seed 19325 of
//     TestSimExitAtOnce).
//
// It runs from Leave, Step and Tick (progress), never from Ready: a view
// a coordinator alone installs there would lose its core's SelfLeft to
// the Advance that follows.
func (c *Core) leaveInner() {
	if !c.leaveDue() {
		return
	}
	c.innerLeaving = true
	c.inner.Leave(c.now)
}

// innerLeft reports whether the installed view's inner core sent its
// Leave: from then on this member takes part in nothing of the view —
// it answers no Prepare and no Commit, proposes no change, judges no
// majority — until the Ready of the turn ends it (SelfLeft). A Flush sent
// after the Leave, in the turn the Leave went out, made it a member the
// change keeps: a coordinator that took the Flush before the Leave
// committed a view with it, and if it held a departing member's frames
// that the others lacked, named it their holder, and every other member,
// waiting for relays a finished process never sent, stopped with
// ErrRemoved (issue 19).
func (c *Core) innerLeft() bool {
	return c.state == member && c.innerLeaving && c.inner.Left()
}

func (c *Core) leaveDue() bool {
	return c.leaving && c.state == member && !c.innerLeaving && !c.frozen && !c.unaccepted &&
		len(c.queue) == 0 && len(c.unsent) == 0 && c.prev == nil && c.inner.PendingMessages() == 0 &&
		!c.leaverListed()
}

// leaverListed reports whether a member of the installed view other than
// this one left it while a member that may run the change without it
// remains: one that did not leave, is not suspected and is live in the
// inner core (leaveInner). With none left, no change needs this member's
// Flush: the members it could tell are ones its core no longer runs the
// view with, and waiting only ended in ErrMinority when the core failed
// the last of them (seed 19325 of TestSimExitAtOnce).
func (c *Core) leaverListed() bool {
	listed, other := false, false
	for _, m := range c.view.Members {
		switch {
		case m.ID == c.self:
		case c.hasLeft(m.ID):
			listed = true
		case !containsID(c.suspects, m.ID) && c.inner.Live(m.ID):
			other = true
		}
	}
	return listed && other
}

// Deadline is when Tick must next run.
func (c *Core) Deadline() clock.Time {
	if !c.started || c.state == done {
		if c.state == done && c.err == nil && c.inner != nil && !c.leftAtTie {
			return c.inner.Deadline()
		}
		return 0
	}
	var d clock.Time
	early := func(t clock.Time) {
		if t != 0 && (d == 0 || t < d) {
			d = t
		}
	}
	switch c.state {
	case joining:
		early(c.joinAt)
		if f := c.joinSince.Add(c.cfg.Listen); f > c.now {
			early(f)
		}
	case member:
		early(c.inner.Deadline())
		if len(c.later) > 0 {
			early(max(c.now, 1)) // the frames held in the turn of the install
		}
		if c.prev != nil {
			early(c.prev.Deadline())
			early(c.prevUntil)
		}
		if c.prop != nil {
			early(c.prop.sentAt.Add(c.cfg.Retry))
			if c.prop.commit == nil {
				early(c.prop.startedAt.Add(c.cfg.FailureTimeout))
			}
		}
		if c.frozen && c.comp == nil && c.promiseBy != c.self && c.promiseBy != frame.NoMember {
			early(c.flushAt.Add(c.cfg.Retry))
			early(c.promisedAt.Add(c.cfg.FailureTimeout))
		}
		if t := c.askingSince.Add(c.cfg.FailureTimeout); c.askingSince != 0 && t > c.now {
			early(t) // the end of the asking (askLeft)
		}
		if c.comp != nil {
			early(c.flushAt.Add(c.cfg.Retry))
			early(c.comp.progressAt.Add(2 * c.cfg.FailureTimeout))
		}
		if c.reportDue() {
			early(max(c.reportAt, c.now, 1))
		}
		if c.leaveDue() {
			early(max(c.now, 1))
		}
	}
	return d
}

// Blocked reports whether Propose may refuse for want of room.
func (c *Core) Blocked() bool {
	if c.state == member && !c.frozen && len(c.queue) == 0 {
		return c.inner.Blocked()
	}
	return len(c.queue)+len(c.unsent) >= c.cfg.MaxQueue
}

// Done reports whether this member is finished: it left (and its inner
// core's last frames are out), was removed, or was refused.
func (c *Core) Done() bool {
	if c.state != done {
		return c.inner != nil && c.inner.Done() && c.leaving && c.innerLeaving
	}
	return c.inner == nil || c.inner.Done() || c.err != nil || c.leftAtTie
}

// Info: the inner cores' largest message and delivering frames.
func (c *Core) Info() core.Info {
	return core.Info{Self: c.self, MaxMessage: c.cfg.MaxMessage, Delivers: c.cfg.Delivers, InFlight: c.cfg.InFlight}
}

// Stats are the inner core's counters (those of the current view), with
// the view's id as Epoch and the membership layer's Stats in Detail when
// no view runs.
func (c *Core) Stats() core.Stats {
	if c.inner == nil {
		return core.Stats{Detail: c.Counters()}
	}
	s := c.inner.Stats()
	s.Epoch = c.view.ID
	return s
}

// Members returns the current view's members (this one alone while
// joining).
func (c *Core) Members() []core.Member {
	if c.inner != nil {
		return c.inner.Members()
	}
	return []core.Member{{ID: c.self, Self: true, Live: c.state != done}}
}

// Repair is the inner core's.
func (c *Core) Repair(from frame.MemberID) (frame.MemberID, bool) {
	if c.inner == nil {
		return from, false
	}
	return c.inner.Repair(from)
}

// Ready returns the inner core's output with the membership layer's: its
// frames, the messages it delivers from relays, its events.
func (c *Core) Ready() core.Ready {
	if c.removeDue {
		c.removeGroup()
	}
	c.sendDatagrams()
	var rd core.Ready
	if c.inner != nil {
		rd = c.inner.Ready()
		c.observe(rd.Events)
		if c.comp != nil {
			rd.Deliveries = c.filterCut(rd.Deliveries)
		} else if c.frozen {
			rd.Deliveries = c.stashAfterFreeze(rd.Deliveries)
		}
		c.drainQueue()
		// A change the inner core's events call for starts now; a view
		// is installed only by Step and Tick (install takes the old
		// core's output, which this Ready has taken already).
		if c.state == member && c.comp == nil && c.primary() && c.coordinator() == c.self {
			if c.prop == nil && c.changeDue() {
				c.propose()
			} else if p := c.prop; p != nil && p.commit == nil && c.lostStaying(p) {
				c.prop = nil
				c.propose()
			}
		}
	}
	var prev [][]byte
	if c.prev != nil && !c.prevTaken {
		// Only its frames: what it delivered was delivered up to the
		// cut, and its membership is the view before's.
		prev = c.prev.Ready().Frames
	}
	if len(c.frames) == 0 && len(c.deliver) == 0 && len(c.events) == 0 && len(prev) == 0 {
		return rd
	}
	c.merged.Frames = append(append(append(c.merged.Frames[:0], rd.Frames...), prev...), c.frames...)
	// What was held since the freeze (stashOut, first in deliver) comes
	// before what the inner core delivers now, then the relayed.
	k := c.stashOut
	c.merged.Deliveries = append(append(append(c.merged.Deliveries[:0], c.deliver[:k]...), rd.Deliveries...), c.deliver[k:]...)
	c.merged.Events = append(c.merged.Events[:0], rd.Events...)
	if c.err != nil {
		// A leaver that judgeLeft stopped: its core's SelfLeft is not
		// the outcome (the stop's event, in c.events, is).
		c.merged.Events = slices.DeleteFunc(c.merged.Events, func(ev core.Event) bool { return ev.Kind == core.SelfLeft })
	}
	c.merged.Events = append(c.merged.Events, c.events...)
	return c.merged
}

// Advance: the inner core's and the layer's output was carried out.
func (c *Core) Advance() {
	c.installed = false
	c.stashOut = 0
	if c.inner != nil {
		c.inner.Advance()
	}
	if c.prev != nil {
		c.prev.Advance()
	}
	c.prevTaken = false
	clear(c.replaced)
	c.replaced = c.replaced[:0]
	c.frames, c.used = c.frames[:0], 0
	clear(c.deliver)
	c.deliver = c.deliver[:0]
	c.dgBuf = c.dgBuf[:0]
	c.events = c.events[:0]
	clear(c.merged.Frames)
	clear(c.merged.Deliveries)
	c.merged.Events = c.merged.Events[:0]
}

// observe takes note of the inner core's membership events: a member it
// removed (failed, stalled) is suspected, one that left is a leaver, and
// this member's own leave or removal ends it.
func (c *Core) observe(evs []core.Event) {
	for _, ev := range evs {
		switch ev.Kind {
		case core.MemberFailed, core.MemberStalled:
			c.suspect(ev.Member)
		case core.MemberLeft:
			c.addLeaver(ev.Member)
		case core.SelfLeft:
			// The inner core was told to leave with nothing pending
			// (leaveInner) and, frozen, does not leave: nothing of this
			// member waits here.
			c.state = done
		case core.SelfRemoved:
			c.state, c.err = done, ErrRemoved
		}
	}
}

// filterCut drops what the inner core delivers from a departing member
// after the commit (a member the coordinator left out may still be
// heard here, its frames repaired late): beyond the cut, every member
// that moves on delivers exactly up to it; below, complete delivers
// them, from the inner core's retained copy or a relay, in order with
// the relays (issue 19: the inner core's delivery and complete's were
// both handed out, the frame twice).
func (c *Core) filterCut(ds []core.Delivery) []core.Delivery {
	out := ds[:0]
	for _, d := range ds {
		if i := c.cutIndex(d.From); i >= 0 && c.comp.departed[i] && !frame.SeqLess(d.Seq, c.comp.at[i]) {
			continue
		}
		out = append(out, d)
	}
	return out
}

func (c *Core) cutIndex(id frame.MemberID) int {
	for i, x := range c.comp.commit.Cuts {
		if x.Member == id {
			return i
		}
	}
	return -1
}

// progress does what the state now calls for: a coordinator starts a
// change, a founder founds, a member completes a commit.
func (c *Core) progress() {
	switch c.state {
	case joining:
		c.maybeFound()
	case member:
		if c.innerLeft() {
			c.judgeLeft()
			return // the Ready that reports SelfLeft (or the stop) ends it
		}
		if c.leaving && c.leaveBeforeJudged() {
			// A leaver hands its core the Leave before it judges its
			// majority: the turn whose failures end its wait for a
			// change (leaverListed) may be the one that counts no
			// majority, and a core whose Leave completes in it left.
			c.leaveInner()
			if c.innerLeft() {
				c.judgeLeft()
				return
			}
		}
		if c.leaving && c.leaveAtTie() {
			return // the Ready that reports SelfLeft ends it
		}
		if !c.primary() {
			if c.comp != nil && c.state == member {
				// Asking (askLeft), a member other than the coordinator
				// completes the commit it flushed for.
				c.complete()
			}
			return // a minority that does not ask stopped
		}
		c.leaveInner()
		if c.comp != nil {
			c.complete()
			return
		}
		if c.prop == nil && c.coordinator() == c.self && c.changeDue() {
			c.propose()
		} else if p := c.prop; p != nil && p.commit == nil && c.lostStaying(p) {
			// A member the proposal keeps failed or left meanwhile:
			// prepare again without it.
			c.prop = nil
			c.propose()
		}
	}
}

// leaveBeforeJudged reports whether a leaver may hand its core the Leave
// before it judges its majority (progress): where it counts one, or where
// the members it does not reach could not count one without it, at most
// one other member counted (1 of 2, a tie). Beyond that a Leave completed
// in the turn whose failures leave it in a minority completes for want of
// anyone to acknowledge it: the members it does not reach, a majority,
// go on without its last messages while it reports SelfLeft
// (TestLeaverCutOffWhileWaiting). A tie's other member goes on only by
// counting this one out as left, once it delivered all its messages.
func (c *Core) leaveBeforeJudged() bool {
	if !c.cfg.Primary {
		return true
	}
	present, total := c.reachable()
	return 2*present > total || total <= 2
}

// judgeLeft judges the majority of a leaver whose inner core's Leave
// completed in this turn (Config.Primary): the Leave went out once every
// member the core still ran the view with acknowledged all it was handed,
// and the core may have failed the others in the same Tick, the Leave
// completing for want of anyone left to acknowledge it. Those members,
// if a majority, go on without its last messages, so the leave is clean
// only where the members it still reaches are a majority (any majority
// that goes on without it then holds one of them, which has every
// message of it) or at most one other member is counted (1 of 2, a tie:
// the other goes on only by counting this one out as left, once it
// delivered all of its messages, pbp checkLeft). Otherwise this member
// stops with ErrMinority instead of reporting SelfLeft (Ready drops the
// inner core's; TestLeaverCutOffAtLeave). The Leave frames of the turn
// it stops in still go out (none after): a member they reach counts it
// out as left, which it is, stopped. A member counted unreachable only
// because it is suspected in this turn may have acknowledged everything:
// the stop is then more than needed, never a loss.
func (c *Core) judgeLeft() {
	if !c.cfg.Primary {
		return
	}
	present, total := c.reachable()
	if 2*present > total || total <= 2 {
		return
	}
	why := fmt.Sprintf("%d of the %d members of view %d are reachable as its Leave completes: a leave is clean only where a majority acknowledged its messages (a primary component)", present, total, c.view.ID)
	c.state, c.err = done, fmt.Errorf("%w: %s", ErrMinority, why)
	c.event(core.Event{Kind: core.SelfRemoved, Member: c.self, Epoch: c.view.ID, Reason: why})
}

// leaveAtTie ends a leaver that counts one of two in an accepted view
// cleanly, where primary would stop it with ErrMinority (Config.Primary;
// docs/membership.md, "the last other member left unseen"): every other
// member of the view it counts as left, and the one other member it
// counts is not present (its core failed it, or it is suspected). It
// reports whether the leaver ended; SelfLeft is in the next Ready.
//
// The other member goes on only by counting this one out as left: a view
// formed from this one keeps of its members only those that flushed in
// it, and a member that left flushed in none (a frozen core does not
// leave); of the two left, this one flushed for no proposal that may
// commit (flushedOther) and its own ends with it, so the other keeps
// itself alone, and counts a majority only with this one out as left,
// which its core does only once it delivered all of this one's messages
// (pbp checkLeft; no other member is left to report it with a Flush).
// The view is accepted: no other view formed from its base goes on, so
// what the change to it cut of this member's messages is what the
// primary component delivered. And the other member installed the view
// (heard in it, or early: installedHere): it needs nothing more of this
// one's view before, no relay and no commit.
//
// Unfrozen, this member hands its core the Leave, which completes at once
// with no member left to acknowledge (judgeLeft lets the tie pass): its
// Leave frames let the other member, if it lives and holds all of this
// one's messages, count it out as left and go on. Frozen for its own
// proposal, or asking (askLeft), the core announces nothing, and this
// member just ends: no core takes a Leave of it, so the other member
// never counts it out as left and stops too, having gone on with
// nothing. Either way nothing may wait outside the core (queued,
// unsent, not numbered): a SelfLeft with messages never sent would hide
// them.
func (c *Core) leaveAtTie() bool {
	if !c.cfg.Primary || c.unaccepted || c.comp != nil || c.flushedOther {
		return false
	}
	if len(c.queue) > 0 || len(c.unsent) > 0 || c.inner.PendingMessages() > 0 {
		return false
	}
	if present, total := c.reachable(); present != 1 || total != 2 {
		return false
	}
	for _, m := range c.view.Members {
		if m.ID != c.self && !c.hasLeft(m.ID) && !c.installedHere(m.ID) {
			return false
		}
	}
	if !c.frozen {
		if !c.innerLeaving {
			c.innerLeaving = true
			c.inner.Leave(c.now)
		}
		if !c.innerLeft() {
			return false
		}
		c.judgeLeft()
		return true
	}
	c.state, c.leftAtTie = done, true
	c.event(core.Event{Kind: core.SelfLeft, Member: c.self, Epoch: c.view.ID})
	return true
}

// ErrMinority is wrapped by the error of a member that stopped because
// it could reach no majority of its view (Config.Primary).
var ErrMinority = errors.New("view: not in a majority of the view")

// primary reports whether this member may go on (Config.Primary): more
// than half of its view's members (those that left cleanly aside) are
// reachable, itself included; a member's restart asking to join is
// reachable. Otherwise it stops with ErrMinority, and false.
func (c *Core) primary() bool {
	if !c.cfg.Primary || c.state != member {
		return true
	}
	present, total := c.reachable()
	if 2*present > total {
		return true
	}
	if c.askLeft(present) {
		return false // not stopped: asking
	}
	why := fmt.Sprintf("%d of the %d members of view %d are reachable: under total order only a majority goes on (a primary component)", present, total, c.view.ID)
	c.state, c.err = done, fmt.Errorf("%w: %s", ErrMinority, why)
	c.event(core.Event{Kind: core.SelfRemoved, Member: c.self, Epoch: c.view.ID, Reason: why})
	return false
}

// askLeft reports whether this member, counting no majority, asks before
// it stops: whether a member it took for failed left cleanly, which only
// another member's Flush can tell it (its Leave frames all lost on their
// way here; issue 19, a leave within about a round trip of a crash: this
// member's core failed both before any Flush came). It asks for a failure
// timeout at most, with another member still reachable, and frozen: it
// hands out nothing past what its Flush reports.
//
// The coordinator (the lowest member reachable here), with no commit
// made, prepares the next view and waits for the Flushes, which carry
// the left bit (leftIn); maybeCommit commits only once the count is a
// majority. A member that reaches a lower one waits for that one's
// Prepare, the Flushes or its commit: the coordinator may know better
// (its core took the Leave this member lost). Before, it stopped at once,
// and the coordinator, left alone, after it (TestLeaveUnheardAtMember).
// It answers a Prepare as any member, and completes and installs a commit
// it flushed for: one made by a coordinator that counted a majority, of a
// proposal that keeps this member (every member a proposal keeps flushed
// before the commit), so it is in that component; and the view installed
// waits for its acceptance as any other (accept.go). A member that left
// installs nothing more, so no two components both count one
// (docs/membership.md).
func (c *Core) askLeft(present int) bool {
	if present < 2 || c.leaving {
		return false
	}
	lower := false
	for _, m := range c.view.Members {
		// The coordinator: the lowest member reachable here (the inner
		// core's failures of this turn are not among the suspects yet).
		if m.ID < c.self && !c.hasLeft(m.ID) && !containsID(c.suspects, m.ID) && c.inner.Live(m.ID) {
			lower = true
		}
	}
	if !lower && c.comp != nil {
		return false
	}
	if c.askingSince == 0 {
		c.askingSince = c.now
	} else if c.now >= c.askingSince.Add(c.cfg.FailureTimeout) {
		return false
	}
	if lower {
		c.freeze()
		return true
	}
	if p := c.prop; p == nil || p.commit == nil && c.lostStaying(p) {
		c.prop = nil
		c.propose()
	}
	return true
}

// majority reports whether more than half of the view's members, those
// that left cleanly aside, are reachable (always, without Primary).
func (c *Core) majority() bool {
	if !c.cfg.Primary {
		return true
	}
	present, total := c.reachable()
	return 2*present > total
}

// reachable counts the view's members that did not leave cleanly (total)
// and of them those reachable (present): itself, members neither
// suspected nor failed, and members whose restart asks to join. The
// counts are computed again only once this layer's inputs (gen: install
// moves it, so a new inner core too) or the inner core's (Removals)
// moved: under Agreed and Safe primary asks on every Step and Ready.
func (c *Core) reachable() (present, total int) {
	r := &c.reach
	var removals uint64
	if c.inner != nil {
		removals = c.inner.Removals()
	}
	if !r.reachOK || r.reachGen != c.gen || r.removals != removals {
		r.present, r.total = c.countReachable()
		r.reachOK, r.reachGen, r.removals = true, c.gen, removals
	} else if r.check {
		if p, t := c.countReachable(); (p != r.present || t != r.total) && r.err == nil {
			r.err = fmt.Errorf("view %d, member %d: cached reachable %d of %d, computed %d of %d (suspects %v, leavers %v, joiners %d)",
				c.view.ID, c.self, r.present, r.total, p, t, c.suspects, c.leavers, len(c.joiners))
		}
	}
	return r.present, r.total
}

// reachCache holds reachable's and coordinator's last answers and what
// they were computed from.
type reachCache struct {
	reachOK            bool
	reachGen, removals uint64
	present, total     int
	coordOK            bool
	coordGen           uint64
	coord              frame.MemberID
	// check: every use computes the answer afresh too (CheckCache); err
	// is the first difference.
	check bool
	err   error
}

// CheckCache has every use of the cached counts of reachable members and
// of the coordinator compute them afresh as well, for simulations (it
// costs what the cache saves); CacheErr reports the first difference.
func (c *Core) CheckCache() { c.reach.check = true }

// CacheErr is the first difference CheckCache found, nil if none.
func (c *Core) CacheErr() error { return c.reach.err }

// suspect adds id to the suspects; addLeaver to the leavers.
func (c *Core) suspect(id frame.MemberID) {
	c.suspects = addID(c.suspects, id)
	c.gen++
}

func (c *Core) addLeaver(id frame.MemberID) {
	c.leavers = addID(c.leavers, id)
	c.gen++
}

// countReachable counts the members of the view not left (total) and
// those of them present: this one, and each its core runs and does not
// suspect, unless its restart (the same MAC, another incarnation) asks
// to join: that incarnation is gone, whatever its core says, and
// counting it, or its restart, present let a member go on without a
// leaver's last messages once the leaver, having left at a tie,
// restarted (docs/membership.md, "The last other member left unseen").
func (c *Core) countReachable() (present, total int) {
	for _, m := range c.view.Members {
		if c.hasLeft(m.ID) {
			continue
		}
		total++
		if m.ID == c.self {
			present++
			continue
		}
		restarted := slices.ContainsFunc(c.joiners, func(j joiner) bool { return j.mac == m.MAC && j.incarnation != m.Incarnation })
		if !restarted && !containsID(c.suspects, m.ID) && c.inner.Live(m.ID) {
			present++
		}
	}
	return present, total
}

// hasLeft reports whether member id left the view cleanly: the inner
// core took its Leave, in an earlier turn (leavers) or in this one (its
// MemberLeft event not out yet: a member that judged its majority between
// the Step that took the last other member's Leave and the Ready that
// reports it counted that member as unreachable, and the last member of a
// view of two stopped with ErrMinority when the other left).
func (c *Core) hasLeft(id frame.MemberID) bool {
	return containsID(c.leavers, id) || id != c.self && c.inner != nil && c.inner.HasLeft(id)
}

// lostStaying reports whether a member that p keeps is now suspected or
// gone here.
func (c *Core) lostStaying(p *proposal) bool {
	for _, id := range p.staying {
		if id != c.self && (containsID(c.suspects, id) || containsID(c.leavers, id) || !c.inner.Live(id)) {
			return true
		}
	}
	return false
}

// changeDue reports whether the view must change: a member is suspected
// or left, or a process asks to join.
func (c *Core) changeDue() bool {
	for _, m := range c.view.Members {
		if m.ID != c.self && (containsID(c.suspects, m.ID) || containsID(c.leavers, m.ID)) {
			return true
		}
	}
	return len(c.joiners) > 0 && !c.leaving
}

// Members that stay: in the view, not suspected, not leaving; the new
// members: the joiners, each given its requested id when free or the
// lowest free one; a joiner whose MAC is a member's is that member
// restarted, and takes its place.
func (c *Core) nextMembers() (members []frame.MemberInfo, staying []frame.MemberID) {
	for _, m := range c.view.Members {
		if containsID(c.suspects, m.ID) || containsID(c.leavers, m.ID) {
			continue
		}
		restarted := false
		for _, j := range c.joiners {
			if j.mac == m.MAC && j.incarnation != m.Incarnation {
				restarted = true
			}
		}
		if restarted {
			continue
		}
		members = append(members, m)
		staying = append(staying, m.ID)
	}
	taken := func(id frame.MemberID) bool {
		for _, m := range members {
			if m.ID == id {
				return true
			}
		}
		return false
	}
	// Joiners that ask for a free id get it; then the others, the
	// lowest free ids, in the order they were heard.
	var rest []joiner
	for _, j := range c.joiners {
		if len(members) >= c.cfg.MaxMembers {
			break
		}
		if id := j.requested; id != frame.NoMember && int(id) < c.cfg.MaxMembers && !taken(id) {
			members = append(members, frame.MemberInfo{ID: id, MAC: j.mac, Incarnation: j.incarnation})
			continue
		}
		rest = append(rest, j)
	}
	for _, j := range rest {
		if len(members) >= c.cfg.MaxMembers {
			break
		}
		id := frame.MemberID(0)
		for taken(id) {
			id++
		}
		members = append(members, frame.MemberInfo{ID: id, MAC: j.mac, Incarnation: j.incarnation})
	}
	slices.SortFunc(members, func(a, b frame.MemberInfo) int { return int(a.ID) - int(b.ID) })
	return members, staying
}
