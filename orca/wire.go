package orca

import (
	"encoding/binary"
	"fmt"
	"hash/fnv"
)

// The messages Orca sends through the total order (docs/orca.md,
// "Messages"), each a reliable message of at most MaxMessage bytes; the
// first byte says what it is, integers are big-endian.
//
//	op      0x01, object id u32, operation u8, request u32, arguments
//	part    0x02, bytes of a longer message; more parts follow
//	last    0x03, the last bytes of a longer message: the parts joined are
//	        the message (an op), in its place in the order
//	cancel  0x04, object id u32, request u32: cancel a guarded write that
//	        still waits
//	digest  0x05, object id u32, writes u64, digest u64: the sender's
//	        state of the object after that many writes (Config.Check)
//	state   0x06, view u32, to u16, incarnation u32, last u8, bytes of a
//	        snapshot for member to (that run of it), taken where view was
//	        installed (Config.Views: transfer.go)
//	batch   0x07, then entries, each length u16 and an op, cancel or
//	        digest message; each entry is a message of the order of its
//	        own (its own position), in this order (batch.go)
const (
	msgOp     = 0x01
	msgPart   = 0x02
	msgLast   = 0x03
	msgCancel = 0x04
	msgDigest = 0x05
	msgState  = 0x06
	msgBatch  = 0x07
)

const (
	opHeaderLen = 1 + 4 + 1 + 4
	cancelLen   = 1 + 4 + 4
	digestLen   = 1 + 4 + 8 + 8
	// batchEntryHeader is a batch entry's length.
	batchEntryHeader = 2
	// partOverhead is a part's kind byte.
	partOverhead = 1
)

// appendOpHeader appends an op message's header with request 0; the
// request is set by setRequest when the write is sent.
func appendOpHeader(b []byte, object uint32, op uint8) []byte {
	b = append(b, msgOp)
	b = binary.BigEndian.AppendUint32(b, object)
	b = append(b, op)
	return binary.BigEndian.AppendUint32(b, 0)
}

func setRequest(msg []byte, req uint32) { binary.BigEndian.PutUint32(msg[6:], req) }

// parseOp parses an op message; args is a view into it. Its results
// come back in registers: as one struct they were stored to the stack
// field by field and copied on with wider loads, which wait for the
// narrower stores (a store-forwarding stall at every write a replica
// applies).
func parseOp(b []byte) (object uint32, op uint8, req uint32, args []byte, err error) {
	if len(b) < opHeaderLen {
		return 0, 0, 0, nil, fmt.Errorf("orca: op message of %d bytes, shorter than its %d-byte header", len(b), opHeaderLen)
	}
	return binary.BigEndian.Uint32(b[1:]), b[5], binary.BigEndian.Uint32(b[6:]), b[opHeaderLen:], nil
}

func appendCancel(b []byte, object, req uint32) []byte {
	b = append(b, msgCancel)
	b = binary.BigEndian.AppendUint32(b, object)
	return binary.BigEndian.AppendUint32(b, req)
}

func parseCancel(b []byte) (object, req uint32, err error) {
	if len(b) != cancelLen {
		return 0, 0, fmt.Errorf("orca: cancel message of %d bytes, want %d", len(b), cancelLen)
	}
	return binary.BigEndian.Uint32(b[1:]), binary.BigEndian.Uint32(b[5:]), nil
}

func appendDigest(b []byte, object uint32, writes, digest uint64) []byte {
	b = append(b, msgDigest)
	b = binary.BigEndian.AppendUint32(b, object)
	b = binary.BigEndian.AppendUint64(b, writes)
	return binary.BigEndian.AppendUint64(b, digest)
}

func parseDigest(b []byte) (object uint32, writes, digest uint64, err error) {
	if len(b) != digestLen {
		return 0, 0, 0, fmt.Errorf("orca: digest message of %d bytes, want %d", len(b), digestLen)
	}
	return binary.BigEndian.Uint32(b[1:]), binary.BigEndian.Uint64(b[5:]), binary.BigEndian.Uint64(b[13:]), nil
}

// objectID is the 32-bit id of an object's name: FNV-1a.
func objectID(name string) uint32 {
	h := fnv.New32a()
	h.Write([]byte(name))
	return h.Sum32()
}

// digestOf is the digest of an encoded state: FNV-1a 64.
func digestOf(b []byte) uint64 {
	h := fnv.New64a()
	h.Write(b)
	return h.Sum64()
}
