package orca

import (
	"encoding/binary"
	"strings"
	"testing"
)

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
