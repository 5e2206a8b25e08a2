package kv

import (
	"bytes"
	"errors"
	"testing"
)

// FuzzParseRequest: a request from a client's datagram either fails with
// a FormatError or encodes back to exactly its bytes.
func FuzzParseRequest(f *testing.F) {
	for _, q := range []Request{
		{Open: true, Seq: 7},
		{Client: 1, Seq: 1, Op: Op{Kind: OpPut, Key: "k", Value: []byte("v")}},
		{Client: 2, Seq: 3, Local: true, Op: Op{Kind: OpGet, Key: "key"}},
		{Client: 2, Seq: 4, Op: Op{Kind: OpCAS, Key: "k", Value: []byte("new"), Expect: []byte("old")}},
	} {
		f.Add(AppendRequest(nil, q))
	}
	f.Fuzz(func(t *testing.T, b []byte) { roundTrip(t, b, ParseRequest, AppendRequest) })
}

// FuzzParseReply: a reply a client reads off the network either fails
// with a FormatError or encodes back to exactly its bytes.
func FuzzParseReply(f *testing.F) {
	f.Add(AppendReply(nil, Reply{Client: 1, Seq: 2, Result: Result{Status: StatusOK, Value: []byte("value")}}))
	f.Add(AppendReply(nil, Reply{Client: 1, Seq: 3, Result: Result{Status: StatusNotFound}}))
	f.Fuzz(func(t *testing.T, b []byte) { roundTrip(t, b, ParseReply, AppendReply) })
}

// roundTrip: b either fails to parse with a *FormatError or encodes back
// to exactly its bytes.
func roundTrip[T any](t *testing.T, b []byte, parse func([]byte) (T, error), encode func([]byte, T) []byte) {
	v, err := parse(b)
	if err != nil {
		var fe *FormatError
		if !errors.As(err, &fe) {
			t.Fatalf("error %T %v, want a *FormatError", err, err)
		}
		return
	}
	if again := encode(nil, v); !bytes.Equal(again, b) {
		t.Fatalf("%+v from % x encodes to % x", v, b, again)
	}
}

// FuzzReplicaRestore: a replica snapshot (a joining replica's state
// transfer) either fails, leaving the replica as it was, or restores a
// state whose snapshot is as long as the one restored (nothing in it was
// dropped: a key or a session twice is refused) and restores to the same
// snapshot.
func FuzzReplicaRestore(f *testing.F) {
	r := NewReplica(NewStore(), 4)
	r.Apply(Request{Open: true, Seq: 1})
	r.Apply(Request{Client: 1, Seq: 1, Op: Op{Kind: OpPut, Key: "a", Value: []byte("1")}})
	r.Apply(Request{Client: 1, Seq: 2, Op: Op{Kind: OpPut, Key: "b", Value: []byte("2")}})
	f.Add(r.Snapshot())
	f.Add(NewReplica(NewStore(), 1).Snapshot())
	dup := r.Snapshot() // key "b" becomes a second "a"
	dup[bytes.LastIndexByte(dup, 'b')] = 'a'
	f.Add(dup)
	f.Fuzz(func(t *testing.T, b []byte) {
		r := NewReplica(NewStore(), 4)
		r.Apply(Request{Open: true, Seq: 1})
		before := r.Snapshot()
		if err := r.Restore(b); err != nil {
			if after := r.Snapshot(); !bytes.Equal(after, before) {
				t.Fatalf("a failed restore (%v) changed the replica: % x → % x", err, before, after)
			}
			return
		}
		snap := r.Snapshot()
		if len(snap) != len(b) {
			t.Fatalf("% x restores to a replica whose snapshot is % x", b, snap)
		}
		r2 := NewReplica(NewStore(), 1)
		if err := r2.Restore(snap); err != nil {
			t.Fatalf("the snapshot of a restored replica does not restore: %v", err)
		}
		if again := r2.Snapshot(); !bytes.Equal(again, snap) {
			t.Fatalf("snapshot % x restores to % x", snap, again)
		}
	})
}
