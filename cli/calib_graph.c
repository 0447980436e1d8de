/* calib_graph.c — building calibrate's measurement graphs (calib_graph.h). */
#include "calib_graph.h"

#include <string.h>

static uint32_t cg_str(struct cgraph *b, const char *s)
{
	size_t n = strlen(s) + 1;
	if (b->nstrings >= sizeof b->stroff / sizeof *b->stroff ||
	    b->strbytes + n > sizeof b->strtab) {
		b->full = 1;
		return 0;
	}
	memcpy(b->strtab + b->strbytes, s, n);
	b->stroff[b->nstrings] = b->strbytes;
	b->strbytes += (uint32_t)n;
	return b->nstrings++;
}

void cg_init(struct cgraph *b, int world, int gsize)
{
	memset(b, 0, sizeof *b);
	b->world = (uint32_t)world, b->gsize = (uint32_t)gsize;
	cg_str(b, "");
	b->axes[0] = (struct g_axis){ cg_str(b, "groups"), (uint32_t)(world / gsize) };
	b->axes[1] = (struct g_axis){ cg_str(b, "member"), (uint32_t)gsize };
	/* a group lists its axes of size > 1 only: the member axis */
	b->group = (struct g_group){ .axes = { 1 }, .naxes = 1, .size = (uint32_t)gsize };
}

/* The even split of `total` over the group, a pattern of one block. */
static int cg_split(struct cgraph *b, int64_t total)
{
	uint32_t n = b->gsize;
	if (b->npatterns >= CG_PATTERNS || b->nchunks + n > CG_CHUNKS || total % n) {
		b->full = 1;
		return -1;
	}
	b->patterns[b->npatterns] = (struct g_pattern){ .group = 0, .nblk = 1, .chunk0 = b->nchunks };
	for (uint32_t i = 0; i < n; i++)
		b->chunks[b->nchunks++] = (struct g_chunk){ (int64_t)i * (total / n), total / n };
	return (int)b->npatterns++;
}

/* Tensor t's bytes at the next aligned arena offset (a weight lives
 * outside the arena). */
static void cg_place(struct cgraph *b, struct g_tensor *t, uint64_t bytes)
{
	t->bytes = bytes;
	if (t->kind == GT_WEIGHT)
		return;
	t->offset = b->arena;
	b->arena += (bytes + G_ALIGN - 1) / G_ALIGN * G_ALIGN;
}

int cg_tensor(struct cgraph *b, const char *name, int kind, int ndim, const int64_t *dims,
	      int split, int output)
{
	if (b->ntensors >= CG_TENSORS || ndim > G_MAX_DIMS) {
		b->full = 1;
		return 0;
	}
	int i = (int)b->ntensors++;
	struct g_tensor *t = &b->tensors[i];
	*t = (struct g_tensor){ .name = cg_str(b, name), .kind = (uint8_t)kind,
				.ndim = (uint8_t)ndim, .flags = output ? G_TF_OUTPUT : 0 };
	uint64_t local = 4;
	for (int d = 0; d < ndim; d++) {
		t->dims[d] = dims[d];
		t->pattern[d] = d == split ? cg_split(b, dims[d]) : -1;
		local *= (uint64_t)(d == split ? dims[d] / b->gsize : dims[d]);
	}
	cg_place(b, t, local);
	if (kind == GT_INPUT)
		b->inputs[b->ninputs++] = (uint32_t)i;
	if (output)
		b->outputs[b->noutputs++] = (uint32_t)i;
	return i;
}

int cg_scratch(struct cgraph *b, const char *name, uint64_t floats)
{
	int64_t n = (int64_t)floats;
	return cg_tensor(b, name, GT_SCRATCH, 1, &n, -1, 0);
}

struct g_op *cg_op(struct cgraph *b, int kind, const int *in, int nin, int out, int scratch)
{
	static struct g_op spare; /* where an overflowing op's attributes go */
	if (b->nops >= CG_OPS || b->noperands + (uint32_t)nin > sizeof b->operands /
								       sizeof *b->operands) {
		b->full = 1;
		return &spare;
	}
	struct g_op *o = &b->ops[b->nops++];
	*o = (struct g_op){ .kind = (uint16_t)kind, .nin = (uint16_t)nin, .in0 = b->noperands,
			    .out = (uint32_t)out, .group = op_table[kind].flags & OPF_COMM ? 0 : -1,
			    .scratch = scratch };
	for (int k = 0; k < nin; k++)
		b->operands[b->noperands++] = (uint32_t)in[k];
	return o;
}

void *cg_serialize(struct cgraph *b, size_t *len)
{
	if (b->full)
		return NULL;
	struct g_graph g = {
		.strtab = b->strtab, .strtab_size = b->strbytes,
		.stroff = b->stroff, .nstrings = b->nstrings,
		.axes = b->axes, .naxes = 2, .world = b->world,
		.groups = &b->group, .ngroups = b->gsize > 1,
		.patterns = b->patterns, .npatterns = b->npatterns,
		.chunks = b->chunks, .nchunks = b->nchunks,
		.tensors = b->tensors, .ntensors = b->ntensors,
		.ops = b->ops, .nops = b->nops,
		.operands = b->operands, .noperands = b->noperands,
		.inputs = b->inputs, .ninputs = b->ninputs,
		.outputs = b->outputs, .noutputs = b->noutputs,
		.arena_bytes = b->arena,
	};
	return graph_serialize(&g, len);
}
