/*
 * jacobi: the thesis's MPI Jacobi solver (Auld 2001, appendix A.2, after
 * Pacheco), solving Ax = b for the dense five-diagonal A with b random,
 * from x = b. Each rank sweeps its block of rows from the whole previous x,
 * then MPI_Allgatherv assembles the new x everywhere; every rank tests
 * convergence over the whole vector. Unlike A.2, blocks may be uneven
 * (Allgatherv) and the division by the diagonal is done.
 *
 *   mpirun -n P ./jacobi -n 512 -iters 500 [-eps 0] [-seed 1]
 */
#include <math.h>

#include "common.h"

int main(int argc, char **argv)
{
	MPI_Init(&argc, &argv);
	int procs, rank;
	MPI_Comm_size(MPI_COMM_WORLD, &procs);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	int n = flag_int(argc, argv, "-n", 512);
	int iters = flag_int(argc, argv, "-iters", 500);
	double eps = flag_float(argc, argv, "-eps", 0);
	uint64_t seed = flag_int(argc, argv, "-seed", 1);

	double *a = five_diagonal(n);
	double *b = xmalloc(n * sizeof *b);
	rng_seed(seed);
	for (int i = 0; i < n; i++)
		b[i] = rng_float();
	int lo, hi, *counts = xmalloc(procs * sizeof(int)), *displs = xmalloc(procs * sizeof(int));
	block(n, procs, rank, &lo, &hi);
	blocks(n, procs, 1, counts, displs);
	double *x_old = xmalloc(n * sizeof(double)), *x_new = xmalloc(n * sizeof(double));
	double *mine = xmalloc(n * sizeof(double));

	MPI_Allgatherv(b + lo, hi - lo, MPI_DOUBLE, x_new, counts, displs, MPI_DOUBLE, MPI_COMM_WORLD);
	MPI_Barrier(MPI_COMM_WORLD);
	double start = MPI_Wtime();
	int done = 0;
	while (done < iters) {
		double *t = x_old;
		x_old = x_new;
		x_new = t;
		for (int i = lo; i < hi; i++) {
			const double *row = a + (size_t)i * n;
			double lower = 0, upper = 0;
			for (int j = 0; j < i; j++)
				lower += x_old[j] * row[j];
			for (int j = i + 1; j < n; j++)
				upper += x_old[j] * row[j];
			mine[i] = (b[i] - lower - upper) / row[i];
		}
		MPI_Allgatherv(mine + lo, hi - lo, MPI_DOUBLE, x_new, counts, displs, MPI_DOUBLE, MPI_COMM_WORLD);
		done++;
		int conv = 1;
		for (int i = 0; i < n && conv; i++)
			if (fabs(x_new[i] - x_old[i]) >= eps)
				conv = 0;
		if (conv)
			break;
	}
	double solve = MPI_Wtime() - start;
	if (rank == 0)
		printf("jacobi-mpi procs=%d rank=0 n=%d iters=%d eps=%g seed=%llu checksum=%016llx done=%d solve_us=%.0f\n",
		       procs, n, iters, eps, (unsigned long long)seed,
		       (unsigned long long)fnv(x_new, n * sizeof(double)), done, solve * 1e6);
	MPI_Finalize();
	return 0;
}
