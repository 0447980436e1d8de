/* summary.h — the success summary of `dtpc check`. */
#ifndef DTPC_SUMMARY_H
#define DTPC_SUMMARY_H
#include <stdio.h>

#include "layout.h"

struct cJSON;
struct cJSON *summary_build(struct arena *a, const struct plan_cfg *c,
			    const struct layout_result *lay);
void summary_print_text(const struct cJSON *j, FILE *out);

/* The compile report of `dtpc FILE -o G -v --format json`: the graph's
 * sizes and, for every rank, its communication per collective kind and
 * group, the activation arena and its weight bytes
 * (docs/schemas/report.schema.json). */
struct g_graph;
struct cJSON *summary_report(const struct g_graph *g, const char *path, size_t len);
#endif
