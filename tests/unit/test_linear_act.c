/* test_linear_act.c — linear + activation fused (the CPU device's
 * linear_act, k_linear_act_pool, k_linear_act_narrow_pool and its tiles
 * form) against what it replaces and against float64.
 *
 * 1. Bit for bit: for f32, bf16 and f16 storage, every activation, with a
 *    bias and without, linear_act equals the device's linear followed by
 *    its gelu / silu on y. The sizes are odd and straddle the blocking:
 *    37x61x29; 301x67x301 (the narrow GEMM's 256-row and 256-column tiles,
 *    the bf16 dot product's 64-column panels, its 2-row steps and its
 *    32-wide k steps each with a tail); 1x129x517 (the modulation layers'
 *    single row, split by columns); on 1, 2 and 3 threads so the f32 GEMM
 *    is split by rows, by columns and not at all. The two outputs are
 *    poisoned with different bytes first, so an element neither writes
 *    cannot pass. bf16's tiles path is checked too (the device takes the
 *    dot-product path on a CPU with AVX-512 BF16).
 * 2. Against float64 (x . w^T + b and the activation in double, from the
 *    same rounded inputs, nothing rounded in between): the normwise relative
 *    error ||y - ref|| / ||ref|| within 2 u for bf16 and f16 (u the unit
 *    roundoff, 2^-8 and 2^-11: the sum and the result are each rounded
 *    once, by at most u relative, and the activation's slope, at most
 *    1.13, carries the first rounding on; measured about 0.7 u), and
 *    within 8 u = 4.8e-7 for f32 (float32 sums of up to 129 products and
 *    the activation's own few ulps; measured about 3 u).
 * Negative controls: the wrong activation and a weight with its sign
 * flipped each make the bitwise comparison fail, as does one flipped bit of
 * an output (the comparison itself); against float64, SiLU where GELU is
 * wanted (and the reverse), a dropped bias and one NaN output each fail
 * the bound. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/kernels.h"
#include "runtime/device.h"
#include "tests/rand.h"
#include "tests/unit/unit.h"


static const char *dt_name(enum k_dtype dt)
{
	return dt == K_F32 ? "f32" : dt == K_BF16 ? "bf16" : "f16";
}

static const char *act_name(enum k_act act)
{
	switch (act) {
	case K_ACT_GELU:
		return "gelu";
	case K_ACT_GELU_TANH:
		return "gelu_tanh";
	case K_ACT_SILU:
		return "silu";
	}
	return "?";
}

static double act_f64(enum k_act act, double x)
{
	switch (act) {
	case K_ACT_GELU:
		return 0.5 * x * erfc(-x / sqrt(2.0));
	case K_ACT_GELU_TANH:
		return 0.5 * x * (1.0 + tanh(sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
	case K_ACT_SILU:
		return x / (1.0 + exp(-x));
	}
	return NAN;
}

/* n values scale * (-1, 1) in storage dtype dt, and their float32 values. */
static void *rand_in(enum k_dtype dt, int64_t n, float *as_f32, float scale)
{
	void *p = malloc((size_t)n * k_dtype_size(dt));

	for (int64_t i = 0; i < n; i++)
		as_f32[i] = scale * urand();
	k_convert(p, dt, as_f32, K_F32, n);
	k_convert(as_f32, K_F32, p, dt, n);
	return p;
}

/* The device's activation op on y, in place: the unfused pair's second half. */
static void device_act(struct dev *d, enum k_act act, void *y, int64_t n)
{
	switch (act) {
	case K_ACT_GELU:
		d->ops->gelu(d, y, y, n, false);
		return;
	case K_ACT_GELU_TANH:
		d->ops->gelu(d, y, y, n, true);
		return;
	case K_ACT_SILU:
		d->ops->unary(d, OP_silu, y, y, n);
		return;
	}
}

/* ||y - ref|| / ||ref||, y in storage dtype dt; NaN anywhere gives NaN. */
static double rel_err(enum k_dtype dt, const void *y, const double *ref, int64_t n)
{
	float *f = malloc((size_t)n * sizeof *f);
	double num = 0, den = 0;

	k_convert(f, K_F32, y, dt, n);
	for (int64_t i = 0; i < n; i++) {
		num += (f[i] - ref[i]) * (f[i] - ref[i]);
		den += ref[i] * ref[i];
	}
	free(f);
	return sqrt(num / den);
}

static double tol_of(enum k_dtype dt)
{
	return dt == K_F32 ? 8 * 0x1p-24 : dt == K_BF16 ? 2 * 0x1p-8 : 2 * 0x1p-11;
}

/* act(x . w^T + b) in float64 from the float32 values of the inputs. */
static void reference(const float *x, const float *w, const float *b, double *ref, int64_t m,
		      int64_t k, int64_t n, enum k_act act)
{
	for (int64_t i = 0; i < m; i++)
		for (int64_t j = 0; j < n; j++) {
			double s = b ? b[j] : 0;

			for (int64_t l = 0; l < k; l++)
				s += (double)x[i * k + l] * w[j * k + l];
			ref[i * n + j] = act_f64(act, s);
		}
}

struct inputs {
	int64_t m, k, n;
	enum k_dtype dt;
	void *x, *w, *b;    /* storage dtype */
	float *xf, *wf, *bf; /* their float32 values */
	size_t ybytes;
};

static void inputs_make(struct inputs *in, enum k_dtype dt, int64_t m, int64_t k, int64_t n)
{
	*in = (struct inputs){ .m = m, .k = k, .n = n, .dt = dt };
	in->xf = malloc((size_t)(m * k) * sizeof(float));
	in->wf = malloc((size_t)(n * k) * sizeof(float));
	in->bf = malloc((size_t)n * sizeof(float));
	in->x = rand_in(dt, m * k, in->xf, 1.0f);
	/* pre-activations of about +-2: both of GELU's bends and its tails */
	in->w = rand_in(dt, n * k, in->wf, (float)(3.0 / sqrt((double)k)));
	in->b = rand_in(dt, n, in->bf, 1.0f);
	in->ybytes = (size_t)(m * n) * k_dtype_size(dt);
}

static void inputs_free(struct inputs *in)
{
	free(in->x);
	free(in->w);
	free(in->b);
	free(in->xf);
	free(in->wf);
	free(in->bf);
}

/* Two outputs poisoned with different bytes. */
static void poison(void *a, void *b, size_t bytes)
{
	memset(a, 0xa5, bytes);
	memset(b, 0x5a, bytes);
}

/* One size on one device (threads, dtype): fused against unfused, bit for
 * bit, and against float64, for every activation with and without bias. */
static void test_case(struct dev *d, int threads, enum k_dtype dt, int64_t m, int64_t k,
		      int64_t n)
{
	struct inputs in;

	inputs_make(&in, dt, m, k, n);
	void *fused = malloc(in.ybytes), *apart = malloc(in.ybytes);
	double *ref = malloc((size_t)(m * n) * sizeof *ref);

	for (int bias = 0; bias < 2; bias++)
		for (enum k_act act = K_ACT_GELU; act <= K_ACT_SILU; act++) {
			const float *b = bias ? in.b : NULL;
			int rc;

			poison(fused, apart, in.ybytes);
			rc = d->ops->linear(d, in.x, in.w, b, apart, m, k, n);
			device_act(d, act, apart, m * n);
			rc |= d->ops->linear_act(d, in.x, in.w, b, fused, m, k, n, act);
			UNIT_CHECK(rc == 0 && !memcmp(fused, apart, in.ybytes),
				   "%s %lldx%lldx%lld %s%s, %d thread%s: linear_act = linear, %s "
				   "bit for bit",
				   dt_name(dt), (long long)m, (long long)k, (long long)n,
				   act_name(act), bias ? " +b" : "", threads, threads > 1 ? "s" : "",
				   act_name(act));
			reference(in.xf, in.wf, bias ? in.bf : NULL, ref, m, k, n, act);
			double e = rel_err(dt, fused, ref, m * n);

			UNIT_CHECK(e <= tol_of(dt),
				   "%s %lldx%lldx%lld %s%s, %d thread%s: against float64 %.2e <= "
				   "%.1e",
				   dt_name(dt), (long long)m, (long long)k, (long long)n,
				   act_name(act), bias ? " +b" : "", threads, threads > 1 ? "s" : "",
				   e, tol_of(dt));
		}
	free(fused);
	free(apart);
	free(ref);
	inputs_free(&in);
}

/* The controls, on one size per dtype. */
static void test_controls(struct dev *d, enum k_dtype dt)
{
	int64_t m = 37, k = 61, n = 29;
	struct inputs in;

	inputs_make(&in, dt, m, k, n);
	void *fused = malloc(in.ybytes), *apart = malloc(in.ybytes);
	double *ref = malloc((size_t)(m * n) * sizeof *ref);
	size_t e = k_dtype_size(dt);

	/* the unfused GELU (exact) pair, and the fused one with the wrong
	 * activation: GELU's tanh form, a few ulps away at most */
	poison(fused, apart, in.ybytes);
	d->ops->linear(d, in.x, in.w, in.b, apart, m, k, n);
	device_act(d, K_ACT_GELU, apart, m * n);
	d->ops->linear_act(d, in.x, in.w, in.b, fused, m, k, n, K_ACT_GELU_TANH);
	UNIT_CHECK(memcmp(fused, apart, in.ybytes) != 0,
		   "%s control: gelu_tanh fused differs from the gelu pair", dt_name(dt));

	/* a weight of the last row with its sign flipped */
	char *wp = in.w;

	wp[(n * k - 1) * e + e - 1] ^= 0x80;
	d->ops->linear_act(d, in.x, in.w, in.b, fused, m, k, n, K_ACT_GELU);
	wp[(n * k - 1) * e + e - 1] ^= 0x80;
	UNIT_CHECK(memcmp(fused, apart, in.ybytes) != 0,
		   "%s control: a weight with its sign flipped differs", dt_name(dt));

	/* the comparison itself: equal outputs, then one low bit flipped */
	d->ops->linear_act(d, in.x, in.w, in.b, fused, m, k, n, K_ACT_GELU);
	bool same = !memcmp(fused, apart, in.ybytes);

	((char *)fused)[in.ybytes - e] ^= 1;
	UNIT_CHECK(same && memcmp(fused, apart, in.ybytes) != 0,
		   "%s control: one flipped bit of the last output is caught", dt_name(dt));

	/* against float64 */
	for (int swap = 0; swap < 2; swap++) {
		enum k_act act = swap ? K_ACT_SILU : K_ACT_GELU, wrong = swap ? K_ACT_GELU : K_ACT_SILU;

		reference(in.xf, in.wf, in.bf, ref, m, k, n, act);
		d->ops->linear_act(d, in.x, in.w, in.b, fused, m, k, n, wrong);
		double err = rel_err(dt, fused, ref, m * n);

		UNIT_CHECK(!(err <= tol_of(dt)), "%s control: %s against %s's float64 fails (%.2e)",
			   dt_name(dt), act_name(wrong), act_name(act), err);
	}
	reference(in.xf, in.wf, in.bf, ref, m, k, n, K_ACT_GELU);
	d->ops->linear_act(d, in.x, in.w, NULL, fused, m, k, n, K_ACT_GELU);
	double err = rel_err(dt, fused, ref, m * n);

	UNIT_CHECK(!(err <= tol_of(dt)), "%s control: the bias dropped fails (%.2e)", dt_name(dt),
		   err);
	d->ops->linear_act(d, in.x, in.w, in.b, fused, m, k, n, K_ACT_GELU);
	float nan = NAN;

	k_convert((char *)fused + (size_t)(m * n / 2) * e, dt, &nan, K_F32, 1);
	err = rel_err(dt, fused, ref, m * n);
	UNIT_CHECK(!(err <= tol_of(dt)), "%s control: one NaN output fails", dt_name(dt));
	free(fused);
	free(apart);
	free(ref);
	inputs_free(&in);
}

/* bf16 through the tiles path (widened tiles, one sgemm each), which the
 * device skips where the CPU has AVX-512 BF16: the kernels directly, the
 * unfused activation on the device. */
static void test_bf16_tiles(struct dev *d, int threads, int64_t m, int64_t k, int64_t n)
{
	struct inputs in;
	struct k_pool *pool = threads > 1 ? k_pool_create(threads) : NULL;

	inputs_make(&in, K_BF16, m, k, n);
	void *fused = malloc(in.ybytes), *apart = malloc(in.ybytes);
	void *ws = malloc(k_linear_narrow_workspace(k_pool_threads(pool), m, k, n));

	for (enum k_act act = K_ACT_GELU; act <= K_ACT_SILU; act++) {
		poison(fused, apart, in.ybytes);
		k_linear_narrow_tiles_pool(pool, K_BF16, in.x, in.w, in.b, apart, m, k, n, ws);
		device_act(d, act, apart, m * n);
		k_linear_act_narrow_tiles_pool(pool, K_BF16, in.x, in.w, in.b, fused, m, k, n, act,
					       ws);
		UNIT_CHECK(!memcmp(fused, apart, in.ybytes),
			   "bf16 tiles %lldx%lldx%lld %s +b, %d thread%s: fused = apart, bit for "
			   "bit",
			   (long long)m, (long long)k, (long long)n, act_name(act), threads,
			   threads > 1 ? "s" : "");
	}
	free(ws);
	free(fused);
	free(apart);
	inputs_free(&in);
	k_pool_free(pool);
}

int main(void)
{
	static const struct {
		int64_t m, k, n;
		int threads;
	} cases[] = {
		{ 37, 61, 29, 1 },   { 37, 61, 29, 3 },   { 301, 67, 301, 1 },
		{ 301, 67, 301, 2 }, { 1, 129, 517, 3 },
	};

	for (enum k_dtype dt = K_F32; dt <= K_F16; dt++) {
		for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
			struct dev *d = dev_cpu_create();

			d->ops->threads(d, cases[c].threads);
			d->ops->set_dtype(d, (dtpc_dtype)dt);
			test_case(d, cases[c].threads, dt, cases[c].m, cases[c].k, cases[c].n);
			if (dt == K_BF16)
				test_bf16_tiles(d, cases[c].threads, cases[c].m, cases[c].k,
						cases[c].n);
			if (c == 0)
				test_controls(d, dt);
			d->ops->destroy(d);
		}
	}
	/* the device's bf16 cases above took the dot-product path where it exists */
	if (!k_bf16_dot_available())
		UNIT_CHECK(true, "bf16 dot-product path # SKIP no AVX-512 BF16 on this CPU");
	return unit_done();
}
