/* device_cpu.c — the CPU device: host memory and the kernels of kernels/cpu.
 * Every call runs to completion before it returns, so sync() has nothing to
 * wait for and no call can fail except an allocation. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/device.h"

static void cpu_destroy(struct dev *d)
{
	free(d);
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

static int cpu_linear(struct dev *d, const float *x, const float *w, const float *b, float *y,
		      int64_t m, int64_t k, int64_t n)
{
	k_linear(x, w, b, y, m, k, n);
	return 0;
}

static int cpu_layer_norm(struct dev *d, const float *x, float *y, int64_t rows, int64_t n,
			  float eps, const float *w, const float *b)
{
	k_layer_norm(x, y, rows, n, eps, w, b);
	return 0;
}

static int cpu_rms_norm(struct dev *d, const float *x, float *y, int64_t rows, int64_t n,
			int64_t group, float eps, const float *w)
{
	k_rms_norm(x, y, rows, n, group, eps, w);
	return 0;
}

static int cpu_gelu(struct dev *d, const float *x, float *y, int64_t n, bool tanh_approx)
{
	k_gelu(x, y, n, tanh_approx);
	return 0;
}

static int cpu_silu(struct dev *d, const float *x, float *y, int64_t n)
{
	k_silu(x, y, n);
	return 0;
}

static int cpu_binary(struct dev *d, enum k_binop op, const float *a, const int64_t *ashape,
		      const float *b, const int64_t *bshape, float *out, const int64_t *oshape,
		      int nd)
{
	k_binary(op, a, ashape, b, bshape, out, oshape, nd);
	return 0;
}

static int cpu_modulate(struct dev *d, const float *x, const float *shift, const float *scale,
			float *y, int64_t B, int64_t S, int64_t H, int64_t s_stride)
{
	k_modulate(x, shift, scale, y, B, S, H, s_stride);
	return 0;
}

static int cpu_copy2d(struct dev *d, float *dst, int64_t dst_stride, const float *src,
		      int64_t src_stride, int64_t rows, int64_t cols)
{
	k_copy2d(dst, dst_stride, src, src_stride, rows, cols);
	return 0;
}

static int cpu_rope(struct dev *d, const float *x, int64_t x_stride, const float *cos,
		    const float *sin, float *y, int64_t y_stride, int64_t B, int64_t S,
		    int64_t heads, int64_t D)
{
	k_rope(x, x_stride, cos, sin, y, y_stride, B, S, heads, D);
	return 0;
}

static size_t cpu_attention_workspace(struct dev *d, int64_t B, int64_t Sq, int64_t Skv,
				      int64_t H, int64_t D, int64_t Dv)
{
	return k_attention_workspace(Sq, Skv, D, Dv);
}

static int cpu_attention(struct dev *d, const float *q, int64_t q_stride, const float *k,
			 int64_t k_stride, const float *v, int64_t v_stride, float *out,
			 float *lse, int64_t B, int64_t Sq, int64_t Skv, int64_t H, int64_t D,
			 int64_t Dv, void *workspace)
{
	k_attention(q, q_stride, k, k_stride, v, v_stride, out, lse, B, Sq, Skv, H, D, Dv,
		    workspace);
	return 0;
}

static int cpu_lse_merge(struct dev *d, float *out, float *lse, const float *out_blk,
			 const float *lse_blk, int64_t B, int64_t Sq, int64_t H, int64_t Dv)
{
	k_lse_merge(out, lse, out_blk, lse_blk, B, Sq, H, Dv);
	return 0;
}

static const struct dev_ops cpu_ops = {
	.name = "cpu",
	.host_memory = true,
	.destroy = cpu_destroy,
	.error = cpu_error,
	.alloc = cpu_alloc,
	.free = cpu_free,
	.upload = cpu_copy,
	.download = cpu_copy,
	.copy = cpu_copy,
	.sync = cpu_sync,
	.stream = cpu_stream,
	.linear = cpu_linear,
	.layer_norm = cpu_layer_norm,
	.rms_norm = cpu_rms_norm,
	.gelu = cpu_gelu,
	.silu = cpu_silu,
	.binary = cpu_binary,
	.modulate = cpu_modulate,
	.copy2d = cpu_copy2d,
	.rope = cpu_rope,
	.attention_workspace = cpu_attention_workspace,
	.attention = cpu_attention,
	.lse_merge = cpu_lse_merge,
};

struct dev *dev_cpu_create(void)
{
	struct dev *d = malloc(sizeof *d);
	if (d)
		d->ops = &cpu_ops;
	return d;
}

#ifndef DTPC_HAVE_CUDA
struct dev *dev_cuda_create(int ordinal, char *err, size_t errlen)
{
	snprintf(err, errlen, "this build of dtpc has no CUDA device (built without nvcc)");
	return NULL;
}

int dev_cuda_count(void)
{
	return 0;
}
#endif
