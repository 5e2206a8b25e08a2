/*
 * cg: the thesis's MPI conjugate gradient (Auld 2001, §6.3), derived from
 * jacobi, on the same A and b, from x = 0. Per iteration: each rank
 * computes its rows of q = A p, MPI_Allgatherv assembles q, every rank
 * forms p·q over the whole vector and updates its rows of x and r,
 * MPI_Allgatherv assembles r, every rank forms r·r and the next p. Whole-
 * vector exchanges rather than Allreduce of partial dot products keep the
 * result independent of the split, bit-identical to the Go programs (see
 * internal/suite/cg.go).
 *
 *   mpirun -n P ./cg -n 512 -iters 500 [-seed 1]
 */
#include "common.h"

static double dot(const double *a, const double *b, int n)
{
	double s = 0;
	for (int i = 0; i < n; i++)
		s += a[i] * b[i];
	return s;
}

int main(int argc, char **argv)
{
	MPI_Init(&argc, &argv);
	int procs, rank;
	MPI_Comm_size(MPI_COMM_WORLD, &procs);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	int n = flag_int(argc, argv, "-n", 512);
	int iters = flag_int(argc, argv, "-iters", 500);
	uint64_t seed = flag_int(argc, argv, "-seed", 1);

	double *a = five_diagonal(n);
	double *b = xmalloc(n * sizeof *b);
	rng_seed(seed);
	for (int i = 0; i < n; i++)
		b[i] = rng_float();
	int lo, hi, *counts = xmalloc(procs * sizeof(int)), *displs = xmalloc(procs * sizeof(int));
	block(n, procs, rank, &lo, &hi);
	blocks(n, procs, 1, counts, displs);
	double *x = xmalloc(n * sizeof(double)), *r = xmalloc(n * sizeof(double));
	double *p = xmalloc(n * sizeof(double)), *q = xmalloc(n * sizeof(double));
	double *tmp = xmalloc(n * sizeof(double)), *xall = xmalloc(n * sizeof(double));
	memcpy(r, b, n * sizeof(double));
	memcpy(p, b, n * sizeof(double));
	double rr = dot(r, r, n);

	MPI_Barrier(MPI_COMM_WORLD);
	double start = MPI_Wtime();
	int done = 0;
	while (done < iters) {
		for (int i = lo; i < hi; i++) {
			const double *row = a + (size_t)i * n;
			double s = 0;
			for (int j = 0; j < n; j++)
				s += row[j] * p[j];
			tmp[i] = s;
		}
		MPI_Allgatherv(tmp + lo, hi - lo, MPI_DOUBLE, q, counts, displs, MPI_DOUBLE, MPI_COMM_WORLD);
		double pq = dot(p, q, n);
		if (pq == 0)
			break;
		double alpha = rr / pq;
		for (int i = lo; i < hi; i++) {
			x[i] += alpha * p[i];
			tmp[i] = r[i] - alpha * q[i];
		}
		done++;
		MPI_Allgatherv(tmp + lo, hi - lo, MPI_DOUBLE, r, counts, displs, MPI_DOUBLE, MPI_COMM_WORLD);
		double rr2 = dot(r, r, n);
		if (rr2 == 0)
			break;
		double beta = rr2 / rr;
		rr = rr2;
		for (int i = 0; i < n; i++)
			p[i] = r[i] + beta * p[i];
	}
	MPI_Allgatherv(x + lo, hi - lo, MPI_DOUBLE, xall, counts, displs, MPI_DOUBLE, MPI_COMM_WORLD);
	double solve = MPI_Wtime() - start;
	if (rank == 0)
		printf("cg-mpi procs=%d rank=0 n=%d iters=%d seed=%llu checksum=%016llx done=%d solve_us=%.0f\n",
		       procs, n, iters, (unsigned long long)seed,
		       (unsigned long long)fnv(xall, n * sizeof(double)), done, solve * 1e6);
	MPI_Finalize();
	return 0;
}
