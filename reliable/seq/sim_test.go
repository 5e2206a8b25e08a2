package seq

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/reliable/internal/simtest"
	"github.com/rbcast/rbcast/testnet"
)

// The deterministic simulation (package simtest): members running the
// core on testnet's simulated segment with seeded loss, bursts,
// duplication, reordering, jitter, corruption, queue overflow, crashes
// of ordinary members and of the sequencer (mid-stream, and twice in a
// row), and clean leaves: ordinary members, the sequencer, everyone (as
// programs that Close when done), before, during and after elections,
// one leaver crashing right after its first Leave frame. Every seed is
// one reproducible scenario.

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
	link          simtest.Link
	crash         crashKind
	crashMember   int // memberCrash: the member index
	crashAt       time.Duration
	crashGap      time.Duration // sequencerTwice: second crash this long after the first
	quorum        int
	cutMember     int // cut off by a partition, -1 none
	cutAt, cutFor time.Duration
	resilience    Resilience
	leaves        []leave // members that leave cleanly
	leaveCrash    int     // the member index that crashes right after its first Leave frame, -1 none
}

// leave is one member's clean departure: it calls Leave once it has
// proposed its messages and at has passed.
type leave struct {
	member int
	at     time.Duration
}

func (s scenario) String() string {
	return fmt.Sprintf("seed=%d %v threshold=%d members=%d k=%d window=%d history=%d initialGlobal=%d %v crash=%v member=%d at=%v gap=%v quorum=%d cut=%d at=%v for=%v resilience=%v leaves=%v leaveCrash=%d",
		s.seed, s.method, s.threshold, s.members, s.k, s.window, s.history, s.initialGlobal, s.link, s.crash, s.crashMember, s.crashAt, s.crashGap, s.quorum, s.cutMember, s.cutAt, s.cutFor, s.resilience, s.leaves, s.leaveCrash)
}

// crashing reports whether member index i crashes in the scenario.
func (s scenario) crashing(i int) bool {
	switch s.crash {
	case memberCrash:
		return i == s.crashMember
	case sequencerCrash:
		return i == 0
	case sequencerTwice:
		return i == 0 || i == 1
	}
	return false
}

// leaver reports whether member index i leaves in the scenario.
func (s scenario) leaver(i int) bool {
	for _, l := range s.leaves {
		if l.member == i {
			return true
		}
	}
	return false
}

func newScenario(seed uint64) scenario {
	r := rand.New(rand.NewPCG(seed, 0x5e9))
	s := scenario{seed: seed}
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
	s.link = simtest.DrawLink(r)
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
	drawLeaves(r, &s)
	return s
}

// drawLeaves adds clean leaves to a third of the scenarios without a
// partition (drawn last, so that the rest of each seed's scenario is what
// it was before leaves were added): everyone that does not crash (as
// programs that Close when done: the Orca simulation's pattern), the
// sequencer with some others, or some ordinary members. Each leaves at
// once, a few milliseconds in, or up to three failure timeouts in (after
// an election). In a quarter of them one leaver crashes right after its
// first Leave frame, so that the others may miss its departure.
func drawLeaves(r *rand.Rand, s *scenario) {
	s.leaveCrash = -1
	if s.members < 2 || s.cutMember >= 0 || r.IntN(3) != 0 {
		return
	}
	kind := r.IntN(3)
	for i := range s.members {
		if s.crashing(i) {
			continue
		}
		var in bool
		switch kind {
		case 0:
			in = true
		case 1:
			in = i == 0 || r.IntN(3) == 0
		default:
			in = r.IntN(2) == 0
		}
		if !in {
			continue
		}
		var at time.Duration
		switch r.IntN(3) {
		case 1:
			at = time.Duration(r.IntN(8_000)) * time.Microsecond
		case 2:
			at = time.Duration(r.IntN(int(3*simFailureTimeout/time.Microsecond))) * time.Microsecond
		}
		s.leaves = append(s.leaves, leave{member: i, at: at})
	}
	if len(s.leaves) > 0 && r.IntN(4) == 0 {
		s.leaveCrash = s.leaves[r.IntN(len(s.leaves))].member
	}
	// The members that stay (neither crash nor leave) must be a majority
	// of the group for the majority quorum, or an election after a
	// departure they missed or a crash may never complete (a minority
	// cannot tell a crash from a partition). When everyone leaves, the
	// hand-off and the leavers' not waiting for elections after it get
	// everyone out under the majority quorum, but after a crash a leaver
	// whose last requests wait for the crash's election may be in a
	// minority too.
	stay := 0
	for i := range s.members {
		if !s.crashing(i) && !s.leaver(i) {
			stay++
		}
	}
	if stay > 0 && stay < s.members/2+1 || stay == 0 && s.crash != noCrash {
		s.quorum = 1
	}
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

// order is one member's delivered sequence, as the total-order checkers
// compare it: messages and changes of the member list, each at its global
// number.
type order struct {
	log     []rec
	started bool // something was delivered
	lastG   uint32
	lastIdx int
}

type simMember = simtest.Member[*Core]

// simRun is one seed's run, with the sequencer's checks on top of the
// harness's (each delivery the next message of its sender, removals once
// until a return).
type simRun struct {
	*simtest.Sim[*Core]
	s         scenario
	order     []order                   // by member index
	sequencer map[uint32]frame.MemberID // epoch -> sequencer, from SequencerChanged
	crashed   map[frame.MemberID]bool
	returned  map[frame.MemberID]bool // removed once by a sequencer: it may have been taken back
	outside   int                     // divergences outside the guarantee (see verdict)
	crashes   int                     // crashes still to happen
}

// event checks the sequencer's events: one sequencer per epoch, and
// changes of the member list in their place.
func (r *simRun) event(m *simMember, ev Event) {
	switch ev.Kind {
	case SequencerChanged:
		if prev, ok := r.sequencer[ev.Epoch]; ok && prev != ev.Member {
			r.Fail("member %d: epoch %d has sequencer %d, another member saw %d", m.ID, ev.Epoch, ev.Member, prev)
		}
		r.sequencer[ev.Epoch] = ev.Member
	case MemberFailed, MemberReturned:
		r.checkChange(m, ev)
	case SelfLeft:
		if m.Index == r.s.leaveCrash {
			m.EP.Crash() // its first Leave frame is out, the repeats are not
		}
	}
}

// advanced runs after each Ready was carried out.
func (r *simRun) advanced(m *simMember) {
	if !m.Halted() {
		r.silentChanges(m, m.Core.next)
	}
	r.checkHeld(m)
}

// expected is the global number the next delivery must have.
func (r *simRun) expected(m *simMember) uint32 {
	if o := &r.order[m.Index]; o.started {
		return o.lastG + 1
	}
	return r.s.initialGlobal
}

// silentChanges accounts for the changes of the member list delivered
// before global to that the core does not report: this member's own
// (removed, taken back), which take their place in the sequences the
// checkers compare, and the removal of a member whose Leave arrived here
// (reported as MemberLeft: the sequencer had missed it), which only holds
// its global number (see leaverChange).
func (r *simRun) silentChanges(m *simMember, to uint32) {
	o := &r.order[m.Index]
	for g := r.expected(m); frame.SeqLess(g, to); g++ {
		en := &m.Core.log[g&m.Core.lmask]
		if en.global != g || en.change == 0 {
			return // the check that follows reports the gap
		}
		switch {
		case en.uid.Origin == m.ID:
			k := MemberReturned
			if en.change == frame.MemberRemoved {
				k = MemberFailed
			}
			o.log = append(o.log, rec{from: m.ID, global: g, epoch: en.epoch, change: k})
		case r.leaverChange(en.uid.Origin) && m.Core.member(en.uid.Origin).gone:
		default:
			return
		}
		o.started, o.lastG, o.lastIdx = true, g, 0
	}
}

// leaverChange reports whether changes of member id are left out of the
// compared sequences: it leaves, and its removal by a sequencer that
// missed its Leave is reported only where the Leave was missed too.
func (r *simRun) leaverChange(id frame.MemberID) bool { return r.s.leaver(r.Index[id]) }

// checkHeld: the sequencer's all-held cursor never exceeds the received
// cursor of a member it counts as live (read from that member's core).
// A member taken back after a removal is exempt: it was not live when
// the cursor passed it (held.go).
func (r *simRun) checkHeld(m *simMember) {
	c := m.Core
	if c.role != sequencer {
		return
	}
	for _, o := range r.Members {
		if !c.members[c.byID[o.ID]].live {
			r.returned[o.ID] = true
		}
		if o == m || !c.members[c.byID[o.ID]].live || r.returned[o.ID] {
			continue
		}
		if frame.SeqLess(o.Core.recvd, c.held) {
			r.Fail("sequencer %d: all-held cursor %d, but live member %d holds only up to %d (its received cursor)", m.ID, c.held, o.ID, o.Core.recvd)
		}
	}
}

// checkChange: a change of the member list is delivered in its place,
// the global number after the last delivery's (ev.Last is the one before).
// (The harness checked that it names another member.)
func (r *simRun) checkChange(m *simMember, ev Event) {
	r.silentChanges(m, ev.Last+1)
	o := &r.order[m.Index]
	wantG := r.expected(m)
	if ev.Last+1 != wantG {
		r.Fail("member %d: %v at global %d, after global %d", m.ID, ev, ev.Last+1, o.lastG)
		return
	}
	o.started, o.lastG, o.lastIdx = true, wantG, 0
	if !r.leaverChange(ev.Member) {
		o.log = append(o.log, rec{from: ev.Member, global: wantG, epoch: ev.Epoch, change: ev.Kind})
	}
}

// delivered checks the total order: positions are consecutive global
// numbers, and a bundle's messages share one, by index. (The harness
// checked the message itself.)
func (r *simRun) delivered(m *simMember, d Delivery, idx int) {
	if d.Index == 0 {
		r.silentChanges(m, d.Global)
	}
	o := &r.order[m.Index]
	wantG := r.s.initialGlobal
	if o.started {
		wantG = o.lastG + 1
		if d.Index > 0 {
			wantG = o.lastG
		}
	}
	if d.Global != wantG || (d.Index > 0 && d.Index != o.lastIdx+1) {
		r.Fail("member %d: delivered global %d index %d after global %d index %d", m.ID, d.Global, d.Index, o.lastG, o.lastIdx)
		return
	}
	o.started, o.lastG, o.lastIdx = true, d.Global, d.Index
	o.log = append(o.log, rec{from: d.From, idx: idx, global: d.Global, epoch: d.Epoch})
}

// survivor: neither crashed, nor halted, nor cut off past the failure
// timeout (such a member is treated as crashed: removed, it may stall),
// nor leaving.
func (r *simRun) survivor(m *simMember) bool {
	return !m.Crashed() && !m.Halted() && !r.crashed[m.ID] && !r.s.leaver(m.Index)
}

// departed: a member that left cleanly (it may have crashed after its
// first Leave frame). Its messages were all delivered back to it first:
// every survivor delivers them too.
func (r *simRun) departed(m *simMember) bool { return r.s.leaver(m.Index) && m.Left() }

// done reports whether every survivor has everything every survivor sent,
// all survivors delivered the same number of messages, and each knows
// that every live member holds all of its messages (the all-held cursor
// passed them: after a crash, once the sequencer removed the dead).
func (r *simRun) done() bool {
	if r.crashes > 0 {
		return false
	}
	for _, m := range r.Members {
		if r.s.leaver(m.Index) && !m.Left() && !m.Crashed() && !m.Halted() {
			return false // its leave is not done (Close has not returned)
		}
	}
	n := -1
	for _, m := range r.Members {
		if !r.survivor(m) {
			continue
		}
		c := m.Core
		if m.Proposed < r.s.k || c.outstanding() > 0 || c.open || c.role == electing || c.Counters().NotHeldByAll > 0 {
			return false
		}
		if !r.survivor(r.Members[r.Index[c.sequencerMember().id]]) {
			return false // not done before a live sequencer is in place
		}
		for j, o := range r.Members {
			if (r.survivor(o) || r.departed(o)) && m.Next[j] < r.s.k {
				return false
			}
		}
		l := len(r.order[m.Index].log)
		if n >= 0 && l != n {
			return false
		}
		n = l
	}
	// Every crashed member is removed, and every survivor delivered its
	// removal (everything the sequencer numbered).
	var sq *Core
	for _, m := range r.Members {
		if r.survivor(m) && m.Core.role == sequencer {
			sq = m.Core
		}
	}
	if sq == nil {
		return n < 0
	}
	for _, m := range r.Members {
		if m.Crashed() && !r.departed(m) && sq.members[sq.byID[m.ID]].streamLive {
			return false
		}
		if r.survivor(m) && m.Core.next != sq.nextGlobal {
			return false
		}
	}
	return true
}

// runScenario runs one seed to completion or to its virtual time bound.
func runScenario(t testing.TB, s scenario, trace ...func(testnet.Event)) *simRun {
	r := &simRun{s: s, Sim: simtest.New[*Core](t, simtest.Config{Seed: s.seed, Group: 0x5e90 + uint32(s.seed%7),
		Members: s.members, K: s.k, Link: s.link, SparseIDs: s.seed%5 == 1, Limit: simTimeLimit, Trace: trace}),
		order: make([]order, s.members), sequencer: map[uint32]frame.MemberID{}, crashed: map[frame.MemberID]bool{},
		returned: map[frame.MemberID]bool{}}
	r.Done, r.OnDelivery, r.OnEvent, r.OnAdvance = r.done, r.delivered, r.event, r.advanced
	infos := r.Infos()
	for _, m := range r.Members {
		cfg := Config{Group: r.Config.Group, Self: m.ID, Members: infos, Method: s.method, Threshold: s.threshold,
			Window: s.window, History: s.history, MTU: s.link.MTU, MaxPayload: s.link.MaxPayload, InitialGlobal: s.initialGlobal,
			Quorum: s.quorum, Resilience: s.resilience, HeartbeatInterval: Duration(simHeartbeat), FailureTimeout: Duration(simFailureTimeout), ElectionRetry: Duration(simElectionRetry)}
		var err error
		if m.Core, err = New(cfg); err != nil {
			t.Fatalf("%v: New: %v", s, err)
		}
	}
	r.sequencer[DefaultInitialEpoch] = r.Members[0].ID
	r.Start()
	net := r.Net
	crash := func(i int) func() {
		r.crashes++
		return func() {
			r.crashes--
			r.crashed[r.Members[i].ID] = true
			r.Members[i].EP.Crash()
		}
	}
	if s.cutMember >= 0 {
		cut := r.Members[s.cutMember]
		var rest []*testnet.Endpoint
		for _, m := range r.Members {
			if m != cut {
				rest = append(rest, m.EP)
			}
		}
		r.crashes++
		net.AfterFunc(s.cutAt, func() {
			if err := net.Partition([]*testnet.Endpoint{cut.EP}, rest); err != nil {
				r.Fail("partition: %v", err)
			}
			if s.cutFor >= simFailureTimeout {
				r.crashed[cut.ID] = true
			}
		})
		net.AfterFunc(s.cutAt+s.cutFor, func() {
			r.crashes--
			net.Heal()
		})
	}
	for _, l := range s.leaves {
		m := r.Members[l.member]
		net.AfterFunc(l.at, func() {
			m.LeaveAfter = true
			m.EP.Bind(m) // step it now: it leaves once it proposed its messages
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
	r.Run()
	if s.cutMember >= 0 && r.Err() == nil {
		// Let the healed member hear the group: a replaced sequencer
		// must halt, and nobody else may. A member removed while cut off
		// may be taken back (readmit) and send again: the survivors
		// must then deliver that too.
		net.RunFor(3 * simHeartbeat)
		r.Run()
	}
	return r
}

const simTimeLimit = 30 * time.Second

// verdict checks the guarantees (docs/protocols.md, "Sequencer"):
//   - agreement: survivors delivered identical sequences; a crashed or
//     departed member's sequence is a prefix of theirs (when everyone
//     left, the departed members' sequences are prefixes of the longest),
//     except where the guarantee does not reach: from a position it got
//     from a sequencer that crashed and that the survivors got from a
//     later epoch (no voter held the message when the election agreed);
//   - integrity: checked at each delivery (exactly once, bytes equal, only
//     what was sent, consecutive global numbers);
//   - validity: every survivor delivered every message of every survivor
//     and of every member that left (checked by done: a run that does not
//     finish fails, and a leaver that never gets out is one);
//   - no survivor halted, no survivor was removed by the sequencer.
func (r *simRun) verdict() error {
	if err := r.Err(); err != nil {
		return err
	}
	for _, m := range r.Members {
		if m.Halted() && !r.crashed[m.ID] {
			return fmt.Errorf("member %d halted: %v; %+v", m.ID, m.Out, m.Core.Counters())
		}
	}
	if err := r.Verdict(func(m *simMember) string {
		return fmt.Sprintf("outstanding=%d delivered=%d stats=%+v", m.Core.outstanding(), len(r.order[m.Index].log), m.Core.Counters())
	}); err != nil {
		return err
	}
	// The sequences are compared with a survivor's, or, when everyone
	// left, with the longest a departed member delivered.
	var ref *simMember
	for _, m := range r.Members {
		if r.survivor(m) {
			ref = m
			break
		}
	}
	if ref == nil {
		for _, m := range r.Members {
			if r.departed(m) && (ref == nil || len(r.order[m.Index].log) > len(r.order[ref.Index].log)) {
				ref = m
			}
		}
	}
	if ref == nil {
		return nil
	}
	refLog := r.order[ref.Index].log
	// Told is never lost while a majority survives: with SafeMajority and
	// the majority quorum (chosen only when a majority survives), what
	// any member delivered — a crashed or halted one, its own messages
	// included — every survivor delivers, at the same place.
	strict := r.s.resilience == SafeMajority && r.s.quorum == 0
	for _, m := range r.Members {
		if m == ref {
			continue
		}
		log := r.order[m.Index].log
		for i, x := range log {
			if i >= len(refLog) {
				if strict && !r.survivor(m) {
					return fmt.Errorf("member %d (not a survivor) delivered %d messages, beyond the %d of survivor %d: message %d/%d (global %d) is lost although a majority survives",
						m.ID, len(log), len(refLog), ref.ID, x.from, x.idx, x.global)
				}
				if r.survivor(m) || r.departed(m) {
					return fmt.Errorf("member %d delivered %d messages, member %d %d", m.ID, len(log), ref.ID, len(refLog))
				}
				break
			}
			y := refLog[i]
			if x.from == y.from && x.idx == y.idx && x.global == y.global && x.change == y.change {
				continue
			}
			if !strict && r.lostWithSequencer(m, x, ref, y) {
				r.outside++
				break
			}
			return fmt.Errorf("position %d: member %d delivered %d/%d%v (global %d epoch %d), member %d delivered %d/%d%v (global %d epoch %d)",
				i, m.ID, x.from, x.idx, x.change, x.global, x.epoch, ref.ID, y.from, y.idx, y.change, y.global, y.epoch)
		}
	}
	// Every survivor learnt of each crash once, in its place (the logs
	// are identical): MemberFailed for the crashed member, last of its
	// changes, and as many MemberReturned before as it had false
	// removals.
	for _, o := range r.Members {
		if !o.Crashed() || r.departed(o) || !r.survivor(ref) {
			continue
		}
		var failed, returned int
		var lastKind EventKind
		for _, x := range refLog {
			if x.change != 0 && x.from == o.ID {
				lastKind = x.change
				if x.change == MemberFailed {
					failed++
				} else {
					returned++
				}
			}
		}
		if lastKind != MemberFailed || failed != returned+1 {
			return fmt.Errorf("crashed member %d: survivor %d delivered %d MemberFailed and %d MemberReturned for it (last %v), want exactly one removal it stays in", o.ID, ref.ID, failed, returned, lastKind)
		}
	}
	for _, m := range r.Members {
		if !r.survivor(m) {
			continue
		}
		for _, o := range r.Members {
			if r.survivor(o) && !m.Core.members[m.Core.byID[o.ID]].live && m.Core.role == sequencer {
				return fmt.Errorf("sequencer %d removed live member %d", m.ID, o.ID)
			}
		}
	}
	return nil
}

// lostWithSequencer reports whether a and b, which delivered x and y at
// the same position, differ in the one way outside the guarantee (without
// SafeMajority and the majority quorum): the one with the older epoch's
// message is not a survivor — it crashed, halted or left —, and that
// epoch's sequencer crashed, so that no voter of the election after it
// may have held the message.
func (r *simRun) lostWithSequencer(a *simMember, x rec, b *simMember, y rec) bool {
	if x.epoch == y.epoch {
		return false
	}
	if frame.SeqLess(y.epoch, x.epoch) {
		a, x = b, y
	}
	return !r.survivor(a) && r.crashed[r.sequencer[x.epoch]]
}

// TestSim runs many seeded scenarios. A failing seed prints the command
// that runs it alone.
func TestSim(t *testing.T) {
	var ran, changes, outside, crashes, cuts, halts, retx, removals, leaves, seqLeaves, allLeave atomic.Int64
	t.Cleanup(func() {
		t.Logf("%d seeds passed: %d with crashes, %d with a member cut off, %d with clean leaves (%d of the sequencer, %d of every member that did not crash), %d sequencer changes seen, %d cut members halted, %d retransmission answers, %d crashed-member divergences outside the guarantee, %d removals delivered by survivors",
			ran.Load(), crashes.Load(), cuts.Load(), leaves.Load(), seqLeaves.Load(), allLeave.Load(), changes.Load(), halts.Load(), retx.Load(), outside.Load(), removals.Load())
	})
	simtest.RunSeeds(t, 1500, func(t *testing.T, seed uint64) (fmt.Stringer, error) {
		s := newScenario(seed)
		r := runScenario(t, s)
		if err := r.verdict(); err != nil {
			return s, err
		}
		ran.Add(1)
		if s.crash != noCrash {
			crashes.Add(1)
		}
		if s.cutMember >= 0 {
			cuts.Add(1)
			if r.Members[s.cutMember].Halted() {
				halts.Add(1)
			}
		}
		if len(s.leaves) > 0 {
			leaves.Add(1)
			if s.leaver(0) {
				seqLeaves.Add(1)
			}
			if !slices.ContainsFunc(r.Members, r.survivor) {
				allLeave.Add(1)
			}
		}
		changes.Add(int64(len(r.sequencer) - 1))
		outside.Add(int64(r.outside))
		for _, m := range r.Members {
			retx.Add(int64(m.Core.Counters().RetransmitsAnswered))
			if r.survivor(m) {
				removals.Add(int64(m.Core.Counters().MembersFailed))
			}
		}
		return s, nil
	})
}

// TestSimDeterministic runs seeds twice: the same seed must give the same
// frames at the same virtual instants, or a failing seed would not replay.
func TestSimDeterministic(t *testing.T) {
	simtest.Deterministic(t, 20, func(t testing.TB, seed uint64, trace func(testnet.Event)) error {
		return runScenario(t, newScenario(seed), trace).verdict()
	})
}
