package reliable

import (
	"errors"
	"log/slog"
	"time"

	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/link"
	"github.com/rbcast/rbcast/reliable/clock"
	"github.com/rbcast/rbcast/reliable/pbp"
	"github.com/rbcast/rbcast/reliable/seq"
)

// engine is one iteration of the event loop with the waiting taken out:
// received frames in, core stepped, frames out in one batch, deliveries
// and events handed on, Advance. The live Group and the simulator's Driver
// both run it, so the glue tested in testnet is the glue that runs live.
// Not safe for concurrent use: Group guards it with its lock.
//
// It drives one of two cores: pbp's (Order FIFO) or seq's (Order Total);
// exactly one of core and total is set. The cores are called directly,
// not through an interface, so that nothing handed to them escapes and
// the FIFO hot path stays free of allocations.
type engine struct {
	core      *pbp.Core // Order FIFO
	total     *seq.Core // Order Total
	l         link.Link
	epoch     time.Time
	group     uint32
	etherType uint16
	log       *slog.Logger

	// deliver takes every delivered message (a view valid during the
	// call); event every membership event.
	deliver func(from frame.MemberID, data []byte)
	event   func(Event)
	// control, if set, takes the registration frames (Join, Welcome,
	// Start) that arrive while the protocol runs: the server keeps
	// answering them until every member has started.
	control func(now clock.Time, src [6]byte, v frame.View)
	// heard, if set, is told the sender of every protocol frame accepted;
	// tick, if set, runs with the core's timers, and tickDeadline, if
	// set, says when tick must next run (0: nothing pending): deadline
	// counts it, so that a loop sleeping until the core's next timer
	// (link.Waker) wakes for it too.
	heard        func(id frame.MemberID)
	tick         func(now clock.Time)
	tickDeadline func() clock.Time

	// holdData: the receive queue is full, so frames that deliver are
	// not stepped (see input).
	holdData bool

	ackBase frame.MemberID
	peers   []peerStats // by id - ackBase
	bad     BadFrames
	held    uint64
	events  []Event
	sendErr error

	// stage, if set, is the link's Stage half of Send: send copies the
	// frames into the link's transmit queue and sets staged, and the
	// Group's kicker goroutine has the kernel transmit them (Kick) after
	// the lock is released. Nil: send calls l.Send.
	stage  stager
	staged bool
	// sendNow, if set (link/ring, Order FIFO), sends the Data retransmissions
	// of each batch at once, past the frames staged before them (see
	// sendRetransmissions); retx and rest are its scratch slices, nowSent
	// counts what it sent.
	sendNow    nowSender
	retx, rest [][]byte
	// outputting: outputData is carrying out a Ready; again: something
	// called it meanwhile (from a delivery), so it runs another round.
	outputting, again bool
	// againData: a re-entering call asked for new Data too.
	againData bool
	// leaveDue: leave was called meanwhile, at leaveAt.
	leaveDue  bool
	leaveAt   clock.Time
	nowSent   uint64
	nowFailed bool // a SendNow failed (logged once)
}

// nowSender is a link that can send frames past the ones it has queued
// (link/ring's SendNow).
type nowSender interface {
	SendNow(frames [][]byte) (int, error)
}

// stager is a link that can split Send in two (link/ring): Stage copies
// frames into its transmit ring, Kick hands them to the kernel and may run
// on another goroutine at the same time as Stage.
type stager interface {
	Stage(frames [][]byte) (int, error)
	Kick() error
}

// peerStats is what the runtime measures per member.
type peerStats struct {
	member      bool
	delivered   uint64
	bytes       uint64
	repairs     uint64
	repairSince clock.Time // 0: not repairing
	latency     latencyRing
}

// latencyRing keeps the most recent repair latencies for percentiles.
type latencyRing struct {
	d [256]time.Duration
	n int
}

func (r *latencyRing) add(d time.Duration) {
	r.d[r.n%len(r.d)] = d
	r.n++
}

func (r *latencyRing) samples() []time.Duration {
	return append([]time.Duration(nil), r.d[:min(r.n, len(r.d))]...)
}

func newEngine(l link.Link, s *settings, fifo *pbp.Core, total *seq.Core, members []frame.MemberInfo, epoch time.Time) *engine {
	e := &engine{core: fifo, total: total, l: l, epoch: epoch, group: s.Group, etherType: s.EtherType, log: s.Logger}
	lo, hi := members[0].ID, members[0].ID
	for _, m := range members {
		lo, hi = min(lo, m.ID), max(hi, m.ID)
	}
	e.ackBase = lo
	e.peers = make([]peerStats, int(hi-lo)+1)
	for _, m := range members {
		e.peers[m.ID-lo].member = true
	}
	return e
}

// now converts a wall-clock instant to the core's Time: nanoseconds since
// the epoch, plus one, since the core reserves 0 for "no deadline".
func (e *engine) now(t time.Time) clock.Time { return clock.Time(t.Sub(e.epoch)) + 1 }

// wall converts a core deadline back; zero stays zero.
func (e *engine) wall(t clock.Time) time.Time {
	if t == 0 {
		return time.Time{}
	}
	return e.epoch.Add(time.Duration(t - 1))
}

func (e *engine) peer(id frame.MemberID) *peerStats {
	i := int(id) - int(e.ackBase)
	if i < 0 || i >= len(e.peers) || !e.peers[i].member {
		return nil
	}
	return &e.peers[i]
}

// The core's operations, on whichever core runs.

// deadline is when the loop must next turn: the core's next timer, or
// tick's if that is earlier; 0 when neither is pending.
func (e *engine) deadline() clock.Time {
	var d clock.Time
	if e.core != nil {
		d = e.core.Deadline()
	} else {
		d = e.total.Deadline()
	}
	if e.tickDeadline != nil {
		if t := e.tickDeadline(); t != 0 && (d == 0 || t < d) {
			d = t
		}
	}
	return d
}

func (e *engine) propose(now clock.Time, msg []byte) error {
	if e.core != nil {
		return e.core.Propose(now, msg)
	}
	return e.total.Propose(now, msg)
}

// windowFull reports whether a Propose error is back-pressure.
func windowFull(err error) bool {
	return errors.Is(err, pbp.ErrWindowFull) || errors.Is(err, seq.ErrWindowFull)
}

// blocked reports whether a Propose would be refused for want of window
// room.
func (e *engine) blocked() bool {
	if e.core != nil {
		return e.core.Blocked()
	}
	return e.total.Blocked()
}

// sendable reports whether a Send waiting for room should try again: a
// Propose would be accepted, or (FIFO) frames wait that the window has
// room for, which the woken Send then transmits.
func (e *engine) sendable() bool {
	if e.core != nil {
		st := e.core.Stats()
		return !e.core.Blocked() || st.InFlight < st.Window
	}
	return !e.total.Blocked()
}

// inFlight is what this member sent and is not yet done with: FIFO frames
// not acknowledged by every live member, Total requests not delivered
// back.
func (e *engine) inFlight() int {
	if e.core != nil {
		return e.core.Stats().InFlight
	}
	return e.total.Stats().Outstanding
}

func (e *engine) leave(now clock.Time) {
	if e.outputting {
		// From a delivery or event of the Ready being carried out (a
		// Driver's Leave from Config.Deliver or OnEvent): the core's
		// Leave would put frames and SelfLeft into that Ready after the
		// runtime took it, and its Advance would drop them (SelfLeft was
		// never reported). outputData leaves once it is Advanced.
		e.leaveDue, e.leaveAt, e.again = true, now, true
		return
	}
	e.leaveNow(now)
}

func (e *engine) leaveNow(now clock.Time) {
	if e.core != nil {
		e.core.Leave(now)
		return
	}
	e.total.Leave(now)
}

// finished reports whether the core is done: it left and its Leave
// repeats are out, or (Total) it halted.
func (e *engine) finished() bool {
	if e.core != nil {
		return e.core.Left() && e.core.Deadline() == 0
	}
	return e.total.Halted() || e.total.Left() && e.total.Deadline() == 0
}

// holds reports whether a frame of type t is left unstepped while the
// receive queue is full: the frames that deliver.
func (e *engine) holds(t frame.Type) bool {
	if e.core != nil {
		return t == frame.Data
	}
	return t == frame.SeqData || t == frame.SeqAccept || t == frame.SeqRequest
}

// input decodes and steps received frames. Frames that fail to decode are
// counted by kind and dropped (DESIGN.md, decision 5); the core counts
// the ones it refuses.
func (e *engine) input(now clock.Time, frames []link.Frame) {
	for i := range frames {
		eth, body, err := frame.SplitEthernet(frames[i].Data, e.etherType)
		if err != nil {
			e.bad.count(err)
			continue
		}
		v, err := frame.ParseGroup(body, e.group)
		if err != nil {
			e.bad.count(err)
			continue
		}
		switch t := v.Type(); {
		case t == frame.Join || t == frame.Welcome || t == frame.Start:
			if e.control != nil {
				e.control(now, eth.Src(), v)
			}
			continue
		case e.holdData && e.holds(t):
			// Only frames that deliver are held while the application
			// is not reading. Unstepped, they are not acknowledged, so
			// they are repaired later like any loss, and the group
			// stalls on us — back-pressure. Everything else is still
			// stepped so that liveness and acknowledgements keep
			// flowing and no member is removed for our slowness before
			// FailureTimeout.
			e.held++
			continue
		}
		id := v.Sender()
		if e.core != nil {
			p := e.peer(id)
			if e.core.StepTo(now, eth.Src(), eth.Dst(), v) != nil || p == nil {
				continue
			}
			if e.heard != nil {
				e.heard(id)
			}
			// Repair latency: from the Step that revealed a gap to the
			// one that filled it. Only a frame from p changes p's
			// repair state.
			e.repairState(p, e.core.Repairing(id), now)
			continue
		}
		if e.total.Step(now, eth.Src(), v) != nil {
			continue
		}
		if e.heard != nil {
			e.heard(id)
		}
		// Total: gaps are in the one global stream; their repairs are
		// counted against the sequencer, who answers them.
		if p := e.peer(e.total.Sequencer()); p != nil {
			e.repairState(p, e.total.Repairing(), now)
		}
	}
}

func (e *engine) repairState(p *peerStats, repairing bool, now clock.Time) {
	switch {
	case repairing && p.repairSince == 0:
		p.repairSince = now
	case !repairing && p.repairSince != 0:
		p.latency.add(time.Duration(now - p.repairSince))
		p.repairs++
		p.repairSince = 0
	}
}

// output carries out the core's Ready and Advances. A link that cannot
// send at all is reported once and kept in sendErr.
func (e *engine) output() error { return e.outputData(true) }

// outputData is output; without data, FIFO Data frames waiting for window
// room keep waiting (pbp.Core.ReadyControl). The sequencer core has no
// such split: its requests are small, and one Ready sends them.
func (e *engine) outputData(data bool) error {
	if e.outputting {
		// Called from a delivery of the Ready being carried out (a
		// Config.Deliver that proposes through the Driver): that Ready
		// must be finished and Advanced first, or its deliveries would
		// be handed over again, and again. The outer call runs another
		// round for what this one would have sent.
		e.again = true
		e.againData = e.againData || data
		return e.sendErr
	}
	e.outputting = true
	defer func() { e.outputting = false }()
	for {
		e.again = false
		err := e.outputOnce(data)
		// A re-entering call that would have sent new Data has its
		// round send it, even when this call was control-only.
		data, e.againData = data || e.againData, false
		if e.leaveDue {
			e.leaveDue = false
			e.leaveNow(e.leaveAt)
		}
		if err != nil || !e.again {
			return err
		}
	}
}

// outputOnce carries out one Ready and Advances.
func (e *engine) outputOnce(data bool) error {
	if e.total != nil {
		rd := e.total.Ready()
		e.send(rd.Frames)
		for _, d := range rd.Deliveries {
			e.delivered(d.From, d.Data)
		}
		for _, ev := range rd.Events {
			e.report(totalEvent(ev, e.wall(ev.At)))
		}
		e.total.Advance()
		return e.sendErr
	}
	rd := e.core.ReadyControl()
	if data {
		rd = e.core.Ready()
	}
	e.send(rd.Frames)
	for _, d := range rd.Deliveries {
		e.delivered(d.From, d.Data)
	}
	for _, ev := range rd.Events {
		e.report(fifoEvent(ev, e.wall(ev.At)))
	}
	e.core.Advance()
	return e.sendErr
}

func (e *engine) send(frames [][]byte) {
	if len(frames) > 0 && e.sendErr == nil {
		var err error
		if e.stage != nil {
			if e.sendNow != nil {
				frames = e.sendRetransmissions(frames)
			}
			if len(frames) > 0 {
				_, err = e.stage.Stage(frames)
				e.staged = true
			}
		} else {
			_, err = e.l.Send(frames)
		}
		if err != nil {
			e.sendErr = err
			e.log.Error("rbcast: link send failed; the group stops", "group", e.group, "err", err)
		}
	}
}

// sendRetransmissions sends the Data retransmissions among frames with
// the link's SendNow and returns the other frames, to be staged. A
// retransmission answers a Nack, and behind the frames staged before it
// (up to a window of new Data, which the kicker hands to the kernel at the
// kernel's pace) it reached the asking receiver only after all of them:
// the repair took that long, and the sender's window stayed shut at the
// lost frame meanwhile. A retransmission may overtake them: its
// receiver has seen later frames already (that is how it knew of the
// gap), and receivers take frames in any order. Acks, Heartbeats and
// Nacks stay in order: their Seq names our last frame sent, which must
// not arrive before that frame. Retransmissions SendNow does not send
// are staged with the rest, where Stage reports a link that cannot send.
func (e *engine) sendRetransmissions(frames [][]byte) [][]byte {
	retx, rest := e.retx[:0], e.rest[:0]
	for _, f := range frames {
		if _, body, err := frame.SplitEthernet(f, e.etherType); err == nil &&
			frame.View(body).Type() == frame.Data && frame.View(body).Retransmission() {
			retx = append(retx, f)
		} else {
			rest = append(rest, f)
		}
	}
	if len(retx) > 0 {
		n, err := e.sendNow.SendNow(retx)
		e.nowSent += uint64(n)
		if err != nil {
			rest = append(rest, retx[n:]...)
			if !e.nowFailed {
				// Said once: the retransmissions still go out (staged),
				// only later; Stats.RetransmitsSentNow stops following
				// Protocol.Retransmitted.
				e.nowFailed = true
				e.log.Warn("rbcast: sending retransmissions past the transmit queue failed; they are queued behind new frames from now on when it fails",
					"group", e.group, "err", err)
			}
		}
		clear(retx)
	}
	e.retx, e.rest = retx[:0], rest
	return rest
}

func (e *engine) delivered(from frame.MemberID, data []byte) {
	if p := e.peer(from); p != nil {
		p.delivered++
		p.bytes += uint64(len(data))
	}
	e.deliver(from, data)
}

func (e *engine) report(ev Event) {
	e.events = append(e.events, ev)
	if p := e.peer(ev.Member); p != nil && ev.Kind != SequencerChanged {
		p.repairSince = 0
	}
	switch ev.Kind {
	case SelfLeft:
		e.log.Info("rbcast: left the group", "group", e.group, "member", ev.Member)
	case SequencerChanged:
		e.log.Info("rbcast: new sequencer", "group", e.group, "sequencer", ev.Member, "epoch", ev.Epoch, "agreed_last", ev.Last)
	case SelfRemoved:
		e.log.Error("rbcast: removed from the group; halting", "group", e.group, "member", ev.Member, "epoch", ev.Epoch, "reason", ev.Reason)
	case SequencerFailed:
		e.log.Warn("rbcast: sequencer silent; electing a new one", "group", e.group, "sequencer", ev.Member, "epoch", ev.Epoch)
	case MemberReturned:
		e.log.Info("rbcast: removed member taken back", "group", e.group, "member", ev.Member, "epoch", ev.Epoch)
	default:
		if ev.Epoch != 0 {
			e.log.Warn("rbcast: member removed", "group", e.group, "member", ev.Member, "reason", ev.Kind.String(),
				"epoch", ev.Epoch, "detail", ev.Reason)
		} else if ev.Reason != "" {
			e.log.Warn("rbcast: member removed", "group", e.group, "member", ev.Member, "reason", ev.Kind.String(),
				"delivered_up_to", ev.Delivered, "discarded", ev.Discarded, "detail", ev.Reason)
		} else {
			e.log.Warn("rbcast: member removed", "group", e.group, "member", ev.Member, "reason", ev.Kind.String(),
				"delivered_up_to", ev.Delivered, "discarded", ev.Discarded)
		}
	}
	if e.event != nil {
		e.event(ev)
	}
}

// turn is one whole iteration: step the frames, run the timers, output
// (new Data too unless data is false).
func (e *engine) turn(now clock.Time, frames []link.Frame, data bool) error {
	e.input(now, frames)
	if e.core != nil {
		e.core.Tick(now)
	} else {
		e.total.Tick(now)
	}
	if e.tick != nil {
		e.tick(now)
	}
	return e.outputData(data)
}

// BadFrames counts received frames dropped before the core saw them, by
// what was wrong (the frame package's decode error kinds).
type BadFrames struct {
	NotRbcast uint64 // wrong EtherType or truncated Ethernet header
	Short     uint64
	Length    uint64
	Version   uint64
	Type      uint64
	Flags     uint64
	Group     uint64 // another group's frames
	Checksum  uint64
	AckVector uint64
	Auth      uint64
	Body      uint64
	Other     uint64
}

func (b *BadFrames) count(err error) {
	switch {
	case errors.Is(err, frame.ErrEthernet):
		b.NotRbcast++
	case errors.Is(err, frame.ErrShort):
		b.Short++
	case errors.Is(err, frame.ErrLength):
		b.Length++
	case errors.Is(err, frame.ErrVersion):
		b.Version++
	case errors.Is(err, frame.ErrType):
		b.Type++
	case errors.Is(err, frame.ErrFlags):
		b.Flags++
	case errors.Is(err, frame.ErrGroup):
		b.Group++
	case errors.Is(err, frame.ErrChecksum):
		b.Checksum++
	case errors.Is(err, frame.ErrAckVector):
		b.AckVector++
	case errors.Is(err, frame.ErrAuth):
		b.Auth++
	case errors.Is(err, frame.ErrBody):
		b.Body++
	default:
		b.Other++
	}
}

// Total is the number of frames dropped for any reason.
func (b BadFrames) Total() uint64 {
	return b.NotRbcast + b.Short + b.Length + b.Version + b.Type + b.Flags + b.Group + b.Checksum +
		b.AckVector + b.Auth + b.Body + b.Other
}
