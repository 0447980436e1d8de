/* inspect.h — human, JSON and Graphviz views of a loaded graph. */
#ifndef DTPC_INSPECT_H
#define DTPC_INSPECT_H
#include <stdint.h>
#include <stdio.h>

#include "runtime/graph.h"

enum inspect_format { INSPECT_TEXT, INSPECT_JSON, INSPECT_DOT };

/* Prints g (serialized size len) for one rank (rank < 0: rank 0). Returns
 * the exit status (2 for a rank out of range). */
int inspect_graph(const struct g_graph *g, size_t len, int64_t rank, enum inspect_format f,
		  FILE *out);
#endif
