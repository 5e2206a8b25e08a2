package view

import (
	"bytes"
	"fmt"
	"slices"
	"strings"

	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/reliable/clock"
	"github.com/rbcast/rbcast/reliable/core"
)

// onJoin: while joining, another process announcing itself (founding);
// as the coordinator of a running group, a process to admit.
func (c *Core) onJoin(src [6]byte, v frame.View) {
	j := v.ViewJoin()
	inc := v.Incarnation()
	switch c.state {
	case joining:
		if src == c.cfg.MAC {
			return
		}
		c.hear(joiner{mac: src, incarnation: inc, nonce: j.Nonce, requested: j.Requested, heardAt: c.now})
	case member:
		// A member of this view that still sends Joins missed the commit
		// that admitted it. Any member sends it again, not only the
		// coordinator: a joiner that took the lowest id is the
		// coordinator of that view itself, and nobody answered it
		// (the others removed it as failed a timeout later).
		for _, m := range c.view.Members {
			if m.MAC == src && m.Incarnation == inc {
				c.catchUp(src, m.ID, inc)
				return
			}
		}
		if c.coordinator() != c.self || c.leaving {
			return
		}
		if j.ConfigHash != c.cfg.ConfigHash {
			c.emit(src, &frame.ViewRefuseBody{Nonce: j.Nonce, Reason: frame.RefuseConfig, ConfigHash: c.cfg.ConfigHash})
			c.stats.Refused++
			return
		}
		if len(c.view.Members)+len(c.joiners) >= c.cfg.MaxMembers && !c.isJoiner(src) {
			c.emit(src, &frame.ViewRefuseBody{Nonce: j.Nonce, Reason: frame.RefuseFull, ConfigHash: c.cfg.ConfigHash})
			c.stats.Refused++
			return
		}
		c.hear(joiner{mac: src, incarnation: inc, nonce: j.Nonce, requested: j.Requested, heardAt: c.now})
	}
}

func (c *Core) isJoiner(mac [6]byte) bool {
	for _, j := range c.joiners {
		if j.mac == mac {
			return true
		}
	}
	return false
}

// hear records a joiner (one per MAC: a newer incarnation replaces).
func (c *Core) hear(j joiner) {
	c.gen++
	for i := range c.joiners {
		if c.joiners[i].mac == j.mac {
			if j.incarnation != c.joiners[i].incarnation || j.nonce != c.joiners[i].nonce {
				c.joiners[i] = j
			}
			c.joiners[i].heardAt = j.heardAt
			return
		}
	}
	c.joiners = append(c.joiners, j)
}

// less orders processes for the founding: requested id, then MAC.
func less(ra frame.MemberID, ma [6]byte, rb frame.MemberID, mb [6]byte) bool {
	if ra != rb {
		return ra < rb
	}
	return bytes.Compare(ma[:], mb[:]) < 0
}

// sawGroup reports whether a running group was heard within the failure
// timeout: then this process waits to be admitted instead of founding.
func (c *Core) sawGroup() bool {
	return c.groupAt != 0 && c.now < c.groupAt.Add(c.cfg.FailureTimeout)
}

// maybeFound founds the first view when no group runs: with Found
// processes heard (this one included) and this one the lowest of them.
func (c *Core) maybeFound() {
	if c.sawGroup() || c.leaving || 1+len(c.joiners) < c.cfg.Found || c.now < c.joinSince.Add(c.cfg.Listen) {
		return
	}
	for _, j := range c.joiners {
		if less(j.requested, j.mac, c.cfg.Requested, c.cfg.MAC) {
			return
		}
	}
	all := append([]joiner{{mac: c.cfg.MAC, incarnation: c.cfg.Incarnation, nonce: c.cfg.Nonce, requested: c.cfg.Requested}}, c.joiners...)
	c.joiners = all
	members, _ := c.nextMembers()
	c.joiners = nil
	c.gen++
	founder := frame.NoMember
	for _, m := range members {
		if m.MAC == c.cfg.MAC {
			founder = m.ID
		}
	}
	commit := frame.ViewCommitBody{Next: nextID(c.maxSeen, founder), Base: 0, Members: members}
	c.maxSeen = commit.Next
	c.prop = &proposal{next: commit.Next, base: 0, members: members, startedAt: c.now, commit: &commit}
	c.stats.Changes++
	c.sendProposal()
	c.install(commit)
}

// propose starts a change of the view this member coordinates.
func (c *Core) propose() {
	members, staying := c.nextMembers()
	p := &proposal{next: nextID(max(number(c.maxSeen), number(c.view.ID)), c.self), base: c.view.ID, members: members, staying: staying, startedAt: c.now}
	c.maxSeen = p.next
	c.prop = p
	c.stats.Changes++
	c.promise, c.promiseBy, c.promisedAt, c.gaveWay = frame.ViewPrepareBody{Next: p.next, Base: p.base, Members: members}, c.self, c.now, false
	c.freeze()
	c.recordFlush(p, c.myFlush())
	c.sendProposal()
	c.maybeCommit()
}

// sendProposal repeats the change's Prepare, or its Commit once computed.
func (c *Core) sendProposal() {
	p := c.prop
	if p.commit != nil {
		c.emit(frame.Broadcast, p.commit)
	} else {
		c.emit(frame.Broadcast, &frame.ViewPrepareBody{Next: p.next, Base: p.base, Members: p.members})
	}
	p.sentAt = c.now
}

func (c *Core) freeze() {
	if c.frozen {
		return
	}
	c.frozen = true
	// What the flush reports as delivered is fixed here: the inner core
	// goes on delivering, and what it delivers from now on waits in
	// stash until the commit says how far each sender's messages count
	// in this view (a flush that reported less than was delivered would
	// let the cut of a departing sender fall below what this member
	// handed out).
	c.frozenAt = c.frozenAt[:0]
	for _, m := range c.view.Members {
		d, _ := c.inner.DeliveredFrom(m.ID)
		c.frozenAt = append(c.frozenAt, frame.Delivered{Member: m.ID, Next: d})
	}
	c.unsent = c.inner.Freeze()
	c.suspendHolds()
	c.ownOut += c.handed - uint64(len(c.unsent))
	c.handed = 0
}

// deliveredAtFreeze is how far member id's messages were delivered when
// this member froze for the change under way.
func (c *Core) deliveredAtFreeze(id frame.MemberID) (uint32, bool) {
	if !c.frozen {
		return 0, false
	}
	for _, f := range c.frozenAt {
		if f.Member == id {
			return f.Next, true
		}
	}
	return 0, false
}

// stashAfterFreeze keeps (copied) what the inner core delivers while
// frozen beyond what the flush reported, until the commit (see freeze).
func (c *Core) stashAfterFreeze(ds []core.Delivery) []core.Delivery {
	out := ds[:0]
	for _, d := range ds {
		if at, ok := c.deliveredAtFreeze(d.From); ok && !frame.SeqLess(d.Seq, at) {
			d.Data = append([]byte(nil), d.Data...)
			c.stash = append(c.stash, d)
			continue
		}
		out = append(out, d)
	}
	return out
}

func (c *Core) myFlush() flushInfo {
	f := flushInfo{id: c.self, sent: c.inner.Sent()}
	for _, m := range c.view.Members {
		if m.ID == c.self {
			continue
		}
		d, _ := c.inner.DeliveredFrom(m.ID)
		if at, ok := c.deliveredAtFreeze(m.ID); ok {
			d = at
		}
		gone := !c.inner.Live(m.ID)
		f.delivered = append(f.delivered, frame.Delivered{Member: m.ID, Gone: gone, Left: gone && c.hasLeft(m.ID), Next: d})
	}
	return f
}

// sendFlush broadcasts this member's state in its view: to the
// coordinator, and to the members that hold what it still misses.
func (c *Core) sendFlush() {
	f := c.myFlush()
	next := c.promise.Next
	if c.comp != nil {
		next = c.comp.commit.Next
		// While completing, report what was delivered so far (relays
		// included), so holders send only what is missing.
		for i := range f.delivered {
			if k := c.cutIndex(f.delivered[i].Member); k >= 0 && (c.comp.departed[k] || f.delivered[i].Gone) {
				f.delivered[i].Next = c.comp.next[k]
			}
		}
	}
	coord := c.promiseBy
	if c.comp != nil {
		coord = frame.NoMember // completing a commit: asks holders only
	}
	if coord != c.self && coord != frame.NoMember {
		c.flushedOther = true
	}
	c.emit(frame.Broadcast, &frame.ViewFlushBody{Next: next, Base: c.view.ID, Coord: coord, Sent: f.sent, Delivered: f.delivered})
	c.flushAt = c.now
}

// onPrepare: a coordinator proposes the next view.
func (c *Core) onPrepare(src [6]byte, v frame.View) {
	next, base, coord := v.ViewNext(), v.ViewBase(), v.Sender()
	if frame.SeqLess(c.maxSeen, next) {
		c.maxSeen = next
	}
	if c.state == joining {
		c.groupAt = c.now
		return
	}
	if base != c.view.ID {
		if frame.SeqLess(base, c.view.ID) {
			c.catchUp(src, coord, v.Incarnation())
		} else if c.frozen {
			c.sendFlush() // tells the coordinator this member is behind
		}
		return
	}
	if _, ok := c.memberOf(c.view, coord); !ok || c.comp != nil {
		return
	}
	ml := v.ViewMembers()
	in := false
	for i := range ml.Len() {
		m := ml.At(i)
		if m.MAC == c.cfg.MAC && m.Incarnation == c.cfg.Incarnation {
			in = true
		}
	}
	switch {
	case c.frozen && next == c.promise.Next && coord == c.promiseBy:
		// The Prepare repeats (the Flush was lost, or a member is still
		// missing): the coordinator is alive.
		c.promisedAt = c.now
		c.sendFlush()
		return
	case c.frozen && number(next) == number(c.promise.Next) && c.promiseBy != c.self:
		// Promised this number to another coordinator, which may commit
		// with this Flush: never flush one number to two. The Flush,
		// tagged with the coordinator it answers, tells this one to
		// prepare again with a higher id.
		c.sendFlush()
		return
	case c.frozen && number(next) == number(c.promise.Next) && coord > c.self:
		return // this member's own proposal, for the same number, wins
	case c.frozen && frame.SeqLess(number(next), number(c.promise.Next)):
		return // promised a later proposal
	case c.frozen && c.promiseBy != c.self && coord != c.promiseBy && !c.gaveWay &&
		!containsID(c.suspects, c.promiseBy) && c.inner.Live(c.promiseBy):
		// This member's Flush went to another coordinator's proposal on
		// this base, which may still commit with it: flushing to this
		// one too could let both commit, each view counting as present
		// a member that installed the other (a split brain under a
		// primary component). It stays bound until that coordinator
		// gives way (its own Flush for another proposal) or is
		// suspected (silent for FailureTimeout, or failed); this
		// proposal's repeats find it free then.
		return
	case !in:
		// A Prepare is not a commit: the coordinator may yet give way.
		// The commit that leaves this member out removes it.
		return
	}
	if c.prop != nil && coord != c.self {
		c.prop = nil // a lower member coordinates: follow it
	}
	c.promise = frame.ViewPrepareBody{Next: next, Base: base}
	c.promiseBy, c.promisedAt, c.gaveWay = coord, c.now, false
	c.freeze()
	c.sendFlush()
}

// removed ends this member: the group went on without it.
func (c *Core) removed(why string) {
	c.state, c.err = done, fmt.Errorf("%w: %s", ErrRemoved, why)
	c.event(core.Event{Kind: core.SelfRemoved, Member: c.self, Epoch: c.view.ID, Reason: why})
}

// onFlush: a member's state; the coordinator collects them, and a member
// that holds what the flusher misses of a departing member relays it.
func (c *Core) onFlush(src [6]byte, v frame.View) {
	if c.state != member {
		return
	}
	next, base, from := v.ViewNext(), v.ViewBase(), v.Sender()
	if frame.SeqLess(base, c.view.ID) {
		c.catchUp(src, from, v.Incarnation())
		c.relayTo(v, base)
		return
	}
	if base != c.view.ID {
		return
	}
	c.leftIn(src, v)
	c.relayTo(v, base)
	if to := v.FlushCoord(); c.frozen && from == c.promiseBy && from != c.self && to != from && to != frame.NoMember {
		// The coordinator this member promised flushes for another's
		// proposal: it dropped its own. (NoMember: it completes a
		// commit of its own, which binds this member all the more.)
		c.gaveWay = true
	}
	p := c.prop
	if p == nil || p.commit != nil || number(next) != number(p.next) || base != p.base || !containsID(p.staying, from) {
		return
	}
	if to := v.FlushCoord(); to != c.self || next != p.next {
		if to != frame.NoMember && to != c.self {
			// The member promised this number to another coordinator:
			// prepare again with a higher one.
			c.prop = nil
			c.propose()
		}
		return
	}
	f := flushInfo{id: from, sent: v.FlushSent()}
	dl := v.FlushDelivered()
	regone := false
	for i := range dl.Len() {
		d := dl.At(i)
		f.delivered = append(f.delivered, d)
		if d.Gone && d.Member != c.self && containsID(p.staying, d.Member) {
			// A member's core removed a sender the proposal keeps: it
			// would never deliver the rest of that sender's view. One
			// that left is a leaver already (leftIn), not a suspect.
			if !d.Left {
				c.suspect(d.Member)
			}
			regone = true
		}
	}
	if regone {
		c.prop = nil
		c.propose()
		return
	}
	c.recordFlush(p, f)
	c.maybeCommit()
}

// leftIn takes note of the members a Flush of this view, from a member
// of it, says left cleanly: its sender's core took their Leave, with
// everything they sent before (frame.Delivered's Left). This member may
// have lost every Leave frame of one and taken it for failed; counted as
// failed, a leaver weighs against the majority of a primary component,
// and a coordinator that counted two of four reachable, one crashed and
// one left, stopped with ErrMinority (issue 19, seed 2019 of
// TestSimLeaveAtChange). A leaver is left out of the next view either
// way, and its messages are delivered up to the cut like any departing
// member's: the bit changes how it is counted, not what of it is
// delivered. A member that left installs nothing more, so counting it
// out of the majority lets no two components both count one.
func (c *Core) leftIn(src [6]byte, v frame.View) {
	if !c.isMember(src, v.Sender()) {
		return
	}
	dl := v.FlushDelivered()
	for i := range dl.Len() {
		d := dl.At(i)
		if d.Left && d.Member != c.self {
			if _, ok := c.memberOf(c.view, d.Member); ok {
				c.addLeaver(d.Member)
				// It left from this view's core: it installed this view,
				// which counts toward its acceptance (accept.go) as a
				// frame heard from it would.
				c.heardIn(d.Member)
			}
		}
	}
}

func (c *Core) recordFlush(p *proposal, f flushInfo) {
	for i := range p.flushes {
		if p.flushes[i].id == f.id {
			p.flushes[i] = f
			return
		}
	}
	p.flushes = append(p.flushes, f)
}

func (c *Core) flushed(p *proposal, id frame.MemberID) bool {
	for _, f := range p.flushes {
		if f.id == id {
			return true
		}
	}
	return false
}

func (c *Core) flushOf(p *proposal, id frame.MemberID) flushInfo {
	for _, f := range p.flushes {
		if f.id == id {
			return f
		}
	}
	return flushInfo{}
}

func deliveredIn(f flushInfo, from frame.MemberID) (uint32, bool) {
	for _, d := range f.delivered {
		if d.Member == from {
			return d.Next, true
		}
	}
	return 0, false
}

// maybeCommit computes the cut once every staying member flushed, and
// commits. For a sender that stays the cut is what it sent; for one that
// does not, the most any staying member delivered from it.
func (c *Core) maybeCommit() {
	p := c.prop
	if p == nil || p.commit != nil {
		return
	}
	for _, id := range p.staying {
		if !c.flushed(p, id) {
			return
		}
	}
	if !c.majority() {
		// Asking whether members taken for failed left (askLeft): no
		// view is formed until those known left leave a majority.
		return
	}
	if c.unaccepted {
		// Under a primary component a view is formed only from an
		// accepted one (accept.go): wait until enough of the base's
		// members are heard in it (their Flushes count), or give up
		// (tickMember).
		return
	}
	// This member's own state as of now: it went on delivering while
	// the others' Flushes came in.
	c.recordFlush(p, c.myFlush())
	commit := frame.ViewCommitBody{Next: p.next, Base: p.base, Members: p.members}
	// What a joiner needs to wait for the view's acceptance as the base's
	// members do (accept.go).
	var total int
	commit.FromBase, total = acceptors(c.view, c.hasLeft, p.members, nil)
	commit.BaseCount = uint16(total)
	var laggards []frame.MemberID
	for _, m := range c.view.Members {
		x := frame.Cut{Member: m.ID, Holder: m.ID}
		first := true
		if containsID(p.staying, m.ID) {
			x.Cut = c.flushOf(p, m.ID).sent
		} else {
			for _, id := range p.staying {
				d, ok := deliveredIn(c.flushOf(p, id), m.ID)
				if ok && (first || frame.SeqLess(x.Cut, d)) {
					x.Cut, x.Holder, first = d, id, false
				}
			}
		}
		x.From = x.Cut
		for _, id := range p.staying {
			if d, ok := deliveredIn(c.flushOf(p, id), m.ID); ok && frame.SeqLess(d, x.From) {
				x.From = d
			}
		}
		if !containsID(p.staying, m.ID) && int(x.Cut-x.From) > c.cfg.Window {
			// A departing sender's frames are relayed from what the
			// holder retains, at most a window (the sender's window
			// keeps its receivers within one of each other, so this
			// does not happen; it guards the relay): a member further
			// behind cannot be brought to the cut.
			for _, id := range p.staying {
				if d, ok := deliveredIn(c.flushOf(p, id), m.ID); ok && int(x.Cut-d) > c.cfg.Window && id != c.self {
					laggards = addID(laggards, id)
				}
			}
		}
		commit.Cuts = append(commit.Cuts, x)
	}
	if len(laggards) > 0 {
		for _, id := range laggards {
			c.suspect(id)
		}
		c.prop = nil
		return
	}
	p.commit = &commit
	c.sendProposal()
	c.startCompletion(commit)
}

// onCommit: the coordinator's commit of the next view.
func (c *Core) onCommit(src [6]byte, v frame.View) {
	_, body := v.Decode()
	commit := *body.(*frame.ViewCommitBody)
	if frame.SeqLess(c.maxSeen, commit.Next) {
		c.maxSeen = commit.Next
	}
	in := false
	for _, m := range commit.Members {
		if m.MAC == c.cfg.MAC && m.Incarnation == c.cfg.Incarnation {
			in = true
		}
	}
	switch c.state {
	case joining:
		if in {
			c.install(commit)
		} else {
			c.groupAt = c.now
		}
		return
	case member:
	default:
		return
	}
	switch {
	case !frame.SeqLess(c.view.ID, commit.Next):
		return // installed already
	case commit.Base != c.view.ID:
		switch {
		case in && frame.SeqLess(c.view.ID, commit.Base):
			c.removed(fmt.Sprintf("view %d was formed from view %d, which this member (in view %d) never installed", commit.Next, commit.Base, c.view.ID))
		case !in && frame.SeqLess(c.view.ID, commit.Base):
			// The group went on past this member's view without it (a
			// member that shows it is behind is sent the commit that
			// formed the current view).
			c.removed(fmt.Sprintf("view %d, formed from view %d, leaves this member (in view %d) out", commit.Next, commit.Base, c.view.ID))
		}
		return
	case c.comp != nil && c.comp.commit.Next == commit.Next:
		return
	case c.comp != nil:
		// Completing another commit of this base (this member's own, or
		// the one it promised): a second view from one base is never
		// installed here.
		return
	case c.frozen && commit.Next != c.promise.Next && !containsID(c.suspects, c.promiseBy):
		// The promise binds commits as it binds flushes (Paxos: an
		// acceptor that promised a proposal acts on no other): this
		// member flushed for another proposal of this base, whose
		// coordinator it still hears and which may commit with that
		// Flush. This commit is of a proposal this member flushed for
		// before, or never — a coordinator that was deaf (starved) when
		// its promisers suspected it, committing late from their earlier
		// Flushes (TestDeafCoordinatorLateCommit).
		return
	case !in:
		c.removed(fmt.Sprintf("view %d leaves this member out", commit.Next))
		return
	}
	c.startCompletion(commit)
}

// startCompletion begins delivering up to the commit's cuts.
func (c *Core) startCompletion(commit frame.ViewCommitBody) {
	c.freeze()
	n := len(commit.Cuts)
	comp := &completion{commit: commit, next: make([]uint32, n), departed: make([]bool, n), at: make([]uint32, n), progressAt: c.now}
	for i, x := range commit.Cuts {
		old, _ := c.memberOf(c.view, x.Member)
		comp.departed[i] = true
		for _, m := range commit.Members {
			if m.ID == x.Member && m.MAC == old.MAC && m.Incarnation == old.Incarnation {
				comp.departed[i] = false
			}
		}
		if x.Member == c.self {
			comp.next[i] = x.Cut
			continue
		}
		comp.next[i], _ = c.inner.DeliveredFrom(x.Member)
		comp.at[i] = comp.next[i]
		if comp.departed[i] && frame.SeqLess(x.Cut, comp.at[i]) {
			// The inner core delivered past the cut, some of it in this
			// turn, before the commit was stepped: those deliveries are
			// still in its Ready, not in the stash, and filterCut must
			// drop them too (TestSimLossy seed 2100: a joiner handed out
			// a departing sender's frame 18 past its cut 16, after
			// dropping 16 and 17 from the stash).
			comp.at[i] = x.Cut
		}
	}
	c.comp = comp
	// What the inner core delivered since the freeze counts up to the
	// cuts: a departing sender's beyond its cut is dropped, as filterCut
	// drops it from now on. The rest goes out first, inserted at once:
	// inserted one by one, each copied all that followed it into a new
	// array, quadratic in the stash, which holds every message a sender's
	// window let go in a burst as the change began (a failure's backlog:
	// TestViewFailureCommitAllocs).
	kept := c.stash[:0]
	for _, d := range c.stash {
		if i := c.cutIndex(d.From); i >= 0 && comp.departed[i] && !frame.SeqLess(d.Seq, commit.Cuts[i].Cut) {
			continue
		}
		kept = append(kept, d)
	}
	c.deliver = slices.Insert(c.deliver, c.stashOut, kept...)
	c.stashOut += len(kept)
	clear(c.stash)
	c.stash = c.stash[:0]
	for i, x := range commit.Cuts {
		if comp.departed[i] && x.Holder == c.self {
			c.relay(c.inner, c.view.ID, x.Member, x.From, x.Cut)
		}
	}
	c.complete()
}

// relayTo answers a member's Flush with the frames of departing senders
// it misses and this member holds.
func (c *Core) relayTo(v frame.View, base uint32) {
	var commit *frame.ViewCommitBody
	var inner Inner
	switch {
	case c.comp != nil && base == c.view.ID:
		commit, inner = &c.comp.commit, c.inner
	case c.formed != nil && base == c.formed.Base && c.prev != nil:
		commit, inner = c.formed, c.prev
	default:
		return
	}
	if v.FlushCoord() != frame.NoMember {
		// The flusher answers a Prepare: it has no commit yet, and a
		// member takes relays only while it completes one (onRelay).
		// Once the commit reaches it (repeated, or sent by catchUp) it
		// completes and asks again, with what it delivered by then.
		return
	}
	dl := v.FlushDelivered()
	for i := range dl.Len() {
		d := dl.At(i)
		for _, x := range commit.Cuts {
			if x.Member != d.Member || x.Member == c.self || !frame.SeqLess(d.Next, x.Cut) {
				continue
			}
			switch {
			case x.Holder == c.self && !c.staysIn(commit, x.Member, base):
				c.relay(inner, base, x.Member, d.Next, x.Cut)
			case d.Gone && c.staysIn(commit, x.Member, base):
				// The flusher's core removed a sender that stays: it
				// gets the rest relayed by whoever has it.
				c.relay(inner, base, x.Member, d.Next, x.Cut)
			}
		}
	}
}

// staysIn reports whether member id of view base is in the commit's new
// view (same MAC and incarnation).
func (c *Core) staysIn(commit *frame.ViewCommitBody, id frame.MemberID, base uint32) bool {
	var old frame.MemberInfo
	var ok bool
	switch {
	case base == c.view.ID:
		old, ok = c.memberOf(c.view, id)
	case c.prev != nil:
		old, ok = c.prevMember(id)
	}
	if !ok {
		return false
	}
	for _, m := range commit.Members {
		if m.ID == id && m.MAC == old.MAC && m.Incarnation == old.Incarnation {
			return true
		}
	}
	return false
}

func (c *Core) prevMember(id frame.MemberID) (frame.MemberInfo, bool) {
	if p, ok := c.prev.(interface {
		Member(frame.MemberID) (frame.MemberInfo, bool)
	}); ok {
		return p.Member(id)
	}
	return frame.MemberInfo{}, false
}

// relay broadcasts member from's frames first..cut-1 of view base, as
// retained by inner.
func (c *Core) relay(inner Inner, base uint32, from frame.MemberID, first, cut uint32) {
	var m frame.MemberInfo
	if pm, ok := inner.(interface {
		Member(frame.MemberID) (frame.MemberInfo, bool)
	}); ok {
		m, _ = pm.Member(from)
	}
	for s := first; frame.SeqLess(s, cut); s++ {
		data, bundled, ok := inner.Retained(from, s)
		if !ok {
			continue
		}
		k := relayKey{base, from, s}
		if at, ok := c.relayedAt[k]; ok && c.now < at.Add(c.cfg.Retry/2) {
			// Relayed a moment ago (to all): a Flush that asks for it
			// again crossed that relay. One that lost it asks again a
			// Retry later.
			c.stats.RelaysSkipped++
			continue
		}
		if c.relayedAt == nil {
			c.relayedAt = map[relayKey]clock.Time{}
		}
		c.relayedAt[k] = c.now
		h := frame.Header{Group: c.cfg.Group, Sender: from, Incarnation: m.Incarnation, ViewID: base, Seq: s}
		f, err := frame.Append(nil, &h, &frame.Encoded{T: frame.Data, Data: data, Bundled: bundled})
		if err != nil {
			continue
		}
		c.emit(frame.Broadcast, &frame.ViewRelayBody{Base: base, Frame: f})
		c.stats.Relayed++
	}
}

// onRelay: a departing sender's frame that a holder relays.
func (c *Core) onRelay(v frame.View) {
	if c.comp == nil || v.RelayBase() != c.view.ID {
		c.stats.RelaysUnused++
		return
	}
	f := v.RelayFrame()
	i := c.cutIndex(f.Sender())
	if i < 0 || !c.comp.departed[i] && c.inner.Live(f.Sender()) || f.Type() != frame.Data {
		c.stats.RelaysUnused++
		return
	}
	s := f.Seq()
	if frame.SeqLess(s, c.comp.next[i]) || !frame.SeqLess(s, c.comp.commit.Cuts[i].Cut) {
		c.stats.RelaysUnused++
		return
	}
	for _, r := range c.comp.relays {
		if r.from == f.Sender() && r.seq == s {
			c.stats.RelaysUnused++
			return
		}
	}
	c.comp.relays = append(c.comp.relays, relayed{from: f.Sender(), seq: s, bundled: f.Flags()&frame.FlagBundle != 0, data: append([]byte(nil), f.Body()...)})
}

// complete delivers what it can up to the cuts and installs the next
// view once every cut is reached.
func (c *Core) complete() {
	comp := c.comp
	all := true
	var sum uint64
	for i, x := range comp.commit.Cuts {
		if x.Member == c.self {
			continue
		}
		if !comp.departed[i] && c.inner.Live(x.Member) {
			d, _ := c.inner.DeliveredFrom(x.Member)
			sum += uint64(d)
			if frame.SeqLess(d, x.Cut) {
				all = false
			}
			continue
		}
		if !comp.departed[i] && frame.SeqLess(comp.next[i], c.innerNext(x.Member)) {
			// A sender that stays but that this member's core removed
			// during the change: what the core delivered counts, the
			// rest comes relayed.
			comp.next[i] = c.innerNext(x.Member)
		}
		for frame.SeqLess(comp.next[i], x.Cut) {
			// A departing sender's frame that the inner core delivered
			// since the commit (repaired by its sender, which this
			// member may still hear) lies in its retained copy: it is
			// handed out from there, the inner core's own delivery
			// dropped (filterCut), so that it comes once and in order
			// with the relayed ones.
			s := comp.next[i]
			k := c.relayIndex(x.Member, s)
			if data, bundled, ok := c.inner.Retained(x.Member, s); ok {
				c.deliverRelayed(x.Member, s, data, bundled)
			} else if k >= 0 {
				r := comp.relays[k]
				c.deliverRelayed(x.Member, s, r.data, r.bundled)
				c.stats.RelayDelivered++
			} else {
				break
			}
			if k >= 0 {
				comp.relays = slices.Delete(comp.relays, k, k+1)
			}
			comp.next[i]++
		}
		sum += uint64(comp.next[i])
		if frame.SeqLess(comp.next[i], x.Cut) {
			all = false
		}
	}
	if all {
		c.install(comp.commit)
		return
	}
	if sum != comp.sum {
		comp.sum, comp.progressAt = sum, c.now
	}
}

// stuck gives up a completion that has not moved for twice the failure
// timeout: the messages it waits for are held only by members that are
// gone (a holder crashed before relaying, every survivor that had them
// with it). The member cannot install the view without breaking virtual
// synchrony, nor go on in the old one; it stops with ErrRemoved, and its
// application joins again (found by kv's simulation: a member completing
// a commit for ever kept four joiners from founding).
func (c *Core) stuck() bool {
	comp := c.comp
	if comp == nil || c.now < comp.progressAt.Add(2*c.cfg.FailureTimeout) {
		return false
	}
	var missing []string
	for i, x := range comp.commit.Cuts {
		if x.Member != c.self && frame.SeqLess(comp.next[i], x.Cut) && (comp.departed[i] || !c.inner.Live(x.Member)) {
			missing = append(missing, fmt.Sprintf("member %d's %d..%d (holder %d)", x.Member, comp.next[i], x.Cut-1, x.Holder))
		}
	}
	c.removed(fmt.Sprintf("could not complete view %d from view %d in %v: no member relayed %s", comp.commit.Next, comp.commit.Base, 2*c.cfg.FailureTimeout, strings.Join(missing, ", ")))
	return true
}

func (c *Core) innerNext(id frame.MemberID) uint32 {
	d, _ := c.inner.DeliveredFrom(id)
	return d
}

func (c *Core) relayIndex(from frame.MemberID, seq uint32) int {
	for k, r := range c.comp.relays {
		if r.from == from && r.seq == seq {
			return k
		}
	}
	return -1
}

// deliverRelayed delivers the messages of frame seq of a departing
// sender (copied: the buffer may be the inner core's, reused later).
func (c *Core) deliverRelayed(from frame.MemberID, seq uint32, data []byte, bundled bool) {
	data = append([]byte(nil), data...)
	if !bundled {
		c.deliver = append(c.deliver, core.Delivery{From: from, Seq: seq, Data: data})
		return
	}
	for i := 0; len(data) >= 2; i++ {
		n := int(data[0])<<8 | int(data[1])
		if 2+n > len(data) {
			return
		}
		c.deliver = append(c.deliver, core.Delivery{From: from, Seq: seq, Index: i, Data: data[2 : 2+n]})
		data = data[2+n:]
	}
}

// install makes commit's view the current one: a new inner core, the
// messages held meanwhile handed to it, an event.
func (c *Core) install(commit frame.ViewCommitBody) {
	ownBefore := c.ownOut // the old view was frozen: its count is in
	clear(c.relayedAt)
	c.startAcceptance(commit)
	self := frame.NoMember
	for _, m := range commit.Members {
		if m.MAC == c.cfg.MAC && m.Incarnation == c.cfg.Incarnation {
			self = m.ID
		}
	}
	v := View{ID: commit.Next, Members: slices.Clone(commit.Members)}
	inner, err := c.cfg.Start(v, self)
	if err != nil {
		c.state, c.err = done, fmt.Errorf("view: starting the core of view %d: %w", v.ID, err)
		c.event(core.Event{Kind: core.SelfRemoved, Member: self, Epoch: v.ID, Reason: c.err.Error()})
		return
	}
	if c.skipCRC {
		skipCRC(inner)
	}
	inner.Tick(c.now)
	if c.inner != nil {
		// What the old core has not handed out yet goes first: its
		// frames, and its deliveries up to the cut (before the relayed
		// ones of this turn, which follow them in their senders' order).
		old := c.inner.Ready()
		ds := old.Deliveries
		if c.comp != nil {
			ds = c.filterCut(ds)
		}
		k := c.stashOut
		c.deliver = append(append(append(c.merged.Deliveries[:0], c.deliver[:k]...), ds...), c.deliver[k:]...)
		c.merged.Deliveries = nil
		c.frames = append(c.frames, old.Frames...)
		c.prevTaken = true
	}
	if c.inner != nil {
		c.replaced = append(c.replaced, replacedCore{c.view.ID, c.inner})
	}
	c.prev, c.prevID, c.prevUntil = c.inner, c.view.ID, c.now.Add(2*c.cfg.FailureTimeout)
	c.inner = inner
	c.installed = true
	clear(c.later) // frames of a view installed before this one's
	c.later = c.later[:0]
	c.view, c.self, c.state = v, self, member
	c.resumeHolds()
	formed := commit
	formed.Members, formed.Cuts, formed.FromBase = slices.Clone(commit.Members), slices.Clone(commit.Cuts), slices.Clone(commit.FromBase)
	c.formed = &formed
	c.sentFormed, c.heard = c.sentFormed[:0], c.heard[:0]
	c.frozen, c.comp, c.promise, c.promiseBy, c.gaveWay = false, nil, frame.ViewPrepareBody{}, frame.NoMember, false
	c.suspects, c.leavers = c.suspects[:0], c.leavers[:0]
	c.gen++ // the view, self, suspects, leavers and joiners
	c.askingSince = 0
	c.reportAt, c.foreignSince, c.foreignLast = 0, 0, 0
	c.joiners = slices.DeleteFunc(c.joiners, func(j joiner) bool {
		for _, m := range commit.Members {
			if m.MAC == j.mac {
				return true
			}
		}
		return false
	})
	// The change is over here. A member that missed the commit shows it
	// by sending in the view before (or, joining, by its Joins) and gets
	// it again (catchUp).
	c.prop = nil
	if frame.SeqLess(c.maxSeen, commit.Next) {
		c.maxSeen = commit.Next
	}
	c.queue = append(c.unsent, c.queue...)
	c.unsent = nil
	c.drainQueue()
	c.innerLeaving = false
	c.stats.Views++
	c.heardEarly()
	c.flushedOther = false
	c.checkHeard()
	if c.unaccepted {
		c.announce()
		c.checkAccepted()
	}
	// Leave was called before: the member leaves from the new view, with
	// what was held meanwhile, once every member installed it
	// (leaveInner, from the next Step or Tick).
	c.event(core.Event{Kind: core.ViewInstalled, Member: self, Epoch: v.ID, View: &core.ViewInfo{ID: v.ID, Members: slices.Clone(v.Members), OwnBefore: ownBefore}})
}

// drainQueue hands the held messages to the inner core while it takes
// them.
func (c *Core) drainQueue() {
	for len(c.queue) > 0 && c.state == member && !c.frozen && !c.unaccepted {
		if err := c.inner.Propose(c.now, c.queue[0]); err != nil {
			return
		}
		c.handed++
		c.queue[0] = nil
		c.queue = c.queue[1:]
	}
}

// onRefuse: the coordinator refused this joiner.
func (c *Core) onRefuse(v frame.View) {
	r := v.ViewRefuse()
	if c.state != joining || r.Nonce != c.cfg.Nonce {
		return
	}
	why := "the group is full"
	switch r.Reason {
	case frame.RefuseConfig:
		why = fmt.Sprintf("the coordinator's configuration hash is %#x, ours %#x: every member must use the same group settings", r.ConfigHash, c.cfg.ConfigHash)
	case frame.RefuseRemoved:
		why = "the group was removed"
	}
	c.state, c.err = done, fmt.Errorf("%w: %s", ErrRefused, why)
	c.event(core.Event{Kind: core.JoinRefused, Member: v.Sender(), Reason: why})
}

// onRemove: a member removed the group.
func (c *Core) onRemove(v frame.View) {
	if c.state == done {
		return
	}
	if c.state == member {
		if _, ok := c.memberOf(c.view, v.Sender()); !ok {
			return
		}
	}
	c.state, c.err = done, ErrGroupRemoved
	c.event(core.Event{Kind: core.GroupRemoved, Member: v.Sender(), Epoch: v.RemovedView()})
}

// RemoveGroup removes the group: every member stops (GroupRemoved), and
// joiners are refused. Like a proposal it produces no output by itself
// (a runtime may call it between Ready and Advance, when output emitted
// would be dropped unsent): the next Ready sends the GroupRemove frames.
func (c *Core) RemoveGroup() { c.removeDue = true }

// removeGroup carries out RemoveGroup (from Ready).
func (c *Core) removeGroup() {
	c.removeDue = false
	if c.state != member {
		return
	}
	for range 3 {
		c.emit(frame.Broadcast, &frame.GroupRemoveBody{View: c.view.ID})
	}
	c.state, c.err = done, ErrGroupRemoved
	c.event(core.Event{Kind: core.GroupRemoved, Member: c.self, Epoch: c.view.ID})
}
