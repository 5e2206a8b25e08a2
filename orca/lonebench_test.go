package orca

import (
	"context"
	"testing"
)

// lastEnv is an Env that keeps the last message sent (in a buffer of its
// own, reused) and waits as a live group's Env does; it can TrySend, so
// a node on it batches.
type lastEnv struct {
	nullEnv
	last []byte
}

func (e *lastEnv) Send(_ context.Context, msg []byte) error {
	e.last = append(e.last[:0], msg...)
	return nil
}
func (e *lastEnv) TrySend(msg []byte) error { return e.Send(nil, msg) }
func (e *lastEnv) Wait(ctx context.Context, w Waiter) error {
	return (&groupEnv{}).Wait(ctx, w)
}

// BenchmarkLoneWrite: one write in flight, its caller waiting, delivered
// back to its member as the sequencer delivers its own: the CPU work of
// a write's path beyond the order's (the encoding and the send at the
// caller; at the replica the parse, the operation, the result and the
// wake-up; the caller's return), all on one goroutine, so without the
// scheduler's hand-offs, which the live benchmark (BenchmarkOrcaLatency)
// adds as the raw order's do.
func BenchmarkLoneWrite(b *testing.B) {
	e := &lastEnv{}
	n, h := startedNode(b, e)
	o, err := New(n, "c", tcounter, 0)
	if err != nil {
		b.Fatal(err)
	}
	var p *Pending[int64]
	b.ReportAllocs()
	for b.Loop() {
		p = tadd.GoReuse(bg, p, o, 1)
		p.c.Wake() // its caller waits
		h.Deliver(1, e.last)
		if _, err := p.Wait(bg); err != nil {
			b.Fatal(err)
		}
	}
	if v, _ := tvalueC.Call(bg, o, struct{}{}); v != int64(b.N) {
		b.Fatalf("value %d, want %d", v, b.N)
	}
}
