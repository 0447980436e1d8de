/* test_cuda_attention.c — kc_attention and kc_lse_merge against the CPU
 * kernels (k_attention, k_lse_merge) on the same inputs.
 *
 * Inputs are uniform in (-1, 1), never 0, from a fixed-seed PRNG; for bf16
 * and f16 they are rounded to the storage dtype before the float reference
 * sees them, so the comparison measures only the kernel's own error (its
 * roundings of P and of the output). Sizes are not multiples of any tile,
 * so masks and tails are exercised, and layouts cover contiguous operands,
 * q/k/v inside one packed [B, S, 3*H*D] buffer, padded row strides, and
 * operands one element off 16-byte alignment (the generic path for bf16 and
 * f16). Device outputs are filled with 0xff bytes (NaN in every dtype)
 * before each launch, so an element the kernel never writes shows as NaN.
 *
 * Measures: out by normwise relative error ||got - ref||_2 / ||ref||_2 (a
 * sum of many rounded terms; an elementwise bound would be meaningless
 * where the reference is near 0); lse by absolute error (it is a logarithm:
 * an absolute error e is a relative error e of the softmax denominator).
 * Two negative controls perturb one input after the reference is taken and
 * must be detected.
 *
 * Key-padding masks ([B, Skv] in the storage dtype): about a quarter of the
 * keys masked at random, kept keys marked by 1, 0.5 or -2 (any nonzero
 * keeps a key), and batch 0's first 70 keys masked, so whole key tiles of
 * both kernels (64 and 32 keys) are empty before any live key; with
 * MASK_EMPTY the last batch has every key masked, whose rows must be exact
 * zeros with lse -inf. The masked ring: the keys in two blocks, each
 * attended with its part of the mask and merged by kc_lse_merge (blocks
 * whose rows are all masked give lse -inf to the merge), against
 * k_attention over all the keys. Controls: the mask ignored (NULL to the
 * device, the reference masked) must be detected, in both.
 *
 * bf16 and f16 cases run twice, once per implementation behind
 * kc_attention (DTPC_KC_ATTENTION=own, then =cudnn: cuDNN's fused attention
 * where it takes the shape, the own kernel where it declines, which it
 * notes on stderr); f32 has only the own kernel.
 *
 * TAP on stdout; exit 1 on any failure, 77 without a CUDA device. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/kernels.h"
#include "kernels/cuda/kernels_cuda.h"
#include "tests/gpu/gpu_util.h"

#define TOL_OUT_F32 1e-5
#define TOL_OUT_LOW 1e-2 /* bf16, f16 */
#define TOL_LSE_F32 1e-4
#define TOL_LSE_LOW 2e-2

static int n_tests, n_failed;

static void tap(int ok, const char *name, const char *detail)
{
	++n_tests;
	if (!ok)
		++n_failed;
	printf("%sok %d - %s%s%s\n", ok ? "" : "not ", n_tests, name, detail[0] ? " " : "",
	       detail);
	fflush(stdout);
}

/* One case's line: a plain case passes when ok (detail: its errors, or
 * why it failed); a negative control (perturbed) passes when the
 * comparison caught the perturbation and the control was valid. */
static void tap_case(const char *name, int ok, int perturbed, int valid, char *detail,
		     size_t len, double eo, double el)
{
	if (perturbed) {
		char d2[600];

		snprintf(d2, sizeof d2, "# %s", ok ? "NOT DETECTED: " : "detected: ");
		strncat(d2, detail + 2, sizeof d2 - strlen(d2) - 1);
		tap(!ok && valid, name, d2);
		return;
	}
	if (ok)
		snprintf(detail, len, "# rel err %.2e, lse abs err %.2e", eo, el);
	tap(ok, name, detail);
}

/* ---- host buffers in a storage dtype ---- */

/* n floats into dtype t (exact when they were rounded to t). */
static void *to_dtype(enum kc_dtype t, const float *x, size_t n)
{
	void *p = xmalloc(n * kc_dtype_size(t));

	to_storage(t, x, p, n);
	return p;
}

/* ---- device statuses: any failure ends the test with the reason ---- */

static void tap_fatal(const char *what, int st)
{
	printf("not ok %d - %s: %s\n", ++n_tests, what, kc_error_string(st));
	printf("# %d passed, %d failed\n", n_tests - n_failed - 1, n_failed + 1);
	exit(1);
}

/* ---- comparisons ---- */

/* Normwise relative error of got against ref; fails on any non-finite got
 * (NaN there means the element was never written). On failure `detail`
 * says which element and how; `coords` names the element at a flat index. */
static int compare_out(const float *got, const float *ref, size_t n, double tol, double *err,
		       void (*coords)(size_t, char *, size_t, const void *), const void *cx,
		       char *detail, size_t dl)
{
	double den;
	size_t wi, bad = normwise_error(got, ref, n, err, &wi, &den);
	char where[96];

	if (bad < n) {
		coords(bad, where, sizeof where, cx);
		snprintf(detail, dl, "# out%s = %g (unwritten or non-finite), expected %.6g", where,
			 (double)got[bad], (double)ref[bad]);
		*err = INFINITY;
		return 0;
	}
	coords(wi, where, sizeof where, cx);
	snprintf(detail, dl, "# rel err %.3g (tol %.0e); worst out%s = %.6g, expected %.6g",
		 *err, tol, where, (double)got[wi], (double)ref[wi]);
	return *err <= tol;
}

/* Absolute error of log-sum-exps; -inf (an empty row) must match exactly. */
static int compare_lse(const float *got, const float *ref, size_t n, double tol, double *err,
		       void (*coords)(size_t, char *, size_t, const void *), const void *cx,
		       char *detail, size_t dl)
{
	double worst = 0.0;
	char where[96];

	for (size_t i = 0; i < n; i++) {
		int both_empty = got[i] == -INFINITY && ref[i] == -INFINITY;
		double d = both_empty ? 0.0 : fabs((double)got[i] - (double)ref[i]);

		if (isnan(got[i]) || (!both_empty && !(d <= tol))) {
			coords(i, where, sizeof where, cx);
			snprintf(detail, dl, "# lse%s = %.7g, expected %.7g (tol %.0e)", where,
				 (double)got[i], (double)ref[i], tol);
			*err = isnan(d) ? INFINITY : d;
			return 0;
		}
		if (d > worst)
			worst = d;
	}
	*err = worst;
	detail[0] = 0;
	return 1;
}

/* ---- attention ---- */

enum layout { CONTIG, PACKED, PADDED, OFFSET };
static const char *layout_name[] = { "contiguous", "packed qkv", "padded strides",
				     "misaligned" };

struct attn_shape {
	int64_t B, Sq, Skv, H, D, Dv;
};

enum mask_kind { NO_MASK, MASK_RANDOM, MASK_EMPTY };
/* perturb: the negative controls */
enum { PERTURB_NONE, PERTURB_V, PERTURB_MASK_IGNORED };

/* A key-padding mask [B, Skv] (the header comment says which keys). */
static float *make_mask(enum mask_kind mk, int64_t B, int64_t Skv)
{
	static const float keep[3] = { 1.0f, 0.5f, -2.0f };
	float *m = xmalloc((size_t)(B * Skv) * sizeof *m);

	for (int64_t b = 0; b < B; b++)
		for (int64_t j = 0; j < Skv; j++) {
			int gone = rng_next() % 4 == 0 || (b == 0 && j < 70 && j < Skv - 1) ||
				   (mk == MASK_EMPTY && b == B - 1);

			m[b * Skv + j] = gone ? 0.0f : keep[rng_next() % 3];
		}
	return m;
}

/* Rows the reference left empty (lse -inf) must be exact zeros. */
static int empty_rows_zero(const float *got, const float *ref_lse, const struct attn_shape *a,
			   char *detail, size_t dl)
{
	for (int64_t b = 0; b < a->B; b++)
		for (int64_t h = 0; h < a->H; h++)
			for (int64_t s = 0; s < a->Sq; s++) {
				if (ref_lse[(b * a->H + h) * a->Sq + s] != -INFINITY)
					continue;
				const float *o = got + ((b * a->Sq + s) * a->H + h) * a->Dv;
				for (int64_t d = 0; d < a->Dv; d++)
					if (o[d] != 0.0f) {
						snprintf(detail, dl,
							 "# out[b=%lld,s=%lld,h=%lld,d=%lld] = %g in "
							 "a row with every key masked (want 0)",
							 (long long)b, (long long)s, (long long)h,
							 (long long)d, (double)o[d]);
						return 0;
					}
			}
	return 1;
}

static void out_coords(size_t i, char *s, size_t n, const void *cx)
{
	const struct attn_shape *a = cx;
	int64_t d = (int64_t)i % a->Dv, h = (int64_t)i / a->Dv % a->H;
	int64_t q = (int64_t)i / (a->Dv * a->H) % a->Sq, b = (int64_t)i / (a->Dv * a->H * a->Sq);

	snprintf(s, n, "[b=%lld,s=%lld,h=%lld,d=%lld]", (long long)b, (long long)q, (long long)h,
		 (long long)d);
}

static void lse_coords(size_t i, char *s, size_t n, const void *cx)
{
	const struct attn_shape *a = cx;
	int64_t q = (int64_t)i % a->Sq, h = (int64_t)i / a->Sq % a->H, b = (int64_t)i / (a->Sq * a->H);

	snprintf(s, n, "[b=%lld,h=%lld,s=%lld]", (long long)b, (long long)h, (long long)q);
}

/* One kc_attention case against k_attention, with a key-padding mask of
 * kind mk. perturb: a negative control, one value element changed after the
 * reference is taken, or the mask left out of the device's call; the case
 * passes when the comparison then fails. */
static void attn_case(enum kc_dtype t, int64_t B, int64_t Sq, int64_t Skv, int64_t H, int64_t D,
		      int64_t Dv, enum layout lay, int want_lse, enum mask_kind mk, int perturb)
{
	struct attn_shape shp = { B, Sq, Skv, H, D, Dv };
	size_t es = kc_dtype_size(t);
	/* element offset of q, k, v in their (one or three) host buffers */
	int64_t qs, ks, vs, qoff = 0, koff = 0, voff = 0;
	int64_t nq, nk, nv; /* buffer lengths in elements */

	if (lay == PACKED) {
		qs = ks = vs = H * D + H * D + H * Dv;
		koff = H * D;
		voff = 2 * H * D;
	} else if (lay == PADDED) {
		qs = H * D + 8;
		ks = H * D + 24;
		vs = H * Dv + 16;
	} else if (lay == OFFSET) {
		qs = H * D + 1;
		ks = H * D + 3;
		vs = H * Dv + 1;
		qoff = koff = voff = 1;
	} else {
		qs = ks = H * D;
		vs = H * Dv;
	}
	nq = qoff + B * Sq * qs;
	nk = koff + B * Skv * ks;
	nv = voff + B * Skv * vs;
	if (lay == PACKED)
		nk = nv = nq;

	float *qf = xmalloc((size_t)nq * sizeof *qf);
	float *kf = lay == PACKED ? qf : xmalloc((size_t)nk * sizeof *kf);
	float *vf = lay == PACKED ? qf : xmalloc((size_t)nv * sizeof *vf);
	for (int64_t i = 0; i < nq; i++)
		qf[i] = round_to(t, urand());
	if (lay != PACKED) {
		for (int64_t i = 0; i < nk; i++)
			kf[i] = round_to(t, urand());
		for (int64_t i = 0; i < nv; i++)
			vf[i] = round_to(t, urand());
	}

	float *mf = mk == NO_MASK ? NULL : make_mask(mk, B, Skv);
	size_t nout = (size_t)(B * Sq * H * Dv), nlse = (size_t)(B * H * Sq);
	float *ref = xmalloc(nout * sizeof *ref), *ref_lse = xmalloc(nlse * sizeof *ref_lse);
	void *ws = xmalloc(k_attention_workspace(Sq, Skv, D, Dv));
	k_attention(qf + qoff, qs, kf + koff, ks, vf + voff, vs, mf, ref, ref_lse, B, Sq, Skv, H, D,
		    Dv, ws);
	free(ws);
	if (perturb == PERTURB_V)
		vf[voff] = round_to(t, vf[voff] + 8.0f);

	/* device copies */
	void *hq = to_dtype(t, qf, (size_t)nq), *hk = NULL, *hv = NULL;
	char *dq = dev_alloc((size_t)nq * es), *dk = dq, *dv = dq;
	check(kc_upload(ctx, dq, hq, (size_t)nq * es), "kc_upload q");
	if (lay != PACKED) {
		hk = to_dtype(t, kf, (size_t)nk);
		hv = to_dtype(t, vf, (size_t)nv);
		dk = dev_alloc((size_t)nk * es);
		dv = dev_alloc((size_t)nv * es);
		check(kc_upload(ctx, dk, hk, (size_t)nk * es), "kc_upload k");
		check(kc_upload(ctx, dv, hv, (size_t)nv * es), "kc_upload v");
	}
	void *hm = NULL, *dm = NULL;
	if (mf) {
		hm = to_dtype(t, mf, (size_t)(B * Skv));
		dm = dev_alloc((size_t)(B * Skv) * es);
		check(kc_upload(ctx, dm, hm, (size_t)(B * Skv) * es), "kc_upload mask");
	}
	void *dout = dev_alloc(nout * es);
	float *dlse = dev_alloc(nlse * sizeof(float));
	size_t wsb = kc_attention_workspace(t, B, Sq, Skv, H, D, Dv);
	void *dws = wsb ? dev_alloc(wsb) : NULL;
	void *hout = xmalloc(nout * es);
	float *got = xmalloc(nout * sizeof *got), *got_lse = xmalloc(nlse * sizeof *got_lse);

	/* each implementation kc_attention has for the dtype (f32: its own) */
	for (int mi = 0; mi < (t == KC_F32 ? 1 : 2); mi++) {
		const char *mode = mi ? "cudnn" : "own";
		char name[256], detail[512] = "";

		setenv("DTPC_KC_ATTENTION", mode, 1);
		check(kc_memset(ctx, dout, 0xff, nout * es), "kc_memset out");
		check(kc_memset(ctx, dlse, 0xff, nlse * sizeof(float)), "kc_memset lse");
		snprintf(name, sizeof name,
			 "%sattention[%s] %s B=%lld Sq=%lld Skv=%lld H=%lld D=%lld Dv=%lld %s%s%s",
			 perturb == PERTURB_V ? "negative control: "
			 : perturb ? "negative control (mask ignored): " : "",
			 mode, dtype_name(t), (long long)B, (long long)Sq, (long long)Skv,
			 (long long)H, (long long)D, (long long)Dv, layout_name[lay],
			 want_lse ? "" : " lse=NULL",
			 mk == MASK_RANDOM ? " masked" : mk == MASK_EMPTY ? " masked, empty rows" : "");

		int st = kc_attention(ctx, t, dq + (size_t)qoff * es, qs, dk + (size_t)koff * es, ks,
				      dv + (size_t)voff * es, vs,
				      perturb == PERTURB_MASK_IGNORED ? NULL : dm, dout,
				      want_lse ? dlse : NULL, B, Sq, Skv, H, D, Dv, dws);
		if (st == 0)
			st = kc_sync(ctx);
		if (st) {
			snprintf(detail, sizeof detail, "# kc_attention: %s", kc_error_string(st));
			tap(0, name, detail);
			/* a kernel fault leaves the context unusable: stop here */
			printf("# %d passed, %d failed\n", n_tests - n_failed, n_failed);
			exit(1);
		}

		check(kc_download(ctx, hout, dout, nout * es), "kc_download out");
		check(kc_download(ctx, got_lse, dlse, nlse * sizeof(float)), "kc_download lse");
		from_storage(t, hout, got, nout);

		double tol_o = t == KC_F32 ? TOL_OUT_F32 : TOL_OUT_LOW;
		double tol_l = t == KC_F32 ? TOL_LSE_F32 : TOL_LSE_LOW;
		double eo, el = 0.0;
		char dl[256] = "";
		int ok = compare_out(got, ref, nout, tol_o, &eo, out_coords, &shp, detail,
				     sizeof detail);
		if (ok && mf)
			ok = empty_rows_zero(got, ref_lse, &shp, detail, sizeof detail);
		if (want_lse) {
			int okl = compare_lse(got_lse, ref_lse, nlse, tol_l, &el, lse_coords, &shp,
					      dl, sizeof dl);
			if (!okl) {
				size_t len = strlen(detail);
				snprintf(detail + len, sizeof detail - len, "; %s", dl);
			}
			ok = ok && okl;
		} else {
			/* the untouched lse buffer must still be all 0xff bytes */
			for (size_t i = 0; i < nlse && ok; i++) {
				uint32_t u;

				memcpy(&u, &got_lse[i], 4);
				if (u != 0xffffffffu) {
					snprintf(detail, sizeof detail,
						 "# lse=NULL but lse[%zu] was written (%g)", i,
						 (double)got_lse[i]);
					ok = 0;
				}
			}
		}
		tap_case(name, ok, perturb, 1, detail, sizeof detail, eo, el);
	}
	unsetenv("DTPC_KC_ATTENTION");

	free(hout);
	free(got);
	free(got_lse);
	free(ref);
	free(ref_lse);
	free(hq);
	free(hk);
	free(hv);
	free(hm);
	free(mf);
	kc_free(ctx, dm);
	if (lay != PACKED) {
		free(kf);
		free(vf);
		kc_free(ctx, dk);
		kc_free(ctx, dv);
	}
	free(qf);
	kc_free(ctx, dq);
	kc_free(ctx, dout);
	kc_free(ctx, dlse);
	kc_free(ctx, dws);
}

static void attention_tests(enum kc_dtype t)
{
	static const struct {
		int64_t B, H, Sq, Skv;
		enum layout lay;
	} fast[] = {
		{ 1, 1, 1, 1, CONTIG },	     { 1, 3, 3, 5, CONTIG },
		{ 2, 1, 67, 130, CONTIG },   { 1, 3, 129, 513, CONTIG },
		{ 2, 3, 1000, 2049, CONTIG }, { 1, 1, 1, 2049, CONTIG },
		{ 2, 3, 1000, 1, CONTIG },   { 1, 3, 129, 5, CONTIG },
		{ 2, 1, 3, 513, CONTIG },    { 2, 3, 130, 130, PACKED },
		{ 1, 3, 1000, 1000, PACKED }, { 2, 3, 67, 513, PADDED },
		{ 1, 3, 67, 130, OFFSET },   { 2, 12, 1000, 513, CONTIG },
		{ 1, 1, 64, 64, CONTIG },    { 1, 2, 128, 192, CONTIG },
	};
	static const int64_t dims[] = { 64, 128 };

	for (size_t di = 0; di < 2; di++)
		for (size_t i = 0; i < sizeof fast / sizeof fast[0]; i++)
			attn_case(t, fast[i].B, fast[i].Sq, fast[i].Skv, fast[i].H, dims[di],
				  dims[di], fast[i].lay, 1, NO_MASK, 0);

	/* generic sizes */
	attn_case(t, 1, 1, 1, 1, 16, 24, CONTIG, 1, NO_MASK, 0);
	attn_case(t, 2, 3, 5, 3, 16, 24, CONTIG, 1, NO_MASK, 0);
	attn_case(t, 1, 67, 130, 3, 16, 24, CONTIG, 1, NO_MASK, 0);
	attn_case(t, 2, 129, 513, 1, 16, 24, PADDED, 1, NO_MASK, 0);
	attn_case(t, 1, 1000, 2049, 3, 16, 24, CONTIG, 1, NO_MASK, 0);
	attn_case(t, 1, 17, 17, 2, 16, 24, OFFSET, 1, NO_MASK, 0);
	attn_case(t, 1, 67, 130, 3, 72, 72, CONTIG, 1, NO_MASK, 0);
	attn_case(t, 2, 1000, 513, 1, 72, 72, CONTIG, 1, NO_MASK, 0);
	attn_case(t, 1, 129, 129, 3, 72, 72, PACKED, 1, NO_MASK, 0);
	attn_case(t, 2, 3, 17, 2, 72, 72, OFFSET, 1, NO_MASK, 0);
	attn_case(t, 1, 129, 513, 3, 128, 64, CONTIG, 1, NO_MASK, 0);
	attn_case(t, 1, 67, 130, 2, 256, 256, CONTIG, 1, NO_MASK, 0);
	attn_case(t, 1, 67, 130, 3, 64, 64, CONTIG, 0, NO_MASK, 0);
	attn_case(t, 1, 67, 130, 3, 16, 24, CONTIG, 0, NO_MASK, 0);

	/* key-padding masks: bf16 / f16 at D = Dv = 64, 128 take the fast
	 * kernel (aligned layouts), everything else the generic one */
	static const struct {
		int64_t B, H, Sq, Skv, D, Dv;
		enum layout lay;
		enum mask_kind mk;
	} masked[] = {
		{ 2, 3, 67, 130, 128, 128, CONTIG, MASK_RANDOM },
		{ 3, 2, 129, 513, 64, 64, CONTIG, MASK_EMPTY },
		{ 3, 3, 1000, 75, 128, 128, CONTIG, MASK_EMPTY },
		{ 1, 1, 1, 1, 128, 128, CONTIG, MASK_RANDOM },
		{ 2, 3, 130, 130, 128, 128, PACKED, MASK_RANDOM },
		{ 2, 3, 67, 513, 64, 64, PADDED, MASK_EMPTY },
		{ 2, 3, 67, 130, 64, 64, OFFSET, MASK_EMPTY },
		{ 2, 4, 20, 20, 128, 128, CONTIG, MASK_RANDOM }, /* Qwen-Image's fixture */
		{ 3, 3, 67, 130, 16, 24, CONTIG, MASK_EMPTY },
		{ 2, 1, 1000, 513, 16, 24, CONTIG, MASK_RANDOM },
		{ 3, 2, 129, 513, 72, 72, PADDED, MASK_RANDOM },
		{ 2, 2, 17, 33, 72, 72, OFFSET, MASK_EMPTY },
		{ 2, 1, 17, 75, 256, 256, CONTIG, MASK_EMPTY },
	};
	for (size_t i = 0; i < sizeof masked / sizeof masked[0]; i++)
		attn_case(t, masked[i].B, masked[i].Sq, masked[i].Skv, masked[i].H, masked[i].D,
			  masked[i].Dv, masked[i].lay, 1, masked[i].mk, 0);
	attn_case(t, 3, 67, 130, 3, 128, 128, CONTIG, 0, MASK_EMPTY, 0);
	attn_case(t, 3, 67, 130, 3, 16, 24, CONTIG, 0, MASK_EMPTY, 0);
}

/* Rows [j0, j0 + n) of each batch of x [B, S, w] as a [B, n, w] array. */
static float *key_block(const float *x, int64_t B, int64_t S, int64_t w, int64_t j0, int64_t n)
{
	float *y = xmalloc((size_t)(B * n * w) * sizeof *y);

	for (int64_t b = 0; b < B; b++)
		memcpy(y + b * n * w, x + (b * S + j0) * w, (size_t)(n * w) * sizeof *y);
	return y;
}

/* The masked ring (the header comment): keys [0, S1) and [S1, Skv) with
 * S1 = min(Skv / 2, 70), so batch 0's first block is all masked; batch 1's
 * second block is masked here too, and with MASK_EMPTY (B >= 3) the last
 * batch is masked in both: the merge meets -inf on either side and on
 * both. perturb PERTURB_MASK_IGNORED: both blocks attended unmasked. */
static void ring_case(enum kc_dtype t, int64_t B, int64_t Sq, int64_t Skv, int64_t H, int64_t D,
		      int64_t Dv, int perturb)
{
	struct attn_shape shp = { B, Sq, Skv, H, D, Dv };
	size_t es = kc_dtype_size(t);
	int64_t S1 = Skv / 2 < 70 ? Skv / 2 : 70;
	size_t nq = (size_t)(B * Sq * H * D), nk = (size_t)(B * Skv * H * D);
	size_t nv = (size_t)(B * Skv * H * Dv);
	float *qf = xmalloc(nq * sizeof *qf), *kf = xmalloc(nk * sizeof *kf);
	float *vf = xmalloc(nv * sizeof *vf), *mf = make_mask(MASK_EMPTY, B, Skv);

	for (size_t i = 0; i < nq; i++)
		qf[i] = round_to(t, urand());
	for (size_t i = 0; i < nk; i++)
		kf[i] = round_to(t, urand());
	for (size_t i = 0; i < nv; i++)
		vf[i] = round_to(t, urand());
	for (int64_t j = S1; j < Skv; j++)
		mf[Skv + j] = 0.0f;

	size_t nout = (size_t)(B * Sq * H * Dv), nlse = (size_t)(B * H * Sq);
	float *ref = xmalloc(nout * sizeof *ref), *ref_lse = xmalloc(nlse * sizeof *ref_lse);
	void *ws = xmalloc(k_attention_workspace(Sq, Skv, D, Dv));
	k_attention(qf, H * D, kf, H * D, vf, H * Dv, mf, ref, ref_lse, B, Sq, Skv, H, D, Dv, ws);
	free(ws);

	void *hq = to_dtype(t, qf, nq), *dq = dev_alloc(nq * es);
	check(kc_upload(ctx, dq, hq, nq * es), "kc_upload q");
	void *dout[2], *hblk[6];
	float *dlse[2];
	char *dblk[3][2];
	for (int i = 0; i < 2; i++) {
		int64_t j0 = i ? S1 : 0, n = i ? Skv - S1 : S1;
		float *kb = key_block(kf, B, Skv, H * D, j0, n), *vb = key_block(vf, B, Skv, H * Dv, j0, n);
		float *mb = key_block(mf, B, Skv, 1, j0, n);
		const float *hf[3] = { kb, vb, mb };
		size_t len[3] = { (size_t)(B * n * H * D), (size_t)(B * n * H * Dv), (size_t)(B * n) };

		for (int a = 0; a < 3; a++) {
			hblk[3 * i + a] = to_dtype(t, hf[a], len[a]);
			dblk[a][i] = dev_alloc(len[a] * es);
			check(kc_upload(ctx, dblk[a][i], hblk[3 * i + a], len[a] * es), "kc_upload block");
		}
		free(kb);
		free(vb);
		free(mb);
		dout[i] = dev_alloc(nout * es);
		dlse[i] = dev_alloc(nlse * sizeof(float));
		check(kc_memset(ctx, dout[i], 0xff, nout * es), "kc_memset out");
		check(kc_memset(ctx, dlse[i], 0xff, nlse * sizeof(float)), "kc_memset lse");
	}

	char name[256], detail[512] = "", dl[256] = "";
	snprintf(name, sizeof name,
		 "%smasked ring (2 blocks, lse_merge) %s B=%lld Sq=%lld Skv=%lld (%lld + %lld) H=%lld "
		 "D=%lld Dv=%lld", perturb ? "negative control (mask ignored): " : "", dtype_name(t),
		 (long long)B, (long long)Sq, (long long)Skv, (long long)S1, (long long)(Skv - S1),
		 (long long)H, (long long)D, (long long)Dv);
	int st = 0;
	for (int i = 0; i < 2 && !st; i++) {
		int64_t n = i ? Skv - S1 : S1;
		st = kc_attention(ctx, t, dq, H * D, dblk[0][i], H * D, dblk[1][i], H * Dv,
				  perturb ? NULL : dblk[2][i], dout[i], dlse[i], B, Sq, n, H, D, Dv,
				  NULL);
	}
	if (!st)
		st = kc_lse_merge(ctx, t, dout[0], dlse[0], dout[1], dlse[1], B, Sq, H, Dv);
	if (!st)
		st = kc_sync(ctx);
	if (st) {
		snprintf(detail, sizeof detail, "# kc_attention / kc_lse_merge: %s",
			 kc_error_string(st));
		tap(0, name, detail);
		printf("# %d passed, %d failed\n", n_tests - n_failed, n_failed);
		exit(1);
	}

	void *hout = xmalloc(nout * es);
	float *got = xmalloc(nout * sizeof *got), *got_lse = xmalloc(nlse * sizeof *got_lse);
	check(kc_download(ctx, hout, dout[0], nout * es), "kc_download out");
	check(kc_download(ctx, got_lse, dlse[0], nlse * sizeof(float)), "kc_download lse");
	from_storage(t, hout, got, nout);

	double eo, el;
	int ok = compare_out(got, ref, nout, t == KC_F32 ? TOL_OUT_F32 : TOL_OUT_LOW, &eo,
			     out_coords, &shp, detail, sizeof detail);
	if (ok)
		ok = empty_rows_zero(got, ref_lse, &shp, detail, sizeof detail);
	int okl = compare_lse(got_lse, ref_lse, nlse, t == KC_F32 ? TOL_LSE_F32 : TOL_LSE_LOW, &el,
			      lse_coords, &shp, dl, sizeof dl);
	if (!okl) {
		size_t len = strlen(detail);
		snprintf(detail + len, sizeof detail - len, "; %s", dl);
	}
	ok = ok && okl;
	tap_case(name, ok, perturb, 1, detail, sizeof detail, eo, el);

	free(hout);
	free(got);
	free(got_lse);
	free(ref);
	free(ref_lse);
	free(hq);
	free(qf);
	free(kf);
	free(vf);
	free(mf);
	kc_free(ctx, dq);
	for (int i = 0; i < 2; i++) {
		for (int a = 0; a < 3; a++) {
			free(hblk[3 * i + a]);
			kc_free(ctx, dblk[a][i]);
		}
		kc_free(ctx, dout[i]);
		kc_free(ctx, dlse[i]);
	}
}

/* ---- the ring merge ---- */

struct merge_shape {
	int64_t B, Sq, H, Dv;
};

static void mout_coords(size_t i, char *s, size_t n, const void *cx)
{
	const struct merge_shape *m = cx;
	struct attn_shape a = { m->B, m->Sq, 1, m->H, 1, m->Dv };

	out_coords(i, s, n, &a);
}

static void mlse_coords(size_t i, char *s, size_t n, const void *cx)
{
	const struct merge_shape *m = cx;
	struct attn_shape a = { m->B, m->Sq, 1, m->H, 1, m->Dv };

	lse_coords(i, s, n, &a);
}

/* One kc_lse_merge case against k_lse_merge. About one row in seven of
 * each operand is empty (lse -inf), with NaN in its out to catch a merge
 * that reads it; rows empty on both sides keep finite accumulator values,
 * which the merge must leave as they are. offset: out and out_blk one
 * element off 16-byte alignment (the scalar path). */
static void merge_case(enum kc_dtype t, int64_t B, int64_t Sq, int64_t H, int64_t Dv, int offset,
		       int perturb)
{
	struct merge_shape shp = { B, Sq, H, Dv };
	size_t es = kc_dtype_size(t), nrow = (size_t)(B * Sq * H), n = nrow * (size_t)Dv;
	float *oa = xmalloc(n * sizeof *oa), *ob = xmalloc(n * sizeof *ob);
	float *la = xmalloc(nrow * sizeof *la), *lb = xmalloc(nrow * sizeof *lb);
	int64_t prow = -1; /* a row with both sides present, for the control */

	for (int64_t b = 0; b < B; b++)
		for (int64_t s = 0; s < Sq; s++)
			for (int64_t h = 0; h < H; h++) {
				size_t li = (size_t)((b * H + h) * Sq + s);
				size_t oi = (size_t)(((b * Sq + s) * H + h) * Dv);
				int ea = rng_next() % 7 == 0, eb = rng_next() % 7 == 0;

				la[li] = ea ? -INFINITY : 4.0f * urand();
				lb[li] = eb ? -INFINITY : 4.0f * urand();
				for (int64_t d = 0; d < Dv; d++) {
					oa[oi + d] = ea && !eb ? NAN : round_to(t, urand());
					ob[oi + d] = eb ? NAN : round_to(t, urand());
				}
				if (!ea && !eb && prow < 0)
					prow = (int64_t)oi;
			}

	void *ha = to_dtype(t, oa, n), *hb = to_dtype(t, ob, n);
	float *ref = xmalloc(n * sizeof *ref), *ref_lse = xmalloc(nrow * sizeof *ref_lse);
	memcpy(ref, oa, n * sizeof *ref);
	memcpy(ref_lse, la, nrow * sizeof *ref_lse);
	k_lse_merge(ref, ref_lse, ob, lb, B, Sq, H, Dv);
	if (perturb && prow >= 0) {
		ob[prow] = round_to(t, ob[prow] + 8.0f);
		free(hb);
		hb = to_dtype(t, ob, n);
	}

	size_t off = offset ? es : 0;
	char *da = dev_alloc(n * es + off), *db = dev_alloc(n * es + off);
	float *dla = dev_alloc(nrow * sizeof(float)), *dlb = dev_alloc(nrow * sizeof(float));
	check(kc_upload(ctx, da + off, ha, n * es), "kc_upload out");
	check(kc_upload(ctx, db + off, hb, n * es), "kc_upload out_blk");
	check(kc_upload(ctx, dla, la, nrow * sizeof(float)), "kc_upload lse");
	check(kc_upload(ctx, dlb, lb, nrow * sizeof(float)), "kc_upload lse_blk");

	char name[256], detail[512] = "", dl[256] = "";
	snprintf(name, sizeof name, "%slse_merge %s B=%lld Sq=%lld H=%lld Dv=%lld%s",
		 perturb ? "negative control: " : "", dtype_name(t), (long long)B, (long long)Sq,
		 (long long)H, (long long)Dv, offset ? " misaligned" : "");
	int st = kc_lse_merge(ctx, t, da + off, dla, db + off, dlb, B, Sq, H, Dv);
	if (st == 0)
		st = kc_sync(ctx);
	if (st) {
		snprintf(detail, sizeof detail, "# kc_lse_merge: %s", kc_error_string(st));
		tap(0, name, detail);
		printf("# %d passed, %d failed\n", n_tests - n_failed, n_failed);
		exit(1);
	}

	void *hout = xmalloc(n * es);
	float *got = xmalloc(n * sizeof *got), *got_lse = xmalloc(nrow * sizeof *got_lse);
	check(kc_download(ctx, hout, da + off, n * es), "kc_download out");
	check(kc_download(ctx, got_lse, dla, nrow * sizeof(float)), "kc_download lse");
	from_storage(t, hout, got, n);

	double tol_o = t == KC_F32 ? TOL_OUT_F32 : TOL_OUT_LOW;
	double tol_l = t == KC_F32 ? TOL_LSE_F32 : TOL_LSE_LOW;
	double eo, el;
	int ok = compare_out(got, ref, n, tol_o, &eo, mout_coords, &shp, detail, sizeof detail);
	int okl = compare_lse(got_lse, ref_lse, nrow, tol_l, &el, mlse_coords, &shp, dl, sizeof dl);
	if (!okl) {
		size_t len = strlen(detail);
		snprintf(detail + len, sizeof detail - len, "; %s", dl);
	}
	ok = ok && okl;
	tap_case(name, ok, perturb, prow >= 0, detail, sizeof detail, eo, el);

	free(hout);
	free(got);
	free(got_lse);
	free(ref);
	free(ref_lse);
	free(ha);
	free(hb);
	free(oa);
	free(ob);
	free(la);
	free(lb);
	kc_free(ctx, da);
	kc_free(ctx, db);
	kc_free(ctx, dla);
	kc_free(ctx, dlb);
}

static void merge_tests(enum kc_dtype t)
{
	merge_case(t, 1, 1, 1, 1, 0, 0);
	merge_case(t, 2, 17, 3, 24, 0, 0);
	merge_case(t, 1, 5, 2, 7, 0, 0);
	merge_case(t, 2, 67, 3, 72, 0, 0);
	merge_case(t, 2, 130, 3, 13, 0, 0);
	merge_case(t, 1, 3, 2, 64, 1, 0);
	merge_case(t, 2, 67, 3, 128, 1, 0);
	merge_case(t, 1, 4096, 24, 128, 0, 0);
	merge_case(t, 1, 1000, 3, 256, 0, 0);
}

int main(void)
{
	char err[256];
	static const enum kc_dtype types[] = { KC_F32, KC_BF16, KC_F16 };

	gpu_util_init("test_cuda_attention", 0x9d2c5680a3b1e4f7ull, tap_fatal);
	if (kc_device_count() == 0) {
		printf("# SKIP no CUDA device\n");
		return 77;
	}
	check(kc_create(&ctx, 0, err, sizeof err), err);

	/* the comparisons must notice a single wrong input */
	attn_case(KC_F32, 1, 3, 5, 1, 64, 64, CONTIG, 1, NO_MASK, PERTURB_V);
	attn_case(KC_BF16, 1, 67, 130, 3, 128, 128, CONTIG, 1, NO_MASK, PERTURB_V);
	/* an ignored mask, on each kernel (fast bf16 D = 128, generic f32 and
	 * f16 at D = 72), and in the ring */
	attn_case(KC_BF16, 2, 67, 130, 3, 128, 128, CONTIG, 1, MASK_RANDOM, PERTURB_MASK_IGNORED);
	attn_case(KC_F32, 2, 17, 75, 2, 72, 72, CONTIG, 1, MASK_RANDOM, PERTURB_MASK_IGNORED);
	attn_case(KC_F16, 3, 17, 75, 2, 72, 72, CONTIG, 1, MASK_EMPTY, PERTURB_MASK_IGNORED);
	ring_case(KC_F32, 3, 33, 151, 2, 16, 24, PERTURB_MASK_IGNORED);
	merge_case(KC_F32, 1, 5, 2, 64, 0, 1);

	for (size_t i = 0; i < 3; i++) {
		attention_tests(types[i]);
		merge_tests(types[i]);
		ring_case(types[i], 3, 67, 151, 2, 128, 128, 0);
		ring_case(types[i], 3, 33, 151, 2, 16, 24, 0);
		ring_case(types[i], 3, 20, 11, 4, 64, 64, 0);
	}
	kc_destroy(ctx);
	printf("1..%d\n", n_tests);
	printf("# %d passed, %d failed\n", n_tests - n_failed, n_failed);
	return n_failed ? 1 : 0;
}
