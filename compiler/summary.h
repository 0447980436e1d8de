/* summary.h — the success summary of `dtpc check`. */
#ifndef DTPC_SUMMARY_H
#define DTPC_SUMMARY_H
#include <stdio.h>

#include "layout.h"

struct cJSON;
struct cJSON *summary_build(struct arena *a, const struct plan_cfg *c,
			    const struct layout_result *lay);
void summary_print_text(const struct cJSON *j, FILE *out);
#endif
