/*
 * tsp: the thesis's MPI travelling salesman solver (Auld 2001, §6.3),
 * master and slaves. Rank 0 sends every path of JOB_DEPTH cities from city
 * 0, in lexicographic order, to the slaves in strict rotation, then a stop
 * message to each; a slave searches each job as it arrives by branch and
 * bound, keeping only its own best tour, and finally sends that tour to
 * the master, which keeps the shortest (ties: lexicographically smallest
 * path, as suite.Better). With one process rank 0 does every job itself.
 *
 *   mpirun -n P ./tsp -cities 12 [-seed 1]
 */
#include <limits.h>

#include "common.h"

#define JOB_DEPTH 4
#define TAG_JOB 1
#define TAG_STOP 2
#define TAG_BEST 3

static int n;
static int32_t *dist;
static int32_t best_len, *best_path, *path;
static int depth;
static char *used;

static int better(int32_t len, const int32_t *p, int32_t blen, const int32_t *bp)
{
	if (len != blen)
		return len < blen;
	for (int i = 0; i < n; i++)
		if (p[i] != bp[i])
			return p[i] < bp[i];
	return 0;
}

static void dfs(int32_t length)
{
	if (length >= best_len)
		return;
	int last = path[depth - 1];
	if (depth == n) {
		int32_t total = length + dist[(size_t)last * n];
		if (total < best_len) {
			best_len = total;
			memcpy(best_path, path, n * sizeof(int32_t));
		}
		return;
	}
	for (int c = 1; c < n; c++) {
		if (used[c])
			continue;
		used[c] = 1;
		path[depth++] = c;
		dfs(length + dist[(size_t)last * n + c]);
		depth--;
		used[c] = 0;
	}
}

static void search(const int32_t *job, int jd)
{
	memset(used, 0, n);
	int32_t length = 0;
	for (int k = 0; k < jd; k++) {
		if (k > 0)
			length += dist[(size_t)path[k - 1] * n + job[k]];
		path[k] = job[k];
		used[job[k]] = 1;
	}
	depth = jd;
	dfs(length);
}

/* next_job advances job (jd cities from 0) to the next in lexicographic order; 0 when done. */
static int next_job(int32_t *job, int jd)
{
	for (int k = jd - 1; k >= 1; k--) {
		for (int c = job[k] + 1; c < n; c++) {
			int taken = 0;
			for (int i = 0; i < k; i++)
				if (job[i] == c)
					taken = 1;
			if (taken)
				continue;
			job[k] = c;
			/* fill the rest with the smallest free cities */
			for (int f = k + 1; f < jd; f++) {
				for (int d = 1; d < n; d++) {
					int t = 0;
					for (int i = 0; i < f; i++)
						if (job[i] == d)
							t = 1;
					if (!t) {
						job[f] = d;
						break;
					}
				}
			}
			return 1;
		}
	}
	return 0;
}

int main(int argc, char **argv)
{
	MPI_Init(&argc, &argv);
	int procs, rank;
	MPI_Comm_size(MPI_COMM_WORLD, &procs);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	n = flag_int(argc, argv, "-cities", 12);
	uint64_t seed = flag_int(argc, argv, "-seed", 1);
	if (n < 1) {
		fprintf(stderr, "-cities %d: want at least 1\n", n);
		MPI_Abort(MPI_COMM_WORLD, 2);
	}
	dist = xmalloc((size_t)n * n * sizeof(int32_t));
	rng_seed(seed);
	for (int i = 0; i < n; i++)
		for (int j = i + 1; j < n; j++) {
			int32_t d = 1 + rng_intn(99);
			dist[(size_t)i * n + j] = dist[(size_t)j * n + i] = d;
		}
	best_path = xmalloc(n * sizeof(int32_t));
	path = xmalloc(n * sizeof(int32_t));
	used = xmalloc(n);
	best_len = INT32_MAX;
	int jd = n < JOB_DEPTH ? n : JOB_DEPTH;
	int32_t job[JOB_DEPTH];
	for (int k = 0; k < jd; k++)
		job[k] = k; /* the first job: 0, 1, 2, 3 */

	MPI_Barrier(MPI_COMM_WORLD);
	double start = MPI_Wtime();
	if (procs == 1) {
		do
			search(job, jd);
		while (next_job(job, jd));
	} else if (rank == 0) {
		int slave = 0;
		do {
			MPI_Send(job, jd, MPI_INT32_T, 1 + slave, TAG_JOB, MPI_COMM_WORLD);
			slave = (slave + 1) % (procs - 1);
		} while (next_job(job, jd));
		for (int s = 1; s < procs; s++)
			MPI_Send(job, 0, MPI_INT32_T, s, TAG_STOP, MPI_COMM_WORLD);
		int32_t *msg = xmalloc((n + 1) * sizeof(int32_t));
		for (int s = 1; s < procs; s++) {
			MPI_Recv(msg, n + 1, MPI_INT32_T, s, TAG_BEST, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
			if (msg[0] != INT32_MAX && (best_len == INT32_MAX || better(msg[0], msg + 1, best_len, best_path))) {
				best_len = msg[0];
				memcpy(best_path, msg + 1, n * sizeof(int32_t));
			}
		}
	} else {
		for (;;) {
			MPI_Status st;
			MPI_Recv(job, jd, MPI_INT32_T, 0, MPI_ANY_TAG, MPI_COMM_WORLD, &st);
			if (st.MPI_TAG == TAG_STOP)
				break;
			search(job, jd);
		}
		int32_t *msg = xmalloc((n + 1) * sizeof(int32_t));
		msg[0] = best_len;
		memcpy(msg + 1, best_path, n * sizeof(int32_t));
		MPI_Send(msg, n + 1, MPI_INT32_T, 0, TAG_BEST, MPI_COMM_WORLD);
	}
	double solve = MPI_Wtime() - start;
	if (rank == 0) {
		double *p = xmalloc(n * sizeof(double));
		for (int i = 0; i < n; i++)
			p[i] = best_path[i];
		printf("tsp-mpi procs=%d rank=0 cities=%d seed=%llu checksum=%016llx length=%d solve_us=%.0f\n",
		       procs, n, (unsigned long long)seed, (unsigned long long)fnv(p, n * sizeof(double)), best_len, solve * 1e6);
	}
	MPI_Finalize();
	return 0;
}
