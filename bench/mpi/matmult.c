/*
 * matmult: the thesis's MPI matrix multiplication (Auld 2001, §6.3): C =
 * A B for m×m integer matrices every rank generates itself; each rank
 * computes its block of rows and MPI_Gatherv collects them at rank 0 (a
 * worker too). Same operands and result as suite.MatMult.
 *
 *   mpirun -n P ./matmult -m 512 [-seed 1]
 */
#include "common.h"

int main(int argc, char **argv)
{
	MPI_Init(&argc, &argv);
	int procs, rank;
	MPI_Comm_size(MPI_COMM_WORLD, &procs);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	int m = flag_int(argc, argv, "-m", 512);
	uint64_t seed = flag_int(argc, argv, "-seed", 1);
	size_t mm = (size_t)m * m;

	int32_t *a = xmalloc(mm * 4), *b = xmalloc(mm * 4), *c = xmalloc(mm * 4), *all = xmalloc(mm * 4);
	rng_seed(seed);
	for (size_t i = 0; i < mm; i++)
		a[i] = rng_intn(10);
	for (size_t i = 0; i < mm; i++)
		b[i] = rng_intn(10);
	int lo, hi, *counts = xmalloc(procs * sizeof(int)), *displs = xmalloc(procs * sizeof(int));
	block(m, procs, rank, &lo, &hi);
	blocks(m, procs, m, counts, displs);

	MPI_Barrier(MPI_COMM_WORLD);
	double start = MPI_Wtime();
	for (int i = lo; i < hi; i++) {
		int32_t *ci = c + (size_t)i * m;
		for (int k = 0; k < m; k++) {
			int32_t aik = a[(size_t)i * m + k];
			const int32_t *bk = b + (size_t)k * m;
			for (int j = 0; j < m; j++)
				ci[j] += aik * bk[j];
		}
	}
	MPI_Gatherv(c + (size_t)lo * m, (hi - lo) * m, MPI_INT32_T, all, counts, displs, MPI_INT32_T, 0, MPI_COMM_WORLD);
	double solve = MPI_Wtime() - start;
	if (rank == 0)
		printf("matmult-mpi procs=%d rank=0 m=%d seed=%llu checksum=%016llx solve_us=%.0f\n",
		       procs, m, (unsigned long long)seed, (unsigned long long)fnv(all, mm * 4), solve * 1e6);
	MPI_Finalize();
	return 0;
}
