/* kernels.h — the CPU compute kernels of the runtime.
 *
 * Every tensor is float32 (k_convert and the narrow GEMM aside: the storage
 * dtypes below), row-major and contiguous unless a stride is given
 * (strides count floats, not bytes); sizes are int64_t. Kernels start no
 * threads of their own: the *_pool variants run on a caller's k_pool (NULL:
 * on the calling thread alone), and the GEMMs use whatever BLAS threads the
 * process set. The CPU device (runtime/device_cpu.c) owns one pool per rank
 * and keeps the BLAS library at one thread (see dtpc_session_threads).
 *
 * Ownership is the same for every function: callers own all buffers (inputs,
 * outputs and workspaces); a kernel allocates nothing, keeps no pointer past
 * its return and holds no state between calls, so ranks may call any kernel
 * concurrently on disjoint outputs (each with its own pool). Sizes are
 * preconditions checked with assert(): a plan that the compiler accepted
 * never violates them. */
#ifndef DTPC_KERNELS_H
#define DTPC_KERNELS_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The most dimensions k_binary takes; the same bound as the compiler's IR. */
#define K_MAX_DIMS 8

/* Attention tiles: query rows per task and key/value rows per tile. They fix
 * the workspace whatever the sequence lengths; exported so tests can pick
 * lengths that straddle tiles. */
#define K_ATTN_TILE_Q 96
#define K_ATTN_TILE_KV 192

/* A pool of n threads, the caller counted as one (n - 1 are started), for
 * one caller at a time. k_pool_create returns NULL when out of memory, and a
 * smaller pool when threads cannot be started. */
struct k_pool;
struct k_pool *k_pool_create(int n);
void k_pool_free(struct k_pool *p);
/* Threads a job runs on: 1 for NULL. */
int k_pool_threads(const struct k_pool *p);
/* Runs fn(arg, task, worker) for every task in [0, ntasks) on the pool's
 * threads and returns when all are done; worker in [0, k_pool_threads(p))
 * names the thread, so a task may use that worker's share of a workspace.
 * p == NULL runs them in order on the calling thread (worker 0). */
void k_pool_run(struct k_pool *p, int64_t ntasks, void (*fn)(void *arg, int64_t task, int worker),
		void *arg);

/* The vector instruction sets the kernels are compiled for, narrowest
 * first. k_cpu_isa: the widest this CPU runs, or a narrower one named by the
 * environment's DTPC_CPU_ISA (avx2, base), so tests and benchmarks reach
 * every variant on one machine. */
enum k_isa { K_ISA_BASE, K_ISA_AVX2, K_ISA_AVX512 };
enum k_isa k_cpu_isa(void);

enum k_binop { K_ADD, K_MUL };

/* Storage dtypes: float32, bfloat16, IEEE binary16 (the same order as
 * dtpc_dtype). The kernels below take float32; a device that stores a
 * narrower dtype widens operands with k_convert, computes in float32 and
 * rounds the result back (runtime/device_cpu.c), except the GEMM, which
 * has a narrow form of its own. */
enum k_dtype { K_F32, K_BF16, K_F16 };

/* Bytes per element of t. */
size_t k_dtype_size(enum k_dtype t);

/* n elements of dtype st at src into dtype dt at dst: widening is exact,
 * narrowing rounds to nearest, ties to even (NaN stays NaN, beyond the
 * range is infinity). dst and src do not overlap unless dt == st. Callers
 * own all buffers. */
void k_convert(void *dst, enum k_dtype dt, const void *src, enum k_dtype st, int64_t n);

/* y[m, n] = x[m, k] . w[n, k]^T (+ b[n] when b != NULL): PyTorch's Linear with
 * its [out, in] weight. y must not overlap x, w or b. Callers own all buffers. */
void k_linear(const float *x, const float *w, const float *b, float *y,
	      int64_t m, int64_t k, int64_t n);

/* k_linear split over pool's threads (by rows, or by columns for a few
 * rows), each block one single-threaded sgemm (or, with AVX-512, the
 * register tiles of linear.c): with the BLAS library kept at one thread,
 * the pool is the only source of threads. workspace holds
 * k_linear_workspace(k_pool_threads(pool)) bytes, 64-byte aligned, where
 * the tiles pack several panels of w at a time; NULL packs one at a time on
 * each task's stack (slower, the same bits: every element's sum runs over k
 * in order whatever the blocking). Callers own all buffers. */
size_t k_linear_workspace(int threads);
void k_linear_pool(struct k_pool *pool, const float *x, const float *w, const float *b,
		   float *y, int64_t m, int64_t k, int64_t n, void *workspace);

/* k_linear on data stored in dtype t (x, w, b and y all in t), float32
 * accumulation, the bias added in float32 and y rounded once: for bf16 on a
 * CPU with AVX-512 BF16 (k_bf16_dot_available) bf16 dot products (w
 * packed in pairs of k per task, x read in place; on AMX's tiles where
 * k_amx_available), else k_linear_narrow_tiles_pool's tiles of x and w widened
 * to float32, one sgemm per tile. workspace holds
 * k_linear_narrow_workspace(k_pool_threads(pool), m, k, n) bytes aligned
 * for float. Callers own all buffers. */
size_t k_linear_narrow_workspace(int threads, int64_t m, int64_t k, int64_t n);
void k_linear_narrow_pool(struct k_pool *pool, enum k_dtype t, const void *x, const void *w,
			  const void *b, void *y, int64_t m, int64_t k, int64_t n, void *workspace);
void k_linear_narrow_tiles_pool(struct k_pool *pool, enum k_dtype t, const void *x,
				const void *w, const void *b, void *y, int64_t m, int64_t k,
				int64_t n, void *workspace);
/* Whether this CPU runs k_linear_narrow_pool's bf16 dot products, and
 * whether it runs them on AMX's tiles where k is a multiple of 32 (blocks of
 * 32 rows; the same arithmetic: exact products of bf16 pairs summed in
 * float32). DTPC_CPU_ISA set and not "amx" turns AMX off. */
bool k_bf16_dot_available(void);
bool k_amx_available(void);

/* The activations a linear layer's epilogue applies: k_gelu exact, k_gelu
 * with tanh_approx, k_silu. */
enum k_act { K_ACT_GELU, K_ACT_GELU_TANH, K_ACT_SILU };

/* y = act(x) for n floats, computed by k_gelu or k_silu. y may equal x.
 * Callers own all buffers. */
void k_activation(enum k_act act, const float *x, float *y, int64_t n);
/* k_activation in place on rows x cols of y, rows ld apart, choosing the
 * vector kernel once for all rows (a GEMM's epilogue on its tiles). */
void k_activation_rows(enum k_act act, float *y, int64_t ld, int64_t rows, int64_t cols);

/* Linear + activation, y = act(x . w^T + b), with the activation applied to
 * each block of y by the task that computed it, right after the block's
 * last accumulation, instead of in a second pass over y. The result is bit
 * for bit the unfused pair's on the same pool:
 *   k_linear_act_pool: k_linear_pool, then k_activation over y;
 *   k_linear_act_narrow_pool (and _tiles_): k_linear_narrow_pool (_tiles_),
 *   then y widened to float32, k_activation, and rounded back to t — so the
 *   activation sees the GEMM's sum rounded to the storage dtype, as it does
 *   when the two run apart.
 * Sizes, workspaces (k_linear_workspace, k_linear_narrow_workspace) and
 * ownership as for the linear kernels above. */
void k_linear_act_pool(struct k_pool *pool, const float *x, const float *w, const float *b,
		       float *y, int64_t m, int64_t k, int64_t n, enum k_act act,
		       void *workspace);
void k_linear_act_narrow_pool(struct k_pool *pool, enum k_dtype t, const void *x,
			      const void *w, const void *b, void *y, int64_t m, int64_t k,
			      int64_t n, enum k_act act, void *workspace);
void k_linear_act_narrow_tiles_pool(struct k_pool *pool, enum k_dtype t, const void *x,
				    const void *w, const void *b, void *y, int64_t m, int64_t k,
				    int64_t n, enum k_act act, void *workspace);

/* LayerNorm of each of `rows` rows of n floats: y = (x - mean) / sqrt(var +
 * eps) * w + b, with the biased variance; w[n] and b[n] may each be NULL
 * (no scale, no shift). y may equal x. Callers own all buffers. */
void k_layer_norm(const float *x, float *y, int64_t rows, int64_t n, float eps,
		  const float *w, const float *b);

/* RMSNorm over every group of `group` consecutive floats of each row of n
 * (n % group == 0; group = head dim normalises per head, group = n the whole
 * row): y = x / sqrt(mean(x^2) + eps) * w, with w[group] or NULL for no scale.
 * y may equal x. Callers own all buffers. */
void k_rms_norm(const float *x, float *y, int64_t rows, int64_t n, int64_t group,
		float eps, const float *w);

/* A norm over a last axis of N elements split across ranks, each holding n
 * of them. k_norm_stats, per row of n floats, accumulated in double: mode
 * K_NS_SUM sum(x) (one float per row); K_NS_CENTRED sum(x - c) and
 * sum((x - c)^2) with c = sums[r] / N (two per row: a float sum(x) of a row
 * with a large mean is too coarse for the mean itself, so the residual
 * corrects it); K_NS_SQ sum(x^2) (one per row). k_norm_apply: the norm from
 * the all-reduced sums: LayerNorm when s1 (sum x) is given, s2 the centred
 * pair: mean = c + d1 / N, var = d2 / N - (d1 / N)^2; RMSNorm when s1 is
 * NULL, mean square = s2 / N. w[n], b[n] this rank's slices or NULL. y may
 * equal x. */
enum k_norm_stat { K_NS_SUM, K_NS_CENTRED, K_NS_SQ };
void k_norm_stats(const float *x, const float *sums, float *out, int64_t rows, int64_t n,
		  int64_t N, enum k_norm_stat mode);
void k_norm_apply(const float *x, float *y, int64_t rows, int64_t n, int64_t N, float eps,
		  const float *s1, const float *s2, const float *w, const float *b);

/* GELU of n floats: exact 0.5 x (1 + erf(x / sqrt 2)), or with tanh_approx
 * PyTorch's approximate="tanh" 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
 * y may equal x. Callers own all buffers. */
void k_gelu(const float *x, float *y, int64_t n, bool tanh_approx);

/* The unary pointwise ops of graph/ops.def's UNARY lines: y = op(x) for n
 * floats (k_silu, k_tanh, ...; each defined in elementwise.c with
 * what it computes). y may equal x. Callers own all buffers. */
#define OP(id, glo, ghi, fl, sig)
#define UNARY(id, sig) void k_##id(const float *x, float *y, int64_t n);
#include "graph/ops.def"
#undef UNARY
#undef OP

/* out = a op b with numpy broadcasting. The three shapes have nd dimensions
 * (0 <= nd <= K_MAX_DIMS), right-aligned with the caller padding with 1s;
 * every ashape[i] and bshape[i] is 1 or oshape[i]. out may equal an operand
 * whose shape is oshape. Callers own all buffers. */
void k_binary(enum k_binop op, const float *a, const int64_t *ashape,
	      const float *b, const int64_t *bshape, float *out,
	      const int64_t *oshape, int nd);

/* adaLN modulation y = x * (1 + scale) + shift, x and y [B, S, H]. shift and
 * scale are [B, H] (one row per batch) when s_stride == 0, or [B, S, H] (one
 * row per position) when s_stride == H. y may equal x. Callers own all
 * buffers. */
void k_modulate(const float *x, const float *shift, const float *scale, float *y,
		int64_t B, int64_t S, int64_t H, int64_t s_stride);

/* Sets rows x cols floats of a strided 2-D view to value (pad's constant
 * blocks). Callers own all buffers. */
void k_fill2d(float *dst, int64_t dst_stride, int64_t rows, int64_t cols, float value);

/* Copies rows x cols floats between strided 2-D views (slice, concat,
 * all-to-all pack and unpack); the views must not overlap. Argument order
 * follows memcpy. Callers own all buffers. */
void k_copy2d(float *dst, int64_t dst_stride, const float *src, int64_t src_stride,
	      int64_t rows, int64_t cols);
/* k_copy2d for elements of esize bytes (strides and cols count elements). */
void k_copy2d_elems(void *dst, int64_t dst_stride, const void *src, int64_t src_stride,
		    int64_t rows, int64_t cols, size_t esize);

/* Rows of `inner` elements of esize bytes moved by a runtime index
 * (index_select, index_copy; index.c), over `outer` slabs: gather
 * (scatter false): dst[o][j] = src[o][index[j]] for j < n, src holding
 * src_rows rows per slab and dst n; scatter: dst[o][index[j]] = src[o][j],
 * dst holding dst_rows rows and src n (dst's other rows untouched; of
 * duplicate indices the last one's row stays). An index that is not an
 * integer in [0, rows) selects a row of zeros (gather) or is skipped
 * (scatter). The index is float32; the views must not overlap. Callers own
 * all buffers. */
void k_index_rows(void *dst, int64_t dst_rows, const void *src, int64_t src_rows,
		  const float *index, int64_t n, int64_t outer, int64_t inner, size_t esize,
		  bool scatter);

/* Bytes of workspace k_attention needs for these sizes: one head's keys and
 * values packed (Skv (D + Dv) floats, rounded up) and a few hundred KiB of
 * tiles; Sq does not matter. */
size_t k_attention_workspace(int64_t Sq, int64_t Skv, int64_t D, int64_t Dv);

/* Non-causal scaled dot-product attention with scale 1/sqrt(D), computed
 * flash-style over tiles so memory beyond the operands is the workspace alone:
 *   q [B, Sq, H*D] (row stride q_stride), k [B, Skv, H*D] (row stride
 *   k_stride), v [B, Skv, H*Dv] (row stride v_stride), out [B, Sq, H*Dv]
 *   contiguous, and lse [B, H, Sq] the natural-log softmax denominator
 *   (logsumexp of the scaled scores, max included), or NULL when unwanted.
 *   mask [B, Skv] contiguous, or NULL for none, is a key-padding mask: key j
 *   of batch b takes part where mask[b, j] != 0 and is left out where it is
 *   0 (as a -inf score would be). A row whose keys are all masked is empty:
 *   its output is zeros and its lse -INFINITY (PyTorch's SDPA gives NaN
 *   there), which k_lse_merge reads as an empty block.
 * Strides let q, k and v point into packed buffers. Sq, Skv >= 1. workspace
 * holds k_attention_workspace(Sq, Skv, D, Dv) bytes aligned for float; out
 * must not overlap the inputs. Callers own all buffers, the workspace too.
 * Vectorised for AVX-512 or AVX2 where the CPU has them (chosen per call). */
void k_attention(const float *q, int64_t q_stride, const float *k, int64_t k_stride,
		 const float *v, int64_t v_stride, const float *mask, float *out, float *lse,
		 int64_t B, int64_t Sq, int64_t Skv, int64_t H, int64_t D, int64_t Dv,
		 void *workspace);
/* k_attention over the heads and query blocks in parallel on pool; the
 * workspace holds k_pool_threads(pool) times k_attention_workspace bytes,
 * 64-byte aligned (one share per thread). The result does not depend on the
 * pool's size. */
void k_attention_pool(struct k_pool *pool, const float *q, int64_t q_stride, const float *k,
		      int64_t k_stride, const float *v, int64_t v_stride, const float *mask,
		      float *out, float *lse, int64_t B, int64_t Sq, int64_t Skv, int64_t H,
		      int64_t D, int64_t Dv, void *workspace);

/* y = exp(x) for n floats with the vectorised exponential attention uses:
 * within 2 ulp of expf where the result is normal, inf above 88.72, 0 for
 * -inf, NaN for NaN (tests/unit measures it). y may equal x. */
void k_vexp(const float *x, float *y, int64_t n);

/* k_attention_pool from bf16 storage on AMX: q, k, v and out bf16 (strides
 * in elements), lse float32 as k_attention's. Q Kᵀ as exact products of bf16 pairs
 * summed in float32, the online softmax in float32, the weights rounded to
 * bf16 for P V (as PyTorch's bf16 flash attention for CPU rounds them),
 * summed in float32; out rounded once. For D and Dv multiples of 32 on a CPU
 * with k_amx_available (k_attention_bf16_available says so), no mask. The
 * workspace holds k_pool_threads(pool) times k_attention_bf16_workspace
 * bytes, aligned to 64. */
bool k_attention_bf16_available(int64_t D, int64_t Dv);
size_t k_attention_bf16_workspace(int64_t Skv, int64_t D, int64_t Dv);
void k_attention_bf16_pool(struct k_pool *pool, const uint16_t *q, int64_t q_stride,
			   const uint16_t *k, int64_t k_stride, const uint16_t *v,
			   int64_t v_stride, uint16_t *out, float *lse, int64_t B, int64_t Sq,
			   int64_t Skv, int64_t H, int64_t D, int64_t Dv, void *workspace);

/* Ring attention's merge of a partial result (out_blk, lse_blk) into the
 * accumulator (out, lse), in place:
 *   lse' = max(lse, lse_blk) + log1p(exp(-|lse - lse_blk|))
 *   out' = exp(lse - lse') out + exp(lse_blk - lse') out_blk
 * out and out_blk [B, Sq, H*Dv], lse and lse_blk [B, H, Sq]. A row whose lse is
 * -INFINITY is empty, whatever its out holds: an empty accumulator row takes
 * the block's as is, an empty block row leaves the accumulator alone. Callers
 * own all buffers. */
void k_lse_merge(float *out, float *lse, const float *out_blk, const float *lse_blk,
		 int64_t B, int64_t Sq, int64_t H, int64_t Dv);

/* ---- rope (rope.c): the rotary position embedding's tables and its rotation ---- */

/* RoPE tables of rows positions ids [rows, naxes] into y [rows, sum of
 * axes_dim]: per axis a, get_1d_rotary_pos_embed(axes_dim[a], ids[:, a],
 * theta, use_real, repeat_interleave_real) — the cosines (or with sine the
 * sines), each repeated for the two entries of its rotation pair —
 * concatenated over the axes. f64: frequencies and angles in float64
 * (Flux, Wan); otherwise in float32 as QwenImage's rope_params. */
void k_rope_freqs(const float *ids, float *y, int64_t rows, int64_t naxes,
		  const int64_t *axes_dim, double theta, bool sine, bool f64);

/* LTX-Video's RoPE table (LTXVideoRotaryPosEmbed) over the whole inner dim
 * `dim`, rows of grid positions ids [rows, 3] (f, h, w): each coordinate
 * scaled as g * scale[a] * patch / base (patch patch_t on frames, patch on
 * height and width; base 20, 2048, 2048 as the model builds the module),
 * the dim / 6 frequencies theta ** linspace(0, 1, dim / 6) * pi / 2 shared
 * by the three axes, angle freq[k] * (2 * c[a] - 1) at 2 * (3 * k + a) and
 * the next entry (cosines, or sines), after dim % 6 entries of cos 1 / sin
 * 0 at the front. Every step is torch's float32 one. */
void k_ltx_rope_freqs(const float *ids, float *y, int64_t rows, int64_t dim,
		      const double scale[3], int64_t patch_t, int64_t patch, double theta,
		      bool sine);

/* LTX-2's rope table (diffusers' LTX2AudioVideoRotaryPosEmbed, interleaved)
 * over the coordinates its prepare_video_coords / prepare_audio_coords make,
 * rows lo .. lo + rows of the grid (frames x height x width, row-major; the
 * audio's frames): per axis the patch bounds [x, x + patch) of x = index *
 * patch, in pixels (x * scale; the frame axis shifted by causal_offset -
 * scale_t, clamped at 0, then divided by fps (video) or multiplied by
 * hop_length and divided by sampling_rate (audio)), their midpoint over the
 * base, dim / (2 * axes) frequencies theta ** linspace(0, 1) * pi / 2 (in
 * float64 with f64, else float32), angle freq[k] * (2 * c[a] - 1) at
 * columns 2 * (axes * k + a) and the next, after dim % (2 * axes) columns of
 * cos 1 / sin 0 at the front. Every float32 step as torch rounds it. */
struct k_ltx2_rope {
	int64_t dim, axes, height, width, patch_t, patch, scale_t, scale_s, causal_offset;
	int64_t hop_length, base_t, base_s;
	double time_div, theta;
	bool audio, f64;
	bool split; /* rope_type "split": each frequency once, the table dim / 2 wide */
};
void k_ltx2_rope_freqs(const struct k_ltx2_rope *p, float *y, int64_t lo, int64_t rows,
		       bool sine);

/* the floats of one row of k_ltx2_rope_freqs' table */
static inline int64_t k_ltx2_rope_width(const struct k_ltx2_rope *p)
{
	return p->split ? p->dim / 2 : p->dim;
}

/* RoPE on interleaved pairs (Flux's convention), for every head h and pair i
 * of a head of D floats (D even):
 *   y[2i]   = x[2i] cos[2i]     - x[2i+1] sin[2i]
 *   y[2i+1] = x[2i+1] cos[2i+1] + x[2i] sin[2i+1]
 * x and y are [B, S, heads * D] with row strides x_stride and y_stride (floats
 * between consecutive positions, heads * D when contiguous) so q and k can be
 * rotated inside a packed qkv buffer; cos and sin are [S, D]. y may equal x
 * with y_stride == x_stride. Callers own all buffers. */
void k_rope(const float *x, int64_t x_stride, const float *cos, const float *sin,
	    float *y, int64_t y_stride, int64_t B, int64_t S, int64_t heads, int64_t D);

/* The rotate_half convention (MiniMax-H3's _apply_rotary_emb) over the R
 * leading channels of each head of D: with h = R / 2, channel j < h is
 * x_j cos_j - x_{j+h} sin_j and channel j + h is x_{j+h} cos_{j+h} + x_j
 * sin_{j+h}; channels R .. D are copied. cos and sin are [S, R] (diffusers'
 * tables: cat(freqs, freqs)); R even, at most D. per_head (LTX-2's
 * apply_split_rotary_emb, R = D): cos and sin are [S, heads * h], head k's
 * h columns at k * h, and both halves read column j (cos_j for j + h too).
 * Strides and in-place use as k_rope's. */
void k_rope_half(const float *x, int64_t x_stride, const float *cos, const float *sin,
		 float *y, int64_t y_stride, int64_t B, int64_t S, int64_t heads, int64_t D,
		 int64_t R, bool per_head);

/* the floats of one position's cos (and sin) row of k_rope_half (and of
 * k_rope, whose R is D) */
static inline int64_t k_rope_table_width(int64_t heads, int64_t R, bool per_head)
{
	return per_head ? heads * (R / 2) : R;
}

/* ---- embeddings (embed.c): what diffusers computes inside a forward ---- */

/* diffusers' get_timestep_embedding of n timesteps t, in its float32
 * order: each t times input_scale (Flux's `timestep * 1000`), frequencies
 * exp(-log(max_period) k / (dim/2 - shift)), the angle t f times scale,
 * then [sin | cos] ([cos | sin] with flip), a last zero column when dim is
 * odd. y is [n, dim]. */
void k_timestep_embedding(const float *t, float *y, int64_t n, int64_t dim, bool flip,
			  double shift, double scale, double max_period, double input_scale);

/* The positions (f, h, w) of an F x H x W token grid in row-major order,
 * y [F H W, 3]; with center, h counts from -(H - H/2) and w from
 * -(W - W/2) (QwenImage's scale_rope). */
void k_grid_ids(float *y, int64_t F, int64_t H, int64_t W, bool center);

/* y [length, axes]: every column of row i holds first + i. */
void k_text_ids(float *y, int64_t length, int64_t first, int64_t axes);

/* Conv3d patches: x [B, C, F, H, W] into y [B, (F/pt)(H/ph)(W/pw), C pt ph
 * pw], tokens in (f, h, w) row-major order and each patch flattened as a
 * Conv3d weight [out, C, pt, ph, pw] is, so y . weight^T is the Conv3d
 * with kernel = stride = patch, flattened and transposed. */
void k_patchify(const float *x, float *y, int64_t B, int64_t C, int64_t F, int64_t H,
		int64_t W, int64_t pt, int64_t ph, int64_t pw);

/* Wan's unpatchify: x [B, (F/pt)(H/ph)(W/pw), pt ph pw C] (channels
 * innermost) into y [B, C, F, H, W] — reshape to [B, F', H', W', pt, ph,
 * pw, C] and permute (0, 7, 1, 4, 2, 5, 3, 6). */
void k_unpatchify(const float *x, float *y, int64_t B, int64_t C, int64_t F, int64_t H,
		  int64_t W, int64_t pt, int64_t ph, int64_t pw);
#endif
