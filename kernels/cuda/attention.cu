/* attention.cu — non-causal SDPA and ring attention's LSE merge on CUDA
 * (kernels_cuda.h; the semantics of k_attention and k_lse_merge).
 *
 * Two attention kernels:
 *   fast     bf16/f16 with D == Dv in {64, 128}, 16-byte aligned operands:
 *            flash-attention-2 style. One CTA per (query tile of 64 or 128
 *            rows, head, batch); each warp owns 16 query rows. Q and
 *            double-buffered K/V tiles of 64 keys go to shared memory with
 *            cp.async; S = Q K^T and O += P V run on mma.sync m16n8k16 with
 *            f32 accumulation, fragments fetched with ldmatrix; the online
 *            softmax stays in registers, in base 2 (scores prescaled by
 *            log2 e) so each exponential is one exp2f.
 *   generic  everything else (f32 storage, any D, Dv <= 256, any alignment):
 *            16 query rows per CTA, 4 per warp; key tiles of 32 rows in
 *            shared memory as f32; a lane scores one key of the tile, then
 *            the warp's rows accumulate P V with a lane per output column.
 * Both mask keys past Skv with -inf and never write rows past Sq; lse is
 * the natural-log logsumexp of the scaled scores.
 *
 * The key-padding mask ([B, Skv] in the storage dtype, k_attention's
 * meaning) gives a masked key (element 0) the score -inf in either kernel.
 * A row may then see only -inf so far: its running max stays -inf and the
 * exponentials subtract 0 instead (exp2(-inf) = 0, where -inf - -inf would
 * be NaN). A row whose every key is masked ends with a denominator of 0:
 * zeros out and lse -inf, as k_attention gives. Without a mask the max is
 * finite from the first tile on and the guard never changes a value.
 *
 * Neither needs a workspace: kc_attention_workspace is 0. */
#include <climits>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "kernels/cuda/kc_internal.h"

namespace {

constexpr float kLn2 = 0.6931471805599453f;
constexpr float kLog2e = 1.4426950408889634f;

/* ---------------------------------------------------------------------
 * Fast path: tensor-core flash attention.
 * ------------------------------------------------------------------- */

constexpr int kFastBN = 64; /* keys per K/V tile */

__device__ __forceinline__ uint32_t smem_addr(const void *p)
{
	return (uint32_t)__cvta_generic_to_shared(p);
}

/* 16 bytes global -> shared, bypassing L1; src_bytes 0 writes zeros and
 * reads nothing (rows past the end of q/k/v). */
__device__ __forceinline__ void cp_async16(void *dst, const void *src, int src_bytes)
{
	asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)),
		     "l"(src), "r"(src_bytes)
		     : "memory");
}

__device__ __forceinline__ void cp_async_commit()
{
	asm volatile("cp.async.commit_group;\n" ::: "memory");
}

template <int N> __device__ __forceinline__ void cp_async_wait()
{
	asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

/* "memory": the shared tiles these read are written by cp.async and
 * ordered by barriers; the clobber keeps the compiler from moving the reads
 * across them. */
__device__ __forceinline__ void ldmatrix_x4(uint32_t r[4], const void *p)
{
	asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
		     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
		     : "r"(smem_addr(p))
		     : "memory");
}

__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t r[4], const void *p)
{
	asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
		     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
		     : "r"(smem_addr(p))
		     : "memory");
}

/* d[16x8] += a[16x16] b[16x8], f32 accumulators. */
template <typename T> __device__ __forceinline__ void mma16816(float d[4], const uint32_t a[4],
							       uint32_t b0, uint32_t b1);
template <>
__device__ __forceinline__ void mma16816<__nv_bfloat16>(float d[4], const uint32_t a[4],
							 uint32_t b0, uint32_t b1)
{
	asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
		     "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
		     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
		     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
template <>
__device__ __forceinline__ void mma16816<__half>(float d[4], const uint32_t a[4], uint32_t b0,
						  uint32_t b1)
{
	asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
		     "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
		     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
		     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* Two floats as a packed pair of T: lo in the low half (the lower column of
 * an mma fragment, the lower address in memory). */
template <typename T> __device__ __forceinline__ uint32_t pack2(float lo, float hi);
template <> __device__ __forceinline__ uint32_t pack2<__nv_bfloat16>(float lo, float hi)
{
	__nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
	return *reinterpret_cast<uint32_t *>(&v);
}
template <> __device__ __forceinline__ uint32_t pack2<__half>(float lo, float hi)
{
	__half2 v = __floats2half2_rn(lo, hi);
	return *reinterpret_cast<uint32_t *>(&v);
}

/* Shared tiles are rows of D elements in 16-byte chunks; chunk c of row r is
 * stored at c ^ (r & 7). ldmatrix reads one chunk from each of 8
 * consecutive rows, which the XOR spreads over all 32 banks. */
template <int D> __device__ __forceinline__ int swz(int r, int c)
{
	return r * D + ((c ^ (r & 7)) << 3);
}

/* Rows [row0, row0 + ROWS) of one head (src: its first row, `stride`
 * elements apart) into a swizzled tile; rows >= nrows become zeros, so
 * padded keys score 0 before masking and padded values add nothing. */
template <typename T, int ROWS, int D, int NT>
__device__ __forceinline__ void load_tile(T *tile, const T *src, int64_t stride, int row0,
					  int nrows, int tid)
{
	constexpr int CPR = D / 8; /* 16-byte chunks per row */
#pragma unroll
	for (int i = tid; i < ROWS * CPR; i += NT) {
		int r = i / CPR, c = i % CPR, gr = row0 + r;
		bool ok = gr < nrows;
		/* a row that exists, so the (unread) address stays valid */
		const T *g = src + (int64_t)(ok ? gr : 0) * stride + c * 8;

		cp_async16(tile + swz<D>(r, c), g, ok ? 16 : 0);
	}
}

template <typename T, int D, int BM>
__global__ void __launch_bounds__(BM * 2)
attn_fast_kernel(const T *__restrict__ q, int64_t q_stride, const T *__restrict__ k,
		 int64_t k_stride, const T *__restrict__ v, int64_t v_stride,
		 const T *__restrict__ mask, T *__restrict__ out, float *__restrict__ lse, int Sq,
		 int Skv, int H, int ntiles, float scale_log2)
{
	constexpr int NT = BM * 2; /* BM / 16 warps */
	constexpr int BN = kFastBN;
	extern __shared__ __align__(16) unsigned char smem_raw[];
	T *sq = reinterpret_cast<T *>(smem_raw);
	T *sk = sq + BM * D; /* two K tiles, then two V tiles */
	T *sv = sk + 2 * BN * D;

	const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
	const int g = lane >> 2, t = lane & 3; /* mma fragment row / column pair */
	const int tile = (int)(blockIdx.x % (unsigned)ntiles);
	const int bh = (int)(blockIdx.x / (unsigned)ntiles);
	const int h = bh % H, b = bh / H;
	const int q0 = tile * BM;

	const T *qh = q + (int64_t)b * Sq * q_stride + (int64_t)h * D;
	const T *kh = k + (int64_t)b * Skv * k_stride + (int64_t)h * D;
	const T *vh = v + (int64_t)b * Skv * v_stride + (int64_t)h * D;
	const T *mb = mask ? mask + (int64_t)b * Skv : nullptr;
	const int nkt = (Skv + BN - 1) / BN;

	load_tile<T, BM, D, NT>(sq, qh, q_stride, q0, Sq, tid);
	load_tile<T, BN, D, NT>(sk, kh, k_stride, 0, Skv, tid);
	load_tile<T, BN, D, NT>(sv, vh, v_stride, 0, Skv, tid);
	cp_async_commit();

	float o[D / 8][4];
#pragma unroll
	for (int n = 0; n < D / 8; n++)
		o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
	/* rows g and g + 8 of the warp's 16: running max (base 2) and this
	 * thread's share of the denominator (the quad is summed at the end) */
	float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f;

	/* ldmatrix lane roles: lanes 8i..8i+7 address the rows of matrix i */
	const int lrow = lane & 7, lmat = lane >> 3;
	const int qrow = warp * 16 + lrow + ((lmat & 1) << 3); /* A: m0 r0-7, m1 r8-15 */
	const int qchk = lmat >> 1;			       /* ... m2/m3 cols 8-15 */
	const int krow = lrow + ((lmat >> 1) << 3);	/* B of S: n-tile pair */
	const int kchk = lmat & 1;
	const int vrow = lrow + ((lmat & 1) << 3); /* B of O, transposed */
	const int vchk = lmat >> 1;

	for (int j = 0; j < nkt; j++) {
		const int buf = j & 1;
		if (j + 1 < nkt) {
			load_tile<T, BN, D, NT>(sk + (buf ^ 1) * BN * D, kh, k_stride, (j + 1) * BN,
						Skv, tid);
			load_tile<T, BN, D, NT>(sv + (buf ^ 1) * BN * D, vh, v_stride, (j + 1) * BN,
						Skv, tid);
			cp_async_commit();
			cp_async_wait<1>();
		} else {
			cp_async_wait<0>();
		}
		__syncthreads();

		const T *kt = sk + buf * BN * D, *vt = sv + buf * BN * D;
		float s[BN / 8][4];
#pragma unroll
		for (int n = 0; n < BN / 8; n++)
			s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
#pragma unroll
		for (int kk = 0; kk < D / 16; kk++) {
			uint32_t a[4];
			ldmatrix_x4(a, sq + swz<D>(qrow, kk * 2 + qchk));
#pragma unroll
			for (int np = 0; np < BN / 16; np++) {
				uint32_t bf[4];
				ldmatrix_x4(bf, kt + swz<D>(np * 16 + krow, kk * 2 + kchk));
				mma16816<T>(s[2 * np], a, bf[0], bf[1]);
				mma16816<T>(s[2 * np + 1], a, bf[2], bf[3]);
			}
		}

		/* scale into base 2; keys past Skv (last tile only) and masked
		 * keys get -inf */
		const int kbase = j * BN + 2 * t;
		const bool tail = (j + 1) * BN > Skv;
		float mx0 = -INFINITY, mx1 = -INFINITY;
#pragma unroll
		for (int n = 0; n < BN / 8; n++) {
#pragma unroll
			for (int e = 0; e < 2; e++) {
				const int key = kbase + n * 8 + e;
				const bool gone = (tail && key >= Skv) ||
						  (mb && key < Skv && kc_to_f32<T>(mb[key]) == 0.0f);
				s[n][e] = gone ? -INFINITY : s[n][e] * scale_log2;
				s[n][e + 2] = gone ? -INFINITY : s[n][e + 2] * scale_log2;
			}
			mx0 = fmaxf(mx0, fmaxf(s[n][0], s[n][1]));
			mx1 = fmaxf(mx1, fmaxf(s[n][2], s[n][3]));
		}
		/* the quad (t = 0..3) holds one row's 64 scores */
		mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 1));
		mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 2));
		mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 1));
		mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 2));
		/* unmasked, every tile has a valid key (and padded query rows
		 * score 0), so the new max is finite and the first alpha is
		 * exp2(-inf) = 0; a max still -inf (every key so far masked)
		 * subtracts 0 instead (the file's comment) */
		const float mn0 = fmaxf(m0, mx0), mn1 = fmaxf(m1, mx1);
		const float sb0 = mn0 == -INFINITY ? 0.0f : mn0;
		const float sb1 = mn1 == -INFINITY ? 0.0f : mn1;
		const float al0 = exp2f(m0 - sb0), al1 = exp2f(m1 - sb1);
		m0 = mn0;
		m1 = mn1;
		float rs0 = 0.0f, rs1 = 0.0f;
#pragma unroll
		for (int n = 0; n < BN / 8; n++) {
			s[n][0] = exp2f(s[n][0] - sb0);
			s[n][1] = exp2f(s[n][1] - sb0);
			s[n][2] = exp2f(s[n][2] - sb1);
			s[n][3] = exp2f(s[n][3] - sb1);
			rs0 += s[n][0] + s[n][1];
			rs1 += s[n][2] + s[n][3];
		}
		l0 = l0 * al0 + rs0;
		l1 = l1 * al1 + rs1;
#pragma unroll
		for (int n = 0; n < D / 8; n++) {
			o[n][0] *= al0;
			o[n][1] *= al0;
			o[n][2] *= al1;
			o[n][3] *= al1;
		}

		/* O += P V: the S accumulators of n-tiles 2kk, 2kk+1 are exactly
		 * the A fragment of keys 16kk..16kk+15 */
#pragma unroll
		for (int kk = 0; kk < BN / 16; kk++) {
			uint32_t a[4];
			a[0] = pack2<T>(s[2 * kk][0], s[2 * kk][1]);
			a[1] = pack2<T>(s[2 * kk][2], s[2 * kk][3]);
			a[2] = pack2<T>(s[2 * kk + 1][0], s[2 * kk + 1][1]);
			a[3] = pack2<T>(s[2 * kk + 1][2], s[2 * kk + 1][3]);
#pragma unroll
			for (int dp = 0; dp < D / 16; dp++) {
				uint32_t bf[4];
				ldmatrix_x4_trans(bf, vt + swz<D>(kk * 16 + vrow, dp * 2 + vchk));
				mma16816<T>(o[2 * dp], a, bf[0], bf[1]);
				mma16816<T>(o[2 * dp + 1], a, bf[2], bf[3]);
			}
		}
		/* the next iteration's loads overwrite this buffer */
		__syncthreads();
	}

	l0 += __shfl_xor_sync(0xffffffffu, l0, 1);
	l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
	l1 += __shfl_xor_sync(0xffffffffu, l1, 1);
	l1 += __shfl_xor_sync(0xffffffffu, l1, 2);
	/* l == 0: every key masked, zeros out and lse -inf */
	const float inv0 = l0 > 0.0f ? 1.0f / l0 : 0.0f, inv1 = l1 > 0.0f ? 1.0f / l1 : 0.0f;
	const int r0 = q0 + warp * 16 + g, r1 = r0 + 8;
	const int64_t ostride = (int64_t)H * D;
	T *o0 = out + ((int64_t)b * Sq + r0) * ostride + (int64_t)h * D + 2 * t;
	T *o1 = o0 + 8 * ostride;
#pragma unroll
	for (int n = 0; n < D / 8; n++) {
		if (r0 < Sq)
			*reinterpret_cast<uint32_t *>(o0 + n * 8) =
				pack2<T>(o[n][0] * inv0, o[n][1] * inv0);
		if (r1 < Sq)
			*reinterpret_cast<uint32_t *>(o1 + n * 8) =
				pack2<T>(o[n][2] * inv1, o[n][3] * inv1);
	}
	if (lse && t == 0) {
		float *lh = lse + (int64_t)bh * Sq;
		if (r0 < Sq)
			lh[r0] = l0 > 0.0f ? (m0 + log2f(l0)) * kLn2 : -INFINITY;
		if (r1 < Sq)
			lh[r1] = l1 > 0.0f ? (m1 + log2f(l1)) * kLn2 : -INFINITY;
	}
}

template <typename T, int D, int BM> constexpr size_t fast_smem()
{
	return (size_t)(BM + 4 * kFastBN) * D * sizeof(T);
}

template <typename T, int D, int BM>
int launch_fast(kc_ctx *c, const void *q, int64_t qs, const void *k, int64_t ks, const void *v,
		int64_t vs, const void *mask, void *out, float *lse, int64_t B, int64_t Sq,
		int64_t Skv, int64_t H, float scale_log2)
{
	constexpr size_t smem = fast_smem<T, D, BM>();
	const int64_t ntiles = (Sq + BM - 1) / BM;
	const int64_t blocks = ntiles * B * H;

	if (blocks > INT_MAX)
		return (int)cudaErrorInvalidValue;
	cudaError_t e = cudaFuncSetAttribute(attn_fast_kernel<T, D, BM>,
					     cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
	if (e != cudaSuccess)
		return (int)e;
	attn_fast_kernel<T, D, BM><<<(unsigned)blocks, BM * 2, smem, c->stream>>>(
		static_cast<const T *>(q), qs, static_cast<const T *>(k), ks,
		static_cast<const T *>(v), vs, static_cast<const T *>(mask), static_cast<T *>(out),
		lse, (int)Sq, (int)Skv, (int)H, (int)ntiles, scale_log2);
	return kc_launched();
}

/* 128-row tiles halve the K/V traffic per query but need 8 warps of work
 * per CTA; with fewer than a wave of such CTAs, 64-row tiles keep more SMs
 * busy. */
template <typename T, int D>
int dispatch_fast(kc_ctx *c, const void *q, int64_t qs, const void *k, int64_t ks,
		  const void *v, int64_t vs, const void *mask, void *out, float *lse, int64_t B,
		  int64_t Sq, int64_t Skv, int64_t H, float scale_log2, int sms)
{
	if ((Sq + 127) / 128 * B * H >= sms)
		return launch_fast<T, D, 128>(c, q, qs, k, ks, v, vs, mask, out, lse, B, Sq, Skv,
					      H, scale_log2);
	return launch_fast<T, D, 64>(c, q, qs, k, ks, v, vs, mask, out, lse, B, Sq, Skv, H,
				     scale_log2);
}

/* ---------------------------------------------------------------------
 * Generic path.
 * ------------------------------------------------------------------- */

constexpr int kGenWarps = 4;
constexpr int kGenRows = 4; /* query rows per warp */
constexpr int kGenBQ = kGenWarps * kGenRows;
constexpr int kGenBK = 32;			 /* keys per tile: one per lane */
constexpr int kGenMaxD = 256;			 /* D and Dv */
constexpr int kGenCols = kGenMaxD / 32;		 /* output columns per lane */

__host__ __device__ constexpr int gen_kstride(int D)
{
	/* odd, so lane j's row start j * stride falls in bank j * stride % 32,
	 * distinct for the 32 lanes */
	return D | 1;
}

__host__ __device__ constexpr size_t gen_smem(int D, int Dv)
{
	return (size_t)(kGenBQ * D + kGenBK * gen_kstride(D) + kGenBK * Dv) * sizeof(float);
}

template <typename T>
__global__ void __launch_bounds__(kGenWarps * 32)
attn_generic_kernel(const T *__restrict__ q, int64_t q_stride, const T *__restrict__ k,
		    int64_t k_stride, const T *__restrict__ v, int64_t v_stride,
		    const T *__restrict__ mask, T *__restrict__ out, float *__restrict__ lse, int Sq,
		    int Skv, int H, int D, int Dv, int ntiles, float scale_log2)
{
	extern __shared__ __align__(16) unsigned char smem_raw[];
	const int kst = gen_kstride(D);
	float *sq = reinterpret_cast<float *>(smem_raw); /* [BQ][D], prescaled */
	float *sk = sq + kGenBQ * D;			  /* [BK][kst] */
	float *sv = sk + kGenBK * kst;			  /* [BK][Dv] */

	const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
	const int tile = (int)(blockIdx.x % (unsigned)ntiles);
	const int bh = (int)(blockIdx.x / (unsigned)ntiles);
	const int h = bh % H, b = bh / H;
	const int q0 = tile * kGenBQ;

	const T *qh = q + (int64_t)b * Sq * q_stride + (int64_t)h * D;
	const T *kh = k + (int64_t)b * Skv * k_stride + (int64_t)h * D;
	const T *vh = v + (int64_t)b * Skv * v_stride + (int64_t)h * Dv;
	const T *mb = mask ? mask + (int64_t)b * Skv : nullptr;

	for (int i = tid; i < kGenBQ * D; i += kGenWarps * 32) {
		int r = i / D, d = i - r * D;
		sq[i] = q0 + r < Sq ? kc_to_f32<T>(qh[(int64_t)(q0 + r) * q_stride + d]) * scale_log2
				    : 0.0f;
	}

	float m[kGenRows], l[kGenRows], o[kGenRows][kGenCols];
#pragma unroll
	for (int r = 0; r < kGenRows; r++) {
		m[r] = -INFINITY;
		l[r] = 0.0f;
#pragma unroll
		for (int i = 0; i < kGenCols; i++)
			o[r][i] = 0.0f;
	}
	const float *myq = sq + warp * kGenRows * D;

	for (int j0 = 0; j0 < Skv; j0 += kGenBK) {
		const int nk = min(kGenBK, Skv - j0);

		/* keys past Skv are zeros: finite scores (masked below) and
		 * values that are never read */
		for (int i = tid; i < kGenBK * D; i += kGenWarps * 32) {
			int r = i / D, d = i - r * D;
			sk[r * kst + d] =
				r < nk ? kc_to_f32<T>(kh[(int64_t)(j0 + r) * k_stride + d]) : 0.0f;
		}
		for (int i = tid; i < nk * Dv; i += kGenWarps * 32) {
			int r = i / Dv, d = i - r * Dv;
			sv[i] = kc_to_f32<T>(vh[(int64_t)(j0 + r) * v_stride + d]);
		}
		__syncthreads();

		float s[kGenRows];
#pragma unroll
		for (int r = 0; r < kGenRows; r++)
			s[r] = 0.0f;
		const float *kr = sk + lane * kst;
		for (int d = 0; d < D; d++) {
			const float kv = kr[d];
#pragma unroll
			for (int r = 0; r < kGenRows; r++)
				s[r] = fmaf(myq[r * D + d], kv, s[r]);
		}

		/* this lane's key takes part: it exists and is not masked */
		const bool live = lane < nk && (!mb || kc_to_f32<T>(mb[j0 + lane]) != 0.0f);
		float p[kGenRows];
#pragma unroll
		for (int r = 0; r < kGenRows; r++) {
			const float x = live ? s[r] : -INFINITY;
			float mx = x;
#pragma unroll
			for (int off = 16; off > 0; off >>= 1)
				mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
			/* unmasked, lane 0's key always exists: mn is finite; a
			 * max still -inf subtracts 0 (the file's comment) */
			const float mn = fmaxf(m[r], mx);
			const float sb = mn == -INFINITY ? 0.0f : mn;
			const float al = exp2f(m[r] - sb);
			p[r] = exp2f(x - sb);
			float sum = p[r];
#pragma unroll
			for (int off = 16; off > 0; off >>= 1)
				sum += __shfl_xor_sync(0xffffffffu, sum, off);
			l[r] = l[r] * al + sum;
			m[r] = mn;
#pragma unroll
			for (int i = 0; i < kGenCols; i++)
				o[r][i] *= al;
		}

		for (int jj = 0; jj < nk; jj++) {
			const float *vr = sv + jj * Dv;
#pragma unroll
			for (int r = 0; r < kGenRows; r++) {
				const float pj = __shfl_sync(0xffffffffu, p[r], jj);
#pragma unroll
				for (int i = 0; i < kGenCols; i++) {
					const int d = lane + 32 * i;
					if (d < Dv)
						o[r][i] = fmaf(pj, vr[d], o[r][i]);
				}
			}
		}
		/* the next tile's loads overwrite sk and sv */
		__syncthreads();
	}

	const int64_t ostride = (int64_t)H * Dv;
#pragma unroll
	for (int r = 0; r < kGenRows; r++) {
		const int row = q0 + warp * kGenRows + r;
		if (row >= Sq)
			continue;
		/* l == 0: every key masked, zeros out and lse -inf */
		const float inv = l[r] > 0.0f ? 1.0f / l[r] : 0.0f;
		T *orow = out + ((int64_t)b * Sq + row) * ostride + (int64_t)h * Dv;
#pragma unroll
		for (int i = 0; i < kGenCols; i++) {
			const int d = lane + 32 * i;
			if (d < Dv)
				orow[d] = kc_from_f32<T>(o[r][i] * inv);
		}
		if (lse && lane == 0)
			lse[(int64_t)bh * Sq + row] =
				l[r] > 0.0f ? (m[r] + log2f(l[r])) * kLn2 : -INFINITY;
	}
}

template <typename T>
int launch_generic(kc_ctx *c, const void *q, int64_t qs, const void *k, int64_t ks,
		   const void *v, int64_t vs, const void *mask, void *out, float *lse, int64_t B,
		   int64_t Sq, int64_t Skv, int64_t H, int64_t D, int64_t Dv, float scale_log2)
{
	const size_t smem = gen_smem((int)D, (int)Dv);
	const int64_t ntiles = (Sq + kGenBQ - 1) / kGenBQ;
	const int64_t blocks = ntiles * B * H;

	if (blocks > INT_MAX)
		return (int)cudaErrorInvalidValue;
	cudaError_t e = cudaFuncSetAttribute(attn_generic_kernel<T>,
					     cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
	if (e != cudaSuccess)
		return (int)e;
	attn_generic_kernel<T><<<(unsigned)blocks, kGenWarps * 32, smem, c->stream>>>(
		static_cast<const T *>(q), qs, static_cast<const T *>(k), ks,
		static_cast<const T *>(v), vs, static_cast<const T *>(mask), static_cast<T *>(out),
		lse, (int)Sq, (int)Skv, (int)H, (int)D, (int)Dv, (int)ntiles, scale_log2);
	return kc_launched();
}

bool aligned16(const void *p)
{
	return ((uintptr_t)p & 15u) == 0;
}

template <typename T>
int attention_t(kc_ctx *c, const void *q, int64_t qs, const void *k, int64_t ks, const void *v,
		int64_t vs, const void *mask, void *out, float *lse, int64_t B, int64_t Sq,
		int64_t Skv, int64_t H, int64_t D, int64_t Dv, float scale_log2)
{
	if constexpr (sizeof(T) == 2) {
		/* cp.async moves 16-byte chunks of every row; the output is
		 * stored as 4-byte pairs */
		if (D == Dv && (D == 64 || D == 128) && aligned16(q) && aligned16(k) &&
		    aligned16(v) && qs % 8 == 0 && ks % 8 == 0 && vs % 8 == 0 &&
		    ((uintptr_t)out & 3u) == 0) {
			int sms = c->sm_count;
			if (sms <= 0) {
				cudaError_t e = cudaDeviceGetAttribute(
					&sms, cudaDevAttrMultiProcessorCount, c->device);
				if (e != cudaSuccess)
					return (int)e;
			}
			if (D == 64)
				return dispatch_fast<T, 64>(c, q, qs, k, ks, v, vs, mask, out, lse,
							    B, Sq, Skv, H, scale_log2, sms);
			return dispatch_fast<T, 128>(c, q, qs, k, ks, v, vs, mask, out, lse, B,
						     Sq, Skv, H, scale_log2, sms);
		}
	}
	if (D > kGenMaxD || Dv > kGenMaxD)
		return (int)cudaErrorInvalidValue;
	return launch_generic<T>(c, q, qs, k, ks, v, vs, mask, out, lse, B, Sq, Skv, H, D, Dv,
				 scale_log2);
}

/* ---------------------------------------------------------------------
 * Ring merge.
 * ------------------------------------------------------------------- */

/* A group of G lanes (G divides 32) merges one (b, s, h) row of Dv
 * elements, VEC at a time (VEC > 1: 16-byte loads and stores). The group's
 * first lane writes the row's lse after the whole warp has read its own,
 * so no lane sees a half-updated lse; the trip count is the same for every
 * lane of a warp, which keeps __syncwarp legal. */
template <typename T, typename TB, int VEC, int G>
__global__ void lse_merge_kernel(T *__restrict__ out, float *__restrict__ lse,
				 const TB *__restrict__ out_blk, const float *__restrict__ lse_blk,
				 int64_t rows, int64_t Sq, int64_t H, int Dv)
{
	constexpr int PER_WARP = 32 / G;
	const int lane = threadIdx.x & 31, grp = lane / G, gl = lane % G;
	const int64_t warps = (int64_t)gridDim.x * (blockDim.x >> 5);
	const int nvec = Dv / VEC;

	for (int64_t w = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
	     w * PER_WARP < rows; w += warps) {
		const int64_t row = w * PER_WARP + grp; /* (b * Sq + s) * H + h */
		const bool live = row < rows;
		int64_t li = 0;
		float la = 0.0f, lb = -INFINITY;
		if (live) {
			const int64_t hh = row % H, bs = row / H;
			const int64_t s = bs % Sq, b = bs / Sq;
			li = (b * H + hh) * Sq + s;
			la = lse[li];
			lb = lse_blk[li];
		}
		__syncwarp();
		/* an empty block row leaves the accumulator alone; an empty
		 * accumulator row takes the block's as is (0 * garbage could be
		 * NaN, so neither side's out is read when its lse is -inf) */
		if (lb != -INFINITY) {
			float wa = 0.0f, wb = 1.0f, ln = lb;
			if (la != -INFINITY) {
				ln = fmaxf(la, lb) + log1pf(expf(-fabsf(la - lb)));
				wa = expf(la - ln);
				wb = expf(lb - ln);
			}
			T *o = out + row * Dv;
			const TB *ob = out_blk + row * Dv;
			for (int i = gl; i < nvec; i += G) {
				if constexpr (VEC == 1) {
					const float x = kc_to_f32<TB>(ob[i]);
					o[i] = kc_from_f32<T>(la != -INFINITY
								      ? wa * kc_to_f32<T>(o[i]) + wb * x
								      : x);
				} else {
					uint4 vb = reinterpret_cast<const uint4 *>(ob)[i];
					if (la != -INFINITY) {
						uint4 va = reinterpret_cast<const uint4 *>(o)[i];
						T *ea = reinterpret_cast<T *>(&va);
						const T *eb = reinterpret_cast<const T *>(&vb);
#pragma unroll
						for (int e = 0; e < VEC; e++)
							ea[e] = kc_from_f32<T>(
								wa * kc_to_f32<T>(ea[e]) +
								wb * kc_to_f32<T>(eb[e]));
						vb = va;
					}
					reinterpret_cast<uint4 *>(o)[i] = vb;
				}
			}
			if (gl == 0)
				lse[li] = ln;
		}
	}
}

template <typename T, typename TB, int VEC>
int launch_merge_vec(kc_ctx *c, void *out, float *lse, const void *out_blk,
		     const float *lse_blk, int64_t rows, int64_t Sq, int64_t H, int Dv)
{
	constexpr int threads = 256;
	const int nvec = Dv / VEC;
	/* a group as wide as the row's vectors, so short rows don't idle lanes */
	const int G = nvec <= 4 ? 4 : nvec <= 8 ? 8 : nvec <= 16 ? 16 : 32;
	const int64_t warps_needed = (rows * G + 31) / 32;
	int sms = c->sm_count > 0 ? c->sm_count : 132;
	int64_t blocks = (warps_needed + threads / 32 - 1) / (threads / 32);
	/* grid-stride beyond a few waves */
	if (blocks > (int64_t)sms * 32)
		blocks = (int64_t)sms * 32;

	T *o = static_cast<T *>(out);
	const TB *ob = static_cast<const TB *>(out_blk);
	switch (G) {
	case 4:
		lse_merge_kernel<T, TB, VEC, 4><<<(unsigned)blocks, threads, 0, c->stream>>>(
			o, lse, ob, lse_blk, rows, Sq, H, Dv);
		break;
	case 8:
		lse_merge_kernel<T, TB, VEC, 8><<<(unsigned)blocks, threads, 0, c->stream>>>(
			o, lse, ob, lse_blk, rows, Sq, H, Dv);
		break;
	case 16:
		lse_merge_kernel<T, TB, VEC, 16><<<(unsigned)blocks, threads, 0, c->stream>>>(
			o, lse, ob, lse_blk, rows, Sq, H, Dv);
		break;
	default:
		lse_merge_kernel<T, TB, VEC, 32><<<(unsigned)blocks, threads, 0, c->stream>>>(
			o, lse, ob, lse_blk, rows, Sq, H, Dv);
		break;
	}
	return kc_launched();
}

/* out in T, out_blk in TB: the vector path where both are one type, a
 * float32 accumulator over a narrower block element by element. */
template <typename T, typename TB>
int lse_merge_t(kc_ctx *c, void *out, float *lse, const void *out_blk, const float *lse_blk,
		int64_t B, int64_t Sq, int64_t H, int64_t Dv)
{
	constexpr int VEC = 16 / sizeof(T);
	const int64_t rows = B * Sq * H;

	if constexpr (std::is_same<T, TB>::value) {
		if (Dv % VEC == 0 && aligned16(out) && aligned16(out_blk))
			return launch_merge_vec<T, TB, VEC>(c, out, lse, out_blk, lse_blk, rows, Sq,
							    H, (int)Dv);
	}
	return launch_merge_vec<T, TB, 1>(c, out, lse, out_blk, lse_blk, rows, Sq, H, (int)Dv);
}

} // namespace

extern "C" size_t kc_attention_workspace(enum kc_dtype t, int64_t B, int64_t Sq, int64_t Skv,
					 int64_t H, int64_t D, int64_t Dv)
{
	(void)t;
	(void)B;
	(void)Sq;
	(void)Skv;
	(void)H;
	(void)D;
	(void)Dv;
	return 0;
}

/* attention_cudnn.cu: cuDNN's fused attention; 0 when it was enqueued, -1
 * when cuDNN declines (nothing enqueued): this file's kernel runs. */
int kc_cudnn_attention(kc_ctx *c, enum kc_dtype t, const void *q, int64_t q_stride,
		       const void *k, int64_t k_stride, const void *v, int64_t v_stride,
		       void *out, float *lse, int64_t B, int64_t Sq, int64_t Skv, int64_t H,
		       int64_t D, int64_t Dv);

extern "C" int kc_attention(kc_ctx *c, enum kc_dtype t, const void *q, int64_t q_stride,
			    const void *k, int64_t k_stride, const void *v, int64_t v_stride,
			    const void *mask, void *out, float *lse, int64_t B, int64_t Sq,
			    int64_t Skv, int64_t H, int64_t D, int64_t Dv, void *workspace)
{
	(void)workspace;
	if (B < 0 || H < 0 || Sq < 1 || Skv < 1 || D < 1 || Dv < 1 || Sq > INT_MAX ||
	    Skv > INT_MAX || H > INT_MAX || q_stride < H * D || k_stride < H * D ||
	    v_stride < H * Dv)
		return (int)cudaErrorInvalidValue;
	if (B == 0 || H == 0)
		return 0;
	cudaError_t e = cudaSetDevice(c->device);
	if (e != cudaSuccess)
		return (int)e;

	/* A masked call never goes to cuDNN: its padding mask is a sequence
	 * length per batch (trailing keys only), and a key-padding mask may
	 * leave out any keys (Qwen-Image's is arbitrary). */
	if (!mask && kc_cudnn_attention(c, t, q, q_stride, k, k_stride, v, v_stride, out, lse, B,
					Sq, Skv, H, D, Dv) == 0)
		return 0;
	const float scale_log2 = (float)(kLog2e / sqrt((double)D));
	switch (t) {
	case KC_F32:
		return attention_t<float>(c, q, q_stride, k, k_stride, v, v_stride, mask, out, lse,
					  B, Sq, Skv, H, D, Dv, scale_log2);
	case KC_BF16:
		return attention_t<__nv_bfloat16>(c, q, q_stride, k, k_stride, v, v_stride, mask,
						  out, lse, B, Sq, Skv, H, D, Dv, scale_log2);
	case KC_F16:
		return attention_t<__half>(c, q, q_stride, k, k_stride, v, v_stride, mask, out,
					   lse, B, Sq, Skv, H, D, Dv, scale_log2);
	}
	return (int)cudaErrorInvalidValue;
}

extern "C" int kc_lse_merge_acc(kc_ctx *c, enum kc_dtype acc, enum kc_dtype t, void *out,
				float *lse, const void *out_blk, const float *lse_blk, int64_t B,
				int64_t Sq, int64_t H, int64_t Dv)
{
	if (B < 0 || Sq < 0 || H < 0 || Dv < 1 || Dv > INT_MAX || (acc != t && acc != KC_F32))
		return (int)cudaErrorInvalidValue;
	if (B == 0 || Sq == 0 || H == 0)
		return 0;
	cudaError_t e = cudaSetDevice(c->device);
	if (e != cudaSuccess)
		return (int)e;

	switch (t) {
	case KC_F32:
		return lse_merge_t<float, float>(c, out, lse, out_blk, lse_blk, B, Sq, H, Dv);
	case KC_BF16:
		return acc == KC_F32
			       ? lse_merge_t<float, __nv_bfloat16>(c, out, lse, out_blk, lse_blk, B,
								   Sq, H, Dv)
			       : lse_merge_t<__nv_bfloat16, __nv_bfloat16>(c, out, lse, out_blk,
									   lse_blk, B, Sq, H, Dv);
	case KC_F16:
		return acc == KC_F32
			       ? lse_merge_t<float, __half>(c, out, lse, out_blk, lse_blk, B, Sq, H,
							    Dv)
			       : lse_merge_t<__half, __half>(c, out, lse, out_blk, lse_blk, B, Sq, H,
							     Dv);
	}
	return (int)cudaErrorInvalidValue;
}

extern "C" int kc_lse_merge(kc_ctx *c, enum kc_dtype t, void *out, float *lse,
			    const void *out_blk, const float *lse_blk, int64_t B, int64_t Sq,
			    int64_t H, int64_t Dv)
{
	return kc_lse_merge_acc(c, t, t, out, lse, out_blk, lse_blk, B, Sq, H, Dv);
}
