/* calibrate.c — `dtpc calibrate`: measures this machine through libdtpc's
 * own backends and CPU kernels (the code `dtpc run` executes) and writes a
 * hardware profile in the format of hw/ (the *.json profiles), every number sourced
 * "measured by dtpc calibrate on HOST, DATE". The quantities are the cost
 * model's (docs/cost-model.md): per collective kind α and bus bandwidth,
 * linear and attention fixed time and peak rate, elementwise bandwidth. */
#include "calibrate.h"

#include <cblas.h>
#include <cjson/cJSON.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "diag.h"
#include "kernels/cpu/kernels.h"
#include "median.h"
#include "runtime/comm.h"
#include "runtime/dtpc.h"
#include "runtime/session.h"

enum { CO_AG, CO_AR, CO_A2A, CO_P2P, CO_N };
/* The profile's keys, as compiler/cost.c reads them. */
static const char *const busbw_keys[CO_N] = { "all_gather_busbw", "all_reduce_busbw",
					      "all_to_all_busbw", "p2p_busbw" };
static const char *const alpha_keys[CO_N] = { "all_gather_alpha_s", "all_reduce_alpha_s",
					      "all_to_all_alpha_s", "p2p_alpha_s" };
static const char *const coll_names[CO_N] = { "all-gather", "all-reduce", "all-to-all",
					      "ring shift" };

#define MAX_SIZES 4
#define MAX_RANKS 16

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

static double clock_s(clockid_t id)
{
	struct timespec ts;
	clock_gettime(id, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}


/* t = fixed + x / rate by least squares; a negative intercept (noise on a
 * machine whose small cases are nearly free) is refitted through the origin,
 * since the model's fixed time cannot be negative. */
struct fit {
	double fixed, rate;
};

static struct fit fit_line(const double *x, const double *t, int n)
{
	double mx = 0, mt = 0;
	for (int i = 0; i < n; i++)
		mx += x[i] / n, mt += t[i] / n;
	double sxx = 0, sxt = 0;
	for (int i = 0; i < n; i++)
		sxx += (x[i] - mx) * (x[i] - mx), sxt += (x[i] - mx) * (t[i] - mt);
	double slope = sxx > 0 ? sxt / sxx : 0, fixed = mt - slope * mx;
	if (fixed < 0 || slope <= 0) {
		double xx = 0, xt = 0;
		for (int i = 0; i < n; i++)
			xx += x[i] * x[i], xt += x[i] * t[i];
		fixed = 0, slope = xt / xx;
	}
	return (struct fit){ fixed, 1 / slope };
}

/* ---- kernels: one thread, timed in the thread's CPU time --------------------
 * The cost model scales a rank's rates by its share of the cores, so the
 * profile holds one core's; CPU time keeps other tenants of a shared machine
 * out of the figure (as bench/kernel_bench.c does). */

struct kern {
	int64_t m, k, n;    /* linear: [m, k] x [n, k]^T; attention: S, H, D; add: n */
	float *a, *b, *c, *d, *e;
	void *ws;
};

static void run_linear(struct kern *x)
{
	k_linear(x->a, x->b, NULL, x->c, x->m, x->k, x->n);
}

static void run_attention(struct kern *x)
{
	int64_t w = x->k * x->n;
	k_attention(x->a, w, x->b, w, x->c, w, NULL, x->d, x->e, 1, x->m, x->m, x->k, x->n, x->n, x->ws);
}

static void run_add(struct kern *x)
{
	int64_t s[1] = { x->n };
	k_binary(K_ADD, x->a, s, x->b, s, x->c, s, 1);
}

static float *filled(size_t n)
{
	float *p = malloc(n * sizeof *p);
	for (size_t i = 0; p && i < n; i++)
		p[i] = (float)((i * 2654435761u) % 1000) / 1000.0f - 0.5f;
	return p;
}

static double time_kernel(void (*fn)(struct kern *), struct kern *x, int reps)
{
	double t[16];
	fn(x); /* warm-up: pages, caches */
	for (int r = 0; r < reps; r++) {
		double t0 = clock_s(CLOCK_THREAD_CPUTIME_ID);
		fn(x);
		t[r] = clock_s(CLOCK_THREAD_CPUTIME_ID) - t0;
	}
	return median(t, reps);
}

struct compute {
	struct fit linear, attention;
	double mem_bw, launch;
	char linear_shapes[160], attention_shapes[160];
};

static bool measure_compute(bool quick, struct compute *out)
{
	static const int64_t gemm_full[][3] = { { 256, 256, 256 }, { 1024, 512, 1536 },
						{ 2048, 512, 2048 }, { 1024, 2048, 512 } };
	static const int64_t gemm_quick[][3] = { { 32, 32, 32 }, { 64, 64, 64 }, { 128, 64, 128 } };
	static const int64_t attn_full[][3] = { { 256, 4, 64 }, { 1024, 4, 64 }, { 2048, 4, 64 } };
	static const int64_t attn_quick[][3] = { { 32, 2, 16 }, { 64, 2, 16 }, { 128, 2, 16 } };
	const int64_t(*gemm)[3] = quick ? gemm_quick : gemm_full;
	const int64_t(*attn)[3] = quick ? attn_quick : attn_full;
	int ng = quick ? 3 : 4, na = 3, reps = quick ? 3 : 5;
	double x[4], t[4];
	int len = 0;

	openblas_set_num_threads(1);
	for (int i = 0; i < ng; i++) {
		struct kern k = { .m = gemm[i][0], .k = gemm[i][1], .n = gemm[i][2] };
		k.a = filled((size_t)(k.m * k.k)), k.b = filled((size_t)(k.n * k.k));
		k.c = malloc((size_t)(k.m * k.n) * sizeof(float));
		if (!k.a || !k.b || !k.c)
			return free(k.a), free(k.b), free(k.c), false;
		x[i] = 2.0 * (double)(k.m * k.k * k.n);
		t[i] = time_kernel(run_linear, &k, reps);
		len += snprintf(out->linear_shapes + len, sizeof out->linear_shapes - (size_t)len,
				"%s%" PRId64 "x%" PRId64 "x%" PRId64, i ? ", " : "", k.m, k.k, k.n);
		free(k.a), free(k.b), free(k.c);
	}
	out->linear = fit_line(x, t, ng);
	len = 0;
	for (int i = 0; i < na; i++) {
		struct kern k = { .m = attn[i][0], .k = attn[i][1], .n = attn[i][2] };
		size_t sz = (size_t)(k.m * k.k * k.n);
		k.a = filled(sz), k.b = filled(sz), k.c = filled(sz);
		k.d = malloc(sz * sizeof(float)), k.e = malloc((size_t)(k.m * k.k) * sizeof(float));
		k.ws = aligned_alloc(64, (k_attention_workspace(k.m, k.m, k.n, k.n) + 63) / 64 * 64);
		bool ok = k.a && k.b && k.c && k.d && k.e && k.ws;
		if (ok) {
			x[i] = 4.0 * (double)(k.k * k.m * k.m * k.n);
			t[i] = time_kernel(run_attention, &k, reps);
			len += snprintf(out->attention_shapes + len,
					sizeof out->attention_shapes - (size_t)len,
					"%sS=%" PRId64 " %" PRId64 "x%" PRId64, i ? ", " : "", k.m,
					k.k, k.n);
		}
		free(k.a), free(k.b), free(k.c), free(k.d), free(k.e), free(k.ws);
		if (!ok)
			return false;
	}
	out->attention = fit_line(x, t, na);

	/* elementwise: an add of n floats moves 12n bytes; a 16-float add is
	 * the least an op costs */
	int64_t sizes[2] = { 16, quick ? 1 << 16 : 1 << 23 };
	for (int i = 0; i < 2; i++) {
		struct kern k = { .n = sizes[i] };
		k.a = filled((size_t)k.n), k.b = filled((size_t)k.n), k.c = filled((size_t)k.n);
		if (!k.a || !k.b || !k.c)
			return free(k.a), free(k.b), free(k.c), false;
		t[i] = time_kernel(run_add, &k, reps);
		free(k.a), free(k.b), free(k.c);
	}
	out->launch = t[0];
	out->mem_bw = 12.0 * (double)sizes[1] / t[1];
	return true;
}

/* ---- collectives -------------------------------------------------------------
 * Every rank of the communicator's world runs measure_colls; for a group of
 * n, ranks 0..n-1 take part and the rest only join the barriers. A point's
 * time is the slowest member's, median over the repetitions, wall-clock
 * (a collective's time is waiting as much as copying). */

struct coll_times {
	double t[CO_N][MAX_RANKS + 1][MAX_SIZES]; /* [kind][group size][size] */
};

/* The bytes the cost model charges a member (graph_comm_bytes' convention,
 * the nccl-tests bus factors): what it divides by the bus bandwidth. */
static double bus_bytes(int kind, int n, size_t bytes)
{
	double f = kind == CO_AR ? 2.0 * (n - 1) / n : kind == CO_P2P ? 1.0 : (double)(n - 1) / n;
	return f * (double)bytes;
}

static int one_op(struct comm *c, const struct comm_group *g, int kind, uint32_t op,
		  size_t bytes, char *send, char *recv)
{
	struct comm_tag tag = { op, "dtpc calibrate" };
	size_t counts[MAX_RANKS], displs[MAX_RANKS];
	size_t part = bytes / (size_t)g->n / 4 * 4;
	for (int i = 0; i < g->n; i++)
		counts[i] = part, displs[i] = (size_t)i * part;
	switch (kind) {
	case CO_AG:
		return c->ops->allgatherv(c, g, tag, recv + displs[g->me], recv, counts, displs);
	case CO_AR:
		return c->ops->allreduce_f32(c, g, tag, (float *)send, bytes / 4);
	case CO_A2A:
		return c->ops->alltoallv(c, g, tag, send, counts, displs, recv, counts, displs);
	default: {
		struct comm_request *req;
		int rc = c->ops->shift_start(c, g, tag, send, bytes, recv, bytes, &req);
		return rc ? rc : c->ops->shift_wait(c, req);
	}
	}
}

/* A barrier that also hands every rank the slowest member's time. */
static int slowest(struct comm *c, const struct comm_group *w, uint32_t op, double mine,
		   double *max)
{
	double all[MAX_RANKS];
	size_t counts[MAX_RANKS], displs[MAX_RANKS];
	for (int i = 0; i < w->n; i++)
		counts[i] = sizeof(double), displs[i] = (size_t)i * sizeof(double);
	all[w->me] = mine;
	int rc = c->ops->allgatherv(c, w, (struct comm_tag){ op, "dtpc calibrate: barrier" },
				    &all[w->me], all, counts, displs);
	*max = 0;
	for (int i = 0; i < w->n; i++)
		*max = all[i] > *max ? all[i] : *max;
	return rc;
}

/* Group sizes lo..hi measured on c's world. */
static int measure_colls(struct comm *c, int lo, int hi, const struct sizes *sz,
			 struct coll_times *out)
{
	int wranks[MAX_RANKS], granks[MAX_RANKS];
	struct comm_group w = comm_world_group(c, wranks);
	size_t maxb = sz->bytes[sz->n - 1];
	char *send = calloc(maxb, 1), *recv = calloc(maxb, 1);
	uint32_t op = 0;
	int rc = send && recv ? COMM_OK : COMM_FAILED;
	for (int i = 0; i < MAX_RANKS; i++)
		granks[i] = i;
	for (int n = lo; n <= hi && !rc; n++) {
		struct comm_group g = { .id = n, .n = n, .me = c->rank, .ranks = granks };
		bool member = c->rank < n;
		for (int k = 0; k < CO_N && !rc; k++)
			for (int s = 0; s < sz->n && !rc; s++) {
				double t[16];
				for (int r = -1; r < sz->reps && !rc; r++) { /* r = -1: warm-up */
					double dt = 0, t0;
					rc = slowest(c, &w, op++, 0, &t0);
					t0 = clock_s(CLOCK_MONOTONIC);
					if (!rc && member)
						rc = one_op(c, &g, k, op, sz->bytes[s], send, recv);
					op++;
					dt = clock_s(CLOCK_MONOTONIC) - t0;
					if (!rc)
						rc = slowest(c, &w, op++, dt, &dt);
					if (r >= 0)
						t[r] = dt;
				}
				if (!rc)
					out->t[k][n][s] = median(t, sz->reps);
			}
	}
	free(send), free(recv);
	return rc;
}

struct local_arg {
	struct comm_local_world *w;
	int rank, n;
	const struct sizes *sz;
	struct coll_times *out;
	int rc;
	char err[512];
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
	a->rc = measure_colls(c, a->n, a->n, a->sz, a->out);
	if (a->rc)
		snprintf(a->err, sizeof a->err, "%s", c->error);
	c->ops->free(c);
	return NULL;
}

/* local: a world of exactly n threads per group size, so that a point's
 * ranks share the cores as a run on n ranks does. */
static bool local_colls(int ranks, const struct sizes *sz, struct coll_times *out, char *err,
			size_t errlen)
{
	for (int n = 2; n <= ranks; n++) {
		struct comm_local_world *w = comm_local_world_create(n, 60000);
		struct local_arg a[MAX_RANKS];
		pthread_t th[MAX_RANKS];
		bool ok = w != NULL;
		for (int r = 0; ok && r < n; r++) {
			a[r] = (struct local_arg){ .w = w, .rank = r, .n = n, .sz = sz, .out = out };
			pthread_create(&th[r], NULL, local_rank, &a[r]);
		}
		for (int r = 0; ok && r < n; r++)
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

/* The measured points fitted per kind and group size; the profile's figure
 * is the median over group sizes. Bandwidths are divided by the cores'
 * share each rank had (threads / ranks alive), as the cost model multiplies
 * them by it. */
static void add_links(cJSON *root, const struct coll_times *ct, const struct sizes *sz, int ranks,
		      int alive_fixed, int cores, const char *backend, const char *stamp)
{
	cJSON *links = cJSON_AddObjectToObject(root, "links");
	cJSON *intra = cJSON_AddObjectToObject(links, "intra");
	cJSON *raw = cJSON_AddArrayToObject(root, "calibration");
	char src[512], name[96];
	snprintf(name, sizeof name, "%s backend on one machine", backend);
	cJSON_AddStringToObject(intra, "name", name);
	double alphas[CO_N];
	for (int k = 0; k < CO_N; k++) {
		double a[MAX_RANKS], b[MAX_RANKS];
		int m = 0;
		for (int n = 2; n <= ranks; n++) {
			double x[MAX_SIZES], t[MAX_SIZES];
			int alive = alive_fixed ? alive_fixed : n;
			double share = (double)cores / alive;
			for (int s = 0; s < sz->n; s++)
				x[s] = bus_bytes(k, n, sz->bytes[s]), t[s] = ct->t[k][n][s];
			/* the bandwidth from the large messages, α what the smallest
			 * takes beyond its bytes' time: a line through all points lets
			 * the large ones' noise swamp a microsecond intercept */
			struct fit f = fit_line(x + 1, t + 1, sz->n - 1);
			f.fixed = t[0] - x[0] / f.rate > 0 ? t[0] - x[0] / f.rate : 0;
			a[m] = f.fixed, b[m] = f.rate / share;
			cJSON *row = cJSON_CreateObject();
			cJSON_AddStringToObject(row, "collective", coll_names[k]);
			cJSON_AddNumberToObject(row, "group", n);
			cJSON_AddNumberToObject(row, "ranks_alive", alive);
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
		put(intra, alpha_keys[k], am, src);
		snprintf(src, sizeof src,
			 "%s: %s, groups of 2..%d, fitted busbw divided by each rank's share of the "
			 "%d cores; median over group sizes (the points: \"calibration\")",
			 stamp, coll_names[k], ranks, cores);
		put(intra, busbw_keys[k], bm, src);
	}
	snprintf(src, sizeof src, "%s: median of the four collectives' alpha", stamp);
	put(intra, "alpha_s", median(alphas, CO_N), src);
}

#define USAGE "usage: dtpc calibrate --backend local|mpi --device cpu [--ranks N] [--quick] " \
	      "-o PROFILE.json"

static int parse(int argc, char **argv, struct opts *o)
{
	const char *backend = NULL, *device = "cpu";
	*o = (struct opts){ .ranks = 4 };
	bool ranks_given = false;
	for (int i = 2; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (!strcmp(a, "--quick")) {
			o->quick = true;
			continue;
		}
		if (strcmp(a, "--backend") && strcmp(a, "--device") && strcmp(a, "--ranks") &&
		    strcmp(a, "-o"))
			return diag_usage_error("calibrate: unknown option %s\n" USAGE, a);
		if (!v)
			return diag_usage_error("calibrate: an option lacks its value\n" USAGE);
		i++;
		if (!strcmp(a, "--backend"))
			backend = v;
		else if (!strcmp(a, "--device"))
			device = v;
		else if (!strcmp(a, "-o"))
			o->out = v;
		else {
			char *end;
			long n = strtol(v, &end, 10);
			if (*end || n < 2 || n > MAX_RANKS)
				return diag_usage_error("calibrate: --ranks must be 2..16\n" USAGE);
			o->ranks = (int)n, ranks_given = true;
		}
	}
	if (!backend || (strcmp(backend, "local") && strcmp(backend, "mpi")))
		return diag_usage_error("calibrate: --backend local or mpi (nccl: not measured yet)\n" USAGE);
	if (strcmp(device, "cpu"))
		return diag_usage_error("calibrate: only --device cpu is measured so far\n" USAGE);
	if (!o->out)
		return diag_usage_error("calibrate: -o PROFILE.json is required\n" USAGE);
	o->mpi = !strcmp(backend, "mpi");
	if (o->mpi && ranks_given)
		return diag_usage_error("calibrate: with --backend mpi the ranks are mpirun's -np\n" USAGE);
	return 0;
}

int calibrate_main(int argc, char **argv)
{
	struct opts o;
	int rc = parse(argc, argv, &o);
	if (rc)
		return rc;
	struct sizes sz = o.quick ? (struct sizes){ 2, 3, { 4096, 65536 } }
				  : (struct sizes){ 4, 7, { 4096, 262144, 4 << 20, 16 << 20 } };
	struct coll_times *ct = calloc(1, sizeof *ct);
	struct comm *mc = NULL;
	dtpc_comm *dc = NULL;
	char err[600] = "";
	int cores = (int)sysconf(_SC_NPROCESSORS_ONLN), rank = 0;
	if (!ct)
		return fprintf(stderr, "dtpc calibrate: out of memory\n"), 1;
	if (o.mpi) {
		if (dtpc_comm_mpi(60000, &dc)) {
			fprintf(stderr, "dtpc calibrate: %s\n", dtpc_last_error());
			return free(ct), 2;
		}
		mc = dc->impl;
		rank = mc->rank, o.ranks = mc->world;
		if (o.ranks < 2 || o.ranks > MAX_RANKS) {
			fprintf(stderr, "dtpc calibrate: run it under mpirun -np 2..16\n");
			return dtpc_comm_free(dc), free(ct), 2;
		}
	}
	/* compute first, on rank 0 alone (the others wait in the first
	 * collective, backing off) */
	struct compute cp;
	if (rank == 0 && !measure_compute(o.quick, &cp)) {
		fprintf(stderr, "dtpc calibrate: out of memory\n");
		if (dc)
			mc->ops->fail(mc, "rank 0 ran out of memory"), dtpc_comm_free(dc);
		return free(ct), 1;
	}
	bool ok = o.mpi ? measure_colls(mc, 2, o.ranks, &sz, ct) == COMM_OK
			: local_colls(o.ranks, &sz, ct, err, sizeof err);
	if (o.mpi && !ok)
		snprintf(err, sizeof err, "%s", mc->error);
	if (!ok) {
		fprintf(stderr, "dtpc calibrate: %s\n", err);
		if (dc)
			dtpc_comm_free(dc);
		return free(ct), 1;
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
		char text[256];
		snprintf(text, sizeof text, "%s, %s backend (calibrated)", host, backend);
		cJSON_AddStringToObject(j, "name", text);
		snprintf(text, sizeof text,
			 "written by dtpc calibrate --backend %s%s, %d ranks, %d cores; rates are "
			 "one core's",
			 backend, o.quick ? " --quick (tiny sizes: a test, not a calibration)" : "",
			 o.ranks, cores);
		cJSON_AddStringToObject(j, "description", text);
		snprintf(src, sizeof src, "%s: every rank on this one machine", stamp);
		put(j, "ranks_per_node", 4096, src);
		snprintf(src, sizeof src, "%s: online cores (sysconf)", stamp);
		put(j, "threads_per_node", cores, src);
		snprintf(src, sizeof src, "%s: physical memory (sysconf)", stamp);
		put(j, "memory_bytes",
		    (double)sysconf(_SC_PHYS_PAGES) * (double)sysconf(_SC_PAGESIZE), src);
		snprintf(src, sizeof src, "%s: a 16-float add, one thread, median", stamp);
		put(j, "launch_s", cp.launch, src);
		cJSON_AddStringToObject(j, "default_dtype", "f32");
		cJSON *f32 = cJSON_AddObjectToObject(cJSON_AddObjectToObject(j, "dtypes"), "f32");
		cJSON *lin = cJSON_AddObjectToObject(f32, "linear");
		snprintf(src, sizeof src,
			 "%s: k_linear (sgemm) m x k x n = %s, one thread, fitted t = fixed + "
			 "flops / peak",
			 stamp, cp.linear_shapes);
		put(lin, "peak_flops", cp.linear.rate, src);
		put(lin, "fixed_s", cp.linear.fixed, src);
		cJSON *att = cJSON_AddObjectToObject(f32, "attention");
		snprintf(src, sizeof src,
			 "%s: k_attention with LSE, %s (heads x head dim), one thread, fitted "
			 "t = fixed + flops / peak",
			 stamp, cp.attention_shapes);
		put(att, "peak_flops", cp.attention.rate, src);
		put(att, "fixed_s", cp.attention.fixed, src);
		snprintf(src, sizeof src, "%s: k_binary add of %d floats (12 bytes each), one thread",
			 stamp, o.quick ? 1 << 16 : 1 << 23);
		put(f32, "memory_bytes_per_s", cp.mem_bw, src);
		add_links(j, ct, &sz, o.ranks, o.mpi ? o.ranks : 0, cores, backend, stamp);
		char *out = cJSON_Print(j);
		FILE *f = out ? fopen(o.out, "w") : NULL;
		bool written = f && fprintf(f, "%s\n", out) >= 0;
		if (f && fclose(f))
			written = false;
		if (!written) {
			fprintf(stderr, "dtpc calibrate: cannot write %s\n", o.out);
			rc = 2;
		}
		free(out);
		cJSON_Delete(j);
	}
	if (dc)
		dtpc_comm_free(dc);
	free(ct);
	return rc;
}
