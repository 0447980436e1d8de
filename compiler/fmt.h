/* fmt.h — `dtpc fmt`: the canonical layout of plan files. */
#ifndef DTPC_FMT_H
#define DTPC_FMT_H
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

/* The formatted text of a plan file (malloc'd, NUL-terminated; *outlen its
 * length), or NULL with a reason in why when text does not scan. Line
 * breaks and comments are the author's; fmt decides spacing, indentation
 * and alignment (docs/tools.md). */
char *fmt_text(const char *text, size_t len, size_t *outlen, char *why, size_t whylen);

/* `dtpc fmt [--check] FILE|FOLDER|-...`: rewrites each file that is not in
 * its canonical layout (folders: every *.plan under them; -: standard input
 * to standard output); with check, names them on out instead and returns 1.
 * A file that does not parse is reported on err (status 1); 2 for I/O. */
int fmt_main(char **paths, int npaths, bool check, FILE *out, FILE *err);
#endif
