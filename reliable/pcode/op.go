package pcode

import (
	"encoding/binary"
	"fmt"

	"github.com/rbcast/rbcast/frame"
)

// The program's calls reach the core through core.Core's Propose, as
// encoded ops, so that PCODE runs on the one core contract unchanged:
//
//	kind (1) | step (8) | peer (2) | targets length (2) | targets | payload
//
// A multicast names its target set and carries the message (peer is
// unused, 0); a request names the member it receives from (peer) and the
// target set, and has no payload. The request's delivery is the matched
// message, in the order requests were proposed.

// OpKind is the kind of a program call.
type OpKind uint8

const (
	OpMulticast OpKind = 1
	OpRequest   OpKind = 2
)

// OpHeadLen is the fixed part of an op; a multicast op also carries its
// target bitmap.
const OpHeadLen = 13

// Op is one program call (the paper's Program(p, i), §2.1).
type Op struct {
	Kind    OpKind
	Step    uint64
	Peer    frame.MemberID // a request's source
	Targets frame.Targets
	Data    []byte // a multicast's message
}

// AppendOp appends the encoding of op to b.
func AppendOp(b []byte, op Op) []byte {
	b = append(b, byte(op.Kind))
	b = binary.BigEndian.AppendUint64(b, op.Step)
	b = binary.BigEndian.AppendUint16(b, uint16(op.Peer))
	b = binary.BigEndian.AppendUint16(b, uint16(len(op.Targets)))
	b = append(b, op.Targets...)
	return append(b, op.Data...)
}

// OpError is a malformed op: what was wrong and where.
type OpError struct {
	Field  string
	Offset int
	Msg    string
}

func (e *OpError) Error() string {
	return fmt.Sprintf("pcode: bad op: %s at byte %d: %s", e.Field, e.Offset, e.Msg)
}

// ParseOp decodes an op; Targets and Data alias b.
func ParseOp(b []byte) (Op, error) {
	if len(b) < OpHeadLen {
		return Op{}, &OpError{"op", 0, fmt.Sprintf("%d bytes, needs at least %d", len(b), OpHeadLen)}
	}
	op := Op{Kind: OpKind(b[0]), Step: binary.BigEndian.Uint64(b[1:]), Peer: frame.MemberID(binary.BigEndian.Uint16(b[9:]))}
	if op.Kind != OpMulticast && op.Kind != OpRequest {
		return Op{}, &OpError{"kind", 0, fmt.Sprintf("kind %d (want 1 multicast or 2 request)", b[0])}
	}
	n := int(binary.BigEndian.Uint16(b[11:]))
	if n == 0 || OpHeadLen+n > len(b) {
		return Op{}, &OpError{"targets", 11, fmt.Sprintf("target bitmap of %d bytes, %d left", n, len(b)-OpHeadLen)}
	}
	op.Targets = frame.Targets(b[OpHeadLen : OpHeadLen+n])
	op.Data = b[OpHeadLen+n:]
	if op.Kind == OpRequest && len(op.Data) != 0 {
		return Op{}, &OpError{"payload", OpHeadLen + n, fmt.Sprintf("a request carries %d bytes of payload, want none", len(op.Data))}
	}
	return op, nil
}
