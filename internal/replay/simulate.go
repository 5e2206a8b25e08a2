package replay

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"io"
	"net"
	"sort"
	"strconv"
	"time"

	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/reliable/clock"
	"github.com/rbcast/rbcast/reliable/clock/wall"
	"github.com/rbcast/rbcast/reliable/core"
	"github.com/rbcast/rbcast/reliable/pbp"
	"github.com/rbcast/rbcast/reliable/pcode"
	"github.com/rbcast/rbcast/reliable/seq"
)

// Protocol selects the core Simulate re-runs.
type Protocol uint8

const (
	// ProtocolAuto: views when the capture carries a group with views
	// (of Group, on Iface, when given), else the sequencer when the
	// member's interface carries sequencer frames of the group, else PBP.
	ProtocolAuto Protocol = iota
	ProtocolPBP
	ProtocolSeq
	// ProtocolViews: one process of a group with views (reliable/view,
	// with reliable/vtotal above it for Agreed and Safe); ProtocolAuto
	// picks it when the capture carries view frames (0x20–0x28) or
	// frames of a view.
	ProtocolViews
	// ProtocolPCODE: a member of an SPMD program under Order PCODE
	// (reliable/pcode), its program rebuilt from the capture
	// (simulate_pcode.go); ProtocolAuto picks it when the member's
	// interface carries PCODE frames (0x30–0x33) of the group.
	ProtocolPCODE
)

func (p Protocol) String() string {
	switch p {
	case ProtocolPBP:
		return "PBP"
	case ProtocolSeq:
		return "sequencer"
	case ProtocolViews:
		return "views"
	case ProtocolPCODE:
		return "PCODE"
	}
	return "auto"
}

// SimOptions select the member to re-run and reconstruct its core's
// configuration. Zero fields mean: from the capture, else the core's
// defaults.
type SimOptions struct {
	Node frame.MemberID
	// Protocol: PBP (reliable/pbp, FIFO groups) or the sequencer
	// (reliable/seq, total order); ProtocolAuto decides from the frames.
	Protocol Protocol
	// Members is the member list; nil means the capture's Start frame, or
	// else the senders seen in the capture (each id with the source MAC
	// and incarnation of its frames, plus our interfaces' descriptions).
	Members []frame.MemberInfo
	// Iface picks the capture interface by index; -1 means the interface
	// whose description names Node, or the only interface.
	Iface int
	// Group; nil means the group of the node's own frames, else the most
	// common group in the capture.
	Group *uint32
	// EtherType of the group; 0 means frame.EtherType.
	EtherType uint16
	// MTU; 0 means the interface description's, else the default 1500.
	MTU int
	// MaxIdleTicks bounds the timer ticks between two inputs (heartbeats
	// through a pause in the capture, or bogus timestamps): past it the
	// re-run skips to the next input. 0 means DefaultMaxIdleTicks.
	MaxIdleTicks int
	// Start is when the node's core started its clocks (the first Tick);
	// zero means the time of the group's Start frame on the interface (a
	// registered group), else the interface's isb_starttime (capture.Wrap
	// records the wrap time), else its first frame.
	Start time.Time
	// PBP's settings, as pbp.Config but the timers as time.Durations
	// (zero: defaults; Window zero: the window the group's Join frames
	// carry, if the capture has one, else the default). Window, MaxPayload
	// and the timers shared with the sequencer apply to it too.
	Mode                                                                                 pbp.Mode
	Window, MaxPayload                                                                   int
	InitialSeq                                                                           uint32
	AckDelay, ResendTimeout, NackTimeout, HeartbeatInterval, FailureTimeout, BundleDelay time.Duration
	// The sequencer's settings, as seq.Config (zero: defaults).
	// InitialGlobal nil means the lowest global (or delivered cursor) in
	// the capture; InitialEpoch 0 means the lowest epoch in it, else 1.
	Method             seq.Method
	Threshold, History int
	InitialGlobal      *uint32
	InitialEpoch       uint32
	ElectionRetry      time.Duration
	Quorum             int
	// Resilience as the live group's (zero: SafeMajority). Under
	// SafeMajority when the sequencer announces a safe point and members
	// acknowledge depends on how the live runtime grouped its Ready
	// calls, so a re-run may order (or count) those status frames
	// differently from the capture; deliveries are the same.
	Resilience seq.Resilience

	// A group with views (ProtocolViews): Node is the member id of the
	// process to re-run, and Incarnation picks it when that id was held
	// by several processes in the capture (a restart); 0: the only one.
	// ViewOrder is the group's level (ViewOrderAuto: from the process's
	// Join and the frames). Found is how many processes a founder waits
	// for (rbcastd run -members; 0: from the capture), MaxMembers the
	// group's bound (0: what the Join's config hash shows, else
	// reliable.DefaultMaxMembers), JoinRetry the view protocol's
	// retransmission interval (0: reliable.DefaultJoinRetry). Window,
	// MaxPayload, Mode, the timers and, under total order, the
	// sequencer's settings are the group's as above; Members does not
	// apply.
	Incarnation uint32
	ViewOrder   ViewOrder
	Found       int
	MaxMembers  int
	JoinRetry   time.Duration

	// PCODE's settings, as reliable.PCODEConfig (zero: pcode's defaults);
	// Window is its buffer of sent messages (pcode.Config.SendBuffer),
	// and MaxPayload and FailureTimeout apply too.
	EarlyBuffer, FlowWindow, StatusWindow int
	InitialRTT, MinTimer, MaxTimer        time.Duration
}

// SimDelivery is one message the re-run core delivered.
type SimDelivery struct {
	At    time.Time
	Frame int // the captured frame whose Step (or Tick) delivered it; 0 for a Tick
	From  frame.MemberID
	Seq   uint32 // PBP: the Data frame's seq; sequencer: the request number at From
	Index int
	// Global and Epoch: the sequencer's numbering (zero for PBP).
	Global, Epoch uint32
	// View is the view it was delivered in (groups with views; 0 else),
	// Unreliable whether it came at the Unreliable level (a Datagram;
	// Seq is then the sender's datagram number).
	View       uint32
	Unreliable bool
	Data       []byte
}

// SimSent is one frame the re-run core would have sent.
type SimSent struct {
	At   time.Time
	Data []byte // the whole Ethernet frame
}

// SimEvent is a membership (PBP) or sequencer (seq) event of the re-run
// core: a pbp.Event or a seq.Event.
type SimEvent struct {
	At    time.Time
	Event fmt.Stringer
}

// SimResult is the outcome of Simulate.
type SimResult struct {
	Protocol Protocol
	// Config is the PBP core's configuration, SeqConfig the sequencer's;
	// the one of Protocol is set.
	Config      pbp.Config
	SeqConfig   seq.Config
	PcodeConfig pcode.Config
	Iface       int
	Start, End  time.Time
	// Notes explain how the configuration was reconstructed and where the
	// re-run diverged from the capture.
	Notes      []string
	Deliveries []SimDelivery
	Sent       []SimSent
	Events     []SimEvent
	// Inputs counts the frames stepped, Proposed the messages taken from
	// the node's own first transmissions, Dropped the frames refused (by
	// decode or by the core), with the reason, in order.
	Inputs, Proposed int
	Dropped          []string
	// CapturedOut counts the node's own captured frames by type, to set
	// beside what the re-run sent.
	CapturedOut map[frame.Type]int
	// Views says how a process of a group with views was re-run
	// (ProtocolViews; nil otherwise).
	Views *SimViews
	// Divergence is the first place where the frames the re-run sent
	// differ from those the capture shows the member sent (PCODE; "":
	// none, or not compared).
	Divergence string
	// Calls counts the PCODE program's calls rebuilt from the capture.
	Calls struct{ Multicasts, Requests, Steps int }
}

// simProto is what Simulate needs to know of a protocol besides its core
// (which it drives through a core.Stepper, as the live runtime does):
// which of the node's captured frames show the application's messages,
// and how to compare the re-run's frames with them.
type simProto interface {
	// proposals returns the messages the live node proposed that
	// outbound record r shows, nil if none (a retransmission, a control
	// frame, a request already proposed). before is the core's Stats
	// then.
	proposals(r *Record) [][]byte
	// verify says how the re-run's frames sent after proposing r's
	// messages differ from r, or "": before and after are the core's
	// Stats around it.
	verify(r *Record, sent []SimSent, before, after core.Stats) string
}

// Simulate re-drives member opts.Node's protocol core — PBP's, the
// sequencer's, or for a group with views its process's membership core
// (simulate_views.go) — with exactly the frames its interface received, in
// captured order and with captured timestamps, ticking it at its timer
// deadlines between them, and proposing the messages of its own
// first-transmission frames (PBP Data; sequencer SeqRequest, or SeqData
// it numbered as the sequencer) at their capture time. It mirrors
// reliable's engine (decode, group check, registration frames set aside,
// Step, Tick, Ready, Advance) so the result is what the live node's core
// did, given the same configuration. Deterministic.
func Simulate(c *Capture, opts SimOptions) (*SimResult, error) {
	res := &SimResult{CapturedOut: map[frame.Type]int{}}
	note := func(format string, args ...any) { res.Notes = append(res.Notes, fmt.Sprintf(format, args...)) }
	if opts.EtherType == 0 {
		opts.EtherType = frame.EtherType
	}
	if opts.Protocol == ProtocolViews || opts.Protocol == ProtocolAuto && hasViews(c, opts) {
		return simulateViews(c, opts)
	}
	members := opts.Members
	if members == nil {
		var how string
		members, how = MembersFromCapture(c, opts.EtherType)
		if len(members) == 0 {
			return nil, fmt.Errorf("%s has no Start frame and no decodable frames to learn the members from; give them with -members", c.Path)
		}
		note("members %s", how)
	} else {
		note("members from the command line")
	}
	var self *frame.MemberInfo
	for i := range members {
		if members[i].ID == opts.Node {
			self = &members[i]
		}
	}
	if self == nil {
		return nil, fmt.Errorf("member %d is not in the member list %s", opts.Node, formatMembers(members))
	}
	note("member list %s", formatMembers(members))

	iface, err := pickInterface(c, opts, self.MAC)
	if err != nil {
		return nil, err
	}
	res.Iface = iface
	intf := &c.Interfaces[iface]
	var recs []*Record
	for i := range c.Records {
		if r := &c.Records[i]; r.Iface == iface {
			recs = append(recs, r)
		}
	}
	// In capture order, not time order: the order the node handled them
	// (ReadFiles keeps each file's order; see Merge).
	dirOf := func(r *Record) Dir {
		if r.Dir != DirUnknown {
			return r.Dir
		}
		// No direction flags (tcpdump): our source MAC means we sent it;
		// anything else counts as received if the NIC's filter takes it.
		if len(r.Data) >= 12 && [6]byte(r.Data[6:12]) == self.MAC {
			return DirOut
		}
		if len(r.Data) >= 6 && (r.Data[0]&1 != 0 || [6]byte(r.Data[0:6]) == self.MAC) {
			return DirIn
		}
		return DirUnknown
	}
	if !c.HasDirection {
		note("no direction flags: frames from %v count as sent, others (to broadcast, multicast or %v) as received", net.HardwareAddr(self.MAC[:]), net.HardwareAddr(self.MAC[:]))
	}

	group, err := pickGroup(c, opts, self.MAC)
	if err != nil {
		return nil, err
	}
	mtu := opts.MTU
	if mtu == 0 {
		mtu = intf.MTU
	}
	if mtu == 0 {
		// No description (tcpdump, dumpcap): a registered member's Join
		// carries its link's MTU.
		if m, n, ok := mtuFromJoin(c, group, self.MAC); ok {
			mtu = m
			note("MTU %d, from the Join frame %d", m, n)
		}
	}
	if opts.Window == 0 {
		// Members must agree on the window; a registered group's Join
		// frames carry it (the default changed from 128 to 256 on
		// 2026-11-22: a capture from before would diverge under the
		// core's default).
		if w, n, ok := windowFromJoins(c, group, self.MAC); ok {
			opts.Window = w
			note("window %d, from the Join frame %d", w, n)
		}
	}
	res.Protocol = opts.Protocol
	if res.Protocol == ProtocolAuto {
		res.Protocol = ProtocolPBP
		for _, r := range recs {
			if r.View != nil && r.View.Group() == group && isSeqType(r.View.Type()) {
				res.Protocol = ProtocolSeq
				break
			}
			if r.View != nil && r.View.Group() == group && isPcodeType(r.View.Type()) {
				res.Protocol = ProtocolPCODE
				break
			}
		}
		note("protocol %v, from the frames of group %d on the interface", res.Protocol, group)
	}
	var cc core.Core
	var proto simProto
	if res.Protocol == ProtocolPCODE {
		cfg := pcodeConfig(opts, group, members, mtu)
		res.PcodeConfig = cfg
		pc, err := pcode.New(cfg)
		if err != nil {
			return nil, err
		}
		cc = pc
	} else if res.Protocol == ProtocolSeq {
		cfg := seq.Config{
			Group: group, Self: opts.Node, Members: members, Method: opts.Method, Threshold: opts.Threshold,
			Window: opts.Window, History: opts.History, MTU: mtu, MaxPayload: opts.MaxPayload, InitialEpoch: opts.InitialEpoch,
			EtherType: opts.EtherType, ResendTimeout: seq.Duration(opts.ResendTimeout), NackTimeout: seq.Duration(opts.NackTimeout),
			HeartbeatInterval: seq.Duration(opts.HeartbeatInterval), FailureTimeout: seq.Duration(opts.FailureTimeout),
			ElectionRetry: seq.Duration(opts.ElectionRetry), Quorum: opts.Quorum, Resilience: opts.Resilience,
		}
		sa := analyse(c).seq
		if opts.InitialGlobal != nil {
			cfg.InitialGlobal = *opts.InitialGlobal
		} else if sa.hasBase {
			cfg.InitialGlobal = sa.base
			note("initial global %d, the lowest global or delivered cursor in the capture", sa.base)
		}
		if cfg.InitialEpoch == 0 && len(sa.epochs) > 0 {
			first := true
			for e := range sa.epochs {
				if first || frame.SeqLess(e, cfg.InitialEpoch) {
					cfg.InitialEpoch, first = e, false
				}
			}
			note("initial epoch %d, the lowest in the capture", cfg.InitialEpoch)
		}
		res.SeqConfig = cfg
		sc, err := seq.New(cfg)
		if err != nil {
			return nil, err
		}
		cc, proto = sc, &seqSim{self: opts.Node, etherType: opts.EtherType, proposed: map[uint32]bool{}}
	} else {
		cfg := pbp.Config{
			Group: group, Self: opts.Node, Members: members, Mode: opts.Mode, Window: opts.Window,
			MTU: mtu, MaxPayload: opts.MaxPayload, InitialSeq: opts.InitialSeq, EtherType: opts.EtherType,
			AckDelay: pbp.Duration(opts.AckDelay), ResendTimeout: pbp.Duration(opts.ResendTimeout), NackTimeout: pbp.Duration(opts.NackTimeout),
			HeartbeatInterval: pbp.Duration(opts.HeartbeatInterval), FailureTimeout: pbp.Duration(opts.FailureTimeout),
			BundleDelay: pbp.Duration(opts.BundleDelay),
		}
		// A static group whose members relay a silent member's frames
		// (pbp.Config.Relay) shows it by its relays: view 0's.
		for _, r := range recs {
			if v := r.View; v != nil && v.Type() == frame.ViewRelay && v.Group() == group && v.ViewID() == 0 {
				cfg.Relay = true
				note("relays of a silent member's frames (Relay), from frame %d", r.N)
				break
			}
		}
		// A pair whose members send to each other's MAC (pbp.Config.Unicast)
		// shows it by its ordinary frames' destination.
		if len(members) == 2 {
			if n := unicastFrame(recs, group); n != 0 {
				cfg.Unicast = true
				note("frames to a member's own MAC that answer no Nack (Unicast, a pair's), from frame %d", n)
			}
		}
		res.Config = cfg
		pc, err := pbp.New(cfg)
		if err != nil {
			return nil, err
		}
		cc, proto = pc, &pbpSim{etherType: opts.EtherType}
	}
	st := core.NewStepper(cc, group, opts.EtherType)

	start := opts.Start
	var startFrame *Record
	for _, r := range recs {
		if r.View != nil && r.View.Type() == frame.Start && r.View.Group() == group {
			startFrame = r
			break
		}
	}
	switch {
	case !start.IsZero():
		note("core started at the given time")
	case startFrame != nil:
		// A registered group's core starts when registration ends: at the
		// Start frame the server sent or the member received.
		start = startFrame.Time
		note("core started at the Start frame %d", startFrame.N)
	case intf.HasStats && !intf.Start.IsZero():
		start = intf.Start
		note("core started at interface %d's isb_starttime", iface)
	case len(recs) > 0:
		start = recs[0].Time
		note("core started at interface %d's first frame (no isb_starttime)", iface)
	default:
		return nil, fmt.Errorf("interface %d (%s) of %s holds no frames", iface, intf.Label(), c.Path)
	}
	// Frames before the start (registration; frames a ring held from
	// before the capture began) are not stepped: those before the Start
	// frame in capture order, or stamped before the start time.
	fromFrame := opts.Start.IsZero() && startFrame != nil
	for len(recs) > 0 && (fromFrame && recs[0] != startFrame || !fromFrame && recs[0].Time.Before(start)) {
		recs = recs[1:]
	}
	// A frame stamped before the one the node handled before it (two
	// CPUs received them at once) is stepped at that one's time: virtual
	// time does not run back.
	steps := make([]simStep, len(recs))
	for i, r := range recs {
		steps[i] = simStep{r: r, at: r.Time}
		if i > 0 && steps[i].at.Before(steps[i-1].at) {
			steps[i].at = steps[i-1].at
		}
	}
	if res.Protocol == ProtocolSeq {
		if n := deferNumbered(steps, opts.Node, dirOf); n > 0 {
			note("%d requests stepped when this node numbered them, after their capture time (a sequencer's loop may step a request later than the kernel stamped it; its numbering order is the capture's)", n)
		}
	}
	end := start
	if n := len(c.Records); n > 0 {
		for i := range c.Records {
			if c.Records[i].Time.After(end) {
				end = c.Records[i].Time
			}
		}
	}
	res.Start, res.End = start, end
	rr := newRerun(st, res, start, opts.MaxIdleTicks)
	var prog *pcodeProgram
	if res.Protocol == ProtocolPCODE {
		prog = newPcodeProgram(rr, recs, opts.Node, group, opts.EtherType, dirOf)
		res.Calls.Multicasts, res.Calls.Requests = prog.counts()
		res.Calls.Steps = len(prog.steps)
		note("program rebuilt from the capture: %d steps, %d multicasts (our first transmissions), %d requests (messages to us)",
			res.Calls.Steps, res.Calls.Multicasts, res.Calls.Requests)
		rr.after, rr.proposes = prog.after, prog.proposes
	}
	rr.tick(rr.clk.Core(start))
	left := false
	rr.run(steps, dirOf, func(r *Record, t clock.Time) string { return stepFrame(st, t, r, group, opts.EtherType) }, func(r *Record, t clock.Time) {
		if r.View == nil {
			return
		}
		res.CapturedOut[r.View.Type()]++
		if r.View.Sender() != opts.Node {
			return
		}
		if prog != nil {
			prog.out(r, t)
			return
		}
		if r.View.Type() == frame.Leave && !left {
			// Our first Leave: the application closed the group.
			left = true
			st.Leave(t)
			rr.collectAt(t)
			note("frame %d: our %v: the application left; the re-run leaves here", r.N, r.View.Type())
			return
		}
		if r.View.Type() == frame.Datagram && !r.View.Retransmission() {
			// Our datagram (the Unreliable level; a registered group's PBP
			// sends them): the application sent it here.
			rr.cur = r.N
			res.Proposed++
			sentBefore := len(res.Sent)
			if err := st.ProposeUnreliable(t, r.View.Payload()); err != nil {
				note("frame %d: our Datagram %d: the re-run refused it: %v (diverges)", r.N, r.View.Seq(), err)
				return
			}
			rr.collectAt(t)
			if _, ok := sentFrame(res.Sent[sentBefore:], frame.Datagram, r.View.Seq(), opts.EtherType); !ok {
				note("frame %d: captured our Datagram %d, the re-run numbered it differently (diverges)", r.N, r.View.Seq())
			}
			return
		}
		msgs := proto.proposals(r)
		if msgs == nil {
			return
		}
		rr.cur = r.N
		before := cc.Stats()
		for _, msg := range msgs {
			res.Proposed++
			if err := st.Propose(t, msg); err != nil {
				note("frame %d: Propose of a message of our %v seq %d failed: %v (the re-run diverges from the capture here)", r.N, r.View.Type(), r.View.Seq(), err)
			}
		}
		sentBefore := len(res.Sent)
		rr.collectAt(t)
		if d := proto.verify(r, res.Sent[sentBefore:], before, cc.Stats()); d != "" {
			note("frame %d: %s", r.N, d)
		}
	})
	rr.tickUntil(rr.clk.Core(end), true)
	if prog != nil {
		var out []*Record
		for _, s := range steps {
			if v := s.r.View; v != nil && dirOf(s.r) == DirOut && v.Group() == group {
				switch v.Type() {
				case frame.Join, frame.Welcome, frame.Start: // registration's, not the core's
				default:
					out = append(out, s.r)
				}
			}
		}
		prog.finish(out, start)
	}
	return res, nil
}

// rerun drives a core through a core.Stepper on a member's captured
// frames as reliable's Driver does: each batch of frames of one instant
// stepped, then a Tick, then Ready and Advance; the core's timers ticked
// at their deadlines in between.
type rerun struct {
	st    *core.Stepper
	res   *SimResult
	clk   wall.Clock // the runtime's clock (reliable/clock/wall), counting from the start
	start time.Time
	last  clock.Time // the latest instant the core was stepped or ticked at
	cur   int        // the frame being processed, for deliveries (0: a tick)
	// maxIdle bounds the ticks between two inputs (SimOptions.MaxIdleTicks).
	maxIdle int
	// settle, when set, runs first for each step (its timers not ticked
	// yet), and before, after the timers due before its instant (core
	// time t, capture time at).
	settle func(next *simStep)
	before func(t clock.Time, at time.Time)
	// proposes, when set, says whether out proposes the application's
	// messages of sent frame r: then the timers due at its instant are
	// left for later (the application's Propose took a turn of its own;
	// the frames of a timer at that instant before it show in the
	// capture, and their records ticked it).
	proposes func(r *Record) bool
	// after, when set, runs after each turn's output is taken, at its
	// instant (a PCODE program's next calls).
	after func(t clock.Time)
	// view is the view the process is in (groups with views): the
	// deliveries of a Ready are of the view before the ViewInstalled
	// event it carries (reliable/view hands out the old view's last
	// messages first).
	view uint32
}

func newRerun(st *core.Stepper, res *SimResult, start time.Time, maxIdle int) *rerun {
	if maxIdle <= 0 {
		maxIdle = DefaultMaxIdleTicks
	}
	return &rerun{st: st, res: res, clk: wall.Clock{Epoch: start}, start: start, maxIdle: maxIdle}
}

func (rr *rerun) note(format string, args ...any) {
	rr.res.Notes = append(rr.res.Notes, fmt.Sprintf(format, args...))
}

// collectAt takes the core's output at instant at.
func (rr *rerun) collectAt(at clock.Time) {
	rr.last = max(rr.last, at)
	res, wallOf := rr.res, rr.clk.Wall
	rd := rr.st.Ready()
	for _, f := range rd.Frames {
		res.Sent = append(res.Sent, SimSent{At: wallOf(at), Data: bytes.Clone(f)})
	}
	for _, d := range rd.Deliveries {
		res.Deliveries = append(res.Deliveries, SimDelivery{From: d.From, Seq: d.Seq, Index: d.Index, Global: d.Global,
			Epoch: d.Epoch, View: rr.view, Unreliable: d.Unreliable, At: wallOf(at), Frame: rr.cur, Data: bytes.Clone(d.Data)})
	}
	for _, e := range rd.Events {
		var ev fmt.Stringer = e
		if e.Kind == core.ViewInstalled && e.View != nil {
			rr.view = e.View.ID
			ev = viewInstalled{e}
		}
		res.Events = append(res.Events, SimEvent{At: wallOf(at), Event: ev})
	}
	rr.st.Advance()
	if rr.after != nil {
		rr.after(at)
	}
}

// tick runs the core's timers at instant now and takes its output: a
// turn without input.
func (rr *rerun) tick(now clock.Time) {
	rr.cur = 0
	rr.st.Tick(now)
	rr.collectAt(now)
}

// tickUntil ticks the core at each of its deadlines up to limit
// (inclusive: at limit too).
func (rr *rerun) tickUntil(limit clock.Time, inclusive bool) {
	stuck, ticks := 0, 0
	for {
		d := rr.st.Deadline()
		if d == 0 || d > limit || (!inclusive && d == limit) {
			return
		}
		if ticks++; ticks > rr.maxIdle {
			// Minutes without input (a capture spanning a pause, or
			// bogus timestamps): skip the idle heartbeats.
			rr.note("%d timer ticks without input before %v; skipped to it", rr.maxIdle, rr.clk.Wall(limit).Sub(rr.start))
			if limit > rr.last {
				rr.cur = 0
				rr.st.Tick(limit)
				rr.collectAt(limit)
			}
			return
		}
		if d <= rr.last {
			if stuck++; stuck > 2 {
				rr.note("core's deadline stayed at %v; stopped ticking there", rr.clk.Wall(d).Sub(rr.start))
				return
			}
			d = rr.last
		}
		rr.cur = 0
		rr.st.Tick(d)
		rr.collectAt(d)
	}
}

// run takes the steps in order: each batch of received frames of one
// instant (up to 64, as reliable.Driver reads them) is stepped with
// stepIn (which says why a frame was dropped, or ""), then the core
// ticks; each sent frame is handed to out at its instant, after the
// timers due then (the live core ran at that instant first, so its
// timers due then fired before frames it received at the same instant).
func (rr *rerun) run(steps []simStep, dirOf func(*Record) Dir, stepIn func(r *Record, t clock.Time) string, out func(r *Record, t clock.Time)) {
	const batch = 64 // reliable.Driver reads up to 64 frames per turn
	for i := 0; i < len(steps); {
		r := steps[i].r
		t := rr.clk.Core(steps[i].at)
		if rr.settle != nil {
			rr.settle(&steps[i])
		}
		switch dirOf(r) {
		case DirIn:
			rr.tickUntil(t, false)
			if rr.before != nil {
				rr.before(t, steps[i].at)
			}
			j := i
			for ; j < len(steps) && j-i < batch && steps[j].at.Equal(steps[i].at) && dirOf(steps[j].r) == DirIn; j++ {
				in := steps[j].r
				rr.cur = in.N
				rr.res.Inputs++
				if reason := stepIn(in, t); reason != "" {
					rr.res.Dropped = append(rr.res.Dropped, fmt.Sprintf("frame %d: %s", in.N, reason))
				}
			}
			rr.st.Tick(t)
			rr.collectAt(t)
			i = j
		case DirOut:
			if rr.before != nil {
				rr.tickUntil(t, false)
				rr.before(t, steps[i].at)
			}
			i++
			if rr.proposes == nil || !rr.proposes(r) {
				rr.tickUntil(t, true)
			}
			out(r, t)
		default:
			i++
		}
	}
}

// simStep is one captured frame of the node's interface and when the
// re-run takes it.
type simStep struct {
	r        *Record
	at       time.Time
	deferred bool
	// global, when numbered: the global number the node gave the request
	// this step carries (a deferred request, or our own SeqData).
	global   uint32
	numbered bool
}

// deferNumbered: a request the node numbered (as the sequencer) in a
// frame captured after the request arrived is stepped at that frame's
// time instead. The live sequencer numbers what its loop has stepped at
// the next Ready, so the order of its numbering frames is the order in
// which it stepped requests and proposed its own messages; the kernel
// stamps a frame when it arrives, which can be well before the loop
// steps it. Stepping late requests at their numbering time makes the
// re-run number in the captured order. It returns how many it moved.
func deferNumbered(steps []simStep, self frame.MemberID, dirOf func(*Record) Dir) int {
	type numbering struct {
		at     time.Time
		global uint32
	}
	numbered := map[frame.UID]numbering{}
	mark := func(u frame.UID, t time.Time, g uint32) {
		if _, ok := numbered[u]; !ok {
			numbered[u] = numbering{t, g}
		}
	}
	for i := range steps {
		st := &steps[i]
		v := st.r.View
		if v == nil || dirOf(st.r) != DirOut || v.Sender() != self || v.Retransmission() {
			continue
		}
		switch v.Type() {
		case frame.SeqData:
			mark(v.SeqDataUID(), st.r.Time, v.Seq())
			if v.SeqDataUID().Origin == self {
				st.global, st.numbered = v.Seq(), true
			}
		case frame.SeqAccept:
			al := v.Accepts()
			for i := range al.Len() {
				mark(al.At(i).UID, st.r.Time, al.At(i).Global)
			}
		}
	}
	moved := 0
	for i := range steps {
		st := &steps[i]
		v := st.r.View
		if v == nil || dirOf(st.r) != DirIn || v.Type() != frame.SeqRequest {
			continue
		}
		if n, ok := numbered[frame.UID{Origin: v.Sender(), Incarnation: v.Incarnation(), Seq: v.Seq()}]; ok && n.at.After(st.at) {
			st.at, st.deferred = n.at, true
			st.global, st.numbered = n.global, true
			moved++
		}
	}
	if moved > 0 {
		// Deferred requests go before what the node sent at their
		// numbering time, but in the order the node numbered them
		// beside its own messages: the loop numbers the requests it
		// steps and the messages proposed since its last turn in one
		// Ready, in the order of their globals.
		sort.SliceStable(steps, func(i, j int) bool {
			a, b := &steps[i], &steps[j]
			if !a.at.Equal(b.at) {
				return a.at.Before(b.at)
			}
			if a.numbered && b.numbered && a.deferred != b.deferred {
				return frame.SeqLess(a.global, b.global)
			}
			return a.deferred && !b.deferred
		})
	}
	return moved
}

// DefaultMaxIdleTicks is SimOptions.MaxIdleTicks's default: 200 s of
// 100 ms heartbeats.
const DefaultMaxIdleTicks = 2000

// stepFrame is the live runtime's input of one frame (core.Stepper.Step)
// with the registration frames set aside (the live registrar took them):
// it returns why the frame was dropped, or "".
func stepFrame(st *core.Stepper, now clock.Time, r *Record, group uint32, etherType uint16) string {
	eth, body, err := frame.SplitEthernet(r.Data, etherType)
	if err != nil {
		return err.Error()
	}
	v, err := frame.ParseGroup(body, group)
	if err != nil {
		return err.Error()
	}
	switch v.Type() {
	case frame.Join, frame.Welcome, frame.Start:
		return ""
	}
	if err := st.StepView(now, eth.Src(), eth.Dst(), v); err != nil {
		return err.Error()
	}
	return ""
}

// sentFrame returns the first frame of sent of type t and seq q.
func sentFrame(sent []SimSent, t frame.Type, q uint32, etherType uint16) (frame.View, bool) {
	for _, s := range sent {
		if _, body, err := frame.SplitEthernet(s.Data, etherType); err == nil {
			if v, err := frame.Parse(body); err == nil && v.Type() == t && v.Seq() == q {
				return v, true
			}
		}
	}
	return nil, false
}

// pbpSim: PBP's Data frames carry the application's messages.
type pbpSim struct {
	etherType uint16
}

func (p *pbpSim) proposals(r *Record) [][]byte {
	v := r.View
	if v.Type() != frame.Data || v.Retransmission() {
		return nil
	}
	return messagesOf(v)
}

func (p *pbpSim) verify(r *Record, sent []SimSent, before, after core.Stats) string {
	if n := after.Sent - before.Sent; n != 1 {
		return fmt.Sprintf("our Data seq %d was captured, the re-run sent %d new Data frames for it", r.View.Seq(), n)
	}
	if _, ok := sentFrame(sent, frame.Data, r.View.Seq(), p.etherType); !ok {
		return fmt.Sprintf("captured our Data seq %d, the re-run numbered it differently (diverges)", r.View.Seq())
	}
	return ""
}

func messagesOf(v frame.View) [][]byte {
	msgs := [][]byte{}
	for it := v.Messages(); ; {
		msg, ok := it.Next()
		if !ok {
			return msgs
		}
		msgs = append(msgs, msg)
	}
}

// seqSim: the sequencer's requests carry the application's messages,
// and the SeqData frames a sequencer numbers its own messages with.
type seqSim struct {
	self      frame.MemberID
	etherType uint16
	// proposed: our request numbers whose messages were proposed, so a
	// request seen again (a SeqData numbering it after we became the
	// sequencer) is not proposed twice.
	proposed map[uint32]bool
}

// proposals: our first-transmission requests, and the SeqData a sequencer
// sends for its own messages (it numbers them without a request).
func (s *seqSim) proposals(r *Record) [][]byte {
	v := r.View
	if v.Retransmission() {
		return nil
	}
	var q uint32
	switch v.Type() {
	case frame.SeqRequest:
		q = v.Seq()
	case frame.SeqData:
		u := v.SeqDataUID()
		if u.Origin != s.self {
			return nil
		}
		q = u.Seq
	default:
		return nil
	}
	if s.proposed[q] {
		return nil
	}
	s.proposed[q] = true
	return messagesOf(v)
}

func (s *seqSim) verify(r *Record, sent []SimSent, _, _ core.Stats) string {
	v := r.View
	if v.Type() == frame.SeqRequest {
		if _, ok := sentFrame(sent, frame.SeqRequest, v.Seq(), s.etherType); !ok {
			return fmt.Sprintf("captured our request %d, the re-run did not send it now (diverges)", v.Seq())
		}
		return ""
	}
	g, ok := sentFrame(sent, frame.SeqData, v.Seq(), s.etherType)
	if !ok || g.SeqDataUID() != v.SeqDataUID() {
		return fmt.Sprintf("captured our SeqData global %d for our request %d, the re-run numbered it differently (diverges)", v.Seq(), v.SeqDataUID().Seq)
	}
	return ""
}

func pickInterface(c *Capture, opts SimOptions, mac [6]byte) (int, error) {
	if opts.Iface >= 0 {
		if opts.Iface >= len(c.Interfaces) {
			return 0, fmt.Errorf("interface %d does not exist; %s has %d (%s)", opts.Iface, c.Path, len(c.Interfaces), listInterfaces(c))
		}
		return opts.Iface, nil
	}
	id := strconv.Itoa(int(opts.Node))
	found := -1
	for i := range c.Interfaces {
		if c.Interfaces[i].Node == id || (c.Interfaces[i].Node != "" && c.Interfaces[i].MAC == mac) {
			if found >= 0 && found != i {
				return 0, fmt.Errorf("interfaces %d and %d both belong to member %d; pick one with -iface", found, i, opts.Node)
			}
			found = i
		}
	}
	if found >= 0 {
		return found, nil
	}
	if len(c.Interfaces) == 1 {
		return 0, nil
	}
	return 0, fmt.Errorf("no interface of %s names member %d and there are %d (%s); pick one with -iface", c.Path, opts.Node, len(c.Interfaces), listInterfaces(c))
}

func listInterfaces(c *Capture) string {
	var b bytes.Buffer
	for i := range c.Interfaces {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%d=%s", i, c.Interfaces[i].Label())
	}
	return b.String()
}

func pickGroup(c *Capture, opts SimOptions, mac [6]byte) (uint32, error) {
	if opts.Group != nil {
		return *opts.Group, nil
	}
	count := map[uint32]int{}
	for i := range c.Records {
		r := &c.Records[i]
		if r.View == nil {
			continue
		}
		if r.Src == mac {
			return r.View.Group(), nil
		}
		count[r.View.Group()]++
	}
	best, n := uint32(0), 0
	for g, k := range count {
		if k > n || (k == n && g < best) {
			best, n = g, k
		}
	}
	if n == 0 {
		return 0, fmt.Errorf("%s has no decodable rbcast frame to take the group from; give it with -group", c.Path)
	}
	return best, nil
}

// MembersFromCapture returns the member list of the first Start frame, or
// else one inferred from the senders of PBP and sequencer frames (id, source MAC and
// incarnation; the first seen wins) and our interface descriptions; how
// says which.
func MembersFromCapture(c *Capture, etherType uint16) (members []frame.MemberInfo, how string) {
	for i := range c.Records {
		r := &c.Records[i]
		if r.View != nil && r.View.Type() == frame.Start {
			ml := r.View.Members()
			for k := range ml.Len() {
				members = append(members, ml.At(k))
			}
			return members, fmt.Sprintf("from the Start frame %d", r.N)
		}
	}
	seen := map[frame.MemberID]bool{}
	for i := range c.Records {
		r := &c.Records[i]
		if r.View == nil {
			continue
		}
		if t := r.View.Type(); !isPBPType(t) && !isSeqType(t) && !isPcodeType(t) {
			continue
		}
		id := r.View.Sender()
		if id == frame.NoMember || seen[id] {
			continue
		}
		seen[id] = true
		members = append(members, frame.MemberInfo{ID: id, MAC: r.Src, Incarnation: r.View.Incarnation()})
	}
	for _, intf := range c.Interfaces {
		if n, err := strconv.Atoi(intf.Node); err == nil && intf.Node != "" && !seen[frame.MemberID(n)] && n != int(frame.NoMember) && n >= 0 && n < 0xffff {
			seen[frame.MemberID(n)] = true
			members = append(members, frame.MemberInfo{ID: frame.MemberID(n), MAC: intf.MAC})
			how = " (silent members from interface descriptions, incarnation 0)"
		}
	}
	sort.Slice(members, func(i, j int) bool { return members[i].ID < members[j].ID })
	return members, "inferred from the senders in the capture (no Start frame)" + how
}

func formatMembers(ms []frame.MemberInfo) string {
	var b bytes.Buffer
	for i, m := range ms {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "%d=%v@%d", m.ID, net.HardwareAddr(m.MAC[:]), m.Incarnation)
	}
	return b.String()
}

// ParseMembers parses a member list "id=mac[@incarnation],..." (the form
// Simulate's notes print).
func ParseMembers(s string) ([]frame.MemberInfo, error) {
	var out []frame.MemberInfo
	for i, part := range bytes.Split([]byte(s), []byte(",")) {
		p := string(bytes.TrimSpace(part))
		eq := bytes.IndexByte([]byte(p), '=')
		if eq < 0 {
			return nil, fmt.Errorf("members entry %d %q: want id=mac[@incarnation]", i+1, p)
		}
		id, err := strconv.ParseUint(p[:eq], 10, 16)
		if err != nil || id == uint64(frame.NoMember) {
			return nil, fmt.Errorf("members entry %d %q: id %q is not a member id (0..65534)", i+1, p, p[:eq])
		}
		macStr, inc := p[eq+1:], uint64(0)
		if at := bytes.IndexByte([]byte(macStr), '@'); at >= 0 {
			inc, err = strconv.ParseUint(macStr[at+1:], 10, 32)
			if err != nil {
				return nil, fmt.Errorf("members entry %d %q: incarnation %q is not a 32-bit number", i+1, p, macStr[at+1:])
			}
			macStr = macStr[:at]
		}
		mac, err := net.ParseMAC(macStr)
		if err != nil || len(mac) != 6 {
			return nil, fmt.Errorf("members entry %d %q: %q is not a 6-byte MAC address", i+1, p, macStr)
		}
		out = append(out, frame.MemberInfo{ID: frame.MemberID(id), MAC: [6]byte(mac), Incarnation: uint32(inc)})
	}
	return out, nil
}

// WriteLines prints only the deliveries, as 'rbcastd recv -all -format
// lines' does: sender id, a tab, the message, a newline. The live node's
// receiver output and the re-run's then compare with diff.
func (r *SimResult) WriteLines(w io.Writer) error {
	ew := &errWriter{w: w}
	for _, d := range r.Deliveries {
		ew.printf("%d\t%s\n", d.From, d.Data)
	}
	return ew.err
}

// Write prints the re-run: configuration notes, deliveries, frames the
// core would have sent, events, drops and a summary. data prints each
// delivered message in full (hex) instead of its length and digest.
func (r *SimResult) Write(w io.Writer, c *Capture, data bool) error {
	ew := &errWriter{w: w}
	cfg := r.Config
	etherType := etherTypeOf(cfg.EtherType)
	switch {
	case r.Protocol == ProtocolViews && r.Views != nil:
		etherType = etherTypeOf(r.Views.Config.EtherType)
		r.writeViewsHeader(ew, c)
	case r.Protocol == ProtocolPCODE:
		pc := r.PcodeConfig
		etherType = etherTypeOf(pc.EtherType)
		shared := pc.Shared()
		ew.printf("# simulate member %d of group %d on interface %d (%s), PCODE, send buffer %d, early buffer %d, flow window %d, status window %d, MTU %d, timers %v..%v (initial RTT %v), failure timeout %v\n",
			pc.Self, pc.Group, r.Iface, c.Interfaces[r.Iface].Label(), shared.SendBuffer, shared.EarlyBuffer, shared.FlowWindow, shared.StatusWindow,
			shared.MTU, time.Duration(shared.MinTimer), time.Duration(shared.MaxTimer), time.Duration(shared.InitialRTT), time.Duration(shared.FailureTimeout))
	case r.Protocol == ProtocolSeq:
		sc := r.SeqConfig
		etherType = etherTypeOf(sc.EtherType)
		ew.printf("# simulate member %d of group %d on interface %d (%s), sequencer, method %v, window %d, history %d, MTU %d, initial global %d, epoch %d\n",
			sc.Self, sc.Group, r.Iface, c.Interfaces[r.Iface].Label(), sc.Method, orDefault(sc.Window, seq.DefaultWindow),
			orDefault(sc.History, seq.DefaultHistory), orDefault(sc.MTU, seq.DefaultMTU), sc.InitialGlobal, orDefault(int(sc.InitialEpoch), seq.DefaultInitialEpoch))
	default:
		ew.printf("# simulate member %d of group %d on interface %d (%s), mode %v, window %d, MTU %d\n",
			cfg.Self, cfg.Group, r.Iface, c.Interfaces[r.Iface].Label(), cfg.Mode, windowOf(cfg), mtuOf(cfg))
	}
	for _, n := range r.Notes {
		ew.printf("# %s\n", n)
	}
	rel := func(t time.Time) float64 { return t.Sub(r.Start).Seconds() }
	for _, d := range r.Deliveries {
		src := "tick"
		if d.Frame > 0 {
			src = "frame " + strconv.Itoa(d.Frame)
		}
		global, seqs := "", fmt.Sprintf("seq %d[%d]", d.Seq, d.Index)
		switch {
		case r.Protocol == ProtocolSeq:
			global = fmt.Sprintf("global %d epoch %d ", d.Global, d.Epoch)
		case r.Protocol == ProtocolViews && d.Unreliable:
			global, seqs = fmt.Sprintf("view %d unreliable ", d.View), fmt.Sprintf("datagram %d", d.Seq)
		case d.Unreliable:
			global, seqs = "unreliable ", fmt.Sprintf("datagram %d", d.Seq)
		case r.Protocol == ProtocolViews && r.Views != nil && r.Views.Order != ViewFIFO:
			// vtotal numbers a sender's data messages in the view.
			global, seqs = fmt.Sprintf("view %d global %d ", d.View, d.Global), fmt.Sprintf("n %d", d.Seq)
		case r.Protocol == ProtocolViews:
			global = fmt.Sprintf("view %d ", d.View)
		}
		if data {
			ew.printf("deliver %14.9f %-12s %sfrom %d %s %dB %x\n", rel(d.At), src, global, d.From, seqs, len(d.Data), d.Data)
		} else {
			sum := sha256.Sum256(d.Data)
			ew.printf("deliver %14.9f %-12s %sfrom %d %s %dB sha256:%x\n", rel(d.At), src, global, d.From, seqs, len(d.Data), sum[:8])
		}
	}
	sentBy := map[frame.Type]int{}
	for _, s := range r.Sent {
		_, body, err := frame.SplitEthernet(s.Data, etherType)
		v, perr := frame.Parse(body)
		if err != nil || perr != nil {
			ew.printf("send    %14.9f undecodable %d bytes\n", rel(s.At), len(s.Data))
			continue
		}
		sentBy[v.Type()]++
		ew.printf("send    %14.9f to %v %-9s seq %d %s\n", rel(s.At), net.HardwareAddr(s.Data[0:6]), v.Type(), v.Seq(), Details(v))
	}
	for _, e := range r.Events {
		ew.printf("event   %14.9f %v\n", rel(e.At), e.Event)
	}
	for _, d := range r.Dropped {
		ew.printf("drop    %s\n", d)
	}
	ew.printf("# %d frames stepped, %d messages proposed from our first transmissions, %d delivered, %d dropped, %d events\n",
		r.Inputs, r.Proposed, len(r.Deliveries), len(r.Dropped), len(r.Events))
	ew.printf("# frames by type, re-run sent / captured outbound:")
	for _, t := range frame.Types {
		if sentBy[t] > 0 || r.CapturedOut[t] > 0 {
			ew.printf(" %v %d/%d", t, sentBy[t], r.CapturedOut[t])
		}
	}
	ew.printf("\n")
	return ew.err
}

func windowOf(c pbp.Config) int {
	if c.Window != 0 {
		return c.Window
	}
	if c.Mode == pbp.PBP1 {
		return pbp.DefaultWindowPBP1
	}
	return pbp.DefaultWindowPBP2
}

func mtuOf(c pbp.Config) int {
	if c.MTU != 0 {
		return c.MTU
	}
	return pbp.DefaultMTU
}

func etherTypeOf(et uint16) uint16 {
	if et != 0 {
		return et
	}
	return frame.EtherType
}

func orDefault(v, def int) int {
	if v != 0 {
		return v
	}
	return def
}

type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) printf(format string, args ...any) {
	if e.err == nil {
		_, e.err = fmt.Fprintf(e.w, format, args...)
	}
}

// mtuFromJoin returns the MTU the node's own Join frame of group (source
// MAC mac) carries, and that frame's number; ok is false without one.
func mtuFromJoin(c *Capture, group uint32, mac [6]byte) (mtu, n int, ok bool) {
	for i := range c.Records {
		r := &c.Records[i]
		if r.View != nil && r.View.Type() == frame.Join && r.View.Group() == group && r.Src == mac && r.View.Join().MTU != 0 {
			return int(r.View.Join().MTU), r.N, true
		}
	}
	return 0, 0, false
}

// windowFromJoins returns the send window a Join frame of group carries
// and that frame's number: the node's own (source MAC mac) if the capture
// has one, else the first with a window (every admitted member's is the
// same, the config hash covers it; a refused joiner's may differ). ok is
// false when the capture has none (static members).
func windowFromJoins(c *Capture, group uint32, mac [6]byte) (window, n int, ok bool) {
	for i := range c.Records {
		r := &c.Records[i]
		if r.View == nil || r.View.Type() != frame.Join || r.View.Group() != group {
			continue
		}
		w := int(r.View.Join().Window)
		if w == 0 {
			continue
		}
		if r.Src == mac {
			return w, r.N, true
		}
		if !ok {
			window, n, ok = w, r.N, true
		}
	}
	return window, n, ok
}

// unicastFrame returns the number of the first frame of group that a pair
// under pbp.Config.Unicast sends and no other group does: Data that is no
// retransmission, an Ack or a Heartbeat, addressed to a unicast MAC (in
// any group Nacks and the repairs that answer them go to one member's
// MAC; these go to the group's address unless the group is such a
// pair). 0 when there is none.
func unicastFrame(recs []*Record, group uint32) int {
	for _, r := range recs {
		v := r.View
		if v == nil || v.Group() != group || r.Dst[0]&1 != 0 {
			continue
		}
		switch v.Type() {
		case frame.Data:
			if !v.Retransmission() {
				return r.N
			}
		case frame.Ack, frame.Heartbeat:
			return r.N
		}
	}
	return 0
}
