package core

import (
	"testing"

	"github.com/rbcast/rbcast/frame"
)

func TestHistogramBuckets(t *testing.T) {
	var h Histogram
	bounds := LatencyBounds()
	for _, d := range []Duration{0, bounds[0], bounds[0] + 1, bounds[5], 3 * Duration(1e9)} {
		h.Observe(d)
	}
	want := map[int]uint64{0: 2, 1: 1, 5: 1, LatencyBuckets: 1}
	for i, c := range h.Counts {
		if c != want[i] {
			t.Errorf("bucket %d counts %d, want %d (all: %v)", i, c, want[i], h.Counts)
		}
	}
	if h.Count() != 5 || h.Sum != bounds[0]*2+1+bounds[5]+3e9 {
		t.Errorf("count %d, sum %d", h.Count(), h.Sum)
	}
	for i := 1; i < len(bounds); i++ {
		if bounds[i] <= bounds[i-1] {
			t.Fatalf("bounds not increasing at %d: %v", i, bounds)
		}
	}
}

// selfDelivering is the fake core with total order's self delivery.
type selfDelivering struct{ fake }

func (f *selfDelivering) Info() Info {
	i := f.fake.Info()
	i.SelfDelivery = true
	return i
}

// The stepper's latency histograms: repairs per member (as the
// percentiles count them), and self-delivery from Propose to the Ready
// that delivers the message back, matched in proposal order.
func TestStepperLatencies(t *testing.T) {
	f := &selfDelivering{fake{repairing: map[frame.MemberID]bool{}}}
	s := NewStepper(f, 7, 0)
	ack := func(from frame.MemberID) []byte { return ethFrame(t, 7, from, &frame.Empty{T: frame.Ack}) }
	const us = Duration(1000)
	f.repairing[2] = true
	s.Step(Time(100*us), ack(2))
	f.repairing[2] = false
	s.Step(Time(400*us), ack(2)) // filled after 300 µs: bucket (250, 500]

	s.Propose(Time(1000*us), []byte("a"))
	s.Propose(Time(1010*us), []byte("b"))
	s.Tick(Time(1030 * us))
	f.ready = Ready{Deliveries: []Delivery{{From: 2, Data: []byte("x")}, {From: 1, Data: []byte("a")}}}
	s.Ready()
	s.Ready() // not counted twice
	s.Advance()
	s.Step(Time(2010*us), ack(4))
	f.ready = Ready{Deliveries: []Delivery{{From: 1, Data: []byte("b")}, {From: 1, Data: []byte("not proposed here")}}}
	s.Ready()
	s.Advance()

	l := s.Latencies()
	if len(l.Peers) != 3 || l.Peers[1].ID != 2 || l.Peers[1].Repair.Count() != 1 || l.Peers[1].Repair.Counts[5] != 1 || l.Peers[1].Repair.Sum != 300*us {
		t.Errorf("member 2's repairs: %+v, want one of 300 µs", l.Peers)
	}
	if l.Repair.Count() != 1 {
		t.Errorf("all repairs: %+v", l.Repair)
	}
	// a: 30 µs, bucket (25, 50]; b: 1000 µs, bucket (500 µs, 1 ms].
	if sd := l.SelfDelivery; sd.Count() != 2 || sd.Counts[2] != 1 || sd.Counts[6] != 1 || sd.Sum != 1030*us {
		t.Errorf("self delivery: %+v, want 30 µs and 1 ms", sd)
	}
	// A core without self delivery keeps none.
	g := &fake{}
	s = NewStepper(g, 7, 0)
	s.Propose(1, []byte("a"))
	g.ready = Ready{Deliveries: []Delivery{{From: 1, Data: []byte("a")}}}
	s.Ready()
	if l := s.Latencies(); l.SelfDelivery.Count() != 0 {
		t.Errorf("FIFO core: %d self deliveries timed", l.SelfDelivery.Count())
	}
}
