/* attention.c — attention and ring_attention (its K/V chunks all-gathered
 * or rotated round the ring, each merged by its log-sum-exp) on one rank. */
#include <stdbool.h>

#include "runtime/op_runtime.h"

/* Ring attention merges into a float32 accumulator of its own where the
 * plan says convert_to_fp32 and the storage is narrower. */
static bool ring_fp32_acc(const struct dtpc_session *s, const struct g_op *o)
{
	return ga_ring_attention_get(o).fp32 && s->dtype != DTPC_F32;
}

/* The head dims of q/k and v, attention's or ring_attention's. */
static struct ga_attention head_dims(const struct g_op *o)
{
	if (o->kind != OP_ring_attention)
		return ga_attention_get(o);
	struct ga_ring_attention r = ga_ring_attention_get(o);
	return (struct ga_attention){ .head_dim = r.head_dim, .head_dim_v = r.head_dim_v };
}

static dtpc_status check_attention(struct dtpc_session *s, uint32_t i, const struct g_op *o,
				   int64_t kv_rows)
{
	const char *name = op_table[o->kind].name;
	uint32_t q = opnd(s, o, 0), k = opnd(s, o, 1), v = opnd(s, o, 2);
	struct ga_attention a = head_dims(o);
	int64_t D = a.head_dim, Dv = a.head_dim_v;
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

static dtpc_status check_local_attention(struct dtpc_session *s, uint32_t i, const struct g_op *o)
{
	return check_attention(s, i, o, dims(s, opnd(s, o, 1))[1]);
}

static dtpc_status check_ring_attention(struct dtpc_session *s, uint32_t i, const struct g_op *o)
{
	const struct g_graph *g = s->g;
	const char *name = op_table[o->kind].name;
	uint32_t out = o->out, x = o->nin ? opnd(s, o, 0) : 0;
	uint32_t k = opnd(s, o, 1);
	struct ga_ring_attention a = ga_ring_attention_get(o);
	int sd = (int)a.seq_dim;
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
	int64_t H = dims(s, x)[2] / a.head_dim;
	/* sizes from a hostile graph must not overflow on the way */
	int64_t row, kv, lse;
	uint64_t at[4];
	/* per key row: K, V and the mask's one value */
	int64_t width = dims(s, k)[2] + dims(s, opnd(s, o, 2))[2] + (o->nin == 4);
	bool ovf = __builtin_mul_overflow(B, width, &row) ||
		   __builtin_mul_overflow(row, a.rotate != G_ROT_GATHER ? 2 * maxrows : all, &kv) ||
		   __builtin_mul_overflow(B * H, Sq, &lse);
	uint64_t need = ovf ? UINT64_MAX
			    : graph_ring_scratch((uint64_t)kv, (uint64_t)s->numel[out],
						 (uint64_t)lse, (uint32_t)s->esize,
						 ring_fp32_acc(s, o), at);
	REQUIRE(need != UINT64_MAX && scratch_bytes(s, o) >= need, i, name,
		"scratch too small (%s storage)", s->dtype == DTPC_F32 ? "f32" : "16-bit");
	return DTPC_OK;
}

static dtpc_status run_attention(struct dtpc_session *s, const struct g_op *o)
{
	uint32_t out = o->out, x = o->nin ? opnd(s, o, 0) : 0;
	float *y = rt_data(s, out);
	uint32_t k = opnd(s, o, 1), v = opnd(s, o, 2);
	struct ga_attention a = ga_attention_get(o);
	int64_t D = a.head_dim, Dv = a.head_dim_v, H = dims(s, x)[2] / D;
	DEV(s, o, attention, rt_data(s, x), H * D, rt_data(s, k), H * D, rt_data(s, v),
	    H * Dv, o->nin == 4 ? rt_data(s, opnd(s, o, 3)) : NULL, y, NULL, dims(s, x)[0],
	    dims(s, x)[1], dims(s, k)[1], H, D, Dv, s->workspace);
	return DTPC_OK;
}

/* Attention of q against one chunk of rows keys: the first chunk writes the
 * accumulator, later ones a block merged into it. */
static dtpc_status ring_step(struct dtpc_session *s, const struct g_op *o, bool first,
			     const float *kc, const float *vc, const float *mc, int64_t rows,
			     float *acc, float *lse, float *blk, float *lse_blk)
{
	uint32_t q = opnd(s, o, 0);
	struct ga_ring_attention a = ga_ring_attention_get(o);
	int64_t D = a.head_dim, Dv = a.head_dim_v;
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
	struct ga_ring_attention a = ga_ring_attention_get(o);
	int64_t D = a.head_dim, Dv = a.head_dim_v;
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
	bool rotate = a.rotate != G_ROT_GATHER;
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

const struct op_runtime op_runtime_attention = { check_local_attention, run_attention };
const struct op_runtime op_runtime_ring_attention = { check_ring_attention, exec_ring };
