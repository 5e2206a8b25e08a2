package suite

import "math"

// Jacobi is the problem of the thesis's jacobi program (section 6.3,
// appendix A): solve Ax = b for a dense n×n A that is five-diagonal
// (…0, -1, -1, 4, -1, -1, 0…), b random in [0, 1), starting from x = b.
type Jacobi struct {
	N int
	A []float64 // row-major n×n
	B []float64
}

// NewJacobi generates the problem of size n from seed.
func NewJacobi(n int, seed uint64) *Jacobi {
	p := &Jacobi{N: n, A: FiveDiagonal(n), B: make([]float64, n)}
	r := NewRand(seed)
	for i := range p.B {
		p.B[i] = r.Float64()
	}
	return p
}

// FiveDiagonal returns the dense n×n matrix with 4 on the diagonal and -1
// on the two diagonals either side, as the thesis's get_diag_data builds.
func FiveDiagonal(n int) []float64 {
	a := make([]float64, n*n)
	for i := 0; i < n; i++ {
		for d := -2; d <= 2; d++ {
			j := i + d
			if j < 0 || j >= n {
				continue
			}
			if d == 0 {
				a[i*n+j] = 4
			} else {
				a[i*n+j] = -1
			}
		}
	}
	return a
}

// Rows computes xNew[lo:hi] from the whole of xOld: one Jacobi sweep over
// those rows. The sums run lower part then upper part, as in appendix A.
func (p *Jacobi) Rows(xOld, xNew []float64, lo, hi int) {
	n := p.N
	for i := lo; i < hi; i++ {
		row := p.A[i*n : i*n+n]
		lower, upper := 0.0, 0.0
		// Re-slicing to equal lengths lets the compiler drop bounds checks.
		xl := xOld[:i]
		for j, a := range row[:len(xl)] {
			lower += xl[j] * a
		}
		xu := xOld[i+1 : n]
		for j, a := range row[i+1 : i+1+len(xu)] {
			upper += xu[j] * a
		}
		xNew[i] = (p.B[i] - lower - upper) / row[i]
	}
}

// Converged reports whether the sweep from xOld to xNew moved no element by
// eps or more. Every process evaluates it over the whole vector, so all
// agree without exchanging the local maxima.
func Converged(xOld, xNew []float64, eps float64) bool {
	for i := range xNew {
		if math.Abs(xNew[i]-xOld[i]) >= eps {
			return false
		}
	}
	return true
}

// Sequential runs at most iters sweeps, stopping early when Converged with
// eps (eps 0 never stops early), and returns x and the sweeps run.
func (p *Jacobi) Sequential(iters int, eps float64) (x []float64, done int) {
	xOld := append([]float64(nil), p.B...)
	xNew := make([]float64, p.N)
	for done < iters {
		p.Rows(xOld, xNew, 0, p.N)
		done++
		conv := Converged(xOld, xNew, eps)
		xOld, xNew = xNew, xOld
		if conv {
			break
		}
	}
	return xOld, done
}
