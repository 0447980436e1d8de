/* weights.h — where a rank's weights come from, and which slices of them it
 * binds.
 *
 * A checkpoint is one of
 *   - a safetensors file (CKPT_FILE), given itself or as the one
 *     `*.safetensors` of a folder (diffusers' diffusion_pytorch_model.safetensors
 *     first);
 *   - a sharded folder (CKPT_INDEX): `save_pretrained`'s shards and the
 *     `*.safetensors.index.json` (or a variant's `*.safetensors.index.fp16.json`)
 *     whose "weight_map" says which shard holds each tensor;
 *   - a folder of per-rank files written by `dtpc shard` (CKPT_RANKS):
 *     rank-RRRRR-of-NNNNN.safetensors holds exactly rank R's slices of each
 *     weight of one graph, with metadata identifying that graph.
 * ckpt_open reads headers only; data is read by st_read_f32 / st_read_raw,
 * slice by slice (runtime/safetensors.h).
 *
 * A function that fails returns false and raises into the calling thread's
 * error record (graph/error.h), as safetensors.h's do: G_ERR_IO for a file
 * or folder that cannot be read, G_ERR_FORMAT for a malformed checkpoint
 * (a folder of the wrong files, a bad index, a damaged shard), G_ERR_BIND
 * for a checkpoint that is not this graph's, G_ERR_NOMEM. */
#ifndef DTPC_WEIGHTS_H
#define DTPC_WEIGHTS_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "graph/graph.h"
#include "runtime/safetensors.h"

enum ckpt_kind { CKPT_FILE, CKPT_INDEX, CKPT_RANKS };

/* diffusers' names, preferred when a folder holds several candidates */
#define CKPT_DIFFUSERS_FILE "diffusion_pytorch_model.safetensors"
#define CKPT_DIFFUSERS_INDEX "diffusion_pytorch_model.safetensors.index.json"
/* The largest index file read (a real one is under 1 MiB). */
#define CKPT_MAX_INDEX (UINT64_C(64) << 20)

/* What a folder holds, from the names of its entries alone. */
struct ckpt_choice {
	enum ckpt_kind kind;
	char name[256];  /* FILE: the safetensors file; INDEX: the index; RANKS: "" */
	uint32_t world;  /* RANKS: N of rank-*-of-N (every rank's file is there) */
};

/* Decides what the n entries of folder dir (names only, any order) make:
 * per-rank files if it has any (and nothing else of safetensors), else an
 * index (diffusers' name first, else the only one), else a safetensors file
 * (diffusers' name first, else the only one). Other entries (config.json)
 * are ignored. False, raising one line naming dir and the files
 * (G_ERR_FORMAT), when the folder is ambiguous, incomplete or empty of
 * weights. */
bool ckpt_classify(const char *dir, const char *const *names, size_t n,
		   struct ckpt_choice *out);

/* The name of rank's file in a folder sharded for world ranks. */
void ckpt_rank_name(uint32_t rank, uint32_t world, char *buf, size_t size);

/* A parsed index: weight_map's entries sorted by tensor name, and the shard
 * files they name, sorted and unique. Everything belongs to the index. */
struct ckpt_index {
	struct ckpt_entry {
		const char *name;
		uint32_t file; /* into files */
	} *entries;
	size_t nentries;
	const char **files;
	size_t nfiles;
	void *json;        /* owns the strings */
};

/* Parses the len bytes of an index file (path names it in messages, which
 * read "path:LINE: problem" where the line is known). Refused: text that is
 * not JSON or holds a NUL, a root that is not an object, no "weight_map"
 * object, a "metadata" that is not an object, a value that is not a
 * non-empty string, a file name that is absolute or has a ".." component
 * (outside the folder), a tensor named twice (G_ERR_FORMAT). Other keys are
 * ignored. */
bool ckpt_index_parse(const char *text, size_t len, const char *path,
		      struct ckpt_index **out);
void ckpt_index_free(struct ckpt_index *x);

/* An open checkpoint: every file's header read and checked. */
struct ckpt;

/* Opens path: a safetensors file or a folder (ckpt_classify). For an index,
 * every shard it names is opened, and refused are a missing shard, a tensor
 * held by two shards, and a weight_map entry its shard does not hold. For a
 * per-rank folder no file is opened yet: ckpt_open_rank opens one. A
 * failure is G_ERR_IO where a file or the folder cannot be read, G_ERR_FORMAT
 * where the checkpoint is malformed; a shard's own failure keeps its status,
 * its message led by the index's entry that names it. */
bool ckpt_open(struct ckpt **out, const char *path);
/* CKPT_RANKS: opens rank's file (rank < ckpt_nshards; another call is
 * G_ERR_INVALID). */
bool ckpt_open_rank(struct ckpt *c, uint32_t rank);
void ckpt_close(struct ckpt *c);

enum ckpt_kind ckpt_kind(const struct ckpt *c);
/* The file that stands for the checkpoint in messages: the file itself, the
 * index, or the per-rank folder (its rank file once opened). */
const char *ckpt_path(const struct ckpt *c);
/* CKPT_INDEX: the number of shards; CKPT_RANKS: the world it was sharded for. */
uint32_t ckpt_nshards(const struct ckpt *c);
/* CKPT_RANKS after ckpt_open_rank: the rank's file. */
const struct st_file *ckpt_rank_file(const struct ckpt *c);
/* The tensor called name and the file that holds it (its st_file and its
 * path), or NULL. */
const struct st_tensor *ckpt_find(const struct ckpt *c, const char *name,
				  const struct st_file **file, const char **path);
/* The tensors c holds, in name (strcmp) order: those of the file, of every
 * shard, or of the rank's file (a per-rank folder before ckpt_open_rank:
 * none). i < ckpt_count(c); the name belongs to c. */
size_t ckpt_count(const struct ckpt *c);
const char *ckpt_name_at(const struct ckpt *c, size_t i);
/* Data bytes read from all its files so far. */
uint64_t ckpt_bytes_read(const struct ckpt *c);

/* F32, F16, BF16 and F64: the dtypes that read as float32. */
bool ckpt_float_dtype(enum st_dtype d);
/* Every weight of g against c's headers, before any data is read: there,
 * with the full shape and a dtype that converts. False naming the first few
 * that are not (and the shard of each) and counting them all, so that a
 * checkpoint of another model or size is refused at once. Tensors g does not
 * use are allowed (diffusers' checkpoints hold more than a plan uses). Not
 * for CKPT_RANKS, whose files hold slices. The failure is G_ERR_BIND. */
bool ckpt_check_manifest(const struct g_graph *g, const struct ckpt *c);

/* ---- slices: what each rank binds ------------------------------------------ */

#define CKPT_MAX_RANGES 64

/* The part of weight tensor t that rank holds: along dim, the ranges
 * [start[i], start[i] + len[i]) in order; dim -1: all of it. */
struct ckpt_slice {
	int dim, n;
	int64_t start[CKPT_MAX_RANGES], len[CKPT_MAX_RANGES];
};

/* False when t is split along more than one dim or in more than
 * CKPT_MAX_RANGES blocks (no plan does either today). */
bool ckpt_slice(const struct g_graph *g, uint32_t t, uint32_t rank, struct ckpt_slice *s);

/* Identity of a graph's weights: the names and full shapes of its weights
 * (FNV-1a). */
uint64_t ckpt_weights_hash(const struct g_graph *g);
/* Identity of rank's slices: the weights hash, the world size, the rank, and
 * the slice of every weight. Graphs of one model and mesh that differ in
 * token counts share it; another mesh or plan that cuts any weight
 * differently does not. */
uint64_t ckpt_slices_hash(const struct g_graph *g, uint32_t rank);

/* What a per-rank file must say to be bound by rank `rank` of a graph. */
struct ckpt_expect {
	uint32_t rank, world;
	uint64_t weights, slices;
	char plan[128], mesh[128]; /* the graph's, for messages */
};
/* The metadata dtpc shard writes into rank e->rank's file: kv[2 * i] =
 * kv[2 * i + 1] for i < n, the values in text. */
struct ckpt_meta {
	char text[4][24];
	const char *kv[16];
	size_t n;
};
void ckpt_rank_meta(const struct ckpt_expect *e, struct ckpt_meta *m);
/* The graph's expectations for rank. */
void ckpt_expect_of(const struct g_graph *g, uint32_t rank, struct ckpt_expect *e);
/* Checks f's metadata (path names it) against e: written by dtpc shard, for
 * e's world and rank, from the same weights, cut the same way. The failure
 * is G_ERR_BIND, its message saying what differs. */
bool ckpt_check_rank_file(const struct st_file *f, const char *path,
			  const struct ckpt_expect *e);
#endif
