/* safetensors.h — reading and writing safetensors checkpoints.
 *
 * A safetensors file is an 8-byte little-endian header length N, N bytes of
 * UTF-8 JSON mapping each tensor name to its dtype, shape and byte range, and
 * then the data buffer those ranges index (row-major, little-endian).
 *
 * st_open reads the header alone and validates all of it before it returns,
 * so that every st_tensor it hands out has a known dtype, a shape whose
 * element count fits, and data that lies inside the file and matches the
 * shape exactly. The data is read only by st_read_f32 and st_read_raw, with
 * pread, run by run: a rank that reads only its slices of each weight reads
 * only their bytes (st_bytes_read counts them).
 *
 * Any number of threads may call st_find, st_at, st_meta, st_read_f32 and
 * st_read_raw on one open st_file at once.
 *
 * A function that fails returns false and raises into the calling thread's
 * error record (graph/error.h): G_ERR_IO when a file cannot be opened, read
 * or written, G_ERR_FORMAT when a file is malformed, G_ERR_BIND when a read
 * asks for what the tensor does not have, G_ERR_INVALID for st_write's bad
 * arguments, G_ERR_NOMEM. */
#ifndef DTPC_SAFETENSORS_H
#define DTPC_SAFETENSORS_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define ST_MAX_DIMS 8

/* The byte-sized dtypes of the format; st_dtype_name gives each one's
 * spelling in the header ("F32", "BF16", "F8_E4M3", ...). */
enum st_dtype {
	ST_F32,
	ST_F16,
	ST_BF16,
	ST_F64,
	ST_I64,
	ST_I32,
	ST_I16,
	ST_I8,
	ST_U64,
	ST_U32,
	ST_U16,
	ST_U8,
	ST_BOOL,
	ST_F8_E4M3,
	ST_F8_E5M2,
	ST_NDTYPES
};

/* One tensor. From st_find/st_at the name points into the st_file and stays
 * valid until st_close; its data is read with st_read_f32 or st_read_raw
 * (data is NULL; offset says where the bytes start within the file's data
 * buffer). For st_write the caller fills in everything but offset and keeps
 * ownership. */
struct st_tensor {
	const char *name;
	enum st_dtype dtype;
	int ndim;			/* 0 (a scalar) to ST_MAX_DIMS */
	int64_t shape[ST_MAX_DIMS];	/* shape[ndim..] unused */
	const void *data;		/* st_write's input only */
	size_t nbytes;			/* product of shape * dtype size */
	uint64_t offset;		/* from st_open: data_offsets[0] */
};

struct st_file;

/* The name the header uses ("F32"); NULL for a value outside the enum. */
const char *st_dtype_name(enum st_dtype dtype);
/* s fit for a one-line message, in buf: a control byte (a name may hold an
 * escaped newline) becomes '?', and a long s is cut at a character boundary
 * and ends in "...". size >= 4. */
const char *st_show(const char *s, char *buf, size_t size);
/* Bytes per element; 0 for a value outside the enum. */
size_t st_dtype_size(enum st_dtype dtype);
/* The element count: the product of the shape (1 for a scalar). */
int64_t st_numel(const struct st_tensor *t);

/* Opens path and validates its header. On success *out holds the open file
 * (release it with st_close); on failure *out is NULL and the raised message
 * is one line, starting with path, that names the tensor and the problem
 * (G_ERR_IO: path cannot be opened or read, or is no regular file;
 * G_ERR_FORMAT: its header is malformed). A file that shrinks while it is
 * open makes a later read fail with G_ERR_IO (not a signal). */
bool st_open(struct st_file **out, const char *path);
/* The same on len bytes at buf, which the caller owns and must keep unchanged
 * until st_close; name stands for the file in messages. */
bool st_open_buffer(struct st_file **out, const void *buf, size_t len, const char *name);
/* Closes the file and frees it; every pointer it handed out dies with it.
 * NULL is a no-op. */
void st_close(struct st_file *f);

/* The tensor called name, or NULL; O(log n). */
const struct st_tensor *st_find(const struct st_file *f, const char *name);
size_t st_count(const struct st_file *f);
/* The i-th tensor in strcmp order of names, i < st_count(f). */
const struct st_tensor *st_at(const struct st_file *f, size_t i);

/* The "__metadata__" value of key, or NULL; the string belongs to f. */
const char *st_meta(const struct st_file *f, const char *key);
size_t st_meta_count(const struct st_file *f);
/* The i-th metadata entry in strcmp order of keys, i < st_meta_count(f);
 * both strings belong to f. */
void st_meta_at(const struct st_file *f, size_t i, const char **key,
		const char **value);

/* Reads t, one of f's tensors, into dst as float32, restricted along dim to
 * the concatenation of the ranges [starts[i], starts[i] + lens[i]) for
 * i < nranges, in the order given: dst receives a tensor of t's shape with
 * shape[dim] replaced by the sum of lens, and must hold that many floats.
 * nranges == 0 reads the whole tensor (dim is then ignored; pass -1). F16 and
 * BF16 convert exactly, F64 rounds to nearest; any other dtype, a dim outside
 * the shape or a range outside shape[dim] is refused (G_ERR_BIND: the slice
 * asked for does not fit the tensor), with nothing written to dst; a failed
 * read is G_ERR_IO, with part of dst written. The message names the tensor,
 * not the file: the caller wraps it with the path it knows. */
bool st_read_f32(const struct st_file *f, const struct st_tensor *t, int dim,
		 const int64_t *starts, const int64_t *lens, int nranges, float *dst);
/* The same slice with its bytes as they are in the file, in t's dtype (any
 * dtype): dst holds st_dtype_size(t->dtype) bytes an element. */
bool st_read_raw(const struct st_file *f, const struct st_tensor *t, int dim,
		 const int64_t *starts, const int64_t *lens, int nranges, void *dst);
/* The bytes of data the reads of f have read so far (headers excluded). */
uint64_t st_bytes_read(const struct st_file *f);

/* Writes the n tensors (in that order, packed without gaps) and the nmeta
 * metadata pairs meta_kv[2 * i] = meta_kv[2 * i + 1] to path. The header is
 * padded with spaces to a multiple of 8 bytes, so the data starts 8-aligned;
 * the same arguments always give the same bytes. The file is written to
 * "path.tmp" and renamed over path, so that a reader never sees half of it.
 * Names and keys must be unique UTF-8; each nbytes must match its shape
 * (G_ERR_INVALID, before anything is created); a file that cannot be written
 * is G_ERR_IO, its message starting with path. */
bool st_write(const char *path, const struct st_tensor *tensors, size_t n,
	      const char *const *meta_kv, size_t nmeta);
/* Puts tensor i's nbytes bytes into buf; false, having raised why (one
 * line), stops the write. */
typedef bool (*st_fill_fn)(void *ud, size_t i, void *buf);
/* st_write with each tensor's bytes supplied by fill as it is written
 * (tensors[i].data is ignored): one tensor's bytes in memory at a time, so a
 * file larger than memory can be written. When fill fails, its raise is the
 * failure, unchanged, and nothing is left at path. */
bool st_write_fill(const char *path, const struct st_tensor *tensors, size_t n,
		   const char *const *meta_kv, size_t nmeta, st_fill_fn fill, void *ud);
#endif
