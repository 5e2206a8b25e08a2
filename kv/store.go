package kv

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"slices"
)

// OpKind is what an Op does to the store.
type OpKind uint8

const (
	OpGet OpKind = iota + 1
	OpPut
	OpDelete
	OpCAS
)

func (k OpKind) String() string {
	switch k {
	case OpGet:
		return "get"
	case OpPut:
		return "put"
	case OpDelete:
		return "del"
	case OpCAS:
		return "cas"
	}
	return fmt.Sprintf("op(%d)", uint8(k))
}

// Op is one operation on the key-value store. Put sets Key to Value;
// Delete removes Key; CAS sets Key to Value if it currently holds Expect
// (a key that is absent holds nothing, so CAS never creates one).
type Op struct {
	Kind   OpKind
	Key    string
	Value  []byte
	Expect []byte
}

func (o Op) String() string {
	switch o.Kind {
	case OpGet, OpDelete:
		return fmt.Sprintf("%s(%q)", o.Kind, o.Key)
	case OpPut:
		return fmt.Sprintf("put(%q, %q)", o.Key, o.Value)
	case OpCAS:
		return fmt.Sprintf("cas(%q, %q→%q)", o.Key, o.Expect, o.Value)
	}
	return o.Kind.String()
}

// Status is a Result's outcome.
type Status uint8

const (
	StatusOK       Status = iota + 1
	StatusNotFound        // get, delete or cas of an absent key
	StatusMismatch        // cas: the key holds another value
	// StatusUnavailable: the replica cannot answer now (it has no state
	// yet, or left its group); the client tries another.
	StatusUnavailable
	// StatusStale: the request is older than one this client already
	// had applied; its answer is gone (a client never sees it for a
	// request it still waits for).
	StatusStale
	// StatusBadRequest: the request did not decode; Value says why.
	StatusBadRequest
	// StatusExpired: the request's session is not in the table (it
	// expired, or was never opened); the request was not executed now,
	// but an earlier attempt of it may have been. Value says which.
	StatusExpired
)

func (s Status) String() string {
	switch s {
	case StatusOK:
		return "ok"
	case StatusNotFound:
		return "not found"
	case StatusMismatch:
		return "mismatch"
	case StatusUnavailable:
		return "unavailable"
	case StatusStale:
		return "stale"
	case StatusBadRequest:
		return "bad request"
	case StatusExpired:
		return "session expired"
	}
	return fmt.Sprintf("status(%d)", uint8(s))
}

// Result is an Op's outcome: the status, and for get (and a cas that
// failed) the value found.
type Result struct {
	Status Status
	Value  []byte
}

func (r Result) String() string {
	if r.Value != nil {
		return fmt.Sprintf("%s %q", r.Status, r.Value)
	}
	return r.Status.String()
}

// AppendOp encodes o: kind, key, value, expect.
func AppendOp(b []byte, o Op) []byte {
	b = append(b, byte(o.Kind))
	b = appendBytes(b, []byte(o.Key))
	b = appendBytes(b, o.Value)
	return appendBytes(b, o.Expect)
}

func readOp(r *reader) Op {
	o := Op{Kind: OpKind(r.u8("op"))}
	if r.err == nil && (o.Kind < OpGet || o.Kind > OpCAS) {
		r.off--
		r.fail("op", fmt.Sprintf("kind %d, want 1..4", o.Kind))
	}
	o.Key = string(r.bytes("key"))
	o.Value = r.bytes("value")
	o.Expect = r.bytes("expect")
	return o
}

// ParseOp decodes an op AppendOp encoded.
func ParseOp(b []byte) (Op, error) {
	r := &reader{what: "op", b: b}
	o := readOp(r)
	return o, r.end()
}

// AppendResult encodes r: status, value.
func AppendResult(b []byte, res Result) []byte {
	b = append(b, byte(res.Status))
	return appendBytes(b, res.Value)
}

func readResult(r *reader) Result {
	res := Result{Status: Status(r.u8("status"))}
	res.Value = r.bytes("value")
	if len(res.Value) == 0 {
		res.Value = nil
	}
	return res
}

// ParseResult decodes a result AppendResult encoded.
func ParseResult(b []byte) (Result, error) {
	r := &reader{what: "result", b: b}
	res := readResult(r)
	return res, r.end()
}

// Store is the key-value state machine: Apply takes an encoded Op and
// returns an encoded Result.
type Store struct {
	data map[string][]byte
}

// NewStore returns an empty store.
func NewStore() *Store { return &Store{data: map[string][]byte{}} }

var _ StateMachine = (*Store)(nil)

// Apply executes an encoded Op; a malformed one is a StatusBadRequest
// result (every replica refuses it alike), never a panic.
func (s *Store) Apply(cmd []byte) []byte {
	o, err := ParseOp(cmd)
	if err != nil {
		return AppendResult(nil, Result{Status: StatusBadRequest, Value: []byte(err.Error())})
	}
	return AppendResult(nil, s.Do(o))
}

// Do executes o.
func (s *Store) Do(o Op) Result {
	v, ok := s.data[o.Key]
	switch o.Kind {
	case OpGet:
		if !ok {
			return Result{Status: StatusNotFound}
		}
		return Result{Status: StatusOK, Value: slices.Clone(v)}
	case OpPut:
		s.data[o.Key] = slices.Clone(o.Value)
		return Result{Status: StatusOK}
	case OpDelete:
		if !ok {
			return Result{Status: StatusNotFound}
		}
		delete(s.data, o.Key)
		return Result{Status: StatusOK}
	case OpCAS:
		if !ok {
			return Result{Status: StatusNotFound}
		}
		if !bytes.Equal(v, o.Expect) {
			return Result{Status: StatusMismatch, Value: slices.Clone(v)}
		}
		s.data[o.Key] = slices.Clone(o.Value)
		return Result{Status: StatusOK}
	}
	return Result{Status: StatusBadRequest, Value: []byte(fmt.Sprintf("op kind %d", o.Kind))}
}

// Get reads a key locally (the weaker local read: no order).
func (s *Store) Get(key string) ([]byte, bool) {
	v, ok := s.data[key]
	return slices.Clone(v), ok
}

// Len is the number of keys.
func (s *Store) Len() int { return len(s.data) }

// Snapshot encodes every key and value, sorted by key, so equal stores
// have equal snapshots.
func (s *Store) Snapshot() []byte {
	keys := make([]string, 0, len(s.data))
	for k := range s.data {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	b := binary.BigEndian.AppendUint32(nil, uint32(len(keys)))
	for _, k := range keys {
		b = appendBytes(b, []byte(k))
		b = appendBytes(b, s.data[k])
	}
	return b
}

// Restore replaces the store's contents with a snapshot's. A snapshot
// that does not decode, or holds a key twice (Snapshot never writes one
// so: it is damaged), is an error and changes nothing.
func (s *Store) Restore(snap []byte) error {
	r := &reader{what: "store snapshot", b: snap}
	n := r.u32("keys")
	data := map[string][]byte{}
	first := map[string]uint32{} // a key's entry
	for i := uint32(0); i < n && r.err == nil; i++ {
		at := r.off
		k := string(r.bytes(fmt.Sprintf("key %d", i)))
		if j, dup := first[k]; dup && r.err == nil {
			r.off = at
			r.fail(fmt.Sprintf("key %d", i), fmt.Sprintf("key %s again, first in entry %d", quoteCut(k), j))
			break
		}
		first[k] = i
		data[k] = r.bytes(fmt.Sprintf("value %d", i))
	}
	if err := r.end(); err != nil {
		return err
	}
	s.data = data
	return nil
}
