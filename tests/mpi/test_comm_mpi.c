/* test_comm_mpi.c — the mpi backend on sub-groups of MPI_COMM_WORLD, 4 ranks:
 *
 *   mpirun -np 4 --oversubscribe --allow-run-as-root build/tests/mpi_test_comm_mpi
 *
 * Rank 0 prints TAP; a check passes when it passed on every rank. The exit
 * status is non-zero on a failure. Two modes show the paths that end the
 * job (tests/tools.sh checks their output; docs/comm.md shows it):
 * `--timeout` (rank 3 never arrives: the others fail after 0.3 s naming
 * their op and group; rank 0 reports rank 3 as not reporting) and `--fail`
 * (rank 2 calls fail(); the others' collective fails naming it; with the
 * usual timeout, so that none times out meanwhile). Each rank
 * then ends through end(); rank 0 prints what every rank reported.
 * `--exchange-size`, `--exchange-absent` and `--exchange-fail` do the same
 * for point-to-point (see ending()). */
#include <float.h>
#include <limits.h>
#include <math.h>
#include <mpi.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "runtime/comm.h"
#include "tests/comm_data.h"
#include "tests/unit/unit.h"

enum { NR = 4, TIMEOUT_MS = 60000 };

static int rank;
static struct comm *C;

/* A check passes when it passed on every rank; rank 0 reports it. */
#define CHECK(cond, ...)                                                                  \
	do {                                                                              \
		int ok_ = (cond);                                                         \
		MPI_Allreduce(MPI_IN_PLACE, &ok_, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD); \
		if (rank == 0)                                                            \
			UNIT_CHECK(ok_, __VA_ARGS__);                                     \
	} while (0)

static struct comm_tag tag(uint32_t op, const char *what)
{
	return (struct comm_tag){ .op = op, .what = what };
}

/* The 2 x 2 mesh (rank = row * 2 + col): ROW (id 0), COL (id 1), WORLD, and
 * TAIL = ranks 1, 2, 3 (id 2), a group rank 0 is not in. NULL if not a member. */
enum axis { ROW, COL, WORLD, TAIL };

static struct comm_group *group(enum axis a, struct comm_group *g, int *ranks)
{
	switch (a) {
	case ROW:
		*g = (struct comm_group){ .id = 0, .n = 2, .me = rank % 2, .ranks = ranks };
		ranks[0] = rank / 2 * 2;
		ranks[1] = ranks[0] + 1;
		return g;
	case COL:
		*g = (struct comm_group){ .id = 1, .n = 2, .me = rank / 2, .ranks = ranks };
		ranks[0] = rank % 2;
		ranks[1] = ranks[0] + 2;
		return g;
	case WORLD:
		*g = comm_world_group(C, ranks);
		return g;
	case TAIL:
		*g = (struct comm_group){ .id = 2, .n = 3, .me = rank - 1, .ranks = ranks };
		for (int k = 0; k < 3; k++)
			ranks[k] = k + 1;
		return rank ? g : NULL;
	}
	return NULL;
}

/* ---- collectives, checked: each returns the wrong bytes (or -1 on an error) --- */

static long t_allgatherv(const struct comm_group *g, uint32_t op, uint64_t seed, size_t scale,
			 bool in_place)
{
	size_t counts[NR], displs[NR], total = 0;
	for (int i = 0; i < g->n; i++) {
		counts[i] = i == 1 ? 0 : scale * (size_t)(3 + 2 * i) + 7 * (size_t)i;
		displs[i] = total;
		total += counts[i] + 3;
	}
	uint8_t *recv = calloc(1, total);
	uint8_t *send = in_place ? recv + displs[g->me] : malloc(counts[g->me] + 1);
	fill(send, counts[g->me], seed, (uint64_t)rank);
	long bad = -1;
	if (C->ops->allgatherv(C, g, tag(op, "all_gather x"), send, recv, counts, displs) == COMM_OK) {
		bad = 0;
		for (int i = 0; i < g->n; i++) {
			bad += wrong_bytes(recv + displs[i], counts[i], seed, (uint64_t)g->ranks[i]);
			for (int k = 0; k < 3; k++)
				bad += recv[displs[i] + counts[i] + (size_t)k] != 0;
		}
	}
	if (!in_place)
		free(send);
	free(recv);
	return bad;
}

static long t_alltoallv(const struct comm_group *g, uint32_t op, uint64_t seed, size_t scale)
{
	size_t sc[NR], sd[NR], rc[NR], rd[NR], stot, rtot;
	a2a_layout(g->me, g->n, scale, sc, sd, rc, rd, &stot, &rtot);
	uint8_t *send = malloc(stot), *recv = calloc(1, rtot);
	for (int k = 0; k < g->n; k++)
		fill(send + sd[k], sc[k], seed, (uint64_t)(rank * 64 + g->ranks[k]));
	long bad = -1;
	if (C->ops->alltoallv(C, g, tag(op, "all_to_all x"), send, sc, sd, recv, rc, rd) == COMM_OK) {
		bad = 0;
		for (int k = 0; k < g->n; k++)
			bad += wrong_bytes(recv + rd[k], rc[k], seed, (uint64_t)(g->ranks[k] * 64 + rank));
	}
	free(send);
	free(recv);
	return bad;
}

/* Tolerance: (P - 1) * FLT_EPSILON * sum |x|, one rounding per addition. */
static long t_allreduce(const struct comm_group *g, uint32_t op, uint64_t seed, size_t n)
{
	float *buf = malloc((n ? n : 1) * sizeof *buf);
	for (size_t i = 0; i < n; i++)
		buf[i] = float_at(seed, rank, i);
	long bad = -1;
	if (C->ops->allreduce_f32(C, g, tag(op, "all_reduce x"), buf, n) == COMM_OK) {
		bad = 0;
		for (size_t i = 0; i < n; i++) {
			double ref = 0, mag = 0;
			for (int m = 0; m < g->n; m++) {
				double x = float_at(seed, g->ranks[m], i);
				ref += x;
				mag += fabs(x);
			}
			bad += fabs(buf[i] - ref) > (g->n - 1) * (double)FLT_EPSILON * mag;
		}
	}
	free(buf);
	return bad;
}

/* Piece i: even (scale floats each) or uneven with piece 1 empty; each
 * member's sum of its piece against a float64 sum (t_allreduce's bound).
 * `control`: the reference leaves member 0's terms out; returns the
 * elements that still passed (0 when the check can fail). -1: an error. */
static long t_reduce_scatter(const struct comm_group *g, uint32_t op, uint64_t seed, size_t scale,
			     bool even, bool control)
{
	size_t counts[NR] = { 0 }, total, lo;
	size_t mine = rs_layout(g, scale, even, counts, &lo, &total);
	float *send = calloc(total ? total : 1, sizeof *send);
	float *recv = malloc((mine ? mine : 1) * sizeof *recv);
	for (size_t i = 0; i < total; i++)
		send[i] = float_at(seed, rank, i);
	long bad = -1;
	if (C->ops->reduce_scatter_f32(C, g, tag(op, "reduce_scatter x"), send, recv, counts) ==
	    COMM_OK)
		bad = rs_wrong(seed, g, lo, mine, recv, control);
	free(send);
	free(recv);
	return bad;
}

/* Ring attention's pattern: K and V passed right every round, with work
 * between start and wait; uneven chunk sizes. */
static long t_shift(const struct comm_group *g, uint32_t op0, uint64_t seed, size_t scale,
		    int rounds)
{
	int n = g->n;
	size_t cap = chunk_size(NR, scale);
	uint8_t *buf[2][2];
	for (int kv = 0; kv < 2; kv++) {
		buf[kv][0] = malloc(cap);
		buf[kv][1] = malloc(cap);
		fill(buf[kv][0], chunk_size(rank, scale), seed + (uint64_t)kv, (uint64_t)rank);
	}
	long bad = 0;
	int cur = 0;
	for (int round = 0; round < rounds && bad >= 0; round++) {
		int have = g->ranks[((g->me - round) % n + n) % n];
		int next = g->ranks[((g->me - round - 1) % n + n) % n];
		struct comm_request *req[2];
		for (int kv = 0; kv < 2 && bad >= 0; kv++) {
			memset(buf[kv][!cur], 0, cap);
			uint32_t op = op0 + 2 * (uint32_t)round + (uint32_t)kv;
			if (comm_shift_start(C, g, tag(op, kv ? "shift v" : "shift k"), buf[kv][cur],
						chunk_size(have, scale), buf[kv][!cur],
						chunk_size(next, scale), &req[kv]))
				bad = -1;
		}
		if (bad < 0)
			break;
		usleep((useconds_t)(mix((uint64_t)(rank * 100 + round)) % 2000));
		for (int kv = 0; kv < 2; kv++)
			if (C->ops->exchange_wait(C, req[kv]))
				bad = -1;
		cur = !cur;
		for (int kv = 0; kv < 2 && bad >= 0; kv++)
			bad += wrong_bytes(buf[kv][cur], chunk_size(next, scale), seed + (uint64_t)kv,
					   (uint64_t)next);
	}
	for (int kv = 0; kv < 2; kv++) {
		free(buf[kv][0]);
		free(buf[kv][1]);
	}
	return bad;
}

/* One exchange of pattern pat on g; receive buffers zeroed with 3 guard
 * bytes after each. wrong_src: the negative control, each receive checked
 * against another member's stream; returns the non-empty receives that
 * nonetheless matched (0 when the check can fail). */
static long t_exchange(const struct comm_group *g, uint32_t op, uint64_t seed, int pat,
		       size_t scale, bool wrong_src)
{
	int n = g->n, ns = 0, nr = 0;
	struct comm_p2p sends[NR] = { { 0 } }, recvs[NR] = { { 0 } };
	for (int k = 0; k < n; k++) {
		long b = xp_bytes(pat, n, g->me, k, scale);
		if (b < 0)
			continue;
		sends[ns] = (struct comm_p2p){ k, malloc((size_t)b + 1), (size_t)b };
		fill(sends[ns++].buf, (size_t)b, seed, xp_stream(rank, g->ranks[k]));
	}
	for (int i = 0; i < n; i++) {
		long b = xp_bytes(pat, n, i, g->me, scale);
		if (b >= 0)
			recvs[nr++] = (struct comm_p2p){ i, calloc(1, (size_t)b + 3), (size_t)b };
	}
	long bad = -1;
	struct comm_request *req;
	if (C->ops->exchange_start(C, g, tag(op, "exchange x"), sends, ns, recvs, nr, &req) == COMM_OK) {
		usleep((useconds_t)(mix((uint64_t)(rank * 100) + op) % 2000)); /* work meanwhile */
		if (C->ops->exchange_wait(C, req) == COMM_OK) {
			bad = 0;
			for (int k = 0; k < nr; k++) {
				int from = g->ranks[wrong_src ? (recvs[k].peer + 1) % n : recvs[k].peer];
				long w = wrong_bytes(recvs[k].buf, recvs[k].bytes, seed,
						     xp_stream(from, rank));
				for (int x = 0; x < 3; x++)
					w += ((uint8_t *)recvs[k].buf)[recvs[k].bytes + (size_t)x] != 0;
				bad += wrong_src ? recvs[k].bytes && !w : w;
			}
		}
	}
	for (int k = 0; k < ns; k++)
		free(sends[k].buf);
	for (int k = 0; k < nr; k++)
		free(recvs[k].buf);
	return bad;
}

/* A pipeline along g (0 -> 1 -> ... -> n-1): each member passes on the
 * block once it has it; a stage involves only its two members. */
static long t_chain(const struct comm_group *g, uint32_t op, uint64_t seed, size_t bytes)
{
	uint8_t *block = calloc(1, bytes + 3);
	if (g->me == 0)
		fill(block, bytes, seed, (uint64_t)g->ranks[0]);
	long bad = 0;
	struct comm_request *req;
	if (g->me > 0) {
		struct comm_p2p in = { g->me - 1, block, bytes };
		if (C->ops->exchange_start(C, g, tag(op, "pipeline"), NULL, 0, &in, 1, &req) ||
		    C->ops->exchange_wait(C, req))
			bad = -1;
		else
			bad = wrong_bytes(block, bytes, seed, (uint64_t)g->ranks[0]) +
			      (block[bytes] != 0) + (block[bytes + 1] != 0) + (block[bytes + 2] != 0);
	}
	if (bad == 0 && g->me < g->n - 1) {
		struct comm_p2p out = { g->me + 1, block, bytes };
		if (C->ops->exchange_start(C, g, tag(op, "pipeline"), &out, 1, NULL, 0, &req) ||
		    C->ops->exchange_wait(C, req))
			bad = -1;
	}
	free(block);
	return bad;
}

/* ---- the modes that end the job ---------------------------------------------------------- */

static int ending(const char *mode)
{
	int ranks[NR];
	struct comm_group g;
	float x = 1;
	group(WORLD, &g, ranks);
	if (!strcmp(mode, "--timeout")) {
		if (rank == 3) {
			sleep(30);
			return 0;
		}
		C->ops->allreduce_f32(C, &g, tag(17, "all_reduce blocks.3.attn"), &x, 1);
	} else if (!strncmp(mode, "--exchange", 10)) {
		/* 0 -> 1 and 2 -> 3, then an allreduce: --exchange-size: rank 1
		 * posts 8 bytes for rank 0's 16 (an MPI truncation on rank 1,
		 * which tells every rank); --exchange-absent: rank 3 never sends
		 * (rank 2 times out naming it); --exchange-fail: rank 3 calls
		 * fail() instead of sending (rank 2's wait hears it) */
		char buf[16] = { 1 };
		struct comm_p2p m = { rank ^ 1, buf, rank == 1 && !strcmp(mode, "--exchange-size") ? 8 : 16 };
		/* absent, fail: 1 -> 0 and 3 -> 2, so that rank 2 waits to
		 * receive (MPI may finish a small send before its receive is
		 * posted) */
		bool send = rank % 2 == (strcmp(mode, "--exchange-size") != 0);
		struct comm_request *req;
		/* the mpi backend makes a group's communicator at its first
		 * use, with every member: a collective first */
		if (C->ops->allreduce_f32(C, &g, tag(15, "all_reduce warm-up"), &x, 1))
			return 1;
		if (rank == 3 && !strcmp(mode, "--exchange-absent")) {
			sleep(30);
			return 0;
		}
		if (rank == 3 && !strcmp(mode, "--exchange-fail")) {
			C->ops->fail(C, "kernel error: NaN in blocks.3");
			C->ops->allreduce_f32(C, &g, tag(17, "all_reduce blocks.3.attn"), &x, 1);
		} else if (!C->ops->exchange_start(C, &g, tag(16, "exchange blocks.3.kv"), send ? &m : NULL,
						   send, send ? NULL : &m, !send, &req) &&
			   !C->ops->exchange_wait(C, req)) {
			C->ops->allreduce_f32(C, &g, tag(17, "all_reduce blocks.3.attn"), &x, 1);
		}
	} else {
		if (rank == 2)
			C->ops->fail(C, "kernel error: NaN in blocks.3");
		C->ops->allreduce_f32(C, &g, tag(17, "all_reduce blocks.3.attn"), &x, 1);
	}
	struct comm_end ends[NR];
	int code = C->ops->end(C, 1, 1, g_error()->msg, rank == 0 ? ends : NULL);
	for (int r = 0; rank == 0 && r < NR; r++)
		fprintf(stderr, "rank %d: %s\n", r, ends[r].reported ? ends[r].why : "(no report)");
	return code;
}

int main(int argc, char **argv)
{
	bool ends = argc > 1;
	/* --fail must not time out while the failure travels: the usual timeout */
	C = comm_mpi_create(ends && (!strcmp(argv[1], "--timeout") || !strcmp(argv[1], "--exchange-absent"))
				    ? 300 : TIMEOUT_MS);
	if (!C) {
		fprintf(stderr, "comm_mpi_create: %s\n", g_error()->msg);
		return 2;
	}
	rank = C->rank;
	if (C->world != NR) {
		if (rank == 0)
			fprintf(stderr, "needs %d ranks, has %d\n", NR, C->world);
		C->ops->free(C);
		return 2;
	}
	if (ends) {
		int st = ending(argv[1]);
		C->ops->free(C);
		return st;
	}

	int ranks[4][NR];
	struct comm_group gs[4], *g[4];
	for (int a = ROW; a <= TAIL; a++)
		g[a] = group((enum axis)a, &gs[a], ranks[a]);
	static const char *const names[] = { "rows", "columns", "world", "ranks 1-3" };

	uint32_t op = 0;
	for (int a = ROW; a <= TAIL; a++) {
		long bad = 0;
		/* rank 0 is outside TAIL: it goes on to the next group meanwhile */
		if (g[a]) {
			long r[4] = { t_allgatherv(g[a], op, 11, 97, false),
				      t_allgatherv(g[a], op + 1, 12, 97, true),
				      t_alltoallv(g[a], op + 2, 13, 89),
				      t_allreduce(g[a], op + 3, 14, 10007) };
			for (int k = 0; k < 4; k++)
				bad = r[k] < 0 || bad < 0 ? -1 : bad + r[k];
		}
		op += 4;
		CHECK(bad == 0, "%s: allgatherv (uneven, one empty, in place), alltoallv, allreduce (%ld wrong)",
		      names[a], bad);
	}
	long bad = t_allreduce(g[WORLD], op++, 15, 1);
	bad += t_allreduce(g[WORLD], op++, 16, 0);
	CHECK(bad == 0, "allreduce of 1 and 0 floats");

	bad = 0;
	for (int a = ROW; a <= TAIL; a++)
		for (int even = 0; even < 2 && bad >= 0; even++) {
			long r = g[a] ? t_reduce_scatter(g[a], op, 70 + (uint64_t)even, 1003, even, false)
				      : 0;
			bad = r < 0 || bad < 0 ? -1 : bad + r;
			op++;
		}
	CHECK(bad == 0, "reduce_scatter_f32: even and uneven pieces (one empty) on rows, columns, world, ranks 1-3 (%ld wrong)",
	      bad);
	bad = t_reduce_scatter(g[WORLD], op++, 72, 301, false, true);
	CHECK(bad == 0, "negative control: reduce-scatter sums checked without member 0's terms fail (%ld passed)",
	      bad);

	int st;
	bad = t_shift(g[WORLD], op, 21, 5000, 6);
	op += 12;
	CHECK(bad == 0, "shift: ring of 4, K and V at once, 6 rounds, work between (%ld wrong)", bad);
	bad = g[TAIL] ? t_shift(g[TAIL], op, 22, 5000, 5) : 0;
	op += 10;
	CHECK(bad == 0, "shift: ring of 3 (ranks 1-3), 5 rounds (%ld wrong)", bad);

	bad = 0;
	for (int a = ROW; a <= TAIL; a++)
		for (int p = 0; p < XP_N && bad >= 0; p++) {
			long r = g[a] ? t_exchange(g[a], op, 50 + (uint64_t)p, p, 301, false) : 0;
			bad = r < 0 || bad < 0 ? -1 : bad + r;
			op++;
		}
	CHECK(bad == 0, "exchange: all pairs and a permutation (uneven, zero-byte, self) on rows, columns, world, ranks 1-3 (%ld wrong)",
	      bad);
	bad = t_exchange(g[WORLD], op++, 60, XP_ALL_PAIRS, 1 << 16, false);
	CHECK(bad == 0, "exchange: all pairs, ~MiB per rank (%ld wrong)", bad);
	bad = t_chain(g[WORLD], op++, 61, 4099);
	CHECK(bad == 0, "exchange: a 0 -> 1 -> 2 -> 3 pipeline, one pair at a time (%ld wrong)", bad);
	bad = t_exchange(g[WORLD], op++, 62, XP_ALL_PAIRS, 301, true);
	CHECK(bad == 0, "negative control: received data checked against the wrong peer fails (%ld matched)",
	      bad);
	char xa[32], xb[32];
	struct comm_p2p twice[2] = { { (rank + 1) % NR, xa, 8 }, { (rank + 1) % NR, xb, 8 } };
	struct comm_p2p big = { (rank + 1) % NR, xa, (size_t)INT_MAX + 1 };
	struct comm_request *xreq;
	st = C->ops->exchange_start(C, g[WORLD], tag(op, "x"), NULL, 0, twice, 2, &xreq);
	bool refused = st == COMM_INVALID && strstr(g_error()->msg, "both name member");
	st = C->ops->exchange_start(C, g[WORLD], tag(op, "x"), &big, 1, NULL, 0, &xreq);
	refused = refused && st == COMM_INVALID && strstr(g_error()->msg, "exceed MPI's int count");
	CHECK(refused, "exchange: a peer twice, a message over INT_MAX bytes: COMM_INVALID (%s)", g_error()->msg);

	bad = 0;
	for (int it = 0; it < 60 && bad >= 0; it++) {
		uint64_t seed = 1000 + (uint64_t)it;
		long r[4] = { t_allgatherv(g[it % 3], op, seed, 5, it & 1),
			      t_allreduce(g[(it + 1) % 3], op + 1, seed, 40),
			      t_alltoallv(g[(it + 2) % 3], op + 2, seed, 3),
			      t_shift(g[it % 2], op + 3, seed, 17, 1) };
		op += 5;
		for (int k = 0; k < 4; k++)
			bad = r[k] < 0 || bad < 0 ? -1 : bad + r[k];
	}
	CHECK(bad == 0, "240 back-to-back collectives on rows, columns, world (%ld wrong)", bad);

	const size_t MiB = 1 << 20;
	double t0 = MPI_Wtime();
	long r[4] = { t_allgatherv(g[WORLD], op, 31, 16 * MiB / 19, false),
		      t_allreduce(g[WORLD], op + 1, 32, 4 * MiB),
		      t_alltoallv(g[WORLD], op + 2, 33, 16 * MiB / 21),
		      t_shift(g[WORLD], op + 3, 34, 16 * MiB, 1) };
	op += 5;
	bad = 0;
	for (int k = 0; k < 4; k++)
		bad = r[k] < 0 || bad < 0 ? -1 : bad + r[k];
	CHECK(bad == 0, "16 MiB allgatherv, allreduce, alltoallv, shift (%.1f s with checking)",
	      MPI_Wtime() - t0);

	/* over MPI's int counts: refused before anything is sent */
	size_t huge[NR] = { 8, 8, 8, 8 }, displs[NR] = { 0, 8, 16, 24 };
	huge[1] = (size_t)INT_MAX + 1;
	char recv[32] = { 1 };
	st = C->ops->allgatherv(C, g[WORLD], tag(op, "all_gather huge"), recv + displs[rank],
				    recv, huge, displs);
	refused = st == COMM_INVALID && strstr(g_error()->msg, "exceed MPI's int count");
	float x = 1;
	st = C->ops->allreduce_f32(C, g[WORLD], tag(op, "all_reduce huge"), &x, (size_t)INT_MAX + 1);
	refused = refused && st == COMM_INVALID && strstr(g_error()->msg, "exceed MPI's int count");
	CHECK(refused, "a piece over INT_MAX bytes or floats: COMM_INVALID (%s)", g_error()->msg);
	bad = t_allreduce(g[WORLD], op + 1, 41, 100);
	CHECK(bad == 0, "and the next collective works");

	C->ops->free(C);
	return rank == 0 ? unit_done() : 0;
}
