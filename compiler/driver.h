/* driver.h — the compiler pipeline: the straight list of passes. */
#ifndef DTPC_DRIVER_H
#define DTPC_DRIVER_H
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "layout.h"
#include "lower.h"
#include "plan.h"

enum out_format { FMT_TEXT, FMT_JSON, FMT_SARIF };

/* Pass names accepted by -d (dump after that pass). */
enum dump_pass { DUMP_IR = 1, DUMP_STYLES = 2, DUMP_LAYOUT = 4, DUMP_GRAPH = 8, DUMP_FUSE = 16 };

struct check_opts {
	const char *file;
	struct compile_opts co;
	enum out_format format;
	unsigned dumps;
	bool color;
	bool quiet; /* -q: no summary and no standalone notes (benchmarks, scripts) */
	/* -d g's printer of the graph as read back (len: its serialized size).
	 * The program passes `dtpc inspect`'s text view (cli/inspect.c); the
	 * compiler library has no graph printer of its own, and without one
	 * DUMP_GRAPH prints nothing. */
	void (*dump_graph)(const struct g_graph *g, size_t len, FILE *out);
};

/* A file a command reads, checked before any work is done, so that every
 * command reports a missing or unreadable file (or a folder) alike: one
 * message on err, exit status 2. "-" passes: standard input, which the
 * plan commands read (parse_program). */
bool driver_readable(const char *path, FILE *err);

/* `dtpc check`: parse, resolve and check every selected plan. Returns the
 * exit status of docs/language.md: 0 clean, 1 errors, 2 usage or I/O error. */
int driver_check(const struct check_opts *o, FILE *out, FILE *err);

/* `dtpc FILE.plan -o OUT.graph`: check one plan (--plan, or the file's only
 * plan), lower it, plan memory and write the graph; with verbose, print the
 * compile report (per rank: communication by kind and axis, activation
 * arena, weight bytes). Same exit statuses. */
int driver_compile(const struct check_opts *o, const char *out_path, bool verbose,
		   FILE *out, FILE *err);
/* A plan's graph as a serialized buffer (malloc'd; the caller frees). mesh
 * and context override the plan's (NULL: the plan's own); config (NULL:
 * none) is --config's file, whose keys come before defs. one_rank: the
 * unsharded graph, for `dtpc run --verify` — the plan resolved with the
 * mesh, context and parameters a graph was compiled with (so the same checks
 * pass), then lowered with every mesh axis set to 1. *source_hash (if not
 * NULL) gets the hash of the sources read, as compiles record it. On failure
 * returns NULL and prints the diagnostics to err. */
void *driver_graph_buffer(const char *source, const char *plan, const char *mesh,
			  const char *context, struct override *defs, int ndefs, const char *config,
			  bool one_rank, size_t *len, uint64_t *source_hash, FILE *err);
/* How check_plan runs: -d's dumps (DUMP_IR, DUMP_STYLES, DUMP_LAYOUT) to
 * out after their passes; one_rank: the plan resolved as written (so that
 * the same checks pass), then laid out with every mesh axis 1 and float32
 * storage — `dtpc run --verify`'s reference. */
struct check_plan_opts {
	unsigned dumps;
	FILE *out;
	bool one_rank;
};
/* The passes from a parsed plan to its checked layout: plan_resolve, the
 * IR and styles dumps, layout_run, the context hints (each tried by
 * checking again, the same way), fold_check_positions, the layout dump —
 * the one sequence every path that checks or lowers a plan runs (check,
 * compile, driver_graph_buffer for run --verify and cost, the fuzzers), as
 * driver_lower is the one after it. Errors d held before (another plan's,
 * a declaration's) do not stop this plan's passes. *cfg (if not NULL) gets
 * the resolved plan, NULL when it did not resolve. Returns the layout,
 * NULL when this plan has errors. */
struct layout_result *check_plan(struct arena *a, struct diag_ctx *d, const struct program *prog,
				 const struct plan *p, const struct compile_opts *co,
				 const struct check_plan_opts *how, struct plan_cfg **cfg);
/* The passes after the layout and its checks (check_plan): lowering, the
 * position fold, the fusion of a linear with its activation (unless
 * lo->no_fuse), the memory plan — the one sequence every path that makes a
 * graph runs. NULL after an error in d. */
struct g_graph *driver_lower(struct arena *a, struct diag_ctx *d, struct plan_cfg *c,
			     const struct layout_result *lay, const struct lower_opts *lo);

#endif
