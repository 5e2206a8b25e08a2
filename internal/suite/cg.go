package suite

// CG is the problem of the thesis's cg program (section 6.3): conjugate
// gradient on the jacobi problem's matrix and right-hand side, from x = 0.
//
// One iteration, as every implementation here runs it:
//
//	q = A p                 rows split among processes; exchange 1: q
//	alpha = rr / (p·q)      every process, whole vectors, index order
//	x += alpha p, r -= alpha q   own rows
//	                        exchange 2: r
//	rr' = r·r, beta = rr'/rr, p = r + beta p   every process, whole vectors
//
// Two all-to-all exchanges per iteration instead of one plus two scalar
// reductions: the dot products then never depend on how rows are split,
// which is what makes the parallel results bit-identical to Sequential.
type CG struct {
	N int
	A []float64
	B []float64
}

// NewCG generates the problem of size n from seed (the same A and b as
// NewJacobi).
func NewCG(n int, seed uint64) *CG {
	j := NewJacobi(n, seed)
	return &CG{N: n, A: j.A, B: j.B}
}

// CGState is one process's copy of the iteration's vectors. X, R and Q are
// only current on the rows a process owns until they are exchanged; P and
// RR are the same in every process.
type CGState struct {
	X, R, P, Q []float64
	RR         float64
}

// Start returns the state before the first iteration: x = 0, r = p = b.
func (c *CG) Start() *CGState {
	s := &CGState{
		X: make([]float64, c.N),
		R: append([]float64(nil), c.B...),
		P: append([]float64(nil), c.B...),
		Q: make([]float64, c.N),
	}
	s.RR = Dot(s.R, s.R)
	return s
}

// MatVec computes q[lo:hi] = (A p)[lo:hi].
func (c *CG) MatVec(s *CGState, lo, hi int) {
	n := c.N
	for i := lo; i < hi; i++ {
		row := c.A[i*n : i*n+n]
		p := s.P[:len(row)]
		sum := 0.0
		for j, a := range row {
			sum += a * p[j]
		}
		s.Q[i] = sum
	}
}

// Step updates x and r on rows [lo, hi) from the whole of q; it reports
// false, changing nothing, when p·q is 0 (the iteration has converged
// exactly and alpha is undefined).
func (c *CG) Step(s *CGState, lo, hi int) bool {
	pq := Dot(s.P, s.Q)
	if pq == 0 {
		return false
	}
	alpha := s.RR / pq
	for i := lo; i < hi; i++ {
		s.X[i] += alpha * s.P[i]
		s.R[i] -= alpha * s.Q[i]
	}
	return true
}

// Direction computes the next p from the whole of r; it reports false when
// r·r is 0.
func (c *CG) Direction(s *CGState) bool {
	rr := Dot(s.R, s.R)
	if rr == 0 {
		s.RR = 0
		return false
	}
	beta := rr / s.RR
	s.RR = rr
	for i := range s.P {
		s.P[i] = s.R[i] + beta*s.P[i]
	}
	return true
}

// Dot is the dot product of a and b in index order.
func Dot(a, b []float64) float64 {
	b = b[:len(a)]
	sum := 0.0
	for i := range a {
		sum += a[i] * b[i]
	}
	return sum
}

// Sequential runs at most iters iterations and returns x and the number of
// iterations completed.
func (c *CG) Sequential(iters int) (x []float64, done int) {
	s := c.Start()
	for done < iters {
		c.MatVec(s, 0, c.N)
		if !c.Step(s, 0, c.N) {
			break
		}
		done++
		if !c.Direction(s) {
			break
		}
	}
	return s.X, done
}
