/* device_cuda.c — the CUDA device: a kc_ context (kernels/cuda) per session,
 * device memory from cudaMalloc, every kernel on the context's one stream.
 * Kernels are asynchronous; a launch that fails is reported at once, a
 * kernel that fails at sync(). Forward passes can be captured into a CUDA
 * graph and replayed (the session decides when that is valid). */
#include <stdio.h>
#include <stdlib.h>

#include <cuda_runtime.h>

#include "kernels/cuda/kernels_cuda.h"
#include "runtime/cuda/cuda_api.h"
#include "runtime/device.h"

_Static_assert((int)DTPC_F32 == (int)KC_F32 && (int)DTPC_BF16 == (int)KC_BF16 &&
		       (int)DTPC_F16 == (int)KC_F16, "dtpc_dtype and kc_dtype agree");
_Static_assert((int)K_ACT_GELU == (int)KC_ACT_GELU &&
		       (int)K_ACT_GELU_TANH == (int)KC_ACT_GELU_TANH &&
		       (int)K_ACT_SILU == (int)KC_ACT_SILU, "k_act and kc_act agree");

struct cuda_dev {
	struct dev d;
	kc_ctx *kc;
	enum kc_dtype t; /* every kernel's storage dtype */
	int ordinal;
	cudaGraph_t graph;
	cudaGraphExec_t exec;
};

static struct cuda_dev *cd(struct dev *d)
{
	return (struct cuda_dev *)d;
}

/* Raises a nonzero status's text (graph/error.h); returns the status. */
static int fail(struct dev *d, int st, const char *what)
{
	if (st)
		g_raise(G_ERR_DEVICE, "CUDA %s: %s", what, kc_error_string(st));
	return st;
}

static void cuda_destroy(struct dev *d)
{
	if (cd(d)->exec)
		cudaGraphExecDestroy(cd(d)->exec);
	if (cd(d)->graph)
		cudaGraphDestroy(cd(d)->graph);
	kc_destroy(cd(d)->kc);
	free(d);
}

static void *cuda_alloc(struct dev *d, size_t bytes)
{
	void *p = NULL;
	/* cudaMalloc aligns to 256 bytes: the arena's 64-byte offsets stay aligned */
	int st = kc_alloc(cd(d)->kc, &p, bytes ? bytes : 256);
	if (st) {
		char what[64];
		snprintf(what, sizeof what, "allocation of %zu bytes", bytes);
		fail(d, st, what);
		return NULL;
	}
	return p;
}

static void cuda_free(struct dev *d, void *p)
{
	kc_free(cd(d)->kc, p);
}

static int cuda_upload(struct dev *d, void *dst, const void *src, size_t bytes)
{
	return fail(d, kc_upload(cd(d)->kc, dst, src, bytes), "upload");
}

static int cuda_download(struct dev *d, void *dst, const void *src, size_t bytes)
{
	return fail(d, kc_download(cd(d)->kc, dst, src, bytes), "download");
}

static int cuda_copy(struct dev *d, void *dst, const void *src, size_t bytes)
{
	if (dst == src || !bytes)
		return 0;
	return fail(d, kc_copy(cd(d)->kc, dst, src, bytes), "copy");
}

static int cuda_sync(struct dev *d)
{
	return fail(d, kc_sync(cd(d)->kc), "kernel");
}

static void *cuda_stream(struct dev *d)
{
	return kc_stream(cd(d)->kc);
}

static int cuda_device_pointer(struct dev *d, const void *p)
{
	char why[160];
	if (kc_device_pointer(cd(d)->kc, p, why, sizeof why)) {
		g_raise(G_ERR_INVALID, "%s", why);
		return 1;
	}
	return 0;
}

static int cuda_wait_stream(struct dev *d, void *stream)
{
	return fail(d, kc_wait_stream(cd(d)->kc, stream), "wait on the caller's stream");
}

static int cuda_signal_stream(struct dev *d, void *stream)
{
	return fail(d, kc_signal_stream(cd(d)->kc, stream), "signal the caller's stream");
}

static int cuda_ordinal(struct dev *d)
{
	return cd(d)->ordinal;
}

static int cuda_linear(struct dev *d, const float *x, const float *w, const float *b, float *y,
		       int64_t m, int64_t k, int64_t n)
{
	return fail(d, kc_linear(cd(d)->kc, cd(d)->t, x, w, b, y, m, k, n), "linear");
}

static int cuda_linear_act(struct dev *d, const float *x, const float *w, const float *b,
			   float *y, int64_t m, int64_t k, int64_t n, enum k_act act)
{
	return fail(d, kc_linear_act(cd(d)->kc, cd(d)->t, x, w, b, y, m, k, n, (enum kc_act)act),
		    "linear_act");
}

static int cuda_layer_norm(struct dev *d, const float *x, float *y, int64_t rows, int64_t n,
			   float eps, const float *w, const float *b)
{
	return fail(d, kc_layer_norm(cd(d)->kc, cd(d)->t, x, y, rows, n, eps, w, b), "layer_norm");
}

static int cuda_rms_norm(struct dev *d, const float *x, float *y, int64_t rows, int64_t n,
			 int64_t group, float eps, const float *w)
{
	return fail(d, kc_rms_norm(cd(d)->kc, cd(d)->t, x, y, rows, n, group, eps, w), "rms_norm");
}

static int cuda_norm_stats(struct dev *d, const float *x, const float *sums, float *out,
			   int64_t rows, int64_t n, int64_t N, enum k_norm_stat mode)
{
	return fail(d, kc_norm_stats(cd(d)->kc, cd(d)->t, x, sums, out, rows, n, N, (int)mode),
		    "norm_stats");
}

static int cuda_norm_apply(struct dev *d, const float *x, float *y, int64_t rows, int64_t n,
			   int64_t N, float eps, const float *s1, const float *s2, const float *w,
			   const float *b)
{
	return fail(d, kc_norm_apply(cd(d)->kc, cd(d)->t, x, y, rows, n, N, eps, s1, s2, w, b),
		    "norm_apply");
}

static int cuda_gelu(struct dev *d, const float *x, float *y, int64_t n, bool tanh_approx)
{
	return fail(d, kc_gelu(cd(d)->kc, cd(d)->t, x, y, n, tanh_approx), "gelu");
}

/* ops.def's UNARY ops, by op: their kernels (kernels_cuda.h) and names
 * for the error's text (this library links without the op table) */
static const struct {
	int (*kernel)(kc_ctx *c, enum kc_dtype t, const void *x, void *y, int64_t n);
	const char *name;
} unary_kernels[OP_COUNT] = {
#define OP(id, glo, ghi, fl, sig)
#define UNARY(id, sig) [OP_##id] = { kc_##id, #id },
#include "graph/ops.def"
#undef UNARY
#undef OP
};

static int cuda_unary(struct dev *d, enum op_kind op, const float *x, float *y, int64_t n)
{
	if ((unsigned)op >= OP_COUNT || !unary_kernels[op].kernel)
		return fail(d, (int)cudaErrorInvalidValue, "unary");
	return fail(d, unary_kernels[op].kernel(cd(d)->kc, cd(d)->t, x, y, n),
		    unary_kernels[op].name);
}

static int cuda_binary(struct dev *d, enum k_binop op, const float *a, const int64_t *ashape,
		       const float *b, const int64_t *bshape, float *out, const int64_t *oshape,
		       int nd)
{
	return fail(d, kc_binary(cd(d)->kc, cd(d)->t, op == K_ADD ? KC_ADD : KC_MUL, a, ashape, b,
				 bshape, out, oshape, nd), "add/mul");
}

static int cuda_modulate(struct dev *d, const float *x, const float *shift, const float *scale,
			 float *y, int64_t B, int64_t S, int64_t H, int64_t s_stride)
{
	return fail(d, kc_modulate(cd(d)->kc, cd(d)->t, x, shift, scale, y, B, S, H, s_stride),
		    "modulate");
}

static int cuda_copy2d(struct dev *d, float *dst, int64_t dst_stride, const float *src,
		       int64_t src_stride, int64_t rows, int64_t cols)
{
	return fail(d, kc_copy2d(cd(d)->kc, kc_dtype_size(cd(d)->t), dst, dst_stride, src,
				 src_stride, rows, cols), "copy2d");
}

static int cuda_fill2d(struct dev *d, float *dst, int64_t dst_stride, int64_t rows,
		       int64_t cols, float value)
{
	return fail(d, kc_fill2d(cd(d)->kc, cd(d)->t, dst, dst_stride, rows, cols, value),
		    "fill2d");
}

static int cuda_rope(struct dev *d, const float *x, int64_t x_stride, const float *cos,
		     const float *sin, float *y, int64_t y_stride, int64_t B, int64_t S,
		     int64_t heads, int64_t D)
{
	return fail(d, kc_rope(cd(d)->kc, cd(d)->t, x, x_stride, cos, sin, y, y_stride, B, S, heads,
			       D), "rope");
}

static int cuda_rope_half(struct dev *d, const float *x, int64_t x_stride, const float *cos,
			  const float *sin, float *y, int64_t y_stride, int64_t B, int64_t S,
			  int64_t heads, int64_t D, int64_t R, bool per_head)
{
	return fail(d, kc_rope_half(cd(d)->kc, cd(d)->t, x, x_stride, cos, sin, y, y_stride, B, S,
				    heads, D, R, per_head), "rope_half");
}

static int cuda_index_rows(struct dev *d, float *dst, int64_t dst_rows, const float *src,
			   int64_t src_rows, const float *index, int64_t n, int64_t outer,
			   int64_t inner, bool scatter)
{
	return fail(d, kc_index_rows(cd(d)->kc, cd(d)->t, kc_dtype_size(cd(d)->t), dst, dst_rows,
				     src, src_rows, index, n, outer, inner, scatter),
		    "index_rows");
}

static size_t cuda_attention_workspace(struct dev *d, int64_t B, int64_t Sq, int64_t Skv,
				       int64_t H, int64_t D, int64_t Dv)
{
	return kc_attention_workspace(cd(d)->t, B, Sq, Skv, H, D, Dv);
}

static int cuda_attention(struct dev *d, const float *q, int64_t q_stride, const float *k,
			  int64_t k_stride, const float *v, int64_t v_stride, const float *mask,
			  float *out, float *lse, int64_t B, int64_t Sq, int64_t Skv, int64_t H,
			  int64_t D, int64_t Dv, void *workspace)
{
	return fail(d, kc_attention(cd(d)->kc, cd(d)->t, q, q_stride, k, k_stride, v, v_stride,
				    mask, out, lse, B, Sq, Skv, H, D, Dv, workspace), "attention");
}

static int cuda_lse_merge(struct dev *d, float *out, dtpc_dtype acc, float *lse,
			  const float *out_blk, const float *lse_blk, int64_t B, int64_t Sq,
			  int64_t H, int64_t Dv)
{
	return fail(d, kc_lse_merge_acc(cd(d)->kc, (enum kc_dtype)acc, cd(d)->t, out, lse, out_blk,
					lse_blk, B, Sq, H, Dv),
		    "lse_merge");
}

static int cuda_timestep_embedding(struct dev *d, const float *t, float *y, int64_t n,
				   int64_t dim, bool flip, double shift, double scale,
				   double max_period, double input_scale, bool input_scale_f32,
				   bool t_f32)
{
	return fail(d, kc_timestep_embedding(cd(d)->kc, cd(d)->t, t, y, n, dim, flip, shift, scale,
					     max_period, input_scale, input_scale_f32, t_f32),
		    "timestep_embedding");
}

static int cuda_rope_freqs(struct dev *d, const float *ids, const struct dev_positions *pos,
			   float *y, int64_t rows, int64_t naxes, const int64_t *axes_dim,
			   double theta, bool sine, bool f64)
{
	struct kc_positions p = { 0 };

	if (!ids)
		p = (struct kc_positions){ pos->grid ? KC_POS_GRID : KC_POS_TEXT, pos->center,
					   pos->F, pos->H, pos->W, pos->first };
	return fail(d, kc_rope_freqs(cd(d)->kc, cd(d)->t, ids, &p, y, rows, naxes, axes_dim,
				     theta, sine, f64), "rope_freqs");
}

static int cuda_ltx_rope_freqs(struct dev *d, const float *ids, float *y, int64_t rows,
			       int64_t dim, const double scale[3], int64_t patch_t, int64_t patch,
			       double theta, bool sine)
{
	return fail(d, kc_ltx_rope_freqs(cd(d)->kc, cd(d)->t, ids, y, rows, dim, scale, patch_t,
					 patch, theta, sine), "ltx_rope_freqs");
}

static int cuda_ltx2_rope_freqs(struct dev *d, const struct k_ltx2_rope *p, float *y, int64_t lo,
				int64_t rows, bool sine)
{
	const struct kc_ltx2_rope k = { p->dim, p->axes, p->height, p->width, p->patch_t, p->patch,
					p->scale_t, p->scale_s, p->causal_offset, p->hop_length,
					p->base_t, p->base_s, p->time_div, p->theta, p->audio,
					p->f64, p->split };
	return fail(d, kc_ltx2_rope_freqs(cd(d)->kc, cd(d)->t, &k, y, lo, rows, sine),
		    "ltx2_rope_freqs");
}

static int cuda_grid_ids(struct dev *d, float *y, int64_t F, int64_t H, int64_t W, bool center)
{
	return fail(d, kc_grid_ids(cd(d)->kc, cd(d)->t, y, F, H, W, center), "grid_ids");
}

static int cuda_text_ids(struct dev *d, float *y, int64_t length, int64_t first, int64_t axes)
{
	return fail(d, kc_text_ids(cd(d)->kc, cd(d)->t, y, length, first, axes), "text_ids");
}

static int cuda_patchify(struct dev *d, const float *x, float *y, int64_t B, int64_t C,
			 int64_t F, int64_t H, int64_t W, int64_t pt, int64_t ph, int64_t pw)
{
	return fail(d, kc_patchify(cd(d)->kc, cd(d)->t, x, y, B, C, F, H, W, pt, ph, pw),
		    "patchify");
}

static int cuda_unpatchify(struct dev *d, const float *x, float *y, int64_t B, int64_t C,
			   int64_t F, int64_t H, int64_t W, int64_t pt, int64_t ph, int64_t pw)
{
	return fail(d, kc_unpatchify(cd(d)->kc, cd(d)->t, x, y, B, C, F, H, W, pt, ph, pw),
		    "unpatchify");
}

/* dtpc_dtype and kc_dtype number the dtypes alike */
static int cuda_set_dtype(struct dev *d, dtpc_dtype t)
{
	cd(d)->t = (enum kc_dtype)t;
	return 0;
}

static int cuda_convert(struct dev *d, void *dst, dtpc_dtype dt, const void *src, dtpc_dtype st,
			int64_t n)
{
	return fail(d, kc_convert(cd(d)->kc, (enum kc_dtype)dt, dst, (enum kc_dtype)st, src, n),
		    "convert");
}

static int cuda_capture_begin(struct dev *d)
{
	cudaStream_t st = kc_stream(cd(d)->kc);
	return fail(d, (int)cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal),
		    "graph capture");
}

static int cuda_capture_end(struct dev *d)
{
	struct cuda_dev *c = cd(d);
	int st = (int)cudaStreamEndCapture(kc_stream(c->kc), &c->graph);
	if (!st)
		st = (int)cudaGraphInstantiate(&c->exec, c->graph, 0);
	return fail(d, st, "graph capture");
}

static int cuda_replay(struct dev *d)
{
	return fail(d, (int)cudaGraphLaunch(cd(d)->exec, kc_stream(cd(d)->kc)), "graph launch");
}

static const struct dev_ops cuda_ops = {
	.name = "cuda",
	.host_memory = false,
	.graphs = true,
	.masked_attention = true,
	.destroy = cuda_destroy,
	.alloc = cuda_alloc,
	.free = cuda_free,
	.upload = cuda_upload,
	.download = cuda_download,
	.copy = cuda_copy,
	.sync = cuda_sync,
	.stream = cuda_stream,
	.device_pointer = cuda_device_pointer,
	.wait_stream = cuda_wait_stream,
	.signal_stream = cuda_signal_stream,
	.ordinal = cuda_ordinal,
	.linear = cuda_linear,
	.linear_act = cuda_linear_act,
	.layer_norm = cuda_layer_norm,
	.rms_norm = cuda_rms_norm,
	.norm_stats = cuda_norm_stats,
	.norm_apply = cuda_norm_apply,
	.gelu = cuda_gelu,
	.unary = cuda_unary,
	.binary = cuda_binary,
	.modulate = cuda_modulate,
	.copy2d = cuda_copy2d,
	.fill2d = cuda_fill2d,
	.rope = cuda_rope,
	.rope_half = cuda_rope_half,
	.index_rows = cuda_index_rows,
	.attention_workspace = cuda_attention_workspace,
	.attention = cuda_attention,
	.lse_merge = cuda_lse_merge,
	.timestep_embedding = cuda_timestep_embedding,
	.rope_freqs = cuda_rope_freqs,
	.ltx_rope_freqs = cuda_ltx_rope_freqs,
	.ltx2_rope_freqs = cuda_ltx2_rope_freqs,
	.grid_ids = cuda_grid_ids,
	.text_ids = cuda_text_ids,
	.patchify = cuda_patchify,
	.unpatchify = cuda_unpatchify,
	.set_dtype = cuda_set_dtype,
	.convert = cuda_convert,
	.capture_begin = cuda_capture_begin,
	.capture_end = cuda_capture_end,
	.replay = cuda_replay,
};

struct dev *cuda_dev_create(int ordinal)
{
	struct cuda_dev *c = calloc(1, sizeof *c);
	if (!c) {
		g_raise(G_ERR_NOMEM, "out of memory");
		return NULL;
	}
	/* the kernels' layer (kernels/cuda) says why in a buffer of its own */
	char why[256];
	if (kc_create(&c->kc, ordinal, why, sizeof why)) {
		g_raise(G_ERR_DEVICE, "%s", why);
		free(c);
		return NULL;
	}
	c->d.ops = &cuda_ops;
	c->t = KC_F32;
	c->ordinal = ordinal;
	return &c->d;
}

int cuda_dev_count(void)
{
	return kc_device_count();
}
