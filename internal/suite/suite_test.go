package suite

import (
	"encoding/binary"
	"hash/fnv"
	"math"
	"slices"
	"testing"
)

// The first outputs of splitmix64 seeded with 0, from its reference
// implementation; the C programs must produce the same.
func TestRandReference(t *testing.T) {
	r := NewRand(0)
	want := []uint64{0xe220a8397b1dcdaf, 0x6e789e6aa1b965f4, 0x06c45d188009454f}
	for i, w := range want {
		if got := r.Uint64(); got != w {
			t.Fatalf("output %d = %#x, want %#x", i, got, w)
		}
	}
}

func TestBlockCoversEveryRowOnce(t *testing.T) {
	for n := 0; n < 40; n++ {
		for procs := 1; procs <= 9; procs++ {
			next := 0
			for rank := range procs {
				lo, hi := Block(n, procs, rank)
				if lo != next || hi < lo || hi-lo > n/procs+1 {
					t.Fatalf("Block(%d, %d, %d) = [%d, %d), want start %d", n, procs, rank, lo, hi, next)
				}
				next = hi
			}
			if next != n {
				t.Fatalf("Block(%d, %d, ·) covers [0, %d)", n, procs, next)
			}
		}
	}
}

func residual(a, x, b []float64) float64 {
	n := len(b)
	worst := 0.0
	for i := range n {
		worst = math.Max(worst, math.Abs(Dot(a[i*n:i*n+n], x)-b[i]))
	}
	return worst
}

func TestJacobiSolves(t *testing.T) {
	p := NewJacobi(24, 7)
	x, done := p.Sequential(100000, 1e-12)
	if done == 100000 {
		t.Fatalf("did not converge in %d sweeps", done)
	}
	if r := residual(p.A, x, p.B); r > 1e-9 {
		t.Fatalf("|Ax-b| = %g after %d sweeps", r, done)
	}
}

// jacobiSplit runs the sweep the way procs processes do: each computes its
// block into its own copy, then the blocks are exchanged.
func jacobiSplit(p *Jacobi, iters, procs int) []float64 {
	xOld := slices.Clone(p.B)
	for range iters {
		xNew := make([]float64, p.N)
		for rank := range procs {
			lo, hi := Block(p.N, procs, rank)
			mine := make([]float64, p.N)
			p.Rows(xOld, mine, lo, hi)
			copy(xNew[lo:hi], mine[lo:hi])
		}
		xOld = xNew
	}
	return xOld
}

func TestJacobiSplitIsBitIdentical(t *testing.T) {
	p := NewJacobi(37, 3)
	want, _ := p.Sequential(50, 0)
	for procs := 1; procs <= 8; procs++ {
		if got := jacobiSplit(p, 50, procs); Checksum(got) != Checksum(want) {
			t.Fatalf("%d processes: checksum %x, sequential %x", procs, Checksum(got), Checksum(want))
		}
	}
}

func TestCGSolves(t *testing.T) {
	c := NewCG(32, 5)
	x, done := c.Sequential(200)
	if r := residual(c.A, x, c.B); r > 1e-8 {
		t.Fatalf("|Ax-b| = %g after %d iterations", r, done)
	}
}

// cgSplit runs CG the way procs processes do, each with its own state,
// exchanging q and r blocks after each phase.
func cgSplit(c *CG, iters, procs int) []float64 {
	states := make([]*CGState, procs)
	for i := range states {
		states[i] = c.Start()
	}
	exchange := func(pick func(*CGState) []float64) {
		all := make([]float64, c.N)
		for rank, s := range states {
			lo, hi := Block(c.N, procs, rank)
			copy(all[lo:hi], pick(s)[lo:hi])
		}
		for _, s := range states {
			copy(pick(s), all)
		}
	}
	for range iters {
		for rank, s := range states {
			lo, hi := Block(c.N, procs, rank)
			c.MatVec(s, lo, hi)
		}
		exchange(func(s *CGState) []float64 { return s.Q })
		for rank, s := range states {
			lo, hi := Block(c.N, procs, rank)
			if !c.Step(s, lo, hi) {
				panic("converged exactly")
			}
		}
		exchange(func(s *CGState) []float64 { return s.R })
		for _, s := range states {
			c.Direction(s)
		}
	}
	exchange(func(s *CGState) []float64 { return s.X })
	return states[0].X
}

func TestCGSplitIsBitIdentical(t *testing.T) {
	c := NewCG(29, 11)
	want, done := c.Sequential(20)
	if done != 20 {
		t.Fatalf("sequential stopped after %d iterations", done)
	}
	for procs := 1; procs <= 8; procs++ {
		if got := cgSplit(c, 20, procs); Checksum(got) != Checksum(want) {
			t.Fatalf("%d processes: checksum %x, sequential %x", procs, Checksum(got), Checksum(want))
		}
	}
}

func TestNBodySplitIsBitIdenticalAndKeepsMomentum(t *testing.T) {
	const n, steps = 23, 15
	want := NewNBody(n, 9).Sequential(steps)
	for procs := 1; procs <= 6; procs++ {
		b := NewNBody(n, 9)
		pos := slices.Clone(b.Pos)
		for range steps {
			next := make([]float64, len(pos))
			for rank := range procs {
				lo, hi := Block(n, procs, rank)
				b.Advance(pos, next, lo, hi)
			}
			pos = next
		}
		if Checksum(pos) != Checksum(want) {
			t.Fatalf("%d processes: checksum %x, sequential %x", procs, Checksum(pos), Checksum(want))
		}
		// Pairwise forces are equal and opposite: the total momentum
		// stays at its starting value, 0.
		for k := range 3 {
			m := 0.0
			for i := range n {
				m += b.Mass[i] * b.Vel[3*i+k]
			}
			if math.Abs(m) > 1e-12 {
				t.Fatalf("%d processes: momentum[%d] = %g after %d steps", procs, k, m, steps)
			}
		}
	}
}

func TestMatMult(t *testing.T) {
	p := NewMatMult(17, 2)
	c := p.Sequential()
	for i := range p.M {
		for j := range p.M {
			var want int32
			for k := range p.M {
				want += p.A[i*p.M+k] * p.B[k*p.M+j]
			}
			if c[i*p.M+j] != want {
				t.Fatalf("C[%d][%d] = %d, want %d", i, j, c[i*p.M+j], want)
			}
		}
	}
}

// bruteTSP tries every permutation of cities 1..n-1.
func bruteTSP(t *TSP) int32 {
	n := t.N
	rest := make([]int32, 0, n-1)
	for c := 1; c < n; c++ {
		rest = append(rest, int32(c))
	}
	best := int32(math.MaxInt32)
	var perm func(k int)
	perm = func(k int) {
		if k == len(rest) {
			l, prev := int32(0), int32(0)
			for _, c := range rest {
				l += t.Dist[int(prev)*n+int(c)]
				prev = c
			}
			best = min(best, l+t.Dist[int(prev)*n])
			return
		}
		for i := k; i < len(rest); i++ {
			rest[k], rest[i] = rest[i], rest[k]
			perm(k + 1)
			rest[k], rest[i] = rest[i], rest[k]
		}
	}
	perm(0)
	return best
}

func TestTSPOptimalAndSplitAgrees(t *testing.T) {
	for n := 1; n <= 8; n++ {
		p := NewTSP(n, uint64(n))
		best, _ := p.Sequential()
		if want := bruteTSP(p); best.Len != want {
			t.Fatalf("n=%d: length %d, brute force %d", n, best.Len, want)
		}
		if len(best.Path) != n || best.Path[0] != 0 {
			t.Fatalf("n=%d: path %v", n, best.Path)
		}
		jobs := p.Jobs()
		for slaves := 1; slaves <= 5; slaves++ {
			merged := NoTour()
			for s := range slaves {
				if tour, _ := p.Worker(jobs, s, slaves); Better(tour, merged) {
					merged = tour
				}
			}
			if merged.Len != best.Len || !slices.Equal(merged.Path, best.Path) {
				t.Fatalf("n=%d, %d slaves: %v, sequential %v", n, slaves, merged, best)
			}
		}
	}
}

// The shared-bound search (SearchShared, the Orca version) ends with the
// sequential tour whatever the order the jobs are taken in, also where
// every tour ties (all distances equal).
func TestTSPSharedBoundAgrees(t *testing.T) {
	for n := 1; n <= 8; n++ {
		for _, p := range []*TSP{NewTSP(n, uint64(n)), {N: n, Dist: slices.Repeat([]int32{1}, n*n)}} {
			want, _ := p.Sequential()
			jobs := p.Jobs()
			r := NewRand(uint64(n))
			for range 5 {
				best := NoTour()
				for _, i := range r.perm(len(jobs)) {
					p.SearchShared(jobs[i], func() int32 { return best.Len }, func(tour Tour) {
						if Better(tour, best) {
							best = tour
						}
					})
				}
				if best.Len != want.Len || !slices.Equal(best.Path, want.Path) {
					t.Fatalf("n=%d: shared bound %v, sequential %v", n, best, want)
				}
			}
		}
	}
}

// perm is a random permutation of 0..n-1.
func (r *Rand) perm(n int) []int {
	p := make([]int, n)
	for i := range p {
		j := r.Intn(i + 1)
		p[i], p[j] = p[j], i
	}
	return p
}

// ASP: Floyd–Warshall gives the shortest distances (against relaxing
// every edge n times, Bellman–Ford style), and procs processes that each
// relax their own rows with the pivot row from its owner give the same
// matrix exactly.
func TestASP(t *testing.T) {
	for n := 1; n <= 24; n += 5 {
		a := NewASP(n, uint64(n))
		got := a.Sequential()
		want := append([]int32(nil), a.Dist...)
		for range n {
			for i := range n {
				for k := range n {
					for j := range n {
						if v := want[i*n+k] + a.Dist[k*n+j]; v < want[i*n+j] {
							want[i*n+j] = v
						}
					}
				}
			}
		}
		if !slices.Equal(got, want) {
			t.Fatalf("n=%d: Floyd–Warshall and relaxation differ", n)
		}
		for procs := 1; procs <= 5; procs++ {
			copies := make([][]int32, procs)
			for r := range copies {
				copies[r] = append([]int32(nil), a.Dist...)
			}
			for k := range n {
				owner := Owner(n, procs, k)
				pivot := append([]int32(nil), copies[owner][k*n:(k+1)*n]...)
				for r := range procs {
					lo, hi := Block(n, procs, r)
					a.Relax(copies[r], lo, hi, k, pivot)
				}
			}
			merged := make([]int32, 0, n*n)
			for r := range procs {
				lo, hi := Block(n, procs, r)
				merged = append(merged, copies[r][lo*n:hi*n]...)
			}
			if !slices.Equal(merged, got) {
				t.Fatalf("n=%d procs=%d: the split differs from the sequential run", n, procs)
			}
		}
	}
}

// relaxSimple is Relax's loop one cell a step, as it was before the
// unrolling: the reference of TestASPRelaxRow and the other side of
// BenchmarkASPRelax.
func relaxSimple(d []int32, n, lo, hi, k int, pivot []int32) {
	for i := lo; i < hi; i++ {
		row := d[i*n : (i+1)*n]
		dik := row[k]
		for j, pkj := range pivot[:len(row)] {
			row[j] = min(row[j], dik+pkj)
		}
	}
}

// The unrolled row loop gives what one cell a step gives, at every length
// (whole steps of eight, a tail, no whole step) and with negative and
// large values.
func TestASPRelaxRow(t *testing.T) {
	r := NewRand(7)
	for n := 0; n <= 41; n++ {
		row := make([]int32, n)
		pivot := make([]int32, n)
		for j := range n {
			row[j] = int32(r.Intn(2000)) - 1000
			pivot[j] = int32(r.Intn(2000)) - 1000
		}
		dik := int32(r.Intn(2000)) - 1000
		want := slices.Clone(row)
		for j := range want {
			want[j] = min(want[j], dik+pivot[j])
		}
		relaxRow(row, pivot, dik)
		if !slices.Equal(row, want) {
			t.Fatalf("n=%d: relaxRow gives %v, want %v", n, row, want)
		}
	}
}

// BenchmarkASPRelax is one Floyd–Warshall solve of 512 nodes on one
// goroutine: the relaxation every ASP program (Orca, BDSM, sequential)
// runs, with Relax ("unrolled") and with the loop one cell a step
// ("simple"), side by side.
func BenchmarkASPRelax(b *testing.B) {
	a := NewASP(512, 1)
	d := make([]int32, len(a.Dist))
	for _, c := range []struct {
		name  string
		relax func(d []int32, lo, hi, k int, pivot []int32)
	}{
		{"simple", func(d []int32, lo, hi, k int, pivot []int32) { relaxSimple(d, a.N, lo, hi, k, pivot) }},
		{"unrolled", a.Relax},
	} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				copy(d, a.Dist)
				for k := range a.N {
					c.relax(d, 0, a.N, k, d[k*a.N:(k+1)*a.N])
				}
			}
		})
	}
}

// ChecksumInt32 is FNV-1a 64 over the little-endian bytes, four at a time
// or a kilobyte at a time alike, and a slice split into parts sums as the
// whole.
func TestChecksumInt32(t *testing.T) {
	r := NewRand(3)
	v := make([]int32, 1000)
	for i := range v {
		v[i] = int32(r.Intn(1<<31)) - 1<<30
	}
	want := checksumInt32Simple(v)
	if got := ChecksumInt32(v); got != want {
		t.Fatalf("ChecksumInt32 = %016x, want FNV-1a %016x", got, want)
	}
	if got := ChecksumInt32(v[:1], v[1:300], nil, v[300:]); got != want {
		t.Fatalf("in parts: %016x, want %016x", got, want)
	}
	if got, empty := ChecksumInt32(nil), fnv.New64a().Sum64(); got != empty {
		t.Fatalf("empty: %016x, want %016x", got, empty)
	}
}

// checksumInt32Simple is ChecksumInt32 four bytes a Write, as it was: the
// other side of BenchmarkChecksumInt32.
func checksumInt32Simple(v []int32) uint64 {
	h := fnv.New64a()
	var b [4]byte
	for _, x := range v {
		binary.LittleEndian.PutUint32(b[:], uint32(x))
		h.Write(b[:])
	}
	return h.Sum64()
}

// BenchmarkChecksumInt32 sums a 512-node distance matrix (1 MiB) four
// bytes a Write ("simple") and a kilobyte a Write, side by side.
func BenchmarkChecksumInt32(b *testing.B) {
	v := NewASP(512, 1).Dist
	for _, c := range []struct {
		name string
		sum  func([]int32) uint64
	}{{"simple", checksumInt32Simple}, {"chunked", func(v []int32) uint64 { return ChecksumInt32(v) }}} {
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(4 * len(v)))
			for b.Loop() {
				c.sum(v)
			}
		})
	}
}
