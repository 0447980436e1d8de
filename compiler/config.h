/* config.h — a diffusers config.json as model parameters (--config).
 *
 * A diffusers model folder holds `config.json`, one JSON object whose keys
 * are the model class's `__init__` arguments. `--config PATH` turns its
 * keys into overrides of the model's parameters, taken after the plan's
 * `model m(k = v)` and before `-D` (docs/language.md, "Configuration from
 * config.json"). This reader checks the JSON itself (syntax, UTF-8, depth,
 * size, duplicate keys, numbers a parameter can hold), each error located in
 * the file; the parameters' kinds are checked where every override's are,
 * in model.c's bind_params. */
#ifndef DTPC_CONFIG_H
#define DTPC_CONFIG_H
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

struct arena;
struct diag_ctx;
struct override;

/* Limits against hostile files: a diffusers config is a few kilobytes,
 * one object deep (two with a nested list). */
enum { CONFIG_MAX_BYTES = 1 << 20, CONFIG_MAX_DEPTH = 32 };

/* The file --config PATH names: PATH, or PATH/config.json when PATH is a
 * folder. NULL, after "dtpc: cannot read ..." on err (exit status 2, as an
 * unreadable plan), when there is no such readable regular file of at most
 * CONFIG_MAX_BYTES. */
const char *config_path(struct arena *a, const char *given, FILE *err);

/* Parses text (registered in d under name) as a config: the keys of its
 * top-level object, except those starting with '_' (_class_name,
 * _diffusers_version: no parameters), become overrides marked from_config,
 * each located at its key. JSON null is an override of kind VAL_NONE (the
 * parameter keeps its value); an object, or a list holding lists, objects
 * or nulls, is one whose `unfit` says so (an error if the model has the
 * parameter). Returns false after a located error in d (the first one:
 * what follows a syntax error says nothing). */
bool config_parse(struct arena *a, struct diag_ctx *d, const char *name, const char *text,
		  size_t len, struct override **ov, int *n);

/* The overrides of a compile: those of the config at path (config_path's
 * result, read and registered in d), then the n ones of defs (-D, which win
 * over the config). Returns 0 with *out and *nout set; 1 after errors in d;
 * 2 after "dtpc: cannot read ..." on err. */
int config_overrides(struct arena *a, struct diag_ctx *d, const char *path,
		     const struct override *defs, int n, struct override **out, int *nout,
		     FILE *err);
/* The config at path read alone, its diagnostics printed to err: the exit
 * status (0 clean, 1 errors in the file, 2 unreadable). For commands that
 * do not show the diagnostics of their compiles (dtpc suggest). */
int config_check(const char *path, FILE *err);
#endif
