package orca

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/reliable/seq"
)

// chanEnv is an Env whose Send hands each message to a channel.
type chanEnv struct {
	nullEnv
	sent chan []byte
}

func (e *chanEnv) Send(_ context.Context, msg []byte) error {
	e.sent <- append([]byte(nil), msg...)
	return nil
}

// A write's caller does not take the node's lock, which the replica holds
// while it applies a delivery: a Go while it is held is sent without
// waiting for it.
func TestWriteWithoutNodeLock(t *testing.T) {
	e := &chanEnv{sent: make(chan []byte, 1)}
	n, h := startedNode(t, e)
	o, err := New(n, "c", tcounter, 0)
	if err != nil {
		t.Fatal(err)
	}
	started := make(chan *Pending[int64], 1)
	n.mu.Lock() // as the replica does, applying a delivery
	go func() { started <- tadd.Go(bg, o, 5) }()
	var msg []byte
	select {
	case msg = <-e.sent:
	case <-time.After(time.Minute): // a hang guard, not a timing: without the change Go never gets here
		n.mu.Unlock()
		t.Fatal("Go did not send its write while the node's lock was held")
	}
	n.mu.Unlock()
	p := <-started
	h.Deliver(1, msg)
	if v, err := p.Wait(bg); v != 5 || err != nil {
		t.Fatalf("Wait: %d, %v; want 5", v, err)
	}
	if s := n.Stats(); s.Writes != 1 || s.Applied != 1 {
		t.Fatalf("Writes %d, Applied %d; want 1, 1", s.Writes, s.Applied)
	}
}

// More writes in flight than the call ring has slots, behind a guarded
// write that waits the whole time in the first slot: the calls that find
// their slot taken go to the overflow map, and every write gets its own
// result.
func TestCallsBeyondTheRing(t *testing.T) {
	e, n, h, o := counterNode(t)
	take := tawait.Go(bg, o, 1<<40) // waits in its guard's queue
	const writes = 3*callRing + 5
	ps := make([]*Pending[int64], writes)
	for i := range ps {
		ps[i] = tadd.Go(bg, o, int64(i+1))
	}
	if n.calls.size() != writes+1 {
		t.Fatalf("%d calls in flight, want %d", n.calls.size(), writes+1)
	}
	if len(n.calls.more) == 0 {
		t.Fatal("no call in the overflow map")
	}
	for _, m := range e.sent {
		h.Deliver(1, m)
	}
	sum := int64(0)
	for i, p := range ps {
		sum += int64(i + 1)
		if v, err := p.Wait(bg); v != sum || err != nil {
			t.Fatalf("write %d: %d, %v; want %d", i, v, err, sum)
		}
	}
	if take.Applied() {
		t.Fatal("the guarded write ran")
	}
	if n.calls.size() != 1 || len(n.calls.more) != 0 {
		t.Fatalf("%d calls in flight (%d in the overflow map), want the guarded write's alone", n.calls.size(), len(n.calls.more))
	}
	if s := n.Stats(); s.Writes != writes+1 {
		t.Fatalf("Writes %d, want %d", s.Writes, writes+1)
	}
}

// A member that fills the total order's default send window with 64-byte
// writes (seq.DefaultWindow batches in flight and one being filled, as
// many writes each as a frame holds: the depth the raw sender keeps in
// flight, BenchmarkOrcaThroughput) keeps every call in its ring slot, not
// in the overflow map under the node's lock.
func TestWindowOfWritesInTheRing(t *testing.T) {
	const maxMessage = 1438
	e, objs := sinkMembers(t, maxMessage)
	args := make([]byte, 64-opHeaderLen)
	perBatch := (maxMessage - 1) / (batchEntryHeader + 64)
	depth := (seq.DefaultWindow + 1) * perBatch
	n := objs[0].n
	first := tsinkPut.Go(bg, objs[0], args) // alone: nothing in flight
	ps := make([]*Pending[int64], depth)
	for i := range ps {
		ps[i] = tsinkPut.Go(bg, objs[0], args)
	}
	n.mu.Lock()
	inRing, more := n.calls.size(), len(n.calls.more)
	n.mu.Unlock()
	if inRing != depth+1 || more != 0 {
		t.Fatalf("%d calls in flight, %d of them in the overflow map; want %d, none (a ring of %d)", inRing, more, depth+1, callRing)
	}
	e.flush()
	sum := int64(len(args))
	if v, err := first.Wait(bg); v != sum || err != nil {
		t.Fatalf("the first write: %d, %v; want %d", v, err, sum)
	}
	for i, p := range ps {
		sum += int64(len(args))
		if v, err := p.Wait(bg); v != sum || err != nil {
			t.Fatalf("write %d: %d, %v; want %d", i, v, err, sum)
		}
	}
}

// GoReuse starts a write in a Pending that was waited for; one whose
// write is in flight is refused, and it is left alone.
func TestGoReuse(t *testing.T) {
	e, _, h, o := counterNode(t)
	p := tadd.GoReuse(bg, nil, o, 1) // nil: a new one
	bad := tadd.GoReuse(bg, p, o, 2)
	if _, err := bad.Wait(bg); err == nil || !strings.Contains(err.Error(), "GoReuse of tcounter.add given a Pending whose write was not waited for") {
		t.Fatalf("GoReuse of a Pending in flight: %v", err)
	}
	if bad == p || len(e.sent) != 1 {
		t.Fatalf("GoReuse of a Pending in flight sent %d writes (want 1) or returned it", len(e.sent))
	}
	e.deliverAll(h)
	if v, err := p.Wait(bg); v != 1 || err != nil {
		t.Fatalf("the first write: %d, %v; want 1", v, err)
	}
	for i := range 5 {
		if q := tadd.GoReuse(bg, p, o, 10); q != p {
			t.Fatal("GoReuse returned another Pending")
		}
		if p.Applied() {
			t.Fatalf("reuse %d: applied before its delivery", i)
		}
		e.deliverAll(h)
		if v, err := p.Wait(bg); v != int64(11+10*i) || err != nil {
			t.Fatalf("reuse %d: %d, %v; want %d", i, v, err, 11+10*i)
		}
		if v, err := p.Wait(bg); v != int64(11+10*i) || err != nil {
			t.Fatalf("reuse %d, waited again: %d, %v", i, v, err)
		}
	}
	if q := tadd.GoReuse(bg, p, nil, 1); q != p {
		t.Fatal("GoReuse on a nil object returned another Pending")
	}
	if _, err := p.Wait(bg); err == nil || !strings.Contains(err.Error(), "started on a nil object") {
		t.Fatalf("GoReuse on a nil object: %v", err)
	}
	if q := tadd.GoReuse(bg, p, o, 1); q != p { // after a failure
		t.Fatal("GoReuse after a failure returned another Pending")
	}
	e.deliverAll(h)
	if v, err := p.Wait(bg); v != 52 || err != nil {
		t.Fatalf("after a failure: %d, %v; want 52", v, err)
	}
}

// The replica wakes a finished call's waiter only if it waits: a
// Pending reused after it once waited keeps its wake channel, and a
// write of it whose caller is not waiting gets no wake-up sent (a
// channel operation at the replica and another at the reuse's drain).
func TestWakeOnlyWaiting(t *testing.T) {
	e, _, h, o := counterNode(t)
	p := tadd.Go(bg, o, 1)
	wake := p.c.Wake() // its caller waits
	e.deliverAll(h)
	if len(wake) != 1 {
		t.Fatalf("the waiting caller's wake holds %d values, want 1", len(wake))
	}
	if v, err := p.Wait(bg); v != 1 || err != nil {
		t.Fatalf("Wait: %d, %v; want 1", v, err)
	}
	tadd.GoReuse(bg, p, o, 2) // nobody waits for this one
	if len(wake) != 0 {
		t.Fatal("the wake was not drained for the reuse")
	}
	e.deliverAll(h)
	if len(wake) != 0 || !p.Applied() {
		t.Fatalf("a write nobody waited for: %d wake-ups sent (want 0), applied %v", len(wake), p.Applied())
	}
	if v, err := p.Wait(bg); v != 3 || err != nil {
		t.Fatalf("Wait: %d, %v; want 3", v, err)
	}
	tadd.GoReuse(bg, p, o, 4)
	if p.c.Wake() != wake { // waits again: the same channel
		t.Fatal("the reused call made a new wake channel")
	}
	e.deliverAll(h)
	if len(wake) != 1 {
		t.Fatalf("the waiting caller's wake holds %d values, want 1", len(wake))
	}
}

// countWaiter is a Waiter whose Ready turns true at its second look, and
// that counts the Wakes it was asked for.
type countWaiter struct {
	looks, wakes int
	ch           chan struct{}
}

func (w *countWaiter) Ready() bool { w.looks++; return w.looks > 1 }
func (w *countWaiter) Wake() <-chan struct{} {
	w.wakes++
	w.ch <- struct{}{} // ready to receive from: the wake-up has come
	return w.ch
}
func (w *countWaiter) String() string { return "countWaiter" }

// A waiter woken with its call done returns without asking for its Wake
// again (for a write's caller an atomic read-modify-write of the call's
// state, after the wake-up, on its latency), with a context that cannot
// end and with one that can.
func TestWaitWokenOnce(t *testing.T) {
	ctx, cancel := context.WithCancel(bg)
	defer cancel()
	for _, c := range []context.Context{bg, ctx} {
		w := &countWaiter{ch: make(chan struct{}, 1)}
		if err := (&groupEnv{}).Wait(c, w); err != nil {
			t.Fatal(err)
		}
		if w.wakes != 1 || w.looks != 2 {
			t.Errorf("context %v: %d Wakes and %d looks at Ready; want 1 and 2", c, w.wakes, w.looks)
		}
	}
}

// The delivery of a lone write whose caller waits sends the caller its
// wake-up and keeps no slice of wake-ups to give back to the node (which
// took the node's lock again, after the wake-up, while the caller was
// readied behind the delivering goroutine); a batch's several wake-ups
// still go through the slice, kept for the next.
func TestLoneWakeUp(t *testing.T) {
	e, n, h, o := counterNode(t)
	p := tadd.Go(bg, o, 1)
	wake := p.c.Wake()
	h.Deliver(1, e.sent[0])
	if len(wake) != 1 || n.wakes != nil || n.wake1 != (wakeUp{}) {
		t.Fatalf("after a lone write: %d wake-ups sent (want 1), the node's slice %v (want nil), first %v (want none)", len(wake), n.wakes, n.wake1)
	}
	if v, err := p.Wait(bg); v != 1 || err != nil {
		t.Fatalf("Wait: %d, %v; want 1", v, err)
	}
	q := tadd.Go(bg, o, 2)
	qwake := q.c.Wake()
	tadd.GoReuse(bg, p, o, 3)
	wake = p.c.Wake()
	h.Deliver(1, batchOf(e.sent[1], e.sent[2]))
	if len(wake) != 1 || len(qwake) != 1 || cap(n.wakes) == 0 || len(n.wakes) != 0 {
		t.Fatalf("after a batch of two: wake-ups %d and %d (want 1 and 1), the node's slice len %d cap %d (want 0 and more)", len(qwake), len(wake), len(n.wakes), cap(n.wakes))
	}
	if v, err := p.Wait(bg); v != 6 || err != nil {
		t.Fatalf("Wait: %d, %v; want 6", v, err)
	}
}

// counterNode is a started node on a nullEnv with a tcounter object "c"
// at 0.
func counterNode(t *testing.T) (*nullEnv, *Node, *Host, *Object[int64]) {
	t.Helper()
	e := &nullEnv{}
	n, h := startedNode(t, e)
	o, err := New(n, "c", tcounter, 0)
	if err != nil {
		t.Fatal(err)
	}
	return e, n, h, o
}

// deliverAll delivers every message sent to h, as member 1's, and
// forgets them.
func (e *nullEnv) deliverAll(h *Host) {
	for _, m := range e.sent {
		h.Deliver(1, m)
	}
	e.sent = e.sent[:0]
}

// startedNode is a node on e started as member 1 of {1, 2, 3} at MTU
// 1400, for the tests that drive a node's Env by hand.
func startedNode(tb testing.TB, e Env) (*Node, *Host) {
	tb.Helper()
	return startedNodeWith(tb, e, Config{}, 1400)
}

// startedNodeWith is startedNode with cfg, and messages of up to
// maxMessage bytes (Host.Start).
func startedNodeWith(tb testing.TB, e Env, cfg Config, maxMessage int) (*Node, *Host) {
	tb.Helper()
	n, h, err := NewHosted(e, cfg)
	if err != nil {
		tb.Fatal(err)
	}
	if err := h.Start(1, []frame.MemberID{1, 2, 3}, maxMessage); err != nil {
		tb.Fatal(err)
	}
	return n, h
}
