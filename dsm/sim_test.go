package dsm

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// A simulated run is a function of its SimConfig and program: the same
// seed gives the same history, event for event.
func TestSimulateDeterministic(t *testing.T) {
	run := func() string {
		var sb strings.Builder
		_, err := Simulate(SimConfig{Members: 3, Seed: 9, In: lossy, Trace: func(rank int, ev TraceEvent) {
			fmt.Fprintf(&sb, "%d %d %d %d %x %d %d\n", rank, ev.Kind, ev.From, ev.Location, ev.Data, ev.Seq, ev.TS)
		}}, func(n *Node) error {
			return lockProgram(10, nil)(n)
		})
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
func TestSimulateDeadlock(t *testing.T) {
	_, err := Simulate(SimConfig{Members: 3, Seed: 1, Timeout: 10 * time.Second}, func(n *Node) error {
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
	if !errors.Is(err, ErrAborted) || !strings.Contains(err.Error(), "rank 1 joining segment 42") || !strings.Contains(err.Error(), "timeout") {
		t.Fatalf("error %v, want a deadlock report naming rank 1", err)
	}
}

// A Lock whose context ends gives up: the request, already broadcast, is
// released as soon as it is granted, and the lock is free afterwards.
func TestLockCancelled(t *testing.T) {
	bg := context.Background()
	cancelled, cancel := context.WithCancel(bg)
	cancel()
	_, err := Simulate(SimConfig{Members: 3, Seed: 2, In: lossy}, func(n *Node) error {
		switch n.Rank() {
		case 0:
			if err := n.Lock(bg, 1); err != nil {
				return err
			}
			if err := n.Barrier(bg, 1); err != nil {
				return err
			}
			if err := n.Barrier(bg, 2); err != nil {
				return err
			}
			if err := n.Unlock(1); err != nil {
				return err
			}
		case 1:
			if err := n.Barrier(bg, 1); err != nil {
				return err
			}
			if err := n.Lock(cancelled, 1); !errors.Is(err, context.Canceled) {
				return fmt.Errorf("lock with a cancelled context: %v", err)
			}
			if err := n.Barrier(bg, 2); err != nil {
				return err
			}
		default:
			if err := n.Barrier(bg, 1); err != nil {
				return err
			}
			if err := n.Barrier(bg, 2); err != nil {
				return err
			}
		}
		// Rank 0's release (and so the grant and release of rank 1's
		// abandoned request) precede its barrier message.
		if err := n.Barrier(bg, 3); err != nil {
			return err
		}
		if err := n.Lock(bg, 1); err != nil {
			return fmt.Errorf("lock after an abandoned request: %v", err)
		}
		return n.Unlock(1)
	})
	if err != nil {
		t.Fatal(err)
	}
}
