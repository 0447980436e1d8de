/* linear.c — the Linear layer: float32 on register tiles of our own where
 * the CPU has AVX-512, else on the BLAS; bf16 and f16 below (see kernels.h). */
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/x86.h"

#include <assert.h>
#include <cblas.h>
#include <limits.h>
#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define HAVE_F32_TILES 1
#define AVX512 __attribute__((target("avx512f")))

/* ---- float32 on AVX-512 ---------------------------------------------------------- *
 * On the Flux layers' shapes a Sapphire Rapids core (FMA peak 210 GFLOP/s)
 * runs these tiles, w packed per call, at OpenBLAS 0.3.21's rate, 150-157
 * GFLOP/s, and a mid-size Flux step 6% faster than through OpenBLAS, whose
 * bias is a pass of its own (docs/performance.md). A tile is F32_MR rows x
 * F32_NR columns of y with its 24 sums in registers: per k, 4 loads of the
 * packed w and 6 broadcasts of x (read in place from its rows) feed 24
 * FMAs. w is packed per F32_KC k: panel[l][c] = w[j + c][l0 + l], zeros
 * past the columns, 128 KiB that stay in L2 while the task's rows pass over
 * them; blocks of 128 k (a panel in L1) ran 20% slower, resuming y four
 * times as often and x's rows read in shorter runs. With a workspace
 * (k_linear_workspace) a task packs F32_PANELS panels at once and runs
 * each tile of x's rows over all of them: the 6 x 512 floats of x stay in
 * L1 for four panels instead of coming from L3 for each, 6-10% faster on
 * the Flux layers (docs/performance.md); without one it packs a single
 * panel on its stack (kernels allocate nothing). Each sum runs over k in
 * order, one FMA a term, resumed from y between k-blocks, and the bias is
 * added after the last: every element of y is the same whatever the block,
 * the panels packed at a time, the split over threads or the tile it falls
 * in (a few rows, f32_few, too). */
#define F32_MR 6
#define F32_NR 64
#define F32_KC 512
#define F32_PANELS 4
#define F32_FEW 4 /* rows that take f32_few instead of tiles */
#define F32_PANEL_FLOATS (F32_KC * F32_NR)

/* panel[l][c] = w[j + c][l0 + l] for l < kc, c < nc (w's rows k apart),
 * zero for c in [nc, F32_NR): whole 16 x 16 blocks through k_transpose16,
 * the edges one float at a time. */
AVX512 static void f32_pack(const float *w, int64_t k, int64_t j, int64_t nc, int64_t l0,
			    int64_t kc, float *panel)
{
	int64_t c0 = 0, lf = kc / 16 * 16;

	for (; c0 + 16 <= nc; c0 += 16) {
		const float *wc = w + (j + c0) * k + l0;

		for (int64_t l = 0; l < lf; l += 16) {
			__m512 r[16];

			for (int i = 0; i < 16; i++)
				r[i] = _mm512_loadu_ps(wc + i * k + l);
			k_transpose16(r);
			for (int i = 0; i < 16; i++)
				_mm512_store_ps(panel + (l + i) * F32_NR + c0, r[i]);
		}
		for (int64_t l = lf; l < kc; l++)
			for (int i = 0; i < 16; i++)
				panel[l * F32_NR + c0 + i] = wc[i * k + l];
	}
	for (int64_t l = 0; l < kc; l++)
		for (int64_t c = c0; c < F32_NR; c++)
			panel[l * F32_NR + c] = c < nc ? w[(j + c) * k + l0 + l] : 0.0f;
}

/* Rows y[r n + (0 .. nc)] (r < mr) += the products of x's rows (k apart)
 * with the panel's kc values: from zero when first, else resumed from y;
 * plus bias[0 .. nc) when there is one, after the sum (last k-block only).
 * mr is a constant at every call, so the loops unroll and the sums stay in
 * registers. */
AVX512 __attribute__((always_inline)) static inline void
f32_tile(int mr, const float *x, int64_t k, int64_t kc, const float *panel, const float *bias,
	 float *y, int64_t n, int64_t nc, bool first)
{
	__m512 acc[F32_MR][4];
	__mmask16 mc[4];

#pragma GCC unroll 4
	for (int c = 0; c < 4; c++) {
		int64_t left = nc - 16 * c;

		mc[c] = left >= 16 ? (__mmask16)0xffff : left <= 0 ? 0 : (__mmask16)((1u << left) - 1);
	}
#pragma GCC unroll 6
	for (int r = 0; r < mr; r++)
#pragma GCC unroll 4
		for (int c = 0; c < 4; c++)
			acc[r][c] = first ? _mm512_setzero_ps()
					  : _mm512_maskz_loadu_ps(mc[c], y + r * n + 16 * c);
	for (int64_t l = 0; l < kc; l++) {
		const float *bq = panel + l * F32_NR;
		__m512 b0 = _mm512_load_ps(bq), b1 = _mm512_load_ps(bq + 16);
		__m512 b2 = _mm512_load_ps(bq + 32), b3 = _mm512_load_ps(bq + 48);

#pragma GCC unroll 6
		for (int r = 0; r < mr; r++) {
			__m512 a = _mm512_set1_ps(x[r * k + l]);

			acc[r][0] = _mm512_fmadd_ps(a, b0, acc[r][0]);
			acc[r][1] = _mm512_fmadd_ps(a, b1, acc[r][1]);
			acc[r][2] = _mm512_fmadd_ps(a, b2, acc[r][2]);
			acc[r][3] = _mm512_fmadd_ps(a, b3, acc[r][3]);
		}
	}
#pragma GCC unroll 4
	for (int c = 0; c < 4; c++) {
		__m512 bv = bias ? _mm512_maskz_loadu_ps(mc[c], bias + 16 * c) : _mm512_setzero_ps();

#pragma GCC unroll 6
		for (int r = 0; r < mr; r++)
			/* no bias, no add: -0 + 0 would be +0 */
			_mm512_mask_storeu_ps(y + r * n + 16 * c, mc[c],
					      bias ? _mm512_add_ps(acc[r][c], bv) : acc[r][c]);
	}
}

AVX512 static void f32_tile_rows(int mr, const float *x, int64_t k, int64_t kc,
				 const float *panel, const float *bias, float *y, int64_t n,
				 int64_t nc, bool first)
{
	switch (mr) {
	case 1: f32_tile(1, x, k, kc, panel, bias, y, n, nc, first); break;
	case 2: f32_tile(2, x, k, kc, panel, bias, y, n, nc, first); break;
	case 3: f32_tile(3, x, k, kc, panel, bias, y, n, nc, first); break;
	case 4: f32_tile(4, x, k, kc, panel, bias, y, n, nc, first); break;
	case 5: f32_tile(5, x, k, kc, panel, bias, y, n, nc, first); break;
	default: f32_tile(F32_MR, x, k, kc, panel, bias, y, n, nc, first); break;
	}
}

/* y's rows [i0, i0 + mm) (mm <= F32_FEW) x columns [j0, j0 + nn) without a
 * panel: w's rows 16 at a time, transposed in registers as they are read,
 * against x's rows broadcast. A row or two (the modulation layers' one row
 * of temb) does too little with a packed panel to pay for writing it: w is
 * read once either way, and this way at the memory's rate (6.3 MB of a
 * Flux norm1.linear in 0.41 instead of 0.54 ms warm, and 0.5 instead of
 * 1.1 cold). The same sums in the same order as the tiles'. */
AVX512 __attribute__((always_inline)) static inline void
f32_few(int mm, const float *x, const float *w, const float *b, float *y, int64_t i0,
	int64_t j0, int64_t nn, int64_t k, int64_t n)
{
	for (int64_t j = j0; j < j0 + nn; j += 16) {
		int nc = j0 + nn - j < 16 ? (int)(j0 + nn - j) : 16;
		__mmask16 mc = (__mmask16)((1u << nc) - 1);
		__m512 acc[F32_FEW];
		int64_t l = 0;

#pragma GCC unroll 4
		for (int i = 0; i < mm; i++)
			acc[i] = _mm512_setzero_ps();
		for (; l + 16 <= k; l += 16) {
			__m512 r[16];

#pragma GCC unroll 16
			for (int c = 0; c < 16; c++)
				r[c] = c < nc ? _mm512_loadu_ps(w + (j + c) * k + l) : _mm512_setzero_ps();
			k_transpose16(r);
#pragma GCC unroll 16
			for (int c = 0; c < 16; c++)
#pragma GCC unroll 4
				for (int i = 0; i < mm; i++)
					acc[i] = _mm512_fmadd_ps(_mm512_set1_ps(x[(i0 + i) * k + l + c]),
								 r[c], acc[i]);
		}
		for (; l < k; l++) {
			float col[16];

			for (int c = 0; c < 16; c++)
				col[c] = c < nc ? w[(j + c) * k + l] : 0.0f;
			for (int i = 0; i < mm; i++)
				acc[i] = _mm512_fmadd_ps(_mm512_set1_ps(x[(i0 + i) * k + l]),
							 _mm512_loadu_ps(col), acc[i]);
		}
		__m512 bv = b ? _mm512_maskz_loadu_ps(mc, b + j) : _mm512_setzero_ps();

		for (int i = 0; i < mm; i++)
			_mm512_mask_storeu_ps(y + (i0 + i) * n + j, mc,
					      b ? _mm512_add_ps(acc[i], bv) : acc[i]);
	}
}

AVX512 static void f32_few_rows(int mm, const float *x, const float *w, const float *b, float *y,
				int64_t i0, int64_t j0, int64_t nn, int64_t k, int64_t n)
{
	switch (mm) {
	case 1: f32_few(1, x, w, b, y, i0, j0, nn, k, n); break;
	case 2: f32_few(2, x, w, b, y, i0, j0, nn, k, n); break;
	case 3: f32_few(3, x, w, b, y, i0, j0, nn, k, n); break;
	default: f32_few(F32_FEW, x, w, b, y, i0, j0, nn, k, n); break;
	}
}

/* Columns of the panel at column j of the block [j0, j0 + nn). */
static int64_t panel_cols(int64_t j0, int64_t nn, int64_t j)
{
	return j0 + nn - j < F32_NR ? j0 + nn - j : F32_NR;
}

/* y's rows [i0, i0 + mm) x columns [j0, j0 + nn), F32_PANELS panels at a
 * time in panels (F32_PANELS * F32_PANEL_FLOATS floats, 64-byte aligned),
 * or one on the stack when panels is NULL; k-block by k-block, each tile of
 * rows over every packed panel; the activation (if any) on each tile as its
 * last k-block lands, while the tile is in L1: an element's value is the
 * same as from a pass over y after the products, one read of y from
 * memory fewer. */
AVX512 static void f32_block(const float *x, const float *w, const float *b, float *y,
			     int64_t i0, int64_t mm, int64_t j0, int64_t nn, int64_t k, int64_t n,
			     const enum k_act *act, float *panels)
{
	float own[F32_PANEL_FLOATS] __attribute__((aligned(64)));
	int group = panels ? F32_PANELS : 1;

	if (mm <= F32_FEW) {
		f32_few_rows((int)mm, x, w, b, y, i0, j0, nn, k, n);
		if (act)
			k_activation_rows(*act, y + i0 * n + j0, n, mm, nn);
		return;
	}
	if (!panels)
		panels = own;
	for (int64_t jg = j0; jg < j0 + nn; jg += group * F32_NR) {
		int np = (int)((j0 + nn - jg + F32_NR - 1) / F32_NR);

		np = np < group ? np : group;
		for (int64_t l0 = 0; l0 < k; l0 += F32_KC) {
			int64_t kc = k - l0 < F32_KC ? k - l0 : F32_KC;
			bool last = l0 + kc == k;

			for (int p = 0; p < np; p++) {
				int64_t j = jg + p * F32_NR;

				f32_pack(w, k, j, panel_cols(j0, nn, j), l0, kc,
					 panels + p * F32_PANEL_FLOATS);
			}
			for (int64_t i = i0; i < i0 + mm; i += F32_MR) {
				int mr = i0 + mm - i < F32_MR ? (int)(i0 + mm - i) : F32_MR;

				for (int p = 0; p < np; p++) {
					int64_t j = jg + p * F32_NR, nc = panel_cols(j0, nn, j);

					f32_tile_rows(mr, x + i * k + l0, k, kc,
						      panels + p * F32_PANEL_FLOATS,
						      b && last ? b + j : NULL, y + i * n + j, n, nc,
						      l0 == 0);
					if (act && last)
						k_activation_rows(*act, y + i * n + j, n, mr, nc);
				}
			}
		}
	}
}
#endif

/* Columns [j0, j0 + nn) of y's rows [i0, i0 + mm), then the activation (if
 * any): the tiles above (panels as f32_block's), or one sgemm on views of
 * x, w and b, y's rows n apart. */
static void linear_block(const float *x, const float *w, const float *b, float *y, int64_t i0,
			 int64_t mm, int64_t j0, int64_t nn, int64_t k, int64_t n,
			 const enum k_act *act, float *panels)
{
#ifdef HAVE_F32_TILES
	/* k = 0: no k-block, and y is the bias (or zero) */
	if (k > 0 && k_cpu_isa() == K_ISA_AVX512) {
		f32_block(x, w, b, y, i0, mm, j0, nn, k, n, act, panels);
		return;
	}
#else
	(void)panels;
#endif
	float *yb = y + i0 * n + j0;

	/* Seeding y with the bias lets sgemm add it in its own pass over y
	 * (beta = 1) instead of a second pass after it. */
	if (b) {
		for (int64_t i = 0; i < mm; i++)
			memcpy(yb + i * n, b + j0, (size_t)nn * sizeof *y);
	}
	int ld = k > 0 ? (int)k : 1;

	cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)mm, (int)nn, (int)k, 1.0f,
		    x + i0 * k, ld, w + j0 * k, ld, b ? 1.0f : 0.0f, yb, (int)n);
	/* The block is one sgemm, so its epilogue can only follow the whole
	 * call: cutting it into cache-sized tiles could change the numbers
	 * (OpenBLAS picks its kernels and k-panels by the shape it is given,
	 * small-matrix kernels among them), and the fused op must equal the
	 * unfused pair bit for bit. What is saved is the second dispatch
	 * over the pool and a pass by other threads over rows this one has
	 * just written. */
	for (int64_t i = 0; act && i < mm; i++)
		k_activation(*act, yb + i * n, yb + i * n, nn);
}

void k_linear(const float *x, const float *w, const float *b, float *y,
	      int64_t m, int64_t k, int64_t n)
{
	k_linear_pool(NULL, x, w, b, y, m, k, n, NULL);
}

size_t k_linear_workspace(int threads)
{
#ifdef HAVE_F32_TILES
	return (size_t)(threads < 1 ? 1 : threads) * F32_PANELS * F32_PANEL_FLOATS * sizeof(float);
#else
	(void)threads;
	return 0;
#endif
}

struct linear_job {
	const float *x, *w, *b;
	float *y;
	int64_t m, k, n, rows, cols; /* the block each task takes */
	const enum k_act *act;       /* the epilogue, or NULL for none */
	float *ws;                   /* k_linear_workspace's, or NULL */
};

static void linear_task(void *arg, int64_t t, int worker)
{
	const struct linear_job *J = arg;
	int64_t i0 = J->rows < J->m ? t * J->rows : 0, j0 = J->rows < J->m ? 0 : t * J->cols;
	int64_t mm = J->m - i0 < J->rows ? J->m - i0 : J->rows;
	int64_t nn = J->n - j0 < J->cols ? J->n - j0 : J->cols;
	float *panels = NULL;

#ifdef HAVE_F32_TILES
	if (J->ws)
		panels = J->ws + (size_t)worker * F32_PANELS * F32_PANEL_FLOATS;
#else
	(void)worker;
#endif
	linear_block(J->x, J->w, J->b, J->y, i0, mm, j0, nn, J->k, J->n, J->act, panels);
}

/* Rows of a task when a layer is split by rows: fewer and each sgemm's
 * packing of w is amortised over too few rows. Flux's text stream (128
 * rows) on two threads cost 14-21% more CPU time split into 64-row blocks
 * than in one call, and -13% to +7% split by columns (docs/performance.md). */
#define LINEAR_MIN_ROWS 128

static void linear_pool(struct k_pool *pool, const float *x, const float *w, const float *b,
			float *y, int64_t m, int64_t k, int64_t n, const enum k_act *act,
			void *workspace)
{
	/* CBLAS takes int dimensions; a layer this large would be a plan bug. */
	assert(m >= 0 && k >= 0 && n >= 0);
	assert(m <= INT_MAX && k <= INT_MAX && n <= INT_MAX);
	/* Uneven context-parallel splits can leave a rank no rows, and CBLAS
	 * rejects a leading dimension of 0 before it looks at the sizes. */
	if (m == 0 || n == 0)
		return;
	int64_t T = k_pool_threads(pool);
	/* One block per thread: by rows where there are enough, else (the
	 * modulation layers' single row) by columns, in multiples of 16. */
	struct linear_job J = { x, w, b, y, m, k, n, m, n, act, workspace };

	if (T > 1 && m >= T * LINEAR_MIN_ROWS)
		J.rows = (m + T - 1) / T;
	else if (T > 1 && n >= T * 64)
		J.cols = ((n + T - 1) / T + 15) / 16 * 16;
	int64_t tasks = J.rows < m ? (m + J.rows - 1) / J.rows : (n + J.cols - 1) / J.cols;

	k_pool_run(pool, tasks, linear_task, &J);
}

void k_linear_pool(struct k_pool *pool, const float *x, const float *w, const float *b,
		   float *y, int64_t m, int64_t k, int64_t n, void *workspace)
{
	linear_pool(pool, x, w, b, y, m, k, n, NULL, workspace);
}

void k_linear_act_pool(struct k_pool *pool, const float *x, const float *w, const float *b,
		       float *y, int64_t m, int64_t k, int64_t n, enum k_act act,
		       void *workspace)
{
	linear_pool(pool, x, w, b, y, m, k, n, &act, workspace);
}

/* ---- narrow storage (bf16, f16) -------------------------------------------------- *
 * Two ways, measured in docs/performance.md: where the CPU has AVX-512 BF16,
 * bf16 dot products from storage (vdpbf16ps: exact products of bf16 pairs
 * summed in float32), 2.4x widening tiles for sgemm on a Zen 4 core; else
 * (f16, or another CPU) tiles of x and w widened to float32, one sgemm
 * each. */

/* Rows of x and columns of y a tile takes. A tile's sgemm does 2 MB NB k
 * flops for (MB + NB) k conversions, so the conversions are well under 1% of
 * the work at these sizes (docs/performance.md has the measurement). */
#define NARROW_MB 256
#define NARROW_NB 256

struct narrow_job {
	enum k_dtype t;
	const char *x, *w, *b;
	char *y;
	int64_t m, k, n;
	const enum k_act *act; /* the epilogue, or NULL for none */
	bool dot;          /* the bf16 dot-product path */
	bool amx;          /* with AMX's tiles where it can (dot_packed) */
	bool by_cols;      /* a task is a panel of NB columns over all rows,
			    * else a block of `rows` rows over all columns */
	int64_t rows;
	size_t per_worker; /* workspace floats per worker */
	float *ws;
};

/* The split of k_linear_narrow_pool: by rows where there are enough for
 * every thread, else (a few rows) by column panels. */
static bool narrow_by_cols(int threads, int64_t m)
{
	return threads > 1 && m < (int64_t)threads * LINEAR_MIN_ROWS;
}

/* The rows of x a task takes: all of them (by columns), else a share of
 * the threads' — of at most MB for the tiles, whose task holds its rows
 * widened; the dot products read x in place, so one task a thread there
 * (each task packs all of w). */
static int64_t narrow_rows(int threads, int64_t m, bool dot)
{
	int64_t share = (m + threads - 1) / (threads < 1 ? 1 : threads);

	return narrow_by_cols(threads, m) ? m : dot || share < NARROW_MB ? share : NARROW_MB;
}

/* The epilogue on n elements of y stored in t, as the activation op does it
 * apart: widened into buf (n floats), the activation, rounded back. */
static void act_stored(enum k_dtype t, void *y, float *buf, int64_t n, enum k_act act)
{
	k_convert(buf, K_F32, y, t, n);
	k_activation(act, buf, buf, n);
	k_convert(y, t, buf, K_F32, n);
}

/* Columns of w the bf16 dot-product kernel packs at a time, and the floats
 * of workspace that panel takes (k in pairs, rounded up). */
#define DOT_NR 64
#define DOT_GROUP 4 /* panels packed at a time (dot_packed) */

static int64_t dot_panel_floats(int64_t k)
{
	return DOT_NR * ((k + 1) / 2);
}

#if defined(__x86_64__) && defined(__GNUC__)
#define HAVE_BF16_DOT 1
#include <cpuid.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

/* Rows [i0, i0 + mm) x columns [j0, j1) of y from bf16 storage, for a task
 * of a few rows (the modulation layers' one row a sample), where packing w
 * would cost as much as the products: straight from w's rows, for each
 * panel of 64 rows of w (kept in L2 while every row of x passes over it), 2
 * rows x 4 columns of float32 accumulators at a time, 32 k per step (the
 * tail masked), each summed across its lanes at the end. A row or column
 * past the block reads a valid one again and is not stored, so every step
 * is the full 2 x 4. */
#define DOT_PANEL 64
__attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16"))) static void
dot_few_rows(const uint16_t *x, const uint16_t *w, const float *bias, uint16_t *y, int64_t i0,
	     int64_t mm, int64_t j0, int64_t j1, int64_t k, int64_t n)
{
	for (int64_t jp = j0; jp < j1; jp += DOT_PANEL) {
		int64_t jpe = jp + DOT_PANEL < j1 ? jp + DOT_PANEL : j1;

		for (int64_t i = i0; i < i0 + mm; i += 2) {
			for (int64_t j = jp; j < jpe; j += 4) {
				const uint16_t *xr[2], *wr[4];
				__m512 acc[2][4];

				for (int a = 0; a < 2; a++)
					xr[a] = x + (i + a < i0 + mm ? i + a : i) * k;
				for (int c = 0; c < 4; c++)
					wr[c] = w + (j + c < jpe ? j + c : j) * k;
				for (int a = 0; a < 2; a++)
					for (int c = 0; c < 4; c++)
						acc[a][c] = _mm512_setzero_ps();
				for (int64_t l = 0; l < k; l += 32) {
					__mmask32 mk = k - l >= 32 ? ~(__mmask32)0
								   : ((__mmask32)1 << (k - l)) - 1;
					__m512bh xv[2], wv[4];

					for (int a = 0; a < 2; a++)
						xv[a] = (__m512bh)_mm512_maskz_loadu_epi16(mk, xr[a] + l);
					for (int c = 0; c < 4; c++)
						wv[c] = (__m512bh)_mm512_maskz_loadu_epi16(mk, wr[c] + l);
					for (int a = 0; a < 2; a++)
						for (int c = 0; c < 4; c++)
							acc[a][c] = _mm512_dpbf16_ps(acc[a][c], xv[a], wv[c]);
				}
				for (int a = 0; a < 2 && i + a < i0 + mm; a++)
					for (int c = 0; c < 4 && j + c < jpe; c++) {
						float sum = _mm512_reduce_add_ps(acc[a][c]) +
							    (bias ? bias[j + c - j0] : 0);

						k_convert(y + (i + a) * n + j + c, K_BF16, &sum, K_F32, 1);
					}
			}
		}
	}
}

/* The packed kernel, for a task of many rows: w is packed once per task,
 * DOT_NR columns at a time, k in pairs — entry [p][c] of a panel holds
 * w[j + c][2p] in its low half and w[j + c][2p + 1] in its high half (zero
 * past the columns or past an odd k), so one 64-byte load is 16 columns'
 * pairs and vdpbf16ps adds x[i][2p] w[j][2p] + x[i][2p + 1] w[j][2p + 1] to
 * each column's float32 sum. A tile of DOT_MR rows x DOT_NR columns keeps
 * its 24 sums in registers over all of k: 4 loads of w and 6 broadcasts of
 * x's pairs (read straight from x's rows) feed 24 vdpbf16ps per pair, and
 * the panel (64 k bf16 x 2 bytes) stays in L2 while the task's rows pass
 * over it. */
#define DOT_MR 6

AVX512 static void dot_pack(const uint16_t *w, int64_t j, int64_t j1, int64_t k, uint32_t *bp)
{
	int64_t pairs = (k + 1) / 2, pf = k / 2 / 16 * 16, c0 = 0;

	/* Whole blocks of 16 columns x 16 pairs: a pair is a 32-bit word, so
	 * the block is k_transpose16's, moved as bits (no arithmetic touches
	 * them: a NaN's payload survives). */
	for (; c0 + 16 <= j1 - j && c0 + 16 <= DOT_NR; c0 += 16) {
		for (int64_t p = 0; p < pf; p += 16) {
			__m512 r[16];

			for (int i = 0; i < 16; i++)
				r[i] = _mm512_castsi512_ps(
					_mm512_loadu_si512(w + (j + c0 + i) * k + 2 * p));
			k_transpose16(r);
			for (int i = 0; i < 16; i++)
				_mm512_storeu_si512(bp + (p + i) * DOT_NR + c0, _mm512_castps_si512(r[i]));
		}
	}
	/* the rest a word at a time: the pairs past the blocks, the columns
	 * past them, zeros past the panel's columns and in an odd k's last
	 * high half */
	for (int64_t c = 0; c < DOT_NR; c++) {
		int64_t p = c < c0 ? pf : 0;

		if (j + c >= j1) {
			for (; p < pairs; p++)
				bp[p * DOT_NR + c] = 0;
			continue;
		}
		const uint16_t *wr = w + (j + c) * k;

		for (; p < k / 2; p++) {
			uint32_t v;

			memcpy(&v, wr + 2 * p, sizeof v);
			bp[p * DOT_NR + c] = v;
		}
		if (k & 1)
			bp[(pairs - 1) * DOT_NR + c] = wr[k - 1];
	}
}

/* x's pair (x[2p], x[2p + 1]) in every lane; x may be at any offset. */
__attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16"), always_inline)) static inline __m512bh
dot_pair(const uint16_t *x)
{
	uint32_t v;

	memcpy(&v, x, sizeof v);
	return (__m512bh)_mm512_set1_epi32((int)v);
}

/* Rows y[r n + (0 .. nc)] (r < mr) = the sums of rows x[r k ..] over the
 * panel, plus bias[0 .. nc) when there is one (added in float32 after the
 * sum, as the tiles add it), rounded once. mr is a constant at every call,
 * so the loops unroll and the sums stay in registers. */
__attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16"), always_inline)) static inline void
dot_tile(int mr, const uint16_t *x, int64_t k, const uint32_t *bp, const float *bias,
	 uint16_t *y, int64_t n, int64_t nc)
{
	__m512 acc[DOT_MR][4];

#pragma GCC unroll 6
	for (int r = 0; r < mr; r++)
#pragma GCC unroll 4
		for (int c = 0; c < 4; c++)
			acc[r][c] = _mm512_setzero_ps();
	for (int64_t p = 0; p < k / 2; p++) {
		const uint32_t *bq = bp + p * DOT_NR;
		__m512bh b0 = (__m512bh)_mm512_loadu_si512(bq);
		__m512bh b1 = (__m512bh)_mm512_loadu_si512(bq + 16);
		__m512bh b2 = (__m512bh)_mm512_loadu_si512(bq + 32);
		__m512bh b3 = (__m512bh)_mm512_loadu_si512(bq + 48);

#pragma GCC unroll 6
		for (int r = 0; r < mr; r++) {
			__m512bh a = dot_pair(x + r * k + 2 * p);

			acc[r][0] = _mm512_dpbf16_ps(acc[r][0], a, b0);
			acc[r][1] = _mm512_dpbf16_ps(acc[r][1], a, b1);
			acc[r][2] = _mm512_dpbf16_ps(acc[r][2], a, b2);
			acc[r][3] = _mm512_dpbf16_ps(acc[r][3], a, b3);
		}
	}
	if (k & 1) {
		/* the last pair holds one element: its high half must be zero in
		 * x too, since past the row may lie a NaN (0 x NaN is NaN) */
		const uint32_t *bq = bp + (k / 2) * DOT_NR;

#pragma GCC unroll 6
		for (int r = 0; r < mr; r++) {
			__m512bh a = (__m512bh)_mm512_set1_epi32(x[r * k + k - 1]);

#pragma GCC unroll 4
			for (int c = 0; c < 4; c++)
				acc[r][c] = _mm512_dpbf16_ps(
					acc[r][c], a, (__m512bh)_mm512_loadu_si512(bq + 16 * c));
		}
	}
#pragma GCC unroll 4
	for (int c = 0; c < 4; c++) {
		int64_t left = nc - 16 * c;
		__mmask16 mc = left >= 16 ? (__mmask16)0xffff
			       : left <= 0 ? 0 : (__mmask16)((1u << left) - 1);
		__m512 bv = bias ? _mm512_maskz_loadu_ps(mc, bias + 16 * c) : _mm512_setzero_ps();

#pragma GCC unroll 6
		for (int r = 0; r < mr; r++) {
			/* no bias, no add: -0 + 0 would be +0 */
			__m512 v = bias ? _mm512_add_ps(acc[r][c], bv) : acc[r][c];

			_mm256_mask_storeu_epi16(y + r * n + 16 * c, mc, k_round_bf16x16(v));
		}
	}
}

__attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16"))) static void
dot_tile_rows(int mr, const uint16_t *x, int64_t k, const uint32_t *bp, const float *bias,
	      uint16_t *y, int64_t n, int64_t nc)
{
	switch (mr) {
	case 1: dot_tile(1, x, k, bp, bias, y, n, nc); break;
	case 2: dot_tile(2, x, k, bp, bias, y, n, nc); break;
	case 3: dot_tile(3, x, k, bp, bias, y, n, nc); break;
	case 4: dot_tile(4, x, k, bp, bias, y, n, nc); break;
	case 5: dot_tile(5, x, k, bp, bias, y, n, nc); break;
	default: dot_tile(DOT_MR, x, k, bp, bias, y, n, nc); break;
	}
}

/* ---- AMX ----------------------------------------------------------------------- *
 * Where the CPU has AMX (Sapphire Rapids on), the same packed panel feeds
 * its tiles: TDPBF16PS adds to each float32 sum the two exact products of a
 * pair of bf16 — vdpbf16ps's arithmetic — 16 x 16 sums x 32 k an
 * instruction, 8 times the vector unit's rate. A panel of DOT_NR columns in
 * pairs of k is already the layout its B tiles read (16 pairs x 16
 * columns, rows DOT_NR x 4 bytes apart), and x's rows are its A tiles read
 * in place, so AMX takes blocks of 32 rows x 32 columns (tiles 0-1: x's two
 * row blocks, 2-3: the panel's two column blocks, 4-7: the sums) when k is
 * a multiple of 32 (a tile row is 32 k: a shorter k would read past x's
 * rows); the rows past the last whole 32 take dot_tile. */
#define AMX_ROWS 32

/* Whether the CPU has AMX-TILE and AMX-BF16 (CPUID 7.0 EDX bits 24 and 22)
 * and Linux grants the process the tile data state (arch_prctl
 * ARCH_REQ_XCOMP_PERM for XFEATURE_XTILEDATA). Asked once: under KVM the
 * CPUID and the syscall cost 22 us a call, and neither answer changes while
 * the process lives (a grant is for good). Racing first callers both ask and
 * store the same answer. */
static bool amx_hardware(void)
{
	static atomic_int known; /* 0: not asked yet, 1: yes, 2: no */
	int k = atomic_load_explicit(&known, memory_order_relaxed);

	if (!k) {
		unsigned a, b, c, d;
		bool yes = __get_cpuid_count(7, 0, &a, &b, &c, &d) && (d & 1u << 22) &&
			   (d & 1u << 24);
#ifdef SYS_arch_prctl
		yes = yes && syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */,
				     18 /* XTILEDATA */) == 0;
#else
		yes = false;
#endif
		k = yes ? 1 : 2;
		atomic_store_explicit(&known, k, memory_order_relaxed);
	}
	return k == 1;
}

/* Whether AMX runs here: amx_hardware, and DTPC_CPU_ISA unset, empty or
 * "amx" (naming a narrower set, avx512 say, the tests reach the dot products
 * on this CPU; read at every call, as the tests set it between cases). */
bool k_amx_available(void)
{
	const char *want = getenv("DTPC_CPU_ISA");

	return !(want && *want && strcmp(want, "amx")) && k_bf16_dot_available() &&
	       amx_hardware();
}

/* y[r n + (0 .. nc)] for the AMX_ROWS rows of x at x (rows k apart), from
 * the 32 columns of a packed panel at bp (nc of them kept), plus bias[0 ..
 * nc) when there is one (in float32 after the sum, as dot_tile adds it),
 * rounded once. */
K_AMX_T static void amx_block(const uint16_t *x, int64_t k, const uint32_t *bp, const float *bias,
			    uint16_t *y, int64_t n, int64_t nc)
{
	float sums[32][32] __attribute__((aligned(64)));

	k_amx_zero_sums();
	for (int64_t p = 0; p < k / 2; p += 16)
		k_amx_step(x + 2 * p, x + 16 * k + 2 * p, k * 2, bp + p * DOT_NR,
			   bp + p * DOT_NR + 16, DOT_NR * 4);
	k_amx_store_sums(sums[0], 32);
	for (int c = 0; c < 2; c++) {
		int64_t col = 16 * c, left = nc - col;
		__mmask16 mc = left >= 16 ? (__mmask16)0xffff
			       : left <= 0 ? 0 : (__mmask16)((1u << left) - 1);
		__m512 bv = bias ? _mm512_maskz_loadu_ps(mc, bias + col) : _mm512_setzero_ps();

		for (int r = 0; r < 32; r++) {
			__m512 v = _mm512_load_ps(sums[r] + col);

			/* no bias, no add: -0 + 0 would be +0 */
			_mm256_mask_storeu_epi16(y + r * n + col, mc,
						 k_round_bf16x16(bias ? _mm512_add_ps(v, bv) : v));
		}
	}
}

/* Rows [i0, i0 + mm) x columns [j0, j1) of y, panel by panel (bp: the
 * task's workspace, DOT_GROUP x dot_panel_floats(k)): AMX's blocks of 32
 * rows where `amx`, the vector tiles for the rest. */
K_AMX_T static void dot_packed(const uint16_t *x, const uint16_t *w, const float *bias,
			     uint16_t *y, int64_t i0, int64_t mm, int64_t j0, int64_t j1,
			     int64_t k, int64_t n, uint32_t *bp, bool amx)
{
	int64_t amx_end = amx ? i0 + mm / AMX_ROWS * AMX_ROWS : i0;
	int64_t panel = dot_panel_floats(k);

	if (amx_end > i0)
		k_amx_begin();
	/* DOT_GROUP panels packed at a time, so that AMX's row blocks, each
	 * read in place from x, serve DOT_GROUP x 2 column blocks before the
	 * next: x read once a group, not once every 32 columns (1152 x 512 ->
	 * 2048 on a Sapphire Rapids core: 0.49 -> 0.62 TFLOP/s) */
	for (int64_t jg = j0; jg < j1; jg += DOT_GROUP * DOT_NR) {
		int64_t jge = jg + DOT_GROUP * DOT_NR < j1 ? jg + DOT_GROUP * DOT_NR : j1;

		for (int64_t j = jg; j < jge; j += DOT_NR)
			dot_pack(w, j, j1, k, bp + (j - jg) / DOT_NR * panel);
		for (int64_t i = i0; i < amx_end; i += AMX_ROWS)
			for (int64_t j = jg; j < jge; j += 32) {
				int64_t q = (j - jg) / DOT_NR, c = (j - jg) % DOT_NR;

				amx_block(x + i * k, k, bp + q * panel + c, bias ? bias + (j - j0) : NULL,
					  y + i * n + j, n, jge - j < 32 ? jge - j : 32);
			}
		for (int64_t j = jg; j < jge; j += DOT_NR) {
			int64_t nc = jge - j < DOT_NR ? jge - j : DOT_NR;
			const float *bj = bias ? bias + (j - j0) : NULL;

			for (int64_t i = amx_end; i < i0 + mm; i += DOT_MR) {
				int mr = i0 + mm - i < DOT_MR ? (int)(i0 + mm - i) : DOT_MR;

				dot_tile_rows(mr, x + i * k, k, bp + (j - jg) / DOT_NR * panel, bj,
					      y + i * n + j, n, nc);
			}
		}
	}
	if (amx_end > i0)
		_tile_release();
}

/* A task of at most this many rows takes dot_few_rows. */
#define DOT_FEW_ROWS 4

/* y's block from bf16 storage, with the bias widened once (bias: nn floats
 * of workspace past the panels), then the epilogue row by row (act). */
static void dot_block(const uint16_t *x, const uint16_t *w, const uint16_t *b, uint16_t *y,
		      int64_t i0, int64_t mm, int64_t j0, int64_t j1, int64_t k, int64_t n,
		      const enum k_act *act, float *ws, bool amx)
{
	float *bias = b ? ws + DOT_GROUP * dot_panel_floats(k) : NULL;

	if (bias)
		k_convert(bias, K_F32, b + j0, K_BF16, j1 - j0);
	if (mm <= DOT_FEW_ROWS)
		dot_few_rows(x, w, bias, y, i0, mm, j0, j1, k, n);
	else
		dot_packed(x, w, bias, y, i0, mm, j0, j1, k, n, (uint32_t *)ws, amx);
	for (int64_t i = i0; act && i < i0 + mm; i++)
		act_stored(K_BF16, y + i * n + j0, ws, j1 - j0, *act);
}

bool k_bf16_dot_available(void)
{
	return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
	       __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bf16");
}
#else
bool k_bf16_dot_available(void)
{
	return false;
}

bool k_amx_available(void)
{
	return false;
}
#endif

static void narrow_task(void *arg, int64_t t, int worker)
{
	const struct narrow_job *J = arg;
	size_t e = k_dtype_size(J->t);
	int64_t k = J->k, n = J->n;
	int64_t i0 = J->by_cols ? 0 : t * J->rows, mm = J->m - i0 < J->rows ? J->m - i0 : J->rows;
	int64_t j_lo = J->by_cols ? t * NARROW_NB : 0, j_hi = J->by_cols ? j_lo + NARROW_NB : n;
	float *xf = J->ws + (size_t)worker * J->per_worker;
#ifdef HAVE_BF16_DOT
	if (J->dot) {
		dot_block((const uint16_t *)J->x, (const uint16_t *)J->w, (const uint16_t *)J->b,
			  (uint16_t *)J->y, i0, mm, j_lo, j_hi < n ? j_hi : n, k, n, J->act, xf,
			  J->amx);
		return;
	}
#endif
	float *wf = xf + J->rows * k;
	float *yf = wf + NARROW_NB * k;
	int ld = k > 0 ? (int)k : 1;

	k_convert(xf, K_F32, J->x + (size_t)(i0 * k) * e, J->t, mm * k);
	for (int64_t j0 = j_lo; j0 < j_hi && j0 < n; j0 += NARROW_NB) {
		int64_t nn = n - j0 < NARROW_NB ? n - j0 : NARROW_NB;

		k_convert(wf, K_F32, J->w + (size_t)(j0 * k) * e, J->t, nn * k);
		for (int64_t i = 0; J->b && i < mm; i++)
			k_convert(yf + i * nn, K_F32, J->b + (size_t)j0 * e, J->t, nn);
		cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)mm, (int)nn, (int)k, 1.0f,
			    xf, ld, wf, ld, J->b ? 1.0f : 0.0f, yf, (int)nn);
		for (int64_t i = 0; i < mm; i++) {
			char *yr = J->y + (size_t)((i0 + i) * n + j0) * e;

			k_convert(yr, J->t, yf + i * nn, K_F32, nn);
			/* the row of the tile is in L1; its float32 sum is dead
			 * once rounded, so it holds the epilogue's widening */
			if (J->act)
				act_stored(J->t, yr, yf + i * nn, nn, *J->act);
		}
	}
}

/* A worker's floats: the tiles' widened rows, panel of w and tile of y, or
 * the dot products' packed panel and widened bias (then the epilogue's
 * row), whichever is more: the caller's workspace serves either path. */
static size_t narrow_per_worker(int threads, int64_t m, int64_t k, int64_t n)
{
	int64_t xr = narrow_rows(threads, m, false);
	int64_t tiles = xr * k + NARROW_NB * k + xr * NARROW_NB;
	int64_t dot = DOT_GROUP * dot_panel_floats(k) + n;

	return (size_t)(tiles > dot ? tiles : dot);
}

size_t k_linear_narrow_workspace(int threads, int64_t m, int64_t k, int64_t n)
{
	return (size_t)(threads < 1 ? 1 : threads) * narrow_per_worker(threads, m, k, n) *
	       sizeof(float);
}

static void narrow_pool(struct k_pool *pool, enum k_dtype t, const void *x, const void *w,
			const void *b, void *y, int64_t m, int64_t k, int64_t n, void *workspace,
			bool dot, const enum k_act *act)
{
	assert(m >= 0 && k >= 0 && n >= 0);
	assert(m <= INT_MAX && k <= INT_MAX && n <= INT_MAX);
	if (m == 0 || n == 0)
		return;
	int T = k_pool_threads(pool);
	struct narrow_job J = { t, x, w, b, y, m, k, n, act, dot, false, narrow_by_cols(T, m),
				narrow_rows(T, m, dot), narrow_per_worker(T, m, k, n), workspace };
#ifdef HAVE_BF16_DOT
	J.amx = dot && k % 32 == 0 && k_amx_available();
#endif
	int64_t tasks = J.by_cols ? (n + NARROW_NB - 1) / NARROW_NB : (m + J.rows - 1) / J.rows;

	k_pool_run(pool, tasks, narrow_task, &J);
}

void k_linear_narrow_pool(struct k_pool *pool, enum k_dtype t, const void *x, const void *w,
			  const void *b, void *y, int64_t m, int64_t k, int64_t n, void *workspace)
{
	narrow_pool(pool, t, x, w, b, y, m, k, n, workspace,
		    t == K_BF16 && k_bf16_dot_available(), NULL);
}

void k_linear_narrow_tiles_pool(struct k_pool *pool, enum k_dtype t, const void *x,
				const void *w, const void *b, void *y, int64_t m, int64_t k,
				int64_t n, void *workspace)
{
	narrow_pool(pool, t, x, w, b, y, m, k, n, workspace, false, NULL);
}

void k_linear_act_narrow_pool(struct k_pool *pool, enum k_dtype t, const void *x,
			      const void *w, const void *b, void *y, int64_t m, int64_t k,
			      int64_t n, enum k_act act, void *workspace)
{
	narrow_pool(pool, t, x, w, b, y, m, k, n, workspace,
		    t == K_BF16 && k_bf16_dot_available(), &act);
}

void k_linear_act_narrow_tiles_pool(struct k_pool *pool, enum k_dtype t, const void *x,
				    const void *w, const void *b, void *y, int64_t m, int64_t k,
				    int64_t n, enum k_act act, void *workspace)
{
	narrow_pool(pool, t, x, w, b, y, m, k, n, workspace, false, &act);
}
