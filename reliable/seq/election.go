package seq

import (
	"fmt"

	"github.com/rbcast/rbcast/frame"
)

// Sequencer failure. The paper leaves it to "one of the many known
// algorithms"; this one elects the lowest live member id and, before
// anything new is numbered, agrees on the last numbered message:
//
//  1. A member that hears nothing from the sequencer for FailureTimeout
//     starts an election: a new epoch, its candidate the lowest id it has
//     heard within FailureTimeout (itself, if none), broadcast as Call
//     with its highest global held contiguously. From then on it takes no
//     numbered messages: its vote says how far it got.
//  2. Everyone in the election repeats its vote every ElectionRetry, so
//     the electing members hear each other. A member joins the highest
//     epoch it sees; one vote per epoch, so a member whose candidate
//     looks dead, or who hears a lower id, moves to a new epoch.
//  3. The candidate waits until every other member has voted for it in
//     this epoch or has been silent for FailureTimeout, counted from no
//     earlier than the election's start or its previous candidate's death
//     (a follower talks only to the sequencer, so silence before the
//     election proves nothing; one that adopted an earlier epoch answers a
//     vote with that epoch's Elected, so a member stuck in an old election
//     catches up), and until it has Quorum votes, its own included. The
//     agreed last global L is the highest any voter holds contiguously;
//     what the candidate holds beyond it is discarded; it fetches what it lacks
//     up to L from a voter that has it (SeqRetransmit, answered from the
//     voter's log), then announces Elected(epoch, itself, L) and numbers
//     from L+1. Members that did not vote are removed.
//  4. A member adopts Elected only if it voted for that candidate in that
//     epoch and delivered nothing beyond L; it discards what it holds
//     beyond L, fetches what it lacks up to L, and resubmits every request
//     not yet delivered back. Otherwise it halts (SelfRemoved): it may
//     hold a binding the new epoch does not have.
//  5. A sequencer that hears another member number in a newer epoch halts.
//
// A sequencer that leaves hands off through the same election, as one
// more voter that is never a candidate (leave.go).

// suspected reports whether m has been silent for FailureTimeout.
// A member that left is suspected from its Leave on.
func (c *Core) suspected(m *member) bool {
	return !m.self && (m.gone || c.now >= m.lastHeard.Add(c.cfg.FailureTimeout))
}

// excluded reports whether the candidate may complete without m's vote:
// silent for FailureTimeout, and we have waited that long since waitFrom;
// or it left.
func (c *Core) excluded(m *member) bool {
	return m.gone || c.suspected(m) && c.now >= c.waitFrom.Add(c.cfg.FailureTimeout)
}

// lowestLive is the election's candidate as this member sees it: the
// lowest id heard within FailureTimeout, a sequencer that hands off
// excepted (ourselves included). Only a member that hands off can find
// none.
func (c *Core) lowestLive() (frame.MemberID, bool) {
	for i := range c.members {
		if m := &c.members[i]; !c.suspected(m) && !m.handing {
			return m.id, true
		}
	}
	return c.cfg.Self, false
}

func (c *Core) votedEpoch() uint32 {
	if n := len(c.votes); n > 0 {
		return c.votes[n-1].epoch
	}
	return c.epoch
}

// startElection: the sequencer is silent, left, or hands off (we, when
// we do).
func (c *Core) startElection() {
	old := c.sequencerMember()
	if !old.gone && !old.handing { // a departure is reported as MemberLeft
		c.events = append(c.events, Event{Kind: SequencerFailed, Member: old.id, Epoch: c.epoch, Last: c.next - 1, At: c.now})
	}
	c.role = electing
	c.agreedSet = false
	c.repairAt, c.resendAt, c.repairDue = 0, 0, false
	e := max(c.epoch+1, c.votedEpoch()+1)
	if frame.SeqLess(e, c.seenEpoch) {
		e = c.seenEpoch
	}
	c.waitFrom = c.now
	cand, _ := c.lowestLive() // (a sequencer hands off only to someone)
	c.castVote(e, cand, frame.ElectionCall)
}

// maxVotes bounds the votes remembered: only recent epochs can still
// complete.
const maxVotes = 16

func (c *Core) castVote(epoch uint32, cand frame.MemberID, phase frame.ElectionPhase) {
	if len(c.votes) == maxVotes {
		copy(c.votes, c.votes[1:])
		c.votes = c.votes[:maxVotes-1]
	}
	c.votes = append(c.votes, vote{epoch, cand})
	c.electEpoch, c.electCand = epoch, cand
	c.agreedSet = false
	s := &c.members[c.self]
	s.voted, s.voteEpoch, s.voteCand, s.voteH = true, epoch, cand, c.recvd-1
	c.stats.Elections++
	c.sendElection(phase, c.cfg.dst)
}

func (c *Core) votedFor(epoch uint32, cand frame.MemberID) bool {
	for _, v := range c.votes {
		if v.epoch == epoch && v.cand == cand {
			return true
		}
	}
	return false
}

// electionStep moves the election on after any input or timer.
func (c *Core) electionStep() {
	if c.role != electing {
		return
	}
	cand, ok := c.lowestLive()
	switch {
	case !ok:
		return // we hand off, to nobody now: we leave (maybeLeave)
	case frame.SeqLess(c.electEpoch, c.seenEpoch):
		c.castVote(c.seenEpoch, cand, frame.ElectionVote)
	case cand != c.electCand && !c.agreedSet:
		// Our candidate looks dead, or a lower id is alive. A dead
		// candidate starts the wait for silent members afresh: one stuck
		// in an old election must not exclude members that were quiet
		// followers meanwhile.
		if m := c.member(c.electCand); m != nil && c.suspected(m) {
			c.waitFrom = c.now
		}
		c.castVote(c.electEpoch+1, cand, frame.ElectionCall)
	}
	if c.electCand == c.cfg.Self {
		c.tryComplete()
	}
}

// quorum is the votes an election needs. Members that left are not
// counted: they cannot vote on another side of a partition. A member that
// missed a Leave needs more votes than one that saw it, never fewer, so
// two majorities still overlap.
func (c *Core) quorum() int {
	n := 0
	for i := range c.members {
		if !c.members[i].gone {
			n++
		}
	}
	if c.cfg.majority {
		return n/2 + 1
	}
	return min(c.cfg.Quorum, n)
}

// tryComplete is the candidate's side: agree on the last global once every
// live member voted for us, fetch up to it, take over.
func (c *Core) tryComplete() {
	if !c.agreedSet {
		last := c.recvd - 1
		votes := 1
		for i := range c.members {
			m := &c.members[i]
			if m.self {
				continue
			}
			if !m.voted || m.voteEpoch != c.electEpoch || m.voteCand != c.cfg.Self || c.suspected(m) {
				if c.excluded(m) {
					continue
				}
				return
			}
			votes++
			if frame.SeqLess(last, m.voteH) {
				last = m.voteH
			}
		}
		if votes < c.quorum() {
			return // a minority: the other side may be electing
		}
		if int(last-(c.recvd-1)) > c.cfg.History {
			// Only a member the sequencer had removed falls this far
			// behind; what it lacks is gone from every history.
			c.halt(c.electEpoch, last, fmt.Sprintf("candidate of epoch %d, but the agreed end %d is more than the history (%d) beyond what we hold (up to %d)", c.electEpoch, last, c.cfg.History, c.recvd-1))
			return
		}
		c.agreed, c.agreedSet = last, true
		// What we hold beyond a gap past the agreed end is not part of
		// it: the fetch must not drain into it.
		c.discardBeyond(last)
	}
	if !frame.SeqLess(c.recvd-1, c.agreed) {
		c.takeover()
		return
	}
	if c.fetchAt != 0 {
		return
	}
	// Fetch from the voter holding the most.
	var from *member
	for i := range c.members {
		m := &c.members[i]
		if m.self || c.suspected(m) || !m.voted || m.voteEpoch != c.electEpoch || m.voteCand != c.cfg.Self {
			continue
		}
		if frame.SeqLess(c.recvd-1, m.voteH) && (from == nil || frame.SeqLess(from.voteH, m.voteH)) {
			from = m
		}
	}
	if from == nil || frame.SeqLess(from.voteH, c.agreed) {
		// The voter that held the most died before we had it all: agree
		// again among the living (nobody alive delivered beyond that).
		c.agreedSet = false
		return
	}
	c.fetchFrom = from
	c.sendRetransmit(from, c.electEpoch)
	c.fetchAt = c.now.Add(c.cfg.NackTimeout)
}

// takeover makes this member the sequencer of the elected epoch.
func (c *Core) takeover() {
	last := c.agreed
	old := c.sequencerMember().id
	c.handedOff(last)
	c.role, c.epoch, c.seqr = sequencer, c.electEpoch, c.self
	c.base = last + 1
	c.discardBeyond(last)
	c.clampLeft(last)
	c.knownEnd, c.nextGlobal = c.recvd, c.recvd
	c.agreedSet, c.fetchAt, c.fetchFrom = false, 0, nil
	c.stable = c.recvd
	c.learnSafe(last + 1) // the agreed prefix: every voter's vote covered it
	c.drain()             // deliver it first (up to a member change, which ends a Ready)
	// The duplicate filter is what the agreed prefix numbered, and the
	// members' liveness what it says: what we delivered, and what is held
	// and not yet delivered.
	for i := range c.members {
		m := &c.members[i]
		m.seqdSeq, m.dupAt, m.electedAt = m.delivSeq, 0, 0
		m.streamLive = !m.failed
	}
	for g := c.next; g != c.recvd; g++ {
		en := &c.log[g&c.lmask]
		o := c.originOf(en.uid)
		switch {
		case o == nil:
		case en.change != 0:
			o.streamLive = en.change == frame.MemberReadmitted
		case frame.SeqLess(o.seqdSeq, en.uid.Seq):
			o.seqdSeq = en.uid.Seq
		}
	}
	for i := range c.members {
		m := &c.members[i]
		switch {
		case m.self:
			m.acked, m.rcvd = c.next, c.recvd
		case m.gone:
			m.live = false // reported as MemberLeft
		case m.voted && m.voteEpoch == c.epoch && m.voteCand == c.cfg.Self:
			m.live, m.acked, m.rcvd = true, m.voteNext, m.voteH+1
		default:
			// Not a voter: removed, announced in the stream unless the
			// agreed prefix removed it already (announceChanges).
			m.live, m.removedFor = false, frame.ReasonNoVote
			if m.id == old {
				m.removedFor = frame.ReasonReplaced
			}
		}
		if m.live && frame.SeqLess(m.acked, c.stable) {
			c.stable = m.acked
		}
	}
	c.computeHeld() // from the voters' cursors
	c.accepts = c.accepts[:0]
	c.sendElected(nil)
	c.events = append(c.events, Event{Kind: SequencerChanged, Member: c.cfg.Self, Epoch: c.epoch, Last: last, At: c.now})
	c.resendAt = 0
	for r := c.firstPend; r != c.nextReq; r++ {
		c.pend[r&c.rmask].known = false
	}
	c.sequenceAll()
}

// discardBeyond forgets held globals after last: the new epoch numbers
// them afresh.
func (c *Core) discardBeyond(last uint32) {
	for i := range c.log {
		en := &c.log[i]
		if en.state != empty && !frame.SeqLess(en.global, c.next) && frame.SeqLess(last, en.global) {
			en.state = empty
		}
	}
	if frame.SeqLess(last+1, c.recvd) {
		c.recvd = last + 1 // what we held beyond is not part of the agreement
	}
	c.awaiting = 0
	for g := c.next; frame.SeqLess(g, last+1) && frame.SeqLess(g, c.next+uint32(c.cfg.History)); g++ {
		if en := &c.log[g&c.lmask]; en.global == g && en.state == accepted {
			c.awaiting++
		}
	}
}

// stepElection handles Call, Vote and Elected.
func (c *Core) stepElection(m *member, v frame.View) {
	b := v.Election()
	if b.Phase == frame.ElectionElected {
		c.stepElected(m, b)
		return
	}
	if !m.voted || !frame.SeqLess(b.Epoch, m.voteEpoch) {
		m.voted, m.voteEpoch, m.voteCand, m.voteH = true, b.Epoch, b.Candidate, b.LastGlobal
		m.voteNext = b.LastGlobal + 1
		if v.AckCount() >= 1 && !frame.SeqLess(m.voteNext, v.Ack(0)) {
			m.voteNext = v.Ack(0)
		}
	}
	if b.Candidate > m.id {
		// Only a member that hands off votes for a higher id than its
		// own (lowestLive counts itself otherwise): even where it is not
		// known as the sequencer (we missed the epoch it was elected
		// in), it is never a candidate.
		m.handing = true
	}
	if m == c.sequencerMember() && frame.SeqLess(c.epoch, b.Epoch) && c.role != sequencer {
		// Our sequencer calls an election: it hands off to leave (a
		// sequencer never votes otherwise).
		m.handing = true
		if frame.SeqLess(c.seenEpoch, b.Epoch) {
			c.seenEpoch = b.Epoch
		}
		if c.role == follower {
			c.startElection()
		}
	}
	switch c.role {
	case follower:
		if !frame.SeqLess(c.epoch, b.Epoch) && c.epoch != c.cfg.InitialEpoch {
			c.sendElected(m) // it missed the Elected we adopted
		}
	case sequencer:
		if !frame.SeqLess(c.epoch, b.Epoch) {
			c.sendElected(m) // it missed our Elected
		} else if m.electedAt == 0 || c.now >= m.electedAt.Add(c.cfg.ElectionRetry) {
			// It suspects us: show it we live, in our epoch.
			m.electedAt = c.now
			c.sendStatusRequest(m.mac, true)
		}
		return
	}
	if frame.SeqLess(c.seenEpoch, b.Epoch) {
		c.seenEpoch = b.Epoch
	}
	// A follower joins only on its own suspicion (Tick); its heartbeat
	// from the sequencer says the caller is wrong.
	c.electionStep()
}

// stepElected: m announces it is the sequencer of b.Epoch.
func (c *Core) stepElected(m *member, b frame.ElectionBody) {
	if c.member(b.Candidate) == nil || !frame.SeqLess(c.epoch, b.Epoch) {
		if b.Epoch != c.epoch {
			c.stats.StaleEpoch++
		}
		return
	}
	switch {
	case c.members[c.self].handing:
		// We handed off and the group has a new sequencer: every live
		// member delivered everything we numbered; we are done.
		c.depart()
		return
	case c.role == sequencer:
		c.halt(b.Epoch, b.LastGlobal, fmt.Sprintf("member %d was elected sequencer of epoch %d without our vote", b.Candidate, b.Epoch))
		return
	case !c.votedFor(b.Epoch, b.Candidate):
		c.halt(b.Epoch, b.LastGlobal, fmt.Sprintf("left out of the election of epoch %d (sequencer %d)", b.Epoch, b.Candidate))
		return
	case frame.SeqLess(b.LastGlobal, c.next-1):
		c.halt(b.Epoch, b.LastGlobal, fmt.Sprintf("delivered up to global %d, beyond the agreed end %d of epoch %d", c.next-1, b.LastGlobal, b.Epoch))
		return
	}
	last := b.LastGlobal
	c.handedOff(last)
	c.role, c.epoch, c.seqr, c.base = follower, b.Epoch, c.byID[b.Candidate], last+1
	c.agreedSet, c.fetchAt, c.fetchFrom = false, 0, nil
	c.discardBeyond(last)
	c.clampLeft(last)
	c.knownEnd = c.recvd
	c.learnSafe(last + 1)
	c.learnEnd(last+1, false)
	if c.role == halted {
		return // too far behind the agreed end to catch up
	}
	if c.recvd != c.knownEnd && c.repairAt == 0 {
		// Accepts from before the election still wait for payloads.
		c.repairAt = c.now.Add(c.cfg.NackTimeout)
		c.repairNext, c.repairBackoff = c.recvd, 0
	}
	c.sequencerMember().lastHeard = c.now
	c.events = append(c.events, Event{Kind: SequencerChanged, Member: b.Candidate, Epoch: b.Epoch, Last: last, At: c.now})
	// Resubmit every request not delivered back: those numbered up to
	// last are duplicates the new sequencer recognises.
	c.resendAt, c.resendBackoff = 0, 0
	for r := c.firstPend; r != c.nextReq; r++ {
		c.pend[r&c.rmask].known = false
		c.sendRequest(r, frame.FlagRetransmit)
		c.stats.RequestsResent++
	}
	c.armResend()
	c.drain()
}
