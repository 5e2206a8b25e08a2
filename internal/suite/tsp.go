package suite

import (
	"math"
	"slices"
)

// TSP is the problem of the thesis's tsp program (section 6.3): the
// shortest tour from city 0 through all n cities and back, over a random
// symmetric distance matrix, by depth-first branch and bound. A master
// deals jobs — the prefixes of JobDepth cities — to the other processes in
// strict rotation; each keeps only its own shortest tour, so slaves prune
// less than the single process does (as in the thesis).
type TSP struct {
	N    int
	Dist []int32 // n×n, symmetric, 1..99 off the diagonal
}

// JobDepth is the number of cities, city 0 included, a job fixes ("four-
// city-deep paths").
const JobDepth = 4

// NewTSP generates the distances of n cities from seed: the upper triangle
// row by row, mirrored.
func NewTSP(n int, seed uint64) *TSP {
	t := &TSP{N: n, Dist: make([]int32, n*n)}
	r := NewRand(seed)
	for i := 0; i < n; i++ {
		for j := i + 1; j < n; j++ {
			d := int32(1 + r.Intn(99))
			t.Dist[i*n+j], t.Dist[j*n+i] = d, d
		}
	}
	return t
}

// Tour is a closed tour starting at city 0; Len is math.MaxInt32 when no
// tour has been found.
type Tour struct {
	Len  int32
	Path []int32
}

// NoTour is the starting best.
func NoTour() Tour { return Tour{Len: math.MaxInt32} }

// Better reports whether a beats b: shorter, or as short and
// lexicographically smaller, so that every split of the jobs picks the same
// tour as the single process.
func Better(a, b Tour) bool {
	if a.Len != b.Len {
		return a.Len < b.Len
	}
	return slices.Compare(a.Path, b.Path) < 0
}

// Jobs returns the job prefixes in lexicographic order, each JobDepth long
// (n long when n < JobDepth).
func (t *TSP) Jobs() [][]int32 {
	depth := min(JobDepth, t.N)
	var jobs [][]int32
	used := make([]bool, t.N)
	prefix := []int32{0}
	used[0] = true
	var walk func()
	walk = func() {
		if len(prefix) == depth {
			jobs = append(jobs, slices.Clone(prefix))
			return
		}
		for c := 1; c < t.N; c++ {
			if used[c] {
				continue
			}
			used[c] = true
			prefix = append(prefix, int32(c))
			walk()
			prefix = prefix[:len(prefix)-1]
			used[c] = false
		}
	}
	if t.N > 0 {
		walk()
	}
	return jobs
}

// Search explores every tour that starts with job, in lexicographic order,
// replacing *best with each strictly shorter tour; it returns the number of
// partial paths expanded. A path is pruned when it is already no shorter
// than *best.
func (t *TSP) Search(job []int32, best *Tour) (nodes int) {
	n := t.N
	path := make([]int32, 0, n)
	used := make([]bool, n)
	length := int32(0)
	for k, c := range job {
		if k > 0 {
			length += t.Dist[int(path[k-1])*n+int(c)]
		}
		path = append(path, c)
		used[c] = true
	}
	var dfs func(length int32)
	dfs = func(length int32) {
		nodes++
		if length >= best.Len {
			return
		}
		last := int(path[len(path)-1])
		if len(path) == n {
			total := length + t.Dist[last*n]
			if total < best.Len {
				*best = Tour{Len: total, Path: slices.Clone(path)}
			}
			return
		}
		for c := 1; c < n; c++ {
			if used[c] {
				continue
			}
			used[c] = true
			path = append(path, int32(c))
			dfs(length + t.Dist[last*n+c])
			path = path[:len(path)-1]
			used[c] = false
		}
	}
	dfs(length)
	return nodes
}

// SearchShared is Search against a bound shared by every process (the
// Orca version's best-path object): it prunes a partial path as soon as
// it is no shorter than bound() — read at every node, as the Orca paper's
// workers read BestPath — and hands every complete tour no longer than
// bound() to offer, which keeps it if it is Better than the best so far.
// A partial path as long as the bound cannot complete to a tour as short
// (every distance is at least 1), so pruning never loses a tie, and with
// offer's tie-break the shared search ends with the tour Sequential
// finds, whatever the split of the jobs.
func (t *TSP) SearchShared(job []int32, bound func() int32, offer func(Tour)) (nodes int) {
	n := t.N
	path := make([]int32, 0, n)
	used := make([]bool, n)
	length := int32(0)
	for k, c := range job {
		if k > 0 {
			length += t.Dist[int(path[k-1])*n+int(c)]
		}
		path = append(path, c)
		used[c] = true
	}
	var dfs func(length int32)
	dfs = func(length int32) {
		nodes++
		if length >= bound() {
			return
		}
		last := int(path[len(path)-1])
		if len(path) == n {
			if total := length + t.Dist[last*n]; total <= bound() {
				offer(Tour{Len: total, Path: slices.Clone(path)})
			}
			return
		}
		for c := 1; c < n; c++ {
			if used[c] {
				continue
			}
			used[c] = true
			path = append(path, int32(c))
			dfs(length + t.Dist[last*n+c])
			path = path[:len(path)-1]
			used[c] = false
		}
	}
	dfs(length)
	return nodes
}

// Worker returns the shortest tour among the jobs dealt to slave s of
// slaves (jobs s, s+slaves, s+2·slaves, … in rotation), and the nodes it
// expanded.
func (t *TSP) Worker(jobs [][]int32, s, slaves int) (Tour, int) {
	best, nodes := NoTour(), 0
	for j := s; j < len(jobs); j += slaves {
		nodes += t.Search(jobs[j], &best)
	}
	return best, nodes
}

// Sequential returns the shortest tour and the nodes expanded.
func (t *TSP) Sequential() (Tour, int) {
	return t.Worker(t.Jobs(), 0, 1)
}
