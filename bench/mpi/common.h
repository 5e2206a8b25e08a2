/*
 * common.h: what the five MPI programs share with their Go counterparts in
 * internal/suite, so that the same flags give bit-identical
 * results in both: splitmix64 for the inputs, FNV-1a 64 over the result's
 * bytes for the checksum, the same block split of rows among ranks, and
 * the same report line.
 */
#ifndef RBCAST_MPI_COMMON_H
#define RBCAST_MPI_COMMON_H

#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

/* The process's CPU time in seconds, user and system, every thread's
 * (getrusage RUSAGE_SELF, as harness.ProcessCPU). */
static double cpu_seconds(void)
{
	struct rusage ru;
	if (getrusage(RUSAGE_SELF, &ru) != 0)
		return 0;
	return ru.ru_utime.tv_sec + ru.ru_stime.tv_sec + (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1e-6;
}

/* splitmix64, as suite.Rand. */
static uint64_t rng_state;

static void rng_seed(uint64_t seed) { rng_state = seed; }

static uint64_t rng_u64(void)
{
	uint64_t z = (rng_state += 0x9e3779b97f4a7c15ULL);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

static double rng_float(void) { return (double)(rng_u64() >> 11) * 0x1p-53; }

static int rng_intn(int n) { return (int)(rng_u64() % (uint64_t)n); }

/* FNV-1a 64 over bytes (little-endian host), as suite.Checksum. */
static uint64_t fnv(const void *p, size_t len)
{
	const unsigned char *b = p;
	uint64_t h = 0xcbf29ce484222325ULL;
	for (size_t i = 0; i < len; i++) {
		h ^= b[i];
		h *= 0x100000001b3ULL;
	}
	return h;
}

/* block: rows [*lo, *hi) of n for rank of procs, as suite.Block. */
static void block(int n, int procs, int rank, int *lo, int *hi)
{
	int q = n / procs, r = n % procs;
	*lo = rank * q + (rank < r ? rank : r);
	*hi = *lo + q + (rank < r ? 1 : 0);
}

/* counts/displacements of every rank's block, times unit, for the v-collectives. */
static void blocks(int n, int procs, int unit, int *counts, int *displs)
{
	for (int r = 0; r < procs; r++) {
		int lo, hi;
		block(n, procs, r, &lo, &hi);
		counts[r] = (hi - lo) * unit;
		displs[r] = lo * unit;
	}
}

/* Flags: "-name value" pairs, the same names and defaults as the Go commands. */
static const char *flag_str(int argc, char **argv, const char *name, const char *def)
{
	for (int i = 1; i + 1 < argc; i++)
		if (strcmp(argv[i], name) == 0)
			return argv[i + 1];
	return def;
}

static long flag_int(int argc, char **argv, const char *name, long def)
{
	const char *s = flag_str(argc, argv, name, NULL);
	if (!s)
		return def;
	char *end;
	long v = strtol(s, &end, 10);
	if (*end) {
		fprintf(stderr, "flag %s: '%s' is not an integer\n", name, s);
		MPI_Abort(MPI_COMM_WORLD, 2);
	}
	return v;
}

static double flag_float(int argc, char **argv, const char *name, double def)
{
	const char *s = flag_str(argc, argv, name, NULL);
	if (!s)
		return def;
	char *end;
	double v = strtod(s, &end);
	if (*end) {
		fprintf(stderr, "flag %s: '%s' is not a number\n", name, s);
		MPI_Abort(MPI_COMM_WORLD, 2);
	}
	return v;
}

static void *xmalloc(size_t n)
{
	void *p = calloc(1, n ? n : 1);
	if (!p) {
		fprintf(stderr, "out of memory (%zu bytes)\n", n);
		MPI_Abort(MPI_COMM_WORLD, 1);
	}
	return p;
}

/* five_diagonal: the dense n×n matrix of suite.FiveDiagonal. */
static double *five_diagonal(int n)
{
	double *a = xmalloc((size_t)n * n * sizeof *a);
	for (int i = 0; i < n; i++)
		for (int d = -2; d <= 2; d++) {
			int j = i + d;
			if (j >= 0 && j < n)
				a[(size_t)i * n + j] = d == 0 ? 4 : -1;
		}
	return a;
}

#endif
