/* op_table.c — the op table, generated from ops.def. */
#include "graph/op_table.h"

const struct op_info op_table[OP_COUNT] = {
#define OP(id, glo, ghi, fl, sig) { #id, glo, ghi, fl, sig },
#include "graph/ops.def"
#undef OP
};
