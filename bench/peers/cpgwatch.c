/* cpgwatch: joins the CPG group "rbcastviews" and prints one line per
 * configuration change, with the wall clock (CLOCK_REALTIME, the clock
 * `date +%s.%N` reads) at which the callback ran:
 *   confchg t=SECONDS.NANOS members=N joined=J left=L
 * run-corosync-views times corosync's view changes with it (issue 19). */
#include <corosync/cpg.h>
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static void confchg(cpg_handle_t h, const struct cpg_name *g,
		    const struct cpg_address *m, size_t nm,
		    const struct cpg_address *l, size_t nl,
		    const struct cpg_address *j, size_t nj)
{
	struct timespec ts;
	(void)h, (void)g, (void)m, (void)l, (void)j;
	clock_gettime(CLOCK_REALTIME, &ts);
	printf("confchg t=%lld.%09ld members=%zu joined=%zu left=%zu\n",
	       (long long)ts.tv_sec, ts.tv_nsec, nm, nj, nl);
	fflush(stdout);
}

static cpg_callbacks_t cbs = { .cpg_confchg_fn = confchg };

static void die(const char *what, cs_error_t e)
{
	fprintf(stderr, "cpgwatch: %s: cs_error %d\n", what, (int)e);
	exit(1);
}

int main(void)
{
	cpg_handle_t h;
	cs_error_t e;
	/* corosync may be starting: retry for 30 s, every 2 ms. */
	for (int tries = 0; (e = cpg_initialize(&h, &cbs)) != CS_OK; tries++) {
		if (tries > 15000)
			die("cpg_initialize (is corosync running in this namespace?)", e);
		usleep(2000);
	}
	int fd;
	if ((e = cpg_fd_get(h, &fd)) != CS_OK)
		die("cpg_fd_get", e);
	struct cpg_name g;
	strcpy(g.value, "rbcastviews");
	g.length = strlen(g.value);
	while ((e = cpg_join(h, &g)) == CS_ERR_TRY_AGAIN)
		usleep(2000);
	if (e != CS_OK)
		die("cpg_join", e);
	for (;;) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		int r = poll(&p, 1, 1000);
		if (r < 0 && errno != EINTR) {
			perror("poll");
			return 1;
		}
		if (r > 0 && (e = cpg_dispatch(h, CS_DISPATCH_ALL)) != CS_OK && e != CS_ERR_TRY_AGAIN)
			die("cpg_dispatch (corosync gone?)", e);
	}
}
