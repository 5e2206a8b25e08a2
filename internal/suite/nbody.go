package suite

import "math"

// NBody is the problem of the thesis's nbody program (section 6.3): n
// particles in 3-space under gravity (G = 1), the O(n²) algorithm, each
// process computing the forces on its own particles from all n. Particles
// start at rest, uniformly in [-1, 1)³ with masses in [0.5, 1.5)/n, except
// particle 0: mass 1 at the origin (the "single large particle placed
// centrally").
type NBody struct {
	N    int
	Mass []float64
	Pos  []float64 // 3 per particle: x, y, z
	Vel  []float64 // 3 per particle
	DT   float64
	Soft float64 // softening ε², keeps close encounters finite
}

// NewNBody generates n particles from seed.
func NewNBody(n int, seed uint64) *NBody {
	b := &NBody{
		N: n, Mass: make([]float64, n), Pos: make([]float64, 3*n), Vel: make([]float64, 3*n),
		DT: 1e-3, Soft: 1e-4,
	}
	r := NewRand(seed)
	for i := 0; i < n; i++ {
		for k := 0; k < 3; k++ {
			b.Pos[3*i+k] = 2*r.Float64() - 1
		}
		b.Mass[i] = (0.5 + r.Float64()) / float64(n)
	}
	if n > 0 {
		b.Pos[0], b.Pos[1], b.Pos[2] = 0, 0, 0
		b.Mass[0] = 1
	}
	return b
}

// Advance moves particles [lo, hi) one time step: their accelerations from
// all particles at positions pos (the step's old positions, all n), then
// velocity, then position, written to next[3lo:3hi].
func (b *NBody) Advance(pos, next []float64, lo, hi int) {
	n, mass, soft := b.N, b.Mass[:b.N], b.Soft
	pos = pos[:3*n]
	for i := lo; i < hi; i++ {
		xi, yi, zi := pos[3*i], pos[3*i+1], pos[3*i+2]
		ax, ay, az := 0.0, 0.0, 0.0
		for j, m := range mass {
			if j == i {
				continue
			}
			p := pos[3*j : 3*j+3 : 3*j+3]
			dx := p[0] - xi
			dy := p[1] - yi
			dz := p[2] - zi
			r2 := dx*dx + dy*dy + dz*dz + soft
			s := m / (r2 * math.Sqrt(r2))
			ax += s * dx
			ay += s * dy
			az += s * dz
		}
		v := b.Vel[3*i : 3*i+3]
		v[0] += ax * b.DT
		v[1] += ay * b.DT
		v[2] += az * b.DT
		next[3*i] = xi + v[0]*b.DT
		next[3*i+1] = yi + v[1]*b.DT
		next[3*i+2] = zi + v[2]*b.DT
	}
}

// Sequential runs steps time steps on a copy of the positions and returns
// the final positions. It changes b.Vel.
func (b *NBody) Sequential(steps int) []float64 {
	pos := append([]float64(nil), b.Pos...)
	next := make([]float64, len(pos))
	for range steps {
		b.Advance(pos, next, 0, b.N)
		pos, next = next, pos
	}
	return pos
}
