/* attention_cudnn.cu — kc_attention through cuDNN's fused flash attention
 * (the second implementation beside attention.cu's own kernel: faster at
 * long sequences, and a reference to compare against).
 *
 * The operation graph is the SDPA pattern cuDNN's runtime fusion engine
 * recognises, built through the C backend API (cudnn_graph.h):
 *
 *   S = Q . K^T          matmul, float accumulation
 *   S = S * scale        pointwise, scale = 1/sqrt(D) passed by value
 *   M = max_j S          reduction to [B, H, Sq, 1]
 *   E = exp(S - M)       pointwise
 *   Z = sum_j E          reduction
 *   stats = M + log(Z)   pointwise: the natural-log log-sum-exp of the
 *                        scaled scores, which is what lse means here
 *   P = E / Z            pointwise, in the storage dtype
 *   O = P . V            matmul
 *
 * Q, K, V and O are 4-D [B, H, S, D] views of the row-major [B, S, H*D]
 * buffers: strides (S*row_stride, D, row_stride, 1); K^T is K's view with
 * the last two dimensions swapped. stats is [B, H, Sq, 1], the layout of
 * lse; with lse NULL it goes to a scratch buffer of the plan.
 *
 * Plans are cached per context, keyed by dtype, sizes and row strides, and
 * never evicted (at most MAX_PLANS; further shapes use the own kernel): a
 * CUDA graph that captured an execution keeps the plan's workspace address,
 * so a plan's buffers live as long as the context. A shape cuDNN cannot
 * plan is cached as declined. Nothing is built during a stream capture.
 *
 * Taken: bf16 and f16 with D and Dv multiples of 8 up to 256, row strides
 * multiples of 8 and every operand 16-byte aligned, where cuDNN builds a
 * plan (on an H200 with cuDNN 9: every such shape tests/gpu/test_cuda_
 * attention tries, D = Dv = 64 / 72 / 128 / 256, D = 128 with Dv = 64,
 * D = 16 with Dv = 24, sequences from 1); anything else runs the own
 * kernel. DTPC_KC_ATTENTION=own never uses cuDNN; =cudnn also notes on
 * stderr, once per shape, where cuDNN declines a shape it could take. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/kc_internal.h"

/* Called by kc_attention (attention.cu) and kc_destroy (context.cu). */
int kc_cudnn_attention(kc_ctx *c, enum kc_dtype t, const void *q, int64_t q_stride,
		       const void *k, int64_t k_stride, const void *v, int64_t v_stride,
		       void *out, float *lse, int64_t B, int64_t Sq, int64_t Skv, int64_t H,
		       int64_t D, int64_t Dv);
void kc_cudnn_release(kc_ctx *c);

#ifndef DTPC_HAVE_CUDNN

/* Built without cuDNN: always declined. */
int kc_cudnn_attention(kc_ctx *, enum kc_dtype, const void *, int64_t, const void *, int64_t,
		       const void *, int64_t, void *, float *, int64_t, int64_t, int64_t, int64_t,
		       int64_t, int64_t)
{
	return -1;
}

void kc_cudnn_release(kc_ctx *)
{
}

#else
#include <cudnn_graph.h>

namespace {

enum { MAX_PLANS = 64, MAX_DESCS = 64, MAX_CFGS = 16 };

/* Tensor ids of the graph (the variant pack names the first six). */
enum {
	U_Q = 1,
	U_KT,
	U_V,
	U_O,
	U_STATS,
	U_SCALE,
	U_S,
	U_SS,
	U_MAX,
	U_SUB,
	U_EXP,
	U_SUM,
	U_LOG,
	U_P
};

/* Two attribute names the 9.x headers mark deprecated but which the 9.x
 * libraries before the deprecation still require; the values are stable. */
const cudnnBackendAttributeName_t ATTR_OPGRAPH_HANDLE = (cudnnBackendAttributeName_t)800;
const cudnnBackendAttributeName_t ATTR_PLAN_HANDLE = (cudnnBackendAttributeName_t)400;

/* all int64_t: no padding, so memcmp compares keys */
struct plan_key {
	int64_t dtype;
	int64_t B, H, Sq, Skv, D, Dv, qs, ks, vs;
};

struct plan {
	plan_key key;
	cudnnBackendDescriptor_t exec; /* NULL: declined */
	cudnnBackendDescriptor_t descs[MAX_DESCS]; /* what exec was built from */
	int ndescs;
	void *ws; /* workspace, ws_bytes */
	int64_t ws_bytes;
	float *stats; /* [B, H, Sq] scratch for lse == NULL */
};

struct dnn_cache {
	kc_ctx *ctx;
	cudnnHandle_t handle;
	bool broken; /* cudnnCreate failed: never again for this context */
	plan plans[MAX_PLANS];
	int nplans;
	dnn_cache *next;
};

pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
dnn_cache *g_caches;

dnn_cache *cache_of(kc_ctx *c, bool create)
{
	dnn_cache *d;

	pthread_mutex_lock(&g_lock);
	for (d = g_caches; d && d->ctx != c; d = d->next)
		;
	if (!d && create && (d = (dnn_cache *)calloc(1, sizeof *d)) != NULL) {
		d->ctx = c;
		d->next = g_caches;
		g_caches = d;
	}
	pthread_mutex_unlock(&g_lock);
	return d;
}

void plan_free(plan *p)
{
	if (p->exec)
		cudnnBackendDestroyDescriptor(p->exec);
	for (int i = p->ndescs - 1; i >= 0; i--)
		cudnnBackendDestroyDescriptor(p->descs[i]);
	if (p->ws)
		cudaFree(p->ws);
	if (p->stats)
		cudaFree(p->stats);
	memset(p, 0, sizeof *p);
}

/* A plan under construction: every descriptor it creates, and the first
 * failure (step names what failed). */
struct builder {
	plan *p;
	cudnnStatus_t st;
	const char *step;
};

cudnnBackendDescriptor_t create(builder *b, cudnnBackendDescriptorType_t type, const char *step)
{
	cudnnBackendDescriptor_t d = NULL;

	if (b->st != CUDNN_STATUS_SUCCESS)
		return NULL;
	if (b->p->ndescs == MAX_DESCS) {
		b->st = CUDNN_STATUS_INTERNAL_ERROR;
		b->step = "descriptor table full";
		return NULL;
	}
	if ((b->st = cudnnBackendCreateDescriptor(type, &d)) != CUDNN_STATUS_SUCCESS) {
		b->step = step;
		return NULL;
	}
	b->p->descs[b->p->ndescs++] = d;
	return d;
}

void set(builder *b, cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t name,
	 cudnnBackendAttributeType_t type, int64_t n, const void *val, const char *step)
{
	if (b->st != CUDNN_STATUS_SUCCESS)
		return;
	if ((b->st = cudnnBackendSetAttribute(d, name, type, n, val)) != CUDNN_STATUS_SUCCESS)
		b->step = step;
}

void finalize(builder *b, cudnnBackendDescriptor_t d, const char *step)
{
	if (b->st != CUDNN_STATUS_SUCCESS)
		return;
	if ((b->st = cudnnBackendFinalize(d)) != CUDNN_STATUS_SUCCESS)
		b->step = step;
}

cudnnBackendDescriptor_t tensor(builder *b, int64_t uid, cudnnDataType_t dt, int64_t d0,
				int64_t d1, int64_t d2, int64_t d3, int64_t s0, int64_t s1,
				int64_t s2, int64_t s3, bool is_virtual, bool by_value)
{
	const int64_t dims[4] = { d0, d1, d2, d3 }, strides[4] = { s0, s1, s2, s3 };
	const int64_t align = 16; /* as cuDNN's frontend sets it, by-value scalars included */
	cudnnBackendDescriptor_t t = create(b, CUDNN_BACKEND_TENSOR_DESCRIPTOR, "tensor");

	set(b, t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &dt, "tensor dtype");
	set(b, t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims, "tensor dims");
	set(b, t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides, "tensor strides");
	set(b, t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid, "tensor id");
	set(b, t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align,
	    "tensor alignment");
	if (is_virtual)
		set(b, t, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &is_virtual,
		    "tensor virtual");
	if (by_value)
		set(b, t, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &by_value,
		    "tensor by value");
	finalize(b, t, "tensor finalize");
	return t;
}

/* y = x (op) bt, or y = op(x) when bt is NULL. */
cudnnBackendDescriptor_t pointwise(builder *b, cudnnPointwiseMode_t mode,
				   cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t bt,
				   cudnnBackendDescriptor_t y)
{
	const cudnnDataType_t prec = CUDNN_DATA_FLOAT;
	cudnnBackendDescriptor_t pw = create(b, CUDNN_BACKEND_POINTWISE_DESCRIPTOR, "pointwise");

	set(b, pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode,
	    "pointwise mode");
	set(b, pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec,
	    "pointwise precision");
	finalize(b, pw, "pointwise finalize");
	cudnnBackendDescriptor_t op =
		create(b, CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, "pointwise op");
	set(b, op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
	    &pw, "pointwise op mode");
	set(b, op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x,
	    "pointwise op x");
	if (bt)
		set(b, op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
		    &bt, "pointwise op b");
	set(b, op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y,
	    "pointwise op y");
	finalize(b, op, "pointwise op finalize");
	return op;
}

cudnnBackendDescriptor_t reduction(builder *b, cudnnReduceTensorOp_t mode,
				   cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t y)
{
	const cudnnDataType_t prec = CUDNN_DATA_FLOAT;
	cudnnBackendDescriptor_t r = create(b, CUDNN_BACKEND_REDUCTION_DESCRIPTOR, "reduction");

	set(b, r, CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &mode,
	    "reduction mode");
	set(b, r, CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &prec,
	    "reduction precision");
	finalize(b, r, "reduction finalize");
	cudnnBackendDescriptor_t op =
		create(b, CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR, "reduction op");
	set(b, op, CUDNN_ATTR_OPERATION_REDUCTION_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &r,
	    "reduction op mode");
	set(b, op, CUDNN_ATTR_OPERATION_REDUCTION_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x,
	    "reduction op x");
	set(b, op, CUDNN_ATTR_OPERATION_REDUCTION_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y,
	    "reduction op y");
	finalize(b, op, "reduction op finalize");
	return op;
}

cudnnBackendDescriptor_t matmul(builder *b, cudnnBackendDescriptor_t a,
				cudnnBackendDescriptor_t bm, cudnnBackendDescriptor_t cm)
{
	const cudnnDataType_t prec = CUDNN_DATA_FLOAT;
	cudnnBackendDescriptor_t m = create(b, CUDNN_BACKEND_MATMUL_DESCRIPTOR, "matmul");

	set(b, m, CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &prec,
	    "matmul precision");
	finalize(b, m, "matmul finalize");
	cudnnBackendDescriptor_t op =
		create(b, CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR, "matmul op");
	set(b, op, CUDNN_ATTR_OPERATION_MATMUL_ADESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &a,
	    "matmul op a");
	set(b, op, CUDNN_ATTR_OPERATION_MATMUL_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &bm,
	    "matmul op b");
	set(b, op, CUDNN_ATTR_OPERATION_MATMUL_CDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cm,
	    "matmul op c");
	set(b, op, CUDNN_ATTR_OPERATION_MATMUL_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &m,
	    "matmul op desc");
	finalize(b, op, "matmul op finalize");
	return op;
}

/* Builds p->exec for p->key (p->exec stays NULL when cuDNN declines);
 * returns the failing step, or NULL. why gets cuDNN's own message. */
const char *build(dnn_cache *d, plan *p, char *why, size_t whylen)
{
	const plan_key &k = p->key;
	const cudnnDataType_t io = k.dtype == KC_BF16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_HALF;
	const cudnnDataType_t f32 = CUDNN_DATA_FLOAT;
	const int64_t B = k.B, H = k.H, Sq = k.Sq, Skv = k.Skv, D = k.D, Dv = k.Dv;
	builder b = { p, CUDNN_STATUS_SUCCESS, NULL };

	why[0] = 0;
	/* inputs and outputs */
	cudnnBackendDescriptor_t tq =
		tensor(&b, U_Q, io, B, H, Sq, D, Sq * k.qs, D, k.qs, 1, false, false);
	cudnnBackendDescriptor_t tkt =
		tensor(&b, U_KT, io, B, H, D, Skv, Skv * k.ks, D, 1, k.ks, false, false);
	cudnnBackendDescriptor_t tv =
		tensor(&b, U_V, io, B, H, Skv, Dv, Skv * k.vs, Dv, k.vs, 1, false, false);
	cudnnBackendDescriptor_t to =
		tensor(&b, U_O, io, B, H, Sq, Dv, Sq * H * Dv, Dv, H * Dv, 1, false, false);
	cudnnBackendDescriptor_t tstats =
		tensor(&b, U_STATS, f32, B, H, Sq, 1, H * Sq, Sq, 1, 1, false, false);
	cudnnBackendDescriptor_t tscale =
		tensor(&b, U_SCALE, f32, 1, 1, 1, 1, 1, 1, 1, 1, false, true);
	/* intermediates: scores [B, H, Sq, Skv] and row vectors [B, H, Sq, 1] */
#define SCORES(uid, dt) \
	tensor(&b, uid, dt, B, H, Sq, Skv, H * Sq * Skv, Sq * Skv, Skv, 1, true, false)
#define ROWS(uid) tensor(&b, uid, f32, B, H, Sq, 1, H * Sq, Sq, 1, 1, true, false)
	cudnnBackendDescriptor_t ts = SCORES(U_S, f32), tss = SCORES(U_SS, f32);
	cudnnBackendDescriptor_t tmax = ROWS(U_MAX), tsub = SCORES(U_SUB, f32);
	cudnnBackendDescriptor_t texp = SCORES(U_EXP, f32), tsum = ROWS(U_SUM);
	cudnnBackendDescriptor_t tlog = ROWS(U_LOG), tp = SCORES(U_P, io);
#undef SCORES
#undef ROWS

	cudnnBackendDescriptor_t ops[10];
	ops[0] = matmul(&b, tq, tkt, ts);
	ops[1] = pointwise(&b, CUDNN_POINTWISE_MUL, ts, tscale, tss);
	ops[2] = reduction(&b, CUDNN_REDUCE_TENSOR_MAX, tss, tmax);
	ops[3] = pointwise(&b, CUDNN_POINTWISE_SUB, tss, tmax, tsub);
	ops[4] = pointwise(&b, CUDNN_POINTWISE_EXP, tsub, NULL, texp);
	ops[5] = reduction(&b, CUDNN_REDUCE_TENSOR_ADD, texp, tsum);
	ops[6] = pointwise(&b, CUDNN_POINTWISE_LOG, tsum, NULL, tlog);
	ops[7] = pointwise(&b, CUDNN_POINTWISE_ADD, tmax, tlog, tstats);
	ops[8] = pointwise(&b, CUDNN_POINTWISE_DIV, texp, tsum, tp);
	ops[9] = matmul(&b, tp, tv, to);

	cudnnBackendDescriptor_t graph =
		create(&b, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, "operation graph");
	set(&b, graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 10, ops,
	    "operation graph ops");
	set(&b, graph, ATTR_OPGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &d->handle,
	    "operation graph handle");
	finalize(&b, graph, "operation graph finalize");

	cudnnBackendDescriptor_t heur =
		create(&b, CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, "heuristics");
	const cudnnBackendHeurMode_t mode = CUDNN_HEUR_MODE_A;
	set(&b, heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
	    &graph, "heuristics graph");
	set(&b, heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode,
	    "heuristics mode");
	finalize(&b, heur, "heuristics finalize");

	int64_t ncfg = 0;
	if (b.st == CUDNN_STATUS_SUCCESS &&
	    (b.st = cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS,
					     CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &ncfg, NULL)) !=
		    CUDNN_STATUS_SUCCESS)
		b.step = "heuristics result count";
	if (b.st == CUDNN_STATUS_SUCCESS && ncfg <= 0) {
		b.st = CUDNN_STATUS_NOT_SUPPORTED;
		b.step = "heuristics: no engine for the graph";
	}
	if (ncfg > MAX_CFGS)
		ncfg = MAX_CFGS;
	cudnnBackendDescriptor_t cfgs[MAX_CFGS];
	for (int64_t i = 0; i < ncfg; i++)
		cfgs[i] = create(&b, CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, "engine config");
	int64_t got = 0;
	if (b.st == CUDNN_STATUS_SUCCESS &&
	    (b.st = cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS,
					     CUDNN_TYPE_BACKEND_DESCRIPTOR, ncfg, &got, cfgs)) !=
		    CUDNN_STATUS_SUCCESS)
		b.step = "heuristics results";

	/* the first configuration that makes a plan */
	for (int64_t i = 0; b.st == CUDNN_STATUS_SUCCESS && i < got && i < ncfg; i++) {
		cudnnBackendDescriptor_t ex = NULL;
		cudnnStatus_t st =
			cudnnBackendCreateDescriptor(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, &ex);

		if (st == CUDNN_STATUS_SUCCESS)
			st = cudnnBackendSetAttribute(ex, ATTR_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1,
						      &d->handle);
		if (st == CUDNN_STATUS_SUCCESS)
			st = cudnnBackendSetAttribute(ex, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG,
						      CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cfgs[i]);
		if (st == CUDNN_STATUS_SUCCESS)
			st = cudnnBackendFinalize(ex);
		int64_t ws = 0, n = 0;
		if (st == CUDNN_STATUS_SUCCESS)
			st = cudnnBackendGetAttribute(ex, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
						      CUDNN_TYPE_INT64, 1, &n, &ws);
		if (st == CUDNN_STATUS_SUCCESS && ws >= 0) {
			p->exec = ex;
			p->ws_bytes = ws;
			break;
		}
		if (ex)
			cudnnBackendDestroyDescriptor(ex);
		if (i + 1 == got || i + 1 == ncfg) {
			b.st = st == CUDNN_STATUS_SUCCESS ? CUDNN_STATUS_INTERNAL_ERROR : st;
			b.step = "execution plan (no engine configuration finalized)";
		}
	}
	if (b.st == CUDNN_STATUS_SUCCESS && !p->exec) {
		b.st = CUDNN_STATUS_NOT_SUPPORTED;
		b.step = "execution plan";
	}
	/* buffers, allocated now: none may be allocated during a capture */
	if (b.st == CUDNN_STATUS_SUCCESS) {
		if ((p->ws_bytes > 0 && cudaMalloc(&p->ws, (size_t)p->ws_bytes) != cudaSuccess) ||
		    cudaMalloc((void **)&p->stats, (size_t)(B * H * Sq) * sizeof(float)) !=
			    cudaSuccess) {
			cudaGetLastError();
			b.st = CUDNN_STATUS_ALLOC_FAILED;
			b.step = "cudaMalloc (workspace, statistics)";
		}
	}
	if (b.st != CUDNN_STATUS_SUCCESS) {
		snprintf(why, whylen, "%s", cudnnGetErrorString(b.st));
		size_t l = strlen(why);
		if (l + 3 < whylen) {
			why[l] = ':';
			why[l + 1] = ' ';
			cudnnGetLastErrorString(why + l + 2, whylen - l - 2);
		}
		/* keep the key, drop the rest: a declined entry */
		plan_key key = p->key;
		plan_free(p);
		p->key = key;
		return b.step;
	}
	return NULL;
}

bool aligned16(const void *p)
{
	return ((uintptr_t)p & 15u) == 0;
}

} // namespace

int kc_cudnn_attention(kc_ctx *c, enum kc_dtype t, const void *q, int64_t q_stride,
		       const void *k, int64_t k_stride, const void *v, int64_t v_stride,
		       void *out, float *lse, int64_t B, int64_t Sq, int64_t Skv, int64_t H,
		       int64_t D, int64_t Dv)
{
	const char *env = getenv("DTPC_KC_ATTENTION");
	const bool forced = env && strcmp(env, "cudnn") == 0;

	if ((env && strcmp(env, "own") == 0) || t == KC_F32)
		return -1;
	/* what the 4-D views and a 16-byte alignment of every operand need */
	if (D % 8 || Dv % 8 || D > 256 || Dv > 256 || q_stride % 8 || k_stride % 8 ||
	    v_stride % 8 || !aligned16(q) || !aligned16(k) || !aligned16(v) || !aligned16(out) ||
	    (lse && !aligned16(lse)))
		return -1;

	dnn_cache *d = cache_of(c, true);
	if (!d || d->broken)
		return -1;
	const plan_key key = { (int64_t)t, B, H, Sq, Skv, D, Dv, q_stride, k_stride, v_stride };
	plan *p = NULL;
	for (int i = 0; i < d->nplans; i++)
		if (memcmp(&d->plans[i].key, &key, sizeof key) == 0) {
			p = &d->plans[i];
			break;
		}
	if (!p) {
		cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;

		/* building allocates and synchronises: never inside a capture */
		if (cudaStreamIsCapturing(c->stream, &cs) != cudaSuccess ||
		    cs != cudaStreamCaptureStatusNone || d->nplans == MAX_PLANS) {
			cudaGetLastError();
			return -1;
		}
		if (!d->handle) {
			if (cudnnCreate(&d->handle) != CUDNN_STATUS_SUCCESS ||
			    cudnnSetStream(d->handle, c->stream) != CUDNN_STATUS_SUCCESS) {
				char msg[256];

				cudnnGetLastErrorString(msg, sizeof msg);
				if (forced)
					fprintf(stderr,
						"kc_attention: cuDNN unavailable (%s); using the "
						"own kernel\n",
						msg);
				if (d->handle)
					cudnnDestroy(d->handle);
				d->handle = NULL;
				d->broken = true;
				cudaGetLastError();
				return -1;
			}
		}
		p = &d->plans[d->nplans++];
		memset(p, 0, sizeof *p);
		p->key = key;
		char why[512];
		const char *step = build(d, p, why, sizeof why);
		cudaGetLastError();
		if (step && forced)
			fprintf(stderr,
				"kc_attention: cuDNN declined %s B=%lld H=%lld Sq=%lld Skv=%lld "
				"D=%lld Dv=%lld at %s: %s; using the own kernel\n",
				t == KC_BF16 ? "bf16" : "f16", (long long)B, (long long)H,
				(long long)Sq, (long long)Skv, (long long)D, (long long)Dv, step,
				why);
	}
	if (!p->exec)
		return -1;

	float scale = (float)(1.0 / sqrt((double)D));
	int64_t uids[6] = { U_Q, U_KT, U_V, U_O, U_STATS, U_SCALE };
	void *ptrs[6] = { const_cast<void *>(q), const_cast<void *>(k), const_cast<void *>(v),
			  out, lse ? (void *)lse : (void *)p->stats, &scale };
	cudnnBackendDescriptor_t pack = NULL;
	cudnnStatus_t st = cudnnBackendCreateDescriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &pack);
	if (st == CUDNN_STATUS_SUCCESS)
		st = cudnnBackendSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS,
					      CUDNN_TYPE_INT64, 6, uids);
	if (st == CUDNN_STATUS_SUCCESS)
		st = cudnnBackendSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS,
					      CUDNN_TYPE_VOID_PTR, 6, ptrs);
	if (st == CUDNN_STATUS_SUCCESS)
		st = cudnnBackendSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE,
					      CUDNN_TYPE_VOID_PTR, 1, &p->ws);
	if (st == CUDNN_STATUS_SUCCESS)
		st = cudnnBackendFinalize(pack);
	if (st == CUDNN_STATUS_SUCCESS)
		st = cudnnBackendExecute(d->handle, p->exec, pack);
	if (pack)
		cudnnBackendDestroyDescriptor(pack);
	if (st != CUDNN_STATUS_SUCCESS) {
		/* nothing usable was enqueued: the own kernel computes it, and
		 * this shape does not come back here */
		if (forced)
			fprintf(stderr, "kc_attention: cuDNN execute failed (%s); using the own "
					"kernel\n",
				cudnnGetErrorString(st));
		cudaGetLastError();
		plan_key k2 = p->key;
		cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
		if (cudaStreamIsCapturing(c->stream, &cs) == cudaSuccess &&
		    cs == cudaStreamCaptureStatusNone) {
			plan_free(p);
			p->key = k2;
		} else {
			/* a capture may hold the plan's buffers: keep them */
			cudnnBackendDestroyDescriptor(p->exec);
			p->exec = NULL;
		}
		cudaGetLastError();
		return -1;
	}
	return 0;
}

void kc_cudnn_release(kc_ctx *c)
{
	dnn_cache *d = NULL, **pp;

	pthread_mutex_lock(&g_lock);
	for (pp = &g_caches; *pp; pp = &(*pp)->next)
		if ((*pp)->ctx == c) {
			d = *pp;
			*pp = d->next;
			break;
		}
	pthread_mutex_unlock(&g_lock);
	if (!d)
		return;
	for (int i = 0; i < d->nplans; i++)
		plan_free(&d->plans[i]);
	if (d->handle)
		cudnnDestroy(d->handle);
	free(d);
	cudaGetLastError();
}
#endif
