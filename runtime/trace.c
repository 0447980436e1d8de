/* trace.c — Chrome/Perfetto trace files ("Trace Event Format", JSON). */
#include <inttypes.h>
#include <stdio.h>

#include "runtime/graph_stats.h"
#include "runtime/session.h"

dtpc_status dtpc_trace_write(const char *path, dtpc_session *const *ss, int n)
{
	FILE *f = fopen(path, "w");
	if (!f)
		return rt_error(DTPC_ERR_IO, "cannot write trace '%s'", path);
	fprintf(f, "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n");
	bool first = true;
	for (int k = 0; k < n; k++) {
		const struct dtpc_session *s = ss[k];
		fprintf(f, "%s{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": 0, \"tid\": %u, "
			"\"args\": {\"name\": \"rank %u\"}}", first ? "" : ",\n", s->rank, s->rank);
		first = false;
		for (size_t e = 0; e < s->nevents; e++) {
			const struct trace_event *ev = &s->events[e];
			const struct g_op *o = &s->g->ops[ev->op];
			bool comm = op_table[o->kind].flags & OPF_COMM;
			fprintf(f, ",\n{\"name\": \"%s %s\", \"cat\": \"%s\", \"ph\": \"X\", "
				"\"pid\": 0, \"tid\": %u, \"ts\": %.3f, \"dur\": %.3f",
				op_table[o->kind].name, graph_str(s->g, s->g->tensors[o->out].name),
				comm ? "communication" : "compute", s->rank, ev->t0 * 1e6,
				(ev->t1 - ev->t0) * 1e6);
			if (comm)
				fprintf(f, ", \"args\": {\"bytes\": %" PRIu64 "}",
					graph_comm_bytes(s->g, ev->op, s->rank));
			fprintf(f, "}");
		}
	}
	fprintf(f, "\n]}\n");
	if (fclose(f))
		return rt_error(DTPC_ERR_IO, "cannot write trace '%s'", path);
	return DTPC_OK;
}
