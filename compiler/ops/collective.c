/* collective.c — the layout moves: graph-only ops lower.c makes (a local
 * cut, the collectives), with no shape rule. */
#include <stddef.h>

#include "compiler/op_compile.h"

/* plans cannot name them: op_lookup skips OPF_LOWERED ops */
const struct op_compile op_compile_shard = { NULL };
const struct op_compile op_compile_all_gather = { NULL };
const struct op_compile op_compile_all_reduce = { NULL };
const struct op_compile op_compile_ulysses_a2a = { NULL };
const struct op_compile op_compile_reduce_scatter = { NULL };
