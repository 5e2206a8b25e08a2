// Package orcasim runs Orca programs deterministically: N members of a
// group in one process, each an orca.Node over a reliable.Driver in total
// order bound to an endpoint of testnet's simulated segment, in virtual
// time. Programs are the ordinary blocking code written against orca.Node
// for Join; Run schedules them so that a run is a function of its Config
// and program. It is a package of its own so that programs that only Join
// do not link the simulator.
package orcasim

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/orca"
	"github.com/rbcast/rbcast/reliable"
	"github.com/rbcast/rbcast/testnet"
)

// Config describes a simulated run: Members nodes on one simulated
// segment (testnet) in virtual time.
type Config struct {
	// Members is the number of nodes (ranks 0..Members-1, member ids
	// 1..Members; rank 0 is the first sequencer).
	Members int
	// Seed drives every random choice of the network; a run is a
	// function of its Config and program.
	Seed uint64
	// In and Out impair every frame arriving at and leaving every node.
	In, Out testnet.Impairment
	// QueueLen is every endpoint's receive queue (0: testnet's default).
	QueueLen int
	// MTU of the simulated links; 0 means testnet.DefaultMTU.
	MTU int
	// Node configures every node. Node.Group's protocol fields (Window,
	// timers, MaxPayload, Method, Resilience, Quorum...) are used; Order
	// is Total and the membership fields are set by Run.
	Node orca.Config
	// Crashes crash members (their endpoint goes down as if the host
	// died; their program is stopped where it waits) at virtual times
	// after the start.
	Crashes []Crash
	// Stay keeps a member in the group after its program returns,
	// applying what the others write, until every program has returned:
	// nobody leaves (the program may still Close its node itself).
	// Without it Run closes each node as its program returns.
	Stay bool
	// Timeout bounds the run in virtual time; 0 means 10 minutes.
	Timeout time.Duration
	// Joins start processes that join the running group (Node.Views
	// only), each with a rank after the founders' (Members, Members+1...
	// in the order of Joins) and the next member id; Restarts bring
	// crashed members back as new processes that rejoin (a new
	// incarnation of the member id, on the same endpoint) with the next
	// ranks after the Joins'. Each runs the program once it holds the
	// objects' state (orca.Node.WaitState).
	Joins    []time.Duration
	Restarts []Crash
}

// Crash crashes the member of rank Rank At after the start (in Restarts:
// restarts it).
type Crash struct {
	Rank int
	At   time.Duration
	// When, if set, holds the crash back from At until it reports true
	// (asked after every network event, with the ranks' nodes so far):
	// a crash at a state of the run rather than at an instant, e.g.
	// inside a state transfer (Crashes only).
	When func(nodes []*orca.Node) bool
}

// Result is what a simulated run measured.
type Result struct {
	// Elapsed is the virtual time from start until every program of a
	// member that did not crash returned and its node left.
	Elapsed time.Duration
	// Stats are each rank's counters at the end.
	Stats []orca.Stats
	// Crashed says which ranks crashed.
	Crashed []bool
	// Nodes are the ranks' nodes, for their Snapshot and Position after
	// the run (with Stay nobody left).
	Nodes []*orca.Node
}

// ErrAborted is wrapped by Run's error, and returned by a program's
// blocked call, when Run gives up (deadlock or timeout).
var ErrAborted = errors.New("orcasim: simulation aborted")

// ErrCrashed is returned by a blocked call of a member that crashed; its
// program's error is not reported by Run.
var ErrCrashed = errors.New("orcasim: member crashed")

// Run runs program once per member, each on its own node, on a simulated
// segment in virtual time, and returns when every program of a member
// that did not crash has returned (the node is closed for it if the
// program did not). The error joins every such program's error with its
// rank, or says which members were blocked where if the run deadlocked or
// timed out.
//
// Programs are ordinary blocking code, each on a goroutine of its own,
// but only one goroutine runs at a time: a program runs until it blocks
// in the node (a write waiting for the order, a guard), then hands control
// back to the scheduler, which resumes the next runnable program in rank
// order, and advances virtual time by one network event only when every
// program is blocked. So a run is deterministic. Computation between two
// blocking calls takes no virtual time. A program must not block on
// anything but its node (no channels between programs, no sleeps), and
// must use its node from one goroutine.
func Run(cfg Config, program func(n *orca.Node) error) (Result, error) {
	if cfg.Members < 1 {
		return Result{}, fmt.Errorf("orcasim: Config.Members is %d, want at least 1", cfg.Members)
	}
	ranks := cfg.Members + len(cfg.Joins) + len(cfg.Restarts)
	if (len(cfg.Joins) > 0 || len(cfg.Restarts) > 0) && !cfg.Node.Views {
		return Result{}, errors.New("orcasim: Config.Joins and Restarts need Config.Node.Views (a group whose membership changes)")
	}
	for _, c := range cfg.Crashes {
		if c.Rank < 0 || c.Rank >= ranks {
			return Result{}, fmt.Errorf("orcasim: Config.Crashes names rank %d, want 0..%d", c.Rank, ranks-1)
		}
	}
	for _, r := range cfg.Restarts {
		if r.Rank < 0 || r.Rank >= cfg.Members+len(cfg.Joins) || !slices.ContainsFunc(cfg.Crashes, func(c Crash) bool { return c.Rank == r.Rank && c.At < r.At }) {
			return Result{}, fmt.Errorf("orcasim: Config.Restarts names rank %d at %v, which is not a founder's or a joiner's rank that crashed before", r.Rank, r.At)
		}
	}
	timeout := cfg.Timeout
	if timeout == 0 {
		timeout = 10 * time.Minute
	}
	net, err := testnet.New(cfg.Seed, testnet.Config{})
	if err != nil {
		return Result{}, err
	}
	sim := &simulation{net: net, yielded: make(chan struct{}), closeTimeout: cfg.Node.Group.CloseTimeout, cfg: cfg,
		quiet: slog.New(slog.DiscardHandler)}
	if sim.closeTimeout == 0 {
		sim.closeTimeout = reliable.DefaultCloseTimeout
	}
	var eps []*testnet.Endpoint
	var members []frame.MemberInfo
	var ids []frame.MemberID
	for i := range cfg.Members {
		ep, err := sim.attach()
		if err != nil {
			return Result{}, err
		}
		eps = append(eps, ep)
		id := frame.MemberID(i + 1)
		members = append(members, frame.MemberInfo{ID: id, MAC: [6]byte(ep.HardwareAddr()), Incarnation: 1})
		ids = append(ids, id)
	}
	for i, ep := range eps {
		if _, err := sim.addMember(ep, ids[i], 1, members, ids); err != nil {
			return Result{}, err
		}
	}
	for _, c := range cfg.Crashes {
		net.AfterFunc(c.At, func() {
			if c.When != nil {
				sim.watch = append(sim.watch, c)
				return
			}
			sim.crash(c)
		})
	}
	// Ranks after the founders' are made when their time comes, in the
	// order of Joins and then Restarts (virtual time orders them only
	// when their times differ).
	type later struct {
		at      time.Duration
		restart int // rank restarted, or -1
	}
	var laters []later
	for _, at := range cfg.Joins {
		laters = append(laters, later{at, -1})
	}
	for _, r := range cfg.Restarts {
		laters = append(laters, later{r.At, r.Rank})
	}
	sim.pending = len(laters)
	for i, l := range laters {
		net.AfterFunc(l.at, func() {
			sim.pending--
			if len(sim.members) != cfg.Members+i {
				sim.setupErr = errors.Join(sim.setupErr, fmt.Errorf("orcasim: Joins and Restarts must come in order of time (rank %d comes before rank %d)", cfg.Members+i, len(sim.members)))
				return
			}
			var ep *testnet.Endpoint
			id, inc := frame.MemberID(cfg.Members+i+1), uint32(1)
			if l.restart >= 0 {
				old := sim.members[l.restart]
				if !old.crashed {
					sim.setupErr = errors.Join(sim.setupErr, fmt.Errorf("orcasim: rank %d restarts at %v but has not crashed", l.restart, l.at))
					return
				}
				ep, id, inc = old.ep, old.id, old.inc+1
				ep.Restart()
			} else {
				var err error
				if ep, err = sim.attach(); err != nil {
					sim.setupErr = errors.Join(sim.setupErr, err)
					return
				}
			}
			m, err := sim.addMember(ep, id, inc, nil, nil)
			if err != nil {
				sim.setupErr = errors.Join(sim.setupErr, err)
				return
			}
			go m.body(sim.program)
		})
	}
	start := net.Now()
	sim.stay = cfg.Stay
	runErr := sim.run(program, start.Add(timeout))
	res := Result{Elapsed: net.Now().Sub(start)}
	var errs []error
	if sim.setupErr != nil {
		errs = append(errs, sim.setupErr)
	}
	for _, m := range sim.members {
		res.Stats = append(res.Stats, m.n.Stats())
		res.Crashed = append(res.Crashed, m.crashed)
		res.Nodes = append(res.Nodes, m.n)
		if m.err != nil && !m.crashed {
			errs = append(errs, fmt.Errorf("rank %d: %w", m.rank, m.err))
		}
	}
	if runErr != nil {
		errs = append([]error{runErr}, errs...)
	}
	return res, errors.Join(errs...)
}

// simulation is Run's scheduler: it and the member goroutines pass one
// baton, so exactly one of them runs at any time.
type simulation struct {
	net     *testnet.Network
	members []*simMember
	yielded chan struct{} // a member hands the baton back
	// closeTimeout bounds a leaving member's wait for its messages to be
	// held everywhere (orca.Env.Leave), as Group.Close's.
	closeTimeout time.Duration
	stay         bool // Config.Stay
	cfg          Config
	quiet        *slog.Logger
	program      func(*orca.Node) error
	// pending counts the Joins and Restarts still to come; setupErr is
	// what went wrong making them.
	pending  int
	setupErr error
	// watch are the Crashes with a When, once their At has passed.
	watch []Crash
}

// crash crashes c's rank.
func (s *simulation) crash(c Crash) {
	if c.Rank >= len(s.members) {
		s.setupErr = errors.Join(s.setupErr, fmt.Errorf("orcasim: rank %d crashes at %v, before it joined", c.Rank, c.At))
		return
	}
	m := s.members[c.Rank]
	m.crashed = true
	m.ep.Crash()
}

// watchCrashes crashes the ranks whose Crash.When holds now.
func (s *simulation) watchCrashes() {
	if len(s.watch) == 0 {
		return
	}
	nodes := make([]*orca.Node, len(s.members))
	for i, m := range s.members {
		nodes[i] = m.n
	}
	s.watch = slices.DeleteFunc(s.watch, func(c Crash) bool {
		if c.When(nodes) {
			s.crash(c)
			return true
		}
		return false
	})
}

func (s *simulation) attach() (*testnet.Endpoint, error) {
	c := s.cfg
	return s.net.Attach(testnet.EndpointConfig{MTU: c.MTU, QueueLen: c.QueueLen, In: c.In, Out: c.Out})
}

// addMember makes the next rank's member on ep: member id of a static
// group (members, ids), or the process asking for id with incarnation
// inc under Views.
func (s *simulation) addMember(ep *testnet.Endpoint, id frame.MemberID, inc uint32, members []frame.MemberInfo, ids []frame.MemberID) (*simMember, error) {
	m := &simMember{sim: s, rank: len(s.members), ep: ep, id: id, inc: inc, resume: make(chan bool)}
	var err error
	m.n, m.h, err = orca.NewHosted(m, s.cfg.Node)
	if err != nil {
		return nil, err
	}
	gcfg := s.cfg.Node.Group
	gcfg.Members, gcfg.Self, gcfg.Size, gcfg.Server = members, id, 0, false
	if s.cfg.Node.Views {
		// Every process asks for its id; founders wait for each other.
		gcfg.Members, gcfg.Self, gcfg.Views = nil, 0, true
		gcfg.Size, gcfg.RequestID, gcfg.Incarnation = s.cfg.Members, id, inc
	}
	gcfg.Order = reliable.Total
	if gcfg.Group == 0 {
		gcfg.Group = 1
	}
	if gcfg.Logger == nil {
		gcfg.Logger = s.quiet
	}
	gcfg.Deliver = m.h.Deliver
	gcfg.OnEvent = m.h.OnEvent
	d, err := reliable.NewDriver(ep, gcfg, s.net.Now())
	if err != nil {
		return nil, err
	}
	m.drv = d
	if err := m.h.Start(id, ids, d.MaxMessage()); err != nil {
		return nil, err
	}
	ep.Bind(d)
	s.members = append(s.members, m)
	return m, nil
}

// simMember is one member's program goroutine and its node's orca.Env.
type simMember struct {
	sim    *simulation
	rank   int
	id     frame.MemberID
	inc    uint32
	ep     *testnet.Endpoint
	n      *orca.Node
	h      *orca.Host
	drv    *reliable.Driver
	resume chan bool // the baton; false: the run is aborted
	// outbox holds what the node sent, for the scheduler to propose.
	outbox [][]byte
	// waiting is what the parked program waits for, if blocked.
	waiting orca.Waiter
	blocked bool
	done    bool
	aborted bool
	crashed bool
	err     error
}

func (m *simMember) Send(ctx context.Context, msg []byte) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if m.crashed {
		return ErrCrashed
	}
	m.outbox = append(m.outbox, append([]byte(nil), msg...))
	return nil
}

// TrySend is Send from the node's Deliver (orca.TrySender: the node
// batches its writes): the outbox takes it.
func (m *simMember) TrySend(msg []byte) error {
	if m.crashed {
		return ErrCrashed
	}
	m.outbox = append(m.outbox, append([]byte(nil), msg...))
	return nil
}

func (m *simMember) Wait(ctx context.Context, w orca.Waiter) error {
	for {
		if m.aborted {
			if m.crashed {
				return ErrCrashed
			}
			return ErrAborted
		}
		if w.Ready() {
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
	if m.drv.Left() || m.aborted || m.crashed {
		return nil
	}
	// What the node sent goes first, and is held everywhere before the
	// leave (orca.Env.Leave).
	m.drain()
	end := m.sim.net.Now().Add(m.sim.closeTimeout)
	settled := func() bool {
		return len(m.outbox) == 0 && m.drv.Stats().Protocol.Unsettled == 0 || m.sim.net.Now().After(end)
	}
	if err := m.Wait(context.Background(), leaving{"for its messages to be held by every member", settled}); err != nil {
		return err
	}
	if err := m.drv.Leave(m.sim.net.Now()); err != nil {
		return err
	}
	return m.Wait(context.Background(), leaving{"for its leave to be done", m.h.Left})
}

// leaving is what a leaving member waits for.
type leaving struct {
	what  string
	ready func() bool
}

func (l leaving) Ready() bool           { return l.ready() }
func (l leaving) Wake() <-chan struct{} { return nil }
func (l leaving) String() string        { return "leaving: waiting " + l.what }

func (m *simMember) GroupStats() reliable.Stats { return m.drv.Stats() }

// body is the member goroutine.
func (m *simMember) body(program func(*orca.Node) error) {
	defer func() { m.sim.yielded <- struct{}{} }()
	if !<-m.resume {
		m.done, m.err = true, ErrAborted
		return
	}
	err := func() (err error) {
		defer func() {
			if r := recover(); r != nil {
				err = fmt.Errorf("panic: %v", r)
			}
		}()
		if err := m.n.WaitState(context.Background()); err != nil {
			return fmt.Errorf("before the program: %w", err)
		}
		return program(m.n)
	}()
	// Close for the program unless it did (or the member stays).
	if !m.sim.stay {
		if cerr := m.n.Close(); cerr != nil && err == nil && !m.crashed && !m.aborted {
			err = fmt.Errorf("close: %w", cerr)
		}
	}
	m.done, m.err = true, err
}

// runnable reports whether m's program can continue.
func (m *simMember) runnable() bool {
	if m.done || m.crashed {
		return false
	}
	if !m.blocked {
		return true
	}
	return m.waiting.Ready()
}

// drain hands the member's outbox to its driver, as far as its send
// window takes it.
func (m *simMember) drain() {
	for len(m.outbox) > 0 && !m.crashed && !m.drv.Left() {
		// Not under the node's lock: Propose may deliver at once (the
		// sequencer delivers its own message inside it).
		err := m.drv.Propose(m.sim.net.Now(), m.outbox[0])
		if reliable.IsWindowFull(err) {
			return
		}
		m.outbox = m.outbox[1:]
		if err != nil {
			return // the group stopped: the node hears of it as an event
		}
	}
}

func (s *simulation) run(program func(*orca.Node) error, deadline time.Time) error {
	s.program = program
	for _, m := range s.members {
		go m.body(program)
	}
	for {
		ran, done := false, true
		for _, m := range s.members {
			if !m.runnable() {
				done = done && (m.done || m.crashed)
				continue
			}
			done = false
			m.blocked = false
			m.resume <- true
			<-s.yielded
			ran = true
			m.drain()
		}
		if done && s.pending == 0 {
			s.release()
			return nil
		}
		if ran {
			continue
		}
		for _, m := range s.members {
			m.drain()
		}
		if s.net.Now().After(deadline) || !s.net.Step() {
			return s.abort(deadline)
		}
		s.watchCrashes()
	}
}

// release ends the programs of crashed members, which wait forever.
func (s *simulation) release() {
	for _, m := range s.members {
		for !m.done {
			m.resume <- false
			<-s.yielded
		}
	}
}

// abort ends every blocked program and says where each was.
func (s *simulation) abort(deadline time.Time) error {
	var blocked []string
	for _, m := range s.members {
		if m.done || m.crashed {
			continue
		}
		st := m.n.Stats()
		what := "running"
		if m.blocked && m.waiting != nil {
			what = m.waiting.String()
		}
		blocked = append(blocked, fmt.Sprintf("rank %d %s (%d guarded writes queued here, %d messages early)", m.rank, what, st.Pending, st.Early))
	}
	why := "deadlock: no event left"
	if s.net.Now().After(deadline) {
		why = "timeout: virtual time passed Config.Timeout"
	}
	s.release()
	return fmt.Errorf("%w: %s; blocked: %s", ErrAborted, why, strings.Join(blocked, ", "))
}
