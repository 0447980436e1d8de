/* model.c — the cost model's prediction (cost.h): each op's work and time
 * on a rank, the collectives' time, the replay of the graph's op order on
 * every rank at once, and the per-rank report. The model and where it is
 * wrong: docs/cost-model.md. */
#include "cost/cost.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "compiler/driver.h"
#include "graph/graph_stats.h"

static const double dt_bytes[DT_N] = { 4, 2 };

const char *const cost_res_names[COST_R_N] = {
	"linear compute", "attention compute", "memory bandwidth", "launch overhead",
	"intra-node communication", "inter-node communication", "waiting for slower ranks",
};
const char *const cost_res_keys[COST_R_N] = { "linear", "attention", "memory", "launch",
					      "intra_comm", "inter_comm", "wait" };
const char *const cost_flop_keys[COST_F_N] = { "linear", "attention", "pointwise" };

static double tensor_bytes(const struct g_graph *g, uint32_t t, uint32_t rank, double es)
{
	return (double)graph_local_numel(g, t, rank) * es;
}

struct sim {
	const struct g_graph *g;
	const struct hw *h;
	const struct dt_profile *dp;
	double es;            /* bytes per element of the dtype */
	struct rates *rates;  /* per rank */
	double *share;        /* per rank: its part of a CPU node's cores (1 on a GPU) */
	uint32_t *on_node;    /* per rank: the ranks on its node */
	uint8_t *inter;       /* [group * world + rank]: does the group span nodes */
};

/* The cores a rank of n computes on, of a node's C: its pool's threads
 * (dtpc run gives each rank C / n of them, at least one), or its part of
 * the cores where the ranks outnumber them. */
static double rank_cores(int C, uint32_t n)
{
	return n >= (uint32_t)C ? (double)C / n : (double)((uint32_t)C / n);
}

/* A table row (by_ranks, by_group) for n: its own, else the nearest below,
 * else the smallest; -1 when the table is empty. */
static int nearest(const int *sizes, int count, int n)
{
	int best = -1;
	for (int k = 0; k < count; k++) {
		int m = sizes[k], b = best < 0 ? 0 : sizes[best];
		if (best < 0 || (m <= n && (b > n || m > b)) || (m > n && b > n && m < b))
			best = k;
	}
	return best;
}

/* The rates of a rank with n ranks on its node: the by_ranks row for n
 * (measured so), or the nearest row scaled by the cores each rank gets;
 * without a table the profile's own rates times the rank's share. */
static void rank_rates(const struct dt_profile *dp, int C, uint32_t n, double share,
		       struct rates *out)
{
	int k = nearest(dp->row_ranks, dp->nrows, (int)n);
	double f = share;
	*out = dp->base;
	if (k >= 0) {
		*out = dp->rows[k];
		f = rank_cores(C, n) / rank_cores(C, (uint32_t)dp->row_ranks[k]);
	}
	out->linear.peak *= f;
	out->attention.peak *= f;
	out->attention.score /= f;
	for (int m = 0; m < M_N; m++)
		out->op_bw[m] *= f;
	out->mem_bw *= f;
}

/* Time of one collective, or of one ring step (p2p), of a group of gsize
 * over a link: the link's by_group row for the size (or the nearest), as
 * measured with ranks_at_work ranks busy on the node, slowed where the run
 * has more ranks per core than that (a CPU node's copies share its cores);
 * without a row, the link's figures times the rank's share of the cores. */
static double link_time(const struct sim *s, const struct link *l, int c, double bytes,
			uint32_t r, uint32_t gsize)
{
	int k = nearest(l->group_size, l->ngroups, (int)gsize);
	if (k < 0)
		return l->alpha[c] + bytes / (l->busbw[c] * s->share[r]);
	const struct group_row *g = &l->groups[k];
	double C = s->h->threads_per_node, f = 1;
	if (C > 0)
		f = fmin(1, C / s->on_node[r]) / fmin(1, C / g->at_work);
	return g->alpha[c] + bytes / (g->busbw[c] * f);
}

static double kernel_time(const struct rate *r, double flops, double scores)
{
	return r->fixed + flops / r->peak + scores * r->score;
}

/* A memory-bound move of `bytes` (read and written) by kernel kind m. */
static double move_time(const struct sim *s, uint32_t r, int m, double bytes)
{
	return bytes / s->rates[r].op_bw[m];
}

/* The bytes op o moves on rank r: its result and every operand. */
static double op_bytes(const struct sim *s, const struct g_op *o, uint32_t r)
{
	double b = tensor_bytes(s->g, o->out, r, s->es);
	for (uint32_t k = 0; k < o->nin; k++)
		b += tensor_bytes(s->g, s->g->operands[o->in0 + k], r, s->es);
	return b;
}

/* A memory-bound kernel that computes each element of its result (a
 * norm, an activation, a table): the elements count as pointwise work,
 * its bytes move at bw. */
static double pointwise(const struct sim *s, const struct g_op *o, uint32_t r,
			struct cost_rank *rc, double bw)
{
	rc->flops[COST_F_POINTWISE] += (double)graph_local_numel(s->g, o->out, r);
	rc->nops[COST_F_POINTWISE]++;
	return op_bytes(s, o, r) / bw;
}

static void add_row(struct cost_rank *rc, int kind, int group, bool inter, double bytes,
		    double time, double hidden)
{
	int k = 0;
	while (k < rc->nrows && !(rc->rows[k].kind == kind && rc->rows[k].group == group))
		k++;
	if (k == COST_MAX_ROWS)
		return;
	if (k == rc->nrows) {
		rc->rows[k] = (struct cost_comm_row){ .kind = kind, .group = group, .inter = inter };
		rc->nrows++;
	}
	rc->rows[k].count++;
	rc->rows[k].bytes += bytes;
	rc->rows[k].time += time;
	rc->rows[k].hidden += hidden;
}

/* The channels (one CTA each) NCCL gives one send/recv of `bytes` in a
 * communicator of P ranks (src/enqueue.cc: scheduleP2pTasksToPlan and
 * addP2pToPlan, the same rule since NCCL 2.21 at least): the per-peer
 * channels halved until P peers fit in the communicator's p2p channels
 * (taken equal to the per-peer channels, as NCCL's log on 8 x H100 reads:
 * 32 and 32), no more than one per 64 KiB part, then doubled while a part
 * exceeds 16 MiB (32 chunks of NCCL_P2P_NVL_CHUNKSIZE, 512 KiB), at most
 * the per-peer channels. Across nodes the parts are 256 to 512 KiB. */
static double p2p_channels(double per_peer, uint32_t P, double bytes, bool inter)
{
	double n = per_peer, lo = inter ? 262144 : 65536, hi = inter ? 524288 : 16777216;
	while (n * P > per_peer && n > 1)
		n /= 2;
	n = fmax(1, fmin(n, ceil(bytes / lo)));
	while (bytes / n > hi && n * 2 <= per_peer)
		n *= 2;
	return n;
}

/* Adds op i's cost on rank r to rc (by resource) and returns its duration
 * on r alone, before any wait for the group. Besides each kernel, the
 * executor's own copies (runtime/exec.c) are charged: the packing and
 * unpacking around an all-to-all, the unpacking after an all-gather, the
 * copy an all-reduce sums in place, the ring's first K/V chunk. */
static double op_cost(const struct sim *s, uint32_t i, uint32_t r, struct cost_rank *rc)
{
	const struct g_graph *g = s->g;
	const struct g_op *o = &g->ops[i];
	const struct rates *rt = &s->rates[r];
	const double es = s->es;
	uint32_t out = o->out, x = o->nin ? g->operands[o->in0] : out;
	double t = 0;
	int res = COST_R_MEM;
	switch ((enum op_kind)o->kind) {
	/* linear_act: the linear's FLOPs and time; its activation runs on the
	 * GEMM's result before it is stored (the epilogue), free beside it */
	case OP_linear:
	case OP_linear_act: {
		const struct g_tensor *xt = &g->tensors[x];
		double k = (double)graph_local_dim(g, x, xt->ndim - 1, r);
		double nn = (double)graph_local_dim(g, out, g->tensors[out].ndim - 1, r);
		double m = nn > 0 ? (double)graph_local_numel(g, out, r) / nn : 0;
		double f = 2 * m * k * nn;
		rc->flops[COST_F_LINEAR] += f;
		rc->nops[COST_F_LINEAR]++;
		t = f > 0 ? kernel_time(&rt->linear, f, 0) : 0;
		res = COST_R_LINEAR;
		break;
	}
	case OP_patch_embed: {
		/* a GEMM of the patches [tokens, C t h w] by the weight (the
		 * patchify copy is small beside it) */
		const struct g_tensor *wt = &g->tensors[g->operands[o->in0 + 1]];
		double nn = (double)wt->dims[0];
		double k = (double)graph_local_numel(g, g->operands[o->in0 + 1], r) / nn;
		double f = 2 * (double)graph_local_numel(g, out, r) * k;
		rc->flops[COST_F_LINEAR] += f;
		rc->nops[COST_F_LINEAR]++;
		t = f > 0 ? kernel_time(&rt->linear, f, 0) : 0;
		res = COST_R_LINEAR;
		break;
	}
	case OP_attention: {
		uint32_t k = g->operands[o->in0 + 1];
		double B = (double)graph_local_dim(g, x, 0, r), Sq = (double)graph_local_dim(g, x, 1, r);
		double Skv = (double)graph_local_dim(g, k, 1, r);
		double H = (double)graph_local_dim(g, x, 2, r) / (double)o->attr[0];
		double f = 2 * B * H * Sq * Skv * (double)(o->attr[0] + o->attr[1]);
		rc->flops[COST_F_ATTN] += f;
		rc->nops[COST_F_ATTN]++;
		t = f > 0 ? kernel_time(&rt->attention, f, B * H * Sq * Skv) : 0;
		res = COST_R_ATTN;
		break;
	}
	case OP_ring_attention: {
		/* one attention kernel and one log-sum-exp merge per KV chunk; with
		 * rotation (attr[2] = 1) each step's send/recv runs under the
		 * attention on the chunk held (where the link overlaps: not the CPU
		 * backends, which copy when a rank waits), with the all-gather (one
		 * for K, one for V) it comes first */
		uint32_t P = g->groups[o->group].size, k = g->operands[o->in0 + 1];
		uint32_t v = g->operands[o->in0 + 2];
		bool inter = s->inter[(size_t)o->group * g->world + r];
		const struct link *l = inter ? &s->h->inter : &s->h->intra;
		double B = (double)graph_local_dim(g, x, 0, r), Sq = (double)graph_local_dim(g, x, 1, r);
		double H = (double)graph_local_dim(g, x, 2, r) / (double)o->attr[0];
		/* the merge reads the block and the accumulator and writes it back,
		 * in the storage dtype (the float32 log-sum-exp rows beside them
		 * are 1 / Dv of that, left out as dtpc calibrate leaves them) */
		double merge = move_time(s, r, M_LSE_MERGE, 3 * B * Sq * H * (double)o->attr[1] * es);
		double bytes = (double)graph_comm_bytes(g, i, r) * es / graph_comm_elem_size(g, i);
		/* while a step's send/recv runs, its kernel holds one SM per
		 * channel NCCL gives it, and the attention under it runs on the
		 * others */
		double chans = l->p2p_ctas > 0 && P > 1
				       ? p2p_channels(l->p2p_ctas, P, bytes / (P - 1), inter) : 0;
		double lost = s->h->sms > 0 ? chans / s->h->sms : 0;
		double compute = 0, comm = 0, exposed = 0, first = 0;
		for (uint32_t m = 0; m < P; m++) {
			uint32_t peer = graph_group_member(g, (uint32_t)o->group, r, m);
			double rows = (double)graph_local_dim(g, k, 1, peer);
			double f = 2 * B * H * Sq * rows * (double)(o->attr[0] + o->attr[1]);
			rc->flops[COST_F_ATTN] += f;
			double a = f > 0 ? kernel_time(&rt->attention, f, B * H * Sq * rows) : 0;
			double c = a + (m ? merge : 0);
			if (o->attr[2] == 1 && m + 1 < P) {
				double step = link_time(s, l, CO_P2P, bytes / (P - 1), r, P);
				/* a lone send/recv moves no more than its channels
				 * do (where the profile says what one moves) */
				if (l->channel_bw > 0)
					step = fmax(step, l->alpha[CO_P2P] +
								  bytes / (P - 1) / (chans * l->channel_bw));
				/* attention of a seconds on the whole GPU, at (1 - lost)
				 * of its rate while the transfer runs: slowed by
				 * lost x the time both run */
				if (l->overlap && lost > 0)
					c += fmin(step, a / (1 - lost)) * lost;
				comm += step;
				/* the next chunk's attention waits for the transfer
				 * on the GPU (an event), the host having launched it
				 * already */
				exposed += !l->overlap ? step : step > c ? step - c : 0;
			}
			compute += c;
		}
		rc->nops[COST_F_ATTN]++;
		if (o->attr[2] != 1)
			exposed = comm = link_time(s, l, CO_AG, bytes / 2, r, P) * 2;
		else /* the own chunk's K and V copied to the rotation's buffer */
			first = move_time(s, r, M_COPY,
					  2 * (tensor_bytes(g, k, r, es) + tensor_bytes(g, v, r, es)));
		rc->t[COST_R_ATTN] += compute - (P - 1) * merge;
		rc->t[COST_R_MEM] += (P - 1) * merge + first;
		rc->t[inter ? COST_R_INTER : COST_R_INTRA] += exposed;
		rc->hidden += comm - exposed;
		add_row(rc, o->kind, o->group, inter, bytes, comm, comm - exposed);
		return compute + exposed + first;
	}
	case OP_all_gather:
	case OP_all_reduce:
	case OP_reduce_scatter:
	case OP_ulysses_a2a: {
		bool inter = s->inter[(size_t)o->group * g->world + r];
		const struct link *l = inter ? &s->h->inter : &s->h->intra;
		/* a reduce-scatter is the backend's (ring: the first half of
		 * an all-reduce), timed at the all-reduce's bandwidth over its
		 * own bytes */
		bool sum = o->kind == OP_all_reduce || o->kind == OP_reduce_scatter;
		int c = o->kind == OP_all_gather ? CO_AG : sum ? CO_AR : CO_A2A;
		uint32_t P = g->groups[o->group].size;
		/* an all-reduce or reduce-scatter sums in float32 whatever the
		 * dtype (runtime/ops/collective.c): a narrower one is converted
		 * in and out, and travels as float32 */
		bool wide = sum && es < 4;
		double bytes = (double)graph_comm_bytes(g, i, r) / graph_comm_elem_size(g, i) *
			       (wide ? 4 : es);
		double moved = o->kind == OP_all_gather ? tensor_bytes(g, out, r, es) * 2
			       : o->kind == OP_all_reduce
				       ? tensor_bytes(g, x, r, es) * (wide ? 2 * (1 + 4 / es) : 2)
			       : o->kind == OP_reduce_scatter
				       /* the pieces packed; where narrower, widened
					* and the rank's sum rounded back */
				       ? tensor_bytes(g, x, r, es) * 2 +
						 (wide ? (tensor_bytes(g, x, r, es) +
							  tensor_bytes(g, out, r, es)) * (1 + 4 / es)
						       : 0)
				       : (tensor_bytes(g, x, r, es) + tensor_bytes(g, out, r, es)) * 2;
		/* the nccl backend's all-to-all copies the rank's own piece
		 * itself (comm_nccl.c; a CPU profile's measured bandwidth holds
		 * its backend's) */
		if (o->kind == OP_ulysses_a2a && s->h->sms > 0)
			moved += 2 * tensor_bytes(g, x, r, es) / P;
		double copies = move_time(s, r, M_COPY, moved);
		t = link_time(s, l, c, bytes, r, P);
		rc->t[inter ? COST_R_INTER : COST_R_INTRA] += t;
		rc->t[COST_R_MEM] += copies;
		add_row(rc, o->kind, o->group, inter, bytes, t, 0);
		return t + copies;
	}
	case OP_layer_norm:
		t = pointwise(s, o, r, rc, rt->op_bw[M_LAYER_NORM]);
		break;
	case OP_rms_norm:
		t = pointwise(s, o, r, rc, rt->op_bw[M_RMS_NORM]);
		break;
	case OP_gelu:
		t = pointwise(s, o, r, rc, rt->op_bw[M_GELU]);
		break;
	case OP_silu:
	/* no calibration key of its own: one transcendental per element, as silu */
	case OP_tanh:
		t = pointwise(s, o, r, rc, rt->op_bw[M_SILU]);
		break;
	case OP_add:
		t = pointwise(s, o, r, rc, rt->op_bw[M_ADD]);
		break;
	case OP_mul:
		t = pointwise(s, o, r, rc, rt->op_bw[M_MUL]);
		break;
	case OP_modulate:
		t = pointwise(s, o, r, rc, rt->op_bw[M_MODULATE]);
		break;
	case OP_rope:
		t = pointwise(s, o, r, rc, rt->op_bw[M_ROPE]);
		break;
	/* The timestep and RoPE tables and the position grids write their
	 * result from a few operands (or none): kernels a profile has no rate
	 * of their own for (op_bytes_per_s), at memory_bytes_per_s. */
	case OP_timestep_embedding:
	case OP_rope_freqs:
	case OP_ltx_rope_freqs:
	case OP_grid_ids:
	case OP_text_ids:
		t = pointwise(s, o, r, rc, rt->mem_bw);
		break;
	case OP_concat:
	case OP_index_copy: /* x copied, src's rows written */
	case OP_pad:
	case OP_reshape:
	case OP_norm_stats:
	case OP_unpatchify:
		t = move_time(s, r, M_COPY, op_bytes(s, o, r));
		break;
	/* the rows the index picks, read and written */
	case OP_index_select:
	case OP_slice:
	case OP_shard: /* the part kept, read and written */
		t = move_time(s, r, M_COPY, 2 * tensor_bytes(g, out, r, es));
		break;
	case OP_param:
	case OP_COUNT:
		return 0;
	}
	/* a kernel shorter than its launch waits for the launch */
	if (t < rt->launch) {
		rc->t[COST_R_LAUNCH] += rt->launch;
		return rt->launch;
	}
	rc->t[res] += t;
	return t;
}

/* Does group gi, as rank r sees it, have members on other nodes than r's
 * (rank q on node q / rpn)? */
static bool spans_nodes(const struct g_graph *g, uint32_t gi, uint32_t r, uint32_t rpn)
{
	for (uint32_t m = 0; m < g->groups[gi].size; m++)
		if (graph_group_member(g, gi, r, m) / rpn != r / rpn)
			return true;
	return false;
}

/* Replays the graph's op order on every rank at once: local ops advance a
 * rank's clock; a collective starts when its last member arrives and ends
 * after its slowest member's time (the early ones wait). The step is the
 * latest clock. COST_NO_INTER: a group crosses nodes and the profile has no
 * inter-node link to time it on. */
int cost_predict(const struct g_graph *g, const struct hw *h, int dtype,
		 struct cost_prediction *p)
{
	uint32_t W = g->world;
	memset(p, 0, sizeof *p);
	p->world = (int)W;
	p->dtype = dtype;
	struct sim s = { .g = g, .h = h, .dp = &h->dt[dtype], .es = dt_bytes[dtype] };
	p->ranks = calloc(W, sizeof *p->ranks);
	double *dur = calloc(W, sizeof *dur), *next = calloc(W, sizeof *next);
	s.share = calloc(W, sizeof *s.share);
	s.rates = calloc(W, sizeof *s.rates);
	s.on_node = calloc(W, sizeof *s.on_node);
	s.inter = calloc((size_t)g->ngroups * W + 1, 1);
	if (!p->ranks || !dur || !next || !s.share || !s.rates || !s.on_node || !s.inter) {
		free(dur), free(next), free(s.share), free(s.rates), free(s.on_node), free(s.inter);
		free(p->ranks);
		p->ranks = NULL;
		return COST_NO_MEMORY;
	}
	/* placement: ranks fill nodes in order (rank r on node r / ranks_per_node) */
	uint32_t rpn = (uint32_t)h->ranks_per_node;
	for (uint32_t r = 0; r < W; r++) {
		uint32_t on_node = W - r / rpn * rpn < rpn ? W - r / rpn * rpn : rpn;
		s.on_node[r] = on_node;
		s.share[r] = h->threads_per_node ? (double)h->threads_per_node / on_node : 1;
		rank_rates(s.dp, h->threads_per_node, on_node, s.share[r], &s.rates[r]);
		for (uint32_t gi = 0; gi < g->ngroups; gi++)
			s.inter[(size_t)gi * W + r] = spans_nodes(g, gi, r, rpn);
	}
	if (!h->inter.present && memchr(s.inter, 1, (size_t)g->ngroups * W)) {
		free(dur), free(next), free(s.share), free(s.rates), free(s.on_node);
		free(s.inter), free(p->ranks);
		p->ranks = NULL;
		return COST_NO_INTER;
	}
	p->memory_limit = h->memory;
	if (h->threads_per_node)
		p->memory_limit = h->memory / (W < rpn ? W : rpn);
	for (uint32_t i = 0; i < g->nops; i++) {
		const struct g_op *o = &g->ops[i];
		for (uint32_t r = 0; r < W; r++)
			dur[r] = op_cost(&s, i, r, &p->ranks[r]);
		if (o->group < 0) {
			for (uint32_t r = 0; r < W; r++)
				p->ranks[r].end += dur[r];
			continue;
		}
		for (uint32_t r = 0; r < W; r++) {
			double start = 0, longest = 0;
			for (uint32_t m = 0; m < g->groups[o->group].size; m++) {
				uint32_t q = graph_group_member(g, (uint32_t)o->group, r, m);
				start = fmax(start, p->ranks[q].end);
				longest = fmax(longest, dur[q]);
			}
			next[r] = start + longest;
			/* rounding leaves crumbs where nobody waited */
			double wait = next[r] - p->ranks[r].end - dur[r];
			p->ranks[r].t[COST_R_WAIT] += wait > 1e-12 * next[r] ? wait : 0;
		}
		for (uint32_t r = 0; r < W; r++)
			p->ranks[r].end = next[r];
	}
	for (uint32_t r = 0; r < W; r++) {
		struct cost_rank *rc = &p->ranks[r];
		/* the graph's bytes are in the plan's dtype; the model's in its own */
		double gs = g->ntensors ? graph_dtype_size(graph_tensor_dtype(g, 0)) : 4;
		rc->act = (double)g->arena_bytes * s.es / gs;
		rc->weights = (double)graph_weight_bytes(g, r) * s.es / gs;
		if (rc->end > p->step) {
			p->step = rc->end;
			p->slowest = (int)r;
		}
	}
	const struct cost_rank *sl = &p->ranks[p->slowest];
	for (int k = 1; k < COST_R_N; k++)
		if (sl->t[k] > sl->t[p->bound])
			p->bound = k;
	free(dur), free(next), free(s.share), free(s.rates), free(s.on_node), free(s.inter);
	return COST_OK;
}

double cost_peak_memory(const struct cost_prediction *p)
{
	double m = 0;
	for (int r = 0; r < p->world; r++)
		m = fmax(m, p->ranks[r].act + p->ranks[r].weights);
	return m;
}

/* ---- the report ------------------------------------------------------------------------- */

void cost_group_axes(const struct g_graph *g, int group, char *buf, size_t n)
{
	const struct g_group *gr = &g->groups[group];
	size_t l = 0;
	buf[0] = 0;
	for (uint32_t a = 0; a < gr->naxes && l < n; a++)
		l += (size_t)snprintf(buf + l, n - l, "%s%s", a ? "x" : "",
				      graph_str(g, g->axes[gr->axes[a]].name));
}

static const char *coll_name(int kind)
{
	return kind == OP_all_gather ? "all_gather" : kind == OP_all_reduce ? "all_reduce"
		: kind == OP_ulysses_a2a ? "all_to_all" : kind == OP_reduce_scatter ? "reduce_scatter"
		: "ring_kv";
}

static cJSON *rank_json(const struct g_graph *g, const struct hw *h, int r,
			const struct cost_rank *rc)
{
	cJSON *j = cJSON_CreateObject();
	cJSON_AddNumberToObject(j, "rank", r);
	cJSON_AddNumberToObject(j, "time_s", rc->end);
	cJSON *t = cJSON_AddObjectToObject(j, "time_by_resource_s");
	for (int k = 0; k < COST_R_N; k++)
		cJSON_AddNumberToObject(t, cost_res_keys[k], rc->t[k]);
	cJSON_AddNumberToObject(j, "comm_hidden_s", rc->hidden);
	cJSON *f = cJSON_AddObjectToObject(j, "flops");
	for (int k = 0; k < COST_F_N; k++)
		cJSON_AddNumberToObject(f, cost_flop_keys[k], rc->flops[k]);
	cJSON *c = cJSON_AddArrayToObject(j, "communication");
	for (int k = 0; k < rc->nrows; k++) {
		const struct cost_comm_row *w = &rc->rows[k];
		char axes[64];
		cost_group_axes(g, w->group, axes, sizeof axes);
		cJSON *x = cJSON_CreateObject();
		cJSON_AddStringToObject(x, "collective", coll_name(w->kind));
		cJSON_AddStringToObject(x, "op", op_table[w->kind].name);
		cJSON_AddStringToObject(x, "axes", axes);
		cJSON_AddStringToObject(x, "link", w->inter ? h->inter.name : h->intra.name);
		cJSON_AddNumberToObject(x, "ops", w->count);
		cJSON_AddNumberToObject(x, "bytes", w->bytes);
		cJSON_AddNumberToObject(x, "time_s", w->time);
		cJSON_AddNumberToObject(x, "hidden_s", w->hidden);
		cJSON_AddItemToArray(c, x);
	}
	cJSON *m = cJSON_AddObjectToObject(j, "memory_bytes");
	cJSON_AddNumberToObject(m, "activations", rc->act);
	cJSON_AddNumberToObject(m, "weights", rc->weights);
	cJSON_AddNumberToObject(m, "total", rc->act + rc->weights);
	return j;
}
int cost_of(const struct cost_source *src, const char *mesh, const char *context,
	    const struct hw *h, int dtype, FILE *err, void **buf, struct g_graph *g,
	    struct cost_prediction *p)
{
	size_t len = 0;
	*buf = driver_graph_buffer(src->file, src->plan, mesh, context, src->defines,
				   src->ndefines, src->config, false, &len, NULL, err);
	char why[256];
	if (!*buf)
		return 1;
	int rc = 0;
	if (!graph_parse(*buf, len, g, why, sizeof why)) {
		fprintf(stderr, "dtpc: internal error: the graph does not load: %s\n", why);
		rc = 1;
	}
	int pr = rc ? 0 : cost_predict(g, h, dtype, p);
	if (pr == COST_NO_MEMORY) {
		fprintf(stderr, "dtpc: out of memory\n");
		rc = 1;
	} else if (pr == COST_NO_INTER) {
		fprintf(stderr, "dtpc: %s: links.inter: missing, and a group of the %u ranks crosses "
			"nodes of %d (ranks_per_node)\n", h->path, g->world, h->ranks_per_node);
		rc = 2;
	}
	if (rc) {
		free(*buf);
		*buf = NULL;
	}
	return rc;
}

cJSON *cost_report_json(const struct cost_source *src, const struct g_graph *g,
			const struct hw *h, const struct cost_prediction *p)
{
	double mem = cost_peak_memory(p);
	cJSON *j = cJSON_CreateObject();
	cJSON_AddStringToObject(j, "file", src->file);
	cJSON_AddStringToObject(j, "plan", src->plan);
	cJSON_AddStringToObject(j, "hw", h->name);
	cJSON_AddStringToObject(j, "hw_file", h->path);
	cJSON_AddStringToObject(j, "dtype", dt_names[p->dtype]);
	cJSON_AddNumberToObject(j, "world", p->world);
	cJSON_AddNumberToObject(j, "step_s", p->step);
	cJSON_AddNumberToObject(j, "slowest_rank", p->slowest);
	cJSON_AddStringToObject(j, "bound_by", cost_res_keys[p->bound]);
	cJSON_AddNumberToObject(j, "memory_bytes", mem);
	cJSON_AddNumberToObject(j, "memory_limit_bytes", p->memory_limit);
	cJSON_AddBoolToObject(j, "fits", mem <= p->memory_limit);
	cJSON *rs = cJSON_AddArrayToObject(j, "ranks");
	for (int r = 0; r < p->world; r++)
		cJSON_AddItemToArray(rs, rank_json(g, h, r, &p->ranks[r]));
	return j;
}
