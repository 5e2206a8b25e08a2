package orca_test

import (
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"strings"
	"testing"

	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/orca"
	"github.com/rbcast/rbcast/orca/orcasim"
	"github.com/rbcast/rbcast/testnet"
)

// logProgram: every member pushes its entries one at a time to a shared
// log and reads the whole log after each push, and adds to a counter and
// reads it.
func logProgram(rounds int, broken func(n *orca.Node)) func(n *orca.Node) error {
	return func(n *orca.Node) error {
		if broken != nil && n.Rank() == 1 {
			broken(n)
		}
		lg, err := orca.New(n, "log", logClass, nil)
		if err != nil {
			return err
		}
		c, err := orca.New(n, "counter", counter, 0)
		if err != nil {
			return err
		}
		for i := range rounds {
			if _, err := push.Call(bg, lg, []int32{int32(100*n.Rank() + i)}); err != nil {
				return err
			}
			if _, err := all.Call(bg, lg, struct{}{}); err != nil {
				return err
			}
			if _, err := add.Call(bg, c, int64(1+n.Rank())); err != nil {
				return err
			}
			if _, err := value.Call(bg, c, struct{}{}); err != nil {
				return err
			}
		}
		return nil
	}
}

// isPush reports whether an Orca message is a push to the log (the op
// message's object id, FNV-1a of "log", and operation 0).
func isPush(msg []byte) bool {
	h := fnv.New32a()
	h.Write([]byte("log"))
	return len(msg) > 5 && msg[0] == 0x01 && binary.BigEndian.Uint32(msg[1:]) == h.Sum32() && msg[5] == 0
}

// The checker passes a correct run, and fails one with a deliberately
// broken replica: one that drops a message, one that swaps two, one that
// applies its own writes a message late. Agree sees the broken replica's
// state differ from the others'.
func TestCheckCatchesBrokenReplica(t *testing.T) {
	members := []frame.MemberID{1, 2, 3}
	run := func(broken func(n *orca.Node)) *orca.History {
		h := orca.NewHistory()
		_, err := orcasim.Run(orcasim.Config{Members: 3, Seed: 7, In: testnet.Impairment{Loss: 0.02}, Stay: true,
			Node: orca.Config{Trace: h.Record}}, logProgram(12, broken))
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	h := run(nil)
	witness, err := h.Agree(members)
	if err != nil {
		t.Fatalf("a correct run: %v", err)
	}
	if err := h.Check(witness, members); err != nil {
		t.Fatalf("a correct run: %v", err)
	}

	// Each hook breaks member 2's replica (rank 1) once, early.
	for _, tc := range []struct {
		name string
		hook func() func(frame.MemberID, []byte, func(frame.MemberID, []byte))
	}{
		{"drops a message", func() func(frame.MemberID, []byte, func(frame.MemberID, []byte)) {
			seen := 0
			return func(from frame.MemberID, data []byte, deliver func(frame.MemberID, []byte)) {
				if from == 3 {
					if seen++; seen == 3 {
						return
					}
				}
				deliver(from, data)
			}
		}},
		{"swaps two pushes", func() func(frame.MemberID, []byte, func(frame.MemberID, []byte)) {
			// Writes to different objects commute (swapping them is
			// another order just as consistent): swap two pushes to the
			// log, from different members.
			var held []byte
			done := false
			return func(from frame.MemberID, data []byte, deliver func(frame.MemberID, []byte)) {
				switch {
				case !done && held == nil && from == 3 && isPush(data):
					held = append([]byte(nil), data...)
					return
				case held != nil && from == 1 && isPush(data):
					deliver(from, data)
					deliver(3, held)
					held, done = nil, true
					return
				case held != nil && from == 3:
					// Another message of the same member: give up the
					// swap, keep their order.
					deliver(3, held)
					held, done = nil, true
				}
				deliver(from, data)
			}
		}},
		{"applies its own writes late", func() func(frame.MemberID, []byte, func(frame.MemberID, []byte)) {
			var held []byte
			late := 0
			return func(from frame.MemberID, data []byte, deliver func(frame.MemberID, []byte)) {
				if held != nil {
					deliver(from, data)
					deliver(2, held)
					held = nil
					return
				}
				if from == 2 && late < 4 {
					late++
					held = append([]byte(nil), data...)
					return
				}
				deliver(from, data)
			}
		}},
	} {
		t.Run(strings.ReplaceAll(tc.name, " ", "_"), func(t *testing.T) {
			h := run(func(n *orca.Node) { orca.BreakReplica(n, tc.hook()) })
			if _, err := h.Agree(members); err == nil {
				t.Error("Agree found the broken replica alike")
			} else {
				t.Logf("Agree: %v", err)
			}
			// The witness is a correct member; the broken member's calls
			// are the ones checked against it.
			err := h.Check(1, members)
			if err == nil || !strings.Contains(err.Error(), "member 2") {
				t.Fatalf("Check with a replica that %s: %v; want a violation by member 2", tc.name, err)
			}
			t.Logf("Check: %v", err)
			if err := h.Check(1, []frame.MemberID{1, 3}); err != nil {
				t.Errorf("the correct members' calls: %v", err)
			}
		})
	}
}

// A History records a simulated run (Config.Trace) and checks it.
func ExampleHistory_Check() {
	h := orca.NewHistory()
	_, err := orcasim.Run(orcasim.Config{Members: 2, Seed: 1, Stay: true, Node: orca.Config{Trace: h.Record}}, logProgram(3, nil))
	fmt.Println(err, h.Check(1, []frame.MemberID{1, 2}))
	// Output: <nil> <nil>
}
