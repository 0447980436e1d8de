/* inspect.h — human, JSON and Graphviz views of a loaded graph. */
#ifndef DTPC_INSPECT_H
#define DTPC_INSPECT_H
#include <stdint.h>
#include <stdio.h>

#include "graph/graph.h"

enum inspect_format { INSPECT_TEXT, INSPECT_JSON, INSPECT_DOT };

/* Prints g (serialized size len) for one rank (rank < 0: rank 0). Returns
 * the exit status (2 for a rank out of range). */
int inspect_graph(const struct g_graph *g, size_t len, int64_t rank, enum inspect_format f,
		  FILE *out);
/* Graphviz DOT for one rank: each repeat block (ops whose output names share
 * a NAME.N prefix) one node with its op count and collectives, except those
 * block (a number: every block of that number; or NAME.N) opens; with axis
 * (a mesh axis name; NULL: all), only collectives over a group using it are
 * drawn as collectives. Edges carry the tensor's shape on the rank. Returns
 * the exit status (2: a rank, block or axis that does not exist). */
int inspect_dot(const struct g_graph *g, int64_t rank, const char *block, const char *axis,
		FILE *out);
#endif
