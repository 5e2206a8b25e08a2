package orca

import (
	"testing"

	"github.com/rbcast/rbcast/frame"
)

var (
	tsink    = NewClass[int64]("tsink")
	tsinkPut = Write(tsink, "put", BytesView, func(s *int64, b []byte) int64 { *s += int64(len(b)); return *s })
)

// BenchmarkDeliverBatch: a replica applying another member's batch of
// 64-byte writes (as BenchmarkOrcaThroughput's are: 21 a message of
// 1438 bytes), handed to Host.Deliver in memory: the replica's work per
// write at a member that is not the writer (per op: one write).
func BenchmarkDeliverBatch(b *testing.B) {
	n, h := startedNodeWith(b, &nullEnv{}, Config{}, 1438)
	o, err := New(n, "sink", tsink, 0)
	if err != nil {
		b.Fatal(err)
	}
	var msgs [][]byte
	for i := range 21 {
		m, _ := BytesView.Append(appendOpHeader(nil, o.obj.id, tsinkPut.info.index), make([]byte, 54))
		setRequest(m, uint32(i+1))
		msgs = append(msgs, m)
	}
	batch := batchOf(msgs...)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i += len(msgs) {
		h.Deliver(2, batch)
	}
	if got := n.Stats().Applied; got < uint64(b.N) {
		b.Fatalf("applied %d, want at least %d", got, b.N)
	}
}

// sinkEnv is an Env whose sends wait in sent until flush hands them to
// every node, as the order would: writes sent while one is in flight
// share batches (TrySend).
type sinkEnv struct {
	nullEnv
	hosts []*Host
}

func (e *sinkEnv) TrySend(msg []byte) error { return e.Send(nil, msg) }

// flush delivers what was sent (and what that sends) to every node, as
// from member 1.
func (e *sinkEnv) flush() {
	for len(e.sent) > 0 {
		m := e.sent[0]
		e.sent = e.sent[1:]
		for _, h := range e.hosts {
			h.Deliver(1, m)
		}
	}
}

// BenchmarkGoBatched: 64-byte writes started with Go, 256 in flight, by
// one member of three, in memory, the order's deliveries held until the
// oldest write must be waited for: the writes share batches as on a live
// group (BenchmarkOrcaThroughput), and one op is a write's whole work at
// its caller and at the three replicas, the part of the throughput
// benchmark's cost that is Orca's. Go allocates a Pending a write;
// GoReuse reuses the one waited for in its place.
func BenchmarkGoBatched(b *testing.B) {
	for _, reuse := range []bool{false, true} {
		name := "Go"
		if reuse {
			name = "GoReuse"
		}
		b.Run(name, func(b *testing.B) { goBatched(b, reuse) })
	}
}

func goBatched(b *testing.B, reuse bool) {
	e, objs := sinkMembers(b, 1438)
	args := make([]byte, 54)
	ring := make([]*Pending[int64], 256)
	b.ReportAllocs()
	k := 0
	for b.Loop() {
		p := ring[k]
		if p != nil {
			if !p.Applied() {
				e.flush()
			}
			if _, err := p.Wait(bg); err != nil {
				b.Fatal(err)
			}
		}
		if reuse {
			ring[k] = tsinkPut.GoReuse(bg, p, objs[0], args)
		} else {
			ring[k] = tsinkPut.Go(bg, objs[0], args)
		}
		k = (k + 1) % len(ring)
	}
	b.StopTimer()
	e.flush()
	st := objs[0].n.Stats()
	b.ReportMetric(float64(st.Writes)/float64(st.Messages), "writes/msg")
}

// sinkMembers starts three hosted members of one group with messages of
// at most maxMessage bytes, each with a "sink" object: member 1's
// messages go to e, which delivers them to all three when flushed; the
// others' go nowhere.
func sinkMembers(tb testing.TB, maxMessage int) (*sinkEnv, []*Object[int64]) {
	tb.Helper()
	e := &sinkEnv{}
	var objs []*Object[int64]
	for i := range 3 {
		var env Env = e
		if i > 0 {
			env = &nullEnv{}
		}
		n, h, err := NewHosted(env, Config{})
		if err != nil {
			tb.Fatal(err)
		}
		if err := h.Start(frame.MemberID(i+1), []frame.MemberID{1, 2, 3}, maxMessage); err != nil {
			tb.Fatal(err)
		}
		o, err := New(n, "sink", tsink, 0)
		if err != nil {
			tb.Fatal(err)
		}
		e.hosts, objs = append(e.hosts, h), append(objs, o)
	}
	return e, objs
}
