/* test_bf16.c — narrow storage on the CPU: k_convert, both bf16 GEMM paths
 * and every kernel of the CPU device with set_dtype(bf16) (and two in f16),
 * against float64 references computed from the same rounded inputs.
 *
 * The bound (check_bf16): every element within half a bf16 ulp of the float64
 * result, times 1.02 (float32 accumulation adds ~1e-6 relative, far below a
 * bf16 ulp of 2^-8 .. 2^-7 relative), plus 1e-5 of the output's largest
 * magnitude for elements that cancel to near 0. A kernel that truncates
 * instead of rounding to nearest is off by up to a whole ulp, and a weight
 * 2% off moves outputs by about 2% — many ulps: the negative controls show
 * the bound catches both. Sizes are odd and straddle the GEMM's 256-wide
 * tiles and the attention's tiles.
 *
 * The embeddings (timestep_embedding, rope_freqs), the masked attention
 * (a fully masked batch among them) run in bf16 and in f16 against the same
 * float64 references, QwenImage's float32 rope_freqs against its float32
 * steps; the positions (grid_ids, text_ids) exact up to the dtype's last
 * exact integer, the (un)patchify moves bit for bit, pad's fill value
 * rounded to nearest. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/kernels.h"
#include "runtime/device.h"
#include "tests/rand.h"
#include "tests/unit/unit.h"


static uint32_t bits(float f)
{
	uint32_t u;

	memcpy(&u, &f, sizeof u);
	return u;
}

static float of_bits(uint32_t u)
{
	float f;

	memcpy(&f, &u, sizeof f);
	return f;
}

static float bf(uint16_t h)
{
	return of_bits((uint32_t)h << 16);
}

/* The reference rounding, independent of k_convert's bit trick: of the two
 * bf16 values around x (float64), the nearer; on a tie the one with an even
 * last bit. Finite x within range. */
static uint16_t ref_bf16(double x)
{
	float f = (float)x; /* only to find the neighbours: they bracket x */
	uint16_t lo = (uint16_t)(bits(f) >> 16), hi;

	/* lo toward zero of x, hi one bf16 ulp further out */
	if (fabs((double)bf(lo)) > fabs(x))
		lo = (uint16_t)(lo - 1);
	hi = (uint16_t)(lo + 1);
	double dl = fabs(x - bf(lo)), dh = fabs(bf(hi) - x);
	if (dl < dh)
		return lo;
	if (dh < dl)
		return hi;
	return (lo & 1) ? hi : lo;
}

/* n random bf16 values (and their float32 values). */
static uint16_t *fill(int64_t n, float *as_f32, float scale)
{
	uint16_t *p = malloc((size_t)n * 2);

	for (int64_t i = 0; i < n; i++) {
		p[i] = ref_bf16(scale * urand());
		if (as_f32)
			as_f32[i] = bf(p[i]);
	}
	return p;
}

/* The worst error of got (bf16) against ref, in halves of got's ulp beyond
 * the absolute allowance: <= 1.02 passes. */
static double half_ulps(const uint16_t *got, const double *ref, int64_t n)
{
	double scale = 0, worst = 0;

	for (int64_t i = 0; i < n; i++)
		scale = fmax(scale, fabs(ref[i]));
	for (int64_t i = 0; i < n; i++) {
		double g = bf(got[i]);
		int e;

		if (isnan(g))
			return INFINITY;
		frexp(g != 0 ? g : ref[i], &e);
		double half_ulp = ldexp(1.0, e - 9); /* 8 significant bits */
		double err = fabs(g - ref[i]) - 1e-5 * scale;

		worst = fmax(worst, err / half_ulp);
	}
	return worst;
}

static bool check_bf16(const char *what, const uint16_t *got, const double *ref, int64_t n)
{
	double h = half_ulps(got, ref, n);

	UNIT_CHECK(h <= 1.02, "%s: within half a bf16 ulp of float64 (worst %.3f half-ulps)", what,
		   h);
	return h <= 1.02;
}

/* The controls: the reference rounded toward zero (a kernel that skips
 * rounding and truncates) must fail the bound. */
static void control_truncation(const char *what, const double *ref, int64_t n)
{
	uint16_t *t = malloc((size_t)n * 2);

	for (int64_t i = 0; i < n; i++)
		t[i] = (uint16_t)(bits((float)ref[i]) >> 16);
	UNIT_CHECK(half_ulps(t, ref, n) > 1.02,
		   "%s: control: truncation instead of rounding fails the bound (%.2f half-ulps)",
		   what, half_ulps(t, ref, n));
	free(t);
}

/* ---- k_convert ------------------------------------------------------------------ */

static void test_convert(void)
{
	/* ties to even, both ways; NaN stays NaN; the largest float overflows */
	float in[] = { of_bits(0x3f808000), of_bits(0x3f818000), of_bits(0x3f808001),
		       -of_bits(0x3f818000), of_bits(0x7f7fffff), INFINITY, -0.0f, NAN,
		       of_bits(0x00010000), of_bits(0x00018000) };
	uint16_t want[] = { 0x3f80, 0x3f82, 0x3f81, 0xbf82, 0x7f80, 0x7f80, 0x8000, 0, 0x0001,
			    0x0002 };
	uint16_t out[10];

	k_convert(out, K_BF16, in, K_F32, 10);
	bool ok = true;

	for (int i = 0; i < 10; i++)
		ok &= i == 7 ? (out[i] & 0x7f80) == 0x7f80 && (out[i] & 0x7f) : out[i] == want[i];
	UNIT_CHECK(ok, "f32 -> bf16: ties to even, overflow to inf, -0, NaN, subnormals");

	/* the same through the vectorised blocks of 16 (three blocks and a
	 * tail), with NaNs whose payload would carry into the sign if rounded */
	float blk[53];
	uint16_t bout[53];

	for (int i = 0; i < 53; i++)
		blk[i] = i % 11 == 10 ? of_bits(i & 1 ? 0xffffffffu : 0x7fffffffu) : in[i % 11 % 10];
	k_convert(bout, K_BF16, blk, K_F32, 53);
	ok = true;
	for (int i = 0; i < 53; i++) {
		int j = i % 11 % 10;

		ok &= i % 11 == 10 ? bout[i] == (i & 1 ? 0xffffu : 0x7fffu)
		      : j == 7	   ? (bout[i] & 0x7f80) == 0x7f80 && (bout[i] & 0x7f)
				   : bout[i] == want[j];
	}
	UNIT_CHECK(ok, "f32 -> bf16 in blocks of 16: the same bits, NaN payloads kept quiet");

	int64_t n = 100003, bad = 0;
	float *x = malloc((size_t)n * 4), *back = malloc((size_t)n * 4);
	uint16_t *h = malloc((size_t)n * 2);

	for (int64_t i = 0; i < n; i++)
		x[i] = ldexpf(urand(), (int)(rng_next() % 40) - 20);
	k_convert(h, K_BF16, x, K_F32, n);
	for (int64_t i = 0; i < n; i++)
		bad += h[i] != ref_bf16(x[i]);
	UNIT_CHECK(bad == 0, "f32 -> bf16 rounds to nearest even: %lld of %lld differ from the "
		   "float64 reference", (long long)bad, (long long)n);
	k_convert(back, K_F32, h, K_BF16, n);
	bad = 0;
	for (int64_t i = 0; i < n; i++)
		bad += bits(back[i]) != (uint32_t)h[i] << 16;
	UNIT_CHECK(bad == 0, "bf16 -> f32 is exact");
	/* a bf16 value survives f32 and back unchanged (a BF16 checkpoint) */
	k_convert(x, K_BF16, back, K_F32, n);
	UNIT_CHECK(!memcmp(x, h, (size_t)n * 2), "bf16 -> f32 -> bf16 is the identity");

	float hin[] = { 1.0f / 3, 65519.0f, 65520.0f, ldexpf(1, -24), 2049.0f, 2051.0f };
	uint16_t hwant[] = { 0x3555, 0x7bff, 0x7c00, 0x0001, 0x6800, 0x6802 };

	k_convert(out, K_F16, hin, K_F32, 6);
	UNIT_CHECK(!memcmp(out, hwant, sizeof hwant),
		   "f32 -> f16: nearest even, overflow to inf, subnormal");
	k_convert(back, K_F32, out, K_F16, 6);
	UNIT_CHECK(back[0] == of_bits(0x3eaaa000) && back[2] == INFINITY && back[4] == 2048.0f,
		   "f16 -> f32 is exact");
	free(x);
	free(back);
	free(h);
}

/* ---- the narrow GEMM -------------------------------------------------------------- */

/* ref[m, n] = x[m, k] w[n, k]^T (+ b[n] when b != NULL) in float64: the
 * reference of every linear case here. */
static void ref_linear(const float *x, const float *w, const float *b, double *ref, int64_t m,
		       int64_t k, int64_t n)
{
	for (int64_t i = 0; i < m; i++)
		for (int64_t j = 0; j < n; j++) {
			double s = b ? b[j] : 0;

			for (int64_t l = 0; l < k; l++)
				s += (double)x[i * k + l] * w[j * k + l];
			ref[i * n + j] = s;
		}
}

static void test_linear_case(int64_t m, int64_t k, int64_t n, bool bias, int threads, bool tiles)
{
	float *xf = malloc((size_t)(m * k) * 4), *wf = malloc((size_t)(n * k) * 4);
	float *bfv = malloc((size_t)n * 4);
	uint16_t *x = fill(m * k, xf, 1), *w = fill(n * k, wf, 1), *b = fill(n, bfv, 0.5f);
	uint16_t *y = malloc((size_t)(m * n) * 2);
	double *ref = malloc((size_t)(m * n) * sizeof *ref);
	struct k_pool *pool = threads > 1 ? k_pool_create(threads) : NULL;
	void *ws = malloc(k_linear_narrow_workspace(k_pool_threads(pool), m, k, n));
	char what[96];

	(tiles ? k_linear_narrow_tiles_pool : k_linear_narrow_pool)(pool, K_BF16, x, w,
								     bias ? b : NULL, y, m, k, n, ws);
	ref_linear(xf, wf, bias ? bfv : NULL, ref, m, k, n);
	snprintf(what, sizeof what, "bf16 linear (%s) %lldx%lldx%lld%s, %d thread%s",
		 tiles				     ? "tiles"
		 : k_amx_available() && k % 32 == 0 ? "amx"
		 : k_bf16_dot_available()	     ? "dot"
						     : "tiles",
		 (long long)m,
		 (long long)k, (long long)n, bias ? " + bias" : "", threads, threads > 1 ? "s" : "");
	check_bf16(what, y, ref, m * n);
	if (m == 37) {
		control_truncation(what, ref, m * n);
		/* the weights 2% larger */
		for (int64_t i = 0; i < m * n; i++)
			ref[i] += 0.02 * (ref[i] - (bias ? bfv[i % n] : 0));
		UNIT_CHECK(half_ulps(y, ref, m * n) > 1.02,
			   "%s: control: weights 2%% off fail the bound", what);
	}
	k_pool_free(pool);
	free(ws);
	free(xf);
	free(wf);
	free(bfv);
	free(x);
	free(w);
	free(b);
	free(y);
	free(ref);
}

/* The dot products take an odd k's last element alone: the pair it would
 * make runs into the next row of x, which may hold an infinity (Inf x 0 is
 * NaN). Row 1 starts with +Inf; row 0's sums must not see it. */
static void test_linear_odd_k_neighbour(void)
{
	int64_t m = 8, k = 33, n = 70;
	float *xf = malloc((size_t)(m * k) * 4), *wf = malloc((size_t)(n * k) * 4);
	uint16_t *x = fill(m * k, xf, 1), *w = fill(n * k, wf, 1);
	uint16_t *y = malloc((size_t)(m * n) * 2);
	double *ref = malloc((size_t)n * sizeof *ref);
	void *ws = malloc(k_linear_narrow_workspace(1, m, k, n));

	x[k] = 0x7f80;
	k_linear_narrow_pool(NULL, K_BF16, x, w, NULL, y, m, k, n, ws);
	ref_linear(xf, wf, NULL, ref, 1, k, n); /* row 0 */
	check_bf16("bf16 linear 8x33x70, +Inf at row 1's start: row 0", y, ref, n);
	free(xf);
	free(wf);
	free(x);
	free(w);
	free(y);
	free(ref);
	free(ws);
}

/* AMX's blocks (kernels/cpu/linear.c: 32 rows x 32 columns, k a multiple
 * of 32) with the vector tiles taking the rows past them; on a CPU without
 * AMX, or with DTPC_CPU_ISA=avx512, the same cases on the dot products. */
static void test_linear_amx(void)
{
	test_linear_case(37, 64, 301, true, 1, false);  /* one block + 5 rows; controls */
	test_linear_case(70, 96, 130, false, 1, false); /* 2 blocks, a 2-column panel */
	test_linear_case(300, 128, 77, true, 2, false); /* 150 rows a thread */
	test_linear_case(64, 32, 64, true, 1, false);   /* whole blocks only */
}

static void test_linear(void)
{
	test_linear_amx();
	setenv("DTPC_CPU_ISA", "avx512", 1);
	test_linear_amx();
	unsetenv("DTPC_CPU_ISA");
	/* both paths (the dot products where this CPU has AVX-512 BF16) */
	for (int tiles = 0; tiles < 2; tiles++) {
		test_linear_case(37, 53, 301, true, 1, tiles);  /* tiles of 256 + 45 */
		test_linear_case(37, 53, 301, false, 3, tiles); /* few rows: by columns */
		test_linear_case(301, 67, 19, true, 2, tiles);  /* split by rows */
		test_linear_case(1, 129, 517, true, 3, tiles);  /* one row (modulation) */
		/* the dot products' tiles of 6 rows end in 4, 5, 3 and 2 rows */
		test_linear_case(10, 64, 130, true, 1, tiles);
		test_linear_case(41, 65, 64, false, 1, tiles);
		test_linear_case(285, 31, 200, true, 2, tiles);
		test_linear_case(5, 200, 77, true, 1, tiles);
	}
	test_linear_odd_k_neighbour();
}

/* ---- the CPU device's kernels in bf16 ------------------------------------------------ */

static struct dev *bf16_device(void)
{
	struct dev *d = dev_cpu_create();

	d->ops->threads(d, 2);
	d->ops->set_dtype(d, DTPC_BF16);
	return d;
}

static void test_norms(struct dev *d)
{
	int64_t rows = 29, n = 75, grp = 25;
	float *xf = malloc((size_t)(rows * n) * 4), wf[75], bfv[75];
	uint16_t *x = fill(rows * n, xf, 2), *w = fill(n, wf, 1), *b = fill(n, bfv, 1);
	uint16_t *y = malloc((size_t)(rows * n) * 2);
	double *ref = malloc((size_t)(rows * n) * sizeof *ref);

	d->ops->layer_norm(d, (float *)x, (float *)y, rows, n, 1e-6f, (float *)w, (float *)b);
	for (int64_t r = 0; r < rows; r++) {
		double mean = 0, var = 0;

		for (int64_t i = 0; i < n; i++)
			mean += xf[r * n + i] / (double)n;
		for (int64_t i = 0; i < n; i++)
			var += (xf[r * n + i] - mean) * (xf[r * n + i] - mean) / (double)n;
		for (int64_t i = 0; i < n; i++)
			ref[r * n + i] = (xf[r * n + i] - mean) / sqrt(var + 1e-6) * wf[i] + bfv[i];
	}
	check_bf16("bf16 layer_norm 29x75 affine", y, ref, rows * n);
	control_truncation("bf16 layer_norm", ref, rows * n);
	for (int64_t r = 0; r < rows; r++)
		ref[r * n + 3] += 0.02 * (ref[r * n + 3] - bfv[3]);
	UNIT_CHECK(half_ulps(y, ref, rows * n) > 1.02,
		   "bf16 layer_norm: control: a weight 2%% off fails the bound");

	d->ops->rms_norm(d, (float *)x, (float *)y, rows, n, grp, 1e-6f, (float *)w);
	for (int64_t r = 0; r < rows; r++)
		for (int64_t g0 = 0; g0 < n; g0 += grp) {
			double ss = 0;

			for (int64_t i = 0; i < grp; i++)
				ss += (double)xf[r * n + g0 + i] * xf[r * n + g0 + i] / (double)grp;
			for (int64_t i = 0; i < grp; i++)
				ref[r * n + g0 + i] = xf[r * n + g0 + i] / sqrt(ss + 1e-6) * wf[i];
		}
	check_bf16("bf16 rms_norm 29x75 per group of 25", y, ref, rows * n);
	free(xf);
	free(x);
	free(w);
	free(b);
	free(y);
	free(ref);
}

static void test_pointwise(struct dev *d)
{
	int64_t n = 40009, B = 3, S = 17, H = 41;
	float *xf = malloc((size_t)n * 4);
	uint16_t *x = fill(n, xf, 4), *y = malloc((size_t)n * 2);
	double *ref = malloc((size_t)n * sizeof *ref);

	d->ops->gelu(d, (float *)x, (float *)y, n, true);
	for (int64_t i = 0; i < n; i++) {
		double v = xf[i];

		ref[i] = 0.5 * v * (1 + tanh(sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)));
	}
	check_bf16("bf16 gelu (tanh) of 40009", y, ref, n);
	d->ops->unary(d, OP_silu, (float *)x, (float *)y, n);
	for (int64_t i = 0; i < n; i++)
		ref[i] = xf[i] / (1 + exp(-(double)xf[i]));
	check_bf16("bf16 silu of 40009", y, ref, n);

	/* x [B, S, H] + b [H], then x * (1 + scale) + shift with [B, H] rows */
	int64_t bs[3] = { 1, 1, H }, xs[3] = { B, S, H };
	float bfv[41], shf[3 * 41], scf[3 * 41];
	uint16_t *bb = fill(H, bfv, 1), *sh = fill(B * H, shf, 1), *sc = fill(B * H, scf, 1);

	d->ops->binary(d, K_ADD, (float *)x, xs, (float *)bb, bs, (float *)y, xs, 3);
	for (int64_t i = 0; i < B * S * H; i++)
		ref[i] = (double)xf[i] + bfv[i % H];
	check_bf16("bf16 add, broadcast [H] over [B, S, H]", y, ref, B * S * H);
	/* large enough that the device splits it over its pool (by the first
	 * output dimension longer than 1): a [1, S2, H] operand broadcast along
	 * that dimension, beside a [B, S2, H] one, and the product */
	{
		int64_t S2 = 320, n2 = B * S2 * H, s1[3] = { 1, S2, H }, s3[3] = { B, S2, H };
		float *x1f = malloc((size_t)(S2 * H) * 4), *x3f = malloc((size_t)n2 * 4);
		uint16_t *x1 = fill(S2 * H, x1f, 2), *x3 = fill(n2, x3f, 2);
		uint16_t *y2 = malloc((size_t)n2 * 2);
		double *ref2 = malloc((size_t)n2 * sizeof *ref2);

		for (int op = 0; op < 2; op++) {
			d->ops->binary(d, op ? K_MUL : K_ADD, (float *)x1, s1, (float *)x3, s3,
				       (float *)y2, s3, 3);
			for (int64_t i = 0; i < n2; i++)
				ref2[i] = op ? (double)x1f[i % (S2 * H)] * x3f[i]
					     : (double)x1f[i % (S2 * H)] + x3f[i];
			check_bf16(op ? "bf16 mul [1, 320, 41] by [3, 320, 41], on the pool"
				      : "bf16 add [1, 320, 41] + [3, 320, 41], on the pool",
				   y2, ref2, n2);
		}
		/* [1, S3, H] + [1, S3, H] in place (out = a, as the executor's
		 * residual adds): both operands sliced along S3, over several of
		 * a range's 4096-float chunks; the control: b's last element
		 * changed after the reference, the chunk that holds it must
		 * show */
		int64_t S3 = 1000, n3 = S3 * H, s4[3] = { 1, S3, H };
		float *y3f = malloc((size_t)n3 * 4), *b3f = malloc((size_t)n3 * 4);
		uint16_t *y3 = fill(n3, y3f, 3), *b3 = fill(n3, b3f, 2);
		double *ref3 = malloc((size_t)n3 * sizeof *ref3);
		bool fails = true;

		for (int pass = 0; pass < 2; pass++) {
			uint16_t *a = malloc((size_t)n3 * 2);

			memcpy(a, y3, (size_t)n3 * 2);
			for (int64_t i = 0; i < n3; i++)
				ref3[i] = (double)y3f[i] + b3f[i];
			if (pass)
				b3[n3 - 1] ^= 0x0100; /* an exponent bit: far off */
			d->ops->binary(d, K_ADD, (float *)a, s4, (float *)b3, s4, (float *)a, s4, 3);
			if (pass)
				fails = half_ulps(a, ref3, n3) > 1.02;
			else
				check_bf16("bf16 add [1, 1000, 41] + [1, 1000, 41] in place, chunks of L1",
					   a, ref3, n3);
			free(a);
		}
		UNIT_CHECK(fails, "bf16 add in place: control: the last element of b changed fails "
			   "the bound");
		free(y3f);
		free(b3f);
		free(y3);
		free(b3);
		free(ref3);
		free(x1f);
		free(x3f);
		free(x1);
		free(x3);
		free(y2);
		free(ref2);
	}
	d->ops->modulate(d, (float *)x, (float *)sh, (float *)sc, (float *)y, B, S, H, 0);
	for (int64_t i = 0; i < B * S * H; i++) {
		int64_t b = i / (S * H), h = i % H;

		ref[i] = (double)xf[i] * (1 + (double)scf[b * H + h]) + shf[b * H + h];
	}
	check_bf16("bf16 modulate [B, H] rows", y, ref, B * S * H);

	/* a copy moves bf16 elements as they are */
	d->ops->copy2d(d, (float *)y, 7, (float *)x, 11, 13, 5);
	bool same = true;

	for (int r = 0; r < 13; r++)
		same &= !memcmp(y + r * 7, x + r * 11, 10);
	UNIT_CHECK(same, "bf16 copy2d moves 2-byte elements between strided views");
	free(xf);
	free(x);
	free(y);
	free(ref);
	free(bb);
	free(sh);
	free(sc);
}

static void test_rope(struct dev *d)
{
	int64_t B = 2, S = 13, heads = 3, D = 6, W = heads * D, stride = 3 * W;
	float *xf = malloc((size_t)(B * S * stride) * 4), cf[13 * 6], sf[13 * 6];
	uint16_t *x = fill(B * S * stride, xf, 1), *c = fill(S * D, cf, 1), *s = fill(S * D, sf, 1);
	uint16_t *y = malloc((size_t)(B * S * W) * 2);
	double *ref = malloc((size_t)(B * S * W) * sizeof *ref);

	/* q inside a packed [q | k | v] row, rotated into a contiguous y */
	d->ops->rope(d, (float *)x, stride, (float *)c, (float *)s, (float *)y, W, B, S, heads, D);
	for (int64_t b = 0; b < B; b++)
		for (int64_t p = 0; p < S; p++)
			for (int64_t h = 0; h < heads; h++)
				for (int64_t i = 0; i < D; i += 2) {
					const float *xr = xf + (b * S + p) * stride + h * D;
					double *o = ref + (b * S + p) * W + h * D;

					o[i] = (double)xr[i] * cf[p * D + i] - (double)xr[i + 1] * sf[p * D + i];
					o[i + 1] = (double)xr[i + 1] * cf[p * D + i + 1] +
						   (double)xr[i] * sf[p * D + i + 1];
				}
	check_bf16("bf16 rope on a strided q", y, ref, B * S * W);
	free(xf);
	free(x);
	free(c);
	free(s);
	free(y);
	free(ref);
}

/* Attention of q against keys [k0, k1) in float64: out [B, Sq, H*Dv], lse.
 * With a key-padding mask [B, Skv] the keys whose entry is 0 are left out; a
 * row with none left is 0 (dtpc's convention, where SDPA gives NaN). */
static void ref_attention(const float *q, const float *k, const float *v, const float *mask,
			  int64_t B, int64_t Sq, int64_t Skv, int64_t H, int64_t D, int64_t Dv,
			  int64_t k0, int64_t k1, double *out, double *lse)
{
	double *p = malloc((size_t)Skv * sizeof *p);

	for (int64_t b = 0; b < B; b++)
		for (int64_t h = 0; h < H; h++)
			for (int64_t i = 0; i < Sq; i++) {
				double mx = -INFINITY, sum = 0;

				for (int64_t j = k0; j < k1; j++) {
					double s = 0;

					if (mask && mask[b * Skv + j] == 0) {
						p[j] = -INFINITY;
						continue;
					}

					for (int64_t e = 0; e < D; e++)
						s += (double)q[((b * Sq + i) * H + h) * D + e] *
						     k[((b * Skv + j) * H + h) * D + e];
					p[j] = s / sqrt((double)D);
					mx = fmax(mx, p[j]);
				}
				for (int64_t j = k0; j < k1; j++)
					sum += (p[j] = mx == -INFINITY ? 0 : exp(p[j] - mx));
				for (int64_t e = 0; e < Dv; e++) {
					double o = 0;

					for (int64_t j = k0; j < k1; j++)
						o += p[j] * v[((b * Skv + j) * H + h) * Dv + e];
					out[((b * Sq + i) * H + h) * Dv + e] = sum > 0 ? o / sum : 0;
				}
				if (lse)
					lse[(b * H + h) * Sq + i] = mx + log(sum);
			}
	free(p);
}

/* k_attention_bf16_pool (AMX) against float64: P is rounded to bf16 before
 * P V (2^-9 relative per weight) and out once more, so the bound is
 * normwise — two half-ulps (2^-8) of the output's largest magnitude — not
 * the half ulp per element of the float32 path. The LSE is float32 from
 * bf16 scores: within 1e-5 relative. Control: keys 2% off fail it. On a CPU
 * without AMX the cases are skipped, and say so. */
static void test_attention_amx_case(int64_t B, int64_t Sq, int64_t Skv, int64_t H, int64_t D,
				    int64_t Dv, int threads)
{
	char what[128];

	snprintf(what, sizeof what, "bf16 attention on AMX, B %lld, Sq %lld, Skv %lld, H %lld, "
		 "D %lld, Dv %lld, %d thread%s", (long long)B, (long long)Sq, (long long)Skv,
		 (long long)H, (long long)D, (long long)Dv, threads, threads > 1 ? "s" : "");
	if (!k_attention_bf16_available(D, Dv)) {
		UNIT_CHECK(true, "%s # SKIP this CPU has no AMX (or DTPC_CPU_ISA turns it off)",
			   what);
		return;
	}
	int64_t nq = B * Sq * H * D, nk = B * Skv * H * D, nv = B * Skv * H * Dv, no = B * Sq * H * Dv;
	float *qf = malloc((size_t)nq * 4), *kf = malloc((size_t)nk * 4), *vf = malloc((size_t)nv * 4);
	uint16_t *q = fill(nq, qf, 2), *k = fill(nk, kf, 2), *v = fill(nv, vf, 1);
	uint16_t *out = malloc((size_t)no * 2);
	float *lse = malloc((size_t)(B * H * Sq) * 4);
	double *ref = malloc((size_t)no * sizeof *ref), *rlse = malloc((size_t)(B * H * Sq) * 8);
	struct k_pool *pool = threads > 1 ? k_pool_create(threads) : NULL;
	void *ws = aligned_alloc(64, (size_t)threads * k_attention_bf16_workspace(Skv, D, Dv));

	k_attention_bf16_pool(pool, q, H * D, k, H * D, v, H * Dv, out, lse, B, Sq, Skv, H, D, Dv,
			      ws);
	for (int pass = 0; pass < 2; pass++) {
		/* pass 1, the control: the reference's keys 2% larger */
		for (int64_t i = 0; pass && i < nk; i++)
			kf[i] *= 1.02f;
		ref_attention(qf, kf, vf, NULL, B, Sq, Skv, H, D, Dv, 0, Skv, ref, rlse);
		double w = 0, scale = 0, wl = 0;

		for (int64_t i = 0; i < no; i++) {
			w = fmax(w, fabs(bf(out[i]) - ref[i]));
			scale = fmax(scale, fabs(ref[i]));
		}
		for (int64_t i = 0; i < B * H * Sq; i++)
			wl = fmax(wl, fabs(lse[i] - rlse[i]) / fmax(1.0, fabs(rlse[i])));
		if (pass)
			UNIT_CHECK(w / scale > 0x1p-8 || wl > 1e-5,
				   "%s: control: keys 2%% off fail the bound (%.2g, LSE %.2g)", what,
				   w / scale, wl);
		else
			UNIT_CHECK(w / scale <= 0x1p-8 && wl <= 1e-5,
				   "%s: normwise %.2g of float64 (bound %.2g), LSE within %.2g (1e-5)",
				   what, w / scale, 0x1p-8, wl);
	}
	k_pool_free(pool);
	free(ws);
	free(qf);
	free(kf);
	free(vf);
	free(q);
	free(k);
	free(v);
	free(out);
	free(lse);
	free(ref);
	free(rlse);
}

static void test_attention_amx(void)
{
	/* odd lengths: query blocks of 32 end in 5 rows, key blocks in 19 */
	test_attention_amx_case(2, 101, 211, 3, 64, 64, 1);
	test_attention_amx_case(1, 77, 45, 2, 128, 32, 2);  /* Dv != D, few heads: chunks */
	test_attention_amx_case(1, 40, 300, 5, 32, 96, 3);
}

static void test_attention(struct dev *d)
{
	int64_t B = 2, Sq = 101, Skv = 211, H = 3, D = 12, Dv = 10;
	int64_t nq = B * Sq * H * D, nk = B * Skv * H * D, nv = B * Skv * H * Dv, no = B * Sq * H * Dv;
	float *qf = malloc((size_t)nq * 4), *kf = malloc((size_t)nk * 4), *vf = malloc((size_t)nv * 4);
	uint16_t *q = fill(nq, qf, 2), *k = fill(nk, kf, 2), *v = fill(nv, vf, 1);
	uint16_t *out = malloc((size_t)no * 2), *blk = malloc((size_t)no * 2);
	float *lse = malloc((size_t)(B * H * Sq) * 4), *lse2 = malloc((size_t)(B * H * Sq) * 4);
	float *acc32 = malloc((size_t)no * 4);
	double *ref = malloc((size_t)no * sizeof *ref);
	void *ws = malloc(d->ops->attention_workspace(d, B, Sq, Skv, H, D, Dv));

	d->ops->attention(d, (float *)q, H * D, (float *)k, H * D, (float *)v, H * Dv, NULL, (float *)out,
			  lse, B, Sq, Skv, H, D, Dv, ws);
	ref_attention(qf, kf, vf, NULL, B, Sq, Skv, H, D, Dv, 0, Skv, ref, NULL);
	check_bf16("bf16 attention Sq 101, Skv 211, D 12, Dv 10", out, ref, no);
	control_truncation("bf16 attention", ref, no);

	/* ring attention over two key chunks: the merged bf16 result, with a
	 * bf16 and with a float32 accumulator (convert_to_fp32) */
	int64_t cut = 97;
	uint16_t *k1 = malloc((size_t)nk * 2), *v1 = malloc((size_t)nv * 2);
	uint16_t *k2 = malloc((size_t)nk * 2), *v2 = malloc((size_t)nv * 2);

	/* chunk c of each batch: rows [c0, c1) packed as [B, rows, ...] */
	for (int64_t b = 0; b < B; b++) {
		memcpy(k1 + b * cut * H * D, k + b * Skv * H * D, (size_t)(cut * H * D) * 2);
		memcpy(v1 + b * cut * H * Dv, v + b * Skv * H * Dv, (size_t)(cut * H * Dv) * 2);
		memcpy(k2 + b * (Skv - cut) * H * D, k + (b * Skv + cut) * H * D,
		       (size_t)((Skv - cut) * H * D) * 2);
		memcpy(v2 + b * (Skv - cut) * H * Dv, v + (b * Skv + cut) * H * Dv,
		       (size_t)((Skv - cut) * H * Dv) * 2);
	}
	for (int wide = 0; wide < 2; wide++) {
		d->ops->attention(d, (float *)q, H * D, (float *)k1, H * D, (float *)v1, H * Dv,
				  NULL, (float *)out, lse, B, Sq, cut, H, D, Dv, ws);
		d->ops->attention(d, (float *)q, H * D, (float *)k2, H * D, (float *)v2, H * Dv,
				  NULL, (float *)blk, lse2, B, Sq, Skv - cut, H, D, Dv, ws);
		if (wide) {
			d->ops->convert(d, acc32, DTPC_F32, out, DTPC_BF16, no);
			d->ops->lse_merge(d, acc32, DTPC_F32, lse, (float *)blk, lse2, B, Sq, H, Dv);
			d->ops->convert(d, out, DTPC_BF16, acc32, DTPC_F32, no);
		} else {
			d->ops->lse_merge(d, (float *)out, DTPC_BF16, lse, (float *)blk, lse2, B, Sq, H,
					  Dv);
		}
		/* the blocks' outputs are rounded before they are merged, so
		 * where the two blocks cancel the error is relative to the
		 * blocks, not the result: normwise, three half-ulps (2^-8 each
		 * at worst) of the output's largest magnitude */
		double w = 0, scale = 0;

		for (int64_t i = 0; i < no; i++) {
			w = fmax(w, fabs(bf(out[i]) - ref[i]));
			scale = fmax(scale, fabs(ref[i]));
		}
		UNIT_CHECK(w / scale <= 3 * 0x1p-8, "bf16 ring merge of 97 + 114 keys, %s "
			   "accumulator: normwise error %.2g of float64 (bound %.2g)",
			   wide ? "float32" : "bf16", w / scale, 3 * 0x1p-8);
	}
	free(k1);
	free(v1);
	free(k2);
	free(v2);
	free(qf);
	free(kf);
	free(vf);
	free(q);
	free(k);
	free(v);
	free(out);
	free(blk);
	free(lse);
	free(lse2);
	free(acc32);
	free(ref);
	free(ws);
}

static void test_device_linear(struct dev *d)
{
	int64_t m = 45, k = 77, n = 263;
	float *xf = malloc((size_t)(m * k) * 4), *wf = malloc((size_t)(n * k) * 4);
	uint16_t *x = fill(m * k, xf, 1), *w = fill(n * k, wf, 1), *y = malloc((size_t)(m * n) * 2);
	double *ref = malloc((size_t)(m * n) * sizeof *ref);

	d->ops->linear(d, (float *)x, (float *)w, NULL, (float *)y, m, k, n);
	ref_linear(xf, wf, NULL, ref, m, k, n);
	check_bf16("the device's bf16 linear 45x77x263", y, ref, m * n);
	free(xf);
	free(wf);
	free(x);
	free(w);
	free(y);
	free(ref);
}

/* f16 storage: the same device, widened kernels and the tiled GEMM; the
 * bound in halves of an f16 ulp (11 significant bits). */
static double f16_half_ulps(const uint16_t *got, const double *ref, int64_t n)
{
	float *g = malloc((size_t)n * 4);
	double scale = 0, worst = 0;

	k_convert(g, K_F32, got, K_F16, n);
	for (int64_t i = 0; i < n; i++)
		scale = fmax(scale, fabs(ref[i]));
	for (int64_t i = 0; i < n; i++) {
		int e;

		frexp(g[i] != 0 ? g[i] : ref[i], &e);
		worst = fmax(worst, (fabs(g[i] - ref[i]) - 1e-5 * scale) / ldexp(1.0, e - 12));
	}
	free(g);
	return isnan(worst) ? INFINITY : worst;
}

static void test_f16(void)
{
	struct dev *d = dev_cpu_create();
	int64_t m = 23, k = 41, n = 67;
	float *xf = malloc((size_t)(m * k) * 4), *wf = malloc((size_t)(n * k) * 4);
	uint16_t *x = malloc((size_t)(m * k) * 2), *w = malloc((size_t)(n * k) * 2);
	uint16_t *y = malloc((size_t)(m * n) * 2);
	double *ref = malloc((size_t)(m * n) * sizeof *ref);

	d->ops->threads(d, 2);
	d->ops->set_dtype(d, DTPC_F16);
	for (int64_t i = 0; i < m * k; i++)
		xf[i] = urand();
	for (int64_t i = 0; i < n * k; i++)
		wf[i] = urand();
	/* the values the kernel sees: rounded to f16 */
	k_convert(x, K_F16, xf, K_F32, m * k);
	k_convert(w, K_F16, wf, K_F32, n * k);
	k_convert(xf, K_F32, x, K_F16, m * k);
	k_convert(wf, K_F32, w, K_F16, n * k);
	d->ops->linear(d, (float *)x, (float *)w, NULL, (float *)y, m, k, n);
	ref_linear(xf, wf, NULL, ref, m, k, n);
	double h = f16_half_ulps(y, ref, m * n);

	UNIT_CHECK(h <= 1.02, "f16 linear 23x41x67 (tiles): within half an f16 ulp (%.3f)", h);
	d->ops->unary(d, OP_silu, (float *)x, (float *)y, m * k);
	for (int64_t i = 0; i < m * k; i++)
		ref[i] = xf[i] / (1 + exp(-(double)xf[i]));
	h = f16_half_ulps(y, ref, m * k);
	UNIT_CHECK(h <= 1.02, "f16 silu: within half an f16 ulp (%.3f)", h);
	d->ops->destroy(d);
	free(xf);
	free(wf);
	free(x);
	free(w);
	free(y);
	free(ref);
}

/* ---- the embeddings, pad's fill and the masked attention, in bf16 and f16 ---- */

static const char *dt_name(enum k_dtype dt)
{
	return dt == K_BF16 ? "bf16" : "f16";
}

/* n values scale * (-1, 1) rounded to dt (and their float32 values). */
static uint16_t *rand_in(enum k_dtype dt, int64_t n, float *as_f32, float scale)
{
	uint16_t *p = malloc((size_t)n * 2);

	for (int64_t i = 0; i < n; i++)
		as_f32[i] = scale * urand();
	k_convert(p, dt, as_f32, K_F32, n);
	k_convert(as_f32, K_F32, p, dt, n);
	return p;
}

static double dt_half_ulps(enum k_dtype dt, const uint16_t *got, const double *ref, int64_t n)
{
	return dt == K_BF16 ? half_ulps(got, ref, n) : f16_half_ulps(got, ref, n);
}

static void check_dt(enum k_dtype dt, const char *what, const uint16_t *got, const double *ref,
		     int64_t n)
{
	double h = dt_half_ulps(dt, got, ref, n);

	UNIT_CHECK(h <= 1.02, "%s %s: within half a %s ulp of float64 (worst %.3f half-ulps)",
		   dt_name(dt), what, dt_name(dt), h);
}

static struct dev *narrow_device(enum k_dtype dt)
{
	struct dev *d = dev_cpu_create();

	d->ops->threads(d, 3);
	d->ops->set_dtype(d, (dtpc_dtype)dt);
	return d;
}

static void test_timestep(struct dev *d, enum k_dtype dt)
{
	/* odd dim: a last zero column; flip: [cos | sin] */
	int64_t n = 37, dim = 63, half = dim / 2;
	double shift = 0.5, max_period = 10000;
	float tf[37];
	uint16_t *t = rand_in(dt, n, tf, 4), *y = malloc((size_t)(n * dim) * 2);
	double *ref = malloc((size_t)(n * dim) * sizeof *ref);

	d->ops->timestep_embedding(d, (float *)t, (float *)y, n, dim, true, shift, 1, max_period, 1,
				   false, false);
	for (int64_t i = 0; i < n; i++) {
		for (int64_t k = 0; k < half; k++) {
			double a = tf[i] * exp(-log(max_period) * (double)k / ((double)half - shift));

			ref[i * dim + k] = cos(a);
			ref[i * dim + half + k] = sin(a);
		}
		ref[i * dim + dim - 1] = 0;
	}
	check_dt(dt, "timestep_embedding of 37 timesteps, dim 63, flipped", y, ref, n * dim);
	if (dt == K_BF16)
		control_truncation("bf16 timestep_embedding", ref, n * dim);

	/* input_scale 1000 (Flux): t * 1000 rounded to dt first, as diffusers'
	 * `timestep.to(dtype) * 1000`; with input_scale_f32 (Qwen-Image 2.1's
	 * `time_factor * timestep.float()`) the float32 product. Controls: each
	 * is not the other's table */
	for (int f32 = 0; f32 <= 1; f32++) {
		d->ops->timestep_embedding(d, (float *)t, (float *)y, n, dim, true, shift, 1,
					   max_period, 1000, f32, false);
		for (int rounded = 1; rounded >= 0; rounded--) {
			for (int64_t i = 0; i < n; i++) {
				float ts = tf[i] * 1000.0f;
				uint16_t r;

				k_convert(&r, dt, &ts, K_F32, 1);
				if (rounded)
					k_convert(&ts, K_F32, &r, dt, 1);
				for (int64_t k = 0; k < half; k++) {
					/* angles up to 4000 rad: the op's float32
					 * steps (docs/language.md), then sin and cos
					 * in float64 */
					float ex = (float)-log(max_period) * (float)k /
						   (float)((double)half - shift);
					double a = (float)(ts * (float)exp((double)ex));

					ref[i * dim + k] = cos(a);
					ref[i * dim + half + k] = sin(a);
				}
			}
			double h = dt_half_ulps(dt, y, ref, n * dim);
			if (rounded != f32)
				UNIT_CHECK(h <= 1.02, "%s timestep_embedding, input_scale 1000%s: t * 1000 "
					   "%s, then float64 (worst %.3f half-ulps)", dt_name(dt),
					   f32 ? ", input_scale_f32" : "",
					   f32 ? "in float32" : "rounded to the storage dtype", h);
			else
				UNIT_CHECK(h > 100, "%s timestep_embedding%s: control: t * 1000 %s gives "
					   "another table (worst %.0f half-ulps)", dt_name(dt),
					   f32 ? ", input_scale_f32" : "",
					   rounded ? "rounded" : "unrounded", h);
		}
	}
	free(t);
	free(y);
	free(ref);
}

static void test_rope_freqs(struct dev *d, enum k_dtype dt)
{
	int64_t rows = 37, axes_dim[3] = { 6, 10, 8 }, width = 24;
	float idf[37 * 3];
	uint16_t *ids = malloc(sizeof idf), *y = malloc((size_t)(rows * width) * 2);
	double *ref = malloc((size_t)(rows * width) * sizeof *ref);

	/* integer positions, negative ones too (QwenImage's centred grid),
	 * all exact in bf16 */
	for (int64_t i = 0; i < rows * 3; i++)
		idf[i] = (float)((int64_t)(rng_next() % 371) - 120);
	k_convert(ids, dt, idf, K_F32, rows * 3);
	for (int f64 = 0; f64 < 2; f64++) {
		double theta = f64 ? 10000 : 2.5;

		d->ops->rope_freqs(d, (float *)ids, NULL, (float *)y, rows, 3, axes_dim, theta, f64,
				   f64);
		for (int64_t r = 0; r < rows; r++) {
			double *row = ref + r * width;

			for (int a = 0; a < 3; a++) {
				int64_t dd = axes_dim[a];
				double pos = idf[r * 3 + a];

				for (int64_t j = 0; j < dd / 2; j++) {
					double ang;

					if (f64) {
						ang = pos / pow(theta, (double)(2 * j) / (double)dd);
					} else {
						/* QwenImage's rope_params is float32 by
						 * definition: its steps rounded as torch's */
						float e = (float)(2 * j) / (float)dd;
						float p = (float)pow((double)(float)theta, (double)e);

						ang = (float)((float)pos * (1.0f / p));
					}
					row[2 * j] = row[2 * j + 1] = f64 ? sin(ang) : cos(ang);
				}
				row += dd;
			}
		}
		check_dt(dt, f64 ? "rope_freqs sin, float64 angles, 37 rows, axes 6+10+8"
				 : "rope_freqs cos, float32 angles (QwenImage), 37 rows",
			 y, ref, rows * width);
		if (dt == K_BF16)
			control_truncation(f64 ? "bf16 rope_freqs f64" : "bf16 rope_freqs f32", ref,
					   rows * width);
	}
	free(ids);
	free(y);
	free(ref);
}

/* rope_freqs computing its positions (a folded grid_ids / text_ids) in
 * dt, past dt's exact integers: the table within half an ulp of float64
 * from the exact positions. Control: the same positions stored in dt first
 * (the unfolded path) are rounded, and their table is off. */
static void test_folded_positions(struct dev *d, enum k_dtype dt)
{
	int64_t axes_dim[3] = { 4, 6, 8 }, width = 18;
	/* text from past dt's exact integers; a centred grid of 2 x 9 x 7 */
	int64_t first = dt == K_BF16 ? 301 : 2901, len = 43, F = 2, H = 9, W = 7;

	for (int grid = 0; grid < 2; grid++) {
		int64_t rows = grid ? F * H * W : len;
		float *idf = malloc((size_t)(rows * 3) * 4);
		uint16_t *ids = malloc((size_t)(rows * 3) * 2), *y = malloc((size_t)(rows * width) * 2);
		double *ref = malloc((size_t)(rows * width) * sizeof *ref);
		struct dev_positions pos = { grid, true, F, H, W, first };

		if (grid)
			k_grid_ids(idf, F, H, W, true);
		else
			k_text_ids(idf, len, first, 3);
		for (int f64 = 0; f64 < 2; f64++) {
			d->ops->rope_freqs(d, NULL, &pos, (float *)y, rows, 3, axes_dim, 10000, true, f64);
			for (int64_t r = 0; r < rows; r++) {
				double *row = ref + r * width;

				for (int a = 0; a < 3; a++) {
					int64_t dd = axes_dim[a];
					double p = idf[r * 3 + a];

					for (int64_t j = 0; j < dd / 2; j++) {
						double ang;

						if (f64) {
							ang = p / pow(10000.0, (double)(2 * j) / (double)dd);
						} else {
							float e = (float)(2 * j) / (float)dd;
							float pw = (float)pow(10000.0, (double)e);

							ang = (float)((float)p * (1.0f / pw));
						}
						row[2 * j] = row[2 * j + 1] = sin(ang);
					}
					row += dd;
				}
			}
			UNIT_CHECK(dt_half_ulps(dt, y, ref, rows * width) <= 1.02,
				   "%s rope_freqs computing %s positions (%s angles), past %s's exact "
				   "integers: within half an ulp of float64", dt_name(dt),
				   grid ? "grid" : "text", f64 ? "float64" : "float32", dt_name(dt));
		}
		if (!grid) {
			/* control: the text positions stored in dt, then read */
			k_convert(ids, dt, idf, K_F32, rows * 3);
			d->ops->rope_freqs(d, (float *)ids, NULL, (float *)y, rows, 3, axes_dim, 10000,
					   true, true);
			double h = dt_half_ulps(dt, y, ref, rows * width);
			UNIT_CHECK(h > 100, "%s rope_freqs: control: positions stored in %s first are "
				   "rounded, the table off (worst %.0f half-ulps)", dt_name(dt),
				   dt_name(dt), h);
		}
		free(idf);
		free(ids);
		free(y);
		free(ref);
	}
}

/* Positions as dt values, widened: does every one equal want(i)? */
static bool positions_are(enum k_dtype dt, const uint16_t *got, int64_t n, const double *want)
{
	float *g = malloc((size_t)n * 4);
	bool same = true;

	k_convert(g, K_F32, got, dt, n);
	for (int64_t i = 0; i < n; i++)
		same &= g[i] == want[i];
	free(g);
	return same;
}

static void test_positions(struct dev *d, enum k_dtype dt)
{
	int64_t F = 3, H = 7, W = 5, n = F * H * W * 3;
	/* the dtype's last exact integer: 2^8 (bf16), 2^11 (f16) */
	int64_t top = dt == K_BF16 ? 256 : 2048, len = 57;
	uint16_t *y = malloc((size_t)n * 2);
	double *want = malloc((size_t)n * sizeof *want);

	for (int center = 0; center < 2; center++) {
		d->ops->grid_ids(d, (float *)y, F, H, W, center);
		for (int64_t f = 0; f < F; f++)
			for (int64_t h = 0; h < H; h++)
				for (int64_t w = 0; w < W; w++) {
					double *p = want + ((f * H + h) * W + w) * 3;

					p[0] = (double)f;
					p[1] = (double)(h - (center ? H - H / 2 : 0));
					p[2] = (double)(w - (center ? W - W / 2 : 0));
				}
		UNIT_CHECK(positions_are(dt, y, n, want), "%s grid_ids 3x7x5%s: exact positions",
			   dt_name(dt), center ? ", centred" : "");
	}
	/* text positions up to the last exact one, 2 axes */
	d->ops->text_ids(d, (float *)y, len, top - len + 1, 2);
	for (int64_t i = 0; i < 2 * len; i++)
		want[i] = (double)(top - len + 1 + i / 2);
	UNIT_CHECK(positions_are(dt, y, 2 * len, want), "%s text_ids %lld .. %lld: exact",
		   dt_name(dt), (long long)(top - len + 1), (long long)top);
	/* control: one past it is rounded (why the compiler and the session
	 * refuse positions beyond; docs/language.md) */
	d->ops->text_ids(d, (float *)y, len, top - len + 2, 2);
	for (int64_t i = 0; i < 2 * len; i++)
		want[i] = (double)(top - len + 2 + i / 2);
	UNIT_CHECK(!positions_are(dt, y, 2 * len, want),
		   "%s text_ids: control: position %lld is not exact in %s", dt_name(dt),
		   (long long)top + 1, dt_name(dt));
	free(y);
	free(want);
}

static void test_patches(struct dev *d, enum k_dtype dt)
{
	int64_t B = 2, C = 3, F = 3, H = 6, W = 10, pt = 3, ph = 2, pw = 5;
	int64_t n = B * C * F * H * W, Hp = H / ph, Wp = W / pw, N = F / pt * Hp * Wp;
	int64_t K = C * pt * ph * pw;
	float *xf = malloc((size_t)n * 4);
	uint16_t *x = rand_in(dt, n, xf, 3), *y = malloc((size_t)n * 2), *ref = malloc((size_t)n * 2);
	uint16_t *back = malloc((size_t)n * 2), *uref = malloc((size_t)n * 2);

	/* patchify: x [B, C, F, H, W] -> [B, N, C pt ph pw]; unpatchify of that
	 * same buffer read as [B, N, pt ph pw C] -> [B, C, F, H, W] */
	for (int64_t b = 0; b < B; b++)
		for (int64_t c = 0; c < C; c++)
			for (int64_t f = 0; f < F; f++)
				for (int64_t h = 0; h < H; h++)
					for (int64_t w = 0; w < W; w++) {
						int64_t xi = (((b * C + c) * F + f) * H + h) * W + w;
						int64_t tok = (f / pt * Hp + h / ph) * Wp + w / pw;
						int64_t k = ((c * pt + f % pt) * ph + h % ph) * pw + w % pw;
						int64_t ku = ((f % pt * ph + h % ph) * pw + w % pw) * C + c;

						ref[(b * N + tok) * K + k] = x[xi];
						uref[xi] = x[(b * N + tok) * K + ku];
					}
	d->ops->patchify(d, (float *)x, (float *)y, B, C, F, H, W, pt, ph, pw);
	UNIT_CHECK(!memcmp(y, ref, (size_t)n * 2), "%s patchify [2, 3, 3, 6, 10] by [3, 2, 5]: "
		   "every element moved as it is", dt_name(dt));
	d->ops->unpatchify(d, (float *)x, (float *)back, B, C, F, H, W, pt, ph, pw);
	UNIT_CHECK(!memcmp(back, uref, (size_t)n * 2), "%s unpatchify to [2, 3, 3, 6, 10]: every "
		   "element moved as it is", dt_name(dt));
	/* control: one element off is seen */
	back[n / 2] ^= 1;
	UNIT_CHECK(memcmp(back, uref, (size_t)n * 2), "%s unpatchify: control: a poisoned "
		   "element fails", dt_name(dt));
	free(xf);
	free(x);
	free(y);
	free(ref);
	free(back);
	free(uref);
}

static void test_fill(struct dev *d, enum k_dtype dt)
{
	int64_t rows = 5, stride = 11, cols = 7;
	uint16_t buf[5 * 11], v, trunc, ninf;
	float point3 = 0.3f, minus_inf = -INFINITY;
	bool ok = true;

	k_convert(&v, dt, &point3, K_F32, 1);
	k_convert(&ninf, dt, &minus_inf, K_F32, 1);
	/* 0.3 truncated, where both dtypes round it up: bf16 drops the low
	 * 16 bits; in f16 it is 204.8/1024 above 1/4 */
	trunc = dt == K_BF16 ? (uint16_t)(bits(point3) >> 16) : 0x34cc;
	memset(buf, 0xab, sizeof buf);
	d->ops->fill2d(d, (float *)(buf + 2), stride, rows, cols, point3);
	for (int64_t r = 0; r < rows; r++)
		for (int64_t c = 0; c < stride; c++)
			ok &= buf[r * stride + c] == (c >= 2 && c < 2 + cols ? v : 0xabab);
	UNIT_CHECK(ok && v != trunc, "%s fill2d of 0.3 over a strided 5x7 view: rounded to "
		   "nearest (0x%04x, not truncated 0x%04x), the gaps untouched", dt_name(dt), v,
		   trunc);
	d->ops->fill2d(d, (float *)buf, stride, rows, stride, -INFINITY);
	ok = true;
	for (int64_t i = 0; i < rows * stride; i++)
		ok &= buf[i] == ninf;
	UNIT_CHECK(ok, "%s fill2d of -inf", dt_name(dt));
}

/* Masked attention: batch 0 keeps a random part of its keys, batch 1
 * none (its rows are 0), batch 2 every key. */
static void test_masked_attention(struct dev *d, enum k_dtype dt)
{
	int64_t B = 3, Sq = 23, Skv = 41, H = 2, D = 8, Dv = 6;
	int64_t nq = B * Sq * H * D, nk = B * Skv * H * D, nv = B * Skv * H * Dv, no = B * Sq * H * Dv;
	float *qf = malloc((size_t)nq * 4), *kf = malloc((size_t)nk * 4), *vf = malloc((size_t)nv * 4);
	float mf[3 * 41];
	uint16_t *q = rand_in(dt, nq, qf, 2), *k = rand_in(dt, nk, kf, 2), *v = rand_in(dt, nv, vf, 1);
	uint16_t mask[3 * 41], *out = malloc((size_t)no * 2);
	float *lse = malloc((size_t)(B * H * Sq) * 4);
	double *ref = malloc((size_t)no * sizeof *ref);
	void *ws = malloc(d->ops->attention_workspace(d, B, Sq, Skv, H, D, Dv));

	for (int64_t j = 0; j < Skv; j++) {
		mf[j] = (float)(rng_next() % 2);
		mf[Skv + j] = 0;
		mf[2 * Skv + j] = 1;
	}
	mf[0] = 1;
	k_convert(mask, dt, mf, K_F32, B * Skv);
	d->ops->attention(d, (float *)q, H * D, (float *)k, H * D, (float *)v, H * Dv,
			  (float *)mask, (float *)out, lse, B, Sq, Skv, H, D, Dv, ws);
	ref_attention(qf, kf, vf, mf, B, Sq, Skv, H, D, Dv, 0, Skv, ref, NULL);
	check_dt(dt, "masked attention Sq 23, Skv 41 (a batch fully masked)", out, ref, no);
	bool zero = true;

	for (int64_t i = Sq * H * Dv; i < 2 * Sq * H * Dv; i++)
		zero &= out[i] == 0;
	UNIT_CHECK(zero, "%s masked attention: the fully masked batch is 0", dt_name(dt));
	/* control: the same keys unmasked are another result */
	ref_attention(qf, kf, vf, NULL, B, Sq, Skv, H, D, Dv, 0, Skv, ref, NULL);
	UNIT_CHECK(dt_half_ulps(dt, out, ref, no) > 1.02, "%s masked attention: control: the "
		   "unmasked reference fails the bound", dt_name(dt));
	free(qf);
	free(kf);
	free(vf);
	free(q);
	free(k);
	free(v);
	free(out);
	free(lse);
	free(ref);
	free(ws);
}

static void test_narrow_embeddings(void)
{
	for (enum k_dtype dt = K_BF16; dt <= K_F16; dt++) {
		struct dev *d = narrow_device(dt);

		test_timestep(d, dt);
		test_rope_freqs(d, dt);
		test_positions(d, dt);
		test_folded_positions(d, dt);
		test_patches(d, dt);
		test_fill(d, dt);
		test_masked_attention(d, dt);
		d->ops->destroy(d);
	}
}

int main(void)
{
	rng_state = 0x5deece66dull;
	test_convert();
	test_linear();
	test_attention_amx();
	struct dev *d = bf16_device();

	test_device_linear(d);
	test_norms(d);
	test_pointwise(d);
	test_rope(d);
	test_attention(d);
	d->ops->destroy(d);
	test_f16();
	test_narrow_embeddings();
	return unit_done();
}
