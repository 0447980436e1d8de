/* cost.h — the cost model (libdtpcost): a plan's per-rank work, bytes,
 * memory and predicted step time on a hardware profile (cost/profile.h),
 * from the graph the compiler would write, and suggest's ranking of the
 * meshes of a world. The model and where it is wrong: docs/cost-model.md.
 * It uses the compiler (to compile plans in memory) and the graph format,
 * never the runtime (docs/architecture.md); `dtpc cost` and `dtpc suggest`
 * (cli/cost.c) are its command line and its printing. */
#ifndef DTPC_COST_COST_H
#define DTPC_COST_COST_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "cost/profile.h"
#include "graph/graph.h"

struct arena;
struct cJSON;
struct override;

/* Where a rank's time goes; the largest share of the slowest rank bounds
 * the step. */
enum cost_res { COST_R_LINEAR, COST_R_ATTN, COST_R_MEM, COST_R_LAUNCH, COST_R_INTRA,
		COST_R_INTER, COST_R_WAIT, COST_R_N };
/* the text report's words and the JSON report's keys */
extern const char *const cost_res_names[COST_R_N], *const cost_res_keys[COST_R_N];

enum { COST_F_LINEAR, COST_F_ATTN, COST_F_POINTWISE, COST_F_N };
extern const char *const cost_flop_keys[COST_F_N];

enum { COST_MAX_ROWS = 32 };
/* One kind of collective over one group, as a rank sees it: its ops
 * summed. */
struct cost_comm_row {
	int kind, group, count; /* kind: the op (OP_all_gather...); group: the graph's */
	bool inter;
	double bytes, time, hidden;
};

struct cost_rank {
	double flops[COST_F_N];
	int nops[COST_F_N];
	double t[COST_R_N];
	double hidden; /* communication under the ring's attention */
	double act, weights;
	double end;
	struct cost_comm_row rows[COST_MAX_ROWS];
	int nrows;
};

/* A forward pass's prediction; ranks (world of them) is malloc'd and the
 * caller's to free. */
struct cost_prediction {
	int world, dtype, slowest;
	double step, memory_limit;
	struct cost_rank *ranks;
	int bound; /* enum cost_res */
};

/* Replays g on h in dtype (DT_F32, DT_BF16; h->dt[dtype] present) into p.
 * COST_OK; COST_NO_MEMORY; COST_NO_INTER: a group crosses nodes and the
 * profile has no inter-node link to time it on (p->ranks NULL but for
 * COST_OK). */
enum { COST_OK, COST_NO_MEMORY, COST_NO_INTER };
int cost_predict(const struct g_graph *g, const struct hw *h, int dtype, struct cost_prediction *p);
/* The largest rank's activations plus weights. */
double cost_peak_memory(const struct cost_prediction *p);
/* The axes of graph group `group`, "ulysses" or "ringxulysses", into buf. */
void cost_group_axes(const struct g_graph *g, int group, char *buf, size_t n);

/* A plan to compile: its file, the plan's name, and what check's options
 * give (--config, -D). */
struct cost_source {
	const char *file, *plan, *config;
	struct override *defines;
	int ndefines;
};

/* Compiles src with mesh and context in memory (the driver's pipeline, as
 * `dtpc check` does) and predicts it on h. 0: done, *buf (the graph's
 * bytes, which g points into) and p->ranks the caller's to free; 1: the
 * plan does not compile for this mesh (diagnostics on err), or an internal
 * error (on stderr); 2: the profile cannot cost it (a group across nodes
 * and no links.inter; on stderr). */
int cost_of(const struct cost_source *src, const char *mesh, const char *context,
	    const struct hw *h, int dtype, FILE *err, void **buf, struct g_graph *g,
	    struct cost_prediction *p);

/* `dtpc cost --format json`'s report (docs/cost-model.md): a new object,
 * the caller's to cJSON_Delete. */
struct cJSON *cost_report_json(const struct cost_source *src, const struct g_graph *g,
			       const struct hw *h, const struct cost_prediction *p);

/* ---- suggest: the meshes of a world, ranked ---------------------------------------- */

/* The mesh axes suggest tries, in its order. */
enum { COST_NMESH_AXES = 3 };
extern const char *const cost_mesh_axes[COST_NMESH_AXES];

struct cost_candidate {
	const char *mesh;    /* "ring R x ulysses U x tp T" */
	const char *spec;    /* the same as --mesh takes it: "ring = R, ulysses = U, tp = T" */
	const char *context; /* the --context it compiled with ("" for none) */
	double step, mem;
	bool fits;
	char reason[160]; /* why it takes the time it does */
};

/* A mesh the compiler refused: the mesh and its context, and why (the
 * first error of its diagnostics). */
struct cost_refusal {
	const char *mesh, *context, *why;
};

/* suggest's result, in the arena it was made in. */
struct cost_suggestion {
	struct cost_candidate *cand; /* n, what fits first, then by time */
	int n;
	struct cost_refusal *ref; /* nref, in the order tried */
	int nref;
	int dropped;     /* meshes that compiled but split nothing over an axis of size > 1 */
	unsigned unused; /* those axes: bit k for cost_mesh_axes[k] */
};

/* Every ring x ulysses x tp mesh of a world of `world` ranks for src, with
 * context added to each; a ring with both rotate methods; an "anything"
 * mode only where the plain mesh is refused. A candidate fits within
 * max_mem bytes (0: the profile's memory per rank). 0: done (out->n may be
 * 0: no mesh compiles); 2: no mesh of the world can be costed on h (on
 * stderr). */
int cost_suggest(struct arena *a, const struct cost_source *src, const char *context,
		 const struct hw *h, int dtype, int64_t world, double max_mem,
		 struct cost_suggestion *out);

/* `dtpc suggest --format json`'s report: the first `top` candidates, and
 * the counts, the unused axes and the refusals (docs/cost-model.md). */
struct cJSON *cost_suggest_json(const struct cost_source *src, const struct hw *h, int dtype,
				int64_t world, int top, const struct cost_suggestion *s);
#endif
