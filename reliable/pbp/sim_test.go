package pbp

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/reliable/internal/simtest"
	"github.com/rbcast/rbcast/testnet"
)

// The deterministic simulation (package simtest): members running the
// core on testnet's simulated segment with seeded loss, bursts,
// duplication, reordering, jitter, corruption, queue overflow, crashes,
// clean leaves and a rogue station forging frames, of the run's group and
// of another. Every seed is one reproducible scenario.

// scenario is one seed's configuration.
type scenario struct {
	seed       uint64
	mode       Mode
	members    int
	k          int // messages per member
	window     int
	initialSeq uint32
	link       simtest.Link
	crash      int // member index to crash, -1 none
	crashAt    time.Duration
	leaver     int // member index that leaves once it has sent its messages, -1 none
	rogue      bool
	holds      []simHold // HoldFrom/ReleaseFrom (hold.go), every fourth seed
	// relay: Config.Relay (relay.go), in every odd seed with a crash; the
	// survivors must then agree on what the crashed member sent.
	relay bool
	// unicast: Config.Unicast, every fifth seed (a group of two sends to
	// the peer's MAC; larger groups broadcast as before).
	unicast bool
}

// simHold is one member holding another's messages from at, released
// after dur (never, when dur is 0: the hold's bound ends it).
type simHold struct {
	holder, from int // member indexes
	at, dur      time.Duration
}

func (s scenario) String() string {
	return fmt.Sprintf("seed=%d %v members=%d k=%d window=%d initialSeq=%d %v crash=%d@%v leaver=%d rogue=%v holds=%v relay=%v unicast=%v",
		s.seed, s.mode, s.members, s.k, s.window, s.initialSeq, s.link, s.crash, s.crashAt, s.leaver, s.rogue, s.holds, s.relay, s.unicast)
}

func newScenario(seed uint64) scenario {
	r := rand.New(rand.NewPCG(seed, 0x5eed))
	s := scenario{seed: seed, crash: -1, leaver: -1}
	if seed%3 == 2 {
		s.mode = PBP1
	}
	switch r.IntN(10) {
	case 0, 1, 2, 3:
		s.members = 2 + r.IntN(3)
	case 4, 5, 6, 7:
		s.members = 5 + r.IntN(4)
	default:
		s.members = 9 + r.IntN(8)
	}
	s.k = 5 + r.IntN(36)
	s.window = []int{0, 1, 3, 8, 16, 64}[r.IntN(6)]
	if r.IntN(3) == 0 {
		s.initialSeq = ^uint32(0) - uint32(r.IntN(60)) // wraps during the run
	} else {
		s.initialSeq = r.Uint32()
	}
	s.link = simtest.DrawLink(r)
	if r.IntN(6) == 0 {
		s.crash = r.IntN(s.members)
		s.crashAt = time.Duration(r.IntN(30_000)) * time.Microsecond
	}
	if r.IntN(6) == 0 {
		s.leaver = r.IntN(s.members)
		if s.leaver == s.crash {
			s.leaver = -1
		}
	}
	s.rogue = r.IntN(3) == 0
	if seed%4 == 3 {
		// A stream of its own, so that the other draws stay the seed's.
		h := rand.New(rand.NewPCG(seed, 0x401d))
		for range 1 + h.IntN(4) {
			hd := simHold{holder: h.IntN(s.members), from: h.IntN(s.members - 1),
				at: time.Duration(h.IntN(30_000)) * time.Microsecond}
			if hd.from >= hd.holder {
				hd.from++
			}
			if h.IntN(4) != 0 {
				hd.dur = time.Duration(1+h.IntN(60_000)) * time.Microsecond
			}
			s.holds = append(s.holds, hd)
		}
	}
	s.relay = s.crash >= 0 && seed%2 == 1
	s.unicast = seed%5 == 4
	return s
}

// simRun is one seed's run, with PBP's checks on top of the harness's
// (each delivery the next message of its sender, removals once).
type simRun struct {
	*simtest.Sim[*Core]
	s scenario
}

// done reports whether every live member has everything it must get.
func (r *simRun) done() bool {
	for _, m := range r.Members {
		if m.Crashed() || m.Left() {
			continue
		}
		for j, o := range r.Members {
			if j == m.Index {
				continue
			}
			switch {
			case o.Crashed():
				if m.Removed[j] == 0 {
					return false
				}
			case m.Next[j] < r.s.k:
				return false
			case j == r.s.leaver && m.Removed[j] == 0:
				// Left, or Failed when every Leave frame was lost.
				return false
			}
		}
		if m.Proposed < r.s.k || m.Core.inFlight() > 0 {
			return false
		}
	}
	return true
}

// rogue forges frames a member must never deliver: a non-member sender, a
// member's id with the wrong incarnation, a member's id and incarnation
// from the wrong MAC, and a Nack and an Ack from a non-member. It also
// sends well-formed frames of another group: Data and an Ack under the
// ids, incarnations and MACs of real members (as a host in two groups
// would send them) at the sequence numbers the run starts from, and Data
// from a non-member. The steppers drop those before the cores
// (frame.ParseGroup); the core's own check of the group is unit-tested.
func (r *simRun) rogue() {
	ep := r.Station()
	victim := r.Members[0]
	mac := [6]byte(ep.HardwareAddr())
	var frames [][]byte
	build := func(group uint32, src [6]byte, sender frame.MemberID, inc, seq, ack uint32, body frame.Body, dst [6]byte) {
		h := frame.Header{Group: group, Sender: sender, Incarnation: inc, Seq: seq,
			AckBase: 0, Acks: make([]uint32, r.s.members)}
		for i := range h.Acks {
			h.Acks[i] = ack
		}
		b := frame.AppendEthernet(nil, dst, src, frame.EtherType)
		b, err := frame.Append(b, &h, body)
		if err != nil {
			r.T.Fatalf("rogue: %v", err)
		}
		frames = append(frames, b)
	}
	seq0, ack := r.s.initialSeq, r.s.initialSeq+1000
	forged := &frame.Payload{T: frame.Data, Data: []byte("forged message")}
	build(r.Config.Group, mac, 999, 1, seq0, ack, forged, frame.Broadcast)
	build(r.Config.Group, mac, victim.ID, victim.Info.Incarnation+1, seq0, ack, forged, frame.Broadcast)
	build(r.Config.Group, mac, victim.ID, victim.Info.Incarnation, seq0, ack, forged, frame.Broadcast)
	build(r.Config.Group, mac, 999, 1, seq0, ack, &frame.NackBody{Target: r.Members[1].ID, Ranges: []frame.Range{{First: seq0, Last: seq0 + 5}}}, r.Members[1].Info.MAC)
	build(r.Config.Group, mac, 999, 1, seq0, ack, &frame.Empty{T: frame.Ack}, frame.Broadcast)
	foreign := r.Config.Group + 7 // the run's groups are 0x0bb0…0x0bb6
	marker := func(sender frame.MemberID, seq uint32) frame.Body {
		return &frame.Payload{T: frame.Data, Data: fmt.Appendf(nil, "%s: member %d seq %d", simtest.ForeignMarker, sender, seq)}
	}
	for _, m := range r.Members[:2] {
		for seq := seq0; seq != seq0+2; seq++ {
			build(foreign, m.Info.MAC, m.ID, m.Info.Incarnation, seq, seq0, marker(m.ID, seq), frame.Broadcast)
		}
	}
	build(foreign, mac, 999, 1, seq0, seq0, marker(999, seq0), frame.Broadcast)
	m1 := r.Members[1].Info
	build(foreign, m1.MAC, m1.ID, m1.Incarnation, seq0+5, seq0+5, &frame.Empty{T: frame.Ack}, frame.Broadcast)
	r.Rogue(ep, frames)
}

// runScenario runs one seed to completion or to its virtual time bound.
func runScenario(t testing.TB, s scenario, trace ...func(testnet.Event)) *simRun {
	r := &simRun{s: s, Sim: simtest.New[*Core](t, simtest.Config{Seed: s.seed, Group: 0x0bb0 + uint32(s.seed%7),
		Members: s.members, K: s.k, Link: s.link, SparseIDs: s.seed%5 == 1, Limit: simTimeLimit, Trace: trace,
		Datagrams: s.seed%2 == 0})}
	r.Done = r.done
	infos := r.Infos()
	for _, m := range r.Members {
		cfg := Config{Group: r.Config.Group, Self: m.ID, Members: infos, Mode: s.mode, Window: s.window,
			MTU: s.link.MTU, MaxPayload: s.link.MaxPayload, InitialSeq: s.initialSeq, Unicast: s.unicast}
		if s.relay {
			plain, err := New(cfg)
			if err != nil {
				t.Fatalf("%v: New: %v", s, err)
			}
			cfg.Relay = true
			cfg.MaxPayload = min(cfg.MaxPayload, plain.cfg.linkMax-RelayOverhead)
		}
		var err error
		if m.Core, err = New(cfg); err != nil {
			t.Fatalf("%v: New: %v", s, err)
		}
		m.LeaveAfter = m.Index == s.leaver
	}
	r.Start()
	if s.rogue {
		r.rogue()
	}
	if s.crash >= 0 {
		r.Net.AfterFunc(s.crashAt, r.Members[s.crash].EP.Crash)
	}
	// Holds, bounded as the runtime bounds them (a quarter of the failure
	// timeout): nobody may be removed for them, and everything is still
	// delivered, in order, exactly once.
	for _, h := range s.holds {
		m, from := r.Members[h.holder], r.Members[h.from].ID
		r.Net.AfterFunc(h.at, func() {
			now := r.Clock.Core(r.Net.Now())
			m.Stepper.HoldFrom(from, now.Add(DefaultFailureTimeout/4))
		})
		if h.dur > 0 {
			r.Net.AfterFunc(h.at+h.dur, func() { m.Stepper.ReleaseFrom(from) })
		}
	}
	r.Run()
	return r
}

// simTimeLimit bounds a run in virtual time: generous against the worst
// case (30% loss, a crash detected after DefaultFailureTimeout).
const simTimeLimit = 60 * time.Second

func (r *simRun) verdict() error {
	if err := r.Verdict(func(m *simtest.Member[*Core]) string {
		return fmt.Sprintf("inflight=%d stats=%+v", m.Core.inFlight(), m.Core.Counters())
	}); err != nil {
		return err
	}
	if r.Forged > 0 {
		var refused uint64
		for _, m := range r.Members {
			st := m.Core.Counters()
			refused += st.NotMember + st.WrongIncarnation + st.WrongMAC
		}
		if refused == 0 {
			return fmt.Errorf("the rogue sent %d forged frames and no member refused one", r.Forged)
		}
	}
	// With Relay the survivors delivered the same messages of the
	// crashed member: what any of them delivered reached all.
	if r.s.relay {
		c := r.s.crash
		first := -1
		for _, m := range r.Members {
			if m.Index == c || m.Crashed() || m.Left() {
				continue
			}
			if first < 0 {
				first = m.Index
			} else if m.Next[c] != r.Members[first].Next[c] {
				return fmt.Errorf("with Relay the survivors disagree on crashed member %d: member %d delivered %d of its messages, member %d %d",
					r.Members[c].ID, r.Members[first].ID, r.Members[first].Next[c], m.ID, m.Next[c])
			}
		}
	}
	// The acknowledgement matrix never claims a member holds frames its
	// sender has not sent, and what is stable is held here.
	for _, m := range r.Members {
		for _, snd := range r.Members {
			st, _ := m.Core.StableFrom(snd.ID)
			own, _ := m.Core.Holds(m.ID, snd.ID)
			if frame.SeqLess(own, st) {
				return fmt.Errorf("member %d: StableFrom(%d) = %d, past what it holds itself (%d)", m.ID, snd.ID, st, own)
			}
			for _, o := range r.Members {
				if h, ok := m.Core.Holds(o.ID, snd.ID); !ok || frame.SeqLess(snd.Core.nextSeq, h) {
					return fmt.Errorf("member %d: Holds(%d, %d) = %d, %v; member %d sent up to %d", m.ID, o.ID, snd.ID, h, ok, snd.ID, snd.Core.nextSeq)
				}
			}
		}
	}
	for _, m := range r.Members {
		for j, k := range m.Removed {
			o := r.Members[j]
			if (k == MemberFailed || k == MemberStalled) && !o.Crashed() && !m.Crashed() && !o.Left() {
				return fmt.Errorf("member %d removed live member %d", m.ID, o.ID)
			}
		}
	}
	return nil
}

// TestSim runs many seeded scenarios of both protocols (PBP2, and PBP1
// every third seed). A failing seed prints the command that runs it alone.
func TestSim(t *testing.T) {
	simtest.RunSeeds(t, 3000, func(t *testing.T, seed uint64) (fmt.Stringer, error) {
		s := newScenario(seed)
		return s, runScenario(t, s).verdict()
	})
}

// TestSimDeterministic runs seeds twice: the same seed must give the same
// frames at the same virtual instants (DESIGN.md, decision 1), or a failing
// seed would not replay.
func TestSimDeterministic(t *testing.T) {
	simtest.Deterministic(t, 30, func(t testing.TB, seed uint64, trace func(testnet.Event)) error {
		return runScenario(t, newScenario(seed), trace).verdict()
	})
}
