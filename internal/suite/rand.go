package suite

import (
	"encoding/binary"
	"hash/fnv"
	"math"
)

// Rand is splitmix64, chosen because it is four lines in any language: the
// MPI programs in bench/mpi generate the same inputs from the same seed.
type Rand struct{ state uint64 }

// NewRand returns a generator seeded with seed.
func NewRand(seed uint64) *Rand { return &Rand{state: seed} }

// Uint64 returns the next 64 random bits.
func (r *Rand) Uint64() uint64 {
	r.state += 0x9e3779b97f4a7c15
	z := r.state
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// Float64 returns a value in [0, 1) from the top 53 bits.
func (r *Rand) Float64() float64 { return float64(r.Uint64()>>11) * 0x1p-53 }

// Intn returns a value in [0, n); n > 0. The modulo bias is irrelevant here
// and keeps the C version a one-liner.
func (r *Rand) Intn(n int) int { return int(r.Uint64() % uint64(n)) }

// Checksum is FNV-1a 64 over the little-endian bytes of the float64 bits of
// v: equal checksums mean bit-identical results.
func Checksum(v []float64) uint64 {
	h := fnv.New64a()
	var b [8]byte
	for _, x := range v {
		binary.LittleEndian.PutUint64(b[:], math.Float64bits(x))
		h.Write(b[:])
	}
	return h.Sum64()
}

// ChecksumInt32 is FNV-1a 64 over the little-endian bytes of v, then of
// each of more in turn: a matrix held in parts (row blocks, in order)
// sums as the whole would. The bytes go to the hash a kilobyte at a
// time, not four at a time through its interface.
func ChecksumInt32(v []int32, more ...[]int32) uint64 {
	h := fnv.New64a()
	var b [1024]byte
	for _, part := range append([][]int32{v}, more...) {
		for len(part) > 0 {
			c := min(len(part), len(b)/4)
			for i, x := range part[:c] {
				binary.LittleEndian.PutUint32(b[4*i:], uint32(x))
			}
			h.Write(b[:4*c])
			part = part[c:]
		}
	}
	return h.Sum64()
}

// Block returns the rows [lo, hi) of n that rank of procs computes: the
// first n%procs ranks take one row more (as the thesis's jacobi does).
func Block(n, procs, rank int) (lo, hi int) {
	q, r := n/procs, n%procs
	lo = rank*q + min(rank, r)
	hi = lo + q
	if rank < r {
		hi++
	}
	return lo, hi
}
