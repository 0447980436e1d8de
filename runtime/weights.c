/* weights.c — checkpoints as files, sharded folders and per-rank folders;
 * the slices each rank binds; the identity of a per-rank folder
 * (runtime/weights.h). */
#include "runtime/weights.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "graph/error.h"

/* Room for a name in a message. */
#define SHOW 200

/* Raises st (graph/error.h); false, for `return fail(...)`. */
static bool fail(int st, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static bool fail(int st, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	g_vraise(st, -1, fmt, ap);
	va_end(ap);
	return false;
}

static bool ends_with(const char *s, const char *suffix)
{
	size_t n = strlen(s), k = strlen(suffix);

	return n >= k && !strcmp(s + n - k, suffix);
}

/* An index's name: NAME.safetensors.index.json, or with diffusers' variant
 * NAME.safetensors.index.VARIANT.json (fp16, bf16). */
static bool index_name(const char *s)
{
	const char *at = strstr(s, ".safetensors.index.");

	return at && ends_with(at + 18, ".json") && !strchr(at + 19, '/') &&
	       (!strcmp(at + 18, ".json") || strlen(at + 18) > 6);
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* ---- what a folder holds ----------------------------------------------------- */

void ckpt_rank_name(uint32_t rank, uint32_t world, char *buf, size_t size)
{
	snprintf(buf, size, "rank-%05" PRIu32 "-of-%05" PRIu32 ".safetensors", rank, world);
}

/* s is a per-rank file's name exactly as ckpt_rank_name writes it. */
static bool rank_name(const char *s, uint32_t *rank, uint32_t *world)
{
	char canon[64];
	unsigned long r, w;
	char *end;

	if (strncmp(s, "rank-", 5) || s[5] < '0' || s[5] > '9')
		return false;
	r = strtoul(s + 5, &end, 10);
	if (strncmp(end, "-of-", 4) || end[4] < '0' || end[4] > '9')
		return false;
	w = strtoul(end + 4, &end, 10);
	if (strcmp(end, ".safetensors") || r > UINT32_MAX || w > UINT32_MAX)
		return false;
	ckpt_rank_name((uint32_t)r, (uint32_t)w, canon, sizeof canon);
	if (strcmp(canon, s))
		return false;
	*rank = (uint32_t)r;
	*world = (uint32_t)w;
	return true;
}

/* Up to three of the n names as "a, b, c, ..." into buf. */
static const char *some(const char *const *names, size_t n, char *buf, size_t size)
{
	char show[SHOW];
	size_t at = 0;

	buf[0] = '\0';
	for (size_t i = 0; i < n && i < 3 && at < size; i++)
		at += (size_t)snprintf(buf + at, size - at, "%s%s", i ? ", " : "",
				       st_show(names[i], show, sizeof show));
	if (n > 3 && at < size)
		snprintf(buf + at, size - at, ", ...");
	return buf;
}

/* Picks preferred among the n names, else the only one; NULL for none or
 * several. */
static const char *pick(const char *const *names, size_t n, const char *preferred)
{
	for (size_t i = 0; i < n; i++)
		if (!strcmp(names[i], preferred))
			return names[i];
	return n == 1 ? names[0] : NULL;
}

bool ckpt_classify(const char *dir, const char *const *names, size_t n,
		   struct ckpt_choice *out)
{
	/* the names sorted, split into per-rank files, indexes and others */
	const char **all = malloc((n + 1) * 3 * sizeof *all);
	const char **ranks = all + n + 1, **indexes = ranks + n + 1, *chosen = NULL;
	size_t nr = 0, ni = 0, ns = 0;
	uint32_t r, w, world = 0;
	char list[3 * SHOW + 8], list2[3 * SHOW + 8], show[SHOW];
	uint8_t *seen = NULL;
	bool ok = false;

	memset(out, 0, sizeof *out);
	if (!all)
		return fail(G_ERR_NOMEM, "out of memory");
	for (size_t i = 0; i < n; i++)
		all[i] = names[i];
	if (n > 1)
		qsort(all, n, sizeof *all, cmp_str);
	for (size_t i = 0; i < n; i++) {
		if (rank_name(all[i], &r, &w)) {
			if (nr && w != world) {
				fail(G_ERR_FORMAT, "%s: holds per-rank files of %" PRIu32 " and of %" PRIu32
				     " ranks (%s, %s); one folder per sharding",
				     dir, world, w, ranks[0], all[i]);
				goto out;
			}
			if (r >= w || w > G_MAX_WORLD) {
				fail(G_ERR_FORMAT, "%s: %s is not a rank of the world it names "
				     "(ranks 0 to %" PRIu32 ", at most %d ranks)", dir, all[i],
				     w ? w - 1 : 0, G_MAX_WORLD);
				goto out;
			}
			world = w;
			ranks[nr++] = all[i];
		} else if (index_name(all[i])) {
			indexes[ni++] = all[i];
		} else if (ends_with(all[i], ".safetensors")) {
			all[ns++] = all[i]; /* ns <= i: the others, in place */
		}
	}
	if (nr) {
		if (ni || ns) {
			fail(G_ERR_FORMAT, "%s: holds per-rank files (%s) and a checkpoint (%s); "
			     "keep them in separate folders", dir, some(ranks, nr, list, sizeof list),
			     some(ni ? indexes : all, ni ? ni : ns, list2, sizeof list2));
			goto out;
		}
		seen = calloc(world, 1);
		if (!seen) {
			fail(G_ERR_NOMEM, "out of memory");
			goto out;
		}
		for (size_t i = 0; i < nr; i++) {
			rank_name(ranks[i], &r, &w);
			if (seen[r]++) {
				fail(G_ERR_FORMAT, "%s: %s appears twice", dir, ranks[i]);
				goto out;
			}
		}
		for (r = 0; r < world; r++)
			if (!seen[r]) {
				ckpt_rank_name(r, world, list, sizeof list);
				fail(G_ERR_FORMAT, "%s: %s is missing (%zu of the %" PRIu32
				     " per-rank files are there)", dir, list, nr, world);
				goto out;
			}
		out->kind = CKPT_RANKS;
		out->world = world;
		ok = true;
	} else if (ni) {
		chosen = pick(indexes, ni, CKPT_DIFFUSERS_INDEX);
		if (!chosen) {
			fail(G_ERR_FORMAT, "%s: holds %zu indexes (%s) and none is %s; give --weights "
			     "the index to use", dir, ni, some(indexes, ni, list, sizeof list),
			     CKPT_DIFFUSERS_INDEX);
			goto out;
		}
		out->kind = CKPT_INDEX;
		ok = true;
	} else if (ns) {
		chosen = pick(all, ns, CKPT_DIFFUSERS_FILE);
		if (!chosen) {
			fail(G_ERR_FORMAT, "%s: holds %zu safetensors files (%s), no index and none "
			     "is %s; give --weights the file to use", dir, ns,
			     some(all, ns, list, sizeof list), CKPT_DIFFUSERS_FILE);
			goto out;
		}
		out->kind = CKPT_FILE;
		ok = true;
	} else {
		fail(G_ERR_FORMAT, "%s: holds no safetensors file, no *.safetensors.index.json and "
		     "no per-rank files (rank-00000-of-0000N.safetensors)", dir);
		goto out;
	}
	if (out->kind != CKPT_RANKS) {
		if (strlen(chosen) >= sizeof out->name) {
			ok = fail(G_ERR_FORMAT, "%s: the name %s is too long", dir,
				  st_show(chosen, show, sizeof show));
			goto out;
		}
		strcpy(out->name, chosen);
	}
out:
	free(seen);
	free(all);
	return ok;
}

/* ---- the index ------------------------------------------------------------------- */

/* The line of text[at]. */
static int line_at(const char *text, size_t at)
{
	int line = 1;

	for (size_t i = 0; i < at; i++)
		line += text[i] == '\n';
	return line;
}

/* The line where "key" occurs for the k-th time (k >= 1), or 0. */
static int line_of_key(const char *text, const char *key, int k)
{
	size_t n = strlen(key);
	const char *p = text;

	while ((p = strchr(p, '"'))) {
		if (!strncmp(p + 1, key, n) && p[n + 1] == '"' && !--k)
			return line_at(text, (size_t)(p - text));
		p++;
	}
	return 0;
}

/* "path:LINE" into buf, or path alone for line 0. */
static const char *at_line(const char *path, int line, char *buf, size_t size)
{
	if (line)
		snprintf(buf, size, "%s:%d", path, line);
	else
		snprintf(buf, size, "%s", path);
	return buf;
}

/* Why a shard's path is refused, or NULL: shards are files of the index's
 * folder (or below it). */
static const char *bad_path(const char *p)
{
	if (!*p)
		return "is empty";
	if (*p == '/')
		return "is absolute; shard paths are relative to the index's folder";
	for (const char *c = p; *c; c += strcspn(c, "/"), c += *c == '/') {
		size_t len = strcspn(c, "/");

		if (len == 2 && c[0] == '.' && c[1] == '.')
			return "leaves the index's folder (a '..' component)";
	}
	return NULL;
}

static int cmp_entry(const void *a, const void *b)
{
	return strcmp(((const struct ckpt_entry *)a)->name, ((const struct ckpt_entry *)b)->name);
}

void ckpt_index_free(struct ckpt_index *x)
{
	if (!x)
		return;
	cJSON_Delete(x->json);
	free(x->entries);
	free(x->files);
	free(x);
}

bool ckpt_index_parse(const char *text, size_t len, const char *path,
		      struct ckpt_index **out)
{
	struct ckpt_index *x = calloc(1, sizeof *x);
	const cJSON *map = NULL, *item;
	const char *nul = memchr(text, '\0', len), *end = NULL;
	char where[512], show[SHOW], show2[SHOW];
	char *copy = NULL;
	size_t n = 0;
	bool ok = false;

	*out = NULL;
	if (!x)
		return fail(G_ERR_NOMEM, "%s: out of memory", path);
	if (nul) {
		fail(G_ERR_FORMAT, "%s: a NUL byte (byte %td); an index is JSON text",
		     at_line(path, line_at(text, (size_t)(nul - text)), where, sizeof where),
		     nul - text);
		goto out;
	}
	/* a NUL-terminated copy: the text may sit anywhere (a fuzzer's buffer) */
	copy = malloc(len + 1);
	if (!copy) {
		fail(G_ERR_NOMEM, "%s: out of memory", path);
		goto out;
	}
	memcpy(copy, text, len);
	copy[len] = '\0';
	x->json = cJSON_ParseWithOpts(copy, &end, true);
	if (!x->json) {
		size_t at = end && end >= copy ? (size_t)(end - copy) : 0;

		fail(G_ERR_FORMAT, "%s: not valid JSON (at byte %zu)",
		     at_line(path, line_at(copy, at), where, sizeof where), at);
		goto out;
	}
	if (!cJSON_IsObject(x->json)) {
		fail(G_ERR_FORMAT, "%s: not a JSON object (an index is {\"metadata\": {...}, "
		     "\"weight_map\": {...}})", path);
		goto out;
	}
	cJSON_ArrayForEach(item, (cJSON *)x->json) {
		if (!strcmp(item->string, "weight_map")) {
			if (map) {
				fail(G_ERR_FORMAT, "%s: \"weight_map\" appears twice",
				     at_line(path, line_of_key(copy, "weight_map", 2), where,
					     sizeof where));
				goto out;
			}
			map = item;
		} else if (!strcmp(item->string, "metadata") && !cJSON_IsObject(item)) {
			fail(G_ERR_FORMAT, "%s: \"metadata\" is not an object",
			     at_line(path, line_of_key(copy, "metadata", 1), where, sizeof where));
			goto out;
		}
	}
	if (!map || !cJSON_IsObject(map)) {
		fail(G_ERR_FORMAT, "%s: %s", at_line(path, map ? line_of_key(copy, "weight_map", 1) : 0,
						     where, sizeof where),
		     map ? "\"weight_map\" is not an object" : "no \"weight_map\"");
		goto out;
	}
	cJSON_ArrayForEach(item, map)
		n++;
	x->entries = calloc(n + 1, sizeof *x->entries);
	x->files = calloc(n + 1, sizeof *x->files);
	if (!x->entries || !x->files) {
		fail(G_ERR_NOMEM, "%s: out of memory", path);
		goto out;
	}
	cJSON_ArrayForEach(item, map) {
		const char *why;

		if (!cJSON_IsString(item)) {
			fail(G_ERR_FORMAT, "%s: weight_map: the value of '%s' is not a file name",
			     at_line(path, line_of_key(copy, item->string, 1), where, sizeof where),
			     st_show(item->string, show, sizeof show));
			goto out;
		}
		why = bad_path(item->valuestring);
		if (why) {
			fail(G_ERR_FORMAT, "%s: weight_map: '%s' names '%s', which %s",
			     at_line(path, line_of_key(copy, item->string, 1), where, sizeof where),
			     st_show(item->string, show, sizeof show),
			     st_show(item->valuestring, show2, sizeof show2), why);
			goto out;
		}
		x->entries[x->nentries].name = item->string;
		x->files[x->nentries++] = item->valuestring;
	}
	if (n > 1) {
		qsort(x->entries, n, sizeof *x->entries, cmp_entry);
		qsort(x->files, n, sizeof *x->files, cmp_str);
	}
	for (size_t i = 1; i < n; i++)
		if (!strcmp(x->entries[i - 1].name, x->entries[i].name)) {
			fail(G_ERR_FORMAT, "%s: weight_map: '%s' appears twice",
			     at_line(path, line_of_key(copy, x->entries[i].name, 2), where,
				     sizeof where),
			     st_show(x->entries[i].name, show, sizeof show));
			goto out;
		}
	for (size_t i = 0; i < n; i++)
		if (!x->nfiles || strcmp(x->files[x->nfiles - 1], x->files[i]))
			x->files[x->nfiles++] = x->files[i];
	/* each entry's file, by bisection among the unique ones */
	cJSON_ArrayForEach(item, map) {
		const char *key = item->valuestring, **f;
		struct ckpt_entry probe = { item->string, 0 }, *e;

		f = bsearch(&key, x->files, x->nfiles, sizeof *x->files, cmp_str);
		e = bsearch(&probe, x->entries, n, sizeof *x->entries, cmp_entry);
		e->file = (uint32_t)(f - x->files);
	}
	ok = true;
out:
	free(copy);
	if (!ok) {
		ckpt_index_free(x);
		return false;
	}
	*out = x;
	return true;
}

/* ---- an open checkpoint -------------------------------------------------------- */

/* A tensor of a sharded checkpoint and the shard that holds it. */
struct ckpt_hit {
	const char *name;
	uint32_t file;
	const struct st_tensor *t;
};

struct ckpt {
	enum ckpt_kind kind;
	char *path;		/* for messages: the file, the index, or the folder */
	char *dir;		/* INDEX, RANKS: the folder */
	uint32_t world;		/* RANKS */
	struct ckpt_index *index;
	struct st_file **files;	/* FILE: 1; INDEX: one per shard; RANKS: the rank's */
	char **paths;
	size_t nfiles;
	struct ckpt_hit *hits;	/* INDEX: every tensor of every shard, by name */
	size_t nhits;
};

void ckpt_close(struct ckpt *c)
{
	if (!c)
		return;
	for (size_t i = 0; i < c->nfiles; i++) {
		st_close(c->files[i]);
		free(c->paths[i]);
	}
	free(c->files);
	free(c->paths);
	free(c->hits);
	ckpt_index_free(c->index);
	free(c->path);
	free(c->dir);
	free(c);
}

static char *join(const char *dir, const char *name)
{
	size_t n = strlen(dir);
	char *p = malloc(n + strlen(name) + 2);

	if (p)
		sprintf(p, "%s%s%s", dir, n && dir[n - 1] == '/' ? "" : "/", name);
	return p;
}

/* Room for n files. */
static bool files_alloc(struct ckpt *c, size_t n)
{
	c->files = calloc(n ? n : 1, sizeof *c->files);
	c->paths = calloc(n ? n : 1, sizeof *c->paths);
	return c->files && c->paths;
}

static int cmp_hit(const void *a, const void *b)
{
	return strcmp(((const struct ckpt_hit *)a)->name, ((const struct ckpt_hit *)b)->name);
}

/* Reads the index at c->path whole (it is small). */
static char *read_index(const char *path, size_t *len)
{
	/* O_NONBLOCK: a FIFO must not wait for a writer (it is refused below) */
	int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
	FILE *f = fd < 0 ? NULL : fdopen(fd, "rb");
	struct stat sb;
	char *text = NULL;

	if (!f) {
		fail(G_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
		if (fd >= 0)
			close(fd);
		return NULL;
	}
	if (fstat(fileno(f), &sb) || !S_ISREG(sb.st_mode)) {
		fail(G_ERR_IO, "%s: not a regular file", path);
	} else if ((uint64_t)sb.st_size > CKPT_MAX_INDEX) {
		fail(G_ERR_FORMAT, "%s: %" PRIu64 " bytes, past the limit of %" PRIu64
		     " MiB for an index", path, (uint64_t)sb.st_size, CKPT_MAX_INDEX >> 20);
	} else if (!(text = malloc((size_t)sb.st_size + 1))) {
		fail(G_ERR_NOMEM, "%s: out of memory", path);
	} else if (fread(text, 1, (size_t)sb.st_size, f) != (size_t)sb.st_size) {
		fail(G_ERR_IO, "%s: cannot read: %s", path,
		     ferror(f) ? strerror(errno) : "the file ended early");
		free(text);
		text = NULL;
	} else {
		*len = (size_t)sb.st_size;
	}
	fclose(f);
	return text;
}

/* An index and its shards. */
static bool open_index(struct ckpt *c)
{
	char show[SHOW], show2[SHOW];
	size_t len = 0;
	char *text = read_index(c->path, &len);
	struct ckpt_index *x;

	if (!text)
		return false;
	if (!ckpt_index_parse(text, len, c->path, &c->index)) {
		free(text);
		return false;
	}
	free(text);
	x = c->index;
	if (!files_alloc(c, x->nfiles))
		return fail(G_ERR_NOMEM, "out of memory");
	size_t total = 0;
	for (size_t i = 0; i < x->nfiles; i++) {
		const char *first = NULL;

		c->paths[i] = join(c->dir, x->files[i]);
		if (!c->paths[i])
			return fail(G_ERR_NOMEM, "out of memory");
		c->nfiles++;
		if (!st_open(&c->files[i], c->paths[i])) {
			for (size_t e = 0; e < x->nentries && !first; e++)
				if (x->entries[e].file == i)
					first = x->entries[e].name;
			/* the shard's failure stays I/O or malformed */
			g_wrap(g_error()->status, -1, "%s: weight_map puts '%s' in %s", c->path,
			       st_show(first, show, sizeof show),
			       st_show(x->files[i], show2, sizeof show2));
			return false;
		}
		total += st_count(c->files[i]);
	}
	c->hits = calloc(total + 1, sizeof *c->hits);
	if (!c->hits)
		return fail(G_ERR_NOMEM, "out of memory");
	for (size_t i = 0; i < c->nfiles; i++)
		for (size_t k = 0; k < st_count(c->files[i]); k++) {
			const struct st_tensor *t = st_at(c->files[i], k);

			c->hits[c->nhits++] = (struct ckpt_hit){ t->name, (uint32_t)i, t };
		}
	if (c->nhits > 1)
		qsort(c->hits, c->nhits, sizeof *c->hits, cmp_hit);
	for (size_t i = 1; i < c->nhits; i++)
		if (!strcmp(c->hits[i - 1].name, c->hits[i].name)) {
			uint32_t a = c->hits[i - 1].file, b = c->hits[i].file;

			return fail(G_ERR_FORMAT, "%s: tensor '%s' is in two shards, %s and %s", c->path,
				    st_show(c->hits[i].name, show, sizeof show),
				    x->files[a < b ? a : b], x->files[a < b ? b : a]);
		}
	for (size_t e = 0; e < x->nentries; e++) {
		struct ckpt_hit probe = { x->entries[e].name, 0, NULL }, *h;

		h = c->nhits ? bsearch(&probe, c->hits, c->nhits, sizeof *c->hits, cmp_hit) : NULL;
		if (!h || h->file != x->entries[e].file)
			return fail(G_ERR_FORMAT, "%s: weight_map puts '%s' in %s, but %s%s",
				    c->path, st_show(x->entries[e].name, show, sizeof show),
				    st_show(x->files[x->entries[e].file], show2, sizeof show2),
				    h ? "it is in " : "no shard holds it",
				    h ? x->files[h->file] : "");
	}
	return true;
}

/* The names in folder dir. */
static bool list_dir(const char *dir, char ***names, size_t *n)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	size_t cap = 0;

	*names = NULL;
	*n = 0;
	if (!d)
		return fail(G_ERR_IO, "%s: cannot open the folder: %s", dir, strerror(errno));
	while ((e = readdir(d))) {
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		if (*n == cap) {
			size_t nc = cap ? 2 * cap : 16;
			char **nn = realloc(*names, nc * sizeof *nn);

			if (!nn)
				break;
			*names = nn;
			cap = nc;
		}
		if (!((*names)[*n] = strdup(e->d_name)))
			break;
		++*n;
	}
	closedir(d);
	if (e)
		return fail(G_ERR_NOMEM, "out of memory");
	return true;
}

static bool open_dir(struct ckpt *c)
{
	struct ckpt_choice ch;
	char **names;
	size_t n;
	bool ok;

	if (!list_dir(c->dir, &names, &n))
		return false;
	ok = ckpt_classify(c->dir, (const char *const *)names, n, &ch);
	for (size_t i = 0; i < n; i++)
		free(names[i]);
	free(names);
	if (!ok)
		return false;
	c->kind = ch.kind;
	c->world = ch.world;
	if (ch.kind == CKPT_RANKS)
		return true;
	free(c->path);
	if (!(c->path = join(c->dir, ch.name)))
		return fail(G_ERR_NOMEM, "out of memory");
	if (ch.kind == CKPT_INDEX)
		return open_index(c);
	if (!files_alloc(c, 1) || !(c->paths[0] = strdup(c->path)))
		return fail(G_ERR_NOMEM, "out of memory");
	c->nfiles = 1;
	return st_open(&c->files[0], c->path);
}

bool ckpt_open(struct ckpt **out, const char *path)
{
	struct ckpt *c = calloc(1, sizeof *c);
	struct stat sb;
	bool ok;

	*out = NULL;
	if (!c || !(c->path = strdup(path))) {
		free(c);
		return fail(G_ERR_NOMEM, "out of memory");
	}
	if (stat(path, &sb)) {
		ok = fail(G_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
	} else if (S_ISDIR(sb.st_mode)) {
		ok = (c->dir = strdup(path)) ? open_dir(c)
					     : fail(G_ERR_NOMEM, "out of memory");
	} else if (index_name(path)) {
		const char *slash = strrchr(path, '/');

		c->kind = CKPT_INDEX;
		c->dir = slash ? strndup(path, (size_t)(slash - path) + (slash == path))
			       : strdup(".");
		ok = c->dir ? open_index(c) : fail(G_ERR_NOMEM, "out of memory");
	} else {
		c->kind = CKPT_FILE;
		ok = files_alloc(c, 1) && (c->paths[0] = strdup(path));
		if (!ok)
			fail(G_ERR_NOMEM, "out of memory");
		else
			c->nfiles = 1;
		ok = ok && st_open(&c->files[0], path);
	}
	if (!ok) {
		ckpt_close(c);
		return false;
	}
	*out = c;
	return true;
}

bool ckpt_open_rank(struct ckpt *c, uint32_t rank)
{
	char name[64];

	if (c->kind != CKPT_RANKS || c->nfiles || rank >= c->world)
		return fail(G_ERR_INVALID, "%s: no file of rank %" PRIu32 " to open", c->path, rank);
	ckpt_rank_name(rank, c->world, name, sizeof name);
	if (!files_alloc(c, 1) || !(c->paths[0] = join(c->dir, name)))
		return fail(G_ERR_NOMEM, "out of memory");
	c->nfiles = 1;
	if (!st_open(&c->files[0], c->paths[0]))
		return false;
	free(c->path);
	c->path = strdup(c->paths[0]);
	if (!c->path)
		return fail(G_ERR_NOMEM, "out of memory");
	return true;
}

enum ckpt_kind ckpt_kind(const struct ckpt *c)
{
	return c->kind;
}

const char *ckpt_path(const struct ckpt *c)
{
	return c->path;
}

uint32_t ckpt_nshards(const struct ckpt *c)
{
	return c->kind == CKPT_RANKS ? c->world : (uint32_t)c->nfiles;
}

const struct st_file *ckpt_rank_file(const struct ckpt *c)
{
	return c->kind == CKPT_RANKS && c->nfiles ? c->files[0] : NULL;
}

const struct st_tensor *ckpt_find(const struct ckpt *c, const char *name,
				  const struct st_file **file, const char **path)
{
	const struct ckpt_hit *h;
	struct ckpt_hit probe = { name, 0, NULL };

	if (c->kind != CKPT_INDEX) {
		if (!c->nfiles)
			return NULL;
		*file = c->files[0];
		*path = c->paths[0];
		return st_find(c->files[0], name);
	}
	h = c->nhits ? bsearch(&probe, c->hits, c->nhits, sizeof *c->hits, cmp_hit) : NULL;
	if (!h)
		return NULL;
	*file = c->files[h->file];
	*path = c->paths[h->file];
	return h->t;
}

size_t ckpt_count(const struct ckpt *c)
{
	if (c->kind == CKPT_INDEX)
		return c->nhits;
	return c->nfiles ? st_count(c->files[0]) : 0;
}

const char *ckpt_name_at(const struct ckpt *c, size_t i)
{
	return c->kind == CKPT_INDEX ? c->hits[i].name : st_at(c->files[0], i)->name;
}

uint64_t ckpt_bytes_read(const struct ckpt *c)
{
	uint64_t n = 0;

	for (size_t i = 0; i < c->nfiles; i++)
		n += st_bytes_read(c->files[i]);
	return n;
}

/* ---- the graph's weights against a checkpoint --------------------------------- */

bool ckpt_float_dtype(enum st_dtype d)
{
	return d == ST_F32 || d == ST_F16 || d == ST_BF16 || d == ST_F64;
}

/* The i-th weight tensor in name order: the manifest's (1.1), or the
 * tensor table's weights in table order (a 1.0 graph has no manifest). */
static int64_t nth_weight(const struct g_graph *g, uint32_t i, uint32_t *next)
{
	if (g->nweights)
		return i < g->nweights ? (int64_t)g->weights[i].tensor : -1;
	for (uint32_t t = *next; t < g->ntensors; t++)
		if (g->tensors[t].kind == GT_WEIGHT) {
			*next = t + 1;
			return t;
		}
	return -1;
}

static const char *shape_text(char *buf, size_t size, const int64_t *dims, int ndim)
{
	size_t k = 0;

	buf[0] = '\0';
	for (int d = 0; d < ndim && k + 24 < size; d++)
		k += (size_t)snprintf(buf + k, size - k, "%s%" PRId64, d ? ", " : "", dims[d]);
	return buf;
}

bool ckpt_check_manifest(const struct g_graph *g, const struct ckpt *c)
{
	char bad[768] = "";
	size_t at = 0;
	uint32_t nbad = 0, all = 0, next = 0;
	bool sharded = c->kind == CKPT_INDEX;
	int64_t t;

	for (uint32_t i = 0; (t = nth_weight(g, i, &next)) >= 0; i++, all++) {
		const struct g_tensor *x = &g->tensors[t];
		const char *name = graph_str(g, x->name), *path = NULL, *shard;
		const struct st_file *f;
		const struct st_tensor *e = ckpt_find(c, name, &f, &path);
		char why[300], in[SHOW + 8] = "", show[SHOW], got[200], want[200];

		shard = path ? strrchr(path, '/') : NULL;
		if (sharded && path)
			snprintf(in, sizeof in, " in %s", st_show(shard ? shard + 1 : path, show,
								  sizeof show));
		if (!e && sharded)
			snprintf(why, sizeof why, "is in none of its %zu shards", c->nfiles);
		else if (!e)
			snprintf(why, sizeof why, "is missing");
		else if (!ckpt_float_dtype(e->dtype))
			snprintf(why, sizeof why, "is %s%s (F32, F16, BF16 or F64 convert)",
				 st_dtype_name(e->dtype), in);
		else if (e->ndim != x->ndim ||
			 memcmp(e->shape, x->dims, (size_t)x->ndim * sizeof *x->dims))
			snprintf(why, sizeof why, "has shape [%s]%s, but the graph expects [%s]",
				 shape_text(got, sizeof got, e->shape, e->ndim), in,
				 shape_text(want, sizeof want, x->dims, x->ndim));
		else
			continue;
		if (nbad++ < 3 && at < sizeof bad)
			at += (size_t)snprintf(bad + at, sizeof bad - at, "%s'%s' %s",
					       nbad > 1 ? "; " : "", st_show(name, show, sizeof show),
					       why);
	}
	if (!nbad)
		return true;
	return fail(G_ERR_BIND, "%s does not hold this graph's weights: %s%s (%" PRIu32 " of %"
		    PRIu32 " weights)", c->path, bad, nbad > 3 ? ", ..." : "", nbad, all);
}

/* ---- slices ---------------------------------------------------------------------- */

bool ckpt_slice(const struct g_graph *g, uint32_t t, uint32_t rank, struct ckpt_slice *s)
{
	const struct g_tensor *x = &g->tensors[t];

	s->dim = -1;
	s->n = 0;
	for (int d = 0; d < x->ndim; d++) {
		int32_t p = x->pattern[d];

		if (p < 0)
			continue;
		if (s->dim >= 0 || g->patterns[p].nblk > CKPT_MAX_RANGES)
			return false;
		s->dim = d;
		/* block b of the dim holds every member's chunk of it in turn */
		uint32_t me = graph_group_index(g, g->patterns[p].group, rank);
		uint32_t gs = g->groups[g->patterns[p].group].size;
		int64_t base = 0;

		for (uint32_t b = 0; b < g->patterns[p].nblk; b++) {
			const struct g_chunk *c = graph_chunk(g, (uint32_t)p, b, me);

			s->start[s->n] = base + c->start;
			s->len[s->n++] = c->len;
			for (uint32_t i = 0; i < gs; i++)
				base += graph_chunk(g, (uint32_t)p, b, i)->len;
		}
	}
	return true;
}

/* 64-bit FNV-1a, continued from h. */
static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
	const uint8_t *b = p;

	for (size_t i = 0; i < n; i++)
		h = (h ^ b[i]) * 0x100000001b3ull;
	return h;
}

uint64_t ckpt_weights_hash(const struct g_graph *g)
{
	uint64_t h = 0xcbf29ce484222325ull;
	uint32_t next = 0;
	int64_t t;

	for (uint32_t i = 0; (t = nth_weight(g, i, &next)) >= 0; i++) {
		const struct g_tensor *x = &g->tensors[t];
		const char *name = graph_str(g, x->name);
		uint32_t nd = x->ndim;

		h = fnv(h, name, strlen(name) + 1);
		h = fnv(h, &nd, sizeof nd);
		h = fnv(h, x->dims, nd * sizeof *x->dims);
	}
	return h;
}

uint64_t ckpt_slices_hash(const struct g_graph *g, uint32_t rank)
{
	uint64_t h = ckpt_weights_hash(g);
	uint32_t next = 0, world = g->world;
	int64_t t;

	h = fnv(h, &world, sizeof world);
	h = fnv(h, &rank, sizeof rank);
	for (uint32_t i = 0; (t = nth_weight(g, i, &next)) >= 0; i++) {
		struct ckpt_slice s;
		int32_t head[2];

		if (!ckpt_slice(g, (uint32_t)t, rank, &s))
			s.dim = -2, s.n = 0;
		head[0] = s.dim;
		head[1] = s.n;
		h = fnv(h, head, sizeof head);
		h = fnv(h, s.start, (size_t)s.n * sizeof *s.start);
		h = fnv(h, s.len, (size_t)s.n * sizeof *s.len);
	}
	return h;
}

/* ---- per-rank files: their identity ------------------------------------------ */

static void meta_text(const struct g_graph *g, const char *key, char *buf, size_t size)
{
	int64_t i = graph_meta_find(g, key);

	if (i < 0)
		snprintf(buf, size, "?");
	else
		graph_meta_text(g, (uint32_t)i, buf, size);
}

void ckpt_expect_of(const struct g_graph *g, uint32_t rank, struct ckpt_expect *e)
{
	e->rank = rank;
	e->world = g->world;
	e->weights = ckpt_weights_hash(g);
	e->slices = ckpt_slices_hash(g, rank);
	meta_text(g, "plan", e->plan, sizeof e->plan);
	meta_text(g, "mesh", e->mesh, sizeof e->mesh);
}

void ckpt_rank_meta(const struct ckpt_expect *e, struct ckpt_meta *m)
{
	snprintf(m->text[0], sizeof m->text[0], "%" PRIu32, e->world);
	snprintf(m->text[1], sizeof m->text[1], "%" PRIu32, e->rank);
	snprintf(m->text[2], sizeof m->text[2], "%016" PRIx64, e->weights);
	snprintf(m->text[3], sizeof m->text[3], "%016" PRIx64, e->slices);
	const char *kv[] = {
		"format", "pt",
		"dtpc.shard", "1",
		"dtpc.world", m->text[0],
		"dtpc.rank", m->text[1],
		"dtpc.weights", m->text[2],
		"dtpc.slices", m->text[3],
		"dtpc.plan", e->plan,
		"dtpc.mesh", e->mesh,
	};
	memcpy(m->kv, kv, sizeof kv);
	m->n = sizeof kv / sizeof kv[0] / 2;
}

/* s as a number in base 10 or 16, all of it; false for anything else. */
static bool number(const char *s, int base, uint64_t *v)
{
	char *end;

	if (!s || !*s || !((*s >= '0' && *s <= '9') || (base == 16 && strchr("abcdef", *s))))
		return false;
	errno = 0;
	*v = strtoull(s, &end, base);
	return !*end && !errno;
}

bool ckpt_check_rank_file(const struct st_file *f, const char *path,
			  const struct ckpt_expect *e)
{
	const char *shard = st_meta(f, "dtpc.shard");
	const char *plan = st_meta(f, "dtpc.plan"), *mesh = st_meta(f, "dtpc.mesh");
	char p[SHOW], m[SHOW], show[SHOW];
	uint64_t world, rank, weights, slices;

	if (!shard)
		return fail(G_ERR_BIND, "%s: not written by dtpc shard (no dtpc.shard in its "
			    "metadata)", path);
	if (strcmp(shard, "1"))
		return fail(G_ERR_BIND, "%s: per-rank format '%s'; this dtpc reads format 1", path,
			    st_show(shard, show, sizeof show));
	if (!number(st_meta(f, "dtpc.world"), 10, &world) ||
	    !number(st_meta(f, "dtpc.rank"), 10, &rank) ||
	    !number(st_meta(f, "dtpc.weights"), 16, &weights) ||
	    !number(st_meta(f, "dtpc.slices"), 16, &slices))
		return fail(G_ERR_BIND, "%s: its dtpc.world, dtpc.rank, dtpc.weights and dtpc.slices "
			    "metadata are not all numbers", path);
	st_show(plan ? plan : "?", p, sizeof p);
	st_show(mesh ? mesh : "?", m, sizeof m);
	if (world != e->world)
		return fail(G_ERR_BIND, "%s: sharded for %" PRIu64 " ranks (plan %s, mesh %s), but "
			    "this graph runs on %" PRIu32 " (plan %s, mesh %s); shard the weights for "
			    "this graph with dtpc shard", path, world, p, m, e->world, e->plan, e->mesh);
	if (rank != e->rank)
		return fail(G_ERR_BIND, "%s: holds rank %" PRIu64 "'s slices, not rank %" PRIu32
			    "'s (renamed?)", path, rank, e->rank);
	if (weights != e->weights)
		return fail(G_ERR_BIND, "%s: sharded from other weights (plan %s, mesh %s): their "
			    "names or shapes differ from this graph's (plan %s, mesh %s)", path, p, m,
			    e->plan, e->mesh);
	if (slices != e->slices)
		return fail(G_ERR_BIND, "%s: the same weights cut for another graph (plan %s, mesh "
			    "%s); this graph (plan %s, mesh %s) binds other slices: shard them again "
			    "with dtpc shard", path, p, m, e->plan, e->mesh);
	return true;
}
