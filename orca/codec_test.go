package orca_test

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/rbcast/rbcast/orca"
)

// varint32sReference is Varint32s' decoding before DecodeVarint32s: every
// element through encoding/binary. DecodeVarint32s must agree with it on
// every input, errors included.
func varint32sReference(b []byte) ([]int32, error) {
	k := 0
	for _, c := range b {
		if c < 0x80 {
			k++
		}
	}
	v := make([]int32, k)
	off := 0
	for i := range v {
		x, l := binary.Varint(b[off:])
		if l <= 0 || x < math.MinInt32 || x > math.MaxInt32 {
			return nil, fmt.Errorf("orca: element %d of a Varint32s, at byte %d of %d, is not an int32's varint", i, off, len(b))
		}
		v[i], off = int32(x), off+l
	}
	if off != len(b) {
		return nil, fmt.Errorf("orca: a Varint32s of %d bytes ends in %d bytes of an unfinished varint", len(b), len(b)-off)
	}
	return v, nil
}

// varint32sInputs are encodings of numbers of every length (1 to 5 bytes,
// both signs, the int32 bounds) and byte strings that are mostly not
// encodings: continuation bytes where an element should end, varints
// longer than an int32's, truncated ends.
func varint32sInputs(seed uint64, count int) [][]byte {
	r := rand.New(rand.NewPCG(seed, 1))
	var in [][]byte
	for range count {
		var b []byte
		switch r.IntN(3) {
		case 0: // an encoding
			for range r.IntN(40) {
				var x int64
				switch r.IntN(4) {
				case 0:
					x = int64(r.IntN(128)) - 64
				case 1:
					x = int64(r.IntN(16384)) - 8192
				case 2:
					x = int64(r.Int32()) * int64(1-2*r.IntN(2))
				default:
					x = []int64{math.MaxInt32, math.MinInt32, 63, 64, -64, -65, 8191, 8192, -8192, -8193}[r.IntN(10)]
				}
				b = binary.AppendVarint(b, x)
			}
		case 1: // random bytes, high bits often set
			for range r.IntN(24) {
				c := byte(r.IntN(256))
				if r.IntN(2) == 0 {
					c |= 0x80
				}
				b = append(b, c)
			}
		default: // an encoding with a byte changed or cut short
			for range 1 + r.IntN(10) {
				b = binary.AppendVarint(b, int64(r.Int32())>>r.IntN(32))
			}
			if r.IntN(2) == 0 {
				b[r.IntN(len(b))] |= 0x80
			} else {
				b = b[:r.IntN(len(b))]
			}
		}
		in = append(in, b)
	}
	return in
}

// DecodeVarint32s decodes what the reference decodes, and fails where it
// fails with the same text; it appends to dst, leaving dst's elements
// alone, and on an error returns dst as it was.
func TestDecodeVarint32s(t *testing.T) {
	for i, b := range varint32sInputs(1, 20000) {
		want, wantErr := varint32sReference(b)
		dst := []int32{7, 8}
		got, err := orca.DecodeVarint32s(dst, b)
		if fmt.Sprint(err) != fmt.Sprint(wantErr) {
			t.Fatalf("input %d % x: error %v, want %v", i, b, err, wantErr)
		}
		if err != nil {
			if !slices.Equal(got, dst) {
				t.Fatalf("input %d % x: failed, returning %v, want dst %v", i, b, got, dst)
			}
			continue
		}
		if !slices.Equal(got[:2], []int32{7, 8}) || !slices.Equal(got[2:], want) {
			t.Fatalf("input %d % x: got %v, want [7 8] and %v", i, b, got, want)
		}
		dec, err := orca.Varint32s.Decode(b)
		if err != nil || dec == nil || !slices.Equal(dec, want) {
			t.Fatalf("input %d % x: Varint32s.Decode %v (nil %t), %v; want %v", i, b, dec, dec == nil, err, want)
		}
	}
}

// With room in dst, decoding allocates nothing: a write function can
// decode its argument into its state's memory.
func TestDecodeVarint32sAllocs(t *testing.T) {
	var enc []byte
	for i := range 512 {
		enc = binary.AppendVarint(enc, int64(i*37%1000))
	}
	dst := make([]int32, 0, 512)
	allocs := testing.AllocsPerRun(100, func() {
		var err error
		if dst, err = orca.DecodeVarint32s(dst[:0], enc); err != nil || len(dst) != 512 {
			t.Fatalf("%d elements, %v", len(dst), err)
		}
	})
	if allocs != 0 {
		t.Errorf("%v allocations a decode into a slice with room, want 0", allocs)
	}
}

// BenchmarkVarint32sDecode decodes a 512-element row of ASP's distances
// (below 1000: one and two bytes) by Varint32s and by the reference, and
// into a slice with room (DecodeVarint32s): compare them in one run.
func BenchmarkVarint32sDecode(b *testing.B) {
	r := rand.New(rand.NewPCG(2, 2))
	var enc []byte
	for range 512 {
		enc = binary.AppendVarint(enc, int64(r.IntN(1000)))
	}
	b.Run("codec", func(b *testing.B) {
		b.SetBytes(int64(len(enc)))
		for b.Loop() {
			if _, err := orca.Varint32s.Decode(enc); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("reference", func(b *testing.B) {
		b.SetBytes(int64(len(enc)))
		for b.Loop() {
			if _, err := varint32sReference(enc); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("into", func(b *testing.B) {
		b.SetBytes(int64(len(enc)))
		dst := make([]int32, 0, 512)
		for b.Loop() {
			var err error
			if dst, err = orca.DecodeVarint32s(dst[:0], enc); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// FuzzDecodeVarint32s: DecodeVarint32s agrees with the reference on
// every input (the arguments of a write off the wire), errors included,
// and leaves dst's elements alone.
func FuzzDecodeVarint32s(f *testing.F) {
	for _, b := range varint32sInputs(2, 16) {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		want, wantErr := varint32sReference(b)
		dst := []int32{7, 8}
		got, err := orca.DecodeVarint32s(dst, b)
		if fmt.Sprint(err) != fmt.Sprint(wantErr) {
			t.Fatalf("% x: error %v, want %v", b, err, wantErr)
		}
		if err != nil {
			if !slices.Equal(got, dst) {
				t.Fatalf("% x: failed, returning %v, want dst %v", b, got, dst)
			}
			return
		}
		if !slices.Equal(got[:2], []int32{7, 8}) || !slices.Equal(got[2:], want) {
			t.Fatalf("% x: got %v, want [7 8] and %v", b, got, want)
		}
	})
}

// FuzzCodecs: every codec's Decode of a write's arguments either fails
// or gives a value that encodes to bytes that decode to it again (the
// fixed-width codecs: to exactly the input).
func FuzzCodecs(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{1, 2, 3, 4, 5, 6, 7, 8})
	f.Add([]byte{0x80, 0x01, 0x7f, 0xff, 0xff, 0xff, 0xff, 0x0f})
	if b, err := orca.Gob[Queue]().Append(nil, Queue{Jobs: []int32{4, 5}, Closed: true}); err == nil {
		f.Add(b)
	}
	type pair struct {
		A int32
		B [2]uint16
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		exact(t, orca.Int64, b)
		exact(t, orca.Int32s, b)
		exact(t, orca.Float64s, b)
		exact(t, orca.Fixed[pair](), b)
		exact(t, orca.NoArgs, b)
		stable(t, orca.Varint32s, b)
		stable(t, orca.Gob[Queue](), b)
	})
}

// exact: b either does not decode or encodes back to itself.
func exact[T any](t *testing.T, c orca.Codec[T], b []byte) {
	t.Helper()
	v, err := c.Decode(b)
	if err != nil {
		return
	}
	if again, err := c.Append(nil, v); err != nil || !slices.Equal(again, b) {
		t.Fatalf("%T: % x decodes to %v, which encodes to % x (%v)", v, b, v, again, err)
	}
}

// stable: what b decodes to encodes to bytes that decode to it again.
func stable[T any](t *testing.T, c orca.Codec[T], b []byte) {
	t.Helper()
	v, err := c.Decode(b)
	if err != nil {
		return
	}
	enc, err := c.Append(nil, v)
	if err != nil {
		t.Fatalf("%T: % x decodes to %v, which does not encode: %v", v, b, v, err)
	}
	w, err := c.Decode(enc)
	if err != nil {
		t.Fatalf("%T: % x decodes to %v, whose encoding % x does not decode: %v", v, b, v, enc, err)
	}
	if again, _ := c.Append(nil, w); !slices.Equal(again, enc) {
		t.Fatalf("%T: %v encodes to % x, which decodes to %v", v, v, enc, w)
	}
}
