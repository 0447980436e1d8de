/* summary.c — what a plan does, for `dtpc check`: the world and mesh, the
 * rank order, each rule with its matches, the styles per op kind, and heads
 * and sequence per rank for each attention.
 *
 * The summary is built once as a cJSON object; the text form is printed from
 * that object, so `--format json` and text can never disagree. */
#include "summary.h"

#include <cjson/cJSON.h>
#include <inttypes.h>
#include <string.h>

#include "arena.h"
#include "diag.h"
#include "graph/graph_stats.h"
#include "strmap.h"

/* The distinct per-rank sizes of a dim of `size` split n ways, largest
 * first: [256], or [22, 21, 20] for a block-sharded uneven split (each block
 * is split on its own, tensor_split style). */
static cJSON *per_rank(const struct lay_axis *x, int64_t size, int64_t n)
{
	cJSON *sizes = cJSON_CreateArray();
	if (x->kind != LAY_SHARD || n <= 1) {
		cJSON_AddItemToArray(sizes, json_int(size));
		return sizes;
	}
	int64_t seen[8];
	int ns = 0;
	for (int64_t r = 0; r < n && ns < 8; r++) {
		int64_t local = 0;
		if (!x->nblk)
			local = layout_local(size, n, r);
		for (int b = 0; b < x->nblk; b++)
			local += layout_local(x->blk[b], n, r);
		bool dup = false;
		for (int i = 0; i < ns; i++)
			dup |= seen[i] == local;
		if (!dup)
			seen[ns++] = local;
	}
	for (int i = 0; i < ns; i++)
		cJSON_AddItemToArray(sizes, json_int(seen[i]));
	return sizes;
}

/* "blocks.*.attn" for the attention of every block, from blocks.0.attn. */
static const char *stmt_pattern(struct arena *a, const struct ir_model *m, int mi)
{
	const struct ir_module *mod = &m->modules[mi];
	const char *name = mod->name;
	for (int i = mod->parent; i >= 0; i = m->modules[i].parent) {
		const char *iname = m->modules[i].name;
		size_t n = strlen(iname);
		const char *dot = strrchr(iname, '.');
		if (!dot || strncmp(name, iname, n))
			continue;
		name = arena_printf(a, "%.*s.*%s", (int)(dot - iname), name, name + n);
	}
	return name;
}

static cJSON *attention_json(struct arena *a, const struct plan_cfg *c,
			     const struct layout_result *lay, int opi, int count)
{
	const struct ir_model *m = c->model;
	const struct ir_op *o = &m->ops[opi];
	cJSON *j = cJSON_CreateObject();
	cJSON_AddStringToObject(j, "module", stmt_pattern(a, m, o->module_index));
	cJSON_AddNumberToObject(j, "count", count);
	int64_t heads = o->heads;
	const struct layout *in = lay->in[opi];
	bool tp_heads = in[0].g[LG_TP].kind == LAY_SHARD && c->tp > 1;
	bool cp = plan_cp(c) > 1 &&
		  (plan_style(c, o->module_index, ST_RING) ||
		   plan_style(c, o->module_index, ST_ULYSSES));
	bool uly = cp && c->ulysses > 1 && plan_style(c, o->module_index, ST_ULYSSES);
	bool ring = cp && c->ring > 1 && plan_style(c, o->module_index, ST_RING);
	int64_t local = tp_heads ? heads / c->tp : heads;
	int64_t u = uly ? c->ulysses : 1;
	int64_t per = (local + u - 1) / u;
	cJSON_AddItemToObject(j, "heads", json_int(heads));
	cJSON_AddItemToObject(j, "heads_per_rank", json_int(per));
	if (per * u != local)
		cJSON_AddItemToObject(j, "padded_heads", json_int(per * u - local));
	const struct ir_shape *q = &m->tensors[o->in[0]].shape;
	const struct ir_shape *k = &m->tensors[o->in[1]].shape;
	bool qs = in[0].g[LG_CP].kind == LAY_SHARD;
	int64_t cpn = plan_cp(c);
	cJSON_AddItemToObject(j, "q_tokens", json_int(q->d[1]));
	cJSON_AddItemToObject(j, "q_tokens_per_rank", per_rank(&in[0].g[LG_CP], q->d[1], cpn));
	cJSON_AddItemToObject(j, "kv_tokens", json_int(k->d[1]));
	cJSON_AddItemToObject(j, "kv_tokens_per_rank", per_rank(&in[1].g[LG_CP], k->d[1], cpn));
	const char *how = "local";
	if (uly && ring)
		how = c->rotate == ROTATE_ALLGATHER ? "ulysses all-to-all, ring all-gather"
						    : "ulysses all-to-all, ring rotation";
	else if (uly)
		how = "ulysses all-to-all";
	else if (ring)
		how = c->rotate == ROTATE_ALLGATHER ? "ring all-gather" : "ring rotation";
	else if (qs)
		how = "local queries, whole keys";
	cJSON_AddStringToObject(j, "context", how);
	if (uly) {
		/* Ulysses gathers the sequence over its group: each rank then
		 * holds the tokens of one ring position. */
		struct lay_axis whole = in[0].g[LG_CP];
		cJSON_AddItemToObject(j, "tokens_during_attention",
				      per_rank(&whole, q->d[1], c->ring));
	}
	return j;
}

cJSON *summary_build(struct arena *a, const struct plan_cfg *c,
		     const struct layout_result *lay)
{
	const struct ir_model *m = c->model;
	cJSON *j = cJSON_CreateObject();
	cJSON_AddStringToObject(j, "plan", c->decl->name);
	cJSON_AddStringToObject(j, "model", m->name);
	cJSON *params = cJSON_AddObjectToObject(j, "parameters");
	for (int i = 0; i < m->nparams; i++) {
		const struct value *v = &m->params[i];
		if (v->kind == VAL_INT)
			cJSON_AddItemToObject(params, m->param_names[i], json_int(v->i));
		else
			cJSON_AddStringToObject(params, m->param_names[i], value_str(a, v));
	}
	cJSON_AddItemToObject(j, "world", json_int(c->world));
	if (c->seq_parallel && c->tp > 1)
		cJSON_AddBoolToObject(j, "sequence_parallel", true);
	if (c->cfg > 1) {
		/* CFG parallel: which inputs have their batch split */
		cJSON *cj = cJSON_AddObjectToObject(j, "cfg");
		cJSON_AddItemToObject(cj, "ranks", json_int(c->cfg));
		cJSON *ins = cJSON_AddArrayToObject(cj, "inputs");
		for (int i = 0; i < m->ninputs; i++)
			if (c->cfg_input[i])
				cJSON_AddItemToArray(ins, cJSON_CreateString(
					m->tensors[m->inputs[i]].name));
	}
	if (plan_cp(c) > 1) {
		/* FSDP: the weights of the ops under fsdp styles (lower.c splits
		 * those tp leaves whole; -v counts the gathers) */
		int64_t nw = 0;
		for (int i = 0; i < m->nops; i++)
			if (m->ops[i].nweights && plan_fsdp(c, i))
				nw += m->ops[i].nweights;
		if (nw) {
			cJSON *fj = cJSON_AddObjectToObject(j, "fsdp");
			cJSON_AddItemToObject(fj, "ranks", json_int(plan_cp(c)));
			cJSON_AddItemToObject(fj, "weights", json_int(nw));
		}
	}
	cJSON *mesh = cJSON_AddArrayToObject(j, "mesh");
	for (int i = 0; i < c->naxes; i++) {
		cJSON *ax = cJSON_CreateObject();
		cJSON_AddStringToObject(ax, "axis", c->axes[i].name);
		cJSON_AddItemToObject(ax, "size", json_int(c->axes[i].size));
		cJSON_AddItemToArray(mesh, ax);
	}
	/* Row-major over the axes as written: the last axis varies fastest,
	 * so its groups are adjacent ranks. */
	const char *order = "";
	for (int i = 0; i < c->naxes; i++) {
		if (!i) {
			order = c->axes[i].name;
			continue;
		}
		order = arena_printf(a, i == 1 ? "%s * %" PRId64 " + %s"
					       : "(%s) * %" PRId64 " + %s",
				     order, c->axes[i].size, c->axes[i].name);
	}
	cJSON_AddStringToObject(j, "rank", c->naxes ? order : "0");
	cJSON *ctx = cJSON_AddObjectToObject(j, "context");
	cJSON_AddBoolToObject(ctx, "convert_to_fp32", c->convert_to_fp32);
	cJSON_AddStringToObject(ctx, "rotate_method",
				c->rotate == ROTATE_ALLGATHER ? "allgather" : "alltoall");
	cJSON_AddBoolToObject(ctx, "ulysses_anything", c->ulysses_anything);
	cJSON_AddBoolToObject(ctx, "ring_anything", c->ring_anything);
	cJSON_AddStringToObject(j, "dtype", graph_dtype_name(c->dtype));

	cJSON *rules = cJSON_AddArrayToObject(j, "rules");
	for (int i = 0; i < c->nrules; i++) {
		cJSON *r = cJSON_CreateObject();
		cJSON_AddStringToObject(r, "glob", c->rules[i].glob);
		const char *st = "";
		for (const struct style *s = c->rules[i].stmt->styles; s; s = s->next)
			st = arena_printf(a, "%s%s%s", st, *st ? ", " : "", s->name);
		cJSON_AddStringToObject(r, "styles", st);
		cJSON_AddNumberToObject(r, "modules", c->rules[i].nmatched);
		cJSON_AddItemToArray(rules, r);
	}

	/* Styles per op kind: how many modules of each op get each style. */
	int counts[OP_COUNT][ST_COUNT + 1];
	memset(counts, 0, sizeof counts);
	for (int mi = 0; mi < m->nmodules; mi++) {
		if (m->modules[mi].kind != MOD_OP)
			continue;
		int k = m->ops[m->modules[mi].op].kind;
		bool any = false;
		for (const struct style_use *u = c->styles[mi]; u; u = u->next)
			if (u->kind != ST_SPLIT && u->kind != ST_GATHER) {
				counts[k][u->kind]++;
				any = true;
			}
		if (!any)
			counts[k][ST_COUNT]++;
	}
	cJSON *kinds = cJSON_AddObjectToObject(j, "styles_by_op");
	for (int k = 0; k < OP_COUNT; k++) {
		cJSON *o = NULL;
		for (int s = 0; s <= ST_COUNT; s++) {
			if (!counts[k][s])
				continue;
			if (!o)
				o = cJSON_AddObjectToObject(kinds, op_table[k].name);
			cJSON_AddNumberToObject(o, s == ST_COUNT ? "unsharded" : style_names[s],
						counts[k][s]);
		}
	}

	/* One entry per attention statement (all repeat instances alike). */
	cJSON *att = cJSON_AddArrayToObject(j, "attention");
	struct strmap *by_stmt = strmap_create(a, 16);
	for (int opi = 0; opi < m->nops; opi++) {
		const struct ir_op *o = &m->ops[opi];
		if (o->kind != OP_attention || o->module_index < 0)
			continue;
		const char *key = arena_printf(a, "%p", (const void *)o->stmt);
		int k = strmap_get(by_stmt, key);
		if (k >= 0) {
			cJSON *e = cJSON_GetArrayItem(att, k);
			cJSON *n = cJSON_GetObjectItem(e, "count");
			cJSON_SetNumberValue(n, n->valuedouble + 1);
			continue;
		}
		strmap_put(by_stmt, key, cJSON_GetArraySize(att));
		cJSON_AddItemToArray(att, attention_json(a, c, lay, opi, 1));
	}
	cJSON_AddNumberToObject(j, "ops", m->nops);
	cJSON_AddNumberToObject(j, "modules", m->nmodules);
	int64_t wbytes = 0;
	for (int i = 0; i < m->nweights; i++)
		wbytes += shape_numel(&m->weights[i].shape);
	cJSON_AddNumberToObject(j, "weights", m->nweights);
	cJSON_AddItemToObject(j, "weight_elements", json_int(wbytes));
	cJSON_AddNumberToObject(j, "inserted_gathers", lay->nevents);
	return j;
}

static const char *jstr(const cJSON *o, const char *k)
{
	const cJSON *v = cJSON_GetObjectItem(o, k);
	return cJSON_IsString(v) ? v->valuestring : "";
}

static double jnum(const cJSON *o, const char *k)
{
	const cJSON *v = cJSON_GetObjectItem(o, k);
	return cJSON_IsNumber(v) ? v->valuedouble : 0;
}

/* An integer member as exact text (it may be beyond 2^53). */
static const char *jint(const cJSON *o, const char *k, char buf[24])
{
	return json_int_text(cJSON_GetObjectItem(o, k), buf);
}

/* Per-rank sizes [22, 21, 20] as 22/21/20. */
static void print_sizes(const cJSON *a, FILE *out)
{
	const cJSON *n;
	char buf[24];
	int i = 0;
	cJSON_ArrayForEach(n, a)
		fprintf(out, "%s%s", i++ ? "/" : "", json_int_text(n, buf));
}

void summary_print_text(const cJSON *j, FILE *out)
{
	fprintf(out, "plan %s: model %s(", jstr(j, "plan"), jstr(j, "model"));
	const cJSON *p;
	int i = 0;
	char b1[24], b2[24];
	cJSON_ArrayForEach(p, cJSON_GetObjectItem(j, "parameters")) {
		if (cJSON_IsNumber(p) || cJSON_IsRaw(p))
			fprintf(out, "%s%s = %s", i++ ? ", " : "", p->string, json_int_text(p, b1));
		else
			fprintf(out, "%s%s = %s", i++ ? ", " : "", p->string, p->valuestring);
	}
	fprintf(out, ")\n");
	fprintf(out, "  world     %.0f rank%s; mesh", jnum(j, "world"),
		jnum(j, "world") == 1 ? "" : "s");
	const cJSON *ax;
	i = 0;
	cJSON_ArrayForEach(ax, cJSON_GetObjectItem(j, "mesh"))
		fprintf(out, "%s %s = %.0f", i++ ? "," : "", jstr(ax, "axis"), jnum(ax, "size"));
	if (!i)
		fprintf(out, " (none)");
	fprintf(out, "\n  rank      %s\n", jstr(j, "rank"));
	const cJSON *ctx = cJSON_GetObjectItem(j, "context");
	fprintf(out, "  context   convert_to_fp32 = %s, rotate_method = \"%s\"%s%s\n",
		cJSON_IsTrue(cJSON_GetObjectItem(ctx, "convert_to_fp32")) ? "true" : "false",
		jstr(ctx, "rotate_method"),
		cJSON_IsTrue(cJSON_GetObjectItem(ctx, "ulysses_anything")) ? ", ulysses_anything" : "",
		cJSON_IsTrue(cJSON_GetObjectItem(ctx, "ring_anything")) ? ", ring_anything" : "");
	/* named where the plan chose another than the default */
	if (strcmp(jstr(j, "dtype"), "f32"))
		fprintf(out, "  dtype     %s (storage; float32 accumulation)\n", jstr(j, "dtype"));
	if (cJSON_IsTrue(cJSON_GetObjectItem(j, "sequence_parallel")))
		fprintf(out, "  tensor    sequence_parallel: rowwise outputs reduce-scattered "
			"along the sequence, colwise inputs all-gathered\n");
	const cJSON *cfg = cJSON_GetObjectItem(j, "cfg");
	if (cfg) {
		fprintf(out, "  cfg       the batch split over %.0f ranks:", jnum(cfg, "ranks"));
		const cJSON *in;
		i = 0;
		cJSON_ArrayForEach(in, cJSON_GetObjectItem(cfg, "inputs"))
			fprintf(out, "%s %s", i++ ? "," : "", in->valuestring);
		fprintf(out, "; outputs gathered\n");
	}
	const cJSON *fsdp = cJSON_GetObjectItem(j, "fsdp");
	if (fsdp)
		fprintf(out, "  fsdp      %.0f weights of fsdp modules, those tp leaves whole split "
			"on dim 0 over %.0f ranks (ring x ulysses), each all-gathered before its op\n",
			jnum(fsdp, "weights"), jnum(fsdp, "ranks"));
	fprintf(out, "  rules\n");
	const cJSON *r;
	int gw = 0, sw = 0;
	cJSON_ArrayForEach(r, cJSON_GetObjectItem(j, "rules")) {
		int g = (int)strlen(jstr(r, "glob")) + 2, s = (int)strlen(jstr(r, "styles"));
		gw = g > gw ? g : gw;
		sw = s > sw ? s : sw;
	}
	cJSON_ArrayForEach(r, cJSON_GetObjectItem(j, "rules"))
		fprintf(out, "    \"%s\"%*s  %-*s %5.0f module%s\n", jstr(r, "glob"),
			gw - (int)strlen(jstr(r, "glob")) - 2, "", sw, jstr(r, "styles"),
			jnum(r, "modules"), jnum(r, "modules") == 1 ? "" : "s");
	fprintf(out, "  styles by op\n");
	const cJSON *k;
	int kw = 11; /* the op names' column: 11, or the longest name present */
	cJSON_ArrayForEach(k, cJSON_GetObjectItem(j, "styles_by_op"))
		kw = (int)strlen(k->string) > kw ? (int)strlen(k->string) : kw;
	cJSON_ArrayForEach(k, cJSON_GetObjectItem(j, "styles_by_op")) {
		fprintf(out, "    %-*s", kw, k->string);
		const cJSON *s;
		i = 0;
		cJSON_ArrayForEach(s, k)
			fprintf(out, "%s %.0f %s", i++ ? "," : "", s->valuedouble, s->string);
		fprintf(out, "\n");
	}
	const cJSON *att = cJSON_GetObjectItem(j, "attention");
	if (cJSON_GetArraySize(att))
		fprintf(out, "  attention per rank\n");
	const cJSON *a;
	cJSON_ArrayForEach(a, att) {
		fprintf(out, "    %s (x%.0f): %s heads -> %s per rank", jstr(a, "module"),
			jnum(a, "count"), jint(a, "heads", b1), jint(a, "heads_per_rank", b2));
		if (cJSON_GetObjectItem(a, "padded_heads"))
			fprintf(out, " (%s padding)", jint(a, "padded_heads", b1));
		fprintf(out, "; q %s -> ", jint(a, "q_tokens", b1));
		print_sizes(cJSON_GetObjectItem(a, "q_tokens_per_rank"), out);
		fprintf(out, " tokens, kv %s -> ", jint(a, "kv_tokens", b1));
		print_sizes(cJSON_GetObjectItem(a, "kv_tokens_per_rank"), out);
		fprintf(out, " tokens; %s", jstr(a, "context"));
		if (cJSON_GetObjectItem(a, "tokens_during_attention")) {
			fprintf(out, " (");
			print_sizes(cJSON_GetObjectItem(a, "tokens_during_attention"), out);
			fprintf(out, " tokens while attending)");
		}
		fprintf(out, "\n");
	}
	fprintf(out, "  model     %.0f ops, %.0f modules, %.0f weights (%s elements)\n",
		jnum(j, "ops"), jnum(j, "modules"), jnum(j, "weights"),
		jint(j, "weight_elements", b1));
	if (jnum(j, "inserted_gathers"))
		fprintf(out, "  inserted  %.0f gather%s (see the notes)\n",
			jnum(j, "inserted_gathers"), jnum(j, "inserted_gathers") == 1 ? "" : "s");
}

/* Every rank, not the first and last as the text report shows: an uneven
 * split or a ring's end gives ranks different bytes, and a tool reading
 * the report should not have to know which. */
cJSON *summary_report(const struct g_graph *g, const char *path, size_t len)
{
	cJSON *j = cJSON_CreateObject();
	cJSON_AddStringToObject(j, "graph", path);
	cJSON_AddItemToObject(j, "bytes", json_uint(len));
	cJSON_AddNumberToObject(j, "ops", g->nops);
	cJSON_AddNumberToObject(j, "tensors", g->ntensors);
	cJSON_AddNumberToObject(j, "world", g->world);
	cJSON *ranks = cJSON_AddArrayToObject(j, "ranks");
	for (uint32_t r = 0; r < g->world; r++) {
		struct graph_comm_row rows[64];
		int n = 0;
		graph_comm_summary(g, r, rows, &n, 64);
		cJSON *rj = cJSON_CreateObject();
		cJSON_AddNumberToObject(rj, "rank", r);
		cJSON *comm = cJSON_AddArrayToObject(rj, "communication");
		uint64_t total = 0;
		for (int i = 0; i < n; i++) {
			const struct g_group *gr = &g->groups[rows[i].group];
			char axes[64];
			size_t l = 0;
			for (uint32_t a = 0; a < gr->naxes && l < sizeof axes; a++)
				l += (size_t)snprintf(axes + l, sizeof axes - l, "%s%s", a ? "x" : "",
						      graph_str(g, g->axes[gr->axes[a]].name));
			cJSON *c = cJSON_CreateObject();
			cJSON_AddStringToObject(c, "op", op_table[rows[i].kind].name);
			cJSON_AddStringToObject(c, "axes", axes);
			cJSON_AddNumberToObject(c, "group_size", gr->size);
			cJSON_AddNumberToObject(c, "ops", rows[i].count);
			cJSON_AddItemToObject(c, "bytes", json_uint(rows[i].bytes));
			cJSON_AddItemToArray(comm, c);
			total += rows[i].bytes;
		}
		cJSON_AddItemToObject(rj, "communication_bytes", json_uint(total));
		cJSON_AddItemToObject(rj, "arena_bytes", json_uint(g->arena_bytes));
		cJSON_AddItemToObject(rj, "weight_bytes", json_uint(graph_weight_bytes(g, r)));
		uint32_t nwg;
		uint64_t sent, whole;
		graph_weight_gathers(g, r, &nwg, &sent, &whole);
		if (nwg) {
			cJSON *f = cJSON_AddObjectToObject(rj, "fsdp");
			cJSON_AddNumberToObject(f, "weights", nwg);
			cJSON_AddItemToObject(f, "bytes", json_uint(sent));
			cJSON_AddItemToObject(f, "whole_bytes", json_uint(whole));
		}
		cJSON_AddItemToArray(ranks, rj);
	}
	return j;
}
