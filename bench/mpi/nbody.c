/*
 * nbody: the thesis's MPI N-body simulation (Auld 2001, §6.3), O(n²),
 * G = 1, each rank moving its block of particles; positions are exchanged
 * with one MPI_Allgatherv per time step (the thesis's MPI version rotated
 * blocks around a ring; the data moved is the same). Same particles and
 * arithmetic as suite.NBody, so the checksum of the final positions equals
 * the Go programs'.
 *
 *   mpirun -n P ./nbody -n 1024 -steps 30 [-seed 1]
 */
#include <math.h>

#include "common.h"

int main(int argc, char **argv)
{
	MPI_Init(&argc, &argv);
	int procs, rank;
	MPI_Comm_size(MPI_COMM_WORLD, &procs);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	int n = flag_int(argc, argv, "-n", 1024);
	int steps = flag_int(argc, argv, "-steps", 30);
	uint64_t seed = flag_int(argc, argv, "-seed", 1);
	const double dt = 1e-3, soft = 1e-4;

	double *mass = xmalloc(n * sizeof(double));
	double *pos = xmalloc(3 * n * sizeof(double)), *next = xmalloc(3 * n * sizeof(double));
	double *vel = xmalloc(3 * n * sizeof(double));
	rng_seed(seed);
	for (int i = 0; i < n; i++) {
		for (int k = 0; k < 3; k++)
			pos[3 * i + k] = 2 * rng_float() - 1;
		mass[i] = (0.5 + rng_float()) / n;
	}
	if (n > 0) {
		pos[0] = pos[1] = pos[2] = 0;
		mass[0] = 1;
	}
	int lo, hi, *counts = xmalloc(procs * sizeof(int)), *displs = xmalloc(procs * sizeof(int));
	block(n, procs, rank, &lo, &hi);
	blocks(n, procs, 3, counts, displs);

	MPI_Barrier(MPI_COMM_WORLD);
	double start = MPI_Wtime();
	for (int step = 0; step < steps; step++) {
		for (int i = lo; i < hi; i++) {
			double xi = pos[3 * i], yi = pos[3 * i + 1], zi = pos[3 * i + 2];
			double ax = 0, ay = 0, az = 0;
			for (int j = 0; j < n; j++) {
				if (j == i)
					continue;
				double dx = pos[3 * j] - xi, dy = pos[3 * j + 1] - yi, dz = pos[3 * j + 2] - zi;
				double r2 = dx * dx + dy * dy + dz * dz + soft;
				double s = mass[j] / (r2 * sqrt(r2));
				ax += s * dx;
				ay += s * dy;
				az += s * dz;
			}
			double *v = vel + 3 * i;
			v[0] += ax * dt;
			v[1] += ay * dt;
			v[2] += az * dt;
			next[3 * i] = xi + v[0] * dt;
			next[3 * i + 1] = yi + v[1] * dt;
			next[3 * i + 2] = zi + v[2] * dt;
		}
		MPI_Allgatherv(next + 3 * lo, 3 * (hi - lo), MPI_DOUBLE, pos, counts, displs, MPI_DOUBLE, MPI_COMM_WORLD);
	}
	double solve = MPI_Wtime() - start;
	if (rank == 0)
		printf("nbody-mpi procs=%d rank=0 n=%d steps=%d seed=%llu checksum=%016llx solve_us=%.0f\n",
		       procs, n, steps, (unsigned long long)seed,
		       (unsigned long long)fnv(pos, 3 * n * sizeof(double)), solve * 1e6);
	MPI_Finalize();
	return 0;
}
