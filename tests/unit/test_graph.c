/* test_graph.c — unit tests for the .graph format: graph/graph_write.c and
 * graph/graph_load.c (docs/graph-format.md).
 *
 * A small but complete graph (mesh ring = 2 x tp = 3, uneven and block-sharded
 * patterns, tensors of every kind, a few ops with and without groups) goes
 * through serialize and parse; then every truncation, every flipped byte and
 * a list of forged files (edited, checksum fixed up) must be rejected with the
 * right message.
 *
 * Format 1.1's additions have their own tests: typed metadata (and skipping
 * a type of a newer minor), the requirements a runtime refuses a graph over,
 * the weights manifest, and reading a 1.0 file (tests/unit/graph-1.0.graph:
 * this graph as dtpc 0.1.0 wrote it).
 *
 * DTPC_WRITE_SEEDS=dir also writes the seed graphs of the fuzz target
 * (tests/fuzz/graph_corpus) into dir. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/version.h"
#include "graph/error.h"
#include "graph/graph.h"
#include "graph/op_attrs.h"
#include "graph/op_graph.h"
#include "runtime/dtpc.h"
#include "graph/graph_file.h"
#include "tests/unit/unit.h"

/* ---- the test graph -------------------------------------------------------------- */

enum { AX_RING, AX_TP };
enum { G_CTX, G_TP, G_TPRING }; /* G_TPRING lists tp before ring */
enum { P_SEQ, P_HID, P_QKV, P_Z }; /* P_SEQ: 7 in blocks [4, 3] over ring */
enum {
	T_X, T_XS, T_WQKV, T_BQKV, T_QKV, T_WPROJ, T_WS, T_PROJ, T_Y, T_OUT,
	T_T, T_Z, T_NORM, NTENSORS
};

static const char *const strings[] = {
	"", "ring", "tp", "x", "x.shard", "qkv.weight", "qkv.bias", "qkv",
	"proj.weight", "qkv.ws", "proj", "y", "out", "t", "z", "norm",
	"compiler", "dtpc 0.1.0", "world", "offset", "scale",
	"flag", "shape", "names", "a", "b",
};
enum { NSTRINGS = sizeof strings / sizeof strings[0] };

static char strtab[256];
static uint32_t stroff[NSTRINGS];

enum { NMETA = 7 };
static struct g_meta meta[NMETA];
/* meta 5 ('shape') is [2, 4, -8], meta 6 ('names') ["a", "b"] */
static const uint64_t meta_items[] = { 3, 2, 4, (uint64_t)-8, 2, 24, 25 };
enum { NITEMS = sizeof meta_items / sizeof meta_items[0] };

static const struct g_axis axes[] = {
	[AX_RING] = { 1, 2 },
	[AX_TP] = { 2, 3 },
};

static const struct g_group groups[] = {
	[G_CTX] = { { AX_RING }, 1, 2 },
	[G_TP] = { { AX_TP }, 1, 3 },
	[G_TPRING] = { { AX_TP, AX_RING }, 2, 6 },
};

static const struct g_pattern patterns[] = {
	[P_SEQ] = { G_CTX, 2, 0 },
	[P_HID] = { G_TP, 1, 4 },
	[P_QKV] = { G_TP, 3, 7 },
	[P_Z] = { G_TPRING, 1, 16 },
};

static const struct g_chunk chunks[] = {
	{ 0, 2 }, { 2, 2 }, { 0, 2 }, { 2, 1 }, /* P_SEQ: [4 | 3] -> 4, 3 */
	{ 0, 3 }, { 3, 3 }, { 6, 2 },           /* P_HID: 8 -> 3, 3, 2 */
	{ 0, 2 }, { 2, 2 }, { 4, 2 },           /* P_QKV: q | k | v, 6 each */
	{ 0, 2 }, { 2, 2 }, { 4, 2 },
	{ 0, 2 }, { 2, 2 }, { 4, 2 },
	{ 0, 3 }, { 3, 2 }, { 5, 2 }, { 7, 2 }, { 9, 2 }, { 11, 2 }, /* P_Z: 13 */
};
enum { NCHUNKS = sizeof chunks / sizeof chunks[0] };

static struct g_tensor tensors[NTENSORS] = {
	[T_X] = { 3, GT_INPUT, 3, 0, { -1, -1, -1 }, { 1, 7, 8 }, 0, 224 },
	[T_XS] = { 4, GT_ACTIVATION, 3, 0, { -1, P_SEQ, -1 }, { 1, 7, 8 }, 256, 128 },
	[T_WQKV] = { 5, GT_WEIGHT, 2, 0, { P_QKV, -1 }, { 18, 8 }, 0, 192 },
	[T_BQKV] = { 6, GT_WEIGHT, 1, 0, { P_QKV }, { 18 }, 0, 24 },
	[T_QKV] = { 7, GT_ACTIVATION, 3, 0, { -1, P_SEQ, P_QKV }, { 1, 7, 18 }, 384, 96 },
	[T_WPROJ] = { 8, GT_WEIGHT, 2, 0, { -1, P_HID }, { 8, 8 }, 0, 96 },
	[T_WS] = { 9, GT_SCRATCH, 1, 0, { -1 }, { 16 }, 512, 64 },
	[T_PROJ] = { 10, GT_ACTIVATION, 3, 0, { -1, P_SEQ, P_HID }, { 1, 7, 8 }, 576, 48 },
	[T_Y] = { 11, GT_ACTIVATION, 3, 0, { -1, P_SEQ, -1 }, { 1, 7, 8 }, 640, 128 },
	[T_OUT] = { 12, GT_ACTIVATION, 3, G_TF_OUTPUT, { -1, -1, -1 }, { 1, 7, 8 }, 768, 224 },
	[T_T] = { 13, GT_INPUT, 0, 0, { 0 }, { 0 }, 1024, 4 },
	[T_Z] = { 14, GT_ACTIVATION, 2, 0, { -1, P_Z }, { 2, 13 }, 1088, 24 },
	[T_NORM] = { 15, GT_ACTIVATION, 3, 0, { -1, -1, -1 }, { 1, 7, 8 }, 1152, 224 },
};
enum { ARENA = 1408 };

static const uint32_t operands[] = {
	T_X,                 /* 0: shard */
	T_XS, T_WQKV, T_BQKV, /* 1: linear */
	T_XS, T_WPROJ,       /* 4: linear */
	T_PROJ,              /* 6: all_gather over tp */
	T_Y,                 /* 7: all_gather over ring */
	T_Y,                 /* 8: reshape */
	T_OUT,               /* 9: layer_norm */
};

static const struct g_op ops[] = {
	{ OP_shard, 1, 0, T_XS, G_CTX, -1, 0, { 1 }, 0 },
	{ OP_linear, 3, 1, T_QKV, -1, T_WS, G_OF_BIAS, { 0 }, 0 },
	{ OP_linear, 2, 4, T_PROJ, -1, -1, 0, { 0 }, 0 },
	{ OP_all_gather, 1, 6, T_Y, G_TP, -1, 0, { 2 }, 0 },
	{ OP_all_gather, 1, 7, T_OUT, G_CTX, -1, 0, { 1 }, 0 },
	{ OP_reshape, 1, 8, T_Z, -1, -1, 0, { 0 }, 0 },
	{ OP_layer_norm, 1, 9, T_NORM, -1, -1, 0, { 0 }, 1e-6 },
};
enum { NOPS = sizeof ops / sizeof ops[0] };

static const uint32_t inputs[] = { T_X, T_T };
static const uint32_t outputs[] = { T_OUT };

static struct g_graph make_graph(void)
{
	size_t at = 0;
	double scale = 0.5;

	/* Unused pattern slots are -1, as the writer makes them. */
	for (int t = 0; t < NTENSORS; t++)
		for (int d = tensors[t].ndim; d < G_MAX_DIMS; d++)
			tensors[t].pattern[d] = -1;

	for (int i = 0; i < NSTRINGS; i++) {
		stroff[i] = (uint32_t)at;
		strcpy(strtab + at, strings[i]);
		at += strlen(strings[i]) + 1;
	}
	meta[0] = (struct g_meta){ 16, GM_STR, 17 };
	meta[1] = (struct g_meta){ 18, GM_U64, 6 };
	meta[2] = (struct g_meta){ 19, GM_I64, (uint64_t)-3 };
	meta[3] = (struct g_meta){ 20, GM_F64, 0 };
	memcpy(&meta[3].value, &scale, sizeof scale);
	meta[4] = (struct g_meta){ 21, GM_BOOL, 1 };
	meta[5] = (struct g_meta){ 22, GM_I64_ARRAY, 0 };
	meta[6] = (struct g_meta){ 23, GM_STR_ARRAY, 4 };
	return (struct g_graph){
		.strtab = strtab, .strtab_size = at, .stroff = stroff,
		.nstrings = NSTRINGS,
		.meta = meta, .nmeta = NMETA,
		.meta_items = meta_items, .nmeta_items = NITEMS,
		.axes = axes, .naxes = 2, .world = 6,
		.groups = groups, .ngroups = 3,
		.patterns = patterns, .npatterns = 4,
		.chunks = chunks, .nchunks = NCHUNKS,
		.tensors = tensors, .ntensors = NTENSORS,
		.ops = ops, .nops = NOPS,
		.operands = operands, .noperands = 10,
		.inputs = inputs, .ninputs = 2,
		.outputs = outputs, .noutputs = 1,
		.arena_bytes = ARENA,
	};
}

/* The smallest valid graph: one rank, nothing to run. */
static struct g_graph make_minimal(void)
{
	static const char empty[1] = "";
	static const uint32_t off0[1] = { 0 };
	static const struct g_axis one[1] = { { 0, 1 } };

	return (struct g_graph){
		.strtab = empty, .strtab_size = 1, .stroff = off0, .nstrings = 1,
		.axes = one, .naxes = 1, .world = 1,
	};
}

/* ---- helpers ------------------------------------------------------------------------- */

static uint8_t *valid;
static size_t valid_len;

static size_t align_up(size_t x)
{
	return (x + G_ALIGN - 1) / G_ALIGN * G_ALIGN;
}

static uint8_t *copy_of(const uint8_t *f, size_t len)
{
	uint8_t *c = malloc(len);

	memcpy(c, f, len);
	return c;
}

static struct g_file_header *header(uint8_t *f)
{
	return (void *)f;
}

static struct g_section *entry(uint8_t *f, uint32_t id)
{
	struct g_section *tab = (void *)(f + header(f)->header_size);

	for (uint32_t i = 0; i < header(f)->nsections; i++)
		if (tab[i].id == id)
			return &tab[i];
	abort();
}

static void *section(uint8_t *f, uint32_t id)
{
	return f + entry(f, id)->offset;
}

/* After an edit, so that the check under test is reached. */
static void fix_checksum(uint8_t *f, size_t len)
{
	header(f)->checksum = graph_checksum(f, len);
}

/* Parses f[0 .. len) (fixing its checksum first), which must fail with a
 * message containing want; frees f. */
static void reject(uint8_t *f, size_t len, const char *want, const char *what)
{
	struct g_graph g;

	fix_checksum(f, len);
	bool ok = graph_parse(f, len, &g);
	const char *err = g_error()->msg;

	UNIT_CHECK(!ok && strstr(err, want), "rejects %s: \"%s\"", what, err);
	if (ok || !strstr(err, want))
		printf("#   expected a message containing \"%s\"\n", want);
	free(f);
}

static bool parse_ok(const uint8_t *f, size_t len, struct g_graph *g)
{
	if (graph_parse(f, len, g))
		return true;
	printf("# unexpected: %s\n", g_error()->msg);
	return false;
}

static void write_seed(const char *dir, const char *name, const void *f, size_t len)
{
	char path[4096];

	snprintf(path, sizeof path, "%s/%s", dir, name);
	FILE *fp = fopen(path, "wb");

	if (!fp || fwrite(f, 1, len, fp) != len || fclose(fp))
		printf("# could not write %s\n", path);
}

/* valid as a newer minor (GRAPH_MINOR + 1) with room for one more section
 * table entry (id 0, empty, which readers skip): every section moved
 * G_ALIGN bytes on. The file is align_up(valid_len) + G_ALIGN bytes. */
static uint8_t *newer_minor(const uint8_t *v, size_t vlen)
{
	size_t len = align_up(vlen) + G_ALIGN;
	uint8_t *f = calloc(1, len);
	const struct g_file_header *h = (const void *)v;
	uint64_t first = UINT64_MAX;
	struct g_section *tab = (void *)(f + h->header_size);

	memcpy(f, v, h->header_size + h->nsections * sizeof *tab);
	for (uint32_t i = 0; i < h->nsections; i++)
		if (tab[i].offset < first)
			first = tab[i].offset;
	memcpy(f + first + G_ALIGN, v + first, vlen - first);
	for (uint32_t i = 0; i < h->nsections; i++)
		tab[i].offset += G_ALIGN;
	tab[h->nsections] = (struct g_section){ 0, 1, first, 0, 0 };
	header(f)->nsections++;
	header(f)->minor = GRAPH_MINOR + 1;
	header(f)->file_size = len;
	fix_checksum(f, len);
	return f;
}

/* ---- round trip --------------------------------------------------------------------- */

#define SAME(field, n) (memcmp(p.field, g.field, (n) * sizeof *g.field) == 0)

static void test_round_trip(void)
{
	struct g_graph g = make_graph(), p;
	size_t len2, len3;

	valid = graph_serialize(&g, &valid_len);
	UNIT_CHECK(valid != NULL, "serializes (%zu bytes)", valid_len);
	if (!parse_ok(valid, valid_len, &p))
		exit(unit_done() | 1);
	UNIT_CHECK(p.strtab_size == g.strtab_size && p.nstrings == NSTRINGS &&
			   SAME(strtab, g.strtab_size) && SAME(stroff, NSTRINGS),
		   "strings round-trip");
	UNIT_CHECK(p.nmeta == NMETA && SAME(meta, NMETA), "meta round-trips");
	UNIT_CHECK(p.nmeta_items == NITEMS && SAME(meta_items, NITEMS), "meta lists round-trip");
	UNIT_CHECK(p.minor == GRAPH_MINOR, "written as format %d.%d", GRAPH_MAJOR, GRAPH_MINOR);
	UNIT_CHECK(p.naxes == 2 && SAME(axes, 2) && p.world == 6, "axes round-trip, world 6");
	UNIT_CHECK(p.ngroups == 3 && SAME(groups, 3), "groups round-trip");
	UNIT_CHECK(p.npatterns == 4 && SAME(patterns, 4), "patterns round-trip");
	UNIT_CHECK(p.nchunks == NCHUNKS && SAME(chunks, NCHUNKS), "chunks round-trip");
	UNIT_CHECK(p.ntensors == NTENSORS && SAME(tensors, NTENSORS), "tensors round-trip");
	UNIT_CHECK(p.nops == NOPS && SAME(ops, NOPS) && p.ops[6].eps == 1e-6,
		   "ops round-trip");
	UNIT_CHECK(p.noperands == 10 && SAME(operands, 10), "operands round-trip");
	UNIT_CHECK(p.ninputs == 2 && SAME(inputs, 2) && p.noutputs == 1 && SAME(outputs, 1),
		   "inputs and outputs round-trip");
	UNIT_CHECK(p.arena_bytes == ARENA, "arena bytes round-trip");
	UNIT_CHECK(p.checksum == graph_checksum(valid, valid_len) &&
			   p.checksum == header(valid)->checksum,
		   "checksum filled in from the file (%016llx)",
		   (unsigned long long)p.checksum);
	UNIT_CHECK((const uint8_t *)p.tensors > valid &&
			   (const uint8_t *)p.tensors < valid + valid_len,
		   "zero-copy: tables point into the buffer");

	bool strs = true;

	for (uint32_t i = 0; i < NSTRINGS; i++)
		strs &= strcmp(graph_str(&p, i), strings[i]) == 0;
	UNIT_CHECK(strs && !strcmp(graph_str(&p, NSTRINGS), "") &&
			   !strcmp(graph_str(&p, UINT32_MAX), ""),
		   "graph_str: every string, \"\" for bad indices");

	double scale;

	memcpy(&scale, &p.meta[3].value, sizeof scale);
	UNIT_CHECK(!strcmp(graph_str(&p, (uint32_t)p.meta[0].value), "dtpc 0.1.0") &&
			   p.meta[1].value == 6 && (int64_t)p.meta[2].value == -3 &&
			   scale == 0.5,
		   "meta of each type");

	/* Determinism: twice, and through parse. */
	uint8_t *again = graph_serialize(&g, &len2);
	uint8_t *reser = graph_serialize(&p, &len3);

	UNIT_CHECK(len2 == valid_len && !memcmp(again, valid, valid_len),
		   "serializing twice gives identical bytes");
	UNIT_CHECK(len3 == valid_len && !memcmp(reser, valid, valid_len),
		   "serialize(parse(bytes)) == bytes");
	free(again);
	free(reser);

	/* Unused slots do not leak into the file. */
	struct g_tensor noisy[NTENSORS];
	struct g_group noisy_groups[3];
	struct g_graph n = g;

	memcpy(noisy, tensors, sizeof noisy);
	memcpy(noisy_groups, groups, sizeof noisy_groups);
	noisy[T_T].pattern[3] = 12345;
	noisy[T_X].dims[7] = -9;
	noisy_groups[G_CTX].axes[5] = 7;
	n.tensors = noisy;
	n.groups = noisy_groups;
	again = graph_serialize(&n, &len2);
	UNIT_CHECK(len2 == valid_len && !memcmp(again, valid, valid_len),
		   "garbage in unused dim and axis slots gives identical bytes");
	free(again);

	/* The minimal graph. */
	struct g_graph m = make_minimal(), mp;
	size_t mlen;
	uint8_t *mf = graph_serialize(&m, &mlen);

	UNIT_CHECK(mf && parse_ok(mf, mlen, &mp) && mp.world == 1 && mp.ntensors == 0 &&
			   mp.nops == 0 && mp.nchunks == 0,
		   "the minimal graph (world 1, no tensors) round-trips");

	const char *seeds = getenv("DTPC_WRITE_SEEDS");

	if (seeds) {
		write_seed(seeds, "full.graph", valid, valid_len);
		write_seed(seeds, "minimal.graph", mf, mlen);
	}
	free(mf);
}

/* ---- queries ------------------------------------------------------------------------- */

static void test_queries(void)
{
	struct g_graph g;
	uint32_t c[G_MAX_AXES];

	if (!parse_ok(valid, valid_len, &g))
		return;
	graph_coords(&g, 4, c);
	UNIT_CHECK(c[0] == 1 && c[1] == 1, "coords(4) = (1, 1)");
	graph_coords(&g, 2, c);
	UNIT_CHECK(c[0] == 0 && c[1] == 2, "coords(2) = (0, 2)");
	graph_coords(&g, 5, c);
	UNIT_CHECK(c[0] == 1 && c[1] == 2, "coords(5) = (1, 2)");

	/* rank = ring * 3 + tp */
	UNIT_CHECK(graph_group_index(&g, G_CTX, 4) == 1 && graph_group_index(&g, G_CTX, 2) == 0,
		   "ctx group index is the ring coordinate");
	UNIT_CHECK(graph_group_index(&g, G_TP, 5) == 2 && graph_group_index(&g, G_TP, 3) == 0,
		   "tp group index is the tp coordinate");
	UNIT_CHECK(graph_group_member(&g, G_CTX, 2, 1) == 5 &&
			   graph_group_member(&g, G_CTX, 5, 0) == 2,
		   "ctx peers keep tp: member(2, 1) = 5, member(5, 0) = 2");
	UNIT_CHECK(graph_group_member(&g, G_TP, 4, 0) == 3 &&
			   graph_group_member(&g, G_TP, 0, 2) == 2,
		   "tp peers keep ring: member(4, 0) = 3, member(0, 2) = 2");
	/* G_TPRING lists tp first: index = tp * 2 + ring. */
	UNIT_CHECK(graph_group_index(&g, G_TPRING, 1) == 2 &&
			   graph_group_index(&g, G_TPRING, 3) == 1 &&
			   graph_group_index(&g, G_TPRING, 5) == 5,
		   "tp-major group: index(1) = 2, index(3) = 1, index(5) = 5");
	UNIT_CHECK(graph_group_member(&g, G_TPRING, 0, 3) == 4 &&
			   graph_group_member(&g, G_TPRING, 5, 4) == 2,
		   "tp-major group: member 3 = rank 4, member 4 = rank 2");

	bool inverse = true;

	for (uint32_t r = 0; r < 6; r++)
		for (uint32_t gr = 0; gr < 3; gr++)
			inverse &= graph_group_member(&g, gr, r, graph_group_index(&g, gr, r)) == r;
	UNIT_CHECK(inverse, "member(rank, index(rank)) == rank for every group and rank");

	const struct g_chunk *ch = graph_chunk(&g, P_SEQ, 1, 1);

	UNIT_CHECK(ch->start == 2 && ch->len == 1, "chunk (block 1, index 1) of the sequence is [2, 3)");
	UNIT_CHECK(graph_local_dim(&g, T_XS, 1, 0) == 4 && graph_local_dim(&g, T_XS, 1, 2) == 4 &&
			   graph_local_dim(&g, T_XS, 1, 3) == 3 && graph_local_dim(&g, T_XS, 1, 5) == 3,
		   "sequence 7 in blocks [4, 3]: 2 + 2 on ring 0, 2 + 1 on ring 1");
	UNIT_CHECK(graph_local_dim(&g, T_XS, 2, 5) == 8 && graph_local_dim(&g, T_X, 1, 4) == 7,
		   "whole dims are whole on every rank");
	UNIT_CHECK(graph_local_dim(&g, T_PROJ, 2, 0) == 3 && graph_local_dim(&g, T_PROJ, 2, 4) == 3 &&
			   graph_local_dim(&g, T_PROJ, 2, 5) == 2,
		   "hidden 8 over tp: 3, 3, 2");
	UNIT_CHECK(graph_local_dim(&g, T_WQKV, 0, 1) == 6, "packed qkv: 3 blocks of 2 = 6");
	UNIT_CHECK(graph_local_dim(&g, T_Z, 1, 0) == 3 && graph_local_dim(&g, T_Z, 1, 1) == 2,
		   "13 over the tp-major group: 3 on index 0, 2 on rank 1 (index 2)");
	UNIT_CHECK(graph_local_numel(&g, T_PROJ, 0) == 12 && graph_local_numel(&g, T_PROJ, 5) == 6,
		   "numel of [1, 7/seq, 8/tp]: 12 on rank 0, 6 on rank 5");
	UNIT_CHECK(graph_local_numel(&g, T_QKV, 4) == 18 && graph_local_numel(&g, T_T, 3) == 1 &&
			   graph_local_numel(&g, T_WQKV, 2) == 48,
		   "numel: qkv 18 on rank 4, scalar 1, qkv weight 48");
}

/* ---- rejections ----------------------------------------------------------------------- */

/* The record as before any failure, so that a rejection that raises
 * nothing shows. */
static void forget(void)
{
	g_raise(G_OK, "%s", "");
}

static void test_corruption(void)
{
	const char *err = g_error()->msg;
	struct g_graph g;
	size_t bad = 0, silent = 0;

	for (size_t len = 0; len < valid_len; len++) {
		forget();
		if (graph_parse(valid, len, &g))
			bad++;
		else if (!err[0])
			silent++;
	}
	UNIT_CHECK(!bad && !silent, "every truncation (0 .. %zu bytes) is rejected with a message "
		   "(%zu accepted, %zu silent)", valid_len - 1, bad, silent);

	uint8_t *f = copy_of(valid, valid_len);

	bad = silent = 0;
	for (size_t i = 0; i < valid_len; i++) {
		f[i] ^= 0xff;
		forget();
		if (graph_parse(f, valid_len, &g))
			bad++;
		else if (!err[0])
			silent++;
		f[i] ^= 0xff;
	}
	UNIT_CHECK(!bad && !silent, "a flipped byte at each of %zu positions is rejected "
		   "(%zu accepted, %zu silent)", valid_len, bad, silent);
	free(f);

	/* Truncations and flips hit the checksum first; the checksum itself: */
	f = copy_of(valid, valid_len);
	header(f)->checksum ^= 1;
	UNIT_CHECK(!graph_parse(f, valid_len, &g) && strstr(err, "checksum mismatch") &&
			   g_error()->status == G_ERR_FORMAT,
		   "a wrong checksum: \"%s\"", err);
	free(f);

	uint8_t *longer = calloc(1, valid_len + 8);

	memcpy(longer, valid, valid_len);
	reject(longer, valid_len + 8, "trailing data", "trailing bytes");

	/* Misaligned: the same bytes one and four bytes in. */
	uint8_t *buf = malloc(valid_len + 8);

	for (int off = 1; off <= 4; off += 3) {
		memcpy(buf + off, valid, valid_len);
		UNIT_CHECK(!graph_parse(buf + off, valid_len, &g) &&
				   strstr(err, "misaligned buffer"),
			   "a buffer %d bytes off alignment: \"%s\"", off, err);
	}
	free(buf);
}

static void test_header(void)
{
	uint8_t *f;

	f = copy_of(valid, valid_len);
	f[3] = 'X';
	reject(f, valid_len, "bad magic", "wrong magic");

	f = copy_of(valid, valid_len);
	header(f)->probe = __builtin_bswap32(G_PROBE);
	reject(f, valid_len, "byte order", "a byte-swapped probe");

	f = copy_of(valid, valid_len);
	header(f)->major = GRAPH_MAJOR + 1;
	header(f)->minor = 0;
	reject(f, valid_len, "graph format 2.0 is newer than this runtime (1.x); "
	       "recompile the plan or update dtpc", "major version + 1");

	f = copy_of(valid, valid_len);
	header(f)->major = GRAPH_MAJOR - 1;
	header(f)->minor = 0;
	reject(f, valid_len, "graph format 0.0 is older than this runtime (1.x)",
	       "major version - 1");

	f = copy_of(valid, valid_len);
	header(f)->header_size = 44;
	reject(f, valid_len, "header size 44 is invalid", "an unaligned header size");

	f = copy_of(valid, valid_len);
	header(f)->nsections = 65;
	reject(f, valid_len, "section count 65 out of range (at most 64)", "65 sections");

	/* A newer minor with a section this version does not know: accepted.
	 * Every section moves G_ALIGN bytes on to make room for one more
	 * table entry, the new one (id 200) after them. */
	uint8_t *f0 = newer_minor(valid, valid_len);
	size_t len = align_up(valid_len) + 2 * G_ALIGN;
	struct g_graph g;

	f = calloc(1, len);
	memcpy(f, f0, align_up(valid_len) + G_ALIGN);
	free(f0);
	header(f)->nsections++;
	header(f)->file_size = len;
	*entry(f, 0) = (struct g_section){ 200, 8, len - G_ALIGN, G_ALIGN, G_ALIGN / 8 };
	memset(f + len - G_ALIGN, 0xab, G_ALIGN);
	fix_checksum(f, len);
	UNIT_CHECK(parse_ok(f, len, &g) && g.ntensors == NTENSORS,
		   "a newer minor version with an unknown section loads");

	const char *seeds = getenv("DTPC_WRITE_SEEDS");

	if (seeds)
		write_seed(seeds, "newer-minor.graph", f, len);
	free(f);
}

static void test_sections(void)
{
	uint8_t *f;

	f = copy_of(valid, valid_len);
	entry(f, GS_OUTPUTS)->offset = align_up(valid_len);
	reject(f, valid_len, "section 'outputs' (offset", "a section offset past the end");

	f = copy_of(valid, valid_len);
	entry(f, GS_OPS)->size = UINT64_MAX - 8;
	reject(f, valid_len, "section 'ops' (offset", "a section size that wraps around");

	f = copy_of(valid, valid_len);
	entry(f, GS_INPUTS)->offset = entry(f, GS_TENSORS)->offset;
	reject(f, valid_len, "section 'inputs' overlaps section 'tensors'", "overlapping sections");

	f = copy_of(valid, valid_len);
	entry(f, GS_META)->offset = 0;
	reject(f, valid_len, "section 'meta' overlaps the header", "a section over the header");

	f = copy_of(valid, valid_len);
	entry(f, GS_OPS)->offset += 8;
	reject(f, valid_len, "section 'ops': offset", "a misaligned section offset");

	f = copy_of(valid, valid_len);
	entry(f, GS_OPS)->count++;
	reject(f, valid_len, "section 'ops': size", "size != count x element size");

	f = copy_of(valid, valid_len);
	entry(f, GS_META)->elem = 8;
	entry(f, GS_META)->count *= 2;
	reject(f, valid_len, "section 'meta': element size 8, expected 16",
	       "an element size of another version");

	f = copy_of(valid, valid_len);
	entry(f, GS_OUTPUTS)->id = 99;
	reject(f, valid_len, "missing section 'outputs'", "a missing section");

	f = copy_of(valid, valid_len);
	entry(f, GS_OUTPUTS)->id = GS_INPUTS;
	reject(f, valid_len, "section 'inputs' appears twice", "a duplicated section");
}

static void test_tables(void)
{
	uint8_t *f;

#define FORGE(type, id, edit)                                                  \
	do {                                                                   \
		f = copy_of(valid, valid_len);                                 \
		type *s = section(f, id);                                      \
		edit;                                                          \
	} while (0)

	FORGE(struct g_program, GS_PROGRAM, s->world = 5);
	reject(f, valid_len, "program: world 5, but the axes make 6", "a wrong world");

	FORGE(char, GS_STRTAB, s[entry(f, GS_STRTAB)->size - 1] = 'x');
	reject(f, valid_len, "is not terminated", "a non-terminated string");

	FORGE(uint32_t, GS_STROFF, s[3] = 10000);
	reject(f, valid_len, "string 3: offset 10000 out of range", "a string offset");

	FORGE(struct g_meta, GS_META, s[1].key = 700);
	reject(f, valid_len, "meta 1: key string 700 out of range (26 strings)", "a meta key");

	FORGE(struct g_meta, GS_META, s[2].type = 9);
	reject(f, valid_len, "meta 2 ('offset'): unknown type 9", "a meta type");

	FORGE(struct g_meta, GS_META, s[0].value = 1000);
	reject(f, valid_len, "meta 0: value string 1000 out of range", "a meta string value");

	FORGE(struct g_axis, GS_AXES, s[1].size = 0);
	reject(f, valid_len, "axis 1 ('tp'): size 0", "an axis of size 0");

	FORGE(struct g_axis, GS_AXES, s[0].size = 1 << 23);
	reject(f, valid_len, "the world size exceeds 16777216 ranks", "a world over 2^24");

	FORGE(struct g_axis, GS_AXES, (s[0].size = 0x10000, s[1].size = 0x10000));
	reject(f, valid_len, "the world size exceeds", "a world overflowing 32 bits");

	FORGE(struct g_group, GS_GROUPS, s[0].size = 3);
	reject(f, valid_len, "group 0: size 3, but its axes make 2", "a group size");

	FORGE(struct g_group, GS_GROUPS, s[2].axes[1] = AX_TP);
	reject(f, valid_len, "group 2: axis 1 listed twice", "a repeated group axis");

	FORGE(struct g_group, GS_GROUPS, s[1].axes[0] = 2);
	reject(f, valid_len, "group 1: axis 2 out of range (2 axes)", "a group axis index");

	FORGE(struct g_pattern, GS_PATTERNS, s[1].group = 3);
	reject(f, valid_len, "pattern 1: group 3 out of range (3 groups)", "a pattern group");

	FORGE(struct g_pattern, GS_PATTERNS, s[P_Z].chunk0 = 20);
	reject(f, valid_len, "pattern 3: chunks 20 + 1 blocks x 6 are past the chunk table (22 chunks)",
	       "chunk0 past the chunk table");

	FORGE(struct g_pattern, GS_PATTERNS, s[P_QKV].nblk = 0);
	reject(f, valid_len, "pattern 2: no blocks", "a pattern without blocks");

	FORGE(struct g_pattern, GS_PATTERNS, s[P_HID].chunk0 = 3);
	reject(f, valid_len, "pattern 1: chunks from 3 overlap", "patterns sharing chunks");

	FORGE(struct g_chunk, GS_CHUNKS, s[1].start = 3);
	reject(f, valid_len, "pattern 0: block 0 chunk 1 starts at 3, expected 2",
	       "chunks not tiling a block");

	FORGE(struct g_chunk, GS_CHUNKS, s[5].len = -1);
	reject(f, valid_len, "pattern 1: block 0 chunk 1: length -1", "a negative chunk");

	FORGE(struct g_tensor, GS_TENSORS, s[T_BQKV].name = 999);
	reject(f, valid_len, "tensor 3: name string 999 out of range (26 strings)",
	       "an out-of-range string index");

	FORGE(struct g_tensor, GS_TENSORS, s[T_XS].pattern[1] = 40);
	reject(f, valid_len, "tensor 1: pattern 40 out of range (4 patterns)",
	       "a tensor pattern index");

	FORGE(struct g_tensor, GS_TENSORS, s[T_XS].pattern[1] = -2);
	reject(f, valid_len, "tensor 1: pattern -2 out of range", "a negative pattern index");

	FORGE(struct g_tensor, GS_TENSORS, s[T_XS].kind = 7);
	reject(f, valid_len, "tensor 1 ('x.shard'): unknown kind 7", "a tensor kind");

	FORGE(struct g_tensor, GS_TENSORS, s[T_XS].ndim = 9);
	reject(f, valid_len, "tensor 1 ('x.shard'): 9 dimensions (at most 8)", "9 dimensions");

	FORGE(struct g_tensor, GS_TENSORS, s[T_X].dims[2] = -1);
	reject(f, valid_len, "tensor 0 ('x'): dimension 2 is -1", "a negative dimension");

	FORGE(struct g_tensor, GS_TENSORS, s[T_XS].dims[1] = 8);
	reject(f, valid_len, "tensor 1 ('x.shard'): dimension 1 is 8, but pattern 0 splits 7",
	       "a pattern total != dims");

	FORGE(struct g_tensor, GS_TENSORS, (s[T_WPROJ].dims[0] = INT64_MAX / 2,
					    s[T_WPROJ].dims[1] = 8));
	reject(f, valid_len, "tensor 5 ('proj.weight'): element count overflows",
	       "an element count overflow");

	FORGE(struct g_tensor, GS_TENSORS, s[T_QKV].bytes = 95);
	reject(f, valid_len, "tensor 4 ('qkv'): 95 bytes, but its largest local piece has 24 f32 elements",
	       "tensor bytes too small");

	FORGE(struct g_tensor, GS_TENSORS, s[T_NORM].offset = 1216);
	reject(f, valid_len, "tensor 12 ('norm'): 224 bytes at arena offset 1216 are past the arena (1408 bytes)",
	       "arena offset + bytes > arena_bytes");

	FORGE(struct g_tensor, GS_TENSORS, s[T_NORM].offset = UINT64_MAX - 63);
	reject(f, valid_len, "are past the arena", "an arena offset that wraps around");

	FORGE(struct g_tensor, GS_TENSORS, s[T_XS].offset = 260);
	reject(f, valid_len, "tensor 1 ('x.shard'): arena offset 260 is not 64-byte aligned",
	       "a misaligned arena offset");

	FORGE(struct g_tensor, GS_TENSORS, s[T_WQKV].offset = 64);
	reject(f, valid_len, "tensor 2 ('qkv.weight'): a weight with arena offset 64",
	       "a weight with an arena offset");

	FORGE(uint32_t, GS_OPERANDS, s[2] = 99);
	reject(f, valid_len, "operand 2: tensor 99 out of range (13 tensors)", "an op operand index");

	FORGE(struct g_op, GS_OPS, s[1].kind = OP_COUNT);
	reject(f, valid_len, "op 1: unknown kind", "an op kind");

	FORGE(struct g_op, GS_OPS, s[1].nin = 1);
	reject(f, valid_len, "op 1 (linear): 1 operands, expected at least 2", "nin < graph_min");

	FORGE(struct g_op, GS_OPS, s[6].nin = 6);
	reject(f, valid_len, "op 6 (layer_norm): 6 operands, expected at most 5", "nin > graph_max");

	FORGE(struct g_op, GS_OPS, s[6].in0 = 9 + 1);
	reject(f, valid_len, "op 6 (layer_norm): operands 10 + 1 are past the operand table (10)",
	       "operands past the table");

	FORGE(struct g_op, GS_OPS, s[3].group = 7);
	reject(f, valid_len, "op 3: group 7 out of range (3 groups)", "an op group index");

	FORGE(struct g_op, GS_OPS, s[3].group = -1);
	reject(f, valid_len, "op 3 (all_gather) communicates but has no group", "a comm op without group");

	FORGE(struct g_op, GS_OPS, s[1].scratch = T_QKV);
	reject(f, valid_len, "op 1: scratch 4 ('qkv') is of kind activation, expected scratch",
	       "scratch pointing to a non-scratch tensor");

	FORGE(struct g_op, GS_OPS, s[0].out = T_WQKV);
	reject(f, valid_len, "op 0: output 2 ('qkv.weight') is of kind weight, expected activation",
	       "an op writing a weight");

	FORGE(struct g_op, GS_OPS, s[2].out = NTENSORS);
	reject(f, valid_len, "op 2: output 13 out of range (13 tensors)", "an op output index");

	FORGE(struct g_op, GS_OPS, ga_dim_set(&s[3], (struct ga_dim){ .dim = 3 }));
	reject(f, valid_len, "op 3 (all_gather): dimension 3 out of range (the output has 3)",
	       "an all_gather dim");

	FORGE(uint32_t, GS_INPUTS, s[0] = T_XS);
	reject(f, valid_len, "input 0: tensor 1 ('x.shard') is of kind activation, expected input",
	       "an input that is not GT_INPUT");

	FORGE(uint32_t, GS_OUTPUTS, s[0] = 50);
	reject(f, valid_len, "output 0: tensor 50 out of range (13 tensors)", "an output index");
#undef FORGE
}

/* Each op kind's own checks (graph_load.c's check_op), on op 1 (a linear
 * with three operands) forged into another kind, its group the ring's and
 * requires listing every kind: a flag the kind does not have is refused
 * naming that kind, whichever it is; then the attributes only some kinds
 * check, and param, which no graph holds. */
static struct g_op *forge_op(uint8_t **f, enum op_kind k, uint32_t flags)
{
	*f = copy_of(valid, valid_len);
	struct g_op *o = &((struct g_op *)section(*f, GS_OPS))[1];
	const struct op_info *info = &op_table[k];

	((struct g_requires *)section(*f, GS_REQUIRES))->ops = ((uint64_t)1 << OP_COUNT) - 1;
	o->kind = (uint16_t)k;
	o->nin = (uint16_t)(info->graph_max >= 0 && info->graph_max < 3 ? info->graph_max : 3);
	o->group = G_CTX;
	o->flags = flags;
	return o;
}

static void test_op_kinds(void)
{
	uint8_t *f;
	char want[128], what[128];

	for (int k = 0; k < OP_COUNT; k++) {
		/* the cost model calls every op's work (cost/model.c) */
		UNIT_CHECK(op_graph[k]->work, "%s: its graph descriptor has its work",
			   op_table[k].name);
		/* a bit only rope_freqs has; for rope_freqs a norm's */
		uint32_t bit = k == OP_rope_freqs ? G_OF_STATS : G_OF_GRID;

		forge_op(&f, (enum op_kind)k, bit);
		snprintf(want, sizeof want, "op 1 (%s): flags 0x%x, but %s has only",
			 op_table[k].name, bit, op_table[k].name);
		snprintf(what, sizeof what, "%s with flag 0x%x", op_table[k].name, bit);
		reject(f, valid_len, want, what);
	}
	forge_op(&f, OP_linear, G_OF_BIAS | G_OF_TANH);
	reject(f, valid_len, "op 1 (linear): flags 0x5, but linear has only 0x1",
	       "a linear with gelu's tanh flag");

	ga_ulysses_a2a_set(forge_op(&f, OP_ulysses_a2a, 0), (struct ga_ulysses_a2a){ .direction = 2 });
	reject(f, valid_len, "op 1 (ulysses_a2a): direction 2", "a ulysses_a2a direction");

	ga_ring_attention_set(forge_op(&f, OP_ring_attention, 0),
			      (struct ga_ring_attention){ .rotate = -1 });
	reject(f, valid_len, "op 1 (ring_attention): rotate method -1", "a ring rotate method");

	forge_op(&f, OP_rope_freqs, G_OF_CENTER)->nin = 1;
	reject(f, valid_len, "op 1 (rope_freqs): centred (0x100) without grid positions",
	       "a centred rope_freqs reading ids");

	/* op 1's operand 1 is the linear's [out, in] weight: not an index vector */
	ga_dim_set(forge_op(&f, OP_index_select, 0), (struct ga_dim){ .dim = 0 });
	reject(f, valid_len, "op 1 (index_select): x must have the output's rank and the index one dim",
	       "an index_select with a 2-d index");
	ga_dim_set(forge_op(&f, OP_index_copy, 0), (struct ga_dim){ .dim = 7 });
	reject(f, valid_len, "op 1 (index_copy): dimension 7 out of range", "an index_copy's dim");
	forge_op(&f, OP_param, 0);
	reject(f, valid_len, "op 1 (param): a plan's parameter is a weight tensor in a graph",
	       "a param op");

	/* the control: the forging itself keeps a linear loadable */
	struct g_graph g;
	forge_op(&f, OP_linear, G_OF_BIAS);
	fix_checksum(f, valid_len);
	UNIT_CHECK(parse_ok(f, valid_len, &g), "op 1 forged back into a linear with its bias loads");
	free(f);
}

#define FORGE_META(edit)                                                       \
	do {                                                                   \
		f = copy_of(valid, valid_len);                                 \
		struct g_meta *s = section(f, GS_META);                        \
		edit;                                                          \
	} while (0)

/* ---- format 1.1: typed metadata ------------------------------------------------------ */

static void text_is(const struct g_graph *g, uint32_t i, const char *want)
{
	char buf[64];
	int n = graph_meta_text(g, i, buf, sizeof buf);

	UNIT_CHECK(!strcmp(buf, want) && n == (int)strlen(want), "meta %u as text: %s (want %s)",
		   i, buf, want);
}

static void test_meta_types(void)
{
	struct g_graph g;
	uint8_t *f;
	char small[4];

	if (!parse_ok(valid, valid_len, &g))
		return;
	text_is(&g, 0, "dtpc 0.1.0");
	text_is(&g, 1, "6");
	text_is(&g, 2, "-3");
	text_is(&g, 3, "0.5");
	text_is(&g, 4, "true");
	text_is(&g, 5, "[2, 4, -8]");
	text_is(&g, 6, "[\"a\", \"b\"]");
	UNIT_CHECK(graph_meta_text(&g, 5, small, sizeof small) == 10 && !strcmp(small, "[2,"),
		   "meta text truncates as snprintf does, returning the length it needs");
	UNIT_CHECK(graph_meta_find(&g, "names") == 6 && graph_meta_find(&g, "nope") == -1,
		   "meta by key");
	UNIT_CHECK(graph_meta_len(&g, 5) == 3 && (int64_t)graph_meta_items(&g, 5)[2] == -8,
		   "an i64 list's items are exact");

	/* an exact f64 (not "%g" of it) */
	double third = 1.0 / 3, back;
	f = copy_of(valid, valid_len);
	memcpy(&((struct g_meta *)section(f, GS_META))[3].value, &third, sizeof third);
	fix_checksum(f, valid_len);
	if (parse_ok(f, valid_len, &g)) {
		memcpy(&back, &g.meta[3].value, sizeof back);
		text_is(&g, 3, "0.33333333333333331");
		UNIT_CHECK(back == third, "an f64 round-trips exactly");
	}
	free(f);

	/* A type this reader does not know: skipped in a newer minor, damage
	 * in a minor it knows. */
	f = newer_minor(valid, valid_len);
	size_t len = align_up(valid_len) + G_ALIGN;
	((struct g_meta *)section(f, GS_META))[4].type = 99;
	fix_checksum(f, len);
	UNIT_CHECK(parse_ok(f, len, &g) && g.meta[4].type == 99,
		   "an unknown metadata type in a newer minor version is skipped");
	if (g.nmeta)
		text_is(&g, 4, "(type 99)");
	((struct g_meta *)section(f, GS_META))[4].type = 0;
	reject(f, len, "meta 4 ('flag'): unknown type 0", "type 0, even in a newer minor");

	FORGE_META(s[4].type = 99);
	reject(f, valid_len, "meta 4 ('flag'): unknown type 99 (format 1.2 has types 1 to 7)",
	       "an unknown type in this minor version");
	FORGE_META(s[4].value = 2);
	reject(f, valid_len, "meta 4 ('flag'): bool 2 (0 or 1)", "a bool of 2");
	FORGE_META(s[5].value = NITEMS);
	reject(f, valid_len, "meta 5 ('shape'): list at item 7 is past the meta_items table",
	       "a list past the items");
	FORGE_META(s[6].value = 2);
	reject(f, valid_len, "meta 6 ('names'): list at item 2 overlaps an earlier one",
	       "overlapping lists");
	f = copy_of(valid, valid_len);
	((uint64_t *)section(f, GS_META_ITEMS))[0] = UINT64_MAX;
	reject(f, valid_len, "list at item 0 is past", "a list length that wraps around");
	f = copy_of(valid, valid_len);
	((uint64_t *)section(f, GS_META_ITEMS))[6] = 500;
	reject(f, valid_len, "meta 6: list string 500 out of range (26 strings)",
	       "a string list item");
}

/* ---- format 1.1: requirements ------------------------------------------------------- */

static void refuse(uint8_t *f, size_t len, int want_status, const char *want,
		   const char *what)
{
	struct g_graph g;

	fix_checksum(f, len);
	bool ok = graph_parse(f, len, &g);
	const char *err = g_error()->msg;

	UNIT_CHECK(!ok && g_error()->status == want_status && strstr(err, want),
		   "refuses %s: \"%s\"", what, err);
	if (ok || !strstr(err, want))
		printf("#   expected a message containing \"%s\"\n", want);
	free(f);
}

static struct g_requires *need_of(uint8_t *f)
{
	return section(f, GS_REQUIRES);
}

static void test_requires(void)
{
	struct g_graph g;
	uint8_t *f;
	unsigned major, minor, patch;

	sscanf(DTPC_VERSION, "%u.%u.%u", &major, &minor, &patch);
	if (!parse_ok(valid, valid_len, &g))
		return;
	UNIT_CHECK(g.need.compiler == (major << 16 | minor << 8 | patch),
		   "the producing compiler's version is recorded (" DTPC_VERSION ")");
	UNIT_CHECK(g.need.caps == G_CAP_F32, "a float32 graph needs f32 only");
	UNIT_CHECK(g.need.ops == (1ull << OP_shard | 1ull << OP_linear | 1ull << OP_all_gather |
				  1ull << OP_reshape | 1ull << OP_layer_norm),
		   "the ops the graph uses");

	UNIT_CHECK((graph_runtime_caps() & (G_CAP_F32 | G_CAP_BF16 | G_CAP_F16)) ==
			   (G_CAP_F32 | G_CAP_BF16 | G_CAP_F16),
		   "this runtime has every dtype (1.2)");
	if (!(graph_runtime_caps() & G_CAP_CUDA)) {
		f = copy_of(valid, valid_len);
		need_of(f)->caps |= G_CAP_CUDA;
		need_of(f)->compiler = 0x000300;
		refuse(f, valid_len, G_ERR_VERSION,
		       "the graph needs a CUDA device, which this runtime (dtpc " DTPC_VERSION
		       ") does not support; it was compiled by dtpc 0.3.0", "a device this build lacks");
	}
	/* through the API: a refusal is DTPC_ERR_VERSION, not a damaged file */
	dtpc_graph *dg = NULL;
	/* an empty buffer is a damaged graph, and NULL with length 0 reaches no
	 * memcpy (the sanitizer pass runs this under UBSan) */
	UNIT_CHECK(dtpc_graph_open_buffer(NULL, 0, &dg) == DTPC_ERR_FORMAT && !dg,
		   "dtpc_graph_open_buffer(NULL, 0) is DTPC_ERR_FORMAT: %s", dtpc_last_error());
	f = copy_of(valid, valid_len);
	need_of(f)->caps |= 1ull << 40;
	fix_checksum(f, valid_len);
	UNIT_CHECK(dtpc_graph_open_buffer(f, valid_len, &dg) == DTPC_ERR_VERSION && !dg &&
			   strstr(dtpc_last_error(), "capabilities unknown to this runtime"),
		   "libdtpc refuses it with DTPC_ERR_VERSION: %s", dtpc_last_error());
	free(f);
	f = copy_of(valid, valid_len);
	need_of(f)->caps |= 1ull << 40;
	refuse(f, valid_len, G_ERR_VERSION,
	       "the graph needs capabilities unknown to this runtime (bits 0x10000000000)",
	       "a capability bit of a newer version");
	f = copy_of(valid, valid_len);
	need_of(f)->ops |= 1ull << (OP_COUNT + 1);
	char newer_op[96]; /* the id past this runtime's last, whatever ops it has */
	snprintf(newer_op, sizeof newer_op, "the graph uses op id %d, unknown to this runtime",
		 OP_COUNT + 1);
	refuse(f, valid_len, G_ERR_VERSION, newer_op, "an op of a newer version");
	/* linear_act (fuse.c): activation 0 gelu, 1 gelu tanh, 2 silu; one past
	 * them is refused, silu loads (the control) */
	for (int64_t act = G_ACT_SILU; act <= G_ACT_COUNT; act++) {
		f = copy_of(valid, valid_len);
		struct g_op *o = section(f, GS_OPS);
		struct ga_linear lin = ga_linear_get(&o[2]);
		o[2].kind = OP_linear_act;
		ga_linear_act_set(&o[2], (struct ga_linear_act){ .bias = lin.bias, .act = act });
		need_of(f)->ops |= 1ull << OP_linear_act;
		if (act == G_ACT_COUNT) {
			reject(f, valid_len, "op 2 (linear_act): activation 3",
			       "a linear_act of an unknown activation");
			continue;
		}
		fix_checksum(f, valid_len);
		struct g_graph back;
		UNIT_CHECK(parse_ok(f, valid_len, &back) && back.ops[2].kind == OP_linear_act,
			   "a linear_act of silu loads");
		free(f);
	}
	f = copy_of(valid, valid_len);
	need_of(f)->ops &= ~(1ull << OP_reshape);
	refuse(f, valid_len, G_ERR_FORMAT,
	       "op 5 (reshape): not among the ops the graph says it uses", "an op it does not list");
	f = copy_of(valid, valid_len);
	header(f)->major = GRAPH_MAJOR + 1;
	refuse(f, valid_len, G_ERR_VERSION, "is newer than this runtime", "a newer major");
	f = copy_of(valid, valid_len);
	f[0] = 'X';
	refuse(f, valid_len, G_ERR_FORMAT, "bad magic", "damage, as damage");
	f = copy_of(valid, valid_len);
	entry(f, GS_REQUIRES)->id = 0;
	refuse(f, valid_len, G_ERR_FORMAT, "missing section 'requires' (format 1.2 has it)",
	       "a 1.2 file without its requirements");
}

/* ---- format 1.1: the weights manifest ----------------------------------------------- */

static void test_weights(void)
{
	struct g_graph g;
	uint8_t *f;

	if (!parse_ok(valid, valid_len, &g))
		return;
	UNIT_CHECK(g.nweights == 3 && g.weights[0].tensor == T_WPROJ &&
			   g.weights[1].tensor == T_BQKV && g.weights[2].tensor == T_WQKV,
		   "one entry per weight, sorted by name");
	const struct g_weight *w = graph_weight_find(&g, "qkv.weight");
	UNIT_CHECK(w && w->tensor == T_WQKV && w->dtype == G_DT_F32 && w->ndim == 2 &&
			   w->shape[0] == 18 && w->shape[1] == 8 && w->shape[2] == 0,
		   "a weight by name: its full shape and dtype");
	UNIT_CHECK(graph_weight_find(&g, "proj.weight") == &g.weights[0] &&
			   !graph_weight_find(&g, "qkv") && !graph_weight_find(&g, "zzz"),
		   "names not in the manifest are not found");

#define FORGE_W(edit)                                                          \
	do {                                                                   \
		f = copy_of(valid, valid_len);                                 \
		struct g_weight *s = section(f, GS_WEIGHTS);                   \
		edit;                                                          \
	} while (0)
	FORGE_W(s[2].shape[0] = 17);
	reject(f, valid_len, "weight 2 ('qkv.weight'): dimension 0 is 17, its tensor's 18",
	       "a manifest shape unlike the tensor's");
	FORGE_W(s[2].shape[5] = 1);
	reject(f, valid_len, "dimension 5 is 1, its tensor's 0", "a shape slot past ndim");
	FORGE_W(s[0] = s[1]);
	reject(f, valid_len, "weight 1 ('qkv.bias'): not after 'qkv.bias'", "a repeated name");
	FORGE_W((s[0] = s[1], s[1].name = 8, s[1].tensor = T_WPROJ));
	reject(f, valid_len, "weight 1 ('proj.weight'): not after 'qkv.bias'", "an unsorted manifest");
	FORGE_W(s[1].tensor = T_WQKV);
	reject(f, valid_len, "weight 1 ('qkv.bias'): tensor 2 is named 'qkv.weight'",
	       "an entry naming another tensor");
	FORGE_W(s[1].tensor = T_QKV);
	reject(f, valid_len, "weight 1: tensor 4 ('qkv') is of kind activation, expected weight",
	       "an entry for an activation");
	FORGE_W(s[1].dtype = G_DT_BF16);
	reject(f, valid_len, "weight 1 ('qkv.bias'): dtype 2, but its tensor holds f32",
	       "a dtype unlike the tensor's");
	FORGE_W(s[1].ndim = 2);
	reject(f, valid_len, "weight 1 ('qkv.bias'): 2 dimensions, its tensor has 1", "an ndim");
	f = copy_of(valid, valid_len);
	entry(f, GS_WEIGHTS)->count--;
	entry(f, GS_WEIGHTS)->size -= sizeof(struct g_weight);
	reject(f, valid_len, "weights: 2 entries for 3 weight tensors", "a weight left out");
#undef FORGE_W
}

/* ---- format 1.2: storage dtypes ------------------------------------------------------ */

static void test_dtypes(void)
{
	struct g_graph g;
	uint8_t *f;

	if (!parse_ok(valid, valid_len, &g))
		return;
	UNIT_CHECK(g.dtypes && graph_tensor_dtype(&g, T_QKV) == G_DT_F32 &&
			   graph_dtype_size(G_DT_F32) == 4 && graph_dtype_size(G_DT_BF16) == 2,
		   "a graph written now has a dtype per tensor (float32 here)");

	/* a bf16 tensor, declared in the requirements: its bytes suffice */
	f = copy_of(valid, valid_len);
	((uint8_t *)section(f, GS_DTYPES))[T_QKV] = G_DT_BF16;
	need_of(f)->caps |= G_CAP_BF16;
	fix_checksum(f, valid_len);
	UNIT_CHECK(parse_ok(f, valid_len, &g) && graph_tensor_dtype(&g, T_QKV) == G_DT_BF16,
		   "a bf16 tensor the requirements declare loads");
	free(f);
	f = copy_of(valid, valid_len);
	((uint8_t *)section(f, GS_DTYPES))[T_QKV] = G_DT_BF16;
	reject(f, valid_len, "tensor 4 ('qkv') is bf16, but the graph's requirements do not say so",
	       "a bf16 tensor without G_CAP_BF16 (an older runtime would misread it)");
	f = copy_of(valid, valid_len);
	((uint8_t *)section(f, GS_DTYPES))[T_QKV] = 9;
	reject(f, valid_len, "tensor 4 ('qkv'): unknown dtype 9", "an unknown dtype");
	f = copy_of(valid, valid_len);
	entry(f, GS_DTYPES)->count--;
	entry(f, GS_DTYPES)->size--;
	reject(f, valid_len, "section 'dtypes': 12 entries for 13 tensors", "a short dtypes table");
	f = copy_of(valid, valid_len);
	entry(f, GS_DTYPES)->id = 0;
	reject(f, valid_len, "missing section 'dtypes' (format 1.2 has it)",
	       "a 1.2 file without dtypes");

	/* the same file as 1.1 wrote it: no dtypes section, float32 throughout */
	f = copy_of(valid, valid_len);
	entry(f, GS_DTYPES)->id = 0;
	header(f)->minor = 1;
	fix_checksum(f, valid_len);
	UNIT_CHECK(parse_ok(f, valid_len, &g) && !g.dtypes &&
			   graph_tensor_dtype(&g, T_QKV) == G_DT_F32,
		   "a 1.1 file reads as float32 throughout");
	free(f);
}

/* ---- format 1.0 files ------------------------------------------------------------------ */

static void test_v1_0(void)
{
	struct graph_file gf;

	/* This graph as dtpc 0.1.0 wrote it, before format 1.1. */
	if (!graph_file_open(&gf, "tests/unit/graph-1.0.graph")) {
		UNIT_CHECK(0, "a 1.0 file loads: %s", g_error()->msg);
		return;
	}
	const struct g_graph *g = &gf.g;
	struct g_graph now;

	UNIT_CHECK(g->minor == 0 && g->nweights == 0 && g->nmeta_items == 0,
		   "a 1.0 file: minor 0, no manifest, no lists");
	UNIT_CHECK(g->need.compiler == 0 && g->need.caps == G_CAP_F32 &&
			   parse_ok(valid, valid_len, &now) && g->need.ops == now.need.ops,
		   "a 1.0 file needs what a 1.0 graph implies: f32 and its ops");
	UNIT_CHECK(g->ntensors == NTENSORS && g->nops == NOPS && g->nmeta == 4 &&
			   !memcmp(g->tensors, tensors, sizeof tensors) &&
			   !memcmp(g->ops, ops, sizeof ops) && !memcmp(g->meta, meta, 4 * sizeof *meta),
		   "a 1.0 file reads as it was written");

	/* a 1.1 metadata type in a 1.0 file is damage */
	uint8_t *f = copy_of(gf.map, gf.len);
	((struct g_meta *)section(f, GS_META))[1].type = GM_BOOL + 2;
	reject(f, gf.len, "meta 1 ('world'): unknown type 7 (format 1.0 has types 1 to 4)",
	       "a type of a later minor in a 1.0 file");
	graph_file_close(&gf);
}

/* graph/op_attrs.h's mapping is the file format (docs/graph-format.md): each
 * pair puts its fields in the documented slots (float64 values as their
 * IEEE bits, written out here, not through ga_bits), clears every other
 * slot, flag and eps of a record full of garbage, and its get reads back
 * what its set wrote. */
#define CHECK_ATTRS(family, value, flags_, eps_, ...)                                   \
	do {                                                                          \
		struct g_op o_, back_;                                                \
		memset(&o_, 0x5a, sizeof o_);                                         \
		back_ = o_;                                                           \
		ga_##family##_set(&o_, value);                                        \
		ga_##family##_set(&back_, ga_##family##_get(&o_));                    \
		const int64_t want_[G_NATTR] = { __VA_ARGS__ };                       \
		UNIT_CHECK(!memcmp(o_.attr, want_, sizeof want_) && o_.flags == (flags_) && \
				   o_.eps == (eps_) &&                                \
				   !memcmp(back_.attr, o_.attr, sizeof want_) &&      \
				   back_.flags == o_.flags && back_.eps == o_.eps,    \
			   "ga_%s_set: the documented slots, the rest cleared; get "  \
			   "inverts it", #family);                                    \
	} while (0)

static void test_op_attrs(void)
{
	const int64_t one = 0x3ff0000000000000, two = 0x4000000000000000;
	const int64_t ten_k = 0x40c3880000000000, thousand = 0x408f400000000000;

	CHECK_ATTRS(linear, ((struct ga_linear){ .bias = true }), G_OF_BIAS, 0, 0);
	CHECK_ATTRS(linear_act, ((struct ga_linear_act){ .bias = true, .act = G_ACT_SILU }),
		    G_OF_BIAS, 0, 2);
	CHECK_ATTRS(norm, ((struct ga_norm){ .eps = 1e-5, .affine = true, .stats = true,
					     .group = 7, .width = 64 }),
		    G_OF_AFFINE | G_OF_STATS, 1e-5, 7, 64);
	CHECK_ATTRS(norm_stats, ((struct ga_norm_stats){ .width = 64, .stat = G_NS_CENTRED }), 0,
		    0, 64, 1);
	CHECK_ATTRS(gelu, ((struct ga_gelu){ .tanh = true }), G_OF_TANH, 0, 0);
	CHECK_ATTRS(bcast, ((struct ga_bcast){ .bh = true }), G_OF_BH, 0, 0);
	CHECK_ATTRS(slice, ((struct ga_slice){ .dim = 1, .start = 2, .length = 3 }), 0, 0, 1, 2,
		    3);
	CHECK_ATTRS(pad, ((struct ga_pad){ .dim = 1, .before = 2, .after = 3, .value = -0.5 }), 0,
		    -0.5, 1, 2, 3);
	CHECK_ATTRS(dim, ((struct ga_dim){ .dim = 2 }), 0, 0, 2);
	CHECK_ATTRS(rope, ((struct ga_rope){ .head_dim = 64 }), 0, 0, 64);
	CHECK_ATTRS(attention, ((struct ga_attention){ .head_dim = 64, .head_dim_v = 32 }), 0, 0,
		    64, 32);
	CHECK_ATTRS(ulysses_a2a, ((struct ga_ulysses_a2a){ .direction = G_A2A_TO_SEQ,
							   .head_dim = 64, .seq_dim = 1 }),
		    0, 0, 1, 64, 1);
	CHECK_ATTRS(ring_attention, ((struct ga_ring_attention){ .head_dim = 64, .head_dim_v = 32,
								 .rotate = G_ROT_SENDRECV,
								 .seq_dim = 1, .fp32 = true }),
		    G_OF_FP32, 0, 64, 32, 1, 1);
	CHECK_ATTRS(timestep_embedding,
		    ((struct ga_timestep_embedding){ .dim = 256, .downscale_freq_shift = 1,
						     .scale = 2, .max_period = 10000,
						     .input_scale = 1000, .flip = true }),
		    G_OF_FLIP, 0, 256, one, two, ten_k, thousand);
	CHECK_ATTRS(grid_ids, ((struct ga_grid_ids){ .frames = 3, .height = 4, .width = 5,
						     .center = true }),
		    G_OF_CENTER, 0, 3, 4, 5);
	CHECK_ATTRS(text_ids, ((struct ga_text_ids){ .length = 8, .first = -2, .axes = 3 }), 0, 0,
		    8, -2, 3);
	CHECK_ATTRS(rope_freqs, ((struct ga_rope_freqs){ .axes_dim = { 16, 24, 24, 8, 4, 2 },
							 .theta = 10000, .sin = true, .f64 = true }),
		    G_OF_SIN | G_OF_F64, 10000, 16, 24, 24, 8, 4, 2);
	CHECK_ATTRS(rope_freqs, ((struct ga_rope_freqs){ .axes_dim = { 16, 24, 24 }, .theta = 256,
							 .grid = true, .frames = 2, .height = 3,
							 .width = 4, .center = true }),
		    G_OF_GRID | G_OF_CENTER, 256, 16, 24, 24, 2, 3, 4);
	CHECK_ATTRS(rope_freqs, ((struct ga_rope_freqs){ .axes_dim = { 16, 24, 24 }, .theta = 256,
							 .text = true, .first = 9 }),
		    G_OF_TEXT, 256, 16, 24, 24, 0, 0, 9);
	CHECK_ATTRS(ltx_rope_freqs,
		    ((struct ga_ltx_rope_freqs){ .dim = 128, .patch_t = 1, .patch = 2,
						 .scale = { 2, 1, 1 }, .theta = 10000, .sin = true }),
		    G_OF_SIN, 10000, 128, 1, 2, two, one, one);
	/* every field at the compiler's limit where it fills the top bits
	 * (frames 2^21 - 1, scale_s 2^16 - 1, base_s 2^32 - 1) */
	CHECK_ATTRS(ltx2_rope_freqs,
		    ((struct ga_ltx2_rope_freqs){
			    .dim = 4096, .axes = 3, .audio = true, .frames = (1 << 21) - 1,
			    .height = 5, .width = 7, .patch_t = 2, .patch = 3, .scale_t = 8,
			    .scale_s = 0xffff, .causal_offset = 1, .hop_length = 160,
			    .time_div = 16000, .base_t = 20, .base_s = 0xffffffff, .theta = 10000,
			    .sin = true, .f64 = true }),
		    G_OF_SIN | G_OF_F64, 10000, 0x10300001000, 0x1c0000bfffff,
		    (int64_t)0xffff000800030002, 0xa00001, 0x40cf400000000000,
		    (int64_t)0xffffffff00000014);
	CHECK_ATTRS(patch, ((struct ga_patch){ .patch = { 1, 2, 2 }, .bias = true }), G_OF_BIAS, 0,
		    1, 2, 2);
}
#undef CHECK_ATTRS

int main(void)
{
	test_round_trip();
	test_queries();
	test_corruption();
	test_header();
	test_sections();
	test_tables();
	test_op_kinds();
	test_op_attrs();
	test_meta_types();
	test_requires();
	test_weights();
	test_dtypes();
	test_v1_0();
	free(valid);
	return unit_done();
}
