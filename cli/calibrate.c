/* calibrate.c — `dtpc calibrate`: measures this machine through libdtpc's
 * own backends and CPU device (the code `dtpc run` executes) and writes a
 * hardware profile in the format of hw/ (the *.json profiles), every number
 * sourced "measured by dtpc calibrate on HOST, DATE". The quantities are the
 * cost model's (docs/cost-model.md):
 *
 * - compute as `dtpc run` does it: for n ranks computing at once (n threads
 *   of one process with --backend local, n of mpirun's processes with mpi),
 *   each with the pool `dtpc run` gives it (the cores divided by the ranks,
 *   at least one thread), the wall time of the slowest rank: GEMM and
 *   attention fits, the bytes per second of each memory-bound kernel, the
 *   cost of the smallest op. One table row per rank count ("by_ranks").
 * - collectives: α and bus bandwidth per kind and group size ("by_group").
 *
 * Every rank of the world measures at once: with the local backend a world
 * of n threads per point; under mpirun the job (a waiting process polls,
 * which would slow those at work, and a run has no idle ranks). */
#include "calibrate.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <inttypes.h>
#include <libgen.h>
#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "args.h"
#include "compiler/diag.h"
#include "median.h"
#include "cost/profile.h"
#include "runtime/comm.h"
#include "runtime/device.h"
#include "runtime/dtpc.h"

static const char *const coll_names[CO_N] = { "all-gather", "all-reduce", "all-to-all",
					      "ring shift" };

/* The memory-bound kernels (enum mop, mop_keys: profile.h) each move the
 * bytes the cost model charges them (their operands and their result). */

#define MAX_SIZES 4
#define MAX_RANKS 16
/* A compute timing lasts at least this long (timed(): several scheduler
 * slices), repeating a short kernel up to MAX_ITERS times. */
#define MIN_TIMING_S 0.03
#define MAX_ITERS 256
#define NLIN 4
#define NATT 4

struct opts {
	bool mpi, quick;
	int ranks;
	const char *out;
};

/* Message sizes (bytes of the collective's result, or of the shifted chunk)
 * and repetitions: a small one fixes α, large ones the bandwidth. */
struct sizes {
	int n, reps;
	size_t bytes[MAX_SIZES];
};

static double clock_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* t = fixed + x / rate by least squares; a negative intercept (noise on a
 * machine whose small cases are nearly free) is refitted through the origin,
 * since the model's fixed time cannot be negative. Collectives: α is real
 * (a barrier's wake-ups). */
struct fit {
	double fixed, rate;
};

static struct fit fit_origin(const double *x, const double *t, int n)
{
	double xx = 0, xt = 0;
	for (int i = 0; i < n; i++)
		xx += x[i] * x[i], xt += x[i] * t[i];
	return (struct fit){ 0, xx / xt };
}

static struct fit fit_line(const double *x, const double *t, int n)
{
	double mx = 0, mt = 0;
	for (int i = 0; i < n; i++)
		mx += x[i] / n, mt += t[i] / n;
	double sxx = 0, sxt = 0;
	for (int i = 0; i < n; i++)
		sxx += (x[i] - mx) * (x[i] - mx), sxt += (x[i] - mx) * (t[i] - mt);
	double slope = sxx > 0 ? sxt / sxx : 0, fixed = mt - slope * mx;
	if (fixed < 0 || slope <= 0)
		return fit_origin(x, t, n);
	return (struct fit){ fixed, 1 / slope };
}

/* Compute kernels are fitted through the origin: a CPU kernel's cost per
 * call (waking the rank's pool) is microseconds, the profile's launch_s.
 * An intercept fitted to four shapes is instead how much less efficient
 * the smallest shape is, and charged to every call it overcharged the many
 * thin GEMMs of a tp or Ulysses split (Flux at tp 4: 28 linears, 41 of the
 * 99 ms predicted; the trace measured 49 ms for all of them).
 *
 * Attention: t = flops / peak + scores * per_score (the softmax's
 * exponentials are per score, not per FLOP, so a small head dimension runs
 * below a large one's FLOP rate), least squares on the two; where one comes
 * out negative (noise), flops / peak alone. */
struct attn_fit {
	double peak, per_score;
};

static struct attn_fit fit_attention(const double *flops, const double *scores, const double *t,
				     int n)
{
	/* scaled columns keep the normal equations well conditioned */
	double sf = flops[n - 1], ss = scores[n - 1], aa = 0, ab = 0, bb = 0, at = 0, bt = 0;
	for (int i = 0; i < n; i++) {
		double a = flops[i] / sf, b = scores[i] / ss;
		aa += a * a, ab += a * b, bb += b * b, at += a * t[i], bt += b * t[i];
	}
	double det = aa * bb - ab * ab;
	if (det > 1e-12 * aa * bb) {
		double xa = (at * bb - bt * ab) / det, xb = (aa * bt - ab * at) / det;
		if (xa > 0 && xb >= 0)
			return (struct attn_fit){ sf / xa, xb / ss };
	}
	return (struct attn_fit){ fit_origin(flops, t, n).rate, 0 };
}

/* ---- timing on every rank at once ----------------------------------------------
 * Every rank of the communicator's world calls timed() for every point;
 * members run fn, the others only join the barriers. A point's time is the
 * slowest member's wall time (a step lasts as long as its slowest rank),
 * median over the repetitions after a warm-up. */

struct timer {
	struct comm *c;
	struct comm_group w;
	uint32_t op; /* the next collective's index, the same on every rank */
};

/* A barrier that also hands every rank the slowest member's time. */
static int slowest(struct timer *T, double mine, double *max)
{
	double all[MAX_RANKS];
	size_t counts[MAX_RANKS], displs[MAX_RANKS];
	for (int i = 0; i < T->w.n; i++)
		counts[i] = sizeof(double), displs[i] = (size_t)i * sizeof(double);
	all[T->w.me] = mine;
	int rc = T->c->ops->allgatherv(T->c, &T->w,
				       (struct comm_tag){ T->op++, "dtpc calibrate: barrier" },
				       &all[T->w.me], all, counts, displs);
	*max = 0;
	for (int i = 0; i < T->w.n; i++)
		*max = all[i] > *max ? all[i] : *max;
	return rc;
}

/* The median over reps of one call of fn on every member at once, after
 * a warm-up call, each rank timing from a barrier before its calls: with
 * `to_barrier` (compute kernels) to a second barrier after them, the
 * longest such interval of any rank (each rank's own clock: the processes
 * of an mpi job need not share one), which is what a step of a run sees
 * between two collectives; without (collectives, which wait for their
 * members themselves, and the smallest op's cost per call, which a
 * barrier's would swamp) to the end of its own calls, the slowest rank's.
 * Timing a kernel's calls alone would not do: where ranks outnumber the
 * cores, a rank the scheduler starts late finishes late without computing
 * for longer, and the slowest looked as fast as the first. With min_s > 0
 * a timing repeats fn until it lasts about min_s (the iterations set from
 * the warm-up, the same on every rank), across several of the scheduler's
 * slices. */
static int timed(struct timer *T, bool member, int (*fn)(void *arg, uint32_t op), void *arg,
		 int reps, double min_s, bool to_barrier, double *out)
{
	double t[16];
	int rc = 0, iters = 1;
	for (int r = -1; r < reps && !rc; r++) { /* r = -1: warm-up (pages, caches) */
		double dt = 0, unused;
		rc = slowest(T, 0, &unused);
		double t0 = clock_s();
		for (int k = 0; k < iters && !rc; k++) {
			uint32_t op = T->op++;
			if (member)
				rc = fn(arg, op);
		}
		if (!rc && to_barrier)
			rc = slowest(T, 0, &unused);
		if (!rc)
			rc = slowest(T, (clock_s() - t0) / iters, &dt);
		if (r < 0 && dt > 0 && min_s > dt)
			iters = min_s / dt > MAX_ITERS ? MAX_ITERS : (int)ceil(min_s / dt);
		if (r >= 0)
			t[r] = dt;
	}
	if (!rc)
		*out = median(t, reps);
	return rc;
}

/* ---- compute: kernels through a CPU device, as a rank of `dtpc run` ----------- */

static const int64_t lin_full[NLIN][3] = { { 512, 256, 256 }, { 2048, 256, 768 },
					   { 2048, 1024, 256 }, { 1024, 256, 1024 } };
static const int64_t lin_quick[NLIN][3] = { { 32, 32, 32 }, { 64, 64, 64 }, { 128, 64, 128 },
					    { 64, 128, 64 } };
/* S (queries = keys), heads, head dim: two head dims, so that the fit can
 * tell the per-score cost from the per-FLOP one */
static const int64_t att_full[NATT][3] = { { 1024, 4, 32 }, { 2048, 4, 32 }, { 1024, 2, 128 },
					   { 2048, 1, 128 } };
static const int64_t att_quick[NATT][3] = { { 32, 2, 16 }, { 64, 2, 16 }, { 48, 1, 32 },
					    { 64, 1, 32 } };

struct ranks_row {
	bool measured;
	int threads;
	struct fit linear;
	struct attn_fit attention;
	double op_bw[M_N]; /* bytes per second by the cost model's count */
	double launch;     /* a 16-float add */
	double lin_t[NLIN], att_t[NATT], op_t[M_N];
};

struct compute {
	bool quick;
	int64_t mop_rows, mop_cols; /* the memory-bound kernels' [rows, cols] */
	struct ranks_row row[MAX_RANKS + 1];
};

/* One rank's device and buffers (sized for the largest case). */
struct kbufs {
	struct dev *d;
	float *a, *b, *c, *x, *y;
	void *ws;           /* attention: the session's workspace (one thread's) */
	int64_t m, k, n;    /* the case: linear m, k, n; attention S, H, D; ops rows, cols */
	int op;             /* enum mop */
};

static int run_linear(void *p, uint32_t op)
{
	struct kbufs *k = p;
	return k->d->ops->linear(k->d, k->a, k->b, NULL, k->c, k->m, k->k, k->n);
}

static int run_attention(void *p, uint32_t op)
{
	struct kbufs *k = p;
	int64_t w = k->k * k->n;
	/* with LSE, as ring attention's steps (plain attention's cost alike) */
	return k->d->ops->attention(k->d, k->a, w, k->b, w, k->c, w, NULL, k->x, k->y, 1, k->m, k->m,
				    k->k, k->n, k->n, k->ws);
}

static int run_mop(void *p, uint32_t op)
{
	struct kbufs *k = p;
	struct dev *d = k->d;
	int64_t rows = k->m, cols = k->n, n = rows * cols, s[1] = { n };
	switch ((enum mop)k->op) {
	case M_LAYER_NORM:
		return d->ops->layer_norm(d, k->a, k->c, rows, cols, 1e-6f, k->b, k->b + cols);
	case M_RMS_NORM:
		return d->ops->rms_norm(d, k->a, k->c, rows, cols, cols, 1e-6f, k->b);
	case M_GELU:
		return d->ops->gelu(d, k->a, k->c, n, true);
	case M_SILU:
		return d->ops->unary(d, OP_silu, k->a, k->c, n);
	case M_ADD:
	case M_MUL:
		return d->ops->binary(d, k->op == M_ADD ? K_ADD : K_MUL, k->a, s, k->b, s, k->c, s, 1);
	case M_MODULATE: /* one shift and scale row per batch: [1, rows, cols] */
		return d->ops->modulate(d, k->a, k->b, k->b + cols, k->c, 1, rows, cols, 0);
	case M_ROPE: /* cols = 4 heads of cols / 4; cos and sin [rows, cols / 4] */
		return d->ops->rope(d, k->a, cols, k->b, k->x, k->c, cols, 1, rows, 4, cols / 4);
	case M_COPY:
		return d->ops->copy2d(d, k->c, cols, k->a, cols, rows, cols);
	case M_LSE_MERGE: /* [1, rows, 4 heads, cols / 4], LSE [1, 4, rows] */
		return d->ops->lse_merge(d, k->c, DTPC_F32, k->x, k->a, k->y, 1, rows, 4, cols / 4);
	case M_N:
		break;
	}
	return 0;
}

/* The bytes the cost model charges each memory-bound kernel: its result
 * and its operands (cost/model.c's op_cost). */
static double mop_bytes(int op, int64_t rows, int64_t cols)
{
	double n = (double)rows * (double)cols, f = 4;
	switch ((enum mop)op) {
	case M_LAYER_NORM:
		return f * (2 * n + 2 * (double)cols);
	case M_RMS_NORM:
		return f * (2 * n + (double)cols);
	case M_GELU:
	case M_SILU:
	case M_COPY:
		return f * 2 * n;
	case M_ADD:
	case M_MUL:
	case M_LSE_MERGE:
		return f * 3 * n;
	case M_MODULATE:
		return f * (2 * n + 2 * (double)cols);
	case M_ROPE:
		return f * (2 * n + 2 * (double)rows * (double)cols / 4);
	case M_N:
		break;
	}
	return 0;
}

static float *filled(size_t n)
{
	float *p = malloc(n * sizeof *p);
	for (size_t i = 0; p && i < n; i++)
		p[i] = (float)((i * 2654435761u) % 1000) / 1000.0f - 0.5f;
	return p;
}

/* The threads a rank of n gets from `dtpc run` here: the cores divided by
 * the ranks, at least one (runtime/device_cpu.c's default for local ranks,
 * cli/run.c's choice under mpirun). */
static int run_threads(int cores, int n)
{
	return cores / n > 1 ? cores / n : 1;
}

/* Every case of the compute table's row for n = the ranks of T's world, all
 * of them computing at once. The row is written by rank 0. */
static int measure_compute(struct timer *T, int cores, struct compute *out)
{
	int n = T->w.n;
	bool q = out->quick;
	const int64_t(*lin)[3] = q ? lin_quick : lin_full;
	const int64_t(*att)[3] = q ? att_quick : att_full;
	size_t big = q ? 1 << 16 : 2 << 20; /* floats: the largest operand of any case */
	struct kbufs k = { .d = dev_cpu_create() };
	struct ranks_row row = { .measured = true, .threads = run_threads(cores, n) };
	int rc = 0, reps = q ? 3 : 5;
	double min_s = q ? 0 : MIN_TIMING_S;
	k.d->ops->threads(k.d, row.threads);
	k.a = filled(big), k.b = filled(big), k.c = filled(big), k.x = filled(big);
	k.y = filled(big);
	/* the largest attention workspace of the cases (the device's pool grows
	 * its own) */
	size_t ws = 0;
	for (int i = 0; i < NATT; i++) {
		size_t w = k.d->ops->attention_workspace(k.d, 1, att[i][0], att[i][0], att[i][1],
							 att[i][2], att[i][2]);
		ws = w > ws ? w : ws;
	}
	k.ws = aligned_alloc(64, (ws + 63) / 64 * 64);
	/* every rank learns whether one could not allocate, so none waits for it */
	double failed = !k.a || !k.b || !k.c || !k.x || !k.y || !k.ws;
	rc = slowest(T, failed, &failed);
	if (!rc && failed)
		rc = comm_errorf(T->c, COMM_FAILED, "a rank ran out of memory for the kernels' buffers");
	for (int i = 0; i < NLIN && !rc; i++) {
		k.m = lin[i][0], k.k = lin[i][1], k.n = lin[i][2];
		rc = timed(T, true, run_linear, &k, reps, min_s, true, &row.lin_t[i]);
	}
	for (int i = 0; i < NATT && !rc; i++) {
		k.m = att[i][0], k.k = att[i][1], k.n = att[i][2];
		rc = timed(T, true, run_attention, &k, reps, min_s, true, &row.att_t[i]);
	}
	k.m = out->mop_rows, k.n = out->mop_cols;
	for (int i = 0; i < M_N && !rc; i++) {
		k.op = i;
		rc = timed(T, true, run_mop, &k, reps, min_s, true, &row.op_t[i]);
		row.op_bw[i] = mop_bytes(i, k.m, k.n) / row.op_t[i];
	}
	k.op = M_ADD, k.m = 1, k.n = 16;
	if (!rc)
		rc = timed(T, true, run_mop, &k, reps, min_s, false, &row.launch);
	k.d->ops->destroy(k.d);
	free(k.a), free(k.b), free(k.c), free(k.x), free(k.y), free(k.ws);
	if (rc)
		return rc;
	double x[NLIN > NATT ? NLIN : NATT], s[NATT];
	for (int i = 0; i < NLIN; i++)
		x[i] = 2.0 * (double)(lin[i][0] * lin[i][1] * lin[i][2]);
	row.linear = fit_origin(x, row.lin_t, NLIN);
	for (int i = 0; i < NATT; i++) {
		s[i] = (double)(att[i][0] * att[i][0] * att[i][1]);
		x[i] = 4.0 * s[i] * (double)att[i][2];
	}
	row.attention = fit_attention(x, s, row.att_t, NATT);
	if (T->c->rank == 0)
		out->row[n] = row;
	return 0;
}

/* The rank counts the table holds: 1 to 4, then 6, 8, 12, 16, and the
 * calibration's own count; others are scaled from the nearest below. */
static bool table_count(int n, int ranks)
{
	return n <= 4 || n == 6 || n == 8 || n == 12 || n == 16 || n == ranks;
}

/* ---- collectives ------------------------------------------------------------ */

struct coll_times {
	double t[CO_N][MAX_RANKS + 1][MAX_SIZES]; /* [kind][group size][size] */
	int at_work[MAX_RANKS + 1];               /* [group size]: ranks in its groups */
};

/* The bytes the cost model charges a member (graph_comm_bytes' convention,
 * the nccl-tests bus factors): what it divides by the bus bandwidth. */
static double bus_bytes(int kind, int n, size_t bytes)
{
	double f = kind == CO_AR ? 2.0 * (n - 1) / n : kind == CO_P2P ? 1.0 : (double)(n - 1) / n;
	return f * (double)bytes;
}

struct coll_case {
	struct comm *c;
	struct comm_group g;
	int kind;
	size_t bytes;
	char *send, *recv;
};

static int one_op(void *p, uint32_t op)
{
	struct coll_case *x = p;
	struct comm *c = x->c;
	const struct comm_group *g = &x->g;
	struct comm_tag tag = { op, "dtpc calibrate" };
	size_t counts[MAX_RANKS], displs[MAX_RANKS];
	size_t part = x->bytes / (size_t)g->n / 4 * 4;
	for (int i = 0; i < g->n; i++)
		counts[i] = part, displs[i] = (size_t)i * part;
	int rc;
	switch (x->kind) {
	case CO_AG:
		rc = c->ops->allgatherv(c, g, tag, x->recv + displs[g->me], x->recv, counts, displs);
		break;
	case CO_AR:
		rc = c->ops->allreduce_f32(c, g, tag, (float *)x->send, x->bytes / 4);
		break;
	case CO_A2A:
		rc = c->ops->alltoallv(c, g, tag, x->send, counts, displs, x->recv, counts, displs);
		break;
	default: {
		struct comm_request *req;
		rc = comm_shift_start(c, g, tag, x->send, x->bytes, x->recv, x->bytes, &req);
		rc = rc ? rc : c->ops->exchange_wait(c, req);
	}
	}
	/* a device backend returns before the transfer ends: time all of it */
	return rc ? rc : comm_complete(c);
}

/* For each group size n in lo..hi, T's world cut into as many groups of n
 * consecutive ranks as it holds, all at work at once (as a run's groups
 * of one axis are); ranks left over wait. */
static int measure_colls(struct timer *T, int lo, int hi, const struct sizes *sz,
			 struct coll_times *out)
{
	int granks[MAX_RANKS], rank = T->c->rank;
	size_t maxb = sz->bytes[sz->n - 1];
	struct coll_case x = { .c = T->c, .send = calloc(maxb, 1), .recv = calloc(maxb, 1) };
	double failed = !x.send || !x.recv;
	int rc = slowest(T, failed, &failed); /* none waits for a rank that could not allocate */
	if (!rc && failed)
		rc = comm_errorf(T->c, COMM_FAILED, "a rank ran out of memory for the messages");
	for (int n = lo; n <= hi && !rc; n++) {
		int base = rank / n * n;
		bool member = rank < T->w.n / n * n;
		for (int i = 0; i < n; i++)
			granks[i] = base + i;
		x.g = (struct comm_group){ .id = n, .n = n, .me = rank - base, .ranks = granks };
		out->at_work[n] = T->w.n / n * n;
		for (int k = 0; k < CO_N && !rc; k++)
			for (int s = 0; s < sz->n && !rc; s++) {
				x.kind = k, x.bytes = sz->bytes[s];
				rc = timed(T, member, one_op, &x, sz->reps, 0, false, &out->t[k][n][s]);
			}
	}
	free(x.send), free(x.recv);
	return rc;
}

/* ---- the local backend: a world of exactly n threads per point ------------------- */

struct local_arg {
	struct comm_local_world *w;
	int rank, n, cores, ranks;
	const struct sizes *sz;
	struct coll_times *ct;
	struct compute *cp;
	int rc;
	char err[G_ERROR_MSG];
};

static void *local_rank(void *p)
{
	struct local_arg *a = p;
	struct comm *c = comm_local_create(a->w, a->rank);
	if (!c) {
		a->rc = COMM_FAILED;
		snprintf(a->err, sizeof a->err, "cannot create rank %d's communicator", a->rank);
		return NULL;
	}
	int wr[MAX_RANKS];
	struct timer T = { .c = c, .w = comm_world_group(c, wr) };
	a->rc = table_count(a->n, a->ranks) ? measure_compute(&T, a->cores, a->cp) : 0;
	if (!a->rc && a->n >= 2)
		a->rc = measure_colls(&T, a->n, a->n, a->sz, a->ct);
	if (a->rc)
		snprintf(a->err, sizeof a->err, "%s", g_error()->msg[0] ? g_error()->msg : "out of memory");
	c->ops->free(c);
	return NULL;
}

/* A world of exactly n threads for n = 1..ranks, so that a point's ranks
 * share the cores as a run on n ranks does. */
static bool local_measure(int ranks, int cores, const struct sizes *sz, struct coll_times *ct,
			  struct compute *cp, char *err, size_t errlen)
{
	for (int n = 1; n <= ranks; n++) {
		struct comm_local_world *w = comm_local_world_create(n, 120000);
		struct local_arg a[MAX_RANKS];
		pthread_t th[MAX_RANKS];
		int started = 0;
		bool ok = w != NULL;
		for (int r = 0; ok && r < n; r++) {
			a[r] = (struct local_arg){ .w = w, .rank = r, .n = n, .cores = cores,
						   .ranks = ranks, .sz = sz, .ct = ct, .cp = cp };
			if (pthread_create(&th[r], NULL, local_rank, &a[r])) {
				snprintf(err, errlen, "cannot start rank %d's thread", r);
				ok = false;
				break;
			}
			started++;
		}
		/* ranks already started fail at their first barrier's timeout
		 * when one could not start */
		for (int r = 0; r < started; r++)
			pthread_join(th[r], NULL);
		for (int r = 0; ok && r < n; r++)
			if (a[r].rc) {
				snprintf(err, errlen, "rank %d: %s", r, a[r].err);
				ok = false;
			}
		if (w)
			comm_local_world_free(w);
		if (!ok)
			return false;
	}
	return true;
}

/* ---- the profile ---------------------------------------------------------------- */

static void put(cJSON *obj, const char *key, double v, const char *src)
{
	cJSON *o = cJSON_AddObjectToObject(obj, key);
	cJSON_AddNumberToObject(o, "value", v);
	cJSON_AddStringToObject(o, "source", src);
}

/* The measured points fitted per kind and group size: links.intra.by_group
 * holds each group size's α and bus bandwidth as measured (n ranks at work);
 * the link's own figures, for a group size the table lacks, are the medians
 * over group sizes with the bandwidth divided by each rank's share of the
 * cores (the cost model multiplies it back). */
static void add_links(cJSON *root, const struct coll_times *ct, const struct sizes *sz, int ranks,
		      int cores, const char *backend, const char *stamp)
{
	cJSON *links = cJSON_AddObjectToObject(root, "links");
	cJSON *intra = cJSON_AddObjectToObject(links, "intra");
	cJSON *raw = cJSON_AddArrayToObject(root, "calibration");
	char src[512], name[96];
	snprintf(name, sizeof name, "%s backend on one machine", backend);
	cJSON_AddStringToObject(intra, "name", name);
	double alphas[CO_N], fa[CO_N][MAX_RANKS + 1], fb[CO_N][MAX_RANKS + 1];
	for (int k = 0; k < CO_N; k++) {
		double a[MAX_RANKS], b[MAX_RANKS];
		int m = 0;
		for (int n = 2; n <= ranks; n++) {
			double x[MAX_SIZES], t[MAX_SIZES];
			double share = (double)cores / ct->at_work[n];
			for (int s = 0; s < sz->n; s++)
				x[s] = bus_bytes(k, n, sz->bytes[s]), t[s] = ct->t[k][n][s];
			/* the bandwidth from the large messages, α what the smallest
			 * takes beyond its bytes' time: a line through all points lets
			 * the large ones' noise swamp a microsecond intercept */
			struct fit f = fit_line(x + 1, t + 1, sz->n - 1);
			f.fixed = t[0] - x[0] / f.rate > 0 ? t[0] - x[0] / f.rate : 0;
			fa[k][n] = f.fixed, fb[k][n] = f.rate;
			a[m] = f.fixed, b[m] = f.rate / share;
			cJSON *row = cJSON_CreateObject();
			cJSON_AddStringToObject(row, "collective", coll_names[k]);
			cJSON_AddNumberToObject(row, "group", n);
			cJSON_AddNumberToObject(row, "ranks_at_work", ct->at_work[n]);
			cJSON *pts = cJSON_AddArrayToObject(row, "points");
			for (int s = 0; s < sz->n; s++) {
				cJSON *p = cJSON_CreateObject();
				cJSON_AddNumberToObject(p, "bytes", (double)sz->bytes[s]);
				cJSON_AddNumberToObject(p, "bus_bytes", x[s]);
				cJSON_AddNumberToObject(p, "seconds", t[s]);
				cJSON_AddItemToArray(pts, p);
			}
			cJSON_AddNumberToObject(row, "alpha_s", f.fixed);
			cJSON_AddNumberToObject(row, "busbw", f.rate);
			cJSON_AddNumberToObject(row, "busbw_per_core_share", b[m]);
			cJSON_AddStringToObject(row, "source", stamp);
			cJSON_AddItemToArray(raw, row);
			m++;
		}
		double am = median(a, m), bm = median(b, m);
		alphas[k] = am;
		snprintf(src, sizeof src,
			 "%s: %s, groups of 2..%d, fitted t = alpha + bus bytes / busbw over %zu..%zu "
			 "bytes; median over group sizes (the points: \"calibration\")",
			 stamp, coll_names[k], ranks, sz->bytes[0], sz->bytes[sz->n - 1]);
		put(intra, coll_alpha_keys[k], am, src);
		snprintf(src, sizeof src,
			 "%s: %s, groups of 2..%d, fitted busbw divided by each rank's share of the "
			 "%d cores; median over group sizes (the points: \"calibration\")",
			 stamp, coll_names[k], ranks, cores);
		put(intra, coll_keys[k], bm, src);
	}
	snprintf(src, sizeof src, "%s: median of the four collectives' alpha", stamp);
	put(intra, "alpha_s", median(alphas, CO_N), src);
	/* a property of the backend's code, not a measurement */
	snprintf(src, sizeof src, "written by %s: %s", stamp + strlen("measured by "),
		 strcmp(backend, "mpi")
			 ? "runtime/comm_local.c: a ring shift is copied by the member that waits "
			   "for it first, after its attention, not under it"
			 : "Open MPI (no progress thread) moves a ring shift's large message inside "
			   "MPI calls, i.e. in the wait after the attention, not under it");
	put(intra, "overlap", 0, src);
	cJSON *bg = cJSON_AddArrayToObject(intra, "by_group");
	for (int n = 2; n <= ranks; n++) {
		cJSON *e = cJSON_CreateObject();
		int groups = ct->at_work[n] / n;
		snprintf(src, sizeof src,
			 "%s: %d group%s of %d consecutive ranks at once (%s), %d ranks at work; fitted "
			 "t = alpha + bus bytes / busbw over %zu..%zu bytes, slowest member, median of "
			 "%d (the points: \"calibration\")",
			 stamp, groups, groups > 1 ? "s" : "", n,
			 strcmp(backend, "mpi") ? "a world of as many threads"
						: "of the job's processes; the others wait",
			 ct->at_work[n], sz->bytes[0], sz->bytes[sz->n - 1], sz->reps);
		put(e, "group", n, src);
		put(e, "ranks_at_work", ct->at_work[n], src);
		for (int k = 0; k < CO_N; k++) {
			put(e, coll_alpha_keys[k], fa[k][n], src);
			put(e, coll_keys[k], fb[k][n], src);
		}
		cJSON_AddItemToArray(bg, e);
	}
}

/* dtypes.f32: the table of rates by rank count, and the figures of a
 * profile without one (one core's: the smallest row's rates divided by the
 * cores each of its ranks had, the share scaling of docs/cost-model.md). */
static void add_compute(cJSON *f32, const struct compute *cp, int ranks, int cores,
			const char *stamp)
{
	const bool q = cp->quick;
	const int64_t(*lin)[3] = q ? lin_quick : lin_full;
	const int64_t(*att)[3] = q ? att_quick : att_full;
	char lshapes[160] = "", ashapes[200] = "", src[1280], how[400];
	int len = 0;
	for (int i = 0; i < NLIN; i++)
		len += snprintf(lshapes + len, sizeof lshapes - (size_t)len,
				"%s%" PRId64 "x%" PRId64 "x%" PRId64, i ? ", " : "", lin[i][0],
				lin[i][1], lin[i][2]);
	len = 0;
	for (int i = 0; i < NATT; i++)
		len += snprintf(ashapes + len, sizeof ashapes - (size_t)len,
				"%sS=%" PRId64 " %" PRId64 "x%" PRId64, i ? ", " : "", att[i][0],
				att[i][1], att[i][2]);
	int n1 = 1;
	while (!cp->row[n1].measured)
		n1++;
	const struct ranks_row *one = &cp->row[n1];
	/* the cores a rank of n1 computed on (cost/model.c's rank_cores) */
	double t1 = n1 >= cores ? (double)cores / n1 : (double)(cores / n1);
	cJSON *lin_o = cJSON_AddObjectToObject(f32, "linear");
	snprintf(src, sizeof src,
		 "%s: the %d-rank row of by_ranks with its rates divided by the %.3g cores each "
		 "rank had: one core's, scaled by a rank's share of the cores where dtpc cost "
		 "is given no table",
		 stamp, n1, t1);
	put(lin_o, "peak_flops", one->linear.rate / t1, src);
	put(lin_o, "fixed_s", 0, src);
	cJSON *att_o = cJSON_AddObjectToObject(f32, "attention");
	put(att_o, "peak_flops", one->attention.peak / t1, src);
	put(att_o, "fixed_s", 0, src);
	put(att_o, "score_s", one->attention.per_score * t1, src);
	put(f32, "memory_bytes_per_s", one->op_bw[M_COPY] / t1, src);

	cJSON *tab = cJSON_AddArrayToObject(f32, "by_ranks");
	for (int n = 1; n <= ranks; n++) {
		const struct ranks_row *r = &cp->row[n];
		if (!r->measured)
			continue;
		snprintf(how, sizeof how,
			 "%d rank%s computing at once (%s), %d thread%s each as dtpc run sets them on "
			 "%d cores; wall time of the slowest rank, median of %d",
			 n, n > 1 ? "s" : "", n > 1 ? "the same kernel on each" : "alone", r->threads,
			 r->threads > 1 ? "s" : "", cores, q ? 3 : 5);
		cJSON *e = cJSON_CreateObject();
		snprintf(src, sizeof src, "%s: %s", stamp, how);
		put(e, "ranks", n, src);
		put(e, "threads_per_rank", r->threads, src);
		snprintf(src, sizeof src, "%s: a 16-float add through the CPU device; %s", stamp, how);
		put(e, "launch_s", r->launch, src);
		cJSON *l = cJSON_AddObjectToObject(e, "linear");
		snprintf(src, sizeof src,
			 "%s: the device's linear (sgemm blocks on the rank's pool), m x k x n = %s "
			 "(%.4g, %.4g, %.4g, %.4g s); fitted t = flops / peak; %s",
			 stamp, lshapes, r->lin_t[0], r->lin_t[1], r->lin_t[2], r->lin_t[3], how);
		put(l, "peak_flops", r->linear.rate, src);
		put(l, "fixed_s", 0, src);
		cJSON *a = cJSON_AddObjectToObject(e, "attention");
		snprintf(src, sizeof src,
			 "%s: the device's attention with LSE, %s (heads x head dim) (%.4g, %.4g, "
			 "%.4g, %.4g s); fitted t = flops / peak + scores x score_s; %s",
			 stamp, ashapes, r->att_t[0], r->att_t[1], r->att_t[2], r->att_t[3], how);
		put(a, "peak_flops", r->attention.peak, src);
		put(a, "fixed_s", 0, src);
		put(a, "score_s", r->attention.per_score, src);
		cJSON *o = cJSON_AddObjectToObject(e, "op_bytes_per_s");
		for (int i = 0; i < M_N; i++) {
			snprintf(src, sizeof src,
				 "%s: the device's %s on [%" PRId64 ", %" PRId64 "], %.0f bytes (operands "
				 "and result) in %.4g s; %s",
				 stamp, i == M_COPY ? "copy2d" : mop_keys[i], cp->mop_rows, cp->mop_cols,
				 mop_bytes(i, cp->mop_rows, cp->mop_cols), r->op_t[i], how);
			put(o, mop_keys[i], r->op_bw[i], src);
		}
		snprintf(src, sizeof src, "%s: the copy2d rate of this row (other memory-bound ops)",
			 stamp);
		put(e, "memory_bytes_per_s", r->op_bw[M_COPY], src);
		cJSON_AddItemToArray(tab, e);
	}
}

#define USAGE "usage: dtpc calibrate --backend local|mpi --device cpu [--ranks N] [--quick] " \
	      "-o PROFILE.json"

static void calibrate_usage(void)
{
	puts(USAGE);
}

/* -1: go on; else the exit status (0 after --help) */
static int parse(int argc, char **argv, struct opts *o)
{
	static const char *const backends[] = { "local", "mpi", NULL };
	static const char *const devices[] = { "cpu", NULL };
	int backend = -1, device = 0, ranks = 0;
	const char *none = NULL;
	*o = (struct opts){ .ranks = 8 };
	const struct cli_opt t[] = {
		OPT_SET("--quick", &o->quick),
		OPT_WORD("--backend", &backend, backends),
		OPT_WORD("--device", &device, devices),
		OPT_NUM("--ranks", CLI_INT, &ranks, "2 to 16", 2, MAX_RANKS),
		OPT_STR("-o", &o->out),
		OPT_END,
	};
	int rc = cli_parse(argc, argv, 2, t,
			    &(struct cli_rest){ &none, "argument", .help = calibrate_usage });
	if (rc >= 0)
		return rc;
	if (none)
		return diag_usage_error("calibrate takes no file ('%s'); -o PROFILE.json names "
					"the profile\n" USAGE, none);
	if (backend < 0)
		return diag_usage_error("calibrate: --backend local or mpi (nccl: not measured yet)\n" USAGE);
	if (!o->out)
		return diag_usage_error("calibrate: -o PROFILE.json is required\n" USAGE);
	o->mpi = backend == 1;
	if (o->mpi && ranks)
		return diag_usage_error("calibrate: with --backend mpi the ranks are mpirun's -np\n" USAGE);
	if (ranks)
		o->ranks = ranks;
	return -1;
}

/* Why -o's file cannot be written, or NULL: checked before the measuring
 * (a minute of it) rather than after, without creating or truncating it. */
static const char *unwritable(const char *path)
{
	struct stat st;
	if (!stat(path, &st))
		return S_ISDIR(st.st_mode) ? "a directory" : access(path, W_OK) ? strerror(errno) : NULL;
	if (errno != ENOENT)
		return strerror(errno);
	char *copy = strdup(path);
	const char *why = !copy ? "out of memory" : access(dirname(copy), W_OK | X_OK) ? strerror(errno)
										  : NULL;
	free(copy);
	return why;
}

/* Under mpirun: compute with every process at work (a process waiting in
 * the backend's barrier polls, which would slow the others: a run has no
 * idle ranks), so the table's one row is the job's size; collectives as
 * measure_colls cuts the job. */
static int mpi_measure(struct comm *c, int ranks, int cores, const struct sizes *sz,
		       struct coll_times *ct, struct compute *cp)
{
	int wr[MAX_RANKS];
	struct timer T = { .c = c, .w = comm_world_group(c, wr) };
	int rc = measure_compute(&T, cores, cp);
	return rc ? rc : measure_colls(&T, 2, ranks, sz, ct);
}

int calibrate_main(int argc, char **argv)
{
	struct opts o;
	int rc = parse(argc, argv, &o);
	if (rc >= 0)
		return rc;
	const char *why = unwritable(o.out);
	if (why) {
		fprintf(stderr, "dtpc calibrate: cannot write %s: %s\n", o.out, why);
		return 2;
	}
	struct sizes sz = o.quick ? (struct sizes){ 2, 3, { 4096, 65536 } }
				  : (struct sizes){ 4, 5, { 4096, 262144, 2 << 20, 8 << 20 } };
	struct coll_times *ct = calloc(1, sizeof *ct);
	struct compute *cp = calloc(1, sizeof *cp);
	struct comm *mc = NULL;
	char err[G_ERROR_MSG + 80] = "";
	int cores = (int)sysconf(_SC_NPROCESSORS_ONLN), rank = 0;
	double load_start = -1; /* -1: not known (getloadavg failed) */
	getloadavg(&load_start, 1);
	if (!ct || !cp)
		return free(ct), free(cp), fprintf(stderr, "dtpc calibrate: out of memory\n"), 1;
	cores = cores < 1 ? 1 : cores;
	cp->quick = o.quick;
	/* the memory-bound kernels: 4 MiB of floats, rows of 256 (quick: 16 KiB) */
	cp->mop_rows = o.quick ? 16 : 4096, cp->mop_cols = 256;
	if (o.mpi) {
		/* the backend itself, not a dtpc_comm: the measurements call its
		 * collectives (comm.h), which the public API keeps inside sessions */
		if (!(mc = comm_mpi_create(120000))) {
			fprintf(stderr, "dtpc calibrate: MPI: %s\n", g_error()->msg);
			return free(ct), free(cp), 2;
		}
		rank = mc->rank, o.ranks = mc->world;
		if (o.ranks < 2 || o.ranks > MAX_RANKS) {
			fprintf(stderr, "dtpc calibrate: run it under mpirun -np 2..16\n");
			return mc->ops->free(mc), free(ct), free(cp), 2;
		}
	}
	bool ok = o.mpi ? mpi_measure(mc, o.ranks, cores, &sz, ct, cp) == COMM_OK
			: local_measure(o.ranks, cores, &sz, ct, cp, err, sizeof err);
	if (o.mpi && !ok)
		snprintf(err, sizeof err, "%s", g_error()->msg[0] ? g_error()->msg : "out of memory");
	if (!ok) {
		fprintf(stderr, "dtpc calibrate: %s\n", err);
		if (mc)
			mc->ops->free(mc);
		return free(ct), free(cp), 1;
	}

	rc = 0;
	if (rank == 0) {
		char host[128] = "this machine", date[32], stamp[256], src[512];
		gethostname(host, sizeof host - 1);
		time_t now = time(NULL);
		strftime(date, sizeof date, "%Y-%m-%d %H:%M UTC", gmtime(&now));
		snprintf(stamp, sizeof stamp, "measured by dtpc calibrate on %s, %s", host, date);
		const char *backend = o.mpi ? "mpi" : "local";
		cJSON *j = cJSON_CreateObject();
		char text[512];
		snprintf(text, sizeof text, "%s, %s backend (calibrated)", host, backend);
		cJSON_AddStringToObject(j, "name", text);
		double load_end = -1;
		getloadavg(&load_end, 1);
		char count[48];
		snprintf(count, sizeof count, o.mpi ? "a job of %d processes" : "1..%d ranks", o.ranks);
		snprintf(text, sizeof text,
			 "written by dtpc calibrate --backend %s%s, %s, %d cores, load average %.2f at "
			 "the start and %.2f at the end (other work slows every figure); ranks share "
			 "the cores: dtypes.f32.by_ranks holds each rank's rates while n ranks compute "
			 "at once, links.intra.by_group each group size's collectives",
			 backend, o.quick ? " --quick (tiny sizes: a test, not a calibration)" : "",
			 count, cores, load_start, load_end);
		cJSON_AddStringToObject(j, "description", text);
		snprintf(src, sizeof src, "%s: every rank on this one machine", stamp);
		put(j, "ranks_per_node", 4096, src);
		snprintf(src, sizeof src,
			 "%s: online cores (sysconf); the ranks of a run share them", stamp);
		put(j, "threads_per_node", cores, src);
		snprintf(src, sizeof src, "%s: physical memory (sysconf)", stamp);
		put(j, "memory_bytes",
		    (double)sysconf(_SC_PHYS_PAGES) * (double)sysconf(_SC_PAGESIZE), src);
		int n1 = 1;
		while (!cp->row[n1].measured)
			n1++;
		snprintf(src, sizeof src,
			 "%s: a 16-float add through the CPU device, %d rank%s at once, median", stamp,
			 n1, n1 > 1 ? "s" : "");
		put(j, "launch_s", cp->row[n1].launch, src);
		cJSON_AddStringToObject(j, "default_dtype", "f32");
		cJSON *f32 = cJSON_AddObjectToObject(cJSON_AddObjectToObject(j, "dtypes"), "f32");
		add_compute(f32, cp, o.ranks, cores, stamp);
		add_links(j, ct, &sz, o.ranks, cores, backend, stamp);
		char *out = cJSON_Print(j);
		errno = 0;
		FILE *f = out ? fopen(o.out, "w") : NULL;
		bool written = f && fprintf(f, "%s\n", out) >= 0;
		if (f && fclose(f))
			written = false;
		if (!written) {
			fprintf(stderr, "dtpc calibrate: cannot write %s: %s\n", o.out,
				!out ? "out of memory" : errno ? strerror(errno) : "write error");
			rc = 2;
		}
		free(out);
		cJSON_Delete(j);
	}
	if (mc)
		mc->ops->free(mc);
	free(ct), free(cp);
	return rc;
}
