/* glob.h — glob patterns over dotted module names.
 *
 * Plans select modules by PyTorch-style names such as
 * `transformer_blocks.3.attn.to_q`. A pattern is matched segment by segment
 * (segments split on '.'), so a wildcard can never silently swallow a '.'
 * and select modules at a different depth than the author meant:
 *
 *   *        any characters within one segment (possibly none); alone it is
 *            exactly one segment with any content
 *   **       alone as a whole segment: zero or more segments
 *   ?        one character
 *   [a-z_]   one character from a set; [!..] or [^..] negates; ']' first
 *            in the set is a member; '-' first or last is a member
 *   {a,b}    alternatives; may nest and may hold any of the above except
 *            '**'; an empty alternative matches "". Alternatives holding a
 *            '.' ({to_out.0,to_add_out}) span segments: the group is
 *            expanded first, as a shell's braces, one pattern per
 *            alternative (then '**' may be in them, as a whole segment)
 *   \c       the character c itself
 *
 * The empty pattern "" names the root module (whose name is ""), and only
 * it; a non-empty pattern never matches the root, not even "**".
 * Matching is case-sensitive. ',' and '}' outside braces are literal
 * characters (a stray '}' is rejected by glob_check, though). */
#ifndef DTPC_GLOB_H
#define DTPC_GLOB_H
#include <stdbool.h>
#include <stddef.h>

/* Validates a pattern's syntax. Returns true when well-formed; otherwise
 * writes a one-line message (lower case start, no trailing period, e.g.
 * "unterminated '[' in glob") into msg (size msgsz; may be NULL/0) and the
 * 0-based byte offset of the offending character into *errcol (errcol may
 * be NULL). The pattern is scanned left to right and the first problem
 * found is reported; an unterminated '{' is only noticed at the end of its
 * segment, so a problem inside it is reported first. */
bool glob_check(const char *pat, char *msg, size_t msgsz, int *errcol);

/* Matches a well-formed pattern against a dotted module name, segment by
 * segment. Does not allocate; time is polynomial in the pattern and name
 * lengths whatever the pattern. A malformed pattern gives an unspecified
 * result but is still read safely. */
bool glob_match(const char *pat, const char *name);
#endif
