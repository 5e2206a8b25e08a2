package seq

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/link"
	"github.com/rbcast/rbcast/testnet"
)

// The deterministic simulation: members running the core on testnet's
// simulated segment with seeded loss, bursts, duplication, reordering,
// jitter, corruption, queue overflow, and crashes of ordinary members and
// of the sequencer (mid-stream, and twice in a row). Every seed is one
// reproducible scenario.

// mix is SplitMix64's finalizer: message sizes and bytes are a function of
// (seed, sender, index), so receivers regenerate and compare them.
func mix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// message returns message idx of sender, appended to b.
func message(b []byte, seed uint64, sender frame.MemberID, idx, maxLen int) []byte {
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

type crashKind uint8

const (
	noCrash crashKind = iota
	memberCrash
	sequencerCrash
	sequencerTwice // the first sequencer, then its successor
)

func (k crashKind) String() string {
	return [...]string{"none", "member", "sequencer", "sequencer-twice"}[k]
}

// scenario is one seed's configuration.
type scenario struct {
	seed          uint64
	method        Method
	threshold     int
	members       int
	k             int // messages per member
	window        int
	history       int
	initialGlobal uint32
	mtu           int
	maxPayload    int
	queueLen      int
	in, out       testnet.Impairment
	crash         crashKind
	crashMember   int // memberCrash: the member index
	crashAt       time.Duration
	crashGap      time.Duration // sequencerTwice: second crash this long after the first
	quorum        int
	cutMember     int // cut off by a partition, -1 none
	cutAt, cutFor time.Duration
	resilience    Resilience
}

func (s scenario) String() string {
	return fmt.Sprintf("seed=%d %v threshold=%d members=%d k=%d window=%d history=%d initialGlobal=%d mtu=%d maxPayload=%d queue=%d in={loss %.2f burst %+v dup %.2f reorder %.2f jitter %v corrupt %.3f} out={loss %.2f} crash=%v member=%d at=%v gap=%v quorum=%d cut=%d at=%v for=%v resilience=%v",
		s.seed, s.method, s.threshold, s.members, s.k, s.window, s.history, s.initialGlobal, s.mtu, s.maxPayload, s.queueLen,
		s.in.Loss, s.in.Burst, s.in.Duplicate, s.in.Reorder, s.in.Jitter, s.in.Corrupt, s.out.Loss, s.crash, s.crashMember, s.crashAt, s.crashGap, s.quorum, s.cutMember, s.cutAt, s.cutFor, s.resilience)
}

func newScenario(seed uint64) scenario {
	r := rand.New(rand.NewPCG(seed, 0x5e9))
	s := scenario{seed: seed, mtu: 1500}
	s.method = Method(seed % 3)
	if s.method == Hybrid {
		s.threshold = []int{0, 1, 64, 300, 1000}[r.IntN(5)]
	}
	switch r.IntN(10) {
	case 0:
		s.members = 1 + r.IntN(2)
	case 1, 2, 3, 4, 5:
		s.members = 3 + r.IntN(2)
	default:
		s.members = 5 + r.IntN(4)
	}
	s.k = 5 + r.IntN(36)
	s.window = []int{0, 1, 3, 8, 16}[r.IntN(5)]
	s.history = []int{0, 8, 16, 64, 256}[r.IntN(5)]
	if r.IntN(3) == 0 {
		s.initialGlobal = ^uint32(0) - uint32(r.IntN(60)) // wraps during the run
	} else {
		s.initialGlobal = r.Uint32()
	}
	if r.IntN(8) == 0 {
		s.mtu = 9000
	}
	if r.IntN(4) == 0 {
		s.maxPayload = 100 + r.IntN(400)
	}
	if r.IntN(5) == 0 {
		s.queueLen = 4 + r.IntN(16)
	}
	maxLoss := []float64{0, 0.01, 0.05, 0.1, 0.2, 0.3}[r.IntN(6)]
	s.in.Loss = r.Float64() * maxLoss
	if r.IntN(4) == 0 {
		s.in.Burst = testnet.GilbertElliott{GoodToBad: 0.01 + 0.04*r.Float64(), BadToGood: 0.2 + 0.5*r.Float64(), LossBad: 0.5 + 0.5*r.Float64()}
	}
	if r.IntN(3) == 0 {
		s.out.Loss = r.Float64() * maxLoss / 2
	}
	if r.IntN(3) == 0 {
		s.in.Duplicate = 0.05 * r.Float64()
	}
	if r.IntN(3) == 0 {
		s.in.Reorder, s.in.ReorderDelay = 0.05*r.Float64(), time.Duration(50+r.IntN(500))*time.Microsecond
	}
	if r.IntN(3) == 0 {
		s.in.Jitter = time.Duration(r.IntN(100)) * time.Microsecond
	}
	if r.IntN(4) == 0 {
		s.in.Corrupt = 0.02 * r.Float64()
	}
	if s.members > 1 {
		switch r.IntN(8) {
		case 0:
			s.crash, s.crashMember = memberCrash, 1+r.IntN(s.members-1)
		case 1, 2:
			s.crash = sequencerCrash
		case 3:
			if s.members > 2 {
				s.crash = sequencerTwice
				s.crashGap = []time.Duration{time.Millisecond, simFailureTimeout, simFailureTimeout + simFailureTimeout/2, 3 * simFailureTimeout}[r.IntN(4)]
			}
		}
		s.crashAt = time.Duration(r.IntN(6_000)) * time.Microsecond
	}
	survivors := s.members
	switch s.crash {
	case memberCrash, sequencerCrash:
		survivors--
	case sequencerTwice:
		survivors -= 2
	}
	if survivors < s.members/2+1 || r.IntN(2) == 0 {
		s.quorum = 1 // crash-stop: any survivor carries on
	}
	s.cutMember = -1
	if s.crash == noCrash && s.members >= 3 && r.IntN(6) == 0 {
		// One member cut off from the others, briefly or past the
		// failure timeout, then back. With a majority quorum the cut
		// member cannot elect itself; a cut sequencer is replaced and
		// halts when it hears of the new epoch.
		s.quorum = 0
		s.cutMember = r.IntN(2) * (1 + r.IntN(s.members-1)) // the sequencer half the time
		s.cutAt = time.Duration(r.IntN(5_000)) * time.Microsecond
		s.cutFor = []time.Duration{simFailureTimeout / 2, 3 * simFailureTimeout}[r.IntN(2)]
	}
	if r.IntN(4) == 0 {
		s.resilience = SafeSequencer
	}
	return s
}

// The simulation's timeouts: shorter than the defaults so that crash
// scenarios take less virtual time; the same ratios.
// An election excludes a live member only when FailureTimeout/ElectionRetry
// of its election frames in a row are lost: testnet's Gilbert–Elliott
// chain moves once per frame, so at election rates a bad state lasts long
// in time; 40 frames keep that improbable.
const (
	simHeartbeat      = 20 * time.Millisecond
	simFailureTimeout = 200 * time.Millisecond
	simElectionRetry  = 5 * time.Millisecond
)

// rec is one delivery as the checkers see it, or a change of the member
// list delivered in its place (change set, from the member it names).
type rec struct {
	from   frame.MemberID
	idx    int
	global uint32
	epoch  uint32
	change EventKind // MemberFailed or MemberReturned; 0 for a message
}

// simMember adapts a Core to testnet.Node.
type simMember struct {
	run   *simRun
	index int
	id    frame.MemberID
	core  *Core
	ep    *testnet.Endpoint
	rx    []link.Frame
	rng   *rand.Rand

	proposed  int
	proposeAt time.Time

	next      []int // per member index: next message index expected
	log       []rec
	halted    bool
	haltEvent Event
	badRx     int
	want      []byte
	lastG     uint32
	lastIdx   int
}

type simRun struct {
	t         testing.TB
	s         scenario
	members   []*simMember
	ids       map[frame.MemberID]int
	net       *testnet.Network
	group     uint32
	failed    error
	sequencer map[uint32]frame.MemberID // epoch -> sequencer, from SequencerChanged
	crashed   map[frame.MemberID]bool
	returned  map[frame.MemberID]bool // removed once by a sequencer: it may have been taken back
	outside   int                     // divergences outside the guarantee (see verdict)
	crashes   int                     // crashes still to happen
}

func (r *simRun) fail(format string, args ...any) {
	if r.failed == nil {
		r.failed = fmt.Errorf(format, args...)
	}
}

func toTime(t time.Time) Time { return Time(t.UnixNano()) }

func (m *simMember) Step(now time.Time) time.Time {
	t := toTime(now)
	if m.halted {
		return time.Time{}
	}
	for {
		n, _ := m.ep.Recv(time.Time{}, m.rx)
		for _, f := range m.rx[:n] {
			eth, body, err := frame.SplitEthernet(f.Data, frame.EtherType)
			if err != nil {
				m.badRx++
				continue
			}
			v, err := frame.ParseGroup(body, m.run.group)
			if err != nil {
				m.badRx++
				continue
			}
			m.core.Step(t, eth.Src(), frame.Broadcast, v)
		}
		m.core.Tick(t)
		m.propose(now)
		m.flush()
		if n == 0 || m.halted {
			break
		}
	}
	return m.deadline()
}

func (m *simMember) deadline() time.Time {
	d := m.core.Deadline()
	if m.proposed < m.run.s.k && !m.proposeAt.IsZero() {
		if d == 0 || toTime(m.proposeAt) < d {
			return m.proposeAt
		}
	}
	if d == 0 {
		return time.Time{}
	}
	return time.Unix(0, int64(d))
}

// propose offers the member's messages in bursts with pauses between.
func (m *simMember) propose(now time.Time) {
	s := m.run.s
	if now.Before(m.proposeAt) || m.halted {
		return
	}
	for burst := 1 + m.rng.IntN(8); burst > 0 && m.proposed < s.k; burst-- {
		m.want = message(m.want[:0], s.seed, m.id, m.proposed, m.core.cfg.maxPayload)
		err := m.core.Propose(toTime(now), m.want)
		if errors.Is(err, ErrWindowFull) || errors.Is(err, ErrHalted) {
			break
		}
		if err != nil {
			m.run.fail("member %d: Propose message %d: %v", m.id, m.proposed, err)
			return
		}
		m.proposed++
	}
	m.proposeAt = now.Add(time.Duration(m.rng.IntN(400)) * time.Microsecond)
}

func (m *simMember) flush() {
	rd := m.core.Ready()
	if len(rd.Frames) > 0 {
		if _, err := m.ep.Send(rd.Frames); err != nil && !m.ep.Crashed() {
			m.run.fail("member %d: send: %v", m.id, err)
		}
	}
	for _, d := range rd.Deliveries {
		m.check(d)
	}
	for _, ev := range rd.Events {
		switch ev.Kind {
		case SelfRemoved:
			m.halted, m.haltEvent = true, ev
		case SequencerChanged:
			if prev, ok := m.run.sequencer[ev.Epoch]; ok && prev != ev.Member {
				m.run.fail("member %d: epoch %d has sequencer %d, another member saw %d", m.id, ev.Epoch, ev.Member, prev)
			}
			m.run.sequencer[ev.Epoch] = ev.Member
		case MemberFailed, MemberReturned:
			m.checkChange(ev)
		}
	}
	if !m.halted {
		m.selfChanges(m.core.next)
	}
	m.core.Advance()
	m.checkHeld()
}

// expected is the global number the next delivery must have.
func (m *simMember) expected() uint32 {
	if len(m.log) == 0 {
		return m.run.s.initialGlobal
	}
	return m.lastG + 1
}

// selfChanges records the changes of this member itself (removed, taken
// back) delivered before global to: the core reports none, but they take
// their place in the sequence the checkers compare.
func (m *simMember) selfChanges(to uint32) {
	for g := m.expected(); frame.SeqLess(g, to); g++ {
		en := &m.core.log[g&m.core.lmask]
		if en.global != g || en.change == 0 || en.uid.Origin != m.id {
			return // the check that follows reports the gap
		}
		k := MemberReturned
		if en.change == frame.MemberRemoved {
			k = MemberFailed
		}
		m.lastG, m.lastIdx = g, 0
		m.log = append(m.log, rec{from: m.id, global: g, epoch: en.epoch, change: k})
	}
}

// checkHeld: the sequencer's all-held cursor never exceeds the received
// cursor of a member it counts as live (read from that member's core).
// A member taken back after a removal is exempt: it was not live when
// the cursor passed it (held.go).
func (m *simMember) checkHeld() {
	c := m.core
	if c.role != sequencer {
		return
	}
	for _, o := range m.run.members {
		if !c.members[c.byID[o.id]].live {
			m.run.returned[o.id] = true
		}
		if o == m || !c.members[c.byID[o.id]].live || m.run.returned[o.id] {
			continue
		}
		if frame.SeqLess(o.core.recvd, c.held) {
			m.run.fail("sequencer %d: all-held cursor %d, but live member %d holds only up to %d (its received cursor)", m.id, c.held, o.id, o.core.recvd)
		}
	}
}

// checkChange: a change of the member list is delivered in its place,
// the global number after the last delivery's (ev.Last is the one before).
func (m *simMember) checkChange(ev Event) {
	m.selfChanges(ev.Last + 1)
	wantG := m.expected()
	if ev.Last+1 != wantG {
		m.run.fail("member %d: %v at global %d, after global %d", m.id, ev, ev.Last+1, m.lastG)
		return
	}
	if _, ok := m.run.ids[ev.Member]; !ok || ev.Member == m.id {
		m.run.fail("member %d: %v names a stranger or itself", m.id, ev)
		return
	}
	m.lastG, m.lastIdx = wantG, 0
	m.log = append(m.log, rec{from: ev.Member, global: wantG, epoch: ev.Epoch, change: ev.Kind})
}

func (m *simMember) check(d Delivery) {
	j, ok := m.run.ids[d.From]
	if !ok {
		m.run.fail("member %d: delivery from %d, not a member (global %d)", m.id, d.From, d.Global)
		return
	}
	// Positions are consecutive global numbers; a bundle shares one.
	if d.Index == 0 {
		m.selfChanges(d.Global)
	}
	wantG := m.run.s.initialGlobal + uint32(len(m.log))
	if len(m.log) > 0 {
		wantG = m.lastG + 1
		if d.Index > 0 {
			wantG = m.lastG
		}
	}
	if d.Global != wantG || (d.Index > 0 && d.Index != m.lastIdx+1) {
		m.run.fail("member %d: delivered global %d index %d after global %d index %d", m.id, d.Global, d.Index, m.lastG, m.lastIdx)
		return
	}
	m.lastG, m.lastIdx = d.Global, d.Index
	idx := m.next[j]
	if idx >= m.run.s.k {
		m.run.fail("member %d: message %d from member %d, but it sent only %d (global %d)", m.id, idx, d.From, m.run.s.k, d.Global)
		return
	}
	m.want = message(m.want[:0], m.run.s.seed, d.From, idx, m.run.members[j].core.cfg.maxPayload)
	if !bytes.Equal(d.Data, m.want) {
		m.run.fail("member %d: message %d from member %d (global %d index %d): got %d bytes %.16x…, want %d bytes %.16x…",
			m.id, idx, d.From, d.Global, d.Index, len(d.Data), d.Data, len(m.want), m.want)
		return
	}
	m.next[j]++
	m.log = append(m.log, rec{from: d.From, idx: idx, global: d.Global, epoch: d.Epoch})
}

// survivor: neither crashed, nor halted, nor cut off past the failure
// timeout (such a member is treated as crashed: removed, it may stall).
func (m *simMember) survivor() bool {
	return !m.ep.Crashed() && !m.halted && !m.run.crashed[m.id]
}

// done reports whether every survivor has everything every survivor sent,
// all survivors delivered the same number of messages, and each knows
// that every live member holds all of its messages (the all-held cursor
// passed them: after a crash, once the sequencer removed the dead).
func (r *simRun) done() bool {
	if r.crashes > 0 {
		return false
	}
	n := -1
	for _, m := range r.members {
		if !m.survivor() {
			continue
		}
		if m.proposed < r.s.k || m.core.outstanding() > 0 || m.core.open || m.core.role == electing || m.core.Counters().NotHeldByAll > 0 {
			return false
		}
		if !r.members[r.ids[m.core.sequencerMember().id]].survivor() {
			return false // not done before a live sequencer is in place
		}
		for j, o := range r.members {
			if o.survivor() && m.next[j] < r.s.k {
				return false
			}
		}
		if n >= 0 && len(m.log) != n {
			return false
		}
		n = len(m.log)
	}
	// Every crashed member is removed, and every survivor delivered its
	// removal (everything the sequencer numbered).
	var sq *Core
	for _, m := range r.members {
		if m.survivor() && m.core.role == sequencer {
			sq = m.core
		}
	}
	if sq == nil {
		return n < 0
	}
	for _, m := range r.members {
		if m.ep.Crashed() && sq.members[sq.byID[m.id]].streamLive {
			return false
		}
		if m.survivor() && m.core.next != sq.nextGlobal {
			return false
		}
	}
	return true
}

// runScenario runs one seed to completion or to its virtual time bound.
func runScenario(t testing.TB, s scenario, trace ...func(testnet.Event)) *simRun {
	net, err := testnet.New(s.seed, testnet.Config{})
	if err != nil {
		t.Fatal(err)
	}
	for _, fn := range trace {
		net.Trace(fn)
	}
	r := &simRun{t: t, s: s, net: net, group: 0x5e90 + uint32(s.seed%7), ids: map[frame.MemberID]int{},
		sequencer: map[uint32]frame.MemberID{}, crashed: map[frame.MemberID]bool{}, returned: map[frame.MemberID]bool{}}
	var infos []frame.MemberInfo
	for i := range s.members {
		ep, err := net.Attach(testnet.EndpointConfig{MTU: s.mtu, QueueLen: s.queueLen, In: s.in, Out: s.out})
		if err != nil {
			t.Fatal(err)
		}
		id := frame.MemberID(i)
		if s.seed%5 == 1 {
			id = frame.MemberID(10 + 3*i)
		}
		infos = append(infos, frame.MemberInfo{ID: id, MAC: [6]byte(ep.HardwareAddr()), Incarnation: uint32(s.seed) + uint32(i)})
		r.ids[id] = i
		r.members = append(r.members, &simMember{run: r, index: i, id: id, ep: ep,
			rx: make([]link.Frame, 32), rng: rand.New(rand.NewPCG(s.seed, uint64(i))),
			next: make([]int, s.members)})
	}
	for _, m := range r.members {
		cfg := Config{Group: r.group, Self: m.id, Members: infos, Method: s.method, Threshold: s.threshold,
			Window: s.window, History: s.history, MTU: s.mtu, MaxPayload: s.maxPayload, InitialGlobal: s.initialGlobal,
			Quorum: s.quorum, Resilience: s.resilience, HeartbeatInterval: Duration(simHeartbeat), FailureTimeout: Duration(simFailureTimeout), ElectionRetry: Duration(simElectionRetry)}
		if m.core, err = New(cfg); err != nil {
			t.Fatalf("%v: New: %v", s, err)
		}
	}
	r.sequencer[DefaultInitialEpoch] = r.members[0].id
	for _, m := range r.members {
		m.core.Tick(toTime(net.Now()))
		m.ep.Bind(m)
	}
	crash := func(i int) func() {
		r.crashes++
		return func() {
			r.crashes--
			r.crashed[r.members[i].id] = true
			r.members[i].ep.Crash()
		}
	}
	if s.cutMember >= 0 {
		cut := r.members[s.cutMember]
		var rest []*testnet.Endpoint
		for _, m := range r.members {
			if m != cut {
				rest = append(rest, m.ep)
			}
		}
		r.crashes++
		net.AfterFunc(s.cutAt, func() {
			if err := net.Partition([]*testnet.Endpoint{cut.ep}, rest); err != nil {
				r.fail("partition: %v", err)
			}
			if s.cutFor >= simFailureTimeout {
				r.crashed[cut.id] = true
			}
		})
		net.AfterFunc(s.cutAt+s.cutFor, func() {
			r.crashes--
			net.Heal()
		})
	}
	switch s.crash {
	case memberCrash:
		net.AfterFunc(s.crashAt, crash(s.crashMember))
	case sequencerCrash:
		net.AfterFunc(s.crashAt, crash(0))
	case sequencerTwice:
		net.AfterFunc(s.crashAt, crash(0))
		net.AfterFunc(s.crashAt+s.crashGap, crash(1))
	}
	limit := net.Now().Add(simTimeLimit)
	for !r.done() && r.failed == nil && net.Now().Before(limit) {
		net.RunFor(5 * time.Millisecond)
	}
	if s.cutMember >= 0 && r.failed == nil {
		// Let the healed member hear the group: a replaced sequencer
		// must halt, and nobody else may. A member removed while cut off
		// may be taken back (readmit) and send again: the survivors
		// must then deliver that too.
		net.RunFor(3 * simHeartbeat)
		for !r.done() && r.failed == nil && net.Now().Before(limit) {
			net.RunFor(5 * time.Millisecond)
		}
	}
	return r
}

const simTimeLimit = 30 * time.Second

// verdict checks the guarantees (docs/protocols.md, "Sequencer"):
//   - agreement: survivors delivered identical sequences; a crashed
//     member's sequence is a prefix of theirs, except where the guarantee
//     does not reach: from a position it got from a sequencer that crashed
//     and that the survivors got from a later epoch (no survivor held the
//     message when the election agreed);
//   - integrity: checked at each delivery (exactly once, bytes equal, only
//     what was sent, consecutive global numbers);
//   - validity: every survivor delivered every message of every survivor;
//   - no survivor halted, no survivor was removed by the sequencer.
func (r *simRun) verdict() error {
	if r.failed != nil {
		return r.failed
	}
	for _, m := range r.members {
		if m.halted && !r.crashed[m.id] {
			return fmt.Errorf("member %d halted: %v; %+v", m.id, m.haltEvent, m.core.Counters())
		}
	}
	if !r.done() {
		var b strings.Builder
		for _, m := range r.members {
			st := m.core.Counters()
			fmt.Fprintf(&b, "\n  member %d crashed=%v halted=%v proposed=%d outstanding=%d delivered=%d next=%v stats=%+v",
				m.id, m.ep.Crashed(), m.halted, m.proposed, m.core.outstanding(), len(m.log), m.next, st)
		}
		return fmt.Errorf("not finished after %v of virtual time:%s", simTimeLimit, b.String())
	}
	var ref *simMember
	for _, m := range r.members {
		if m.survivor() {
			ref = m
			break
		}
	}
	if ref == nil {
		return nil
	}
	// Told is never lost while a majority survives: with SafeMajority and
	// the majority quorum (chosen only when a majority survives), what
	// any member delivered — a crashed or halted one, its own messages
	// included — every survivor delivers, at the same place.
	strict := r.s.resilience == SafeMajority && r.s.quorum == 0
	for _, m := range r.members {
		if m == ref {
			continue
		}
		for i, x := range m.log {
			if i >= len(ref.log) {
				if strict && !m.survivor() {
					return fmt.Errorf("member %d (not a survivor) delivered %d messages, beyond the %d of survivor %d: message %d/%d (global %d) is lost although a majority survives",
						m.id, len(m.log), len(ref.log), ref.id, x.from, x.idx, x.global)
				}
				if m.survivor() {
					return fmt.Errorf("member %d delivered %d messages, member %d %d", m.id, len(m.log), ref.id, len(ref.log))
				}
				break
			}
			y := ref.log[i]
			if x.from == y.from && x.idx == y.idx && x.global == y.global && x.change == y.change {
				continue
			}
			if !strict && !m.survivor() && x.epoch != y.epoch && frame.SeqLess(x.epoch, y.epoch) && r.crashed[r.sequencer[x.epoch]] {
				r.outside++
				break
			}
			return fmt.Errorf("position %d: member %d delivered %d/%d%v (global %d epoch %d), member %d delivered %d/%d%v (global %d epoch %d)",
				i, m.id, x.from, x.idx, x.change, x.global, x.epoch, ref.id, y.from, y.idx, y.change, y.global, y.epoch)
		}
	}
	// Every survivor learnt of each crash once, in its place (the logs
	// are identical): MemberFailed for the crashed member, last of its
	// changes, and as many MemberReturned before as it had false
	// removals.
	for _, o := range r.members {
		if !o.ep.Crashed() {
			continue
		}
		var failed, returned int
		var lastKind EventKind
		for _, x := range ref.log {
			if x.change != 0 && x.from == o.id {
				lastKind = x.change
				if x.change == MemberFailed {
					failed++
				} else {
					returned++
				}
			}
		}
		if lastKind != MemberFailed || failed != returned+1 {
			return fmt.Errorf("crashed member %d: survivor %d delivered %d MemberFailed and %d MemberReturned for it (last %v), want exactly one removal it stays in", o.id, ref.id, failed, returned, lastKind)
		}
	}
	for _, m := range r.members {
		if !m.survivor() {
			continue
		}
		for _, o := range r.members {
			if o.survivor() && !m.core.members[m.core.byID[o.id]].live && m.core.role == sequencer {
				return fmt.Errorf("sequencer %d removed live member %d", m.id, o.id)
			}
		}
	}
	return nil
}

func seedCount(t *testing.T) int {
	if v := os.Getenv("RBCAST_SEEDS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("RBCAST_SEEDS=%q: want a positive number", v)
		}
		return n
	}
	if testing.Short() {
		return 200
	}
	return 1500
}

// TestSim runs many seeded scenarios. A failing seed prints the command
// that runs it alone.
func TestSim(t *testing.T) {
	n := seedCount(t)
	var ran, changes, outside, crashes, cuts, halts, retx, removals atomic.Int64
	t.Cleanup(func() {
		t.Logf("%d seeds passed: %d with crashes, %d with a member cut off, %d sequencer changes seen, %d cut members halted, %d retransmission answers, %d crashed-member divergences outside the guarantee, %d removals delivered by survivors",
			ran.Load(), crashes.Load(), cuts.Load(), changes.Load(), halts.Load(), retx.Load(), outside.Load(), removals.Load())
	})
	for seed := uint64(1); seed <= uint64(n); seed++ {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			t.Parallel()
			s := newScenario(seed)
			r := runScenario(t, s)
			if err := r.verdict(); err != nil {
				t.Fatalf("%v\nscenario: %v\nre-run: RBCAST_SEEDS=%d go test ./reliable/seq -run '^TestSim$/^seed=%d$' -v", err, s, seed, seed)
			}
			ran.Add(1)
			if s.crash != noCrash {
				crashes.Add(1)
			}
			if s.cutMember >= 0 {
				cuts.Add(1)
				if r.members[s.cutMember].halted {
					halts.Add(1)
				}
			}
			changes.Add(int64(len(r.sequencer) - 1))
			outside.Add(int64(r.outside))
			for _, m := range r.members {
				retx.Add(int64(m.core.Counters().RetransmitsAnswered))
				if m.survivor() {
					removals.Add(int64(m.core.Counters().MembersFailed))
				}
			}
		})
	}
}

// TestSimDeterministic runs seeds twice: the same seed must give the same
// frames at the same virtual instants, or a failing seed would not replay.
func TestSimDeterministic(t *testing.T) {
	for seed := uint64(1); seed <= 20; seed++ {
		var sums [2]uint64
		var events [2]uint64
		for i := range sums {
			h := testnet.NewTraceHash()
			r := runScenario(t, newScenario(seed), h.Add)
			if err := r.verdict(); err != nil {
				t.Fatalf("seed %d: %v", seed, err)
			}
			sums[i], events[i] = h.Sum(), h.Events()
		}
		if sums[0] != sums[1] || events[0] != events[1] {
			t.Fatalf("seed %d: trace %x (%d events) then %x (%d events)", seed, sums[0], events[0], sums[1], events[1])
		}
	}
}
