package auth

import (
	"fmt"
	"strings"
	"testing"
)

// BenchmarkSealVerify: one frame sealed by a Link and verified by a
// Verifier, per payload size and algorithm (ns per frame).
func BenchmarkSealVerify(b *testing.B) {
	for _, encrypt := range []bool{false, true} {
		for _, size := range []int{64, 1400, 8900} {
			b.Run(fmt.Sprintf("encrypt=%v/%d", encrypt, size), func(b *testing.B) {
				sa := &sink{fake: fake{mac: [6]byte{2, 0, 0, 0, 0, 1}}, last: make([]byte, 0, 10000)}
				k := testKey(b, 1)
				a := wrap(b, sa, k, encrypt)
				v, _ := NewVerifier(Config{Group: 7, Key: k, Encrypt: encrypt})
				f := [][]byte{dataFrame(b, sa.mac, 0, 5, 1, strings.Repeat("x", size))}
				b.SetBytes(int64(size))
				for b.Loop() {
					a.Send(f)
					if err := v.Check(sa.last); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
