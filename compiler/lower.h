/* lower.h — lowering a checked plan to the per-rank execution graph. */
#ifndef DTPC_LOWER_H
#define DTPC_LOWER_H
#include <stdio.h>

#include "layout.h"
#include "graph/graph.h"

struct lower_opts {
	const char *source_path;
	uint64_t source_hash; /* of every source file read */
	bool no_fuse;         /* --no-fuse: no linear_act (fuse.c) */
	FILE *fuse_dump;      /* -d f: each fusion's line (NULL: none) */
};

/* Builds the SPMD graph of plan c with the layouts of lay: inserts the
 * collectives, shards and gathers, lowers context-parallel attention to
 * Ulysses all-to-alls and ring attention, and plans the activation arena.
 * The graph's arrays live in arena a. NULL (after a diagnostic) when the
 * plan needs something the lowering cannot express. */
struct g_graph *lower_plan(struct arena *a, struct diag_ctx *d,
			   const struct plan_cfg *c, const struct layout_result *lay,
			   const struct lower_opts *o);

/* The liveness-based static memory plan: assigns arena offsets to every
 * input, activation and scratch tensor of g (whose arrays must be writable)
 * and sets g->arena_bytes. */
void memplan_run(struct arena *a, struct g_graph *g);
#endif
