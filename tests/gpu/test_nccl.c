/* test_nccl.c — the nccl backend on this machine's GPUs, one rank per GPU:
 *
 *   build/tests/gpu/test_nccl                                      # world 1
 *   mpirun -np N --allow-run-as-root build/tests/gpu/test_nccl     # N ranks, N GPUs
 *
 * Every collective runs on device buffers filled from the host patterns of
 * tests/comm_data.h, on the world group, a group of all ranks, a group of
 * one and (even worlds) pairs. Receive buffers start poisoned with 0xff and
 * the layouts leave gaps, so a byte not delivered, or written into a gap,
 * shows. At world 1 the collectives are self-copies and one-rank NCCL calls,
 * exact all the same. Then the failure paths: bad arguments (a rank that
 * does not exist, host memory, a group never prepared) are COMM_INVALID and
 * leave the backend working; a stream that stalls past the deadline fails
 * the call with a timeout naming the op, and every later call fails at
 * once; fail() does the same with its reason.
 *
 * A check passes when it passed on every rank; rank 0 prints TAP and
 * "# N passed, N failed". Exit: 0, 1 on a failed check, 77 (skip) without a
 * CUDA device or with fewer GPUs than ranks on a node. */
#include <float.h>
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime_api.h>

#include "runtime/comm.h"
#include "runtime/cuda/cuda_api.h"

#ifdef DTPC_HAVE_NCCL
#include "tests/comm_data.h"
#include "tests/unit/unit.h"

enum { MAXR = 64, TIMEOUT_MS = 60000, STALL_TIMEOUT_MS = 300, STALL_MS = 1500 };

static int rank, world = 1;
static bool with_mpi;
static struct comm *C;

/* A check passes when it passed on every rank; rank 0 reports it. */
#define CHECK(cond, ...)                                                                          \
	do {                                                                                      \
		int ok_ = (cond);                                                                 \
		if (with_mpi)                                                                     \
			MPI_Allreduce(MPI_IN_PLACE, &ok_, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD); \
		if (rank == 0)                                                                    \
			UNIT_CHECK(ok_, __VA_ARGS__);                                             \
	} while (0)

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static struct comm_tag tag(uint32_t op, const char *what)
{
	return (struct comm_tag){ .op = op, .what = what };
}

/* ---- device memory ------------------------------------------------------------------- */

static void cuda_or_die(cudaError_t e, const char *what)
{
	if (e == cudaSuccess)
		return;
	fprintf(stderr, "test_nccl: rank %d: %s: %s\n", rank, what, cudaGetErrorString(e));
	exit(1);
}

static void *dalloc(size_t bytes)
{
	void *p = NULL;
	cuda_or_die(cudaMalloc(&p, bytes ? bytes : 1), "cudaMalloc");
	return p;
}

/* Device memory, every byte 0xff. */
static void *dpoisoned(size_t bytes)
{
	void *p = dalloc(bytes);
	cuda_or_die(cudaMemset(p, 0xff, bytes ? bytes : 1), "cudaMemset");
	return p;
}

static void up(void *d, const void *h, size_t bytes)
{
	cuda_or_die(cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice), "upload");
	/* pageable uploads may return before the copy lands */
	cuda_or_die(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
}

static void *down(const void *d, size_t bytes)
{
	void *h = malloc(bytes ? bytes : 1);
	cuda_or_die(cudaMemcpy(h, d, bytes, cudaMemcpyDeviceToHost), "download");
	return h;
}

static long poisoned_wrong(const uint8_t *p, size_t len)
{
	long bad = 0;
	for (size_t i = 0; i < len; i++)
		bad += p[i] != 0xff;
	return bad;
}

/* Says why a call failed (TAP diagnostics). */
static long call_failed(int st)
{
	printf("# rank %d: status %d: %s\n", rank, st, g_error()->msg);
	return -1;
}

/* ---- collectives, checked: each returns the wrong bytes (or -1 on an error) -------- */

enum layout { UNEVEN, EQUAL, EQUAL_GAPS };

static long t_allgatherv(const struct comm_group *g, uint32_t op, uint64_t seed, size_t scale,
			 enum layout lay, bool in_place)
{
	/* gapped layouts also start 2 bytes in: never contiguous, not even
	 * for one member */
	size_t counts[MAXR], displs[MAXR], gap = lay == EQUAL ? 0 : 3, lead = lay == EQUAL ? 0 : 2;
	size_t total = lead;
	for (int i = 0; i < g->n; i++) {
		counts[i] = lay != UNEVEN ? scale
			  : i == 1        ? 0
					  : scale * (size_t)(3 + 2 * i) + 7 * (size_t)i;
		displs[i] = total;
		total += counts[i] + gap;
	}
	size_t mine = counts[g->me];
	uint8_t *h = malloc(mine + 1);
	fill(h, mine, seed, (uint64_t)rank);
	uint8_t *recv = dpoisoned(total), *send = in_place ? recv + displs[g->me] : dalloc(mine);
	up(send, h, mine);
	free(h);
	long bad;
	int st = C->ops->allgatherv(C, g, tag(op, "all_gather x"), send, recv, counts, displs);
	if (!st)
		st = comm_complete(C); /* the collective may still run on the stream */
	if (st) {
		bad = call_failed(st);
	} else {
		uint8_t *got = down(recv, total);
		bad = poisoned_wrong(got, lead);
		for (int i = 0; i < g->n; i++) {
			bad += wrong_bytes(got + displs[i], counts[i], seed, (uint64_t)g->ranks[i]);
			bad += poisoned_wrong(got + displs[i] + counts[i], gap);
		}
		free(got);
	}
	if (!in_place)
		cudaFree(send);
	cudaFree(recv);
	return bad;
}

/* Tolerance: (P - 1) * FLT_EPSILON * sum |x|, one rounding per addition. */
static long t_allreduce(const struct comm_group *g, uint32_t op, uint64_t seed, size_t n)
{
	float *h = malloc((n ? n : 1) * sizeof *h);
	for (size_t i = 0; i < n; i++)
		h[i] = float_at(seed, rank, i);
	float *buf = dalloc(n * sizeof *buf);
	up(buf, h, n * sizeof *h);
	free(h);
	long bad;
	int st = C->ops->allreduce_f32(C, g, tag(op, "all_reduce x"), buf, n);
	if (!st)
		st = comm_complete(C);
	if (st) {
		bad = call_failed(st);
	} else {
		float *got = down(buf, n * sizeof *buf);
		bad = 0;
		for (size_t i = 0; i < n; i++) {
			double ref = 0, mag = 0;
			for (int m = 0; m < g->n; m++) {
				double x = float_at(seed, g->ranks[m], i);
				ref += x;
				mag += fabs(x);
			}
			bad += fabs(got[i] - ref) > (g->n - 1) * (double)FLT_EPSILON * mag;
		}
		free(got);
	}
	cudaFree(buf);
	return bad;
}

/* Piece i: even (scale floats each: ncclReduceScatter) or uneven with piece
 * 1 empty (grouped ncclReduce); my sum against a float64 sum with
 * t_allreduce's bound, and the poisoned floats after recv untouched.
 * `control`: the reference leaves member 0's terms out; returns the
 * elements that still passed (0 when the check can fail). */
static long t_reduce_scatter(const struct comm_group *g, uint32_t op, uint64_t seed, size_t scale,
			     bool even, bool control)
{
	size_t counts[MAXR] = { 0 }, total, lo;
	size_t mine = rs_layout(g, scale, even, counts, &lo, &total);
	float *h = malloc((total ? total : 1) * sizeof *h);
	for (size_t i = 0; i < total; i++)
		h[i] = float_at(seed, rank, i);
	float *send = dalloc(total * sizeof *send), *recv = dpoisoned((mine + 3) * sizeof *recv);
	up(send, h, total * sizeof *h);
	free(h);
	long bad;
	int st = C->ops->reduce_scatter_f32(C, g, tag(op, "reduce_scatter x"), send, recv, counts);
	if (!st)
		st = comm_complete(C);
	if (st) {
		bad = call_failed(st);
	} else {
		float *got = down(recv, (mine + 3) * sizeof *recv);
		bad = rs_wrong(seed, g, lo, mine, got, control);
		bad += poisoned_wrong((const uint8_t *)(got + mine), 3 * sizeof *got);
		free(got);
	}
	cudaFree(send);
	cudaFree(recv);
	return bad;
}

static long t_alltoallv(const struct comm_group *g, uint32_t op, uint64_t seed, size_t scale)
{
	size_t sc[MAXR], sd[MAXR], rc[MAXR], rd[MAXR], stot, rtot;
	a2a_layout(g->me, g->n, scale, sc, sd, rc, rd, &stot, &rtot);
	uint8_t *h = calloc(1, stot + 1);
	for (int k = 0; k < g->n; k++)
		fill(h + sd[k], sc[k], seed, (uint64_t)(rank * 64 + g->ranks[k]));
	uint8_t *send = dalloc(stot), *recv = dpoisoned(rtot);
	up(send, h, stot);
	free(h);
	long bad;
	int st = C->ops->alltoallv(C, g, tag(op, "all_to_all x"), send, sc, sd, recv, rc, rd);
	if (!st)
		st = comm_complete(C);
	if (st) {
		bad = call_failed(st);
	} else {
		uint8_t *got = down(recv, rtot);
		bad = 0;
		for (int k = 0; k < g->n; k++) {
			bad += wrong_bytes(got + rd[k], rc[k], seed, (uint64_t)(g->ranks[k] * 64 + rank));
			bad += poisoned_wrong(got + rd[k] + rc[k], 3);
		}
		free(got);
	}
	cudaFree(send);
	cudaFree(recv);
	return bad;
}

/* Two shifts in flight at once (K and V of ring attention), then waited
 * for in order; each receives the left neighbour's chunk. */
static long t_shift(const struct comm_group *g, uint32_t op, uint64_t seed, size_t scale)
{
	int left = g->ranks[(g->me + g->n - 1) % g->n];
	size_t sb[2] = { chunk_size(rank, scale), chunk_size(rank, scale / 2) };
	size_t rb[2] = { chunk_size(left, scale), chunk_size(left, scale / 2) };
	uint8_t *send[2], *recv[2];
	struct comm_request *req[2] = { NULL, NULL };
	long bad = 0;
	int started = 0;
	for (int k = 0; k < 2; k++) {
		uint8_t *h = malloc(sb[k]);
		fill(h, sb[k], seed + (uint64_t)k, (uint64_t)rank);
		send[k] = dalloc(sb[k]);
		up(send[k], h, sb[k]);
		free(h);
		recv[k] = dpoisoned(rb[k] + 3);
	}
	for (int k = 0; k < 2 && !bad; k++) {
		int st = comm_shift_start(C, g, tag(op + (uint32_t)k, k ? "shift v" : "shift k"),
					     send[k], sb[k], recv[k], rb[k], &req[k]);
		if (st)
			bad = call_failed(st);
		else
			started++;
	}
	for (int k = 0; k < started; k++) {
		int st = C->ops->exchange_wait(C, req[k]);
		if (st && !bad)
			bad = call_failed(st);
	}
	int st = started ? comm_complete(C) : COMM_OK;
	if (st && !bad)
		bad = call_failed(st);
	for (int k = 0; k < 2 && !bad; k++) {
		uint8_t *got = down(recv[k], rb[k] + 3);
		bad += wrong_bytes(got, rb[k], seed + (uint64_t)k, (uint64_t)left);
		bad += poisoned_wrong(got + rb[k], 3);
		free(got);
	}
	for (int k = 0; k < 2; k++) {
		cudaFree(send[k]);
		cudaFree(recv[k]);
	}
	return bad;
}

/* One exchange of pattern pat (tests/comm_data.h) on device buffers;
 * receives poisoned with 3 guard bytes after each. Zero-byte messages move
 * nothing: their guards stay poisoned. */
static long t_exchange(const struct comm_group *g, uint32_t op, uint64_t seed, int pat,
		       size_t scale)
{
	int n = g->n, ns = 0, nr = 0;
	struct comm_p2p sends[MAXR] = { { 0 } }, recvs[MAXR] = { { 0 } };
	for (int k = 0; k < n; k++) {
		long b = xp_bytes(pat, n, g->me, k, scale);
		if (b < 0)
			continue;
		uint8_t *h = malloc((size_t)b + 1);
		fill(h, (size_t)b, seed, xp_stream(rank, g->ranks[k]));
		sends[ns] = (struct comm_p2p){ k, dalloc((size_t)b), (size_t)b };
		up(sends[ns++].buf, h, (size_t)b);
		free(h);
	}
	for (int i = 0; i < n; i++) {
		long b = xp_bytes(pat, n, i, g->me, scale);
		if (b >= 0)
			recvs[nr++] = (struct comm_p2p){ i, dpoisoned((size_t)b + 3), (size_t)b };
	}
	struct comm_request *req;
	long bad = 0;
	int st = C->ops->exchange_start(C, g, tag(op, "exchange x"), sends, ns, recvs, nr, &req);
	if (!st)
		st = C->ops->exchange_wait(C, req);
	if (!st)
		st = comm_complete(C);
	if (st)
		bad = call_failed(st);
	for (int k = 0; k < nr && !bad; k++) {
		uint8_t *got = down(recvs[k].buf, recvs[k].bytes + 3);
		bad += wrong_bytes(got, recvs[k].bytes, seed, xp_stream(g->ranks[recvs[k].peer], rank));
		bad += poisoned_wrong(got + recvs[k].bytes, 3);
		free(got);
	}
	for (int k = 0; k < ns; k++)
		cudaFree(sends[k].buf);
	for (int k = 0; k < nr; k++)
		cudaFree(recvs[k].buf);
	return bad;
}

/* A pipeline 0 -> 1 -> ... along g: each stage involves two members. */
static long t_chain(const struct comm_group *g, uint32_t op, uint64_t seed, size_t bytes)
{
	uint8_t *h = malloc(bytes + 3);
	fill(h, bytes, seed, (uint64_t)g->ranks[0]);
	uint8_t *block = dpoisoned(bytes + 3);
	if (g->me == 0)
		up(block, h, bytes);
	long bad = 0;
	struct comm_request *req;
	int st = COMM_OK;
	if (g->me > 0) {
		struct comm_p2p in = { g->me - 1, block, bytes };
		st = C->ops->exchange_start(C, g, tag(op, "pipeline"), NULL, 0, &in, 1, &req);
		if (!st)
			st = C->ops->exchange_wait(C, req);
	}
	if (!st && g->me < g->n - 1) {
		/* c->stream waits for the receive: the send after it is ordered */
		struct comm_p2p out = { g->me + 1, block, bytes };
		st = C->ops->exchange_start(C, g, tag(op, "pipeline"), &out, 1, NULL, 0, &req);
		if (!st)
			st = C->ops->exchange_wait(C, req);
	}
	if (!st)
		st = comm_complete(C);
	if (st) {
		bad = call_failed(st);
	} else {
		uint8_t *got = down(block, bytes + 3);
		bad = wrong_bytes(got, bytes, seed, (uint64_t)g->ranks[0]) + poisoned_wrong(got + bytes, 3);
		free(got);
	}
	free(h);
	cudaFree(block);
	return bad;
}

/* ---- the groups ------------------------------------------------------------------------ */

enum { ALL, SELF, PAIR, NGROUPS };

/* The graph groups as this rank sees them: ALL (every rank, id 0), SELF
 * (just me, id 1), PAIR (ranks 2k and 2k + 1, id 2; even worlds only). */
static int make_groups(struct comm_group *gs, int *all, int *self, int *pair)
{
	for (int i = 0; i < world; i++)
		all[i] = i;
	*self = rank;
	pair[0] = rank & ~1;
	pair[1] = rank | 1;
	gs[ALL] = (struct comm_group){ .id = 0, .n = world, .me = rank, .ranks = all };
	gs[SELF] = (struct comm_group){ .id = 1, .n = 1, .me = 0, .ranks = self };
	gs[PAIR] = (struct comm_group){ .id = 2, .n = 2, .me = rank & 1, .ranks = pair };
	return world % 2 == 0 ? 3 : 2;
}


/* ---- failure paths ---------------------------------------------------------------------- */

static void sleep_on_stream(void *ms)
{
	long t = (long)(intptr_t)ms;
	struct timespec ts = { t / 1000, (t % 1000) * 1000000L };
	nanosleep(&ts, NULL);
}

static void t_invalid(struct comm_group *gs)
{
	float *buf = dalloc(64 * sizeof *buf);
	int ghost = world; /* no such rank */
	struct comm_group bad = { .id = 0, .n = 1, .me = 0, .ranks = &ghost };
	double t0 = now();
	int st = C->ops->allreduce_f32(C, &bad, tag(90, "all_reduce ghost"), buf, 64);
	CHECK(st == COMM_INVALID && now() - t0 < 0.1,
	      "a group naming rank %d of a world of %d is COMM_INVALID at once (%d: %s)", ghost,
	      world, st, g_error()->msg);

	float host[64] = { 0 };
	st = C->ops->allreduce_f32(C, &gs[ALL], tag(91, "all_reduce host"), host, 64);
	CHECK(st == COMM_INVALID && strstr(g_error()->msg, "host memory"),
	      "host memory is COMM_INVALID (%s)", g_error()->msg);

	struct comm_group unprepared = gs[SELF];
	unprepared.id = 99;
	st = C->ops->allreduce_f32(C, &unprepared, tag(92, "all_reduce unprepared"), buf, 64);
	CHECK(st == COMM_INVALID && strstr(g_error()->msg, "was not prepared"),
	      "a group id never prepared is COMM_INVALID (%s)", g_error()->msg);

	int off[MAXR];
	for (int i = 0; i < world; i++)
		off[i] = world - 1 - i;
	struct comm_group wrong_world = { .id = -1, .n = world, .me = world - 1 - rank, .ranks = off };
	st = C->ops->allreduce_f32(C, &wrong_world, tag(93, "all_reduce reversed"), buf, 64);
	CHECK(world == 1 || st == COMM_INVALID,
	      "group id -1 must be the world in rank order (%d: %s)", st, world > 1 ? g_error()->msg : "");
	struct comm_p2p out = { world, buf, 16 }, hostbuf = { 0, host, 16 }, self = { 0, buf, 16 };
	struct comm_request *req;
	st = C->ops->exchange_start(C, &gs[ALL], tag(96, "exchange ghost"), &out, 1, NULL, 0, &req);
	CHECK(st == COMM_INVALID && strstr(g_error()->msg, "names member"),
	      "an exchange with a member that does not exist is COMM_INVALID (%s)", g_error()->msg);
	st = C->ops->exchange_start(C, &gs[SELF], tag(97, "exchange host"), &self, 1, &hostbuf, 1, &req);
	CHECK(st == COMM_INVALID && strstr(g_error()->msg, "host memory"),
	      "an exchange into host memory is COMM_INVALID (%s)", g_error()->msg);
	cudaFree(buf);
	CHECK(t_allreduce(&gs[ALL], 94, 77, 4096) == 0, "the backend works after bad arguments");
}

/* A second communicator with a short deadline, whose stream sleeps longer
 * than it: the collective on the group of one must time out. */
static void t_stall(void)
{
	struct comm *c2 = nccl_comm_create(STALL_TIMEOUT_MS);
	CHECK(c2 != NULL, "a second communicator with a %d ms deadline (%s)", STALL_TIMEOUT_MS,
	      c2 ? "ok" : g_error()->msg);
	if (!c2)
		return;
	int self = rank;
	struct comm_group one = { .id = 0, .n = 1, .me = 0, .ranks = &self };
	int st = c2->ops->prepare(c2, &one, 1);
	CHECK(st == COMM_OK, "prepare a group of one (%s)", st ? g_error()->msg : "ok");
	cudaStream_t s;
	cuda_or_die(cudaStreamCreate(&s), "cudaStreamCreate");
	c2->stream = s; /* as a session sets its compute stream */
	cuda_or_die(cudaLaunchHostFunc(s, sleep_on_stream, (void *)(intptr_t)STALL_MS),
		    "cudaLaunchHostFunc");
	float *buf = dalloc(256 * sizeof *buf);
	double t0 = now();
	st = c2->ops->allreduce_f32(c2, &one, tag(42, "all_reduce stall"), buf, 256);
	double issue = now() - t0;
	CHECK(st == COMM_OK && issue < 0.1,
	      "a collective behind a stalled stream returns at once (%.3f s): the host does not wait", issue);
	st = comm_complete(c2);
	double t = now() - t0;
	char want[64];
	snprintf(want, sizeof want, "timed out after %d ms", STALL_TIMEOUT_MS);
	CHECK(st == COMM_FAILED && strstr(g_error()->msg, want) && strstr(g_error()->msg, "op 42 (all_reduce stall)") &&
		      t >= STALL_TIMEOUT_MS * 1e-3 && t < STALL_MS * 1e-3,
	      "complete() on a stalled stream times out after %.2f s: %s", t, g_error()->msg);
	char first[G_ERROR_MSG];
	snprintf(first, sizeof first, "%s", g_error()->msg);
	t0 = now();
	st = c2->ops->allreduce_f32(c2, &one, tag(43, "all_reduce after"), buf, 256);
	t = now() - t0;
	CHECK(st == COMM_FAILED && !strcmp(g_error()->msg, first) && t < 0.05,
	      "the next call fails at once (%.3f s) with the first message", t);
	cuda_or_die(cudaStreamSynchronize(s), "cudaStreamSynchronize");
	t0 = now();
	c2->ops->free(c2);
	CHECK(now() - t0 < 10, "free after a timeout takes %.2f s", now() - t0);
	cudaStreamDestroy(s);
	cudaFree(buf);
}

/* Collectives and an exchange issued behind a sleep on the compute stream
 * return at once: the host does not wait for the GPU. complete() then waits
 * (about the rest of the sleep) and the results are right. Every rank
 * sleeps, so no collective waits for a peer. On the world group: NCCL
 * calls even at world 1. */
static void t_async(const struct comm_group *g)
{
	size_t n = 1 << 16, cnt[MAXR], dsp[MAXR];
	float *h = malloc(n * sizeof *h);
	for (size_t i = 0; i < n; i++)
		h[i] = float_at(5, rank, i);
	float *buf = dalloc(n * sizeof *buf);
	up(buf, h, n * sizeof *h);
	uint8_t *gat = dpoisoned((size_t)world * 1000), *hb = malloc(1000);
	fill(hb, 1000, 6, (uint64_t)rank);
	up(gat + (size_t)rank * 1000, hb, 1000);
	for (int i = 0; i < world; i++)
		cnt[i] = 1000, dsp[i] = (size_t)i * 1000;
	int left = (g->me + g->n - 1) % g->n;
	uint8_t *sbuf = dalloc(4096), *rbuf = dpoisoned(4096);
	fill(hb, 1000, 7, (uint64_t)rank);
	up(sbuf, hb, 1000);
	if (with_mpi)
		MPI_Barrier(MPI_COMM_WORLD);
	cuda_or_die(cudaLaunchHostFunc((cudaStream_t)C->stream, sleep_on_stream, (void *)(intptr_t)STALL_MS),
		    "cudaLaunchHostFunc");
	double t0 = now();
	struct comm_request *req = NULL;
	int st = C->ops->allreduce_f32(C, g, tag(200, "all_reduce async"), buf, n);
	if (!st)
		st = C->ops->allgatherv(C, g, tag(201, "all_gather async"), gat + dsp[rank], gat, cnt, dsp);
	if (!st)
		st = comm_shift_start(C, g, tag(202, "shift async"), sbuf, 1000, rbuf, 1000, &req);
	if (!st)
		st = C->ops->exchange_wait(C, req);
	double issue = now() - t0;
	if (!st)
		st = comm_complete(C);
	double total = now() - t0;
	long bad = st ? call_failed(st) : 0;
	if (!st) {
		float *got = down(buf, n * sizeof *buf);
		for (size_t i = 0; i < n; i++) {
			double ref = 0, mag = 0;
			for (int m = 0; m < world; m++) {
				ref += float_at(5, m, i);
				mag += fabs(float_at(5, m, i));
			}
			bad += fabs(got[i] - ref) > (world - 1) * (double)FLT_EPSILON * mag;
		}
		free(got);
		uint8_t *gb = down(gat, (size_t)world * 1000), *rb = down(rbuf, 4096);
		for (int m = 0; m < world; m++)
			bad += wrong_bytes(gb + (size_t)m * 1000, 1000, 6, (uint64_t)m);
		bad += wrong_bytes(rb, 1000, 7, (uint64_t)g->ranks[left]) + poisoned_wrong(rb + 1000, 3096);
		free(gb), free(rb);
	}
	CHECK(bad == 0 && issue < 0.3 * STALL_MS * 1e-3 && total >= 0.9 * STALL_MS * 1e-3,
	      "behind a %d ms sleep on the stream: allreduce, allgatherv and a shift issued in %.3f s, complete() after %.3f s, results right (%ld wrong)",
	      STALL_MS, issue, total, bad);
	free(h), free(hb);
	cudaFree(buf), cudaFree(gat), cudaFree(sbuf), cudaFree(rbuf);
}

/* A peer that stops after the communicator works: the collective still
 * returns at once on the others, and complete() reports the op, the group
 * and the ranks waited for within the (short) timeout. The last rank is
 * the one that stops; it calls fail() afterwards, so its free is quick. */
static void t_peer_stops(void)
{
	if (world < 2) {
		if (rank == 0)
			printf("# a stopped peer: needs 2 ranks or more (mpirun -np 2)\n");
		return;
	}
	struct comm *c2 = nccl_comm_create(STALL_TIMEOUT_MS);
	CHECK(c2 != NULL, "a second communicator of %d ranks with a %d ms deadline (%s)", world,
	      STALL_TIMEOUT_MS, c2 ? "ok" : g_error()->msg);
	if (!c2)
		return;
	int all[MAXR];
	for (int i = 0; i < world; i++)
		all[i] = i;
	struct comm_group g = { .id = 0, .n = world, .me = rank, .ranks = all };
	float *buf = dalloc(4096 * sizeof *buf);
	cuda_or_die(cudaMemset(buf, 0, 4096 * sizeof *buf), "cudaMemset");
	cuda_or_die(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
	/* NCCL connects a communicator's peers at its first collective */
	int st = c2->ops->prepare(c2, &g, 1);
	if (!st)
		st = c2->ops->allreduce_f32(c2, &g, tag(43, "all_reduce warm-up"), buf, 4096);
	if (!st)
		st = comm_complete(c2);
	CHECK(st == COMM_OK, "prepare and a first allreduce on it (%s)", st ? g_error()->msg : "ok");
	bool stops = rank == world - 1, good = true;
	double issue = 0, waited = 0;
	if (!st && !stops) {
		double t0 = now();
		st = c2->ops->allreduce_f32(c2, &g, tag(44, "all_reduce peer stops"), buf, 4096);
		issue = now() - t0;
		int st2 = comm_complete(c2);
		waited = now() - t0;
		char want[160], who[16];
		snprintf(want, sizeof want, "timed out after %d ms in op 44 (all_reduce peer stops)",
			 STALL_TIMEOUT_MS);
		snprintf(who, sizeof who, " %d]", world - 1);
		good = st == COMM_OK && issue < 0.1 && st2 == COMM_FAILED && strstr(g_error()->msg, want) &&
		       strstr(g_error()->msg, "waiting for ranks") && strstr(g_error()->msg, who) &&
		       waited >= STALL_TIMEOUT_MS * 1e-3 && waited < STALL_TIMEOUT_MS * 1e-3 + 2;
		if (!good)
			printf("# rank %d: %d then %d after %.3f s: %s\n", rank, st, st2, waited, g_error()->msg);
	}
	CHECK(good, "rank %d stops: the others' allreduce returns in %.3f s and complete() fails after %.3f s naming the op and rank %d",
	      world - 1, issue, waited, world - 1);
	if (with_mpi)
		MPI_Barrier(MPI_COMM_WORLD);
	if (stops)
		c2->ops->fail(c2, "stopped on purpose (test)");
	double t0 = now();
	c2->ops->free(c2);
	CHECK(now() - t0 < 10, "free after a stopped peer takes %.2f s", now() - t0);
	cudaFree(buf);
}

static void t_fail(struct comm_group *gs)
{
	float *buf = dalloc(64 * sizeof *buf);
	C->ops->fail(C, "kernel error: NaN in blocks.3 (on purpose)");
	char want[96];
	snprintf(want, sizeof want, "rank %d failed: kernel error: NaN in blocks.3", rank);
	double t0 = now();
	int st = C->ops->allreduce_f32(C, &gs[ALL], tag(95, "all_reduce after fail"), buf, 64);
	CHECK(st == COMM_FAILED && strstr(g_error()->msg, want) && now() - t0 < 0.05,
	      "after fail() every call fails at once with its reason (%s)", g_error()->msg);
	cudaFree(buf);
}

/* ---- main -------------------------------------------------------------------------------- */

static int finish(int status)
{
	if (rank == 0) {
		status = unit_done() || status;
		printf("# %d passed, %d failed\n", unit_n - unit_failed, unit_failed);
	}
	if (with_mpi) {
		MPI_Bcast(&status, 1, MPI_INT, 0, MPI_COMM_WORLD);
		MPI_Finalize();
	}
	return status;
}

static int skip(const char *why)
{
	if (rank == 0)
		printf("# SKIP %s\n1..0\n", why);
	if (with_mpi)
		MPI_Finalize();
	return 77;
}

int main(void)
{
	if (getenv("OMPI_COMM_WORLD_SIZE")) {
		/* ours, so the backend leaves MPI alive for the checks after its free */
		int provided;
		MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, &provided);
		with_mpi = true;
		MPI_Comm_rank(MPI_COMM_WORLD, &rank);
		MPI_Comm_size(MPI_COMM_WORLD, &world);
	}
	int ndev = 0;
	if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev < 1)
		return skip("no CUDA device");
	const char *ls = getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
	if (ls && atoi(ls) > ndev) {
		char why[96];
		snprintf(why, sizeof why, "%s ranks on this node but %d GPUs", ls, ndev);
		return skip(why);
	}
	if (world > MAXR)
		return skip("more ranks than the test's layouts hold");

	double t0 = now();
	C = nccl_comm_create(TIMEOUT_MS);
	CHECK(C != NULL, "comm_nccl_create: world %d in %.2f s (%s)", world, now() - t0,
	      C ? "ok" : g_error()->msg);
	if (!C)
		return finish(1);
	CHECK(C->rank == rank && C->world == world && C->device >= 0 && C->device < ndev &&
		      !strcmp(C->ops->name, "nccl") && C->ops->device_memory && C->stream,
	      "rank %d of %d on GPU %d of %d, ops \"%s\", device memory, a stream of its own",
	      C->rank, C->world, C->device, ndev, C->ops->name);

	struct comm_group gs[NGROUPS];
	int all[MAXR], self, pair[2];
	int ng = make_groups(gs, all, &self, pair);
	t0 = now();
	int st = C->ops->prepare(C, gs, ng);
	CHECK(st == COMM_OK, "prepare %d groups in %.2f s (%s)", ng, now() - t0, st ? g_error()->msg : "ok");
	st = C->ops->prepare(C, gs, ng);
	CHECK(st == COMM_OK, "prepare again with the same groups (%s)", st ? g_error()->msg : "ok");

	int wranks[MAXR];
	struct comm_group wg = comm_world_group(C, wranks);
	CHECK(t_allgatherv(&wg, 1, 11, 100, EQUAL, false) == 0,
	      "world group: allgatherv, equal pieces (the startup handshake's shape)");

	/* the world group runs on the world communicator (at world 1 too:
	 * one-rank NCCL calls); the prepared groups on theirs, or (SELF) on
	 * none */
	const struct comm_group *each[] = { &wg, &gs[ALL], &gs[SELF], &gs[PAIR] };
	const char *const names[] = { "world group", "all ranks", "a group of one", "pairs" };
	uint32_t op = 100;
	for (int k = 0; k < ng + 1; k++) {
		const struct comm_group *g = each[k];
		const char *name = names[k];
		for (int ip = 0; ip < 2; ip++) {
			CHECK(t_allgatherv(g, op++, 20 + (uint64_t)k, 1000, UNEVEN, ip) == 0,
			      "%s: allgatherv, uneven pieces with gaps%s", name, ip ? ", in place" : "");
			CHECK(t_allgatherv(g, op++, 30 + (uint64_t)k, 4096, EQUAL, ip) == 0,
			      "%s: allgatherv, equal contiguous pieces%s", name, ip ? ", in place" : "");
			CHECK(t_allgatherv(g, op++, 40 + (uint64_t)k, 513, EQUAL_GAPS, ip) == 0,
			      "%s: allgatherv, equal pieces with gaps%s", name, ip ? ", in place" : "");
		}
		CHECK(t_allgatherv(g, op++, 50 + (uint64_t)k, 1 << 20, UNEVEN, false) == 0,
		      "%s: allgatherv, MiBs per member", name);
		CHECK(t_allreduce(g, op++, 60 + (uint64_t)k, 1000) == 0, "%s: allreduce_f32, 1000 floats",
		      name);
		CHECK(t_allreduce(g, op++, 61 + (uint64_t)k, (1 << 22) + 3) == 0,
		      "%s: allreduce_f32, 4 Mi + 3 floats", name);
		CHECK(t_allreduce(g, op++, 62 + (uint64_t)k, 0) == 0, "%s: allreduce_f32, nothing", name);
		CHECK(t_reduce_scatter(g, op++, 64 + (uint64_t)k, 1001, true, false) == 0,
		      "%s: reduce_scatter_f32, equal pieces (ncclReduceScatter)", name);
		CHECK(t_reduce_scatter(g, op++, 65 + (uint64_t)k, 1001, false, false) == 0,
		      "%s: reduce_scatter_f32, uneven pieces, one empty (grouped ncclReduce)", name);
		CHECK(t_reduce_scatter(g, op++, 66 + (uint64_t)k, (1 << 20) + 3, true, false) == 0,
		      "%s: reduce_scatter_f32, 1 Mi + 3 floats per piece", name);
		CHECK(g->n < 2 || t_reduce_scatter(g, op, 67 + (uint64_t)k, 301, false, true) == 0,
		      "%s: negative control: reduce-scatter sums checked without member 0's terms fail",
		      name);
		op++;
		CHECK(t_alltoallv(g, op++, 70 + (uint64_t)k, 1000) == 0,
		      "%s: alltoallv, uneven pieces (some empty) with gaps", name);
		CHECK(t_alltoallv(g, op++, 71 + (uint64_t)k, 300000) == 0, "%s: alltoallv, large pieces",
		      name);
		CHECK(t_shift(g, op, 80 + (uint64_t)k, 5000) == 0,
		      "%s: two ring shifts in flight, uneven chunks", name);
		op += 2;
		CHECK(t_shift(g, op, 90 + (uint64_t)k, 1 << 20) == 0, "%s: ring shifts of MiBs", name);
		op += 2;
	}
	for (int p = 0; p < XP_N; p++) {
		CHECK(t_exchange(&gs[ALL], op++, 300 + (uint64_t)p, p, 1000) == 0,
		      "all ranks: exchange, %s (uneven, zero-byte, self)",
		      p == XP_ALL_PAIRS ? "all pairs" : "a permutation");
		CHECK(t_exchange(&gs[SELF], op++, 310 + (uint64_t)p, p, 1000) == 0,
		      "a group of one: exchange with myself, %s", p == XP_ALL_PAIRS ? "all pairs" : "a permutation");
	}
	CHECK(t_exchange(&gs[ALL], op++, 320, XP_ALL_PAIRS, 1 << 18) == 0, "all ranks: exchange of MiBs");
	CHECK(t_chain(&gs[ALL], op++, 330, 100003) == 0, "all ranks: a 0 -> 1 -> ... pipeline");
	t_invalid(gs);
	t_async(&wg);
	t_stall();
	t_peer_stops();
	t_fail(gs);
	t0 = now();
	C->ops->free(C);
	CHECK(now() - t0 < 10, "free after fail() takes %.2f s", now() - t0);
	return finish(0);
}
#else
int main(void)
{
	printf("# SKIP built without NCCL\n1..0\n");
	return 77;
}
#endif
