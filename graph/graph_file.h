/* graph_file.h — a graph loaded from a file (mmap'd, validated). */
#ifndef DTPC_GRAPH_FILE_H
#define DTPC_GRAPH_FILE_H
#include "graph/graph.h"

struct graph_file {
	struct g_graph g;
	void *map;
	size_t len;
};

/* Maps path read-only and validates it with graph_parse; on failure returns
 * false with the reason raised (graph/error.h): G_ERR_IO, or graph_parse's. */
bool graph_file_open(struct graph_file *f, const char *path);
void graph_file_close(struct graph_file *f);
#endif
