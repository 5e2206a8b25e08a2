package reliable

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"github.com/rbcast/rbcast/internal/seeds"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/reliable/seq"
	"github.com/rbcast/rbcast/testnet"
)

// Order Total through the runtime: members are Drivers (the engine Group
// runs) on testnet's simulated segment, in virtual time, with seeded loss,
// bursts, duplication, reordering, receive-queue overflow, crashes of
// ordinary members and of the sequencer (mid-stream, twice in a row) and
// clean leaves (of the sequencer too, mid-stream). Every seed is one
// reproducible scenario; the checkers are agreement, integrity and
// validity (see totalRun.verdict).

type totalEnd uint8

const (
	endNone           totalEnd = iota
	endMemberCrash             // an ordinary member crashes
	endSequencerCrash          // the first sequencer crashes
	endSequencerTwice          // the first sequencer, then its successor
	endMemberLeave             // an ordinary member leaves cleanly
	endSequencerLeave          // the sequencer leaves cleanly mid-stream
)

func (k totalEnd) String() string {
	return [...]string{"none", "member-crash", "sequencer-crash", "sequencer-twice", "member-leave", "sequencer-leave"}[k]
}

type totalScenario struct {
	seed      uint64
	method    Method
	threshold int
	members   int
	k         int // messages per member
	window    int
	history   int
	queueLen  int
	in, out   testnet.Impairment
	end       totalEnd
	who       int // the member index that crashes or leaves
	at, gap   time.Duration
	quorum    int
	safe      Resilience
}

func (s totalScenario) String() string {
	return fmt.Sprintf("seed=%d %v threshold=%d members=%d k=%d window=%d history=%d queue=%d in={loss %.2f burst %+v dup %.2f reorder %.2f} out={loss %.2f} end=%v who=%d at=%v gap=%v quorum=%d resilience=%v",
		s.seed, s.method, s.threshold, s.members, s.k, s.window, s.history, s.queueLen,
		s.in.Loss, s.in.Burst, s.in.Duplicate, s.in.Reorder, s.out.Loss, s.end, s.who, s.at, s.gap, s.quorum, s.safe)
}

// Shorter timers than the defaults, so that crash scenarios take little
// virtual time; the same ratios.
const (
	totalHeartbeat     = 20 * time.Millisecond
	totalFailure       = 200 * time.Millisecond
	totalElectionRetry = 5 * time.Millisecond
	totalTimeLimit     = 30 * time.Second
)

func newTotalScenario(seed uint64) totalScenario {
	r := rand.New(rand.NewPCG(seed, 0x707a1))
	s := totalScenario{seed: seed}
	s.method = Method(seed % 3)
	if s.method == Hybrid {
		s.threshold = []int{0, 1, 64, 300, 1000}[r.IntN(5)]
	}
	s.members = 2 + r.IntN(4)
	s.k = 10 + r.IntN(60)
	s.window = []int{0, 1, 4, 16}[r.IntN(4)]
	s.history = []int{0, 16, 64}[r.IntN(3)]
	if r.IntN(4) == 0 {
		s.queueLen = 4 + r.IntN(12) // receive-queue overflow
	}
	maxLoss := []float64{0, 0.02, 0.1, 0.2}[r.IntN(4)]
	s.in.Loss = r.Float64() * maxLoss
	if r.IntN(4) == 0 {
		s.in.Burst = testnet.GilbertElliott{GoodToBad: 0.01 + 0.03*r.Float64(), BadToGood: 0.3 + 0.5*r.Float64(), LossBad: 0.5 + 0.5*r.Float64()}
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
	s.at = time.Duration(r.IntN(8_000)) * time.Microsecond
	switch r.IntN(9) {
	case 0, 1:
		s.end, s.who = endMemberCrash, 1+r.IntN(s.members-1)
	case 2, 3:
		s.end = endSequencerCrash
	case 4:
		if s.members >= 3 {
			s.end = endSequencerTwice
			s.gap = []time.Duration{time.Millisecond, totalFailure, 3 * totalFailure}[r.IntN(3)]
		}
	case 5:
		s.end, s.who = endMemberLeave, 1+r.IntN(s.members-1)
	case 6:
		s.end = endSequencerLeave
	}
	survivors := s.members
	switch s.end {
	case endMemberCrash, endSequencerCrash:
		survivors--
	case endSequencerTwice:
		survivors -= 2
	}
	if survivors < s.members/2+1 || r.IntN(2) == 0 {
		s.quorum = 1 // crash-stop: any survivor carries on
	}
	if r.IntN(4) == 0 {
		s.safe = SafeSequencer
	}
	return s
}

// totalMember adapts a Driver to testnet.Node, proposing its messages in
// bursts and checking every delivery.
type totalMember struct {
	run   *totalRun
	index int
	id    frame.MemberID
	d     *Driver
	ep    *testnet.Endpoint
	rng   *rand.Rand

	proposed  int
	proposeAt time.Time
	leaveAt   time.Time // zero: never
	left      bool      // Leave called
	halted    bool

	next []int    // per member index: next message index expected from it
	log  [][]byte // delivered messages (sender id prefixed) and member changes (changeRec), in order
	want []byte
}

type totalRun struct {
	s       totalScenario
	net     *testnet.Network
	members []*totalMember
	ids     map[frame.MemberID]int
	failed  error
	crashes int // still to happen
	crashed map[int]bool
	changes int // SequencerChanged seen
	told    int // SafeMajority runs: own messages a crashed member had delivered (all found at the survivors)
}

func (r *totalRun) fail(format string, args ...any) {
	if r.failed == nil {
		r.failed = fmt.Errorf(format, args...)
	}
}

func (m *totalMember) Step(now time.Time) time.Time {
	if !m.left && !m.leaveAt.IsZero() && !now.Before(m.leaveAt) {
		m.left = true
		if err := m.d.Leave(now); err != nil {
			m.run.fail("member %d: Leave: %v", m.id, err)
		}
	}
	m.propose(now)
	next := m.d.Step(now)
	if m.proposed < m.run.s.k && !m.left && !m.halted && (next.IsZero() || m.proposeAt.Before(next)) {
		return m.proposeAt
	}
	return next
}

func (m *totalMember) propose(now time.Time) {
	s := m.run.s
	if now.Before(m.proposeAt) || m.left || m.halted {
		return
	}
	for burst := 1 + m.rng.IntN(8); burst > 0 && m.proposed < s.k; burst-- {
		m.want = message(m.want[:0], m.id, m.proposed, m.d.MaxMessage())
		// Counted first: at the sequencer Propose delivers at once.
		m.proposed++
		err := m.d.Propose(now, m.want)
		if errors.Is(err, seq.ErrWindowFull) {
			m.proposed--
			break
		}
		if err != nil {
			m.run.fail("member %d: Propose message %d: %v", m.id, m.proposed-1, err)
			return
		}
	}
	m.proposeAt = now.Add(time.Duration(m.rng.IntN(400)) * time.Microsecond)
}

// deliver checks integrity at once: from a member, in its order (the
// sequencer numbers each origin's requests in the order it made them),
// exactly once, byte for byte.
func (m *totalMember) deliver(from frame.MemberID, data []byte) {
	j, ok := m.run.ids[from]
	if !ok {
		m.run.fail("member %d: delivery from %d, not a member", m.id, from)
		return
	}
	idx := m.next[j]
	o := m.run.members[j]
	if idx >= o.proposed {
		m.run.fail("member %d: message %d from member %d, which proposed only %d", m.id, idx, from, o.proposed)
		return
	}
	m.want = message(m.want[:0], from, idx, o.d.MaxMessage())
	if !bytes.Equal(data, m.want) {
		m.run.fail("member %d: message %d from member %d: got %d bytes, want %d (duplicate, reordered or corrupted)", m.id, idx, from, len(data), len(m.want))
		return
	}
	m.next[j]++
	m.log = append(m.log, append([]byte{byte(from >> 8), byte(from)}, data...))
}

func (m *totalMember) event(ev Event) {
	switch ev.Kind {
	case SelfRemoved:
		m.halted = true
	case SequencerChanged:
		m.run.changes++
	case MemberFailed, MemberReturned:
		// Numbered in the stream: in the log at its place, which the
		// agreement check compares like a message.
		m.log = append(m.log, changeRec(ev.Kind, ev.Member))
	}
}

// changeRec is a member change in a log: 0xffff (no sender id), the
// kind and the member.
func changeRec(k EventKind, id frame.MemberID) []byte {
	return []byte{0xff, 0xff, byte(k), byte(id >> 8), byte(id)}
}

// lastChange returns the kind of the last change of member id in log, and
// how many MemberFailed it has for it.
func lastChange(log [][]byte, id frame.MemberID) (last EventKind, failed int) {
	for _, x := range log {
		if len(x) == 5 && x[0] == 0xff && x[1] == 0xff && frame.MemberID(binary.BigEndian.Uint16(x[3:])) == id {
			last = EventKind(x[2])
			if last == MemberFailed {
				failed++
			}
		}
	}
	return last, failed
}

// survivor: neither crashed, nor halted, nor left.
func (m *totalMember) survivor() bool {
	return !m.run.crashed[m.index] && !m.halted && !m.left
}

// done: every survivor proposed everything, has nothing outstanding, knows
// every live member holds all it proposed (the all-held cursor passed it:
// after a crash or leave, once the sequencer removed the member), and
// delivered every message of every member that did not crash; all
// survivors delivered the same number of messages.
func (r *totalRun) done() bool {
	if r.crashes > 0 {
		return false
	}
	n := -1
	for _, m := range r.members {
		if m.left && !m.d.Left() && !r.crashed[m.index] {
			return false // its Leave is not out yet
		}
		if !m.survivor() {
			continue
		}
		t := m.d.totalCore()
		if st := t.Counters(); m.proposed < r.s.k || st.Outstanding > 0 || st.Electing || st.NotHeldByAll > 0 {
			return false
		}
		if !r.members[r.ids[t.Sequencer()]].survivor() {
			return false
		}
		for j, o := range r.members {
			if !r.crashed[j] && m.next[j] < o.proposed {
				return false
			}
		}
		if n >= 0 && len(m.log) != n {
			return false
		}
		n = len(m.log)
		for j, o := range r.members {
			if last, _ := lastChange(m.log, o.id); r.crashed[j] && last != MemberFailed {
				return false // its removal is not delivered here yet
			}
		}
	}
	return true
}

func runTotal(t testing.TB, s totalScenario) *totalRun {
	net, err := testnet.New(s.seed, testnet.Config{})
	if err != nil {
		t.Fatal(err)
	}
	r := &totalRun{s: s, net: net, ids: map[frame.MemberID]int{}, crashed: map[int]bool{}}
	var infos []frame.MemberInfo
	for i := range s.members {
		ep, err := net.Attach(testnet.EndpointConfig{QueueLen: s.queueLen, In: s.in, Out: s.out})
		if err != nil {
			t.Fatal(err)
		}
		id := frame.MemberID(3 + 2*i)
		infos = append(infos, frame.MemberInfo{ID: id, MAC: [6]byte(ep.HardwareAddr()), Incarnation: uint32(s.seed) + uint32(i)})
		r.ids[id] = i
		r.members = append(r.members, &totalMember{run: r, index: i, id: id, ep: ep,
			rng: rand.New(rand.NewPCG(s.seed, uint64(i))), next: make([]int, s.members)})
	}
	for _, m := range r.members {
		m.d, err = NewDriver(m.ep, Config{Group: 9, Members: infos, Self: m.id, Order: Total, Method: s.method,
			Threshold: s.threshold, Window: s.window, History: s.history, Quorum: s.quorum, Resilience: s.safe,
			HeartbeatInterval: totalHeartbeat, FailureTimeout: totalFailure, ElectionRetry: totalElectionRetry,
			Deliver: m.deliver, OnEvent: m.event, Logger: quiet}, net.Now())
		if err != nil {
			t.Fatalf("%v: NewDriver: %v", s, err)
		}
	}
	for _, m := range r.members {
		m.ep.Bind(m)
	}
	crash := func(i int) func() {
		r.crashes++
		return func() {
			r.crashes--
			r.crashed[i] = true
			r.members[i].ep.Crash()
		}
	}
	switch s.end {
	case endMemberCrash:
		net.AfterFunc(s.at, crash(s.who))
	case endSequencerCrash:
		net.AfterFunc(s.at, crash(0))
	case endSequencerTwice:
		net.AfterFunc(s.at, crash(0))
		net.AfterFunc(s.at+s.gap, crash(1))
	case endMemberLeave:
		r.members[s.who].leaveAt = net.Now().Add(s.at)
	case endSequencerLeave:
		r.members[0].leaveAt = net.Now().Add(s.at)
	}
	limit := net.Now().Add(totalTimeLimit)
	for !r.done() && r.failed == nil && net.Now().Before(limit) {
		net.RunFor(5 * time.Millisecond)
	}
	return r
}

// verdict checks, beyond the integrity checked at each delivery:
//   - agreement: survivors delivered identical sequences; a member that
//     left delivered a prefix of theirs, and so did a crashed ordinary
//     member when the sequencer never failed (a crashed sequencer's
//     last messages may be beyond what the survivors agreed on:
//     docs/protocols.md, "Sequencer");
//   - validity: every survivor delivered every message of every member
//     that did not crash (a leaver's included);
//   - no survivor halted;
//   - told is never lost while a majority survives: with SafeMajority
//     and the majority quorum (chosen only when a majority survives),
//     whatever any member delivered — a crashed sender its own messages
//     included — every survivor delivered, in the same place: a crashed
//     member's log is a prefix of the survivors' even when the
//     sequencer failed.
func (r *totalRun) verdict() error {
	if r.failed != nil {
		return r.failed
	}
	for _, m := range r.members {
		if m.halted && !r.crashed[m.index] {
			return fmt.Errorf("member %d halted: %v", m.id, m.d.Stats().Events)
		}
	}
	if !r.done() {
		var b strings.Builder
		for _, m := range r.members {
			st := m.d.totalCore().Counters()
			fmt.Fprintf(&b, "\n  member %d crashed=%v left=%v(%v) halted=%v proposed=%d delivered=%d next=%v seq=%d epoch=%d electing=%v outstanding=%d",
				m.id, r.crashed[m.index], m.left, m.d.Left(), m.halted, m.proposed, len(m.log), m.next, st.Sequencer, st.Epoch, st.Electing, st.Outstanding)
		}
		return fmt.Errorf("not finished after %v of virtual time:%s", totalTimeLimit, b.String())
	}
	var ref *totalMember
	for _, m := range r.members {
		if m.survivor() {
			ref = m
			break
		}
	}
	if ref == nil {
		return nil
	}
	sequencerFailed := r.s.end == endSequencerCrash || r.s.end == endSequencerTwice
	if r.s.safe == SafeMajority && r.s.quorum == 0 {
		sequencerFailed = false // no exception: see above
		for _, m := range r.members {
			if r.crashed[m.index] {
				for _, x := range m.log {
					if frame.MemberID(binary.BigEndian.Uint16(x)) == m.id {
						r.told++ // its own message, delivered back: told
					}
				}
			}
		}
	}
	for _, m := range r.members {
		if m == ref {
			continue
		}
		prefixOnly := !m.survivor()
		for i, x := range m.log {
			if i >= len(ref.log) {
				if !prefixOnly {
					return fmt.Errorf("member %d delivered %d messages, member %d %d", m.id, len(m.log), ref.id, len(ref.log))
				}
				if r.crashed[m.index] && sequencerFailed {
					break
				}
				return fmt.Errorf("member %d (not a survivor) delivered %d messages, more than survivor %d (%d)", m.id, len(m.log), ref.id, len(ref.log))
			}
			if bytes.Equal(x, ref.log[i]) {
				continue
			}
			if r.crashed[m.index] && sequencerFailed {
				break // outside the guarantee: see docs/protocols.md
			}
			return fmt.Errorf("position %d: member %d delivered %x…, member %d delivered %x…", i, m.id, x[:min(8, len(x))], ref.id, ref.log[i][:min(8, len(ref.log[i]))])
		}
	}
	// Each crash is reported once by every survivor (the logs are
	// identical, so at the same place): crash-only scenarios have no
	// false removals, so no readmission either.
	for j, o := range r.members {
		if last, failed := lastChange(ref.log, o.id); r.crashed[j] && (last != MemberFailed || failed != 1) {
			return fmt.Errorf("crashed member %d: survivor %d reported %d MemberFailed for it (last change %v), want exactly 1", o.id, ref.id, failed, last)
		}
	}
	// And every survivor's Stats lists the crashed not live, the other
	// survivors live.
	for _, m := range r.members {
		if !m.survivor() {
			continue
		}
		for _, ms := range m.d.Stats().Members {
			if j := r.ids[ms.ID]; ms.Live != r.members[j].survivor() && !r.members[j].left {
				return fmt.Errorf("survivor %d lists member %d live=%v (crashed %v)", m.id, ms.ID, ms.Live, r.crashed[j])
			}
		}
	}
	return nil
}

func totalSeeds(t *testing.T) int { return seeds.Count(t, 300, 100) }

// TestTotalSim runs many seeded scenarios through the runtime with Order
// Total. A failing seed prints the command that runs it alone.
func TestTotalSim(t *testing.T) {
	n := totalSeeds(t)
	var ran, changes, ends, leaves, told, removals atomic.Int64
	t.Cleanup(func() {
		t.Logf("%d seeds passed: %d with a crash or leave (%d clean leaves), %d sequencer changes seen, %d messages told to a sender that then crashed delivered by every survivor, %d removals reported by survivors",
			ran.Load(), ends.Load(), leaves.Load(), changes.Load(), told.Load(), removals.Load())
	})
	for seed := uint64(1); seed <= uint64(n); seed++ {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			t.Parallel()
			s := newTotalScenario(seed)
			r := runTotal(t, s)
			if err := r.verdict(); err != nil {
				t.Fatalf("%v\nscenario: %v\nre-run: RBCAST_SEEDS=%d go test ./reliable -run '^TestTotalSim$/^seed=%d$' -v", err, s, seed, seed)
			}
			ran.Add(1)
			changes.Add(int64(r.changes))
			told.Add(int64(r.told))
			if s.end != endNone {
				ends.Add(1)
			}
			if s.end == endMemberLeave || s.end == endSequencerLeave {
				leaves.Add(1)
			}
			for j, m := range r.members {
				if m.survivor() {
					for k := range r.members {
						if _, f := lastChange(m.log, r.members[k].id); k != j {
							removals.Add(int64(f))
						}
					}
				}
			}
		})
	}
}
