/* device_cpu.c — the CPU device: host memory and the kernels of kernels/cpu.
 * Every call runs to completion before it returns, so sync() has nothing to
 * wait for and no call can fail except an allocation.
 *
 * Threads: each device (one per rank) owns a k_pool that runs attention, the
 * pointwise ops and the norms, split into contiguous ranges of rows. Its size
 * is what dtpc_session_threads set, or by default this machine's cores
 * divided by the CPU devices alive in this process (the ranks that are
 * threads here), looked up again at each kernel, so it follows ranks as
 * sessions come and go. GEMMs are split over the same pool, each block one
 * single-threaded OpenBLAS call, so OpenBLAS is kept at one thread: its own
 * workers spin for a while after each call and would take the cores the
 * pool needs next, and its thread count is one per process
 * (openblas_set_num_threads; Debian's 0.3.21 has no per-thread setting), so
 * it could not follow a per-rank choice anyway. A program that links
 * libdtpc and calls OpenBLAS itself finds it at one thread once a CPU
 * session has run.
 *
 * Narrow storage (set_dtype bf16 or f16): every kernel reads its operands
 * in that dtype, widens them to float32 twins in a buffer the device keeps
 * (grown to the largest op's need), runs the float32 kernel and rounds the
 * result once, to nearest even; the GEMM widens tile by tile instead
 * (k_linear_narrow_pool), and the log-sum-exp vectors are float32 always.
 * linear_act rounds twice, as linear and the activation do apart: the sum
 * to the storage dtype, then the activation of that value. */
#include <cblas.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "graph/error.h"
#include "runtime/device.h"

struct cpu_dev {
	struct dev base;
	struct k_pool *pool;
	int threads;     /* set by threads(); 0: the default */
	int applied;     /* the size pool() last made (0: none yet) */
	void *ws;        /* attention workspaces, one share per pool thread */
	size_t ws_bytes;
	enum k_dtype dt; /* storage dtype of every kernel's data */
	float *tmp;      /* narrow storage: the float32 twins of an op's data;
			  * float32: the linear's packed panels of w */
	size_t tmp_bytes;
};

_Static_assert((int)K_F32 == (int)DTPC_F32 && (int)K_BF16 == (int)DTPC_BF16 &&
		       (int)K_F16 == (int)DTPC_F16, "k_dtype and dtpc_dtype agree");

static atomic_int live_devices;
static pthread_mutex_t blas_mu = PTHREAD_MUTEX_INITIALIZER;

static struct cpu_dev *cpu(struct dev *d)
{
	return (struct cpu_dev *)d;
}

static int cores(void)
{
	long n = sysconf(_SC_NPROCESSORS_ONLN);

	return n < 1 ? 1 : n > 4096 ? 4096 : (int)n;
}

/* OpenBLAS at one thread (see the header), set only when it is not, so
 * ranks do not call into OpenBLAS's setting while another rank computes. */
static void blas_one_thread(void)
{
	pthread_mutex_lock(&blas_mu);
	if (openblas_get_num_threads() != 1)
		openblas_set_num_threads(1);
	pthread_mutex_unlock(&blas_mu);
}

/* The pool for this call, resized when the wanted size changed. A pool that
 * cannot be made leaves the kernels on the calling thread (NULL). */
static struct k_pool *pool(struct cpu_dev *c)
{
	int want = c->threads;

	if (!want) {
		int live = atomic_load(&live_devices);

		want = cores() / (live < 1 ? 1 : live);
		want = want < 1 ? 1 : want;
	}
	if (c->applied != want) {
		k_pool_free(c->pool);
		c->pool = want > 1 ? k_pool_create(want) : NULL;
		c->applied = want;
		blas_one_thread();
	}
	return c->pool;
}

/* [0, n) in contiguous ranges of at least `grain` units, one task each, a
 * few per thread so uneven ranges balance. */
struct range_job {
	void (*fn)(const void *args, int64_t lo, int64_t hi);
	const void *args;
	int64_t n, per;
};

static void range_task(void *arg, int64_t t, int worker)
{
	const struct range_job *j = arg;
	int64_t lo = t * j->per, hi = lo + j->per < j->n ? lo + j->per : j->n;

	j->fn(j->args, lo, hi);
}

static void par_range(struct cpu_dev *c, int64_t n, int64_t grain,
		      void (*fn)(const void *args, int64_t lo, int64_t hi), const void *args)
{
	struct k_pool *p = pool(c);
	int64_t tasks = 4 * (int64_t)k_pool_threads(p);

	if (n <= 0)
		return;
	if (tasks > (n + grain - 1) / grain)
		tasks = (n + grain - 1) / grain;
	if (tasks <= 1) {
		fn(args, 0, n);
		return;
	}
	struct range_job j = { fn, args, n, (n + tasks - 1) / tasks };

	k_pool_run(p, (n + j.per - 1) / j.per, range_task, &j);
}

/* Elements, or rows of about this many elements, below which a task does
 * not pay for waking a thread. */
#define GRAIN 16384

static int64_t rows_grain(int64_t row)
{
	return row >= GRAIN ? 1 : GRAIN / (row > 0 ? row : 1);
}

static void cpu_destroy(struct dev *d)
{
	struct cpu_dev *c = cpu(d);

	k_pool_free(c->pool);
	free(c->ws);
	free(c->tmp);
	atomic_fetch_sub(&live_devices, 1);
	free(c);
}

/* The CPU device's one failure: memory. */
static void *no_memory(void)
{
	g_raise(DTPC_ERR_NOMEM, "out of memory");
	return NULL;
}

static void *cpu_alloc(struct dev *d, size_t bytes)
{
	void *p = NULL;
	/* the arena's offsets are 64-byte aligned: keep the base so too */
	return posix_memalign(&p, 64, bytes ? bytes : 64) ? no_memory() : p;
}

static void cpu_free(struct dev *d, void *p)
{
	free(p);
}

static int cpu_copy(struct dev *d, void *dst, const void *src, size_t bytes)
{
	if (dst != src && bytes)
		memmove(dst, src, bytes);
	return 0;
}

static int cpu_sync(struct dev *d)
{
	return 0;
}

static void *cpu_stream(struct dev *d)
{
	return NULL;
}

static void cpu_threads(struct dev *d, int n)
{
	cpu(d)->threads = n;
	pool(cpu(d));
}

static int cpu_thread_count(struct dev *d)
{
	return k_pool_threads(pool(cpu(d)));
}

/* ---- narrow storage ---------------------------------------------------------- */

static bool narrow(const struct cpu_dev *c)
{
	return c->dt != K_F32;
}

/* The device's float32 twin buffer with room for n floats, or NULL when
 * out of memory (raised; the kernel then fails). */
static float *twins(struct cpu_dev *c, size_t n)
{
	size_t need = (n ? n : 1) * sizeof(float);

	if (need > c->tmp_bytes) {
		void *p = NULL;

		free(c->tmp);
		c->tmp = posix_memalign(&p, 64, need) ? NULL : p;
		c->tmp_bytes = c->tmp ? need : 0;
	}
	return c->tmp ? c->tmp : no_memory();
}

/* rows x cols elements between strided views, dtype st to dt, in parallel. */
struct conv_args {
	char *dst;
	const char *src;
	enum k_dtype dt, st;
	int64_t dst_stride, src_stride, cols;
};

static void conv_range(const void *a, int64_t lo, int64_t hi)
{
	const struct conv_args *r = a;
	size_t de = k_dtype_size(r->dt), se = k_dtype_size(r->st);

	for (int64_t i = lo; i < hi; i++)
		k_convert(r->dst + (size_t)(i * r->dst_stride) * de, r->dt,
			  r->src + (size_t)(i * r->src_stride) * se, r->st, r->cols);
}

static void conv2d(struct cpu_dev *c, void *dst, enum k_dtype dt, int64_t dst_stride,
		   const void *src, enum k_dtype st, int64_t src_stride, int64_t rows, int64_t cols)
{
	struct conv_args a = { dst, src, dt, st, dst_stride, src_stride, cols };

	if (rows > 0 && cols > 0)
		par_range(c, rows, rows_grain(cols), conv_range, &a);
}

/* n contiguous elements, as rows of GRAIN so that threads share them. */
static void conv(struct cpu_dev *c, void *dst, enum k_dtype dt, const void *src,
		 enum k_dtype st, int64_t n)
{
	int64_t rows = n / GRAIN, tail = n - rows * GRAIN;
	size_t de = k_dtype_size(dt), se = k_dtype_size(st);

	conv2d(c, dst, dt, GRAIN, src, st, GRAIN, rows, GRAIN);
	if (tail > 0)
		k_convert((char *)dst + (size_t)(rows * GRAIN) * de, dt,
			  (const char *)src + (size_t)(rows * GRAIN) * se, st, tail);
}

/* Widens n elements of the storage dtype at src into twin t. */
static float *widen(struct cpu_dev *c, float *t, const void *src, int64_t n)
{
	if (src)
		conv(c, t, K_F32, src, c->dt, n);
	return src ? t : NULL;
}

/* Rounds n floats of twin t into the storage dtype at dst. */
static void narrow_to(struct cpu_dev *c, void *dst, const float *t, int64_t n)
{
	conv(c, dst, c->dt, t, K_F32, n);
}

/* A row-wise op in one pass of the pool: fn(args, lo, hi, x, y) computes
 * rows [lo, hi) from float32 rows at x into float32 rows at y (row strides
 * are fn's to know). Without narrow storage x and y are the op's own rows
 * (x_stride, y_stride apart). Under narrow storage each range widens a few
 * of its rows at a time (IN_L1 floats) into its share of the contiguous
 * twin t, runs fn on them in place and rounds them into y's rows: the twin
 * rows at the range's start are reused for each chunk, so they stay in L1,
 * where widening all of x, the op over all of it and rounding all of y took
 * three passes and three dispatches (docs/performance.md, 2026-12-07).
 * x may be y. */
typedef void rows_fn(const void *args, int64_t lo, int64_t hi, const float *x, float *y);

struct rows_pass {
	bool narrow;
	enum k_dtype dt;
	const char *x;
	char *y;
	float *t;
	int64_t n, x_stride, y_stride;
	rows_fn *fn;
	const void *args;
};

/* Floats of twin a range widens, computes and rounds at a time: with its
 * rows in storage, well inside L1. */
#define IN_L1 4096

/* Rows of n elements a chunk of IN_L1 floats holds (one at least). */
static int64_t l1_rows(int64_t n)
{
	return n >= IN_L1 ? 1 : IN_L1 / n;
}

static void rows_pass_range(const void *p, int64_t lo, int64_t hi)
{
	const struct rows_pass *r = p;
	size_t e = k_dtype_size(r->dt);
	int64_t step = l1_rows(r->n);
	float *t = r->t + lo * r->n;

	if (!r->narrow) {
		r->fn(r->args, lo, hi, (const float *)r->x + lo * r->x_stride,
		      (float *)r->y + lo * r->y_stride);
		return;
	}
	for (int64_t c = lo; c < hi; c += step) {
		int64_t ce = hi - c < step ? hi : c + step;

		for (int64_t i = c; i < ce; i++)
			k_convert(t + (i - c) * r->n, K_F32, r->x + (size_t)(i * r->x_stride) * e,
				  r->dt, r->n);
		r->fn(r->args, c, ce, t, t);
		for (int64_t i = c; i < ce; i++)
			k_convert(r->y + (size_t)(i * r->y_stride) * e, r->dt, t + (i - c) * r->n,
				  K_F32, r->n);
	}
}

static void par_rows(struct cpu_dev *c, int64_t rows, int64_t n, rows_fn *fn, const void *args,
		     const void *x, int64_t x_stride, void *y, int64_t y_stride, float *t)
{
	struct rows_pass r = { narrow(c), c->dt, x, y, t, n, x_stride, y_stride, fn, args };

	par_range(c, rows, rows_grain(n), rows_pass_range, &r);
}

static int cpu_set_dtype(struct dev *d, dtpc_dtype t)
{
	cpu(d)->dt = (enum k_dtype)t;
	return 0;
}

static int cpu_convert(struct dev *d, void *dst, dtpc_dtype dt, const void *src, dtpc_dtype st,
		       int64_t n)
{
	conv(cpu(d), dst, (enum k_dtype)dt, src, (enum k_dtype)st, n);
	return 0;
}

/* ---- kernels ------------------------------------------------------------------ */

/* linear, with the activation act as its epilogue unless act is NULL. */
static int linear(struct cpu_dev *c, const float *x, const float *w, const float *b, float *y,
		  int64_t m, int64_t k, int64_t n, const enum k_act *act)
{
	struct k_pool *p = pool(c);
	size_t ws = narrow(c) ? k_linear_narrow_workspace(k_pool_threads(p), m, k, n)
			      : k_linear_workspace(k_pool_threads(p));
	float *t = twins(c, (ws + sizeof(float) - 1) / sizeof(float));

	if (!t)
		return -1;
	if (!narrow(c)) {
		if (act)
			k_linear_act_pool(p, x, w, b, y, m, k, n, *act, t);
		else
			k_linear_pool(p, x, w, b, y, m, k, n, t);
		return 0;
	}
	if (act)
		k_linear_act_narrow_pool(p, c->dt, x, w, b, y, m, k, n, *act, t);
	else
		k_linear_narrow_pool(p, c->dt, x, w, b, y, m, k, n, t);
	return 0;
}

static int cpu_linear(struct dev *d, const float *x, const float *w, const float *b, float *y,
		      int64_t m, int64_t k, int64_t n)
{
	return linear(cpu(d), x, w, b, y, m, k, n, NULL);
}

static int cpu_linear_act(struct dev *d, const float *x, const float *w, const float *b,
			  float *y, int64_t m, int64_t k, int64_t n, enum k_act act)
{
	return linear(cpu(d), x, w, b, y, m, k, n, &act);
}

struct norm_args {
	const float *w, *b;
	int64_t n, group;
	float eps;
};

static void layer_norm_range(const void *a, int64_t lo, int64_t hi, const float *x, float *y)
{
	const struct norm_args *r = a;

	k_layer_norm(x, y, hi - lo, r->n, r->eps, r->w, r->b);
}

static int cpu_layer_norm(struct dev *d, const float *x, float *y, int64_t rows, int64_t n,
			  float eps, const float *w, const float *b)
{
	struct cpu_dev *c = cpu(d);
	struct norm_args a = { .w = w, .b = b, .n = n, .eps = eps };
	float *t = NULL;

	if (narrow(c)) {
		if (!(t = twins(c, (size_t)(rows * n + 2 * n))))
			return -1;
		a.w = widen(c, t + rows * n, w, n);
		a.b = widen(c, t + rows * n + n, b, n);
	}
	par_rows(c, rows, n, layer_norm_range, &a, x, n, y, n, t);
	return 0;
}

static void rms_norm_range(const void *a, int64_t lo, int64_t hi, const float *x, float *y)
{
	const struct norm_args *r = a;

	k_rms_norm(x, y, hi - lo, r->n, r->group, r->eps, r->w);
}

static int cpu_rms_norm(struct dev *d, const float *x, float *y, int64_t rows, int64_t n,
			int64_t group, float eps, const float *w)
{
	struct cpu_dev *c = cpu(d);
	struct norm_args a = { .w = w, .n = n, .group = group, .eps = eps };
	float *t = NULL;

	if (narrow(c)) {
		if (!(t = twins(c, (size_t)(rows * n + group))))
			return -1;
		a.w = widen(c, t + rows * n, w, group);
	}
	par_rows(c, rows, n, rms_norm_range, &a, x, n, y, n, t);
	return 0;
}

/* The distributed norms' sums are one element per row: the row loops run on
 * the pool like the norms'. */
struct dnorm_args {
	const float *x, *s1, *s2, *w, *b;
	float *y;
	int64_t n, N;
	float eps;
	enum k_norm_stat mode;
};

static void norm_stats_range(const void *a, int64_t lo, int64_t hi)
{
	const struct dnorm_args *r = a;

	int64_t cols = r->mode == K_NS_CENTRED ? 2 : 1;

	k_norm_stats(r->x + lo * r->n, r->s1 ? r->s1 + lo : NULL, r->y + lo * cols, hi - lo, r->n,
		     r->N, r->mode);
}

static int cpu_norm_stats(struct dev *d, const float *x, const float *sums, float *out,
			  int64_t rows, int64_t n, int64_t N, enum k_norm_stat mode)
{
	struct cpu_dev *c = cpu(d);
	struct dnorm_args a = { .x = x, .s1 = sums, .y = out, .n = n, .N = N, .mode = mode };
	int64_t cols = mode == K_NS_CENTRED ? 2 : 1;
	float *t = NULL;

	if (narrow(c)) {
		if (!(t = twins(c, (size_t)(rows * n + 3 * rows))))
			return -1;
		a.x = widen(c, t, x, rows * n);
		a.s1 = widen(c, t + rows * n, sums, rows);
		a.y = t + rows * n + rows;
	}
	par_range(c, rows, rows_grain(n), norm_stats_range, &a);
	if (t)
		narrow_to(c, out, a.y, rows * cols);
	return 0;
}

static void norm_apply_range(const void *a, int64_t lo, int64_t hi)
{
	const struct dnorm_args *r = a;

	k_norm_apply(r->x + lo * r->n, r->y + lo * r->n, hi - lo, r->n, r->N, r->eps,
		     r->s1 ? r->s1 + lo : NULL, r->s2 + (r->s1 ? 2 : 1) * lo, r->w, r->b);
}

static int cpu_norm_apply(struct dev *d, const float *x, float *y, int64_t rows, int64_t n,
			  int64_t N, float eps, const float *s1, const float *s2, const float *w,
			  const float *b)
{
	struct cpu_dev *c = cpu(d);
	struct dnorm_args a = { .x = x, .y = y, .s1 = s1, .s2 = s2, .w = w, .b = b, .n = n,
				.N = N, .eps = eps };
	float *t = NULL;

	if (narrow(c)) {
		if (!(t = twins(c, (size_t)(rows * n + 3 * rows + 2 * n))))
			return -1;
		float *u = t + rows * n;
		a.x = a.y = widen(c, t, x, rows * n);
		a.s1 = widen(c, u, s1, rows);
		a.s2 = widen(c, u + rows, s2, s1 ? 2 * rows : rows);
		a.w = widen(c, u + 3 * rows, w, n);
		a.b = widen(c, u + 3 * rows + n, b, n);
	}
	par_range(c, rows, rows_grain(n), norm_apply_range, &a);
	if (t)
		narrow_to(c, y, t, rows * n);
	return 0;
}

struct act_args {
	const float *x;
	float *y;
	bool tanh_approx;
	void (*kernel)(const float *x, float *y, int64_t n); /* unary_range's */
};

static void gelu_range(const void *a, int64_t lo, int64_t hi)
{
	const struct act_args *r = a;

	k_gelu(r->x + lo, r->y + lo, hi - lo, r->tanh_approx);
}

/* An activation of n elements, a.x to a.y: in place on a twin under narrow
 * storage. */
static int activation(struct cpu_dev *c, struct act_args a, int64_t n,
		      void (*fn)(const void *a, int64_t lo, int64_t hi))
{
	float *y = a.y, *t = NULL;

	if (narrow(c)) {
		if (!(t = twins(c, (size_t)n)))
			return -1;
		a.x = a.y = widen(c, t, a.x, n);
	}
	par_range(c, n, GRAIN, fn, &a);
	if (t)
		narrow_to(c, y, t, n);
	return 0;
}

static int cpu_gelu(struct dev *d, const float *x, float *y, int64_t n, bool tanh_approx)
{
	return activation(cpu(d), (struct act_args){ .x = x, .y = y, .tanh_approx = tanh_approx },
			  n, gelu_range);
}

/* ops.def's UNARY ops, by op: their kernels (kernels.h) */
static void (*const unary_kernels[OP_COUNT])(const float *x, float *y, int64_t n) = {
#define OP(id, glo, ghi, fl, sig)
#define UNARY(id, sig) [OP_##id] = k_##id,
#include "graph/ops.def"
#undef UNARY
#undef OP
};

/* one call of the op's kernel per range of the pool's split */
static void unary_range(const void *a, int64_t lo, int64_t hi)
{
	const struct act_args *r = a;

	r->kernel(r->x + lo, r->y + lo, hi - lo);
}

static int cpu_unary(struct dev *d, enum op_kind op, const float *x, float *y, int64_t n)
{
	if ((unsigned)op >= OP_COUNT || !unary_kernels[op])
		return -1;
	return activation(cpu(d), (struct act_args){ .x = x, .y = y, .kernel = unary_kernels[op] },
			  n, unary_range);
}

/* k_binary split over the output's outermost dimension longer than 1 (dim):
 * a range [lo, hi) of it is a k_binary of its own on views of the operands,
 * an operand broadcast along dim (size 1 there) seen whole by every range. */
struct bin_args {
	enum k_binop op;
	const float *a, *b;
	float *out;
	const int64_t *ashape, *bshape, *oshape;
	int nd, dim;
	int64_t inner_a, inner_b, inner_o; /* elements per index of dim */
};

/* k_binary on indices [lo, hi) of r's split dimension, the operands'
 * slices at a, b and out (a whole operand where it is broadcast along it). */
static void binary_views(const struct bin_args *r, int64_t lo, int64_t hi, const float *a,
			 const float *b, float *out)
{
	int64_t as[K_MAX_DIMS], bs[K_MAX_DIMS], os[K_MAX_DIMS];

	memcpy(as, r->ashape, (size_t)r->nd * sizeof *as);
	memcpy(bs, r->bshape, (size_t)r->nd * sizeof *bs);
	memcpy(os, r->oshape, (size_t)r->nd * sizeof *os);
	os[r->dim] = hi - lo;
	if (as[r->dim] > 1)
		as[r->dim] = hi - lo;
	if (bs[r->dim] > 1)
		bs[r->dim] = hi - lo;
	k_binary(r->op, a, as, b, bs, out, os, r->nd);
}

static void binary_range(const void *p, int64_t lo, int64_t hi)
{
	const struct bin_args *r = p;
	bool wa = r->ashape[r->dim] > 1, wb = r->bshape[r->dim] > 1;

	binary_views(r, lo, hi, r->a + (wa ? lo * r->inner_a : 0), r->b + (wb ? lo * r->inner_b : 0),
		     r->out + lo * r->inner_o);
}

/* r's split dimension and the elements per index of it; false for a 0-d
 * operation, which has none. */
static bool binary_split(struct bin_args *r)
{
	if (r->nd == 0)
		return false;
	r->dim = 0;
	while (r->dim < r->nd - 1 && r->oshape[r->dim] == 1)
		r->dim++;
	r->inner_a = r->inner_b = r->inner_o = 1;
	for (int i = r->dim + 1; i < r->nd; i++) {
		r->inner_a *= r->ashape[i];
		r->inner_b *= r->bshape[i];
		r->inner_o *= r->oshape[i];
	}
	return true;
}

static void binary_pool(struct cpu_dev *c, enum k_binop op, const float *a,
			const int64_t *ashape, const float *b, const int64_t *bshape, float *out,
			const int64_t *oshape, int nd)
{
	struct bin_args r = { .op = op, .a = a, .b = b, .out = out, .ashape = ashape,
			      .bshape = bshape, .oshape = oshape, .nd = nd };

	if (!binary_split(&r))
		k_binary(op, a, ashape, b, bshape, out, oshape, nd);
	else
		par_range(c, oshape[r.dim], rows_grain(r.inner_o), binary_range, &r);
}

/* Under narrow storage: a range of the split dimension, a few indices at a
 * time, widens its slices of the operands into twins, computes and rounds
 * its slice of the output: one pass over memory where widening both
 * operands whole, the operation and the rounding took four. Every chunk
 * reuses the twins at the range's start, so they stay in L1. The
 * dimensions before the split one are 1, so a slice is contiguous; an
 * operand broadcast along it was widened whole before. */
struct bin_narrow {
	struct bin_args r; /* on the twins */
	enum k_dtype dt;
	const char *a, *b;
	char *out;
};

static void binary_narrow_range(const void *p, int64_t lo, int64_t hi)
{
	const struct bin_narrow *n = p;
	const struct bin_args *r = &n->r;
	size_t e = k_dtype_size(n->dt);
	int64_t step = l1_rows(r->inner_o);
	bool wa = r->ashape[r->dim] > 1, wb = r->bshape[r->dim] > 1;
	float *ta = (float *)r->a + (wa ? lo * r->inner_a : 0);
	float *tb = (float *)r->b + (wb ? lo * r->inner_b : 0);
	float *to = r->out + lo * r->inner_o;

	for (int64_t c = lo; c < hi; c += step) {
		int64_t ce = hi - c < step ? hi : c + step;

		if (wa)
			k_convert(ta, K_F32, n->a + (size_t)(c * r->inner_a) * e, n->dt,
				  (ce - c) * r->inner_a);
		if (wb)
			k_convert(tb, K_F32, n->b + (size_t)(c * r->inner_b) * e, n->dt,
				  (ce - c) * r->inner_b);
		binary_views(r, c, ce, ta, tb, to);
		k_convert(n->out + (size_t)(c * r->inner_o) * e, n->dt, to, K_F32,
			  (ce - c) * r->inner_o);
	}
}

static int cpu_binary(struct dev *d, enum k_binop op, const float *a, const int64_t *ashape,
		      const float *b, const int64_t *bshape, float *out, const int64_t *oshape,
		      int nd)
{
	struct cpu_dev *c = cpu(d);
	int64_t na = 1, nb = 1, no = 1;

	if (!narrow(c)) {
		binary_pool(c, op, a, ashape, b, bshape, out, oshape, nd);
		return 0;
	}
	for (int i = 0; i < nd; i++) {
		na *= ashape[i];
		nb *= bshape[i];
		no *= oshape[i];
	}
	float *t = twins(c, (size_t)(na + nb + no));

	if (!t)
		return -1;
	struct bin_narrow n = { .r = { .op = op, .a = t, .b = t + na, .out = t + na + nb,
				       .ashape = ashape, .bshape = bshape, .oshape = oshape, .nd = nd },
				.dt = c->dt, .a = (const char *)a, .b = (const char *)b, .out = (char *)out };

	if (!binary_split(&n.r)) {
		binary_pool(c, op, widen(c, t, a, na), ashape, widen(c, t + na, b, nb), bshape,
			    t + na + nb, oshape, nd);
		narrow_to(c, out, t + na + nb, no);
		return 0;
	}
	if (ashape[n.r.dim] == 1)
		widen(c, t, a, na);
	if (bshape[n.r.dim] == 1)
		widen(c, t + na, b, nb);
	par_range(c, oshape[n.r.dim], rows_grain(n.r.inner_o), binary_narrow_range, &n);
	return 0;
}

/* Rows of [B, S, ...] split over positions; a range never crosses a batch. */
struct seq_args {
	const float *shift, *scale;
	int64_t S, H, s_stride;
};

static void modulate_range(const void *a, int64_t lo, int64_t hi, const float *x, float *y)
{
	const struct seq_args *r = a;
	/* per-batch shift / scale rows are H apart, per-position ones S * H */
	int64_t b_stride = r->s_stride ? r->S * r->H : r->H;

	for (int64_t row = lo; row < hi;) {
		int64_t b = row / r->S, s0 = row % r->S;
		int64_t ns = hi - row < r->S - s0 ? hi - row : r->S - s0;
		int64_t off = b * b_stride + s0 * r->s_stride;

		k_modulate(x + (row - lo) * r->H, r->shift + off, r->scale + off,
			   y + (row - lo) * r->H, 1, ns, r->H, r->s_stride);
		row += ns;
	}
}

static int cpu_modulate(struct dev *d, const float *x, const float *shift, const float *scale,
			float *y, int64_t B, int64_t S, int64_t H, int64_t s_stride)
{
	struct cpu_dev *c = cpu(d);
	struct seq_args a = { .shift = shift, .scale = scale, .S = S, .H = H, .s_stride = s_stride };
	int64_t n = B * S * H, ns = s_stride ? n : B * H;
	float *t = NULL;

	if (narrow(c)) {
		if (!(t = twins(c, (size_t)(n + 2 * ns))))
			return -1;
		a.shift = widen(c, t + n, shift, ns);
		a.scale = widen(c, t + n + ns, scale, ns);
	}
	par_rows(c, B * S, H, modulate_range, &a, x, H, y, H, t);
	return 0;
}

struct copy_args {
	char *dst;
	const char *src;
	int64_t dst_stride, src_stride, cols;
	size_t esize;
};

static void copy2d_range(const void *a, int64_t lo, int64_t hi)
{
	const struct copy_args *r = a;

	k_copy2d_elems(r->dst + (size_t)(lo * r->dst_stride) * r->esize, r->dst_stride,
		       r->src + (size_t)(lo * r->src_stride) * r->esize, r->src_stride, hi - lo,
		       r->cols, r->esize);
}

/* A copy moves elements of the storage dtype as they are. */
static int cpu_copy2d(struct dev *d, float *dst, int64_t dst_stride, const float *src,
		      int64_t src_stride, int64_t rows, int64_t cols)
{
	struct copy_args a = { (char *)dst, (const char *)src, dst_stride, src_stride, cols,
			       k_dtype_size(cpu(d)->dt) };

	/* Copies are bandwidth-bound: a thread pays off only on larger ranges. */
	par_range(cpu(d), rows, rows_grain(cols) * 4, copy2d_range, &a);
	return 0;
}

/* rope over rows [lo, hi) of B x S: each row's table row is its position
 * s's, k_rope_table_width wide (the interleaved form's R is D, the head
 * dim; the half form rotates the first R channels of each head, per head
 * with each head's own tables) */
struct rope_args {
	const float *x, *cos, *sin;
	float *y;
	int64_t S, x_stride, y_stride, heads, D, R;
	bool half, per_head;
};

static void rope_range(const void *a, int64_t lo, int64_t hi, const float *x0, float *y0)
{
	const struct rope_args *r = a;

	for (int64_t row = lo; row < hi;) {
		int64_t s0 = row % r->S, ns = hi - row < r->S - s0 ? hi - row : r->S - s0;
		int64_t tw = k_rope_table_width(r->heads, r->R, r->per_head);
		const float *cos = r->cos + s0 * tw, *sin = r->sin + s0 * tw;
		const float *x = x0 + (row - lo) * r->x_stride;
		float *y = y0 + (row - lo) * r->y_stride;

		if (r->half)
			k_rope_half(x, r->x_stride, cos, sin, y, r->y_stride, 1, ns, r->heads, r->D,
				    r->R, r->per_head);
		else
			k_rope(x, r->x_stride, cos, sin, y, r->y_stride, 1, ns, r->heads, r->D);
		row += ns;
	}
}

static int rope_rows(struct dev *d, struct rope_args a, int64_t B)
{
	struct cpu_dev *c = cpu(d);
	int64_t W = a.heads * a.D, n = B * a.S * W, S = a.S;
	int64_t R = k_rope_table_width(a.heads, a.R, a.per_head);
	const float *x = a.x;
	float *t = NULL, *y = a.y;
	int64_t x_stride = a.x_stride, y_stride = a.y_stride;

	if (narrow(c)) {
		/* x as a contiguous twin, rotated in place */
		if (!(t = twins(c, (size_t)(n + 2 * S * R))))
			return -1;
		a.x_stride = a.y_stride = W;
		a.cos = widen(c, t + n, a.cos, S * R);
		a.sin = widen(c, t + n + S * R, a.sin, S * R);
	}
	par_rows(c, B * S, W, rope_range, &a, x, x_stride, y, y_stride, t);
	return 0;
}

static int cpu_rope(struct dev *d, const float *x, int64_t x_stride, const float *cos,
		    const float *sin, float *y, int64_t y_stride, int64_t B, int64_t S,
		    int64_t heads, int64_t D)
{
	return rope_rows(d, (struct rope_args){ x, cos, sin, y, S, x_stride, y_stride, heads, D, D,
						false, false }, B);
}

static int cpu_rope_half(struct dev *d, const float *x, int64_t x_stride, const float *cos,
			 const float *sin, float *y, int64_t y_stride, int64_t B, int64_t S,
			 int64_t heads, int64_t D, int64_t R, bool per_head)
{
	return rope_rows(d, (struct rope_args){ x, cos, sin, y, S, x_stride, y_stride, heads, D, R,
						true, per_head }, B);
}

/* index_select / index_copy: the index widened to float32 (under narrow
 * storage), the rows moved as bytes; a gather in parallel over its slabs'
 * rows, a scatter over its slabs (serially within one, so of duplicate
 * indices the last one's row stays, as k_index_rows says). */
struct index_args {
	char *dst;
	const char *src;
	const float *index;
	int64_t dst_rows, src_rows, n, inner;
	size_t esize;
	bool scatter;
};

static void index_range(const void *a, int64_t lo, int64_t hi)
{
	const struct index_args *r = a;
	size_t row = (size_t)r->inner * r->esize;

	if (r->scatter) {
		k_index_rows(r->dst + (size_t)(lo * r->dst_rows) * row, r->dst_rows,
			     r->src + (size_t)(lo * r->n) * row, r->n, r->index, r->n, hi - lo,
			     r->inner, r->esize, true);
		return;
	}
	for (int64_t i = lo; i < hi;) { /* i: slab i / n, its row i % n */
		int64_t o = i / r->n, j = i % r->n, m = hi - i < r->n - j ? hi - i : r->n - j;

		k_index_rows(r->dst + (size_t)(o * r->n + j) * row, m,
			     r->src + (size_t)(o * r->src_rows) * row, r->src_rows, r->index + j,
			     m, 1, r->inner, r->esize, false);
		i += m;
	}
}

static int cpu_index_rows(struct dev *d, float *dst, int64_t dst_rows, const float *src,
			  int64_t src_rows, const float *index, int64_t n, int64_t outer,
			  int64_t inner, bool scatter)
{
	struct cpu_dev *c = cpu(d);
	struct index_args a = { (char *)dst, (const char *)src, index, dst_rows, src_rows, n,
				inner, k_dtype_size(c->dt), scatter };

	if (n <= 0 || outer <= 0 || inner <= 0)
		return 0;
	if (narrow(c)) {
		float *t = twins(c, (size_t)n);

		if (!t)
			return -1;
		a.index = widen(c, t, index, n);
	}
	if (scatter)
		par_range(c, outer, 1, index_range, &a);
	else
		par_range(c, outer * n, rows_grain(inner) * 4, index_range, &a);
	return 0;
}

/* The session sizes one thread's workspace; the other threads' shares are
 * the device's own, grown on demand. */
static size_t cpu_attention_workspace(struct dev *d, int64_t B, int64_t Sq, int64_t Skv,
				      int64_t H, int64_t D, int64_t Dv)
{
	return k_attention_workspace(Sq, Skv, D, Dv);
}

/* The device's attention workspace, grown to `need` bytes (64-byte
 * aligned); NULL when out of memory. */
static void *attn_ws(struct cpu_dev *c, size_t need)
{
	if (need > c->ws_bytes) {
		void *ws = NULL;

		free(c->ws);
		c->ws = posix_memalign(&ws, 64, need) ? NULL : ws;
		c->ws_bytes = c->ws ? need : 0;
	}
	return c->ws;
}

static void attention_f32(struct cpu_dev *c, const float *q, int64_t q_stride, const float *k,
			  int64_t k_stride, const float *v, int64_t v_stride, const float *mask,
			  float *out, float *lse, int64_t B, int64_t Sq, int64_t Skv, int64_t H,
			  int64_t D, int64_t Dv, void *workspace)
{
	struct k_pool *p = pool(c);
	size_t need = (size_t)k_pool_threads(p) * k_attention_workspace(Sq, Skv, D, Dv);

	/* Without the device's workspaces (no pool, or no memory for them)
	 * the session's one serves the calling thread alone. */
	if (p && attn_ws(c, need))
		k_attention_pool(p, q, q_stride, k, k_stride, v, v_stride, mask, out, lse, B, Sq,
				 Skv, H, D, Dv, c->ws);
	else
		k_attention(q, q_stride, k, k_stride, v, v_stride, mask, out, lse, B, Sq, Skv, H,
			    D, Dv, workspace);
}

static int cpu_attention(struct dev *d, const float *q, int64_t q_stride, const float *k,
			 int64_t k_stride, const float *v, int64_t v_stride, const float *mask,
			 float *out, float *lse, int64_t B, int64_t Sq, int64_t Skv, int64_t H,
			 int64_t D, int64_t Dv, void *workspace)
{
	struct cpu_dev *c = cpu(d);

	if (!narrow(c)) {
		attention_f32(c, q, q_stride, k, k_stride, v, v_stride, mask, out, lse, B, Sq, Skv,
			      H, D, Dv, workspace);
		return 0;
	}
	/* bf16 on AMX straight from storage (kernels.h says when) */
	if (c->dt == K_BF16 && !mask && k_attention_bf16_available(D, Dv)) {
		struct k_pool *p = pool(c);
		void *ws = attn_ws(c, (size_t)k_pool_threads(p) * k_attention_bf16_workspace(Skv, D, Dv));

		if (!ws) {
			no_memory();
			return -1;
		}
		k_attention_bf16_pool(p, (const uint16_t *)q, q_stride, (const uint16_t *)k, k_stride,
				      (const uint16_t *)v, v_stride, (uint16_t *)out, lse, B, Sq, Skv,
				      H, D, Dv, ws);
		return 0;
	}
	/* contiguous twins of q, k, v, the mask [B, Skv] and the output */
	int64_t nq = B * Sq * H * D, nk = B * Skv * H * D, nv = B * Skv * H * Dv;
	int64_t nm = mask ? B * Skv : 0;
	float *t = twins(c, (size_t)(nq + nk + nv + nm + B * Sq * H * Dv));

	if (!t)
		return -1;
	float *qf = t, *kf = qf + nq, *vf = kf + nk, *mf = vf + nv, *of = mf + nm;

	conv2d(c, qf, K_F32, H * D, q, c->dt, q_stride, B * Sq, H * D);
	conv2d(c, kf, K_F32, H * D, k, c->dt, k_stride, B * Skv, H * D);
	conv2d(c, vf, K_F32, H * Dv, v, c->dt, v_stride, B * Skv, H * Dv);
	if (mask)
		conv2d(c, mf, K_F32, Skv, mask, c->dt, Skv, B, Skv);
	attention_f32(c, qf, H * D, kf, H * D, vf, H * Dv, mask ? mf : NULL, of, lse, B, Sq, Skv,
		      H, D, Dv, workspace);
	narrow_to(c, out, of, B * Sq * H * Dv);
	return 0;
}

static int cpu_lse_merge(struct dev *d, float *out, dtpc_dtype acc, float *lse,
			 const float *out_blk, const float *lse_blk, int64_t B, int64_t Sq,
			 int64_t H, int64_t Dv)
{
	struct cpu_dev *c = cpu(d);
	int64_t n = B * Sq * H * Dv;

	if (!narrow(c)) {
		k_lse_merge(out, lse, out_blk, lse_blk, B, Sq, H, Dv);
		return 0;
	}
	/* the block widened; the accumulator too unless it is float32 already */
	bool wide_acc = acc == DTPC_F32;
	float *t = twins(c, (size_t)(wide_acc ? n : 2 * n));

	if (!t)
		return -1;
	float *of = wide_acc ? out : widen(c, t + n, out, n);

	k_lse_merge(of, lse, widen(c, t, out_blk, n), lse_blk, B, Sq, H, Dv);
	if (!wide_acc)
		narrow_to(c, out, of, n);
	return 0;
}

struct rows_args {
	const float *in;
	float *y;
	int64_t dim, naxes;
	const int64_t *axes_dim;
	double shift, scale, max_period, input_scale, theta;
	bool flag, f64;
};

static void timestep_range(const void *a, int64_t lo, int64_t hi)
{
	const struct rows_args *r = a;

	k_timestep_embedding(r->in + lo, r->y + lo * r->dim, hi - lo, r->dim, r->flag, r->shift,
			     r->scale, r->max_period, r->input_scale);
}

/* The embeddings under narrow storage: timesteps and positions widened,
 * the float32 kernel into a twin, its table rounded once (diffusers
 * computes them in float32 and casts to the model's dtype); the
 * (un)patchify permutations widen and round exactly. t_f32: t is float32
 * whatever the storage (an input's values as bound, which the session
 * keeps for this op: diffusers' get_timestep_embedding takes
 * `timesteps.float()` of the timestep the pipeline passes, float32 for
 * Wan's, ChronoEdit's, Helios' and LTX's, so 999 stays 999 where bf16
 * storage would make it 1000). */
static int cpu_timestep_embedding(struct dev *d, const float *t, float *y, int64_t n,
				  int64_t dim, bool flip, double shift, double scale,
				  double max_period, double input_scale, bool input_scale_f32,
				  bool t_f32)
{
	struct cpu_dev *c = cpu(d);
	struct rows_args a = { .in = t, .y = y, .dim = dim, .flag = flip, .shift = shift,
			       .scale = scale, .max_period = max_period,
			       .input_scale = input_scale };
	float *tw = NULL;
	/* diffusers' `timestep.to(dtype) * 1000` (Flux) rounds the timestep
	 * and the product to the storage dtype */
	bool round_in = input_scale != 1 && !input_scale_f32;

	if (narrow(c)) {
		if (!(tw = twins(c, (size_t)(n + n * dim))))
			return -1;
		if (t_f32)
			memcpy(tw, t, (size_t)n * sizeof *tw);
		else
			widen(c, tw, t, n);
		a.in = tw;
		a.y = tw + n;
		/* the rounding through y (n * dim >= n elements, written
		 * after); input_scale_f32 keeps the float32 product
		 * (QwenImage21's `time_factor * timestep.float()`), which the
		 * kernel forms */
		if (round_in && t_f32) {
			narrow_to(c, y, tw, n);
			widen(c, tw, y, n);
		}
		if (round_in) {
			for (int64_t i = 0; i < n; i++)
				tw[i] *= (float)input_scale;
			narrow_to(c, y, tw, n);
			widen(c, tw, y, n);
			a.input_scale = 1;
		}
	}
	/* a row costs dim sines and cosines: a few rows are a task */
	par_range(c, n, 1 + GRAIN / 64 / (dim > 0 ? dim : 1), timestep_range, &a);
	if (tw)
		narrow_to(c, y, a.y, n * dim);
	return 0;
}

static void rope_freqs_range(const void *a, int64_t lo, int64_t hi)
{
	const struct rows_args *r = a;

	k_rope_freqs(r->in + lo * r->naxes, r->y + lo * r->dim, hi - lo, r->naxes, r->axes_dim,
		     r->theta, r->flag, r->f64);
}

static int cpu_rope_freqs(struct dev *d, const float *ids, const struct dev_positions *pos,
			  float *y, int64_t rows, int64_t naxes, const int64_t *axes_dim,
			  double theta, bool sine, bool f64)
{
	struct cpu_dev *c = cpu(d);
	struct rows_args a = { .in = ids, .y = y, .naxes = naxes, .axes_dim = axes_dim,
			       .theta = theta, .flag = sine, .f64 = f64 };
	float *t = NULL;

	for (int64_t i = 0; i < naxes; i++)
		a.dim += axes_dim[i];
	if (narrow(c) || !ids) {
		/* float32 positions (widened, or computed: exact up to 2^24
		 * whatever the storage), then the table when it is narrow */
		if (!(t = twins(c, (size_t)(rows * naxes + (narrow(c) ? rows * a.dim : 0)))))
			return -1;
		if (!ids && pos->grid)
			k_grid_ids(t, pos->F, pos->H, pos->W, pos->center);
		else if (!ids)
			k_text_ids(t, rows, pos->first, naxes);
		a.in = ids ? widen(c, t, ids, rows * naxes) : t;
		if (narrow(c))
			a.y = t + rows * naxes;
	}
	par_range(c, rows, 1 + GRAIN / 64 / (a.dim > 0 ? a.dim : 1), rope_freqs_range, &a);
	if (narrow(c))
		narrow_to(c, y, a.y, rows * a.dim);
	return 0;
}

struct ltx_rope_args {
	const float *ids;
	float *y;
	int64_t dim, patch_t, patch;
	const double *scale;
	double theta;
	bool sine;
};

static void ltx_rope_range(const void *a, int64_t lo, int64_t hi)
{
	const struct ltx_rope_args *r = a;

	k_ltx_rope_freqs(r->ids + lo * 3, r->y + lo * r->dim, hi - lo, r->dim, r->scale,
			 r->patch_t, r->patch, r->theta, r->sine);
}

static int cpu_ltx_rope_freqs(struct dev *d, const float *ids, float *y, int64_t rows,
			      int64_t dim, const double scale[3], int64_t patch_t, int64_t patch,
			      double theta, bool sine)
{
	struct cpu_dev *c = cpu(d);
	struct ltx_rope_args a = { ids, y, dim, patch_t, patch, scale, theta, sine };
	float *t = NULL;

	if (narrow(c)) {
		/* float32 positions and table, the table narrowed once */
		if (!(t = twins(c, (size_t)(rows * 3 + rows * dim))))
			return -1;
		a.ids = widen(c, t, ids, rows * 3);
		a.y = t + rows * 3;
	}
	/* a row costs dim / 2 sines or cosines: a few rows are a task */
	par_range(c, rows, 1 + GRAIN / 64 / (dim > 0 ? dim : 1), ltx_rope_range, &a);
	if (narrow(c))
		narrow_to(c, y, a.y, rows * dim);
	return 0;
}

struct ltx2_rope_args {
	const struct k_ltx2_rope *p;
	float *y;
	int64_t lo;
	bool sine;
};

static void ltx2_rope_range(const void *a, int64_t lo, int64_t hi)
{
	const struct ltx2_rope_args *r = a;

	k_ltx2_rope_freqs(r->p, r->y + lo * k_ltx2_rope_width(r->p), r->lo + lo, hi - lo, r->sine);
}

static int cpu_ltx2_rope_freqs(struct dev *d, const struct k_ltx2_rope *p, float *y, int64_t lo,
			       int64_t rows, bool sine)
{
	struct cpu_dev *c = cpu(d);
	struct ltx2_rope_args a = { p, y, lo, sine };
	float *t = NULL;

	if (narrow(c)) {
		/* a float32 table, narrowed once */
		if (!(t = twins(c, (size_t)(rows * k_ltx2_rope_width(p)))))
			return -1;
		a.y = t;
	}
	par_range(c, rows, 1 + GRAIN / 64 / (p->dim > 0 ? p->dim : 1), ltx2_rope_range, &a);
	if (narrow(c))
		narrow_to(c, y, a.y, rows * k_ltx2_rope_width(p));
	return 0;
}

/* Positions are integers; the compiler and exec_check keep them within the
 * storage dtype's exact ones, so the rounding below changes none. */
static int cpu_grid_ids(struct dev *d, float *y, int64_t F, int64_t H, int64_t W, bool center)
{
	struct cpu_dev *c = cpu(d);
	int64_t n = F * H * W * 3;
	float *t = narrow(c) ? twins(c, (size_t)n) : y;

	if (!t)
		return -1;
	k_grid_ids(t, F, H, W, center);
	if (t != y)
		narrow_to(c, y, t, n);
	return 0;
}

static int cpu_text_ids(struct dev *d, float *y, int64_t length, int64_t first, int64_t axes)
{
	struct cpu_dev *c = cpu(d);
	float *t = narrow(c) ? twins(c, (size_t)(length * axes)) : y;

	if (!t)
		return -1;
	k_text_ids(t, length, first, axes);
	if (t != y)
		narrow_to(c, y, t, length * axes);
	return 0;
}

/* The (un)patchify copies run on the calling thread: once per forward, a
 * few MB at most beside the blocks' GEMMs. A permutation: under narrow
 * storage widening and rounding back are exact. */
typedef void patch_kernel(const float *x, float *y, int64_t B, int64_t C, int64_t F, int64_t H,
			  int64_t W, int64_t pt, int64_t ph, int64_t pw);

static int patch_copy(struct dev *d, patch_kernel *k, const float *x, float *y, int64_t B,
		      int64_t C, int64_t F, int64_t H, int64_t W, int64_t pt, int64_t ph,
		      int64_t pw)
{
	struct cpu_dev *c = cpu(d);
	int64_t n = B * C * F * H * W;
	float *t = NULL;

	if (narrow(c)) {
		if (!(t = twins(c, (size_t)(2 * n))))
			return -1;
		x = widen(c, t, x, n);
	}
	k(x, t ? t + n : y, B, C, F, H, W, pt, ph, pw);
	if (t)
		narrow_to(c, y, t + n, n);
	return 0;
}

static int cpu_patchify(struct dev *d, const float *x, float *y, int64_t B, int64_t C,
			int64_t F, int64_t H, int64_t W, int64_t pt, int64_t ph, int64_t pw)
{
	return patch_copy(d, k_patchify, x, y, B, C, F, H, W, pt, ph, pw);
}

static int cpu_unpatchify(struct dev *d, const float *x, float *y, int64_t B, int64_t C,
			  int64_t F, int64_t H, int64_t W, int64_t pt, int64_t ph, int64_t pw)
{
	return patch_copy(d, k_unpatchify, x, y, B, C, F, H, W, pt, ph, pw);
}

/* pad's constant: under narrow storage the value rounded once into a row
 * of the storage dtype, copied to every row of the view. */
static int cpu_fill2d(struct dev *d, float *dst, int64_t dst_stride, int64_t rows, int64_t cols,
		      float value)
{
	struct cpu_dev *c = cpu(d);

	if (!narrow(c)) {
		k_fill2d(dst, dst_stride, rows, cols, value);
		return 0;
	}
	/* cols floats, then the rounded row (narrower: it fits in as many) */
	float *t = twins(c, (size_t)(2 * cols));

	if (!t)
		return -1;
	k_fill2d(t, cols, 1, cols, value);
	k_convert(t + cols, c->dt, t, K_F32, cols);
	k_copy2d_elems(dst, dst_stride, t + cols, 0, rows, cols, k_dtype_size(c->dt));
	return 0;
}

static const struct dev_ops cpu_ops = {
	.name = "cpu",
	.host_memory = true,
	.masked_attention = true,
	.destroy = cpu_destroy,
	.alloc = cpu_alloc,
	.free = cpu_free,
	.upload = cpu_copy,
	.download = cpu_copy,
	.copy = cpu_copy,
	.sync = cpu_sync,
	.threads = cpu_threads,
	.thread_count = cpu_thread_count,
	.stream = cpu_stream,
	.set_dtype = cpu_set_dtype,
	.convert = cpu_convert,
	.linear = cpu_linear,
	.linear_act = cpu_linear_act,
	.layer_norm = cpu_layer_norm,
	.rms_norm = cpu_rms_norm,
	.norm_stats = cpu_norm_stats,
	.norm_apply = cpu_norm_apply,
	.gelu = cpu_gelu,
	.unary = cpu_unary,
	.binary = cpu_binary,
	.modulate = cpu_modulate,
	.copy2d = cpu_copy2d,
	.fill2d = cpu_fill2d,
	.rope = cpu_rope,
	.rope_half = cpu_rope_half,
	.index_rows = cpu_index_rows,
	.attention_workspace = cpu_attention_workspace,
	.attention = cpu_attention,
	.lse_merge = cpu_lse_merge,
	.timestep_embedding = cpu_timestep_embedding,
	.rope_freqs = cpu_rope_freqs,
	.ltx_rope_freqs = cpu_ltx_rope_freqs,
	.ltx2_rope_freqs = cpu_ltx2_rope_freqs,
	.grid_ids = cpu_grid_ids,
	.text_ids = cpu_text_ids,
	.patchify = cpu_patchify,
	.unpatchify = cpu_unpatchify,
};

struct dev *dev_cpu_create(void)
{
	struct cpu_dev *c = calloc(1, sizeof *c);

	if (!c)
		return NULL;
	c->base.ops = &cpu_ops;
	atomic_fetch_add(&live_devices, 1);
	return &c->base;
}
