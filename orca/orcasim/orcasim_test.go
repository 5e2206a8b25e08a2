package orcasim_test

import (
	"context"
	"errors"
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
