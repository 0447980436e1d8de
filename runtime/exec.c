/* exec.c — one graph op on one rank: kernels, layout moves and collectives.
 *
 * Compute and copies go through the session's device (device.h), never to a
 * kernel directly. Collectives take arena memory; where the device's memory
 * is not the host's and the backend cannot take device memory, the bytes a
 * collective sends are downloaded to the arena's host mirror first and what
 * it received is uploaded after (staging).
 *
 * Local shapes come from the graph's patterns (session.c precomputes them).
 * exec_check() runs before the first op, at session creation, and proves for
 * every op that each kernel stays inside its buffers on this rank; exec_op()
 * then runs without re-checking. A graph that passed the loader but whose
 * ops do not fit together is rejected there with the op named, never run. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "runtime/graph_stats.h"
#include "runtime/session.h"

/* ---- shapes ------------------------------------------------------------------ */

static const int64_t *dims(const struct dtpc_session *s, uint32_t t)
{
	return s->dims[t];
}

static int nd(const struct dtpc_session *s, uint32_t t)
{
	return s->g->tensors[t].ndim;
}

static int64_t outer(const struct dtpc_session *s, uint32_t t, int d)
{
	int64_t n = 1;
	for (int i = 0; i < d; i++)
		n *= dims(s, t)[i];
	return n;
}

static int64_t inner(const struct dtpc_session *s, uint32_t t, int d)
{
	int64_t n = 1;
	for (int i = d + 1; i < nd(s, t); i++)
		n *= dims(s, t)[i];
	return n;
}

static uint32_t opnd(const struct dtpc_session *s, const struct g_op *o, int k)
{
	return s->g->operands[o->in0 + (uint32_t)k];
}

/* Sum of a pattern's chunk lengths of group index i over blocks [0, nb). */
static int64_t chunk_prefix(const struct g_graph *g, int32_t p, uint32_t nb, uint32_t i)
{
	int64_t n = 0;
	for (uint32_t b = 0; b < nb; b++)
		n += graph_chunk(g, (uint32_t)p, b, i)->len;
	return n;
}

static int64_t block_size(const struct g_graph *g, int32_t p, uint32_t b)
{
	uint32_t gs = g->groups[g->patterns[p].group].size;
	int64_t n = 0;
	for (uint32_t i = 0; i < gs; i++)
		n += graph_chunk(g, (uint32_t)p, b, i)->len;
	return n;
}

static float *scratch(const struct dtpc_session *s, const struct g_op *o)
{
	return o->scratch >= 0 ? rt_data(s, (uint32_t)o->scratch) : NULL;
}

/* Elements of the scratch in its graph dtype; the session's dtype is that
 * or narrower (dtpc_session_dtype), so as many of its elements fit. */
static int64_t scratch_floats(const struct dtpc_session *s, const struct g_op *o)
{
	return o->scratch >= 0 ? s->numel[o->scratch] : 0;
}

static uint64_t scratch_bytes(const struct dtpc_session *s, const struct g_op *o)
{
	if (o->scratch < 0)
		return 0;
	return (uint64_t)s->numel[o->scratch] *
	       graph_dtype_size(graph_tensor_dtype(s->g, (uint32_t)o->scratch));
}

/* Ring attention merges into a float32 accumulator of its own where the
 * plan says convert_to_fp32 and the storage is narrower. */
static bool ring_fp32_acc(const struct dtpc_session *s, const struct g_op *o)
{
	return (o->flags & G_OF_FP32) && s->dtype != DTPC_F32;
}

static struct comm_tag tag(const struct dtpc_session *s, uint32_t i)
{
	const struct g_op *o = &s->g->ops[i];
	return (struct comm_tag){ i, op_table[o->kind].name };
}

/* The index of op o in the graph. */
static uint32_t op_index(const struct dtpc_session *s, const struct g_op *o)
{
	return (uint32_t)(o - s->g->ops);
}

/* Tensor data are in the session's storage dtype (float32, or bf16/f16 on
 * a device that has them): element e of the data at p, the bytes of n
 * elements, the byte offset b of a buffer. */
static float *el(const struct dtpc_session *s, const float *p, int64_t e)
{
	return (float *)((char *)p + e * (int64_t)s->esize);
}

static size_t bytes(const struct dtpc_session *s, int64_t n)
{
	return (size_t)n * s->esize;
}

static float *at_byte(const float *p, size_t b)
{
	return (float *)((char *)p + b);
}

static dtpc_status dev_fail(const struct dtpc_session *s, const struct g_op *o)
{
	uint32_t i = op_index(s, o);
	return rt_error(DTPC_ERR_DEVICE, "rank %u, op %u (%s %s): %s", s->rank, i,
			op_table[o->kind].name, graph_str(s->g, s->g->tensors[o->out].name),
			s->dv->ops->error(s->dv));
}

/* Runs a device call of op o; a failure returns from the calling function. */
#define DEV(s_, o_, fn, ...)                                                \
	do {                                                                \
		if ((s_)->dv->ops->fn((s_)->dv, __VA_ARGS__))               \
			return dev_fail(s_, o_);                            \
	} while (0)

/* What a collective is given for arena memory p: p itself, or where the
 * session stages, p's place in the host mirror. */
static void *cbuf(const struct dtpc_session *s, const void *p)
{
	if (!s->staged)
		return (void *)p;
	return (char *)s->host + ((const char *)p - (const char *)s->arena);
}

/* Staging: before a collective sends bytes, and after it received them. */
static dtpc_status to_host(const struct dtpc_session *s, const struct g_op *o, const void *p,
			   size_t bytes)
{
	if (s->staged && s->dv->ops->download(s->dv, cbuf(s, p), p, bytes))
		return dev_fail(s, o);
	return DTPC_OK;
}

static dtpc_status to_dev(const struct dtpc_session *s, const struct g_op *o, void *p,
			  size_t bytes)
{
	if (s->staged && s->dv->ops->upload(s->dv, p, cbuf(s, p), bytes))
		return dev_fail(s, o);
	return DTPC_OK;
}

#define TRY(expr)                              \
	do {                                   \
		dtpc_status st_ = (expr);      \
		if (st_)                       \
			return st_;            \
	} while (0)

static dtpc_status comm_fail(const struct dtpc_session *s, uint32_t i)
{
	return rt_error(DTPC_ERR_COMM, "rank %u, op %u (%s %s): %s", s->rank, i,
			op_table[s->g->ops[i].kind].name,
			graph_str(s->g, s->g->tensors[s->g->ops[i].out].name), s->c->error);
}

/* ---- checks ------------------------------------------------------------------ */

__attribute__((format(printf, 3, 4)))
static dtpc_status op_error(uint32_t i, const char *name, const char *fmt, ...)
{
	char msg[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	return rt_error(DTPC_ERR_FORMAT, "graph op %u (%s): %s", i, name, msg);
}

#define REQUIRE(cond, i_, name_, ...)                          \
	do {                                                   \
		if (!(cond))                                   \
			return op_error(i_, name_, __VA_ARGS__); \
	} while (0)

static bool same_dims(const struct dtpc_session *s, uint32_t a, uint32_t b)
{
	if (nd(s, a) != nd(s, b))
		return false;
	for (int d = 0; d < nd(s, a); d++)
		if (dims(s, a)[d] != dims(s, b)[d])
			return false;
	return true;
}

/* The members of a pattern's group must be the op's group (the index the
 * executor uses for chunk lookups is the rank's index in the op's group). */
static bool pattern_on_group(const struct g_graph *g, int32_t p, int32_t group)
{
	return p >= 0 && group >= 0 && (int32_t)g->patterns[p].group == group;
}

/* Right-aligned broadcast of a into out (numpy), with [B, H] read as [B, 1, H]. */
static bool bcast_shape(const struct dtpc_session *s, uint32_t a, uint32_t out, bool bh,
			int64_t *sh)
{
	int n = nd(s, out), na = nd(s, a);
	if (bh && na == 2 && n == 3) {
		sh[0] = dims(s, a)[0];
		sh[1] = 1;
		sh[2] = dims(s, a)[1];
	} else {
		if (na > n)
			return false;
		for (int d = 0; d < n; d++)
			sh[d] = d < n - na ? 1 : dims(s, a)[d - (n - na)];
	}
	for (int d = 0; d < n; d++)
		if (sh[d] != 1 && sh[d] != dims(s, out)[d])
			return false;
	return true;
}

/* A graph that needs what the session's device lacks is refused at session
 * creation, naming the op, rather than failing in its first run. */
static dtpc_status device_can(const struct dtpc_session *s, uint32_t i, bool lacks,
			      const char *what)
{
	if (!lacks)
		return DTPC_OK;
	const struct g_op *o = &s->g->ops[i];
	return rt_error(DTPC_ERR_INVALID, "graph op %u (%s '%s'): the %s device has no %s yet; "
			"run this graph on the cpu device", i, op_table[o->kind].name,
			graph_str(s->g, s->g->tensors[o->out].name), s->dv->ops->name, what);
}

_Static_assert((int)G_NS_SUM == (int)K_NS_SUM && (int)G_NS_CENTRED == (int)K_NS_CENTRED &&
		       (int)G_NS_SQ == (int)K_NS_SQ, "norm_stats modes: graph and kernels agree");

/* Rows of x: its elements over its last axis. */
static int64_t row_count(const struct dtpc_session *s, uint32_t x)
{
	int64_t n = nd(s, x) ? dims(s, x)[nd(s, x) - 1] : 0;
	return n ? s->numel[x] / n : 0;
}

/* A norm whose last axis is split (G_OF_STATS): its weights are this rank's
 * slices, its sums one per row after the weights. */
static dtpc_status check_dist_norm(const struct dtpc_session *s, uint32_t i, const struct g_op *o,
				   int64_t n)
{
	const char *name = op_table[o->kind].name;
	bool ln = o->kind == OP_layer_norm;
	int nw = (o->flags & G_OF_AFFINE) ? (ln ? 2 : 1) : 0, ns = ln ? 2 : 1;
	REQUIRE(o->nin == 1 + nw + ns, i, name, "operands");
	REQUIRE(o->attr[1] >= n && o->eps > 0, i, name, "width %lld of %lld", (long long)n,
		(long long)o->attr[1]);
	for (int k = 1; k <= nw; k++)
		REQUIRE(s->numel[opnd(s, o, k)] == n, i, name, "weight size");
	int64_t rows = row_count(s, opnd(s, o, 0));
	REQUIRE(s->numel[opnd(s, o, 1 + nw)] == rows &&
			(!ln || s->numel[opnd(s, o, 2 + nw)] == 2 * rows), i, name, "sums size");
	return device_can(s, i, s->dv && !s->dv->ops->norm_apply, "distributed norm");
}

/* pad's rows before and after its input on this rank: the whole pads, or
 * along a split dim this rank's chunks of the first and last blocks. */
static void pad_local(const struct dtpc_session *s, const struct g_op *o, int64_t *before,
		      int64_t *after)
{
	const struct g_graph *g = s->g;
	int32_t p = g->tensors[o->out].pattern[o->attr[0]];
	*before = o->attr[1];
	*after = o->attr[2];
	if (p < 0)
		return;
	uint32_t me = graph_group_index(g, g->patterns[p].group, s->rank), nb = g->patterns[p].nblk;
	*before = o->attr[1] ? graph_chunk(g, (uint32_t)p, 0, me)->len : 0;
	*after = o->attr[2] ? graph_chunk(g, (uint32_t)p, nb - 1, me)->len : 0;
}

static dtpc_status check_attention(struct dtpc_session *s, uint32_t i, const struct g_op *o,
				   int64_t kv_rows)
{
	const char *name = op_table[o->kind].name;
	uint32_t q = opnd(s, o, 0), k = opnd(s, o, 1), v = opnd(s, o, 2);
	int64_t D = o->attr[0], Dv = o->attr[1];
	REQUIRE(nd(s, q) == 3 && nd(s, k) == 3 && nd(s, v) == 3 && nd(s, o->out) == 3, i, name,
		"q, k, v and the output must be 3-d");
	REQUIRE(D > 0 && Dv > 0 && dims(s, q)[2] % D == 0, i, name, "bad head dim");
	int64_t H = dims(s, q)[2] / D;
	/* by division: a hostile head dim must not overflow a product */
	REQUIRE(dims(s, k)[2] == dims(s, q)[2] && dims(s, v)[2] % Dv == 0 &&
			dims(s, v)[2] / Dv == H, i, name,
		"k or v width does not match q's %lld heads", (long long)H);
	REQUIRE(dims(s, k)[0] == dims(s, q)[0] && dims(s, v)[0] == dims(s, q)[0] &&
			dims(s, v)[1] == dims(s, k)[1], i, name, "q, k, v batch or kv length differ");
	REQUIRE(dims(s, o->out)[0] == dims(s, q)[0] && dims(s, o->out)[1] == dims(s, q)[1] &&
			dims(s, o->out)[2] == dims(s, v)[2], i, name, "output shape");
	if (o->nin == 4) {
		uint32_t m = opnd(s, o, 3);
		REQUIRE(nd(s, m) == 2 && dims(s, m)[0] == dims(s, q)[0] &&
				dims(s, m)[1] == dims(s, k)[1] &&
				s->g->tensors[m].pattern[1] == s->g->tensors[k].pattern[1], i, name,
			"the mask must be [batch, keys], split like the keys");
		TRY(device_can(s, i, s->dv && !s->dv->ops->masked_attention,
			       "key-padding mask on attention"));
	}
	/* the fuzzer prepares sessions without a device: size for the CPU's */
	size_t ws = s->dv ? s->dv->ops->attention_workspace(s->dv, dims(s, q)[0], dims(s, q)[1],
							     kv_rows, H, D, Dv)
			  : k_attention_workspace(dims(s, q)[1], kv_rows, D, Dv);
	if (ws > s->workspace_bytes)
		s->workspace_bytes = ws;
	return DTPC_OK;
}

dtpc_status exec_check(struct dtpc_session *s, uint32_t i)
{
	const struct g_graph *g = s->g;
	const struct g_op *o = &g->ops[i];
	const char *name = op_table[o->kind].name;
	uint32_t out = o->out, x = o->nin ? opnd(s, o, 0) : 0;
	for (uint32_t k = 0; k < o->nin; k++) {
		uint32_t t = opnd(s, o, (int)k);
		REQUIRE(t != out, i, name, "writes over its own input");
	}
	if (o->scratch >= 0)
		REQUIRE((uint32_t)o->scratch != out, i, name, "scratch is the output");
	switch ((enum op_kind)o->kind) {
	case OP_linear: {
		uint32_t w = opnd(s, o, 1);
		REQUIRE(nd(s, w) == 2 && nd(s, x) >= 1 && nd(s, out) == nd(s, x), i, name, "ranks");
		int64_t K = dims(s, x)[nd(s, x) - 1], N = dims(s, w)[0];
		REQUIRE(dims(s, w)[1] == K, i, name, "input width %lld but the weight has %lld columns",
			(long long)K, (long long)dims(s, w)[1]);
		REQUIRE(dims(s, out)[nd(s, out) - 1] == N && s->numel[out] / (N ? N : 1) ==
				s->numel[x] / (K ? K : 1), i, name, "output shape");
		if (o->flags & G_OF_BIAS)
			REQUIRE(o->nin == 3 && s->numel[opnd(s, o, 2)] == N, i, name, "bias size");
		else
			REQUIRE(o->nin == 2, i, name, "a third operand without the bias flag");
		return DTPC_OK;
	}
	case OP_layer_norm:
	case OP_rms_norm: {
		REQUIRE(same_dims(s, x, out) && nd(s, x) >= 1, i, name, "shapes");
		int64_t n = dims(s, x)[nd(s, x) - 1];
		if (o->flags & G_OF_STATS)
			return check_dist_norm(s, i, o, n);
		int64_t grp = o->kind == OP_rms_norm ? o->attr[0] : n;
		REQUIRE(grp > 0 && n % grp == 0, i, name, "group %lld does not divide %lld",
			(long long)grp, (long long)n);
		REQUIRE(o->eps > 0, i, name, "eps");
		int want = (o->flags & G_OF_AFFINE) ? (o->kind == OP_layer_norm ? 3 : 2) : 1;
		REQUIRE(o->nin == want, i, name, "operands");
		for (int k = 1; k < want; k++)
			REQUIRE(s->numel[opnd(s, o, k)] == grp, i, name, "weight size");
		return DTPC_OK;
	}
	case OP_gelu:
	case OP_silu:
	case OP_reshape:
		REQUIRE(s->numel[x] == s->numel[out], i, name, "element counts differ");
		return DTPC_OK;
	case OP_add:
	case OP_mul: {
		int64_t sh[G_MAX_DIMS];
		REQUIRE(nd(s, out) <= K_MAX_DIMS, i, name, "too many dims");
		for (int k = 0; k < 2; k++)
			REQUIRE(bcast_shape(s, opnd(s, o, k), out, k == 1 && (o->flags & G_OF_BH), sh),
				i, name, "operand %d does not broadcast to the output", k);
		return DTPC_OK;
	}
	case OP_modulate: {
		int64_t sh[G_MAX_DIMS];
		REQUIRE(same_dims(s, x, out) && nd(s, out) <= K_MAX_DIMS, i, name, "shapes");
		for (int k = 1; k < 3; k++)
			REQUIRE(bcast_shape(s, opnd(s, o, k), out, o->flags & G_OF_BH, sh), i, name,
				"shift/scale do not broadcast");
		return DTPC_OK;
	}
	case OP_slice:
	case OP_concat:
	case OP_shard:
	case OP_all_gather: {
		int d = (int)o->attr[0];
		REQUIRE(d >= 0 && d < nd(s, out), i, name, "dim");
		for (uint32_t k = 0; k < o->nin; k++) {
			uint32_t t = opnd(s, o, (int)k);
			REQUIRE(nd(s, t) == nd(s, out), i, name, "ranks differ");
			for (int e = 0; e < nd(s, out); e++)
				REQUIRE(e == d || dims(s, t)[e] == dims(s, out)[e], i, name,
					"dim %d differs", e);
		}
		if (o->kind == OP_concat) {
			int64_t sum = 0;
			for (uint32_t k = 0; k < o->nin; k++)
				sum += dims(s, opnd(s, o, (int)k))[d];
			REQUIRE(sum == dims(s, out)[d], i, name, "sizes do not add up");
			return DTPC_OK;
		}
		if (o->kind == OP_slice) {
			int32_t p = g->tensors[x].pattern[d];
			int64_t start = o->attr[1], len = o->attr[2];
			if (p < 0) {
				REQUIRE(start >= 0 && len == dims(s, out)[d] &&
						start <= dims(s, x)[d] - len, i, name, "bounds");
				return DTPC_OK;
			}
			/* a slice of a sharded dim takes whole blocks */
			uint32_t nb = g->patterns[p].nblk, b0 = 0;
			int64_t at = 0;
			while (b0 < nb && at < start)
				at += block_size(g, p, b0++);
			REQUIRE(at == start, i, name, "the slice does not start at a block");
			uint32_t b1 = b0;
			while (b1 < nb && at < start + len)
				at += block_size(g, p, b1++);
			REQUIRE(at == start + len, i, name, "the slice does not end at a block");
			uint32_t me = graph_group_index(g, g->patterns[p].group, s->rank);
			REQUIRE(chunk_prefix(g, p, b1, me) - chunk_prefix(g, p, b0, me) ==
					dims(s, out)[d], i, name, "local size");
			return DTPC_OK;
		}
		uint32_t split = o->kind == OP_shard ? out : x, whole = o->kind == OP_shard ? x : out;
		int32_t p = g->tensors[split].pattern[d];
		REQUIRE(pattern_on_group(g, p, o->group) && g->tensors[whole].pattern[d] < 0, i, name,
			"the split dim must follow the op's group");
		int64_t total = 0;
		for (uint32_t b = 0; b < g->patterns[p].nblk; b++)
			total += block_size(g, p, b);
		REQUIRE(total == dims(s, whole)[d], i, name, "blocks do not add up to the dim");
		if (o->kind == OP_all_gather)
			REQUIRE(scratch_floats(s, o) >= s->numel[out], i, name, "scratch too small");
		return DTPC_OK;
	}
	case OP_all_reduce:
		REQUIRE(same_dims(s, x, out) && o->group >= 0, i, name, "shapes");
		return DTPC_OK;
	case OP_reduce_scatter: {
		int d = (int)o->attr[0];
		REQUIRE(d >= 0 && d < nd(s, out) && nd(s, x) == nd(s, out), i, name, "dim");
		for (int e = 0; e < nd(s, out); e++)
			REQUIRE(e == d || dims(s, x)[e] == dims(s, out)[e], i, name, "dim %d differs", e);
		int32_t p = g->tensors[out].pattern[d];
		REQUIRE(pattern_on_group(g, p, o->group) && g->tensors[x].pattern[d] < 0 &&
				g->patterns[p].nblk == 1 && block_size(g, p, 0) == dims(s, x)[d],
			i, name, "the output must be this rank's chunk of one block over the group");
		/* scratch elements are of the storage dtype, as the pieces */
		REQUIRE(scratch_floats(s, o) >= s->numel[x] + s->numel[out] *
						     (int64_t)g->groups[o->group].size,
			i, name, "scratch too small");
		return DTPC_OK;
	}
	case OP_norm_stats: {
		int64_t rows = row_count(s, x), cols = o->attr[1] == K_NS_CENTRED ? 2 : 1;
		REQUIRE(nd(s, x) >= 1 && nd(s, out) == nd(s, x) && o->attr[0] >= 1 &&
				o->attr[1] >= K_NS_SUM && o->attr[1] <= K_NS_SQ &&
				dims(s, out)[nd(s, out) - 1] == cols && s->numel[out] == rows * cols &&
				o->nin == (o->attr[1] == K_NS_CENTRED ? 2 : 1) &&
				(o->nin == 1 || s->numel[opnd(s, o, 1)] == rows),
			i, name, "shapes");
		return device_can(s, i, s->dv && !s->dv->ops->norm_stats, "distributed norm");
	}
	case OP_pad: {
		int d = (int)o->attr[0];
		REQUIRE(d >= 0 && d < nd(s, out) && nd(s, x) == nd(s, out) && o->attr[1] >= 0 &&
				o->attr[2] >= 0, i, name, "dim, ranks or pads");
		for (int e = 0; e < nd(s, out); e++)
			REQUIRE(e == d || dims(s, x)[e] == dims(s, out)[e], i, name, "dim %d differs", e);
		int32_t p = g->tensors[out].pattern[d], px = g->tensors[x].pattern[d];
		if (p >= 0) {
			/* split: the pads are the first and the last block */
			uint32_t nb = g->patterns[p].nblk;
			REQUIRE(px >= 0 && g->patterns[px].group == g->patterns[p].group &&
					nb == g->patterns[px].nblk + (o->attr[1] > 0) + (o->attr[2] > 0) &&
					(!o->attr[1] || block_size(g, p, 0) == o->attr[1]) &&
					(!o->attr[2] || block_size(g, p, nb - 1) == o->attr[2]), i, name,
				"the split does not hold the pads as blocks");
		} else {
			REQUIRE(px < 0, i, name, "a split input with a whole output");
		}
		int64_t lb, la;
		pad_local(s, o, &lb, &la);
		REQUIRE(lb + dims(s, x)[d] + la == dims(s, out)[d], i, name, "sizes do not add up");
		return device_can(s, i, s->dv && !s->dv->ops->fill2d, "pad");
	}
	case OP_rope: {
		uint32_t c = opnd(s, o, 1), sn = opnd(s, o, 2);
		int64_t D = o->attr[0];
		REQUIRE(nd(s, x) == 3 && same_dims(s, x, out) && D > 0 && D % 2 == 0 &&
				dims(s, x)[2] % D == 0, i, name, "shapes");
		for (uint32_t t = c; ; t = sn) {
			REQUIRE(nd(s, t) == 2 && dims(s, t)[0] == dims(s, x)[1] && dims(s, t)[1] == D,
				i, name, "cos/sin must be [%lld, %lld]", (long long)dims(s, x)[1],
				(long long)D);
			if (t == sn)
				break;
		}
		return DTPC_OK;
	}
	case OP_attention:
		return check_attention(s, i, o, dims(s, opnd(s, o, 1))[1]);
	case OP_ring_attention: {
		uint32_t k = opnd(s, o, 1);
		int sd = (int)o->attr[3];
		REQUIRE(sd == 1, i, name, "sequence dim must be 1");
		int32_t p = g->tensors[k].pattern[1];
		REQUIRE(pattern_on_group(g, p, o->group), i, name, "kv chunks must follow the ring");
		uint32_t P = g->groups[o->group].size;
		int64_t maxrows = 0, all = 0;
		for (uint32_t m = 0; m < P; m++) {
			int64_t r = chunk_prefix(g, p, g->patterns[p].nblk, m);
			maxrows = r > maxrows ? r : maxrows;
			all += r;
		}
		dtpc_status st = check_attention(s, i, o, maxrows);
		if (st)
			return st;
		int64_t B = dims(s, x)[0], Sq = dims(s, x)[1];
		int64_t H = dims(s, x)[2] / o->attr[0];
		/* sizes from a hostile graph must not overflow on the way */
		int64_t row, kv, lse;
		uint64_t at[4];
		/* per key row: K, V and the mask's one value */
		int64_t width = dims(s, k)[2] + dims(s, opnd(s, o, 2))[2] + (o->nin == 4);
		bool ovf = __builtin_mul_overflow(B, width, &row) ||
			   __builtin_mul_overflow(row, o->attr[2] ? 2 * maxrows : all, &kv) ||
			   __builtin_mul_overflow(B * H, Sq, &lse);
		uint64_t need = ovf ? UINT64_MAX
				    : graph_ring_scratch((uint64_t)kv, (uint64_t)s->numel[out],
							 (uint64_t)lse, (uint32_t)s->esize,
							 ring_fp32_acc(s, o), at);
		REQUIRE(need != UINT64_MAX && scratch_bytes(s, o) >= need, i, name,
			"scratch too small (%s storage)", s->dtype == DTPC_F32 ? "f32" : "16-bit");
		return DTPC_OK;
	}
	case OP_ulysses_a2a: {
		uint32_t seq_t = o->attr[0] == 0 ? x : out, head_t = o->attr[0] == 0 ? out : x;
		REQUIRE(nd(s, x) == 3 && nd(s, out) == 3 && o->attr[2] == 1 && o->attr[1] > 0 &&
				o->group >= 0, i, name, "shapes");
		REQUIRE(pattern_on_group(g, g->tensors[head_t].pattern[2], o->group), i, name,
			"heads must be split over the op's group");
		int32_t p = g->tensors[seq_t].pattern[1];
		REQUIRE(p >= 0, i, name, "the sequence side must be split");
		/* every member's sequence chunk is a chunk of this pattern */
		const struct comm_group *cg = &s->groups[o->group];
		int64_t rows = 0;
		for (int m = 0; m < cg->n; m++)
			rows += chunk_prefix(g, p, g->patterns[p].nblk,
					     graph_group_index(g, g->patterns[p].group,
							       (uint32_t)cg->ranks[m]));
		REQUIRE(rows == dims(s, head_t)[1], i, name, "sequence chunks do not add up");
		int64_t width = 0;
		for (int m = 0; m < cg->n; m++)
			width += graph_chunk(g, (uint32_t)g->tensors[head_t].pattern[2], 0, (uint32_t)m)->len;
		REQUIRE(width == dims(s, seq_t)[2] && dims(s, x)[0] == dims(s, out)[0], i, name,
			"head chunks do not add up");
		REQUIRE(scratch_floats(s, o) >= s->numel[x] + s->numel[out], i, name,
			"scratch too small");
		return DTPC_OK;
	}
	case OP_timestep_embedding: {
		int64_t dim = o->attr[0];
		double f[4];
		memcpy(f, &o->attr[1], sizeof f);
		REQUIRE(dim > 0 && nd(s, out) == nd(s, x) + 1 && nd(s, out) <= G_MAX_DIMS &&
				dims(s, out)[nd(s, x)] == dim, i, name, "the output must be [..., %lld]",
			(long long)dim);
		for (int d = 0; d < nd(s, x); d++)
			REQUIRE(dims(s, out)[d] == dims(s, x)[d], i, name, "dim %d differs", d);
		/* as the compiler checks them: a finite divisor and logarithm */
		REQUIRE(dim < 2 || (double)(dim / 2) - f[0] != 0, i, name,
			"dim / 2 - downscale_freq_shift is 0");
		REQUIRE(f[2] > 0 && isfinite(f[2]) && isfinite(f[0]) && isfinite(f[1]) &&
				isfinite(f[3]), i, name, "shift, scale, max_period or input_scale");
		return DTPC_OK;
	}
	case OP_rope_freqs: {
		if (!o->nin) {
			/* positions computed (the loader saw one generator flag):
			 * the generator's checks, on a whole output */
			const struct g_tensor *t = &s->g->tensors[out];
			int64_t ids[3], rows = 1;
			graph_rope_ids_attr(o, nd(s, out) ? dims(s, out)[0] : 0, ids);
			bool grid = o->flags & G_OF_GRID;
			for (int k = 0; k < (grid ? 3 : 1); k++)
				REQUIRE(ids[k] >= 1 && ids[k] <= (1 << 24) &&
						!__builtin_mul_overflow(rows, ids[k], &rows), i, name,
					"position sizes");
			for (int k = graph_rope_naxes(o); !grid && k < G_NATTR - 1; k++)
				REQUIRE(!o->attr[k], i, name, "attr[%d] after the axes", k);
			REQUIRE(nd(s, out) == 2 && t->pattern[0] == -1 && t->pattern[1] == -1 &&
					dims(s, out)[0] == rows && graph_ids_extent(grid, ids,
						o->flags & G_OF_CENTER) <= (1 << 24), i, name,
				"the output must be whole, [%lld, width], its positions within 2^24",
				(long long)rows);
		} else {
			REQUIRE(nd(s, x) == 2 && nd(s, out) == 2 && dims(s, out)[0] == dims(s, x)[0],
				i, name, "ids must be [S, axes] and the output [S, width]");
		}
		int64_t n = o->nin ? dims(s, x)[1] : graph_rope_naxes(o), width = 0;
		REQUIRE(n >= 1 && n <= G_NATTR, i, name, "%lld axes (1 to %d)", (long long)n, G_NATTR);
		for (int k = 0; k < n; k++) {
			REQUIRE(o->attr[k] >= 2 && o->attr[k] % 2 == 0 && o->attr[k] <= dims(s, out)[1],
				i, name, "axes_dim[%d] = %lld", k, (long long)o->attr[k]);
			width += o->attr[k];
		}
		REQUIRE(width == dims(s, out)[1], i, name, "axes_dim sums to %lld, the output has %lld",
			(long long)width, (long long)dims(s, out)[1]);
		REQUIRE(o->eps > 0 && isfinite(o->eps), i, name, "theta");
		return DTPC_OK;
	}
	case OP_grid_ids:
	case OP_text_ids: {
		int64_t rows = 1, cols = o->kind == OP_grid_ids ? 3 : o->attr[2], end;
		for (int k = 0; k < (o->kind == OP_grid_ids ? 3 : 1); k++)
			REQUIRE(o->attr[k] >= 1 && o->attr[k] <= (1 << 24) &&
					!__builtin_mul_overflow(rows, o->attr[k], &rows), i, name,
				"sizes");
		REQUIRE(o->kind == OP_grid_ids ||
				(cols >= 1 && !__builtin_add_overflow(o->attr[1], o->attr[0], &end)),
			i, name, "axes or positions");
		REQUIRE(nd(s, out) == 2 && dims(s, out)[0] == rows && dims(s, out)[1] == cols, i, name,
			"the output must be [%lld, %lld], whole", (long long)rows, (long long)cols);
		/* the positions exact in the storage dtype (the compiler's check,
		 * again for a graph narrowed at run time) */
		enum g_dtype gd = s->dtype == DTPC_BF16 ? G_DT_BF16
				  : s->dtype == DTPC_F16 ? G_DT_F16 : G_DT_F32;
		int64_t ext = graph_ids_extent(o->kind == OP_grid_ids, o->attr, o->flags & G_OF_CENTER);
		REQUIRE(ext <= graph_dtype_exact_ints(gd), i, name,
			"position %lld is not exact in %s storage (integers up to %lld are)",
			(long long)ext, graph_dtype_name(gd), (long long)graph_dtype_exact_ints(gd));
		return DTPC_OK;
	}
	case OP_patch_embed:
	case OP_unpatchify: {
		bool embed = o->kind == OP_patch_embed;
		uint32_t grid = embed ? x : out, toks = embed ? out : x;
		int64_t pt = o->attr[0], ph = o->attr[1], pw = o->attr[2], vol = 1, n = 1, k;
		REQUIRE(nd(s, grid) == 5 && nd(s, toks) == 3 && dims(s, grid)[0] == dims(s, toks)[0],
			i, name, "shapes");
		for (int d = 0; d < 3; d++) {
			REQUIRE(o->attr[d] >= 1 && dims(s, grid)[2 + d] % o->attr[d] == 0 &&
					!__builtin_mul_overflow(vol, o->attr[d], &vol) &&
					!__builtin_mul_overflow(n, dims(s, grid)[2 + d] / o->attr[d], &n),
				i, name, "the patch does not divide the grid");
		}
		REQUIRE(dims(s, toks)[1] == n && !__builtin_mul_overflow(vol, dims(s, grid)[1], &k),
			i, name, "%lld tokens for a grid of %lld patches",
			(long long)dims(s, toks)[1], (long long)n);
		if (!embed) {
			REQUIRE(dims(s, x)[2] == k, i, name, "features %lld, not %lld",
				(long long)dims(s, x)[2], (long long)k);
			return DTPC_OK;
		}
		uint32_t w = opnd(s, o, 1);
		int64_t N = dims(s, out)[2];
		REQUIRE(nd(s, w) == 5 && dims(s, w)[0] == N && dims(s, w)[1] == dims(s, x)[1] &&
				dims(s, w)[2] == pt && dims(s, w)[3] == ph && dims(s, w)[4] == pw, i, name,
			"the weight must be [%lld, %lld, %lld, %lld, %lld]", (long long)N,
			(long long)dims(s, x)[1], (long long)pt, (long long)ph, (long long)pw);
		if (o->flags & G_OF_BIAS)
			REQUIRE(o->nin == 3 && s->numel[opnd(s, o, 2)] == N, i, name, "bias size");
		else
			REQUIRE(o->nin == 2, i, name, "a third operand without the bias flag");
		REQUIRE(scratch_floats(s, o) >= s->numel[x], i, name, "scratch too small");
		return DTPC_OK;
	}
	case OP_param:
	case OP_COUNT:
		break;
	}
	return rt_error(DTPC_ERR_FORMAT, "graph op %u: %s cannot run in a graph", i, name);
}

/* ---- layout moves ---------------------------------------------------------------- */

static dtpc_status exec_shard(struct dtpc_session *s, const struct g_op *o)
{
	const struct g_graph *g = s->g;
	uint32_t x = opnd(s, o, 0), out = o->out;
	int d = (int)o->attr[0];
	int32_t p = g->tensors[out].pattern[d];
	uint32_t me = graph_group_index(g, g->patterns[p].group, s->rank);
	int64_t in_ = inner(s, x, d), rows = outer(s, x, d);
	int64_t gstart = 0, lstart = 0;
	for (uint32_t b = 0; b < g->patterns[p].nblk; b++) {
		const struct g_chunk *c = graph_chunk(g, (uint32_t)p, b, me);
		DEV(s, o, copy2d, el(s, rt_data(s, out), lstart * in_), dims(s, out)[d] * in_,
		    el(s, rt_data(s, x), (gstart + c->start) * in_), dims(s, x)[d] * in_, rows,
		    c->len * in_);
		lstart += c->len;
		gstart += block_size(g, p, b);
	}
	return DTPC_OK;
}

/* Byte counts and displacements of a collective over up to n members: the
 * session's buffers, sized once for its largest group (no stack arrays
 * sized by a graph). */
struct counts {
	size_t *c, *d, *c2, *d2;
};

static struct counts counts_of(const struct dtpc_session *s)
{
	size_t n = s->max_group;
	return (struct counts){ s->cbufs, s->cbufs + n, s->cbufs + 2 * n, s->cbufs + 3 * n };
}

static dtpc_status exec_all_gather(struct dtpc_session *s, const struct g_op *o)
{
	const struct g_graph *g = s->g;
	uint32_t x = opnd(s, o, 0), out = o->out, i = op_index(s, o);
	int d = (int)o->attr[0];
	int32_t p = g->tensors[x].pattern[d];
	const struct comm_group *cg = &s->groups[o->group];
	uint32_t nb = g->patterns[p].nblk;
	int64_t in_ = inner(s, x, d), rows = outer(s, x, d);
	struct counts C = counts_of(s);
	size_t at = 0;
	for (int m = 0; m < cg->n; m++) {
		C.c[m] = bytes(s, rows * chunk_prefix(g, p, nb, (uint32_t)m) * in_);
		C.d[m] = at;
		at += C.c[m];
	}
	float *buf = scratch(s, o);
	const float *send = rt_data(s, x);
	if (s->staged && g->tensors[x].kind == GT_WEIGHT) {
		/* an fsdp weight lives outside the arena, so it has no host
		 * mirror: it is staged through the output's, which nothing
		 * reads before the copies below overwrite the output */
		if (s->dv->ops->download(s->dv, cbuf(s, rt_data(s, out)), send, C.c[cg->me]))
			return dev_fail(s, o);
		send = rt_data(s, out);
	} else {
		TRY(to_host(s, o, send, C.c[cg->me]));
	}
	if (s->c->ops->allgatherv(s->c, cg, tag(s, i), cbuf(s, send), cbuf(s, buf), C.c, C.d))
		return comm_fail(s, i);
	TRY(to_dev(s, o, buf, at));
	/* member m's piece holds its chunk of every block, row after row */
	for (int m = 0; m < cg->n; m++) {
		int64_t mine = chunk_prefix(g, p, nb, (uint32_t)m), off = 0, gstart = 0;
		for (uint32_t b = 0; b < nb; b++) {
			const struct g_chunk *c = graph_chunk(g, (uint32_t)p, b, (uint32_t)m);
			DEV(s, o, copy2d, el(s, rt_data(s, out), (gstart + c->start) * in_),
			    dims(s, out)[d] * in_, at_byte(buf, C.d[m] + bytes(s, off * in_)),
			    mine * in_, rows,
			    c->len * in_);
			off += c->len;
			gstart += block_size(g, p, b);
		}
	}
	return DTPC_OK;
}

/* Sequence-parallel TP's reduce-scatter, over the backend's all-to-all:
 * member m gets my chunk m of dim d (packed, row after row), and I add the
 * chunks every member sends me in member order — the same order on every
 * rank. Each rank sends (P - 1) / P of its partial sums, as a ring
 * reduce-scatter does. The adds run in the storage dtype (a bf16 sum is
 * rounded after each of the P - 1 adds; an all-reduce rounds once). */
static dtpc_status exec_reduce_scatter(struct dtpc_session *s, const struct g_op *o)
{
	const struct g_graph *g = s->g;
	uint32_t x = opnd(s, o, 0), out = o->out, i = op_index(s, o);
	int d = (int)o->attr[0];
	int32_t p = g->tensors[out].pattern[d];
	const struct comm_group *cg = &s->groups[o->group];
	int64_t in_ = inner(s, x, d), rows = outer(s, x, d), mine = s->numel[out];
	float *send = scratch(s, o), *recv = el(s, send, s->numel[x]);
	struct counts C = counts_of(s);
	size_t at = 0;
	for (int m = 0; m < cg->n; m++) {
		const struct g_chunk *c = graph_chunk(g, (uint32_t)p, 0, (uint32_t)m);
		DEV(s, o, copy2d, at_byte(send, at), c->len * in_, el(s, rt_data(s, x), c->start * in_),
		    dims(s, x)[d] * in_, rows, c->len * in_);
		C.c[m] = bytes(s, rows * c->len * in_);
		C.d[m] = at;
		at += C.c[m];
		C.c2[m] = bytes(s, mine);
		C.d2[m] = bytes(s, mine * m);
	}
	TRY(to_host(s, o, send, at));
	if (s->c->ops->alltoallv(s->c, cg, tag(s, i), cbuf(s, send), C.c, C.d, cbuf(s, recv), C.c2,
				 C.d2))
		return comm_fail(s, i);
	TRY(to_dev(s, o, recv, bytes(s, mine * cg->n)));
	float *y = rt_data(s, out);
	int64_t sh[1] = { mine };
	DEV(s, o, copy, y, recv, bytes(s, mine));
	for (int m = 1; m < cg->n; m++)
		DEV(s, o, binary, K_ADD, y, sh, el(s, recv, mine * m), sh, y, sh, 1);
	return DTPC_OK;
}

static dtpc_status exec_all_reduce(struct dtpc_session *s, const struct g_op *o)
{
	uint32_t x = opnd(s, o, 0), out = o->out, i = op_index(s, o);
	float *y = rt_data(s, out);
	int64_t n = s->numel[out];
	if (s->esize == 4) {
		DEV(s, o, copy, y, rt_data(s, x), bytes(s, n));
		TRY(to_host(s, o, y, bytes(s, n)));
		if (s->c->ops->allreduce_f32(s->c, &s->groups[o->group], tag(s, i), cbuf(s, y),
					     (size_t)n))
			return comm_fail(s, i);
		return to_dev(s, o, y, bytes(s, n));
	}
	/* a narrower dtype sums in float32: the partial products are rounded
	 * once, after the sum (session.c sized the two buffers) */
	float *t = s->widen, *h = s->staged ? s->widen_host : t;
	DEV(s, o, convert, t, DTPC_F32, rt_data(s, x), s->dtype, n);
	if (s->staged && s->dv->ops->download(s->dv, h, t, (size_t)n * 4))
		return dev_fail(s, o);
	if (s->c->ops->allreduce_f32(s->c, &s->groups[o->group], tag(s, i), h, (size_t)n))
		return comm_fail(s, i);
	if (s->staged && s->dv->ops->upload(s->dv, t, h, (size_t)n * 4))
		return dev_fail(s, o);
	DEV(s, o, convert, y, s->dtype, t, DTPC_F32, n);
	return DTPC_OK;
}

/* The rows (per batch) and the row offset of member m's sequence chunk
 * within a block-by-block concatenation over all members in group order. */
struct seq_map {
	const struct g_graph *g;
	int32_t p;           /* the context pattern of the sequence */
	const struct comm_group *cg;
	uint32_t nb;
};

static uint32_t member_index(const struct seq_map *M, int m)
{
	return graph_group_index(M->g, M->g->patterns[M->p].group, (uint32_t)M->cg->ranks[m]);
}

static int64_t member_rows(const struct seq_map *M, int m)
{
	return chunk_prefix(M->g, M->p, M->nb, member_index(M, m));
}

/* Rows of block b from member m land at this offset of the gathered rows. */
static int64_t gathered_row(const struct seq_map *M, uint32_t b, int m)
{
	int64_t r = 0;
	for (int u = 0; u < M->cg->n; u++) {
		uint32_t idx = member_index(M, u);
		r += chunk_prefix(M->g, M->p, b, idx);
		if (u < m)
			r += graph_chunk(M->g, (uint32_t)M->p, b, idx)->len;
	}
	return r;
}

/* Moves member m's rows between its own [B, rows_m, C] piece and their
 * places in the gathered [B, Sr, C] (to_gathered: piece -> gathered). */
static dtpc_status copy_member_rows(struct dtpc_session *s, const struct g_op *o,
				    const struct seq_map *M, int m, int64_t B, int64_t Sr,
				    int64_t C, float *piece, float *gathered, bool to_gathered)
{
	uint32_t idx = member_index(M, m);
	int64_t mr = member_rows(M, m);
	for (uint32_t b = 0; b < M->nb; b++) {
		int64_t len = graph_chunk(M->g, (uint32_t)M->p, b, idx)->len;
		float *pc = el(s, piece, chunk_prefix(M->g, M->p, b, idx) * C);
		float *gt = el(s, gathered, gathered_row(M, b, m) * C);
		/* one strided copy per block: B runs of len rows */
		if (to_gathered)
			DEV(s, o, copy2d, gt, Sr * C, pc, mr * C, B, len * C);
		else
			DEV(s, o, copy2d, pc, mr * C, gt, Sr * C, B, len * C);
	}
	return DTPC_OK;
}

static dtpc_status exec_ulysses(struct dtpc_session *s, const struct g_op *o)
{
	const struct g_graph *g = s->g;
	uint32_t x = opnd(s, o, 0), out = o->out, i = op_index(s, o);
	bool fwd = o->attr[0] == 0;
	uint32_t seq_t = fwd ? x : out, head_t = fwd ? out : x;
	const struct comm_group *cg = &s->groups[o->group];
	struct seq_map M = { g, g->tensors[seq_t].pattern[1], cg,
			     g->patterns[g->tensors[seq_t].pattern[1]].nblk };
	int32_t hp = g->tensors[head_t].pattern[2];
	int64_t B = dims(s, x)[0], W = dims(s, seq_t)[2], C = dims(s, head_t)[2];
	int64_t Sl = dims(s, seq_t)[1], Sr = dims(s, head_t)[1];
	int n = cg->n;
	struct counts K = counts_of(s);
	float *send = scratch(s, o), *recv = el(s, send, s->numel[x]);
	size_t sat = 0, rat = 0;
	for (int m = 0; m < n; m++) {
		const struct g_chunk *h = graph_chunk(g, (uint32_t)hp, 0, (uint32_t)m);
		/* forward: my rows x member m's heads out, its rows x my heads in;
		 * back: the reverse */
		int64_t so = fwd ? B * Sl * h->len : B * member_rows(&M, m) * C;
		int64_t ro = fwd ? B * member_rows(&M, m) * C : B * Sl * h->len;
		K.c[m] = bytes(s, so);
		K.c2[m] = bytes(s, ro);
		K.d[m] = sat;
		K.d2[m] = rat;
		sat += K.c[m];
		rat += K.c2[m];
		float *dst = at_byte(send, K.d[m]);
		if (fwd)
			DEV(s, o, copy2d, dst, h->len, el(s, rt_data(s, x), h->start), W, B * Sl, h->len);
		else
			TRY(copy_member_rows(s, o, &M, m, B, Sr, C, dst, rt_data(s, x), false));
	}
	TRY(to_host(s, o, send, sat));
	if (s->c->ops->alltoallv(s->c, cg, tag(s, i), cbuf(s, send), K.c, K.d, cbuf(s, recv), K.c2,
				 K.d2))
		return comm_fail(s, i);
	TRY(to_dev(s, o, recv, rat));
	for (int m = 0; m < n; m++) {
		float *src = at_byte(recv, K.d2[m]);
		if (fwd) {
			TRY(copy_member_rows(s, o, &M, m, B, Sr, C, src, rt_data(s, out), true));
			continue;
		}
		const struct g_chunk *h = graph_chunk(g, (uint32_t)hp, 0, (uint32_t)m);
		DEV(s, o, copy2d, el(s, rt_data(s, out), h->start), W, src, h->len, B * Sl, h->len);
	}
	return DTPC_OK;
}

/* ---- ring attention ----------------------------------------------------------------- */

/* Attention of q against one chunk of rows keys: the first chunk writes the
 * accumulator, later ones a block merged into it. */
static dtpc_status ring_step(struct dtpc_session *s, const struct g_op *o, bool first,
			     const float *kc, const float *vc, const float *mc, int64_t rows,
			     float *acc, float *lse, float *blk, float *lse_blk)
{
	uint32_t q = opnd(s, o, 0);
	int64_t D = o->attr[0], Dv = o->attr[1];
	int64_t B = dims(s, q)[0], Sq = dims(s, q)[1], H = dims(s, q)[2] / D;
	/* a float32 accumulator takes the first block widened */
	bool wide = ring_fp32_acc(s, o);
	DEV(s, o, attention, rt_data(s, q), H * D, kc, H * D, vc, H * Dv, mc,
	    first && !wide ? acc : blk, first ? lse : lse_blk, B, Sq, rows, H, D, Dv,
	    s->workspace);
	if (first && wide)
		DEV(s, o, convert, acc, DTPC_F32, blk, s->dtype, B * Sq * H * Dv);
	else if (!first)
		DEV(s, o, lse_merge, acc, wide ? DTPC_F32 : s->dtype, lse, blk, lse_blk, B, Sq, H,
		    Dv);
	return DTPC_OK;
}

/* The result: rounded from a float32 accumulator to the storage dtype (as
 * diffusers' out.to(query.dtype)), or already in place. */
static dtpc_status ring_finish(struct dtpc_session *s, const struct g_op *o, const float *acc)
{
	if (acc != rt_data(s, o->out))
		DEV(s, o, convert, rt_data(s, o->out), s->dtype, acc, DTPC_F32, s->numel[o->out]);
	return DTPC_OK;
}

/* Tracing: now, once the work queued on an asynchronous device is done (a
 * failed sync shows at the op's own sync in run_ops). The collectives
 * queued are waited for first, bounded (a stream sync is not): a failure
 * there shows at run_ops' own complete. */
static double part_end(struct dtpc_session *s)
{
	if (!s->dv->ops->host_memory && !comm_complete(s->c))
		s->dv->ops->sync(s->dv);
	return rt_now();
}

static dtpc_status exec_ring(struct dtpc_session *s, const struct g_op *o)
{
	const struct g_graph *g = s->g;
	uint32_t q = opnd(s, o, 0), k = opnd(s, o, 1), v = opnd(s, o, 2), out = o->out;
	uint32_t i = op_index(s, o);
	const struct comm_group *cg = &s->groups[o->group];
	int32_t p = g->tensors[k].pattern[1];
	uint32_t nb = g->patterns[p].nblk;
	int P = cg->n, me = cg->me;
	int64_t D = o->attr[0], Dv = o->attr[1];
	int64_t B = dims(s, q)[0], Sq = dims(s, q)[1], H = dims(s, q)[2] / D;
	/* a key-padding mask [B, rows] is one more value per key row */
	const float *mask = o->nin == 4 ? rt_data(s, opnd(s, o, 3)) : NULL;
	int64_t Wk = H * D, Wv = H * Dv, Wm = mask ? 1 : 0;
	int64_t *rows = s->rowbuf, all = 0, maxrows = 0;
	for (int m = 0; m < P; m++) {
		rows[m] = chunk_prefix(g, p, nb, (uint32_t)m);
		all += rows[m];
		maxrows = rows[m] > maxrows ? rows[m] : maxrows;
	}
	bool rotate = o->attr[2] != 0;
	float *buf = scratch(s, o);
	int64_t kvfloats = B * (Wk + Wv + Wm) * (rotate ? 2 * maxrows : all);
	/* scratch (graph_ring_scratch): K/V (and mask) chunks and a
	 * block's output in the
	 * storage dtype, a float32 accumulator where the merge is float32 over
	 * a narrower storage, the two log-sum-exp vectors in float32 */
	uint64_t part[4];
	bool wide = ring_fp32_acc(s, o);
	graph_ring_scratch((uint64_t)kvfloats, (uint64_t)s->numel[out], (uint64_t)(B * H * Sq),
			   (uint32_t)s->esize, wide, part);
	float *blk = at_byte(buf, part[1]), *lse = at_byte(buf, part[3]), *lse_blk = lse + B * H * Sq;
	float *acc = wide ? at_byte(buf, part[2]) : rt_data(s, out);

	if (!rotate) {
		/* every chunk's K, then every chunk's V, each [B, rows, W], then
		 * every chunk's mask [B, rows] */
		struct counts C = counts_of(s);
		size_t at = 0;
		for (int m = 0; m < P; m++) {
			C.c[m] = bytes(s, B * rows[m] * Wk);
			C.d[m] = at;
			at += C.c[m];
		}
		for (int m = 0; m < P; m++) {
			C.c2[m] = bytes(s, B * rows[m] * Wv);
			C.d2[m] = at;
			at += C.c2[m];
		}
		size_t mask_at = at;
		double tg = s->tracing ? rt_now() : 0;
		TRY(to_host(s, o, rt_data(s, k), C.c[me]));
		TRY(to_host(s, o, rt_data(s, v), C.c2[me]));
		if (s->c->ops->allgatherv(s->c, cg, tag(s, i), cbuf(s, rt_data(s, k)), cbuf(s, buf),
					  C.c, C.d) ||
		    s->c->ops->allgatherv(s->c, cg, tag(s, i), cbuf(s, rt_data(s, v)), cbuf(s, buf),
					  C.c2, C.d2))
			return comm_fail(s, i);
		if (mask) {
			/* K's counts are done with: they hold the mask's now */
			for (int m = 0; m < P; m++) {
				C.c[m] = bytes(s, B * rows[m]);
				C.d[m] = at;
				at += C.c[m];
			}
			TRY(to_host(s, o, mask, C.c[me]));
			if (s->c->ops->allgatherv(s->c, cg, tag(s, i), cbuf(s, mask), cbuf(s, buf),
						  C.c, C.d))
				return comm_fail(s, i);
		}
		TRY(to_dev(s, o, buf, at));
		if (s->tracing)
			rt_trace_part(s, i, TRACE_COMM, 0, tg, part_end(s),
				      (uint64_t)(C.c[me] + C.c2[me]) * (uint64_t)(P - 1) +
					      (mask ? bytes(s, B * rows[me]) * (uint64_t)(P - 1) : 0));
		size_t kat = 0, mat = mask_at;
		for (int m = 0; m < P; m++) {
			double t0 = s->tracing ? rt_now() : 0;
			TRY(ring_step(s, o, m == 0, at_byte(buf, kat), at_byte(buf, C.d2[m]),
				      mask ? at_byte(buf, mat) : NULL, rows[m], acc, lse, blk, lse_blk));
			if (s->tracing)
				rt_trace_part(s, i, TRACE_COMPUTE, (uint32_t)m, t0, part_end(s), 0);
			kat += bytes(s, B * rows[m] * Wk);
			mat += bytes(s, B * rows[m]);
		}
		return ring_finish(s, o, acc);
	}
	/* Rotation: hold chunk (me - step), pass it right while attending to
	 * it; K, V and the mask travel together as [K | V | mask] of the
	 * chunk's size. */
	float *cur = buf, *next = el(s, buf, B * (Wk + Wv + Wm) * maxrows);
	DEV(s, o, copy, cur, rt_data(s, k), bytes(s, B * rows[me] * Wk));
	DEV(s, o, copy, el(s, cur, B * rows[me] * Wk), rt_data(s, v), bytes(s, B * rows[me] * Wv));
	if (mask)
		DEV(s, o, copy, el(s, cur, B * rows[me] * (Wk + Wv)), mask, bytes(s, B * rows[me]));
	for (int step = 0; step < P; step++) {
		int src = ((me - step) % P + P) % P, nsrc = ((src - 1) % P + P) % P;
		size_t sbytes = bytes(s, B * rows[src] * (Wk + Wv + Wm));
		size_t rbytes = bytes(s, B * rows[nsrc] * (Wk + Wv + Wm));
		struct comm_request *req = NULL;
		double ts = s->tracing ? rt_now() : 0;
		if (step < P - 1) {
			TRY(to_host(s, o, cur, sbytes));
			if (comm_shift_start(s->c, cg, tag(s, i), cbuf(s, cur), sbytes,
					     cbuf(s, next), rbytes, &req))
				return comm_fail(s, i);
		}
		double t0 = s->tracing ? rt_now() : 0;
		dtpc_status st = ring_step(s, o, step == 0, cur, el(s, cur, B * rows[src] * Wk),
					   mask ? el(s, cur, B * rows[src] * (Wk + Wv)) : NULL,
					   rows[src], acc, lse, blk, lse_blk);
		if (s->tracing && !st)
			rt_trace_part(s, i, TRACE_COMPUTE, (uint32_t)step, t0, part_end(s), 0);
		/* the transfer owns its buffers until it is waited for */
		if (req && s->c->ops->exchange_wait(s->c, req))
			return st ? st : comm_fail(s, i);
		if (st)
			return st;
		if (req)
			TRY(to_dev(s, o, next, rbytes));
		if (req && s->tracing)
			rt_trace_part(s, i, TRACE_COMM, (uint32_t)step, ts, part_end(s), sbytes);
		float *t = cur;
		cur = next;
		next = t;
	}
	return ring_finish(s, o, acc);
}

/* pad: the constant rows before and after (this rank's chunks of those
 * blocks along a split dim), x's rows between. */
static dtpc_status exec_pad(struct dtpc_session *s, const struct g_op *o)
{
	uint32_t x = opnd(s, o, 0), out = o->out;
	int d = (int)o->attr[0];
	int64_t lb, la, in_ = inner(s, out, d), rows = outer(s, out, d);
	int64_t width = dims(s, out)[d] * in_, xw = dims(s, x)[d] * in_;
	float *y = rt_data(s, out);
	pad_local(s, o, &lb, &la);
	if (lb)
		DEV(s, o, fill2d, y, width, rows, lb * in_, (float)o->eps);
	DEV(s, o, copy2d, el(s, y, lb * in_), width, rt_data(s, x), xw, rows, xw);
	if (la)
		DEV(s, o, fill2d, el(s, y, lb * in_ + xw), width, rows, la * in_, (float)o->eps);
	return DTPC_OK;
}

/* ---- compute ------------------------------------------------------------------------ */

static dtpc_status exec_binary(struct dtpc_session *s, const struct g_op *o)
{
	uint32_t a = opnd(s, o, 0), b = opnd(s, o, 1), out = o->out;
	int64_t as[K_MAX_DIMS], bs[K_MAX_DIMS];
	bcast_shape(s, a, out, false, as);
	bcast_shape(s, b, out, o->flags & G_OF_BH, bs);
	DEV(s, o, binary, o->kind == OP_add ? K_ADD : K_MUL, rt_data(s, a), as, rt_data(s, b), bs,
	    rt_data(s, out), dims(s, out), nd(s, out));
	return DTPC_OK;
}

/* t is [B, 1, H] against x [B, S, H]. */
static bool per_batch_row(const struct dtpc_session *s, uint32_t t, uint32_t x)
{
	return nd(s, t) == 3 && nd(s, x) == 3 && dims(s, t)[0] == dims(s, x)[0] &&
	       dims(s, t)[1] == 1 && dims(s, t)[2] == dims(s, x)[2];
}

static dtpc_status exec_modulate(struct dtpc_session *s, const struct g_op *o)
{
	uint32_t x = opnd(s, o, 0), shift = opnd(s, o, 1), scale = opnd(s, o, 2), out = o->out;
	const int64_t *xs = dims(s, x);
	/* one row per batch ([B, 1, H], or [B, H] under the flag of version 1.0
	 * graphs) or per position ([B, S, H]): the fused kernel */
	bool per_batch = (o->flags & G_OF_BH) || (per_batch_row(s, shift, x) &&
						   per_batch_row(s, scale, x));
	if (nd(s, x) == 3 && (per_batch || (same_dims(s, x, shift) && same_dims(s, x, scale)))) {
		DEV(s, o, modulate, rt_data(s, x), rt_data(s, shift), rt_data(s, scale),
		    rt_data(s, out), xs[0], xs[1], xs[2], per_batch ? 0 : xs[2]);
		return DTPC_OK;
	}
	/* other broadcasts: y = x * scale + x + shift */
	int64_t ss[K_MAX_DIMS], hs[K_MAX_DIMS];
	bcast_shape(s, scale, out, false, ss);
	bcast_shape(s, shift, out, false, hs);
	float *y = rt_data(s, out);
	DEV(s, o, binary, K_MUL, rt_data(s, x), xs, rt_data(s, scale), ss, y, xs, nd(s, x));
	DEV(s, o, binary, K_ADD, y, xs, rt_data(s, x), xs, y, xs, nd(s, x));
	DEV(s, o, binary, K_ADD, y, xs, rt_data(s, shift), hs, y, xs, nd(s, x));
	return DTPC_OK;
}

static dtpc_status exec_slice(struct dtpc_session *s, const struct g_op *o)
{
	const struct g_graph *g = s->g;
	uint32_t x = opnd(s, o, 0), out = o->out;
	int d = (int)o->attr[0];
	int64_t start = o->attr[1];
	int32_t p = g->tensors[x].pattern[d];
	if (p >= 0) {
		/* the slice begins at a block: skip this rank's earlier chunks */
		uint32_t me = graph_group_index(g, g->patterns[p].group, s->rank), b = 0;
		int64_t at = 0;
		while (at < start)
			at += block_size(g, p, b++);
		start = chunk_prefix(g, p, b, me);
	}
	int64_t in_ = inner(s, x, d);
	DEV(s, o, copy2d, rt_data(s, out), dims(s, out)[d] * in_, el(s, rt_data(s, x), start * in_),
	    dims(s, x)[d] * in_, outer(s, x, d), dims(s, out)[d] * in_);
	return DTPC_OK;
}

static dtpc_status exec_concat(struct dtpc_session *s, const struct g_op *o)
{
	int d = (int)o->attr[0];
	int64_t in_ = inner(s, o->out, d), at = 0;
	for (uint32_t k = 0; k < o->nin; k++) {
		uint32_t t = opnd(s, o, (int)k);
		DEV(s, o, copy2d, el(s, rt_data(s, o->out), at * in_), dims(s, o->out)[d] * in_,
		    rt_data(s, t), dims(s, t)[d] * in_, outer(s, t, d), dims(s, t)[d] * in_);
		at += dims(s, t)[d];
	}
	return DTPC_OK;
}

dtpc_status exec_op(struct dtpc_session *s, uint32_t i)
{
	const struct g_op *o = &s->g->ops[i];
	uint32_t out = o->out, x = o->nin ? opnd(s, o, 0) : 0;
	float *y = rt_data(s, out);
	switch ((enum op_kind)o->kind) {
	case OP_linear: {
		int64_t K = dims(s, x)[nd(s, x) - 1], N = dims(s, out)[nd(s, out) - 1];
		DEV(s, o, linear, rt_data(s, x), rt_data(s, opnd(s, o, 1)),
		    (o->flags & G_OF_BIAS) ? rt_data(s, opnd(s, o, 2)) : NULL, y,
		    K ? s->numel[x] / K : 0, K, N);
		return DTPC_OK;
	}
	case OP_layer_norm: {
		int64_t n = dims(s, x)[nd(s, x) - 1];
		bool aff = o->flags & G_OF_AFFINE;
		if (o->flags & G_OF_STATS) {
			int k = aff ? 3 : 1;
			DEV(s, o, norm_apply, rt_data(s, x), y, row_count(s, x), n, o->attr[1],
			    (float)o->eps, rt_data(s, opnd(s, o, k)), rt_data(s, opnd(s, o, k + 1)),
			    aff ? rt_data(s, opnd(s, o, 1)) : NULL,
			    aff ? rt_data(s, opnd(s, o, 2)) : NULL);
			return DTPC_OK;
		}
		DEV(s, o, layer_norm, rt_data(s, x), y, n ? s->numel[x] / n : 0, n, (float)o->eps,
		    aff ? rt_data(s, opnd(s, o, 1)) : NULL, aff ? rt_data(s, opnd(s, o, 2)) : NULL);
		return DTPC_OK;
	}
	case OP_rms_norm: {
		int64_t n = dims(s, x)[nd(s, x) - 1];
		if (o->flags & G_OF_STATS) {
			bool aff = o->flags & G_OF_AFFINE;
			DEV(s, o, norm_apply, rt_data(s, x), y, row_count(s, x), n, o->attr[1],
			    (float)o->eps, NULL, rt_data(s, opnd(s, o, aff ? 2 : 1)),
			    aff ? rt_data(s, opnd(s, o, 1)) : NULL, NULL);
			return DTPC_OK;
		}
		DEV(s, o, rms_norm, rt_data(s, x), y, n ? s->numel[x] / n : 0, n, o->attr[0],
		    (float)o->eps, (o->flags & G_OF_AFFINE) ? rt_data(s, opnd(s, o, 1)) : NULL);
		return DTPC_OK;
	}
	case OP_gelu:
		DEV(s, o, gelu, rt_data(s, x), y, s->numel[x], o->flags & G_OF_TANH);
		return DTPC_OK;
	case OP_silu:
		DEV(s, o, silu, rt_data(s, x), y, s->numel[x]);
		return DTPC_OK;
	case OP_add:
	case OP_mul:
		return exec_binary(s, o);
	case OP_modulate:
		return exec_modulate(s, o);
	case OP_slice:
		return exec_slice(s, o);
	case OP_concat:
		return exec_concat(s, o);
	case OP_reshape:
		DEV(s, o, copy, y, rt_data(s, x), bytes(s, s->numel[x]));
		return DTPC_OK;
	case OP_rope: {
		int64_t W = dims(s, x)[2], D = o->attr[0];
		DEV(s, o, rope, rt_data(s, x), W, rt_data(s, opnd(s, o, 1)), rt_data(s, opnd(s, o, 2)),
		    y, W, dims(s, x)[0], dims(s, x)[1], W / D, D);
		return DTPC_OK;
	}
	case OP_attention: {
		uint32_t k = opnd(s, o, 1), v = opnd(s, o, 2);
		int64_t D = o->attr[0], Dv = o->attr[1], H = dims(s, x)[2] / D;
		DEV(s, o, attention, rt_data(s, x), H * D, rt_data(s, k), H * D, rt_data(s, v),
		    H * Dv, o->nin == 4 ? rt_data(s, opnd(s, o, 3)) : NULL, y, NULL, dims(s, x)[0],
		    dims(s, x)[1], dims(s, k)[1], H, D, Dv, s->workspace);
		return DTPC_OK;
	}
	case OP_timestep_embedding: {
		double f[4];
		memcpy(f, &o->attr[1], sizeof f);
		DEV(s, o, timestep_embedding, rt_data(s, x), y, s->numel[x], o->attr[0],
		    o->flags & G_OF_FLIP, f[0], f[1], f[2], f[3]);
		return DTPC_OK;
	}
	case OP_rope_freqs: {
		int64_t ids[3];
		graph_rope_ids_attr(o, dims(s, out)[0], ids);
		struct dev_positions pos = { o->flags & G_OF_GRID, o->flags & G_OF_CENTER, ids[0],
					     ids[1], ids[2], ids[1] };
		DEV(s, o, rope_freqs, o->nin ? rt_data(s, x) : NULL, &pos, y, dims(s, out)[0],
		    o->nin ? dims(s, x)[1] : graph_rope_naxes(o), o->attr, o->eps,
		    o->flags & G_OF_SIN, o->flags & G_OF_F64);
		return DTPC_OK;
	}
	case OP_grid_ids:
		DEV(s, o, grid_ids, y, o->attr[0], o->attr[1], o->attr[2], o->flags & G_OF_CENTER);
		return DTPC_OK;
	case OP_text_ids:
		DEV(s, o, text_ids, y, o->attr[0], o->attr[1], o->attr[2]);
		return DTPC_OK;
	case OP_patch_embed: {
		/* the patches, then one GEMM by the weight as [out, C t h w] */
		const int64_t *xs = dims(s, x);
		float *p = scratch(s, o);
		int64_t K = s->numel[x] / (dims(s, out)[1] ? dims(s, out)[1] : 1) /
			    (xs[0] ? xs[0] : 1);
		DEV(s, o, patchify, rt_data(s, x), p, xs[0], xs[1], xs[2], xs[3], xs[4], o->attr[0],
		    o->attr[1], o->attr[2]);
		DEV(s, o, linear, p, rt_data(s, opnd(s, o, 1)),
		    (o->flags & G_OF_BIAS) ? rt_data(s, opnd(s, o, 2)) : NULL, y,
		    xs[0] * dims(s, out)[1], K, dims(s, out)[2]);
		return DTPC_OK;
	}
	case OP_unpatchify: {
		const int64_t *ys = dims(s, out);
		DEV(s, o, unpatchify, rt_data(s, x), y, ys[0], ys[1], ys[2], ys[3], ys[4], o->attr[0],
		    o->attr[1], o->attr[2]);
		return DTPC_OK;
	}
	case OP_shard:
		return exec_shard(s, o);
	case OP_all_gather:
		return exec_all_gather(s, o);
	case OP_all_reduce:
		return exec_all_reduce(s, o);
	case OP_reduce_scatter:
		return exec_reduce_scatter(s, o);
	case OP_ulysses_a2a:
		return exec_ulysses(s, o);
	case OP_ring_attention:
		return exec_ring(s, o);
	case OP_pad:
		return exec_pad(s, o);
	case OP_norm_stats:
		DEV(s, o, norm_stats, rt_data(s, x), o->nin == 2 ? rt_data(s, opnd(s, o, 1)) : NULL, y,
		    row_count(s, x), dims(s, x)[nd(s, x) - 1], o->attr[0],
		    (enum k_norm_stat)o->attr[1]);
		return DTPC_OK;
	case OP_param:
	case OP_COUNT:
		break;
	}
	/* exec_check refused these at session creation */
	return rt_error(DTPC_ERR_FORMAT, "graph op %u cannot run", i);
}
