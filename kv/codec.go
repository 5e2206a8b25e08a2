package kv

import (
	"encoding/binary"
	"fmt"
	"strconv"
)

// FormatError says which field of an encoded message was malformed and
// where.
type FormatError struct {
	What   string // the message: "request", "reply", "snapshot"...
	Field  string
	Offset int
	Why    string
}

func (e *FormatError) Error() string {
	return fmt.Sprintf("kv: malformed %s: field %s at offset %d: %s", e.What, e.Field, e.Offset, e.Why)
}

// reader decodes fields in order, remembering the first error.
type reader struct {
	what string
	b    []byte
	off  int
	err  error
}

func (r *reader) fail(field, why string) {
	if r.err == nil {
		r.err = &FormatError{What: r.what, Field: field, Offset: r.off, Why: why}
	}
}

func (r *reader) need(field string, n int) bool {
	if r.err != nil {
		return false
	}
	if len(r.b)-r.off < n {
		r.fail(field, fmt.Sprintf("%d bytes left, want %d", len(r.b)-r.off, n))
		return false
	}
	return true
}

func (r *reader) u8(field string) byte {
	if !r.need(field, 1) {
		return 0
	}
	v := r.b[r.off]
	r.off++
	return v
}

func (r *reader) u32(field string) uint32 {
	if !r.need(field, 4) {
		return 0
	}
	v := binary.BigEndian.Uint32(r.b[r.off:])
	r.off += 4
	return v
}

func (r *reader) u64(field string) uint64 {
	if !r.need(field, 8) {
		return 0
	}
	v := binary.BigEndian.Uint64(r.b[r.off:])
	r.off += 8
	return v
}

// bytes reads a u32 length and that many bytes (a copy).
func (r *reader) bytes(field string) []byte {
	n := r.u32(field + " length")
	if !r.need(field, int(n)) {
		return nil
	}
	v := append([]byte{}, r.b[r.off:r.off+int(n)]...)
	r.off += int(n)
	return v
}

// end fails unless every byte was read.
func (r *reader) end() error {
	if r.err == nil && r.off != len(r.b) {
		r.fail("end", fmt.Sprintf("%d trailing bytes", len(r.b)-r.off))
	}
	return r.err
}

// quoteCut quotes s for an error, cut to its first 64 bytes.
func quoteCut(s string) string {
	const most = 64
	if len(s) <= most {
		return strconv.Quote(s)
	}
	return fmt.Sprintf("%s… (%d bytes)", strconv.Quote(s[:most]), len(s))
}

func appendBytes(b, v []byte) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(len(v)))
	return append(b, v...)
}
