package orca_test

import (
	"testing"

	"github.com/rbcast/rbcast/orca"
)

// A write in the steady state allocates nothing of Orca's own (DESIGN.md,
// decision 4): the message is encoded into a pooled buffer, a Call's
// bookkeeping is reused by the next, the replica decodes, guards and
// applies with the operation's types (no boxing), and the result goes
// to the caller the same way. What is left is the user's: a Pending for
// each Go (the caller holds it), and what the argument codec's Decode
// makes at every replica (Bytes copies).
func TestWriteAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates on its own account")
	}
	_, one := newLoop(t, 1, 1400, orca.Config{})
	c := must(t, one, "c", counter, func() int64 { return 0 })[0]
	q := must(t, one, "q", queue, func() Queue { return Queue{} })[0]
	if _, err := closeQ.Call(bg, q, struct{}{}); err != nil { // get's guard holds from now on
		t.Fatal(err)
	}
	_, three := newLoop(t, 3, 1400, orca.Config{})
	s := must(t, three, "sink", sink, func() int64 { return 0 })[0]
	args := make([]byte, 54)
	for _, tc := range []struct {
		name string
		want float64
		fn   func() error
	}{
		{"Call", 0, func() error { _, err := add.Call(bg, c, 1000); return err }},
		{"guarded Call whose guard holds", 0, func() error { _, err := getJob.Call(bg, q, struct{}{}); return err }},
		{"Go and Wait", 1, func() error { _, err := add.Go(bg, c, 1000).Wait(bg); return err }},
		{"Call with Bytes, 3 members", 3, func() error { _, err := sinkPut.Call(bg, s, args); return err }},
	} {
		for range 10 { // fill the pools
			if err := tc.fn(); err != nil {
				t.Fatalf("%s: %v", tc.name, err)
			}
		}
		if got := testing.AllocsPerRun(1000, func() {
			if err := tc.fn(); err != nil {
				t.Fatalf("%s: %v", tc.name, err)
			}
		}); got != tc.want {
			t.Errorf("%s: %v allocations a write, want %v", tc.name, got, tc.want)
		}
	}
}
