/* embed.h — `dtpc embed`: a compiled graph as data a program links. */
#ifndef DTPC_EMBED_H
#define DTPC_EMBED_H
#include <stdio.h>

/* Writes the graph file `graph` (validated first) as C source defining
 *   const unsigned char SYMBOL[N];   (64-byte aligned, the graph's bytes)
 *   const size_t SYMBOL_size;        (N)
 * to `out`, or, when out ends in ".o", compiles that source with $CC
 * (default cc) into an object file. Returns the exit status: 0, or 2 for a
 * usage or I/O error (messages on err). */
int embed_graph(const char *graph, const char *out, const char *symbol, FILE *err);
#endif
