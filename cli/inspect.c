/* inspect.c — `dtpc inspect FILE.graph`: what a graph does on each rank.
 *
 * Text for people (the header, the mesh and groups, then per rank every op
 * with local shapes, the collectives with their group members, bytes and
 * why they are there, the weight slices and the memory plan), JSON for
 * tools, DOT for Graphviz. Everything is read back through the loader, so
 * inspect shows exactly what the runtime will run. */
#include "inspect.h"

#include <cjson/cJSON.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "compiler/diag.h"
#include "graph/graph_stats.h"

static const char *axis_name(const struct g_graph *g, uint32_t a)
{
	return graph_str(g, g->axes[a].name);
}

static void group_str(const struct g_graph *g, int32_t gi, char *buf, size_t n)
{
	if (gi < 0) {
		snprintf(buf, n, "-");
		return;
	}
	size_t k = 0;
	const struct g_group *gr = &g->groups[gi];
	for (uint32_t i = 0; i < gr->naxes && k < n; i++)
		k += (size_t)snprintf(buf + k, n - k, "%s%s", i ? "x" : "", axis_name(g, gr->axes[i]));
}

static void members_str(const struct g_graph *g, int32_t gi, uint32_t rank, char *buf, size_t n)
{
	size_t k = 0;
	buf[0] = 0;
	const struct g_group *gr = &g->groups[gi];
	for (uint32_t i = 0; i < gr->size && k + 16 < n; i++)
		k += (size_t)snprintf(buf + k, n - k, "%s%u", i ? " " : "",
				      graph_group_member(g, (uint32_t)gi, rank, i));
	if (k + 16 >= n)
		snprintf(buf + k, n - k, " ...");
}

static void shape_str(const struct g_graph *g, uint32_t t, uint32_t rank, char *buf, size_t n)
{
	const struct g_tensor *x = &g->tensors[t];
	size_t k = (size_t)snprintf(buf, n, "[");
	for (int d = 0; d < x->ndim && k < n; d++)
		k += (size_t)snprintf(buf + k, n - k, "%s%" PRId64, d ? ", " : "",
				      graph_local_dim(g, t, d, rank));
	if (k < n)
		snprintf(buf + k, n - k, "]");
}

/* Why an op is here: the collectives, reshuffles and fused pairs the
 * compiler inserted say what for; the model's own ops say that they
 * communicate nothing. */
static const char *why(const struct g_graph *g, const struct g_op *o)
{
	switch ((enum op_kind)o->kind) {
	case OP_shard: return "local slice: a consumer wants this tensor split";
	case OP_all_gather: return "a consumer needs this tensor whole along the dim";
	case OP_all_reduce: {
		/* lower.c names a distributed norm's sums ".../stats" */
		const char *in = graph_str(g, g->tensors[g->operands[o->in0]].name);
		size_t n = strlen(in);
		if (n > 6 && !strcmp(in + n - 6, "/stats"))
			return "sums a distributed norm's per-row statistics (instead of an "
			       "all-gather of its input)";
		return "sums the partial products of a rowwise linear";
	}
	case OP_reduce_scatter:
		return "sums the partial products of a rowwise linear, each rank keeping its "
		       "sequence chunk (sequence-parallel TP)";
	case OP_ulysses_a2a:
		return o->attr[0] == 0 ? "Ulysses: sequence shards -> head shards before attention"
				       : "Ulysses: head shards -> sequence shards after attention";
	case OP_ring_attention:
		if (o->nin == 4)
			return o->attr[2] == 0 ? "ring attention: KV and key mask all-gathered, "
						 "per-chunk LSE merge"
					       : "ring attention: KV and key mask rotated with "
						 "send/recv, LSE merge";
		return o->attr[2] == 0 ? "ring attention: KV all-gathered, per-chunk LSE merge"
				       : "ring attention: KV rotated with send/recv, LSE merge";
	case OP_linear_act:
		/* fuse.c: the pair's meaning, the activation in the GEMM's epilogue */
		return o->attr[0] == G_ACT_SILU ? "linear + silu fused (dtpc --no-fuse: apart)"
		       : o->attr[0] == G_ACT_GELU_TANH
			       ? "linear + gelu (tanh) fused (dtpc --no-fuse: apart)"
			       : "linear + gelu fused (dtpc --no-fuse: apart)";
	case OP_norm_stats:
		return "a distributed norm's per-row sums over this rank's part of the row, "
		       "for the all-reduce after it";
	case OP_linear:
	case OP_layer_norm:
	case OP_rms_norm:
	case OP_gelu:
	case OP_silu:
	case OP_tanh:
	case OP_add:
	case OP_mul:
	case OP_modulate:
	case OP_slice:
	case OP_concat:
	case OP_rope:
	case OP_attention:
	case OP_timestep_embedding:
	case OP_rope_freqs:
	case OP_ltx_rope_freqs:
	case OP_grid_ids:
	case OP_text_ids:
	case OP_patch_embed:
	case OP_unpatchify:
	case OP_reshape:
	case OP_pad:
		return "the model's own op on this rank's pieces: no collective";
	case OP_param: /* graph_parse refuses it: a weight tensor in a graph */
	case OP_COUNT:
		break;
	}
	return "not an op of a graph";
}

static const char *human(uint64_t b, char *buf, size_t n)
{
	if (b >= 1u << 30)
		snprintf(buf, n, "%.2f GiB", (double)b / (1u << 30));
	else if (b >= 1u << 20)
		snprintf(buf, n, "%.2f MiB", (double)b / (1u << 20));
	else if (b >= 1u << 10)
		snprintf(buf, n, "%.1f KiB", (double)b / (1u << 10));
	else
		snprintf(buf, n, "%" PRIu64 " B", b);
	return buf;
}

static const struct {
	uint64_t bit;
	const char *name;
} caps[] = {
	{ G_CAP_F32, "f32" },
	{ G_CAP_BF16, "bf16" },
	{ G_CAP_F16, "f16" },
	{ G_CAP_POSITIONS, "positions" },
	{ G_CAP_CUDA, "cuda" },
};

/* A full shape: [18, 8]. */
static void dims_str(const int64_t *dims, uint32_t ndim, char *buf, size_t n)
{
	size_t k = (size_t)snprintf(buf, n, "[");
	for (uint32_t d = 0; d < ndim && k < n; d++)
		k += (size_t)snprintf(buf + k, n - k, "%s%" PRId64, d ? ", " : "", dims[d]);
	if (k < n)
		snprintf(buf + k, n - k, "]");
}

static void print_header(const struct g_graph *g, size_t len, FILE *out)
{
	char by[48];
	fprintf(out, "graph: %zu bytes (format %d.%u), checksum %016" PRIx64 "\n", len,
		GRAPH_MAJOR, g->minor, g->checksum);
	for (uint32_t i = 0; i < g->nmeta; i++) {
		int n = graph_meta_text(g, i, NULL, 0);
		char *v = malloc((size_t)n + 1);
		if (!v)
			break;
		graph_meta_text(g, i, v, (size_t)n + 1);
		fprintf(out, "  %-20s %s\n", graph_str(g, g->meta[i].key), v);
		free(v);
	}
	/* what a runtime must have to run it */
	fprintf(out, "requires:");
	for (size_t c = 0; c < sizeof caps / sizeof caps[0]; c++)
		if (g->need.caps & caps[c].bit)
			fprintf(out, " %s", caps[c].name);
	fprintf(out, "; ops");
	for (int k = 0; k < OP_COUNT; k++)
		if (g->need.ops >> k & 1)
			fprintf(out, " %s", op_table[k].name);
	fprintf(out, " (compiled by %s)\n",
		graph_compiler_str(g->need.compiler, by, sizeof by));
	if (g->minor >= 1) {
		uint64_t bytes = 0;
		for (uint32_t i = 0; i < g->nweights; i++) {
			uint64_t n = graph_dtype_size(g->weights[i].dtype);
			for (uint32_t d = 0; d < g->weights[i].ndim; d++)
				n *= (uint64_t)g->weights[i].shape[d];
			bytes += n;
		}
		char b[32];
		fprintf(out, "weights manifest: %u tensors, %s in all\n", g->nweights,
			human(bytes, b, sizeof b));
		for (uint32_t i = 0; i < g->nweights; i++) {
			const struct g_weight *w = &g->weights[i];
			char sh[96];
			dims_str(w->shape, w->ndim, sh, sizeof sh);
			fprintf(out, "  %-50s %-4s %s\n", graph_str(g, w->name),
				graph_dtype_name(w->dtype), sh);
		}
	}
	fprintf(out, "mesh:");
	for (uint32_t a = 0; a < g->naxes; a++)
		fprintf(out, "%s %s = %u", a ? "," : "", axis_name(g, a), g->axes[a].size);
	fprintf(out, " (world %u)\n", g->world);
	fprintf(out, "program: %u ops, %u tensors, %u patterns, %u groups; arena %" PRIu64
		" bytes per rank\n", g->nops, g->ntensors, g->npatterns, g->ngroups, g->arena_bytes);
	for (uint32_t i = 0; i < g->ngroups; i++) {
		char name[64], mem[256];
		group_str(g, (int32_t)i, name, sizeof name);
		members_str(g, (int32_t)i, 0, mem, sizeof mem);
		fprintf(out, "  group %u  %-16s size %u; rank 0's: ranks %s\n", i, name,
			g->groups[i].size, mem);
	}
}

static void print_rank(const struct g_graph *g, uint32_t rank, FILE *out)
{
	uint32_t coords[G_MAX_AXES];
	graph_coords(g, rank, coords);
	fprintf(out, "\nrank %u (", rank);
	for (uint32_t a = 0; a < g->naxes; a++)
		fprintf(out, "%s%s %u", a ? ", " : "", axis_name(g, a), coords[a]);
	fprintf(out, ")\n");
	int kw = 14; /* the kind column: 14, or the longest op name used */
	for (uint32_t i = 0; i < g->nops; i++)
		kw = (int)strlen(op_table[g->ops[i].kind].name) > kw
			     ? (int)strlen(op_table[g->ops[i].kind].name) : kw;
	fprintf(out, "  %4s  %-*s %-44s %-18s %s\n", "op", kw, "kind", "output", "local shape",
		"inputs");
	for (uint32_t i = 0; i < g->nops; i++) {
		const struct g_op *o = &g->ops[i];
		char sh[96];
		shape_str(g, o->out, rank, sh, sizeof sh);
		fprintf(out, "  %4u  %-*s %-44s %-18s", i, kw, op_table[o->kind].name,
			graph_str(g, g->tensors[o->out].name), sh);
		for (uint32_t k = 0; k < o->nin; k++)
			fprintf(out, "%s%%%u", k ? " " : "", g->operands[o->in0 + k]);
		fprintf(out, " -> %%%u\n", o->out);
		if (o->group >= 0 && (op_table[o->kind].flags & OPF_COMM)) {
			char gname[64], mem[256], b[32];
			group_str(g, o->group, gname, sizeof gname);
			members_str(g, o->group, rank, mem, sizeof mem);
			fprintf(out, "        %s over %s [ranks %s], sends %s: %s\n",
				op_table[o->kind].name, gname, mem,
				human(graph_comm_bytes(g, i, rank), b, sizeof b), why(g, o));
		} else if (o->kind == OP_shard) {
			char gname[64];
			group_str(g, o->group, gname, sizeof gname);
			fprintf(out, "        this rank's chunk over %s, no communication: %s\n",
				gname, why(g, o));
		} else if (o->kind == OP_linear_act) {
			fprintf(out, "        %s\n", why(g, o));
		}
	}
	fprintf(out, "  weights (this rank's slices)\n");
	for (uint32_t t = 0; t < g->ntensors; t++) {
		const struct g_tensor *x = &g->tensors[t];
		if (x->kind != GT_WEIGHT)
			continue;
		char sh[96];
		shape_str(g, t, rank, sh, sizeof sh);
		fprintf(out, "    %-50s %-16s", graph_str(g, x->name), sh);
		for (int d = 0; d < x->ndim; d++) {
			if (x->pattern[d] < 0)
				continue;
			const struct g_pattern *p = &g->patterns[x->pattern[d]];
			uint32_t idx = graph_group_index(g, p->group, rank);
			fprintf(out, " dim %d of %" PRId64 ":", d, x->dims[d]);
			int64_t base = 0;
			for (uint32_t b = 0; b < p->nblk; b++) {
				const struct g_chunk *c = graph_chunk(g, (uint32_t)x->pattern[d], b, idx);
				fprintf(out, " [%" PRId64 ", %" PRId64 ")", base + c->start,
					base + c->start + c->len);
				int64_t blen = 0;
				for (uint32_t i = 0; i < g->groups[p->group].size; i++)
					blen += graph_chunk(g, (uint32_t)x->pattern[d], b, i)->len;
				base += blen;
			}
		}
		fprintf(out, "\n");
	}
	char b1[32], b2[32];
	fprintf(out, "  memory: arena %s (activations and communication buffers), weights %s\n",
		human(g->arena_bytes, b1, sizeof b1), human(graph_weight_bytes(g, rank), b2, sizeof b2));
	for (uint32_t t = 0; t < g->ntensors; t++) {
		const struct g_tensor *x = &g->tensors[t];
		if (x->kind == GT_WEIGHT)
			continue;
		static const char *kinds[] = { "", "input", "weight", "activation", "scratch" };
		fprintf(out, "    %%%-5u %-10s offset %10" PRIu64 "  bytes %10" PRIu64 "  %s\n", t,
			kinds[x->kind], x->offset, x->bytes, graph_str(g, x->name));
	}
}

/* A metadata value as JSON, by type; a type this reader skipped as its
 * text ("(type 9)"). */
static cJSON *meta_json(const struct g_graph *g, uint32_t i)
{
	const struct g_meta *m = &g->meta[i];
	double f;
	switch (m->type) {
	case GM_U64: return json_uint(m->value);
	case GM_I64: return json_int((int64_t)m->value);
	case GM_F64:
		memcpy(&f, &m->value, sizeof f);
		return cJSON_CreateNumber(f);
	case GM_STR: return cJSON_CreateString(graph_str(g, (uint32_t)m->value));
	case GM_BOOL: return cJSON_CreateBool(m->value != 0);
	case GM_I64_ARRAY:
	case GM_STR_ARRAY: {
		cJSON *a = cJSON_CreateArray();
		const uint64_t *v = graph_meta_items(g, i);
		for (uint64_t k = 0; k < graph_meta_len(g, i); k++)
			cJSON_AddItemToArray(a, m->type == GM_I64_ARRAY
						? json_int((int64_t)v[k])
						: cJSON_CreateString(graph_str(g, (uint32_t)v[k])));
		return a;
	}
	default: {
		char buf[32];
		graph_meta_text(g, i, buf, sizeof buf);
		return cJSON_CreateString(buf);
	}
	}
}

static cJSON *rank_json(const struct g_graph *g, uint32_t rank)
{
	cJSON *r = cJSON_CreateObject();
	cJSON_AddNumberToObject(r, "rank", rank);
	cJSON *ops = cJSON_AddArrayToObject(r, "ops");
	for (uint32_t i = 0; i < g->nops; i++) {
		const struct g_op *o = &g->ops[i];
		cJSON *j = cJSON_CreateObject();
		cJSON_AddStringToObject(j, "kind", op_table[o->kind].name);
		cJSON_AddStringToObject(j, "output", graph_str(g, g->tensors[o->out].name));
		cJSON *sh = cJSON_AddArrayToObject(j, "shape");
		for (int d = 0; d < g->tensors[o->out].ndim; d++)
			cJSON_AddItemToArray(sh, json_int(graph_local_dim(g, o->out, d, rank)));
		cJSON *in = cJSON_AddArrayToObject(j, "inputs");
		for (uint32_t k = 0; k < o->nin; k++)
			cJSON_AddItemToArray(in, cJSON_CreateNumber(g->operands[o->in0 + k]));
		if (o->group >= 0) {
			cJSON *mem = cJSON_AddArrayToObject(j, "group");
			for (uint32_t k = 0; k < g->groups[o->group].size; k++)
				cJSON_AddItemToArray(mem, cJSON_CreateNumber(
					graph_group_member(g, (uint32_t)o->group, rank, k)));
			cJSON_AddItemToObject(j, "bytes", json_uint(graph_comm_bytes(g, i, rank)));
		}
		cJSON_AddStringToObject(j, "why", why(g, o));
		cJSON_AddItemToArray(ops, j);
	}
	cJSON_AddItemToObject(r, "arena_bytes", json_uint(g->arena_bytes));
	cJSON_AddItemToObject(r, "weight_bytes", json_uint(graph_weight_bytes(g, rank)));
	return r;
}

/* ---- DOT ------------------------------------------------------------------ */

/* The repeat block an op belongs to: the shortest prefix NAME.N of its
 * output's name (transformer_blocks.3 of transformer_blocks.3.attn/q/ulysses),
 * as its length; 0 if the name has none. */
static size_t block_prefix(const char *s)
{
	size_t end = strcspn(s, "/");
	for (size_t i = 1; i < end; i++) {
		if (s[i] != '.')
			continue;
		size_t j = i + 1;
		while (j < end && s[j] >= '0' && s[j] <= '9')
			j++;
		if (j > i + 1 && (j == end || s[j] == '.'))
			return j;
	}
	return 0;
}

struct dot_block {
	const char *name; /* into the string table; len bytes */
	size_t len;
	uint32_t nops;
	bool open;  /* expanded by --block */
	bool drawn; /* its node is written */
};

struct dot_edge {
	uint64_t key; /* source node * count + target node */
	uint32_t tensor, order;
};

static int cmp_edge(const void *a, const void *b)
{
	const struct dot_edge *x = a, *y = b;
	if (x->key != y->key)
		return x->key < y->key ? -1 : 1;
	return (x->order > y->order) - (x->order < y->order);
}

/* Whether a collective is drawn as one: it moves bytes between ranks, over
 * a group that uses the --axis (any, when no axis is given). */
static bool shown_comm(const struct g_graph *g, const struct g_op *o, int axis)
{
	/* a shard has a group but only slices locally */
	if (o->group < 0 || !(op_table[o->kind].flags & OPF_COMM))
		return false;
	if (axis < 0)
		return true;
	const struct g_group *gr = &g->groups[o->group];
	for (uint32_t a = 0; a < gr->naxes; a++)
		if (gr->axes[a] == axis)
			return true;
	return false;
}

/* A DOT string's text: names hold no quotes today, but a graph is input */
static void dot_text(FILE *out, const char *s, size_t n)
{
	for (size_t i = 0; i < n && s[i]; i++) {
		if (s[i] == '"' || s[i] == '\\')
			fputc('\\', out);
		fputc(s[i], out);
	}
}

int inspect_dot(const struct g_graph *g, int64_t rank_arg, const char *block, const char *axis_arg,
		FILE *out)
{
	if (rank_arg >= (int64_t)g->world) {
		fprintf(stderr, "dtpc: --rank %" PRId64 " is out of range: the graph has %u ranks\n",
			rank_arg, g->world);
		return 2;
	}
	uint32_t rank = rank_arg < 0 ? 0 : (uint32_t)rank_arg;
	int axis = -1;
	if (axis_arg) {
		for (uint32_t a = 0; a < g->naxes; a++)
			if (!strcmp(axis_name(g, a), axis_arg))
				axis = (int)a;
		if (axis < 0) {
			fprintf(stderr, "dtpc: --axis %s: the mesh has no such axis; axes:", axis_arg);
			for (uint32_t a = 0; a < g->naxes; a++)
				fprintf(stderr, "%s %s", a ? "," : "", axis_name(g, a));
			fprintf(stderr, "\n");
			return 2;
		}
	}
	uint32_t n = g->nops;
	int32_t *blk = calloc(n ? n : 1, sizeof *blk);
	struct dot_block *blocks = calloc(n ? n : 1, sizeof *blocks);
	int64_t *prod = calloc(g->ntensors ? g->ntensors : 1, sizeof *prod);
	struct dot_edge *edges = malloc(sizeof *edges * (g->noperands ? g->noperands : 1));
	bool *input_drawn = calloc(g->ntensors ? g->ntensors : 1, sizeof *input_drawn);
	if (!blk || !blocks || !prod || !edges || !input_drawn) {
		fprintf(stderr, "dtpc: out of memory\n");
		free(blk), free(blocks), free(prod), free(edges), free(input_drawn);
		return 2;
	}
	/* blocks in order of their first op; the last one matched first, as
	 * a block's ops are consecutive */
	uint32_t nb = 0;
	for (uint32_t i = 0; i < n; i++) {
		const char *name = graph_str(g, g->tensors[g->ops[i].out].name);
		size_t len = block_prefix(name);
		blk[i] = -1;
		if (!len)
			continue;
		int32_t b = -1;
		for (uint32_t k = nb; k-- > 0 && b < 0;)
			if (blocks[k].len == len && !memcmp(blocks[k].name, name, len))
				b = (int32_t)k;
		if (b < 0) {
			b = (int32_t)nb++;
			blocks[b] = (struct dot_block){ .name = name, .len = len };
		}
		blocks[b].nops++;
		blk[i] = b;
	}
	/* --block N opens every block numbered N; --block NAME.N that one */
	bool any_open = false;
	for (uint32_t b = 0; block && b < nb; b++) {
		size_t k = blocks[b].len; /* where the number starts */
		while (blocks[b].name[k - 1] != '.')
			k--;
		blocks[b].open = (strlen(block) == blocks[b].len && !memcmp(block, blocks[b].name, blocks[b].len)) ||
				 (strlen(block) == blocks[b].len - k && !memcmp(block, blocks[b].name + k, blocks[b].len - k));
		any_open |= blocks[b].open;
	}
	if (block && !any_open) {
		fprintf(stderr, "dtpc: --block %s: no repeat block has that number or name\n", block);
		free(blk), free(blocks), free(prod), free(edges), free(input_drawn);
		return 2;
	}
	/* node ids: op i, then block b at n + b, then input tensor t at n + nb + t */
	uint64_t nnodes = (uint64_t)n + nb + g->ntensors;
#define NODE_OF(i) (blk[i] >= 0 && !blocks[blk[i]].open && blocks[blk[i]].nops > 1 \
			    ? (uint64_t)n + (uint64_t)blk[i] : (uint64_t)(i))
	const char *plan = NULL;
	for (uint32_t i = 0; i < g->nmeta; i++)
		if (g->meta[i].type == GM_STR && !strcmp(graph_str(g, g->meta[i].key), "plan"))
			plan = graph_str(g, (uint32_t)g->meta[i].value);
	fprintf(out, "digraph dtpc {\n  rankdir=TB;\n  labelloc=t;\n  label=\"");
	dot_text(out, plan ? plan : "graph", SIZE_MAX);
	fprintf(out, ": rank %u of %u%s%s; %u ops, repeat blocks collapsed (--block N opens one)\";\n",
		rank, g->world, axis_arg ? ", collectives over " : "", axis_arg ? axis_arg : "", n);
	fprintf(out, "  node [shape=box, fontname=\"monospace\", fontsize=10];\n"
		     "  edge [fontname=\"monospace\", fontsize=8];\n");
	for (uint32_t t = 0; t < g->ntensors; t++)
		prod[t] = -1;
	for (uint32_t i = 0; i < n; i++)
		prod[g->ops[i].out] = i;
	char buf[128], hb[32];
	uint32_t ne = 0;
	for (uint32_t i = 0; i < n; i++) {
		const struct g_op *o = &g->ops[i];
		uint64_t me = NODE_OF(i);
		if (me >= n && !blocks[blk[i]].drawn) {
			/* a collapsed block, drawn at its first op: its op count and
			 * its collectives by kind and group */
			struct dot_block *b = &blocks[blk[i]];
			bool comm = false;
			b->drawn = true;
			fprintf(out, "  n%" PRIu64 " [shape=box3d, label=\"", me);
			dot_text(out, b->name, b->len);
			fprintf(out, "\\n%u ops", b->nops);
			for (uint32_t k = i; k < n; k++) {
				if (blk[k] != blk[i] || !shown_comm(g, &g->ops[k], axis))
					continue;
				bool first = true;
				for (uint32_t q = i; q < k && first; q++)
					first = !(blk[q] == blk[i] && shown_comm(g, &g->ops[q], axis) &&
						  g->ops[q].kind == g->ops[k].kind && g->ops[q].group == g->ops[k].group);
				if (!first)
					continue;
				uint32_t count = 0;
				uint64_t bytes = 0;
				for (uint32_t q = k; q < n; q++)
					if (blk[q] == blk[i] && g->ops[q].kind == g->ops[k].kind &&
					    g->ops[q].group == g->ops[k].group) {
						count++;
						bytes += graph_comm_bytes(g, q, rank);
					}
				group_str(g, g->ops[k].group, buf, sizeof buf);
				fprintf(out, "\\n%u %s over %s, %s", count, op_table[g->ops[k].kind].name, buf,
					human(bytes, hb, sizeof hb));
				comm = true;
			}
			fprintf(out, "\"%s];\n", comm ? ", style=filled, fillcolor=\"#ffe9bf\"" : "");
		} else if (me < n) {
			shape_str(g, o->out, rank, buf, sizeof buf);
			fprintf(out, "  n%u [label=\"%s\\n", i, op_table[o->kind].name);
			dot_text(out, graph_str(g, g->tensors[o->out].name), SIZE_MAX);
			fprintf(out, "\\n%s", buf);
			if (shown_comm(g, o, axis)) {
				group_str(g, o->group, buf, sizeof buf);
				fprintf(out, "\\nover %s (%u ranks), %s\", style=filled, fillcolor=\"#ffd27f\"];\n",
					buf, g->groups[o->group].size,
					human(graph_comm_bytes(g, i, rank), hb, sizeof hb));
			} else {
				fprintf(out, "\"];\n");
			}
		}
		for (uint32_t k = 0; k < o->nin; k++) {
			uint32_t t = g->operands[o->in0 + k];
			uint64_t from;
			if (prod[t] >= 0) {
				from = NODE_OF(prod[t]);
			} else if (g->tensors[t].kind == GT_INPUT) {
				from = (uint64_t)n + nb + t;
				if (!input_drawn[t]) {
					fprintf(out, "  n%" PRIu64 " [shape=ellipse, label=\"", from);
					dot_text(out, graph_str(g, g->tensors[t].name), SIZE_MAX);
					fprintf(out, "\"];\n");
					input_drawn[t] = true;
				}
			} else {
				continue; /* a weight */
			}
			if (from != me)
				edges[ne++] = (struct dot_edge){ .key = from * nnodes + me, .tensor = t,
								  .order = ne };
		}
	}
#undef NODE_OF
	/* One edge per pair of nodes, labelled with the first tensor's shape on
	 * this rank and the count of the others. A node read by more than
	 * DOT_FANOUT others (the timestep embedding, the rotary tables: every
	 * block reads them) keeps only its first edge, labelled with the count
	 * of its readers: those edges, crossing every block, are what made
	 * Graphviz take minutes on a full-size model, and say nothing a count
	 * does not. */
	enum { DOT_FANOUT = 8 };
	qsort(edges, ne, sizeof *edges, cmp_edge);
	for (uint32_t e = 0, end; e < ne; e = end) {
		uint64_t from = edges[e].key / nnodes;
		uint32_t readers = 0, last = e;
		for (last = e; last < ne && edges[last].key / nnodes == from; last++)
			readers += last == e || edges[last].key != edges[last - 1].key;
		uint32_t more = 0;
		for (end = e + 1; end < ne && edges[end].key == edges[e].key; end++) {
			bool seen = false;
			for (uint32_t k = e; k < end && !seen; k++)
				seen = edges[k].tensor == edges[end].tensor;
			more += !seen;
		}
		shape_str(g, edges[e].tensor, rank, buf, sizeof buf);
		fprintf(out, "  n%" PRIu64 " -> n%" PRIu64 " [label=\"%s", from, edges[e].key % nnodes,
			buf);
		if (more)
			fprintf(out, " +%u", more);
		if (readers > DOT_FANOUT) {
			fprintf(out, "\\nread by %u nodes\", style=dashed];\n", readers);
			end = last;
		} else {
			fprintf(out, "\"];\n");
		}
	}
	fprintf(out, "}\n");
	free(blk), free(blocks), free(prod), free(edges), free(input_drawn);
	return 0;
}

int inspect_graph(const struct g_graph *g, size_t len, int64_t rank, enum inspect_format f,
		  FILE *out)
{
	if (rank >= (int64_t)g->world) {
		fprintf(stderr, "dtpc: --rank %" PRId64 " is out of range: the graph has %u ranks\n",
			rank, g->world);
		return 2;
	}
	if (f == INSPECT_DOT)
		return inspect_dot(g, rank, NULL, NULL, out);
	if (f == INSPECT_JSON) {
		cJSON *j = cJSON_CreateObject();
		cJSON_AddItemToObject(j, "bytes", json_uint(len));
		cJSON_AddNumberToObject(j, "world", g->world);
		cJSON_AddStringToObject(j, "format", g->minor ? "1.1" : "1.0");
		cJSON *meta = cJSON_AddObjectToObject(j, "meta");
		for (uint32_t i = 0; i < g->nmeta; i++)
			cJSON_AddItemToObject(meta, graph_str(g, g->meta[i].key), meta_json(g, i));
		char by[48];
		cJSON *need = cJSON_AddObjectToObject(j, "requires");
		cJSON_AddStringToObject(need, "compiler",
					graph_compiler_str(g->need.compiler, by, sizeof by));
		cJSON *cj = cJSON_AddArrayToObject(need, "caps");
		for (size_t c = 0; c < sizeof caps / sizeof caps[0]; c++)
			if (g->need.caps & caps[c].bit)
				cJSON_AddItemToArray(cj, cJSON_CreateString(caps[c].name));
		cJSON *oj = cJSON_AddArrayToObject(need, "ops");
		for (int k = 0; k < OP_COUNT; k++)
			if (g->need.ops >> k & 1)
				cJSON_AddItemToArray(oj, cJSON_CreateString(op_table[k].name));
		cJSON *wj = cJSON_AddArrayToObject(j, "weights");
		for (uint32_t i = 0; i < g->nweights; i++) {
			const struct g_weight *w = &g->weights[i];
			cJSON *e = cJSON_CreateObject();
			cJSON_AddStringToObject(e, "name", graph_str(g, w->name));
			cJSON_AddStringToObject(e, "dtype", graph_dtype_name(w->dtype));
			cJSON *sh = cJSON_AddArrayToObject(e, "shape");
			for (uint32_t d = 0; d < w->ndim; d++)
				cJSON_AddItemToArray(sh, json_int(w->shape[d]));
			cJSON_AddItemToArray(wj, e);
		}
		cJSON *ranks = cJSON_AddArrayToObject(j, "ranks");
		for (uint32_t r = 0; r < g->world; r++)
			if (rank < 0 ? r == 0 : r == (uint32_t)rank)
				cJSON_AddItemToArray(ranks, rank_json(g, r));
		char *s = cJSON_Print(j);
		fprintf(out, "%s\n", s);
		free(s);
		cJSON_Delete(j);
		return 0;
	}
	print_header(g, len, out);
	print_rank(g, rank < 0 ? 0 : (uint32_t)rank, out);
	return 0;
}
