/* test_safetensors.c — unit tests for runtime/safetensors.c: round trips,
 * slicing, dtype conversion, interoperation with Python's safetensors, and
 * the rejection of every kind of malformed file.
 *
 * ST_FUZZ_SEEDS=DIR also writes the valid files it builds into DIR, as seeds
 * for tests/fuzz/fuzz_safetensors.c. */
#include <dirent.h>
#include <fcntl.h>
#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "graph/error.h"
#include "runtime/safetensors.h"
#include "tests/unit/unit.h"

static char dir[256];

/* dir/name, in one of a few rotating buffers so that a call may use two. */
static const char *at(const char *name)
{
	static char buf[4][512];
	static int next;
	char *p = buf[next++ % 4];

	snprintf(p, sizeof buf[0], "%s/%s", dir, name);
	return p;
}

static bool put_file(const char *path, const void *data, size_t len)
{
	FILE *f = fopen(path, "wb");
	bool ok;

	if (!f)
		return false;
	ok = fwrite(data, 1, len, f) == len;
	return !fclose(f) && ok;
}

static uint8_t *get_file(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	uint8_t *buf;
	long n;

	if (!f)
		return NULL;
	fseek(f, 0, SEEK_END);
	n = ftell(f);
	rewind(f);
	buf = malloc((size_t)n + 1);
	*len = buf ? fread(buf, 1, (size_t)n, f) : 0;
	if (buf)
		buf[*len] = '\0';	/* for strstr on the header */
	fclose(f);
	return buf;
}

/* A file image: the 8-byte header length, json, then dlen data bytes (k at
 * offset k, so that a misplaced read shows). */
static uint8_t *image(const char *json, size_t dlen, size_t *len)
{
	size_t hlen = strlen(json);
	uint8_t *buf = malloc(8 + hlen + dlen + 1);

	for (int i = 0; i < 8; i++)
		buf[i] = (uint8_t)((uint64_t)hlen >> 8 * i);
	memcpy(buf + 8, json, hlen);
	for (size_t i = 0; i < dlen; i++)
		buf[8 + hlen + i] = (uint8_t)i;
	*len = 8 + hlen + dlen;
	return buf;
}

/* Writes tensors to dir/name, and to $ST_FUZZ_SEEDS/name when that is set. */
static bool save(const char *name, const struct st_tensor *t, size_t n,
		 const char *const *kv, size_t nmeta)
{
	const char *seeds = getenv("ST_FUZZ_SEEDS");
	char path[512];

	if (seeds) {
		snprintf(path, sizeof path, "%s/%s", seeds, name);
		if (!st_write(path, t, n, kv, nmeta))
			printf("# seed %s: %s\n", path, g_error()->msg);
	}
	if (st_write(at(name), t, n, kv, nmeta))
		return true;
	printf("# %s\n", g_error()->msg);
	return false;
}

static struct st_file *open_or_say(const char *path)
{
	struct st_file *f;

	if (st_open(&f, path))
		return f;
	printf("# %s\n", g_error()->msg);
	return NULL;
}

/* a and b are the same float: both NaN, or equal with the same sign. */
static bool same(float a, float b)
{
	if (isnan(a) || isnan(b))
		return isnan(a) && isnan(b);
	return a == b && signbit(a) == signbit(b);
}

static bool same_all(const float *a, const float *b, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (!same(a[i], b[i])) {
			printf("# element %zu: %a, want %a\n", i, a[i], b[i]);
			return false;
		}
	return true;
}

static struct st_tensor tensor(const char *name, enum st_dtype dtype, int ndim,
			       const int64_t *shape, const void *data, size_t nbytes)
{
	struct st_tensor t = { .name = name, .dtype = dtype, .ndim = ndim,
			       .data = data, .nbytes = nbytes };

	if (ndim)
		memcpy(t.shape, shape, (size_t)ndim * sizeof *shape);
	return t;
}

/* ---- round trip ----------------------------------------------------------- */

static const float a_f32[12] = { -1.25f, -1, -0.75f, -0.5f, -0.25f, 0, 0.25f,
				 0.5f, 0.75f, 1, 1.25f, 1.5f };
static const uint16_t b_f16[6] = { 0x3c00, 0xc000, 0x3800, 0x7bff, 0x0001, 0x8000 };
static const float b_want[6] = { 1, -2, 0.5f, 65504, 0x1p-24f, -0.0f };
static const uint16_t c_bf16[4] = { 0x3f80, 0xc040, 0x4049, 0x0001 };
static const float c_want[4] = { 1, -3, 3.140625f, 0x1p-133f };
static const double d_f64[2] = { 0.1, -1e30 };
static const float d_want[2] = { 0.1f, -1e30f };
static const int64_t e_i64[3] = { 1, -2, INT64_C(1) << 40 };
static const float f_scalar = 42;
static const uint8_t h_u8[5] = { 1, 2, 3, 254, 255 };

/* The round trip's tensors, deliberately not in name order. */
static size_t rt_tensors(struct st_tensor *t)
{
	static const int64_t s34[] = { 3, 4 }, s23[] = { 2, 3 }, s4[] = { 4 },
			     s2[] = { 2 }, s3[] = { 3 }, s05[] = { 0, 5 }, s5[] = { 5 };
	size_t n = 0;

	t[n++] = tensor("h.u8", ST_U8, 1, s5, h_u8, sizeof h_u8);
	t[n++] = tensor("a.f32", ST_F32, 2, s34, a_f32, sizeof a_f32);
	t[n++] = tensor("d.f64", ST_F64, 1, s2, d_f64, sizeof d_f64);
	t[n++] = tensor("c.bf16", ST_BF16, 1, s4, c_bf16, sizeof c_bf16);
	t[n++] = tensor("b.f16", ST_F16, 2, s23, b_f16, sizeof b_f16);
	t[n++] = tensor("f.scalar", ST_F32, 0, NULL, &f_scalar, sizeof f_scalar);
	t[n++] = tensor("g.empty", ST_F32, 2, s05, NULL, 0);
	t[n++] = tensor("e.i64", ST_I64, 1, s3, e_i64, sizeof e_i64);
	return n;
}

static const char *const rt_meta[] = {
	"format", "pt",
	"dtpc.note", "\xc3\xbcnicode, \"quoted\", a\nnewline and a \\",
};

/* got, one of f's tensors, is want: name, dtype, shape and the bytes
 * st_read_raw reads. */
static bool same_tensor(const struct st_file *f, const struct st_tensor *got,
			const struct st_tensor *want)
{
	uint8_t *bytes;
	bool ok;

	if (!got || strcmp(got->name, want->name) || got->dtype != want->dtype ||
	    got->ndim != want->ndim ||
	    memcmp(got->shape, want->shape, (size_t)want->ndim * sizeof *want->shape) ||
	    got->nbytes != want->nbytes || got->data)
		return false;
	bytes = malloc(want->nbytes + 1);
	ok = bytes && st_read_raw(f, got, -1, NULL, NULL, 0, bytes) &&
	     (!want->nbytes || !memcmp(bytes, want->data, want->nbytes));
	free(bytes);
	return ok;
}

static void test_roundtrip(void)
{
	struct st_tensor t[8];
	size_t n = rt_tensors(t), len1 = 0, len2 = 0;
	struct st_file *f;
	uint8_t *b1, *b2;
	const char *key, *value;
	float out[16];
	uint64_t hlen = 0;

	UNIT_CHECK(save("roundtrip.safetensors", t, n, rt_meta, 2), "write the round trip");
	UNIT_CHECK(access(at("roundtrip.safetensors.tmp"), F_OK) != 0,
		   "no temporary file is left behind");
	f = open_or_say(at("roundtrip.safetensors"));
	UNIT_CHECK(f, "open the round trip");
	if (!f)
		return;
	UNIT_CHECK(st_count(f) == n, "%zu tensors (%zu)", n, st_count(f));
	for (size_t i = 1; i < st_count(f); i++)
		UNIT_CHECK(strcmp(st_at(f, i - 1)->name, st_at(f, i)->name) < 0,
			   "st_at is in name order: '%s' < '%s'",
			   st_at(f, i - 1)->name, st_at(f, i)->name);
	for (size_t i = 0; i < n; i++) {
		const struct st_tensor *got = st_find(f, t[i].name);

		UNIT_CHECK(same_tensor(f, got, &t[i]),
			   "'%s' comes back with its dtype, shape and bytes", t[i].name);
	}
	UNIT_CHECK(!st_find(f, "a.f3") && !st_find(f, "zzz") && !st_find(f, ""),
		   "st_find of absent names is NULL");
	UNIT_CHECK(st_find(f, "h.u8")->offset < st_find(f, "a.f32")->offset &&
		   st_find(f, "b.f16")->offset < st_find(f, "e.i64")->offset,
		   "the data is in the order given");
	UNIT_CHECK(st_dtype_size(ST_BF16) == 2 && st_dtype_size(ST_F64) == 8 &&
		   st_dtype_size(ST_NDTYPES) == 0 && !strcmp(st_dtype_name(ST_F8_E5M2), "F8_E5M2") &&
		   !st_dtype_name((enum st_dtype)-1), "st_dtype_size and st_dtype_name");
	UNIT_CHECK(st_numel(st_find(f, "a.f32")) == 12 &&
		   st_numel(st_find(f, "f.scalar")) == 1 &&
		   st_numel(st_find(f, "g.empty")) == 0, "st_numel");

	UNIT_CHECK(st_read_f32(f, st_find(f, "a.f32"), -1, NULL, NULL, 0, out) &&
		   same_all(out, a_f32, 12), "read F32 whole");
	UNIT_CHECK(st_read_f32(f, st_find(f, "b.f16"), -1, NULL, NULL, 0, out) &&
		   same_all(out, b_want, 6), "read F16 whole, exactly");
	UNIT_CHECK(st_read_f32(f, st_find(f, "c.bf16"), -1, NULL, NULL, 0, out) &&
		   same_all(out, c_want, 4), "read BF16 whole, exactly");
	UNIT_CHECK(st_read_f32(f, st_find(f, "d.f64"), -1, NULL, NULL, 0, out) &&
		   same_all(out, d_want, 2), "read F64 whole, rounded");
	UNIT_CHECK(st_read_f32(f, st_find(f, "f.scalar"), -1, NULL, NULL, 0, out) &&
		   out[0] == 42, "read a scalar");
	UNIT_CHECK(st_read_f32(f, st_find(f, "g.empty"), -1, NULL, NULL, 0, NULL),
		   "read an empty tensor into nothing");
	UNIT_CHECK(st_read_f32(f, st_find(f, "g.empty"), 1, (int64_t[]){ 1 }, (int64_t[]){ 3 },
			       1, NULL) &&
		   !st_read_f32(f, st_find(f, "g.empty"), 1, (int64_t[]){ 1 }, (int64_t[]){ 5 },
				1, NULL),
		   "slice an empty tensor, still checking the range");
	UNIT_CHECK(!st_read_f32(f, st_find(f, "e.i64"), -1, NULL, NULL, 0, out) &&
		   g_error()->status == G_ERR_BIND && !strcmp(g_error()->msg, "tensor 'e.i64': dtype I64 does not read as float32 (only F32, F16, BF16 and F64 do)"),
		   "I64 does not read as float32: %s", g_error()->msg);

	UNIT_CHECK(st_meta_count(f) == 2, "2 metadata entries");
	UNIT_CHECK(st_meta(f, "format") && !strcmp(st_meta(f, "format"), "pt"),
		   "metadata format = pt");
	UNIT_CHECK(st_meta(f, "dtpc.note") && !strcmp(st_meta(f, "dtpc.note"), rt_meta[3]),
		   "metadata with UTF-8, quotes, a newline and a backslash");
	UNIT_CHECK(!st_meta(f, "form") && !st_meta(f, "formats"), "absent metadata is NULL");
	st_meta_at(f, 0, &key, &value);
	UNIT_CHECK(!strcmp(key, "dtpc.note") && value == st_meta(f, "dtpc.note"),
		   "st_meta_at is in key order");
	st_close(f);

	/* determinism, and the layout the header promises */
	UNIT_CHECK(save("roundtrip2.safetensors", t, n, rt_meta, 2), "write it again");
	b1 = get_file(at("roundtrip.safetensors"), &len1);
	b2 = get_file(at("roundtrip2.safetensors"), &len2);
	UNIT_CHECK(b1 && b2 && len1 == len2 && !memcmp(b1, b2, len1),
		   "the same arguments write the same bytes");
	for (int i = 7; b1 && i >= 0; i--)
		hlen = hlen << 8 | b1[i];
	UNIT_CHECK(b1 && hlen % 8 == 0 && b1[8] == '{' && 8 + hlen <= len1 &&
		   (b1[8 + hlen - 1] == '}' || b1[8 + hlen - 1] == ' '),
		   "the header is padded to a multiple of 8 (%" PRIu64 ")", hlen);
	UNIT_CHECK(b1 && !memchr(b1 + 8, '\n', hlen) && strstr((char *)b1 + 8,
		   "\"h.u8\":{\"dtype\":\"U8\",\"shape\":[5],\"data_offsets\":[0,5]}"),
		   "the header is compact JSON");
	free(b1);
	free(b2);
}

/* ---- slices --------------------------------------------------------------- */

#define SD0 6
#define SD1 7
#define SD2 3
#define SN (SD0 * SD1 * SD2)

/* k as binary16 bits, for integers 0 <= k < 2048 (exact). */
static uint16_t f16_int(int k)
{
	int e = 0;

	if (!k)
		return 0;
	while (k >> (e + 1))
		e++;
	return (uint16_t)((e + 15) << 10 | ((k << (10 - e)) & 0x3ff));
}

/* The slice st_read_f32 should produce, one element at a time. */
static size_t naive_slice(const int64_t *shape, int dim, const int64_t *starts,
			  const int64_t *lens, int nr, float *out)
{
	int64_t oshape[3], idx[3] = { 0, 0, 0 };
	size_t n = 0;
	int64_t total = 0;

	for (int r = 0; r < nr; r++)
		total += lens[r];
	memcpy(oshape, shape, sizeof oshape);
	oshape[dim] = total;
	if (!oshape[0] || !oshape[1] || !oshape[2])
		return 0;
	for (;;) {
		int64_t src[3] = { idx[0], idx[1], idx[2] }, c = idx[dim];
		int r = 0;

		while (c >= lens[r])
			c -= lens[r++];
		src[dim] = starts[r] + c;
		out[n++] = (float)((src[0] * shape[1] + src[1]) * shape[2] + src[2]);
		int d = 2;
		while (d >= 0 && ++idx[d] == oshape[d])
			idx[d--] = 0;
		if (d < 0)
			return n;
	}
}

static void test_slices(void)
{
	static const int64_t shape[3] = { SD0, SD1, SD2 };
	static const struct {
		int dim, nr;
		int64_t starts[4], lens[4];
	} cases[] = {
		{ 0, 3, { 4, 0, 1 }, { 2, 1, 3 } },
		{ 0, 1, { 5 }, { 1 } },
		{ 0, 1, { 0 }, { SD0 } },
		{ 0, 2, { 2, 3 }, { 0, 2 } },
		{ 0, 2, { 3, 3 }, { 2, 2 } },
		{ 1, 4, { 5, 0, 3, 1 }, { 2, 3, 0, 1 } },
		{ 1, 2, { 6, 0 }, { 1, 1 } },
		{ 1, 1, { 0 }, { SD1 } },
		{ 1, 1, { 4 }, { 0 } },
		{ 1, 2, { 7, 0 }, { 0, 1 } },
		{ 2, 2, { 2, 0 }, { 1, 2 } },
	};
	static float f32[SN], got[SN * 2], want[SN * 2];
	static double f64[SN];
	static uint16_t f16[SN], bf16[SN];
	struct st_tensor t[4];
	struct st_file *f;

	for (int k = 0; k < SN; k++) {
		uint32_t bits;

		f32[k] = (float)k;
		f64[k] = k;
		f16[k] = f16_int(k);
		memcpy(&bits, &f32[k], sizeof bits);
		bf16[k] = (uint16_t)(bits >> 16);
	}
	t[0] = tensor("x.f32", ST_F32, 3, shape, f32, sizeof f32);
	t[1] = tensor("x.f16", ST_F16, 3, shape, f16, sizeof f16);
	t[2] = tensor("x.bf16", ST_BF16, 3, shape, bf16, sizeof bf16);
	t[3] = tensor("x.f64", ST_F64, 3, shape, f64, sizeof f64);
	UNIT_CHECK(save("slices.safetensors", t, 4, NULL, 0), "write the slice file");
	f = open_or_say(at("slices.safetensors"));
	if (!f)
		return;
	for (int i = 0; i < 4; i++) {
		const struct st_tensor *x = st_find(f, t[i].name);

		UNIT_CHECK(x && st_read_f32(f, x, -1, NULL, NULL, 0, got) &&
			   same_all(got, f32, SN), "%s whole", t[i].name);
		for (size_t c = 0; x && c < sizeof cases / sizeof cases[0]; c++) {
			size_t n = naive_slice(shape, cases[c].dim, cases[c].starts,
					       cases[c].lens, cases[c].nr, want);
			bool ok;

			for (size_t j = 0; j < sizeof got / sizeof got[0]; j++)
				got[j] = -1;
			ok = st_read_f32(f, x, cases[c].dim, cases[c].starts, cases[c].lens,
					 cases[c].nr, got);
			UNIT_CHECK(ok && same_all(got, want, n) && got[n] == -1,
				   "%s dim %d, %d ranges starting at %" PRId64 ": %zu elements%s%s",
				   t[i].name, cases[c].dim, cases[c].nr,
				   cases[c].starts[0], n, ok ? "" : ": ", ok ? "" : g_error()->msg);
		}
	}

	/* bad ranges: an error naming the problem, and dst left alone */
	static const struct {
		int dim, nr;
		int64_t start, len;
		const char *want;
	} bad[] = {
		{ 0, 1, -1, 2, "range 0 (start -1, length 2) is outside [0, 6) of dim 0" },
		{ 0, 1, 5, 2, "range 0 (start 5, length 2) is outside [0, 6) of dim 0" },
		{ 1, 1, 8, 0, "range 0 (start 8, length 0) is outside [0, 7) of dim 1" },
		{ 1, 1, 2, -1, "range 0 (start 2, length -1) is outside [0, 7) of dim 1" },
		{ 0, 1, 0, INT64_MAX, "length 9223372036854775807) is outside" },
		{ 3, 1, 0, 1, "dim 3 is not one of its 3 dimensions" },
		{ -1, 1, 0, 1, "dim -1 is not one of its 3 dimensions" },
		{ 0, -2, 0, 1, "-2 ranges" },
	};
	for (size_t c = 0; c < sizeof bad / sizeof bad[0]; c++) {
		got[0] = -1;
		bool ok = st_read_f32(f, st_find(f, "x.f32"), bad[c].dim, &bad[c].start,
				      &bad[c].len, bad[c].nr, got);
		UNIT_CHECK(!ok && g_error()->status == G_ERR_BIND &&
			   strstr(g_error()->msg, bad[c].want) && got[0] == -1 &&
			   !strncmp(g_error()->msg, "tensor 'x.f32': ", 16),
			   "refuse: %s (%s)", bad[c].want, ok ? "accepted" : g_error()->msg);
	}
	st_close(f);
}

/* ---- conversions ------------------------------------------------------------ */

static void test_conversions(void)
{
	static const uint16_t h[] = { 0x0000, 0x8000, 0x0001, 0x8001, 0x03ff, 0x0400,
				      0x3c00, 0x3555, 0x7bff, 0xfbff, 0x7c00, 0xfc00,
				      0x7e00, 0xfe01 };
	static const float hw[] = { 0.0f, -0.0f, 0x1p-24f, -0x1p-24f, 0x3ffp-24f,
				    0x1p-14f, 1, 0x1.554p-2f, 65504, -65504,
				    INFINITY, -INFINITY, NAN, NAN };
	static const uint16_t b[] = { 0x0000, 0x8000, 0x0001, 0x8001, 0x007f, 0x0080,
				      0x3f80, 0x7f7f, 0x7f80, 0xff80, 0x7fc0, 0xffc1 };
	static const float bw[] = { 0.0f, -0.0f, 0x1p-133f, -0x1p-133f, 0x7fp-133f,
				    0x1p-126f, 1, 0x1.fep127f, INFINITY, -INFINITY,
				    NAN, NAN };
	static const double d[] = {
		0.1, 1.0 / 3, 1 + 0x1p-24, 1 + 0x3p-24, 1 + 0x1p-24 + 0x1p-50,
		1e300, -1e300, 0x1.fffffefffffffp127, 0x1.ffffffp127, 1e-310,
		0x1p-149, 0x1p-150, 0x1.8p-150, -0.0, NAN, -INFINITY,
	};
	static const float dw[] = {
		0.1f, 1.0f / 3, 1, 1 + 0x1p-22f, 1 + 0x1p-23f,
		INFINITY, -INFINITY, FLT_MAX, INFINITY, 0.0f,
		0x1p-149f, 0.0f, 0x1p-149f, -0.0f, NAN, -INFINITY,
	};
	const int64_t hn[] = { sizeof h / sizeof h[0] }, bn[] = { sizeof b / sizeof b[0] },
		      dn[] = { sizeof d / sizeof d[0] };
	struct st_tensor t[3] = {
		tensor("h", ST_F16, 1, hn, h, sizeof h),
		tensor("b", ST_BF16, 1, bn, b, sizeof b),
		tensor("d", ST_F64, 1, dn, d, sizeof d),
	};
	struct st_file *f;
	float out[16];
	uint32_t bits;

	UNIT_CHECK(save("special.safetensors", t, 3, NULL, 0), "write the special values");
	f = open_or_say(at("special.safetensors"));
	if (!f)
		return;
	UNIT_CHECK(st_read_f32(f, st_find(f, "h"), -1, NULL, NULL, 0, out) &&
		   same_all(out, hw, (size_t)hn[0]),
		   "F16: zeros, subnormals, the largest, infinities, NaN");
	memcpy(&bits, &out[13], sizeof bits);
	UNIT_CHECK(bits == 0xffc02000, "F16 NaN keeps its sign and payload (%08" PRIx32 ")", bits);
	UNIT_CHECK(st_read_f32(f, st_find(f, "b"), -1, NULL, NULL, 0, out) &&
		   same_all(out, bw, (size_t)bn[0]),
		   "BF16: zeros, subnormals, the largest, infinities, NaN");
	memcpy(&bits, &out[11], sizeof bits);
	UNIT_CHECK(bits == 0xffc10000, "BF16 NaN keeps its sign and payload (%08" PRIx32 ")", bits);
	UNIT_CHECK(st_read_f32(f, st_find(f, "d"), -1, NULL, NULL, 0, out) &&
		   same_all(out, dw, (size_t)dn[0]),
		   "F64: round to nearest even, overflow to infinity, underflow to 0");
	st_close(f);
}

/* ---- Python's safetensors ---------------------------------------------------- */

/* `write PATH` writes the tensors below with the reference implementation;
 * `check PATH` reads PATH with it and exits 0 when it holds exactly them. */
static const char py_script[] =
	"import ctypes, struct, sys\n"
	"import safetensors\n"
	"T = {\n"
	"    'p.f32': ('float32', 'F32', [2, 3], struct.pack('<6f', 1, -2, 0.5, 3e38, -0.0, 7)),\n"
	"    'p.bf16': ('bfloat16', 'BF16', [3], struct.pack('<3H', 0x3f80, 0xc040, 0x0001)),\n"
	"    'p.f16': ('float16', 'F16', [2], struct.pack('<2H', 0x3c00, 0x0001)),\n"
	"    'p.f64': ('float64', 'F64', [1], struct.pack('<d', 0.1)),\n"
	"    'p.i64': ('int64', 'I64', [2], struct.pack('<2q', -1, 1 << 40)),\n"
	"}\n"
	"M = {'format': 'pt', 'who': 'python'}\n"
	"if sys.argv[1] == 'write':\n"
	"    keep, spec = [], {}\n"
	"    for k, (dt, _, shape, data) in T.items():\n"
	"        if hasattr(safetensors, 'TensorSpec'):\n"
	"            buf = ctypes.create_string_buffer(data, len(data))\n"
	"            keep.append(buf)\n"
	"            spec[k] = safetensors.TensorSpec(dtype=dt, shape=shape,\n"
	"                data_ptr=ctypes.addressof(buf), data_len=len(data))\n"
	"        else:\n"
	"            spec[k] = {'dtype': dt, 'shape': shape, 'data': data}\n"
	"    safetensors.serialize_file(spec, sys.argv[2], metadata=M)\n"
	"else:\n"
	"    raw = open(sys.argv[2], 'rb').read()\n"
	"    got = {k: (v['dtype'], list(v['shape']), bytes(v['data']))\n"
	"           for k, v in safetensors.deserialize(raw)}\n"
	"    want = {k: (st, shape, data) for k, (_, st, shape, data) in T.items()}\n"
	"    sys.exit(0 if got == want else 1)\n";

static void test_python(void)
{
	static const float p_f32[6] = { 1, -2, 0.5f, 3e38f, -0.0f, 7 };
	static const uint16_t p_bf16[3] = { 0x3f80, 0xc040, 0x0001 };
	static const uint16_t p_f16[2] = { 0x3c00, 0x0001 };
	static const double p_f64[1] = { 0.1 };
	static const int64_t p_i64[2] = { -1, INT64_C(1) << 40 };
	static const int64_t s23[] = { 2, 3 }, s3[] = { 3 }, s2[] = { 2 }, s1[] = { 1 };
	const struct st_tensor t[5] = {
		tensor("p.f32", ST_F32, 2, s23, p_f32, sizeof p_f32),
		tensor("p.bf16", ST_BF16, 1, s3, p_bf16, sizeof p_bf16),
		tensor("p.f16", ST_F16, 1, s2, p_f16, sizeof p_f16),
		tensor("p.f64", ST_F64, 1, s1, p_f64, sizeof p_f64),
		tensor("p.i64", ST_I64, 1, s2, p_i64, sizeof p_i64),
	};
	static const char *const meta[] = { "format", "pt", "who", "python" };
	char cmd[2048];
	struct st_file *f;
	bool all = true;

	if (system("python3 -c 'import safetensors' >/dev/null 2>&1") != 0) {
		UNIT_CHECK(true, "interoperation with Python's safetensors # SKIP "
			   "python3 cannot import safetensors: files of the reference "
			   "writer are NOT tested");
		return;
	}
	UNIT_CHECK(put_file(at("interop.py"), py_script, sizeof py_script - 1),
		   "write the Python script");
	snprintf(cmd, sizeof cmd, "python3 '%s' write '%s'", at("interop.py"),
		 at("python.safetensors"));
	UNIT_CHECK(system(cmd) == 0, "Python's safetensors writes a file");
	f = open_or_say(at("python.safetensors"));
	UNIT_CHECK(f, "open the file Python wrote");
	if (f) {
		for (size_t i = 0; i < 5; i++)
			all &= same_tensor(f, st_find(f, t[i].name), &t[i]);
		UNIT_CHECK(all && st_count(f) == 5, "its tensors are the ones Python was given");
		UNIT_CHECK(st_meta(f, "who") && !strcmp(st_meta(f, "who"), "python") &&
			   st_meta_count(f) == 2, "and its metadata");
		st_close(f);
	}
	UNIT_CHECK(save("for_python.safetensors", t, 5, meta, 2), "write the same tensors");
	snprintf(cmd, sizeof cmd, "python3 '%s' check '%s'", at("interop.py"),
		 at("for_python.safetensors"));
	UNIT_CHECK(system(cmd) == 0, "Python's safetensors reads them back exactly");
}

/* ---- rejections ---------------------------------------------------------------- */

/* buf must be refused as malformed, from a file and from memory alike, with
 * one line that starts with the file's name and holds want. */
static void reject(const char *what, const void *buf, size_t len, const char *want)
{
	const char *path = at("bad.safetensors");
	char err1[G_ERROR_MSG];
	struct st_file *f1 = NULL, *f2 = NULL;
	bool ok1, ok2;
	int st1;

	put_file(path, buf, len);
	ok1 = st_open(&f1, path);
	st1 = g_error()->status;
	snprintf(err1, sizeof err1, "%s", g_error()->msg);
	ok2 = st_open_buffer(&f2, buf, len, path);
	UNIT_CHECK(!ok1 && !ok2 && !f1 && !f2 && st1 == G_ERR_FORMAT &&
		   g_error()->status == G_ERR_FORMAT && !strcmp(err1, g_error()->msg) &&
		   !strncmp(err1, path, strlen(path)) && strstr(err1, want) &&
		   !strchr(err1, '\n'),
		   "refuse %s: %s", what, ok1 ? "(accepted)" : err1 + strlen(dir) + 1);
	st_close(f1);
	st_close(f2);
}

static void reject_json(const char *what, const char *json, size_t dlen,
			const char *want)
{
	size_t len;
	uint8_t *buf = image(json, dlen, &len);

	reject(what, buf, len, want);
	free(buf);
}

static bool accept(const char *json, size_t dlen)
{
	size_t len;
	uint8_t *buf = image(json, dlen, &len);
	struct st_file *f;
	bool ok = st_open_buffer(&f, buf, len, "good");

	if (!ok)
		printf("# %s\n", g_error()->msg);
	st_close(f);
	free(buf);
	return ok;
}

static void test_rejections(void)
{
	static const uint8_t seven[7] = { 1, 0, 0, 0, 0, 0, 0 };
	uint8_t hdr[32] = { 100 };

	reject("an empty file", "", 0, "file is 0 bytes, too short for the 8-byte header length");
	reject("7 bytes", seven, sizeof seven, "file is 7 bytes");
	reject("a header length past the end", hdr, sizeof hdr,
	       "header length 100 runs past the end of the file (32 bytes)");
	memset(hdr, 0, sizeof hdr);
	hdr[7] = 0x10;	/* 2^60 */
	reject("a header of 2^60 bytes", hdr, sizeof hdr,
	       "header length 1152921504606846976 runs past the end of the file");
	reject_json("a header that is not JSON", "{\"a\": ", 0, "header is not valid JSON");
	reject_json("an empty header", "", 0, "header is not valid JSON (at header byte 0)");
	reject_json("JSON followed by more", "{} {}", 0, "header is not valid JSON (at header byte 3)");
	reject_json("a header that is not an object", "[1, 2]", 0, "header is not a JSON object");
	reject_json("a header that is a string", "\"x\"", 0, "header is not a JSON object");
	reject_json("a header that is not UTF-8", "{\"\xc0\xaf\": 1}", 0,
		    "header is not UTF-8 at header byte 2");
	reject_json("a surrogate in UTF-8", "{\"\xed\xa0\x80\": 1}", 0, "header is not UTF-8");
	reject_json("a cut 3-byte character", "{\"\xe4\xb8x\": 1}", 0, "header is not UTF-8 at header byte 2");
	reject_json("a control byte", "{\"a\x01\": 1}", 0, "header has control byte 0x01 at header byte 3");
	reject_json("an entry that is not an object", "{\"w\": [1]}", 0,
		    "tensor 'w': entry is not an object");
	reject_json("an unknown dtype", "{\"w\": {\"dtype\": \"F12\", \"shape\": [1], \"data_offsets\": [0, 4]}}", 4,
		    "tensor 'w': unknown dtype 'F12'");
	reject_json("a lower-case dtype", "{\"w\": {\"dtype\": \"f32\", \"shape\": [1], \"data_offsets\": [0, 4]}}", 4,
		    "unknown dtype 'f32'");
	reject_json("a dtype that is not a string", "{\"w\": {\"dtype\": 4, \"shape\": [1], \"data_offsets\": [0, 4]}}", 4,
		    "dtype is not a string");
	reject_json("a negative dimension", "{\"w\": {\"dtype\": \"F32\", \"shape\": [2, -1], \"data_offsets\": [0, 4]}}", 4,
		    "tensor 'w': shape[1] is not an integer in [0, 2^53)");
	reject_json("a fractional dimension", "{\"w\": {\"dtype\": \"F32\", \"shape\": [1.5], \"data_offsets\": [0, 4]}}", 4,
		    "shape[0] is not an integer");
	reject_json("a dimension in a string", "{\"w\": {\"dtype\": \"F32\", \"shape\": [\"2\"], \"data_offsets\": [0, 8]}}", 8,
		    "shape[0] is not an integer");
	reject_json("a dimension past 2^53", "{\"w\": {\"dtype\": \"F32\", \"shape\": [0, 9007199254740993], \"data_offsets\": [0, 0]}}", 0,
		    "shape[1] is not an integer");
	reject_json("a shape that is not an array", "{\"w\": {\"dtype\": \"F32\", \"shape\": 1, \"data_offsets\": [0, 4]}}", 4,
		    "shape is not an array");
	reject_json("9 dimensions", "{\"w\": {\"dtype\": \"F32\", \"shape\": [1,1,1,1,1,1,1,1,1], \"data_offsets\": [0, 4]}}", 4,
		    "shape has 9 dimensions; at most 8 are supported");
	reject_json("an element count past 64 bits", "{\"w\": {\"dtype\": \"F32\", \"shape\": [4294967296, 4294967296, 0], \"data_offsets\": [0, 0]}}", 0,
		    "shape [4294967296, 4294967296, 0] of F32 has too many elements for 64 bits");
	reject_json("offsets past the data", "{\"w\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]}}", 7,
		    "tensor 'w': data_offsets [0, 8] run past the end of the data (7 bytes)");
	reject_json("offsets far past the data", "{\"w\": {\"dtype\": \"U8\", \"shape\": [1], \"data_offsets\": [9007199254740990, 9007199254740991]}}", 8,
		    "run past the end of the data");
	reject_json("end before begin", "{\"w\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [8, 4]}}", 8,
		    "data_offsets [8, 4] end before they begin");
	reject_json("one offset", "{\"w\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [4]}}", 8,
		    "data_offsets is not a pair of integers");
	reject_json("three offsets", "{\"w\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4, 8]}}", 8,
		    "data_offsets is not a pair of integers");
	reject_json("a negative offset", "{\"w\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [-4, 0]}}", 8,
		    "data_offsets is not a pair of integers");
	reject_json("offsets in an object", "{\"w\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": {\"a\": 0, \"b\": 4}}}", 8,
		    "data_offsets is not a pair of integers");
	reject_json("a size mismatch",
		    "{\"blocks.0.attn.to_q.weight\": {\"dtype\": \"F32\", \"shape\": [8, 8], \"data_offsets\": [0, 100]}}", 100,
		    "bad.safetensors: tensor 'blocks.0.attn.to_q.weight': data_offsets [0, 100] hold 100 bytes but shape [8, 8] of F32 needs 256");
	reject_json("a size mismatch of an empty tensor", "{\"w\": {\"dtype\": \"BF16\", \"shape\": [0], \"data_offsets\": [0, 2]}}", 2,
		    "data_offsets [0, 2] hold 2 bytes but shape [0] of BF16 needs 0");
	reject_json("overlapping tensors",
		    "{\"a\": {\"dtype\": \"F32\", \"shape\": [4], \"data_offsets\": [0, 16]},"
		    " \"b\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [20, 28]},"
		    " \"c\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [12, 20]}}", 28,
		    "tensors 'a' [0, 16] and 'c' [12, 20] overlap");
	reject_json("a tensor inside another",
		    "{\"a\": {\"dtype\": \"U8\", \"shape\": [16], \"data_offsets\": [0, 16]},"
		    " \"b\": {\"dtype\": \"U8\", \"shape\": [2], \"data_offsets\": [4, 6]}}", 16,
		    "tensors 'a' [0, 16] and 'b' [4, 6] overlap");
	reject_json("two tensors at the same bytes",
		    "{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]},"
		    " \"b\": {\"dtype\": \"I32\", \"shape\": [1], \"data_offsets\": [0, 4]}}", 4,
		    "overlap");
	reject_json("duplicate names",
		    "{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]},"
		    " \"b\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [4, 8]},"
		    " \"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [8, 12]}}", 12,
		    "bad.safetensors: tensor 'a' appears twice");
	reject_json("an unknown key in an entry",
		    "{\"w\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4], \"offset\": 0}}", 4,
		    "tensor 'w': unknown key 'offset'");
	reject_json("a key given twice in an entry",
		    "{\"w\": {\"dtype\": \"F32\", \"shape\": [1], \"shape\": [1], \"data_offsets\": [0, 4]}}", 4,
		    "tensor 'w': key 'shape' appears twice");
	reject_json("no data_offsets", "{\"w\": {\"dtype\": \"F32\", \"shape\": [1]}}", 4,
		    "tensor 'w': no \"data_offsets\"");
	reject_json("no dtype", "{\"w\": {\"shape\": [1], \"data_offsets\": [0, 4]}}", 4,
		    "tensor 'w': no \"dtype\"");
	reject_json("a name with a newline", "{\"a\\nb\": 1}", 0, "tensor 'a?b': entry is not an object");
	for (int skew = 0; skew < 2; skew++) {
		/* a name cut for the message is cut between characters */
		char json[512] = "{\"x", *p = json + (skew ? 3 : 2);

		for (int i = 0; i < 150; i++, p += 2)
			memcpy(p, "\xc3\xa9", 2);
		strcpy(p, "\": 1}");
		reject_json("a long name", json, 0, "\xc3\xa9...': entry is not an object");
	}
	reject_json("metadata that is not an object", "{\"__metadata__\": [\"a\"]}", 0,
		    "__metadata__ is not an object");
	reject_json("non-string metadata", "{\"__metadata__\": {\"format\": \"pt\", \"n\": 3}}", 0,
		    "bad.safetensors: __metadata__: value of 'n' is not a string");
	reject_json("null metadata", "{\"__metadata__\": {\"n\": null}}", 0,
		    "__metadata__: value of 'n' is not a string");
	reject_json("a metadata key twice", "{\"__metadata__\": {\"k\": \"1\", \"j\": \"x\", \"k\": \"2\"}}", 0,
		    "__metadata__: key 'k' appears twice");
	reject_json("two __metadata__", "{\"__metadata__\": {}, \"__metadata__\": {}}", 0,
		    "__metadata__ appears twice");

	/* past the header limit: a sparse file, so the test stays small */
	{
		const char *path = at("huge.safetensors");
		uint64_t n = (UINT64_C(100) << 20) + 1;
		uint8_t le[8];
		struct st_file *f;
		bool ok = false;
		int fd;

		for (int i = 0; i < 8; i++)
			le[i] = (uint8_t)(n >> 8 * i);
		fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
		if (fd >= 0 && write(fd, le, 8) == 8 && !ftruncate(fd, (off_t)(8 + n + 16)))
			ok = !st_open(&f, path);
		if (fd >= 0)
			close(fd);
		UNIT_CHECK(ok && strstr(g_error()->msg, "header length 104857601 exceeds the limit of 100 MiB"),
			   "refuse a header past 100 MiB: %s", g_error()->msg);
		unlink(path);
	}
	UNIT_CHECK(!st_open((struct st_file *[1]){ NULL }, dir) &&
		   g_error()->status == G_ERR_IO && strstr(g_error()->msg, ": not a regular file"),
		   "refuse a directory (I/O): %s", g_error()->msg);
	UNIT_CHECK(!st_open((struct st_file *[1]){ NULL }, at("missing")) &&
		   g_error()->status == G_ERR_IO &&
		   strstr(g_error()->msg, "missing: cannot open: No such file"),
		   "refuse a missing file (I/O): %s", g_error()->msg);

	/* every truncation of a valid file: the last tensor ends at the end */
	{
		static const int64_t two[] = { 2 };
		static const float v[2] = { 1, 2 };
		static const uint16_t w[2] = { 3, 4 };
		const struct st_tensor t[2] = {
			tensor("v", ST_F32, 1, two, v, sizeof v),
			tensor("w", ST_BF16, 1, two, w, sizeof w),
		};
		static const char *const kv[] = { "k", "v" };
		uint8_t *buf;
		size_t bad = SIZE_MAX, full = 0;
		struct st_file *f;

		save("small.safetensors", t, 2, kv, 1);
		buf = get_file(at("small.safetensors"), &full);
		UNIT_CHECK(buf && st_open_buffer(&f, buf, full, "small"),
			   "the small file opens (%zu bytes)", full);
		if (buf)
			st_close(f);
		for (size_t n = 0; buf && n < full && bad == SIZE_MAX; n++)
			if (st_open_buffer(&f, buf, n, "small") ||
			    strncmp(g_error()->msg, "small: ", 7) || strchr(g_error()->msg, '\n'))
				bad = n;
		UNIT_CHECK(buf && bad == SIZE_MAX,
			   "every truncation of it is refused in memory (first bad: %zu)", bad);
		for (size_t n = 0; buf && n < full && bad == SIZE_MAX; n++) {
			put_file(at("cut.safetensors"), buf, n);
			if (st_open(&f, at("cut.safetensors")))
				bad = n;
		}
		UNIT_CHECK(buf && bad == SIZE_MAX,
			   "every truncation of it is refused from a file (first bad: %zu)", bad);
		free(buf);
	}
}

/* Odd but valid files, and the limits of what is valid. */
static void test_accepts(void)
{
	UNIT_CHECK(accept("{}", 0), "no tensors");
	UNIT_CHECK(accept("{\"__metadata__\": {}}", 0), "empty metadata");
	UNIT_CHECK(accept(" \t\r\n{\"w\": {\"data_offsets\": [0, 4], \"shape\": [], \"dtype\": \"I32\"}} \n  ", 4),
		   "whitespace around the header, keys in any order, a scalar");
	UNIT_CHECK(accept("{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]},"
			  " \"b\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [9, 13]}}", 20),
		   "gaps in the data, an unaligned tensor, an odd header length");
	UNIT_CHECK(accept("{\"a\": {\"dtype\": \"U8\", \"shape\": [8], \"data_offsets\": [0, 8]},"
			  " \"e\": {\"dtype\": \"F32\", \"shape\": [0, 3], \"data_offsets\": [4, 4]}}", 8),
		   "an empty tensor inside another's bytes");
	UNIT_CHECK(accept("{\"a\": {\"dtype\": \"F32\", \"shape\": [0, 9007199254740991, 9007199254740991], \"data_offsets\": [0, 0]}}", 0),
		   "a 0 before huge dimensions");
	UNIT_CHECK(accept("{\"\xe4\xb8\xad.\xf0\x9f\x98\x80\": {\"dtype\": \"F8_E4M3\", \"shape\": [2], \"data_offsets\": [0, 2]}}", 2),
		   "a UTF-8 name and an F8 dtype");
	UNIT_CHECK(accept("{\"a\": {\"dtype\": \"F32\", \"shape\": [2.0], \"data_offsets\": [0, 8e0]}}", 8),
		   "integers written with a fraction or exponent");
}

/* st_write_fill: the tensors' bytes from a callback, as the tensor is
 * written; a failing callback's message, and no file. */
static bool fill_from(void *ud, size_t i, void *buf)
{
	const struct st_tensor *t = ud;

	if (!strcmp(t[i].name, "e.i64") && !t[i].data) {
		g_raise(G_ERR_IO, "no bytes for %s", t[i].name);
		return false;
	}
	memcpy(buf, t[i].data, t[i].nbytes);
	return true;
}

static void test_write_fill(void)
{
	struct st_tensor t[8], bare[8];
	size_t n = rt_tensors(t), len1 = 0, len2 = 0;
	uint8_t *b1, *b2;

	/* the callback sees every tensor's data; the written tensors carry none */
	for (size_t i = 0; i < n; i++) {
		bare[i] = t[i];
		bare[i].data = NULL;
	}
	UNIT_CHECK(save("plain.safetensors", t, n, rt_meta, 2) &&
		   st_write_fill(at("filled.safetensors"), bare, n, rt_meta, 2, fill_from, t),
		   "write with and without a callback: %s", g_error()->msg);
	b1 = get_file(at("plain.safetensors"), &len1);
	b2 = get_file(at("filled.safetensors"), &len2);
	UNIT_CHECK(b1 && b2 && len1 == len2 && !memcmp(b1, b2, len1),
		   "the same bytes either way (%zu, %zu)", len1, len2);
	free(b1);
	free(b2);
	/* e.i64's bytes are refused by the callback */
	for (size_t i = 0; i < n; i++)
		if (!strcmp(t[i].name, "e.i64"))
			t[i].data = NULL;
	UNIT_CHECK(!st_write_fill(at("failed.safetensors"), bare, n, NULL, 0, fill_from, t) &&
		   g_error()->status == G_ERR_IO && !strcmp(g_error()->msg, "no bytes for e.i64") &&
		   access(at("failed.safetensors"), F_OK) != 0 &&
		   access(at("failed.safetensors.tmp"), F_OK) != 0,
		   "a failing callback: its raise unchanged, no file left: %s", g_error()->msg);
	UNIT_CHECK(!st_write(at("failed.safetensors"), bare, n, NULL, 0) &&
		   strstr(g_error()->msg, "no data"), "without a callback, tensors need data: %s", g_error()->msg);
}

static void test_write_rejections(void)
{
	static const float v[4] = { 0 };
	static const struct {
		const char *what;
		struct st_tensor t[2];
		size_t n;
		const char *want;
	} bad[] = {
		{ "a duplicate name", { { "a", ST_F32, 1, { 2 }, v, 8, 0 }, { "a", ST_F32, 1, { 2 }, v, 8, 0 } }, 2,
		  "tensor 'a' appears twice" },
		{ "nbytes off its shape", { { "a", ST_F32, 2, { 2, 2 }, v, 12, 0 } }, 1,
		  "tensor 'a': nbytes says 12 bytes but shape [2, 2] of F32 needs 16" },
		{ "a reserved name", { { "__metadata__", ST_F32, 1, { 2 }, v, 8, 0 } }, 1,
		  "the name __metadata__ is reserved" },
		{ "a bad dtype", { { "a", (enum st_dtype)99, 1, { 2 }, v, 8, 0 } }, 1,
		  "dtype 99 is not an enum st_dtype" },
		{ "9 dimensions", { { "a", ST_F32, 9, { 1 }, v, 4, 0 } }, 1, "ndim 9 is outside [0, 8]" },
		{ "a negative dimension", { { "a", ST_F32, 1, { -2 }, v, 0, 0 } }, 1,
		  "shape[0] = -2 is outside [0, 2^53)" },
		{ "no name", { { NULL, ST_F32, 1, { 2 }, v, 8, 0 } }, 1, "tensor 0 has no UTF-8 name" },
		{ "a name not UTF-8", { { "a", ST_F32, 1, { 2 }, v, 8, 0 }, { "a\xff", ST_F32, 1, { 2 }, v, 8, 0 } }, 2,
		  "tensor 1 has no UTF-8 name" },
		{ "no data", { { "a", ST_F32, 1, { 2 }, NULL, 8, 0 } }, 1, "tensor 'a': no data" },
	};
	static const struct st_tensor huge[2] = {
		{ "a", ST_F32, 1, { INT64_C(1) << 50 }, v, (size_t)1 << 52, 0 },
		{ "b", ST_F32, 1, { INT64_C(1) << 50 }, v, (size_t)1 << 52, 0 },
	};
	static const char *const dupmeta[] = { "k", "1", "k", "2" };
	static const char *const nullmeta[] = { "k", NULL };

	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		bool ok = st_write(at("w.safetensors"), bad[i].t, bad[i].n, NULL, 0);

		UNIT_CHECK(!ok && g_error()->status == G_ERR_INVALID &&
			   strstr(g_error()->msg, bad[i].want) &&
			   access(at("w.safetensors"), F_OK) != 0 &&
			   access(at("w.safetensors.tmp"), F_OK) != 0,
			   "st_write refuses %s, creating nothing: %s", bad[i].what, g_error()->msg);
	}
	UNIT_CHECK(!st_write(at("w.safetensors"), NULL, 0, dupmeta, 2) &&
		   strstr(g_error()->msg, "__metadata__: key 'k' appears twice"),
		   "st_write refuses a metadata key twice: %s", g_error()->msg);
	UNIT_CHECK(!st_write(at("w.safetensors"), NULL, 0, nullmeta, 1) &&
		   strstr(g_error()->msg, "__metadata__: entry 0 is not a pair of UTF-8 strings"),
		   "st_write refuses a NULL metadata value: %s", g_error()->msg);
	UNIT_CHECK(!st_write(at("no/such/dir.safetensors"), NULL, 0, NULL, 0) &&
		   g_error()->status == G_ERR_IO && strstr(g_error()->msg, "cannot write") && strstr(g_error()->msg, "No such file"),
		   "st_write reports an unwritable path: %s", g_error()->msg);
	UNIT_CHECK(!st_write(at("w.safetensors"), huge, 2, NULL, 0) &&
		   strstr(g_error()->msg, "the data reaches 2^53 bytes"),
		   "st_write refuses data the reader would: %s", g_error()->msg);
	mkdir(at("adir"), 0755);
	UNIT_CHECK(!st_write(at("adir"), NULL, 0, NULL, 0) &&
		   strstr(g_error()->msg, "Is a directory") && access(at("adir.tmp"), F_OK) != 0,
		   "st_write refuses a folder, leaving no temporary: %s", g_error()->msg);
	rmdir(at("adir"));
	UNIT_CHECK(st_write(at("w.safetensors"), NULL, 0, NULL, 0) &&
		   accept("{}", 0), "st_write of nothing");
}

static void remove_dir(void)
{
	DIR *d = opendir(dir);
	struct dirent *e;

	while (d && (e = readdir(d)))
		if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
			unlink(at(e->d_name));
	if (d)
		closedir(d);
	rmdir(dir);
}

int main(void)
{
	const char *tmp = getenv("TMPDIR");

	snprintf(dir, sizeof dir, "%s/test_safetensors.XXXXXX", tmp && *tmp ? tmp : "/tmp");
	if (!mkdtemp(dir)) {
		perror(dir);
		return 1;
	}
	test_roundtrip();
	test_slices();
	test_conversions();
	test_python();
	test_rejections();
	test_accepts();
	test_write_rejections();
	test_write_fill();
	remove_dir();
	return unit_done();
}
