package frame

import (
	"hash/crc32"
	"math/rand/v2"
	"testing"
)

// TestSuffixCRC: a FileData frame's block CRC from its trailer is the
// block's CRC-32C, for every block length a file may have.
func TestSuffixCRC(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{1, 3, 64, 1000, 1436, 8964} {
		blk := make([]byte, n)
		for i := range blk {
			blk[i] = byte(rng.Uint32())
		}
		b, err := Append(nil, &Header{Group: 7, Sender: 2, Seq: 41, Acks: []uint32{5, 6, 7}}, &FileDataBody{ID: 3, Data: blk})
		if err != nil {
			t.Fatal(err)
		}
		v, err := Parse(b)
		if err != nil {
			t.Fatal(err)
		}
		got := v.SuffixCRC(ShiftFor(len(v.FileBlock())))
		if want := crc32.Checksum(v.FileBlock(), castagnoli); got != want {
			t.Errorf("%d bytes: SuffixCRC %08x, the block's CRC-32C %08x", n, got, want)
		}
	}
}

func BenchmarkSuffixCRC(b *testing.B) {
	blk := make([]byte, 8964)
	f, _ := Append(nil, &Header{Group: 7, Sender: 2, Seq: 41}, &FileDataBody{ID: 3, Data: blk})
	v, _ := Parse(f)
	s := ShiftFor(len(blk))
	b.Run("derived", func(b *testing.B) {
		for range b.N {
			v.SuffixCRC(s)
		}
	})
	b.Run("computed", func(b *testing.B) {
		for range b.N {
			crc32.Checksum(v.FileBlock(), castagnoli)
		}
	})
}
