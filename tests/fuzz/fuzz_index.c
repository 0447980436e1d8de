/* fuzz_index.c — libFuzzer target: the reader of a sharded checkpoint's
 * *.safetensors.index.json (ckpt_index_parse).
 *
 * Any crash, sanitizer report, leak or hang is a bug; so is an error that is
 * not one terminated line, or an index accepted with entries out of order,
 * a tensor twice, a file index out of range, or a shard path that is
 * absolute or climbs out of the folder.
 *
 *   make BUILD=build build/fuzz/fuzz_index
 *   build/fuzz/fuzz_index -max_total_time=60 /tmp/index_corpus tests/fuzz/index_corpus
 *
 * tests/fuzz/index_corpus/ holds diffusers-style indexes and hostile ones. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "graph/error.h"
#include "runtime/weights.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* p stays inside the folder: relative, no ".." component. */
static int inside(const char *p)
{
	if (!*p || *p == '/')
		return 0;
	for (const char *c = p; *c; c += strcspn(c, "/"), c += *c == '/')
		if (strcspn(c, "/") == 2 && c[0] == '.' && c[1] == '.')
			return 0;
	return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct ckpt_index *x;

	if (!ckpt_index_parse((const char *)data, size, "fuzz.json", &x)) {
		const char *err = g_error()->msg;

		if (x || !memchr(err, '\0', G_ERROR_MSG) || strchr(err, '\n') ||
		    strncmp(err, "fuzz.json", 9))
			abort();
		return 0;
	}
	for (size_t i = 0; i < x->nentries; i++) {
		if (x->entries[i].file >= x->nfiles)
			abort();
		if (i && strcmp(x->entries[i - 1].name, x->entries[i].name) >= 0)
			abort();
	}
	for (size_t i = 0; i < x->nfiles; i++)
		if (!inside(x->files[i]) || (i && strcmp(x->files[i - 1], x->files[i]) >= 0))
			abort();
	ckpt_index_free(x);
	return 0;
}
