/* trace.c — Chrome/Perfetto trace files ("Trace Event Format", JSON). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "runtime/comm.h"
#include "runtime/device.h"
#include "runtime/graph_stats.h"
#include "runtime/session.h"

/* One span: the op's kind and output, compute or communication, bytes on
 * communication spans; t0 and t1 in seconds, written in microseconds. */
static void write_span(FILE *f, const struct g_graph *g, uint32_t rank, uint32_t op, double t0,
		       double t1)
{
	const struct g_op *o = &g->ops[op];
	bool comm = op_table[o->kind].flags & OPF_COMM;
	fprintf(f, ",\n{\"name\": \"%s %s\", \"cat\": \"%s\", \"ph\": \"X\", "
		"\"pid\": 0, \"tid\": %u, \"ts\": %.3f, \"dur\": %.3f",
		op_table[o->kind].name, graph_str(g, g->tensors[o->out].name),
		comm ? "communication" : "compute", rank, t0 * 1e6, (t1 - t0) * 1e6);
	if (comm)
		fprintf(f, ", \"args\": {\"bytes\": %" PRIu64 "}", graph_comm_bytes(g, op, rank));
	fprintf(f, "}");
}

static void write_track(FILE *f, uint32_t rank, bool first)
{
	fprintf(f, "%s{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": 0, \"tid\": %u, "
		"\"args\": {\"name\": \"rank %u\"}}", first ? "" : ",\n", rank, rank);
}

dtpc_status dtpc_trace_write(const char *path, dtpc_session *const *ss, int n)
{
	FILE *f = fopen(path, "w");
	if (!f)
		return rt_error(DTPC_ERR_IO, "cannot write trace '%s'", path);
	fprintf(f, "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n");
	for (int k = 0; k < n; k++) {
		const struct dtpc_session *s = ss[k];
		write_track(f, s->rank, k == 0);
		for (size_t e = 0; e < s->nevents; e++)
			write_span(f, s->g, s->rank, s->events[e].op, s->events[e].t0, s->events[e].t1);
	}
	fprintf(f, "\n]}\n");
	if (fclose(f))
		return rt_error(DTPC_ERR_IO, "cannot write trace '%s'", path);
	return DTPC_OK;
}

/* A span on the wire: three doubles (an op index is exact in one), so one
 * byte-wise all-gather carries every rank's spans. */
struct wire_span {
	double op, t0, t1;
};

dtpc_status dtpc_trace_write_gathered(const char *path, dtpc_session *s)
{
	struct comm *c = s->c;
	if (c->ops->device_memory && !s->dv->ops->host_memory)
		return rt_error(DTPC_ERR_INVALID, "a merged trace gathers through host memory: "
				"not over %s (write one trace per rank)", c->ops->name);
	size_t world = (size_t)c->world;
	int *ranks = malloc(world * sizeof *ranks);
	size_t *counts = calloc(world, sizeof *counts), *displs = calloc(world, sizeof *displs);
	size_t *nspans = calloc(world, sizeof *nspans);
	struct wire_span *mine = malloc(sizeof *mine * (s->nevents ? s->nevents : 1)), *all = NULL;
	dtpc_status st = DTPC_OK;
	if (!ranks || !counts || !displs || !nspans || !mine) {
		st = rt_error(DTPC_ERR_NOMEM, "out of memory");
		goto out;
	}
	struct comm_group wg = comm_world_group(c, ranks);
	/* The ranks' clocks (their sessions' epochs, and across nodes the
	 * clocks themselves) differ; every rank leaves this barrier at nearly
	 * the same moment, so times counted from it line up. */
	float one = 1;
	if (c->ops->allreduce_f32(c, &wg, (struct comm_tag){ UINT32_MAX - 1, "trace: barrier" }, &one, 1)) {
		st = rt_error(DTPC_ERR_COMM, "rank %u: trace: %s", s->rank, c->error);
		goto out;
	}
	double zero = rt_now() - s->epoch;
	for (size_t e = 0; e < s->nevents; e++)
		mine[e] = (struct wire_span){ s->events[e].op, s->events[e].t0 - zero,
					      s->events[e].t1 - zero };
	for (size_t r = 0; r < world; r++) {
		counts[r] = sizeof *nspans;
		displs[r] = r * sizeof *nspans;
	}
	nspans[s->rank] = s->nevents;
	if (c->ops->allgatherv(c, &wg, (struct comm_tag){ UINT32_MAX - 2, "trace: span counts" },
			       &nspans[s->rank], nspans, counts, displs)) {
		st = rt_error(DTPC_ERR_COMM, "rank %u: trace: %s", s->rank, c->error);
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
		st = rt_error(DTPC_ERR_NOMEM, "out of memory");
		goto out;
	}
	if (c->ops->allgatherv(c, &wg, (struct comm_tag){ UINT32_MAX - 3, "trace: spans" }, mine, all,
			       counts, displs)) {
		st = rt_error(DTPC_ERR_COMM, "rank %u: trace: %s", s->rank, c->error);
		goto out;
	}
	if (s->rank != 0)
		goto out;
	/* the earliest span starts at 0 */
	size_t nall = total / sizeof *all;
	double first = 0;
	for (size_t e = 0; e < nall; e++)
		first = e == 0 || all[e].t0 < first ? all[e].t0 : first;
	FILE *f = fopen(path, "w");
	if (!f) {
		st = rt_error(DTPC_ERR_IO, "cannot write trace '%s'", path);
		goto out;
	}
	fprintf(f, "{\"displayTimeUnit\": \"ms\", \"otherData\": {\"clock\": \"aligned at a barrier "
		"after the run\"}, \"traceEvents\": [\n");
	for (size_t r = 0, e = 0; r < world; r++) {
		write_track(f, (uint32_t)r, r == 0);
		for (size_t k = 0; k < nspans[r]; k++, e++)
			write_span(f, s->g, (uint32_t)r, (uint32_t)all[e].op, all[e].t0 - first,
				   all[e].t1 - first);
	}
	fprintf(f, "\n]}\n");
	if (fclose(f))
		st = rt_error(DTPC_ERR_IO, "cannot write trace '%s'", path);
out:
	free(ranks), free(counts), free(displs), free(nspans), free(mine), free(all);
	return st;
}
