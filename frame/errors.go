package frame

import (
	"errors"
	"fmt"
)

// Kinds of decode failure. A *DecodeError wraps exactly one of them; test
// with errors.Is.
var (
	ErrShort     = errors.New("frame shorter than its header")
	ErrLength    = errors.New("length field disagrees with the frame")
	ErrVersion   = errors.New("unsupported version")
	ErrType      = errors.New("unknown frame type")
	ErrFlags     = errors.New("unknown critical flag")
	ErrGroup     = errors.New("frame of another group")
	ErrChecksum  = errors.New("CRC32C mismatch")
	ErrAckVector = errors.New("ack vector does not fit")
	ErrAuth      = errors.New("malformed authentication section")
	ErrBody      = errors.New("malformed body")
	ErrEthernet  = errors.New("not an rbcast Ethernet frame")
)

// DecodeError says what was wrong with a frame and where.
type DecodeError struct {
	Kind   error  // one of the Err* kinds above
	Field  string // the field at fault, e.g. "length", "nack.ranges"
	Offset int    // byte offset of that field within the rbcast frame
	Detail string // what was found against what was expected
}

func (e *DecodeError) Error() string {
	if e.Detail == "" {
		return fmt.Sprintf("rbcast frame: %s at offset %d (%s)", e.Kind, e.Offset, e.Field)
	}
	return fmt.Sprintf("rbcast frame: %s at offset %d (%s): %s", e.Kind, e.Offset, e.Field, e.Detail)
}

func (e *DecodeError) Unwrap() error { return e.Kind }

func decodeErr(kind error, field string, off int, format string, args ...any) error {
	return &DecodeError{Kind: kind, Field: field, Offset: off, Detail: fmt.Sprintf(format, args...)}
}

// Encoding errors.
var (
	ErrTooLarge = errors.New("frame would exceed its limit")
	ErrInvalid  = errors.New("invalid frame for encoding")
)

// EncodeError says why a frame could not be encoded.
type EncodeError struct {
	Kind   error // ErrTooLarge or ErrInvalid
	Detail string
}

func (e *EncodeError) Error() string { return "rbcast frame: " + e.Kind.Error() + ": " + e.Detail }
func (e *EncodeError) Unwrap() error { return e.Kind }
