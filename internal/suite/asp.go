package suite

// ASP is the all-pairs shortest paths problem of the Orca papers (the
// sidebar's third program): the shortest distance between every ordered
// pair of n nodes of a complete directed graph with random weights, by
// Floyd–Warshall. Iteration k needs row k, the pivot row, everywhere: in
// parallel, the owner of row k sends it to the others (Orca: a write to a
// shared row object; BDSM: a segment write and a barrier; MPI: a
// broadcast).
type ASP struct {
	N    int
	Dist []int32 // n×n, row-major: 0 on the diagonal, 1..999 elsewhere
}

// NewASP generates the weights of n nodes from seed, row by row, the
// diagonal skipped (bench/mpi/asp.c draws them identically).
func NewASP(n int, seed uint64) *ASP {
	a := &ASP{N: n, Dist: make([]int32, n*n)}
	r := NewRand(seed)
	for i := 0; i < n; i++ {
		for j := 0; j < n; j++ {
			if i != j {
				a.Dist[i*n+j] = int32(1 + r.Intn(999))
			}
		}
	}
	return a
}

// Relax runs iteration k on rows [lo, hi) of d: d[i][j] = min(d[i][j],
// d[i][k] + pivot[j]), pivot being row k. Iteration k changes neither row
// k nor column k (d[k][k] is 0), so every row may be relaxed with the
// same pivot, in place, in any split, and the result is the sequential
// one exactly.
func (a *ASP) Relax(d []int32, lo, hi, k int, pivot []int32) {
	n := a.N
	for i := lo; i < hi; i++ {
		row := d[i*n : (i+1)*n]
		relaxRow(row, pivot[:len(row)], row[k])
	}
}

// relaxRow sets row[j] = min(row[j], dik+pivot[j]), pivot as long as row.
// The loop is unrolled by hand, eight cells a step: Go's compiler does not
// unroll, and with one cell a step it reloads a bound from the stack in
// every iteration; eight a step take about 0.7 of the time
// (BenchmarkASPRelax). The built-in min compiles to a conditional move: no
// branch to mispredict. bench/mpi/asp.c runs the same loop.
func relaxRow(row, pivot []int32, dik int32) {
	pivot = pivot[:len(row)]
	j := 0
	for ; j+8 <= len(row); j += 8 {
		r, p := row[j:j+8:j+8], pivot[j:j+8:j+8]
		r[0] = min(r[0], dik+p[0])
		r[1] = min(r[1], dik+p[1])
		r[2] = min(r[2], dik+p[2])
		r[3] = min(r[3], dik+p[3])
		r[4] = min(r[4], dik+p[4])
		r[5] = min(r[5], dik+p[5])
		r[6] = min(r[6], dik+p[6])
		r[7] = min(r[7], dik+p[7])
	}
	for ; j < len(row); j++ {
		row[j] = min(row[j], dik+pivot[j])
	}
}

// Sequential returns the distance matrix.
func (a *ASP) Sequential() []int32 {
	n := a.N
	d := append([]int32(nil), a.Dist...)
	for k := 0; k < n; k++ {
		a.Relax(d, 0, n, k, d[k*n:(k+1)*n])
	}
	return d
}

// Owner is the rank whose block (Block) holds row k.
func Owner(n, procs, k int) int {
	for r := 0; r < procs; r++ {
		if lo, hi := Block(n, procs, r); k >= lo && k < hi {
			return r
		}
	}
	return -1
}
