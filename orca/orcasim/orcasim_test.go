package orcasim_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rbcast/rbcast/orca"
	"github.com/rbcast/rbcast/orca/orcasim"
	"github.com/rbcast/rbcast/testnet"
)

var (
	counter = orca.NewClass[int64]("counter")
	add     = orca.Write(counter, "add", orca.Int64, func(s *int64, d int64) int64 { *s += d; return *s })
	atLeast = orca.Read(counter, "atLeast", func(s *int64, v int64) int64 { return *s }).
		When(func(s *int64, v int64) bool { return *s >= v })
)

func program(n *orca.Node) error {
	c, err := orca.New(n, "c", counter, 0)
	if err != nil {
		return err
	}
	for range 20 {
		if _, err := add.Call(context.Background(), c, int64(n.Rank()+1)); err != nil {
			return err
		}
	}
	want := int64(20 * n.Size() * (n.Size() + 1) / 2)
	_, err = atLeast.Call(context.Background(), c, want)
	return err
}

// A run is a function of its Config and program: twice the same, on a
// lossy segment.
func TestDeterministic(t *testing.T) {
	cfg := orcasim.Config{Members: 4, Seed: 3, In: testnet.Impairment{Loss: 0.1, Duplicate: 0.02}}
	a, err := orcasim.Run(cfg, program)
	if err != nil {
		t.Fatal(err)
	}
	b, err := orcasim.Run(cfg, program)
	if err != nil {
		t.Fatal(err)
	}
	if a.Elapsed != b.Elapsed || a.Stats[2].Group.Protocol.Retransmitted != b.Stats[2].Group.Protocol.Retransmitted {
		t.Errorf("two runs differ: %v / %v, %d / %d retransmissions", a.Elapsed, b.Elapsed,
			a.Stats[2].Group.Protocol.Retransmitted, b.Stats[2].Group.Protocol.Retransmitted)
	}
	for i, st := range a.Stats {
		if st.Applied != 80 || st.Writes != 20 {
			t.Errorf("rank %d: %d applied, %d written; want 80, 20", i, st.Applied, st.Writes)
		}
	}
}

// A program that waits for what never comes is reported with where it
// waits; a crashed member's program is ended without an error; bad
// configurations are refused.
func TestAbortAndCrash(t *testing.T) {
	_, err := orcasim.Run(orcasim.Config{Members: 2, Seed: 1, Timeout: time.Second}, func(n *orca.Node) error {
		c, err := orca.New(n, "c", counter, 0)
		if err != nil {
			return err
		}
		_, err = atLeast.Call(context.Background(), c, 1)
		return err
	})
	if !errors.Is(err, orcasim.ErrAborted) || !strings.Contains(err.Error(), `rank 1 waiting for the guard of counter.atLeast on "c"`) {
		t.Errorf("a run that waits forever: %v", err)
	}
	res, err := orcasim.Run(orcasim.Config{Members: 3, Seed: 1, Crashes: []orcasim.Crash{{Rank: 1, At: 0}}}, func(n *orca.Node) error {
		c, err := orca.New(n, "c", counter, 0)
		if err != nil {
			return err
		}
		if n.Rank() == 1 {
			_, err = atLeast.Call(context.Background(), c, 1000)
			return err
		}
		_, err = add.Call(context.Background(), c, 1)
		return err
	})
	if err != nil || !res.Crashed[1] || res.Crashed[0] {
		t.Errorf("a run with a crash: %v, crashed %v", err, res.Crashed)
	}
	for _, cfg := range []orcasim.Config{{Members: 0}, {Members: 2, Crashes: []orcasim.Crash{{Rank: 2}}}} {
		if _, err := orcasim.Run(cfg, program); err == nil {
			t.Errorf("%+v accepted", cfg)
		}
	}
}

// Writes a member starts with Go while its earlier ones are in flight go
// several to a message of the order (docs/orca.md, "Batches"), and are
// applied in the order each member started them, alike at every replica,
// on a lossy segment.
func TestGoWritesBatched(t *testing.T) {
	const writes = 200
	logs := make([][]int32, 3)
	res, err := orcasim.Run(orcasim.Config{Members: 3, Seed: 5, In: testnet.Impairment{Loss: 0.05}}, func(n *orca.Node) error {
		l, err := orca.New(n, "log", logClass, nil)
		if err != nil {
			return err
		}
		done, err := orca.New(n, "done", counter, 0)
		if err != nil {
			return err
		}
		var ps []*orca.Pending[int64]
		for i := range writes {
			ps = append(ps, pushEntry.Go(context.Background(), l, int64(n.Rank()*1000+i)))
		}
		last := int64(0)
		for i, p := range ps {
			r, err := p.Wait(context.Background())
			if err != nil {
				return err
			}
			if r <= last {
				return fmt.Errorf("write %d returned length %d after %d: not applied in the order started", i, r, last)
			}
			last = r
		}
		// Every member's writes come before its add: once all three
		// added, this replica applied every write.
		if _, err := add.Call(context.Background(), done, 1); err != nil {
			return err
		}
		if _, err := atLeast.Call(context.Background(), done, 3); err != nil {
			return err
		}
		logs[n.Rank()], err = entries.Call(context.Background(), l, struct{}{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	for rank, st := range res.Stats {
		t.Logf("rank %d: %d writes in %d messages, %d of them in %d batches", rank, st.Writes, st.Messages, st.Batched, st.Batches)
		if st.Writes != writes+1 || st.Messages*4 > st.Writes || st.Batched == 0 {
			t.Errorf("rank %d: %d writes in %d messages (%d in %d batches); want at least 4 a message", rank, st.Writes, st.Messages, st.Batched, st.Batches)
		}
	}
	if len(logs[0]) != 3*writes {
		t.Fatalf("rank 0's log has %d entries, want %d", len(logs[0]), 3*writes)
	}
	next := make([]int32, 3)
	for _, v := range logs[0] {
		if r := v / 1000; v%1000 != next[r] {
			t.Fatalf("rank 0's log has rank %d's write %d where %d is next: %v", r, v%1000, next[r], logs[0])
		}
		next[v/1000]++
	}
	for rank := 1; rank < 3; rank++ {
		if !slices.Equal(logs[rank], logs[0]) {
			t.Errorf("rank %d's log differs from rank 0's:\n%v\n%v", rank, logs[rank], logs[0])
		}
	}
}

var (
	logClass  = orca.NewClass[[]int32]("log")
	pushEntry = orca.Write(logClass, "push", orca.Int64, func(s *[]int32, v int64) int64 { *s = append(*s, int32(v)); return int64(len(*s)) })
	entries   = orca.Read(logClass, "entries", func(s *[]int32, _ struct{}) []int32 { return slices.Clone(*s) })
)

// A write started while one of the member's messages is in flight waits
// in the batch for that message to come back, then takes a round trip of
// its own; after Node.Flush it goes out at once, and the run ends a round
// trip sooner (virtual time) with the same writes applied alike.
func TestFlushSavesRoundTrip(t *testing.T) {
	run := func(flush bool) (time.Duration, []orca.Stats) {
		t.Helper()
		res, err := orcasim.Run(orcasim.Config{Members: 3, Seed: 2}, func(n *orca.Node) error {
			c, err := orca.New(n, "c", counter, 0)
			if err != nil {
				return err
			}
			if n.Rank() == 1 {
				add.Go(context.Background(), c, 1) // alone: nothing in flight
				last := add.Go(context.Background(), c, 2)
				if flush {
					if err := n.Flush(); err != nil {
						return err
					}
				}
				if v, err := last.Wait(context.Background()); err != nil || v != 3 {
					return fmt.Errorf("the second write returned %d, %v; want 3", v, err)
				}
			}
			_, err = atLeast.Call(context.Background(), c, 3)
			return err
		})
		if err != nil {
			t.Fatalf("flush %v: %v", flush, err)
		}
		return res.Elapsed, res.Stats
	}
	without, s0 := run(false)
	with, s1 := run(true)
	t.Logf("without Flush %v, with %v", without, with)
	if with >= without {
		t.Errorf("with Flush the run took %v, without %v: want it shorter (the second write not waiting for the first's round trip)", with, without)
	}
	if s0[1].Messages != 2 || s1[1].Messages != 2 {
		t.Errorf("rank 1 sent %d messages without Flush, %d with; want 2 each (the second write alone either way)", s0[1].Messages, s1[1].Messages)
	}
}
