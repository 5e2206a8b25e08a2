package reliable

import (
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/link"
	"github.com/rbcast/rbcast/reliable/clock/wall"
	"github.com/rbcast/rbcast/reliable/core"
)

// node is what the live Group and the simulator's Driver share around
// their core's stepper: one wall clock, sending a Ready's frames over the
// link, handing its deliveries and events on. It knows no core but
// through core.Core.
type node struct {
	st    *core.Stepper
	info  core.Info
	clk   wall.Clock
	out   sender
	group uint32
	log   *slog.Logger
	// deliver takes every delivered message (a view, valid during the
	// call); event every event.
	deliver func(from frame.MemberID, data []byte)
	event   func(Event)
	// holdFor bounds a hold of one sender (holdFrom).
	holdFor core.Duration
	// admit, if set, says whether a received frame is stepped (a core
	// run by a CoreLoop drops some before its stepper: CoreConfig.Admit).
	admit func(now core.Time, f *link.Frame) bool
	// lender is the link when it lends received frames and the core
	// borrows them (lendFrames): frames are stepped as lent, and the
	// loans settled after each turn (settleLoans). taken, returned and
	// loans are settleLoans' scratch.
	lender          link.Lender
	taken, returned []core.Loan
	loans           []link.Loan
}

func newNode(l link.Link, s *settings, c core.Core, clk wall.Clock) *node {
	n := newCoreNode(l, s.Group, s.EtherType, s.Logger, c, clk)
	n.holdFor = holdLimit(s, l.MTU())
	return n
}

// newCoreNode is the node of c over l, without a group's settings (a
// CoreLoop's: no hold of a sender).
func newCoreNode(l link.Link, group uint32, etherType uint16, log *slog.Logger, c core.Core, clk wall.Clock) *node {
	st := core.NewStepper(c, group, etherType)
	if link.SealsCRC(l) {
		st.SkipCRC() // the link replaces every frame's CRC: no core writes one
	}
	n := &node{st: st, info: st.Info(), clk: clk, group: group, log: log}
	n.out = sender{l: l, etherType: etherType, group: group, log: log}
	return n
}

// input steps received frames and runs the timers. Frames that fail to
// decode are counted by the stepper (DESIGN.md, decision 5); the core
// counts the ones it refuses.
func (n *node) input(now core.Time, frames []link.Frame) {
	for i := range frames {
		if n.admit == nil || n.admit(now, &frames[i]) {
			f := &frames[i]
			if n.lender != nil {
				if loan, ok := n.lender.Loan(f.Data); ok {
					n.st.StepLent(now, f.Data, f.Authenticated, core.Loan(loan))
					continue
				}
			}
			stepFrame(n.st, now, f)
		}
	}
	n.st.Tick(now)
}

// lendFrames has the node step l's received frames as lent when l lends
// them (link.LenderOf) and the core borrows (core.Borrower): a frame the
// core retains past the turn is kept in the link's memory instead of
// copied. Only a runtime whose loop is the only reader of l may: the
// loans are settled before its next Recv.
func (n *node) lendFrames(l link.Link) {
	if lender, ok := link.LenderOf(l); ok && n.st.Borrows() {
		n.lender = lender
	}
}

// settleLoans, after a turn and before the link's next Recv, lends the
// link what the core took and returns what it gave back; if the link
// then wants loans back (its bound), the core copies what it keeps under
// them (or, with forget, drops it: the core runs no more) and they are
// returned too.
func (n *node) settleLoans(forget bool) {
	if n.lender == nil {
		return
	}
	n.taken, n.returned = n.st.Loans(n.taken[:0], n.returned[:0])
	n.lender.Lend(n.linkLoans(n.taken))
	n.lender.Return(n.linkLoans(n.returned))
	before, due := core.AllLoans, forget
	if !forget {
		var l link.Loan
		l, due = n.lender.Due()
		before = core.Loan(l)
	}
	if due {
		n.st.Reclaim(before, forget)
		n.taken, n.returned = n.st.Loans(n.taken[:0], n.returned[:0])
		n.lender.Return(n.linkLoans(n.returned))
	}
}

// linkLoans is ls as the link's loans, in n's scratch.
func (n *node) linkLoans(ls []core.Loan) []link.Loan {
	n.loans = n.loans[:0]
	for _, l := range ls {
		n.loans = append(n.loans, link.Loan(l))
	}
	return n.loans
}

// waitUntil is when a wait on the link that starts at now ends at the
// latest: at the core's next deadline, at most longest after now.
func (n *node) waitUntil(now time.Time, longest time.Duration) time.Time {
	wait := now.Add(longest)
	if d := n.clk.Wall(n.st.Deadline()); !d.IsZero() && d.Before(wait) {
		wait = d
	}
	return wait
}

// stepFrame steps one received frame; one whose tag verified (link/auth)
// is decoded without its CRC, which the tag makes redundant (and which
// no longer matches a body decrypted in place).
func stepFrame(st *core.Stepper, now core.Time, f *link.Frame) error {
	if f.Authenticated {
		return st.StepVerified(now, f.Data)
	}
	return st.Step(now, f.Data)
}

// handOut gives a Ready's deliveries and events to the application.
func (n *node) handOut(rd core.Ready) {
	for i := range rd.Deliveries {
		n.deliver(rd.Deliveries[i].From, rd.Deliveries[i].Data)
	}
	for _, ev := range rd.Events {
		e := eventOf(ev, n.clk)
		n.logEvent(e)
		if n.event != nil {
			n.event(e)
		}
	}
}

func (n *node) logEvent(ev Event) {
	switch ev.Kind {
	case SelfLeft:
		n.log.Info("rbcast: left the group", "group", n.group, "member", ev.Member)
	case SequencerChanged:
		n.log.Info("rbcast: new sequencer", "group", n.group, "sequencer", ev.Member, "epoch", ev.Epoch, "agreed_last", ev.Last)
	case SelfRemoved:
		n.log.Error("rbcast: removed from the group; halting", "group", n.group, "member", ev.Member, "epoch", ev.Epoch, "reason", ev.Reason)
	case SequencerFailed:
		n.log.Warn("rbcast: sequencer silent; electing a new one", "group", n.group, "sequencer", ev.Member, "epoch", ev.Epoch)
	case MemberReturned:
		n.log.Info("rbcast: removed member taken back", "group", n.group, "member", ev.Member, "epoch", ev.Epoch)
	case JoinRefused:
		n.log.Warn("rbcast: "+ev.Reason, "group", n.group)
	case ViewInstalled:
		if ev.View != nil {
			ms := make([]string, len(ev.View.Members))
			for i, m := range ev.View.Members {
				ms[i] = fmt.Sprintf("%d=%x.%d", m.ID, m.MAC, m.Incarnation)
			}
			n.log.Info("rbcast: view installed", "group", n.group, "view", ev.View.ID, "member", ev.Member, "members", strings.Join(ms, " "))
		}
	case GroupRemoved:
		n.log.Warn("rbcast: the group was removed", "group", n.group, "by", ev.Member)
	default:
		args := []any{"group", n.group, "member", ev.Member, "reason", ev.Kind.String()}
		if ev.Epoch != 0 {
			args = append(args, "epoch", ev.Epoch)
		} else {
			args = append(args, "delivered_up_to", ev.Delivered, "discarded", ev.Discarded)
		}
		if ev.Reason != "" {
			args = append(args, "detail", ev.Reason)
		}
		n.log.Warn("rbcast: member removed", args...)
	}
}

// sender sends a Ready's frames with what the link can do: a link that
// stages (link.Stager) has them copied into its transmit queue, and the
// Group's kicker has the kernel send them; a link that can send now
// (link.NowSender) sends retransmissions past that queue.
type sender struct {
	l         link.Link
	etherType uint16
	group     uint32
	log       *slog.Logger

	stage  link.Stager    // nil: Send
	now    link.NowSender // nil: retransmissions queue with the rest
	staged bool           // frames were staged since the last kick
	// retry: a failed send is returned and not kept, and the next send
	// tries again (a CoreLoop counts the failures and goes on); without
	// it the first failure stops the group.
	retry bool

	retx, rest [][]byte      // sendRetransmissions' scratch
	nowSent    atomic.Uint64 // retransmissions SendNow sent (read by Stats, which runs while the loop sends)
	nowFailed  bool          // a SendNow failed (logged once)
	err        error         // the link could not send: the group stops
}

// send transmits frames, in order but for retransmissions (see
// sendRetransmissions). A link that cannot send at all is reported once
// and kept in err.
func (s *sender) send(frames [][]byte) error {
	if len(frames) == 0 || s.err != nil {
		return s.err
	}
	var err error
	if s.stage != nil {
		if s.now != nil {
			frames = s.sendRetransmissions(frames)
		}
		if len(frames) > 0 {
			_, err = s.stage.Stage(frames)
			s.staged = true
		}
	} else {
		_, err = s.l.Send(frames)
	}
	if err != nil && !s.retry {
		s.err = err
		s.log.Error("rbcast: link send failed; the group stops", "group", s.group, "err", err)
	}
	return err
}

// sendRetransmissions sends the retransmissions among frames (flagged
// frame.FlagRetransmit) with the link's SendNow and returns the other
// frames, to be staged. A retransmission answers a repair request, and
// behind the frames staged before it (up to a window of new frames,
// which the kernel sends at its pace) it would reach its receiver only
// after all of them, with the sender's window shut at the lost frame
// meanwhile. It may overtake them: its receiver has seen later frames
// already (that is how it knew of the gap), and receivers take frames in
// any order. Everything else stays in order: an Ack or Heartbeat names
// our last frame sent, which must not arrive after it. Retransmissions
// SendNow does not send are staged with the rest, where Stage reports a
// link that cannot send.
func (s *sender) sendRetransmissions(frames [][]byte) [][]byte {
	retx, rest := s.retx[:0], s.rest[:0]
	for _, f := range frames {
		if _, body, err := frame.SplitEthernet(f, s.etherType); err == nil && frame.View(body).Retransmission() {
			retx = append(retx, f)
		} else {
			rest = append(rest, f)
		}
	}
	if len(retx) > 0 {
		n, err := s.now.SendNow(retx)
		s.nowSent.Add(uint64(n))
		if err != nil {
			rest = append(rest, retx[n:]...)
			if !s.nowFailed {
				// Said once: the retransmissions still go out (staged),
				// only later.
				s.nowFailed = true
				s.log.Warn("rbcast: sending retransmissions past the transmit queue failed; they are queued behind new frames from now on when it fails",
					"group", s.group, "err", err)
			}
		}
		clear(retx)
	}
	s.retx, s.rest = retx[:0], rest
	return rest
}
