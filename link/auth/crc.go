package auth

import (
	"hash/crc32"

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

// shift caches xPow8n for the last body length (a stream's full frames
// share one).
type shift struct {
	n int
	x uint32
}

func (s *shift) of(n int) uint32 {
	if s.n != n || s.x == 0 {
		s.n, s.x = n, xPow8n(n)
	}
	return s.x
}

// sealedCRC is the CRC32C of g, the MAC-sealed copy of the core's frame
// orig (same body), from orig's CRC, which the core's encoder wrote
// (frame.Append; the seal trusts it as it trusts the rest of the frame).
func (s *shift) sealedCRC(orig, g frame.View) uint32 {
	p, q := orig.BodyAt(), g.BodyAt()
	d := crc32.Checksum(orig[:p], castagnoli) ^ crc32.Checksum(g[:q], castagnoli)
	return orig.CRC() ^ multModP(s.of(len(orig)-p-frame.CRCLen), d)
}
