// Package dsmsim runs BDSM programs deterministically: N members of a
// dsm group in one process, each a dsm.Node over a reliable.Driver bound
// to an endpoint of testnet's simulated segment, in virtual time (the
// thesis's dsm_init for N ranks at once). Programs are the ordinary
// blocking code written against dsm.Node for Join; Run schedules them so
// that a run is a function of its Config and program. It is a package of
// its own so that programs that only Join do not link the simulator.
package dsmsim

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/rbcast/rbcast/dsm"
	"github.com/rbcast/rbcast/dsm/core"
	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/link"
	"github.com/rbcast/rbcast/link/mux"
	"github.com/rbcast/rbcast/reliable"
	"github.com/rbcast/rbcast/testnet"
)

// Config describes a simulated run: Members nodes on one simulated
// segment (testnet) in virtual time.
type Config struct {
	// Members is the number of nodes (ranks 0..Members-1, member ids
	// 1..Members).
	Members int
	// Seed drives every random choice of the network; a run is a
	// function of its Config and program.
	Seed uint64
	// In impairs every frame arriving at every node (loss, duplication,
	// reordering...).
	In testnet.Impairment
	// MTU of the simulated links; 0 means testnet.DefaultMTU.
	MTU int
	// Node configures every node. Node.Group's protocol fields (Order,
	// Mode, Window, timers, MaxPayload) are used; its membership fields
	// are set by Run.
	Node dsm.Config
	// UnreliableLoss is the probability that an unreliable write's message
	// is dropped at its sender (the reliable layer has no unreliable
	// datagram, so Run models DSM_WRT_UNREL's loss here).
	UnreliableLoss float64
	// Trace, when set, receives every member's history (see
	// dsm.Config.Trace) with the member's rank. Only one member runs at a
	// time, so the calls come in one global order: the order in which the
	// events happened in the simulation.
	Trace func(rank int, ev dsm.TraceEvent)
	// Timeout bounds the run in virtual time; 0 means 10 minutes.
	Timeout time.Duration
	// Views founds the group with views (reliable.Config.Views): the
	// Members processes found it together, each asking for id rank+1,
	// and each node starts from the first view its driver installs
	// (dsm.Host.StartView), as Join's node does; a program starts once
	// its node has. Node.Group's membership fields are set by Run.
	Views bool
	// LateProgram (Views) runs on one more process, rank Members (its
	// Result.Stats last), whose driver starts LateAt after every member's
	// node has started (from the founding view) and joins the running
	// group: a process that starts after the computation began
	// (docs/dsm.md, "A process that starts late").
	LateProgram func(n *dsm.Node) error
	LateAt      time.Duration
}

// Result is what a simulated run measured.
type Result struct {
	// Elapsed is the virtual time from start until every program returned
	// and every node exited.
	Elapsed time.Duration
	// Stats are each rank's counters at the end.
	Stats []dsm.Stats
}

// running maps the nodes of the runs under way to their members
// (Compute).
var running sync.Map // *dsm.Node -> *simMember

// Compute lets d of virtual time pass for n's program, as a computation
// of that length between two calls on the node would: the other programs
// and the network go on meanwhile. n must be the node Run handed the
// program.
func Compute(n *dsm.Node, d time.Duration) error {
	v, ok := running.Load(n)
	if !ok {
		return errors.New("dsmsim: Compute: the node is not one of a run under way")
	}
	m := v.(*simMember)
	if d <= 0 {
		return nil
	}
	until := m.sim.net.Now().Add(d)
	m.sim.net.At(until, func() {}) // the network's time reaches it
	defer func() { m.computeUntil = time.Time{} }()
	for m.sim.net.Now().Before(until) {
		if m.aborted {
			return ErrAborted
		}
		m.computeUntil, m.blocked = until, true
		m.sim.yielded <- struct{}{}
		if !<-m.resume {
			m.aborted = true
		}
	}
	if m.aborted {
		return ErrAborted
	}
	return nil
}

// Elapsed is the virtual time since n's run started, as a program
// measures how long a call took; 0 if n is not the node of a run under
// way.
func Elapsed(n *dsm.Node) time.Duration {
	v, ok := running.Load(n)
	if !ok {
		return 0
	}
	m := v.(*simMember)
	return m.sim.net.Now().Sub(m.sim.start)
}

// ErrCrashed is what Crash returns. A program that returns it (or an
// error wrapping it) ends without an error of its rank: its member
// crashed as the test asked.
var ErrCrashed = errors.New("dsmsim: member crashed")

// Crash takes n's host down now, as a crash (kill -9, a power cut) would:
// its endpoint stops sending and receiving (testnet.Endpoint.Crash: what
// is on the wire still arrives), its node is neither stepped nor exited,
// and nothing it has not sent leaves, its outbox included. The other
// members see it fail after their failure timeout. The program must
// return at once, with Crash's error (ErrCrashed); n must be the node Run
// handed it.
func Crash(n *dsm.Node) error {
	v, ok := running.Load(n)
	if !ok {
		return errors.New("dsmsim: Crash: the node is not one of a run under way")
	}
	m := v.(*simMember)
	m.crashed = true
	m.ep.Crash()
	return ErrCrashed
}

// Deafen has rank to's host drop every frame from rank from's host from
// now on (deaf), also frames already on the wire, or hear it again: a
// one-way cut between two hosts that both still hear every other
// (testnet.Endpoint.Deafen), on every group of to's, its channels
// included. n is any node of the run under way (the caller's).
func Deafen(n *dsm.Node, to, from int, deaf bool) error {
	v, ok := running.Load(n)
	if !ok {
		return errors.New("dsmsim: Deafen: the node is not one of a run under way")
	}
	ms := v.(*simMember).sim.members
	for _, r := range []int{to, from} {
		if r < 0 || r >= len(ms) {
			return fmt.Errorf("dsmsim: Deafen: rank %d is not one of the run's ranks 0..%d", r, len(ms)-1)
		}
	}
	ms[to].ep.Deafen(ms[from].ep, deaf)
	return nil
}

// ErrAborted is wrapped by Run's error, and returned by a program's
// blocked call, when Run gives up (deadlock or timeout).
var ErrAborted = errors.New("dsmsim: simulation aborted")

// Run runs program once per member, each on its own node, on a simulated
// segment in virtual time, and returns when every program has returned
// (the node is exited for it if the program did not). The error joins
// every program's error with its rank, or says which members were blocked
// where if the run deadlocked or timed out.
//
// Programs are ordinary blocking code (Write, Barrier, Lock...), each on a
// goroutine of its own, but only one goroutine runs at a time: a program
// runs until it blocks in the node, then hands control back to the
// scheduler, which resumes the next runnable program in rank order, and
// advances virtual time by one network event only when every program is
// blocked. So a run is deterministic: the same Config and program give
// the same result. Computation between two calls on the node takes no
// virtual time unless the program says how long it takes (Compute). A
// program must not block on anything but its node and Compute (no
// channels between programs, no sleeps).
func Run(cfg Config, program func(n *dsm.Node) error) (Result, error) {
	if cfg.Members < 1 {
		return Result{}, fmt.Errorf("dsmsim: Config.Members is %d, want at least 1", cfg.Members)
	}
	if cfg.Node.Group.Deliver != nil || cfg.Node.Group.OnEvent != nil {
		return Result{}, fmt.Errorf("%w: dsm sets Config.Group.Deliver and OnEvent itself; leave them nil", reliable.ErrConfig)
	}
	if cfg.LateProgram != nil && !cfg.Views {
		return Result{}, errors.New("dsmsim: Config.LateProgram needs Config.Views (a static group admits nobody later)")
	}
	// The node's configuration says Views as Join's would: the global
	// group's and the channels' settings follow from it
	// (dsm.Config.GlobalConfig, ChannelConfig, UpdateMessage).
	cfg.Node.Group.Views = cfg.Node.Group.Views || cfg.Views
	procs := cfg.Members
	if cfg.LateProgram != nil {
		procs++
	}
	timeout := cfg.Timeout
	if timeout == 0 {
		timeout = 10 * time.Minute
	}
	net, err := testnet.New(cfg.Seed, testnet.Config{})
	if err != nil {
		return Result{}, err
	}
	sim := &simulation{net: net, yielded: make(chan struct{}), loss: cfg.UnreliableLoss,
		rng: rand.New(rand.NewPCG(cfg.Seed, 0x64736d))}
	var eps []*testnet.Endpoint
	var members []frame.MemberInfo
	var ids []frame.MemberID
	for i := range procs {
		ep, err := net.Attach(testnet.EndpointConfig{MTU: cfg.MTU, In: cfg.In})
		if err != nil {
			return Result{}, err
		}
		eps = append(eps, ep)
		id := frame.MemberID(i + 1)
		members = append(members, frame.MemberInfo{ID: id, MAC: [6]byte(ep.HardwareAddr()), Incarnation: 1})
		ids = append(ids, id)
	}
	quiet := slog.New(slog.DiscardHandler)
	for i, ep := range eps {
		m := &simMember{sim: sim, rank: i, resume: make(chan bool), ep: ep, cfg: cfg.Node, members: members,
			self: ids[i], started: !cfg.Views, late: i == cfg.Members}
		ncfg := cfg.Node
		if cfg.Trace != nil {
			rank := i
			ncfg.Trace = func(ev dsm.TraceEvent) { cfg.Trace(rank, ev) }
		}
		m.n, m.h = dsm.NewHosted(m, ncfg)
		running.Store(m.n, m)
		defer running.Delete(m.n)
		gcfg := cfg.Node.GlobalConfig()
		gcfg.Members, gcfg.Self, gcfg.Size, gcfg.Server = members[:cfg.Members], ids[i], 0, false
		if cfg.Views {
			gcfg.Members, gcfg.Self, gcfg.Views, gcfg.Size = nil, 0, true, cfg.Members
			gcfg.RequestID, gcfg.Incarnation = ids[i], 1
		}
		if gcfg.Group == 0 {
			gcfg.Group = 1
		}
		if gcfg.Logger == nil {
			gcfg.Logger = quiet
		}
		gcfg.Deliver = m.h.Deliver
		gcfg.OnEvent = m.h.OnEvent
		if cfg.Views {
			gcfg.OnEvent = m.onEvent
		}
		if m.late {
			m.gcfg = gcfg
			sim.late, sim.lateAt = m, cfg.LateAt
			sim.members = append(sim.members, m)
			continue
		}
		if err := m.attach(gcfg); err != nil {
			return Result{}, err
		}
		sim.members = append(sim.members, m)
	}
	start := net.Now()
	sim.start = start
	runErr := sim.run(program, cfg.LateProgram, start.Add(timeout))
	res := Result{Elapsed: net.Now().Sub(start)}
	var errs []error
	for _, m := range sim.members {
		if m.started {
			res.Stats = append(res.Stats, m.n.Stats())
		} else {
			res.Stats = append(res.Stats, dsm.Stats{})
		}
		if m.err != nil {
			errs = append(errs, fmt.Errorf("rank %d: %w", m.rank, m.err))
		}
	}
	if runErr != nil {
		errs = append([]error{runErr}, errs...)
	}
	return res, errors.Join(errs...)
}

// start starts the late process's driver (Config.LateProgram).
func (m *simMember) start() {
	if err := m.attach(m.gcfg); err != nil {
		m.startErr = err
	}
}

// onEvent is the driver's OnEvent under Views: the node starts from the
// first view installed, before it sees that view's event.
func (m *simMember) onEvent(ev reliable.Event) {
	if !m.started && ev.Kind == reliable.ViewInstalled && ev.View != nil {
		m.self, m.members = ev.Member, slices.Clone(ev.View.Members)
		if err := m.h.StartView(ev.Member, *ev.View, m.cfg.UpdateMessage(m.drv.MaxMessage())); err != nil {
			m.startErr = err
			return
		}
		m.started = true
		if s := m.sim; !m.late && s.late != nil {
			if s.founders++; s.founders == len(s.members)-1 {
				s.net.At(s.net.Now().Add(s.lateAt), s.late.start)
			}
		}
	}
	m.h.OnEvent(ev)
}

// attach builds the member's driver (and mux) on its endpoint.
func (m *simMember) attach(gcfg reliable.Config) error {
	ep, cfg := m.ep, m.cfg
	var l link.Link = ep
	var err error
	if cfg.Channels {
		// Every group of the member on one endpoint, as Join runs
		// them on one link.
		if m.mux, err = mux.New(ep, mux.Config{}); err != nil {
			return err
		}
		if l, err = m.mux.Open(gcfg.Group); err != nil {
			return err
		}
		m.cfg.Group.Group = gcfg.Group
		m.cfg.Group.Logger = gcfg.Logger
	}
	d, err := reliable.NewDriver(l, gcfg, m.sim.net.Now())
	if err != nil {
		return err
	}
	m.drv = d
	if m.started {
		ids := make([]frame.MemberID, 0, len(gcfg.Members))
		for _, mi := range gcfg.Members {
			ids = append(ids, mi.ID)
		}
		if err := m.h.Start(m.self, ids, cfg.UpdateMessage(d.MaxMessage())); err != nil {
			return err
		}
	}
	if cfg.Channels {
		ep.Bind(testnet.NodeFunc(m.step))
	} else {
		ep.Bind(d)
	}
	return nil
}

// simulation is Run's scheduler: it and the member goroutines pass
// one baton, so exactly one of them runs at any time.
type simulation struct {
	net     *testnet.Network
	members []*simMember
	yielded chan struct{} // a member hands the baton back
	loss    float64
	rng     *rand.Rand
	// late is the process of Config.LateProgram, started lateAt after
	// the last of the others' nodes started (founders counts them).
	late     *simMember
	lateAt   time.Duration
	founders int
	start    time.Time // the virtual time Run started the programs at
}

// simMember is one member's program goroutine and its node's dsm.Env.
type simMember struct {
	sim  *simulation
	rank int
	n    *dsm.Node
	h    *dsm.Host
	drv  *reliable.Driver
	// Channels: the member's mux over its endpoint and its segment
	// channels' drivers, in the order opened.
	ep       *testnet.Endpoint
	cfg      dsm.Config
	members  []frame.MemberInfo
	self     frame.MemberID
	mux      *mux.Mux
	channels []simChannel
	resume   chan bool // the baton; false: the run is aborted
	// waiting is what the parked program waits for, if blocked.
	waiting dsm.Wait
	blocked bool
	// leavingChannels: the parked program waits in Leave for its
	// segment channels' leaves to be done.
	leavingChannels bool
	// computeUntil: the parked program computes until then (Compute).
	computeUntil time.Time
	done         bool
	aborted      bool
	// crashed: the program called Crash; its node is left as it was.
	crashed bool
	err     error
	// started: the node has its core (Views: from its first view);
	// late: the process runs Config.LateProgram, its driver started by
	// start (gcfg) at Config.LateAt; startErr: why it could not start.
	started  bool
	late     bool
	gcfg     reliable.Config
	startErr error
}

// simChannel is one segment channel of a member.
type simChannel struct {
	ch    core.Channel
	group uint32
	drv   *reliable.Driver
}

// step is the endpoint's node with Channels: every driver of the member
// reads its view of the mux, until no view holds frames (a driver's read
// of the endpoint hands the other views theirs).
func (m *simMember) step(now time.Time) time.Time {
	var next time.Time
	for {
		next = earliest(time.Time{}, m.drv.Step(now))
		for _, c := range m.channels {
			next = earliest(next, c.drv.Step(now))
		}
		queued := false
		for _, g := range m.mux.Stats().Groups {
			queued = queued || g.Queued > 0
		}
		if !queued {
			return next
		}
	}
}

func earliest(a, b time.Time) time.Time {
	if a.IsZero() || (!b.IsZero() && b.Before(a)) {
		return b
	}
	return a
}

// Open starts segment key's channel: a driver of the members on a view
// of the member's mux.
func (m *simMember) Open(key uint32, members []frame.MemberID) error {
	if m.mux == nil {
		return errors.New("the node has no channels (Config.Channels)")
	}
	gcfg := m.cfg.ChannelConfig(key, m.members, members, m.self)
	ch := core.SegmentChannel(key)
	gcfg.Deliver = m.h.DeliverOn(ch)
	gcfg.OnEvent = m.h.OnEventOn(ch)
	l, err := m.mux.Open(gcfg.Group)
	if err != nil {
		return err
	}
	d, err := reliable.NewDriver(l, gcfg, m.sim.net.Now())
	if err != nil {
		return err
	}
	m.channels = append(m.channels, simChannel{ch: ch, group: gcfg.Group, drv: d})
	m.ep.Bind(testnet.NodeFunc(m.step)) // a step now, with the new driver
	return nil
}

// driver is the driver of channel ch.
func (m *simMember) driver(ch core.Channel) *reliable.Driver {
	if ch == core.Global {
		return m.drv
	}
	for _, c := range m.channels {
		if c.ch == ch {
			return c.drv
		}
	}
	return nil
}

// Expect passes Barrier's hint to the member's global group, as Join's
// node does (reliable.Group.Expect), unless Config.Node.NoExpect; the
// driver is stepped at once so the network knows its new deadline.
func (m *simMember) Expect(from frame.MemberID, n int) {
	if m.cfg.NoExpect || m.drv.Left() {
		return
	}
	m.drv.Expect(m.sim.net.Now(), from, n)
	m.stepNow()
}

// stepNow has the network step the member's drivers now (binding its
// node again does): the one driver over one group, every driver through
// step with a mux.
func (m *simMember) stepNow() {
	if m.mux != nil {
		m.ep.Bind(testnet.NodeFunc(m.step))
	} else {
		m.ep.Bind(m.drv)
	}
}

// HoldFrom holds from's deliveries on channel ch (dsm.Holder).
func (m *simMember) HoldFrom(ch core.Channel, from frame.MemberID) bool {
	d := m.driver(ch)
	return d != nil && d.HoldFrom(m.sim.net.Now(), from)
}

// ReleaseFrom ends HoldFrom (dsm.Holder).
func (m *simMember) ReleaseFrom(ch core.Channel, from frame.MemberID) {
	if d := m.driver(ch); d != nil {
		d.ReleaseFrom(from)
		m.stepNow() // it steps what the hold kept
	}
}

// SendLane sends a lock request at the global group's Unreliable level,
// now (dsm.Laner).
func (m *simMember) SendLane(msg []byte) error {
	if m.drv.Left() {
		return nil
	}
	return m.drv.ProposeUnreliable(m.sim.net.Now(), msg)
}

// Holding reports whether ch's driver holds from's messages now
// (dsm.Laner).
func (m *simMember) Holding(ch core.Channel, from frame.MemberID) bool {
	d := m.driver(ch)
	return d != nil && d.Holding(from)
}

func (m *simMember) Kick()  {}
func (m *simMember) Flush() {}

func (m *simMember) Wait(ctx context.Context, w dsm.Wait) error {
	for {
		if m.aborted {
			return ErrAborted
		}
		ok, err := m.h.Ready(w)
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		m.waiting, m.blocked = w, true
		m.sim.yielded <- struct{}{}
		if !<-m.resume {
			m.aborted = true
		}
	}
}

func (m *simMember) Leave() error {
	if m.drv.Left() || m.aborted {
		return nil
	}
	for _, c := range m.channels {
		if err := c.drv.Leave(m.sim.net.Now()); err != nil {
			return err
		}
	}
	// The channels' leaves must be done (everything sent on them
	// acknowledged) before the global leave starts, as Join's Leave
	// closes them first: a member that sees this one leave the global
	// group stops waiting for its markers, and would otherwise cross a
	// barrier with this member's last updates still under repair on a
	// channel.
	for !m.channelsLeft() {
		m.leavingChannels, m.blocked = true, true
		m.sim.yielded <- struct{}{}
		if !<-m.resume {
			m.aborted = true
		}
		m.leavingChannels = false
		if m.aborted {
			return ErrAborted
		}
	}
	if err := m.drv.Leave(m.sim.net.Now()); err != nil {
		return err
	}
	return m.Wait(context.Background(), dsm.WaitLeave())
}

// channelsLeft reports whether every segment channel's leave is done.
func (m *simMember) channelsLeft() bool {
	for _, c := range m.channels {
		if !c.drv.Left() {
			return false
		}
	}
	return true
}

// ChannelStats are the segment channels' counters (dsm.Stats.Channels).
func (m *simMember) ChannelStats() map[uint32]reliable.Stats {
	if len(m.channels) == 0 {
		return nil
	}
	out := map[uint32]reliable.Stats{}
	for _, c := range m.channels {
		out[c.ch.Key()] = c.drv.Stats()
	}
	return out
}

func (m *simMember) GroupStats() reliable.Stats { return m.drv.Stats() }

// body is the member goroutine.
func (m *simMember) body(program func(*dsm.Node) error) {
	defer func() { m.sim.yielded <- struct{}{} }()
	if !<-m.resume {
		m.done, m.err = true, ErrAborted
		return
	}
	if m.startErr != nil {
		m.done, m.err = true, fmt.Errorf("starting: %w", m.startErr)
		return
	}
	err := func() (err error) {
		defer func() {
			if r := recover(); r != nil {
				err = fmt.Errorf("panic: %v", r)
			}
		}()
		return program(m.n)
	}()
	if m.crashed {
		if errors.Is(err, ErrCrashed) {
			err = nil
		} else if err == nil {
			err = errors.New("the program crashed its member (Crash) and returned no ErrCrashed")
		}
		m.done, m.err = true, err
		return
	}
	// Exit for the program unless it did (then Exit says ErrClosed).
	if xerr := m.n.Exit(); xerr != nil && err == nil && !errors.Is(xerr, dsm.ErrClosed) {
		err = fmt.Errorf("exit: %w", xerr)
	}
	m.done, m.err = true, err
}

// runnable reports whether m's program can continue.
func (m *simMember) runnable() bool {
	if m.done {
		return false
	}
	if m.startErr != nil {
		return true // its program returns the error at once
	}
	if !m.started {
		return false
	}
	if !m.blocked {
		return true
	}
	if m.leavingChannels {
		return m.channelsLeft()
	}
	if !m.computeUntil.IsZero() {
		return !m.sim.net.Now().Before(m.computeUntil)
	}
	ok, _ := m.h.Ready(m.waiting)
	return ok
}

// drain hands every node's outbox to its driver, as far as the send
// windows take it.
func (s *simulation) drain() {
	for _, m := range s.members {
		if !m.started || m.drv.Left() || m.crashed {
			continue
		}
		for {
			msg, ch, ok := m.h.Next()
			if !ok {
				break
			}
			drv := m.driver(ch)
			if drv == nil {
				m.h.Sent(fmt.Errorf("the channel of segment %d is not open", ch.Key()))
				break
			}
			if core.Unreliable(msg) && s.loss > 0 && s.rng.Float64() < s.loss {
				m.h.Sent(nil)
				continue
			}
			// Not under the node's lock: a totally ordered group
			// delivers the message back to this member inside Propose.
			// The node keeps msg untouched until Sent.
			err := drv.Propose(s.net.Now(), msg)
			if reliable.IsWindowFull(err) {
				break
			}
			m.h.Sent(err)
			if err != nil {
				break
			}
		}
	}
}

func (s *simulation) run(program, late func(*dsm.Node) error, deadline time.Time) error {
	for _, m := range s.members {
		if m.late {
			go m.body(late)
		} else {
			go m.body(program)
		}
	}
	for {
		ran, done := false, true
		for _, m := range s.members {
			if !m.runnable() {
				done = done && m.done
				continue
			}
			done = false
			m.blocked = false
			m.resume <- true
			<-s.yielded
			ran = true
			s.drain()
		}
		if done {
			return nil
		}
		if l := s.late; l != nil && !l.started && !l.done && s.othersDone() {
			// The group ended before it admitted the late process.
			l.resume <- false
			<-s.yielded
			l.err = errors.New("never admitted: every other member had finished before it installed a view")
			continue
		}
		if ran {
			continue
		}
		s.drain()
		if s.net.Now().After(deadline) || !s.net.Step() {
			return s.abort(deadline)
		}
	}
}

// othersDone reports whether every program but the late process's has
// returned.
func (s *simulation) othersDone() bool {
	for _, m := range s.members {
		if !m.late && !m.done {
			return false
		}
	}
	return true
}

// abort ends every blocked program and says where each was.
func (s *simulation) abort(deadline time.Time) error {
	var blocked []string
	for _, m := range s.members {
		if m.done {
			continue
		}
		where := m.h.Blocked(m.waiting)
		if !m.started {
			where = "not started: no view installed"
		}
		if !m.computeUntil.IsZero() {
			where = fmt.Sprintf("computing until %v", m.computeUntil.Sub(s.net.Now()))
		}
		blocked = append(blocked, fmt.Sprintf("rank %d %s", m.rank, where))
	}
	why := "deadlock: no event left"
	if s.net.Now().After(deadline) {
		why = "timeout: virtual time passed Config.Timeout"
	}
	for _, m := range s.members {
		for !m.done {
			m.resume <- false
			<-s.yielded
		}
	}
	return fmt.Errorf("%w: %s; blocked: %s", ErrAborted, why, strings.Join(blocked, ", "))
}
