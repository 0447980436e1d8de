/* shard.c — `dtpc shard GRAPH --weights SRC --out DIR`: each rank's slices of
 * a checkpoint, written once into a per-rank folder (diffusers'
 * weights_already_sharded), so that a job's ranks later read one small file
 * each instead of cutting theirs out of the whole checkpoint. */
#include "shard.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "args.h"
#include "compiler/diag.h"
#include "compiler/driver.h"
#include "graph/error.h"
#include "graph/graph_file.h"
#include "runtime/weights.h"

/* The folder to write into: made when absent; one that exists may hold
 * nothing but per-rank files of this world (a sharding being redone), so
 * that the result is never a mix. */
static bool out_ok(const char *dir, uint32_t world)
{
	struct stat sb;
	if (stat(dir, &sb)) {
		if (errno == ENOENT && !mkdir(dir, 0777))
			return true;
		fprintf(stderr, "dtpc: shard: cannot make '%s': %s\n", dir, strerror(errno));
		return false;
	}
	if (!S_ISDIR(sb.st_mode)) {
		fprintf(stderr, "dtpc: shard: --out '%s' is not a folder\n", dir);
		return false;
	}
	DIR *d = opendir(dir);
	if (!d) {
		fprintf(stderr, "dtpc: shard: cannot open '%s': %s\n", dir, strerror(errno));
		return false;
	}
	struct dirent *e;
	bool ok = true;
	while (ok && (e = readdir(d))) {
		char name[64];
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		/* rank-R-of-N as ckpt_rank_name writes it, R < N = world */
		unsigned long r = strncmp(e->d_name, "rank-", 5) ? ULONG_MAX
				  : strtoul(e->d_name + 5, NULL, 10);
		ok = r < world;
		if (ok) {
			ckpt_rank_name((uint32_t)r, world, name, sizeof name);
			ok = !strcmp(name, e->d_name);
		}
		if (!ok)
			fprintf(stderr, "dtpc: shard: --out '%s' holds '%s'; give an empty or new "
				"folder (or one sharded before for %u ranks)\n", dir, e->d_name, world);
	}
	closedir(d);
	return ok;
}

/* Where each tensor of a rank's file comes from: a checkpoint tensor and
 * the rank's slice of it. */
struct shard_src {
	const struct st_file *file;
	const struct st_tensor *t;
	const char *path;
	struct ckpt_slice slice;
};

/* The exit status of a failure raised by the checkpoint readers: 1 for a
 * checkpoint that is damaged or not this graph's, 2 for one that cannot be
 * read or written (and for no memory). */
static int exit_code(void)
{
	int st = g_error()->status;
	return st == G_ERR_FORMAT || st == G_ERR_BIND ? 1 : 2;
}

static bool fill_slice(void *ud, size_t i, void *buf)
{
	const struct shard_src *s = &((const struct shard_src *)ud)[i];
	if (st_read_raw(s->file, s->t, s->slice.dim, s->slice.start, s->slice.len, s->slice.n,
			buf))
		return true;
	g_wrap(g_error()->status, -1, "%s", s->path);
	return false;
}

/* Rank r's file: every weight's slice, in the checkpoint's dtype, read as
 * it is written (one tensor in memory at a time). */
static int write_rank(const struct g_graph *g, const struct ckpt *c, const char *dir,
		      uint32_t r)
{
	struct st_tensor *t = calloc(g->ntensors + 1, sizeof *t);
	struct shard_src *src = calloc(g->ntensors + 1, sizeof *src);
	size_t n = 0, bytes = 0;
	char name[64];
	int rc = 0;
	if (!t || !src) {
		fprintf(stderr, "dtpc: shard: out of memory\n");
		free(t);
		free(src);
		return 2;
	}
	for (uint32_t i = 0; i < g->ntensors; i++) {
		const struct g_tensor *x = &g->tensors[i];
		if (x->kind != GT_WEIGHT)
			continue;
		const char *wname = graph_str(g, x->name);
		struct shard_src *s = &src[n];
		/* ckpt_check_manifest has seen every weight there, whole */
		s->t = ckpt_find(c, wname, &s->file, &s->path);
		if (!ckpt_slice(g, i, r, &s->slice)) {
			fprintf(stderr, "dtpc: shard: weight '%s' is split along several dims\n", wname);
			rc = 1;
			break;
		}
		struct st_tensor *o = &t[n++];
		o->name = wname;
		o->dtype = s->t->dtype;
		o->ndim = s->t->ndim;
		memcpy(o->shape, s->t->shape, sizeof o->shape);
		if (s->slice.dim >= 0) {
			o->shape[s->slice.dim] = 0;
			for (int k = 0; k < s->slice.n; k++)
				o->shape[s->slice.dim] += s->slice.len[k];
		}
		o->nbytes = (size_t)st_numel(o) * st_dtype_size(o->dtype);
		bytes += o->nbytes;
	}
	if (!rc) {
		struct ckpt_expect ex;
		struct ckpt_meta m;
		ckpt_expect_of(g, r, &ex);
		ckpt_rank_meta(&ex, &m);
		ckpt_rank_name(r, g->world, name, sizeof name);
		char *path = malloc(strlen(dir) + sizeof name + 2);
		if (path)
			sprintf(path, "%s/%s", dir, name);
		if (!path) {
			fprintf(stderr, "dtpc: shard: out of memory\n");
			rc = 2;
		} else if (!st_write_fill(path, t, n, m.kv, m.n, fill_slice, src)) {
			fprintf(stderr, "dtpc: shard: %s\n", g_error()->msg);
			rc = exit_code();
		} else {
			printf("%s: %zu tensors, %zu bytes\n", path, n, bytes);
		}
		free(path);
	}
	free(src);
	free(t);
	return rc;
}

static void shard_usage(void)
{
	printf("usage: dtpc shard FILE.graph --weights CHECKPOINT --out FOLDER\n"
	       "  writes FOLDER/rank-RRRRR-of-NNNNN.safetensors: each rank's slices of\n"
	       "  every weight, in the checkpoint's dtype; `dtpc run FILE.graph\n"
	       "  --weights FOLDER` then reads each rank's own file\n");
}

int shard_main(int argc, char **argv)
{
	const char *graph = NULL, *weights = NULL, *out = NULL;
	const struct cli_opt t[] = {
		OPT_STR("--weights", &weights),
		OPT_STR("--out", &out),
		OPT_END,
	};
	int rc = cli_parse(argc, argv, 2, t,
			    &(struct cli_rest){ &graph, "graph file", .help = shard_usage,
						.missing = "shard needs a graph file" });
	if (rc >= 0)
		return rc;
	if (!weights || !out)
		return diag_usage_error("%s", "shard needs --weights CHECKPOINT and --out FOLDER");
	if (!driver_readable(graph, stderr))
		return 2;
	struct graph_file gf;
	if (!graph_file_open(&gf, graph)) {
		fprintf(stderr, "dtpc: %s: %s\n", graph, g_error()->msg);
		return 2;
	}
	const struct g_graph *g = &gf.g;
	struct ckpt *c = NULL;
	rc = 0;
	if (!ckpt_open(&c, weights)) {
		fprintf(stderr, "dtpc: shard: %s\n", g_error()->msg);
		rc = exit_code();
	} else if (ckpt_kind(c) == CKPT_RANKS) {
		fprintf(stderr, "dtpc: shard: %s is already a per-rank folder; shard the "
			"checkpoint it came from\n", weights);
		rc = 1;
	} else if (!ckpt_check_manifest(g, c)) {
		fprintf(stderr, "dtpc: shard: %s\n", g_error()->msg);
		rc = 1;
	} else if (!out_ok(out, g->world)) {
		rc = 2;
	}
	/* one rank, one tensor at a time: the largest slice is all the memory
	 * this takes */
	for (uint32_t r = 0; !rc && r < g->world; r++)
		rc = write_rank(g, c, out, r);
	ckpt_close(c);
	graph_file_close(&gf);
	return rc;
}
