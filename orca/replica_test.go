package orca

import (
	"context"
	"strings"
	"testing"
	"unsafe"

	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/reliable"
)

// nullEnv is an Env for replica tests: nothing is sent, messages are
// delivered by hand.
type nullEnv struct{ sent [][]byte }

func (e *nullEnv) Send(_ context.Context, msg []byte) error {
	e.sent = append(e.sent, append([]byte(nil), msg...))
	return nil
}
func (e *nullEnv) Wait(context.Context, Waiter) error { return nil }
func (e *nullEnv) Leave() error                       { return nil }
func (e *nullEnv) GroupStats() reliable.Stats         { return reliable.Stats{} }

var (
	tcounter = NewClass[int64]("tcounter")
	tadd     = Write(tcounter, "add", Int64, func(s *int64, d int64) int64 { *s += d; return *s })
	tawait   = Write(tcounter, "take", Int64, func(s *int64, d int64) int64 { *s -= d; return *s }).
			When(func(s *int64, d int64) bool { return *s >= d })
)

func testNode(t *testing.T, cfg Config) (*Node, *Object[int64]) {
	t.Helper()
	n, _ := startedNodeWith(t, &nullEnv{}, cfg, 100)
	o, err := New(n, "c", tcounter, 0)
	if err != nil {
		t.Fatal(err)
	}
	return n, o
}

func opMessage(t *testing.T, id uint32, op uint8, req uint32, arg int64) []byte {
	t.Helper()
	b, _ := Int64.Append(appendOpHeader(nil, id, op), arg)
	setRequest(b, req)
	return b
}

// Messages in parts from two members, interleaved in the order, are each
// joined from their own member's parts and applied at the place of their
// last part.
func TestPartsInterleaved(t *testing.T) {
	n, o := testNode(t, Config{})
	h := NewHistory()
	n.trace = h.Record
	a := opMessage(t, o.obj.id, tadd.info.index, 1, 5)
	b := opMessage(t, o.obj.id, tadd.info.index, 1, 7)
	part := func(kind byte, p []byte) []byte { return append([]byte{kind}, p...) }
	n.deliver(2, part(msgPart, a[:4]))
	n.deliver(3, part(msgPart, b[:9]))
	n.deliver(2, part(msgPart, a[4:10]))
	n.deliver(3, part(msgLast, b[9:]))
	n.deliver(2, part(msgLast, a[10:]))
	if *o.state != 12 {
		t.Fatalf("state %d, want 12", *o.state)
	}
	ap := h.Applied(1)
	if len(ap) != 2 || ap[0].Origin != 3 || ap[0].Pos != (Pos{4, 0}) || ap[1].Origin != 2 || ap[1].Pos != (Pos{5, 0}) {
		t.Errorf("applied %v", ap)
	}
}

// Malformed messages are counted and dropped alike everywhere, never a
// panic; a guard queue survives them.
func TestBadMessages(t *testing.T) {
	n, o := testNode(t, Config{MaxWrite: 64})
	h := NewHistory()
	n.trace = h.Record
	id := o.obj.id
	for _, tc := range []struct {
		msg  []byte
		want string
	}{
		{nil, "an empty message"},
		{[]byte{0x77}, "unknown kind 0x77"},
		{[]byte{msgOp, 1, 2}, "shorter than its 10-byte header"},
		{opMessage(t, id, 9, 1, 0), "operation 9 of object \"c\", which is not a write of class tcounter"},
		{append(appendOpHeader(nil, id, tadd.info.index), 1, 2, 3), "arguments that do not decode"},
		{[]byte{msgCancel, 1}, "cancel message of 2 bytes"},
		{[]byte{msgDigest, 1}, "digest message of 2 bytes"},
		{[]byte{msgLast}, "an empty message in parts"},
		{[]byte{msgLast, msgCancel, 0, 0, 0, 0, 0, 0, 0, 0}, "a message in parts of kind 0x4, want an op"},
		{append([]byte{msgPart}, make([]byte, 65)...), "longer than MaxWrite (64 bytes)"},
	} {
		before := n.Stats().BadMessages
		n.deliver(2, tc.msg)
		bad := h.Bad()
		if n.Stats().BadMessages != before+1 || len(bad) == 0 || !strings.Contains(bad[len(bad)-1].Err.Error(), tc.want) {
			t.Errorf("message %x: bad %d → %d, last %v; want %q", tc.msg, before, n.Stats().BadMessages, bad, tc.want)
		}
	}
	if n.Err() != nil || *o.state != 0 {
		t.Errorf("after bad messages: %v, state %d", n.Err(), *o.state)
	}
	// A guarded take queued, then an add that enables it.
	n.deliver(2, opMessage(t, id, tawait.info.index, 1, 3))
	n.deliver(3, opMessage(t, id, tadd.info.index, 1, 4))
	if *o.state != 1 || len(o.obj.pending) != 0 {
		t.Errorf("state %d, %d pending; want 1, 0", *o.state, len(o.obj.pending))
	}
}

// FuzzDeliver: no message, however malformed, panics the replica or
// stops the node; applied writes stay counted.
func FuzzDeliver(f *testing.F) {
	f.Add([]byte{msgOp, 0, 0, 0, 0, 0, 0, 0, 0, 1})
	f.Add([]byte{msgPart, 1, 2, 3})
	f.Add([]byte{msgCancel, 0, 0, 0, 0, 0, 0, 0, 1})
	f.Add([]byte{msgBatch, 0, 10, msgOp, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 9, msgCancel, 0, 0, 0, 0, 0, 0, 0, 1})
	f.Fuzz(func(t *testing.T, data []byte) {
		n, o := testNode(t, Config{MaxWrite: 256})
		// Address the fuzzed bytes to the real object now and then.
		if len(data) >= 5 && data[0] == msgOp || len(data) >= 5 && data[0] == msgCancel {
			data[1], data[2], data[3], data[4] = byte(o.obj.id>>24), byte(o.obj.id>>16), byte(o.obj.id>>8), byte(o.obj.id)
		}
		if len(data) >= 8 && data[0] == msgBatch && (data[3] == msgOp || data[3] == msgCancel) {
			data[4], data[5], data[6], data[7] = byte(o.obj.id>>24), byte(o.obj.id>>16), byte(o.obj.id>>8), byte(o.obj.id)
		}
		for from := frame.MemberID(1); from <= 3; from++ {
			n.deliver(from, data)
		}
		if err := n.Err(); err != nil {
			t.Fatalf("node stopped: %v", err)
		}
		if _, err := n.Snapshot(); err != nil {
			t.Fatal(err)
		}
	})
}

// tinySink keeps TestStateLineOfItsOwn's small allocations alive.
var tinySink []*int64

// A small state shares no cache line with other allocations: the
// replica writes it at every write, and a neighbour another goroutine
// writes (the allocator packs small objects together: a counter and a
// caller's counter of its own) would move the line between the CPUs each
// time.
func TestStateLineOfItsOwn(t *testing.T) {
	_, o := testNode(t, Config{})
	first := uintptr(unsafe.Pointer(o.state)) / 64
	last := (uintptr(unsafe.Pointer(o.state)) + unsafe.Sizeof(*o.state) - 1) / 64
	for range 64 {
		p := new(int64)
		tinySink = append(tinySink, p)
		if l := uintptr(unsafe.Pointer(p)) / 64; l >= first && l <= last {
			t.Fatalf("an int64 allocated after the object's state is at %p, on the state's line (the state at %p)", p, o.state)
		}
	}
	tinySink = nil
}
