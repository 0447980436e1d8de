/* test_comm.c — the local communication backend: collectives on sub-groups of
 * a 2 x (N/2) mesh with N = 4 and 6 threads, large buffers, and the failure
 * paths (a rank that never arrives, fail(), diverged ranks, mismatched sizes),
 * which must end every rank's call with the right message within the world's
 * timeout. Data comes from a fixed-seed hash and is never zero; receive
 * buffers start zeroed, so a byte not copied shows. */
#include <float.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "runtime/comm.h"
#include "tests/comm_data.h"
#include "tests/unit/unit.h"

enum { MAXR = 8, SLOW_MS = 20000, FAST_MS = 300 };

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* ---- data ------------------------------------------------------------------------ */

static long nonzero(const void *buf, size_t len)
{
	const uint8_t *p = buf;
	long bad = 0;
	for (size_t i = 0; i < len; i++)
		bad += p[i] != 0;
	return bad;
}

/* ---- a world of threads ------------------------------------------------------------- */

struct job {
	int rank, n;
	struct comm *c;
	const void *arg;
	double t0;
	/* what the rank saw: its first status other than COMM_OK, with the
	 * message and the time from its start; wrong bytes or elements */
	int st;
	char error[G_ERROR_MSG];
	double t_fail;
	long wrong;
	/* the time its call after the failure took and what that returned */
	int st_after;
	double t_after;
	char error_after[G_ERROR_MSG];
	/* the rank that calls fail(): its own failure was still its record after */
	bool own_kept;
	float *out;
};

typedef void (*body_fn)(struct job *j);

struct start {
	struct job *j;
	body_fn body;
};

static void *thread_main(void *p)
{
	struct start *s = p;
	s->j->t0 = now();
	s->body(s->j);
	return NULL;
}

/* Runs body on n threads, rank r with jobs[r]; frees what the bodies left. */
static void run(int n, int timeout_ms, body_fn body, const void *arg, struct job *jobs)
{
	struct comm_local_world *w = comm_local_world_create(n, timeout_ms);
	pthread_t th[MAXR];
	struct start s[MAXR];
	for (int r = 0; r < n; r++) {
		jobs[r] = (struct job){ .rank = r, .n = n, .c = comm_local_create(w, r), .arg = arg };
		s[r] = (struct start){ &jobs[r], body };
	}
	for (int r = 0; r < n; r++)
		pthread_create(&th[r], NULL, thread_main, &s[r]);
	for (int r = 0; r < n; r++)
		pthread_join(th[r], NULL);
	for (int r = 0; r < n; r++)
		if (jobs[r].c)
			jobs[r].c->ops->free(jobs[r].c);
	comm_local_world_free(w);
}

/* Notes a call's status; true if it is COMM_OK. */
static bool ok(struct job *j, int st)
{
	if (st != COMM_OK && j->st == COMM_OK) {
		j->st = st;
		snprintf(j->error, sizeof j->error, "%s", g_error()->msg);
		j->t_fail = now() - j->t0;
	}
	return st == COMM_OK;
}

static bool all_ok(const struct job *jobs, int n)
{
	for (int r = 0; r < n; r++)
		if (jobs[r].st != COMM_OK || jobs[r].wrong) {
			printf("# rank %d: status %d, %ld wrong: %s\n", r, jobs[r].st, jobs[r].wrong,
			       jobs[r].error);
			return false;
		}
	return true;
}

static struct comm_tag tag(uint32_t op, const char *what)
{
	return (struct comm_tag){ .op = op, .what = what };
}

/* The groups of a 2 x (n/2) mesh as rank r sees them (rank = row * C + col):
 * ROW has the C ranks of r's row (id 0), COL the two of its column (id 1),
 * WORLD everyone (id -1). */
enum axis { ROW, COL, WORLD };

static struct comm_group mesh_group(int n, int r, enum axis a, int *ranks)
{
	int C = n / 2;
	struct comm_group g = { .ranks = ranks };
	switch (a) {
	case ROW:
		g = (struct comm_group){ .id = 0, .n = C, .me = r % C, .ranks = ranks };
		for (int k = 0; k < C; k++)
			ranks[k] = r / C * C + k;
		break;
	case COL:
		g = (struct comm_group){ .id = 1, .n = 2, .me = r / C, .ranks = ranks };
		for (int k = 0; k < 2; k++)
			ranks[k] = r % C + k * C;
		break;
	case WORLD:
		g = (struct comm_group){ .id = -1, .n = n, .me = r, .ranks = ranks };
		for (int k = 0; k < n; k++)
			ranks[k] = k;
		break;
	}
	return g;
}

/* ---- collectives, checked ------------------------------------------------------------- */

/* Uneven sizes, member 1 always empty. */
static size_t gather_count(int i, size_t scale)
{
	return i == 1 ? 0 : scale * (size_t)(3 + 2 * i) + 7 * (size_t)i;
}

/* An allgatherv on g with gaps between the pieces; in place if asked. */
static void check_allgatherv(struct job *j, const struct comm_group *g, uint32_t op,
			     uint64_t seed, size_t scale, bool in_place)
{
	size_t counts[MAXR], displs[MAXR], total = 0;
	for (int i = 0; i < g->n; i++) {
		counts[i] = gather_count(i, scale);
		displs[i] = total;
		total += counts[i] + 3;
	}
	uint8_t *recv = calloc(1, total);
	uint8_t *send = in_place ? recv + displs[g->me] : malloc(counts[g->me] + 1);
	fill(send, counts[g->me], seed, (uint64_t)j->rank);
	if (ok(j, j->c->ops->allgatherv(j->c, g, tag(op, "all_gather x"), send, recv, counts,
					displs))) {
		for (int i = 0; i < g->n; i++) {
			j->wrong += wrong_bytes(recv + displs[i], counts[i], seed,
						(uint64_t)g->ranks[i]);
			j->wrong += nonzero(recv + displs[i] + counts[i], 3);
		}
	}
	if (!in_place)
		free(send);
	free(recv);
}

/* Sizes that differ per pair, some zero. */
static void check_alltoallv(struct job *j, const struct comm_group *g, uint32_t op,
			    uint64_t seed, size_t scale)
{
	size_t sc[MAXR], sd[MAXR], rc[MAXR], rd[MAXR], stot, rtot;
	a2a_layout(g->me, g->n, scale, sc, sd, rc, rd, &stot, &rtot);
	uint8_t *send = malloc(stot), *recv = calloc(1, rtot);
	for (int k = 0; k < g->n; k++)
		fill(send + sd[k], sc[k], seed, (uint64_t)(j->rank * 64 + g->ranks[k]));
	if (ok(j, j->c->ops->alltoallv(j->c, g, tag(op, "all_to_all x"), send, sc, sd, recv, rc,
				       rd))) {
		for (int k = 0; k < g->n; k++) {
			j->wrong += wrong_bytes(recv + rd[k], rc[k], seed,
						(uint64_t)(g->ranks[k] * 64 + j->rank));
			j->wrong += nonzero(recv + rd[k] + rc[k], 3);
		}
	}
	free(send);
	free(recv);
}

/* Sums in double; a float sum of P terms of magnitude up to 1 is off by at
 * most (P - 1) * FLT_EPSILON * sum |x| (one rounding per addition). The
 * result stays in j->out for the cross-rank comparison. */
static void check_allreduce(struct job *j, const struct comm_group *g, uint32_t op,
			    uint64_t seed, size_t n)
{
	float *buf = malloc((n ? n : 1) * sizeof *buf);
	for (size_t i = 0; i < n; i++)
		buf[i] = float_at(seed, j->rank, i);
	if (ok(j, j->c->ops->allreduce_f32(j->c, g, tag(op, "all_reduce x"), buf, n))) {
		for (size_t i = 0; i < n; i++) {
			double ref = 0, mag = 0;
			for (int m = 0; m < g->n; m++) {
				double x = float_at(seed, g->ranks[m], i);
				ref += x;
				mag += fabs(x);
			}
			double tol = (g->n - 1) * (double)FLT_EPSILON * mag;
			j->wrong += fabs(buf[i] - ref) > tol;
		}
	}
	free(j->out);
	j->out = buf;
}

/* Every member sends P pieces of random floats; I get the sum of piece me,
 * checked against a float64 sum with the bound of check_allreduce, and it
 * must have the same bits as an allreduce of the same data (local sums
 * both in member order: SP-TP's rows equal plain TP's). `control`: the
 * negative control, the reference leaves member 0's terms out, and every
 * element must then be counted wrong (j->wrong counts the elements that
 * were not). A guard after recv must stay untouched. */
static void check_reduce_scatter(struct job *j, const struct comm_group *g, uint32_t op,
				 uint64_t seed, size_t scale, bool even, bool control)
{
	size_t counts[MAXR] = { 0 }, total, lo;
	size_t mine = rs_layout(g, scale, even, counts, &lo, &total);
	float *send = malloc((total ? total : 1) * sizeof *send);
	float *recv = calloc(mine + 3, sizeof *recv);
	for (size_t i = 0; i < total; i++)
		send[i] = float_at(seed, j->rank, i);
	if (ok(j, j->c->ops->reduce_scatter_f32(j->c, g, tag(op, "reduce_scatter x"), send, recv,
						counts))) {
		j->wrong += rs_wrong(seed, g, lo, mine, recv, control);
		j->wrong += nonzero(recv + mine, 3 * sizeof *recv);
		if (!control &&
		    ok(j, j->c->ops->allreduce_f32(j->c, g, tag(op, "reduce_scatter x"), send, total)))
			j->wrong += mine && memcmp(send + lo, recv, mine * sizeof *recv) != 0;
	}
	free(send);
	free(recv);
}

/* Ring attention's pattern: every round each member passes the chunk it holds
 * (K and V, two shifts at once) to the right and works meanwhile; after n
 * rounds a chunk is back home. Sizes differ per origin. */
static void check_shift(struct job *j, const struct comm_group *g, uint32_t op0,
			uint64_t seed, size_t scale, int rounds, bool delay)
{
	int n = g->n;
	size_t cap = chunk_size(j->n, scale);
	uint8_t *buf[2][2];
	for (int kv = 0; kv < 2; kv++) {
		buf[kv][0] = malloc(cap);
		buf[kv][1] = malloc(cap);
		fill(buf[kv][0], chunk_size(j->rank, scale), seed + (uint64_t)kv, (uint64_t)j->rank);
	}
	int cur = 0;
	for (int round = 0; round < rounds; round++) {
		int have = g->ranks[((g->me - round) % n + n) % n];
		int next = g->ranks[((g->me - round - 1) % n + n) % n];
		struct comm_request *req[2] = { 0 };
		for (int kv = 0; kv < 2; kv++) {
			memset(buf[kv][!cur], 0, cap);
			uint32_t op = op0 + 2 * (uint32_t)round + (uint32_t)kv;
			if (!ok(j, comm_shift_start(j->c, g, tag(op, kv ? "shift v" : "shift k"),
							  buf[kv][cur], chunk_size(have, scale),
							  buf[kv][!cur], chunk_size(next, scale),
							  &req[kv])))
				goto out;
		}
		if (delay) /* the attention on the chunk held */
			usleep((useconds_t)(mix((uint64_t)(j->rank * 100 + round)) % 2000));
		for (int kv = 0; kv < 2; kv++)
			if (!ok(j, j->c->ops->exchange_wait(j->c, req[kv])))
				goto out;
		cur = !cur;
		for (int kv = 0; kv < 2; kv++)
			j->wrong += wrong_bytes(buf[kv][cur], chunk_size(next, scale),
						seed + (uint64_t)kv, (uint64_t)next);
	}
out:
	for (int kv = 0; kv < 2; kv++) {
		free(buf[kv][0]);
		free(buf[kv][1]);
	}
}

/* One exchange of pattern pat on g, with work between start and wait where
 * asked. Receive buffers start zeroed with 3 guard bytes after each (the
 * data is never zero). With wrong_src the receives are checked against
 * another member's stream: the negative control, which must count wrong
 * bytes wherever a message is not empty. */
static void check_exchange(struct job *j, const struct comm_group *g, uint32_t op,
			   uint64_t seed, int pat, size_t scale, bool delay, bool wrong_src)
{
	int n = g->n, ns = 0, nr = 0;
	struct comm_p2p sends[MAXR] = { { 0 } }, recvs[MAXR] = { { 0 } };
	for (int k = 0; k < n; k++) {
		long b = xp_bytes(pat, n, g->me, k, scale);
		if (b < 0)
			continue;
		sends[ns] = (struct comm_p2p){ k, malloc((size_t)b + 1), (size_t)b };
		fill(sends[ns++].buf, (size_t)b, seed, xp_stream(j->rank, g->ranks[k]));
	}
	for (int i = 0; i < n; i++) {
		long b = xp_bytes(pat, n, i, g->me, scale);
		if (b >= 0)
			recvs[nr++] = (struct comm_p2p){ i, calloc(1, (size_t)b + 3), (size_t)b };
	}
	struct comm_request *req;
	if (ok(j, j->c->ops->exchange_start(j->c, g, tag(op, "exchange x"), sends, ns, recvs, nr,
					    &req))) {
		if (delay)
			usleep((useconds_t)(mix((uint64_t)(j->rank * 100 + (int)op)) % 2000));
		if (ok(j, j->c->ops->exchange_wait(j->c, req))) {
			long wrong = 0, full = 0;
			for (int k = 0; k < nr; k++) {
				int from = g->ranks[wrong_src ? (recvs[k].peer + 1) % n : recvs[k].peer];
				long w = wrong_bytes(recvs[k].buf, recvs[k].bytes, seed,
						     xp_stream(from, j->rank));
				wrong += w + nonzero((char *)recvs[k].buf + recvs[k].bytes, 3);
				full += recvs[k].bytes > 0 && w > 0;
				if (wrong_src && recvs[k].bytes && !w)
					j->wrong++; /* the control did not see the wrong peer */
			}
			if (!wrong_src)
				j->wrong += wrong;
		}
	}
	for (int k = 0; k < ns; k++)
		free(sends[k].buf);
	for (int k = 0; k < nr; k++)
		free(recvs[k].buf);
}

/* A pipeline along g: member 0 sends its block to member 1, which passes
 * it on to member 2 once it has it, and so on; in each stage only the two
 * members concerned take part (the others are elsewhere). Every member
 * past 0 checks the block it got. */
static void check_chain(struct job *j, const struct comm_group *g, uint32_t op, uint64_t seed,
			size_t bytes)
{
	uint8_t *block = calloc(1, bytes + 3);
	if (g->me == 0)
		fill(block, bytes, seed, (uint64_t)g->ranks[0]);
	struct comm_request *req;
	if (g->me > 0) {
		struct comm_p2p in = { g->me - 1, block, bytes };
		if (!ok(j, j->c->ops->exchange_start(j->c, g, tag(op, "pipeline"), NULL, 0, &in, 1,
						     &req)) ||
		    !ok(j, j->c->ops->exchange_wait(j->c, req)))
			goto out;
		j->wrong += wrong_bytes(block, bytes, seed, (uint64_t)g->ranks[0]) +
			    nonzero(block + bytes, 3);
	}
	if (g->me < g->n - 1) {
		struct comm_p2p out = { g->me + 1, block, bytes };
		if (ok(j, j->c->ops->exchange_start(j->c, g, tag(op, "pipeline"), &out, 1, NULL, 0,
						    &req)))
			ok(j, j->c->ops->exchange_wait(j->c, req));
	}
out:
	free(block);
}

/* ---- scenarios ----------------------------------------------------------------------- */

static void body_mesh(struct job *j)
{
	int ranks[3][MAXR];
	struct comm_group g[3];
	for (int a = ROW; a <= WORLD; a++)
		g[a] = mesh_group(j->n, j->rank, (enum axis)a, ranks[a]);
	uint32_t op = 0;
	for (int a = ROW; a <= WORLD; a++) {
		check_allgatherv(j, &g[a], op++, 11, 97, false);
		check_allgatherv(j, &g[a], op++, 12, 97, true);
		check_alltoallv(j, &g[a], op++, 13, 89);
		check_allreduce(j, &g[a], op++, 14, a == WORLD ? 100003 : 1003);
		check_reduce_scatter(j, &g[a], op, 18, a == WORLD ? 25001 : 1001, true, false);
		op++;
		check_reduce_scatter(j, &g[a], op, 19, a == WORLD ? 25001 : 1001, false, false);
		op++;
	}
	/* pieces shorter than a summing block and empty ones */
	check_reduce_scatter(j, &g[WORLD], op++, 20, 1, true, false);
	check_reduce_scatter(j, &g[WORLD], op++, 21, 0, true, false);
	/* fewer elements than members: empty segments */
	check_allreduce(j, &g[WORLD], op++, 15, 1);
	check_allreduce(j, &g[WORLD], op++, 16, 0);
	check_allreduce(j, &g[WORLD], op++, 17, 33);
}

static void body_shift(struct job *j)
{
	int ranks[MAXR];
	/* n = 6: the rows, rings of 3; n = 4: the world, a ring of 4 */
	struct comm_group g = mesh_group(j->n, j->rank, j->n == 6 ? ROW : WORLD, ranks);
	check_shift(j, &g, 0, 21, 5000, g.n + 2, true);
}

/* Many small collectives on alternating groups that share members. */
static void body_many(struct job *j)
{
	int ranks[3][MAXR];
	struct comm_group g[3];
	for (int a = ROW; a <= WORLD; a++)
		g[a] = mesh_group(j->n, j->rank, (enum axis)a, ranks[a]);
	uint32_t op = 0;
	for (int it = 0; it < 60; it++) {
		uint64_t seed = 1000 + (uint64_t)it;
		check_allgatherv(j, &g[it % 3], op++, seed, 5, it & 1);
		check_allreduce(j, &g[(it + 1) % 3], op++, seed, 40);
		check_alltoallv(j, &g[(it + 2) % 3], op++, seed, 3);
		check_shift(j, &g[it % 2], op, seed, 17, 1, false);
		op += 2;
	}
}

/* Exchanges on the world and on sub-groups, back to back and overlapping:
 * two exchanges of different patterns in flight at once, waited for in the
 * reverse order. */
static void body_exchange(struct job *j)
{
	int ranks[3][MAXR];
	struct comm_group g[3];
	for (int a = ROW; a <= WORLD; a++)
		g[a] = mesh_group(j->n, j->rank, (enum axis)a, ranks[a]);
	uint32_t op = 0;
	for (int a = ROW; a <= WORLD; a++)
		for (int p = 0; p < XP_N; p++) {
			check_exchange(j, &g[a], op++, 50 + (uint64_t)p, p, 301, true, false);
			check_exchange(j, &g[a], op++, 60 + (uint64_t)p, p, 1, false, false);
		}
	check_exchange(j, &g[WORLD], op++, 70, XP_ALL_PAIRS, 1 << 16, false, false);
	check_chain(j, &g[WORLD], op++, 80, 4099);
	check_chain(j, &g[ROW], op++, 81, 0);
	/* two in flight */
	int n = j->n, me = j->rank;
	size_t b0 = 1000 + 10 * (size_t)me, b1 = 77 + (size_t)me;
	int right = (me + 1) % n, left = (me + n - 1) % n, far = (me + n / 2) % n;
	uint8_t *s0 = malloc(b0), *s1 = malloc(b1);
	uint8_t *r0 = calloc(1, 1000 + 10 * (size_t)left), *r1 = calloc(1, 77 + (size_t)far);
	fill(s0, b0, 90, xp_stream(me, right));
	fill(s1, b1, 91, xp_stream(me, far));
	struct comm_p2p o0 = { right, s0, b0 }, i0 = { left, r0, 1000 + 10 * (size_t)left };
	struct comm_p2p o1 = { far, s1, b1 }, i1 = { (me + n - n / 2) % n, r1, 0 };
	i1.bytes = 77 + (size_t)i1.peer;
	struct comm_request *q0, *q1;
	if (ok(j, j->c->ops->exchange_start(j->c, &g[WORLD], tag(op, "ring"), &o0, 1, &i0, 1, &q0))) {
		if (ok(j, j->c->ops->exchange_start(j->c, &g[WORLD], tag(op + 1, "far"), &o1, 1, &i1, 1,
						    &q1)))
			ok(j, j->c->ops->exchange_wait(j->c, q1));
		ok(j, j->c->ops->exchange_wait(j->c, q0));
		j->wrong += wrong_bytes(r0, i0.bytes, 90, xp_stream(left, me)) +
			    wrong_bytes(r1, i1.bytes, 91, xp_stream(i1.peer, me));
	}
	free(s0), free(s1), free(r0), free(r1);
}

/* The checks of body_exchange must be able to fail: received data checked
 * against the wrong sender's stream counts as wrong. */
static void body_exchange_control(struct job *j)
{
	int ranks[MAXR];
	struct comm_group g = mesh_group(j->n, j->rank, WORLD, ranks);
	check_exchange(j, &g, 0, 50, XP_ALL_PAIRS, 301, false, true);
}

/* The checks of check_reduce_scatter must be able to fail. */
static void body_reduce_scatter_control(struct job *j)
{
	int ranks[MAXR];
	struct comm_group g = mesh_group(j->n, j->rank, WORLD, ranks);
	check_reduce_scatter(j, &g, 0, 22, 301, false, true);
}

/* Reduce-scatter alone on groups of 2, 3 and 4 (the world of n ranks). */
static void body_reduce_scatter_world(struct job *j)
{
	int ranks[MAXR];
	struct comm_group g = mesh_group(j->n, j->rank, WORLD, ranks);
	check_reduce_scatter(j, &g, 0, 23, 4097, true, false);
	check_reduce_scatter(j, &g, 2, 24, 4097, false, false);
}

static double big_ms[4];

static void body_large(struct job *j)
{
	int ranks[MAXR];
	struct comm_group g = mesh_group(j->n, j->rank, WORLD, ranks);
	const size_t MiB = 1 << 20;
	double t[5];
	t[0] = now();
	check_allgatherv(j, &g, 0, 31, 16 * MiB / 19, false); /* 16 MiB gathered */
	t[1] = now();
	check_allreduce(j, &g, 1, 32, 4 * MiB);
	t[2] = now();
	check_alltoallv(j, &g, 2, 33, 16 * MiB / 21);
	t[3] = now();
	check_shift(j, &g, 3, 34, 16 * MiB, 1, false);
	t[4] = now();
	if (j->rank == 0)
		for (int k = 0; k < 4; k++)
			big_ms[k] = (t[k + 1] - t[k]) * 1e3;
}

static void test_collectives(void)
{
	struct job jobs[MAXR];
	for (int n = 4; n <= 6; n += 2) {
		run(n, SLOW_MS, body_mesh, NULL, jobs);
		UNIT_CHECK(all_ok(jobs, n),
			   "n=%d: allgatherv (uneven, one empty, in place), alltoallv, allreduce, reduce_scatter_f32 (even, uneven) on rows, columns, world",
			   n);
		bool same = true;
		for (int r = 1; r < n; r++)
			same = same && !memcmp(jobs[r].out, jobs[0].out, 33 * sizeof(float));
		UNIT_CHECK(same, "n=%d: every member's allreduce result has the same bits", n);
		for (int r = 0; r < n; r++)
			free(jobs[r].out);

		run(n, SLOW_MS, body_shift, NULL, jobs);
		UNIT_CHECK(all_ok(jobs, n), "n=%d: shift, ring of %d, K and V at once, %d rounds, with work between",
			   n, n == 6 ? 3 : 4, (n == 6 ? 3 : 4) + 2);

		run(n, SLOW_MS, body_many, NULL, jobs);
		UNIT_CHECK(all_ok(jobs, n), "n=%d: 300 back-to-back collectives on groups sharing members",
			   n);
		for (int r = 0; r < n; r++)
			free(jobs[r].out);
	}
	for (int n = 2; n <= 4; n++) {
		run(n, SLOW_MS, body_reduce_scatter_world, NULL, jobs);
		UNIT_CHECK(all_ok(jobs, n),
			   "n=%d: reduce_scatter_f32 of even and uneven pieces (one empty) against a float64 sum, bitwise an allreduce's piece",
			   n);
		run(n, SLOW_MS, body_reduce_scatter_control, NULL, jobs);
		UNIT_CHECK(all_ok(jobs, n),
			   "n=%d: negative control: the reduce-scatter's sums checked without member 0's terms fail on every element",
			   n);
	}
	for (int n = 4; n <= 6; n += 2) {
		run(n, SLOW_MS, body_exchange, NULL, jobs);
		UNIT_CHECK(all_ok(jobs, n),
			   "n=%d: exchanges (all pairs and a permutation, uneven, zero-byte messages, self) on rows, columns, world; a 0->1->...->%d pipeline; two in flight waited for in reverse",
			   n, n - 1);
		run(n, SLOW_MS, body_exchange_control, NULL, jobs);
		UNIT_CHECK(all_ok(jobs, n),
			   "n=%d: negative control: the exchange's data checked against the wrong peer fails on every non-empty message",
			   n);
	}
	run(4, SLOW_MS, body_large, NULL, jobs);
	UNIT_CHECK(all_ok(jobs, 4), "n=4: 16 MiB allgatherv, allreduce, alltoallv, shift");
	printf("# 16 MiB, 4 ranks, with filling and checking: allgatherv %.0f ms, allreduce %.0f ms, alltoallv %.0f ms, shift %.0f ms\n",
	       big_ms[0], big_ms[1], big_ms[2], big_ms[3]);
	for (int r = 0; r < 4; r++)
		free(jobs[r].out);
}

/* ---- failures -------------------------------------------------------------------------- */

/* Each scenario runs on a world group of 4 with FAST_MS: op 5 succeeds on
 * every rank, op 6 is the one that goes wrong, and every rank still in the
 * game then tries op 7, which must fail at once. */
enum fault { NEVER_ARRIVES, FREES_COMM, FAILS, DIVERGES, WRONG_KIND, WRONG_SIZE, SHIFT_MISSING, GROUP_MISMATCH,
	     X_NEVER_POSTS, X_FAILS, X_FREES_COMM, X_WRONG_SIZE, X_WRONG_PEER, X_DIVERGES,
	     RS_NEVER_ARRIVES, RS_WRONG_COUNT };

static void after(struct job *j, const struct comm_group *g)
{
	float x = 1;
	double t = now();
	j->st_after = j->c->ops->allreduce_f32(j->c, g, tag(7, "all_reduce after"), &x, 1);
	j->t_after = now() - t;
	snprintf(j->error_after, sizeof j->error_after, "%s", g_error()->msg);
}

/* The misbehaving rank fails as the executor does: its own failure raised,
 * then fail(). fail() leaves that record (the failure this rank reports is
 * its own); its next call fails with the world's message, the one every
 * other rank reports, which is what the job records. */
static void fail_as_executor(struct job *j, const struct comm_group *g)
{
	static const char own[] = "kernel error: NaN in blocks.3";
	usleep(20000); /* the others are waiting by now */
	g_raise(G_ERR_DEVICE, "%s", own);
	j->c->ops->fail(j->c, own);
	j->own_kept = g_error()->status == G_ERR_DEVICE && !strcmp(g_error()->msg, own);
	after(j, g);
	ok(j, j->st_after);
}

static void body_fault(struct job *j)
{
	enum fault f = *(const enum fault *)j->arg;
	int ranks[MAXR];
	struct comm_group g = mesh_group(j->n, j->rank, WORLD, ranks);
	float x[64];
	for (int i = 0; i < 64; i++)
		x[i] = float_at(1, j->rank, (size_t)i);
	if (!ok(j, j->c->ops->allreduce_f32(j->c, &g, tag(5, "all_reduce warm-up"), x, 64)))
		return;
	int odd = 3; /* the rank that misbehaves */
	switch (f) {
	case NEVER_ARRIVES:
		if (j->rank == odd)
			return;
		break;
	case FREES_COMM:
		if (j->rank == odd) {
			j->c->ops->free(j->c);
			j->c = NULL;
			return;
		}
		break;
	case FAILS:
		if (j->rank == odd) {
			fail_as_executor(j, &g);
			return;
		}
		break;
	case DIVERGES:
		if (j->rank == odd) {
			ok(j, j->c->ops->allreduce_f32(j->c, &g, tag(17, "all_reduce blocks.2.proj"), x, 64));
			after(j, &g);
			return;
		}
		break;
	case WRONG_KIND:
		if (j->rank == odd) {
			ok(j, j->c->ops->allreduce_f32(j->c, &g, tag(6, "gather h"), x, 64));
			after(j, &g);
			return;
		}
		break;
	case WRONG_SIZE: {
		/* rank 1 expects 8 bytes from rank 0, which sends 4 */
		size_t sc[4] = { 4, 4, 4, 4 }, rc[4] = { 4, 4, 4, 4 }, d[4] = { 0, 8, 16, 24 };
		if (j->rank == 1)
			rc[0] = 8;
		char send[32] = { 1 }, recv[32];
		ok(j, j->c->ops->alltoallv(j->c, &g, tag(6, "all_to_all h"), send, sc, d, recv, rc, d));
		after(j, &g);
		return;
	}
	case SHIFT_MISSING: {
		if (j->rank == odd)
			return;
		char send[16] = { 1 }, recv[16];
		struct comm_request *req;
		if (ok(j, comm_shift_start(j->c, &g, tag(6, "shift kv"), send, 16, recv, 16,
						 &req)))
			ok(j, j->c->ops->exchange_wait(j->c, req));
		after(j, &g);
		return;
	}
	case X_NEVER_POSTS:
	case X_FAILS:
	case X_FREES_COMM: {
		/* all pairs with rank 3, which never posts its part */
		if (j->rank == odd) {
			if (f == X_FREES_COMM) {
				j->c->ops->free(j->c);
				j->c = NULL;
				return;
			}
			if (f == X_FAILS)
				fail_as_executor(j, &g);
			return;
		}
		char sbuf[4][16], rbuf[4][16];
		struct comm_p2p s4[4], r4[4];
		for (int k = 0; k < 4; k++) {
			s4[k] = (struct comm_p2p){ k, sbuf[k], 16 };
			r4[k] = (struct comm_p2p){ k, rbuf[k], 16 };
		}
		struct comm_request *req;
		if (ok(j, j->c->ops->exchange_start(j->c, &g, tag(6, "exchange kv"), s4, 4, r4, 4, &req)))
			ok(j, j->c->ops->exchange_wait(j->c, req));
		after(j, &g);
		return;
	}
	case X_WRONG_SIZE:
	case X_WRONG_PEER:
	case X_DIVERGES: {
		/* 0 -> 1 and 2 -> 3; rank 1 expects 8 bytes (not 16), or (wrong
		 * peer) expects them from member 2, or is at op 17 */
		char buf[2][16] = { { 1 } };
		struct comm_p2p m = { j->rank ^ 1, buf[0], 16 };
		uint32_t op = 6;
		if (j->rank == 1 && f == X_WRONG_SIZE)
			m.bytes = 8;
		if (j->rank == 1 && f == X_DIVERGES)
			op = 17;
		if (j->rank == 1 && f == X_WRONG_PEER)
			m.peer = 2;
		bool send = j->rank % 2 == 0;
		struct comm_request *req;
		if (j->rank == 2 && f == X_WRONG_PEER) {
			/* rank 1's wrong peer sends it the message it waits for */
			struct comm_p2p both[2] = { m, { 1, buf[1], 16 } };
			if (ok(j, j->c->ops->exchange_start(j->c, &g, tag(6, "exchange kv"), both, 2, NULL,
							    0, &req)))
				ok(j, j->c->ops->exchange_wait(j->c, req));
		} else if (ok(j, j->c->ops->exchange_start(j->c, &g, tag(op, "exchange kv"),
							    send ? &m : NULL, send, send ? NULL : &m,
							    !send, &req))) {
			ok(j, j->c->ops->exchange_wait(j->c, req));
		}
		/* with the wrong peer only rank 0 waits: the others, done, must
		 * not time out in the next collective before it times out in
		 * this one (under load their timeout could fire first) */
		if (f == X_WRONG_PEER && j->rank != 0)
			usleep(2 * FAST_MS * 1000);
		after(j, &g);
		return;
	}
	case RS_NEVER_ARRIVES:
	case RS_WRONG_COUNT: {
		/* rank 3 stays away, or rank 1 counts piece 1 as 4 floats, not 8 */
		if (j->rank == odd && f == RS_NEVER_ARRIVES)
			return;
		size_t counts[4] = { 4, 8, 4, 4 };
		if (j->rank == 1 && f == RS_WRONG_COUNT)
			counts[1] = 4;
		float out[8];
		ok(j, j->c->ops->reduce_scatter_f32(j->c, &g, tag(6, "reduce_scatter h"), x, out,
						    counts));
		after(j, &g);
		return;
	}
	case GROUP_MISMATCH: {
		/* rank 3 thinks group id 0 from rank 0 is {0, 3}; the row says {0, 1} */
		struct comm_group row = mesh_group(j->n, j->rank, ROW, ranks);
		int odd_ranks[2] = { 0, 3 };
		struct comm_group wrong = { .id = 0, .n = 2, .me = 1, .ranks = odd_ranks };
		if (j->rank == 2)
			return;
		usleep(j->rank == odd ? 0 : 20000); /* rank 3's idea of the group comes first */
		ok(j, j->c->ops->allreduce_f32(j->c, j->rank == odd ? &wrong : &row,
					       tag(6, "all_reduce row"), x, 64));
		after(j, &g);
		return;
	}
	}
	size_t counts[4] = { 64, 64, 64, 64 }, displs[4] = { 0, 64, 128, 192 };
	char send[64] = { 1 }, recv[256];
	ok(j, j->c->ops->allgatherv(j->c, &g, tag(6, "gather h"), send, recv, counts, displs));
	after(j, &g);
}

/* Runs a fault; checks that the ranks in `mask` failed with a message that
 * holds every needle (the same message on all), within the timeout's bounds,
 * and that their next call failed at once. */
static void check_fault(enum fault f, const char *name, unsigned mask, double min_s,
			const char *const *needles)
{
	struct job jobs[4];
	run(4, FAST_MS, body_fault, &f, jobs);
	bool good = true;
	double slowest = 0, slowest_after = 0;
	for (int r = 0; r < 4; r++) {
		if (!(mask >> r & 1))
			continue;
		const struct job *j = &jobs[r];
		bool match = j->st == COMM_FAILED && !strcmp(j->error, jobs[__builtin_ctz(mask)].error);
		for (const char *const *n = needles; *n; n++)
			match = match && strstr(j->error, *n);
		if (!match)
			printf("# rank %d: status %d: %s\n", r, j->st, j->error);
		good = good && match && j->t_fail < 1.5;
		slowest = j->t_fail > slowest ? j->t_fail : slowest;
		good = good && j->st_after == COMM_FAILED && !strcmp(j->error_after, j->error);
		slowest_after = j->t_after > slowest_after ? j->t_after : slowest_after;
	}
	/* a timeout must not fire early: the rank that waited longest waited the
	 * whole timeout (the others may have started waiting later, under load,
	 * and been woken by its failure) */
	good = good && slowest_after < 0.25 && slowest >= min_s;
	if (f == FAILS || f == X_FAILS) /* rank 3 called fail() */
		good = good && jobs[3].own_kept;
	printf("# %s: %s\n", name, jobs[__builtin_ctz(mask)].error);
	UNIT_CHECK(good, "%s: failed in %.3f s (timeout %.1f s), next call in %.4f s", name, slowest,
		   FAST_MS / 1000.0, slowest_after);
}

static void test_faults(void)
{
	check_fault(NEVER_ARRIVES, "a rank never arrives", 0x7, FAST_MS / 1000.0 - 0.01,
		    (const char *const[]){ "timed out after 0.3 s in op 6 (gather h) of group [0 1 2 3]",
					  "rank 3 did not arrive (its last call was op 5 (all_reduce warm-up) of group [0 1 2 3])",
					  NULL });
	check_fault(FREES_COMM, "a rank frees its comm instead", 0x7, 0,
		    (const char *const[]){ "rank 3 freed its comm without arriving at op 6 (gather h) of group [0 1 2 3]",
					  NULL });
	check_fault(FAILS, "a rank calls fail()", 0xf, 0,
		    (const char *const[]){ "rank 3 failed: kernel error: NaN in blocks.3", NULL });
	check_fault(DIVERGES, "a rank is at another op", 0xf, 0,
		    (const char *const[]){ "rank 3 is at op 17 (all_reduce blocks.2.proj) but rank 0 is at op 6 (gather h) in group [0 1 2 3]",
					  NULL });
	check_fault(WRONG_KIND, "a rank calls another collective", 0xf, 0,
		    (const char *const[]){ "rank 3 calls allreduce_f32 but rank 0 calls allgatherv at op 6 (gather h)",
					  NULL });
	check_fault(WRONG_SIZE, "sizes disagree", 0xf, 0,
		    (const char *const[]){ "op 6 (all_to_all h) of group [0 1 2 3]: rank 1 expects 8 bytes from rank 0, which sends 4",
					  NULL });
	check_fault(SHIFT_MISSING, "a ring neighbour never starts the shift", 0x5,
		    FAST_MS / 1000.0 - 0.01,
		    /* whichever deadline passes first reports it: the shift's
		     * (rank 3 did not start it) or, when the others' work between
		     * start and wait runs long, rank 1's next collective (rank 3
		     * did not arrive); either names rank 3 */
		    (const char *const[]){ "rank 3 did not ", "of group [0 1 2 3]", NULL });
	check_fault(X_NEVER_POSTS, "exchange: a peer never posts", 0x7, FAST_MS / 1000.0 - 0.01,
		    (const char *const[]){ "timed out after 0.3 s in op 6 (exchange kv) of group [0 1 2 3]",
					  "rank 3 did not post the ",
					  "(its last call was op 5 (all_reduce warm-up) of group [0 1 2 3])",
					  NULL });
	check_fault(X_FAILS, "exchange: a peer calls fail()", 0xf, 0,
		    (const char *const[]){ "rank 3 failed: kernel error: NaN in blocks.3", NULL });
	check_fault(X_FREES_COMM, "exchange: a peer frees its comm", 0x7, 0,
		    (const char *const[]){ "rank 3 freed its comm without its part of op 6 (exchange kv) of group [0 1 2 3]",
					  NULL });
	check_fault(X_WRONG_SIZE, "exchange: the pair disagrees on the size", 0x3, 0,
		    (const char *const[]){ "op 6 (exchange kv) of group [0 1 2 3]: rank 1 expects 8 bytes from rank 0, which sends 16",
					  NULL });
	check_fault(X_WRONG_PEER, "exchange: a rank receives from the wrong peer", 0x1,
		    FAST_MS / 1000.0 - 0.01,
		    (const char *const[]){ "rank 0: timed out after 0.3 s in op 6 (exchange kv) of group [0 1 2 3]: rank 1 did not post the receive from rank 0",
					  NULL });
	check_fault(X_DIVERGES, "exchange: the pair is at different ops", 0x3, 0,
		    (const char *const[]){ "rank 0 is at op 6 (exchange kv) but rank 1 is at op 17 (exchange kv) in group [0 1 2 3]",
					  NULL });
	check_fault(RS_NEVER_ARRIVES, "reduce_scatter: a rank never arrives", 0x7,
		    FAST_MS / 1000.0 - 0.01,
		    (const char *const[]){ "timed out after 0.3 s in op 6 (reduce_scatter h) of group [0 1 2 3]",
					  "rank 3 did not arrive",
					  NULL });
	check_fault(RS_WRONG_COUNT, "reduce_scatter: counts disagree", 0xf, 0,
		    (const char *const[]){ "op 6 (reduce_scatter h) of group [0 1 2 3]: rank 1 expects 16 bytes from rank 0, which sends 32",
					  NULL });
	check_fault(GROUP_MISMATCH, "ranks disagree on a group", 0xb, 0,
		    (const char *const[]){ "names group id 0 as [0 1], another member as [0 3]",
					  NULL });
}

/* Bad arguments are the caller's bug: COMM_INVALID, and the world goes on. */
static void body_invalid(struct job *j)
{
	int ranks[MAXR];
	struct comm_group g = mesh_group(j->n, j->rank, WORLD, ranks);
	struct comm_group bad = g;
	bad.me = (g.me + 1) % g.n;
	float x[8] = { 1 };
	if (j->c->ops->allreduce_f32(j->c, &bad, tag(0, "x"), x, 8) != COMM_INVALID)
		j->wrong++;
	char buf[64];
	size_t c4[2] = { 8, 8 }, d4[2] = { 0, 8 };
	int two[2] = { 0, 1 };
	struct comm_group pair = { .id = 9, .n = 2, .me = j->rank, .ranks = two };
	/* alltoallv in place: a peer would read what is being overwritten */
	if (j->rank < 2 &&
	    j->c->ops->alltoallv(j->c, &pair, tag(1, "x"), buf, c4, d4, buf + 8, c4, d4) !=
		    COMM_INVALID)
		j->wrong++;
	/* exchanges: a peer out of range, a peer twice, receives that overlap
	 * each other or a send, a send to myself without the receive, and
	 * one whose two sizes differ */
	char a[64], b[64];
	struct comm_request *req;
	int me = g.me, other = (me + 1) % g.n;
	struct comm_p2p bad_x[][2] = {
		{ { g.n, a, 8 }, { other, b, 8 } },
		{ { other, a, 8 }, { other, b, 8 } },
		{ { other, a, 16 }, { (me + 2) % g.n, a + 8, 8 } },
	};
	const char *const want[] = { "names member 4", "both name member", "overlap" };
	for (int k = 0; k < 3; k++) {
		int st = j->c->ops->exchange_start(j->c, &g, tag(3, "x"), NULL, 0, bad_x[k], 2, &req);
		if (st != COMM_INVALID || !strstr(g_error()->msg, want[k])) {
			printf("# rank %d: bad exchange %d: %d (%s)\n", j->rank, k, st, g_error()->msg);
			j->wrong++;
		}
	}
	struct comm_p2p s1 = { other, a, 16 }, r1 = { (me + 3) % g.n, a + 4, 4 };
	struct comm_p2p self_s = { me, a, 8 }, self_r = { me, b, 4 };
	if (j->c->ops->exchange_start(j->c, &g, tag(3, "x"), &s1, 1, &r1, 1, &req) != COMM_INVALID ||
	    !strstr(g_error()->msg, "overlaps the send") ||
	    j->c->ops->exchange_start(j->c, &g, tag(3, "x"), &self_s, 1, NULL, 0, &req) != COMM_INVALID ||
	    !strstr(g_error()->msg, "without receiving from itself") ||
	    j->c->ops->exchange_start(j->c, &g, tag(3, "x"), &self_s, 1, &self_r, 1, &req) != COMM_INVALID ||
	    !strstr(g_error()->msg, "sends itself 8 bytes but expects 4")) {
		printf("# rank %d: %s\n", j->rank, g_error()->msg);
		j->wrong++;
	}
	/* reduce_scatter_f32 into its own send */
	float rs[8] = { 0 };
	size_t rc4[4] = { 2, 2, 2, 2 };
	if (j->c->ops->reduce_scatter_f32(j->c, &g, tag(1, "x"), rs, rs + 2 * g.me, rc4) !=
		    COMM_INVALID ||
	    !strstr(g_error()->msg, "reduce_scatter_f32: rank") || !strstr(g_error()->msg, "send overlaps recv")) {
		printf("# rank %d: %s\n", j->rank, g_error()->msg);
		j->wrong++;
	}
	check_allreduce(j, &g, 2, 3, 8);
	check_exchange(j, &g, 4, 5, XP_PERMUTATION, 9, false, false);
}

static void test_invalid(void)
{
	struct job jobs[4];
	run(4, SLOW_MS, body_invalid, NULL, jobs);
	UNIT_CHECK(all_ok(jobs, 4),
		   "bad arguments (collectives, exchanges): COMM_INVALID, then the next collective and exchange work");
	for (int r = 0; r < 4; r++)
		free(jobs[r].out);
}

int main(void)
{
	test_collectives();
	test_faults();
	test_invalid();
	return unit_done();
}
