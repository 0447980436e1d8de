/* fuse.h — a linear and the activation that alone reads it, as one graph
 * op (fuse.c). */
#ifndef DTPC_FUSE_H
#define DTPC_FUSE_H
#include <stdio.h>

#include "arena.h"
#include "graph/graph.h"

/* Replaces each linear whose output only one gelu or silu reads (not a
 * graph output, same dtype, shape and split) by a linear_act writing the
 * activation's output, and drops the activation with the linear's tensor.
 * Between fold_positions and memplan_run; g's arrays must be writable (the
 * lowering's). dump (NULL: none) gets one line per fusion (-d f). */
void fuse_linear_act(struct arena *a, struct g_graph *g, FILE *dump);
#endif
