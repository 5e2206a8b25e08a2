package simtest_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/reliable/core"
	"github.com/rbcast/rbcast/reliable/internal/simtest"
	"github.com/rbcast/rbcast/reliable/pbp"
	"github.com/rbcast/rbcast/testnet"
)

// faulty is a PBP core whose Ready is tampered with: the harness's
// checks must catch each planted fault.
type faulty struct {
	*pbp.Core
	tamper func(self frame.MemberID, rd core.Ready) core.Ready
}

func (f *faulty) Ready() core.Ready {
	rd := f.Core.Ready()
	if f.tamper == nil {
		return rd
	}
	return f.tamper(f.Info().Self, rd)
}

// run plays three members of a clean 1500-byte segment, each proposing k
// messages, with tamper applied to member 1's Ready.
func run(t *testing.T, seed uint64, k int, tamper func(frame.MemberID, core.Ready) core.Ready, trace ...func(testnet.Event)) error {
	s := simtest.New[*faulty](t, simtest.Config{Seed: seed, Group: 7, Members: 3, K: k,
		Link: simtest.Link{MTU: 1500, In: testnet.Impairment{Loss: 0.1}}, Limit: 2 * time.Second, Trace: trace})
	s.Done = func() bool {
		for _, m := range s.Members {
			for j := range s.Members {
				if j != m.Index && m.Next[j] < k {
					return false
				}
			}
		}
		return true
	}
	for _, m := range s.Members {
		c, err := pbp.New(pbp.Config{Group: 7, Self: m.ID, Members: s.Infos(), MTU: 1500})
		if err != nil {
			t.Fatal(err)
		}
		m.Core = &faulty{Core: c}
		if m.Index == 1 {
			m.Core.tamper = tamper
		}
	}
	s.Start()
	s.Run()
	return s.Verdict(func(m *simtest.Member[*faulty]) string { return "" })
}

func TestCleanRunPasses(t *testing.T) {
	if err := run(t, 1, 30, nil); err != nil {
		t.Fatal(err)
	}
}

// TestChecksCatchPlantedFaults: each fault a core could commit fails the
// run with a message that names it.
func TestChecksCatchPlantedFaults(t *testing.T) {
	for _, tc := range []struct {
		name   string
		tamper func(self frame.MemberID, rd core.Ready) core.Ready
		want   string
	}{
		{"duplicate", func(_ frame.MemberID, rd core.Ready) core.Ready {
			if len(rd.Deliveries) > 0 {
				rd.Deliveries = append(slices.Clone(rd.Deliveries), rd.Deliveries[0])
			}
			return rd
		}, "member 1: message"},
		{"lost", func(_ frame.MemberID, rd core.Ready) core.Ready {
			rd.Deliveries = nil
			return rd
		}, "not finished after 2s of virtual time"},
		{"altered", func(_ frame.MemberID, rd core.Ready) core.Ready {
			rd.Deliveries = slices.Clone(rd.Deliveries)
			for i := range rd.Deliveries {
				rd.Deliveries[i].Data = append([]byte{'x'}, rd.Deliveries[i].Data...)
			}
			return rd
		}, "got "},
		{"stranger", func(_ frame.MemberID, rd core.Ready) core.Ready {
			rd.Deliveries = append(slices.Clone(rd.Deliveries), core.Delivery{From: 99, Data: []byte("hi")})
			return rd
		}, "member 1: delivery from 99, not another member"},
		{"self", func(self frame.MemberID, rd core.Ready) core.Ready {
			rd.Deliveries = append(slices.Clone(rd.Deliveries), core.Delivery{From: self, Data: []byte("hi")})
			return rd
		}, "member 1: delivery from 1, not another member"},
		{"foreign", func(_ frame.MemberID, rd core.Ready) core.Ready {
			rd.Deliveries = append(slices.Clone(rd.Deliveries), core.Delivery{From: 0, Data: []byte(simtest.ForeignMarker + ": x")})
			return rd
		}, "member 1: delivered a frame of another group"},
		{"removed twice", func(_ frame.MemberID, rd core.Ready) core.Ready {
			ev := core.Event{Kind: core.MemberFailed, Member: 2}
			rd.Events = append(slices.Clone(rd.Events), ev, ev)
			return rd
		}, "member 1: second removal of member 2"},
		{"removes itself", func(self frame.MemberID, rd core.Ready) core.Ready {
			rd.Events = append(slices.Clone(rd.Events), core.Event{Kind: core.MemberFailed, Member: self})
			return rd
		}, "names a stranger or itself"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := run(t, 1, 30, tc.tamper)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

func TestDeterministic(t *testing.T) {
	simtest.Deterministic(t, 3, func(tb testing.TB, seed uint64, trace func(testnet.Event)) error {
		return run(t, seed, 20, nil, trace)
	})
}

func TestRerun(t *testing.T) {
	got := simtest.Rerun("./reliable/pbp", "TestSim/seed=17", 17)
	want := "RBCAST_SEEDS=17 go test ./reliable/pbp -run '^TestSim$/^seed=17$' -v"
	if got != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
}

func TestMessageIsAFunctionOfItsInputs(t *testing.T) {
	a := simtest.Message(nil, 5, 3, 9, 1400)
	b := simtest.Message([]byte("prefix"), 5, 3, 9, 1400)
	if string(b[len("prefix"):]) != string(a) {
		t.Fatalf("the same message differs: %x then %x", a, b[len("prefix"):])
	}
	for idx := range 200 {
		if m := simtest.Message(nil, 5, 3, idx, 100); len(m) > 100 {
			t.Fatalf("message %d has %d bytes, more than the 100 allowed", idx, len(m))
		}
	}
}
