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
 * session has run. */
#include <cblas.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/device.h"

struct cpu_dev {
	struct dev base;
	struct k_pool *pool;
	int threads;     /* set by threads(); 0: the default */
	int applied;     /* the size pool() last made (0: none yet) */
	void *ws;        /* attention workspaces, one share per pool thread */
	size_t ws_bytes;
};

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
	atomic_fetch_sub(&live_devices, 1);
	free(c);
}

static const char *cpu_error(struct dev *d)
{
	return "out of memory";
}

static void *cpu_alloc(struct dev *d, size_t bytes)
{
	void *p = NULL;
	/* the arena's offsets are 64-byte aligned: keep the base so too */
	return posix_memalign(&p, 64, bytes ? bytes : 64) ? NULL : p;
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

static int cpu_linear(struct dev *d, const float *x, const float *w, const float *b, float *y,
		      int64_t m, int64_t k, int64_t n)
{
	k_linear_pool(pool(cpu(d)), x, w, b, y, m, k, n);
	return 0;
}

struct norm_args {
	const float *x, *w, *b;
	float *y;
	int64_t n, group;
	float eps;
};

static void layer_norm_range(const void *a, int64_t lo, int64_t hi)
{
	const struct norm_args *r = a;

	k_layer_norm(r->x + lo * r->n, r->y + lo * r->n, hi - lo, r->n, r->eps, r->w, r->b);
}

static int cpu_layer_norm(struct dev *d, const float *x, float *y, int64_t rows, int64_t n,
			  float eps, const float *w, const float *b)
{
	struct norm_args a = { .x = x, .w = w, .b = b, .y = y, .n = n, .eps = eps };

	par_range(cpu(d), rows, rows_grain(n), layer_norm_range, &a);
	return 0;
}

static void rms_norm_range(const void *a, int64_t lo, int64_t hi)
{
	const struct norm_args *r = a;

	k_rms_norm(r->x + lo * r->n, r->y + lo * r->n, hi - lo, r->n, r->group, r->eps, r->w);
}

static int cpu_rms_norm(struct dev *d, const float *x, float *y, int64_t rows, int64_t n,
			int64_t group, float eps, const float *w)
{
	struct norm_args a = { .x = x, .w = w, .y = y, .n = n, .group = group, .eps = eps };

	par_range(cpu(d), rows, rows_grain(n), rms_norm_range, &a);
	return 0;
}

struct act_args {
	const float *x;
	float *y;
	bool tanh_approx;
};

static void gelu_range(const void *a, int64_t lo, int64_t hi)
{
	const struct act_args *r = a;

	k_gelu(r->x + lo, r->y + lo, hi - lo, r->tanh_approx);
}

static int cpu_gelu(struct dev *d, const float *x, float *y, int64_t n, bool tanh_approx)
{
	struct act_args a = { x, y, tanh_approx };

	par_range(cpu(d), n, GRAIN, gelu_range, &a);
	return 0;
}

static void silu_range(const void *a, int64_t lo, int64_t hi)
{
	const struct act_args *r = a;

	k_silu(r->x + lo, r->y + lo, hi - lo);
}

static int cpu_silu(struct dev *d, const float *x, float *y, int64_t n)
{
	struct act_args a = { x, y, false };

	par_range(cpu(d), n, GRAIN, silu_range, &a);
	return 0;
}

static int cpu_binary(struct dev *d, enum k_binop op, const float *a, const int64_t *ashape,
		      const float *b, const int64_t *bshape, float *out, const int64_t *oshape,
		      int nd)
{
	k_binary(op, a, ashape, b, bshape, out, oshape, nd);
	return 0;
}

/* Rows of [B, S, ...] split over positions; a range never crosses a batch. */
struct seq_args {
	const float *x, *shift, *scale, *cos, *sin;
	float *y;
	int64_t S, H, s_stride, x_stride, y_stride, heads, D;
};

static void modulate_range(const void *a, int64_t lo, int64_t hi)
{
	const struct seq_args *r = a;
	/* per-batch shift / scale rows are H apart, per-position ones S * H */
	int64_t b_stride = r->s_stride ? r->S * r->H : r->H;

	for (int64_t row = lo; row < hi;) {
		int64_t b = row / r->S, s0 = row % r->S;
		int64_t ns = hi - row < r->S - s0 ? hi - row : r->S - s0;
		int64_t off = b * b_stride + s0 * r->s_stride;

		k_modulate(r->x + row * r->H, r->shift + off, r->scale + off, r->y + row * r->H, 1,
			   ns, r->H, r->s_stride);
		row += ns;
	}
}

static int cpu_modulate(struct dev *d, const float *x, const float *shift, const float *scale,
			float *y, int64_t B, int64_t S, int64_t H, int64_t s_stride)
{
	struct seq_args a = { .x = x, .shift = shift, .scale = scale, .y = y, .S = S, .H = H,
			      .s_stride = s_stride };

	par_range(cpu(d), B * S, rows_grain(H), modulate_range, &a);
	return 0;
}

struct copy_args {
	float *dst;
	const float *src;
	int64_t dst_stride, src_stride, cols;
};

static void copy2d_range(const void *a, int64_t lo, int64_t hi)
{
	const struct copy_args *r = a;

	k_copy2d(r->dst + lo * r->dst_stride, r->dst_stride, r->src + lo * r->src_stride,
		 r->src_stride, hi - lo, r->cols);
}

static int cpu_copy2d(struct dev *d, float *dst, int64_t dst_stride, const float *src,
		      int64_t src_stride, int64_t rows, int64_t cols)
{
	struct copy_args a = { dst, src, dst_stride, src_stride, cols };

	/* Copies are bandwidth-bound: a thread pays off only on larger ranges. */
	par_range(cpu(d), rows, rows_grain(cols) * 4, copy2d_range, &a);
	return 0;
}

static void rope_range(const void *a, int64_t lo, int64_t hi)
{
	const struct seq_args *r = a;

	for (int64_t row = lo; row < hi;) {
		int64_t s0 = row % r->S, ns = hi - row < r->S - s0 ? hi - row : r->S - s0;

		k_rope(r->x + row * r->x_stride, r->x_stride, r->cos + s0 * r->D, r->sin + s0 * r->D,
		       r->y + row * r->y_stride, r->y_stride, 1, ns, r->heads, r->D);
		row += ns;
	}
}

static int cpu_rope(struct dev *d, const float *x, int64_t x_stride, const float *cos,
		    const float *sin, float *y, int64_t y_stride, int64_t B, int64_t S,
		    int64_t heads, int64_t D)
{
	struct seq_args a = { .x = x, .cos = cos, .sin = sin, .y = y, .S = S,
			      .x_stride = x_stride, .y_stride = y_stride, .heads = heads, .D = D };

	par_range(cpu(d), B * S, rows_grain(heads * D), rope_range, &a);
	return 0;
}

/* The session sizes one thread's workspace; the other threads' shares are
 * the device's own, grown on demand. */
static size_t cpu_attention_workspace(struct dev *d, int64_t B, int64_t Sq, int64_t Skv,
				      int64_t H, int64_t D, int64_t Dv)
{
	return k_attention_workspace(Sq, Skv, D, Dv);
}

static int cpu_attention(struct dev *d, const float *q, int64_t q_stride, const float *k,
			 int64_t k_stride, const float *v, int64_t v_stride, const float *mask,
			 float *out, float *lse, int64_t B, int64_t Sq, int64_t Skv, int64_t H,
			 int64_t D, int64_t Dv, void *workspace)
{
	struct cpu_dev *c = cpu(d);
	struct k_pool *p = pool(c);
	size_t need = (size_t)k_pool_threads(p) * k_attention_workspace(Sq, Skv, D, Dv);

	if (p && need > c->ws_bytes) {
		void *ws = NULL;

		free(c->ws);
		c->ws = posix_memalign(&ws, 64, need) ? NULL : ws;
		c->ws_bytes = c->ws ? need : 0;
	}
	/* Without the device's workspaces (no pool, or no memory for them)
	 * the session's one serves the calling thread alone. */
	if (p && c->ws)
		k_attention_pool(p, q, q_stride, k, k_stride, v, v_stride, mask, out, lse, B, Sq,
				 Skv, H, D, Dv, c->ws);
	else
		k_attention(q, q_stride, k, k_stride, v, v_stride, mask, out, lse, B, Sq, Skv, H,
			    D, Dv, workspace);
	return 0;
}

static int cpu_lse_merge(struct dev *d, float *out, float *lse, const float *out_blk,
			 const float *lse_blk, int64_t B, int64_t Sq, int64_t H, int64_t Dv)
{
	k_lse_merge(out, lse, out_blk, lse_blk, B, Sq, H, Dv);
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

static int cpu_timestep_embedding(struct dev *d, const float *t, float *y, int64_t n,
				  int64_t dim, bool flip, double shift, double scale,
				  double max_period, double input_scale)
{
	struct rows_args a = { .in = t, .y = y, .dim = dim, .flag = flip, .shift = shift,
			       .scale = scale, .max_period = max_period,
			       .input_scale = input_scale };

	/* a row costs dim sines and cosines: a few rows are a task */
	par_range(cpu(d), n, 1 + GRAIN / 64 / (dim > 0 ? dim : 1), timestep_range, &a);
	return 0;
}

static void rope_freqs_range(const void *a, int64_t lo, int64_t hi)
{
	const struct rows_args *r = a;

	k_rope_freqs(r->in + lo * r->naxes, r->y + lo * r->dim, hi - lo, r->naxes, r->axes_dim,
		     r->theta, r->flag, r->f64);
}

static int cpu_rope_freqs(struct dev *d, const float *ids, float *y, int64_t rows,
			  int64_t naxes, const int64_t *axes_dim, double theta, bool sine, bool f64)
{
	struct rows_args a = { .in = ids, .y = y, .naxes = naxes, .axes_dim = axes_dim,
			       .theta = theta, .flag = sine, .f64 = f64 };

	for (int64_t i = 0; i < naxes; i++)
		a.dim += axes_dim[i];
	par_range(cpu(d), rows, 1 + GRAIN / 64 / (a.dim > 0 ? a.dim : 1), rope_freqs_range, &a);
	return 0;
}

static int cpu_grid_ids(struct dev *d, float *y, int64_t F, int64_t H, int64_t W, bool center)
{
	k_grid_ids(y, F, H, W, center);
	return 0;
}

static int cpu_text_ids(struct dev *d, float *y, int64_t length, int64_t first, int64_t axes)
{
	k_text_ids(y, length, first, axes);
	return 0;
}

/* The (un)patchify copies run on the calling thread: once per forward, a
 * few MB at most beside the blocks' GEMMs. */
static int cpu_patchify(struct dev *d, const float *x, float *y, int64_t B, int64_t C,
			int64_t F, int64_t H, int64_t W, int64_t pt, int64_t ph, int64_t pw)
{
	k_patchify(x, y, B, C, F, H, W, pt, ph, pw);
	return 0;
}

static int cpu_unpatchify(struct dev *d, const float *x, float *y, int64_t B, int64_t C,
			  int64_t F, int64_t H, int64_t W, int64_t pt, int64_t ph, int64_t pw)
{
	k_unpatchify(x, y, B, C, F, H, W, pt, ph, pw);
	return 0;
}

static int cpu_fill2d(struct dev *d, float *dst, int64_t dst_stride, int64_t rows, int64_t cols,
		      float value)
{
	(void)d;
	k_fill2d(dst, dst_stride, rows, cols, value);
	return 0;
}

static const struct dev_ops cpu_ops = {
	.name = "cpu",
	.host_memory = true,
	.masked_attention = true,
	.destroy = cpu_destroy,
	.error = cpu_error,
	.alloc = cpu_alloc,
	.free = cpu_free,
	.upload = cpu_copy,
	.download = cpu_copy,
	.copy = cpu_copy,
	.sync = cpu_sync,
	.threads = cpu_threads,
	.stream = cpu_stream,
	.linear = cpu_linear,
	.layer_norm = cpu_layer_norm,
	.rms_norm = cpu_rms_norm,
	.gelu = cpu_gelu,
	.silu = cpu_silu,
	.binary = cpu_binary,
	.modulate = cpu_modulate,
	.copy2d = cpu_copy2d,
	.fill2d = cpu_fill2d,
	.rope = cpu_rope,
	.attention_workspace = cpu_attention_workspace,
	.attention = cpu_attention,
	.lse_merge = cpu_lse_merge,
	.timestep_embedding = cpu_timestep_embedding,
	.rope_freqs = cpu_rope_freqs,
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
