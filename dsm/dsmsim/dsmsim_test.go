package dsmsim_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/rbcast/rbcast/dsm"
	"github.com/rbcast/rbcast/dsm/dsmsim"
	"github.com/rbcast/rbcast/reliable"
	"github.com/rbcast/rbcast/testnet"
)

var lossy = testnet.Impairment{Loss: 0.05, Duplicate: 0.02, Reorder: 0.05, ReorderDelay: 300 * time.Microsecond}

// attach creates the segment at rank 0 and joins it elsewhere.
func attach(n *dsm.Node, key uint32, locs, size int) (*dsm.Segment, error) {
	if n.Rank() == 0 {
		return n.CreateSegment(key, locs, size)
	}
	return n.JoinSegment(context.Background(), key, locs, size)
}

// counterProgram: every rank writes its own locations, then increments
// a shared counter under lock 1 rounds times; a final barrier. It
// returns each rank's view of the counter and of every rank's writes.
func counterProgram(rounds, writes int, counter []uint64, seen [][]int) func(*dsm.Node) error {
	return func(n *dsm.Node) error {
		ctx := context.Background()
		s, err := attach(n, 1, 1+n.Size()*writes, 8)
		if err != nil {
			return err
		}
		v := make([]byte, 8)
		for i := range writes {
			binary.LittleEndian.PutUint64(v, uint64(n.Rank()*1000+i+1))
			if err := s.Write(1+n.Rank()*writes+i, v); err != nil {
				return err
			}
		}
		for range rounds {
			if err := n.Lock(ctx, 1); err != nil {
				return err
			}
			c, err := s.Read(0, v)
			if err != nil {
				return err
			}
			binary.LittleEndian.PutUint64(v, binary.LittleEndian.Uint64(c)+1)
			if err := s.Write(0, v); err != nil {
				return err
			}
			if err := n.Unlock(1); err != nil {
				return err
			}
		}
		if err := n.Barrier(ctx, 1); err != nil {
			return err
		}
		counter[n.Rank()] = binary.LittleEndian.Uint64(s.Location(0))
		for r := range n.Size() {
			for i := range writes {
				if binary.LittleEndian.Uint64(s.Location(1+r*writes+i)) == uint64(r*1000+i+1) {
					seen[n.Rank()][r]++
				}
			}
		}
		return nil
	}
}

// A simulated run is a function of its Config and program: the same
// seed gives the same history, event for event.
func TestRunDeterministic(t *testing.T) {
	run := func() string {
		var sb strings.Builder
		counter, seen := make([]uint64, 3), [][]int{make([]int, 3), make([]int, 3), make([]int, 3)}
		_, err := dsmsim.Run(dsmsim.Config{Members: 3, Seed: 9, In: lossy, Trace: func(rank int, ev dsm.TraceEvent) {
			fmt.Fprintf(&sb, "%d %d %d %d %x %d %d\n", rank, ev.Kind, ev.From, ev.Location, ev.Data, ev.Seq, ev.TS)
		}}, counterProgram(10, 20, counter, seen))
		if err != nil {
			t.Fatal(err)
		}
		return sb.String()
	}
	a, b := run(), run()
	if a != b || len(a) == 0 {
		t.Fatalf("two runs with one seed differ (%d and %d bytes of history)", len(a), len(b))
	}
}

// A program that can never finish ends the run with ErrAborted, saying
// where every member waits, and leaves no goroutine behind.
func TestRunDeadlock(t *testing.T) {
	_, err := dsmsim.Run(dsmsim.Config{Members: 3, Seed: 1, Timeout: 10 * time.Second}, func(n *dsm.Node) error {
		if n.Rank() == 2 {
			return nil // exits without the barrier the others wait at
		}
		if n.Rank() == 1 {
			_, err := n.JoinSegment(context.Background(), 42, 1, 8) // never created
			return err
		}
		return n.Lock(context.Background(), 1) // granted: rank 2 left, rank 1 answers while it waits
	})
	t.Log(err)
	if !errors.Is(err, dsmsim.ErrAborted) || !strings.Contains(err.Error(), "rank 1 joining segment 42") || !strings.Contains(err.Error(), "timeout") {
		t.Fatalf("error %v, want a deadlock report naming rank 1", err)
	}
}

// A program blocked at a barrier is reported with the members the
// barrier still waits for.
func TestRunDeadlockAtBarrier(t *testing.T) {
	_, err := dsmsim.Run(dsmsim.Config{Members: 3, Seed: 1, Timeout: 10 * time.Second}, func(n *dsm.Node) error {
		if n.Rank() == 2 {
			_, err := n.JoinSegment(context.Background(), 42, 1, 8) // never created
			return err
		}
		return n.Barrier(context.Background(), 5)
	})
	if !errors.Is(err, dsmsim.ErrAborted) || !strings.Contains(err.Error(), "timeout") ||
		!strings.Contains(err.Error(), "rank 0 at barrier 5 waiting for members [3]") {
		t.Fatalf("error %v, want a timeout naming rank 0's barrier and member 3", err)
	}
}

// A send window of 2 frames and an outbox of 4 messages: writes wait for
// the window (back-pressure through Run's scheduler) and nothing is
// lost; the order total group delivers every member's own messages too,
// which the node ignores, and its lock counter is exact.
func TestRunSmallWindow(t *testing.T) {
	for _, order := range []reliable.Order{reliable.FIFO, reliable.Total} {
		cfg := dsm.Config{OutboxLimit: 4}
		cfg.Group.Window = 2
		cfg.Group.Order = order
		counter, seen := make([]uint64, 3), [][]int{make([]int, 3), make([]int, 3), make([]int, 3)}
		res, err := dsmsim.Run(dsmsim.Config{Members: 3, Seed: 5, In: lossy, Node: cfg}, counterProgram(5, 300, counter, seen))
		if err != nil {
			t.Fatalf("%v: %v", order, err)
		}
		for rank := range 3 {
			for r, got := range seen[rank] {
				if got != 300 {
					t.Errorf("%v: rank %d sees %d of rank %d's 300 writes", order, rank, got, r)
				}
			}
			if order == reliable.Total && counter[rank] != 15 {
				t.Errorf("%v: rank %d reads the counter as %d, want 15", order, rank, counter[rank])
			}
		}
		if st := res.Stats[0]; st.Writes != 305 || st.Group.Link.FramesSent == 0 {
			t.Errorf("%v: rank 0's stats %+v", order, st)
		}
	}
}

// A bad Config is refused with an error naming the field.
func TestRunConfigErrors(t *testing.T) {
	nop := func(*dsm.Node) error { return nil }
	if _, err := dsmsim.Run(dsmsim.Config{}, nop); err == nil || !strings.Contains(err.Error(), "Members is 0") {
		t.Errorf("no members: %v", err)
	}
	cfg := dsmsim.Config{Members: 2}
	cfg.Node.Group.OnEvent = func(reliable.Event) {}
	if _, err := dsmsim.Run(cfg, nop); !errors.Is(err, reliable.ErrConfig) || !strings.Contains(err.Error(), "OnEvent") {
		t.Errorf("OnEvent set: %v", err)
	}
}

// A program's error and panic are reported with its rank; the others
// finish.
func TestRunProgramErrors(t *testing.T) {
	res, err := dsmsim.Run(dsmsim.Config{Members: 3, Seed: 1}, func(n *dsm.Node) error {
		switch n.Rank() {
		case 1:
			return errors.New("bad input")
		case 2:
			panic("oops")
		}
		return nil
	})
	if err == nil || !strings.Contains(err.Error(), "rank 1: bad input") || !strings.Contains(err.Error(), "rank 2: panic: oops") ||
		strings.Contains(err.Error(), "rank 0") {
		t.Fatalf("error %v", err)
	}
	if len(res.Stats) != 3 {
		t.Fatalf("%d members' stats", len(res.Stats))
	}
}
