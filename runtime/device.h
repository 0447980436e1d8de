/* device.h — the compute devices behind one interface (ggml's backends).
 *
 * A session owns one device. The executor (exec.c) computes only through
 * this table and moves bytes only through its copies, so the same graph runs
 * on every device: the CPU (device_cpu.c, kernels/cpu) and CUDA
 * (runtime/cuda/device_cuda.c, kernels/cuda). Kernels mean exactly what
 * kernels/cpu/kernels.h says, on the device's pointers, with elements of the
 * device's storage dtype (float32 unless set_dtype chose bf16 or f16; the
 * pointers stay typed float * as carriers) and float32 accumulation; the
 * log-sum-exp vectors are float32 always. A device may run kernels asynchronously:
 * a kernel returns 0 when it was accepted, and failures of running kernels
 * surface at sync(). A failing entry raises why (graph/error.h: a status
 * and its text) before it returns nonzero or NULL.
 *
 * Memory: the session's arena, its weights and the attention workspace come
 * from alloc(). Where host_memory is false the host cannot address them:
 * the session keeps a host mirror of the arena for inputs, outputs and
 * collectives that stage through the host (docs/architecture.md). */
#ifndef DTPC_DEVICE_H
#define DTPC_DEVICE_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "graph/error.h"
#include "graph/op_table.h"
#include "kernels/cpu/kernels.h"
#include "runtime/dtpc.h"

struct dev;

/* Positions that rope_freqs computes instead of reading ids: grid_ids'
 * (grid: frames F, height H, width W, center) or text_ids' (first + row on
 * every axis), as k_grid_ids / k_text_ids write them. */
struct dev_positions {
	bool grid, center;
	int64_t F, H, W, first;
};

struct dev_ops {
	const char *name;
	bool host_memory;      /* the host reads and writes device pointers */
	bool graphs;           /* capture_* and replay are implemented */
	/* attention takes a key-padding mask ([B, Skv], storage dtype, 0 masks
	 * a key); a session refuses a graph with a masked attention on a
	 * device without (exec_check) */
	bool masked_attention;
	void (*destroy)(struct dev *d);

	/* memory: alloc returns NULL on failure (raised: why) */
	void *(*alloc)(struct dev *d, size_t bytes);
	void (*free)(struct dev *d, void *p);
	int (*upload)(struct dev *d, void *dst, const void *src, size_t bytes);
	int (*download)(struct dev *d, void *dst, const void *src, size_t bytes);
	int (*copy)(struct dev *d, void *dst, const void *src, size_t bytes);
	int (*sync)(struct dev *d);
	/* Optional: threads the device's kernels may use (CPU), and how many
	 * its next kernel would use. */
	void (*threads)(struct dev *d, int n);
	int (*thread_count)(struct dev *d);
	/* Optional (a device that stores bf16/f16): the storage dtype of every
	 * kernel's data from now on, and conversions between dtypes. */
	int (*set_dtype)(struct dev *d, dtpc_dtype t);
	int (*convert)(struct dev *d, void *dst, dtpc_dtype dt, const void *src, dtpc_dtype st,
		       int64_t n);
	void *(*stream)(struct dev *d); /* what a device-memory comm orders after */
	/* Optional (a device whose memory the host cannot address: the
	 * caller's device pointers and streams, dtpc_session_stream): 0 when p
	 * is memory of this device (else why raised, as DTPC_ERR_INVALID);
	 * the device's stream waits for what the caller's `stream` holds so
	 * far (wait_stream), or that stream for what the device's holds so far
	 * (signal_stream). Asynchronous, as kernels are. */
	int (*device_pointer)(struct dev *d, const void *p);
	int (*wait_stream)(struct dev *d, void *stream);
	int (*signal_stream)(struct dev *d, void *stream);
	/* The device's ordinal among its kind (a GPU's number), or -1. */
	int (*ordinal)(struct dev *d);

	/* kernels (kernels/cpu/kernels.h) */
	int (*linear)(struct dev *d, const float *x, const float *w, const float *b, float *y,
		      int64_t m, int64_t k, int64_t n);
	/* Optional (NULL: the executor runs linear, then gelu or silu on y):
	 * linear followed by the activation, fused. It means exactly this
	 * device's linear then its gelu (erf or tanh) / silu on the output —
	 * the GEMM's float32 sum rounded to the storage dtype, the activation
	 * computed from that value and rounded — so a graph's numbers do not
	 * depend on whether the compiler fused the pair (bit for bit on the
	 * CPU: k_linear_act_pool, k_linear_act_narrow_pool). */
	int (*linear_act)(struct dev *d, const float *x, const float *w, const float *b, float *y,
			  int64_t m, int64_t k, int64_t n, enum k_act act);
	int (*layer_norm)(struct dev *d, const float *x, float *y, int64_t rows, int64_t n,
			  float eps, const float *w, const float *b);
	int (*rms_norm)(struct dev *d, const float *x, float *y, int64_t rows, int64_t n,
			int64_t group, float eps, const float *w);
	/* A norm whose last axis (N wide) is split across ranks (k_norm_stats,
	 * k_norm_apply): the per-row partial sums, and the norm from the
	 * all-reduced ones. The sums are in the storage dtype: one element per
	 * row, two for K_NS_CENTRED. */
	int (*norm_stats)(struct dev *d, const float *x, const float *sums, float *out,
			  int64_t rows, int64_t n, int64_t N, enum k_norm_stat mode);
	int (*norm_apply)(struct dev *d, const float *x, float *y, int64_t rows, int64_t n,
			  int64_t N, float eps, const float *s1, const float *s2, const float *w,
			  const float *b);
	int (*gelu)(struct dev *d, const float *x, float *y, int64_t n, bool tanh_approx);
	/* ops.def's UNARY ops (silu, tanh, ...): y = op(x) for n
	 * elements, by the device's kernel of op (k_<op>, kc_<op>: a table
	 * generated from ops.def); nonzero for an op that is not one. */
	int (*unary)(struct dev *d, enum op_kind op, const float *x, float *y, int64_t n);
	int (*binary)(struct dev *d, enum k_binop op, const float *a, const int64_t *ashape,
		      const float *b, const int64_t *bshape, float *out, const int64_t *oshape,
		      int nd);
	int (*modulate)(struct dev *d, const float *x, const float *shift, const float *scale,
			float *y, int64_t B, int64_t S, int64_t H, int64_t s_stride);
	int (*copy2d)(struct dev *d, float *dst, int64_t dst_stride, const float *src,
		      int64_t src_stride, int64_t rows, int64_t cols);
	/* Optional (pad): rows x cols elements of a strided view set to value
	 * (in the storage dtype, as every kernel's data: rounded to it, to
	 * nearest even); a session refuses a graph with pad on a device
	 * without it (exec_check). */
	int (*fill2d)(struct dev *d, float *dst, int64_t dst_stride, int64_t rows, int64_t cols,
		      float value);
	int (*rope)(struct dev *d, const float *x, int64_t x_stride, const float *cos,
		    const float *sin, float *y, int64_t y_stride, int64_t B, int64_t S,
		    int64_t heads, int64_t D);
	/* Optional (rope's conventions "half" and, per_head with R = D,
	 * "split": k_rope_half, cos/sin [S, R] or [S, heads * R / 2]); a
	 * session refuses such a rope on a device without it (exec_check). */
	int (*rope_half)(struct dev *d, const float *x, int64_t x_stride, const float *cos,
			 const float *sin, float *y, int64_t y_stride, int64_t B, int64_t S,
			 int64_t heads, int64_t D, int64_t R, bool per_head);
	/* Optional (index_select, index_copy: k_index_rows, the index's n
	 * values in the storage dtype); a session refuses those ops on a
	 * device without it. */
	int (*index_rows)(struct dev *d, float *dst, int64_t dst_rows, const float *src,
			  int64_t src_rows, const float *index, int64_t n, int64_t outer,
			  int64_t inner, bool scatter);
	size_t (*attention_workspace)(struct dev *d, int64_t B, int64_t Sq, int64_t Skv,
				      int64_t H, int64_t D, int64_t Dv);
	int (*attention)(struct dev *d, const float *q, int64_t q_stride, const float *k,
			 int64_t k_stride, const float *v, int64_t v_stride, const float *mask,
			 float *out, float *lse, int64_t B, int64_t Sq, int64_t Skv, int64_t H,
			 int64_t D, int64_t Dv, void *workspace);
	/* out (the accumulator) in dtype acc: the storage dtype, or float32
	 * where ring attention merges in float32 (convert_to_fp32) */
	int (*lse_merge)(struct dev *d, float *out, dtpc_dtype acc, float *lse,
			 const float *out_blk, const float *lse_blk, int64_t B, int64_t Sq,
			 int64_t H, int64_t Dv);
	/* the embeddings of kernels.h (k_timestep_embedding ... k_unpatchify);
	 * timesteps and positions are read, and tables written, in the
	 * storage dtype, computed as kernels.h says whatever it is; t_f32:
	 * the timesteps are float32 whatever the storage (an input's values
	 * as bound: session.h's wide), rounded to the storage dtype only
	 * where input_scale is (Flux's `timestep.to(dtype) * 1000`) */
	int (*timestep_embedding)(struct dev *d, const float *t, float *y, int64_t n, int64_t dim,
				  bool flip, double shift, double scale, double max_period,
				  double input_scale, bool input_scale_f32, bool t_f32);
	/* ids NULL: the positions of pos instead, computed in float32 and
	 * never stored (a rope_freqs op the compiler folded a generator into) */
	int (*rope_freqs)(struct dev *d, const float *ids, const struct dev_positions *pos,
			  float *y, int64_t rows, int64_t naxes, const int64_t *axes_dim,
			  double theta, bool sine, bool f64);
	/* k_ltx_rope_freqs: ids [rows, 3] read, the table [rows, dim] written,
	 * in the storage dtype */
	int (*ltx_rope_freqs)(struct dev *d, const float *ids, float *y, int64_t rows,
			      int64_t dim, const double scale[3], int64_t patch_t, int64_t patch,
			      double theta, bool sine);
	/* k_ltx2_rope_freqs: the table [rows, dim] of grid rows lo ..
	 * lo + rows written, in the storage dtype */
	int (*ltx2_rope_freqs)(struct dev *d, const struct k_ltx2_rope *p, float *y, int64_t lo,
			       int64_t rows, bool sine);
	int (*grid_ids)(struct dev *d, float *y, int64_t F, int64_t H, int64_t W, bool center);
	int (*text_ids)(struct dev *d, float *y, int64_t length, int64_t first, int64_t axes);
	int (*patchify)(struct dev *d, const float *x, float *y, int64_t B, int64_t C, int64_t F,
			int64_t H, int64_t W, int64_t pt, int64_t ph, int64_t pw);
	int (*unpatchify)(struct dev *d, const float *x, float *y, int64_t B, int64_t C, int64_t F,
			  int64_t H, int64_t W, int64_t pt, int64_t ph, int64_t pw);

	/* Optional (graphs): record everything enqueued between capture_begin
	 * and capture_end, then run it again with replay. */
	int (*capture_begin)(struct dev *d);
	int (*capture_end)(struct dev *d);
	int (*replay)(struct dev *d);
};

struct dev {
	const struct dev_ops *ops;
};

/* The CPU device: never fails to create. */
struct dev *dev_cpu_create(void);

/* A CUDA device on GPU `ordinal` (NULL with why raised when CUDA is absent
 * from this build, there is no such GPU, or its context cannot be made). */
struct dev *dev_cuda_create(int ordinal);
/* GPUs this build can use (0 without CUDA). */
int dev_cuda_count(void);
/* Why no GPU can be used (no CUDA in this build, dtpc's CUDA library not
 * loadable, or no GPU visible), or NULL when one can. */
const char *dev_cuda_unavailable(void);
#endif
