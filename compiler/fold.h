/* fold.h — grid_ids / text_ids folded into the rope_freqs that read them
 * (fold.c): positions computed in float32 by the device, never stored. */
#ifndef DTPC_FOLD_H
#define DTPC_FOLD_H
#include "layout.h"
#include "graph/graph.h"

/* Refuses (located, at the op) each grid_ids or text_ids that the fold
 * leaves in the graph and whose positions its dtype does not hold
 * exactly (bf16 256, f16 2048). Run after layout_run. */
void fold_check_positions(struct diag_ctx *d, const struct plan_cfg *c,
			  const struct layout_result *lay);

/* Folds each generator a rope_freqs reads directly into that rope_freqs
 * (no ids operand; G_OF_GRID / G_OF_TEXT and their attributes) and drops
 * the generators then unread, with their tensors. Between lower_plan and
 * memplan_run; g's arrays must be writable (the lowering's). */
void fold_positions(struct arena *a, struct g_graph *g);

/* Drops the ops marked in drop and the tensors they produced: the tables
 * are rebuilt in order, tensor indices renumbered, operand ranges laid out
 * afresh. The passes that remove ops (this fold, fuse.c) share it. */
void fold_drop_ops(struct arena *a, struct g_graph *g, const bool *drop);
#endif
