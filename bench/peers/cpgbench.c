/*
 * cpgbench: throughput and self-delivery latency of corosync CPG with
 * CPG_TYPE_AGREED (Totem total order), the peer measurement of issue 4.
 *
 * One process per member, each connected to the corosync of its own network
 * namespace. All members join group "rbcastbench", wait until the group has
 * -m members, then run one of two modes:
 *
 *   tput  every member listed in -s sends SIZE-byte messages as fast as CPG
 *         accepts them (cpg_mcast_joined returning CS_ERR_TRY_AGAIN is CPG's
 *         flow control: dispatch, then retry). Deliveries from every sender
 *         are counted inside the window [start+warm, start+warm+dur] of the
 *         shared wall clock (all namespaces share CLOCK_REALTIME), so every
 *         member measures the same interval. After the window each sender
 *         sends one END message; a member exits once it has seen an END from
 *         every sender.
 *   lat   only member -s sends; it has one message in flight: send, wait for
 *         its own delivery, record the time, repeat -n times (after -w
 *         unrecorded warm-up rounds). The other members just deliver.
 *
 * Every member hashes the (sender, seq) sequence it delivers from the start
 * of the run to the last END (FNV-1a); identical hashes on all members show
 * that they delivered the same messages in the same order.
 *
 * Output: one line "key=value ..." on stdout, parsed by run-corosync.
 */
#define _GNU_SOURCE
#include <corosync/cpg.h>
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#define MAGIC 0x72626370u /* "rbcp" */
#define MAXMEM 16

struct hdr {
	uint32_t magic;
	uint32_t sender; /* member index given with -i */
	uint64_t seq;
	uint32_t end; /* 1 on the END message */
	uint32_t pad;
};

static int members = 3, me = -1, size = 1000, latency_mode;
static int senders[MAXMEM], nsenders;
static double start_at, warm = 1.0, dur = 5.0;
static long rounds = 2000, warm_rounds = 200;

static int nmembers_now;
static uint64_t hash = 1469598103934665603ull;
static uint64_t delivered_total, delivered_window, delivered_own;
static uint64_t ends_seen;
static double win_lo, win_hi;
static uint64_t own_seq_delivered; /* highest seq of our own delivered */
static int ends_from[MAXMEM];
static uint64_t bad;

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static double mono(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void fnv(const void *p, size_t n)
{
	const unsigned char *b = p;
	for (size_t i = 0; i < n; i++) {
		hash ^= b[i];
		hash *= 1099511628211ull;
	}
}

static void deliver(cpg_handle_t h, const struct cpg_name *g, uint32_t nodeid,
		    uint32_t pid, void *msg, size_t len)
{
	(void)h, (void)g, (void)nodeid, (void)pid;
	struct hdr hd;
	if (len < sizeof hd) {
		bad++;
		return;
	}
	memcpy(&hd, msg, sizeof hd);
	if (hd.magic != MAGIC || hd.sender >= MAXMEM) {
		bad++;
		return;
	}
	fnv(&hd.sender, sizeof hd.sender);
	fnv(&hd.seq, sizeof hd.seq);
	if (hd.end) {
		if (!ends_from[hd.sender]) {
			ends_from[hd.sender] = 1;
			ends_seen++;
		}
		return;
	}
	if (len != (size_t)size)
		bad++;
	delivered_total++;
	if (!latency_mode) {
		double t = now();
		if (t >= win_lo && t < win_hi)
			delivered_window++;
	}
	if ((int)hd.sender == me) {
		delivered_own++;
		own_seq_delivered = hd.seq;
	}
}

static void confchg(cpg_handle_t h, const struct cpg_name *g,
		    const struct cpg_address *m, size_t nm,
		    const struct cpg_address *l, size_t nl,
		    const struct cpg_address *j, size_t nj)
{
	(void)h, (void)g, (void)m, (void)l, (void)j, (void)nj;
	nmembers_now = (int)nm;
	if (nl > 0 && ends_seen < (uint64_t)nsenders && delivered_total > 0)
		fprintf(stderr, "cpgbench[%d]: a member left (now %zu)\n", me, nm);
}

static cpg_callbacks_t cbs = { .cpg_deliver_fn = deliver, .cpg_confchg_fn = confchg };

static void die(const char *what, cs_error_t e)
{
	fprintf(stderr, "cpgbench[%d]: %s: cs_error %d\n", me, what, (int)e);
	exit(1);
}

static void dispatch(cpg_handle_t h, int fd, int timeout_ms)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };
	int r = poll(&p, 1, timeout_ms);
	if (r < 0 && errno != EINTR) {
		perror("poll");
		exit(1);
	}
	if (r > 0) {
		cs_error_t e = cpg_dispatch(h, CS_DISPATCH_ALL);
		if (e != CS_OK && e != CS_ERR_TRY_AGAIN)
			die("cpg_dispatch", e);
	}
}

/* mcast sends one message, dispatching while CPG pushes back. */
static void mcast(cpg_handle_t h, int fd, char *buf, size_t len)
{
	struct iovec iov = { .iov_base = buf, .iov_len = len };
	for (;;) {
		cs_error_t e = cpg_mcast_joined(h, CPG_TYPE_AGREED, &iov, 1);
		if (e == CS_OK)
			return;
		if (e != CS_ERR_TRY_AGAIN)
			die("cpg_mcast_joined", e);
		dispatch(h, fd, 1);
	}
}

static int cmpd(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static void usage(void)
{
	fprintf(stderr,
		"usage: cpgbench -i INDEX -m MEMBERS -s SENDERS [-b BYTES] MODE\n"
		"  MODE tput: -T START_UNIX_TIME [-W WARM_S] [-d DUR_S]\n"
		"  MODE lat:  [-n ROUNDS] [-w WARM_ROUNDS]   (-s names the one sender)\n"
		"  -s is a comma list of member indexes, e.g. 0,1,2\n");
	exit(2);
}

int main(int argc, char **argv)
{
	int o;
	char *s;
	while ((o = getopt(argc, argv, "i:m:s:b:T:W:d:n:w:")) != -1) {
		switch (o) {
		case 'i': me = atoi(optarg); break;
		case 'm': members = atoi(optarg); break;
		case 'b': size = atoi(optarg); break;
		case 'T': start_at = atof(optarg); break;
		case 'W': warm = atof(optarg); break;
		case 'd': dur = atof(optarg); break;
		case 'n': rounds = atol(optarg); break;
		case 'w': warm_rounds = atol(optarg); break;
		case 's':
			for (s = strtok(optarg, ","); s && nsenders < MAXMEM; s = strtok(NULL, ","))
				senders[nsenders++] = atoi(s);
			break;
		default: usage();
		}
	}
	if (optind != argc - 1 || me < 0 || me >= MAXMEM || nsenders == 0 ||
	    members < 1 || members > MAXMEM || size < (int)sizeof(struct hdr) || size > 1 << 20)
		usage();
	if (strcmp(argv[optind], "lat") == 0)
		latency_mode = 1;
	else if (strcmp(argv[optind], "tput") != 0 || start_at == 0)
		usage();
	if (latency_mode && nsenders != 1)
		usage();
	int sending = 0;
	for (int k = 0; k < nsenders; k++)
		sending |= senders[k] == me;

	cpg_handle_t h;
	cs_error_t e;
	for (int tries = 0; (e = cpg_initialize(&h, &cbs)) != CS_OK; tries++) {
		if (tries > 100)
			die("cpg_initialize (is corosync running in this namespace?)", e);
		usleep(100000);
	}
	int fd;
	if ((e = cpg_fd_get(h, &fd)) != CS_OK)
		die("cpg_fd_get", e);
	struct cpg_name g;
	strcpy(g.value, "rbcastbench");
	g.length = strlen(g.value);
	while ((e = cpg_join(h, &g)) == CS_ERR_TRY_AGAIN)
		usleep(10000);
	if (e != CS_OK)
		die("cpg_join", e);
	double deadline = mono() + 30;
	while (nmembers_now < members) {
		if (mono() > deadline) {
			fprintf(stderr, "cpgbench[%d]: only %d of %d members after 30 s\n", me, nmembers_now, members);
			return 1;
		}
		dispatch(h, fd, 100);
	}

	char *buf = calloc(1, size);
	struct hdr hd = { .magic = MAGIC, .sender = (uint32_t)me };
	uint64_t seq = 0;
	double *lat = NULL;

	if (!latency_mode) {
		win_lo = start_at + warm;
		win_hi = win_lo + dur;
		while (now() < start_at)
			dispatch(h, fd, 1);
		if (sending) {
			while (now() < win_hi) {
				hd.seq = ++seq;
				memcpy(buf, &hd, sizeof hd);
				mcast(h, fd, buf, size);
				/* deliver what is there without blocking */
				dispatch(h, fd, 0);
			}
			hd.seq = ++seq;
			hd.end = 1;
			memcpy(buf, &hd, sizeof hd);
			mcast(h, fd, buf, sizeof hd);
		}
	} else if (sending) {
		lat = calloc(rounds, sizeof *lat);
		/* The others may still be joining their dispatch loop: settle. */
		double t0 = mono();
		while (mono() - t0 < 0.5)
			dispatch(h, fd, 10);
		for (long r = 0; r < warm_rounds + rounds; r++) {
			hd.seq = ++seq;
			memcpy(buf, &hd, sizeof hd);
			double ts = mono();
			mcast(h, fd, buf, size);
			while (own_seq_delivered != seq)
				dispatch(h, fd, 1000);
			if (r >= warm_rounds)
				lat[r - warm_rounds] = mono() - ts;
		}
		hd.seq = ++seq;
		hd.end = 1;
		memcpy(buf, &hd, sizeof hd);
		mcast(h, fd, buf, sizeof hd);
	}
	deadline = mono() + 60;
	while (ends_seen < (uint64_t)nsenders) {
		if (mono() > deadline) {
			fprintf(stderr, "cpgbench[%d]: saw END from %" PRIu64 " of %d senders after 60 s\n",
				me, ends_seen, nsenders);
			return 1;
		}
		dispatch(h, fd, 100);
	}
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	double cpu = ru.ru_utime.tv_sec + ru.ru_stime.tv_sec + (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
	printf("cpu_s=%.3f ", cpu);
	if (latency_mode && sending) {
		qsort(lat, rounds, sizeof *lat, cmpd);
		printf("member=%d mode=lat rounds=%ld p50_us=%.1f p99_us=%.1f min_us=%.1f max_us=%.1f delivered=%" PRIu64
		       " hash=%016" PRIx64 " bad=%" PRIu64 "\n",
		       me, rounds, lat[rounds / 2] * 1e6, lat[(rounds * 99) / 100] * 1e6, lat[0] * 1e6,
		       lat[rounds - 1] * 1e6, delivered_total, hash, bad);
	} else if (latency_mode) {
		printf("member=%d mode=lat delivered=%" PRIu64 " hash=%016" PRIx64 " bad=%" PRIu64 "\n",
		       me, delivered_total, hash, bad);
	} else {
		printf("member=%d mode=tput window_s=%.3f delivered_window=%" PRIu64 " msgs_per_s=%.0f sent=%" PRIu64
		       " delivered=%" PRIu64 " hash=%016" PRIx64 " bad=%" PRIu64 "\n",
		       me, dur, delivered_window, delivered_window / dur, seq > 0 ? seq - 1 : 0,
		       delivered_total, hash, bad);
	}
	fflush(stdout);
	cpg_leave(h, &g);
	cpg_finalize(h);
	return bad != 0;
}
