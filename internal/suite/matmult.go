package suite

// MatMult is the problem of the thesis's matmult program (section 6.3):
// C = A B for m×m integer matrices, rows of C split among processes.
// Every process generates the operands itself ("statically initialized");
// only the result rows travel, to process 0. Entries are in [0, 10), so
// sums fit an int32 for m up to 26 million.
type MatMult struct {
	M    int
	A, B []int32
}

// NewMatMult generates A then B, row-major, from seed.
func NewMatMult(m int, seed uint64) *MatMult {
	p := &MatMult{M: m, A: make([]int32, m*m), B: make([]int32, m*m)}
	r := NewRand(seed)
	for i := range p.A {
		p.A[i] = int32(r.Intn(10))
	}
	for i := range p.B {
		p.B[i] = int32(r.Intn(10))
	}
	return p
}

// Rows computes rows [lo, hi) of C into c (the whole m×m matrix, row-major).
// The i-k-j loop order keeps B's rows streaming; integer sums are exact, so
// order does not matter for the result.
func (p *MatMult) Rows(c []int32, lo, hi int) {
	m := p.M
	for i := lo; i < hi; i++ {
		ci := c[i*m : i*m+m]
		clear(ci)
		for k := 0; k < m; k++ {
			a := p.A[i*m+k]
			bk := p.B[k*m : k*m+m]
			ci := ci[:len(bk)]
			for j, b := range bk {
				ci[j] += a * b
			}
		}
	}
}

// Sequential returns C.
func (p *MatMult) Sequential() []int32 {
	c := make([]int32, p.M*p.M)
	p.Rows(c, 0, p.M)
	return c
}
