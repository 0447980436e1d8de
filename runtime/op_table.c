/* op_table.c — the op table, generated from ops.def. */
#include "runtime/op_table.h"

const struct op_info op_table[OP_COUNT] = {
#define OP(id, lo, hi, glo, ghi, fl, sig) { #id, lo, hi, glo, ghi, fl, sig },
#include "runtime/ops.def"
#undef OP
};
