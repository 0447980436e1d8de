/* kernels_cuda.h — the CUDA compute kernels of the runtime (C interface).
 *
 * The CUDA counterpart of kernels/cpu/kernels.h: the same functions with the
 * same meaning, sizes and argument order, on device pointers, with a storage
 * dtype. Accumulation is always float32 (GEMM, norms' statistics, attention's
 * scores, softmax and output, the ring merge); the log-sum-exp vectors of
 * attention and the merge are always float32 whatever the storage dtype.
 * Norm weights and biases, RoPE tables, shift/scale and linear biases have
 * the storage dtype of the tensors they apply to.
 *
 * Every kernel is enqueued on the context's stream and returns at once:
 * 0 when the launch was accepted, else a cudaError_t / cublasStatus_t value
 * (nonzero); kc_error_string() names it. Errors of the kernels themselves
 * surface at kc_sync(). Strides count elements, not bytes. Buffers are
 * owned by the caller; a kernel keeps no pointer past its return.
 *
 * A context owns a device ordinal, a stream, a cuBLASLt handle and the GEMM
 * workspace. One context per rank; several contexts may share a GPU. */
#ifndef DTPC_KERNELS_CUDA_H
#define DTPC_KERNELS_CUDA_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum kc_dtype { KC_F32 = 0, KC_BF16 = 1, KC_F16 = 2 };
enum kc_binop { KC_ADD = 0, KC_MUL = 1 };
/* The activations of kc_linear_act (the values of enum k_act). */
enum kc_act { KC_ACT_GELU = 0, KC_ACT_GELU_TANH = 1, KC_ACT_SILU = 2 };
enum { KC_MAX_DIMS = 8 };

typedef struct kc_ctx kc_ctx;

/* Bytes per element of a storage dtype. */
size_t kc_dtype_size(enum kc_dtype t);
/* The text of a status some kc_ call returned ("" for 0). */
const char *kc_error_string(int status);

/* Number of CUDA devices (0 when there is no driver or no GPU; never fails). */
int kc_device_count(void);
/* A context on device `ordinal`; err holds the reason on failure (nonzero). */
int kc_create(kc_ctx **out, int ordinal, char *err, size_t errlen);
void kc_destroy(kc_ctx *c);
/* The context's cudaStream_t, as void * for C callers. */
void *kc_stream(kc_ctx *c);
/* Waits for everything enqueued; returns the first error of any kernel. */
int kc_sync(kc_ctx *c);

/* Device memory (cudaMalloc on the context's device). */
int kc_alloc(kc_ctx *c, void **p, size_t bytes);
void kc_free(kc_ctx *c, void *p);
/* Synchronous copies between host and device, ordered after the stream's
 * earlier work. */
int kc_upload(kc_ctx *c, void *dst, const void *src, size_t bytes);
int kc_download(kc_ctx *c, void *dst, const void *src, size_t bytes);
/* Asynchronous device-to-device copy on the stream. */
int kc_copy(kc_ctx *c, void *dst, const void *src, size_t bytes);
/* n elements of dtype st at src as dtype dt at dst (rounding to nearest
 * even); a plain copy when the dtypes agree. Asynchronous. */
int kc_convert(kc_ctx *c, enum kc_dtype dt, void *dst, enum kc_dtype st, const void *src,
	       int64_t n);
/* The caller's streams (dtpc_session_stream): kc_wait_stream makes the
 * context's stream wait for everything enqueued on `stream` so far,
 * kc_signal_stream makes `stream` wait for everything enqueued on the
 * context's stream so far, both through an event of the context (recorded
 * and waited on, never waited for on the host). stream is a cudaStream_t as
 * void *: one of the caller's, cudaStreamLegacy or cudaStreamPerThread.
 * Asynchronous. */
int kc_wait_stream(kc_ctx *c, void *stream);
int kc_signal_stream(kc_ctx *c, void *stream);
/* 0 when p is device memory of the context's GPU (cudaMalloc'd, or managed
 * memory), else nonzero with why in err (host memory, another GPU's). */
int kc_device_pointer(kc_ctx *c, const void *p, char *err, size_t errlen);
/* Fills bytes with a byte value (tests poison outputs with 0xff = NaN). */
int kc_memset(kc_ctx *c, void *p, int value, size_t bytes);

/* y[m, n] = x[m, k] . w[n, k]^T (+ b[n]); through cuBLASLt with the bias as
 * its epilogue. */
int kc_linear(kc_ctx *c, enum kc_dtype t, const void *x, const void *w, const void *b,
	      void *y, int64_t m, int64_t k, int64_t n);
/* kc_linear, then kc_gelu (erf or tanh form) or kc_silu on y in place:
 * the activation sees the sum rounded to the storage dtype, as when the two
 * run apart (k_linear_act_pool's meaning). */
int kc_linear_act(kc_ctx *c, enum kc_dtype t, const void *x, const void *w, const void *b,
		  void *y, int64_t m, int64_t k, int64_t n, enum kc_act act);
int kc_layer_norm(kc_ctx *c, enum kc_dtype t, const void *x, void *y, int64_t rows,
		  int64_t n, float eps, const void *w, const void *b);
int kc_rms_norm(kc_ctx *c, enum kc_dtype t, const void *x, void *y, int64_t rows, int64_t n,
		int64_t group, float eps, const void *w);
/* A norm whose rows are split across ranks (k_norm_stats, k_norm_apply;
 * mode as enum k_norm_stat: 0 sum, 1 centred pair, 2 squares). */
int kc_norm_stats(kc_ctx *c, enum kc_dtype t, const void *x, const void *sums, void *out,
		  int64_t rows, int64_t n, int64_t N, int mode);
int kc_norm_apply(kc_ctx *c, enum kc_dtype t, const void *x, void *y, int64_t rows, int64_t n,
		  int64_t N, float eps, const void *s1, const void *s2, const void *w,
		  const void *b);
int kc_gelu(kc_ctx *c, enum kc_dtype t, const void *x, void *y, int64_t n, bool tanh_approx);
/* graph/ops.def's UNARY ops: y = op(x) for n elements, as k_<op> computes
 * it (kc_silu, kc_tanh, ...; pointwise.cu). */
#define OP(id, glo, ghi, fl, sig)
#define UNARY(id, sig) int kc_##id(kc_ctx *c, enum kc_dtype t, const void *x, void *y, int64_t n);
#include "graph/ops.def"
#undef UNARY
#undef OP
int kc_binary(kc_ctx *c, enum kc_dtype t, enum kc_binop op, const void *a,
	      const int64_t *ashape, const void *b, const int64_t *bshape, void *out,
	      const int64_t *oshape, int nd);
int kc_modulate(kc_ctx *c, enum kc_dtype t, const void *x, const void *shift,
		const void *scale, void *y, int64_t B, int64_t S, int64_t H, int64_t s_stride);
/* rows x cols elements of elem_bytes each between strided 2-D views. */
int kc_copy2d(kc_ctx *c, size_t elem_bytes, void *dst, int64_t dst_stride, const void *src,
	      int64_t src_stride, int64_t rows, int64_t cols);
/* rows x cols elements of a strided view (dtype t) set to value rounded to
 * t, to nearest even (k_fill2d; pad's constant). */
int kc_fill2d(kc_ctx *c, enum kc_dtype t, void *dst, int64_t dst_stride, int64_t rows,
	      int64_t cols, float value);
int kc_rope(kc_ctx *c, enum kc_dtype t, const void *x, int64_t x_stride, const void *cos,
	    const void *sin, void *y, int64_t y_stride, int64_t B, int64_t S, int64_t heads,
	    int64_t D);
/* k_rope_half: rotate_half over the R leading channels of each head of D
 * (cos/sin [S, R]), the rest copied; per_head (R = D): cos/sin [S, heads *
 * R / 2], each head's own columns for both halves (rope.cu). */
int kc_rope_half(kc_ctx *c, enum kc_dtype t, const void *x, int64_t x_stride, const void *cos,
		 const void *sin, void *y, int64_t y_stride, int64_t B, int64_t S, int64_t heads,
		 int64_t D, int64_t R, bool per_head);
/* k_index_rows on elements of elem_bytes, the index's n values in dtype t
 * (index.cu): of duplicate scatter indices one row stays, which one is
 * unspecified (torch's index_copy says the same). */
int kc_index_rows(kc_ctx *c, enum kc_dtype t, size_t elem_bytes, void *dst, int64_t dst_rows,
		  const void *src, int64_t src_rows, const void *index, int64_t n, int64_t outer,
		  int64_t inner, bool scatter);
/* Bytes of device workspace kc_attention needs (may be 0). */
size_t kc_attention_workspace(enum kc_dtype t, int64_t B, int64_t Sq, int64_t Skv, int64_t H,
			      int64_t D, int64_t Dv);
/* Non-causal SDPA, scale 1/sqrt(D); lse [B, H, Sq] float32 or NULL. The
 * same layouts as k_attention (q/k/v row strides; out contiguous). mask
 * [B, Skv] contiguous in dtype t, or NULL: k_attention's key-padding mask
 * (key j of batch b left out where mask[b, j] == 0; a row with every key
 * left out gives zeros and lse -inf). A masked call always runs the own
 * kernel, never cuDNN (attention.cu). */
int kc_attention(kc_ctx *c, enum kc_dtype t, const void *q, int64_t q_stride, const void *k,
		 int64_t k_stride, const void *v, int64_t v_stride, const void *mask, void *out,
		 float *lse, int64_t B, int64_t Sq, int64_t Skv, int64_t H, int64_t D, int64_t Dv,
		 void *workspace);
/* Ring attention's merge (k_lse_merge); out/out_blk in dtype t, lse float32. */
int kc_lse_merge(kc_ctx *c, enum kc_dtype t, void *out, float *lse, const void *out_blk,
		 const float *lse_blk, int64_t B, int64_t Sq, int64_t H, int64_t Dv);
/* The same with the accumulator (out) in dtype acc: t, or float32 over a
 * narrower out_blk (ring attention's convert_to_fp32). */
int kc_lse_merge_acc(kc_ctx *c, enum kc_dtype acc, enum kc_dtype t, void *out, float *lse,
		     const void *out_blk, const float *lse_blk, int64_t B, int64_t Sq, int64_t H,
		     int64_t Dv);

/* The embeddings (kernels/cpu/kernels.h: k_timestep_embedding ...
 * k_unpatchify), with timesteps, positions and tables in dtype t and the
 * same arithmetic as the CPU's (embed.cu, rope.cu), so float32 results agree with
 * the CPU's bit for bit; axes_dim is a host array of at most 8. t_f32: ts
 * is float32 whatever t (runtime/device.h). */
int kc_timestep_embedding(kc_ctx *c, enum kc_dtype t, const void *ts, void *y, int64_t n,
			  int64_t dim, bool flip, double shift, double scale, double max_period,
			  double input_scale, bool input_scale_f32, bool t_f32);
/* rope_freqs' positions: ids (KC_POS_IDS), or computed in float32 in the
 * kernel as k_grid_ids (F, H, W, center) or k_text_ids (first) write them,
 * ids then unused (NULL). */
enum kc_pos_kind { KC_POS_IDS, KC_POS_GRID, KC_POS_TEXT };
struct kc_positions {
	enum kc_pos_kind kind;
	bool center;
	int64_t F, H, W, first;
};
int kc_rope_freqs(kc_ctx *c, enum kc_dtype t, const void *ids, const struct kc_positions *pos,
		  void *y, int64_t rows, int64_t naxes, const int64_t *axes_dim, double theta,
		  bool sine, bool f64);
/* k_ltx_rope_freqs: ids [rows, 3], the table [rows, dim], both in dtype t;
 * scale a host array of 3 */
int kc_ltx_rope_freqs(kc_ctx *c, enum kc_dtype t, const void *ids, void *y, int64_t rows,
		      int64_t dim, const double *scale, int64_t patch_t, int64_t patch,
		      double theta, bool sine);
/* k_ltx2_rope_freqs (kernels/cpu/kernels.h), the table [rows, dim] (split:
 * [rows, dim / 2]) of grid rows lo .. lo + rows in dtype t */
struct kc_ltx2_rope {
	int64_t dim, axes, height, width, patch_t, patch, scale_t, scale_s, causal_offset;
	int64_t hop_length, base_t, base_s;
	double time_div, theta;
	bool audio, f64, split;
};
int kc_ltx2_rope_freqs(kc_ctx *c, enum kc_dtype t, const struct kc_ltx2_rope *p, void *y,
		       int64_t lo, int64_t rows, bool sine);
int kc_grid_ids(kc_ctx *c, enum kc_dtype t, void *y, int64_t F, int64_t H, int64_t W,
		bool center);
int kc_text_ids(kc_ctx *c, enum kc_dtype t, void *y, int64_t length, int64_t first,
		int64_t axes);
int kc_patchify(kc_ctx *c, enum kc_dtype t, const void *x, void *y, int64_t B, int64_t C,
		int64_t F, int64_t H, int64_t W, int64_t pt, int64_t ph, int64_t pw);
int kc_unpatchify(kc_ctx *c, enum kc_dtype t, const void *x, void *y, int64_t B, int64_t C,
		  int64_t F, int64_t H, int64_t W, int64_t pt, int64_t ph, int64_t pw);

#ifdef __cplusplus
}
#endif
#endif
