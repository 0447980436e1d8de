/* calib_graph.h — the tiny graphs `dtpc calibrate` times: a few tensors and
 * one op (or a chain of them), or one collective over a group, built with
 * the graph layer (graph/graph.h) and serialized for dtpc_graph_open_buffer,
 * so that every measurement runs through a session as `dtpc run` does.
 *
 * A graph is built in a caller's struct cgraph (fixed tables: the graphs
 * are small, and a table that overflows is a bug of calibrate.c, refused
 * by cg_serialize rather than written). Every tensor is float32. */
#ifndef DTPC_CALIB_GRAPH_H
#define DTPC_CALIB_GRAPH_H
#include <stddef.h>
#include <stdint.h>

#include "graph/graph.h"

enum { CG_TENSORS = 24, CG_OPS = 24, CG_PATTERNS = 4, CG_CHUNKS = 64, CG_STRBYTES = 1024 };

struct cgraph {
	struct g_axis axes[2];
	struct g_group group;
	struct g_pattern patterns[CG_PATTERNS];
	struct g_chunk chunks[CG_CHUNKS];
	struct g_tensor tensors[CG_TENSORS];
	struct g_op ops[CG_OPS];
	uint32_t operands[4 * CG_OPS], inputs[CG_TENSORS], outputs[CG_TENSORS];
	char strtab[CG_STRBYTES];
	uint32_t stroff[CG_TENSORS + 2];
	uint32_t nstrings, strbytes, npatterns, nchunks, ntensors, nops, noperands, ninputs,
		noutputs, world, gsize;
	uint64_t arena;
	int full; /* a table overflowed: cg_serialize refuses the graph */
};

/* A graph for `world` ranks whose mesh is [world / gsize, gsize]: the
 * ranks cut into groups of gsize consecutive ranks, the communication
 * group of every op (gsize 1: none; gsize must divide world). */
void cg_init(struct cgraph *b, int world, int gsize);
/* A tensor of kind GT_INPUT, GT_WEIGHT, GT_ACTIVATION or GT_SCRATCH (an
 * activation flagged `output` is a model output), dims[0..ndim). split >= 0
 * splits that dim evenly (it must divide) over the group; -1: whole.
 * Returns its index. */
int cg_tensor(struct cgraph *b, const char *name, int kind, int ndim, const int64_t *dims,
	      int split, int output);
/* A float32 scratch tensor of `floats` elements. */
int cg_scratch(struct cgraph *b, const char *name, uint64_t floats);
/* Op `kind` reading in[0..nin) and writing out (collectives over the
 * group); scratch -1 for none. Returns the op, for its attributes
 * (graph/op_attrs.h). */
struct g_op *cg_op(struct cgraph *b, int kind, const int *in, int nin, int out, int scratch);
/* The serialized graph (malloc'd, the caller frees), or NULL: out of memory
 * or a table overflowed. */
void *cg_serialize(struct cgraph *b, size_t *len);
#endif
