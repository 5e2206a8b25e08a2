package auth

import (
	"hash/crc32"
	"math/bits"
	"sync"

	"github.com/rbcast/rbcast/frame"
)

// The sealed frame's CRC32C from the core's. A MAC seal changes a core's
// frame only before its body: the header's flags and length, and the auth
// section inserted after the ack vector. The CRC is linear, so the CRC of
// the sealed frame follows from the one the core's encoder wrote over the
// same body and a CRC of the two short prefixes, without reading the body
// again (zlib's crc32_combine): with P the core's prefix, Q the sealed
// one and B the body, crc(Q‖B) = crc(P‖B) ⊕ (crc(Q) ⊕ crc(P))·x^(8|B|)
// mod the polynomial. An encrypted body is new bytes: its CRC is computed
// whole (frame.SetCRC).

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// castagnoliReflected is the Castagnoli polynomial, bit-reflected, as
// hash/crc32 uses it.
const castagnoliReflected = 0x82f63b78

// combineMin is the least body for which the combination is cheaper than
// reading the body again (below it, frame.SetCRC; measured by
// BenchmarkSealCRC).
const combineMin = 1024

// x2n[k] is x^(2^k) mod the polynomial, reflected.
var x2n = func() (t [32]uint32) {
	p := uint32(1) << 30 // x^1
	t[0] = p
	for k := 1; k < len(t); k++ {
		p = multModP(p, p)
		t[k] = p
	}
	return t
}()

// multModP is a·b mod the polynomial, both reflected (zlib's multmodp,
// without branches: a's bits are random, and mispredicted branches cost
// more than the 32 rounds).
func multModP(a, b uint32) uint32 {
	var p uint32
	for i := 31; i >= 0; i-- { // bit 31 of a is the coefficient of x^0
		p ^= b & -(a >> i & 1)
		b = b>>1 ^ castagnoliReflected&-(b&1)
	}
	return p
}

// xPow8n is x^(8n) mod the polynomial: shifting a CRC past n bytes.
func xPow8n(n int) uint32 {
	p := uint32(1) << 31 // x^0
	for k := 3; n != 0; n, k = n>>1, k+1 {
		if n&1 != 0 {
			p = multModP(x2n[k&31], p)
		}
	}
	return p
}

// powMax is the longest body whose x^(8n) is kept in pow8 (a jumbo
// frame's; longer ones are computed by xPow8n).
const powMax = 9216

// pow8()[n] is x^(8n) mod the polynomial: built once, a multiplication
// by x per bit (about 74 000 shifts), so that a frame of a length not
// seen last costs one lookup here instead of xPow8n's multiplications
// (about a microsecond: more than the whole CRC of the body). It is built
// on first use, not at the program's start: its 36 KiB are some ten page
// faults, which every rbcastd would pay at start, authenticated or not.
var pow8 = sync.OnceValue(func() *[powMax + 1]uint32 {
	t := new([powMax + 1]uint32)
	p := uint32(1) << 31 // x^0
	for n := range t {
		t[n] = p
		for range 8 {
			p = p>>1 ^ castagnoliReflected&-(p&1)
		}
	}
	return t
})

func pow8n(n int) uint32 {
	if n <= powMax {
		return pow8()[n]
	}
	return xPow8n(n)
}

// shift multiplies by x^(8n), shifting a CRC past a body of n bytes. For
// the last length seen twice in a row (a stream's full frames share one)
// it keeps the product spread into tables of each nibble's 16 values:
// 8 lookups instead of multModP's 32 rounds.
type shift struct {
	n     int
	x     uint32
	built bool // t holds x's tables
	t     [8][16]uint32
}

// mul is multModP(d, x^(8n)).
func (s *shift) mul(n int, d uint32) uint32 {
	if s.n != n || s.x == 0 {
		s.n, s.x, s.built = n, pow8n(n), false
		return multModP(d, s.x)
	}
	if !s.built {
		s.build()
	}
	return s.t[0][d&15] ^ s.t[1][d>>4&15] ^ s.t[2][d>>8&15] ^ s.t[3][d>>12&15] ^
		s.t[4][d>>16&15] ^ s.t[5][d>>20&15] ^ s.t[6][d>>24&15] ^ s.t[7][d>>28]
}

func (s *shift) build() {
	// Bit b of a factor (bit 31 the coefficient of x^0, as multModP
	// reads it) contributes x^(31-b)·s.x; p walks those products from
	// x^0·s.x upwards (multiplying by x: one step of multModP's loop).
	var basis [32]uint32
	p := s.x
	for b := 31; b >= 0; b-- {
		basis[b] = p
		p = p>>1 ^ castagnoliReflected&-(p&1)
	}
	for j := range s.t {
		for v := 1; v < 16; v++ {
			low := v & -v // the lowest bit set
			s.t[j][v] = s.t[j][v^low] ^ basis[4*j+bits.TrailingZeros(uint(low))]
		}
	}
	s.built = true
}

// sealedCRC is the CRC32C of g, the MAC-sealed copy of the core's frame
// orig (same body), from orig's CRC, which the core's encoder wrote
// (frame.Append; the seal trusts it as it trusts the rest of the frame).
func (s *shift) sealedCRC(orig, g frame.View) uint32 {
	p, q := orig.BodyAt(), g.BodyAt()
	d := crc32.Checksum(orig[:p], castagnoli) ^ crc32.Checksum(g[:q], castagnoli)
	return orig.CRC() ^ s.mul(len(orig)-p-frame.CRCLen, d)
}
