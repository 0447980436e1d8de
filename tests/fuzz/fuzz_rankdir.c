/* fuzz_rankdir.c — libFuzzer target: what a --weights folder holds, and
 * whether a per-rank file is the one a rank of a graph may bind.
 *
 * The input is a folder listing (names, one a line) up to a line that is
 * empty, then the bytes of one safetensors file. The listing goes through
 * ckpt_classify; the file, when it opens, through ckpt_check_rank_file
 * against a fixed graph identity (rank 1 of 4). Any crash, sanitizer report,
 * leak or hang is a bug; so is an error that is not one terminated line, a
 * chosen name that is not in the listing, or a per-rank verdict for a
 * folder where some rank's file is missing.
 *
 *   make BUILD=build build/fuzz/fuzz_rankdir
 *   build/fuzz/fuzz_rankdir -max_total_time=60 /tmp/rankdir_corpus tests/fuzz/rankdir_corpus
 *
 * tests/fuzz/rankdir_corpus/ holds folders of each kind and a rank file
 * that dtpc shard's metadata describes. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/error.h"
#include "runtime/weights.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The failure just raised is one terminated line. */
static void one_line(void)
{
	if (!memchr(g_error()->msg, '\0', G_ERROR_MSG) || strchr(g_error()->msg, '\n'))
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *sep = NULL;

	for (size_t i = 0; i + 1 < size && !sep; i++)
		if (data[i] == '\n' && data[i + 1] == '\n')
			sep = (const char *)data + i;
	size_t listing = sep ? (size_t)(sep - (const char *)data) : size;
	char *text = malloc(listing + 1);
	const char **names = malloc((listing + 1) * sizeof *names);
	size_t n = 0;

	if (!text || !names)
		abort();
	memcpy(text, data, listing);
	text[listing] = '\0';
	for (char *p = text, *end; *p; p = end + 1) {
		end = strchr(p, '\n');
		if (!end)
			end = p + strlen(p);
		names[n++] = p;
		if (!*end)
			break;
		*end = '\0';
	}

	struct ckpt_choice ch;
	if (!ckpt_classify("dir", names, n, &ch)) {
		one_line();
	} else if (ch.kind == CKPT_RANKS) {
		/* every rank's file is among the names */
		for (uint32_t r = 0; r < ch.world; r++) {
			char want[64];
			size_t i = 0;

			ckpt_rank_name(r, ch.world, want, sizeof want);
			while (i < n && strcmp(names[i], want))
				i++;
			if (i == n)
				abort();
		}
	} else {
		size_t i = 0;

		while (i < n && strcmp(names[i], ch.name))
			i++;
		if (i == n)
			abort();
	}
	free(names);
	free(text);

	if (sep) {
		struct st_file *f;
		const uint8_t *file = (const uint8_t *)sep + 2;
		struct ckpt_expect e = { .rank = 1, .world = 4, .weights = 0x1234, .slices = 0x5678,
					 .plan = "p", .mesh = "tp=4" };

		if (st_open_buffer(&f, file, size - (size_t)(file - data), "rank")) {
			if (!ckpt_check_rank_file(f, "rank", &e))
				one_line();
			st_close(f);
		} else {
			one_line();
		}
	}
	return 0;
}
