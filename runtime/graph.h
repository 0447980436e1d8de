/* graph.h — the compiled per-rank execution graph, in memory and on disk.
 *
 * One graph serves every rank: the SPMD program (tensors and ops) is stored
 * once; what differs between ranks is only how sharded dimensions split,
 * which the *pattern* table gives per index in a group (so a graph for 1,024
 * ranks holds per-rank data only in those tables). A rank derives its local
 * shapes, weight slices and communication peers from its mesh coordinates.
 * The on-disk format is docs/graph-format.md; every struct below is written
 * as is (little-endian, naturally aligned, no implicit padding), so a loaded
 * graph points into the file's bytes. */
#ifndef DTPC_GRAPH_H
#define DTPC_GRAPH_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "runtime/op_table.h"

#define GRAPH_MAGIC "DTPCGRPH"
enum {
	GRAPH_MAJOR = 1,
	GRAPH_MINOR = 0,
	G_MAX_DIMS = 8,
	G_MAX_AXES = 8,
	G_NATTR = 6,
	G_ALIGN = 64, /* section and arena alignment */
};

/* ---- tables (each a section of the file) ---------------------------------- */

enum g_meta_type { GM_U64 = 1, GM_I64 = 2, GM_F64 = 3, GM_STR = 4 };

/* A typed key/value: compiler version, plan and model names, source hash... */
struct g_meta {
	uint32_t key;   /* string index */
	uint32_t type;  /* enum g_meta_type */
	uint64_t value; /* u64, i64 or f64 bits, or a string index */
};

/* A mesh axis, outermost first. Ranks are row-major over the axes: the last
 * axis varies fastest. */
struct g_axis {
	uint32_t name; /* string index */
	uint32_t size;
};

/* A communication group: the ranks that share all coordinates except those
 * of the listed axes. A rank's index in the group is row-major over the
 * listed axes *in the listed order* (which may differ from the mesh order:
 * the context group is always ring-major). Axes of size 1 are never listed,
 * so groups with the same members are the same group. */
struct g_group {
	uint8_t axes[G_MAX_AXES]; /* mesh axis indices, naxes of them */
	uint32_t naxes;
	uint32_t size;            /* product of the listed axes' sizes */
};

/* How one dimension splits over a group: nblk blocks (a concat of separately
 * sharded pieces), each split into group.size chunks. Chunk (b, i) — block b,
 * group index i — is chunks[chunk0 + b * group.size + i]. */
struct g_pattern {
	uint32_t group;
	uint32_t nblk;
	uint64_t chunk0;
};

/* Rank i's piece of a block: [start, start + len) within the block. The
 * chunks of a block tile it in index order (start(i+1) = start(i) + len(i)). */
struct g_chunk {
	int64_t start, len;
};

enum g_tensor_kind {
	GT_INPUT = 1,      /* bound by the caller (whole), lives in the arena */
	GT_WEIGHT = 2,     /* bound by name; this rank holds its slice */
	GT_ACTIVATION = 3, /* produced by an op, lives in the arena */
	GT_SCRATCH = 4,    /* an op's workspace, live only during that op */
};

/* A tensor, float32. dims[d] is the size of dimension d across the group of
 * pattern[d] (the global size, or for a dim split twice — heads split by tp,
 * then by Ulysses — the size before this split); with pattern[d] = -1 the dim
 * is whole on every rank. Local size of d on a rank: the sum over blocks of
 * its chunk lengths. */
struct g_tensor {
	uint32_t name;  /* string index: module name; for weights the checkpoint name */
	uint8_t kind;   /* enum g_tensor_kind */
	uint8_t ndim;
	uint16_t flags; /* G_TF_* */
	int32_t pattern[G_MAX_DIMS];
	int64_t dims[G_MAX_DIMS];
	uint64_t offset; /* arena offset (inputs, activations, scratch) */
	uint64_t bytes;  /* >= 4 x the product over dims of the dim's largest
			  * local size: fits every rank's piece */
};

enum { G_TF_OUTPUT = 1 }; /* a model output (gathered whole) */

/* An op. Operands are operands[in0 .. in0 + nin); out is its result tensor;
 * group is the communication group (-1 for local ops); scratch is a
 * GT_SCRATCH tensor or -1. attr/eps by kind:
 *   linear       flags G_OF_BIAS when operand 2 is the bias
 *   layer_norm   eps; flags G_OF_AFFINE (operands 1, 2: weight, bias)
 *   rms_norm     eps; attr[0] group size; flags G_OF_AFFINE (operand 1)
 *   gelu         flags G_OF_TANH
 *   add, mul     flags G_OF_BH: operand 1 is [B, H] over [B, S, H]
 *   modulate     flags G_OF_BH: shift/scale are [B, H]
 *   slice        attr[0] dim, attr[1] start, attr[2] length: global
 *                coordinates; on a sharded dim the slice covers whole blocks
 *   concat       attr[0] dim
 *   rope         attr[0] head dim
 *   attention    attr[0] head dim of q/k, attr[1] of v
 *   reshape      (the output tensor has the shape)
 *   shard        attr[0] dim: this rank's chunks of a whole input
 *   all_gather   attr[0] dim: concatenate all ranks' chunks, block by block
 *   all_reduce   sum over the group
 *   ulysses_a2a  attr[0] direction (0: sequence-sharded -> head-sharded,
 *                1: back), attr[1] head dim, attr[2] sequence dim
 *   ring_attention attr[0] head dim of q/k, attr[1] of v, attr[2] rotate
 *                method (0 all-gather, 1 send/recv rotation), attr[3] seq
 *                dim; flags G_OF_FP32 (merge in float32) */
struct g_op {
	uint16_t kind;
	uint16_t nin;
	uint32_t in0;
	uint32_t out;
	int32_t group;
	int32_t scratch;
	uint32_t flags;
	int64_t attr[G_NATTR];
	double eps;
};

enum {
	G_OF_BIAS = 1 << 0,
	G_OF_AFFINE = 1 << 1,
	G_OF_TANH = 1 << 2,
	G_OF_BH = 1 << 3,
	G_OF_FP32 = 1 << 4,
};

/* ---- the whole graph --------------------------------------------------------- */

struct g_graph {
	/* strings: NUL-terminated, at strtab + stroff[i] */
	const char *strtab;
	uint64_t strtab_size;
	const uint32_t *stroff;
	uint32_t nstrings;

	const struct g_meta *meta;
	uint32_t nmeta;
	const struct g_axis *axes;
	uint32_t naxes;
	uint32_t world; /* product of the axis sizes */
	const struct g_group *groups;
	uint32_t ngroups;
	const struct g_pattern *patterns;
	uint32_t npatterns;
	const struct g_chunk *chunks;
	uint64_t nchunks;
	const struct g_tensor *tensors;
	uint32_t ntensors;
	const struct g_op *ops;
	uint32_t nops;
	const uint32_t *operands;
	uint32_t noperands;
	const uint32_t *inputs, *outputs; /* tensor indices */
	uint32_t ninputs, noutputs;
	uint64_t arena_bytes; /* every rank's activation arena */
	uint64_t checksum;    /* of the file: identifies the graph (handshake) */
};

/* ---- the file: header, section table, sections (docs/graph-format.md) ------ */

enum {
	G_PROBE = 0x01020304, /* byte-order probe, written natively */
	G_MAX_SECTIONS = 64,
	G_MAX_WORLD = 1 << 24,
};

struct g_file_header {
	char magic[8];        /* GRAPH_MAGIC, no NUL */
	uint16_t major, minor;
	uint32_t probe;       /* G_PROBE */
	uint32_t header_size; /* the section table starts here */
	uint32_t nsections;
	uint64_t file_size;
	uint64_t checksum;    /* graph_checksum() */
};

struct g_section {
	uint32_t id;   /* enum g_section_id; others are skipped */
	uint32_t elem; /* element size */
	uint64_t offset, size, count;
};

/* Section ids. Never renumber: new sections get new ids (a minor version). */
enum g_section_id {
	GS_PROGRAM = 1, /* struct g_program, one */
	GS_STRTAB,      /* char: NUL-terminated strings */
	GS_STROFF,      /* uint32_t: where string i starts in strtab */
	GS_META,
	GS_AXES,
	GS_GROUPS,
	GS_PATTERNS,
	GS_CHUNKS,
	GS_TENSORS,
	GS_OPS,
	GS_OPERANDS,    /* uint32_t */
	GS_INPUTS,      /* uint32_t */
	GS_OUTPUTS,     /* uint32_t */
	GS_COUNT        /* one past the last id this version knows */
};

struct g_program {
	uint64_t arena_bytes;
	uint64_t world; /* must equal the product of the axis sizes */
};

/* 64-bit FNV-1a of a serialized graph, with the header's checksum field
 * taken as zero bytes. */
uint64_t graph_checksum(const void *buf, size_t len);

/* ---- writing --------------------------------------------------------------------- */

/* Serializes g (its checksum field is ignored) into a malloc'd buffer.
 * Deterministic: equal graphs give equal bytes. Returns NULL on OOM. */
void *graph_serialize(const struct g_graph *g, size_t *len);

/* ---- loading ------------------------------------------------------------------------ */

/* Validates a serialized graph and fills g with pointers into buf (which must
 * stay alive and unchanged, and be 8-byte aligned). Every count, index,
 * offset and size is checked before use; on failure returns false and writes
 * a one-line reason ("truncated: section 'ops' ends at 4096 but the file has
 * 4000 bytes") into err. */
bool graph_parse(const void *buf, size_t len, struct g_graph *g, char *err,
		 size_t errlen);

/* ---- queries shared by the compiler, the inspector and the runtime ------------------- */

const char *graph_str(const struct g_graph *g, uint32_t i);
/* The rank's coordinate on each axis. */
void graph_coords(const struct g_graph *g, uint32_t rank, uint32_t *coords);
/* The rank's index in a group, and the world rank of member `index` of the
 * group that `rank` belongs to. */
uint32_t graph_group_index(const struct g_graph *g, uint32_t group, uint32_t rank);
uint32_t graph_group_member(const struct g_graph *g, uint32_t group, uint32_t rank,
			    uint32_t index);
/* The chunk of block b for group index i of a pattern. */
const struct g_chunk *graph_chunk(const struct g_graph *g, uint32_t pattern,
				  uint32_t b, uint32_t i);
/* Local size of dim d of tensor t on a rank; local shape into shape[]. */
int64_t graph_local_dim(const struct g_graph *g, uint32_t t, int d, uint32_t rank);
int64_t graph_local_numel(const struct g_graph *g, uint32_t t, uint32_t rank);
#endif
