/* fuzz_parse.c — libFuzzer target: the whole check pipeline on one buffer.
 *
 * Parses the input as a plan file, then checks every plan in it with the
 * passes of `dtpc check` (check_plan). Any crash, sanitizer report, leak or hang is a
 * bug: bad input must only ever produce diagnostics. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compiler/arena.h"
#include "compiler/driver.h"
#include "compiler/parse.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

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
	for (const struct plan *p = prog.plans; p; p = p->next)
		check_plan(a, &d, &prog, p, &co, &how, NULL);
	if (!prog.plans)
		for (const struct model *m = prog.models; m; m = m->next)
			plan_model_only(a, &d, m, &co);
	/* Render the diagnostics too: the caret printer reads source lines. */
	FILE *null = fopen("/dev/null", "w");
	if (null) {
		diag_print_text(&d, null, false);
		fclose(null);
	}
	diag_release(&d);
	arena_free(a);
	return 0;
}
