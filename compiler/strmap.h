/* strmap.h — string -> int hash map in an arena (names, scopes, modules). */
#ifndef DTPC_STRMAP_H
#define DTPC_STRMAP_H
#include <stdbool.h>
#include <stddef.h>

struct arena;
struct strmap;

struct strmap *strmap_create(struct arena *a, size_t hint);
/* The value stored for key, or -1. */
int strmap_get(const struct strmap *m, const char *key);
/* Inserts or replaces; the key is not copied (it must outlive the map). */
void strmap_put(struct strmap *m, const char *key, int val);
#endif
