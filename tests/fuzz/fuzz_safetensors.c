/* fuzz_safetensors.c — libFuzzer target: the safetensors reader on one buffer.
 *
 * Opens the input with st_open_buffer and, when it opens, finds every tensor
 * by name and reads it whole, then in two out-of-order halves along its last
 * dimension, as a rank binding its slice would. Any crash, sanitizer report, leak or hang is
 * a bug: a bad file must only ever produce an error message.
 *
 *   clang -std=gnu11 -g -O1 -I. -fsanitize=fuzzer,address,undefined \
 *     -o /tmp/fuzz_st tests/fuzz/fuzz_safetensors.c runtime/safetensors.c -lcjson
 *   /tmp/fuzz_st -max_total_time=60 /tmp/st_corpus tests/fuzz/safetensors_corpus
 *
 * tests/fuzz/safetensors_corpus/ holds valid files from the unit test
 * (ST_FUZZ_SEEDS=DIR build/tests/test_safetensors writes them). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "graph/error.h"
#include "runtime/safetensors.h"

/* What one input may make the target allocate: the data sits inside the
 * input, so only a huge input could pass it. */
#define READ_CAP (64u << 20)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct st_file *f;
	size_t total = 0;

	if (!st_open_buffer(&f, data, size, "fuzz")) {
		if (!memchr(g_error()->msg, '\0', G_ERROR_MSG) || strchr(g_error()->msg, '\n'))
			abort();	/* every error is one terminated line */
		return 0;
	}
	for (size_t i = 0; i < st_count(f); i++) {
		const struct st_tensor *t = st_at(f, i);
		size_t n = (size_t)st_numel(t);
		int64_t starts[2], lens[2];
		float *dst;

		if (st_find(f, t->name) != t)
			abort();
		if (n > READ_CAP / sizeof *dst - total)
			break;
		total += n;
		dst = malloc(n * sizeof *dst + 1);
		if (!dst)
			break;
		if (st_read_f32(f, t, -1, NULL, NULL, 0, dst) && t->ndim) {
			/* the upper half, then the lower: as many elements again */
			int d = t->ndim - 1;

			lens[0] = t->shape[d] - t->shape[d] / 2;
			starts[0] = t->shape[d] / 2;
			lens[1] = t->shape[d] / 2;
			starts[1] = 0;
			if (!st_read_f32(f, t, d, starts, lens, 2, dst))
				abort();
		}
		free(dst);
	}
	for (size_t i = 0; i < st_meta_count(f); i++) {
		const char *key, *value;

		st_meta_at(f, i, &key, &value);
		if (st_meta(f, key) != value)
			abort();
	}
	st_close(f);
	return 0;
}
