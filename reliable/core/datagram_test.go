package core

import "testing"

// DatagramWindow: new numbers pass once, in any order within the span;
// duplicates, and numbers older than the span, are dropped; a new
// incarnation starts again; the numbers wrap.
func TestDatagramWindow(t *testing.T) {
	var w DatagramWindow
	steps := []struct {
		inc, seq uint32
		fresh    bool
	}{
		{1, 10, true}, {1, 10, false}, {1, 12, true}, {1, 11, true}, {1, 11, false},
		{1, 12 + DatagramSpan - 1, true},
		{1, 12, false}, // span-1 back: remembered, seen
		{1, 13, true},  // span-2 back: remembered, new
		{1, 11, false}, // span back: too old
		{1, 200, true}, {1, 199, true}, {1, 199, false},
		{2, 5, true}, {2, 5, false}, {1, 300, true},
		{3, 0xfffffffe, true}, {3, 1, true}, {3, 0xffffffff, true}, {3, 0xffffffff, false},
	}
	for i, s := range steps {
		if got := w.Fresh(s.inc, s.seq); got != s.fresh {
			t.Fatalf("step %d: Fresh(%d, %d) = %v, want %v", i, s.inc, s.seq, got, s.fresh)
		}
	}
}
