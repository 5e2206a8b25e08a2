package orca

import (
	"bytes"
	"encoding/binary"
	"encoding/gob"
	"fmt"
	"math"
	"slices"
)

// Codec turns a value into bytes and back: an operation's arguments
// (they travel in the write's message) and an object's state (snapshots
// and the determinism check's digests).
//
// Append appends v's encoding to b (or says why v cannot be encoded).
// Decode returns the value b encodes, or an error naming what is wrong;
// the value must not share memory with b, which is a view into a received
// frame, valid only during the call (BytesView, the one exception, says
// how). Equal values must encode to equal bytes: digests compare
// encodings.
type Codec[T any] interface {
	Append(b []byte, v T) ([]byte, error)
	Decode(b []byte) (T, error)
}

// CodecFuncs makes a Codec of two functions.
func CodecFuncs[T any](appendFn func(b []byte, v T) ([]byte, error), decodeFn func(b []byte) (T, error)) Codec[T] {
	return funcCodec[T]{appendFn, decodeFn}
}

type funcCodec[T any] struct {
	append func([]byte, T) ([]byte, error)
	decode func([]byte) (T, error)
}

func (c funcCodec[T]) Append(b []byte, v T) ([]byte, error) { return c.append(b, v) }
func (c funcCodec[T]) Decode(b []byte) (T, error)           { return c.decode(b) }

// NoArgs is the codec of operations without arguments (struct{}): it
// encodes to nothing.
var NoArgs Codec[struct{}] = noArgs{}

type noArgs struct{}

func (noArgs) Append(b []byte, _ struct{}) ([]byte, error) { return b, nil }
func (noArgs) Decode(b []byte) (struct{}, error) {
	if len(b) != 0 {
		return struct{}{}, fmt.Errorf("orca: %d bytes of arguments for an operation that takes none", len(b))
	}
	return struct{}{}, nil
}

// Int64 encodes an int64 in 8 bytes, little-endian.
var Int64 Codec[int64] = int64Codec{}

type int64Codec struct{}

func (int64Codec) Append(b []byte, v int64) ([]byte, error) {
	return binary.LittleEndian.AppendUint64(b, uint64(v)), nil
}
func (int64Codec) Decode(b []byte) (int64, error) {
	if len(b) != 8 {
		return 0, fmt.Errorf("orca: an int64 is 8 bytes, got %d", len(b))
	}
	return int64(binary.LittleEndian.Uint64(b)), nil
}

// Int32s encodes a []int32 as its elements, 4 bytes each, little-endian
// (nil and empty decode to an empty, non-nil slice).
var Int32s Codec[[]int32] = int32sCodec{}

type int32sCodec struct{}

func (int32sCodec) Append(b []byte, v []int32) ([]byte, error) {
	for _, x := range v {
		b = binary.LittleEndian.AppendUint32(b, uint32(x))
	}
	return b, nil
}

func (int32sCodec) Decode(b []byte) ([]int32, error) {
	if len(b)%4 != 0 {
		return nil, fmt.Errorf("orca: %d bytes is not a whole number of int32s", len(b))
	}
	v := make([]int32, len(b)/4)
	for i := range v {
		v[i] = int32(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return v, nil
}

// Varint32s encodes a []int32 as its elements, each a zigzag varint
// (encoding/binary's AppendVarint): 1 byte for -64..63, 2 for
// -8192..8191, at most 5. For slices of small numbers (distances, counts,
// indices) it is a fraction of Int32s' 4 bytes an element, so fewer of the
// order's messages: a 512-cell row of values below 8192 fits in one
// message of a 1500-byte frame, where Int32s needs two.
var Varint32s Codec[[]int32] = varint32sCodec{}

type varint32sCodec struct{}

func (varint32sCodec) Append(b []byte, v []int32) ([]byte, error) {
	for _, x := range v {
		b = binary.AppendVarint(b, int64(x))
	}
	return b, nil
}

func (varint32sCodec) Decode(b []byte) ([]int32, error) {
	v, err := DecodeVarint32s(nil, b)
	if err == nil && v == nil {
		v = []int32{} // as for Int32s: empty, not nil
	}
	return v, err
}

// DecodeVarint32s appends the elements that b encodes (Varint32s'
// encoding) to dst and returns the extended slice, or dst as it was and
// an error naming the element and the byte that are wrong. With room for
// them in dst it allocates nothing: a write function that keeps a
// []int32 decodes into memory its state owns (an argument of BytesView,
// decoded here), not into a new slice per write at every replica.
func DecodeVarint32s(dst []int32, b []byte) ([]int32, error) {
	k := 0 // an element's last byte is the one below 0x80
	for _, c := range b {
		if c < 0x80 {
			k++
		}
	}
	out := slices.Grow(dst, k)[:len(dst)+k]
	v := out[len(dst):]
	off := 0
	for i := range v {
		// Zigzag (binary.AppendVarint): the value is ux>>1, complemented
		// when ux is odd. Elements of one and two bytes (-8192..8191) are
		// decoded here; longer ones by encoding/binary.
		var ux uint64
		if c := b[off]; c < 0x80 {
			ux, off = uint64(c), off+1
		} else if off+1 < len(b) && b[off+1] < 0x80 {
			ux, off = uint64(c&0x7f)|uint64(b[off+1])<<7, off+2
		} else {
			x, l := binary.Varint(b[off:])
			if l <= 0 || x < math.MinInt32 || x > math.MaxInt32 {
				return dst, fmt.Errorf("orca: element %d of a Varint32s, at byte %d of %d, is not an int32's varint", i, off, len(b))
			}
			v[i], off = int32(x), off+l
			continue
		}
		v[i] = int32(ux>>1) ^ -int32(ux&1)
	}
	if off != len(b) {
		return dst, fmt.Errorf("orca: a Varint32s of %d bytes ends in %d bytes of an unfinished varint", len(b), len(b)-off)
	}
	return out, nil
}

// Float64s encodes a []float64 as the IEEE bits of its elements, 8 bytes
// each, little-endian.
var Float64s Codec[[]float64] = float64sCodec{}

type float64sCodec struct{}

func (float64sCodec) Append(b []byte, v []float64) ([]byte, error) {
	for _, x := range v {
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(x))
	}
	return b, nil
}

func (float64sCodec) Decode(b []byte) ([]float64, error) {
	if len(b)%8 != 0 {
		return nil, fmt.Errorf("orca: %d bytes is not a whole number of float64s", len(b))
	}
	v := make([]float64, len(b)/8)
	for i := range v {
		v[i] = math.Float64frombits(binary.LittleEndian.Uint64(b[8*i:]))
	}
	return v, nil
}

// Bytes encodes a []byte as itself; Decode copies.
var Bytes Codec[[]byte] = bytesCodec{}

type bytesCodec struct{}

func (bytesCodec) Append(b []byte, v []byte) ([]byte, error) { return append(b, v...), nil }
func (bytesCodec) Decode(b []byte) ([]byte, error)           { return append([]byte{}, b...), nil }

// BytesView encodes a []byte as itself, like Bytes, but decodes without
// a copy: a write's function gets a view into the received message,
// valid only while it runs, which saves an allocation per write at every
// replica. It is for write functions that keep no reference to their
// argument — the rule for every write function (copy what you keep:
// s.Data = append(s.Data[:0], b...)) that Bytes forgives. A write that
// waits in its guard's queue, or is traced (Config.Trace), gets a copy of
// its own; a read's arguments are not decoded.
var BytesView Codec[[]byte] = bytesViewCodec{}

type bytesViewCodec struct{}

func (bytesViewCodec) Append(b []byte, v []byte) ([]byte, error) { return append(b, v...), nil }
func (bytesViewCodec) Decode(b []byte) ([]byte, error)           { return b, nil }
func (bytesViewCodec) decodesViews()                             {}

// viewDecoder is a codec whose Decode returns views into its input.
type viewDecoder interface{ decodesViews() }

// String encodes a string as its bytes.
var String Codec[string] = stringCodec{}

type stringCodec struct{}

func (stringCodec) Append(b []byte, v string) ([]byte, error) { return append(b, v...), nil }
func (stringCodec) Decode(b []byte) (string, error)           { return string(b), nil }

// Fixed encodes values of a fixed-size type T (numbers, bools, arrays and
// structs of them: what encoding/binary.Size measures) with
// encoding/binary, little-endian. For a T without a fixed size every
// Append and Decode fails, saying so.
func Fixed[T any]() Codec[T] {
	var zero T
	return fixedCodec[T]{size: binary.Size(zero)}
}

type fixedCodec[T any] struct{ size int }

func (c fixedCodec[T]) Append(b []byte, v T) ([]byte, error) {
	if c.size < 0 {
		return b, fmt.Errorf("orca.Fixed: %T has no fixed size (encoding/binary.Size); use another codec", v)
	}
	return binary.Append(b, binary.LittleEndian, v)
}

func (c fixedCodec[T]) Decode(b []byte) (T, error) {
	var v T
	if c.size < 0 {
		return v, fmt.Errorf("orca.Fixed: %T has no fixed size (encoding/binary.Size); use another codec", v)
	}
	if len(b) != c.size {
		return v, fmt.Errorf("orca: a %T is %d bytes, got %d", v, c.size, len(b))
	}
	_, err := binary.Decode(b, binary.LittleEndian, &v)
	return v, err
}

// Gob encodes any value encoding/gob can (exported fields only) with a
// fresh encoder each time, so that equal values encode alike (except maps,
// which gob writes in Go's random iteration order: a state with a map
// needs a codec of its own for the determinism check). It is the default
// state codec; it is slow and large for arguments (a few µs and the type's
// description in every message): prefer a specific codec there.
func Gob[T any]() Codec[T] { return gobCodec[T]{} }

type gobCodec[T any] struct{}

func (gobCodec[T]) Append(b []byte, v T) ([]byte, error) {
	buf := bytes.NewBuffer(b)
	if err := gob.NewEncoder(buf).Encode(&v); err != nil {
		return b, fmt.Errorf("orca: encoding a %T (gob): %w", v, err)
	}
	return buf.Bytes(), nil
}

func (gobCodec[T]) Decode(b []byte) (T, error) {
	var v T
	err := gob.NewDecoder(bytes.NewReader(b)).Decode(&v)
	if err != nil {
		return v, fmt.Errorf("orca: decoding a %T (gob): %w", v, err)
	}
	return v, nil
}
