/* test_weights.c — checkpoints (runtime/weights.h): what a folder holds, the
 * shard index, the bytes a rank reads, the identity of per-rank files. The
 * end-to-end runs (sharded, BF16 and per-rank checkpoints through dtpc run)
 * are tests/weights.sh. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "compiler/driver.h"
#include "graph/error.h"
#include "runtime/weights.h"
#include "tests/unit/unit.h"

static char dir[256];

static const char *at(const char *name)
{
	static char path[512];

	snprintf(path, sizeof path, "%s/%s", dir, name);
	return path;
}

/* ---- what a folder holds --------------------------------------------------------- */

static void test_classify(void)
{
	static const struct {
		const char *what, *names[6];
		int kind; /* -1: refused */
		const char *want; /* the name chosen, or the message */
	} cases[] = {
		{ "diffusers' single file among others",
		  { "config.json", "diffusion_pytorch_model.safetensors", "x.safetensors" },
		  CKPT_FILE, "diffusion_pytorch_model.safetensors" },
		{ "the only file", { "config.json", "model.safetensors" }, CKPT_FILE,
		  "model.safetensors" },
		{ "an index over the file beside it (as diffusers)",
		  { "diffusion_pytorch_model.safetensors", "m.safetensors.index.json" },
		  CKPT_INDEX, "m.safetensors.index.json" },
		{ "diffusers' index among two",
		  { "a.safetensors.index.json", "diffusion_pytorch_model.safetensors.index.json" },
		  CKPT_INDEX, "diffusion_pytorch_model.safetensors.index.json" },
		{ "a variant's index (diffusers' fp16 shards)",
		  { "a-00001-of-00002.fp16.safetensors", "a-00002-of-00002.fp16.safetensors",
		    "diffusion_pytorch_model.safetensors.index.fp16.json", "x.safetensors.index..json" },
		  CKPT_INDEX, "diffusion_pytorch_model.safetensors.index.fp16.json" },
		{ "per-rank files", { "rank-00001-of-00002.safetensors", "rank-00000-of-00002.safetensors",
				      "README" }, CKPT_RANKS, "" },
		{ "two files", { "b.safetensors", "a.safetensors" }, -1,
		  "d: holds 2 safetensors files (a.safetensors, b.safetensors), no index and none is "
		  "diffusion_pytorch_model.safetensors; give --weights the file to use" },
		{ "two indexes", { "b.safetensors.index.json", "a.safetensors.index.json" }, -1,
		  "d: holds 2 indexes (a.safetensors.index.json, b.safetensors.index.json) and none is "
		  "diffusion_pytorch_model.safetensors.index.json; give --weights the index to use" },
		{ "nothing", { "config.json" }, -1,
		  "d: holds no safetensors file, no *.safetensors.index.json and no per-rank files "
		  "(rank-00000-of-0000N.safetensors)" },
		{ "a missing rank", { "rank-00000-of-00003.safetensors", "rank-00002-of-00003.safetensors" },
		  -1, "d: rank-00001-of-00003.safetensors is missing (2 of the 3 per-rank files are there)" },
		{ "two worlds", { "rank-00000-of-00002.safetensors", "rank-00000-of-00004.safetensors" },
		  -1, "d: holds per-rank files of 2 and of 4 ranks (rank-00000-of-00002.safetensors, "
		  "rank-00000-of-00004.safetensors); one folder per sharding" },
		{ "a rank past its world", { "rank-00002-of-00002.safetensors" }, -1,
		  "d: rank-00002-of-00002.safetensors is not a rank of the world it names (ranks 0 to 1, "
		  "at most 16777216 ranks)" },
		{ "ranks and a checkpoint", { "rank-00000-of-00001.safetensors", "m.safetensors" }, -1,
		  "d: holds per-rank files (rank-00000-of-00001.safetensors) and a checkpoint "
		  "(m.safetensors); keep them in separate folders" },
		{ "a rank name not as dtpc writes it", { "rank-0-of-1.safetensors",
							 "rank-00000-of-00001.safetensors" }, -1,
		  "d: holds per-rank files (rank-00000-of-00001.safetensors) and a checkpoint "
		  "(rank-0-of-1.safetensors); keep them in separate folders" },
	};
	for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
		struct ckpt_choice ch;
		size_t n = 0;

		while (n < 6 && cases[c].names[n])
			n++;
		bool ok = ckpt_classify("d", cases[c].names, n, &ch);
		if (cases[c].kind < 0)
			UNIT_CHECK(!ok && g_error()->status == G_ERR_FORMAT &&
				   !strcmp(g_error()->msg, cases[c].want), "classify %s: %s",
				   cases[c].what, ok ? "(accepted)" : g_error()->msg);
		else
			UNIT_CHECK(ok && (int)ch.kind == cases[c].kind &&
				   !strcmp(ch.name, cases[c].want) &&
				   (ch.kind != CKPT_RANKS || ch.world == 2),
				   "classify %s: %s", cases[c].what, ok ? ch.name : g_error()->msg);
	}
}

/* ---- the index ------------------------------------------------------------------- */

static void test_index(void)
{
	static const char good[] =
		"{\n"
		"  \"metadata\": {\"total_size\": 64},\n"
		"  \"weight_map\": {\n"
		"    \"b.weight\": \"m-00002-of-00002.safetensors\",\n"
		"    \"a.weight\": \"m-00001-of-00002.safetensors\",\n"
		"    \"a.bias\": \"sub/m-00002-of-00002.safetensors\",\n"
		"    \"c\": \"m-00001-of-00002.safetensors\"\n"
		"  },\n"
		"  \"extra\": [1, 2]\n"
		"}\n";
	struct ckpt_index *x;

	UNIT_CHECK(ckpt_index_parse(good, strlen(good), "i.json", &x), "a good index: %s",
		   g_error()->msg);
	if (x) {
		UNIT_CHECK(x->nentries == 4 && x->nfiles == 3 && !strcmp(x->entries[0].name, "a.bias") &&
			   !strcmp(x->files[x->entries[0].file], "sub/m-00002-of-00002.safetensors") &&
			   !strcmp(x->files[x->entries[3].file], "m-00001-of-00002.safetensors") &&
			   !strcmp(x->entries[3].name, "c"),
			   "its entries sorted by name, each with its file; 3 files, unique");
		ckpt_index_free(x);
	}

	static const struct {
		const char *what, *text, *want;
	} bad[] = {
		{ "not JSON", "{\n  \"weight_map\": {\n    \"a\": \"x\",,\n  }\n}",
		  "i.json:3: not valid JSON (at byte 34)" },
		{ "trailing text", "{\"weight_map\": {}}\n}", "i.json:2: not valid JSON (at byte 19)" },
		{ "a NUL", "{\"weight_map\": {}}\n\0", "i.json:2: a NUL byte (byte 19); an index is JSON text" },
		{ "an array", "[1]", "i.json: not a JSON object (an index is {\"metadata\": {...}, "
				     "\"weight_map\": {...}})" },
		{ "no weight_map", "{\"metadata\": {}}", "i.json: no \"weight_map\"" },
		{ "weight_map not an object", "{\n\"weight_map\": []}", "i.json:2: \"weight_map\" is not an object" },
		{ "weight_map twice", "{\"weight_map\": {},\n\"weight_map\": {}}",
		  "i.json:2: \"weight_map\" appears twice" },
		{ "metadata not an object", "{\"metadata\": 3, \"weight_map\": {}}",
		  "i.json:1: \"metadata\" is not an object" },
		{ "a number for a file", "{\"weight_map\": {\n\"a\": 3}}",
		  "i.json:2: weight_map: the value of 'a' is not a file name" },
		{ "an empty file name", "{\"weight_map\": {\"a\": \"\"}}",
		  "i.json:1: weight_map: 'a' names '', which is empty" },
		{ "a parent folder", "{\"weight_map\": {\n\n\"a\": \"../x.safetensors\"}}",
		  "i.json:3: weight_map: 'a' names '../x.safetensors', which leaves the index's folder "
		  "(a '..' component)" },
		{ "a parent folder inside", "{\"weight_map\": {\"a\": \"s/../../x\"}}",
		  "leaves the index's folder" },
		{ "an absolute path", "{\"weight_map\": {\"a\": \"/etc/passwd\"}}",
		  "i.json:1: weight_map: 'a' names '/etc/passwd', which is absolute; shard paths are "
		  "relative to the index's folder" },
		{ "a tensor twice", "{\"weight_map\": {\n\"a\": \"x\",\n\"b\": \"x\",\n\"a\": \"y\"}}",
		  "i.json:4: weight_map: 'a' appears twice" },
		{ "a control byte in a name", "{\"weight_map\": {\"a\\nb\": \"/x\"}}",
		  "i.json: weight_map: 'a?b' names '/x', which is absolute" },
	};
	for (size_t c = 0; c < sizeof bad / sizeof bad[0]; c++) {
		size_t len = strlen(bad[c].text) + (strstr(bad[c].what, "NUL") ? 1 : 0);

		bool ok = ckpt_index_parse(bad[c].text, len, "i.json", &x);
		UNIT_CHECK(!ok && !x && g_error()->status == G_ERR_FORMAT &&
			   strstr(g_error()->msg, bad[c].want) && !strchr(g_error()->msg, '\n'),
			   "index: refuse %s: %s", bad[c].what, ok ? "(accepted)" : g_error()->msg);
		ckpt_index_free(x);
	}
	/* a name a '..' only begins is a file of the folder */
	static const char dots[] = "{\"weight_map\": {\"a\": \"..x/..y\", \"b\": \"./x\"}}";
	UNIT_CHECK(ckpt_index_parse(dots, strlen(dots), "i.json", &x),
		   "index: '..x/..y' and './x' stay inside the folder");
	ckpt_index_free(x);
}

/* ---- the bytes a rank reads -------------------------------------------------------- */

/* A BF16 [5, 8] tensor read by columns: the runs of a row that follow each
 * other are read as one, and nothing else is read. */
static void test_slice_bytes(void)
{
	static const int64_t shape[2] = { 5, 8 };
	uint16_t v[40];
	float out[40];
	struct st_file *f = NULL;
	struct st_tensor t = { "w", ST_BF16, 2, { 5, 8 }, v, sizeof v, 0 };

	for (int i = 0; i < 40; i++)
		v[i] = (uint16_t)(0x3f80 + i); /* 1 + i/128 */
	UNIT_CHECK(st_write(at("cols.safetensors"), &t, 1, NULL, 0) &&
		   st_open(&f, at("cols.safetensors")), "write and open: %s", g_error()->msg);
	if (!f)
		return;
	const struct st_tensor *w = st_find(f, "w");
	int64_t starts[2] = { 6, 2 }, lens[2] = { 2, 1 };
	bool ok = st_read_f32(f, w, 1, starts, lens, 2, out);
	bool right = ok;
	for (int r = 0; r < 5 && right; r++)
		right = out[3 * r] == 1 + (8 * r + 6) / 128.0f &&
			out[3 * r + 1] == 1 + (8 * r + 7) / 128.0f &&
			out[3 * r + 2] == 1 + (8 * r + 2) / 128.0f;
	UNIT_CHECK(right && st_bytes_read(f) == 5 * 3 * 2,
		   "columns 6-7 and 2 of a [%d, %d] BF16: the values, and %llu bytes read (15 elements)",
		   (int)shape[0], (int)shape[1], (unsigned long long)st_bytes_read(f));
	st_close(f);
}

/* Every rank of a tp = 2 Flux reads exactly its slices of each weight: the
 * sum of its tensors' local sizes, less than the checkpoint's data. */
static void test_rank_bytes(void)
{
	struct override none = { 0 };
	size_t len = 0;
	void *buf = driver_graph_buffer("tests/fixtures/flux.plan", "flux_fixture_tp", "tp = 2", NULL,
					&none, 0, NULL, false, &len, NULL, stderr);
	struct g_graph g;

	UNIT_CHECK(buf && graph_parse(buf, len, &g), "compile Flux for tp = 2");
	if (!buf)
		return;
	uint64_t file_data = 0, reads[2] = { 0, 0 }, want[2] = { 0, 0 };
	float *dst = NULL;
	bool ok = true;
	for (uint32_t r = 0; r < 2 && ok; r++) {
		struct ckpt *c = NULL;

		ok = ckpt_open(&c, "tests/fixtures/flux.weights.safetensors");
		for (uint32_t t = 0; ok && t < g.ntensors; t++) {
			const struct st_file *f;
			const char *path;
			struct ckpt_slice s;

			if (g.tensors[t].kind != GT_WEIGHT)
				continue;
			const struct st_tensor *e = ckpt_find(c, graph_str(&g, g.tensors[t].name), &f, &path);
			int64_t n = graph_local_numel(&g, t, r);
			float *nd = realloc(dst, (size_t)n * sizeof *dst + 4);

			ok = e && nd && ckpt_slice(&g, t, r, &s);
			dst = nd ? nd : dst;
			ok = ok && st_read_f32(f, e, s.dim, s.start, s.len, s.n, dst);
			want[r] += (uint64_t)n * 4;
			if (r == 0 && e)
				file_data += e->nbytes;
		}
		if (ok)
			reads[r] = ckpt_bytes_read(c);
		ckpt_close(c);
	}
	free(dst);
	UNIT_CHECK(ok && reads[0] == want[0] && reads[1] == want[1] && reads[0] < file_data &&
		   reads[1] < file_data,
		   "tp = 2: rank 0 reads %llu bytes, rank 1 %llu: their slices (%llu, %llu), of %llu",
		   (unsigned long long)reads[0], (unsigned long long)reads[1],
		   (unsigned long long)want[0], (unsigned long long)want[1],
		   (unsigned long long)file_data);

	/* the identity of rank files: each rank's slices hash apart, and the
	 * weights hash ignores how they are cut */
	void *buf2 = driver_graph_buffer("tests/fixtures/flux.plan", "flux_fixture_cp", "ulysses = 2",
					 NULL, &none, 0, NULL, false, &len, NULL, stderr);
	struct g_graph g2;
	if (buf2 && graph_parse(buf2, len, &g2))
		UNIT_CHECK(ckpt_weights_hash(&g) == ckpt_weights_hash(&g2) &&
			   ckpt_slices_hash(&g, 0) != ckpt_slices_hash(&g, 1) &&
			   ckpt_slices_hash(&g, 0) != ckpt_slices_hash(&g2, 0),
			   "weights hash: tp = 2 and ulysses = 2 alike; slices hash: per rank and mesh");
	else
		UNIT_CHECK(false, "compile Flux for ulysses = 2");
	free(buf2);
	free(buf);
}

/* ---- per-rank files' identity -------------------------------------------------------- */

static void test_rank_meta(void)
{
	struct ckpt_expect e = { .rank = 1, .world = 4, .weights = 0xabc, .slices = 0x123,
				 .plan = "p", .mesh = "tp=4" };
	struct ckpt_meta m;
	struct st_file *f = NULL;
	static const float v[1] = { 1 };
	struct st_tensor t = { "w", ST_F32, 1, { 1 }, v, 4, 0 };

	ckpt_rank_meta(&e, &m);
	UNIT_CHECK(st_write(at("rank.safetensors"), &t, 1, m.kv, m.n) &&
		   st_open(&f, at("rank.safetensors")), "a rank file: %s", g_error()->msg);
	if (!f)
		return;
	UNIT_CHECK(ckpt_check_rank_file(f, "r", &e), "it is what it says: %s", g_error()->msg);
	static const struct {
		const char *what;
		struct ckpt_expect e;
		const char *want;
	} bad[] = {
		{ "another world", { 1, 2, 0xabc, 0x123, "q", "ring=2" },
		  "r: sharded for 4 ranks (plan p, mesh tp=4), but this graph runs on 2 (plan q, mesh "
		  "ring=2); shard the weights for this graph with dtpc shard" },
		{ "another rank", { 2, 4, 0xabc, 0x123, "p", "tp=4" },
		  "r: holds rank 1's slices, not rank 2's (renamed?)" },
		{ "other weights", { 1, 4, 0xabd, 0x123, "q", "tp=4" },
		  "r: sharded from other weights (plan p, mesh tp=4): their names or shapes differ from "
		  "this graph's (plan q, mesh tp=4)" },
		{ "other slices", { 1, 4, 0xabc, 0x124, "p", "ring=4" },
		  "r: the same weights cut for another graph (plan p, mesh tp=4); this graph (plan p, "
		  "mesh ring=4) binds other slices: shard them again with dtpc shard" },
	};
	for (size_t c = 0; c < sizeof bad / sizeof bad[0]; c++) {
		bool ok = ckpt_check_rank_file(f, "r", &bad[c].e);
		UNIT_CHECK(!ok && g_error()->status == G_ERR_BIND &&
			   !strcmp(g_error()->msg, bad[c].want), "refuse %s: %s", bad[c].what,
			   ok ? "(accepted)" : g_error()->msg);
	}
	st_close(f);
	/* a file without dtpc's metadata, or with garbled numbers */
	static const char *const plain[] = { "format", "pt" };
	static const char *const garbled[] = { "dtpc.shard", "1", "dtpc.world", "4x", "dtpc.rank", "1",
					       "dtpc.weights", "abc", "dtpc.slices", "123" };
	static const char *const newer[] = { "dtpc.shard", "2" };
	const struct {
		const char *const *kv;
		size_t n;
		const char *want;
	} metas[] = {
		{ plain, 1, "r: not written by dtpc shard (no dtpc.shard in its metadata)" },
		{ garbled, 5, "r: its dtpc.world, dtpc.rank, dtpc.weights and dtpc.slices metadata are "
			      "not all numbers" },
		{ newer, 1, "r: per-rank format '2'; this dtpc reads format 1" },
	};
	for (size_t c = 0; c < sizeof metas / sizeof metas[0]; c++) {
		f = NULL;
		bool ok = st_write(at("meta.safetensors"), &t, 1, metas[c].kv, metas[c].n) &&
			  st_open(&f, at("meta.safetensors")) &&
			  !ckpt_check_rank_file(f, "r", &e);
		UNIT_CHECK(ok && g_error()->status == G_ERR_BIND &&
			   !strcmp(g_error()->msg, metas[c].want), "refuse: %s", g_error()->msg);
		st_close(f);
	}
	unlink(at("rank.safetensors"));
	unlink(at("meta.safetensors"));
}

int main(void)
{
	const char *tmp = getenv("TMPDIR");

	snprintf(dir, sizeof dir, "%s/test_weights.XXXXXX", tmp && *tmp ? tmp : "/tmp");
	if (!mkdtemp(dir)) {
		perror(dir);
		return 1;
	}
	test_classify();
	test_index();
	test_slice_bytes();
	test_rank_bytes();
	test_rank_meta();
	unlink(at("cols.safetensors"));
	rmdir(dir);
	return unit_done();
}
