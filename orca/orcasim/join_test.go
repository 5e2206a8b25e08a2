package orcasim_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/orca"
	"github.com/rbcast/rbcast/orca/orcasim"
	"github.com/rbcast/rbcast/reliable"
	"github.com/rbcast/rbcast/testnet"
)

var (
	gate = orca.NewClass[int64]("gate")
	// enter counts the processes that started; pass waits for all of
	// them (a guarded write, queued at every replica while some have
	// not: it travels in the snapshot).
	enter = orca.Write(gate, "enter", orca.Int64, func(s *int64, d int64) int64 { *s += d; return *s })
	pass  = orca.Write(gate, "pass", orca.Int64, func(s *int64, v int64) int64 { return *s }).
		When(func(s *int64, v int64) bool { return *s >= v })

	log  = orca.NewClass[[]byte]("log")
	push = orca.Write(log, "push", orca.Bytes, func(s *[]byte, b []byte) int { *s = append(*s, b...); return len(*s) })

	done   = orca.NewClass[uint64]("done")
	finish = orca.Write(done, "finish", orca.Int64, func(s *uint64, id int64) uint64 { *s |= 1 << id; return *s })
	all    = orca.Read(done, "all", func(s *uint64, want int64) uint64 { return *s }).
		When(func(s *uint64, want int64) bool { return *s&uint64(want) == uint64(want) })
)

// joinProgram: every process enters, writes while the others do (a
// counter and a log that grows past a frame, so the state goes in many
// parts), makes a guarded write that waits for procs processes to have
// entered (queued at every replica while some have not: it travels in
// snapshots), marks itself done and waits until every process in live
// has (nobody writes after that, so the replicas end alike).
func joinProgram(procs, writes, size int, live []frame.MemberID) func(n *orca.Node) error {
	var want int64
	for _, id := range live {
		want |= 1 << id
	}
	return func(n *orca.Node) error {
		ctx := context.Background()
		g, err := orca.New(n, "gate", gate, 0)
		if err != nil {
			return err
		}
		c, err := orca.New(n, "c", counter, 0)
		if err != nil {
			return err
		}
		l, err := orca.New(n, "log", log, nil)
		if err != nil {
			return err
		}
		d, err := orca.New(n, "done", done, 0)
		if err != nil {
			return err
		}
		if _, err := enter.Call(ctx, g, 1); err != nil {
			return err
		}
		self := n.Self()
		for i := range writes {
			if _, err := add.Call(ctx, c, 1); err != nil {
				return err
			}
			if _, err := push.Call(ctx, l, bytes.Repeat([]byte{byte(self), byte(i)}, size/2)); err != nil {
				return err
			}
		}
		if _, err := pass.Call(ctx, g, int64(procs)); err != nil {
			return err
		}
		if _, err := finish.Call(ctx, d, int64(self)); err != nil {
			return err
		}
		_, err = all.Call(ctx, d, want)
		return err
	}
}

// joinVerdict checks a run with joins: no error; every live rank's
// snapshot equal; the replicas agree and the calls are sequentially
// consistent.
func joinVerdict(t *testing.T, res orcasim.Result, err error, h *orca.History, ids []frame.MemberID) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	var ref []byte
	refRank := -1
	for rank, n := range res.Nodes {
		if res.Crashed[rank] {
			continue
		}
		s, err := n.Snapshot()
		if err != nil {
			t.Fatalf("rank %d: %v", rank, err)
		}
		if ref == nil {
			ref, refRank = s, rank
			continue
		}
		if !bytes.Equal(s, ref) {
			t.Errorf("rank %d's snapshot (%d bytes, position %d) differs from rank %d's (%d bytes, position %d)",
				rank, len(s), n.Position(), refRank, len(ref), res.Nodes[refRank].Position())
		}
	}
	witness, err := h.Agree(ids)
	if err != nil {
		t.Fatalf("Agree: %v", err)
	}
	if err := h.Check(witness, ids); err != nil {
		t.Fatalf("Check: %v", err)
	}
}

func viewsNode(h *orca.History) orca.Config {
	return orca.Config{Views: true, Trace: h.Record,
		Group: reliable.Config{FailureTimeout: 300 * time.Millisecond, HeartbeatInterval: 20 * time.Millisecond}}
}

var lossy = testnet.Impairment{Loss: 0.05, Duplicate: 0.01}

// joinAt is when a process joins: after the founders' view (about 150 ms
// in), while they write.
const joinAt = 200 * time.Millisecond

// A process joins a running group while the founders write, with loss:
// it gets the objects' state (in parts, with a guarded write queued),
// and every replica ends alike.
func TestJoinStateTransfer(t *testing.T) {
	for seed := uint64(1); seed <= 5; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			h := orca.NewHistory()
			ids := []frame.MemberID{1, 2, 3, 4}
			res, err := orcasim.Run(orcasim.Config{Members: 3, Seed: seed, In: lossy, Stay: true, Node: viewsNode(h),
				Joins: []time.Duration{joinAt}}, joinProgram(4, 30, 300, ids))
			joinVerdict(t, res, err, h, ids)
			if st := res.Stats[3]; st.StateReceived < 1500 || st.Applied == 0 {
				t.Errorf("the joiner restored %d bytes of state and applied %d writes; want more than a frame, and some", st.StateReceived, st.Applied)
			}
			if st := res.Stats[0]; st.StateSent != 1 {
				t.Errorf("the donor (rank 0) sent the state at %d views, want 1", st.StateSent)
			}
			others := 0
			for _, e := range h.Applied(4) {
				if e.Origin != 4 {
					others++
				}
			}
			if others == 0 {
				t.Errorf("no founder wrote after the join: the join did not happen while others wrote")
			}
			if sz := res.Nodes[3].Size(); sz != 4 {
				t.Errorf("the joiner's Size is %d, want 4 (the view's)", sz)
			}
		})
	}
}

// The donor crashes while it sends the state: the next view starts the
// transfer over from the next donor (rank 1), and every survivor ends
// alike. Four founders, so that the survivors are a majority of the
// join's view even if the joiner has not installed it yet (under total
// order only a majority goes on: with three founders, two of four would
// stop with reliable.ErrMinority). "inside" crashes the donor once the
// joiner holds part of the state; the instants spread the crash over
// the join (some fall before the donor's snapshot, where rank 1 is the
// donor of the join's view, some after the transfer).
func TestJoinDonorCrash(t *testing.T) {
	joiner := func(nodes []*orca.Node) bool { return len(nodes) > 4 && nodes[4].Stats().StateReceiving > 0 }
	type run struct {
		name  string
		crash orcasim.Crash
		seed  uint64
	}
	var runs []run
	for seed := uint64(1); seed <= 5; seed++ {
		runs = append(runs, run{fmt.Sprint("inside/", seed), orcasim.Crash{Rank: 0, At: joinAt, When: joiner}, seed})
	}
	for at := joinAt; at < joinAt+20*time.Millisecond; at += 2 * time.Millisecond {
		runs = append(runs, run{fmt.Sprint("at/", at), orcasim.Crash{Rank: 0, At: at}, uint64(at)})
	}
	removed, resent := 0, 0
	for _, r := range runs {
		t.Run(r.name, func(t *testing.T) {
			h := orca.NewHistory()
			res, err := orcasim.Run(orcasim.Config{Members: 4, Seed: r.seed, In: lossy, Stay: true, Node: viewsNode(h),
				Joins: []time.Duration{joinAt}, Crashes: []orcasim.Crash{r.crash}}, joinProgram(4, 30, 600, []frame.MemberID{2, 3, 4, 5}))
			if errors.Is(err, reliable.ErrRemoved) {
				// The view layer left a live process out of a view (the
				// joiner before it installed its first view, or a
				// founder): it stops with that error, and the others
				// wait at the end for its mark. Not the transfer's
				// doing; counted.
				removed++
				t.Logf("a live member was removed by the view layer: %v", err)
				return
			}
			joinVerdict(t, res, err, h, []frame.MemberID{1, 2, 3, 4, 5})
			if res.Stats[4].StateReceived == 0 {
				t.Errorf("the joiner restored no state")
			}
			if r.crash.When == nil {
				return
			}
			if res.Stats[0].StateSent == 1 && res.Stats[1].StateSent == 0 {
				// The joiner held the whole state before the crash took
				// the donor (the donor is the orderer, whose messages
				// are delivered as they arrive since vtotal's revision
				// 2): nothing to start over. Counted by resent's floor.
				t.Logf("the transfer completed before the donor crashed")
				return
			}
			if res.Stats[0].StateSent != 1 || res.Stats[1].StateSent != 1 {
				t.Errorf("the donor sent the state at %d views and rank 1 at %d; want 1 each (the transfer started over)",
					res.Stats[0].StateSent, res.Stats[1].StateSent)
			}
			resent++
		})
	}
	if removed > len(runs)/4 || resent < 3 {
		t.Errorf("the view layer removed a live member in %d of %d runs; %d transfers started over and completed, want at least 3", removed, len(runs), resent)
	}
}

// A member crashes and restarts (a new incarnation of its id on the same
// endpoint): it rejoins with the state, its request numbers continue
// after its earlier run's, and every replica ends alike.
func TestRestartRejoins(t *testing.T) {
	for seed := uint64(1); seed <= restartSeeds; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			h := orca.NewHistory()
			ids := []frame.MemberID{1, 2, 3}
			res, err := orcasim.Run(orcasim.Config{Members: 3, Seed: seed, In: lossy, Stay: true, Node: viewsNode(h),
				// Crashed in the middle of its writes, so that its run
				// never marks itself done (the restart does).
				Crashes:  []orcasim.Crash{{Rank: 2, When: func(nodes []*orca.Node) bool { return nodes[2].Stats().Writes >= 10 }}},
				Restarts: []orcasim.Crash{{Rank: 2, At: 250 * time.Millisecond}}}, joinProgram(3, 30, 300, ids))
			joinVerdict(t, res, err, h, ids)
			if len(res.Nodes) != 4 || res.Nodes[3].Self() != 3 || res.Stats[3].StateReceived == 0 {
				t.Fatalf("the restarted member: %d nodes, id %d, %d bytes of state restored", len(res.Nodes), res.Nodes[3].Self(), res.Stats[3].StateReceived)
			}
		})
	}
}

const restartSeeds = 5

// Joins without Views are refused.
func TestJoinNeedsViews(t *testing.T) {
	_, err := orcasim.Run(orcasim.Config{Members: 2, Joins: []time.Duration{0}}, program)
	if err == nil || !strings.Contains(err.Error(), "need Config.Node.Views") {
		t.Errorf("Joins without Views: %v", err)
	}
}
