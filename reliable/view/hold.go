package view

import (
	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/reliable/clock"
	"github.com/rbcast/rbcast/reliable/core"
)

// Holding one sender across views (core.Holder; docs/runtime.md,
// "Holding one sender"). The inner core of the view holds the sender's
// frames in its window (pbp.Core.HoldFrom); this layer keeps the hold
// over the views' changes, which a hold of one inner core alone would
// not survive: a change replaces the inner core, and the completion of
// a change must deliver every sender's messages up to the commit's cut,
// the held sender's too, before the next view is installed (virtual
// synchrony).
//
// So the freeze that starts a change releases the inner core's hold:
// what it kept is delivered at its next Tick (into the stash, until the
// commit, like every delivery after the freeze), the flush and the
// completion go on as without a hold, and a held sender that is left
// out of the next view has its messages up to the cut delivered here as
// at every other member. The install holds the sender again in the new
// view's inner core, if it is a member of the new view with the same
// incarnation and the hold's bound has not passed. A change therefore
// lets through at most what the held sender had in flight in the old
// view (a window), and the hold never delays a change.

var _ core.Holder = (*Core)(nil)

// senderHold is one sender held (HoldFrom) until ReleaseFrom or until.
type senderHold struct {
	from        frame.MemberID
	incarnation uint32
	until       clock.Time
}

// HoldFrom holds member from's messages (see above) until ReleaseFrom,
// or until the core's clock reaches until. It reports false, holding
// nothing, where no view runs, for an id that is not another member of
// the installed view, or where the inner core cannot hold (it is not a
// core.Holder, or it refuses). A hold of from that exists already is
// left as it is.
func (c *Core) HoldFrom(from frame.MemberID, until clock.Time) bool {
	if c.state != member || c.inner == nil || from == c.self {
		return false
	}
	m, ok := c.memberOf(c.view, from)
	if !ok {
		return false
	}
	if c.heldFrom(from) != nil {
		return true
	}
	h, ok := core.Find[core.Holder](c.inner)
	if !ok {
		return false
	}
	if !c.frozen && !h.HoldFrom(from, until) {
		return false
	}
	c.holds = append(c.holds, senderHold{from: from, incarnation: m.Incarnation, until: until})
	return true
}

// ReleaseFrom ends HoldFrom(from). What the inner core kept is
// delivered at its next Tick, which its Deadline asks for at once.
func (c *Core) ReleaseFrom(from frame.MemberID) {
	for i := range c.holds {
		if c.holds[i].from != from {
			continue
		}
		c.holds = append(c.holds[:i], c.holds[i+1:]...)
		if c.inner != nil && !c.frozen {
			if h, ok := core.Find[core.Holder](c.inner); ok {
				h.ReleaseFrom(from)
			}
		}
		return
	}
}

func (c *Core) heldFrom(from frame.MemberID) *senderHold {
	for i := range c.holds {
		if c.holds[i].from == from {
			return &c.holds[i]
		}
	}
	return nil
}

// holding reports whether member id's messages are held now.
func (c *Core) holding(id frame.MemberID) bool {
	h := c.heldFrom(id)
	return h != nil && c.now < h.until
}

// suspendHolds releases the inner core's holds at the freeze: the
// change must deliver every sender's messages up to its cut.
func (c *Core) suspendHolds() {
	if len(c.holds) == 0 {
		return
	}
	if h, ok := core.Find[core.Holder](c.inner); ok {
		for _, s := range c.holds {
			h.ReleaseFrom(s.from)
		}
	}
}

// resumeHolds holds again, in the inner core of the view just
// installed, the senders that are still members with the same
// incarnation, while their bound has not passed; the others' holds end.
func (c *Core) resumeHolds() {
	if len(c.holds) == 0 {
		return
	}
	h, ok := core.Find[core.Holder](c.inner)
	keep := c.holds[:0]
	for _, s := range c.holds {
		m, member := c.memberOf(c.view, s.from)
		if ok && member && s.from != c.self && m.Incarnation == s.incarnation && c.now < s.until && h.HoldFrom(s.from, s.until) {
			keep = append(keep, s)
		}
	}
	c.holds = keep
}
