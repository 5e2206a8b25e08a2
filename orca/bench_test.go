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

// BenchmarkGoLocal: writes of size-byte messages (the header and the
// bytes, as BenchmarkOrcaThroughput sends) started with GoReuse, 256 in
// flight, by one member of three on an in-memory order: one op is one
// write's work at every replica and at its caller, the part of the
// throughput benchmark's cost that is Orca's. The arguments go by Bytes
// (a copy at every replica), or by BytesView as in the throughput
// benchmark.
func BenchmarkGoLocal(b *testing.B) {
	for _, bench := range []struct {
		name string
		size int
		op   *orca.Op[int64, []byte, int64]
	}{{"size=64", 64, sinkPutCopy}, {"size=1000", 1000, sinkPutCopy}, {"BytesView/size=64", 64, sinkPut}, {"BytesView/size=1000", 1000, sinkPut}} {
		size, op := bench.size, bench.op
		b.Run(bench.name, func(b *testing.B) {
			_, nodes := newLoop(b, 3, 1400, orca.Config{})
			s := must(b, nodes, "sink", sink, func() int64 { return 0 })[0]
			args := make([]byte, size-10)
			ring := make([]*orca.Pending[int64], 256)
			b.ReportAllocs()
			k := 0
			for b.Loop() {
				p := ring[k]
				if p != nil {
					if _, err := p.Wait(bg); err != nil {
						b.Fatal(err)
					}
				}
				ring[k] = op.GoReuse(bg, p, s, args)
				k = (k + 1) % len(ring)
			}
		})
	}
}
