/* fuzz_config.c — libFuzzer target: --config's reader and the parameters
 * it sets.
 *
 * Reads the input as a config.json, then checks (check_plan) a small plan
 * whose model has a parameter of each kind a config sets (integers
 * that shape tensors, a number, booleans, a list, a string), with the
 * input's keys as overrides, as `dtpc check --config` does. Any crash,
 * sanitizer report, leak or hang is a bug: a hostile config must only ever
 * produce diagnostics. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compiler/arena.h"
#include "compiler/config.h"
#include "compiler/driver.h"
#include "compiler/parse.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char plan[] =
	"model tiny(batch = 1, seq = 8, num_attention_heads = 2, attention_head_dim = 4,\n"
	"           hidden = num_attention_heads * attention_head_dim, eps = 0.000001,\n"
	"           elementwise_affine = true, bias = true, axes_dims = [2, 4],\n"
	"           activation = \"none\", out_channels = 8) {\n"
	"  input hidden_states : [batch, seq, hidden];\n"
	"  norm = layer_norm(hidden_states, eps = eps, affine = elementwise_affine);\n"
	"  to_q = linear(norm, hidden, bias = bias);\n"
	"  attn = attention(to_q, to_q, to_q, heads = num_attention_heads);\n"
	"  act = gelu(attn, approximate = activation);\n"
	"  table = param(axes_dims);\n"
	"  proj_out = linear(act, out_channels);\n"
	"  output proj_out, table;\n"
	"}\n"
	"plan tiny_tp { model tiny; mesh tp = 2; \"to_q\" : colwise; \"proj_out\" : rowwise; }\n";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size > CONFIG_MAX_BYTES)
		return 0; /* config_path refuses such a file before reading it */
	struct arena *a = arena_create();
	struct diag_ctx d;
	diag_init(&d, a);
	struct file_ast ast;
	parse_buffer(a, &d, "tiny.plan", plan, sizeof plan - 1, &ast);
	struct program prog = { .models = ast.models, .plans = ast.plans, .nfiles = 1 };
	char *text = arena_strndup(a, (const char *)data, size);
	struct override *ov;
	int n;
	if (config_parse(a, &d, "config.json", text, size, &ov, &n)) {
		struct compile_opts co = { .defines = ov, .ndefines = n };
		const struct check_plan_opts how = { 0 };
		check_plan(a, &d, &prog, prog.plans, &co, &how, NULL);
	}
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
