package orca

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/rbcast/rbcast/frame"
)

// A snapshot holds everything a replica's future depends on: states and
// write counts, queued guarded writes, messages for objects not made yet,
// half-received messages. A node restored from it and the node it was
// taken at, given the same messages after, stay alike.
func TestSnapshotRestore(t *testing.T) {
	donor, o := testNode(t, Config{})
	id := o.obj.id
	other := objectID("not made yet")
	donor.deliver(2, opMessage(t, id, tadd.info.index, 1, 5))
	donor.deliver(3, opMessage(t, id, tawait.info.index, 1, 9))  // queued: 5 < 9
	donor.deliver(2, opMessage(t, other, tadd.info.index, 2, 1)) // early
	long := opMessage(t, id, tadd.info.index, 3, 100)
	donor.deliver(2, append([]byte{msgPart}, long[:6]...)) // half received
	snap, err := donor.Snapshot()
	if err != nil {
		t.Fatal(err)
	}

	joiner, jo := testNode(t, Config{})
	if err := joiner.Restore(snap); err != nil {
		t.Fatal(err)
	}
	if *jo.state != 5 || jo.obj.writes != 1 || len(jo.obj.pending) != 1 || joiner.Position() != 4 {
		t.Fatalf("restored: state %d, writes %d, %d pending, position %d", *jo.state, jo.obj.writes, len(jo.obj.pending), joiner.Position())
	}
	again, err := joiner.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(snap, again) {
		t.Fatalf("the restored node's snapshot differs:\n%x\n%x", snap, again)
	}
	// The same continuation at both: the rest of the long message (5+100
	// lets the queued take of 9 run), the other object made.
	for _, n := range []*Node{donor, joiner} {
		n.deliver(2, append([]byte{msgLast}, long[6:]...))
		n.deliver(3, opMessage(t, id, tadd.info.index, 2, 1))
		if _, err := New(n, "not made yet", tcounter, 0); err != nil {
			t.Fatal(err)
		}
	}
	a, _ := donor.Snapshot()
	b, _ := joiner.Snapshot()
	if !bytes.Equal(a, b) {
		t.Fatalf("after the same messages the snapshots differ:\n%x\n%x", a, b)
	}
	if *o.state != 97 || *jo.state != 97 {
		t.Errorf("states %d and %d, want 5+100-9+1 = 97", *o.state, *jo.state)
	}
}

// Restore refuses what does not fit, and a damaged snapshot, with an
// error and no change.
func TestRestoreRefuses(t *testing.T) {
	donor, o := testNode(t, Config{})
	donor.deliver(2, opMessage(t, o.obj.id, tadd.info.index, 1, 5))
	donor.deliver(3, opMessage(t, o.obj.id, tawait.info.index, 1, 9))
	snap, err := donor.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	for cut := range len(snap) {
		n, jo := testNode(t, Config{})
		err := n.Restore(snap[:cut])
		if !errors.Is(err, ErrSnapshot) {
			t.Fatalf("snapshot cut at %d: %v", cut, err)
		}
		if *jo.state != 0 || n.Position() != 0 {
			t.Fatalf("a refused snapshot changed the node")
		}
	}
	n, _ := testNode(t, Config{})
	n.deliver(2, opMessage(t, o.obj.id, tadd.info.index, 1, 1))
	if err := n.Restore(snap); err == nil || !strings.Contains(err.Error(), "has delivered 1 messages already") {
		t.Errorf("restore after a delivery: %v", err)
	}
	// An object the joiner has not made.
	empty, _, _ := NewHosted(&nullEnv{}, Config{})
	empty.mu.Lock()
	empty.start(1, []frame.MemberID{1}, 100)
	empty.mu.Unlock()
	if err := empty.Restore(snap); err == nil || !strings.Contains(err.Error(), `object "c" (id`) {
		t.Errorf("restore without the object: %v", err)
	}
	// Another class under the same name.
	other := NewClass[int64]("othercounter")
	Write(other, "add", Int64, func(s *int64, d int64) int64 { return 0 })
	wrong, _, _ := NewHosted(&nullEnv{}, Config{})
	wrong.mu.Lock()
	wrong.start(1, []frame.MemberID{1}, 100)
	wrong.mu.Unlock()
	if _, err := New(wrong, "c", other, 0); err != nil {
		t.Fatal(err)
	}
	if err := wrong.Restore(snap); err == nil || !strings.Contains(err.Error(), "is of class tcounter in the snapshot, othercounter here") {
		t.Errorf("restore into another class: %v", err)
	}
	if err := n.Restore(append(snap, 0)); !errors.Is(err, ErrSnapshot) {
		t.Errorf("trailing byte: %v", err)
	}
}

// A snapshot that lists a member twice (two half-received messages, two
// last request numbers, or waiting for the state twice) is damaged:
// Restore refuses it, naming the member and both entries, and changes
// nothing.
func TestRestoreRefusesDuplicates(t *testing.T) {
	donor, o := testNode(t, Config{})
	donor.deliver(2, opMessage(t, o.obj.id, tadd.info.index, 1, 5))
	donor.deliver(3, opMessage(t, o.obj.id, tadd.info.index, 1, 9))
	snap, err := donor.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	// The snapshot ends: parts 0, requests 2 (member 2, 1) (member 3, 1),
	// waiting 0.
	end := len(snap)
	tail := []byte{0, 0, 0, 0, 0, 0, 0, 2, 0, 2, 0, 0, 0, 1, 0, 3, 0, 0, 0, 1, 0, 0, 0, 0}
	if !bytes.Equal(snap[end-len(tail):], tail) {
		t.Fatalf("the snapshot ends % x, want % x", snap[end-len(tail):], tail)
	}
	head := snap[:end-len(tail)]
	join := func(parts ...[]byte) []byte { return bytes.Join(append([][]byte{head}, parts...), nil) }
	cases := []struct {
		snap []byte
		want string
	}{
		{join([]byte{0, 0, 0, 2, 0, 1, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0}, tail[4:]),
			fmt.Sprintf("half-received message 1 at byte %d: member 1 again, first in entry 0", len(head)+4+6)},
		{join(tail[:4], []byte{0, 0, 0, 2, 0, 2, 0, 0, 0, 1, 0, 2, 0, 0, 0, 1}, tail[20:]),
			fmt.Sprintf("request number 1 at byte %d: member 2 again, first in entry 0", len(head)+8+6)},
		{join(tail[:20], []byte{0, 0, 0, 2, 0, 4, 0, 0, 0, 7, 0, 4, 0, 0, 0, 7}),
			fmt.Sprintf("member waiting for the state 1 at byte %d: member 4 incarnation 7 again, first in entry 0", len(head)+24+6)},
	}
	for _, c := range cases {
		n, jo := testNode(t, Config{})
		err := n.Restore(c.snap)
		if !errors.Is(err, ErrSnapshot) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Restore = %v, want an error containing %q", err, c.want)
		}
		if *jo.state != 0 || n.Position() != 0 {
			t.Errorf("a refused snapshot changed the node")
		}
	}
}

// FuzzRestore: no snapshot, however damaged, panics Restore; a refused
// one leaves the node as it was, and the snapshot of a node that took one
// restores, in another node, to the same snapshot.
func FuzzRestore(f *testing.F) {
	donor, o := testNode(&testing.T{}, Config{})
	donor.deliver(2, opMessage(&testing.T{}, o.obj.id, tadd.info.index, 1, 5))
	donor.deliver(3, opMessage(&testing.T{}, o.obj.id, tawait.info.index, 1, 9))
	snap, _ := donor.Snapshot()
	f.Add(snap)
	f.Fuzz(func(t *testing.T, b []byte) {
		n, _ := testNode(t, Config{})
		before, err := n.Snapshot()
		if err != nil {
			t.Fatal(err)
		}
		if err := n.Restore(b); err != nil {
			if after, _ := n.Snapshot(); !bytes.Equal(after, before) {
				t.Fatalf("a refused snapshot (%v) changed the node: % x → % x", err, before, after)
			}
			return
		}
		snap, err := n.Snapshot()
		if err != nil {
			t.Fatal(err)
		}
		n2, _ := testNode(t, Config{})
		if err := n2.Restore(snap); err != nil {
			t.Fatalf("the snapshot of a restored node does not restore: %v", err)
		}
		if again, _ := n2.Snapshot(); !bytes.Equal(again, snap) {
			t.Fatalf("snapshot % x restores to % x", snap, again)
		}
	})
}
