/* calibrate.c — `dtpc calibrate`: measures this machine through libdtpc's
 * public API only (runtime/dtpc.h: sessions over graphs, the code `dtpc run`
 * executes) and writes a hardware profile in the format of hw/ (the *.json
 * profiles), every number sourced "measured by dtpc calibrate on HOST,
 * DATE". Each measurement is a tiny graph built with the graph layer
 * (calib_graph.c): one op, or one collective over a group, run by a session
 * on every rank. The quantities are the cost model's (docs/cost-model.md):
 *
 * - compute as `dtpc run` does it: for n ranks computing at once (n threads
 *   of one process with --backend local, n of mpirun's processes with mpi),
 *   each with the pool `dtpc run` gives it (the cores divided by the ranks,
 *   at least one thread), the wall time of the slowest rank: GEMM and
 *   attention fits, the bytes per second of each memory-bound kernel, the
 *   cost of one more op in a run. One table row per rank count ("by_ranks").
 * - collectives: α and bus bandwidth per kind and group size ("by_group"),
 *   the backend's transfer alone: a run's fixed cost and the executor's
 *   copies around the transfer (which the cost model charges apart) are
 *   subtracted, the ring shift read from the trace of a ring attention.
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
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "args.h"
#include "calib_graph.h"
#include "compiler/diag.h"
#include "cost/profile.h"
#include "graph/op_attrs.h"
#include "median.h"
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
/* launch_s: the add ops beyond the first in the longer of two chains */
#define CHAIN 16
#define ERR_LEN 512

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

/* ---- a rank: its communicator, its barrier, its error -------------------------
 * Every rank of the world runs every measurement at once. Each builds the
 * same graphs itself (they are deterministic: the sessions' handshake
 * compares their hashes). */

struct rank {
	dtpc_comm *c;
	int rank, world, threads;
	dtpc_local_world *local; /* the local backend's world (its failures abort it) */
	dtpc_graph *bar_g;
	dtpc_session *bar; /* an all-reduce of one float per rank: the barrier */
	char err[ERR_LEN];
};

/* Records this rank's failure (what failed, and the runtime's message
 * where there is one) and fails the local world, so that no rank waits
 * for this one; under mpirun the session calls have marked the rank
 * failed on its communicator already, and a rank failing outside them is
 * seen at the next barrier's exchange (failed()). Returns 1. */
static int rank_fail(struct rank *R, bool api, const char *fmt, ...)
{
	char what[ERR_LEN / 2];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(what, sizeof what, fmt, ap);
	va_end(ap);
	if (!R->err[0])
		snprintf(R->err, sizeof R->err, "%s%s%s", what, api ? ": " : "",
			 api ? dtpc_last_error() : "");
	if (R->local) {
		char why[ERR_LEN + 16];
		snprintf(why, sizeof why, "rank %d: %s", R->rank, R->err);
		dtpc_local_world_abort(R->local, why);
	}
	return 1;
}

/* The barrier with the slowest member's value handed to every rank: the
 * barrier graph's all-reduce sums each rank's value in its own slot. */
static int slowest(struct rank *R, double mine, double *max)
{
	float v[MAX_RANKS] = { 0 };
	const float *all;
	int64_t n = R->world;
	if (n == 1) { /* no one to wait for: the barrier graph of one rank adds the value to itself */
		*max = mine;
		return 0;
	}
	v[R->rank] = (float)mine;
	if (dtpc_session_set_input(R->bar, "value", v, &n, 1) || dtpc_session_run(R->bar) ||
	    dtpc_session_output(R->bar, 0, NULL, &all, NULL, NULL))
		return rank_fail(R, true, "the barrier");
	*max = 0;
	for (int i = 0; i < R->world; i++)
		*max = all[i] > *max ? all[i] : *max;
	return 0;
}

/* Whether any rank failed (bad): every rank learns it, so that none goes
 * on into a collective the failed one will not join. */
static int failed(struct rank *R, bool bad)
{
	double any;
	if (slowest(R, bad, &any))
		return 1;
	if (any > 0 && !bad)
		return rank_fail(R, false, "another rank failed");
	return any > 0;
}

/* One measurement's graph and this rank's session of it. */
struct meas {
	dtpc_graph *g;
	dtpc_session *s;
};

static void meas_close(struct meas *m)
{
	dtpc_session_free(m->s);
	dtpc_graph_free(m->g);
	*m = (struct meas){ 0 };
}

/* b's graph as a session of this rank with the rank's threads, seeded
 * weights and inputs. Collective. */
static int meas_open(struct rank *R, struct cgraph *b, const char *what, struct meas *m)
{
	size_t len;
	void *buf = cg_serialize(b, &len);
	*m = (struct meas){ 0 };
	bool bad = !buf || dtpc_graph_open_buffer(buf, len, &m->g);
	free(buf);
	if (bad)
		rank_fail(R, buf != NULL, "%s: the graph", what);
	if (failed(R, bad))
		return meas_close(m), 1;
	if (dtpc_session_create(m->g, R->c, DTPC_DEVICE_CPU, &m->s) ||
	    dtpc_session_threads(m->s, R->threads) || dtpc_session_bind_weights_seed(m->s, 1) ||
	    dtpc_session_bind_inputs_seed(m->s, 2))
		return rank_fail(R, true, "%s", what), meas_close(m), 1;
	return 0;
}

static int rank_open(struct rank *R)
{
	struct cgraph b;
	int64_t n = R->world;
	cg_init(&b, R->world, R->world);
	int x = cg_tensor(&b, "value", GT_INPUT, 1, &n, -1, 0);
	int y = cg_tensor(&b, "slowest", GT_ACTIVATION, 1, &n, -1, 1);
	cg_op(&b, R->world > 1 ? OP_all_reduce : OP_add, (const int[]){ x, x }, R->world > 1 ? 1 : 2,
	      y, -1);
	size_t len;
	void *buf = cg_serialize(&b, &len);
	/* no barrier to agree on a failure by yet: a rank that fails here
	 * fails the local world, or its mpi job's handshake */
	bool ok = buf && !dtpc_graph_open_buffer(buf, len, &R->bar_g) &&
		  !dtpc_session_create(R->bar_g, R->c, DTPC_DEVICE_CPU, &R->bar) &&
		  /* no pool of its own to wake beside the measured session's */
		  !dtpc_session_threads(R->bar, 1);
	free(buf);
	return ok ? 0 : rank_fail(R, buf != NULL, "the barrier's session");
}

static void rank_close(struct rank *R)
{
	dtpc_session_free(R->bar);
	dtpc_graph_free(R->bar_g);
}

/* The median over reps of one run of s on every rank at once, after a
 * warm-up run, each rank timing from a barrier before its runs: with
 * `to_barrier` (compute kernels) to a second barrier after them, the
 * longest such interval of any rank (each rank's own clock: the processes
 * of an mpi job need not share one), which is what a step of a run sees
 * between two collectives; without (collectives, which wait for their
 * members themselves, and the runs of a chain of tiny ops, which a
 * barrier's would swamp) to the end of its own runs, the slowest rank's.
 * Timing a kernel's runs alone would not do: where ranks outnumber the
 * cores, a rank the scheduler starts late finishes late without computing
 * for longer, and the slowest looked as fast as the first. With min_s > 0
 * a timing repeats the run until it lasts about min_s (the iterations set
 * from the warm-up, the same on every rank), across several of the
 * scheduler's slices. */
static int timed(struct rank *R, dtpc_session *s, int reps, double min_s, bool to_barrier,
		 double *out)
{
	double t[16];
	int rc = 0, iters = 1;
	for (int r = -1; r < reps && !rc; r++) { /* r = -1: warm-up (pages, caches) */
		double dt = 0, unused;
		rc = slowest(R, 0, &unused);
		double t0 = clock_s();
		for (int k = 0; k < iters && !rc; k++)
			if (dtpc_session_run(s))
				rc = rank_fail(R, true, "a run");
		if (!rc && to_barrier)
			rc = slowest(R, 0, &unused);
		if (!rc)
			rc = slowest(R, (clock_s() - t0) / iters, &dt);
		if (r < 0 && dt > 0 && min_s > dt)
			iters = min_s / dt > MAX_ITERS ? MAX_ITERS : (int)ceil(min_s / dt);
		if (r >= 0)
			t[r] = dt;
	}
	if (!rc)
		*out = median(t, reps);
	return rc;
}

/* b's graph opened, timed as timed() does, and closed. */
static int time_graph(struct rank *R, struct cgraph *b, const char *what, int reps, double min_s,
		      bool to_barrier, double *out)
{
	struct meas m;
	if (meas_open(R, b, what, &m))
		return 1;
	int rc = timed(R, m.s, reps, min_s, to_barrier, out);
	meas_close(&m);
	return rc;
}

/* ---- ring attention's parts, from its trace ------------------------------------
 * What a run of a ring attention spends in its parts (runtime/ops/
 * attention.c): a step's K/V shift is the span "kv shift" on the
 * communication row, which holds the step's attention ("attention", the
 * compute row) started after the shift and the wait for it; the public API
 * gives the spans only as a trace file, written to a temporary file and
 * read back. */

#define MAX_RUNS 8

struct ring_parts {
	int runs, steps;
	double comm[MAX_RUNS][MAX_RANKS], compute[MAX_RUNS][MAX_RANKS]; /* seconds */
};

static int ring_trace(struct rank *R, dtpc_session *s, struct ring_parts *p)
{
	char path[] = "/tmp/dtpc-calibrate-XXXXXX";
	int fd = mkstemp(path);
	if (fd < 0)
		return rank_fail(R, false, "a trace file: %s", strerror(errno));
	close(fd);
	FILE *f = dtpc_trace_write(path, &s, 1) ? NULL : fopen(path, "r");
	char *text = NULL;
	long len = -1;
	if (f && !fseek(f, 0, SEEK_END) && (len = ftell(f)) >= 0 && !fseek(f, 0, SEEK_SET) &&
	    (text = malloc((size_t)len + 1)) && fread(text, 1, (size_t)len, f) == (size_t)len)
		text[len] = 0;
	else
		len = -1;
	if (f)
		fclose(f);
	remove(path);
	cJSON *j = len >= 0 ? cJSON_Parse(text) : NULL;
	free(text);
	if (!j)
		return rank_fail(R, !f, "the ring attention's trace");
	const cJSON *ev, *all = cJSON_IsArray(j) ? j : cJSON_GetObjectItem(j, "traceEvents");
	memset(p, 0, sizeof *p);
	int ncomp = 0, ncomm = 0, steps = R->world;
	cJSON_ArrayForEach(ev, all) {
		const cJSON *args = cJSON_GetObjectItem(ev, "args");
		const cJSON *part = cJSON_GetObjectItem(args, "part");
		const cJSON *dur = cJSON_GetObjectItem(ev, "dur");
		if (!cJSON_IsString(part) || !cJSON_IsNumber(dur))
			continue;
		bool comp = !strcmp(part->valuestring, "attention");
		int k = comp ? ncomp++ : ncomm++, per = comp ? steps : steps - 1;
		/* a run's steps in order, runs in order */
		if (per > 0 && k / per < MAX_RUNS)
			(comp ? p->compute : p->comm)[k / per][k % per] = dur->valuedouble * 1e-6;
	}
	cJSON_Delete(j);
	p->steps = steps;
	p->runs = ncomp / steps < MAX_RUNS ? ncomp / steps : MAX_RUNS;
	return 0;
}

/* ---- compute: kernels through sessions, as a rank of `dtpc run` -------------- */

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
	bool measured, merged; /* merged: lse_merge measured (a world of 2 or more) */
	int threads;
	struct fit linear;
	struct attn_fit attention;
	double op_bw[M_N]; /* bytes per second by the cost model's count */
	double launch;     /* one more 16-float add in a run */
	double lin_t[NLIN], att_t[NATT], op_t[M_N];
};

struct compute {
	bool quick;
	int64_t mop_rows, mop_cols; /* the memory-bound kernels' [rows, cols] */
	struct ranks_row row[MAX_RANKS + 1];
};

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

/* The threads a rank of n gets from `dtpc run` here: the cores divided by
 * the ranks, at least one (runtime/device_cpu.c's default for local ranks,
 * cli/run.c's choice under mpirun). */
static int run_threads(int cores, int n)
{
	return cores / n > 1 ? cores / n : 1;
}

static void linear_graph(struct cgraph *b, int world, int64_t m, int64_t k, int64_t n)
{
	cg_init(b, world, 1);
	int x = cg_tensor(b, "x", GT_INPUT, 2, (const int64_t[]){ m, k }, -1, 0);
	int w = cg_tensor(b, "w", GT_WEIGHT, 2, (const int64_t[]){ n, k }, -1, 0);
	int y = cg_tensor(b, "y", GT_ACTIVATION, 2, (const int64_t[]){ m, n }, -1, 1);
	ga_linear_set(cg_op(b, OP_linear, (const int[]){ x, w }, 2, y, -1),
		      (struct ga_linear){ .bias = false });
}

static void attention_graph(struct cgraph *b, int world, int64_t S, int64_t H, int64_t D)
{
	const int64_t d[3] = { 1, S, H * D };
	cg_init(b, world, 1);
	int q = cg_tensor(b, "q", GT_INPUT, 3, d, -1, 0);
	int k = cg_tensor(b, "k", GT_INPUT, 3, d, -1, 0);
	int v = cg_tensor(b, "v", GT_INPUT, 3, d, -1, 0);
	int y = cg_tensor(b, "y", GT_ACTIVATION, 3, d, -1, 1);
	ga_attention_set(cg_op(b, OP_attention, (const int[]){ q, k, v }, 3, y, -1),
			 (struct ga_attention){ D, D });
}

/* Memory-bound kernel `op` (enum mop, not M_LSE_MERGE, which no graph op
 * runs alone) on [rows, cols]; its operands as the cost model counts them
 * (mop_bytes). */
static void mop_graph(struct cgraph *b, int world, int op, int64_t rows, int64_t cols)
{
	const int64_t d2[2] = { rows, cols }, d3[3] = { 1, rows, cols }, row[2] = { 1, cols };
	const int64_t tab[2] = { rows, cols / 4 }, width = cols;
	cg_init(b, world, 1);
	bool three = op == M_MODULATE || op == M_ROPE;
	int x = cg_tensor(b, "x", GT_INPUT, three ? 3 : 2, three ? d3 : d2, -1, 0);
	int y = cg_tensor(b, "y", GT_ACTIVATION, three ? 3 : 2, three ? d3 : d2, -1, 1);
	struct ga_norm norm = { .eps = 1e-6, .affine = true, .width = cols };
	switch ((enum mop)op) {
	case M_LAYER_NORM: {
		int w = cg_tensor(b, "w", GT_WEIGHT, 1, &width, -1, 0);
		int c = cg_tensor(b, "b", GT_WEIGHT, 1, &width, -1, 0);
		ga_norm_set(cg_op(b, OP_layer_norm, (const int[]){ x, w, c }, 3, y, -1), norm);
		break;
	}
	case M_RMS_NORM: {
		int w = cg_tensor(b, "w", GT_WEIGHT, 1, &width, -1, 0);
		norm.group = cols;
		ga_norm_set(cg_op(b, OP_rms_norm, (const int[]){ x, w }, 2, y, -1), norm);
		break;
	}
	case M_GELU:
		ga_gelu_set(cg_op(b, OP_gelu, &x, 1, y, -1), (struct ga_gelu){ .tanh = true });
		break;
	case M_SILU:
		cg_op(b, OP_silu, &x, 1, y, -1);
		break;
	case M_ADD:
	case M_MUL: {
		int c = cg_tensor(b, "b", GT_INPUT, 2, d2, -1, 0);
		cg_op(b, op == M_ADD ? OP_add : OP_mul, (const int[]){ x, c }, 2, y, -1);
		break;
	}
	case M_MODULATE: { /* one shift and scale row per batch: [1, cols] each */
		int sh = cg_tensor(b, "shift", GT_INPUT, 2, row, -1, 0);
		int sc = cg_tensor(b, "scale", GT_INPUT, 2, row, -1, 0);
		ga_bcast_set(cg_op(b, OP_modulate, (const int[]){ x, sh, sc }, 3, y, -1),
			     (struct ga_bcast){ .bh = true });
		break;
	}
	case M_ROPE: { /* 4 heads of cols / 4, interleaved; cos, sin [rows, cols / 4] */
		int c = cg_tensor(b, "cos", GT_INPUT, 2, tab, -1, 0);
		int s = cg_tensor(b, "sin", GT_INPUT, 2, tab, -1, 0);
		ga_rope_set(cg_op(b, OP_rope, (const int[]){ x, c, s }, 3, y, -1),
			    (struct ga_rope){ .head_dim = cols / 4 });
		break;
	}
	case M_COPY: /* a slice of every column: the executor's copy2d of the rows */
		ga_slice_set(cg_op(b, OP_slice, &x, 1, y, -1),
			     (struct ga_slice){ .dim = 1, .start = 0, .length = cols });
		break;
	case M_LSE_MERGE:
	case M_N:
		break;
	}
}

/* A chain of n 16-float adds (y_i = y_(i-1) + b). */
static void chain_graph(struct cgraph *b, int world, int n)
{
	const int64_t d = 16;
	char name[16];
	cg_init(b, world, 1);
	int y = cg_tensor(b, "x", GT_INPUT, 1, &d, -1, 0);
	int c = cg_tensor(b, "b", GT_INPUT, 1, &d, -1, 0);
	for (int i = 0; i < n; i++) {
		snprintf(name, sizeof name, "y%d", i);
		int z = cg_tensor(b, name, GT_ACTIVATION, 1, &d, -1, i == n - 1);
		cg_op(b, OP_add, (const int[]){ y, c }, 2, z, -1);
		y = z;
	}
}

/* A ring attention over the world, rotating (rotate) or gathering the
 * chunks: q [1, Sq, H x D] whole, K and V one row per member. */
static void ring_graph(struct cgraph *b, int world, int64_t Sq, int64_t H, int64_t D, int rotate)
{
	const int64_t dq[3] = { 1, Sq, H * D }, dkv[3] = { 1, world, H * D };
	uint64_t at[4];
	cg_init(b, world, world);
	int q = cg_tensor(b, "q", GT_INPUT, 3, dq, -1, 0);
	int k = cg_tensor(b, "k", GT_INPUT, 3, dkv, 1, 0);
	int v = cg_tensor(b, "v", GT_INPUT, 3, dkv, 1, 0);
	int y = cg_tensor(b, "y", GT_ACTIVATION, 3, dq, -1, 1);
	uint64_t kv = (uint64_t)(2 * H * D) * (rotate == G_ROT_SENDRECV ? 2 : (uint64_t)world);
	uint64_t need = graph_ring_scratch(kv, (uint64_t)(Sq * H * D), (uint64_t)(Sq * H), 4,
					   false, at);
	int s = cg_scratch(b, "ring", (need + 3) / 4);
	ga_ring_attention_set(cg_op(b, OP_ring_attention, (const int[]){ q, k, v }, 3, y, s),
			      (struct ga_ring_attention){ .head_dim = D, .head_dim_v = D,
							  .rotate = rotate, .seq_dim = 1 });
}

/* lse_merge, which only ring attention runs: the median over runs of what a
 * step that merges (steps 1 ..) takes beyond the first step, which writes
 * its block in place (the same attention: q [1, rows, 4 heads of cols /
 * 4] against one key row), the slowest rank's. */
/* b's ring attention opened, traced over reps + 1 runs (the first a
 * warm-up; with `barriers` each run from a barrier, as timed()'s are) and
 * closed: its parts in *p. */
static int traced_ring(struct rank *R, struct cgraph *b, const char *what, int reps,
		       bool barriers, struct ring_parts *p)
{
	struct meas m;
	if (meas_open(R, b, what, &m))
		return 1;
	dtpc_session_trace(m.s, 1);
	int rc = 0;
	for (int r = 0; r <= reps && !rc; r++) {
		double unused;
		if (barriers)
			rc = slowest(R, 0, &unused);
		if (!rc && dtpc_session_run(m.s))
			rc = rank_fail(R, true, "%s", what);
	}
	rc = rc ? rc : ring_trace(R, m.s, p);
	meas_close(&m);
	return rc;
}

static int measure_merge(struct rank *R, int64_t rows, int64_t cols, int reps, double *out)
{
	struct cgraph b;
	struct ring_parts p;
	ring_graph(&b, R->world, rows, 4, cols / 4, G_ROT_GATHER);
	int rc = traced_ring(R, &b, "lse_merge (ring attention)", reps, false, &p);
	double t[MAX_RUNS];
	int n = 0;
	for (int r = 1; !rc && r < p.runs; r++) { /* run 0: the warm-up */
		double merged = 0;
		for (int s = 1; s < p.steps; s++)
			merged += p.compute[r][s] / (p.steps - 1);
		/* where noise leaves the merge nothing beside the first step (tiny
		 * sizes), the merging step whole: an upper bound, never a zero
		 * time (which no profile takes) */
		double extra = merged - p.compute[r][0];
		t[n++] = extra > 0 ? extra : merged;
	}
	return rc || failed(R, n == 0) ? 1 : slowest(R, median(t, n), out);
}

/* What every row and every collective needs of a world: one more op's
 * cost in a run (launch_s: the difference between chains of 1 + CHAIN and
 * of 1 adds, per add), the run's own (the 1-add chain less an add's) and
 * the copy's rate. */
struct world_base {
	double launch, run, copy_bw, copy_t;
};

static int measure_base(struct rank *R, struct compute *cp, struct world_base *w)
{
	struct cgraph b;
	double one, many;
	int reps = cp->quick ? 3 : 5;
	chain_graph(&b, R->world, 1);
	if (time_graph(R, &b, "a 16-float add", reps, 0, false, &one))
		return 1;
	chain_graph(&b, R->world, 1 + CHAIN);
	if (time_graph(R, &b, "a chain of 16-float adds", reps, 0, false, &many))
		return 1;
	w->launch = many > one ? (many - one) / CHAIN : 0;
	w->run = one > w->launch ? one - w->launch : 0;
	mop_graph(&b, R->world, M_COPY, cp->mop_rows, cp->mop_cols);
	if (time_graph(R, &b, "copy", reps, cp->quick ? 0 : MIN_TIMING_S, true, &w->copy_t))
		return 1;
	w->copy_bw = mop_bytes(M_COPY, cp->mop_rows, cp->mop_cols) / w->copy_t;
	return 0;
}

/* Every case of the compute table's row for n = the ranks of R's world, all
 * of them computing at once. The row is written by rank 0. */
static int measure_compute(struct rank *R, const struct world_base *w, struct compute *out)
{
	int n = R->world;
	bool q = out->quick;
	const int64_t(*lin)[3] = q ? lin_quick : lin_full;
	const int64_t(*att)[3] = q ? att_quick : att_full;
	struct ranks_row row = { .measured = true, .threads = R->threads, .launch = w->launch };
	int reps = q ? 3 : 5;
	double min_s = q ? 0 : MIN_TIMING_S;
	struct cgraph b;
	for (int i = 0; i < NLIN; i++) {
		linear_graph(&b, n, lin[i][0], lin[i][1], lin[i][2]);
		if (time_graph(R, &b, "linear", reps, min_s, true, &row.lin_t[i]))
			return 1;
	}
	for (int i = 0; i < NATT; i++) {
		attention_graph(&b, n, att[i][0], att[i][1], att[i][2]);
		if (time_graph(R, &b, "attention", reps, min_s, true, &row.att_t[i]))
			return 1;
	}
	int64_t rows = out->mop_rows, cols = out->mop_cols;
	for (int i = 0; i < M_N; i++) {
		if (i == M_COPY) {
			row.op_t[i] = w->copy_t;
		} else if (i == M_LSE_MERGE) {
			/* a world of one has no ring: the row leaves lse_merge out */
			if (n > 1 && measure_merge(R, rows, cols, reps, &row.op_t[i]))
				return 1;
			row.merged = n > 1;
		} else {
			mop_graph(&b, n, i, rows, cols);
			if (time_graph(R, &b, mop_keys[i], reps, min_s, true, &row.op_t[i]))
				return 1;
		}
		row.op_bw[i] = row.op_t[i] > 0 ? mop_bytes(i, rows, cols) / row.op_t[i] : 0;
	}
	double x[NLIN > NATT ? NLIN : NATT], s[NATT];
	for (int i = 0; i < NLIN; i++)
		x[i] = 2.0 * (double)(lin[i][0] * lin[i][1] * lin[i][2]);
	row.linear = fit_origin(x, row.lin_t, NLIN);
	for (int i = 0; i < NATT; i++) {
		s[i] = (double)(att[i][0] * att[i][0] * att[i][1]);
		x[i] = 4.0 * s[i] * (double)att[i][2];
	}
	row.attention = fit_attention(x, s, row.att_t, NATT);
	if (R->rank == 0)
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
	double t[CO_N][MAX_RANKS + 1][MAX_SIZES];     /* [kind][group size][size] */
	double bytes[CO_N][MAX_RANKS + 1][MAX_SIZES]; /* the message the graph moved */
	int at_work[MAX_RANKS + 1];                   /* [group size]: ranks in its groups */
};

/* The bytes the cost model charges a member (graph_comm_bytes' convention,
 * the nccl-tests bus factors): what it divides by the bus bandwidth. */
static double bus_bytes(int kind, int n, double bytes)
{
	double f = kind == CO_AR ? 2.0 * (n - 1) / n : kind == CO_P2P ? 1.0 : (double)(n - 1) / n;
	return f * bytes;
}

/* Collective `kind` (not the ring shift) over groups of g: a message of
 * about `bytes` (a result of g equal pieces, or for the all-to-all a
 * member's [1, S / g, g heads of 64] sent as g pieces). Returns the
 * bytes it moves and in *copied those of the executor's copies around the
 * transfer, as the cost model counts them (cost/model.c's collective_cost:
 * the all-gather's unpacking, the copy an all-reduce sums in place, the
 * all-to-all's packing and unpacking). */
static double coll_graph(struct cgraph *b, int world, int g, int kind, size_t bytes,
			 double *copied)
{
	cg_init(b, world, g);
	int64_t n = (int64_t)(bytes / 4 / (size_t)g) * g;
	n = n > g ? n : g;
	if (kind == CO_AG) {
		int x = cg_tensor(b, "x", GT_INPUT, 1, &n, 0, 0);
		int y = cg_tensor(b, "y", GT_ACTIVATION, 1, &n, -1, 1);
		int s = cg_scratch(b, "gathered", (uint64_t)n);
		ga_dim_set(cg_op(b, OP_all_gather, &x, 1, y, s), (struct ga_dim){ 0 });
		*copied = 2.0 * (double)n * 4;
		return (double)n * 4;
	}
	if (kind == CO_AR) {
		int x = cg_tensor(b, "x", GT_INPUT, 1, &n, -1, 0);
		int y = cg_tensor(b, "y", GT_ACTIVATION, 1, &n, -1, 1);
		cg_op(b, OP_all_reduce, &x, 1, y, -1);
		*copied = 2.0 * (double)n * 4;
		return (double)n * 4;
	}
	const int64_t D = 64, W = g * D;
	int64_t S = (int64_t)(bytes / 4) / W;
	S = (S > 1 ? S : 1) * g; /* a member's S / g rows of W */
	const int64_t d[3] = { 1, S, W };
	int x = cg_tensor(b, "x", GT_INPUT, 3, d, 1, 0);
	int y = cg_tensor(b, "y", GT_ACTIVATION, 3, d, 2, 1);
	int s = cg_scratch(b, "a2a", (uint64_t)(2 * S * W / g));
	ga_ulysses_a2a_set(cg_op(b, OP_ulysses_a2a, &x, 1, y, s),
			   (struct ga_ulysses_a2a){ .direction = G_A2A_TO_HEADS, .head_dim = D,
						    .seq_dim = 1 });
	double local = (double)(S / g * W) * 4;
	*copied = 2.0 * 2 * local;
	return local;
}

/* The ring shift of `bytes` (a member's K and V chunk: one row of bytes / 8
 * floats each, heads of 64), from a rotating ring attention's trace: per
 * step, its "kv shift" span less the attention nested in it, the median
 * over runs of the steps' mean, the slowest rank's. Returns the bytes. */
static int measure_shift(struct rank *R, size_t bytes, int reps, double *out, double *moved)
{
	struct cgraph b;
	struct ring_parts p;
	int64_t W = (int64_t)(bytes / 8 / 64 > 1 ? bytes / 8 / 64 : 1) * 64;
	ring_graph(&b, R->world, 1, W / 64, 64, G_ROT_SENDRECV);
	*moved = (double)W * 8;
	int rc = traced_ring(R, &b, "ring shift (ring attention)", reps, true, &p);
	double t[MAX_RUNS];
	int n = 0;
	for (int r = 1; !rc && r < p.runs; r++) { /* run 0: the warm-up */
		double shift = 0;
		for (int s = 0; s + 1 < p.steps; s++)
			shift += (p.comm[r][s] - p.compute[r][s]) / (p.steps - 1);
		t[n++] = shift;
	}
	if (rc || failed(R, n == 0))
		return 1;
	double mine = median(t, n);
	/* a shift the trace cannot tell from its attention is a failure, not
	 * a zero */
	if (failed(R, !(mine > 0)))
		return rank_fail(R, false, "ring shift: no time left beside the attention");
	return slowest(R, mine, out);
}

/* For each group size n in lo..hi that divides R's world, the world cut
 * into groups of n consecutive ranks (a graph's mesh [world / n, n]), all
 * at work at once, as a run's groups of one axis are. A point is the run's
 * time less the run's own cost (w->run) and less the executor's copies
 * at this world's copy rate. */
static int measure_colls(struct rank *R, int lo, int hi, const struct sizes *sz,
			 const struct world_base *w, struct coll_times *out)
{
	for (int n = lo; n <= hi; n++) {
		if (R->world % n)
			continue;
		out->at_work[n] = R->world;
		for (int k = 0; k < CO_N; k++)
			for (int s = 0; s < sz->n; s++) {
				double *t = &out->t[k][n][s], copied = 0;
				if (k == CO_P2P) {
					if (measure_shift(R, sz->bytes[s], sz->reps, t,
							  &out->bytes[k][n][s]))
						return 1;
					continue;
				}
				struct cgraph b;
				out->bytes[k][n][s] = coll_graph(&b, R->world, n, k, sz->bytes[s],
								 &copied);
				if (time_graph(R, &b, coll_names[k], sz->reps, 0, false, t))
					return 1;
				/* where noise leaves nothing after a subtraction (tiny
				 * messages), the point keeps what was subtracted: an
				 * upper bound, never a zero or negative time */
				double raw = *t;
				*t = raw - w->run - copied / w->copy_bw;
				if (*t <= 0)
					*t = raw - w->run > 0 ? raw - w->run : raw;
			}
	}
	return 0;
}

/* One world's measurements on one rank: the compute row (with_compute)
 * and the collectives of groups lo..hi. */
static int measure_world(struct rank *R, bool with_compute, int lo, int hi,
			 const struct sizes *sz, struct coll_times *ct, struct compute *cp)
{
	struct world_base w;
	if (rank_open(R))
		return 1;
	int rc = measure_base(R, cp, &w);
	if (!rc && with_compute)
		rc = measure_compute(R, &w, cp);
	if (!rc && lo <= hi)
		rc = measure_colls(R, lo, hi, sz, &w, ct);
	rank_close(R);
	return rc;
}

/* ---- the local backend: a world of exactly n threads per point ------------------- */

struct local_arg {
	struct rank R;
	int n, ranks;
	const struct sizes *sz;
	struct coll_times *ct;
	struct compute *cp;
	int rc;
};

static void *local_rank(void *p)
{
	struct local_arg *a = p;
	struct rank *R = &a->R;
	if (dtpc_comm_local(R->local, R->rank, &R->c)) {
		a->rc = rank_fail(R, true, "the communicator");
		return NULL;
	}
	/* a world of one has no collectives (lo > hi) */
	a->rc = measure_world(R, table_count(a->n, a->ranks), a->n > 1 ? a->n : 2, a->n, a->sz,
			      a->ct, a->cp);
	dtpc_comm_free(R->c);
	return NULL;
}

/* A world of exactly n threads for n = 1..ranks, so that a point's ranks
 * share the cores as a run on n ranks does. A rank that fails aborts the
 * world (rank_fail); the error reported is the first failure's. */
static bool local_measure(int ranks, int cores, const struct sizes *sz, struct coll_times *ct,
			  struct compute *cp, char *err, size_t errlen)
{
	static const char aborted[] = "the local world was aborted: ";
	for (int n = 1; n <= ranks; n++) {
		dtpc_local_world *w = NULL;
		struct local_arg a[MAX_RANKS];
		pthread_t th[MAX_RANKS];
		int started = 0;
		bool ok = !dtpc_local_world_create(n, 120000, &w);
		if (!ok)
			snprintf(err, errlen, "a local world of %d: %s", n, dtpc_last_error());
		for (int r = 0; ok && r < n; r++) {
			a[r] = (struct local_arg){ .R = { .rank = r, .world = n, .local = w,
							  .threads = run_threads(cores, n) },
						   .n = n, .ranks = ranks, .sz = sz, .ct = ct,
						   .cp = cp };
			if (pthread_create(&th[r], NULL, local_rank, &a[r])) {
				snprintf(err, errlen, "cannot start rank %d's thread", r);
				dtpc_local_world_abort(w, err);
				ok = false;
				break;
			}
			started++;
		}
		for (int r = 0; r < started; r++)
			pthread_join(th[r], NULL);
		for (int r = 0; ok && r < n; r++)
			if (a[r].rc) {
				const char *e = a[r].R.err;
				/* another rank's failure, as the abort passed it on */
				const char *at = strstr(e, aborted);
				if (at)
					snprintf(err, errlen, "%s", at + strlen(aborted));
				else
					snprintf(err, errlen, "rank %d: %s", r, e);
				ok = false;
			}
		if (w)
			dtpc_local_world_free(w);
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
			if (!ct->at_work[n]) /* a group size the job's mesh cannot have */
				continue;
			double x[MAX_SIZES], t[MAX_SIZES];
			double share = (double)cores / ct->at_work[n];
			for (int s = 0; s < sz->n; s++)
				x[s] = bus_bytes(k, n, ct->bytes[k][n][s]), t[s] = ct->t[k][n][s];
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
				cJSON_AddNumberToObject(p, "bytes", ct->bytes[k][n][s]);
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
		if (!ct->at_work[n])
			continue;
		cJSON *e = cJSON_CreateObject();
		int groups = ct->at_work[n] / n;
		snprintf(src, sizeof src,
			 "%s: %d group%s of %d consecutive ranks at once (%s), %d ranks at work; fitted "
			 "t = alpha + bus bytes / busbw over %zu..%zu bytes, slowest member, median of "
			 "%d (the points: \"calibration\")",
			 stamp, groups, groups > 1 ? "s" : "", n,
			 strcmp(backend, "mpi") ? "a world of as many threads"
						: "of the job's processes",
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
		snprintf(src, sizeof src,
			 "%s: one more 16-float add in a run (chains of %d and 1 adds, per add); %s",
			 stamp, 1 + CHAIN, how);
		put(e, "launch_s", r->launch, src);
		cJSON *l = cJSON_AddObjectToObject(e, "linear");
		snprintf(src, sizeof src,
			 "%s: a graph's linear (sgemm blocks on the rank's pool), m x k x n = %s "
			 "(%.4g, %.4g, %.4g, %.4g s); fitted t = flops / peak; %s",
			 stamp, lshapes, r->lin_t[0], r->lin_t[1], r->lin_t[2], r->lin_t[3], how);
		put(l, "peak_flops", r->linear.rate, src);
		put(l, "fixed_s", 0, src);
		cJSON *a = cJSON_AddObjectToObject(e, "attention");
		snprintf(src, sizeof src,
			 "%s: a graph's attention, %s (heads x head dim) (%.4g, %.4g, "
			 "%.4g, %.4g s); fitted t = flops / peak + scores x score_s; %s",
			 stamp, ashapes, r->att_t[0], r->att_t[1], r->att_t[2], r->att_t[3], how);
		put(a, "peak_flops", r->attention.peak, src);
		put(a, "fixed_s", 0, src);
		put(a, "score_s", r->attention.per_score, src);
		cJSON *o = cJSON_AddObjectToObject(e, "op_bytes_per_s");
		for (int i = 0; i < M_N; i++) {
			if (i == M_LSE_MERGE && !r->merged)
				continue; /* the row's memory_bytes_per_s stands in */
			snprintf(src, sizeof src,
				 "%s: %s on [%" PRId64 ", %" PRId64 "], %.0f bytes (operands and "
				 "result) in %.4g s; %s",
				 stamp,
				 i == M_COPY	    ? "a graph's slice of every column (copy2d)"
				 : i == M_LSE_MERGE ? "a ring attention's merge (its trace: a merging "
						      "step less the first, q 4 heads, 1 key row)"
						    : mop_keys[i],
				 cp->mop_rows, cp->mop_cols, mop_bytes(i, cp->mop_rows, cp->mop_cols),
				 r->op_t[i], how);
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
static bool mpi_measure(dtpc_comm *c, int cores, const struct sizes *sz, struct coll_times *ct,
			struct compute *cp, char *err, size_t errlen)
{
	struct rank R = { .c = c, .rank = dtpc_comm_rank(c), .world = dtpc_comm_size(c) };
	R.threads = run_threads(cores, R.world);
	if (!measure_world(&R, true, 2, R.world, sz, ct, cp))
		return true;
	snprintf(err, errlen, "rank %d: %s", R.rank, R.err);
	return false;
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
	dtpc_comm *mc = NULL;
	char err[ERR_LEN + 80] = "";
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
		if (dtpc_comm_mpi(120000, &mc)) {
			fprintf(stderr, "dtpc calibrate: MPI: %s\n", dtpc_last_error());
			return free(ct), free(cp), 2;
		}
		rank = dtpc_comm_rank(mc), o.ranks = dtpc_comm_size(mc);
		if (o.ranks < 2 || o.ranks > MAX_RANKS) {
			fprintf(stderr, "dtpc calibrate: run it under mpirun -np 2..16\n");
			return dtpc_comm_free(mc), free(ct), free(cp), 2;
		}
	}
	bool ok = o.mpi ? mpi_measure(mc, cores, &sz, ct, cp, err, sizeof err)
			: local_measure(o.ranks, cores, &sz, ct, cp, err, sizeof err);
	if (!ok) {
		fprintf(stderr, "dtpc calibrate: %s\n", err);
		dtpc_comm_free(mc);
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
			 "%s: one more 16-float add in a run, %d rank%s at once, median", stamp,
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
	dtpc_comm_free(mc);
	free(ct), free(cp);
	return rc;
}
