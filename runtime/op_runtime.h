/* op_runtime.h — what the runtime needs of an op, one descriptor per op
 * (runtime/ops/<family>.c), and the helpers the families share. Internal to
 * libdtpc: the executor (exec.c) dispatches through op_runtime[], the
 * table generated from ops.def, so an op of ops.def without its
 * descriptor is a link error naming op_runtime_<id>. */
#ifndef DTPC_OP_RUNTIME_H
#define DTPC_OP_RUNTIME_H
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "graph/graph_stats.h"
#include "graph/op_attrs.h"
#include "runtime/session.h"

struct op_runtime {
	/* At session creation, after the checks every op shares (no operand
	 * or scratch is the output): op i fits on this rank, each kernel
	 * inside its buffers; else an error naming the op. NULL: the op
	 * cannot run in a graph (param). */
	dtpc_status (*check)(struct dtpc_session *s, uint32_t i, const struct g_op *o);
	/* Runs op o on this rank, after check passed: through the session's
	 * device and backend only. */
	dtpc_status (*run)(struct dtpc_session *s, const struct g_op *o);
};

#define OP(id, glo, ghi, fl, sig) extern const struct op_runtime op_runtime_##id;
#include "graph/ops.def"
#undef OP

/* ---- shapes, data and errors: what the op families share -------------------------- */

static inline const int64_t *dims(const struct dtpc_session *s, uint32_t t)
{
	return s->dims[t];
}

static inline int nd(const struct dtpc_session *s, uint32_t t)
{
	return s->g->tensors[t].ndim;
}

static inline int64_t outer(const struct dtpc_session *s, uint32_t t, int d)
{
	int64_t n = 1;
	for (int i = 0; i < d; i++)
		n *= dims(s, t)[i];
	return n;
}

static inline int64_t inner(const struct dtpc_session *s, uint32_t t, int d)
{
	int64_t n = 1;
	for (int i = d + 1; i < nd(s, t); i++)
		n *= dims(s, t)[i];
	return n;
}

static inline uint32_t opnd(const struct dtpc_session *s, const struct g_op *o, int k)
{
	return s->g->operands[o->in0 + (uint32_t)k];
}

/* Sum of a pattern's chunk lengths of group index i over blocks [0, nb). */
static inline int64_t chunk_prefix(const struct g_graph *g, int32_t p, uint32_t nb, uint32_t i)
{
	int64_t n = 0;
	for (uint32_t b = 0; b < nb; b++)
		n += graph_chunk(g, (uint32_t)p, b, i)->len;
	return n;
}

static inline int64_t block_size(const struct g_graph *g, int32_t p, uint32_t b)
{
	uint32_t gs = g->groups[g->patterns[p].group].size;
	int64_t n = 0;
	for (uint32_t i = 0; i < gs; i++)
		n += graph_chunk(g, (uint32_t)p, b, i)->len;
	return n;
}

static inline float *scratch(const struct dtpc_session *s, const struct g_op *o)
{
	return o->scratch >= 0 ? rt_data(s, (uint32_t)o->scratch) : NULL;
}

/* Elements of the scratch in its graph dtype; the session's dtype is that
 * or narrower (dtpc_session_dtype), so as many of its elements fit. */
static inline int64_t scratch_floats(const struct dtpc_session *s, const struct g_op *o)
{
	return o->scratch >= 0 ? s->numel[o->scratch] : 0;
}

static inline uint64_t scratch_bytes(const struct dtpc_session *s, const struct g_op *o)
{
	if (o->scratch < 0)
		return 0;
	return (uint64_t)s->numel[o->scratch] *
	       graph_dtype_size(graph_tensor_dtype(s->g, (uint32_t)o->scratch));
}

static inline struct comm_tag tag(const struct dtpc_session *s, uint32_t i)
{
	const struct g_op *o = &s->g->ops[i];
	return (struct comm_tag){ i, op_table[o->kind].name };
}

/* The index of op o in the graph. */
static inline uint32_t op_index(const struct dtpc_session *s, const struct g_op *o)
{
	return (uint32_t)(o - s->g->ops);
}

/* Tensor data are in the session's storage dtype (float32, or bf16/f16 on
 * a device that has them): element e of the data at p, the bytes of n
 * elements, the byte offset b of a buffer. */
static inline float *el(const struct dtpc_session *s, const float *p, int64_t e)
{
	return (float *)((char *)p + e * (int64_t)s->esize);
}

static inline size_t bytes(const struct dtpc_session *s, int64_t n)
{
	return (size_t)n * s->esize;
}

static inline float *at_byte(const float *p, size_t b)
{
	return (float *)((char *)p + b);
}

static inline dtpc_status dev_fail(const struct dtpc_session *s, const struct g_op *o)
{
	uint32_t i = op_index(s, o);
	return g_wrap(DTPC_ERR_DEVICE, s->rank, "op %u (%s %s)", i, op_table[o->kind].name,
		      graph_str(s->g, s->g->tensors[o->out].name));
}

/* Runs a device call of op o; a failure returns from the calling function. */
#define DEV(s_, o_, fn, ...)                                                \
	do {                                                                \
		if ((s_)->dv->ops->fn((s_)->dv, __VA_ARGS__))               \
			return dev_fail(s_, o_);                            \
	} while (0)


/* What a collective is given for arena memory p: p itself, or where the
 * session stages, p's place in the host mirror. */
static inline void *cbuf(const struct dtpc_session *s, const void *p)
{
	if (!s->staged)
		return (void *)p;
	return (char *)s->host + ((const char *)p - (const char *)s->arena);
}

/* Staging: before a collective sends bytes, and after it received them. */
static inline dtpc_status to_host(const struct dtpc_session *s, const struct g_op *o, const void *p,
			   size_t bytes)
{
	if (s->staged && s->dv->ops->download(s->dv, cbuf(s, p), p, bytes))
		return dev_fail(s, o);
	return DTPC_OK;
}

static inline dtpc_status to_dev(const struct dtpc_session *s, const struct g_op *o, void *p,
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

static inline dtpc_status comm_fail(const struct dtpc_session *s, uint32_t i)
{
	return g_wrap(DTPC_ERR_COMM, s->rank, "op %u (%s %s)", i, op_table[s->g->ops[i].kind].name,
		      graph_str(s->g, s->g->tensors[s->g->ops[i].out].name));
}

__attribute__((format(printf, 3, 4)))
static inline dtpc_status op_error(uint32_t i, const char *name, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	g_vraise(DTPC_ERR_FORMAT, -1, fmt, ap);
	va_end(ap);
	return g_wrap(DTPC_ERR_FORMAT, -1, "graph op %u (%s)", i, name);
}

#define REQUIRE(cond, i_, name_, ...)                          \
	do {                                                   \
		if (!(cond))                                   \
			return op_error(i_, name_, __VA_ARGS__); \
	} while (0)

static inline bool same_dims(const struct dtpc_session *s, uint32_t a, uint32_t b)
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
static inline bool pattern_on_group(const struct g_graph *g, int32_t p, int32_t group)
{
	return p >= 0 && group >= 0 && (int32_t)g->patterns[p].group == group;
}

/* Right-aligned broadcast of a into out (numpy), with [B, H] read as [B, 1, H]. */
static inline bool bcast_shape(const struct dtpc_session *s, uint32_t a, uint32_t out, bool bh,
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
static inline dtpc_status device_can(const struct dtpc_session *s, uint32_t i, bool lacks,
			      const char *what)
{
	if (!lacks)
		return DTPC_OK;
	const struct g_op *o = &s->g->ops[i];
	return g_raise(DTPC_ERR_INVALID, "graph op %u (%s '%s'): the %s device has no %s yet; "
			"run this graph on the cpu device", i, op_table[o->kind].name,
			graph_str(s->g, s->g->tensors[o->out].name), s->dv->ops->name, what);
}

/* Rows of x: its elements over its last axis. */
static inline int64_t row_count(const struct dtpc_session *s, uint32_t x)
{
	int64_t n = nd(s, x) ? dims(s, x)[nd(s, x) - 1] : 0;
	return n ? s->numel[x] / n : 0;
}

/* Byte counts and displacements of a collective over up to n members: the
 * session's buffers, sized once for its largest group (no stack arrays
 * sized by a graph). */
struct counts {
	size_t *c, *d, *c2, *d2;
};

static inline struct counts counts_of(const struct dtpc_session *s)
{
	size_t n = s->max_group;
	return (struct counts){ s->cbufs, s->cbufs + n, s->cbufs + 2 * n, s->cbufs + 3 * n };
}

/* slice, concat, shard and all_gather: the dim they cut or join within the output,
 * every operand of the output's rank and equal to it on every other dim. */
static inline dtpc_status check_along_dim(const struct dtpc_session *s, uint32_t i,
					  const struct g_op *o)
{
	const char *name = op_table[o->kind].name;
	uint32_t out = o->out;
	int d = (int)(o->kind == OP_slice ? ga_slice_get(o).dim : ga_dim_get(o).dim);
	REQUIRE(d >= 0 && d < nd(s, out), i, name, "dim");
	for (uint32_t k = 0; k < o->nin; k++) {
		uint32_t t = opnd(s, o, (int)k);
		REQUIRE(nd(s, t) == nd(s, out), i, name, "ranks differ");
		for (int e = 0; e < nd(s, out); e++)
			REQUIRE(e == d || dims(s, t)[e] == dims(s, out)[e], i, name,
				"dim %d differs", e);
	}
	return DTPC_OK;
}

/* gelu, silu and reshape: as many elements out as in. */
static inline dtpc_status check_numel_kept(struct dtpc_session *s, uint32_t i,
					   const struct g_op *o)
{
	const char *name = op_table[o->kind].name;
	uint32_t out = o->out, x = opnd(s, o, 0);
	REQUIRE(s->numel[x] == s->numel[out], i, name, "element counts differ");
	return DTPC_OK;
}
#endif
