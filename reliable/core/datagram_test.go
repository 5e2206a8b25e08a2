package core

import (
	"errors"
	"testing"
)

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

// unreliableFake is fake with the Unreliable level: it keeps what it is
// handed, as the view core copies a datagram into its queue.
type unreliableFake struct {
	fake
	q []byte
	n int
}

func (f *unreliableFake) ProposeUnreliable(_ Time, msg []byte) error {
	f.q = append(f.q[:0], msg...)
	f.n++
	return nil
}

// unwrapCounting is a wrapper (as registration's attached core) that
// counts the times the chain is looked through.
type unwrapCounting struct {
	Core
	unwraps *int
}

func (w unwrapCounting) Unwrap() Core { *w.unwraps++; return w.Core }

// The Stepper finds a core's Unreliable level through its wrappers once,
// when it is made, not at every ProposeUnreliable: Find's type assertion
// on a type parameter looks the itab up in the runtime's table each time,
// a cost the caller of Group.SendUnreliable paid per datagram. A stepper
// of a core without the level refuses with ErrNoUnreliable, and keeps
// refusing.
func TestStepperFindsUnreliableOnce(t *testing.T) {
	inner := &unreliableFake{}
	unwraps := 0
	s := NewStepper(unwrapCounting{unwrapCounting{inner, &unwraps}, &unwraps}, 7, 0)
	after := unwraps
	msg := []byte("datagram")
	for i := range 100 {
		if err := s.ProposeUnreliable(Time(i+1), msg); err != nil {
			t.Fatalf("ProposeUnreliable %d: %v", i, err)
		}
	}
	if inner.n != 100 || string(inner.q) != "datagram" {
		t.Errorf("the inner core got %d datagrams, the last %q; want 100, %q", inner.n, inner.q, msg)
	}
	if unwraps != after {
		t.Errorf("100 ProposeUnreliable looked through the wrappers %d more times, want 0", unwraps-after)
	}
	if after != 6 { // twice each: the Unreliable level, the level per message, and Borrower
		t.Errorf("NewStepper looked through %d wrappers, want 6", after)
	}
	none := NewStepper(unwrapCounting{&fake{}, &unwraps}, 7, 0)
	for range 2 {
		if err := none.ProposeUnreliable(1, msg); !errors.Is(err, ErrNoUnreliable) {
			t.Errorf("ProposeUnreliable on a core without the level = %v, want ErrNoUnreliable", err)
		}
	}
}

// BenchmarkProposeUnreliable: a 900-byte datagram handed to a core behind
// registration's wrapper, as the Stepper did before (Find at every call,
// "find") and does now ("stepper"). Compare the two in one run.
func BenchmarkProposeUnreliable(b *testing.B) {
	msg := make([]byte, 900)
	for _, how := range []string{"find", "stepper"} {
		b.Run(how, func(b *testing.B) {
			inner := &unreliableFake{}
			var c Core = wrapped{inner}
			s := NewStepper(c, 7, 0)
			for b.Loop() {
				if how == "find" {
					u, _ := Find[UnreliableCore](c)
					u.ProposeUnreliable(1, msg)
				} else {
					s.ProposeUnreliable(1, msg)
				}
			}
		})
	}
}
