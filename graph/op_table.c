/* op_table.c — the op table, generated from ops.def. */
#include "graph/op_table.h"

const struct op_info op_table[OP_COUNT] = {
#define OP(id, lo, hi, glo, ghi, fl, sig) { #id, lo, hi, glo, ghi, fl, sig },
#include "graph/ops.def"
#undef OP
};
