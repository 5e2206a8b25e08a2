package pcode

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/link"
	"github.com/rbcast/rbcast/reliable/clock/wall"
	"github.com/rbcast/rbcast/reliable/core"
	"github.com/rbcast/rbcast/reliable/internal/simtest"
	"github.com/rbcast/rbcast/testnet"
)

// A simulated program: every member runs its calls of one global program
// (§2.1) on testnet's segment, through core.Stepper and the one wall
// clock conversion, and the checkers assert propositions 1 and 2 and
// properties 1 and 2 at every delivery.

// call is one of a member's program calls.
type call struct {
	op   Op
	want []byte // a request's expected message
}

// program builds the calls of a random correct global program: rounds of
// single multicasts (to random target sets; pipelined when one sender
// sends several in a row) and all-to-all rounds in the paper's second
// implementation (§6.2: multicast first, then requests).
type program struct {
	calls [][]call
	steps int
}

func message(seed uint64, from frame.MemberID, step uint64, max int) []byte {
	return simtest.Message(nil, seed, from, int(step), max)
}

func newProgram(r *rand.Rand, seed uint64, ids []frame.MemberID, rounds, maxMsg int) *program {
	n := len(ids)
	pg := &program{calls: make([][]call, n)}
	for step := uint64(1); step <= uint64(rounds); step++ {
		if r.IntN(4) == 0 {
			for i, p := range ids {
				var others []frame.MemberID
				for _, q := range ids {
					if q != p {
						others = append(others, q)
					}
				}
				pg.calls[i] = append(pg.calls[i], call{op: Op{Kind: OpMulticast, Step: step, Targets: frame.AppendTargets(nil, others...), Data: message(seed, p, step, maxMsg)}})
			}
			for i, p := range ids {
				for _, q := range ids {
					if q == p {
						continue
					}
					var others []frame.MemberID
					for _, o := range ids {
						if o != q {
							others = append(others, o)
						}
					}
					pg.calls[i] = append(pg.calls[i], call{op: Op{Kind: OpRequest, Step: step, Peer: q, Targets: frame.AppendTargets(nil, others...)}, want: message(seed, q, step, maxMsg)})
				}
			}
			continue
		}
		s := r.IntN(n)
		var ts []frame.MemberID
		var in []int
		for i, q := range ids {
			if i != s && (r.IntN(2) == 0 || len(ts) == 0 && i == (s+1)%n) {
				ts = append(ts, q)
				in = append(in, i)
			}
		}
		targets := frame.AppendTargets(nil, ts...)
		data := message(seed, ids[s], step, maxMsg)
		pg.calls[s] = append(pg.calls[s], call{op: Op{Kind: OpMulticast, Step: step, Targets: targets, Data: data}})
		for _, i := range in {
			pg.calls[i] = append(pg.calls[i], call{op: Op{Kind: OpRequest, Step: step, Peer: ids[s], Targets: targets}, want: data})
		}
	}
	pg.steps = rounds
	return pg
}

// scenario is one seed's draw.
type scenario struct {
	members, rounds int
	link            simtest.Link
	cfg             Config
}

func (s scenario) String() string {
	return fmt.Sprintf("%d members, %d rounds, SendBuffer %d EarlyBuffer %d FlowWindow %d, link %v",
		s.members, s.rounds, s.cfg.SendBuffer, s.cfg.EarlyBuffer, s.cfg.FlowWindow, s.link)
}

func drawScenario(seed uint64) scenario {
	r := rand.New(rand.NewPCG(seed, 0x9c0de))
	sc := scenario{members: 2 + r.IntN(15), rounds: 20 + r.IntN(60), link: simtest.DrawLink(r)}
	sc.link.QueueLen = 0 // a short queue is the runtime's concern, not the protocol's
	sc.cfg.SendBuffer = []int{1, 4, 16, 0}[r.IntN(4)]
	sc.cfg.EarlyBuffer = []int{NoEarlyBuffer, 1, 8, 64}[r.IntN(4)]
	sc.cfg.FlowWindow = []int{1, 4, 16, 64}[r.IntN(4)]
	return sc
}

// debugSim adds the cores' state to a report of an unfinished run.
var debugSim = false

// member drives one core: a testnet.Node.
type member struct {
	sim     *sim
	i       int
	id      frame.MemberID
	ep      *testnet.Endpoint
	c       *Core
	st      *core.Stepper
	calls   []call
	next    int  // the next call to issue
	waiting bool // a request is issued and not yet delivered
	done    bool // every call returned
	left    bool
	rx      []link.Frame
	maxHist int

	lastStep    time.Time
	sameInstant int
	doneAt      time.Time // when its last call returned
	halted      core.Event
}

type sim struct {
	t       testing.TB
	seed    uint64
	net     *testnet.Network
	clk     wall.Clock
	members []*member
	failed  error
	trace   []string
	leave   bool // members leave once every member is done
	// failures: a member may crash; the others must halt (SelfRemoved)
	// rather than fail the run.
	failures bool
}

func (s *sim) fail(format string, args ...any) {
	if s.failed == nil {
		s.failed = fmt.Errorf(format, args...)
	}
}

func newSim(t testing.TB, seed uint64, n int, l simtest.Link, cfg Config, calls func(ids []frame.MemberID, max int) [][]call) *sim {
	net, err := testnet.New(seed, testnet.Config{})
	if err != nil {
		t.Fatal(err)
	}
	s := &sim{t: t, seed: seed, net: net, clk: wall.Clock{Epoch: net.Now()}}
	var infos []frame.MemberInfo
	for i := range n {
		ep, err := net.Attach(l.Endpoint())
		if err != nil {
			t.Fatal(err)
		}
		infos = append(infos, frame.MemberInfo{ID: frame.MemberID(i), MAC: [6]byte(ep.HardwareAddr()), Incarnation: uint32(seed) + uint32(i)})
		s.members = append(s.members, &member{sim: s, i: i, id: frame.MemberID(i), ep: ep, rx: make([]link.Frame, 32)})
	}
	ids := make([]frame.MemberID, n)
	for i := range ids {
		ids[i] = frame.MemberID(i)
	}
	for _, m := range s.members {
		c := cfg
		c.Group, c.Self, c.Members, c.MTU, c.MaxPayload = 7, m.id, infos, l.MTU, l.MaxPayload
		core, err := New(c)
		if err != nil {
			t.Fatal(err)
		}
		m.c = core
	}
	all := calls(ids, s.members[0].c.MaxMessage())
	for _, m := range s.members {
		m.calls = all[m.i]
		m.st = core.NewStepper(m.c, 7, frame.EtherType)
		m.st.Tick(s.clk.Core(net.Now()))
		m.ep.Bind(m)
	}
	return s
}

func (m *member) Step(now time.Time) time.Time {
	t := m.sim.clk.Core(now)
	if m.left || m.c.Done() || m.sim.failed != nil {
		return time.Time{}
	}
	// A core whose deadline does not move spins the simulation at one
	// instant: a bug, reported with the core's state.
	if now.Equal(m.lastStep) {
		m.sameInstant++
		if m.sameInstant > 10000 {
			m.sim.fail("member %d: stepped 10000 times at %v: deadline %d, now %d, %s", m.id, now, m.c.Deadline(), t, m.c.debug())
			return time.Time{}
		}
	} else {
		m.lastStep, m.sameInstant = now, 0
	}
	for {
		n, _ := m.ep.Recv(time.Time{}, m.rx)
		for _, f := range m.rx[:n] {
			_ = m.st.Step(t, f.Data)
		}
		m.st.Tick(t)
		m.issue(t)
		m.flush()
		if n == 0 {
			break
		}
	}
	if m.c.Done() {
		return time.Time{}
	}
	return m.sim.clk.Wall(m.st.Deadline())
}

// issue makes the member's next calls (A2: each after the last returned;
// a multicast returns once the core took it).
func (m *member) issue(t core.Time) {
	for !m.waiting && m.next < len(m.calls) {
		c := m.calls[m.next]
		err := m.st.Propose(t, AppendOp(nil, c.op))
		if errors.Is(err, core.ErrWindowFull) || errors.Is(err, core.ErrHalted) {
			return
		}
		if err != nil {
			m.sim.fail("member %d: call %d (%+v): %v", m.id, m.next, c.op, err)
			return
		}
		if c.op.Kind == OpRequest {
			m.waiting = true
			return
		}
		m.next++
	}
	if m.next == len(m.calls) && !m.waiting {
		if !m.done {
			m.doneAt = m.sim.net.Now()
		}
		m.done = true
		if m.sim.leave && m.sim.allDone() && !m.c.leaving {
			m.st.Leave(t)
		}
	}
}

func (s *sim) allDone() bool {
	for _, m := range s.members {
		if !m.done {
			return false
		}
	}
	return true
}

func (m *member) flush() {
	s := m.sim
	rd := m.st.Ready()
	if len(rd.Frames) > 0 {
		if _, err := m.ep.Send(rd.Frames); err != nil {
			s.fail("member %d: send: %v", m.id, err)
		}
	}
	for _, d := range rd.Deliveries {
		// Property 1: delivered once, only in response to a request, the
		// matched message; property 2 follows (requests are in order).
		if !m.waiting {
			s.fail("member %d: delivery from %d (count %d) with no request pending (call %d of %d)", m.id, d.From, d.Seq, m.next, len(m.calls))
			continue
		}
		c := m.calls[m.next]
		if d.From != c.op.Peer || !bytes.Equal(d.Data, c.want) {
			s.fail("member %d: request %d at step %d from %d got %d bytes from %d (count %d), want %d bytes", m.id, m.next, c.op.Step, c.op.Peer, len(d.Data), d.From, d.Seq, len(c.want))
			continue
		}
		m.waiting = false
		m.next++
	}
	for _, ev := range rd.Events {
		switch {
		case ev.Kind == core.SelfLeft:
			m.left = true
		case ev.Kind == core.MemberLeft:
		case s.failures && ev.Kind == core.SelfRemoved:
			m.halted = ev
		case s.failures && ev.Kind == core.MemberFailed:
		default:
			s.fail("member %d: event %v", m.id, ev)
		}
	}
	m.st.Advance()
	st := m.c.Stats()
	d := st.Detail.(Stats)
	m.maxHist = max(m.maxHist, st.InFlight)
	if st.InFlight > m.c.cfg.SendBuffer {
		s.fail("member %d: %d multicasts buffered, SendBuffer %d", m.id, st.InFlight, m.c.cfg.SendBuffer)
	}
	if m.c.cfg.EarlyBuffer != NoEarlyBuffer && d.EarlyBuffer > m.c.cfg.EarlyBuffer || m.c.cfg.EarlyBuffer == NoEarlyBuffer && d.EarlyBuffer > 0 {
		s.fail("member %d: %d early messages kept, EarlyBuffer %d", m.id, d.EarlyBuffer, m.c.cfg.EarlyBuffer)
	}
	if m.waiting || !m.done {
		m.issue(m.sim.clk.Core(s.net.Now()))
	}
}

// run runs until every member is done (and left, with leave), a check
// failed, or limit passed; it returns the verdict.
func (s *sim) run(limit time.Duration) error {
	end := s.net.Now().Add(limit)
	finished := func() bool {
		for _, m := range s.members {
			if m.ep.Crashed() || m.halted.Kind != 0 {
				continue
			}
			if !m.done || s.leave && !m.left {
				return false
			}
		}
		return true
	}
	for s.failed == nil && !finished() && s.net.Now().Before(end) {
		s.net.RunFor(5 * time.Millisecond)
		if s.leave && s.allDone() && !s.failures {
			// A member done before the last one may be idle: start its
			// Leave and step it.
			for _, m := range s.members {
				if !m.c.leaving && !m.c.halted {
					m.st.Leave(s.clk.Core(s.net.Now()))
					m.ep.Bind(m)
				}
			}
		}
	}
	if s.failed != nil {
		return s.failed
	}
	if !finished() {
		var b strings.Builder
		for _, m := range s.members {
			st := m.c.Stats().Detail.(Stats)
			fmt.Fprintf(&b, "\n  member %d: call %d of %d waiting=%v left=%v halted=%v hist=%d early=%d gc=%d stats=%+v",
				m.id, m.next, len(m.calls), m.waiting, m.left, m.c.halted, len(m.c.hist), len(m.c.early), m.c.gc, st)
			if m.waiting && debugSim {
				fmt.Fprintf(&b, "\n    waiting for %+v: %s", m.calls[m.next].op, m.c.debug())
			}
		}
		return fmt.Errorf("not finished after %v of virtual time:%s", limit, b.String())
	}
	return nil
}

// TestSim runs random correct programs on lossy, duplicating, reordering
// segments of 2–16 members: every call returns, every request delivers
// exactly its matched message, non-targets deliver nothing, buffers stay
// within their bounds, and every member leaves cleanly at the end.
func TestSim(t *testing.T) {
	simtest.RunSeeds(t, 60, func(t *testing.T, seed uint64) (fmt.Stringer, error) {
		sc := drawScenario(seed)
		r := rand.New(rand.NewPCG(seed, 1))
		s := newSim(t, seed, sc.members, sc.link, sc.cfg, func(ids []frame.MemberID, max int) [][]call {
			return newProgram(r, seed, ids, sc.rounds, max).calls
		})
		s.leave = true
		return sc, s.run(60 * time.Second)
	})
}

func TestSimDeterministic(t *testing.T) {
	simtest.Deterministic(t, 5, func(t testing.TB, seed uint64, trace func(testnet.Event)) error {
		sc := drawScenario(seed)
		r := rand.New(rand.NewPCG(seed, 1))
		s := newSim(t, seed, sc.members, sc.link, sc.cfg, func(ids []frame.MemberID, max int) [][]call {
			return newProgram(r, seed, ids, sc.rounds, max).calls
		})
		s.net.Trace(trace)
		s.leave = true
		return s.run(60 * time.Second)
	})
}

// TestSimCrash: one failure stops the program (§1), and never hangs it.
// A member crashes at a random instant of a random program; every other
// member either finishes its calls and leaves, or halts with an error
// naming the silent member or the abort, within the failure timeout.
func TestSimCrash(t *testing.T) {
	simtest.RunSeeds(t, 12, func(t *testing.T, seed uint64) (fmt.Stringer, error) {
		sc := drawScenario(seed)
		sc.cfg.FailureTimeout = 200 * Millisecond
		sc.cfg.MaxTimer = 20 * Millisecond
		r := rand.New(rand.NewPCG(seed, 2))
		s := newSim(t, seed, sc.members, sc.link, sc.cfg, func(ids []frame.MemberID, max int) [][]call {
			return newProgram(r, seed, ids, sc.rounds, max).calls
		})
		s.leave, s.failures = true, true
		victim := s.members[r.IntN(len(s.members))]
		at := time.Duration(r.IntN(20_000)) * time.Microsecond
		s.net.AfterFunc(at, func() { victim.ep.Crash() })
		if err := s.run(5 * time.Second); err != nil {
			return sc, err
		}
		for _, m := range s.members {
			if m == victim || m.halted.Kind == 0 {
				continue
			}
			if !strings.Contains(m.halted.Reason, fmt.Sprintf("member %d silent for", victim.id)) && !strings.Contains(m.halted.Reason, "stopped the program") {
				return sc, fmt.Errorf("member %d halted: %v; want the failure of member %d", m.id, m.halted, victim.id)
			}
		}
		return sc, nil
	})
}
