/* graph.h — the compiled per-rank execution graph, in memory and on disk.
 *
 * One graph serves every rank: the SPMD program (tensors and ops) is stored
 * once; what differs between ranks is only how sharded dimensions split,
 * which the *pattern* table gives per index in a group (so a graph for 1,024
 * ranks holds per-rank data only in those tables). A rank derives its local
 * shapes, weight slices and communication peers from its mesh coordinates.
 * The on-disk format is docs/graph-format.md; every struct below is written
 * as is (little-endian, naturally aligned, no implicit padding), so a loaded
 * graph points into the file's bytes. The _Static_asserts at the end pin
 * every record's size and the op ids: a change that moves them changes the
 * format, and must be a new major version. */
#ifndef DTPC_GRAPH_H
#define DTPC_GRAPH_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "graph/error.h" /* graph_parse raises into its record */
#include "graph/op_table.h"

#define GRAPH_MAGIC "DTPCGRPH"
enum {
	GRAPH_MAJOR = 1,
	GRAPH_MINOR = 2, /* 1.1: typed metadata, requirements, weights manifest;
			  * 1.2: tensors' storage dtypes */
	G_MAX_DIMS = 8,
	G_MAX_AXES = 8,
	G_NATTR = 6,
	G_ALIGN = 64, /* section and arena alignment */
};

/* ---- tables (each a section of the file) ---------------------------------- */

/* Metadata value types. 1-4 are format 1.0's, 5-7 came with 1.1. A reader
 * skips a type it does not know when the file's minor version is newer than
 * its own (a later minor added it), and rejects it otherwise. */
enum g_meta_type {
	GM_U64 = 1,
	GM_I64 = 2,
	GM_F64 = 3,
	GM_STR = 4,
	GM_BOOL = 5,      /* value 0 or 1 */
	GM_I64_ARRAY = 6, /* value: index of a list in the meta_items table */
	GM_STR_ARRAY = 7, /* ... whose items are string indices */
	GM_TYPES          /* one past the last type this version knows */
};

/* A typed key/value: compiler version, plan and model names, source hash,
 * the model's parameters... */
struct g_meta {
	uint32_t key;   /* string index */
	uint32_t type;  /* enum g_meta_type */
	uint64_t value; /* u64, i64 or f64 bits, a string index, 0/1, or a list */
};
/* A list is meta_items[value] = n followed by its n items (i64 bits or
 * string indices); lists are disjoint and in the order of their metas. */

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

/* A tensor, stored in the dtype of its entry in the graph's dtypes table
 * (float32 in files before 1.2). dims[d] is the size of dimension d across the group of
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
	uint64_t bytes;  /* >= the dtype's size x the product over dims of the
			  * dim's largest local size: fits every rank's piece */
};

enum { G_TF_OUTPUT = 1 }; /* a model output (gathered whole) */

/* Storage dtypes (format 1.2: the dtypes section, one per tensor). A graph
 * with a bf16 or f16 tensor sets G_CAP_BF16 or G_CAP_F16, so a runtime
 * before 1.2 (which has neither) refuses it. Accumulation is float32
 * whatever the storage; ring attention's log-sum-exp vectors are float32
 * always, and its accumulator too under G_OF_FP32 (graph_ring_scratch). */
enum g_dtype { G_DT_F32 = 1, G_DT_BF16 = 2, G_DT_F16 = 3 };
#define G_DT_COUNT 4 /* one past the last */

/* One entry of the weights manifest: a checkpoint tensor the graph binds,
 * by name, with its full shape and the dtype the graph holds it in (a binder
 * converts the checkpoint's to it). Sorted by name (bytewise), names unique,
 * one entry per GT_WEIGHT tensor: a binder can find a name by bisection and
 * refuse a checkpoint that lacks one, or has it in another shape, before it
 * reads any data. */
struct g_weight {
	uint32_t name;   /* string index: the checkpoint name (= the tensor's) */
	uint32_t tensor; /* the GT_WEIGHT tensor holding this rank's slice */
	uint32_t dtype;  /* enum g_dtype */
	uint32_t ndim;
	int64_t shape[G_MAX_DIMS]; /* the full shape; 0 past ndim */
};

/* What a runtime must have to run the graph, beyond reading the format.
 * A runtime refuses a graph that sets a bit it lacks or does not know
 * (DTPC_ERR_VERSION), so a new dtype, device or op is a new bit rather than
 * a silent misreading. */
enum {
	G_CAP_F32 = 1 << 0,   /* float32 tensors */
	G_CAP_BF16 = 1 << 1,  /* bfloat16 tensors */
	G_CAP_F16 = 1 << 2,   /* float16 tensors */
	/* a rope_freqs op without ids that computes its positions (G_OF_GRID,
	 * G_OF_TEXT): an older runtime would refuse its operand count as
	 * damage, so the bit makes that a version refusal */
	G_CAP_POSITIONS = 1 << 3,
	G_CAP_CUDA = 1 << 16, /* runs only on a CUDA device */
};
#define G_CAP_KNOWN (G_CAP_F32 | G_CAP_BF16 | G_CAP_F16 | G_CAP_POSITIONS | G_CAP_CUDA)

struct g_requires {
	uint32_t compiler; /* the producing dtpc: major << 16 | minor << 8 | patch */
	uint32_t reserved; /* 0; readers ignore it */
	uint64_t caps;     /* G_CAP_* */
	uint64_t ops;      /* bit k: op id k occurs (ids below 64) */
};

/* An op. Operands are operands[in0 .. in0 + nin); out is its result tensor;
 * group is the communication group (-1 for local ops); scratch is a
 * GT_SCRATCH tensor or -1. attr/eps by kind (graph/op_attrs.h gives each
 * op's as a typed struct: read and write them through its accessors only):
 *   linear       flags G_OF_BIAS when operand 2 is the bias
 *   linear_act   a linear and its activation in one op (compiler/fuse.c):
 *                as linear, attr[0] the activation (enum g_act); its value
 *                is exactly act(round_to_storage(x W^T + b))
 *   layer_norm   eps; flags G_OF_AFFINE (operands 1, 2: weight, bias);
 *                G_OF_STATS: a distributed norm (the last axis split over a
 *                group): the last two operands are the all-reduced sums
 *                sum(x) [.., 1] and norm_stats' centred pair [.., 2],
 *                attr[1] the whole width N
 *   rms_norm     eps; attr[0] group size; flags G_OF_AFFINE (operand 1);
 *                G_OF_STATS: the last operand is the all-reduced sum(x^2)
 *                per row [.., 1], attr[1] the whole width N (one group)
 *   gelu         flags G_OF_TANH
 *   add, mul     flags G_OF_BH: operand 1 is [B, H] over [B, S, H]
 *   modulate     flags G_OF_BH: shift/scale are [B, H]
 *   slice        attr[0] dim, attr[1] start, attr[2] length: global
 *                coordinates; on a sharded dim the slice covers whole blocks
 *   concat       attr[0] dim
 *   rope         attr[0] head dim; flags G_OF_HALF: rotate_half over the
 *                tables' R leading channels of each head (cos/sin [S, R],
 *                R even, at most the head dim; the rest passed through);
 *                G_OF_SPLIT: rotate_half over the whole head, each head's
 *                own D / 2 table columns for both halves (cos/sin [S,
 *                heads * D / 2]: LTX-2's rope_type "split"); neither:
 *                interleaved pairs over the whole head (R = head dim)
 *   attention    attr[0] head dim of q/k, attr[1] of v; an optional operand 3,
 *                the key-padding mask [B, Skv] (0: key masked), split like k
 *   reshape      (the output tensor has the shape)
 *   shard        attr[0] dim: this rank's chunks of a whole input
 *   all_gather   attr[0] dim: concatenate all ranks' chunks, block by block
 *   all_reduce   sum over the group
 *   ulysses_a2a  attr[0] direction (0: sequence-sharded -> head-sharded,
 *                1: back), attr[1] head dim, attr[2] sequence dim
 *   ring_attention attr[0] head dim of q/k, attr[1] of v, attr[2] rotate
 *                method (0 all-gather, 1 send/recv rotation), attr[3] seq
 *                dim; flags G_OF_FP32 (merge in float32); an optional operand
 *                3, the key-padding mask [B, rows], split like k: its chunks
 *                travel with k's
 *   timestep_embedding attr[0] dim; attr[1..4] the float64 bits of
 *                downscale_freq_shift, scale, max_period, input_scale;
 *                flags G_OF_FLIP (flip_sin_to_cos), G_OF_SCALE_F32 (t ·
 *                input_scale kept in float32 under a 16-bit storage dtype)
 *   rope_freqs   attr[0 .. n) axes_dim (n = the ids' columns, at most
 *                G_NATTR); eps theta; flags G_OF_SIN (the sine table, else
 *                the cosine), G_OF_F64 (freqs and angles in float64).
 *                Without an operand (G_CAP_POSITIONS) it computes the
 *                positions of its rows itself, in float32, as the generator
 *                the compiler folded into it (compiler/fold.c): G_OF_GRID:
 *                grid_ids', n = 3, attr[3..5] frames, height, width, flags
 *                G_OF_CENTER; G_OF_TEXT: text_ids' (every axis of row i at
 *                attr[5] + i), n < G_NATTR axes with attr[n..4] zero. The
 *                output is whole: [rows, sum of axes_dim]
 *   ltx_rope_freqs attr[0] dim, attr[1] temporal patch, attr[2] spatial
 *                patch, attr[3..5] the float64 bits of the three coordinate
 *                scales (rope_interpolation_scale); eps theta; flags
 *                G_OF_SIN. Operand: the positions [rows, 3]; the output
 *                [rows, dim] (k_ltx_rope_freqs)
 *   ltx2_rope_freqs the parameters of ga_ltx2_rope_freqs, packed into
 *                attr[0..5] (graph/op_attrs.h); eps theta; flags G_OF_SIN,
 *                G_OF_F64 (float64 frequencies), G_OF_SPLIT (rope_type
 *                "split": one column per frequency). No operand: the output
 *                [rows, dim] (with G_OF_SPLIT [rows, dim / 2];
 *                k_ltx2_rope_freqs)
 *   grid_ids     attr[0..2] frames, height, width; flags G_OF_CENTER
 *   text_ids     attr[0] length, attr[1] the first position, attr[2] axes
 *   patch_embed  attr[0..2] the patch (t, h, w); operands x [B, C, F, H, W],
 *                weight [out, C, t, h, w] and, with G_OF_BIAS, the bias; or
 *                (a Conv2d) x [B, C, H, W] and weight [out, C, h, w], t = 1;
 *                scratch the patches [B, tokens, C * t * h * w]
 *   unpatchify   attr[0..2] the patch (the output tensor has the sizes)
 *   pad          attr[0] dim, attr[1] rows before, attr[2] rows after
 *                (global), eps the value; along a split dim the pads are the
 *                first and last blocks of the output's pattern
 *   norm_stats   per row of x, over its local last axis (k_norm_stat in
 *                attr[1]): 0 sum(x) [.., 1]; 1 sum(x - c) and sum((x - c)^2)
 *                [.., 2] with c = operand 1 / attr[0] (the all-reduced
 *                sum(x) over the whole width attr[0] = N); 2 sum(x^2) [.., 1].
 *                Accumulated in float64
 *   reduce_scatter attr[0] dim: sum over the group of the whole input, this
 *                rank keeping its chunk of dim (the output's pattern, one
 *                block); scratch: the pieces sent, then the pieces received
 *   index_select attr[0] dim: out[.., j, ..] = x[.., index[j], ..] over
 *                dim (operands x, index [M]: integer values in the storage
 *                dtype); x whole on dim, out split on dim as index is
 *   index_copy   attr[0] dim: out = x, then out[.., index[j], ..] =
 *                src[.., j, ..] (operands x, index [M], src); all whole.
 *                An index outside [0, x's size on dim) or not an integer
 *                selects zeros (index_select) or is skipped (index_copy) */
/* linear_act's attr[0]: the activation after the linear (the values of the
 * kernels' enum k_act). */
enum g_act { G_ACT_GELU, G_ACT_GELU_TANH, G_ACT_SILU, G_ACT_COUNT };

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
	G_OF_FLIP = 1 << 5,
	G_OF_SIN = 1 << 6,
	G_OF_F64 = 1 << 7,
	G_OF_CENTER = 1 << 8,
	G_OF_STATS = 1 << 9,
	G_OF_GRID = 1 << 10,
	G_OF_TEXT = 1 << 11,
	G_OF_SCALE_F32 = 1 << 12,
	G_OF_HALF = 1 << 13,
	G_OF_SPLIT = 1 << 14,
};

/* norm_stats' attr[1]: which per-row sums (kernels.h's k_norm_stat) */
enum g_norm_stat { G_NS_SUM, G_NS_CENTRED, G_NS_SQ };

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

	/* Format 1.1. The writer ignores weights and need.ops (it derives them
	 * from the tensors and ops) and ORs G_CAP_F32 and the bits of the
	 * tensors' dtypes into need.caps; the
	 * loader of a 1.0 file leaves the manifest empty and fills need as a
	 * 1.0 graph implies: compiler 0 (unknown), f32, the ops it has. */
	const uint64_t *meta_items; /* the lists of array metadata */
	uint64_t nmeta_items;
	const struct g_weight *weights; /* the weights manifest */
	uint32_t nweights;
	struct g_requires need;
	uint16_t minor; /* the file's format minor version (read only) */

	/* Format 1.2: each tensor's enum g_dtype, ntensors of them; NULL (a
	 * file before 1.2) means float32 throughout. */
	const uint8_t *dtypes;
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
	/* 1.1 */
	GS_META_ITEMS,  /* uint64_t: the lists of array metadata */
	GS_REQUIRES,    /* struct g_requires, one */
	GS_WEIGHTS,     /* struct g_weight: the weights manifest */
	/* 1.2 */
	GS_DTYPES,      /* uint8_t: each tensor's enum g_dtype */
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

/* Serializes g (its checksum field is ignored) into a malloc'd buffer, in
 * the current format (GRAPH_MAJOR.GRAPH_MINOR), with this dtpc's version as
 * the producer's. Deterministic: equal graphs give equal bytes. Returns NULL
 * on OOM. */
void *graph_serialize(const struct g_graph *g, size_t *len);

/* ---- loading ------------------------------------------------------------------------ */

/* Validates a serialized graph and fills g with pointers into buf (which must
 * stay alive and unchanged, and be 8-byte aligned). Every count, index,
 * offset and size is checked before use; on failure returns false and raises
 * (graph/error.h) a one-line reason ("truncated: section 'ops' ends at 4096
 * but the file has 4000 bytes") with why it was refused: G_ERR_FORMAT for
 * damage (or forgery), G_ERR_VERSION for a graph this runtime is too old for
 * (a newer major version, a capability or op it lacks). */
bool graph_parse(const void *buf, size_t len, struct g_graph *g);
/* The capabilities this build of the runtime has (G_CAP_*). */
uint64_t graph_runtime_caps(void);

/* ---- queries shared by the compiler, the inspector and the runtime ------------------- */

const char *graph_str(const struct g_graph *g, uint32_t i);
/* The index of the metadata entry with this key, or -1. */
int64_t graph_meta_find(const struct g_graph *g, const char *key);
/* Metadata entry i's value as text, snprintf-style (returns the length it
 * needs): numbers in decimal (f64 exactly: %.17g), bools true/false,
 * strings as they are, lists as [1, 2] or ["a", "b"] with strings quoted,
 * a type this reader skipped as "(type N)". */
int graph_meta_text(const struct g_graph *g, uint32_t i, char *buf, size_t n);
/* A list's length and items (GM_*_ARRAY entries). */
uint64_t graph_meta_len(const struct g_graph *g, uint32_t i);
const uint64_t *graph_meta_items(const struct g_graph *g, uint32_t i);
/* The weights manifest entry of a checkpoint name, or NULL (bisection). */
const struct g_weight *graph_weight_find(const struct g_graph *g, const char *name);
/* "dtpc 0.2.0" for need.compiler into buf; "an unknown dtpc" for 0. */
const char *graph_compiler_str(uint32_t compiler, char *buf, size_t n);
/* Tensor t's storage dtype (G_DT_F32 in files before 1.2), and the bytes
 * of one element of a dtype. */
enum g_dtype graph_tensor_dtype(const struct g_graph *g, uint32_t t);
uint32_t graph_dtype_size(enum g_dtype t);
/* "f32", "bf16", "f16"; NULL for another value. */
const char *graph_dtype_name(uint32_t t);
/* Positions (grid_ids, text_ids) are integers stored in the tensors' dtype,
 * which holds every integer of magnitude up to graph_dtype_exact_ints(t)
 * exactly: 2^24 (f32), 2^8 (bf16), 2^11 (f16). graph_ids_extent: the
 * largest magnitude among the positions grid_ids writes (pos: frames,
 * height, width; center) or text_ids (pos: length, first position). */
int64_t graph_dtype_exact_ints(enum g_dtype t);
int64_t graph_ids_extent(bool grid, const int64_t *pos, bool center);
/* A rope_freqs op without ids (G_OF_GRID / G_OF_TEXT): its axes (3, or
 * text's leading nonzero axes_dim), and its positions as graph_ids_extent
 * and the devices take them (grid: frames, height, width; text: rows, the
 * first position). */
int graph_rope_naxes(const struct g_op *o);
void graph_rope_ids_attr(const struct g_op *o, int64_t rows, int64_t pos[3]);
/* ring_attention's scratch, in bytes from its start, each part 4-byte
 * aligned: at[0] the K/V chunks (kv elements of esize bytes), at[1] the
 * block's output (out elements), at[2] with fp32_acc a float32 accumulator
 * of out floats (the merge's output under convert_to_fp32 when the storage
 * is narrower than float32; else the op's output is the accumulator), at[3]
 * the two log-sum-exp vectors (2 x lse floats). Returns the total, or
 * UINT64_MAX when it overflows. */
uint64_t graph_ring_scratch(uint64_t kv, uint64_t out, uint64_t lse, uint32_t esize,
			    bool fp32_acc, uint64_t at[4]);
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

/* ---- pinned: the on-disk record sizes and op ids of format 1.x ---------------------- */

_Static_assert(sizeof(struct g_file_header) == 40, "g_file_header is 40 bytes in 1.x");
_Static_assert(sizeof(struct g_section) == 32, "g_section is 32 bytes in 1.x");
_Static_assert(sizeof(struct g_program) == 16, "g_program is 16 bytes in 1.x");
_Static_assert(sizeof(struct g_meta) == 16, "g_meta is 16 bytes in 1.x");
_Static_assert(sizeof(struct g_axis) == 8, "g_axis is 8 bytes in 1.x");
_Static_assert(sizeof(struct g_group) == 16, "g_group is 16 bytes in 1.x");
_Static_assert(sizeof(struct g_pattern) == 16, "g_pattern is 16 bytes in 1.x");
_Static_assert(sizeof(struct g_chunk) == 16, "g_chunk is 16 bytes in 1.x");
_Static_assert(sizeof(struct g_tensor) == 120, "g_tensor is 120 bytes in 1.x");
_Static_assert(sizeof(struct g_op) == 80, "g_op is 80 bytes in 1.x");
_Static_assert(sizeof(struct g_requires) == 24, "g_requires is 24 bytes in 1.x");
_Static_assert(sizeof(struct g_weight) == 80, "g_weight is 80 bytes in 1.x");
_Static_assert(offsetof(struct g_file_header, checksum) == 32, "the checksum word is word 4");
_Static_assert(offsetof(struct g_tensor, dims) == 40 && offsetof(struct g_op, attr) == 24,
	       "no implicit padding in g_tensor and g_op");
/* Op ids are stored in graphs: ops.def may only grow at its end (the ids
 * and OP_COUNT are pinned beside the op table, graph/op_graph.c, which a
 * new op touches for its descriptor). A new id of 64 or more needs a wider
 * g_requires.ops, i.e. a new capability bit and section in a minor
 * version. */
_Static_assert(OP_COUNT <= 64, "g_requires.ops has 64 bits");
/* Flags and capability bits are stored in graphs too: the values of
 * docs/graph-format.md's ops and requires tables. */
_Static_assert(G_OF_BIAS == 1 && G_OF_AFFINE == 2 && G_OF_TANH == 4 && G_OF_BH == 8 &&
	       G_OF_FP32 == 16 && G_OF_FLIP == 32 && G_OF_SIN == 64 && G_OF_F64 == 128 &&
	       G_OF_CENTER == 256 && G_OF_STATS == 512 && G_OF_GRID == 1024 &&
	       G_OF_TEXT == 2048 && G_OF_SCALE_F32 == 4096, "op flags are never renumbered");
_Static_assert(G_CAP_F32 == 1 && G_CAP_BF16 == 2 && G_CAP_F16 == 4 && G_CAP_POSITIONS == 8 &&
	       G_CAP_CUDA == 1 << 16, "capability bits are never renumbered");
#endif
