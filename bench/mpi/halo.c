/*
 * halo: the MPI side of dsm/examples/halo (issue 21): Jacobi relaxation of
 * Laplace's equation on an n×n grid, u'[i][j] = 0.25·((u[i-1][j] +
 * u[i+1][j]) + (u[i][j-1] + u[i][j+1])) inside, the border fixed, from a
 * random grid (splitmix64 from -seed, row by row). Ranks own blocks of
 * rows; before each sweep a rank swaps edge rows with its two neighbours
 * only (MPI_Sendrecv, the ghost rows), as the BDSM version's segments are
 * shared by neighbour pairs only. At the end the blocks are gathered at
 * rank 0, which prints the checksum of the whole grid: the same, bit for
 * bit, as `halo` (Go) with the same flags.
 *
 *   mpirun -n P ./halo -n 512 -iters 500 [-seed 1]
 */
#include "common.h"

/* sweep computes rows lo..hi-1 of next from u; border rows are copied. */
static void sweep(const double *u, double *next, int n, int lo, int hi)
{
	for (int i = lo; i < hi; i++) {
		double *row = next + (size_t)i * n;
		const double *mid = u + (size_t)i * n;
		if (i == 0 || i == n - 1) {
			memcpy(row, mid, n * sizeof *row);
			continue;
		}
		const double *up = mid - n, *down = mid + n;
		row[0] = mid[0];
		row[n - 1] = mid[n - 1];
		for (int j = 1; j < n - 1; j++)
			row[j] = 0.25 * ((up[j] + down[j]) + (mid[j - 1] + mid[j + 1]));
	}
}

int main(int argc, char **argv)
{
	MPI_Init(&argc, &argv);
	int procs, rank;
	MPI_Comm_size(MPI_COMM_WORLD, &procs);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	int n = flag_int(argc, argv, "-n", 256);
	int iters = flag_int(argc, argv, "-iters", 200);
	uint64_t seed = flag_int(argc, argv, "-seed", 1);
	if (n < procs || n < 3) {
		if (rank == 0)
			fprintf(stderr, "halo needs at least one row per rank and n >= 3: -n %d, -procs %d\n", n, procs);
		MPI_Abort(MPI_COMM_WORLD, 2);
	}

	/* Every rank starts from the whole grid (as the Go version does) and
	 * keeps its rows and the two ghost rows around them. */
	size_t cells = (size_t)n * n;
	double *u = xmalloc(cells * sizeof *u), *next = xmalloc(cells * sizeof *next);
	rng_seed(seed);
	for (size_t i = 0; i < cells; i++)
		u[i] = rng_float();
	int lo, hi;
	block(n, procs, rank, &lo, &hi);
	int below = rank > 0 ? rank - 1 : MPI_PROC_NULL;
	int above = rank + 1 < procs ? rank + 1 : MPI_PROC_NULL;

	MPI_Barrier(MPI_COMM_WORLD);
	double start = MPI_Wtime(), cpu0 = cpu_seconds();
	for (int it = 0; it < iters; it++) {
		/* My first row down to rank-1, its last row up into my ghost row
		 * lo-1; my last row up to rank+1, its first row into ghost row hi.
		 * (MPI_PROC_NULL at the ends: no transfer; the pointers are then
		 * never dereferenced.) */
		MPI_Sendrecv(u + (size_t)lo * n, n, MPI_DOUBLE, below, 0,
			     u + (size_t)(lo > 0 ? lo - 1 : 0) * n, n, MPI_DOUBLE, below, 1,
			     MPI_COMM_WORLD, MPI_STATUS_IGNORE);
		MPI_Sendrecv(u + (size_t)(hi - 1) * n, n, MPI_DOUBLE, above, 1,
			     u + (size_t)(hi < n ? hi : hi - 1) * n, n, MPI_DOUBLE, above, 0,
			     MPI_COMM_WORLD, MPI_STATUS_IGNORE);
		sweep(u, next, n, lo, hi);
		double *t = u;
		u = next;
		next = t;
	}
	double solve = MPI_Wtime() - start;
	/* Every rank's CPU over the solve, user and system; rank 0 reports
	 * the mean, as bench-channels gives BDSM's. */
	double cpu = cpu_seconds() - cpu0, cpusum = 0;
	MPI_Reduce(&cpu, &cpusum, 1, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);

	int *counts = xmalloc(procs * sizeof(int)), *displs = xmalloc(procs * sizeof(int));
	blocks(n, procs, n, counts, displs);
	if (rank == 0)
		MPI_Gatherv(MPI_IN_PLACE, 0, MPI_DOUBLE, u, counts, displs, MPI_DOUBLE, 0, MPI_COMM_WORLD);
	else
		MPI_Gatherv(u + (size_t)lo * n, (hi - lo) * n, MPI_DOUBLE, NULL, NULL, NULL, MPI_DOUBLE, 0, MPI_COMM_WORLD);
	if (rank == 0)
		printf("halo-mpi procs=%d rank=0 n=%d iters=%d seed=%llu checksum=%016llx done=%d solve_us=%.0f cpu_us=%.0f\n",
		       procs, n, iters, (unsigned long long)seed,
		       (unsigned long long)fnv(u, cells * sizeof(double)), iters, solve * 1e6, cpusum / procs * 1e6);
	MPI_Finalize();
	return 0;
}
