package orca

import (
	"context"
	"encoding/binary"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

var bg = context.Background()

// batchOf makes a batch message of msgs.
func batchOf(msgs ...[]byte) []byte {
	b := []byte{msgBatch}
	for _, m := range msgs {
		b = binary.BigEndian.AppendUint16(b, uint16(len(m)))
		b = append(b, m...)
	}
	return b
}

// A batch's messages are applied in their order, each at a position of
// its own, as if sent one after the other: positions count on after it.
func TestBatchDelivered(t *testing.T) {
	n, o := testNode(t, Config{})
	h := NewHistory()
	n.trace = h.Record
	id := o.obj.id
	n.deliver(3, opMessage(t, id, tadd.info.index, 1, 1))
	n.deliver(2, batchOf(
		opMessage(t, id, tawait.info.index, 1, 10), // queued: 1 < 10
		opMessage(t, id, tadd.info.index, 2, 20),   // 21: the take runs after it
		opMessage(t, id, tadd.info.index, 3, 100),
	))
	n.deliver(3, opMessage(t, id, tadd.info.index, 2, 1000))
	if *o.state != 1+20-10+100+1000 {
		t.Fatalf("state %d, want %d", *o.state, 1+20-10+100+1000)
	}
	var got []string
	for _, w := range h.Applied(1) {
		got = append(got, w.Op+"@"+w.Pos.String())
	}
	want := "add@1.0 add@3.0 take@3.1 add@4.0 add@5.0"
	if strings.Join(got, " ") != want {
		t.Errorf("applied %v, want %s", got, want)
	}
	if n.Position() != 5 {
		t.Errorf("position %d, want 5", n.Position())
	}
}

// A malformed batch: the entries before the fault are applied, the fault
// is counted once with what is wrong, and nothing panics.
func TestBadBatches(t *testing.T) {
	n, o := testNode(t, Config{})
	h := NewHistory()
	n.trace = h.Record
	id := o.obj.id
	op := opMessage(t, id, tadd.info.index, 1, 1)
	for _, tc := range []struct {
		msg     []byte
		applied int64
		want    string
	}{
		{[]byte{msgBatch}, 0, "an empty batch"},
		{append(batchOf(op), 0), 1, "last 1 bytes are too few for an entry's 2-byte length"},
		{append(batchOf(op), 0, 50, msgOp), 1, "a batch entry of 50 bytes, longer than the 1 bytes left"},
		{batchOf(op, []byte{msgPart, 1}, op), 2, "a message of kind 0x2 in a batch"},
		{batchOf(op, batchOf(op)), 1, "a message of kind 0x7 in a batch"},
		{batchOf(op, []byte{}, op), 2, "an empty message in a batch"},
	} {
		before, state := n.Stats().BadMessages, *o.state
		n.deliver(2, tc.msg)
		bad := h.Bad()
		if n.Stats().BadMessages != before+1 || len(bad) == 0 || !strings.Contains(bad[len(bad)-1].Err.Error(), tc.want) {
			t.Errorf("batch %x: bad %d → %d, last %v; want %q", tc.msg, before, n.Stats().BadMessages, bad, tc.want)
		}
		if *o.state-state != tc.applied {
			t.Errorf("batch %x: %d writes applied, want %d", tc.msg, *o.state-state, tc.applied)
		}
	}
	if n.Err() != nil {
		t.Error(n.Err())
	}
}

var tlarge = Write(tcounter, "large", Bytes, func(s *int64, b []byte) int64 { *s += int64(len(b)); return *s })

// tryEnv is nullEnv with TrySend: a node on it batches.
type tryEnv struct {
	nullEnv
	tried int
}

func (e *tryEnv) TrySend(msg []byte) error {
	e.tried++
	return e.Send(nil, msg)
}

func tryNode(t *testing.T) (*Node, *tryEnv, *Object[int64]) {
	t.Helper()
	e := &tryEnv{}
	n, _ := startedNodeWith(t, e, Config{}, 100)
	o, err := New(n, "c", tcounter, 0)
	if err != nil {
		t.Fatal(err)
	}
	return n, e, o
}

func kinds(msgs [][]byte) string {
	var s []string
	for _, m := range msgs {
		s = append(s, fmt.Sprintf("%#x/%d", m[0], len(m)))
	}
	return strings.Join(s, " ")
}

// While a message of the member is in flight, small writes wait in the
// batch and go out together when it comes back; a write that could not
// share a batch with another as long goes out at once; a write in parts
// goes after the batch.
func TestBatchSending(t *testing.T) {
	n, e, o := tryNode(t)
	tadd.Go(bg, o, 1) // alone: nothing in flight
	tadd.Go(bg, o, 2) // queued
	tadd.Go(bg, o, 3) // queued
	if got := kinds(e.sent); got != "0x1/18" {
		t.Fatalf("sent %s, want the first write alone", got)
	}
	n.deliver(1, e.sent[0]) // it comes back: the batch goes
	if got := kinds(e.sent); got != "0x1/18 0x7/41" || e.tried != 1 {
		t.Fatalf("sent %s (%d from Deliver), want the first write, then a batch of two from Deliver", got, e.tried)
	}
	tadd.Go(bg, o, 4)                   // queued: the batch is in flight
	tlarge.Go(bg, o, make([]byte, 150)) // in parts, after the batch
	if got := kinds(e.sent); got != "0x1/18 0x7/41 0x1/18 0x2/100 0x3/62" {
		t.Fatalf("sent %s, want the queued write before the parts", got)
	}
	for _, m := range e.sent[1:] {
		n.deliver(1, m)
	}
	if *o.state != 10+150 || n.Stats().Batches != 1 || n.Stats().Batched != 2 {
		t.Fatalf("state %d, %d batches of %d; want 160, 1, 2", *o.state, n.Stats().Batches, n.Stats().Batched)
	}
}

// Flush sends the writes started during a round trip of the member's
// message at once, without waiting for that message to come back (and
// not from Deliver); with nothing queued it sends nothing. The writes
// are applied in the order they were started.
func TestFlush(t *testing.T) {
	n, e, o := tryNode(t)
	tadd.Go(bg, o, 1) // alone: nothing in flight
	p2 := tadd.Go(bg, o, 2)
	p3 := tadd.Go(bg, o, 3)
	if err := n.Flush(); err != nil {
		t.Fatal(err)
	}
	if got := kinds(e.sent); got != "0x1/18 0x7/41" || e.tried != 0 {
		t.Fatalf("sent %s (%d from Deliver) before the first write came back, want it and a batch of two, not from Deliver", got, e.tried)
	}
	if err := n.Flush(); err != nil || len(e.sent) != 2 {
		t.Fatalf("a second Flush: %v, %d messages sent; want nothing more", err, len(e.sent))
	}
	for _, m := range e.sent {
		n.deliver(1, m)
	}
	if v, err := p3.Wait(bg); v != 6 || err != nil {
		t.Fatalf("the third write's result %d, %v; want 6", v, err)
	}
	if v, err := p2.Wait(bg); v != 3 || err != nil {
		t.Fatalf("the second write's result %d, %v; want 3", v, err)
	}
	if s := n.Stats(); s.Messages != 2 || s.Batches != 1 || s.Batched != 2 {
		t.Fatalf("%d messages, %d batches of %d; want 2, 1, 2", s.Messages, s.Batches, s.Batched)
	}
}

// A write two of which would not fit in a message is not held back for
// a batch while one is in flight: it goes out at once (without the
// check it waited in the batch until the next message came back).
func TestBatchLargeWriteAlone(t *testing.T) {
	_, e, o := tryNode(t)
	tadd.Go(bg, o, 1)
	tlarge.Go(bg, o, make([]byte, 50)) // 60 bytes: two would not fit in 100
	if got := kinds(e.sent); got != "0x1/18 0x1/60" {
		t.Fatalf("sent %s, want both writes alone at once", got)
	}
}

// lockSeen records, for each write of tlocked, whether its object's lock
// was held while it ran (the replica must hold it: local readers wait).
var (
	lockSeen []bool
	lockObjs = map[int64]*object{}
	tlocked  = NewClass[int64]("tlocked")
	tlockAdd = Write(tlocked, "add", Int64, func(s *int64, d int64) int64 {
		if d < 0 {
			panic("a negative add")
		}
		o := lockObjs[d]
		held := !o.mu.TryRLock()
		if !held {
			o.mu.RUnlock()
		}
		lockSeen = append(lockSeen, held)
		if lockHook != nil {
			lockHook()
		}
		*s += d
		return *s
	})
	tlockTake = Write(tlocked, "take", Int64, func(s *int64, d int64) int64 { *s -= d; return *s }).
			When(func(s *int64, d int64) bool { return *s >= d })
)

// The replica applies a batch's writes to an object under one hold of
// its lock, switching when the batch switches objects, and lets go of it
// when the delivery ends (also after a write that panicked, and after
// Restore and New, which apply early writes): a reader that comes after
// takes it.
func TestBatchObjectLock(t *testing.T) {
	lockSeen = nil // what an earlier run (-count, -shuffle) or test recorded
	n, _ := startedNode(t, &nullEnv{})
	a, err := New(n, "a", tlocked, 0)
	if err != nil {
		t.Fatal(err)
	}
	b, err := New(n, "b", tlocked, 0)
	if err != nil {
		t.Fatal(err)
	}
	lockObjs[1], lockObjs[2] = a.obj, b.obj
	free := func(what string) {
		t.Helper()
		for _, o := range []*object{a.obj, b.obj} {
			if !o.mu.TryLock() {
				t.Fatalf("%s: the lock of %q is still held", what, o.name)
			}
			o.mu.Unlock()
		}
	}
	msg := func(o *Object[int64], op uint8, req uint32, d int64) []byte {
		return opMessage(t, o.obj.id, op, req, d)
	}
	add, take := tlockAdd.info.index, tlockTake.info.index
	n.deliver(2, batchOf(
		msg(a, take, 1, 3), // queued: 0 < 3
		msg(a, add, 2, 1),
		msg(b, add, 3, 2),
		msg(a, add, 4, 1),
		msg(a, add, 5, 1), // the take runs after it
		msg(b, add, 6, 2),
	))
	free("after a batch")
	if *a.state != 0 || *b.state != 4 || !slices.Equal(lockSeen, []bool{true, true, true, true, true}) {
		t.Fatalf("states %d and %d, lock held in the writes %v; want 0, 4, held in all 5", *a.state, *b.state, lockSeen)
	}
	if v, err := tvalue.Call(bg, a, struct{}{}); err != nil || v != 0 {
		t.Fatalf("read %d, %v; want 0", v, err)
	}
	n.deliver(2, batchOf(msg(a, add, 7, 1), msg(a, add, 8, -1), msg(b, add, 9, 2)))
	free("after a write that panicked")
	if n.Err() == nil || !strings.Contains(n.Err().Error(), "a negative add") {
		t.Fatalf("node error %v, want the panic", n.Err())
	}
}

var tlockAtLeast = Read(tlocked, "atLeast", func(s *int64, d int64) bool { return true }).
	When(func(s *int64, d int64) bool { return *s >= d })

// lockHook, when set, runs in every tlockAdd.
var lockHook func()

// A waiting caller is woken once the delivery that applied its write is
// done and the replica let go of its locks (which the caller's next
// operation takes), not in the middle of it.
func TestWakeAfterDelivery(t *testing.T) {
	e := &nullEnv{}
	n, _ := startedNode(t, e)
	a, err := New(n, "a", tlocked, 0)
	if err != nil {
		t.Fatal(err)
	}
	lockObjs[1] = a.obj
	p := tlockAdd.Go(bg, a, 1)
	wake := p.c.Wake() // the caller waits
	// And a guarded read of a waits: its channel closes on a's next write.
	changed := (&guardWaiter[int64, int64, bool]{op: tlockAtLeast, o: a, a: 100}).Wake()
	closed := func() bool {
		select {
		case <-changed:
			return true
		default:
			return false
		}
	}
	var during []int
	var closedDuring []bool
	lockHook = func() { during, closedDuring = append(during, len(wake)), append(closedDuring, closed()) }
	defer func() { lockHook = nil }()
	n.deliver(1, batchOf(e.sent[0], opMessage(t, a.obj.id, tlockAdd.info.index, 99, 1)))
	if !slices.Equal(during, []int{0, 0}) || len(wake) != 1 || !p.Applied() {
		t.Fatalf("wake-ups queued while the batch was applied %v, after %d (applied %v); want [0 0], 1, true", during, len(wake), p.Applied())
	}
	if !slices.Equal(closedDuring, []bool{false, false}) || !closed() {
		t.Fatalf("the guarded read's channel closed while the batch was applied %v, after %v; want [false false], true", closedDuring, closed())
	}
	if v, err := p.Wait(bg); v != 2-1 || err != nil {
		t.Fatalf("result %d, %v; want 1", v, err)
	}
}

var tvalue = Read(tlocked, "value", func(s *int64, _ struct{}) int64 { return *s })

// Writes that came before their object was made are applied by New,
// which lets go of the object's lock.
func TestEarlyWritesObjectLock(t *testing.T) {
	n, _ := startedNode(t, &nullEnv{})
	id := objectID("early")
	n.deliver(2, batchOf(opMessage(t, id, tlockTake.info.index, 1, 1), opMessage(t, id, tlockTake.info.index, 2, 0)))
	o, err := New(n, "early", tlocked, 5)
	if err != nil {
		t.Fatal(err)
	}
	if !o.obj.mu.TryLock() {
		t.Fatal("the object's lock is still held after New applied its early writes")
	}
	o.obj.mu.Unlock()
	if *o.state != 4 {
		t.Fatalf("state %d, want 4", *o.state)
	}
}

// A delivery while no batch is being filled takes no lock of the outbox
// (an atomic load says there is nothing to send): another member's
// message delivered while out.mu is held is applied and returns.
func TestDeliverWithoutBatchTakesNoOutboxLock(t *testing.T) {
	n, _, o := tryNode(t)
	done := make(chan struct{})
	n.out.mu.Lock()
	go func() {
		n.deliver(2, opMessage(t, o.obj.id, tadd.info.index, 1, 5))
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(time.Minute): // a hang guard, not a timing: without the check deliver waits here
		n.out.mu.Unlock()
		<-done
		t.Fatal("the delivery waited for the outbox's lock with no batch being filled")
	}
	n.out.mu.Unlock()
	if v, _ := tvalueC.Call(bg, o, struct{}{}); v != 5 {
		t.Fatalf("value %d, want 5", v)
	}
}

var tvalueC = Read(tcounter, "value", func(s *int64, _ struct{}) int64 { return *s })
