package suite

import (
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
