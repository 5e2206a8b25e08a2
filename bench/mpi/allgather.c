/*
 * allgather.c: the all-to-all benchmark of issue 24 on MPI: ROUNDS timed
 * rounds (after 10 untimed) of MPI_Allgather of SIZE bytes per rank, the
 * same figure of merit as bench/alltoall (ms per call: the mean round
 * time divided by the ranks, the paper's section 6.4), the round time's
 * p50 and p99, and a check of every received block.
 *
 *   allgather -size BYTES -rounds N
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

static void fill(unsigned char *p, int from, long r, int size)
{
	for (int i = 0; i < size; i++)
		p[i] = (unsigned char)(from * 31 + r * 7 + i);
}

int main(int argc, char **argv)
{
	int size = 1024, rounds = 1000;
	MPI_Init(&argc, &argv);
	for (int i = 1; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "-size"))
			size = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "-rounds"))
			rounds = atoi(argv[i + 1]);
	}
	int rank, procs;
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &procs);
	unsigned char *mine = malloc(size), *all = malloc((size_t)size * procs), *want = malloc(size);
	double *t = malloc(sizeof(double) * rounds);
	double start = 0;
	for (long r = -10; r < rounds; r++) {
		if (r == 0)
			start = MPI_Wtime();
		double t0 = MPI_Wtime();
		fill(mine, rank, r, size);
		MPI_Allgather(mine, size, MPI_BYTE, all, size, MPI_BYTE, MPI_COMM_WORLD);
		if (r >= 0)
			t[r] = MPI_Wtime() - t0;
		for (int q = 0; q < procs; q++) {
			fill(want, q, r, size);
			if (memcmp(all + (size_t)q * size, want, size)) {
				fprintf(stderr, "allgather: rank %d: round %ld: block of rank %d differs\n", rank, r, q);
				MPI_Abort(MPI_COMM_WORLD, 1);
			}
		}
	}
	double total = MPI_Wtime() - start;
	qsort(t, rounds, sizeof(double), cmp);
	int p50 = (50 * rounds + 99) / 100 - 1, p99 = (99 * rounds + 99) / 100 - 1;
	printf("proto=mpi-allgather procs=%d size=%d rounds=%d ms_per_call=%.4f round_p50_us=%.1f round_p99_us=%.1f rank=%d\n",
	       procs, size, rounds, total * 1000 / rounds / procs, t[p50 < 0 ? 0 : p50] * 1e6, t[p99 < 0 ? 0 : p99] * 1e6, rank);
	MPI_Finalize();
	return 0;
}
