package kv

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/rbcast/rbcast/dsm"
	dsmcore "github.com/rbcast/rbcast/dsm/core"
	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/reliable"
	"github.com/rbcast/rbcast/testnet"
)

// thesisScenario is one seed's draw for the thesis-mode simulation.
type thesisScenario struct {
	replicas         int
	loss, dup, reord float64
	clients          int
	crash            int           // replica crashed (-1: none)
	crashAt          time.Duration // when
	fading           bool
	skew             []time.Duration // each replica's clock minus true time
	// Assumption breakers: slow is a replica whose every frame out is
	// held back by slowBy (beyond t_r), from slowFrom on (-1: none).
	slow     int
	slowBy   time.Duration
	slowFrom time.Duration
}

func (s thesisScenario) String() string {
	c := "no crash"
	if s.crash >= 0 {
		c = fmt.Sprintf("r%d crashes at %v", s.crash, s.crashAt)
		if s.fading {
			c += " fading"
		}
	}
	sl := ""
	if s.slow >= 0 {
		sl = fmt.Sprintf(", r%d's frames held back %v from %v", s.slow, s.slowBy, s.slowFrom)
	}
	return fmt.Sprintf("%d replicas, loss %.2f, dup %.2f, reorder %.2f, %d clients, %s, skews %v%s", s.replicas, s.loss, s.dup, s.reord, s.clients, c, s.skew, sl)
}

// The timing bounds of the simulated deployment (thesis mode's
// assumptions; docs/kv.md): one-way replica delays, repairs under 20 %
// loss included, stay far below thesisTr; clocks within thesisEps.
const (
	thesisTr            = 100 * time.Millisecond
	thesisEps           = 4 * time.Millisecond
	thesisClientTimeout = 500 * time.Millisecond
)

func drawThesis(seed uint64, replicas int) thesisScenario {
	r := rand.New(rand.NewPCG(seed, 0x7468))
	s := thesisScenario{replicas: replicas, loss: float64(r.IntN(21)) / 100, dup: float64(r.IntN(3)) / 100, reord: float64(r.IntN(6)) / 100,
		clients: 2 + r.IntN(3), crash: -1, slow: -1}
	for range replicas {
		s.skew = append(s.skew, time.Duration(r.Int64N(int64(thesisEps)+1))-thesisEps/2)
	}
	if r.IntN(3) > 0 {
		s.crash, s.crashAt, s.fading = r.IntN(replicas), time.Duration(300+r.IntN(1200))*time.Millisecond, r.IntN(2) == 0
	}
	return s
}

type thesisReplica struct {
	s       *thesisSim
	idx     int
	ep      *testnet.Endpoint
	drv     *reliable.Driver
	dn      *dsm.Node
	h       *dsm.Host
	seg     *dsm.Segment
	node    *ThesisNode
	log     []applied
	skew    time.Duration
	crashed bool
	// written: when each write to a location was issued (true time), in
	// order; seen[w][loc]: how many of replica w's writes to loc this one
	// applied. They measure the writes' delays against t_r.
	written map[int][]time.Time
	seen    []map[int]int
}

// thesisSim is a thesis-mode deployment: replicas sharing their Q and D
// lists through dsm segments over testnet, clients over a lossy "UDP",
// in virtual time.
type thesisSim struct {
	simWorld
	sc      thesisScenario
	reps    []*thesisReplica
	refused uint64
	// maxDelay is the longest a write took from its issue to its
	// application at another replica (true time).
	maxDelay    time.Duration
	undelivered bool
}

// clock is replica r's clock: true (virtual) time plus its skew.
func (r *thesisReplica) clock() time.Time { return r.s.net.Now().Add(r.skew) }

// The dsm.Env of a simulated replica: nothing blocks (the outbox limit is
// out of reach) and the host drains the outbox itself.
func (r *thesisReplica) Kick()  {}
func (r *thesisReplica) Flush() {}
func (r *thesisReplica) Wait(ctx context.Context, w dsm.Wait) error {
	if ok, err := r.h.Ready(w); ok || err != nil {
		return err
	}
	return fmt.Errorf("replica %d: the dsm node would block on %v", r.idx, w)
}
func (r *thesisReplica) Leave() error                        { return nil }
func (r *thesisReplica) GroupStats() reliable.Stats          { return r.drv.Stats() }
func (r *thesisReplica) Open(uint32, []frame.MemberID) error { return errors.New("no channels") }

// step runs the replica's node at its clock and sends what it wrote.
func (r *thesisReplica) step() {
	if r.crashed {
		return
	}
	r.node.Tick(r.clock())
	for _, w := range r.node.Writes() {
		r.written[w.Loc] = append(r.written[w.Loc], r.s.net.Now())
		if err := r.seg.Write(w.Loc, w.Data); err != nil {
			r.s.fail("replica %d: writing location %d: %v", r.idx, w.Loc, err)
		}
	}
	now := r.s.net.Now()
	for {
		msg, _, ok := r.h.Next()
		if !ok {
			break
		}
		err := r.drv.Propose(now, msg)
		if reliable.IsWindowFull(err) {
			break
		}
		r.h.Sent(err)
		if err != nil {
			r.s.fail("replica %d: sending: %v", r.idx, err)
			break
		}
	}
	r.ep.Bind(r.drv) // the network learns the driver's new deadline
}

func newThesisSim(t testing.TB, seed uint64, sc thesisScenario, tc ThesisConfig) *thesisSim {
	net, err := testnet.New(seed, testnet.Config{})
	if err != nil {
		t.Fatal(err)
	}
	s := &thesisSim{simWorld: simWorld{t: t, net: net, rng: rand.New(rand.NewPCG(seed, 0x636c)), start: net.Now(),
		replicas: sc.replicas, loss: sc.loss, timeout: thesisClientTimeout}, sc: sc}
	s.request = func(i int, data []byte, reply func([]byte)) {
		if r := s.reps[i]; !r.crashed {
			r.node.Request(r.clock(), data, reply)
			r.step()
		}
	}
	s.end = s.start.Add(4 * time.Second)
	var members []frame.MemberInfo
	var ids []frame.MemberID
	for i := range sc.replicas {
		im := testnet.Impairment{Loss: sc.loss, Duplicate: sc.dup, Reorder: sc.reord, ReorderDelay: 300 * time.Microsecond}
		ep, err := net.Attach(testnet.EndpointConfig{In: im})
		if err != nil {
			t.Fatal(err)
		}
		r := &thesisReplica{s: s, idx: i, ep: ep, skew: sc.skew[i], written: map[int][]time.Time{}}
		for range sc.replicas {
			r.seen = append(r.seen, map[int]int{})
		}
		s.reps = append(s.reps, r)
		members = append(members, frame.MemberInfo{ID: frame.MemberID(i + 1), MAC: [6]byte(ep.HardwareAddr()), Incarnation: 1})
		ids = append(ids, frame.MemberID(i+1))
	}
	for i, r := range s.reps {
		cfg := tc
		cfg.Replicas, cfg.Self = sc.replicas, i
		cfg.OnApply = func(q Request, res []byte, fresh bool) {
			pr, _ := ParseResult(res)
			r.log = append(r.log, applied{r.node.Replica().Ordered, q.Client, q.Seq, fresh, pr.String()})
		}
		node, err := NewThesisNode(cfg)
		if err != nil {
			t.Fatal(err)
		}
		r.node = node
		cfg = node.Config()
		r.dn, r.h = dsm.NewHosted(r, thesisDSM(dsm.Config{OutboxLimit: 1 << 20}, func(ev dsm.TraceEvent) {
			if ev.Kind != dsmcore.EvUpdate {
				return
			}
			w := int(ev.Key) - 1
			if k := r.seen[w][ev.Location]; k < len(s.reps[w].written[ev.Location]) {
				s.maxDelay = max(s.maxDelay, s.net.Now().Sub(s.reps[w].written[ev.Location][k]))
			}
			r.seen[w][ev.Location]++
			if err := node.Remote(r.clock(), int(ev.Key)-1, ev.Location, ev.Data); err != nil {
				s.fail("replica %d: %v", r.idx, err)
			}
		}))
		gcfg := reliable.Config{Group: 9, Members: members, Self: ids[i], FailureTimeout: 500 * time.Millisecond,
			HeartbeatInterval: 10 * time.Millisecond, Logger: quiet, Deliver: r.h.Deliver, OnEvent: r.h.OnEvent}
		d, err := reliable.NewDriver(r.ep, gcfg, net.Now())
		if err != nil {
			t.Fatal(err)
		}
		r.drv = d
		if err := r.h.Start(ids[i], ids, d.MaxMessage()); err != nil {
			t.Fatal(err)
		}
		seg, err := r.dn.CreateSegment(uint32(i+1), cfg.Locations(), cfg.SlotSize)
		if err != nil {
			t.Fatal(err)
		}
		r.seg = seg
		r.ep.Bind(d)
	}
	var tick func()
	tick = func() {
		for _, r := range s.reps {
			r.step()
		}
		s.net.AfterFunc(time.Millisecond, tick)
	}
	s.net.AfterFunc(time.Millisecond, tick)
	if sc.crash >= 0 {
		r := s.reps[sc.crash]
		if sc.fading {
			net.AfterFunc(sc.crashAt-5*time.Millisecond, func() { r.ep.SetImpairment(testnet.Out, testnet.Impairment{Loss: 0.8}) })
		}
		net.AfterFunc(sc.crashAt, func() { r.ep.Crash(); r.crashed = true })
	}
	if sc.slow >= 0 {
		net.AfterFunc(sc.slowFrom, func() {
			s.reps[sc.slow].ep.SetImpairment(testnet.Out, testnet.Impairment{Reorder: 1, ReorderDelay: sc.slowBy})
		})
	}
	s.runClients(sc.clients, 0)
	for _, r := range s.reps {
		s.refused += r.node.Refused
	}
	// A write that never reached a live replica (the reliable layer
	// removed a live member: a false suspicion) took forever.
	for _, w := range s.reps {
		for _, r := range s.reps {
			if r == w || r.crashed || w.crashed {
				continue
			}
			for loc, times := range w.written {
				if k := r.seen[w.idx][loc]; k < len(times) && net.Now().Sub(times[k]) > thesisTr {
					s.maxDelay = max(s.maxDelay, net.Now().Sub(times[k]))
					s.undelivered = true
				}
			}
		}
	}
	s.check()
	return s
}

// check: every replica executed a prefix of one sequence (a crashed one
// a shorter one), the live ones the same sequence and state; every
// acknowledged request executed exactly once, with the result it was
// answered; the history linearizable.
func (s *thesisSim) check() {
	var ref *thesisReplica
	for _, r := range s.reps {
		if !r.crashed && (ref == nil || len(r.log) > len(ref.log)) {
			ref = r
		}
	}
	for _, r := range s.reps {
		if i := firstDiff(r.log, ref.log); i < len(r.log) {
			s.fail("replica %d's executed sequence diverges from replica %d's at %d: %+v, %+v", r.idx, ref.idx, i, r.log[i], ref.log[min(i, len(ref.log)-1)])
		} else if !r.crashed && len(r.log) != len(ref.log) {
			s.fail("replica %d executed %d requests, replica %d %d", r.idx, len(r.log), ref.idx, len(ref.log))
		}
		if !r.crashed && string(r.node.Replica().Snapshot()) != string(ref.node.Replica().Snapshot()) && len(r.log) == len(ref.log) {
			s.fail("replica %d's state differs from replica %d's at the end", r.idx, ref.idx)
		}
	}
	fresh := map[[2]uint64]int{}
	results := map[[2]uint64]string{}
	for _, a := range ref.log {
		k := [2]uint64{a.client, a.seq}
		if a.fresh {
			fresh[k]++
			results[k] = a.result
		}
	}
	for k, n := range fresh {
		if n > 1 && k[0] != 0 {
			s.fail("client %d's request %d executed %d times", k[0], k[1], n)
		}
	}
	for _, op := range s.history {
		if !op.Answered {
			continue
		}
		k := [2]uint64{op.Client, op.Seq}
		if fresh[k] != 1 {
			s.fail("acknowledged c%d#%d %v executed %d times", op.Client, op.Seq, op.Op, fresh[k])
		} else if got := op.Result.String(); got != results[k] {
			s.fail("acknowledged c%d#%d %v answered %s, executed as %s", op.Client, op.Seq, op.Op, got, results[k])
		}
	}
	if err := CheckHistory(s.history, 10*time.Second); err != nil {
		s.fail("%v", err)
	}
	// Every op waits Δ (0.3 s with five replicas) and a lost datagram
	// the client's 0.5 s: two clients under 20 % loss may manage few.
	if len(s.history) < 5 {
		s.fail("only %d operations completed", len(s.history))
	}
}

func thesisConfig() ThesisConfig {
	return ThesisConfig{Tr: thesisTr, Eps: thesisEps, Slots: 32, SlotSize: 128}
}

// TestThesisSim: thesis mode, 3 and 5 replicas (odd seeds 3, even 5),
// loss 0–20 %, duplication, reordering, clock skews within ε, in two
// thirds of the seeds one replica crashed (half of them fading: 80 % of
// its last 5 ms lost), clients failing over: every replica executed a
// prefix of one sequence (the live ones all of it, to the same state),
// every acknowledged request exactly once, histories linearizable.
func TestThesisSim(t *testing.T) {
	seeds := simSeeds(t, 30)
	var ran, ops, refused, outside, outsideWrong int
	for seed := uint64(1); seed <= uint64(seeds); seed++ {
		replicas := 3
		if seed%2 == 0 {
			replicas = 5
		}
		sc := drawThesis(seed, replicas)
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			s := newThesisSim(t, seed, sc, thesisConfig())
			// Thesis mode crosses no barrier, and its BDSM is Timed: WC
			// neither copies nor holds anything of a replica.
			for _, r := range s.reps {
				if st := r.dn.Stats(); st.Held != 0 || st.Group.HeldData != 0 {
					t.Errorf("replica %d: WC copied %d messages and held %d frames in the window, want none", r.idx, st.Held, st.Group.HeldData)
				}
			}
			ran++
			ops += len(s.history)
			refused += int(s.refused)
			if s.maxDelay > thesisTr {
				// The network broke the assumption (a repair under 20 %
				// loss while a replica crashed took longer than t_r): the
				// thesis promises nothing, and the checks may fail.
				outside++
				if len(s.failed) > 0 {
					outsideWrong++
				}
				what := fmt.Sprintf("a write took %v", s.maxDelay)
				if s.undelivered {
					what = "a write never reached a live replica"
				}
				t.Logf("outside the assumptions: %s, t_r %v (%v); checks: %q", what, thesisTr, sc, s.failed)
				return
			}
			if len(s.failed) > 0 {
				t.Fatalf("%s\nscenario: %v\nre-run: RBCAST_SEEDS=%d go test ./kv -run '^TestThesisSim$/^seed=%d$' -v", strings.Join(s.failed, "\n"), sc, seed, seed)
			}
		})
	}
	t.Logf("%d seeds, %d operations, %d late copies refused; %d seeds outside the assumptions (a write slower than t_r), %d of them went wrong", ran, ops, refused, outside, outsideWrong)
}

// TestThesisBrokenAssumptions: the same deployment with its timing
// assumptions broken — clocks further apart than ε, or one replica whose
// frames take longer than t_r — is caught by the checks: replicas
// execute different sequences, or the history is not linearizable.
func TestThesisBrokenAssumptions(t *testing.T) {
	cases := []struct {
		name string
		mod  func(*thesisScenario)
	}{
		{"skew beyond ε", func(sc *thesisScenario) {
			sc.skew = make([]time.Duration, sc.replicas)
			sc.skew[0] = -30 * thesisTr // replica 0's clock runs far behind
		}},
		{"delay beyond t_r", func(sc *thesisScenario) {
			sc.slow, sc.slowBy, sc.slowFrom = 0, 4*thesisTr, 200*time.Millisecond
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			caught, nonlin := 0, 0
			var first string
			for seed := uint64(1); seed <= 10; seed++ {
				sc := thesisScenario{replicas: 3, clients: 4, crash: -1, slow: -1, skew: make([]time.Duration, 3)}
				tc.mod(&sc)
				s := newThesisSim(t, seed, sc, thesisConfig())
				if strings.Contains(strings.Join(s.failed, "\n"), "not linearizable") {
					nonlin++
				}
				if len(s.failed) > 0 {
					caught++
					if first == "" {
						first = fmt.Sprintf("seed %d: %s", seed, s.failed[0])
					}
				}
			}
			t.Logf("%s: caught in %d of 10 seeds (%d with a history that is not linearizable); first: %s", tc.name, caught, nonlin, first)
			if caught == 0 {
				t.Fatalf("%s: no seed of 10 went wrong; the test does not show the assumption matters", tc.name)
			}
		})
	}
}
