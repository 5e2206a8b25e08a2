package orca_test

import (
	"fmt"
	"github.com/rbcast/rbcast/internal/seeds"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/orca"
	"github.com/rbcast/rbcast/orca/orcasim"
	"github.com/rbcast/rbcast/reliable"
	"github.com/rbcast/rbcast/testnet"
)

// Orca on the simulated segment: members run a program of random
// operations on four shared objects (a counter, a register, a log and
// the job queue) over reliable.Drivers in total order, with seeded loss,
// bursts, duplication, reordering, short receive queues, writes in parts,
// and crashes of an ordinary member, of the sequencer, and of the
// sequencer and its successor. Every seed is one reproducible scenario;
// the verdict checks that the survivors' replicas applied the same writes
// at the same places and were alike after every one (History.Agree), that
// every member's calls are sequentially consistent (History.Check), that
// every guarded get woke exactly once and every job was taken exactly
// once.

type simCrash uint8

const (
	crashNone simCrash = iota
	crashMember
	crashSequencer
	crashSequencerTwice
)

func (c simCrash) String() string {
	return [...]string{"none", "member", "sequencer", "sequencer-twice"}[c]
}

type simScenario struct {
	seed       uint64
	members    int
	ops        int // per member
	jobs       int
	in, out    testnet.Impairment
	queueLen   int
	maxPayload int
	window     int
	method     reliable.Method
	safe       reliable.Resilience
	quorum     int
	crash      simCrash
	who        int // crashMember: the rank
	at, gap    time.Duration
}

func (s simScenario) String() string {
	return fmt.Sprintf("seed=%d members=%d ops=%d jobs=%d in={loss %.2f burst %+v dup %.2f reorder %.2f} out={loss %.2f} queue=%d maxPayload=%d window=%d method=%v resilience=%v quorum=%d crash=%v who=%d at=%v gap=%v",
		s.seed, s.members, s.ops, s.jobs, s.in.Loss, s.in.Burst, s.in.Duplicate, s.in.Reorder, s.out.Loss, s.queueLen, s.maxPayload,
		s.window, s.method, s.safe, s.quorum, s.crash, s.who, s.at, s.gap)
}

// Shorter timers than the defaults, so that crashes take little virtual
// time (as reliable's total-order simulation).
const (
	simHeartbeat     = 20 * time.Millisecond
	simFailure       = 200 * time.Millisecond
	simElectionRetry = 5 * time.Millisecond
)

func newSimScenario(seed uint64) simScenario {
	r := rand.New(rand.NewPCG(seed, 0x0ca))
	s := simScenario{seed: seed, members: 2 + r.IntN(4), ops: 10 + r.IntN(30), jobs: r.IntN(40)}
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
	if r.IntN(5) == 0 {
		s.queueLen = 4 + r.IntN(12)
	}
	if r.IntN(3) == 0 {
		s.maxPayload = 40 + r.IntN(100) // writes in parts
	}
	s.window = []int{0, 1, 4, 16}[r.IntN(4)]
	s.method = reliable.Method(r.IntN(3))
	if r.IntN(4) == 0 {
		s.safe = reliable.SafeSequencer
	}
	s.at = time.Duration(r.IntN(20_000)) * time.Microsecond
	switch r.IntN(6) {
	case 0:
		if s.members >= 3 {
			// Neither the sequencer nor the last rank, which closes the
			// queue.
			s.crash, s.who = crashMember, 1+r.IntN(s.members-2)
		}
	case 1:
		s.crash = crashSequencer
	case 2:
		if s.members >= 3 {
			s.crash = crashSequencerTwice
			s.gap = []time.Duration{time.Millisecond, simFailure, 3 * simFailure}[r.IntN(3)]
		}
	}
	survivors := s.members - len(s.crashes())
	if survivors < s.members/2+1 || r.IntN(2) == 0 {
		s.quorum = 1 // crash-stop: any survivor carries on
	}
	return s
}

func (s simScenario) crashes() []orcasim.Crash {
	switch s.crash {
	case crashMember:
		return []orcasim.Crash{{Rank: s.who, At: s.at}}
	case crashSequencer:
		return []orcasim.Crash{{Rank: 0, At: s.at}}
	case crashSequencerTwice:
		return []orcasim.Crash{{Rank: 0, At: s.at}, {Rank: 1, At: s.at + s.gap}}
	}
	return nil
}

// simProgram is every member's program: the last rank puts the jobs in
// three writes and closes the queue after its random operations; the
// others take jobs among theirs; then everyone takes jobs until the queue
// is closed and empty, and waits at a counter until every survivor has
// counted itself there (a member that is to crash does not count itself:
// the others would leave before it, and a group of one crashing member
// and one that needs a quorum would stop).
func simProgram(s simScenario) func(n *orca.Node) error {
	crashes := s.crashes()
	survivors := s.members - len(crashes)
	return func(n *orca.Node) error {
		victim := slices.ContainsFunc(crashes, func(c orcasim.Crash) bool { return c.Rank == n.Rank() })
		r := rand.New(rand.NewPCG(s.seed, uint64(n.Rank())))
		c, err := orca.New(n, "counter", counter, 0)
		if err != nil {
			return err
		}
		reg, err := orca.New(n, "register", register, -1)
		if err != nil {
			return err
		}
		lg, err := orca.New(n, "log", logClass, nil)
		if err != nil {
			return err
		}
		q, err := orca.New(n, "queue", queue, Queue{})
		if err != nil {
			return err
		}
		done, err := orca.New(n, "done", counter, 0)
		if err != nil {
			return err
		}
		closer := n.Rank() == n.Size()-1
		if closer {
			var jobs []int32
			for j := range s.jobs {
				jobs = append(jobs, int32(j))
			}
			for k := range 3 {
				if _, err := put.Call(bg, q, jobs[k*len(jobs)/3:(k+1)*len(jobs)/3]); err != nil {
					return err
				}
			}
		}
		for i := range s.ops {
			var err error
			switch r.IntN(9) {
			case 0:
				_, err = add.Call(bg, c, int64(r.IntN(10)))
			case 1:
				_, err = set.Call(bg, reg, int64(1000*n.Rank()+i))
			case 2:
				entry := []int32{int32(1000*n.Rank() + i)}
				if r.IntN(4) == 0 {
					entry = slices.Repeat(entry, 40) // in parts with a small MaxPayload
				}
				_, err = push.Call(bg, lg, entry)
			case 3:
				_, err = value.Call(bg, c, struct{}{})
			case 4:
				_, err = get.Call(bg, reg, struct{}{})
			case 5:
				var l int64
				if l, err = length.Call(bg, lg, struct{}{}); err == nil && l > 0 {
					_, err = at.Call(bg, lg, int64(r.IntN(int(l))))
				}
			case 6:
				if !closer {
					_, err = getJob.Call(bg, q, struct{}{})
				}
			case 7:
				_, err = queued.Call(bg, q, struct{}{})
			case 8:
				// A burst started with Go: batched while earlier ones
				// are in flight, the long entry after its batch.
				var ps []*orca.Pending[int64]
				for k := range 2 + r.IntN(8) {
					switch r.IntN(3) {
					case 0:
						ps = append(ps, add.Go(bg, c, int64(k)))
					case 1:
						ps = append(ps, set.Go(bg, reg, int64(1000*n.Rank()+i)))
					case 2:
						entry := []int32{int32(1000*n.Rank() + i)}
						if r.IntN(4) == 0 {
							entry = slices.Repeat(entry, 40)
						}
						ps = append(ps, push.Go(bg, lg, entry))
					}
				}
				for _, p := range ps {
					if _, err = p.Wait(bg); err != nil {
						break
					}
				}
			}
			if err != nil {
				return fmt.Errorf("operation %d: %w", i, err)
			}
		}
		if closer {
			if _, err := closeQ.Call(bg, q, struct{}{}); err != nil {
				return err
			}
		}
		for {
			j, err := getJob.Call(bg, q, struct{}{})
			if err != nil {
				return fmt.Errorf("draining the queue: %w", err)
			}
			if j < 0 {
				break
			}
		}
		if !victim {
			if _, err := add.Call(bg, done, 1); err != nil {
				return err
			}
		}
		_, err = atLeast.Call(bg, done, int64(survivors))
		return err
	}
}

type simOutcome struct {
	crashed, guarded, parts, batched int
}

func runSim(t *testing.T, s simScenario) (simOutcome, error) {
	h := orca.NewHistory()
	crashes := s.crashes()
	cfg := orcasim.Config{
		Members: s.members, Seed: s.seed, In: s.in, Out: s.out, QueueLen: s.queueLen, Crashes: crashes,
		Timeout: time.Minute, Stay: !simLeave(),
		Node: orca.Config{Trace: h.Record, Group: reliable.Config{
			Window: s.window, Method: s.method, Resilience: s.safe, Quorum: s.quorum, MaxPayload: s.maxPayload,
			HeartbeatInterval: simHeartbeat, FailureTimeout: simFailure, ElectionRetry: simElectionRetry,
		}},
	}
	res, err := orcasim.Run(cfg, simProgram(s))
	if err != nil {
		return simOutcome{}, err
	}
	var out simOutcome
	var survivors, checked, all []frame.MemberID
	for rank := range s.members {
		id := frame.MemberID(rank + 1)
		all = append(all, id)
		if res.Crashed[rank] {
			out.crashed++
		} else {
			survivors = append(survivors, id)
		}
		out.parts += int(res.Stats[rank].Parts)
		out.batched += int(res.Stats[rank].Batched)
	}
	if bad := h.Bad(); len(bad) > 0 {
		return out, fmt.Errorf("%d messages dropped as malformed, the first: %v", len(bad), bad[0])
	}
	// With the default resilience and quorum whatever any member applied,
	// a crashed one included, every survivor applied in the same place;
	// otherwise a crashed sequencer's last messages may be beyond what the
	// survivors agreed on (docs/protocols.md, "Sequencer").
	sequencerCrashed := s.crash == crashSequencer || s.crash == crashSequencerTwice // rank 0 is the first sequencer
	checked = survivors
	if !sequencerCrashed || s.safe == reliable.SafeMajority && s.quorum == 0 {
		checked = all
	}
	witness, err := h.Agree(checked)
	if err != nil {
		return out, fmt.Errorf("replicas: %w", err)
	}
	if err := h.Check(witness, checked); err != nil {
		return out, fmt.Errorf("sequential consistency: %w", err)
	}
	// Every job taken exactly once; every get a survivor's program made
	// applied exactly once (a guard wakes once).
	order := h.Applied(witness)
	var taken []int32
	gets := map[frame.MemberID]int{}
	for _, w := range order {
		if w.Object == "queue" && w.Op == "get" {
			gets[w.Origin]++
			if j := w.Result.(int32); j >= 0 {
				taken = append(taken, j)
			}
		}
	}
	slices.Sort(taken)
	for j := range s.jobs {
		if j >= len(taken) || taken[j] != int32(j) {
			return out, fmt.Errorf("jobs taken %v, want each of 0..%d once", taken, s.jobs-1)
		}
	}
	if len(taken) != s.jobs {
		return out, fmt.Errorf("jobs taken %v, want each of 0..%d once", taken, s.jobs-1)
	}
	for _, m := range survivors {
		calls := 0
		for _, c := range h.Calls(m) {
			if c.Object == "queue" && c.Op == "get" {
				calls++
			}
		}
		if calls != gets[m] {
			return out, fmt.Errorf("member %d's program got %d jobs (or the end), but its gets were applied %d times", m, calls, gets[m])
		}
		out.guarded += calls
	}
	return out, nil
}

// simLeave: with RBCAST_ORCA_LEAVE=1 members leave the group (Close) as
// their programs return, instead of staying until all have (Stay). Not
// the default: under loss a member that missed a peer's Leave frames
// after the sequencer left can wait in an election that never completes
// (a limit of the reliable layer's leave, see the report of issue 22);
// this knob reproduces it.
func simLeave() bool {
	v, _ := strconv.ParseBool(os.Getenv("RBCAST_ORCA_LEAVE"))
	return v
}

// simSeeds is how many seeds to run: RBCAST_SEEDS if set, else 20 under
// -short, else def (internal/seeds).
func simSeeds(t *testing.T, def int) int { return seeds.Count(t, def, 20) }

// TestSim runs many seeded scenarios. A failing seed prints the command
// that runs it alone.
func TestSim(t *testing.T) {
	n := simSeeds(t, 200)
	var ran, crashes, guarded, parts, batched atomic.Int64
	t.Cleanup(func() {
		t.Logf("%d seeds passed: %d members crashed, %d guarded gets woke once each, %d messages sent in parts, %d in batches",
			ran.Load(), crashes.Load(), guarded.Load(), parts.Load(), batched.Load())
	})
	for seed := uint64(1); seed <= uint64(n); seed++ {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			t.Parallel()
			s := newSimScenario(seed)
			out, err := runSim(t, s)
			if err != nil {
				env := ""
				if simLeave() {
					env = "RBCAST_ORCA_LEAVE=1 "
				}
				t.Fatalf("%v\nscenario: %v\nre-run: %sRBCAST_SEEDS=%d go test ./orca -run '^TestSim$/^seed=%d$' -v", err, s, env, seed, seed)
			}
			ran.Add(1)
			crashes.Add(int64(out.crashed))
			guarded.Add(int64(out.guarded))
			parts.Add(int64(out.parts))
			batched.Add(int64(out.batched))
		})
	}
}
