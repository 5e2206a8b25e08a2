package reliable

import (
	"time"

	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/reliable/core"
)

// HoldFrom stops delivering member from's messages
// (core.Stepper.HoldFrom). Under PBP (FIFO) the core holds them itself:
// from's frames are received into its reorder window, bounded by it, but
// neither delivered nor acknowledged, nor asked for again, so from blocks
// once its window is full; at ReleaseFrom they are delivered from the
// window without a retransmission. Where the core cannot, its Data frames
// are left unstepped and repaired like losses after ReleaseFrom. The
// other members' messages go on, and from's acknowledgements of ours
// count. from's datagrams (SendUnreliable) are delivered as ever: they
// take no window room (Holding). A hold also ends by itself after a quarter of the failure
// timeout (500 ms by default), before from would remove this member for
// acknowledging nothing; messages from from are delivered again from
// then on, and a HoldFrom before ReleaseFrom does not renew it.
//
// It reports false, and holds nothing, under total order (one held
// frame would stop every later message). A caller that must not take a
// message now (dsm's wait condition) still gets, in the meantime, the
// messages of the turn that asked for the hold and those after its end,
// and must keep them itself. Deliver may call it.
func (g *Group) HoldFrom(from frame.MemberID) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.n.holdFrom(g.n.clk.Core(time.Now()), from)
}

// Holding reports whether from's messages are held now (HoldFrom, and
// neither ReleaseFrom nor the bound since). A held sender's datagrams
// (SendUnreliable) are delivered all the same: a hold stops its window,
// which they take no room of. Deliver may call it.
func (g *Group) Holding(from frame.MemberID) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.n.st.Holding(from)
}

// ReleaseFrom ends HoldFrom(from).
func (g *Group) ReleaseFrom(from frame.MemberID) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.n.st.ReleaseFrom(from)
	// A frame kept from from is stepped at the next turn: now.
	g.due = true
	g.wakeLoop()
}

// HoldFrom is Group.HoldFrom at now (Deliver may call it).
func (d *Driver) HoldFrom(now time.Time, from frame.MemberID) bool {
	return d.n.holdFrom(d.n.clk.Core(now), from)
}

// ReleaseFrom ends HoldFrom(from). Called from Deliver or OnEvent, it
// has Step take another turn, which delivers (or steps) what was kept
// from from; outside a turn, the next Step does (its deadline is then
// now).
func (d *Driver) ReleaseFrom(from frame.MemberID) {
	d.n.st.ReleaseFrom(from)
	if d.inTurn {
		d.due = true
	}
}

// Holding is Group.Holding (Deliver may call it).
func (d *Driver) Holding(from frame.MemberID) bool { return d.n.st.Holding(from) }

func (n *node) holdFrom(now core.Time, from frame.MemberID) bool {
	return n.st.HoldFrom(from, now.Add(n.holdFor))
}

// holdLimit is how long HoldFrom holds at most: a quarter of the failure
// timeout, for a sender removes a member that acknowledges none of its
// frames for a failure timeout.
func holdLimit(s *settings, mtu int) core.Duration {
	return s.protocol.shared(s, mtu).failureTimeout / 4
}
