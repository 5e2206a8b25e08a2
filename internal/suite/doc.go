// Package suite holds the five test programs of Auld's thesis, chapter 6
// (jacobi, cg, nbody, matmult, tsp), and the all-pairs shortest paths of
// the Orca papers (asp), as the computation alone: problem generation
// from a seed, the kernels on a range of rows, and a sequential run built
// from those kernels.
//
// The parallel BDSM commands under dsm/examples, the Orca commands under
// orca/examples and the MPI programs in bench/mpi compute with exactly
// the same operations in exactly the same order, so their results are bit
// for bit those of the sequential run: a -verify compares checksums, not
// tolerances. Two rules make that hold:
//
//   - every reduction (a dot product, a force sum) runs over the whole
//     vector in index order in every process, never as a sum of per-process
//     partial sums, so its result does not depend on how rows are split;
//   - the random inputs come from splitmix64 (Rand), which the C programs
//     implement identically (bench/mpi/common.h).
//
// C compiles with -ffp-contract=off and Go on amd64 does not fuse
// multiply-adds, so float64 results agree across the two languages too.
package suite
