/* layout.h — layout propagation: how each tensor is distributed.
 *
 * A tensor's layout is its placement over each *placement group* of the
 * mesh, as a PyTorch DTensor has one per mesh dimension: replicated, or
 * sharded on one dimension (a rowwise linear's partial sums are all-reduced
 * inside its lowering, so no layout holds a partial sum). A group is a set of
 * mesh axes that shard together (lay_groups[]): the context group (ring x
 * ulysses, which splits sequences), tp (features and heads) and cfg (the
 * batch). A sharded dimension may be *block*-sharded: the concatenation of
 * several independently sharded pieces (joint text+image sequences, a packed
 * colwise output), where each rank holds its chunk of every block.
 *
 * A new axis or style adds a group to enum lay_group and lay_groups[], the
 * model inputs it shards (layout_run) and the ops whose rule is not the
 * generic one for it (linear and attention): the other rules loop over the
 * groups. */
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

/* The placement groups, in the order conversions run (gathers, then shards,
 * group by group). */
enum lay_group { LG_CP, LG_TP, LG_CFG, LG_COUNT };

struct lay_group_info {
	const char *name;  /* in diagnostics and dumps: "ring x ulysses", "tp", "cfg" */
	const char *tag;   /* graph tensor suffixes: "cp" -> x/gather_cp */
	int naxes;
	const char *axes[2]; /* the mesh axes, outermost first */
};
extern const struct lay_group_info lay_groups[LG_COUNT];

struct layout {
	struct lay_axis g[LG_COUNT];
};

/* Ranks in group g of c's mesh (1 when its axes are absent). */
int64_t lay_group_size(const struct plan_cfg *c, enum lay_group g);

/* A collective the compiler inserts on its own to make layouts meet. */
struct lay_event {
	enum lay_group group; /* an all-gather over this group */
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
	/* Per op: a norm over its whole last axis, which tp splits, lowered to
	 * local sums and an all-reduce of them (a distributed norm). */
	bool *dist_norm;
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
