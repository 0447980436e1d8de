/* collective.c — the layout moves: graph-only ops lower.c makes (a local
 * cut, the collectives), with no shape rule. */
#include <stddef.h>

#include "compiler/op_compile.h"

/* plans cannot name them: op_lookup skips OPF_LOWERED ops */
const struct op_compile op_compile_shard = { 0 };
const struct op_compile op_compile_all_gather = { 0 };
const struct op_compile op_compile_all_reduce = { 0 };
const struct op_compile op_compile_ulysses_a2a = { 0 };
const struct op_compile op_compile_reduce_scatter = { 0 };
