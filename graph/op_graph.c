/* op_graph.c — each op's graph descriptor (graph/op_graph.h), by family as
 * compiler/ops/ and runtime/ops/ have them, and the table generated from
 * ops.def. One file, not a folder of families: the archives name their
 * members by file name, and graph/ops/linear.o beside runtime/ops/linear.o
 * would blur tests/install.sh's check of which objects a link pulls in. */
#include "graph/op_graph.h"

#include <inttypes.h>
#include <string.h>

#include "graph/error.h"
#include "graph/op_attrs.h"

/* The dim an op cuts, joins or sums along: within the output's dims. */
static bool dim_in_range(const struct g_graph *g, const struct g_op *o, int64_t d)
{
	if (d >= 0 && d < g->tensors[o->out].ndim)
		return true;
	g_raise(G_ERR_FORMAT, "dimension %" PRId64 " out of range (the output has %u)", d,
		 g->tensors[o->out].ndim);
	return false;
}

/* ---- work: what the ops of several families share --------------------------------------- */

static double local_numel(const struct g_graph *g, uint32_t t, uint32_t rank)
{
	return (double)graph_local_numel(g, t, rank);
}

/* The elements op o reads and writes: its result and every operand. */
static double moved_all(const struct g_graph *g, const struct g_op *o, uint32_t rank)
{
	double n = local_numel(g, o->out, rank);
	for (uint32_t k = 0; k < o->nin; k++)
		n += local_numel(g, g->operands[o->in0 + k], rank);
	return n;
}

/* A memory-bound kernel that computes each element of its result (a norm,
 * an activation, a table), reading every operand once, at rate's rate. */
static struct op_work kernel_work(const struct g_graph *g, const struct g_op *o, uint32_t rank,
				  enum op_kind rate)
{
	return (struct op_work){ .kind = OW_KERNEL, .elems = local_numel(g, o->out, rank),
				 .moved = moved_all(g, o, rank), .rate = rate };
}

/* a kernel dtpc calibrate measures: at its own rate */
static struct op_work work_kernel(const struct g_graph *g, const struct g_op *o, uint32_t rank)
{
	return kernel_work(g, o, rank, (enum op_kind)o->kind);
}

/* every operand and the result moved, nothing computed */
static struct op_work work_copy(const struct g_graph *g, const struct g_op *o, uint32_t rank)
{
	return (struct op_work){ .kind = OW_COPY, .moved = moved_all(g, o, rank) };
}

/* the part kept (slice, shard), read and written */
static struct op_work work_part(const struct g_graph *g, const struct g_op *o, uint32_t rank)
{
	return (struct op_work){ .kind = OW_COPY, .moved = 2 * local_numel(g, o->out, rank) };
}

/* the collectives: their time is the cost model's */
static struct op_work work_comm(const struct g_graph *g, const struct g_op *o, uint32_t rank)
{
	return (struct op_work){ .kind = OW_COMM };
}

/* ---- linear, linear_act, param --------------------------------------------------------- */

/* x [.., K] by W [N, K]: 2 M K N, M the rows of the result. linear_act's
 * activation runs on the GEMM's result before it is stored (the
 * epilogue), free beside it. */
static struct op_work work_linear(const struct g_graph *g, const struct g_op *o, uint32_t rank)
{
	uint32_t x = g->operands[o->in0], out = o->out;
	double k = (double)graph_local_dim(g, x, g->tensors[x].ndim - 1, rank);
	double nn = (double)graph_local_dim(g, out, g->tensors[out].ndim - 1, rank);
	double m = nn > 0 ? local_numel(g, out, rank) / nn : 0;
	return (struct op_work){ .kind = OW_GEMM, .flops = 2 * m * k * nn };
}

const struct op_graph op_graph_linear = { .flags = G_OF_BIAS, .work = work_linear };

static bool check_linear_act(const struct g_graph *g, const struct g_op *o)
{
	int64_t act = ga_linear_act_get(o).act;
	if (act >= 0 && act < G_ACT_COUNT)
		return true;
	g_raise(G_ERR_FORMAT, "activation %" PRId64 " (0 gelu, 1 gelu tanh, 2 silu)", act);
	return false;
}

/* fuse.c: the pair's meaning, the activation in the GEMM's epilogue */
static const char *why_linear_act(const struct g_graph *g, const struct g_op *o)
{
	int64_t act = ga_linear_act_get(o).act;
	return act == G_ACT_SILU ? "linear + silu fused (dtpc --no-fuse: apart)"
	       : act == G_ACT_GELU_TANH ? "linear + gelu (tanh) fused (dtpc --no-fuse: apart)"
				      : "linear + gelu fused (dtpc --no-fuse: apart)";
}

const struct op_graph op_graph_linear_act = {
	.flags = G_OF_BIAS, .check = check_linear_act, .work = work_linear, .why = why_linear_act
};

static bool check_param(const struct g_graph *g, const struct g_op *o)
{
	g_raise(G_ERR_FORMAT, "a plan's parameter is a weight tensor in a graph, never an op");
	return false;
}

static const char *why_param(const struct g_graph *g, const struct g_op *o)
{
	return "not an op of a graph";
}

static struct op_work work_param(const struct g_graph *g, const struct g_op *o, uint32_t rank)
{
	return (struct op_work){ .kind = OW_NONE };
}

const struct op_graph op_graph_param = { .check = check_param, .work = work_param,
					 .why = why_param };

/* ---- norms ------------------------------------------------------------------------------ */

const struct op_graph op_graph_layer_norm = { .flags = G_OF_AFFINE | G_OF_STATS,
					      .work = work_kernel };
const struct op_graph op_graph_rms_norm = { .flags = G_OF_AFFINE | G_OF_STATS,
					    .work = work_kernel };

static const char *why_norm_stats(const struct g_graph *g, const struct g_op *o)
{
	return "a distributed norm's per-row sums over this rank's part of the row, "
	       "for the all-reduce after it";
}

const struct op_graph op_graph_norm_stats = { .work = work_copy, .why = why_norm_stats };

/* ---- pointwise -------------------------------------------------------------------------- */

/* no calibration key of its own: one transcendental per element, as silu */
static struct op_work work_as_silu(const struct g_graph *g, const struct g_op *o, uint32_t rank)
{
	return kernel_work(g, o, rank, OP_silu);
}

const struct op_graph op_graph_gelu = { .flags = G_OF_TANH, .work = work_kernel };
const struct op_graph op_graph_silu = { .work = work_kernel };
const struct op_graph op_graph_tanh = { .work = work_as_silu };
const struct op_graph op_graph_sigmoid = { .work = work_as_silu };
const struct op_graph op_graph_add = { .flags = G_OF_BH, .work = work_kernel };
const struct op_graph op_graph_mul = { .flags = G_OF_BH, .work = work_kernel };
const struct op_graph op_graph_modulate = { .flags = G_OF_BH, .work = work_kernel };

/* ---- shape ------------------------------------------------------------------------------ */

static bool check_slice(const struct g_graph *g, const struct g_op *o)
{
	return dim_in_range(g, o, ga_slice_get(o).dim);
}

static bool check_pad(const struct g_graph *g, const struct g_op *o)
{
	return dim_in_range(g, o, ga_pad_get(o).dim);
}

/* concat, shard, all_gather, reduce_scatter */
static bool check_dim(const struct g_graph *g, const struct g_op *o)
{
	return dim_in_range(g, o, ga_dim_get(o).dim);
}

const struct op_graph op_graph_slice = { .check = check_slice, .work = work_part };
const struct op_graph op_graph_concat = { .check = check_dim, .work = work_copy };
const struct op_graph op_graph_reshape = { .work = work_copy };
const struct op_graph op_graph_pad = { .check = check_pad, .work = work_copy };

/* ---- collectives ------------------------------------------------------------------------ */

static const char *why_shard(const struct g_graph *g, const struct g_op *o)
{
	return "local slice: a consumer wants this tensor split";
}

const struct op_graph op_graph_shard = { .check = check_dim, .work = work_part, .why = why_shard };

static uint64_t bytes_all_gather(const struct g_graph *g, const struct g_op *o, uint32_t rank)
{
	/* every other rank's chunk arrives once */
	return graph_local_bytes(g, o->out, rank) -
	       graph_local_bytes(g, g->operands[o->in0], rank);
}

static const char *why_all_gather(const struct g_graph *g, const struct g_op *o)
{
	return "a consumer needs this tensor whole along the dim";
}

const struct op_graph op_graph_all_gather = {
	.check = check_dim, .comm_bytes = bytes_all_gather, .work = work_comm,
	.why = why_all_gather
};

static uint64_t bytes_all_reduce(const struct g_graph *g, const struct g_op *o, uint32_t rank)
{
	/* ring all-reduce: reduce-scatter then all-gather, of float32
	 * whatever the storage (the partial sums are rounded once, after
	 * the sum) */
	uint32_t P = g->groups[o->group].size;
	return 2 * (uint64_t)graph_local_numel(g, g->operands[o->in0], rank) * 4 * (P - 1) / P;
}

static const char *why_all_reduce(const struct g_graph *g, const struct g_op *o)
{
	/* lower.c names a distributed norm's sums ".../stats" */
	const char *in = graph_str(g, g->tensors[g->operands[o->in0]].name);
	size_t n = strlen(in);
	if (n > 6 && !strcmp(in + n - 6, "/stats"))
		return "sums a distributed norm's per-row statistics (instead of an "
		       "all-gather of its input)";
	return "sums the partial products of a rowwise linear";
}

const struct op_graph op_graph_all_reduce = { .comm_bytes = bytes_all_reduce,
					      .work = work_comm, .why = why_all_reduce };

static uint64_t bytes_reduce_scatter(const struct g_graph *g, const struct g_op *o, uint32_t rank)
{
	/* every chunk but mine leaves, once, as float32 whatever the storage
	 * (the sum is rounded once, as an all-reduce's) */
	uint32_t in = g->operands[o->in0];
	uint64_t all = (uint64_t)graph_local_numel(g, in, rank);
	int d = (int)ga_dim_get(o).dim;
	return 4 * (all - all / (uint64_t)graph_local_dim(g, in, d, rank) *
				  (uint64_t)graph_local_dim(g, o->out, d, rank));
}

static const char *why_reduce_scatter(const struct g_graph *g, const struct g_op *o)
{
	return "sums the partial products of a rowwise linear, each rank keeping its "
	       "sequence chunk (sequence-parallel TP)";
}

const struct op_graph op_graph_reduce_scatter = {
	.check = check_dim, .comm_bytes = bytes_reduce_scatter, .work = work_comm,
	.why = why_reduce_scatter
};

static bool check_ulysses_a2a(const struct g_graph *g, const struct g_op *o)
{
	int64_t dir = ga_ulysses_a2a_get(o).direction;
	if (dir == G_A2A_TO_HEADS || dir == G_A2A_TO_SEQ)
		return true;
	g_raise(G_ERR_FORMAT, "direction %" PRId64 " (0 sequence to heads, 1 back)", dir);
	return false;
}

static uint64_t bytes_ulysses_a2a(const struct g_graph *g, const struct g_op *o, uint32_t rank)
{
	/* everything but the part that stays on this rank */
	uint32_t in = g->operands[o->in0];
	uint32_t me = graph_group_index(g, (uint32_t)o->group, rank);
	const struct g_tensor *t = &g->tensors[in];
	int last = t->ndim - 1;
	uint64_t bytes = graph_local_bytes(g, in, rank);
	int64_t width = graph_local_dim(g, in, last, rank);
	struct ga_ulysses_a2a a = ga_ulysses_a2a_get(o);
	if (a.direction == G_A2A_TO_HEADS) {
		const struct g_tensor *ot = &g->tensors[o->out];
		int64_t keep = graph_pattern_len(g, ot->pattern[last], me);
		return width ? bytes / (uint64_t)width * (uint64_t)(width - keep) : 0;
	}
	/* back: my rows of the ring's sequence stay, the rest go */
	int sd = (int)a.seq_dim;
	int64_t rows = graph_local_dim(g, in, sd, rank);
	int64_t mine = graph_local_dim(g, o->out, sd, rank);
	return rows ? bytes / (uint64_t)rows * (uint64_t)(rows - mine) : 0;
}

static const char *why_ulysses_a2a(const struct g_graph *g, const struct g_op *o)
{
	return ga_ulysses_a2a_get(o).direction == G_A2A_TO_HEADS
		       ? "Ulysses: sequence shards -> head shards before attention"
		       : "Ulysses: head shards -> sequence shards after attention";
}

const struct op_graph op_graph_ulysses_a2a = {
	.check = check_ulysses_a2a, .comm_bytes = bytes_ulysses_a2a, .work = work_comm,
	.why = why_ulysses_a2a
};

/* ---- attention -------------------------------------------------------------------------- */

static bool check_rope(const struct g_graph *g, const struct g_op *o)
{
	if (ga_flag(o, G_OF_HALF) && ga_flag(o, G_OF_SPLIT)) {
		g_raise(G_ERR_FORMAT, "both conventions' flags, half 0x%x and split 0x%x",
			G_OF_HALF, G_OF_SPLIT);
		return false;
	}
	return true;
}

const struct op_graph op_graph_rope = { .flags = G_OF_HALF | G_OF_SPLIT, .check = check_rope,
					.work = work_kernel };

/* batch x heads x query rows of q [B, Sq, H Dk] (the head count from
 * the head dim; the same for ring attention's every chunk) */
static double queries(const struct g_graph *g, const struct g_op *o, int64_t head_dim,
		      uint32_t rank)
{
	uint32_t x = g->operands[o->in0];
	double B = (double)graph_local_dim(g, x, 0, rank), Sq = (double)graph_local_dim(g, x, 1, rank);
	double H = (double)graph_local_dim(g, x, 2, rank) / (double)head_dim;
	return B * H * Sq;
}

/* q k^T and p v: 2 (Dk + Dv) per score, one score per query and key row */
static struct op_work work_attention(const struct g_graph *g, const struct g_op *o, uint32_t rank)
{
	struct ga_attention a = ga_attention_get(o);
	double q = queries(g, o, a.head_dim, rank);
	double skv = (double)graph_local_dim(g, g->operands[o->in0 + 1], 1, rank);
	return (struct op_work){ .kind = OW_ATTENTION,
				 .flops = 2 * q * skv * (double)(a.head_dim + a.head_dim_v),
				 .scores = q * skv };
}

const struct op_graph op_graph_attention = { .work = work_attention };

static bool check_ring_attention(const struct g_graph *g, const struct g_op *o)
{
	int64_t rot = ga_ring_attention_get(o).rotate;
	if (rot == G_ROT_GATHER || rot == G_ROT_SENDRECV)
		return true;
	g_raise(G_ERR_FORMAT, "rotate method %" PRId64 " (0 all-gather, 1 send/recv rotation)", rot);
	return false;
}

static uint64_t bytes_ring_attention(const struct g_graph *g, const struct g_op *o, uint32_t rank)
{
	uint32_t P = g->groups[o->group].size;
	uint32_t me = graph_group_index(g, (uint32_t)o->group, rank);
	uint32_t k = g->operands[o->in0 + 1], v = g->operands[o->in0 + 2];
	struct ga_ring_attention a = ga_ring_attention_get(o);
	int sd = (int)a.seq_dim;
	const struct g_tensor *kt = &g->tensors[k];
	uint64_t mine = graph_local_bytes(g, k, rank) + graph_local_bytes(g, v, rank);
	if (o->nin == 4) /* the mask's rows travel with the keys' */
		mine += graph_local_bytes(g, g->operands[o->in0 + 3], rank);
	int64_t rows = graph_local_dim(g, k, sd, rank);
	uint64_t per_row = rows ? mine / (uint64_t)rows : 0;
	int64_t total = 0;
	for (uint32_t i = 0; i < P; i++)
		total += kt->pattern[sd] >= 0 ? graph_pattern_len(g, kt->pattern[sd], i)
					      : kt->dims[sd];
	if (a.rotate == G_ROT_GATHER) /* all other chunks arrive */
		return per_row * (uint64_t)(total - rows);
	/* rotation: P - 1 steps, each passing on the chunk held; the chunk
	 * of the next rank is the one never sent */
	int64_t next = kt->pattern[sd] >= 0 ? graph_pattern_len(g, kt->pattern[sd], (me + 1) % P)
					    : kt->dims[sd];
	return per_row * (uint64_t)(total - next);
}

static const char *why_ring_attention(const struct g_graph *g, const struct g_op *o)
{
	bool gather = ga_ring_attention_get(o).rotate == G_ROT_GATHER;
	if (o->nin == 4)
		return gather ? "ring attention: KV and key mask all-gathered, per-chunk LSE merge"
			      : "ring attention: KV and key mask rotated with send/recv, LSE merge";
	return gather ? "ring attention: KV all-gathered, per-chunk LSE merge"
		      : "ring attention: KV rotated with send/recv, LSE merge";
}

static struct op_work work_ring_attention(const struct g_graph *g, const struct g_op *o,
					  uint32_t rank)
{
	struct ga_ring_attention a = ga_ring_attention_get(o);
	return (struct op_work){ .kind = OW_COMM, .queries = queries(g, o, a.head_dim, rank),
				 .head_dims = (double)(a.head_dim + a.head_dim_v),
				 .head_dim_v = (double)a.head_dim_v };
}

const struct op_graph op_graph_ring_attention = { .flags = G_OF_FP32,
						  .check = check_ring_attention,
						  .comm_bytes = bytes_ring_attention,
						  .work = work_ring_attention,
						  .why = why_ring_attention };

/* ---- rope tables ------------------------------------------------------------------------ */

/* The timestep and RoPE tables and the position grids write their result
 * from a few operands (or none): kernels a profile has no rate of their
 * own for (op_bytes_per_s), at memory_bytes_per_s. */
static struct op_work work_table(const struct g_graph *g, const struct g_op *o, uint32_t rank)
{
	return kernel_work(g, o, rank, OP_COUNT);
}

static bool check_rope_freqs(const struct g_graph *g, const struct g_op *o)
{
	/* ids, or (G_CAP_POSITIONS) one generator's flag instead */
	struct ga_rope_freqs a = ga_rope_freqs_get(o);
	uint32_t gen = ga_bit(a.grid, G_OF_GRID) | ga_bit(a.text, G_OF_TEXT);
	if (o->nin ? gen != 0 : gen != G_OF_GRID && gen != G_OF_TEXT) {
		g_raise(G_ERR_FORMAT, "%u operands with position flags 0x%x (ids, or exactly one of "
			 "grid 0x%x and text 0x%x)", o->nin, gen, G_OF_GRID, G_OF_TEXT);
		return false;
	}
	if (gen && !(g->need.caps & G_CAP_POSITIONS)) {
		g_raise(G_ERR_FORMAT, "computes its positions, but requires does not set their "
			 "capability bit");
		return false;
	}
	if (a.center && gen != G_OF_GRID) {
		g_raise(G_ERR_FORMAT, "centred (0x%x) without grid positions (0x%x)", G_OF_CENTER,
			 G_OF_GRID);
		return false;
	}
	return true;
}

const struct op_graph op_graph_rope_freqs = {
	.flags = G_OF_SIN | G_OF_F64 | G_OF_GRID | G_OF_TEXT | G_OF_CENTER,
	.check = check_rope_freqs, .work = work_table
};
const struct op_graph op_graph_ltx_rope_freqs = { .flags = G_OF_SIN, .work = work_table };
const struct op_graph op_graph_ltx2_rope_freqs = { .flags = G_OF_SIN | G_OF_F64 | G_OF_SPLIT,
						   .work = work_table };

/* ---- embeddings and positions ----------------------------------------------------------- */

/* a GEMM of the patches [tokens, C t h w] by the weight [N, C t h w] (the
 * patchify copy is small beside it) */
static struct op_work work_patch_embed(const struct g_graph *g, const struct g_op *o,
				       uint32_t rank)
{
	uint32_t w = g->operands[o->in0 + 1];
	double nn = (double)g->tensors[w].dims[0];
	double k = local_numel(g, w, rank) / nn;
	return (struct op_work){ .kind = OW_GEMM, .flops = 2 * local_numel(g, o->out, rank) * k };
}

const struct op_graph op_graph_timestep_embedding = { .flags = G_OF_FLIP | G_OF_SCALE_F32,
						      .work = work_table };
const struct op_graph op_graph_grid_ids = { .flags = G_OF_CENTER, .work = work_table };
const struct op_graph op_graph_text_ids = { .work = work_table };
const struct op_graph op_graph_patch_embed = { .flags = G_OF_BIAS, .work = work_patch_embed };
const struct op_graph op_graph_unpatchify = { .work = work_copy };

/* ---- index ------------------------------------------------------------------------------ */

/* index_select, index_copy: the dim within the output, x of the output's
 * rank, the index a vector */
static bool check_index(const struct g_graph *g, const struct g_op *o)
{
	uint32_t x = g->operands[o->in0], idx = g->operands[o->in0 + 1];
	if (!dim_in_range(g, o, ga_dim_get(o).dim))
		return false;
	if (g->tensors[x].ndim != g->tensors[o->out].ndim || g->tensors[idx].ndim != 1) {
		g_raise(G_ERR_FORMAT, "x must have the output's rank and the index one dim");
		return false;
	}
	return true;
}

/* a gather moves the rows it keeps, as a slice; a scatter its whole
 * result and source, as a concat */
const struct op_graph op_graph_index_select = { .check = check_index, .work = work_part };
const struct op_graph op_graph_index_copy = { .check = check_index, .work = work_copy };

/* ---- the table -------------------------------------------------------------------------- */

/* Op ids are stored in graphs: ops.def may only grow at its end. Adding an
 * op updates OP_COUNT here and docs/graph-format.md's list. */
_Static_assert(OP_COUNT == 35, "a new op: update OP_COUNT here and the op list in "
	       "docs/graph-format.md");
_Static_assert(OP_linear == 0 && OP_gelu == 3 && OP_attention == 11 && OP_param == 12 &&
	       OP_shard == 14 && OP_ring_attention == 18 &&
	       OP_reduce_scatter == 27 && OP_linear_act == 28 && OP_ltx_rope_freqs == 29 &&
	       OP_tanh == 30 && OP_ltx2_rope_freqs == 31 && OP_sigmoid == 32 &&
	       OP_index_select == 33 && OP_index_copy == 34,
	       "op ids are never renumbered");

const struct op_graph *const op_graph[OP_COUNT] = {
#define OP(id, glo, ghi, fl, sig) [OP_##id] = &op_graph_##id,
#include "graph/ops.def"
#undef OP
};

const char *graph_op_why(const struct g_graph *g, const struct g_op *o)
{
	if (o->kind >= OP_COUNT)
		return "not an op of a graph";
	const struct op_graph *d = op_graph[o->kind];
	return d->why ? d->why(g, o) : "the model's own op on this rank's pieces: no collective";
}
