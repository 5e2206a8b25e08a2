package kv

import (
	"fmt"
)

// Request is one client request: the client's session id, its sequence
// number (a client has one request outstanding and numbers them 1, 2,
// ...; a retry repeats the number), and the op. A request that opens a
// session (Open) has client 0, a number of the client's choosing to
// match the answer by (a nonce), and no op; the answer's value is the
// session's id (8 bytes).
type Request struct {
	Client uint64
	Seq    uint64
	// Local asks for a local read: a get answered from the replica's own
	// state without going through the order — possibly stale, never
	// linearizable. It needs no session. Ignored for other ops.
	Local bool
	Open  bool
	Op    Op
}

func (q Request) String() string {
	if q.Open {
		return fmt.Sprintf("open#%d", q.Seq)
	}
	return fmt.Sprintf("c%d#%d %v", q.Client, q.Seq, q.Op)
}

const (
	flagLocal = 1
	flagOpen  = 2
)

// AppendRequest encodes q: client u64, seq u64, flags u8, op (none if
// q.Open).
func AppendRequest(b []byte, q Request) []byte {
	b = appendU64(b, q.Client)
	b = appendU64(b, q.Seq)
	var flags byte
	if q.Local {
		flags |= flagLocal
	}
	if q.Open {
		flags |= flagOpen
		return append(b, flags)
	}
	b = append(b, flags)
	return AppendOp(b, q.Op)
}

// ParseRequest decodes a request AppendRequest encoded.
func ParseRequest(b []byte) (Request, error) {
	r := &reader{what: "request", b: b}
	q := Request{Client: r.u64("client"), Seq: r.u64("seq")}
	if r.err == nil && q.Seq == 0 {
		r.off -= 8
		r.fail("seq", "0, want 1 or more")
	}
	flags := r.u8("flags")
	switch {
	case r.err != nil:
	case flags&^(flagLocal|flagOpen) != 0:
		r.off--
		r.fail("flags", fmt.Sprintf("unknown flags %#x", flags&^(flagLocal|flagOpen)))
	case flags == flagLocal|flagOpen:
		r.off--
		r.fail("flags", "a local read cannot open a session")
	case flags&flagOpen != 0 && q.Client != 0:
		r.off = 0
		r.fail("client", fmt.Sprintf("%d in a request that opens a session, want 0", q.Client))
	}
	q.Local, q.Open = flags&flagLocal != 0, flags&flagOpen != 0
	if !q.Open {
		q.Op = readOp(r)
	}
	return q, r.end()
}

// Reply answers the request (Client, Seq).
type Reply struct {
	Client, Seq uint64
	Result      Result
}

// AppendReply encodes p: client u64, seq u64, result.
func AppendReply(b []byte, p Reply) []byte {
	b = appendU64(b, p.Client)
	b = appendU64(b, p.Seq)
	return AppendResult(b, p.Result)
}

// ParseReply decodes a reply AppendReply encoded.
func ParseReply(b []byte) (Reply, error) {
	r := &reader{what: "reply", b: b}
	p := Reply{Client: r.u64("client"), Seq: r.u64("seq")}
	p.Result = readResult(r)
	return p, r.end()
}

func appendU64(b []byte, v uint64) []byte {
	return append(b, byte(v>>56), byte(v>>48), byte(v>>40), byte(v>>32), byte(v>>24), byte(v>>16), byte(v>>8), byte(v))
}
