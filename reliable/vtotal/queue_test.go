package vtotal

import (
	"slices"
	"testing"
)

// TestQueue: a queue popped at the front and pushed at the back keeps
// its order through compactions and growth, drops the references it
// pops, and, at a steady length, stops allocating.
func TestQueue(t *testing.T) {
	var q queue[*int]
	var want []int
	next, first := 0, 0
	for round := range 200 {
		for range round%7 + 1 {
			v := next
			q.push(&v)
			want = append(want, next)
			next++
		}
		for range round % 5 {
			if q.len() == 0 {
				break
			}
			if got := *q.items()[0]; got != first {
				t.Fatalf("round %d: first %d, want %d", round, got, first)
			}
			q.pop()
			first++
		}
		var got []int
		for _, p := range q.items() {
			got = append(got, *p)
		}
		if !slices.Equal(got, want[first:]) {
			t.Fatalf("round %d: %v, want %v", round, got, want[first:])
		}
		for i := range q.head {
			if q.s[i] != nil {
				t.Fatalf("round %d: popped slot %d still holds %d", round, i, *q.s[i])
			}
		}
	}
	q.reset()
	if q.len() != 0 || slices.ContainsFunc(q.s[:cap(q.s)], func(p *int) bool { return p != nil }) {
		t.Fatalf("after reset: len %d, references kept", q.len())
	}

	// A queue of about 100 elements, one pushed and one popped at a
	// time: no allocation once warm (the slice idiom reallocated every
	// 100 or so).
	var s queue[msg]
	for range 100 {
		s.push(msg{})
	}
	cycle := func() {
		for range 10000 {
			s.push(msg{n: 1})
			s.pop()
		}
	}
	cycle() // warm: grown to its steady size
	if n := testing.AllocsPerRun(1, cycle); n != 0 {
		t.Fatalf("steady queue: %v allocations in 10000 pushes and pops, want 0", n)
	}
}
