package reliable

import (
	"fmt"
	"slices"
	"time"

	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/link"
	"github.com/rbcast/rbcast/link/auth"
	"github.com/rbcast/rbcast/reliable/core"
	"github.com/rbcast/rbcast/reliable/pbp"
)

// Stats is a snapshot of one member's counters.
type Stats struct {
	Self  frame.MemberID
	Order Order
	// Protocol is the core's counters: messages proposed and delivered,
	// frames sent, retransmitted and asked for again, the window's
	// occupancy (InFlight of Window) and what is not yet settled, with
	// the core's own counters in Detail (a pbp.Stats under Order FIFO, a
	// seq.Stats under Order Total).
	Protocol core.Stats
	// Link is the link's counters; KernelDrops are frames the kernel
	// dropped because we did not read fast enough.
	Link    link.Stats
	LinkErr error
	// BadFrames are frames dropped before the core, by decode error.
	BadFrames BadFrames
	// HeldData counts frames that deliver left unstepped because the
	// receive queue was full (they are repaired later, like losses), and
	// those of a sender held by HoldFrom (core.Stepper.HoldFrom).
	HeldData uint64
	// RetransmitsSentNow counts the retransmissions of Protocol's
	// Retransmitted that went out past the link's transmit queue
	// (link.NowSender); the rest were queued behind new frames.
	RetransmitsSentNow uint64
	// Queued is the number of delivered messages waiting for Recv.
	Queued int
	// Members is per other member (under Order Total, every member, this
	// one included): what was delivered from it and how long its repairs
	// took.
	Members []MemberStats
	// RepairP50 and RepairP99 are over the recent repairs of all members.
	RepairP50, RepairP99 time.Duration
	// Events are the most recent membership events, oldest first: the
	// last EventTail. EventsDropped counts the earlier ones, no longer
	// listed; EventCounts counts every event by kind; EventsLost counts
	// those the Events channel could not hold.
	Events        []Event
	EventsDropped uint64
	EventCounts   EventCounts
	EventsLost    uint64
	// Removals are each member's removal in force, by id: its last
	// MemberFailed, MemberStalled or MemberLeft, unless a MemberReturned
	// came after it. SelfRemoved is the last SelfRemoved event (nil
	// without one). RecentViews are the last ViewsKept ViewInstalled
	// events, oldest first. All three are exact however many events
	// Events no longer lists.
	Removals    []Event
	SelfRemoved *Event
	RecentViews []Event
	// View is the installed view (Config.Views; nil otherwise), and
	// Views the membership layer's counters.
	View  *ViewInfo
	Views ViewStats
	// Auth is the authentication's counters and keys (Config.Auth; nil
	// without): frames dropped by reason, the active key.
	Auth *auth.Stats
	// Acks is the acknowledgement matrix under FIFO and over views (PBP
	// frames carry their sender's whole ack vector; nil under the
	// registered total order): per live sender, how far every live
	// member holds its stream, as last heard. Who lags behind whom.
	Acks []SenderAcks
}

// SenderAcks is one sender's column of the acknowledgement matrix: how
// far each live member holds its stream as this member last heard it
// (sequence numbers: the next frame of the sender's each expects).
type SenderAcks struct {
	Sender frame.MemberID
	// Last is the sender's next frame as far as known here: the highest
	// of the row (the sender's own entry, or a member that heard more
	// of it since the sender's last vector arrived).
	Last uint32
	// Stable is the lowest of the row: every live member holds the
	// sender's frames before it (pbp.Core.StableFrom).
	Stable uint32
	Holds  []MemberHolds
}

// MemberHolds is how far one member holds a sender's stream, and how
// many frames that is behind the sender's Last.
type MemberHolds struct {
	Member frame.MemberID
	Next   uint32
	Behind uint32
}

// heldBy is a core's acknowledgement matrix (how far member m holds
// sender s's stream, as last heard), or nil if it keeps none: the
// membership core's and the total order's over views (HeldBy), PBP's
// (Holds), through registration's wrapper.
func heldBy(c core.Core) func(m, s frame.MemberID) (uint32, bool) {
	if v, ok := core.Find[interface {
		HeldBy(m, s frame.MemberID) (uint32, bool)
	}](c); ok {
		return v.HeldBy
	}
	if p, ok := core.Find[*pbp.Core](c); ok {
		return p.Holds
	}
	return nil
}

// ackMatrix is the live members' part of the acknowledgement matrix
// held (members by id; nil if held is): a column per sender, a row per
// member. A member whose entry is unknown (another configuration) is
// left out of the column.
func ackMatrix(held func(m, s frame.MemberID) (uint32, bool), members []core.Member) []SenderAcks {
	if held == nil {
		return nil
	}
	var out []SenderAcks
	for _, s := range members {
		if !s.Live {
			continue
		}
		col := SenderAcks{Sender: s.ID}
		for _, m := range members {
			if !m.Live {
				continue
			}
			next, ok := held(m.ID, s.ID)
			if !ok {
				continue
			}
			if len(col.Holds) == 0 || frame.SeqLess(col.Last, next) {
				col.Last = next
			}
			if len(col.Holds) == 0 || frame.SeqLess(next, col.Stable) {
				col.Stable = next
			}
			col.Holds = append(col.Holds, MemberHolds{Member: m.ID, Next: next})
		}
		if len(col.Holds) == 0 {
			continue
		}
		for i := range col.Holds {
			col.Holds[i].Behind = col.Last - col.Holds[i].Next
		}
		out = append(out, col)
	}
	return out
}

// BadFrames counts received frames dropped before the core saw them, by
// what was wrong (the frame package's decode error kinds).
type BadFrames = core.BadFrames

// MemberStats is what this member received from another (under Order
// Total, from every member, itself included).
type MemberStats struct {
	ID             frame.MemberID
	Live           bool
	Delivered      uint64 // messages
	DeliveredBytes uint64
	// Repairs counts gaps detected and filled (PBP2; under Order Total,
	// gaps in the global order, counted against the sequencer that was
	// asked); RepairP50/P99 are the time from detecting a gap (the Step
	// that revealed it) to filling it, over the most recent 256 repairs.
	Repairs              uint64
	RepairP50, RepairP99 time.Duration
}

// View is the view the group has installed (Config.Views), as Stats'
// View, without the rest of Stats: no link counters read from the
// kernel, no copies of the cores' tables. false before the first view
// and for a group without views.
func (g *Group) View() (ViewInfo, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if v := g.viewLocked(); v != nil {
		return *v, true
	}
	return ViewInfo{}, false
}

// viewLocked is the installed view, a copy; nil before the first and
// without views. g.mu is held.
func (g *Group) viewLocked() *ViewInfo {
	if g.views == nil {
		return nil
	}
	v := g.views.View()
	if v.ID == 0 {
		return nil
	}
	return &ViewInfo{ID: v.ID, Members: slices.Clone(v.Members)}
}

// Stats returns a snapshot of the counters.
func (g *Group) Stats() Stats {
	g.mu.Lock()
	s := g.n.stats(g.cfg.Order)
	s.EventsLost = g.lost
	if g.views != nil {
		s.View = g.viewLocked()
		s.Views = g.views.Counters()
	}
	g.mu.Unlock()
	s.Link, s.LinkErr = g.l.Stats()
	s.Auth = authStats(g.l)
	g.queue.mu.Lock()
	s.Queued = g.queue.n
	g.queue.mu.Unlock()
	return s
}

func (n *node) stats(o Order) Stats {
	c := n.st.Counters()
	info := n.st.Core().Info() // Self: a member's id in its view (Config.Views)
	s := Stats{Self: info.Self, Order: o, Protocol: n.st.Core().Stats(), BadFrames: c.Bad, HeldData: c.Held,
		RetransmitsSentNow: n.out.nowSent.Load(), RepairP50: time.Duration(c.RepairP50), RepairP99: time.Duration(c.RepairP99)}
	s.Events, s.EventsDropped, s.EventCounts = eventsOf(n.st.Events(), n.clk), n.st.EventsDropped(), n.st.EventCounts()
	s.Removals, s.RecentViews = eventsOf(n.st.Removals(), n.clk), eventsOf(n.st.RecentViews(), n.clk)
	if ev, ok := n.st.Removed(); ok {
		self := eventOf(ev, n.clk)
		s.SelfRemoved = &self
	}
	live := map[frame.MemberID]bool{}
	members := n.st.Core().Members()
	for _, m := range members {
		live[m.ID] = m.Live
	}
	s.Acks = ackMatrix(heldBy(n.st.Core()), members)
	for _, p := range c.Peers {
		if p.ID == info.Self && !info.SelfDelivery {
			continue
		}
		s.Members = append(s.Members, MemberStats{ID: p.ID, Live: live[p.ID], Delivered: p.Delivered, DeliveredBytes: p.DeliveredBytes,
			Repairs: p.Repairs, RepairP50: time.Duration(p.RepairP50), RepairP99: time.Duration(p.RepairP99)})
	}
	return s
}

// authStats returns the counters of l's authentication, if it has one.
func authStats(l link.Link) *auth.Stats {
	if a, ok := l.(*auth.Link); ok {
		s := a.Auth()
		return &s
	}
	return nil
}

// withAuth wraps l with Config.Auth's authentication.
func withAuth(l link.Link, s *settings) (link.Link, error) {
	if s.Auth == nil {
		// A member without a key learns, instead of timing out, that
		// the group uses one.
		return auth.WatchKeyless(l, s.Group, s.EtherType), nil
	}
	c := *s.Auth
	c.Group, c.EtherType = s.Group, s.EtherType
	a, err := auth.Wrap(l, c)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	return a, nil
}

// Auth returns the group's authenticated link (Config.Auth; nil
// without): its keys rotate with Install, Activate and Retire.
func (g *Group) Auth() *auth.Link {
	a, _ := g.l.(*auth.Link)
	return a
}
