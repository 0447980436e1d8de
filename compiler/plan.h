/* plan.h — a resolved parallel plan: the mesh, the context options and the
 * styles each module gets from the plan's rules. */
#ifndef DTPC_PLAN_H
#define DTPC_PLAN_H
#include <stdbool.h>
#include <stdint.h>

#include "ir.h"
#include "graph/graph.h"

enum style_kind {
	ST_COLWISE, ST_ROWWISE, ST_REPLICATE, ST_RING, ST_ULYSSES, ST_SPLIT, ST_GATHER,
	ST_FSDP, ST_COUNT
};
extern const char *const style_names[ST_COUNT];

enum { MESH_MAX_AXES = 8 };

struct mesh_axis {
	const char *name;
	int64_t size;
	dtpc_loc loc;
};

/* One `"GLOB" : style, ...;` line. */
struct rule {
	const struct pstmt *stmt;
	const char *glob;
	int nmatched;
};

/* What one rule's style says about one module. */
struct style_use {
	enum style_kind kind;
	int rule;
	const struct style *src;
	int64_t *blocks; /* colwise/rowwise(blocks = [...]) */
	int nblocks;
	const char *port; /* split: an input name, "out" or "out.K" */
	int port_tensor;  /* split: the tensor of that input, -1 for out */
	int out_index;    /* split / gather of out.K: K; -1: every output */
	int dim;          /* split / gather, normalised */
	struct style_use *next;
};

enum rotate_method { ROTATE_ALLGATHER, ROTATE_ALLTOALL };

struct plan_cfg {
	const struct plan *decl;
	struct ir_model *model;
	dtpc_loc model_loc; /* the plan's `model` statement */

	struct mesh_axis axes[MESH_MAX_AXES];
	int naxes;
	dtpc_loc mesh_loc;
	int64_t world;
	int ax_ring, ax_ulysses, ax_tp, ax_cfg; /* axis index or -1 */
	int64_t ring, ulysses, tp, cfg;
	/* Per model input: cfg splits its dim 0 (its first dim is written
	 * `batch`, the model's parameter; see docs/language.md). */
	bool *cfg_input;

	bool convert_to_fp32;
	enum rotate_method rotate;
	bool ulysses_anything, ring_anything;
	/* `tensor sequence_parallel = true`: between tp regions activations
	 * stay split on the sequence (dim 1) over tp (Megatron-SP) */
	bool seq_parallel;
	dtpc_loc ctx_loc[8]; /* where each option was written (for notes) */

	enum g_dtype dtype;  /* the `dtype = "...";` setting: every tensor's storage */
	dtpc_loc dtype_loc;

	struct rule *rules;
	int nrules;
	struct style_use **styles; /* per module, linked list */
};

enum ctx_opt { CTX_FP32, CTX_ROTATE, CTX_UANY, CTX_RANY, CTX_RDEG, CTX_UDEG, CTX_TDEG, CTX_SP };

struct compile_opts {
	const char *plan;   /* --plan */
	int64_t world;      /* --world, 0 when not given */
	struct override *defines; /* -D; the driver puts --config's keys first */
	int ndefines;
	const char *config;  /* --config: the config.json (config_path's result) */
	const char *mesh;    /* --mesh "ring=2,tp=2": replaces the plan's mesh */
	const char *context; /* --context "rotate_method=\"alltoall\"": overrides */
	const char *dtype;   /* --dtype bf16: replaces the plan's dtype setting */
	bool no_fuse;        /* --no-fuse: graphs keep linear + activation apart */
	/* --expose GLOB: the tensors of the modules each glob matches become
	 * outputs too (one rank only; docs/language.md, "Exposed tensors") */
	const char **expose;
	int nexpose;
};

struct program;

/* Resolves the plan: instantiates its model, reads mesh and options, matches
 * rules to modules and runs every check of docs/language.md except the layout
 * checks (layout.c). Returns NULL when the plan cannot be resolved at all. */
struct plan_cfg *plan_resolve(struct arena *a, struct diag_ctx *d,
			      const struct program *prog, const struct plan *p,
			      const struct compile_opts *o);
/* The model with its defaults (and -D), for files that hold no plan. */
struct ir_model *plan_model_only(struct arena *a, struct diag_ctx *d,
				 const struct model *m, const struct compile_opts *o);
/* The style of that kind on module mi, or NULL. */
const struct style_use *plan_style(const struct plan_cfg *c, int mi,
				   enum style_kind k);
int64_t plan_cp(const struct plan_cfg *c); /* ring * ulysses */
/* Whether op opi's weights are fsdp-sharded: an `fsdp` style on its module
 * or on a repeat block around it (docs/language.md, FSDP). */
bool plan_fsdp(const struct plan_cfg *c, int opi);
#endif
