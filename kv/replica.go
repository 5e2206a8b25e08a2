package kv

import (
	"container/list"
	"encoding/binary"
	"fmt"
)

// DefaultMaxSessions is the session table's size when none is given.
const DefaultMaxSessions = 10000

// session is a client's session: the last request it had applied and its
// result, and the place in the replicated sequence (Replica.Ordered) of
// its last request, which orders the table for expiry.
type session struct {
	id     uint64
	seq    uint64
	result []byte
	last   uint64
}

// Replica is a state machine with its session table: Execute applies a
// client's request once and answers a retry of it with the first
// result. Every replica executes the same requests in the same order, so
// session tables are identical too, and a retry that reaches another
// replica after a failover is recognised there.
//
// A client opens a session through the order (Open); its id is the
// session's place in the replicated sequence, so no two sessions ever
// share one. The table holds at most MaxSessions sessions: opening one
// more expires the least recently used (by the place of its last
// request). Every replica sees the same sequence, so every replica
// expires the same sessions at the same place, without a clock. A
// request of a session that is not in the table is not executed: it is
// answered StatusExpired, so a request whose session expired is never
// executed twice.
type Replica struct {
	sm          StateMachine
	maxSessions int
	sessions    map[uint64]*list.Element // of *session
	lru         *list.List               // least recently used first
	// Applied counts the requests executed (retries not counted);
	// Ordered every request the order delivered (retries and opens
	// counted): the position of a request in the replicated sequence.
	// Expired counts the sessions expired.
	Applied, Ordered, Expired uint64
}

// NewReplica returns a replica of sm with an empty session table of at
// most maxSessions sessions (0: DefaultMaxSessions).
func NewReplica(sm StateMachine, maxSessions int) *Replica {
	if maxSessions <= 0 {
		maxSessions = DefaultMaxSessions
	}
	return &Replica{sm: sm, maxSessions: maxSessions, sessions: map[uint64]*list.Element{}, lru: list.New()}
}

// Machine is the replicated state machine.
func (r *Replica) Machine() StateMachine { return r.sm }

// Sessions is the number of sessions in the table.
func (r *Replica) Sessions() int { return r.lru.Len() }

// MaxSessions is the table's size (a restored snapshot brings its own).
func (r *Replica) MaxSessions() int { return r.maxSessions }

// Open opens a session and returns its id, expiring the least recently
// used sessions beyond MaxSessions. A retried open opens another session;
// the one its client never learnt of expires in its turn.
func (r *Replica) Open() uint64 {
	r.Ordered++
	id := r.Ordered
	r.sessions[id] = r.lru.PushBack(&session{id: id, last: id})
	for r.lru.Len() > r.maxSessions {
		s := r.lru.Remove(r.lru.Front()).(*session)
		delete(r.sessions, s.id)
		r.Expired++
	}
	return id
}

// Execute applies cmd unless client's session already had request seq
// (or a later one) applied. fresh reports whether it was applied now; a
// retry of the session's last request returns the first result, an older
// one StatusStale, and one of a session not in the table (expired, or
// never opened) StatusExpired.
func (r *Replica) Execute(client, seq uint64, cmd []byte) (result []byte, fresh bool) {
	r.Ordered++
	e, ok := r.sessions[client]
	if !ok {
		return AppendResult(nil, Result{Status: StatusExpired, Value: fmt.Appendf(nil, "session %d expired or was never opened", client)}), false
	}
	s := e.Value.(*session)
	s.last = r.Ordered
	r.lru.MoveToBack(e)
	if seq == s.seq {
		return s.result, false
	}
	if seq < s.seq {
		return AppendResult(nil, Result{Status: StatusStale}), false
	}
	s.seq, s.result = seq, r.sm.Apply(cmd)
	r.Applied++
	return s.result, true
}

// Apply executes a client's request in its place in the order: an open
// opens a session (its result the session's id), anything else is
// Execute's.
func (r *Replica) Apply(q Request) (result []byte, fresh bool) {
	if q.Open {
		return AppendResult(nil, Result{Status: StatusOK, Value: binary.BigEndian.AppendUint64(nil, r.Open())}), true
	}
	return r.Execute(q.Client, q.Seq, AppendOp(nil, q.Op))
}

// Answered returns the result of client's request seq if it was the
// last applied, so a retry is answered without ordering it again.
func (r *Replica) Answered(client, seq uint64) ([]byte, bool) {
	if e, ok := r.sessions[client]; ok && e.Value.(*session).seq == seq && seq > 0 {
		return e.Value.(*session).result, true
	}
	return nil, false
}

// LastSeq is the last sequence number of client's applied (0: none, or
// no such session).
func (r *Replica) LastSeq(client uint64) uint64 {
	if e, ok := r.sessions[client]; ok {
		return e.Value.(*session).seq
	}
	return 0
}

// Snapshot encodes Applied, Ordered, Expired, MaxSessions, the session
// table (least recently used first) and the machine's snapshot.
func (r *Replica) Snapshot() []byte {
	b := binary.BigEndian.AppendUint64(nil, r.Applied)
	b = binary.BigEndian.AppendUint64(b, r.Ordered)
	b = binary.BigEndian.AppendUint64(b, r.Expired)
	b = binary.BigEndian.AppendUint32(b, uint32(r.maxSessions))
	b = binary.BigEndian.AppendUint32(b, uint32(r.lru.Len()))
	for e := r.lru.Front(); e != nil; e = e.Next() {
		s := e.Value.(*session)
		b = appendU64(b, s.id)
		b = appendU64(b, s.seq)
		b = appendU64(b, s.last)
		b = appendBytes(b, s.result)
	}
	return appendBytes(b, r.sm.Snapshot())
}

// Restore replaces the replica's state with a Snapshot's, its table's
// size included: every replica expires alike from there on.
func (r *Replica) Restore(snap []byte) error {
	rd := &reader{what: "replica snapshot", b: snap}
	applied, ordered, expired := rd.u64("applied"), rd.u64("ordered"), rd.u64("expired")
	maxSessions := int(rd.u32("max sessions"))
	if rd.err == nil && maxSessions < 1 {
		rd.off -= 4
		rd.fail("max sessions", "0, want at least 1")
	}
	n := rd.u32("sessions")
	if rd.err == nil && int(n) > maxSessions {
		rd.off -= 4
		rd.fail("sessions", fmt.Sprintf("%d, more than max sessions %d", n, maxSessions))
	}
	sessions, lru := map[uint64]*list.Element{}, list.New()
	first := map[uint64]uint32{} // a session's entry
	for i := uint32(0); i < n && rd.err == nil; i++ {
		at := rd.off
		s := &session{id: rd.u64(fmt.Sprintf("session %d id", i))}
		if j, dup := first[s.id]; dup && rd.err == nil {
			rd.off = at
			rd.fail(fmt.Sprintf("session %d id", i), fmt.Sprintf("session %d again, first in entry %d", s.id, j))
			break
		}
		first[s.id] = i
		s.seq = rd.u64(fmt.Sprintf("session %d seq", i))
		s.last = rd.u64(fmt.Sprintf("session %d last", i))
		s.result = rd.bytes(fmt.Sprintf("session %d result", i))
		sessions[s.id] = lru.PushBack(s)
	}
	machine := rd.bytes("machine")
	if err := rd.end(); err != nil {
		return err
	}
	if err := r.sm.Restore(machine); err != nil {
		return err
	}
	r.Applied, r.Ordered, r.Expired = applied, ordered, expired
	r.maxSessions, r.sessions, r.lru = maxSessions, sessions, lru
	return nil
}
