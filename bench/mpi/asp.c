/*
 * asp: all-pairs shortest paths, the Orca papers' sidebar program
 * (Floyd-Warshall; suite.ASP), as MPI. Each rank relaxes its block of rows
 * (block()); iteration k needs row k everywhere: its owner broadcasts it
 * (MPI_Bcast, the collective the Orca version replaces with one write to
 * a shared row object). At the end rank 0 gathers every block
 * (MPI_Gatherv) and checksums the matrix. With one process rank 0 relaxes
 * every row itself.
 *
 *   mpirun -n P ./asp -n 300 [-seed 1]
 */
#include "common.h"

/* owner: the rank whose block holds row k, as suite.Owner. */
static int owner(int n, int procs, int k)
{
	for (int r = 0; r < procs; r++) {
		int lo, hi;
		block(n, procs, r, &lo, &hi);
		if (k >= lo && k < hi)
			return r;
	}
	return -1;
}

/* relax: iteration k on rows [lo, hi) of d with pivot, as suite.ASP.Relax:
 * the same loop, unrolled by hand eight cells a step as the Go one is. An
 * unconditional store of the minimum, as the Go version's min (gcc -O2
 * compiles it to a conditional move; it does not vectorize this loop: it
 * cannot tell pivot from row). */
#define RELAX_CELL(o) do { int32_t v = dik + pivot[j + (o)]; row[j + (o)] = v < row[j + (o)] ? v : row[j + (o)]; } while (0)
static void relax(int32_t *d, int n, int lo, int hi, int k, const int32_t *pivot)
{
	for (int i = lo; i < hi; i++) {
		int32_t *row = d + (size_t)i * n;
		int32_t dik = row[k];
		int j = 0;
		for (; j + 8 <= n; j += 8) {
			RELAX_CELL(0); RELAX_CELL(1); RELAX_CELL(2); RELAX_CELL(3);
			RELAX_CELL(4); RELAX_CELL(5); RELAX_CELL(6); RELAX_CELL(7);
		}
		for (; j < n; j++)
			RELAX_CELL(0);
	}
}

int main(int argc, char **argv)
{
	MPI_Init(&argc, &argv);
	int procs, rank;
	MPI_Comm_size(MPI_COMM_WORLD, &procs);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	int n = flag_int(argc, argv, "-n", 300);
	uint64_t seed = flag_int(argc, argv, "-seed", 1);
	if (n < 1) {
		fprintf(stderr, "-n %d: want at least 1\n", n);
		MPI_Abort(MPI_COMM_WORLD, 2);
	}
	int32_t *d = xmalloc((size_t)n * n * sizeof *d);
	rng_seed(seed);
	for (int i = 0; i < n; i++)
		for (int j = 0; j < n; j++)
			if (i != j)
				d[(size_t)i * n + j] = 1 + rng_intn(999);
	int lo, hi, *counts = xmalloc(procs * sizeof(int)), *displs = xmalloc(procs * sizeof(int));
	block(n, procs, rank, &lo, &hi);
	blocks(n, procs, n, counts, displs);
	int32_t *pivot = xmalloc(n * sizeof *pivot);

	MPI_Barrier(MPI_COMM_WORLD);
	double start = MPI_Wtime();
	if (procs == 1) {
		for (int k = 0; k < n; k++)
			relax(d, n, 0, n, k, d + (size_t)k * n);
	} else {
		for (int k = 0; k < n; k++) {
			int root = owner(n, procs, k);
			if (rank == root)
				memcpy(pivot, d + (size_t)k * n, n * sizeof *pivot);
			MPI_Bcast(pivot, n, MPI_INT32_T, root, MPI_COMM_WORLD);
			relax(d, n, lo, hi, k, pivot);
		}
		if (rank == 0)
			MPI_Gatherv(MPI_IN_PLACE, 0, MPI_INT32_T, d, counts, displs, MPI_INT32_T, 0, MPI_COMM_WORLD);
		else
			MPI_Gatherv(d + (size_t)lo * n, (hi - lo) * n, MPI_INT32_T, NULL, NULL, NULL, MPI_INT32_T, 0, MPI_COMM_WORLD);
	}
	double solve = MPI_Wtime() - start;
	if (rank == 0)
		printf("asp-mpi procs=%d rank=0 n=%d seed=%llu checksum=%016llx solve_us=%.0f\n",
		       procs, n, (unsigned long long)seed, (unsigned long long)fnv(d, (size_t)n * n * sizeof *d), solve * 1e6);
	MPI_Finalize();
	return 0;
}
