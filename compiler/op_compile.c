/* op_compile.c — the compiler's op table, generated from ops.def: each op's
 * descriptor (compiler/ops/). */
#include "op_compile.h"

const struct op_compile *const op_compile[OP_COUNT] = {
#define OP(id, glo, ghi, fl, sig) [OP_##id] = &op_compile_##id,
#include "graph/ops.def"
#undef OP
};
