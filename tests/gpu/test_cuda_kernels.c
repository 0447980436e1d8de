/* test_cuda_kernels.c — the CUDA kernels (kernels_cuda.h) against the CPU
 * kernels (kernels/cpu/kernels.h), in float32, bfloat16 and float16.
 *
 * Every case draws fresh inputs in [-1, 1) (never 0) from a seeded PRNG; for
 * 16-bit storage the inputs are rounded to it first, so the CPU reference
 * sees exactly the values the device reads. Sizes are odd and straddle every
 * tile and vector width; pointers are offset by one element to reach the
 * unaligned paths; in-place variants run where the CPU header allows them.
 * Device outputs are poisoned with 0xff bytes (NaN in every dtype) before
 * each launch, so an element nobody wrote fails.
 *
 * A case passes when every element is finite, the normwise relative error
 * ||got - ref||_2 / ||ref||_2 is at most TOL (1e-5 float32, 1e-2 16-bit:
 * the output's own rounding is 2^-9 for bf16), and no element is off by
 * more than 10 TOL (|ref_i| + rms(ref)), which catches a single wrong
 * element that the norm of a large tensor would dilute. Negative controls
 * check that the comparison does catch each kind of fault.
 *
 * Output is TAP; the last line is "# N passed, N failed"; the exit status is
 * nonzero on any failure, and 77 (skip) without a CUDA device. */
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/kernels.h"
#include "kernels/cuda/kernels_cuda.h"
#include "tests/gpu/gpu_util.h"

static int n_pass, n_fail;

static const enum kc_dtype DTYPES[] = {KC_F32, KC_BF16, KC_F16};
static const char *const DNAME[] = {"f32", "bf16", "f16"};

/* ---- reporting ------------------------------------------------------------------ */

static void finish(void)
{
	printf("1..%d\n# %d passed, %d failed\n", n_pass + n_fail, n_pass, n_fail);
}

static void pass(const char *name)
{
	printf("ok %d - %s\n", n_pass + n_fail + 1, name);
	n_pass++;
}

static void __attribute__((format(printf, 2, 3))) fail(const char *name, const char *fmt, ...)
{
	va_list ap;

	printf("not ok %d - %s: ", n_pass + n_fail + 1, name);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
	n_fail++;
}

/* A failed allocation or copy leaves nothing sensible to test. */
static void fatal(const char *what, int st)
{
	fail(what, "%s", kc_error_string(st));
	finish();
	exit(1);
}

/* check() ends in fatal() (gpu_util_init in main). */
#define CK(call) check((call), #call)

/* The launch status of the op under test, then the stream's. A launch that
 * was refused fails the case; a kernel fault is sticky and ends the run. */
static int launched(const char *name, int st)
{
	if (st) {
		fail(name, "launch refused: %s", kc_error_string(st));
		return 0;
	}
	st = kc_sync(ctx);
	if (st) {
		fail(name, "kernel failed: %s", kc_error_string(st));
		finish();
		exit(1);
	}
	return 1;
}

/* ---- buffers: everything a case allocates is freed by end_case() ------------------------ */

enum { MAX_ALLOCS = 64 };
static void *dev_allocs[MAX_ALLOCS], *host_allocs[MAX_ALLOCS];
static int n_dev, n_host;

static void *hmalloc(size_t bytes)
{
	void *p = malloc(bytes ? bytes : 1);

	if (!p || n_host == MAX_ALLOCS) {
		fprintf(stderr, "test: out of host memory or allocation slots\n");
		exit(1);
	}
	host_allocs[n_host++] = p;
	return p;
}

static void *dmalloc(size_t bytes)
{
	void *p;

	if (n_dev == MAX_ALLOCS) {
		fprintf(stderr, "test: out of allocation slots\n");
		exit(1);
	}
	CK(kc_alloc(ctx, &p, bytes));
	dev_allocs[n_dev++] = p;
	return p;
}

static void end_case(void)
{
	while (n_dev)
		kc_free(ctx, dev_allocs[--n_dev]);
	while (n_host)
		free(host_allocs[--n_host]);
}

/* n random floats, already rounded to the storage dtype. */
static float *hrand(enum kc_dtype t, size_t n)
{
	float *p = hmalloc(n * sizeof *p);

	for (size_t i = 0; i < n; i++)
		p[i] = round_to(t, urand());
	return p;
}

static float *hcopy(const float *src, size_t n)
{
	float *p = hmalloc(n * sizeof *p);

	memcpy(p, src, n * sizeof *p);
	return p;
}

/* A device copy of n floats in dtype t, `off` elements into a fresh buffer
 * (off = 1 misaligns it for every vector width). NULL when n is 0. */
static void *dupload(enum kc_dtype t, const float *h, size_t n, size_t off)
{
	size_t es = kc_dtype_size(t);
	void *staging, *d;

	if (n == 0)
		return NULL;
	staging = hmalloc(n * es);
	d = (char *)dmalloc((n + off) * es) + off * es;
	to_storage(t, h, staging, n);
	CK(kc_upload(ctx, d, staging, n * es));
	return d;
}

/* n elements of dtype t filled with NaN (0xff bytes), `off` elements in. */
static void *dpoison(enum kc_dtype t, size_t n, size_t off)
{
	size_t es = kc_dtype_size(t);
	void *d = (char *)dmalloc((n + off) * es) + off * es;

	CK(kc_memset(ctx, d, 0xff, n * es));
	return d;
}

static float *ddownload(enum kc_dtype t, const void *d, size_t n)
{
	size_t es = kc_dtype_size(t);
	void *staging = hmalloc(n * es);
	float *h = hmalloc(n * sizeof *h);

	CK(kc_download(ctx, staging, d, n * es));
	from_storage(t, staging, h, n);
	return h;
}

/* ---- the comparison ----------------------------------------------------------------- */

static double tol_of(enum kc_dtype t)
{
	return t == KC_F32 ? 1e-5 : 1e-2;
}

/* 1 when got matches ref (see the header comment); else 0 with the reason,
 * naming the element, in detail. */
static int compare(const float *got, const float *ref, size_t n, double tol, char *detail,
		   size_t len)
{
	double den, rms, rel;
	size_t wi, bad = normwise_error(got, ref, n, &rel, &wi, &den);

	if (bad < n) {
		snprintf(detail, len, "element %zu: expected %.9g, got %g (never written?)", bad,
			 ref[bad], got[bad]);
		return 0;
	}
	rms = n ? sqrt(den / (double)n) : 0;
	for (size_t i = 0; i < n; i++) {
		double d = fabs((double)got[i] - ref[i]);

		if (d > 10 * tol * (fabs(ref[i]) + rms)) {
			snprintf(detail, len,
				 "element %zu: expected %.9g, got %.9g (error %.3g > 10 tol (|ref| + "
				 "rms %.3g); normwise %.3g)",
				 i, ref[i], got[i], d, rms, rel);
			return 0;
		}
	}
	if (rel > tol) {
		snprintf(detail, len,
			 "normwise relative error %.3g > %.0e; worst element %zu: expected %.9g, "
			 "got %.9g",
			 rel, tol, wi, ref[wi], got[wi]);
		return 0;
	}
	return 1;
}

static void check_close(const char *name, enum kc_dtype t, const float *got, const float *ref,
			size_t n)
{
	char detail[512];

	if (compare(got, ref, n, tol_of(t), detail, sizeof detail))
		pass(name);
	else
		fail(name, "%s", detail);
}

/* The comparison itself must catch what it is there to catch. */
static void negative_controls(void)
{
	const size_t n = 5000;

	for (int di = 0; di < 3; di++) {
		enum kc_dtype t = DTYPES[di];
		double tol = tol_of(t), norm = 0;
		float *ref = hrand(t, n), *got = hmalloc(n * sizeof *got);
		char name[128], detail[512];

		for (size_t i = 0; i < n; i++) {
			got[i] = round_to(t, ref[i]);
			norm += (double)ref[i] * ref[i];
		}
		norm = sqrt(norm);
		snprintf(name, sizeof name, "negative control %s: identical data passes", DNAME[di]);
		if (compare(got, ref, n, tol, detail, sizeof detail))
			pass(name);
		else
			fail(name, "%s", detail);

		/* One reference element off by 5% of the whole norm: normwise. */
		float *bad = hcopy(ref, n);

		bad[1234] += (float)(0.05 * norm);
		snprintf(name, sizeof name, "negative control %s: a perturbed element fails", DNAME[di]);
		if (!compare(got, bad, n, tol, detail, sizeof detail))
			pass(name);
		else
			fail(name, "comparison passed a reference element moved by 5%% of the norm");

		/* One element off by 20 tol (|ref| + 1): too small for the norm of
		 * 5000 elements, caught elementwise. */
		bad = hcopy(ref, n);
		bad[4321] += (float)(20 * tol * (fabs(bad[4321]) + 1));
		snprintf(name, sizeof name, "negative control %s: one wrong element fails", DNAME[di]);
		if (!compare(got, bad, n, tol, detail, sizeof detail))
			pass(name);
		else
			fail(name, "comparison passed one element off by 20 tol");

		float *nan = hcopy(got, n);

		nan[n - 1] = NAN;
		snprintf(name, sizeof name, "negative control %s: a NaN fails", DNAME[di]);
		if (!compare(nan, ref, n, tol, detail, sizeof detail))
			pass(name);
		else
			fail(name, "comparison passed a NaN");
		end_case();
	}
}

/* ---- context -------------------------------------------------------------------------- */

static void test_context(int devices)
{
	char err[256] = "";
	kc_ctx *bad = NULL;
	int st;

	if (kc_dtype_size(KC_F32) == 4 && kc_dtype_size(KC_BF16) == 2 && kc_dtype_size(KC_F16) == 2)
		pass("kc_dtype_size");
	else
		fail("kc_dtype_size", "got %zu %zu %zu", kc_dtype_size(KC_F32),
		     kc_dtype_size(KC_BF16), kc_dtype_size(KC_F16));
	if (kc_error_string(0)[0] == '\0' && kc_error_string(1)[0] != '\0' &&
	    kc_error_string(100000 + 7)[0] != '\0')
		pass("kc_error_string");
	else
		fail("kc_error_string", "'%s' '%s' '%s'", kc_error_string(0), kc_error_string(1),
		     kc_error_string(100000 + 7));
	st = kc_create(&bad, devices, err, sizeof err);
	if (st != 0 && bad == NULL && err[0])
		pass("kc_create on a device that does not exist fails with a reason");
	else
		fail("kc_create on a device that does not exist fails with a reason",
		     "status %d, context %p, message '%s'", st, (void *)bad, err);
	if (bad)
		kc_destroy(bad);

	/* kc_copy and kc_memset round trip. */
	const size_t n = 1001;
	unsigned char *src = hmalloc(n), *back = hmalloc(n);
	unsigned char *d1 = dmalloc(n), *d2 = dmalloc(n);
	int ok = 1;

	for (size_t i = 0; i < n; i++)
		src[i] = (unsigned char)rng_next();
	CK(kc_upload(ctx, d1, src, n));
	CK(kc_memset(ctx, d2, 0x5a, n));
	CK(kc_copy(ctx, d2 + 1, d1 + 3, n - 7));
	if (launched("kc_copy", 0)) {
		CK(kc_download(ctx, back, d2, n));
		for (size_t i = 0; i < n && ok; i++) {
			unsigned char want = i >= 1 && i < n - 6 ? src[i + 2] : 0x5a;

			if (back[i] != want) {
				fail("kc_copy and kc_memset", "byte %zu: expected %#x, got %#x", i,
				     want, back[i]);
				ok = 0;
			}
		}
		if (ok)
			pass("kc_copy and kc_memset");
	}
	end_case();
}

/* ---- linear ----------------------------------------------------------------------------- */

/* path: NULL (cuBLASLt, bias fused), "unfused" or "tiled" (DTPC_KC_LINEAR).
 * xoff/boff offset x and b by that many elements (misaligned). */
static void test_linear_case(int di, const char *path, int64_t m, int64_t k, int64_t n,
			     int bias, size_t xoff, size_t boff)
{
	enum kc_dtype t = DTYPES[di];
	char name[200];
	float *x = hrand(t, (size_t)(m * k)), *w = hrand(t, (size_t)(n * k));
	float *b = bias ? hrand(t, (size_t)n) : NULL, *ref = hmalloc((size_t)(m * n) * sizeof *ref);
	void *dx = dupload(t, x, (size_t)(m * k), xoff), *dw = dupload(t, w, (size_t)(n * k), 0);
	void *db = bias ? dupload(t, b, (size_t)n, boff) : NULL;
	void *dy = dpoison(t, (size_t)(m * n), 0);

	snprintf(name, sizeof name, "linear %s m=%lld k=%lld n=%lld%s%s%s%s%s", DNAME[di],
		 (long long)m, (long long)k, (long long)n, bias ? " bias" : "",
		 xoff ? " x-misaligned" : "", boff ? " bias-misaligned" : "",
		 path ? " path=" : "", path ? path : "");
	/* With k = 0, sgemm's C is beta C: give it a C to scale. */
	memset(ref, 0, (size_t)(m * n) * sizeof *ref);
	k_linear(x, w, b, ref, m, k, n);
	if (path)
		setenv("DTPC_KC_LINEAR", path, 1);
	else
		unsetenv("DTPC_KC_LINEAR");
	int st = kc_linear(ctx, t, dx, dw, db, dy, m, k, n);

	unsetenv("DTPC_KC_LINEAR");
	if (launched(name, st))
		check_close(name, t, ddownload(t, dy, (size_t)(m * n)), ref, (size_t)(m * n));
	end_case();
}

static void test_linear(void)
{
	static const int64_t shapes[][3] = {
		{1, 3, 5},    {7, 64, 96},   {129, 257, 383}, {1000, 64, 5},
		{1000, 257, 96}, {7, 3, 1},  {64, 128, 256},  {3, 0, 5},
	};
	static const char *const paths[] = {NULL, "unfused", "tiled"};

	for (int di = 0; di < 3; di++) {
		for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
			for (int p = 0; p < 3; p++)
				for (int bias = 0; bias < 2; bias++)
					test_linear_case(di, paths[p], shapes[s][0], shapes[s][1],
							 shapes[s][2], bias, 0, 0);
		test_linear_case(di, NULL, 129, 257, 383, 1, 0, 1);
		test_linear_case(di, NULL, 7, 64, 96, 1, 1, 0);
		test_linear_case(di, NULL, 64, 128, 256, 1, 1, 1);
	}
}

/* ---- norms ------------------------------------------------------------------------------- */

static void test_layer_norm_case(int di, int64_t rows, int64_t n, int has_w, int has_b,
				 int inplace, size_t off)
{
	enum kc_dtype t = DTYPES[di];
	const size_t total = (size_t)(rows * n);
	const float eps = 1e-6f;
	char name[200];
	float *x = hrand(t, total), *w = has_w ? hrand(t, (size_t)n) : NULL;
	float *b = has_b ? hrand(t, (size_t)n) : NULL, *ref = hmalloc(total * sizeof *ref);
	void *dx = dupload(t, x, total, off), *dw = has_w ? dupload(t, w, (size_t)n, 0) : NULL;
	void *db = has_b ? dupload(t, b, (size_t)n, 0) : NULL;
	void *dy = inplace ? dx : dpoison(t, total, off);

	snprintf(name, sizeof name, "layer_norm %s rows=%lld n=%lld%s%s%s%s", DNAME[di],
		 (long long)rows, (long long)n, has_w ? " w" : "", has_b ? " b" : "",
		 inplace ? " in-place" : "", off ? " misaligned" : "");
	k_layer_norm(x, ref, rows, n, eps, w, b);
	if (launched(name, kc_layer_norm(ctx, t, dx, dy, rows, n, eps, dw, db)))
		check_close(name, t, ddownload(t, dy, total), ref, total);
	end_case();
}

static void test_rms_norm_case(int di, int64_t rows, int64_t n, int64_t group, int has_w,
			       int inplace, size_t off)
{
	enum kc_dtype t = DTYPES[di];
	const size_t total = (size_t)(rows * n);
	const float eps = 1e-6f;
	char name[200];
	float *x = hrand(t, total), *w = has_w ? hrand(t, (size_t)group) : NULL;
	float *ref = hmalloc(total * sizeof *ref);
	void *dx = dupload(t, x, total, off), *dw = has_w ? dupload(t, w, (size_t)group, 0) : NULL;
	void *dy = inplace ? dx : dpoison(t, total, off);

	snprintf(name, sizeof name, "rms_norm %s rows=%lld n=%lld group=%lld%s%s%s", DNAME[di],
		 (long long)rows, (long long)n, (long long)group, has_w ? " w" : "",
		 inplace ? " in-place" : "", off ? " misaligned" : "");
	k_rms_norm(x, ref, rows, n, group, eps, w);
	if (launched(name, kc_rms_norm(ctx, t, dx, dy, rows, n, group, eps, dw)))
		check_close(name, t, ddownload(t, dy, total), ref, total);
	end_case();
}

static void test_norms(void)
{
	static const int64_t ln[][2] = {{1, 1}, {7, 7}, {129, 3077}, {1000, 96}, {3, 3072}};
	static const int64_t rms[][3] = {{1, 7, 7},	  {7, 96, 32},	   {129, 3077, 181},
					 {3, 3077, 17},	  {1000, 384, 128}, {2, 3072, 3072},
					 {4, 3072, 128}};

	for (int di = 0; di < 3; di++) {
		for (size_t s = 0; s < sizeof ln / sizeof ln[0]; s++)
			for (int wb = 0; wb < 4; wb++)
				test_layer_norm_case(di, ln[s][0], ln[s][1], wb & 1, wb >> 1, 0, 0);
		test_layer_norm_case(di, 129, 3077, 1, 1, 1, 0);
		test_layer_norm_case(di, 5, 3072, 1, 1, 1, 0);
		test_layer_norm_case(di, 5, 3072, 1, 1, 0, 1);
		for (size_t s = 0; s < sizeof rms / sizeof rms[0]; s++)
			for (int has_w = 0; has_w < 2; has_w++)
				test_rms_norm_case(di, rms[s][0], rms[s][1], rms[s][2], has_w, 0, 0);
		test_rms_norm_case(di, 129, 3077, 181, 1, 1, 0);
		test_rms_norm_case(di, 4, 3072, 128, 1, 1, 0);
		test_rms_norm_case(di, 5, 96, 96, 1, 0, 1);
	}
}

/* ---- activations --------------------------------------------------------------------------- */

/* TANH, SIGMOID: the unary ops (not a linear's fused activation) */
enum act { GELU, GELU_TANH, SILU, TANH, SIGMOID };

static void test_act_case(int di, enum act a, int64_t n, int inplace, size_t off)
{
	static const char *const anames[] = {"gelu", "gelu_tanh", "silu", "tanh", "sigmoid"};
	enum kc_dtype t = DTYPES[di];
	char name[200];
	float *x = hmalloc((size_t)n * sizeof *x), *ref = hmalloc((size_t)n * sizeof *ref);
	void *dx, *dy;
	int st;

	/* Inputs over [-8, 8) rather than [-1, 1): the tails are where the
	 * erfc and sigmoid forms matter. */
	for (int64_t i = 0; i < n; i++)
		x[i] = round_to(t, 8 * urand());
	dx = dupload(t, x, (size_t)n, off);
	dy = inplace ? dx : dpoison(t, (size_t)n, off);
	snprintf(name, sizeof name, "%s %s n=%lld%s%s", anames[a], DNAME[di], (long long)n,
		 inplace ? " in-place" : "", off ? " misaligned" : "");
	if (a == SILU) {
		k_silu(x, ref, n);
		st = kc_silu(ctx, t, dx, dy, n);
	} else if (a == TANH) {
		k_tanh(x, ref, n);
		st = kc_tanh(ctx, t, dx, dy, n);
	} else if (a == SIGMOID) {
		k_sigmoid(x, ref, n);
		st = kc_sigmoid(ctx, t, dx, dy, n);
	} else {
		k_gelu(x, ref, n, a == GELU_TANH);
		st = kc_gelu(ctx, t, dx, dy, n, a == GELU_TANH);
	}
	if (launched(name, st))
		check_close(name, t, ddownload(t, dy, (size_t)n), ref, (size_t)n);
	end_case();
}

static void test_activations(void)
{
	static const int64_t sizes[] = {1, 7, 3077, 257 * 1000 + 3};

	for (int di = 0; di < 3; di++) {
		for (int a = GELU; a <= SIGMOID; a++) {
			for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
				test_act_case(di, (enum act)a, sizes[s], 0, 0);
			test_act_case(di, (enum act)a, 3077, 1, 0);
			test_act_case(di, (enum act)a, 257 * 1000 + 3, 1, 0);
			test_act_case(di, (enum act)a, 3077, 0, 1);
		}
	}
}

/* ---- linear + activation ------------------------------------------------------------------------ */

/* kc_linear_act against the CPU's fused kernel (float32, on the same
 * rounded inputs: for 16-bit storage the device also rounds the sum before
 * the activation, well inside 1e-2), and bit for bit against the device's
 * own kc_linear then kc_gelu / kc_silu — its meaning, which a cuBLASLt GELU
 * epilogue (the activation before the rounding) would break. control: the
 * fused call with the tanh GELU where the pair has the exact one must
 * differ. */
static void test_linear_act_case(int di, int64_t m, int64_t k, int64_t n, int bias, int a,
				 int control)
{
	static const char *const anames[] = {"gelu", "gelu_tanh", "silu"};
	static const enum k_act cpu_act[] = {K_ACT_GELU, K_ACT_GELU_TANH, K_ACT_SILU};
	static const enum kc_act dev_act[] = {KC_ACT_GELU, KC_ACT_GELU_TANH, KC_ACT_SILU};
	enum kc_dtype t = DTYPES[di];
	const size_t total = (size_t)(m * n);
	char name[200];
	float *x = hrand(t, (size_t)(m * k)), *w = hrand(t, (size_t)(n * k));
	float *b = bias ? hrand(t, (size_t)n) : NULL, *ref = hmalloc(total * sizeof *ref);
	void *dx = dupload(t, x, (size_t)(m * k), 0), *dw = dupload(t, w, (size_t)(n * k), 0);
	void *db = bias ? dupload(t, b, (size_t)n, 0) : NULL;
	void *dy = dpoison(t, total, 0), *dpair = dpoison(t, total, 0);
	int fused_act = control ? GELU_TANH : a, st;

	snprintf(name, sizeof name, "%slinear_act %s %s m=%lld k=%lld n=%lld%s",
		 control ? "control: " : "", anames[fused_act], DNAME[di], (long long)m,
		 (long long)k, (long long)n, bias ? " bias" : "");
	k_linear_act_pool(NULL, x, w, b, ref, m, k, n, cpu_act[fused_act], NULL);
	st = kc_linear_act(ctx, t, dx, dw, db, dy, m, k, n, dev_act[fused_act]);
	if (!launched(name, st)) {
		end_case();
		return;
	}
	st = kc_linear(ctx, t, dx, dw, db, dpair, m, k, n);
	if (!st)
		st = a == SILU ? kc_silu(ctx, t, dpair, dpair, (int64_t)total)
			       : kc_gelu(ctx, t, dpair, dpair, (int64_t)total, a == GELU_TANH);
	if (launched(name, st)) {
		float *got = ddownload(t, dy, total), *pair = ddownload(t, dpair, total);
		bool same = !memcmp(got, pair, total * sizeof *got);

		if (control && same)
			fail(name, "the tanh GELU fused equals the exact GELU pair");
		else if (control)
			pass(name);
		else if (!same)
			fail(name, "differs from kc_linear then kc_%s on the device",
			     a == SILU ? "silu" : "gelu");
		else
			check_close(name, t, got, ref, total);
	}
	end_case();
}

static void test_linear_act(void)
{
	static const int64_t shapes[][3] = {{37, 61, 29}, {129, 257, 383}, {1000, 257, 96}};

	for (int di = 0; di < 3; di++) {
		for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
			for (int a = GELU; a <= SILU; a++)
				for (int bias = 0; bias < 2; bias++)
					test_linear_act_case(di, shapes[s][0], shapes[s][1],
							     shapes[s][2], bias, a, 0);
		test_linear_act_case(di, 129, 257, 383, 1, GELU, 1);
	}
}

/* ---- binary ------------------------------------------------------------------------------------ */

struct bin_case {
	int nd;
	int64_t o[K_MAX_DIMS], a[K_MAX_DIMS], b[K_MAX_DIMS];
};

static size_t volume(const int64_t *s, int nd)
{
	size_t v = 1;

	for (int i = 0; i < nd; i++)
		v *= (size_t)s[i];
	return v;
}

static void shape_str(char *buf, size_t len, const int64_t *s, int nd)
{
	size_t used = (size_t)snprintf(buf, len, "[");

	for (int i = 0; i < nd && used < len; i++)
		used += (size_t)snprintf(buf + used, len - used, i ? ",%lld" : "%lld", (long long)s[i]);
	if (used < len)
		snprintf(buf + used, len - used, "]");
}

/* inplace: 0 none, 1 out == a, 2 out == b (that operand must have oshape). */
static void test_binary_case(int di, enum kc_binop op, const struct bin_case *c, int inplace,
			     size_t off)
{
	enum kc_dtype t = DTYPES[di];
	size_t no = volume(c->o, c->nd), na = volume(c->a, c->nd), nb = volume(c->b, c->nd);
	char name[300], so[80], sa[80], sb[80];
	float *a = hrand(t, na), *b = hrand(t, nb), *ref = hmalloc(no * sizeof *ref);
	void *da = dupload(t, a, na, off), *db = dupload(t, b, nb, off);
	void *dout = inplace == 1 ? da : inplace == 2 ? db : dpoison(t, no, off);

	shape_str(so, sizeof so, c->o, c->nd);
	shape_str(sa, sizeof sa, c->a, c->nd);
	shape_str(sb, sizeof sb, c->b, c->nd);
	snprintf(name, sizeof name, "binary %s %s %s %s -> %s%s%s", op == KC_ADD ? "add" : "mul",
		 DNAME[di], sa, sb, so, inplace == 1 ? " out=a" : inplace == 2 ? " out=b" : "",
		 off ? " misaligned" : "");
	k_binary(op == KC_ADD ? K_ADD : K_MUL, a, c->a, b, c->b, ref, c->o, c->nd);
	if (launched(name, kc_binary(ctx, t, op, da, c->a, db, c->b, dout, c->o, c->nd)))
		check_close(name, t, ddownload(t, dout, no), ref, no);
	end_case();
}

static void test_binary(void)
{
	static const struct bin_case cases[] = {
		{2, {7, 3077}, {7, 3077}, {7, 3077}},
		{1, {3077}, {1}, {3077}},
		{3, {3, 7, 5}, {3, 7, 5}, {3, 1, 5}},
		{3, {3, 7, 96}, {3, 7, 96}, {3, 1, 96}},
		{3, {3, 7, 96}, {1, 7, 1}, {3, 1, 96}},
		{3, {3, 7, 33}, {3, 7, 33}, {3, 7, 1}},
		{0, {0}, {0}, {0}},
		{8, {2, 1, 3, 1, 5, 2, 1, 33}, {2, 1, 1, 1, 5, 1, 1, 33}, {1, 1, 3, 1, 1, 2, 1, 1}},
		{4, {2, 7, 3, 40}, {2, 7, 3, 40}, {1, 7, 1, 40}},
	};
	const size_t nc = sizeof cases / sizeof cases[0];

	for (int di = 0; di < 3; di++) {
		for (int op = KC_ADD; op <= KC_MUL; op++) {
			for (size_t i = 0; i < nc; i++)
				test_binary_case(di, (enum kc_binop)op, &cases[i], 0, 0);
			test_binary_case(di, (enum kc_binop)op, &cases[0], 0, 1);
			test_binary_case(di, (enum kc_binop)op, &cases[0], 1, 0);
			test_binary_case(di, (enum kc_binop)op, &cases[1], 2, 0);
			test_binary_case(di, (enum kc_binop)op, &cases[3], 1, 0);
			test_binary_case(di, (enum kc_binop)op, &cases[2], 1, 0);
		}
	}
}

/* ---- modulate ------------------------------------------------------------------------------------ */

static void test_modulate_case(int di, int64_t B, int64_t S, int64_t H, int per_pos, int inplace,
			       size_t off)
{
	enum kc_dtype t = DTYPES[di];
	const size_t total = (size_t)(B * S * H), np = (size_t)(per_pos ? B * S * H : B * H);
	const int64_t s_stride = per_pos ? H : 0;
	char name[200];
	float *x = hrand(t, total), *sh = hrand(t, np), *sc = hrand(t, np);
	float *ref = hmalloc(total * sizeof *ref);
	void *dx = dupload(t, x, total, off), *dsh = dupload(t, sh, np, 0), *dsc = dupload(t, sc, np, 0);
	void *dy = inplace ? dx : dpoison(t, total, off);

	snprintf(name, sizeof name, "modulate %s B=%lld S=%lld H=%lld s_stride=%lld%s%s", DNAME[di],
		 (long long)B, (long long)S, (long long)H, (long long)s_stride,
		 inplace ? " in-place" : "", off ? " misaligned" : "");
	k_modulate(x, sh, sc, ref, B, S, H, s_stride);
	if (launched(name, kc_modulate(ctx, t, dx, dsh, dsc, dy, B, S, H, s_stride)))
		check_close(name, t, ddownload(t, dy, total), ref, total);
	end_case();
}

static void test_modulate(void)
{
	static const int64_t shapes[][3] = {{1, 1, 7}, {2, 7, 96}, {3, 129, 3077}, {2, 5, 3072}};

	for (int di = 0; di < 3; di++) {
		for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
			for (int per_pos = 0; per_pos < 2; per_pos++)
				test_modulate_case(di, shapes[s][0], shapes[s][1], shapes[s][2],
						   per_pos, 0, 0);
		test_modulate_case(di, 3, 129, 3077, 0, 1, 0);
		test_modulate_case(di, 2, 5, 3072, 1, 1, 0);
		test_modulate_case(di, 2, 5, 3072, 0, 0, 1);
	}
}

/* ---- copy2d ------------------------------------------------------------------------------------------ */

/* Byte-exact: the view's elements are the source's, every other byte of the
 * destination buffer is still 0xff. off misaligns dst by that many bytes. */
static void test_copy2d_case(size_t eb, int64_t rows, int64_t cols, int64_t dst_stride,
			     int64_t src_stride, size_t off)
{
	char name[200];
	const size_t src_bytes = (size_t)((rows - 1) * src_stride + cols) * eb;
	const size_t dst_bytes = (size_t)((rows - 1) * dst_stride + cols) * eb + off;
	unsigned char *src = hmalloc(src_bytes), *want = hmalloc(dst_bytes), *got = hmalloc(dst_bytes);
	unsigned char *dsrc = dmalloc(src_bytes), *ddst = dmalloc(dst_bytes);

	snprintf(name, sizeof name, "copy2d elem_bytes=%zu rows=%lld cols=%lld dst_stride=%lld "
		 "src_stride=%lld%s", eb, (long long)rows, (long long)cols, (long long)dst_stride,
		 (long long)src_stride, off ? " dst-misaligned" : "");
	for (size_t i = 0; i < src_bytes; i++)
		src[i] = (unsigned char)rng_next();
	memset(want, 0xff, dst_bytes);
	for (int64_t r = 0; r < rows; r++)
		memcpy(want + off + (size_t)(r * dst_stride) * eb, src + (size_t)(r * src_stride) * eb,
		       (size_t)cols * eb);
	CK(kc_upload(ctx, dsrc, src, src_bytes));
	CK(kc_memset(ctx, ddst, 0xff, dst_bytes));
	if (launched(name, kc_copy2d(ctx, eb, ddst + off, dst_stride, dsrc, src_stride, rows, cols))) {
		CK(kc_download(ctx, got, ddst, dst_bytes));
		size_t i = 0;

		while (i < dst_bytes && got[i] == want[i])
			i++;
		if (i == dst_bytes)
			pass(name);
		else
			fail(name, "byte %zu of the destination (row %zu): expected %#x, got %#x", i,
			     (i - off) / eb / (size_t)dst_stride, want[i], got[i]);
	}
	end_case();
}

static void test_copy2d(void)
{
	static const size_t ebs[] = {4, 2, 1, 6};

	for (size_t e = 0; e < sizeof ebs / sizeof ebs[0]; e++) {
		size_t eb = ebs[e];

		test_copy2d_case(eb, 7, 13, 13, 13, 0);	    /* contiguous */
		test_copy2d_case(eb, 129, 769, 769, 3077, 0); /* pack a column chunk */
		test_copy2d_case(eb, 129, 769, 3077, 769, 0); /* unpack it */
		test_copy2d_case(eb, 1, 5, 5, 9, 0);
		test_copy2d_case(eb, 7, 33, 40, 0, 0);	/* one row repeated: a kernel */
		test_copy2d_case(eb, 5, 10, 11, 3, 0);	/* overlapping source rows */
		test_copy2d_case(eb, 7, 33, 40, 0, 1);
		test_copy2d_case(eb, 64, 256, 512, 256, 0);
	}
}

/* ---- fill2d ------------------------------------------------------------------------------------------ */

/* Byte-exact: every element of the view holds value rounded to t as the
 * CPU rounds it (to_storage: nearest even), every other byte of the buffer
 * is still 0xff. poke: the negative control, the device given the next
 * value of t up instead; the case passes when the bytes then differ. */
static void fill2d_case(int di, int64_t rows, int64_t cols, int64_t stride, float value, size_t off,
		       int poke)
{
	enum kc_dtype t = DTYPES[di];
	const size_t es = kc_dtype_size(t);
	const size_t n = (size_t)((rows - 1) * stride + cols) + off;
	unsigned char *want = hmalloc(n * es), *got = hmalloc(n * es), elem[4];
	unsigned char *d = dmalloc(n * es);
	float dev_value = value;
	char name[200];

	to_storage(t, &value, elem, 1);
	if (poke) {
		/* the storage value one unit in the last place up */
		if (t == KC_F32) {
			dev_value = nextafterf(value, INFINITY);
		} else {
			uint16_t u;
			memcpy(&u, elem, 2);
			u++;
			from_storage(t, &u, &dev_value, 1);
		}
	}
	snprintf(name, sizeof name, "%sfill2d %s %.9g rows=%lld cols=%lld stride=%lld%s",
		 poke ? "negative control: " : "", DNAME[di], (double)value, (long long)rows,
		 (long long)cols, (long long)stride, off ? " misaligned" : "");
	memset(want, 0xff, n * es);
	for (int64_t r = 0; r < rows; r++)
		for (int64_t c = 0; c < cols; c++)
			memcpy(want + (off + (size_t)(r * stride + c)) * es, elem, es);
	CK(kc_memset(ctx, d, 0xff, n * es));
	if (launched(name, kc_fill2d(ctx, t, d + off * es, stride, rows, cols, dev_value))) {
		CK(kc_download(ctx, got, d, n * es));
		size_t i = 0;

		while (i < n * es && got[i] == want[i])
			i++;
		if (poke && i < n * es)
			pass(name);
		else if (poke)
			fail(name, "a fill of the next value up matched: the check cannot fail");
		else if (i == n * es)
			pass(name);
		else
			fail(name, "byte %zu of the buffer: expected %#x, got %#x", i, want[i], got[i]);
	}
	end_case();
}

static void test_fill2d(void)
{
	/* 0.3 and 1 + 3 * 2^-8 (bf16) / 1 + 3 * 2^-11 (f16) are not in the
	 * 16-bit dtypes: rounding, not truncation (the second a tie, to even) */
	static const float values[] = {0.3f, 1.01171875f, 1.00146484375f, -INFINITY, 0.0f, -7.5f};

	for (int di = 0; di < 3; di++) {
		for (size_t v = 0; v < sizeof values / sizeof values[0]; v++)
			fill2d_case(di, 5, 7, 11, values[v], 1, 0);
		fill2d_case(di, 1, 20000, 20000, 0.3f, 0, 0); /* one long row: many pieces */
		fill2d_case(di, 129, 3, 769, -1.25f, 0, 0);	 /* a column of a wide tensor */
		fill2d_case(di, 4, 4100, 4100, 2.0f, 0, 0);	 /* contiguous */
		fill2d_case(di, 5, 7, 11, 0.3f, 1, 1);
	}
	void *d = dmalloc(4096);
	if (kc_fill2d(ctx, KC_F32, d, 3, 2, 4, 1.0f) != 0)
		pass("fill2d refuses a row stride below the row width");
	else
		fail("fill2d refuses a row stride below the row width", "status 0");
	end_case();
}

/* ---- rope ------------------------------------------------------------------------------------------------ */

/* x and y are [B, S, heads * D] with row strides x_stride and y_stride;
 * inplace makes y x (y_stride must equal x_stride). Checks the view's
 * elements numerically and that every other element of y's buffer is
 * unchanged (NaN, or x's own for in-place). */
static void test_rope_case(int di, int64_t B, int64_t S, int64_t heads, int64_t D,
			   int64_t x_stride, int64_t y_stride, int inplace, size_t off)
{
	enum kc_dtype t = DTYPES[di];
	const int64_t rows = B * S, w = heads * D;
	const size_t xn = (size_t)((rows - 1) * x_stride + w), yn = (size_t)((rows - 1) * y_stride + w);
	const size_t vn = (size_t)(rows * w);
	char name[240];
	float *x = hrand(t, xn), *cs = hrand(t, (size_t)(S * D)), *sn = hrand(t, (size_t)(S * D));
	float *yref = inplace ? hcopy(x, xn) : hmalloc(yn * sizeof *yref);
	float *vref = hmalloc(vn * sizeof *vref), *vgot = hmalloc(vn * sizeof *vgot);
	void *dx = dupload(t, x, xn, off), *dc = dupload(t, cs, (size_t)(S * D), 0);
	void *ds = dupload(t, sn, (size_t)(S * D), 0);
	void *dy = inplace ? dx : dpoison(t, yn, 0);

	snprintf(name, sizeof name,
		 "rope %s B=%lld S=%lld heads=%lld D=%lld x_stride=%lld y_stride=%lld%s%s",
		 DNAME[di], (long long)B, (long long)S, (long long)heads, (long long)D,
		 (long long)x_stride, (long long)y_stride, inplace ? " in-place" : "",
		 off ? " misaligned" : "");
	if (!inplace)
		for (size_t i = 0; i < yn; i++)
			yref[i] = NAN;
	k_rope(x, x_stride, cs, sn, yref, y_stride, B, S, heads, D);
	if (!launched(name, kc_rope(ctx, t, dx, x_stride, dc, ds, dy, y_stride, B, S, heads, D))) {
		end_case();
		return;
	}
	float *got = ddownload(t, dy, yn);

	for (int64_t r = 0; r < rows; r++) {
		memcpy(vref + r * w, yref + r * y_stride, (size_t)w * sizeof *vref);
		memcpy(vgot + r * w, got + r * y_stride, (size_t)w * sizeof *vgot);
		/* The gap after the row: untouched. */
		for (int64_t i = w; r < rows - 1 && i < y_stride; i++) {
			float g = got[r * y_stride + i], e = yref[r * y_stride + i];

			if (!(isnan(g) && isnan(e)) && memcmp(&g, &e, sizeof g) != 0) {
				fail(name, "element %lld past row %lld's view was written: expected %g, "
				     "got %g", (long long)i, (long long)r, e, g);
				end_case();
				return;
			}
		}
	}
	check_close(name, t, vgot, vref, vn);
	end_case();
}

static void test_rope(void)
{
	for (int di = 0; di < 3; di++) {
		test_rope_case(di, 1, 1, 1, 2, 2, 2, 0, 0);
		test_rope_case(di, 2, 7, 3, 64, 3 * 3 * 64, 3 * 64, 0, 0); /* q inside packed qkv */
		test_rope_case(di, 2, 7, 3, 64, 3 * 3 * 64, 3 * 3 * 64, 1, 0);
		test_rope_case(di, 1, 129, 5, 6, 60, 60, 1, 0);
		test_rope_case(di, 2, 33, 3, 128, 3 * 128 + 1, 3 * 128, 0, 0); /* odd stride */
		test_rope_case(di, 2, 33, 3, 128, 3 * 128, 3 * 128 + 3, 0, 1);
		test_rope_case(di, 3, 77, 24, 128, 24 * 128, 24 * 128, 0, 0);
	}
}

/* rope's conventions "half" and "split" (kc_rope_half, per_head): the
 * CPU's k_rope_half on the same (dtype-rounded) inputs; y contiguous or in
 * place, the passed channels R .. D included. */
static void test_rope_half_case(int di, int64_t B, int64_t S, int64_t heads, int64_t D, int64_t R,
				int64_t x_stride, int inplace, bool per_head)
{
	enum kc_dtype t = DTYPES[di];
	const int64_t rows = B * S, w = heads * D, y_stride = inplace ? x_stride : w;
	const size_t xn = (size_t)((rows - 1) * x_stride + w), yn = (size_t)((rows - 1) * y_stride + w);
	const size_t tn = (size_t)(S * (per_head ? heads * (R / 2) : R));
	char name[200];
	float *x = hrand(t, xn), *cs = hrand(t, tn), *sn = hrand(t, tn);
	float *yref = inplace ? hcopy(x, xn) : hmalloc(yn * sizeof *yref);
	float *vref = hmalloc((size_t)(rows * w) * sizeof *vref);
	float *vgot = hmalloc((size_t)(rows * w) * sizeof *vgot);
	void *dx = dupload(t, x, xn, 0), *dc = dupload(t, cs, tn, 0);
	void *ds = dupload(t, sn, tn, 0);
	void *dy = inplace ? dx : dpoison(t, yn, 0);

	snprintf(name, sizeof name, "rope %s %s B=%lld S=%lld heads=%lld D=%lld R=%lld x_stride=%lld%s",
		 per_head ? "split" : "half", DNAME[di], (long long)B, (long long)S,
		 (long long)heads, (long long)D, (long long)R, (long long)x_stride,
		 inplace ? " in-place" : "");
	k_rope_half(x, x_stride, cs, sn, yref, y_stride, B, S, heads, D, R, per_head);
	if (!launched(name, kc_rope_half(ctx, t, dx, x_stride, dc, ds, dy, y_stride, B, S, heads, D,
					 R, per_head))) {
		end_case();
		return;
	}
	float *got = ddownload(t, dy, yn);

	for (int64_t r = 0; r < rows; r++) {
		memcpy(vref + r * w, yref + r * y_stride, (size_t)w * sizeof *vref);
		memcpy(vgot + r * w, got + r * y_stride, (size_t)w * sizeof *vgot);
	}
	check_close(name, t, vgot, vref, (size_t)(rows * w));
	end_case();
}

static void test_rope_half(void)
{
	for (int di = 0; di < 3; di++) {
		test_rope_half_case(di, 1, 1, 1, 2, 2, 2, 0, false);
		test_rope_half_case(di, 2, 7, 3, 14, 12, 3 * 3 * 14, 0, false); /* q inside packed qkv */
		test_rope_half_case(di, 2, 7, 3, 14, 12, 3 * 3 * 14, 1, false);
		test_rope_half_case(di, 2, 33, 5, 128, 96, 5 * 128, 0, false); /* MiniMax-H3: 96 of 128 */
		test_rope_half_case(di, 1, 65, 4, 130, 66, 4 * 130 + 1, 0, false); /* odd stride, h > 32 */
		/* "split" (LTX-2): per-head tables over whole heads */
		test_rope_half_case(di, 2, 7, 3, 14, 14, 3 * 3 * 14, 0, true);
		test_rope_half_case(di, 2, 7, 3, 14, 14, 3 * 3 * 14, 1, true);
		test_rope_half_case(di, 1, 65, 4, 128, 128, 4 * 128 + 1, 0, true); /* LTX-2: 32 x 128 */
	}
}

/* index_select's gather and index_copy's scatter (kc_index_rows): the CPU's
 * k_index_rows on the same values, bit for bit (data movement), with the
 * index in the storage dtype and an invalid index among them; misaligned
 * rows take the narrow units. */
static void test_index_rows_case(int di, int64_t outer, int64_t rows, int64_t inner, int64_t n,
				 bool scatter)
{
	enum kc_dtype t = DTYPES[di];
	const size_t sn = (size_t)(outer * (scatter ? n : rows) * inner);
	const size_t dn = (size_t)(outer * (scatter ? rows : n) * inner);
	char name[200];
	float *src = hrand(t, sn), *dst = hrand(t, dn), *idx = hmalloc((size_t)n * sizeof *idx);

	for (int64_t j = 0; j < n; j++) /* distinct rows, one out of range */
		idx[j] = j == n / 2 ? (float)(rows + 3) : (float)((j * 5 + 1) % rows);
	float *ref = hcopy(dst, dn);
	void *ds = dupload(t, src, sn, 0), *dd = dupload(t, dst, dn, 0);
	void *di_ = dupload(t, idx, (size_t)n, 0);

	snprintf(name, sizeof name, "index_rows %s %s outer=%lld rows=%lld inner=%lld n=%lld",
		 DNAME[di], scatter ? "scatter" : "gather", (long long)outer, (long long)rows,
		 (long long)inner, (long long)n);
	k_index_rows(ref, scatter ? rows : n, src, scatter ? n : rows, idx, n, outer, inner,
		     sizeof(float), scatter);
	if (launched(name, kc_index_rows(ctx, t, kc_dtype_size(t), dd, scatter ? rows : n, ds,
					 scatter ? n : rows, di_, n, outer, inner, scatter)))
		check_close(name, t, ddownload(t, dd, dn), ref, dn);
	end_case();
}

static void test_index_rows(void)
{
	for (int di = 0; di < 3; di++)
		for (int sc = 0; sc < 2; sc++) {
			test_index_rows_case(di, 1, 7, 24, 5, sc);   /* 16-byte rows (f32) */
			test_index_rows_case(di, 2, 11, 3, 6, sc);   /* 2- and 4-byte units */
			test_index_rows_case(di, 3, 40, 257, 33, sc); /* wide rows */
		}
}

/* ---- embeddings ------------------------------------------------------------------------------------ */

/* The tables are the CPU's arithmetic on the same (dtype-rounded) inputs:
 * close within the dtype's tolerance (float32: the same value up to the
 * double-precision sin/cos/exp/pow of the two libraries, i.e. nearly
 * always bit for bit). wide: the timesteps float32 whatever the storage
 * (an input's values as bound, t_f32), up to 1000 and not rounded. */
static void test_timestep_case(int di, int64_t n, int64_t dim, bool flip, double shift,
			       double scale, double max_period, double input_scale, bool f32,
			       bool wide)
{
	enum kc_dtype t = DTYPES[di];
	float *ts = hmalloc((size_t)n * sizeof *ts), *ref = hmalloc((size_t)(n * dim) * sizeof *ref);
	char name[200];

	for (int64_t i = 0; i < n; i++)
		ts[i] = wide ? 1000 * fabsf(urand()) : round_to(t, fabsf(urand()));
	void *dt = dupload(wide ? KC_F32 : t, ts, (size_t)n, 1);
	void *dy = dpoison(t, (size_t)(n * dim), 0);

	snprintf(name, sizeof name, "timestep_embedding %s n=%lld dim=%lld flip=%d shift=%g scale=%g "
		 "max_period=%g input_scale=%g%s%s", DNAME[di], (long long)n, (long long)dim, flip,
		 shift, scale, max_period, input_scale, f32 ? " input_scale_f32" : "",
		 wide ? " t_f32" : "");
	/* input_scale's product rounded to the storage dtype first, as the CPU
	 * device does (diffusers' `timestep.to(dtype) * 1000`, a float32
	 * timestep rounded before; float32: as is), or kept in float32 (f32:
	 * Qwen-Image 2.1's `time_factor * t.float()`) */
	bool round_in = input_scale != 1 && !f32;
	float *sc = hmalloc((size_t)n * sizeof *sc);
	for (int64_t i = 0; i < n; i++) {
		float tv = round_in ? round_to(t, ts[i]) : ts[i];
		sc[i] = round_in ? round_to(t, tv * (float)input_scale) : tv * (float)input_scale;
	}
	k_timestep_embedding(sc, ref, n, dim, flip, shift, scale, max_period, 1);
	if (launched(name, kc_timestep_embedding(ctx, t, dt, dy, n, dim, flip, shift, scale,
						 max_period, input_scale, f32, wide)))
		check_close(name, t, ddownload(t, dy, (size_t)(n * dim)), ref, (size_t)(n * dim));
	end_case();
}

static void test_rope_freqs_case(int di, int64_t rows, int64_t naxes, const int64_t *dims,
				 bool sine, bool f64)
{
	enum kc_dtype t = DTYPES[di];
	int64_t width = 0;
	char name[200];

	for (int64_t a = 0; a < naxes; a++)
		width += dims[a];
	float *ids = hmalloc((size_t)(rows * naxes) * sizeof *ids);
	float *ref = hmalloc((size_t)(rows * width) * sizeof *ref);

	for (int64_t i = 0; i < rows * naxes; i++)
		ids[i] = round_to(t, 300 * urand());
	void *dids = dupload(t, ids, (size_t)(rows * naxes), 1);
	void *dy = dpoison(t, (size_t)(rows * width), 0);

	snprintf(name, sizeof name, "rope_freqs %s rows=%lld axes=%lld width=%lld %s %s", DNAME[di],
		 (long long)rows, (long long)naxes, (long long)width, sine ? "sin" : "cos",
		 f64 ? "f64" : "f32");
	k_rope_freqs(ids, ref, rows, naxes, dims, 10000, sine, f64);
	struct kc_positions from_ids = { KC_POS_IDS, false, 0, 0, 0, 0 };
	if (launched(name, kc_rope_freqs(ctx, t, dids, &from_ids, dy, rows, naxes, dims, 10000, sine,
					 f64)))
		check_close(name, t, ddownload(t, dy, (size_t)(rows * width)), ref,
			    (size_t)(rows * width));
	end_case();
}

/* rope_freqs computing its positions (a folded grid_ids / text_ids), past
 * bf16's and f16's exact integers: the CPU's table of the float32
 * positions k_grid_ids / k_text_ids write (never rounded to the dtype). */
static void test_rope_positions_case(int di, bool grid, bool f64)
{
	enum kc_dtype t = DTYPES[di];
	const int64_t F = 2, H = 9, W = 7, L = 37, first = 2901, dims[3] = {4, 6, 8}, width = 18;
	int64_t rows = grid ? F * H * W : L;
	float *ids = hmalloc((size_t)(rows * 3) * sizeof *ids);
	float *ref = hmalloc((size_t)(rows * width) * sizeof *ref);
	struct kc_positions pos = { grid ? KC_POS_GRID : KC_POS_TEXT, true, F, H, W, first };
	char name[200];
	void *dy = dpoison(t, (size_t)(rows * width), 0);

	if (grid)
		k_grid_ids(ids, F, H, W, true);
	else
		k_text_ids(ids, L, first, 3);
	snprintf(name, sizeof name, "rope_freqs %s computing %s positions, %s", DNAME[di],
		 grid ? "centred grid 2 x 9 x 7" : "text 2901 .. 2937", f64 ? "f64" : "f32");
	k_rope_freqs(ids, ref, rows, 3, dims, 10000, true, f64);
	if (launched(name, kc_rope_freqs(ctx, t, NULL, &pos, dy, rows, 3, dims, 10000, true, f64)))
		check_close(name, t, ddownload(t, dy, (size_t)(rows * width)), ref,
			    (size_t)(rows * width));
	end_case();
}

/* ltx_rope_freqs over grid positions: LTX-Video 2B's width 2048 (341
 * frequencies, 2 padding columns) and a narrow one, frames patch 2. */
static void test_ltx_rope_case(int di, int64_t dim, bool sine)
{
	enum kc_dtype t = DTYPES[di];
	const int64_t F = 3, H = 16, W = 24, rows = F * H * W;
	const double scale[3] = { 8.0 / 25, 32, 32 };
	float *ids = hmalloc((size_t)(rows * 3) * sizeof *ids);
	float *ref = hmalloc((size_t)(rows * dim) * sizeof *ref);
	char name[200];

	k_grid_ids(ids, F, H, W, false); /* integers below 256: exact in every dtype */
	void *dids = dupload(t, ids, (size_t)(rows * 3), 1);
	void *dy = dpoison(t, (size_t)(rows * dim), 0);

	snprintf(name, sizeof name, "ltx_rope_freqs %s 3 x 16 x 24 dim=%lld %s", DNAME[di],
		 (long long)dim, sine ? "sin" : "cos");
	k_ltx_rope_freqs(ids, ref, rows, dim, scale, 2, 1, 10000, sine);
	if (launched(name, kc_ltx_rope_freqs(ctx, t, dids, dy, rows, dim, scale, 2, 1, 10000,
					     sine)))
		check_close(name, t, ddownload(t, dy, (size_t)(rows * dim)), ref,
			    (size_t)(rows * dim));
	end_case();
}

/* ltx2_rope_freqs against the CPU kernel: LTX-2's video table (width
 * 4096 = 32 x 128, no padding) and the audio one (2048, patch_t 1) at the
 * real grids' sizes, an odd video grid (patch 3 x 2, 4 padding columns,
 * float32 frequencies, rows from 37: a slice of the grid), the frame axis
 * alone (the cross-attention table) and audio with patch_t 2 over odd
 * frames. */
static void test_ltx2_rope_case(int di, const struct kc_ltx2_rope *p, int64_t frames,
				int64_t lo, bool sine)
{
	enum kc_dtype t = DTYPES[di];
	int64_t all = p->audio ? (frames + p->patch_t - 1) / p->patch_t
			       : frames / p->patch_t * (p->height / p->patch) * (p->width / p->patch);
	int64_t rows = all - lo;
	struct k_ltx2_rope k = { p->dim, p->axes, p->height, p->width, p->patch_t, p->patch,
				 p->scale_t, p->scale_s, p->causal_offset, p->hop_length,
				 p->base_t, p->base_s, p->time_div, p->theta, p->audio, p->f64,
				 p->split };
	size_t n = (size_t)(rows * k_ltx2_rope_width(&k));
	float *ref = hmalloc(n * sizeof *ref);
	void *dy = dpoison(t, n, 0);
	char name[200];

	snprintf(name, sizeof name, "ltx2_rope_freqs %s %s dim=%lld axes=%lld rows %lld.. of "
		 "%lld %s %s%s", DNAME[di], p->audio ? "audio" : "video", (long long)p->dim,
		 (long long)p->axes, (long long)lo, (long long)all, p->f64 ? "f64" : "f32",
		 sine ? "sin" : "cos", p->split ? " split" : "");
	k_ltx2_rope_freqs(&k, ref, lo, rows, sine);
	if (launched(name, kc_ltx2_rope_freqs(ctx, t, p, dy, lo, rows, sine)))
		check_close(name, t, ddownload(t, dy, n), ref, n);
	end_case();
}

static void test_ltx2_rope(int di)
{
	/* dim, axes, height, width, patch_t, patch, scale_t, scale_s,
	 * causal_offset, hop_length, base_t, base_s, time_div, theta, audio, f64,
	 * split */
	static const struct kc_ltx2_rope video = { 4096, 3, 16, 24, 1, 1, 8, 32, 1, 160, 20,
						   2048, 24, 10000, false, true, false };
	static const struct kc_ltx2_rope video_split = { 4096, 3, 16, 24, 1, 1, 8, 32, 1, 160,
							 20, 2048, 24, 10000, false, true, true };
	static const struct kc_ltx2_rope odd_split = { 40, 3, 10, 14, 3, 2, 8, 32, 1, 160, 20,
						       2048, 25, 10000, false, false, true };
	static const struct kc_ltx2_rope audio = { 2048, 1, 1, 1, 1, 1, 4, 32, 1, 160, 20,
						   2048, 16000, 10000, true, true, false };
	static const struct kc_ltx2_rope odd = { 40, 3, 10, 14, 3, 2, 8, 32, 1, 160, 20, 2048,
						 25, 10000, false, false, false };
	static const struct kc_ltx2_rope frame = { 38, 1, 5, 7, 2, 1, 8, 32, 1, 160, 20, 2048,
						   24, 10000, false, true, false };
	static const struct kc_ltx2_rope audio_odd = { 26, 1, 1, 1, 2, 1, 4, 32, 0, 137, 20,
						       2048, 22050, 500, true, false, false };

	for (int sine = 0; sine < 2; sine++) {
		test_ltx2_rope_case(di, &video, 16, 0, sine);
		test_ltx2_rope_case(di, &audio, 126, 0, sine);
		test_ltx2_rope_case(di, &odd, 9, 37, sine);
		test_ltx2_rope_case(di, &frame, 6, 0, sine);
		test_ltx2_rope_case(di, &audio_odd, 13, 2, sine);
		test_ltx2_rope_case(di, &video_split, 16, 0, sine);
		test_ltx2_rope_case(di, &odd_split, 9, 37, sine);
	}
	/* control: the device table with causal_offset 0 is not the CPU's
	 * with 1 (the comparison sees a parameter off by one) */
	enum kc_dtype t = DTYPES[di];
	struct kc_ltx2_rope off = odd;
	struct k_ltx2_rope k = { odd.dim, odd.axes, odd.height, odd.width, odd.patch_t, odd.patch,
				 odd.scale_t, odd.scale_s, odd.causal_offset, odd.hop_length,
				 odd.base_t, odd.base_s, odd.time_div, odd.theta, odd.audio,
				 odd.f64, odd.split };
	int64_t rows = 9 / 3 * (10 / 2) * (14 / 2);
	size_t n = (size_t)(rows * odd.dim);
	float *ref = hmalloc(n * sizeof *ref);
	void *dy = dpoison(t, n, 0);
	char name[120], detail[512];

	off.causal_offset = 0;
	snprintf(name, sizeof name, "ltx2_rope_freqs %s control: causal_offset 0 differs from 1",
		 DNAME[di]);
	k_ltx2_rope_freqs(&k, ref, 0, rows, true);
	if (launched(name, kc_ltx2_rope_freqs(ctx, t, &off, dy, 0, rows, true))) {
		if (compare(ddownload(t, dy, n), ref, n, tol_of(t), detail, sizeof detail))
			fail(name, "the tables agree");
		else
			pass(name);
	}
	end_case();
}

/* Positions and (un)patchified copies are exact in every dtype. */
static void check_exact(const char *name, const float *got, const float *ref, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (memcmp(&got[i], &ref[i], sizeof *got)) {
			fail(name, "element %zu: expected %.9g, got %.9g", i, ref[i], got[i]);
			return;
		}
	pass(name);
}

static void test_positions_case(int di)
{
	enum kc_dtype t = DTYPES[di];
	const int64_t F = 3, H = 5, W = 7, L = 11, A = 4;
	size_t ng = (size_t)(F * H * W * 3), nt = (size_t)(L * A);
	float *ref = hmalloc(ng * sizeof *ref), *tref = hmalloc(nt * sizeof *tref);
	char name[120];

	for (int center = 0; center < 2; center++) {
		void *dy = dpoison(t, ng, 1);

		snprintf(name, sizeof name, "grid_ids %s 3 x 5 x 7 center=%d", DNAME[di], center);
		k_grid_ids(ref, F, H, W, center);
		if (launched(name, kc_grid_ids(ctx, t, dy, F, H, W, center)))
			check_exact(name, ddownload(t, dy, ng), ref, ng);
	}
	void *dt = dpoison(t, nt, 0);

	snprintf(name, sizeof name, "text_ids %s 11 x 4 from -3", DNAME[di]);
	k_text_ids(tref, L, -3, A);
	if (launched(name, kc_text_ids(ctx, t, dt, L, -3, A)))
		check_exact(name, ddownload(t, dt, nt), tref, nt);
	end_case();
}

static void test_patch_case(int di, int64_t B, int64_t C, int64_t F, int64_t H, int64_t W,
			    int64_t pt, int64_t ph, int64_t pw)
{
	enum kc_dtype t = DTYPES[di];
	size_t n = (size_t)(B * C * F * H * W);
	float *x = hrand(t, n), *ref = hmalloc(n * sizeof *ref), *back = hmalloc(n * sizeof *back);
	char name[200];
	void *dx = dupload(t, x, n, 1), *dp = dpoison(t, n, 0), *dy = dpoison(t, n, 1);

	snprintf(name, sizeof name, "patchify %s [%lld, %lld, %lld, %lld, %lld] patch (%lld, %lld, "
		 "%lld)", DNAME[di], (long long)B, (long long)C, (long long)F, (long long)H,
		 (long long)W, (long long)pt, (long long)ph, (long long)pw);
	k_patchify(x, ref, B, C, F, H, W, pt, ph, pw);
	if (launched(name, kc_patchify(ctx, t, dx, dp, B, C, F, H, W, pt, ph, pw)))
		check_exact(name, ddownload(t, dp, n), ref, n);
	/* unpatchify reads the same data as tokens [.., pt ph pw C] */
	char uname[210];
	snprintf(uname, sizeof uname, "un%s", name);
	k_unpatchify(x, back, B, C, F, H, W, pt, ph, pw);
	if (launched(uname, kc_unpatchify(ctx, t, dx, dy, B, C, F, H, W, pt, ph, pw)))
		check_exact(uname, ddownload(t, dy, n), back, n);
	end_case();
}

static void test_embed(void)
{
	static const int64_t flux[3] = {16, 56, 56}, odd[3] = {2, 10, 6};

	for (int di = 0; di < 3; di++) {
		test_timestep_case(di, 5, 256, true, 0, 1, 10000, 1000, false, false);
		test_timestep_case(di, 5, 256, true, 0, 1, 10000, 1000, true, false);
		test_timestep_case(di, 5, 256, true, 0, 1000, 10000, 1, false, false);
		test_timestep_case(di, 3, 33, false, 1, 1, 10000, 1, false, false);
		test_timestep_case(di, 1000, 10, true, 0.5, 2.5, 77, 3, false, false);
		/* float32 timesteps (an input's copy under narrow storage):
		 * Wan's (as bound), Flux's (rounded first), Qwen-Image 2.1's */
		test_timestep_case(di, 5, 256, true, 0, 1, 10000, 1, false, true);
		test_timestep_case(di, 5, 256, true, 0, 1, 10000, 1e-3, false, true);
		test_timestep_case(di, 5, 256, true, 0, 1, 10000, 1e-3, true, true);
		for (int f64 = 0; f64 < 2; f64++)
			for (int sine = 0; sine < 2; sine++) {
				test_rope_freqs_case(di, 37, 3, flux, sine, f64);
				test_rope_freqs_case(di, 4099, 3, odd, sine, f64);
			}
		for (int f64 = 0; f64 < 2; f64++) {
			test_rope_positions_case(di, true, f64);
			test_rope_positions_case(di, false, f64);
		}
		for (int sine = 0; sine < 2; sine++) {
			test_ltx_rope_case(di, 2048, sine);
			test_ltx_rope_case(di, 38, sine);
		}
		test_ltx2_rope(di);
		test_positions_case(di);
		test_patch_case(di, 2, 3, 6, 10, 9, 2, 5, 3);
		test_patch_case(di, 1, 16, 3, 30, 52, 1, 2, 2);
	}
	void *d = dmalloc(4096);
	int64_t bad_axes[2] = {16, 7};

	struct kc_positions from_ids = { KC_POS_IDS, false, 0, 0, 0, 0 };
	if (kc_rope_freqs(ctx, KC_F32, d, &from_ids, d, 1, 2, bad_axes, 10000, false, true) != 0)
		pass("rope_freqs refuses an odd rotary dimension");
	else
		fail("rope_freqs refuses an odd rotary dimension", "status 0");
	if (kc_patchify(ctx, KC_F32, d, d, 1, 1, 3, 4, 4, 2, 2, 2) != 0)
		pass("patchify refuses a patch that does not divide the frames");
	else
		fail("patchify refuses a patch that does not divide the frames", "status 0");
	end_case();
}

/* ---- refused arguments ------------------------------------------------------------------------------- */

static void test_refusals(void)
{
	void *d = dmalloc(4096);
	int64_t sh[1] = {4}, sh2[1] = {3};

	if (kc_rms_norm(ctx, KC_F32, d, d, 2, 10, 4, 1e-6f, NULL) != 0)
		pass("rms_norm refuses a group that does not divide n");
	else
		fail("rms_norm refuses a group that does not divide n", "status 0");
	if (kc_rope(ctx, KC_F32, d, 3, d, d, d, 3, 1, 1, 1, 3) != 0)
		pass("rope refuses an odd head dim");
	else
		fail("rope refuses an odd head dim", "status 0");
	if (kc_modulate(ctx, KC_F32, d, d, d, d, 1, 2, 8, 3) != 0)
		pass("modulate refuses s_stride other than 0 or H");
	else
		fail("modulate refuses s_stride other than 0 or H", "status 0");
	if (kc_binary(ctx, KC_F32, KC_ADD, d, sh2, d, sh, d, sh, 1) != 0)
		pass("binary refuses shapes that do not broadcast");
	else
		fail("binary refuses shapes that do not broadcast", "status 0");
	int st = kc_sync(ctx);

	if (st == 0)
		pass("refusals leave the stream clean");
	else
		fail("refusals leave the stream clean", "%s", kc_error_string(st));
	end_case();
}

int main(void)
{
	char err[256];
	int devices = kc_device_count(), st;

	gpu_util_init("test_cuda_kernels", 0x9e3779b97f4a7c15ull, fatal);
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (devices == 0) {
		printf("# SKIP no CUDA device\n");
		return 77;
	}
	st = kc_create(&ctx, 0, err, sizeof err);
	if (st) {
		printf("not ok 1 - kc_create: %s\n1..1\n# 0 passed, 1 failed\n", err);
		return 1;
	}
	negative_controls();
	test_context(devices);
	test_linear();
	test_norms();
	test_activations();
	test_linear_act();
	test_binary();
	test_modulate();
	test_copy2d();
	test_fill2d();
	test_rope();
	test_rope_half();
	test_index_rows();
	test_embed();
	test_refusals();
	kc_destroy(ctx);
	finish();
	return n_fail ? 1 : 0;
}
