package reliable

import (
	"errors"
	"log/slog"
	"time"

	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/link"
	"github.com/rbcast/rbcast/reliable/pbp"
)

// engine is one iteration of the event loop with the waiting taken out:
// received frames in, core stepped, frames out in one batch, deliveries
// and events handed on, Advance. The live Group and the simulator's Driver
// both run it, so the glue tested in testnet is the glue that runs live.
// Not safe for concurrent use: Group guards it with its lock.
type engine struct {
	core      *pbp.Core
	l         link.Link
	epoch     time.Time
	group     uint32
	etherType uint16
	log       *slog.Logger

	// deliver takes every delivered message (a view valid during the
	// call); event every membership event.
	deliver func(from frame.MemberID, data []byte)
	event   func(pbp.Event)
	// control, if set, takes the registration frames (Join, Welcome,
	// Start) that arrive while PBP runs: the server keeps answering them
	// until every member has started.
	control func(now pbp.Time, src [6]byte, v frame.View)
	// heard, if set, is told the sender of every PBP frame accepted;
	// tick, if set, runs with the core's timers.
	heard func(id frame.MemberID)
	tick  func(now pbp.Time)

	// holdData: the receive queue is full, so Data frames are not
	// stepped (see input).
	holdData bool

	ackBase frame.MemberID
	peers   []peerStats // by id - ackBase
	bad     BadFrames
	held    uint64
	events  []pbp.Event
	sendErr error
}

// peerStats is what the runtime measures per member.
type peerStats struct {
	member      bool
	delivered   uint64
	bytes       uint64
	repairs     uint64
	repairSince pbp.Time // 0: not repairing
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

func newEngine(l link.Link, s *settings, core *pbp.Core, members []frame.MemberInfo, epoch time.Time) *engine {
	e := &engine{core: core, l: l, epoch: epoch, group: s.Group, etherType: s.EtherType, log: s.Logger}
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
func (e *engine) now(t time.Time) pbp.Time { return pbp.Time(t.Sub(e.epoch)) + 1 }

// wall converts a core deadline back; zero stays zero.
func (e *engine) wall(t pbp.Time) time.Time {
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

// input decodes and steps received frames. Frames that fail to decode are
// counted by kind and dropped (DESIGN.md, decision 5); the core counts
// the ones it refuses.
func (e *engine) input(now pbp.Time, frames []link.Frame) {
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
		switch v.Type() {
		case frame.Join, frame.Welcome, frame.Start:
			if e.control != nil {
				e.control(now, eth.Src(), v)
			}
			continue
		case frame.Data:
			// A Data frame is the only input that delivers. While the
			// application is not reading, it is left unstepped: it is
			// not acknowledged, so its sender repairs it later like any
			// loss, and its window stalls — back-pressure on the group.
			// Everything else is still stepped so that liveness and
			// acknowledgements keep flowing and no member is removed
			// for our slowness before FailureTimeout.
			if e.holdData {
				e.held++
				continue
			}
		}
		id := v.Sender()
		p := e.peer(id)
		if e.core.Step(now, eth.Src(), v) != nil || p == nil {
			continue
		}
		if e.heard != nil {
			e.heard(id)
		}
		// Repair latency: from the Step that revealed a gap to the one
		// that filled it. Only a frame from p changes p's repair state.
		switch r := e.core.Repairing(id); {
		case r && p.repairSince == 0:
			p.repairSince = now
		case !r && p.repairSince != 0:
			p.latency.add(time.Duration(now - p.repairSince))
			p.repairs++
			p.repairSince = 0
		}
	}
}

// output carries out the core's Ready and Advances. A link that cannot
// send at all is reported once and kept in sendErr.
func (e *engine) output() error { return e.outputData(true) }

// outputData is output; without data, Data frames waiting for window
// room keep waiting (pbp.Core.ReadyControl).
func (e *engine) outputData(data bool) error {
	rd := e.core.ReadyControl()
	if data {
		rd = e.core.Ready()
	}
	if len(rd.Frames) > 0 && e.sendErr == nil {
		if _, err := e.l.Send(rd.Frames); err != nil {
			e.sendErr = err
			e.log.Error("rbcast: link send failed; the group stops", "group", e.group, "err", err)
		}
	}
	for _, d := range rd.Deliveries {
		if p := e.peer(d.From); p != nil {
			p.delivered++
			p.bytes += uint64(len(d.Data))
		}
		e.deliver(d.From, d.Data)
	}
	for _, ev := range rd.Events {
		e.events = append(e.events, ev)
		if p := e.peer(ev.Member); p != nil {
			p.repairSince = 0
		}
		if ev.Kind == pbp.SelfLeft {
			e.log.Info("rbcast: left the group", "group", e.group, "member", ev.Member)
		} else {
			e.log.Warn("rbcast: member removed", "group", e.group, "member", ev.Member, "reason", ev.Kind.String(),
				"delivered_up_to", ev.Delivered, "discarded", ev.Discarded)
		}
		if e.event != nil {
			e.event(ev)
		}
	}
	e.core.Advance()
	return e.sendErr
}

// turn is one whole iteration: step the frames, run the timers, output
// (new Data too unless data is false).
func (e *engine) turn(now pbp.Time, frames []link.Frame, data bool) error {
	e.input(now, frames)
	e.core.Tick(now)
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
