// Package simtest is the deterministic simulation harness the protocol
// cores' tests share (DESIGN.md, "Testing", step 2): members running a
// core on testnet's simulated segment with seeded impairments, checked at
// every delivery and event, many seeds per run, each one reproducible.
//
// A Sim drives every member's core through its core.Stepper, with the
// one wall-to-core clock conversion (reliable/clock/wall), as the live
// runtime does: the glue tested here is the glue that runs live. What
// is the same for every core is done here — proposing messages in bursts
// with pauses and back-pressure, checking that each delivery is the next
// message of its sender (FIFO, exactly once, bytes equal, from a member),
// tracking removals, a rogue station, the seeds, the determinism check.
// What belongs to one protocol (its order, its completion, its verdict)
// the test supplies as hooks.
package simtest

import (
	"bytes"
	"encoding/binary"
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
	"github.com/rbcast/rbcast/testnet"
)

// Config is what a Sim needs besides its cores.
type Config struct {
	Seed    uint64
	Group   uint32
	Members int
	// K is how many messages each member proposes.
	K int
	// Link is every member's endpoint.
	Link Link
	// SparseIDs numbers members 10, 13, 16, ... instead of 0, 1, 2, ...,
	// so that an acknowledgement vector has holes.
	SparseIDs bool
	// Limit bounds the run in virtual time.
	Limit time.Duration
	// Trace, if set, sees every event of the segment.
	Trace []func(testnet.Event)
	// Datagrams: the members also send datagrams of the Unreliable level
	// (core.UnreliableCore), some while a Ready is handed out, before
	// Advance, as a runtime lets an application; receivers check each is
	// a member's, intact, not their own, at most once.
	Datagrams bool
}

// Sim is one seeded run: a segment, its members, and the first failure
// seen.
type Sim[C core.Core] struct {
	T       testing.TB
	Config  Config
	Net     *testnet.Network
	Clock   wall.Clock
	Members []*Member[C]
	// Index maps a member's id to its index in Members.
	Index map[frame.MemberID]int

	// Hooks, each optional. OnDelivery sees a delivery that passed the
	// harness's checks, idx being its place among its sender's messages;
	// OnEvent sees every event after the harness's bookkeeping; OnAdvance
	// runs after each Advance. Done reports whether the run is complete;
	// Run runs until it is (nil: until the limit).
	OnDelivery func(m *Member[C], d core.Delivery, idx int)
	OnEvent    func(m *Member[C], ev core.Event)
	OnAdvance  func(m *Member[C])
	Done       func() bool

	// Forged and Foreign count the frames the rogue station sent: of the
	// run's group, and of another.
	Forged, Foreign int

	limit  time.Time
	failed error
}

// Member drives one core on one endpoint: the live runtime's event loop
// with the waiting taken out (a testnet.Node).
type Member[C core.Core] struct {
	Sim     *Sim[C]
	Index   int
	ID      frame.MemberID
	EP      *testnet.Endpoint
	Info    frame.MemberInfo
	Core    C
	Stepper *core.Stepper
	// LeaveAfter makes the member leave once it has proposed its K
	// messages.
	LeaveAfter bool

	// Proposed counts the messages the core accepted; Leaving is set
	// once the member called Leave.
	Proposed int
	Leaving  bool
	// Next is, per member index, the index of the next message expected
	// from it.
	Next []int
	// Removed is, per member index, how this member last saw it removed
	// (MemberFailed, MemberStalled, MemberLeft), 0 while it counts as a
	// member.
	Removed []core.EventKind
	// Out is the event that took this member itself out (SelfLeft or
	// SelfRemoved); its Kind is 0 while it is in.
	Out core.Event

	// DgSent counts the datagrams this member's core accepted; DgGot, per
	// member index, the datagram numbers delivered from it.
	DgSent   int
	DgGot    []map[int]bool
	dgInTurn bool

	rx        []link.Frame
	rng       *rand.Rand
	proposeAt time.Time
	max       int // the core's largest message
	want      []byte
}

// New attaches cfg.Members endpoints to a new segment. The test then
// makes each member's core (Members[i].Core), from Infos, and calls
// Start.
func New[C core.Core](t testing.TB, cfg Config) *Sim[C] {
	net, err := testnet.New(cfg.Seed, testnet.Config{})
	if err != nil {
		t.Fatal(err)
	}
	for _, fn := range cfg.Trace {
		net.Trace(fn)
	}
	s := &Sim[C]{T: t, Config: cfg, Net: net, Clock: wall.Clock{Epoch: net.Now()}, Index: map[frame.MemberID]int{}}
	for i := range cfg.Members {
		ep, err := net.Attach(cfg.Link.Endpoint())
		if err != nil {
			t.Fatal(err)
		}
		id := frame.MemberID(i)
		if cfg.SparseIDs {
			id = frame.MemberID(10 + 3*i)
		}
		s.Index[id] = i
		got := make([]map[int]bool, cfg.Members)
		for j := range got {
			got[j] = map[int]bool{}
		}
		s.Members = append(s.Members, &Member[C]{Sim: s, Index: i, ID: id, EP: ep, DgGot: got,
			Info: frame.MemberInfo{ID: id, MAC: [6]byte(ep.HardwareAddr()), Incarnation: uint32(cfg.Seed) + uint32(i)},
			Next: make([]int, cfg.Members), Removed: make([]core.EventKind, cfg.Members),
			rx: make([]link.Frame, 32), rng: rand.New(rand.NewPCG(cfg.Seed, uint64(i)))})
	}
	return s
}

// Infos returns every member's id, MAC and incarnation, for the cores'
// configurations.
func (s *Sim[C]) Infos() []frame.MemberInfo {
	infos := make([]frame.MemberInfo, len(s.Members))
	for i, m := range s.Members {
		infos[i] = m.Info
	}
	return infos
}

// Start puts every member's core on a stepper, ticks it at the current
// instant and lets the segment drive it. The run's time limit counts
// from now.
func (s *Sim[C]) Start() {
	now := s.Net.Now()
	s.limit = now.Add(s.Config.Limit)
	for _, m := range s.Members {
		m.Stepper = core.NewStepper(m.Core, s.Config.Group, frame.EtherType)
		m.max = m.Stepper.Info().MaxMessage
		m.Stepper.Tick(s.Clock.Core(now))
		m.EP.Bind(m)
	}
}

// Run runs the segment in steps of 5 ms until the run is done, a check
// failed, or the time limit passed. It may be called again, after the
// test ran the segment on by itself.
func (s *Sim[C]) Run() {
	for !s.done() && s.failed == nil && s.Net.Now().Before(s.limit) {
		s.Net.RunFor(5 * time.Millisecond)
	}
}

func (s *Sim[C]) done() bool { return s.Done != nil && s.Done() }

// Fail records a failed check; the first one is the run's verdict.
func (s *Sim[C]) Fail(format string, args ...any) {
	if s.failed == nil {
		s.failed = fmt.Errorf(format, args...)
	}
}

// Err returns the first failed check.
func (s *Sim[C]) Err() error { return s.failed }

// Verdict returns the first failed check; else, when the run is not
// done, an error saying so with a line per member from describe; else,
// when the rogue sent frames of another group, an error if no member's
// stepper counted one (they must be dropped before the core: frame.
// ParseGroup, core.BadFrames.Group).
func (s *Sim[C]) Verdict(describe func(m *Member[C]) string) error {
	if s.failed != nil {
		return s.failed
	}
	if !s.done() {
		var b strings.Builder
		for _, m := range s.Members {
			fmt.Fprintf(&b, "\n  member %d crashed=%v out=%v proposed=%d next=%v removed=%v %s",
				m.ID, m.EP.Crashed(), m.Out.Kind, m.Proposed, m.Next, m.Removed, describe(m))
		}
		return fmt.Errorf("not finished after %v of virtual time:%s", s.Config.Limit, b.String())
	}
	if s.Foreign > 0 {
		var counted uint64
		for _, m := range s.Members {
			counted += m.Stepper.Counters().Bad.Group
		}
		if counted == 0 {
			return fmt.Errorf("the rogue sent %d frames of another group and no member's stepper counted one (Counters().Bad.Group)", s.Foreign)
		}
	}
	return nil
}

// Crashed reports whether the member's endpoint is down.
func (m *Member[C]) Crashed() bool { return m.EP.Crashed() }

// Left reports whether the member left (SelfLeft); Halted whether it was
// removed and halted (SelfRemoved).
func (m *Member[C]) Left() bool   { return m.Out.Kind == core.SelfLeft }
func (m *Member[C]) Halted() bool { return m.Out.Kind == core.SelfRemoved }

// Step is the event loop: receive and step every queued frame, tick,
// propose, carry out Ready; again until nothing is queued. A member that
// is out (left or halted) reads nothing more and is ticked until its core
// is done.
func (m *Member[C]) Step(now time.Time) time.Time {
	t := m.Sim.Clock.Core(now)
	if m.Out.Kind != 0 {
		if m.Stepper.Done() {
			return time.Time{}
		}
		m.Stepper.Tick(t)
		m.flush()
		return m.deadline()
	}
	for {
		n, _ := m.EP.Recv(time.Time{}, m.rx)
		for _, f := range m.rx[:n] {
			// A frame that does not decode is counted by the stepper, one
			// the core refuses by the core; both change nothing.
			_ = m.Stepper.Step(t, f.Data)
		}
		m.Stepper.Tick(t)
		m.propose(now)
		m.flush()
		if n == 0 || m.Out.Kind != 0 {
			break
		}
	}
	return m.deadline()
}

// deadline is the earlier of the core's deadline and the next burst.
func (m *Member[C]) deadline() time.Time {
	d := m.Stepper.Deadline()
	if m.Proposed < m.Sim.Config.K && !m.Leaving && !m.proposeAt.IsZero() {
		if d == 0 || m.Sim.Clock.Core(m.proposeAt) < d {
			return m.proposeAt
		}
	}
	return m.Sim.Clock.Wall(d)
}

// propose offers the member's messages in bursts with pauses between,
// so that bundling, idle periods and back-pressure all happen.
func (m *Member[C]) propose(now time.Time) {
	k := m.Sim.Config.K
	if m.Leaving || m.Out.Kind != 0 || now.Before(m.proposeAt) {
		return
	}
	t := m.Sim.Clock.Core(now)
	// Datagrams only while the member has messages to send: the member
	// wakes for its bursts only then, and a datagram after its last would
	// wake the others, who would send theirs, until the run ends.
	dg := m.Sim.Config.Datagrams && m.Proposed < k
	for burst := 1 + m.rng.IntN(8); burst > 0 && m.Proposed < k; burst-- {
		m.want = Message(m.want[:0], m.Sim.Config.Seed, m.ID, m.Proposed, m.max)
		err := m.Stepper.Propose(t, m.want)
		if errors.Is(err, core.ErrWindowFull) || errors.Is(err, core.ErrHalted) {
			break
		}
		if err != nil {
			m.Sim.Fail("member %d: Propose message %d: %v", m.ID, m.Proposed, err)
			return
		}
		m.Proposed++
	}
	if dg {
		switch m.rng.IntN(3) {
		case 0:
			m.datagram(t)
		case 1:
			m.dgInTurn = true // flush sends it between Ready and Advance
		}
	}
	m.proposeAt = now.Add(time.Duration(m.rng.IntN(400)) * time.Microsecond)
	if m.Proposed == k && m.LeaveAfter {
		m.Leaving = true
		m.Stepper.Leave(t)
	}
}

// flush carries out Ready: send, deliver (checking every message),
// report (checking every event), Advance.
func (m *Member[C]) flush() {
	rd := m.Stepper.Ready()
	if len(rd.Frames) > 0 {
		if _, err := m.EP.Send(rd.Frames); err != nil && !m.EP.Crashed() {
			m.Sim.Fail("member %d: send: %v", m.ID, err)
		}
	}
	for _, d := range rd.Deliveries {
		if d.Unreliable {
			m.deliverDatagram(d)
			continue
		}
		m.deliver(d)
	}
	for _, ev := range rd.Events {
		m.event(ev)
	}
	if m.dgInTurn {
		m.dgInTurn = false
		m.datagram(m.Sim.Clock.Core(m.Sim.Net.Now())) // between Ready and Advance
	}
	m.Stepper.Advance()
	if m.Sim.OnAdvance != nil {
		m.Sim.OnAdvance(m)
	}
}

// deliver checks that d is the next message of its sender, a member:
// FIFO, exactly once, the bytes it sent, nothing a rogue sent.
func (m *Member[C]) deliver(d core.Delivery) {
	s := m.Sim
	if bytes.HasPrefix(d.Data, []byte(ForeignMarker)) {
		s.Fail("member %d: delivered a frame of another group: %q from %d (seq %d)", m.ID, d.Data, d.From, d.Seq)
		return
	}
	j, ok := s.Index[d.From]
	if !ok || d.From == m.ID && !m.Stepper.Info().SelfDelivery {
		s.Fail("member %d: delivery from %d, not another member (seq %d global %d, %d bytes)", m.ID, d.From, d.Seq, d.Global, len(d.Data))
		return
	}
	idx := m.Next[j]
	if idx >= s.Config.K {
		s.Fail("member %d: message %d from member %d, but it sent only %d (seq %d global %d)", m.ID, idx, d.From, s.Config.K, d.Seq, d.Global)
		return
	}
	m.want = Message(m.want[:0], s.Config.Seed, d.From, idx, s.Members[j].max)
	if !bytes.Equal(d.Data, m.want) {
		s.Fail("member %d: message %d from member %d (seq %d index %d global %d): got %d bytes %.16x…, want %d bytes %.16x…",
			m.ID, idx, d.From, d.Seq, d.Index, d.Global, len(d.Data), d.Data, len(m.want), m.want)
		return
	}
	m.Next[j]++
	if s.OnDelivery != nil {
		s.OnDelivery(m, d, idx)
	}
}

// event keeps Out and Removed: a member is removed at most once until it
// returns, and only a member other than this one.
func (m *Member[C]) event(ev core.Event) {
	s := m.Sim
	switch ev.Kind {
	case core.SelfLeft, core.SelfRemoved:
		m.Out = ev
	case core.MemberFailed, core.MemberStalled, core.MemberLeft, core.MemberReturned:
		j, ok := s.Index[ev.Member]
		if !ok || ev.Member == m.ID {
			s.Fail("member %d: %v names a stranger or itself", m.ID, ev)
			return
		}
		switch {
		case ev.Kind == core.MemberReturned:
			if m.Removed[j] == 0 {
				s.Fail("member %d: %v, but it was not removed", m.ID, ev)
			}
			m.Removed[j] = 0
		case m.Removed[j] != 0:
			s.Fail("member %d: second removal of member %d: %v", m.ID, ev.Member, ev)
		default:
			m.Removed[j] = ev.Kind
		}
	}
	if s.OnEvent != nil {
		s.OnEvent(m, ev)
	}
}

// dgMagic starts every datagram of the simulation; the datagram's number
// follows (4 bytes), then Message's bytes for index dgBase+number.
const (
	dgMagic = "dgm:"
	dgBase  = 1 << 24
)

// datagram proposes this member's next datagram.
func (m *Member[C]) datagram(t core.Time) {
	b := binary.BigEndian.AppendUint32([]byte(dgMagic), uint32(m.DgSent))
	b = Message(b, m.Sim.Config.Seed, m.ID, dgBase+m.DgSent, m.max-len(b))
	err := m.Stepper.ProposeUnreliable(t, b)
	switch {
	case err == nil:
		m.DgSent++
	case errors.Is(err, core.ErrLeaving), errors.Is(err, core.ErrHalted):
	default:
		m.Sim.Fail("member %d: ProposeUnreliable datagram %d: %v", m.ID, m.DgSent, err)
	}
}

// deliverDatagram checks a datagram: another member's, sent by it, the
// bytes it sent, delivered here at most once.
func (m *Member[C]) deliverDatagram(d core.Delivery) {
	s := m.Sim
	j, ok := s.Index[d.From]
	if !ok || d.From == m.ID || len(d.Data) < len(dgMagic)+4 || string(d.Data[:len(dgMagic)]) != dgMagic {
		s.Fail("member %d: datagram from %d, not another member's, or not a datagram: %.24x", m.ID, d.From, d.Data)
		return
	}
	n := int(binary.BigEndian.Uint32(d.Data[len(dgMagic):]))
	o := s.Members[j]
	want := binary.BigEndian.AppendUint32([]byte(dgMagic), uint32(n))
	want = Message(want, s.Config.Seed, o.ID, dgBase+n, o.max-len(want))
	switch {
	case n >= o.DgSent:
		s.Fail("member %d: datagram %d from member %d, which sent %d", m.ID, n, d.From, o.DgSent)
	case !bytes.Equal(d.Data, want):
		s.Fail("member %d: datagram %d from member %d: got %d bytes %.16x…, want %d bytes %.16x…", m.ID, n, d.From, len(d.Data), d.Data, len(want), want)
	case m.DgGot[j][n]:
		s.Fail("member %d: datagram %d from member %d delivered twice", m.ID, n, d.From)
	default:
		m.DgGot[j][n] = true
	}
}

// Message returns message idx of sender, appended to b: its size and
// bytes are a function of (seed, sender, idx), so receivers regenerate
// and compare them. Half are small (bundles), a third middling, the rest
// up to maxLen.
func Message(b []byte, seed uint64, sender frame.MemberID, idx, maxLen int) []byte {
	h := mix(seed ^ mix(uint64(sender)<<32|uint64(idx)))
	var n int
	switch h % 10 {
	case 0, 1, 2, 3, 4:
		n = int(h>>8) % 65
	case 5, 6, 7:
		n = int(h>>8) % 513
	default:
		n = int(h>>8) % (maxLen + 1)
	}
	n = min(n, maxLen)
	x := h
	for i := range n {
		if i%8 == 0 {
			x = mix(x)
		}
		b = append(b, byte(x>>(8*(i%8))))
	}
	return b
}

// mix is SplitMix64's finalizer.
func mix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}
