/* safetensors.c — the validating safetensors reader and the writer
 * (runtime/safetensors.h).
 *
 * st_open checks the whole header before it returns, so that st_read_f32 and
 * every caller may index a tensor's data through its shape without checks of
 * their own. The checks cost O(n log n) in the number of tensors and nothing
 * in the size of the data, which is never touched until a slice is read:
 * st_open reads the header alone, and each st_read_* reads the byte runs of
 * its slice with pread (a rank of a tensor-parallel job reads its rows or
 * columns, not the file). */
#include "runtime/safetensors.h"

#include <cjson/cJSON.h>
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

/* Tensor data is copied with memcpy, which is only right on a host of the
 * format's byte order. */
_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
	       "safetensors data is little-endian");

/* Real headers are well under 1 MiB (about 100 bytes a tensor); the limit
 * bounds what a hostile file can make cJSON allocate. */
#define ST_MAX_HEADER (UINT64_C(100) << 20)

/* Integers in the header arrive as cJSON doubles, which hold every integer
 * below 2^53 but round larger ones (2^53 + 1 arrives as 2^53): anything from
 * 2^53 up may have changed on the way, so it is refused. The writer keeps to
 * the same bound, so that it never writes a file st_open refuses. */
#define ST_MAX_INT ((UINT64_C(1) << 53) - 1)

/* Room for a name in a message, and for a shape ("[8, 8]"). */
#define ST_SHOW 256
#define ST_SHAPE_TEXT (ST_MAX_DIMS * 24 + 4)

static const struct {
	const char *name;
	size_t size;
} st_dtypes[ST_NDTYPES] = {
	[ST_F32] = { "F32", 4 },
	[ST_F16] = { "F16", 2 },
	[ST_BF16] = { "BF16", 2 },
	[ST_F64] = { "F64", 8 },
	[ST_I64] = { "I64", 8 },
	[ST_I32] = { "I32", 4 },
	[ST_I16] = { "I16", 2 },
	[ST_I8] = { "I8", 1 },
	[ST_U64] = { "U64", 8 },
	[ST_U32] = { "U32", 4 },
	[ST_U16] = { "U16", 2 },
	[ST_U8] = { "U8", 1 },
	[ST_BOOL] = { "BOOL", 1 },
	[ST_F8_E4M3] = { "F8_E4M3", 1 },
	[ST_F8_E5M2] = { "F8_E5M2", 1 },
};

/* A metadata entry. Its first member is its name, as with st_tensor, so that
 * st_cmp_name sorts and searches both. */
struct st_kv {
	const char *key;
	const char *value;
};

struct st_file {
	cJSON *json;			/* owns every name, key and value */
	int fd;				/* st_open's file; -1 for a buffer */
	const uint8_t *buf;		/* st_open_buffer's buffer; NULL for a file */
	uint64_t data_at;		/* where the data buffer starts: 8 + header */
	uint64_t read;			/* data bytes read so far (atomic) */
	struct st_tensor *tensors;	/* sorted by name */
	size_t ntensors;
	struct st_kv *meta;		/* sorted by key */
	size_t nmeta;
};

/* Where a failure is: its message reads "file: tensor 'name': problem",
 * without the parts that are NULL. */
struct st_where {
	const char *file;
	const char *tensor;
};

const char *st_show(const char *s, char *buf, size_t size)
{
	size_t i;

	for (i = 0; s[i] && i < size - 1; i++)
		buf[i] = (unsigned char)s[i] < 0x20 || s[i] == 0x7f ? '?' : s[i];
	if (s[i]) {
		i = size - 4;
		while (i > 0 && ((unsigned char)buf[i] & 0xc0) == 0x80)
			i--;
		memcpy(buf + i, "...", 3);
		i += 3;
	}
	buf[i] = '\0';
	return buf;
}

/* Raises st (graph/error.h) with the problem located at w; false, for
 * `return st_fail(...)`. */
static bool st_fail(const struct st_where *w, int st, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static bool st_fail(const struct st_where *w, int st, const char *fmt, ...)
{
	char name[ST_SHOW];
	va_list ap;

	va_start(ap, fmt);
	g_vraise(st, -1, fmt, ap);
	va_end(ap);
	if (w->tensor)
		g_wrap(st, -1, "tensor '%s'", st_show(w->tensor, name, sizeof name));
	if (w->file)
		g_wrap(st, -1, "%s", w->file);
	return false;
}

const char *st_dtype_name(enum st_dtype dtype)
{
	return (unsigned)dtype < ST_NDTYPES ? st_dtypes[dtype].name : NULL;
}

size_t st_dtype_size(enum st_dtype dtype)
{
	return (unsigned)dtype < ST_NDTYPES ? st_dtypes[dtype].size : 0;
}

int64_t st_numel(const struct st_tensor *t)
{
	int64_t n = 1;

	for (int i = 0; i < t->ndim; i++)
		n *= t->shape[i];
	return n;
}

/* The bytes that ndim dimensions of dtype need. False when a partial product
 * passes INT64_MAX: then st_numel and the slice arithmetic of st_read_f32
 * cannot overflow on any tensor that passed, even one with a 0 among huge
 * dimensions. */
static bool st_shape_bytes(enum st_dtype dtype, int ndim, const int64_t *shape,
			   uint64_t *bytes)
{
	uint64_t b = st_dtypes[dtype].size;

	for (int i = 0; i < ndim; i++)
		if (__builtin_mul_overflow(b, (uint64_t)shape[i], &b) ||
		    b > INT64_MAX)
			return false;
	*bytes = b;
	return true;
}

static const char *st_shape_text(int ndim, const int64_t *shape, char *buf,
				 size_t size)
{
	size_t n = 1;

	snprintf(buf, size, "[");
	for (int i = 0; i < ndim && n < size; i++) {
		snprintf(buf + n, size - n, "%s%" PRId64, i ? ", " : "", shape[i]);
		n += strlen(buf + n);
	}
	if (n < size)
		snprintf(buf + n, size - n, "]");
	return buf;
}

/* Checks that nbytes is exactly what the shape needs; what says where nbytes
 * came from ("data_offsets [0, 100] hold"), st what a mismatch is (a
 * malformed file, or a bad argument of st_write). */
static bool st_check_size(const struct st_where *w, int st, enum st_dtype dtype,
			  int ndim, const int64_t *shape, uint64_t nbytes,
			  const char *what)
{
	char text[ST_SHAPE_TEXT];
	uint64_t need;

	if (!st_shape_bytes(dtype, ndim, shape, &need))
		return st_fail(w, st, "shape %s of %s has too many elements for 64 bits",
			       st_shape_text(ndim, shape, text, sizeof text),
			       st_dtypes[dtype].name);
	if (need != nbytes)
		return st_fail(w, st, "%s %" PRIu64 " bytes but shape %s of %s needs %" PRIu64,
			       what, nbytes,
			       st_shape_text(ndim, shape, text, sizeof text),
			       st_dtypes[dtype].name, need);
	return true;
}

/* The length of the longest valid UTF-8 prefix of s[0, n): n when all of it
 * is. Valid as Unicode (and the Rust reference reader) defines it: no
 * overlong forms, surrogates or code points past U+10FFFF. */
static size_t st_utf8_prefix(const uint8_t *s, size_t n)
{
	size_t i = 0;

	while (i < n) {
		uint8_t c = s[i], lo = 0x80, hi = 0xbf;	/* the 2nd byte's range */
		size_t k;

		if (c < 0x80) {
			i++;
			continue;
		}
		if (c >= 0xc2 && c <= 0xdf) {
			k = 1;
		} else if (c >= 0xe0 && c <= 0xef) {
			k = 2;
			lo = c == 0xe0 ? 0xa0 : lo;
			hi = c == 0xed ? 0x9f : hi;
		} else if (c >= 0xf0 && c <= 0xf4) {
			k = 3;
			lo = c == 0xf0 ? 0x90 : lo;
			hi = c == 0xf4 ? 0x8f : hi;
		} else {
			return i;
		}
		if (n - i <= k || s[i + 1] < lo || s[i + 1] > hi)
			return i;
		for (size_t j = 2; j <= k; j++)
			if ((s[i + j] & 0xc0) != 0x80)
				return i;
		i += k + 1;
	}
	return n;
}

static int st_cmp_name(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Sorts n elements of size bytes, each of which starts with its name, by
 * name; returns a name two of them share, or NULL. */
static const char *st_sort_names(void *base, size_t n, size_t size)
{
	const char *prev, *name;

	if (n < 2)
		return NULL;
	qsort(base, n, size, st_cmp_name);
	prev = *(const char *const *)base;
	for (size_t i = 1; i < n; i++, prev = name) {
		const void *elem = (const char *)base + i * size;

		name = *(const char *const *)elem;
		if (!strcmp(prev, name))
			return name;
	}
	return NULL;
}

/* v as an integer in [0, ST_MAX_INT]; false for anything else. */
static bool st_json_uint(const cJSON *v, uint64_t *out)
{
	if (!cJSON_IsNumber(v) || !(v->valuedouble >= 0) ||
	    v->valuedouble > (double)ST_MAX_INT)
		return false;
	*out = (uint64_t)v->valuedouble;
	return (double)*out == v->valuedouble;
}

/* ---- reading -------------------------------------------------------------- */

/* The raw header must be UTF-8 without control bytes other than JSON's
 * whitespace: JSON forbids them raw inside strings, and cJSON would take one
 * outside a string for whitespace, or cut a name short at a NUL. */
static bool st_check_text(const struct st_where *w, const uint8_t *h, size_t n)
{
	size_t ok = st_utf8_prefix(h, n);

	if (ok < n)
		return st_fail(w, G_ERR_FORMAT, "header is not UTF-8 at header byte %zu", ok);
	for (size_t i = 0; i < n; i++)
		if (h[i] < 0x20 && h[i] != '\t' && h[i] != '\n' && h[i] != '\r')
			return st_fail(w, G_ERR_FORMAT, "header has control byte 0x%02x at header byte %zu",
				       h[i], i);
	return true;
}

static bool st_parse_shape(const struct st_where *w, const cJSON *shape,
			   struct st_tensor *t)
{
	const cJSON *d;
	uint64_t v;

	if (!cJSON_IsArray(shape))
		return st_fail(w, G_ERR_FORMAT, "shape is not an array");
	t->ndim = 0;
	cJSON_ArrayForEach(d, shape) {
		if (t->ndim == ST_MAX_DIMS)
			return st_fail(w, G_ERR_FORMAT, "shape has %d dimensions; at most %d are supported",
				       cJSON_GetArraySize(shape), ST_MAX_DIMS);
		if (!st_json_uint(d, &v))
			return st_fail(w, G_ERR_FORMAT, "shape[%d] is not an integer in [0, 2^53)",
				       t->ndim);
		t->shape[t->ndim++] = (int64_t)v;
	}
	return true;
}

/* Fills t from one header entry; the data buffer holds datalen bytes. */
static bool st_parse_tensor(const struct st_where *w, const cJSON *entry,
			    uint64_t datalen, struct st_tensor *t)
{
	const cJSON *dtype = NULL, *shape = NULL, *offsets = NULL, *item;
	char show[ST_SHOW], what[80];
	uint64_t range[2];
	int i;

	if (!cJSON_IsObject(entry))
		return st_fail(w, G_ERR_FORMAT, "entry is not an object");
	cJSON_ArrayForEach(item, entry) {
		const cJSON **slot;

		if (!strcmp(item->string, "dtype"))
			slot = &dtype;
		else if (!strcmp(item->string, "shape"))
			slot = &shape;
		else if (!strcmp(item->string, "data_offsets"))
			slot = &offsets;
		else
			return st_fail(w, G_ERR_FORMAT, "unknown key '%s'",
				       st_show(item->string, show, sizeof show));
		if (*slot)
			return st_fail(w, G_ERR_FORMAT, "key '%s' appears twice", item->string);
		*slot = item;
	}
	if (!dtype || !shape || !offsets)
		return st_fail(w, G_ERR_FORMAT, "no \"%s\"",
			       !dtype ? "dtype" : !shape ? "shape" : "data_offsets");

	if (!cJSON_IsString(dtype))
		return st_fail(w, G_ERR_FORMAT, "dtype is not a string");
	for (i = 0; i < ST_NDTYPES; i++)
		if (!strcmp(dtype->valuestring, st_dtypes[i].name))
			break;
	if (i == ST_NDTYPES)
		return st_fail(w, G_ERR_FORMAT, "unknown dtype '%s'",
			       st_show(dtype->valuestring, show, sizeof show));
	t->dtype = (enum st_dtype)i;
	if (!st_parse_shape(w, shape, t))
		return false;

	if (!cJSON_IsArray(offsets) || cJSON_GetArraySize(offsets) != 2 ||
	    !st_json_uint(offsets->child, &range[0]) ||
	    !st_json_uint(offsets->child->next, &range[1]))
		return st_fail(w, G_ERR_FORMAT, "data_offsets is not a pair of integers in [0, 2^53)");
	if (range[1] < range[0])
		return st_fail(w, G_ERR_FORMAT, "data_offsets [%" PRIu64 ", %" PRIu64 "] end before they begin",
			       range[0], range[1]);
	if (range[1] > datalen)
		return st_fail(w, G_ERR_FORMAT, "data_offsets [%" PRIu64 ", %" PRIu64 "] run past the end of the data (%" PRIu64 " bytes)",
			       range[0], range[1], datalen);
	snprintf(what, sizeof what, "data_offsets [%" PRIu64 ", %" PRIu64 "] hold",
		 range[0], range[1]);
	if (!st_check_size(w, G_ERR_FORMAT, t->dtype, t->ndim, t->shape, range[1] - range[0],
			   what))
		return false;
	t->data = NULL;
	t->offset = range[0];
	t->nbytes = (size_t)(range[1] - range[0]);
	return true;
}

static bool st_parse_meta(const struct st_where *w, const cJSON *meta,
			  struct st_file *f)
{
	const cJSON *item;
	const char *dup;
	char show[ST_SHOW];

	if (!cJSON_IsObject(meta))
		return st_fail(w, G_ERR_FORMAT, "__metadata__ is not an object");
	f->nmeta = 0;
	cJSON_ArrayForEach(item, meta)
		f->nmeta++;
	if (!f->nmeta)
		return true;
	f->meta = calloc(f->nmeta, sizeof *f->meta);
	if (!f->meta)
		return st_fail(w, G_ERR_NOMEM, "out of memory");
	f->nmeta = 0;
	cJSON_ArrayForEach(item, meta) {
		if (!cJSON_IsString(item))
			return st_fail(w, G_ERR_FORMAT, "__metadata__: value of '%s' is not a string",
				       st_show(item->string, show, sizeof show));
		f->meta[f->nmeta++] = (struct st_kv){ item->string, item->valuestring };
	}
	dup = st_sort_names(f->meta, f->nmeta, sizeof *f->meta);
	if (dup)
		return st_fail(w, G_ERR_FORMAT, "__metadata__: key '%s' appears twice",
			       st_show(dup, show, sizeof show));
	return true;
}

static int st_cmp_data(const void *a, const void *b)
{
	uint64_t x = (*(const struct st_tensor *const *)a)->offset;
	uint64_t y = (*(const struct st_tensor *const *)b)->offset;

	return (x > y) - (x < y);
}

/* No byte belongs to two tensors. Sorted by start, the ranges are disjoint
 * exactly when each one ends before the next begins. Empty tensors own no
 * bytes, so they may sit anywhere. */
static bool st_check_overlap(const struct st_where *w, struct st_file *f)
{
	const struct st_tensor **by = malloc((f->ntensors + 1) * sizeof *by);
	char a[ST_SHOW], b[ST_SHOW];
	size_t n = 0;

	if (!by)
		return st_fail(w, G_ERR_NOMEM, "out of memory");
	for (size_t i = 0; i < f->ntensors; i++)
		if (f->tensors[i].nbytes)
			by[n++] = &f->tensors[i];
	if (n > 1)
		qsort(by, n, sizeof *by, st_cmp_data);
	for (size_t i = 1; i < n; i++) {
		const struct st_tensor *s = by[i - 1], *t = by[i];
		size_t sb = (size_t)s->offset, tb = (size_t)t->offset;

		if (sb + s->nbytes > tb) {
			st_fail(w, G_ERR_FORMAT, "tensors '%s' [%zu, %zu] and '%s' [%zu, %zu] overlap",
				st_show(s->name, a, sizeof a), sb, sb + s->nbytes,
				st_show(t->name, b, sizeof b), tb, tb + t->nbytes);
			free(by);
			return false;
		}
	}
	free(by);
	return true;
}

/* The header length from the file's first 8 bytes (len of them), checked
 * against the file's size. */
static bool st_header_len(const struct st_where *w, const uint8_t *first, uint64_t size,
			  uint64_t *hlen)
{
	uint64_t n = 0;

	if (size < 8)
		return st_fail(w, G_ERR_FORMAT, "file is %" PRIu64 " bytes, too short for the 8-byte header length",
			       size);
	for (int i = 7; i >= 0; i--)
		n = n << 8 | first[i];
	if (n > size - 8)
		return st_fail(w, G_ERR_FORMAT, "header length %" PRIu64 " runs past the end of the file (%" PRIu64 " bytes)",
			       n, size);
	if (n > ST_MAX_HEADER)
		return st_fail(w, G_ERR_FORMAT, "header length %" PRIu64 " exceeds the limit of %" PRIu64 " MiB",
			       n, ST_MAX_HEADER >> 20);
	*hlen = n;
	return true;
}

/* Parses the hlen header bytes at h, followed in the file by datalen bytes
 * of data. */
static bool st_parse(struct st_file *f, const struct st_where *w,
		     const uint8_t *h, uint64_t hlen, uint64_t datalen)
{
	const cJSON *item, *meta = NULL;
	const char *end, *dup;
	char show[ST_SHOW];
	size_t n = 0;
	char *text;

	if (!st_check_text(w, h, (size_t)hlen))
		return false;

	/* cJSON parses a NUL-terminated copy, so that none of its look-aheads
	 * can read past the header, whatever the header holds. */
	text = malloc((size_t)hlen + 1);
	if (!text)
		return st_fail(w, G_ERR_NOMEM, "out of memory");
	memcpy(text, h, (size_t)hlen);
	text[hlen] = '\0';
	f->json = cJSON_ParseWithOpts(text, &end, true);
	if (!f->json) {
		st_fail(w, G_ERR_FORMAT, "header is not valid JSON (at header byte %td)",
			end ? end - text : 0);
		free(text);
		return false;
	}
	free(text);
	if (!cJSON_IsObject(f->json))
		return st_fail(w, G_ERR_FORMAT, "header is not a JSON object");

	cJSON_ArrayForEach(item, f->json)
		n++;
	f->tensors = calloc(n + 1, sizeof *f->tensors);
	if (!f->tensors)
		return st_fail(w, G_ERR_NOMEM, "out of memory");
	f->data_at = 8 + hlen;
	cJSON_ArrayForEach(item, f->json) {
		struct st_where tw = { w->file, item->string };

		if (!strcmp(item->string, "__metadata__")) {
			if (meta)
				return st_fail(w, G_ERR_FORMAT, "__metadata__ appears twice");
			meta = item;
			if (!st_parse_meta(w, meta, f))
				return false;
		} else {
			struct st_tensor *t = &f->tensors[f->ntensors++];

			t->name = item->string;
			if (!st_parse_tensor(&tw, item, datalen, t))
				return false;
		}
	}
	dup = st_sort_names(f->tensors, f->ntensors, sizeof *f->tensors);
	if (dup)
		return st_fail(w, G_ERR_FORMAT, "tensor '%s' appears twice",
			       st_show(dup, show, sizeof show));
	return st_check_overlap(w, f);
}

bool st_open_buffer(struct st_file **out, const void *buf, size_t len, const char *name)
{
	struct st_where w = { name, NULL };
	struct st_file *f;
	uint64_t hlen;

	*out = NULL;
	if (!st_header_len(&w, buf, len, &hlen))
		return false;
	f = calloc(1, sizeof *f);
	if (!f)
		return st_fail(&w, G_ERR_NOMEM, "out of memory");
	f->fd = -1;
	f->buf = buf;
	if (!st_parse(f, &w, (const uint8_t *)buf + 8, hlen, len - 8 - hlen)) {
		st_close(f);
		return false;
	}
	*out = f;
	return true;
}

/* Reads len bytes at offset of fd into dst: false with errno set, or with
 * errno 0 when the file ends first. */
static bool st_pread(int fd, void *dst, size_t len, uint64_t offset)
{
	uint8_t *p = dst;

	while (len) {
		ssize_t got = pread(fd, p, len, (off_t)offset);

		if (got < 0 && errno == EINTR)
			continue;
		if (got <= 0) {
			if (!got)
				errno = 0;
			return false;
		}
		p += got;
		len -= (size_t)got;
		offset += (uint64_t)got;
	}
	return true;
}

bool st_open(struct st_file **out, const char *path)
{
	struct st_where w = { path, NULL };
	struct st_file *f = NULL;
	uint8_t first[8] = { 0 }, *header = NULL;
	uint64_t size, hlen;
	struct stat sb;
	int fd;

	*out = NULL;
	/* O_NONBLOCK: a FIFO must not wait for a writer (it is refused below) */
	fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0)
		return st_fail(&w, G_ERR_IO, "cannot open: %s", strerror(errno));
	if (fstat(fd, &sb) || !S_ISREG(sb.st_mode)) {
		close(fd);
		return st_fail(&w, G_ERR_IO, "not a regular file");
	}
	size = (uint64_t)sb.st_size;
	if (size >= 8 && !st_pread(fd, first, 8, 0))
		goto io;
	if (!st_header_len(&w, first, size, &hlen))
		goto fail;
	header = malloc(hlen ? (size_t)hlen : 1);
	if (!header) {
		st_fail(&w, G_ERR_NOMEM, "out of memory");
		goto fail;
	}
	if (!st_pread(fd, header, (size_t)hlen, 8))
		goto io;
	f = calloc(1, sizeof *f);
	if (!f) {
		st_fail(&w, G_ERR_NOMEM, "out of memory");
		goto fail;
	}
	f->fd = fd;
	fd = -1;
	if (!st_parse(f, &w, header, hlen, size - 8 - hlen))
		goto fail;
	free(header);
	*out = f;
	return true;
io:
	st_fail(&w, G_ERR_IO, "cannot read: %s", errno ? strerror(errno) : "the file ended early");
fail:
	free(header);
	st_close(f);
	if (fd >= 0)
		close(fd);
	return false;
}

void st_close(struct st_file *f)
{
	if (!f)
		return;
	if (f->fd >= 0)
		close(f->fd);
	cJSON_Delete(f->json);
	free(f->tensors);
	free(f->meta);
	free(f);
}

const struct st_tensor *st_find(const struct st_file *f, const char *name)
{
	if (!f->ntensors)
		return NULL;
	return bsearch(&name, f->tensors, f->ntensors, sizeof *f->tensors,
		       st_cmp_name);
}

size_t st_count(const struct st_file *f)
{
	return f->ntensors;
}

const struct st_tensor *st_at(const struct st_file *f, size_t i)
{
	return &f->tensors[i];
}

const char *st_meta(const struct st_file *f, const char *key)
{
	const struct st_kv *kv;

	if (!f->nmeta)
		return NULL;
	kv = bsearch(&key, f->meta, f->nmeta, sizeof *f->meta, st_cmp_name);
	return kv ? kv->value : NULL;
}

size_t st_meta_count(const struct st_file *f)
{
	return f->nmeta;
}

void st_meta_at(const struct st_file *f, size_t i, const char **key,
		const char **value)
{
	*key = f->meta[i].key;
	*value = f->meta[i].value;
}

/* ---- conversion ------------------------------------------------------------ */

/* IEEE binary16 to float32, exactly: every half is a float. */
static float st_f16(uint16_t h)
{
	uint32_t sign = (uint32_t)(h & 0x8000) << 16;
	uint32_t exp = h >> 10 & 0x1f, man = h & 0x3ff, bits;
	float f;

	if (exp == 0x1f) {
		bits = sign | 0x7f800000 | man << 13;	/* inf, or NaN keeping its payload */
	} else if (exp) {
		bits = sign | (exp + 127 - 15) << 23 | man << 13;
	} else {
		/* zero or subnormal, man * 2^-24: exact in float arithmetic */
		f = (float)man * 0x1p-24f;
		return sign ? -f : f;
	}
	memcpy(&f, &bits, sizeof f);
	return f;
}

/* bfloat16 is the top half of a float32. */
static float st_bf16(uint16_t h)
{
	uint32_t bits = (uint32_t)h << 16;
	float f;

	memcpy(&f, &bits, sizeof f);
	return f;
}

static bool st_is_float(enum st_dtype dtype)
{
	return dtype == ST_F32 || dtype == ST_F16 || dtype == ST_BF16 ||
	       dtype == ST_F64;
}

/* n elements of dtype (one st_is_float accepts) at src to float32 at dst. */
static void st_convert(enum st_dtype dtype, const uint8_t *src, float *dst,
		       size_t n)
{
	uint16_t h;
	double d;

	if (!n)
		return;
	switch (dtype) {
	case ST_F32:
		memcpy(dst, src, n * sizeof *dst);
		break;
	case ST_F16:
		for (size_t i = 0; i < n; i++) {
			memcpy(&h, src + 2 * i, sizeof h);
			dst[i] = st_f16(h);
		}
		break;
	case ST_BF16:
		for (size_t i = 0; i < n; i++) {
			memcpy(&h, src + 2 * i, sizeof h);
			dst[i] = st_bf16(h);
		}
		break;
	case ST_F64:
		/* rounds to nearest (IEEE's default mode), overflowing to
		 * infinity as Annex F defines */
		for (size_t i = 0; i < n; i++) {
			memcpy(&d, src + 8 * i, sizeof d);
			dst[i] = (float)d;
		}
		break;
	/* not floats: the caller refused them (st_is_float) */
	case ST_I64:
	case ST_I32:
	case ST_I16:
	case ST_I8:
	case ST_U64:
	case ST_U32:
	case ST_U16:
	case ST_U8:
	case ST_BOOL:
	case ST_F8_E4M3:
	case ST_F8_E5M2:
	case ST_NDTYPES:
		break;
	}
}

/* Staging for a conversion: this many bytes of source data at a time. */
#define ST_STAGE (UINT64_C(1) << 20)

/* Copies len bytes of f's data buffer at offset into dst. */
static bool st_fetch(const struct st_file *f, const struct st_where *w, uint64_t offset,
		     size_t len, void *dst)
{
	if (!len)
		return true;
	if (f->fd < 0) {
		memcpy(dst, f->buf + f->data_at + offset, len);
	} else if (!st_pread(f->fd, dst, len, f->data_at + offset)) {
		return st_fail(w, G_ERR_IO, "cannot read %zu bytes at byte %" PRIu64 ": %s", len,
			       f->data_at + offset,
			       errno ? strerror(errno) : "the file ended early (did it shrink?)");
	}
	__atomic_fetch_add((uint64_t *)&f->read, len, __ATOMIC_RELAXED);
	return true;
}

/* One run of n contiguous elements at element `first` of t into dst, which
 * advances: converted to float32, or as the bytes are. */
static bool st_run(const struct st_file *f, const struct st_where *w,
		   const struct st_tensor *t, size_t first, size_t n, bool f32,
		   uint8_t **dst, uint8_t *stage)
{
	size_t esize = st_dtypes[t->dtype].size;
	uint64_t at = t->offset + (uint64_t)first * esize;

	if (!f32 || t->dtype == ST_F32) {
		if (!st_fetch(f, w, at, n * esize, *dst))
			return false;
		*dst += n * esize;
		return true;
	}
	while (n) {
		size_t k = n < ST_STAGE / esize ? n : (size_t)(ST_STAGE / esize);

		if (!st_fetch(f, w, at, k * esize, stage))
			return false;
		st_convert(t->dtype, stage, (float *)*dst, k);
		*dst += k * sizeof(float);
		at += k * esize;
		n -= k;
	}
	return true;
}

static bool st_slice(const struct st_file *f, const struct st_tensor *t, int dim,
		     const int64_t *starts, const int64_t *lens, int nranges, void *dst,
		     bool f32)
{
	struct st_where w = { NULL, t->name };
	size_t inner = 1, outer = 1, size, first = 0, pending = 0;
	uint8_t *out = dst, *stage = NULL;
	bool ok = true;

	/* A request that does not fit t is G_ERR_BIND: the caller's slice (the
	 * graph's) and the file's tensor disagree. */
	if (f32 && !st_is_float(t->dtype))
		return st_fail(&w, G_ERR_BIND, "dtype %s does not read as float32 (only F32, F16, BF16 and F64 do)",
			       st_dtype_name(t->dtype) ? st_dtype_name(t->dtype) : "(invalid)");
	if (nranges < 0)
		return st_fail(&w, G_ERR_BIND, "%d ranges", nranges);
	if (nranges && (dim < 0 || dim >= t->ndim))
		return st_fail(&w, G_ERR_BIND, "dim %d is not one of its %d dimensions", dim, t->ndim);
	for (int r = 0; r < nranges; r++)
		if (starts[r] < 0 || lens[r] < 0 || starts[r] > t->shape[dim] ||
		    lens[r] > t->shape[dim] - starts[r])
			return st_fail(&w, G_ERR_BIND, "range %d (start %" PRId64 ", length %" PRId64 ") is outside [0, %" PRId64 ") of dim %d",
				       r, starts[r], lens[r], t->shape[dim], dim);
	/* From here no dimension is 0, so every product below is at most the
	 * element count, which fits (st_shape_bytes) */
	if (st_numel(t) == 0)
		return true;
	if (f32 && t->dtype != ST_F32) {
		stage = malloc(ST_STAGE);
		if (!stage)
			return st_fail(&w, G_ERR_NOMEM, "out of memory");
	}
	if (!nranges) {
		ok = st_run(f, &w, t, 0, (size_t)st_numel(t), f32, &out, stage);
		free(stage);
		return ok;
	}
	size = (size_t)t->shape[dim];
	for (int i = 0; i < dim; i++)
		outer *= (size_t)t->shape[i];
	for (int i = dim + 1; i < t->ndim; i++)
		inner *= (size_t)t->shape[i];
	/* runs that follow each other in the file are read as one */
	for (size_t o = 0; ok && o < outer; o++) {
		for (int r = 0; ok && r < nranges; r++) {
			size_t at = (o * size + (size_t)starts[r]) * inner;
			size_t count = (size_t)lens[r] * inner;

			if (!count)
				continue;
			if (pending && first + pending != at) {
				ok = st_run(f, &w, t, first, pending, f32, &out, stage);
				pending = 0;
			}
			if (!pending)
				first = at;
			pending += count;
		}
	}
	if (ok && pending)
		ok = st_run(f, &w, t, first, pending, f32, &out, stage);
	free(stage);
	return ok;
}

bool st_read_f32(const struct st_file *f, const struct st_tensor *t, int dim,
		 const int64_t *starts, const int64_t *lens, int nranges, float *dst)
{
	return st_slice(f, t, dim, starts, lens, nranges, dst, true);
}

bool st_read_raw(const struct st_file *f, const struct st_tensor *t, int dim,
		 const int64_t *starts, const int64_t *lens, int nranges, void *dst)
{
	return st_slice(f, t, dim, starts, lens, nranges, dst, false);
}

uint64_t st_bytes_read(const struct st_file *f)
{
	return __atomic_load_n(&f->read, __ATOMIC_RELAXED);
}

/* ---- writing --------------------------------------------------------------- */

static bool st_check_write(const struct st_where *w, const struct st_tensor *t, bool fill)
{
	if (!strcmp(t->name, "__metadata__"))
		return st_fail(w, G_ERR_INVALID, "the name __metadata__ is reserved for metadata");
	if (!st_dtype_name(t->dtype))
		return st_fail(w, G_ERR_INVALID, "dtype %d is not an enum st_dtype", (int)t->dtype);
	if (t->ndim < 0 || t->ndim > ST_MAX_DIMS)
		return st_fail(w, G_ERR_INVALID, "ndim %d is outside [0, %d]", t->ndim, ST_MAX_DIMS);
	for (int i = 0; i < t->ndim; i++)
		if (t->shape[i] < 0 || (uint64_t)t->shape[i] > ST_MAX_INT)
			return st_fail(w, G_ERR_INVALID, "shape[%d] = %" PRId64 " is outside [0, 2^53)",
				       i, t->shape[i]);
	if (!st_check_size(w, G_ERR_INVALID, t->dtype, t->ndim, t->shape, t->nbytes,
			   "nbytes says"))
		return false;
	if (t->nbytes && !t->data && !fill)
		return st_fail(w, G_ERR_INVALID, "no data");
	return true;
}

/* Checks every argument of st_write, so that nothing is created for a call
 * that cannot succeed. */
static bool st_check_args(const struct st_where *w, const struct st_tensor *t,
			  size_t n, const char *const *kv, size_t nmeta, bool fill)
{
	const char **names = malloc(((n > nmeta ? n : nmeta) + 1) * sizeof *names);
	char show[ST_SHOW];
	const char *dup;
	uint64_t total = 0;
	bool ok = false;

	if (!names)
		return st_fail(w, G_ERR_NOMEM, "out of memory");
	for (size_t i = 0; i < n; i++) {
		struct st_where tw = { w->file, t[i].name };

		/* by number: a name that is not UTF-8 has no place in a message */
		if (!t[i].name || st_utf8_prefix((const uint8_t *)t[i].name,
						 strlen(t[i].name)) < strlen(t[i].name)) {
			st_fail(w, G_ERR_INVALID, "tensor %zu has no UTF-8 name", i);
			goto out;
		}
		if (!st_check_write(&tw, &t[i], fill))
			goto out;
		total += t[i].nbytes;
		if (total > ST_MAX_INT) {
			st_fail(w, G_ERR_INVALID, "the data reaches 2^53 bytes");
			goto out;
		}
		names[i] = t[i].name;
	}
	dup = st_sort_names(names, n, sizeof *names);
	if (dup) {
		st_fail(w, G_ERR_INVALID, "tensor '%s' appears twice", st_show(dup, show, sizeof show));
		goto out;
	}
	for (size_t i = 0; i < nmeta; i++) {
		const char *key = kv[2 * i], *value = kv[2 * i + 1];

		if (!key || !value ||
		    st_utf8_prefix((const uint8_t *)key, strlen(key)) < strlen(key) ||
		    st_utf8_prefix((const uint8_t *)value, strlen(value)) < strlen(value)) {
			st_fail(w, G_ERR_INVALID, "__metadata__: entry %zu is not a pair of UTF-8 strings", i);
			goto out;
		}
		names[i] = key;
	}
	dup = st_sort_names(names, nmeta, sizeof *names);
	if (dup) {
		st_fail(w, G_ERR_INVALID, "__metadata__: key '%s' appears twice",
			st_show(dup, show, sizeof show));
		goto out;
	}
	ok = true;
out:
	free(names);
	return ok;
}

/* Adds key: [v...]. cJSON prints numbers with %g, which would make an offset
 * past 10^15 "1e+15": the integers go in as raw text instead. */
static bool st_add_ints(cJSON *obj, const char *key, const int64_t *v, int n)
{
	cJSON *a = cJSON_AddArrayToObject(obj, key), *raw;
	char num[24];

	if (!a)
		return false;
	for (int i = 0; i < n; i++) {
		snprintf(num, sizeof num, "%" PRId64, v[i]);
		raw = cJSON_CreateRaw(num);
		if (!raw)
			return false;
		cJSON_AddItemToArray(a, raw);
	}
	return true;
}

/* The header of st_write's arguments (already checked); NULL when out of
 * memory. */
static cJSON *st_header(const struct st_tensor *t, size_t n,
			const char *const *kv, size_t nmeta)
{
	cJSON *root = cJSON_CreateObject(), *meta, *e;
	int64_t range[2] = { 0, 0 };

	if (!root)
		return NULL;
	if (nmeta) {
		meta = cJSON_AddObjectToObject(root, "__metadata__");
		if (!meta)
			goto fail;
		for (size_t i = 0; i < nmeta; i++)
			if (!cJSON_AddStringToObject(meta, kv[2 * i], kv[2 * i + 1]))
				goto fail;
	}
	for (size_t i = 0; i < n; i++) {
		range[0] = range[1];
		range[1] += (int64_t)t[i].nbytes;
		e = cJSON_AddObjectToObject(root, t[i].name);
		if (!e || !cJSON_AddStringToObject(e, "dtype", st_dtypes[t[i].dtype].name) ||
		    !st_add_ints(e, "shape", t[i].shape, t[i].ndim) ||
		    !st_add_ints(e, "data_offsets", range, 2))
			goto fail;
	}
	return root;
fail:
	cJSON_Delete(root);
	return NULL;
}

/* Where a tensor's bytes come from: its data, or fill (one tensor's bytes
 * in memory at a time). */
struct st_source {
	st_fill_fn fill;
	void *ud;
	uint8_t *buf;	/* fill's buffer, of the largest tensor */
	bool failed;	/* fill said no, raising why */
};

/* Writes the file to tmp (or in place): the header length, the header padded with spaces
 * to a multiple of 8, then the data. */
static bool st_put(const char *tmp, const char *header, const struct st_tensor *t,
		   size_t n, struct st_source *src)
{
	static const char spaces[8] = "        ";
	size_t len = strlen(header), pad = -len & 7;
	uint64_t hlen = len + pad;
	uint8_t le[8];
	FILE *fp = fopen(tmp, "wb");
	bool ok;

	if (!fp)
		return false;
	for (int i = 0; i < 8; i++)
		le[i] = (uint8_t)(hlen >> 8 * i);
	ok = fwrite(le, 1, 8, fp) == 8 && fwrite(header, 1, len, fp) == len &&
	     fwrite(spaces, 1, pad, fp) == pad;
	for (size_t i = 0; ok && i < n; i++) {
		const void *data = t[i].data;

		if (!t[i].nbytes)
			continue;
		if (src->fill) {
			if (!src->fill(src->ud, i, src->buf)) {
				src->failed = true;
				ok = false;
				break;
			}
			data = src->buf;
		}
		ok = fwrite(data, 1, t[i].nbytes, fp) == t[i].nbytes;
	}
	/* fclose must run either way, and reports a write its buffer held */
	return !fclose(fp) && ok;
}

static bool st_write_from(const char *path, const struct st_tensor *tensors, size_t n,
			  const char *const *meta_kv, size_t nmeta, struct st_source *src)
{
	struct st_where w = { path, NULL };
	size_t most = 1;
	cJSON *root;
	char *header, *tmp;
	bool ok = false;

	if (!st_check_args(&w, tensors, n, meta_kv, nmeta, src->fill != NULL))
		return false;
	for (size_t i = 0; src->fill && i < n; i++)
		most = tensors[i].nbytes > most ? tensors[i].nbytes : most;
	if (src->fill && !(src->buf = malloc(most)))
		return st_fail(&w, G_ERR_NOMEM, "out of memory for a %zu-byte tensor", most);
	root = st_header(tensors, n, meta_kv, nmeta);
	header = root ? cJSON_PrintUnformatted(root) : NULL;
	cJSON_Delete(root);
	tmp = malloc(strlen(path) + sizeof ".tmp");
	if (!header || !tmp) {
		st_fail(&w, G_ERR_NOMEM, "out of memory");
		goto out;
	}
	sprintf(tmp, "%s.tmp", path);
	/* A device or FIFO is written in place: renaming over it replaced the
	 * node itself (as root, --save-outputs /dev/null left a regular file
	 * there) and hid the device's own write error (/dev/full). */
	struct stat st;
	if (!stat(path, &st) && !S_ISREG(st.st_mode)) {
		if (S_ISDIR(st.st_mode))
			st_fail(&w, G_ERR_IO, "cannot write %s: %s", path, strerror(EISDIR));
		else if (st_put(path, header, tensors, n, src))
			ok = true;
		else if (!src->failed)
			st_fail(&w, G_ERR_IO, "cannot write %s: %s", path, strerror(errno));
		goto out;
	}
	if (!st_put(tmp, header, tensors, n, src)) {
		if (!src->failed)
			st_fail(&w, G_ERR_IO, "cannot write %s: %s", tmp, strerror(errno));
	} else if (rename(tmp, path)) {
		st_fail(&w, G_ERR_IO, "cannot move %s into place: %s", tmp, strerror(errno));
	} else {
		ok = true;
	}
	if (!ok)
		remove(tmp);
out:
	free(src->buf);
	free(header);
	free(tmp);
	return ok;
}

bool st_write(const char *path, const struct st_tensor *tensors, size_t n,
	      const char *const *meta_kv, size_t nmeta)
{
	struct st_source src = { 0 };

	return st_write_from(path, tensors, n, meta_kv, nmeta, &src);
}

bool st_write_fill(const char *path, const struct st_tensor *tensors, size_t n,
		   const char *const *meta_kv, size_t nmeta, st_fill_fn fill, void *ud)
{
	struct st_source src = { fill, ud, NULL, false };

	return st_write_from(path, tensors, n, meta_kv, nmeta, &src);
}
