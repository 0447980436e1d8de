/* arena.h — bump allocation for compiler data.
 *
 * Everything the compiler builds for one compile (source text, AST, IR,
 * diagnostics) lives in one arena and dies with it, so passes never free
 * piecemeal and error paths cannot leak. */
#ifndef DTPC_ARENA_H
#define DTPC_ARENA_H
#include <stddef.h>

struct arena;

struct arena *arena_create(void);
void arena_free(struct arena *a);
/* Zeroed, aligned for any type; aborts on out-of-memory (a compiler that
 * cannot allocate has nothing useful left to report). */
void *arena_alloc(struct arena *a, size_t n);
/* Not zeroed: for growing arrays whose bytes are all written by the caller
 * (zeroing, and faulting in, tens of MB for nothing shows in profiles). */
void *arena_alloc_raw(struct arena *a, size_t n);
char *arena_strdup(struct arena *a, const char *s);
char *arena_strndup(struct arena *a, const char *s, size_t n);
char *arena_printf(struct arena *a, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
/* The concatenation of the strings up to a NULL: the fast path for dotted
 * names, which every statement of a large model builds. */
char *arena_concat(struct arena *a, ...) __attribute__((sentinel));

#define ARENA_NEW(a, T) ((T *)arena_alloc((a), sizeof(T)))
#define ARENA_ARRAY(a, T, n) ((T *)arena_alloc((a), sizeof(T) * (size_t)(n)))
#endif
