/* trace.c — Chrome/Perfetto trace files ("Trace Event Format", JSON). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "runtime/comm.h"
#include "runtime/device.h"
#include "graph/graph_stats.h"
#include "graph/op_attrs.h"
#include "runtime/session.h"

/* Bytes of the arena in use while each op runs, from the memory plan: an
 * input is live from the start, an activation from the op that writes it,
 * each until the last op that reads it (a model output to the end), a
 * scratch tensor during its op. The ranks share one plan, so one array
 * serves every rank. NULL when out of memory: the counter is left out. */
static uint64_t *arena_live(const struct g_graph *g)
{
	uint32_t n = g->nops;
	uint32_t *first = malloc(sizeof *first * (g->ntensors ? g->ntensors : 1));
	uint32_t *last = malloc(sizeof *last * (g->ntensors ? g->ntensors : 1));
	int64_t *delta = calloc((size_t)n + 1, sizeof *delta);
	uint64_t *live = malloc(sizeof *live * (n ? n : 1));
	if (!first || !last || !delta || !live) {
		free(first), free(last), free(delta), free(live);
		return NULL;
	}
	for (uint32_t t = 0; t < g->ntensors; t++) {
		first[t] = g->tensors[t].kind == GT_INPUT ? 0 : UINT32_MAX;
		last[t] = g->tensors[t].flags & G_TF_OUTPUT && n ? n - 1 : 0;
	}
	for (uint32_t i = 0; i < n; i++) {
		const struct g_op *o = &g->ops[i];
		uint32_t use[2] = { o->out, o->scratch >= 0 ? (uint32_t)o->scratch : o->out };
		for (int k = 0; k < 2; k++) {
			first[use[k]] = first[use[k]] < i ? first[use[k]] : i;
			last[use[k]] = last[use[k]] > i ? last[use[k]] : i;
		}
		for (uint32_t k = 0; k < o->nin; k++) {
			uint32_t t = g->operands[o->in0 + k];
			last[t] = last[t] > i ? last[t] : i;
		}
	}
	for (uint32_t t = 0; t < g->ntensors; t++) {
		const struct g_tensor *x = &g->tensors[t];
		if (x->kind == GT_WEIGHT || first[t] == UINT32_MAX || last[t] < first[t])
			continue;
		delta[first[t]] += (int64_t)x->bytes;
		delta[last[t] + 1] -= (int64_t)x->bytes;
	}
	int64_t sum = 0;
	for (uint32_t i = 0; i < n; i++)
		live[i] = (uint64_t)(sum += delta[i]);
	free(first), free(last), free(delta);
	return live;
}

/* A part of an op (enum trace_part) on its row: ring attention's steps on
 * the compute row, its K/V transfers on the communication row, nested in
 * the op's own span there. */
static void write_part(FILE *f, const struct g_graph *g, uint32_t rank,
		       const struct trace_event *ev, double t0, double t1)
{
	const struct g_op *o = &g->ops[ev->op];
	bool comm = ev->part == TRACE_COMM;
	/* ring attention rotates or gathers every chunk at once */
	const char *what = !comm ? "attention"
			   : ga_ring_attention_get(o).rotate != G_ROT_GATHER ? "kv shift"
									       : "kv all_gather";
	fprintf(f, ",\n{\"name\": \"%s %u\", \"cat\": \"%s\", \"ph\": \"X\", \"pid\": %u, "
		"\"tid\": %d, \"ts\": %.3f, \"dur\": %.3f, \"args\": {\"op\": \"%s %s\", "
		"\"part\": \"%s\", \"step\": %u",
		what, ev->step, comm ? "communication" : "compute", rank, comm, t0, t1 - t0,
		op_table[o->kind].name, graph_str(g, g->tensors[o->out].name), what, ev->step);
	if (comm)
		fprintf(f, ", \"bytes\": %" PRIu64, ev->bytes);
	fprintf(f, "}}");
}

/* One rank's process: a row per stream (compute, communication), a span per
 * op (its kind and output; bytes on communication spans) and per part of
 * one, and two counters: the bytes it has sent so far (stepped at the end
 * of each communication op) and the arena's live bytes (at the start of
 * each op that changes them). Times in seconds, written in microseconds,
 * less shift. */
static void write_rank(FILE *f, const struct g_graph *g, const uint64_t *live, uint32_t rank,
		       const struct trace_event *ev, size_t n, double shift, bool first,
		       size_t esize)
{
	fprintf(f, "%s{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": %u, "
		"\"args\": {\"name\": \"rank %u\"}}", first ? "" : ",\n", rank, rank);
	fprintf(f, ",\n{\"name\": \"process_sort_index\", \"ph\": \"M\", \"pid\": %u, "
		"\"args\": {\"sort_index\": %u}}", rank, rank);
	for (int tid = 0; tid < 2; tid++)
		fprintf(f, ",\n{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": %u, \"tid\": %d, "
			"\"args\": {\"name\": \"%s\"}}", rank, tid, tid ? "communication" : "compute");
	uint64_t sent = 0, in_use = UINT64_MAX;
	for (size_t e = 0; e < n; e++) {
		const struct g_op *o = &g->ops[ev[e].op];
		bool comm = op_table[o->kind].flags & OPF_COMM;
		double t0 = (ev[e].t0 - shift) * 1e6, t1 = (ev[e].t1 - shift) * 1e6;
		if (ev[e].part != TRACE_OP) {
			write_part(f, g, rank, &ev[e], t0, t1);
			continue;
		}
		if (live && live[ev[e].op] != in_use)
			fprintf(f, ",\n{\"name\": \"arena\", \"ph\": \"C\", \"pid\": %u, \"ts\": %.3f, "
				"\"args\": {\"live bytes\": %" PRIu64 "}}", rank, t0,
				in_use = live[ev[e].op]);
		fprintf(f, ",\n{\"name\": \"%s %s\", \"cat\": \"%s\", \"ph\": \"X\", "
			"\"pid\": %u, \"tid\": %d, \"ts\": %.3f, \"dur\": %.3f",
			op_table[o->kind].name, graph_str(g, g->tensors[o->out].name),
			comm ? "communication" : "compute", rank, comm, t0, t1 - t0);
		if (!comm) {
			fprintf(f, "}");
			continue;
		}
		/* the graph counts its own dtype; a session narrowed at run time
		 * (dtpc_session_dtype) moves its dtype's bytes, but an
		 * all-reduce's or reduce-scatter's float32 all the same */
		uint64_t bytes = graph_comm_bytes(g, ev[e].op, rank);
		if (o->kind != OP_all_reduce && o->kind != OP_reduce_scatter)
			bytes = bytes / graph_comm_elem_size(g, ev[e].op) * esize;
		fprintf(f, ", \"args\": {\"bytes\": %" PRIu64 "}}", bytes);
		fprintf(f, ",\n{\"name\": \"bytes on the wire\", \"ph\": \"C\", \"pid\": %u, "
			"\"ts\": %.3f, \"args\": {\"sent\": %" PRIu64 "}}", rank, t1, sent += bytes);
	}
}

dtpc_status dtpc_trace_write(const char *path, dtpc_session *const *ss, int n)
{
	FILE *f = fopen(path, "w");
	if (!f)
		return g_raise(DTPC_ERR_IO, "cannot write trace '%s'", path);
	uint64_t *live = n ? arena_live(ss[0]->g) : NULL;
	fprintf(f, "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n");
	for (int k = 0; k < n; k++)
		write_rank(f, ss[k]->g, live, ss[k]->rank, ss[k]->events, ss[k]->nevents, 0, k == 0,
			   ss[k]->esize);
	fprintf(f, "\n]}\n");
	free(live);
	if (fclose(f))
		return g_raise(DTPC_ERR_IO, "cannot write trace '%s'", path);
	return DTPC_OK;
}

/* A span on the wire: doubles (an op index, a step and bytes are exact in
 * one), so one byte-wise all-gather carries every rank's spans. */
struct wire_span {
	double op, t0, t1, bytes, part, step;
};

dtpc_status dtpc_trace_write_gathered(const char *path, dtpc_session *s)
{
	struct comm *c = s->c;
	if (c->ops->device_memory && !s->dv->ops->host_memory)
		return g_raise(DTPC_ERR_INVALID, "a merged trace gathers through host memory: "
				"not over %s (write one trace per rank)", c->ops->name);
	size_t world = (size_t)c->world;
	int *ranks = malloc(world * sizeof *ranks);
	size_t *counts = calloc(world, sizeof *counts), *displs = calloc(world, sizeof *displs);
	size_t *nspans = calloc(world, sizeof *nspans);
	struct wire_span *mine = malloc(sizeof *mine * (s->nevents ? s->nevents : 1)), *all = NULL;
	dtpc_status st = DTPC_OK;
	if (!ranks || !counts || !displs || !nspans || !mine) {
		st = g_raise(DTPC_ERR_NOMEM, "out of memory");
		goto out;
	}
	struct comm_group wg = comm_world_group(c, ranks);
	/* The ranks' clocks (their sessions' epochs, and across nodes the
	 * clocks themselves) differ; every rank leaves this barrier at nearly
	 * the same moment, so times counted from it line up. */
	float one = 1;
	if (c->ops->allreduce_f32(c, &wg, (struct comm_tag){ UINT32_MAX - 1, "trace: barrier" }, &one, 1)) {
		st = g_wrap(DTPC_ERR_COMM, s->rank, "trace");
		goto out;
	}
	double zero = rt_now() - s->epoch;
	for (size_t e = 0; e < s->nevents; e++)
		mine[e] = (struct wire_span){ s->events[e].op, s->events[e].t0 - zero,
					      s->events[e].t1 - zero, (double)s->events[e].bytes,
					      s->events[e].part, s->events[e].step };
	for (size_t r = 0; r < world; r++) {
		counts[r] = sizeof *nspans;
		displs[r] = r * sizeof *nspans;
	}
	nspans[s->rank] = s->nevents;
	if (c->ops->allgatherv(c, &wg, (struct comm_tag){ UINT32_MAX - 2, "trace: span counts" },
			       &nspans[s->rank], nspans, counts, displs)) {
		st = g_wrap(DTPC_ERR_COMM, s->rank, "trace");
		goto out;
	}
	size_t total = 0;
	for (size_t r = 0; r < world; r++) {
		counts[r] = nspans[r] * sizeof *mine;
		displs[r] = total;
		total += counts[r];
	}
	all = malloc(total ? total : 1);
	if (!all) {
		st = g_raise(DTPC_ERR_NOMEM, "out of memory");
		goto out;
	}
	if (c->ops->allgatherv(c, &wg, (struct comm_tag){ UINT32_MAX - 3, "trace: spans" }, mine, all,
			       counts, displs)) {
		st = g_wrap(DTPC_ERR_COMM, s->rank, "trace");
		goto out;
	}
	if (s->rank != 0)
		goto out;
	/* the earliest span starts at 0 */
	size_t nall = total / sizeof *all;
	double first = 0;
	for (size_t e = 0; e < nall; e++)
		first = e == 0 || all[e].t0 < first ? all[e].t0 : first;
	struct trace_event *spans = malloc(sizeof *spans * (nall ? nall : 1));
	uint64_t *live = arena_live(s->g);
	FILE *f = spans ? fopen(path, "w") : NULL;
	if (!f) {
		st = spans ? g_raise(DTPC_ERR_IO, "cannot write trace '%s'", path)
			   : g_raise(DTPC_ERR_NOMEM, "out of memory");
		free(spans), free(live);
		goto out;
	}
	for (size_t e = 0; e < nall; e++)
		spans[e] = (struct trace_event){ (uint32_t)all[e].op, all[e].t0, all[e].t1,
						 (uint64_t)all[e].bytes, (uint32_t)all[e].part,
						 (uint32_t)all[e].step };
	fprintf(f, "{\"displayTimeUnit\": \"ms\", \"otherData\": {\"clock\": \"aligned at a barrier "
		"after the run\"}, \"traceEvents\": [\n");
	for (size_t r = 0, e = 0; r < world; e += nspans[r], r++)
		/* every rank of a job stores the same dtype */
		write_rank(f, s->g, live, (uint32_t)r, spans + e, nspans[r], first, r == 0, s->esize);
	fprintf(f, "\n]}\n");
	free(spans), free(live);
	if (fclose(f))
		st = g_raise(DTPC_ERR_IO, "cannot write trace '%s'", path);
out:
	free(ranks), free(counts), free(displs), free(nspans), free(mine), free(all);
	return st;
}
