package frame

import "hash/crc32"

// castagnoliPoly is CRC-32C's polynomial, bit-reversed as hash/crc32
// computes it.
const castagnoliPoly = 0x82F63B78

// A CRCShift carries a CRC-32C over n more bytes of a message: the
// multiplier x^(8n) mod the polynomial (zlib's x2nmodp), made once per
// length by ShiftFor.
type CRCShift struct {
	n  int
	op uint32
}

// ShiftFor returns the CRCShift over n bytes.
func ShiftFor(n int) CRCShift {
	p := uint32(1) << 31  // x^0
	sq := uint32(1) << 23 // x^8: one byte
	for k := uint(n); k > 0; k >>= 1 {
		if k&1 != 0 {
			p = mulModCRC(sq, p)
		}
		sq = mulModCRC(sq, sq)
	}
	return CRCShift{n: n, op: p}
}

// mulModCRC is a·b modulo CRC-32C's polynomial, both bit-reversed
// (zlib's multmodp).
func mulModCRC(a, b uint32) uint32 {
	var p uint32
	for m := uint32(1) << 31; m != 0; m >>= 1 {
		if a&m != 0 {
			p ^= b
			if a&(m-1) == 0 {
				break
			}
		}
		if b&1 != 0 {
			b = b>>1 ^ castagnoliPoly
		} else {
			b >>= 1
		}
	}
	return p
}

// SuffixCRC returns the CRC-32C of the frame's last s.n bytes before its
// CRC32C trailer, from the trailer and the bytes before them (zlib's
// crc32_combine backwards: crc(A‖B) = crc(A)·x^(8|B|) ⊕ crc(B)), without
// reading those s.n bytes. It is their CRC only where the trailer is the
// CRC of the frame's bytes as they are here: a frame parsed with its
// CRC (Parse), or one a verified tag vouches for whose body was not
// decrypted in place; s.n must not pass the frame's start.
func (v View) SuffixCRC(s CRCShift) uint32 {
	end := v.crcStart()
	head := crc32.Checksum(v[:end-s.n], castagnoli)
	return v.CRC() ^ mulModCRC(s.op, head)
}
