package kv

import (
	"fmt"
)

// Request is one client request: the client's id, its sequence number
// (a client has one request outstanding and numbers them 1, 2, ...; a
// retry repeats the number), and the op.
type Request struct {
	Client uint64
	Seq    uint64
	// Local asks for a local read: a get answered from the replica's own
	// state without going through the order — possibly stale, never
	// linearizable. Ignored for other ops.
	Local bool
	Op    Op
}

func (q Request) String() string {
	return fmt.Sprintf("c%d#%d %v", q.Client, q.Seq, q.Op)
}

const flagLocal = 1

// AppendRequest encodes q: client u64, seq u64, flags u8, op.
func AppendRequest(b []byte, q Request) []byte {
	b = appendU64(b, q.Client)
	b = appendU64(b, q.Seq)
	var flags byte
	if q.Local {
		flags |= flagLocal
	}
	b = append(b, flags)
	return AppendOp(b, q.Op)
}

// ParseRequest decodes a request AppendRequest encoded.
func ParseRequest(b []byte) (Request, error) {
	r := &reader{what: "request", b: b}
	q := Request{Client: r.u64("client"), Seq: r.u64("seq")}
	flags := r.u8("flags")
	if r.err == nil && flags&^flagLocal != 0 {
		r.off--
		r.fail("flags", fmt.Sprintf("unknown flags %#x", flags&^flagLocal))
	}
	q.Local = flags&flagLocal != 0
	q.Op = readOp(r)
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
