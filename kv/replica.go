package kv

import (
	"encoding/binary"
	"fmt"
	"slices"
)

// session is the last request a client had applied and its result.
type session struct {
	seq    uint64
	result []byte
}

// Replica is a state machine with its session table: Execute applies a
// client's request once and answers a retry of it with the first
// result. Every replica executes the same requests in the same order, so
// session tables are identical too, and a retry that reaches another
// replica after a failover is recognised there.
type Replica struct {
	sm       StateMachine
	sessions map[uint64]session
	// Applied counts the requests executed (retries not counted);
	// Ordered every request the order delivered (retries counted): the
	// position of a request in the replicated sequence.
	Applied, Ordered uint64
}

// NewReplica returns a replica of sm with an empty session table.
func NewReplica(sm StateMachine) *Replica {
	return &Replica{sm: sm, sessions: map[uint64]session{}}
}

// Machine is the replicated state machine.
func (r *Replica) Machine() StateMachine { return r.sm }

// Execute applies q's op unless q's client already had this request (or
// a later one) applied. fresh reports whether it was applied now; a retry
// of the client's last request returns the first result, an older one
// StatusStale.
func (r *Replica) Execute(client, seq uint64, cmd []byte) (result []byte, fresh bool) {
	r.Ordered++
	s, ok := r.sessions[client]
	if ok && seq == s.seq {
		return s.result, false
	}
	if ok && seq < s.seq {
		return AppendResult(nil, Result{Status: StatusStale}), false
	}
	res := r.sm.Apply(cmd)
	r.sessions[client] = session{seq: seq, result: res}
	r.Applied++
	return res, true
}

// Answered returns the result of client's request seq if it was the
// last applied, so a retry is answered without ordering it again.
func (r *Replica) Answered(client, seq uint64) ([]byte, bool) {
	s, ok := r.sessions[client]
	if ok && s.seq == seq {
		return s.result, true
	}
	return nil, false
}

// LastSeq is the last sequence number of client's applied.
func (r *Replica) LastSeq(client uint64) uint64 { return r.sessions[client].seq }

// Snapshot encodes Applied, Ordered, the session table (by client) and the
// machine's snapshot.
func (r *Replica) Snapshot() []byte {
	b := binary.BigEndian.AppendUint64(nil, r.Applied)
	b = binary.BigEndian.AppendUint64(b, r.Ordered)
	clients := make([]uint64, 0, len(r.sessions))
	for c := range r.sessions {
		clients = append(clients, c)
	}
	slices.Sort(clients)
	b = binary.BigEndian.AppendUint32(b, uint32(len(clients)))
	for _, c := range clients {
		b = appendU64(b, c)
		b = appendU64(b, r.sessions[c].seq)
		b = appendBytes(b, r.sessions[c].result)
	}
	return appendBytes(b, r.sm.Snapshot())
}

// Restore replaces the replica's state with a Snapshot's.
func (r *Replica) Restore(snap []byte) error {
	rd := &reader{what: "replica snapshot", b: snap}
	applied, ordered := rd.u64("applied"), rd.u64("ordered")
	n := rd.u32("sessions")
	sessions := map[uint64]session{}
	for i := uint32(0); i < n && rd.err == nil; i++ {
		c := rd.u64(fmt.Sprintf("session %d client", i))
		s := session{seq: rd.u64(fmt.Sprintf("session %d seq", i))}
		s.result = rd.bytes(fmt.Sprintf("session %d result", i))
		sessions[c] = s
	}
	machine := rd.bytes("machine")
	if err := rd.end(); err != nil {
		return err
	}
	if err := r.sm.Restore(machine); err != nil {
		return err
	}
	r.Applied, r.Ordered, r.sessions = applied, ordered, sessions
	return nil
}
