/* timeline.h — an SVG picture of a Chrome trace written by dtpc run. */
#ifndef DTPC_TIMELINE_H
#define DTPC_TIMELINE_H
#include <stdio.h>

/* Reads the trace at path and writes to out (a path; "-": standard output)
 * one lane per (process, row) with its spans as rectangles coloured by
 * category and named in a <title>, a time axis, and each process's counters
 * as step charts under the lanes; width pixels wide. Errors go to err.
 * Returns the exit status (2: unreadable, not a trace, unwritable). */
int timeline_svg(const char *path, const char *out, int width, FILE *err);
#endif
