/*
 * asp: all-pairs shortest paths, the Orca papers' sidebar program
 * (Floyd-Warshall; suite.ASP), as MPI. Each rank relaxes its block of rows
 * (block()); iteration k needs row k everywhere: its owner broadcasts it
 * (MPI_Bcast, the collective the Orca version replaces with one write to
 * a shared row object). At the end rank 0 gathers every block
 * (MPI_Gatherv) and checksums the matrix. With one process rank 0 relaxes
 * every row itself.
 *
 * -ahead block (the Orca version's default schedule): an owner finishes its
 * whole block at the iteration before its first row — row j relaxed with
 * that iteration's pivot and then with the block's rows before it, which
 * it has — broadcasting each row as soon as it is final (MPI_Ibcast, a row
 * at a time, posted by every rank at that iteration and waited for in the
 * row's own), so the others have a block's rows before they need them.
 * Every row still takes the pivots in order: the result is the sequential
 * run's. -ahead none (the default): the pivot row by MPI_Bcast in its own
 * iteration, faster here: OpenMPI progresses a nonblocking collective only
 * inside MPI calls, so a row posted ahead moves when the ranks next call
 * one (docs/orca.md, "Programs").
 *
 *   mpirun -n P ./asp -n 300 [-seed 1] [-ahead none|block]
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
	const char *ahead = flag_str(argc, argv, "-ahead", "none");
	if (strcmp(ahead, "block") != 0 && strcmp(ahead, "none") != 0) {
		fprintf(stderr, "-ahead is '%s', want block or none\n", ahead);
		MPI_Abort(MPI_COMM_WORLD, 2);
	}
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
	/* Rank 0's phases with -ahead none (the report's bcast_us, relax_us,
	 * gather_us): in MPI_Bcast (sending its rows, waiting for the
	 * others'), relaxing, and in the final MPI_Gatherv. */
	double in_bcast = 0, in_relax = 0, t0;
	if (procs == 1) {
		for (int k = 0; k < n; k++)
			relax(d, n, 0, n, k, d + (size_t)k * n);
	} else if (strcmp(ahead, "none") == 0) {
		for (int k = 0; k < n; k++) {
			int root = owner(n, procs, k);
			if (rank == root)
				memcpy(pivot, d + (size_t)k * n, n * sizeof *pivot);
			t0 = MPI_Wtime();
			MPI_Bcast(pivot, n, MPI_INT32_T, root, MPI_COMM_WORLD);
			double t1 = MPI_Wtime();
			relax(d, n, lo, hi, k, pivot);
			in_bcast += t1 - t0;
			in_relax += MPI_Wtime() - t1;
		}
	} else {
		/* Two block buffers: the block whose rows are the pivots now
		 * (cur, first row curlo) and the one being broadcast (next),
		 * a request per row of it (reqs). */
		int most = 0;
		for (int r = 0; r < procs; r++) {
			int l, h;
			block(n, procs, r, &l, &h);
			if (h - l > most)
				most = h - l;
		}
		int32_t *bufs[2] = {xmalloc((size_t)most * n * sizeof(int32_t)), xmalloc((size_t)most * n * sizeof(int32_t))};
		MPI_Request *reqs = xmalloc((size_t)most * sizeof *reqs);
		int32_t *cur = NULL, *next = bufs[0];
		int curlo = 0;
		/* post: every rank posts the broadcast of each row of block b,
		 * in order; its owner finishes each row first (pivot k, none
		 * before row 0, then the block's rows before it), so a row goes
		 * as soon as it is what its iteration needs. */
		#define POST(b, k, pv) do { \
			int l_, h_; \
			block(n, procs, (b), &l_, &h_); \
			for (int j = l_; j < h_; j++) { \
				int32_t *row_ = next + (size_t)(j - l_) * n; \
				if (rank == (b)) { \
					if ((pv) != NULL) \
						relax(d, n, j, j + 1, (k), (pv)); \
					for (int m = l_; m < j; m++) \
						relax(d, n, j, j + 1, m, d + (size_t)m * n); \
					memcpy(row_, d + (size_t)j * n, (size_t)n * sizeof(int32_t)); \
				} \
				MPI_Ibcast(row_, n, MPI_INT32_T, (b), MPI_COMM_WORLD, &reqs[j - l_]); \
			} \
			cur = next; \
			curlo = l_; \
			next = cur == bufs[0] ? bufs[1] : bufs[0]; \
		} while (0)
		POST(owner(n, procs, 0), -1, (const int32_t *)NULL);
		const int32_t *pv = NULL;
		for (int k = 0; k < n; k++) {
			int r = owner(n, procs, k);
			/* Row k's broadcast (this rank's own send of it, if its). */
			MPI_Wait(&reqs[k - curlo], MPI_STATUS_IGNORE);
			pv = rank == r ? d + (size_t)k * n : cur + (size_t)(k - curlo) * n;
			int nb = k + 1 < n ? owner(n, procs, k + 1) : r;
			if (nb != r) {
				/* cur becomes the next block's: row k, the last of
				 * this one, stays readable in the other buffer. */
				POST(nb, k, pv); /* nb's rows took pivot k there */
				if (rank == nb)
					continue;
			}
			if (rank == r)
				relax(d, n, lo, k + 1, k, pv); /* the rows after k took it */
			else
				relax(d, n, lo, hi, k, pv);
		}
		#undef POST
		free(reqs);
		free(bufs[0]);
		free(bufs[1]);
	}
	t0 = MPI_Wtime();
	if (procs > 1) {
		if (rank == 0)
			MPI_Gatherv(MPI_IN_PLACE, 0, MPI_INT32_T, d, counts, displs, MPI_INT32_T, 0, MPI_COMM_WORLD);
		else
			MPI_Gatherv(d + (size_t)lo * n, (hi - lo) * n, MPI_INT32_T, NULL, NULL, NULL, MPI_INT32_T, 0, MPI_COMM_WORLD);
	}
	double end = MPI_Wtime(), solve = end - start;
	if (rank == 0)
		printf("asp-mpi procs=%d rank=0 n=%d seed=%llu checksum=%016llx solve_us=%.0f bcast_us=%.0f relax_us=%.0f gather_us=%.0f\n",
		       procs, n, (unsigned long long)seed, (unsigned long long)fnv(d, (size_t)n * n * sizeof *d), solve * 1e6,
		       in_bcast * 1e6, in_relax * 1e6, (end - t0) * 1e6);
	MPI_Finalize();
	return 0;
}
