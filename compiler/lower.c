/* lower.c — from the checked model and its layouts to the graph.
 *
 * Walks the IR ops in order. Each op's inputs are first converted from the
 * layout their value has to the layout the op consumes (layout.c decided
 * those): a replicated -> sharded change is a local `shard`, sharded ->
 * replicated an `all_gather`. Then the op itself is emitted on local shapes,
 * expanded where the style says so: rowwise is a local linear, an all-reduce
 * over tp and the bias; a context-parallel attention is Ulysses all-to-alls
 * around either a local attention or a ring attention. Conversions are
 * memoized, so a tensor read by many ops is gathered once. */
#include "lower.h"

#include <inttypes.h>
#include <string.h>

#include "arena.h"
#include "op_compile.h"
#include "strmap.h"
#include "graph/version.h"

#define VEC(T) struct { T *v; uint64_t n, cap; }
#define PUSH(L, vec, x)                                                         \
	do {                                                                    \
		if ((vec).n == (vec).cap) {                                     \
			uint64_t nc_ = (vec).cap ? (vec).cap * 2 : 64;          \
			void *nv_ = arena_alloc_raw((L)->a, sizeof *(vec).v * nc_); \
			if ((vec).n)                                            \
				memcpy(nv_, (vec).v, sizeof *(vec).v * (vec).n); \
			(vec).v = nv_;                                          \
			(vec).cap = nc_;                                        \
		}                                                               \
		(vec).v[(vec).n++] = (x);                                       \
	} while (0)

enum { SPLIT_CACHE = 64, SPLIT_CACHE_BLK = 4 };

struct split_cache {
	int group, nblk, id;
	int64_t unit, blk[SPLIT_CACHE_BLK];
};

struct lower {
	struct arena *a;
	struct diag_ctx *d;
	const struct plan_cfg *c;
	const struct layout_result *lay;
	const struct ir_model *m;

	VEC(char) blob;
	VEC(uint32_t) stroff;
	struct strmap *strings;
	VEC(struct g_meta) meta;
	VEC(uint64_t) meta_items; /* the lists of array metadata */
	VEC(struct g_group) groups;
	VEC(struct g_pattern) patterns;
	VEC(int64_t) pattern_max; /* per pattern: its largest local length */
	struct strmap *pattern_ids;
	VEC(struct g_chunk) chunks;
	VEC(struct g_tensor) tensors;
	VEC(uint8_t) dtypes;      /* per tensor: its storage dtype */
	VEC(struct g_op) ops;
	VEC(uint32_t) operands;
	VEC(uint32_t) inputs;
	VEC(uint32_t) outputs;

	/* group ids, -1 when of size 1: each placement group's, and ring's and
	 * ulysses' own (context-parallel attention) */
	int g_lay[LG_COUNT];
	int g_ring, g_uly;

	int *val;            /* IR tensor -> its current graph tensor */
	struct layout *act;  /* ... and the layout that tensor has */
	int *weight_tensor;  /* IR weight -> graph tensor, -1 before first use */
	bool *weight_fsdp;   /* IR weight -> stored split on a dim over ring x ulysses */
	struct strmap *memo; /* conversions already emitted */
	struct split_cache split_cache[SPLIT_CACHE];
	/* Bytes of every arena tensor, each rounded up to G_ALIGN: memplan.c
	 * places them at offsets below this sum, so bounding it here keeps
	 * its offset arithmetic from overflowing. */
	uint64_t arena_sum;
	uint32_t esize; /* bytes per element of the plan's dtype */
	bool failed;
};

static int pattern_split_keyed(struct lower *L, int group, int nblk, const int64_t *blk,
			       int64_t unit);

/* ---- tables ---------------------------------------------------------------- */

/* Appends a string to the table. Tensor names are nearly all distinct, so
 * they are appended as they come; str_id interns the rest. */
static uint32_t str_add(struct lower *L, const char *s)
{
	PUSH(L, L->stroff, (uint32_t)L->blob.n);
	for (const char *p = s;; p++) {
		PUSH(L, L->blob, *p);
		if (!*p)
			break;
	}
	return (uint32_t)L->stroff.n - 1;
}

static uint32_t str_id(struct lower *L, const char *s)
{
	int id = strmap_get(L->strings, s);
	if (id >= 0)
		return (uint32_t)id;
	uint32_t k = str_add(L, s);
	strmap_put(L->strings, arena_strdup(L->a, s), (int)k);
	return k;
}

static void meta_str(struct lower *L, const char *k, const char *v)
{
	struct g_meta m = { str_id(L, k), GM_STR, str_id(L, v) };
	PUSH(L, L->meta, m);
}

static void meta_u64(struct lower *L, const char *k, uint64_t v)
{
	struct g_meta m = { str_id(L, k), GM_U64, v };
	PUSH(L, L->meta, m);
}

static void meta_bool(struct lower *L, const char *k, bool v)
{
	struct g_meta m = { str_id(L, k), GM_BOOL, v };
	PUSH(L, L->meta, m);
}

/* A model parameter, typed as the language has it, so that a reader gets
 * the exact value (an f64's bits, not "%g" of it). A list of integers or
 * of strings is a list; any other list (mixed, nested, of floats) has no
 * metadata type and is stored as the language writes it. */
static void meta_value(struct lower *L, const char *k, const struct value *v)
{
	struct g_meta m = { str_id(L, k), GM_STR, 0 };
	bool ints = v->kind == VAL_LIST, strs = v->kind == VAL_LIST;

	for (int i = 0; v->kind == VAL_LIST && i < v->n; i++) {
		ints &= v->items[i].kind == VAL_INT;
		strs &= v->items[i].kind == VAL_STR;
	}
	switch (v->kind) {
	case VAL_INT: m = (struct g_meta){ m.key, GM_I64, (uint64_t)v->i }; break;
	case VAL_FLOAT:
		m.type = GM_F64;
		memcpy(&m.value, &v->f, sizeof m.value);
		break;
	case VAL_BOOL: m = (struct g_meta){ m.key, GM_BOOL, v->i != 0 }; break;
	case VAL_STR: m.value = str_id(L, v->s); break;
	case VAL_LIST:
		if (ints || strs) {
			/* an empty list is a list of integers */
			m.type = ints ? GM_I64_ARRAY : GM_STR_ARRAY;
			m.value = L->meta_items.n;
			PUSH(L, L->meta_items, (uint64_t)v->n);
			for (int i = 0; i < v->n; i++)
				PUSH(L, L->meta_items, ints ? (uint64_t)v->items[i].i
							    : str_id(L, v->items[i].s));
			break;
		}
		m.value = str_id(L, value_str(L->a, v));
		break;
	case VAL_NULL: /* not written as a parameter: see "params_none" */
	case VAL_NONE: m.value = str_id(L, value_str(L->a, v)); break;
	}
	PUSH(L, L->meta, m);
}

/* A group over the listed axes, in that order; axes of size 1 are dropped,
 * so groups of the same members share one id. -1 when it has one rank. */
static int group_id(struct lower *L, const int *axes, int n)
{
	struct g_group g;
	memset(&g, 0, sizeof g);
	g.size = 1;
	for (int i = 0; i < n; i++) {
		if (axes[i] < 0 || L->c->axes[axes[i]].size == 1)
			continue;
		g.axes[g.naxes++] = (uint8_t)axes[i];
		g.size *= (uint32_t)L->c->axes[axes[i]].size;
	}
	if (g.size == 1)
		return -1;
	for (uint64_t i = 0; i < L->groups.n; i++)
		if (!memcmp(&L->groups.v[i], &g, sizeof g))
			return (int)i;
	PUSH(L, L->groups, g);
	return (int)L->groups.n - 1;
}

/* A pattern from explicit chunks (nblk x gsize, block-major); interned by
 * a hash of its bytes (and compared in full), so equal splits share one
 * pattern and looking one up costs O(chunks), not a formatted key. */
static int pattern_from_chunks(struct lower *L, int group, int nblk,
			       const struct g_chunk *ch)
{
	uint32_t gs = L->groups.v[group].size;
	uint64_t n = (uint64_t)nblk * gs, h = 1469598103934665603ull;
	const unsigned char *bytes = (const unsigned char *)ch;
	for (uint64_t i = 0; i < n * sizeof *ch; i++)
		h = (h ^ bytes[i]) * 1099511628211ull;
	for (int probe = 0;; probe++) {
		char key[64];
		snprintf(key, sizeof key, "%d/%d/%016" PRIx64 "/%d", group, nblk, h, probe);
		int id = strmap_get(L->pattern_ids, key);
		if (id < 0) {
			struct g_pattern p = { (uint32_t)group, (uint32_t)nblk, L->chunks.n };
			for (uint64_t i = 0; i < n; i++)
				PUSH(L, L->chunks, ch[i]);
			PUSH(L, L->patterns, p);
			int64_t best = 0;
			for (uint32_t r = 0; r < gs; r++) {
				int64_t len = 0;
				for (int b = 0; b < nblk; b++)
					len += ch[(uint64_t)b * gs + r].len;
				best = len > best ? len : best;
			}
			PUSH(L, L->pattern_max, best);
			strmap_put(L->pattern_ids, arena_strdup(L->a, key), (int)L->patterns.n - 1);
			return (int)L->patterns.n - 1;
		}
		const struct g_pattern *p = &L->patterns.v[id];
		if ((int)p->group == group && (int)p->nblk == nblk &&
		    !memcmp(&L->chunks.v[p->chunk0], ch, n * sizeof *ch))
			return id;
	}
}

/* Blocks split torch.tensor_split style: the first size % n ranks hold one
 * more; `unit` keeps whole heads (a block of 24 heads x 128 splits by heads).
 * Memoized by (group, unit, blocks): most tensors repeat a few splits. */
static int pattern_split(struct lower *L, int group, int nblk, const int64_t *blk,
			 int64_t unit)
{
	/* the same few splits recur for nearly every tensor: a direct-mapped
	 * cache in front of the keyed lookup */
	uint64_t h = (uint64_t)group * 31 + (uint64_t)unit * 17 + (uint64_t)nblk;
	for (int b = 0; b < nblk; b++)
		h = h * 1000003 + (uint64_t)blk[b];
	struct split_cache *sc = &L->split_cache[h % SPLIT_CACHE];
	if (sc->id >= 0 && sc->group == group && sc->unit == unit && sc->nblk == nblk &&
	    nblk <= SPLIT_CACHE_BLK && !memcmp(sc->blk, blk, sizeof *blk * (size_t)nblk))
		return sc->id;
	int id = pattern_split_keyed(L, group, nblk, blk, unit);
	if (nblk <= SPLIT_CACHE_BLK) {
		*sc = (struct split_cache){ .group = group, .unit = unit, .nblk = nblk, .id = id };
		memcpy(sc->blk, blk, sizeof *blk * (size_t)nblk);
	}
	return id;
}

static int pattern_split_keyed(struct lower *L, int group, int nblk, const int64_t *blk,
			       int64_t unit)
{
	char key[512];
	int k = snprintf(key, sizeof key, "split/%d/%" PRId64, group, unit);
	for (int b = 0; b < nblk && k < (int)sizeof key - 24; b++)
		k += snprintf(key + k, sizeof key - (size_t)k, "/%" PRId64, blk[b]);
	int id = k < (int)sizeof key - 24 ? strmap_get(L->pattern_ids, key) : -1;
	if (id >= 0)
		return id;
	uint32_t gs = L->groups.v[group].size;
	struct g_chunk *ch = ARENA_ARRAY(L->a, struct g_chunk, (uint64_t)nblk * gs);
	for (int b = 0; b < nblk; b++) {
		int64_t start = 0;
		for (uint32_t i = 0; i < gs; i++) {
			int64_t len = layout_local(blk[b] / unit, gs, i) * unit;
			ch[(uint64_t)b * gs + i] = (struct g_chunk){ start, len };
			start += len;
		}
	}
	id = pattern_from_chunks(L, group, nblk, ch);
	if (k < (int)sizeof key - 24)
		strmap_put(L->pattern_ids, arena_strdup(L->a, key), id);
	return id;
}

/* The largest local length of a pattern's dim over the group. */
static int64_t pattern_max(const struct lower *L, int p)
{
	return L->pattern_max.v[p];
}

static int new_tensor(struct lower *L, const char *name, int kind, const struct ir_shape *sh,
		      const int32_t *pat)
{
	struct g_tensor t;
	memset(&t, 0, sizeof t);
	t.name = str_add(L, name);
	t.kind = (uint8_t)kind;
	t.ndim = (uint8_t)sh->nd;
	/* model.c bounds every IR tensor (2^48 elements), but a scratch
	 * buffer sums several: checked all the same. Every tensor is stored
	 * in the plan's dtype (a scratch's elements too: add_scratch). */
	uint64_t n = L->esize, aligned;
	bool ovf = false;
	for (int d = 0; d < G_MAX_DIMS; d++) {
		t.pattern[d] = d < sh->nd && pat ? pat[d] : -1;
		t.dims[d] = d < sh->nd ? sh->d[d] : 0;
		if (d < sh->nd)
			ovf |= __builtin_mul_overflow(n, (uint64_t)(t.pattern[d] >= 0 ?
					pattern_max(L, t.pattern[d]) : sh->d[d]), &n);
	}
	t.bytes = n;
	if (kind != GT_WEIGHT)
		ovf |= __builtin_add_overflow(n, (uint64_t)G_ALIGN - 1, &aligned) ||
		       __builtin_add_overflow(L->arena_sum, aligned / G_ALIGN * G_ALIGN,
					      &L->arena_sum) ||
		       L->arena_sum > (uint64_t)INT64_MAX;
	if (ovf && !L->failed) {
		diag_error(L->d, loc_none(), "'%s': the tensors of this graph need more than "
			   "2^63 bytes", name);
		L->failed = true;
	}
	PUSH(L, L->tensors, t);
	PUSH(L, L->dtypes, (uint8_t)L->c->dtype);
	return (int)L->tensors.n - 1;
}

static struct ir_shape tshape(const struct lower *L, int t)
{
	struct ir_shape s = { .nd = L->tensors.v[t].ndim };
	for (int d = 0; d < s.nd; d++)
		s.d[d] = L->tensors.v[t].dims[d];
	return s;
}

static int emit(struct lower *L, int kind, const int *in, int nin, int out, int group)
{
	struct g_op o;
	memset(&o, 0, sizeof o);
	o.kind = (uint16_t)kind;
	o.nin = (uint16_t)nin;
	o.in0 = (uint32_t)L->operands.n;
	o.out = (uint32_t)out;
	o.group = group;
	o.scratch = -1;
	for (int i = 0; i < nin; i++)
		PUSH(L, L->operands, (uint32_t)in[i]);
	PUSH(L, L->ops, o);
	return (int)L->ops.n - 1;
}

static struct g_op *op_at(struct lower *L, int i)
{
	return &L->ops.v[i];
}

void lower_add_scratch(struct lower *L, int opi, const char *name, int64_t bytes)
{
	struct ir_shape sh = { .nd = 1, .d = { (bytes + L->esize - 1) / L->esize } };
	int t = new_tensor(L, name, GT_SCRATCH, &sh, NULL);
	op_at(L, opi)->scratch = t;
}

/* ---- layouts as patterns ------------------------------------------------------- */

static int axis_pattern(struct lower *L, const struct lay_axis *x, enum lay_group g,
			int64_t size)
{
	int64_t one = size;
	return pattern_split(L, L->g_lay[g], x->nblk ? x->nblk : 1, x->nblk ? x->blk : &one, 1);
}

static void lay_patterns(struct lower *L, const struct ir_shape *sh, const struct layout *l,
			 int32_t *pat)
{
	for (int d = 0; d < G_MAX_DIMS; d++)
		pat[d] = -1;
	for (int g = 0; g < LG_COUNT; g++) {
		const struct lay_axis *x = &l->g[g];
		if (x->kind != LAY_SHARD)
			continue;
		if (pat[x->dim] >= 0 && !L->failed) {
			diag_error(L->d, loc_none(), "a dimension sharded over both %s and %s "
				   "cannot be lowered", g == LG_TP ? "the context axes" : "another group",
				   lay_groups[g].name);
			L->failed = true;
		}
		pat[x->dim] = axis_pattern(L, x, g, sh->d[x->dim]);
	}
}

/* The memo key of (tensor, layout): written into buf, no allocation. */
static const char *lay_key(char *buf, size_t n, int t, const struct layout *l)
{
	size_t k = (size_t)snprintf(buf, n, "%d", t);
	for (int g = 0; g < LG_COUNT && k < n; g++) {
		const struct lay_axis *x = &l->g[g];
		k += (size_t)snprintf(buf + k, n - k, "|%d:%d", x->kind, x->dim);
		for (int b = 0; b < x->nblk && k < n; b++)
			k += (size_t)snprintf(buf + k, n - k, ",%" PRId64, x->blk[b]);
	}
	return buf;
}

static const struct lay_axis REPL_AXIS = { .kind = LAY_REPL, .dim = -1, .origin = -1 };

/* The tensor t (whose layout is `from`) in layout `to`: one group at a time,
 * gather what must be whole, then shard what must be split. */
static int convert(struct lower *L, int t, struct layout from, const struct layout *to,
		   const char *name)
{
	char buf[512];
	const char *key = lay_key(buf, sizeof buf, t, to);
	int hit = strmap_get(L->memo, key);
	if (hit >= 0)
		return hit;
	struct ir_shape sh = tshape(L, t);
	/* tensors split twice along a dim (heads) are never converted */
	int cur = t;
	for (int pass = 0; pass < 2; pass++) {
		for (int g = 0; g < LG_COUNT; g++) {
			struct lay_axis *f = &from.g[g];
			const struct lay_axis *w = &to->g[g];
			bool same = f->kind == w->kind && (f->kind == LAY_REPL ||
				     (f->dim == w->dim && f->nblk == w->nblk &&
				      (!f->nblk || !memcmp(f->blk, w->blk, sizeof *f->blk * (size_t)f->nblk))));
			if (same)
				continue;
			int group = L->g_lay[g];
			if (pass == 0 && f->kind == LAY_SHARD) {
				int dim = f->dim;
				*f = REPL_AXIS;
				int32_t pat[G_MAX_DIMS];
				lay_patterns(L, &sh, &from, pat);
				int out = new_tensor(L, arena_printf(L->a, "%s/gather_%s", name,
								     lay_groups[g].tag),
						     GT_ACTIVATION, &sh, pat);
				int opi = emit(L, OP_all_gather, &cur, 1, out, group);
				ga_dim_set(op_at(L, opi), (struct ga_dim){ .dim = dim });
				/* members' pieces arrive whole, one after another;
				 * they are put in place (block by block, row by row)
				 * from this buffer */
				lower_add_scratch(L, opi, arena_printf(L->a, "%s/gather_buf", name),
						  (int64_t)L->tensors.v[out].bytes);
				cur = out;
			} else if (pass == 1 && w->kind == LAY_SHARD) {
				*f = *w;
				int32_t pat[G_MAX_DIMS];
				lay_patterns(L, &sh, &from, pat);
				int out = new_tensor(L, arena_printf(L->a, "%s/shard_%s", name,
								     lay_groups[g].tag),
						     GT_ACTIVATION, &sh, pat);
				int opi = emit(L, OP_shard, &cur, 1, out, group);
				ga_dim_set(op_at(L, opi), (struct ga_dim){ .dim = w->dim });
				cur = out;
			}
		}
	}
	strmap_put(L->memo, arena_strdup(L->a, key), cur);
	return cur;
}

/* IR tensor t as op opi consumes it (input i). */
static int operand(struct lower *L, int opi, int i)
{
	int t = L->m->ops[opi].in[i];
	return convert(L, L->val[t], L->act[t], &L->lay->in[opi][i], L->m->tensors[t].name);
}

/* ---- weights ---------------------------------------------------------------------- */

/* The graph tensor of IR weight w, split along `dim` over tp (blocks) or
 * whole (dim < 0). An fsdp weight that tp leaves whole is stored split on
 * dim 0 over ring x ulysses and all-gathered into the arena here, just
 * before its consumer: the memory plan frees the gathered copy after its
 * last use. A tp-sharded weight stays as tp has it (a checkpoint slice is a
 * range of one dim). */
static int weight(struct lower *L, int w, int dim, const struct style_use *u)
{
	if (L->weight_tensor[w] >= 0)
		return L->weight_tensor[w];
	const struct ir_weight *iw = &L->m->weights[w];
	int32_t pat[G_MAX_DIMS];
	for (int d = 0; d < G_MAX_DIMS; d++)
		pat[d] = -1;
	bool tp = dim >= 0 && L->g_lay[LG_TP] >= 0;
	if (tp) {
		int64_t one = iw->shape.d[dim];
		pat[dim] = pattern_split(L, L->g_lay[LG_TP], u && u->nblocks ? u->nblocks : 1,
					 u && u->nblocks ? u->blocks : &one, 1);
	}
	int cp = L->g_lay[LG_CP];
	bool fsdp = L->weight_fsdp[w] && !tp && cp >= 0;
	if (fsdp) {
		int64_t rows = iw->shape.d[0];
		pat[0] = pattern_split(L, cp, 1, &rows, 1);
	}
	int t = new_tensor(L, iw->name, GT_WEIGHT, &iw->shape, pat);
	if (fsdp) {
		pat[0] = -1;
		int out = new_tensor(L, arena_printf(L->a, "%s/gather_fsdp", iw->name),
				     GT_ACTIVATION, &iw->shape, pat);
		int opi = emit(L, OP_all_gather, &t, 1, out, cp);
		ga_dim_set(op_at(L, opi), (struct ga_dim){ .dim = 0 });
		lower_add_scratch(L, opi, arena_printf(L->a, "%s/gather_buf", iw->name),
				  (int64_t)L->tensors.v[out].bytes);
		t = out;
	}
	L->weight_tensor[w] = t;
	return t;
}

/* ---- ops ----------------------------------------------------------------------------- */

static int out_tensor(struct lower *L, int irt, const struct layout *l, const char *suffix)
{
	const struct ir_tensor *t = &L->m->tensors[irt];
	int32_t pat[G_MAX_DIMS];
	lay_patterns(L, &t->shape, l, pat);
	const char *name = suffix ? arena_concat(L->a, t->name, suffix, (char *)NULL) : t->name;
	return new_tensor(L, name, GT_ACTIVATION, &t->shape, pat);
}

static void lower_linear(struct lower *L, int opi, int x)
{
	const struct ir_op *o = &L->m->ops[opi];
	const struct style_use *col = NULL, *row = NULL;
	if (o->module_index >= 0 && L->g_lay[LG_TP] >= 0) {
		col = plan_style(L->c, o->module_index, ST_COLWISE);
		row = plan_style(L->c, o->module_index, ST_ROWWISE);
	}
	const struct layout *outl = &L->lay->produced[o->out];
	int in[3] = { x, weight(L, o->weight0, col ? 0 : row ? 1 : -1, col ? col : row) };
	int nin = 2;
	if (row) {
		/* local partial sums, summed over tp, then the bias once; under
		 * sequence_parallel (the output split on the sequence over tp) a
		 * reduce-scatter keeps each rank's rows of the sum */
		bool sp = outl->g[LG_TP].kind == LAY_SHARD;
		struct layout whole_tp = *outl;
		whole_tp.g[LG_TP] = REPL_AXIS;
		int part = out_tensor(L, o->out, &whole_tp, "/partial");
		emit(L, OP_linear, in, 2, part, -1);
		int sum = out_tensor(L, o->out, outl, o->flag ? "/reduced" : NULL);
		int k = emit(L, sp ? OP_reduce_scatter : OP_all_reduce, &part, 1, sum,
			     L->g_lay[LG_TP]);
		if (sp) {
			ga_dim_set(op_at(L, k), (struct ga_dim){ .dim = outl->g[LG_TP].dim });
			/* the pieces packed in member order, and a float32 sum
			 * of this rank's piece for a storage dtype narrower
			 * than float32 (runtime/ops/collective.c) */
			lower_add_scratch(L, k, arena_printf(L->a, "%s/scatter_buf",
							     L->m->tensors[o->out].name),
					  (int64_t)(L->tensors.v[part].bytes +
						    L->tensors.v[sum].bytes / (uint64_t)L->esize * 4));
		}
		if (o->flag) {
			int out = out_tensor(L, o->out, outl, NULL);
			int args[2] = { sum, weight(L, o->weight0 + 1, -1, NULL) };
			emit(L, OP_add, args, 2, out, -1);
			sum = out;
		}
		L->val[o->out] = sum;
		return;
	}
	if (o->flag)
		in[nin++] = weight(L, o->weight0 + 1, col ? 0 : -1, col);
	int out = out_tensor(L, o->out, outl, NULL);
	int k = emit(L, OP_linear, in, nin, out, -1);
	if (o->flag)
		ga_linear_set(op_at(L, k), (struct ga_linear){ .bias = true });
	L->val[o->out] = out;
}

/* The sequence pattern after a Ulysses all-to-all: rank (ring r) holds, of
 * every block, the context chunks r*U .. r*U+U-1 — contiguous, since the
 * context group is ring-major. -1 when there is no ring: the whole sequence. */
static int ring_seq_pattern(struct lower *L, int cp_pattern)
{
	if (L->g_ring < 0)
		return -1;
	const struct g_pattern *p = &L->patterns.v[cp_pattern];
	uint32_t cs = L->groups.v[p->group].size, rs = L->groups.v[L->g_ring].size;
	uint32_t u = cs / rs;
	struct g_chunk *ch = ARENA_ARRAY(L->a, struct g_chunk, (uint64_t)p->nblk * rs);
	for (uint32_t b = 0; b < p->nblk; b++)
		for (uint32_t r = 0; r < rs; r++) {
			const struct g_chunk *c0 = &L->chunks.v[p->chunk0 + (uint64_t)b * cs + r * u];
			int64_t len = 0;
			for (uint32_t k = 0; k < u; k++)
				len += c0[k].len;
			ch[(uint64_t)b * rs + r] = (struct g_chunk){ c0->start, len };
		}
	return pattern_from_chunks(L, L->g_ring, (int)p->nblk, ch);
}

/* A Ulysses all-to-all of x (sequence-sharded over the context group, all
 * local heads) to head-sharded over ulysses with the ring's sequence. */
static int a2a_forward(struct lower *L, int x, int64_t hd, const char *name)
{
	const struct g_tensor *t = &L->tensors.v[x];
	struct ir_shape sh = tshape(L, x);
	int last = sh.nd - 1;
	/* heads local to tp, which divides them evenly */
	int64_t width = t->pattern[last] >= 0 ? pattern_max(L, t->pattern[last]) : sh.d[last];
	int32_t pat[G_MAX_DIMS];
	for (int d = 0; d < G_MAX_DIMS; d++)
		pat[d] = -1;
	pat[0] = t->pattern[0]; /* a batch split by cfg stays */
	pat[1] = ring_seq_pattern(L, t->pattern[1]);
	sh.d[last] = width;
	pat[last] = pattern_split(L, L->g_uly, 1, &width, hd);
	int out = new_tensor(L, arena_printf(L->a, "%s/ulysses", name), GT_ACTIVATION, &sh, pat);
	int k = emit(L, OP_ulysses_a2a, &x, 1, out, L->g_uly);
	ga_ulysses_a2a_set(op_at(L, k), (struct ga_ulysses_a2a){
		.direction = G_A2A_TO_HEADS, .head_dim = hd, .seq_dim = 1 });
	lower_add_scratch(L, k, arena_printf(L->a, "%s/ulysses_buf", name),
			  (int64_t)(L->tensors.v[x].bytes + L->tensors.v[out].bytes));
	return out;
}

/* USP: the whole mask (layout.c gathered it) cut into the ring's part of
 * the sequence, the rows the keys hold after their all-to-all (pattern kp
 * over the ring): a local slice. One per mask tensor and pattern. */
static int ring_mask(struct lower *L, int mask, int32_t kp, const char *name)
{
	char key[64];
	snprintf(key, sizeof key, "ring_mask|%d|%d", mask, kp);
	int hit = strmap_get(L->memo, key);
	if (hit >= 0)
		return hit;
	struct ir_shape sh = tshape(L, mask);
	int32_t pat[G_MAX_DIMS];
	for (int d = 0; d < G_MAX_DIMS; d++)
		pat[d] = d == 1 ? kp : d == 0 ? L->tensors.v[mask].pattern[0] : -1;
	int out = new_tensor(L, arena_printf(L->a, "%s/mask_ring", name), GT_ACTIVATION, &sh, pat);
	int k = emit(L, OP_shard, &mask, 1, out, L->g_ring);
	ga_dim_set(op_at(L, k), (struct ga_dim){ .dim = 1 });
	strmap_put(L->memo, arena_strdup(L->a, key), out);
	return out;
}

static void lower_cp_attention(struct lower *L, int opi, const int *qkv)
{
	const struct ir_op *o = &L->m->ops[opi];
	const struct plan_cfg *c = L->c;
	const struct ir_shape *qs = &L->m->tensors[o->in[0]].shape;
	const struct ir_shape *vs = &L->m->tensors[o->in[2]].shape;
	int64_t hd = qs->d[2] / o->heads, hdv = vs->d[2] / o->heads;
	bool uly = L->g_uly >= 0 && plan_style(c, o->module_index, ST_ULYSSES);
	bool ring = L->g_ring >= 0 && plan_style(c, o->module_index, ST_RING);
	const char *name = L->m->tensors[o->out].name;
	int nin = o->nin, in[4] = { qkv[0], qkv[1], qkv[2], nin == 4 ? qkv[3] : -1 };
	if (uly)
		for (int i = 0; i < 3; i++)
			in[i] = a2a_forward(L, qkv[i], i == 2 ? hdv : hd,
					    arena_printf(L->a, "%s/%c", name, "qkv"[i]));
	if (uly && ring && nin == 4)
		in[3] = ring_mask(L, in[3], L->tensors.v[in[1]].pattern[1], name);
	/* the attention's own output: like q, with v's width */
	struct ir_shape sh = tshape(L, in[0]);
	int32_t pat[G_MAX_DIMS];
	memcpy(pat, L->tensors.v[in[0]].pattern, sizeof pat);
	const struct g_tensor *vt = &L->tensors.v[in[2]];
	sh.d[2] = vt->dims[2];
	pat[2] = vt->pattern[2];
	int att = uly ? new_tensor(L, arena_printf(L->a, "%s/heads", name), GT_ACTIVATION, &sh, pat)
		      : out_tensor(L, o->out, &L->lay->produced[o->out], NULL);
	if (ring) {
		int k = emit(L, OP_ring_attention, in, nin, att, L->g_ring);
		ga_ring_attention_set(op_at(L, k), (struct ga_ring_attention){
			.head_dim = hd,
			.head_dim_v = hdv,
			.rotate = c->rotate == ROTATE_ALLTOALL ? G_ROT_SENDRECV : G_ROT_GATHER,
			.seq_dim = 1,
			.fp32 = c->convert_to_fp32 });
		/* KV buffers (all of it, or two chunks in flight), the block
		 * output, a float32 accumulator where convert_to_fp32 asks for
		 * one over a 16-bit dtype, and the log-sum-exps: the layout of
		 * graph_ring_scratch, in elements */
		const struct g_tensor *kt = &L->tensors.v[in[1]];
		int64_t kvrow = (kt->bytes / (uint64_t)pattern_max(L, kt->pattern[1])) +
				(vt->bytes / (uint64_t)pattern_max(L, vt->pattern[1]));
		if (nin == 4) /* the mask's chunk travels with its keys */
			kvrow += (int64_t)(L->tensors.v[in[3]].bytes /
					   (uint64_t)pattern_max(L, L->tensors.v[in[3]].pattern[1]));
		int64_t kvmax = pattern_max(L, kt->pattern[1]);
		int64_t kvall = kt->dims[1];
		/* one float per (batch, head, query row) */
		int64_t qrows = pattern_max(L, L->tensors.v[in[0]].pattern[1]);
		int64_t batch_heads = (int64_t)(L->tensors.v[in[0]].bytes / L->esize) / (qrows * hd);
		int64_t kvbuf = kvrow * (c->rotate == ROTATE_ALLTOALL ? 2 * kvmax : kvall);
		uint64_t at[4];
		uint64_t bytes = graph_ring_scratch((uint64_t)kvbuf / L->esize,
						    L->tensors.v[att].bytes / L->esize,
						    (uint64_t)(batch_heads * qrows), L->esize,
						    c->convert_to_fp32 && c->dtype != G_DT_F32, at);
		/* a size past 2^63 fails in new_tensor's check */
		lower_add_scratch(L, k, arena_printf(L->a, "%s/ring_buf", name),
				  bytes > (uint64_t)INT64_MAX - 8 ? INT64_MAX - 8 : (int64_t)bytes);
	} else {
		int k = emit(L, OP_attention, in, nin, att, -1);
		ga_attention_set(op_at(L, k),
				 (struct ga_attention){ .head_dim = hd, .head_dim_v = hdv });
	}
	if (!uly) {
		L->val[o->out] = att;
		return;
	}
	int out = out_tensor(L, o->out, &L->lay->produced[o->out], NULL);
	int k = emit(L, OP_ulysses_a2a, &att, 1, out, L->g_uly);
	ga_ulysses_a2a_set(op_at(L, k), (struct ga_ulysses_a2a){
		.direction = G_A2A_TO_SEQ, .head_dim = hdv, .seq_dim = 1 });
	lower_add_scratch(L, k, arena_printf(L->a, "%s/ulysses_buf", name),
			  (int64_t)(L->tensors.v[att].bytes + L->tensors.v[out].bytes));
	L->val[o->out] = out;
}

/* Per-row sums of x (layout l, its last axis split over tp) over the whole
 * axis: the local sums (norm_stats, g_norm_stat mode; G_NS_CENTRED centres
 * on the all-reduced sum(x) `sums`), all-reduced over tp. */
static int row_sums(struct lower *L, int x, const struct layout *l, int64_t N,
		    enum g_norm_stat mode, int sums, const char *name)
{
	struct ir_shape sh = tshape(L, x);
	sh.d[sh.nd - 1] = mode == G_NS_CENTRED ? 2 : 1;
	struct layout rows = *l;
	rows.g[LG_TP] = REPL_AXIS; /* the summed axis is gone */
	int32_t pat[G_MAX_DIMS];
	lay_patterns(L, &sh, &rows, pat);
	int in[2] = { x, sums };
	int part = new_tensor(L, arena_printf(L->a, "%s/stats", name), GT_ACTIVATION, &sh, pat);
	int k = emit(L, OP_norm_stats, in, sums >= 0 ? 2 : 1, part, -1);
	ga_norm_stats_set(op_at(L, k), (struct ga_norm_stats){ .width = N, .stat = mode });
	int sum = new_tensor(L, name, GT_ACTIVATION, &sh, pat);
	emit(L, OP_all_reduce, &part, 1, sum, L->g_lay[LG_TP]);
	return sum;
}

/* A distributed norm (layout.c's dist_norm): rms_norm from the all-reduced
 * sum(x^2); layer_norm from sum(x), then sum(x - c) and sum((x - c)^2)
 * centred on its mean c — two passes, as the local kernel, so neither the
 * mean nor the variance cancels. The weights are split like x. */
static void lower_dist_norm(struct lower *L, int opi, int x)
{
	const struct ir_op *o = &L->m->ops[opi];
	const struct layout *xl = &L->lay->in[opi][0];
	const char *name = L->m->tensors[o->out].name;
	int64_t N = L->m->tensors[o->in[0]].shape.d[L->m->tensors[o->in[0]].shape.nd - 1];
	int in[5] = { x }, nin = 1;
	for (int w = 0; o->flag && w < o->nweights; w++)
		in[nin++] = weight(L, o->weight0 + w, 0, NULL);
	if (o->kind == OP_layer_norm) {
		int s1 = row_sums(L, x, xl, N, G_NS_SUM, -1, arena_printf(L->a, "%s/sum", name));
		in[nin++] = s1;
		in[nin++] = row_sums(L, x, xl, N, G_NS_CENTRED, s1,
				     arena_printf(L->a, "%s/centred", name));
	} else {
		in[nin++] = row_sums(L, x, xl, N, G_NS_SQ, -1, arena_printf(L->a, "%s/sq", name));
	}
	int out = out_tensor(L, o->out, &L->lay->produced[o->out], NULL);
	ga_norm_set(op_at(L, emit(L, o->kind, in, nin, out, -1)),
		    (struct ga_norm){ .eps = o->eps,
				      .affine = o->flag,
				      .stats = true,
				      .group = o->kind == OP_rms_norm ? N : 0,
				      .width = N });
	L->val[o->out] = out;
}

static void lower_op(struct lower *L, int opi)
{
	const struct ir_op *o = &L->m->ops[opi];
	if (o->kind == OP_param) {
		/* a learned tensor is a weight, whole on every rank */
		L->val[o->out] = weight(L, o->weight0, -1, NULL);
		return;
	}
	int *in = ARENA_ARRAY(L->a, int, o->nin + 2); /* + a norm's weights */
	int nin = o->nin;
	for (int i = 0; i < nin; i++)
		in[i] = operand(L, opi, i);
	if (o->kind == OP_linear) {
		lower_linear(L, opi, in[0]);
		return;
	}
	if (L->lay->dist_norm[opi]) {
		lower_dist_norm(L, opi, in[0]);
		return;
	}
	if (o->kind == OP_attention && o->module_index >= 0 && plan_cp(L->c) > 1 &&
	    (plan_style(L->c, o->module_index, ST_RING) ||
	     plan_style(L->c, o->module_index, ST_ULYSSES))) {
		lower_cp_attention(L, opi, in);
		return;
	}
	if (((o->kind == OP_layer_norm || o->kind == OP_rms_norm) && o->flag) ||
	    o->kind == OP_patch_embed)
		for (int w = 0; w < o->nweights; w++)
			in[nin++] = weight(L, o->weight0 + w, -1, NULL);
	int out = out_tensor(L, o->out, &L->lay->produced[o->out], NULL);
	int k = emit(L, o->kind, in, nin, out, -1);
	const struct op_compile *c = op_compile[o->kind];
	if (c->lower) {
		struct op_lowered X = { L, L->a, L->m, L->tensors.v, L->pattern_max.v, in, k };
		c->lower(&X, o, op_at(L, k));
	}
	L->val[o->out] = out;
}

/* A module's split(out) / gather(dim) styles change its outputs' layouts
 * to what layout.c found for them there. */
static void restyle(struct lower *L, int mi, const int *outs, int n)
{
	for (int i = 0; i < n; i++) {
		int t = outs[i];
		const struct layout *want = &L->lay->module_out[mi][i];
		L->val[t] = convert(L, L->val[t], L->act[t], want, L->m->tensors[t].name);
		L->act[t] = *want;
	}
}

static void lower_ops(struct lower *L)
{
	const struct ir_model *m = L->m;
	/* repeat blocks and tuples with styles, by the op index at which they end */
	int *next_end = ARENA_ARRAY(L->a, int, m->nmodules);
	int *ends_at = layout_module_ends(L->a, L->c, next_end);
	for (int mi = ends_at[0]; mi >= 0; mi = next_end[mi])
		restyle(L, mi, m->modules[mi].outputs, m->modules[mi].noutputs);
	for (int opi = 0; opi < m->nops && !L->failed; opi++) {
		const struct ir_op *o = &m->ops[opi];
		lower_op(L, opi);
		L->act[o->out] = L->lay->produced[o->out];
		if (o->module_index >= 0 && L->c->styles[o->module_index])
			restyle(L, o->module_index, &o->out, 1);
		for (int mi = ends_at[opi + 1]; mi >= 0; mi = next_end[mi])
			restyle(L, mi, m->modules[mi].outputs, m->modules[mi].noutputs);
	}
}

struct g_graph *lower_plan(struct arena *a, struct diag_ctx *d,
			   const struct plan_cfg *c, const struct layout_result *lay,
			   const struct lower_opts *o)
{
	const struct ir_model *m = c->model;
	struct lower L = { .a = a, .d = d, .c = c, .lay = lay, .m = m,
			   .strings = strmap_create(a, 1024), .pattern_ids = strmap_create(a, 64),
			   .memo = strmap_create(a, 1024) };
	for (int i = 0; i < SPLIT_CACHE; i++)
		L.split_cache[i].id = -1;
	int ax_ring = c->ax_ring, ax_uly = c->ax_ulysses;
	/* group ids in the order the graphs have always had them: cp, ring,
	 * ulysses, tp, then the newer groups */
	for (int g = 0; g < LG_COUNT; g++) {
		if (g == LG_TP) {
			L.g_ring = group_id(&L, &ax_ring, 1);
			L.g_uly = group_id(&L, &ax_uly, 1);
		}
		int axes[2], n = 0;
		for (int k = 0; k < lay_groups[g].naxes; k++)
			for (int i = 0; i < c->naxes; i++)
				if (!strcmp(c->axes[i].name, lay_groups[g].axes[k]))
					axes[n++] = i;
		L.g_lay[g] = group_id(&L, axes, n);
	}

	meta_str(&L, "compiler", "dtpc " DTPC_VERSION);
	meta_str(&L, "plan", c->decl->name);
	meta_str(&L, "model", m->name);
	meta_str(&L, "source", o->source_path);
	meta_u64(&L, "source_hash", o->source_hash);
	L.esize = graph_dtype_size(c->dtype);
	meta_str(&L, "dtype", graph_dtype_name(c->dtype));
	const char *mesh = "";
	for (int i = 0; i < c->naxes; i++)
		mesh = arena_printf(a, "%s%s%s=%" PRId64, mesh, i ? "," : "", c->axes[i].name,
				    c->axes[i].size);
	meta_str(&L, "mesh", c->naxes ? mesh : "(none)");
	meta_str(&L, "rotate_method", c->rotate == ROTATE_ALLGATHER ? "allgather" : "alltoall");
	/* the context as the language writes it, so a recompile (run --verify)
	 * resolves the plan exactly as this compile did */
	meta_str(&L, "context", arena_printf(a, "convert_to_fp32 = %s, rotate_method = \"%s\", "
					     "ulysses_anything = %s, ring_anything = %s",
					     c->convert_to_fp32 ? "true" : "false",
					     c->rotate == ROTATE_ALLGATHER ? "allgather" : "alltoall",
					     c->ulysses_anything ? "true" : "false",
					     c->ring_anything ? "true" : "false"));
	meta_bool(&L, "convert_to_fp32", c->convert_to_fp32);
	/* none has no record type of its own: the parameters that are none
	 * are listed by name in "params_none", which run --verify reads */
	struct value none = { .kind = VAL_LIST };
	none.items = ARENA_ARRAY(a, struct value, m->nparams ? m->nparams : 1);
	for (int i = 0; i < m->nparams; i++) {
		if (m->params[i].kind == VAL_NULL)
			none.items[none.n++] = (struct value){ .kind = VAL_STR,
							       .s = m->param_names[i] };
		else
			meta_value(&L, arena_printf(a, "param.%s", m->param_names[i]),
				   &m->params[i]);
	}
	if (none.n)
		meta_value(&L, "params_none", &none);

	L.val = ARENA_ARRAY(a, int, m->ntensors ? m->ntensors : 1);
	L.act = ARENA_ARRAY(a, struct layout, m->ntensors ? m->ntensors : 1);
	L.weight_tensor = ARENA_ARRAY(a, int, m->nweights ? m->nweights : 1);
	L.weight_fsdp = ARENA_ARRAY(a, bool, m->nweights ? m->nweights : 1);
	for (int i = 0; i < m->nweights; i++) {
		L.weight_tensor[i] = -1;
		L.weight_fsdp[i] = false;
	}
	for (int i = 0; i < m->nops; i++)
		for (int w = 0; w < m->ops[i].nweights; w++)
			L.weight_fsdp[m->ops[i].weight0 + w] |= plan_fsdp(c, i);
	for (int i = 0; i < m->ninputs; i++) {
		int t = m->inputs[i];
		L.val[t] = new_tensor(&L, m->tensors[t].name, GT_INPUT, &m->tensors[t].shape, NULL);
		for (int g = 0; g < LG_COUNT; g++)
			L.act[t].g[g] = REPL_AXIS;
		PUSH(&L, L.inputs, (uint32_t)L.val[t]);
	}
	lower_ops(&L);
	/* outputs leave whole (layout.c reported any gather this needs) */
	struct layout whole;
	for (int g = 0; g < LG_COUNT; g++)
		whole.g[g] = REPL_AXIS;
	restyle(&L, 0, m->outputs, m->noutputs); /* the root's gather styles */
	for (int i = 0; i < m->noutputs && !L.failed; i++) {
		int t = m->outputs[i];
		const char *name = m->output_names[i];
		int g = convert(&L, L.val[t], L.act[t], &whole, name);
		if (L.tensors.v[g].kind != GT_ACTIVATION || (L.tensors.v[g].flags & G_TF_OUTPUT)) {
			/* an input or a tensor output twice: copy it, so every
			 * output is an activation of its own */
			int cpy = new_tensor(&L, name, GT_ACTIVATION, &m->tensors[t].shape, NULL);
			emit(&L, OP_reshape, &g, 1, cpy, -1);
			g = cpy;
		}
		/* the caller knows an output by the name the output statement
		 * gives it (`output sample = proj_out;`) */
		L.tensors.v[g].name = str_add(&L, name);
		L.tensors.v[g].flags |= G_TF_OUTPUT;
		PUSH(&L, L.outputs, (uint32_t)g);
	}
	if (L.failed)
		return NULL;

	struct g_graph *g = ARENA_NEW(a, struct g_graph);
	g->meta = L.meta.v;
	g->nmeta = (uint32_t)L.meta.n;
	g->meta_items = L.meta_items.v;
	g->nmeta_items = L.meta_items.n;
	struct g_axis *axes = ARENA_ARRAY(a, struct g_axis, c->naxes ? c->naxes : 1);
	for (int i = 0; i < c->naxes; i++)
		axes[i] = (struct g_axis){ str_id(&L, c->axes[i].name), (uint32_t)c->axes[i].size };
	if (!c->naxes) {
		/* a plan without a mesh runs on one rank: one axis of size 1 */
		axes[0] = (struct g_axis){ str_id(&L, "dp"), 1 };
	}
	g->axes = axes;
	g->naxes = c->naxes ? (uint32_t)c->naxes : 1;
	g->world = (uint32_t)c->world;
	/* after the axis names: the last strings added */
	g->strtab = L.blob.v;
	g->strtab_size = L.blob.n;
	g->stroff = L.stroff.v;
	g->nstrings = (uint32_t)L.stroff.n;
	g->groups = L.groups.v;
	g->ngroups = (uint32_t)L.groups.n;
	g->patterns = L.patterns.v;
	g->npatterns = (uint32_t)L.patterns.n;
	g->chunks = L.chunks.v;
	g->nchunks = L.chunks.n;
	g->tensors = L.tensors.v;
	g->ntensors = (uint32_t)L.tensors.n;
	g->dtypes = L.dtypes.v;
	g->ops = L.ops.v;
	g->nops = (uint32_t)L.ops.n;
	g->operands = L.operands.v;
	g->noperands = (uint32_t)L.operands.n;
	g->inputs = L.inputs.v;
	g->ninputs = (uint32_t)L.inputs.n;
	g->outputs = L.outputs.v;
	g->noutputs = (uint32_t)L.outputs.n;
	return g;
}
