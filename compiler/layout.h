/* layout.h — layout propagation: how each tensor is distributed.
 *
 * Two groups of mesh axes shard tensors: the context-parallel group (ring x
 * ulysses, which splits sequences) and tp (which splits features and heads).
 * Per group a tensor is replicated, sharded on one dimension, or (tp only,
 * transiently) a partial sum. A sharded dimension may be *block*-sharded: the
 * concatenation of several independently sharded pieces (joint text+image
 * sequences, a packed colwise output), where each rank holds its chunk of
 * every block. */
#ifndef DTPC_LAYOUT_H
#define DTPC_LAYOUT_H
#include <stdint.h>

#include "plan.h"

enum lay_kind { LAY_REPL, LAY_SHARD };

struct lay_axis {
	uint8_t kind;
	int8_t dim;
	int nblk;            /* 0: one block covering the whole dim */
	const int64_t *blk;  /* global sizes of the blocks along dim */
	int origin;          /* rule that introduced the sharding, -1 if none */
};

struct layout {
	struct lay_axis cp, tp;
};

enum lay_event_kind { EV_GATHER_CP, EV_GATHER_TP };

/* A collective the compiler inserts on its own to make layouts meet. */
struct lay_event {
	enum lay_event_kind kind;
	int op;         /* consuming op, -1 for a model output */
	int tensor;     /* the tensor gathered */
	const char *why;
	struct lay_event *next;
};

struct layout_result {
	struct layout *tensors;  /* per tensor, after the styles of its module */
	struct layout *produced; /* per tensor, as its op produces it */
	struct lay_event *events;
	int nevents;
	/* Per op: the layouts its inputs were consumed with. */
	struct layout **in;
	/* Per module: its outputs' layouts once its split/gather styles apply
	 * (where it ends), NULL for a module without outputs. A tensor may be
	 * restyled more than once (an op's output that a tuple also holds), so
	 * this is not always tensors[t]. */
	struct layout **module_out;
};

/* Propagates layouts over c's model, checking the layout rules of docs/language.md
 * (attention heads against tp and ulysses, sequence-sharded keys without a
 * context style) and reporting inserted collectives as notes with sizes. */
struct layout_result *layout_run(struct arena *a, struct diag_ctx *d,
				 const struct plan_cfg *c);
/* Rows of dim `size` on rank r of n: chunk (even) or tensor_split (uneven:
 * the first size % n ranks get one more). */
int64_t layout_local(int64_t size, int64_t n, int64_t r);
/* Repeat instances and tuples with styles by the op count at which their
 * styles apply: ends_at[k] (k from 0 to nops) is the first, next_end[mi]
 * (an array of nmodules) the next; -1 ends a list. Inner modules first. */
int *layout_module_ends(struct arena *a, const struct plan_cfg *c, int *next_end);
#endif
