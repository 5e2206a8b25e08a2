package orca_test

import (
	"testing"

	"github.com/rbcast/rbcast/orca"
)

// BenchmarkRead: a read without a guard on the local replica (the
// issue's target: at most 200 ns): the object's read lock and the
// operation's function, nothing else.
func BenchmarkRead(b *testing.B) {
	_, nodes := newLoop(b, 1, 1400, orca.Config{})
	c := must(b, nodes, "c", counter, func() int64 { return 7 })[0]
	b.ReportAllocs()
	for b.Loop() {
		if v, _ := value.Call(bg, c, struct{}{}); v != 7 {
			b.Fatal(v)
		}
	}
}

// BenchmarkReadParallel: reads from every P at once (the read lock is
// shared).
func BenchmarkReadParallel(b *testing.B) {
	_, nodes := newLoop(b, 1, 1400, orca.Config{})
	c := must(b, nodes, "c", counter, func() int64 { return 7 })[0]
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			value.Call(bg, c, struct{}{})
		}
	})
}

// BenchmarkGuardedReadTrue: a guarded read whose guard holds.
func BenchmarkGuardedReadTrue(b *testing.B) {
	_, nodes := newLoop(b, 1, 1400, orca.Config{})
	c := must(b, nodes, "c", counter, func() int64 { return 7 })[0]
	b.ReportAllocs()
	for b.Loop() {
		atLeast.Call(bg, c, 3)
	}
}

// BenchmarkWriteLocal: a write through an in-memory order of one member
// (no network): what the runtime adds to the total order per write —
// encoding, the call's bookkeeping, decoding and applying.
func BenchmarkWriteLocal(b *testing.B) {
	_, nodes := newLoop(b, 1, 1400, orca.Config{})
	c := must(b, nodes, "c", counter, func() int64 { return 0 })[0]
	b.ReportAllocs()
	for b.Loop() {
		if _, err := add.Call(bg, c, 1); err != nil {
			b.Fatal(err)
		}
	}
}
