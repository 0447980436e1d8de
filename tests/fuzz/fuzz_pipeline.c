/* fuzz_pipeline.c — libFuzzer target: the whole compiler pipeline on one buffer.
 *
 * The input is a plan file. Every plan in it goes through what `dtpc FILE -o
 * G` and then `dtpc run G` do before the first op: parse, resolve, check
 * layouts, lower, plan memory, serialize, load the bytes back, and prepare a
 * session (local shapes, groups, every op's checks) for the first, the last
 * and a middle rank. A plan with errors stops at its diagnostics. Beyond the
 * sanitizers' findings this target aborts on a broken promise of the
 * compiler: a plan that checks clean must lower (or say why, located), and a
 * graph dtpc just wrote must load and prepare on every rank tried — a failure
 * there is the "malformed graph" a user would see at run time for a plan that
 * `dtpc check` accepted. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compiler/arena.h"
#include "compiler/driver.h"
#include "compiler/lower.h"
#include "compiler/parse.h"
#include "graph/graph.h"
#include "runtime/session.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Instantiating and lowering scale with the model: a `repeat` of a million
 * blocks is legal and would spend the whole run on one input. Bigger models
 * are still parsed, resolved and checked; only the lowering is skipped. */
enum { MAX_LOWERED_OPS = 20000 };

static void prepare(const struct g_graph *g, uint32_t rank)
{
	struct dtpc_session *s = calloc(1, sizeof *s);

	if (!s)
		return;
	s->g = g;
	s->rank = rank;
	if (session_prepare(s) != DTPC_OK) {
		fprintf(stderr, "rank %u of a graph dtpc wrote does not prepare: %s\n", rank,
			dtpc_last_error());
		abort();
	}
	dtpc_session_free(s);
}

/* A checked plan lowered, written, read back and prepared. */
static void compile(struct arena *a, struct diag_ctx *d, struct plan_cfg *c,
		    const struct layout_result *lay)
{
	if (c->model->nops > MAX_LOWERED_OPS)
		return;
	/* the compiler's own sequence of passes (driver_lower) */
	struct lower_opts lo = { .source_path = "fuzz.plan", .source_hash = 0 };
	struct g_graph *g = driver_lower(a, d, c, lay, &lo);
	if (!g) {
		if (!d->nerrors) {
			fprintf(stderr, "the lowering failed without a diagnostic\n");
			abort();
		}
		return;
	}
	size_t len = 0;
	void *buf = graph_serialize(g, &len);
	if (!buf)
		return; /* out of memory */
	struct g_graph back;
	if (!graph_parse(buf, len, &back)) {
		fprintf(stderr, "a graph dtpc wrote does not load: %s\n", g_error()->msg);
		abort();
	}
	prepare(&back, 0);
	prepare(&back, back.world / 2);
	prepare(&back, back.world - 1);
	free(buf);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct arena *a = arena_create();
	struct diag_ctx d;
	diag_init(&d, a);
	char *text = arena_strndup(a, (const char *)data, size);
	struct file_ast ast;
	parse_buffer(a, &d, "fuzz.plan", text, size, &ast);
	struct program prog = { .models = ast.models, .plans = ast.plans, .nfiles = 1 };
	struct compile_opts co = { 0 };
	const struct check_plan_opts how = { 0 };
	/* as the compiler: nothing is lowered from a file with a syntax error */
	for (const struct plan *p = prog.plans; p && !d.nerrors; p = p->next) {
		struct plan_cfg *c;
		struct layout_result *lay = check_plan(a, &d, &prog, p, &co, &how, &c);
		if (lay)
			compile(a, &d, c, lay);
	}
	diag_release(&d);
	arena_free(a);
	return 0;
}
