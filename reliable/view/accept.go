package view

import (
	"fmt"

	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/reliable/core"
)

// Acceptance (Config.Primary; docs/membership.md, "Two coordinators at
// once"). A view is accepted once a majority of the members of the view it
// was formed from (its base) is known to have installed it: each was heard
// sending in it (any frame of the view: its core's data, acks and
// heartbeats, or the Flushes of a change from it). A process installs at
// most one view formed from a given view, so of two views formed from one
// base at most one is ever accepted, whatever their member lists say (a
// coordinator that was deaf when its promisers moved on names them in a
// view they never install). Under a primary component a member acts on a
// view only once it is accepted: until then its core sends none of its
// messages (they wait, as during a change; nothing of the view can be
// delivered, since under total order a message is delivered only once the
// orderer sent it or its order), and a coordinator commits no view formed
// from it. So the views that deliver form one history: each accepted view's
// base was accepted, down to the founding view.
//
// Whom the base counts is the coordinator's reckoning, carried in the
// commit (frame.ViewCommitBody's BaseCount and FromBase), and every member
// of the new view waits for that same majority: a joiner knows the base
// only from the commit, and a member of the base may not have heard yet
// of a member that left it, which the coordinator left out. Any count that
// leaves out only members that did leave is safe: a member that left
// installs nothing more.

// Unaccepted reports whether the current view waits to be accepted: this
// member's messages wait in the core's queue until then (pcap-replay's
// re-run proposes the application's messages by it).
func (c *Core) Unaccepted() bool { return c.unaccepted }

// startAcceptance sets the acceptance of the view commit installs, from
// the commit's count of the base.
func (c *Core) startAcceptance(commit frame.ViewCommitBody) {
	c.unaccepted = false
	c.fromBase, c.baseTotal = c.fromBase[:0], 0
	if !c.cfg.Primary || commit.Base == 0 {
		return
	}
	c.fromBase, c.baseTotal = append(c.fromBase, commit.FromBase...), int(commit.BaseCount)
	c.unaccepted = true
}

// acceptors are the members of a view formed from base that count toward
// accepting it (appended to ids), and total how many members base counts:
// those that did not leave it cleanly.
func acceptors(base View, left func(frame.MemberID) bool, members []frame.MemberInfo, ids []frame.MemberID) (_ []frame.MemberID, total int) {
	for _, m := range base.Members {
		if left(m.ID) {
			continue
		}
		total++
		for _, n := range members {
			// The member itself, or its restart (a new incarnation on
			// the same MAC: the old one is gone and installs nothing
			// more, as primary counts a restart asking to join).
			if n.MAC == m.MAC {
				ids = append(ids, n.ID)
			}
		}
	}
	return ids, total
}

// announce has the new view's core send at once (a Heartbeat unless
// another frame goes first), so that the members of an unaccepted view
// hear each other in it within a round trip.
func (c *Core) announce() {
	if h, ok := c.inner.(interface{ HeartbeatNow() }); ok {
		h.HeartbeatNow()
	}
}

// checkAccepted ends the wait once a majority of the base installed the
// current view, and hands the core what waited.
func (c *Core) checkAccepted() {
	if 2*c.acceptedBy() <= c.baseTotal {
		return
	}
	c.unaccepted = false
	c.stats.Accepted++
	c.drainQueue()
}

// acceptedBy is how many members of the base are known to have installed
// the current view: this one, and those heard in it, before this member
// installed it too (installedHere).
func (c *Core) acceptedBy() int {
	n := 0
	for _, id := range c.fromBase {
		if id == c.self || c.installedHere(id) {
			n++
		}
	}
	return n
}

// neverAccepted stops a coordinator whose view every staying member
// flushed from but that no majority of its base installed within the
// failure timeout: it is not the primary component (a deaf coordinator's
// late view, or a view on the losing side of one).
func (c *Core) neverAccepted() {
	why := fmt.Sprintf("view %d was installed by %d of the %d members of the view it was formed from: it is not the primary component", c.view.ID, c.acceptedBy(), c.baseTotal)
	c.state, c.err = done, fmt.Errorf("%w: %s", ErrMinority, why)
	c.event(core.Event{Kind: core.SelfRemoved, Member: c.self, Epoch: c.view.ID, Reason: why})
}

// allFlushed reports whether every member p keeps flushed for it.
func (c *Core) allFlushed(p *proposal) bool {
	for _, id := range p.staying {
		if !c.flushed(p, id) {
			return false
		}
	}
	return true
}
