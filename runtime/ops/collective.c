/* collective.c — the layout moves on one rank: shard (a local cut),
 * all_gather, all_reduce, reduce_scatter and the Ulysses all-to-all,
 * through the session's backend (staged through the host mirror where
 * the backend cannot take device memory). */
#include <stdbool.h>

#include "runtime/op_runtime.h"

static dtpc_status check_split_move(struct dtpc_session *s, uint32_t i, const struct g_op *o)
{
	const struct g_graph *g = s->g;
	const char *name = op_table[o->kind].name;
	uint32_t out = o->out, x = o->nin ? opnd(s, o, 0) : 0;
	TRY(check_along_dim(s, i, o));
	int d = (int)ga_dim_get(o).dim;
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

static dtpc_status check_all_reduce(struct dtpc_session *s, uint32_t i, const struct g_op *o)
{
	const char *name = op_table[o->kind].name;
	uint32_t out = o->out, x = o->nin ? opnd(s, o, 0) : 0;
	REQUIRE(same_dims(s, x, out) && o->group >= 0, i, name, "shapes");
	return DTPC_OK;
}

static dtpc_status check_reduce_scatter(struct dtpc_session *s, uint32_t i, const struct g_op *o)
{
	const struct g_graph *g = s->g;
	const char *name = op_table[o->kind].name;
	uint32_t out = o->out, x = o->nin ? opnd(s, o, 0) : 0;
	int d = (int)ga_dim_get(o).dim;
	REQUIRE(d >= 0 && d < nd(s, out) && nd(s, x) == nd(s, out), i, name, "dim");
	for (int e = 0; e < nd(s, out); e++)
		REQUIRE(e == d || dims(s, x)[e] == dims(s, out)[e], i, name, "dim %d differs", e);
	int32_t p = g->tensors[out].pattern[d];
	REQUIRE(pattern_on_group(g, p, o->group) && g->tensors[x].pattern[d] < 0 &&
			g->patterns[p].nblk == 1 && block_size(g, p, 0) == dims(s, x)[d],
		i, name, "the output must be this rank's chunk of one block over the group");
	/* the packed pieces in the storage dtype, and before them, where
	 * that is narrower than float32, this rank's float32 sum */
	REQUIRE(scratch_bytes(s, o) >= bytes(s, s->numel[x]) +
					       (s->esize < 4 ? (uint64_t)s->numel[out] * 4 : 0),
		i, name, "scratch too small");
	return DTPC_OK;
}

static dtpc_status check_ulysses(struct dtpc_session *s, uint32_t i, const struct g_op *o)
{
	const struct g_graph *g = s->g;
	const char *name = op_table[o->kind].name;
	uint32_t out = o->out, x = o->nin ? opnd(s, o, 0) : 0;
	struct ga_ulysses_a2a a = ga_ulysses_a2a_get(o);
	bool fwd = a.direction == G_A2A_TO_HEADS;
	uint32_t seq_t = fwd ? x : out, head_t = fwd ? out : x;
	REQUIRE(nd(s, x) == 3 && nd(s, out) == 3 && a.seq_dim == 1 && a.head_dim > 0 &&
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

static dtpc_status exec_shard(struct dtpc_session *s, const struct g_op *o)
{
	const struct g_graph *g = s->g;
	uint32_t x = opnd(s, o, 0), out = o->out;
	int d = (int)ga_dim_get(o).dim;
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

static dtpc_status exec_all_gather(struct dtpc_session *s, const struct g_op *o)
{
	const struct g_graph *g = s->g;
	uint32_t x = opnd(s, o, 0), out = o->out, i = op_index(s, o);
	int d = (int)ga_dim_get(o).dim;
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

/* Sequence-parallel TP's reduce-scatter: my chunk m of dim d is packed
 * (row after row) as piece m, in member order, and the backend's
 * reduce_scatter_f32 leaves me the float32 sum of piece me. A narrower
 * storage dtype is widened first and the sum rounded once, as
 * exec_all_reduce does, so the result is an all-reduce's rows. */
static dtpc_status exec_reduce_scatter(struct dtpc_session *s, const struct g_op *o)
{
	const struct g_graph *g = s->g;
	uint32_t x = opnd(s, o, 0), out = o->out, i = op_index(s, o);
	int d = (int)ga_dim_get(o).dim;
	int32_t p = g->tensors[out].pattern[d];
	const struct comm_group *cg = &s->groups[o->group];
	int64_t in_ = inner(s, x, d), rows = outer(s, x, d), mine = s->numel[out];
	int64_t n = s->numel[x];
	bool narrow = s->esize < 4;
	/* the float32 sum first, where it is not the output, keeps it aligned */
	float *sum = narrow ? scratch(s, o) : rt_data(s, out);
	float *pack = narrow ? at_byte(scratch(s, o), (size_t)mine * 4) : scratch(s, o);
	struct counts C = counts_of(s);
	int64_t at = 0;
	for (int m = 0; m < cg->n; m++) {
		const struct g_chunk *c = graph_chunk(g, (uint32_t)p, 0, (uint32_t)m);
		DEV(s, o, copy2d, el(s, pack, at), c->len * in_, el(s, rt_data(s, x), c->start * in_),
		    dims(s, x)[d] * in_, rows, c->len * in_);
		C.c[m] = (size_t)(rows * c->len * in_);
		at += rows * c->len * in_;
	}
	const float *send;
	if (narrow) {
		/* session.c sized the widen buffers for the largest tensor, x too */
		DEV(s, o, convert, s->widen, DTPC_F32, pack, s->dtype, n);
		send = s->staged ? s->widen_host : s->widen;
		if (s->staged && s->dv->ops->download(s->dv, s->widen_host, s->widen, (size_t)n * 4))
			return dev_fail(s, o);
	} else {
		TRY(to_host(s, o, pack, (size_t)n * 4));
		send = cbuf(s, pack);
	}
	if (s->c->ops->reduce_scatter_f32(s->c, cg, tag(s, i), send, cbuf(s, sum), C.c))
		return comm_fail(s, i);
	TRY(to_dev(s, o, sum, (size_t)mine * 4));
	if (narrow)
		DEV(s, o, convert, rt_data(s, out), s->dtype, sum, DTPC_F32, mine);
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

/* Moves member m's rows between its own [B, rows_m, C] piece, rows ld
 * apart (C: packed), and their places in the gathered [B, Sr, C]
 * (to_gathered: piece -> gathered). */
static dtpc_status copy_member_rows(struct dtpc_session *s, const struct g_op *o,
				    const struct seq_map *M, int m, int64_t B, int64_t Sr,
				    int64_t C, float *piece, int64_t ld, float *gathered,
				    bool to_gathered)
{
	uint32_t idx = member_index(M, m);
	int64_t mr = member_rows(M, m);
	for (uint32_t b = 0; b < M->nb; b++) {
		int64_t len = graph_chunk(M->g, (uint32_t)M->p, b, idx)->len;
		float *pc = el(s, piece, chunk_prefix(M->g, M->p, b, idx) * ld);
		float *gt = el(s, gathered, gathered_row(M, b, m) * C);
		if (ld == C) { /* one strided copy per block: B runs of len rows */
			if (to_gathered)
				DEV(s, o, copy2d, gt, Sr * C, pc, mr * C, B, len * C);
			else
				DEV(s, o, copy2d, pc, mr * C, gt, Sr * C, B, len * C);
			continue;
		}
		for (int64_t bi = 0; bi < B; bi++) { /* len rows of C, ld apart */
			float *pb = el(s, pc, bi * mr * ld), *gb = el(s, gt, bi * Sr * C);
			if (to_gathered)
				DEV(s, o, copy2d, gb, C, pb, ld, len, C);
			else
				DEV(s, o, copy2d, pb, ld, gb, C, len, C);
		}
	}
	return DTPC_OK;
}

static dtpc_status exec_ulysses(struct dtpc_session *s, const struct g_op *o)
{
	const struct g_graph *g = s->g;
	uint32_t x = opnd(s, o, 0), out = o->out, i = op_index(s, o);
	bool fwd = ga_ulysses_a2a_get(o).direction == G_A2A_TO_HEADS;
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
		K.d[m] = sat;
		K.d2[m] = rat;
		if (m == cg->me) {
			/* my own piece, straight between x and out: through the
			 * send and receive buffers it was copied three times */
			K.c[m] = K.c2[m] = 0;
			TRY(copy_member_rows(s, o, &M, m, B, Sr, C,
					     el(s, rt_data(s, fwd ? x : out), h->start), W,
					     rt_data(s, fwd ? out : x), fwd));
			continue;
		}
		K.c[m] = bytes(s, so);
		K.c2[m] = bytes(s, ro);
		sat += K.c[m];
		rat += K.c2[m];
		float *dst = at_byte(send, K.d[m]);
		if (fwd)
			DEV(s, o, copy2d, dst, h->len, el(s, rt_data(s, x), h->start), W, B * Sl, h->len);
		else
			TRY(copy_member_rows(s, o, &M, m, B, Sr, C, dst, C, rt_data(s, x), false));
	}
	TRY(to_host(s, o, send, sat));
	if (s->c->ops->alltoallv(s->c, cg, tag(s, i), cbuf(s, send), K.c, K.d, cbuf(s, recv), K.c2,
				 K.d2))
		return comm_fail(s, i);
	TRY(to_dev(s, o, recv, rat));
	for (int m = 0; m < n; m++) {
		float *src = at_byte(recv, K.d2[m]);
		if (m == cg->me)
			continue;
		if (fwd) {
			TRY(copy_member_rows(s, o, &M, m, B, Sr, C, src, C, rt_data(s, out), true));
			continue;
		}
		const struct g_chunk *h = graph_chunk(g, (uint32_t)hp, 0, (uint32_t)m);
		DEV(s, o, copy2d, el(s, rt_data(s, out), h->start), W, src, h->len, B * Sl, h->len);
	}
	return DTPC_OK;
}

const struct op_runtime op_runtime_shard = { check_split_move, exec_shard };
const struct op_runtime op_runtime_all_gather = { check_split_move, exec_all_gather };
const struct op_runtime op_runtime_all_reduce = { check_all_reduce, exec_all_reduce };
const struct op_runtime op_runtime_reduce_scatter = { check_reduce_scatter, exec_reduce_scatter };
const struct op_runtime op_runtime_ulysses_a2a = { check_ulysses, exec_ulysses };
