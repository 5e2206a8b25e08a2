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

// wrapped is a core that embeds another, as registration's attached core
// does: the embedded core's optional methods are hidden from a type
// assertion on the wrapper.
type wrapped struct{ Core }

func (w wrapped) Unwrap() Core { return w.Core }

type unreliableCore struct{ Core }

func (unreliableCore) ProposeUnreliable(Time, []byte) error { return nil }

// Find looks through wrappers for an optional interface, and says when
// no core in the chain has it.
func TestFind(t *testing.T) {
	inner := unreliableCore{}
	if _, ok := Core(wrapped{inner}).(UnreliableCore); ok {
		t.Fatal("the wrapper itself has ProposeUnreliable: the test wraps nothing")
	}
	if u, ok := Find[UnreliableCore](wrapped{wrapped{inner}}); !ok || u != (unreliableCore{}) {
		t.Errorf("Find through two wrappers = %v, %v; want the inner core", u, ok)
	}
	if _, ok := Find[UnreliableCore](wrapped{}); ok {
		t.Error("Find in a chain without the interface: ok")
	}
}
