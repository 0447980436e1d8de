/* typed.h — what the typed-data tests share (tests/unit/test_typed.c on the
 * CPU, tests/gpu/test_cuda_data.c on a GPU): the graph both run, compiled in
 * memory, and the sizes of its tensors. Everything is static: each test is
 * its own program. */
#ifndef DTPC_TESTS_TYPED_H
#define DTPC_TESTS_TYPED_H
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "compiler/driver.h"
#include "graph/graph.h"
#include "runtime/dtpc.h"

/* examples/tiny_dit.plan's tiny_dit_tp, on its mesh or on one rank */
static inline dtpc_graph *typed_graph(bool one_rank)
{
	size_t len = 0;
	void *buf = driver_graph_buffer("examples/tiny_dit.plan", "tiny_dit_tp", NULL, NULL, NULL,
					0, NULL, one_rank, &len, NULL, stderr);
	dtpc_graph *g = NULL;
	if (buf && dtpc_graph_open_buffer(buf, len, &g))
		g = NULL;
	free(buf);
	return g;
}

static inline size_t typed_esize(dtpc_dtype t)
{
	return t == DTPC_F32 ? 4 : 2;
}

/* the elements of the whole tensor (every rank's slices together) */
static inline int64_t typed_numel(const struct g_tensor *x)
{
	int64_t n = 1;
	for (int d = 0; d < x->ndim; d++)
		n *= x->dims[d];
	return n;
}
#endif
