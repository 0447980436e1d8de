/* glob.c — glob patterns over dotted module names (see glob.h).
 *
 * Matching runs at two levels. Across segments, '**' behaves like '*' in a
 * classic wildcard matcher whose other tokens each consume exactly one
 * segment, so the greedy "remember the last star" algorithm is exact and
 * needs O(pattern segments * name segments) segment tests, no matter how
 * many '**' there are. Within a segment, braces make alternatives of
 * different lengths, so a greedy scheme is no longer exact; there we
 * backtrack, but memoise failed (pattern offset, name offset) pairs in a
 * small bitset on the stack, which bounds the work to a polynomial.
 *
 * Nothing is split or copied: segments are [begin, end) pointer pairs into
 * the caller's strings, so glob_match never allocates.
 *
 * A brace group whose alternatives hold a '.' (`{to_out.0,to_add_out}`)
 * spans segments. It is expanded first, as a shell expands braces: one
 * pattern per alternative (on the stack, never longer than the pattern),
 * each matched and checked as above. glob_check bounds the expansion (the
 * pattern's length, the groups on one path, the patterns in all), so the
 * work stays a small multiple of the plain matcher's. */
#include "glob.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* Memo bits for one segment test: (pattern bytes + 1) * (name bytes + 1).
 * 4096 bits (512 bytes of stack) covers any sane segment pair; larger ones
 * fall back to plain backtracking rather than allocate. */
#define GLOB_MEMO_BITS 4096

/* End of the segment starting at p: the first unescaped '.', or the NUL.
 * A backslash before the NUL is left for glob_check to complain about. */
static const char *glob_seg_end(const char *p)
{
	while (*p && *p != '.') {
		if (*p == '\\' && p[1])
			p += 2;
		else
			p++;
	}
	return p;
}

/* Name segments cannot be escaped, so the end is just the next '.'. */
static const char *glob_name_end(const char *n)
{
	const char *e = strchr(n, '.');

	return e ? e : n + strlen(n);
}

/* Start of the segment after the one ending at e, or NULL after the last. */
static const char *glob_next(const char *e)
{
	return *e == '.' ? e + 1 : NULL;
}

static bool glob_is_starstar(const char *p, const char *pe)
{
	return pe - p == 2 && p[0] == '*' && p[1] == '*';
}

/* One set member starting at *q (before pe), honouring a backslash escape.
 * Returns -1 when the escape has nothing after it. */
static int glob_class_char(const char **q, const char *pe)
{
	int c;

	if (**q == '\\') {
		if (*q + 1 >= pe)
			return -1;
		c = (unsigned char)(*q)[1];
		*q += 2;
	} else {
		c = (unsigned char)**q;
		*q += 1;
	}
	return c;
}

/* Parses the set opening at p ('[') and ending before pe. Returns the byte
 * after the closing ']', or NULL when the set is unterminated. *hit tells
 * whether c (a name character; pass -1 to only parse) is selected; *badrange,
 * when non-NULL, receives the start of the first reversed range such as
 * "z-a", which fnmatch would silently treat as matching nothing.
 * Both glob_check and the matcher use this one parser so they can never
 * disagree on where a set ends (and hence where a ',' or '}' is a member). */
static const char *glob_class(const char *p, const char *pe, int c, bool *hit,
			      const char **badrange)
{
	const char *q = p + 1;
	bool neg = false, in = false, first = true;

	if (badrange)
		*badrange = NULL;
	if (q < pe && (*q == '!' || *q == '^')) {
		neg = true;
		q++;
	}
	for (;;) {
		const char *start = q;
		int lo, hi;

		if (q >= pe)
			return NULL;
		/* ']' right after '[' or '[!' is a member, as in fnmatch,
		 * which is the only way to put a bare ']' in a set. */
		if (*q == ']' && !first)
			break;
		first = false;
		lo = glob_class_char(&q, pe);
		if (lo < 0)
			return NULL;
		hi = lo;
		/* '-' makes a range unless it is last in the set. */
		if (q + 1 < pe && *q == '-' && q[1] != ']') {
			q++;
			hi = glob_class_char(&q, pe);
			if (hi < 0)
				return NULL;
			if (hi < lo && badrange && !*badrange)
				*badrange = start;
		}
		if (c >= lo && c <= hi)
			in = true;
	}
	if (hit)
		*hit = in != neg;
	return q + 1;
}

/* From q inside a brace group (at the group's own level), finds the ',' or
 * '}' that ends the current alternative, skipping escapes, sets and nested
 * groups. NULL when the group is unterminated within the segment. */
static const char *glob_alt_end(const char *q, const char *pe)
{
	int depth = 0;

	while (q < pe) {
		switch (*q) {
		case '\\':
			q += 2;
			continue;
		case '[': {
			const char *e = glob_class(q, pe, -1, NULL, NULL);

			/* An unterminated set is taken literally here, which
			 * only matters for malformed patterns. */
			q = e ? e : q + 1;
			continue;
		}
		case '{':
			depth++;
			break;
		case ',':
			if (depth == 0)
				return q;
			break;
		case '}':
			if (depth == 0)
				return q;
			depth--;
			break;
		default:
			break;
		}
		q++;
	}
	return NULL;
}

/* Bounds on a pattern with dotted groups: its bytes (the expansion
 * buffers), the dotted groups on one path of the expansion (side by side or
 * one inside another: the recursion, one buffer each), and the patterns it
 * expands to. */
#define GLOB_EXPAND_BYTES 512
#define GLOB_EXPAND_DEPTH 16
#define GLOB_EXPANSIONS 256

/* The byte after the token at q: an escape pair, a whole set (which ends
 * within its segment, as the matcher reads it), or one byte. */
static const char *glob_skip(const char *q)
{
	if (*q == '\\' && q[1])
		return q + 2;
	if (*q == '[') {
		const char *e = glob_class(q, glob_seg_end(q), -1, NULL, NULL);

		return e ? e : q + 1;
	}
	return q + 1;
}

/* The first brace group at the top level of pat that holds a '.' (in any
 * alternative, at any depth): true with *open at its '{' and *close at its
 * '}'. An unterminated group is not one (glob_check reports it). */
static bool glob_dotted(const char *pat, const char **open, const char **close)
{
	for (const char *q = pat; *q;) {
		if (*q != '{') {
			q = glob_skip(q);
			continue;
		}
		int depth = 0;
		bool dot = false;
		const char *r = q;

		do {
			depth += *r == '{';
			depth -= *r == '}';
			dot |= *r == '.';
			r = depth ? glob_skip(r) : r;
		} while (depth && *r);
		if (depth)
			return false;
		if (dot) {
			*open = q;
			*close = r;
			return true;
		}
		q = r + 1;
	}
	return false;
}

/* The end of the alternative starting at q inside the group closing at
 * close: its ',' at the group's level, or close. */
static const char *glob_alt_stop(const char *q, const char *close)
{
	int depth = 0;

	while (q < close && (depth || *q != ',')) {
		depth += *q == '{';
		depth -= *q == '}';
		q = glob_skip(q);
	}
	return q < close ? q : close;
}

/* Writes into buf (room for strlen(pat) bytes) pat with the group
 * [open, close] replaced by its alternative [a, b); map, when given, gets
 * the offset in pat of each byte written (from: pat's own map, or NULL). */
static void glob_expand(const char *pat, const char *open, const char *close,
			const char *a, const char *b, char *buf, int *map, const int *from)
{
	size_t n = 0;

	for (const char *q = pat; *q; q++) {
		if ((q >= open && q < a) || (q >= b && q <= close))
			continue;
		if (map)
			map[n] = from ? from[q - pat] : (int)(q - pat);
		buf[n++] = *q;
	}
	buf[n] = '\0';
}

struct glob_seg {
	const char *p0, *pe; /* pattern segment */
	const char *s0, *se; /* name segment */
	uint64_t *memo;      /* failed (p, s) pairs, or NULL */
	size_t stride;       /* name bytes + 1 */
};

static bool glob_seg_at(const struct glob_seg *g, const char *p, const char *s,
			int depth);

/* Matches pattern bytes [p, pe) against name bytes [s, se). depth is the
 * brace nesting at p; it is fixed by the pattern text, so the result only
 * depends on (p, s), which is what makes memoisation sound. */
static bool glob_seg_body(const struct glob_seg *g, const char *p,
			  const char *s, int depth)
{
	const char *pe = g->pe, *se = g->se;

	while (p < pe) {
		int lit;

		switch (*p) {
		case '*':
			p++;
			/* A trailing star at top level takes the rest. */
			if (p == pe && depth == 0)
				return true;
			for (;; s++) {
				if (glob_seg_at(g, p, s, depth))
					return true;
				if (s == se)
					return false;
			}
		case '?':
			if (s == se)
				return false;
			p++;
			s++;
			continue;
		case '[': {
			bool hit;

			if (s == se)
				return false;
			p = glob_class(p, pe, (unsigned char)*s, &hit, NULL);
			if (!p || !hit)
				return false;
			s++;
			continue;
		}
		case '{': {
			const char *q = p + 1;

			/* Each alternative runs on into the rest of the
			 * pattern; reaching its ',' or '}' jumps past the
			 * group (see the ',' case). */
			for (;;) {
				if (glob_seg_at(g, q, s, depth + 1))
					return true;
				q = glob_alt_end(q, pe);
				if (!q || *q == '}')
					return false;
				q++;
			}
		}
		case ',':
		case '}':
			if (depth > 0) {
				/* End of the alternative taken: continue
				 * after the group's closing '}'. */
				while (p && *p == ',')
					p = glob_alt_end(p + 1, pe);
				if (!p)
					return false;
				p++;
				depth--;
				continue;
			}
			lit = (unsigned char)*p++;
			break;
		case '\\':
			if (p + 1 >= pe)
				return false;
			lit = (unsigned char)p[1];
			p += 2;
			break;
		default:
			lit = (unsigned char)*p++;
			break;
		}
		if (s == se || (unsigned char)*s != lit)
			return false;
		s++;
	}
	return s == se;
}

static bool glob_seg_at(const struct glob_seg *g, const char *p, const char *s,
			int depth)
{
	size_t bit = 0;

	if (g->memo) {
		bit = (size_t)(p - g->p0) * g->stride + (size_t)(s - g->s0);
		if (g->memo[bit / 64] >> (bit % 64) & 1)
			return false;
	}
	if (glob_seg_body(g, p, s, depth))
		return true;
	if (g->memo)
		g->memo[bit / 64] |= (uint64_t)1 << (bit % 64);
	return false;
}

/* Does pattern segment [p, pe) match name segment [s, se)? */
static bool glob_seg_match(const char *p, const char *pe, const char *s,
			   const char *se)
{
	uint64_t memo[GLOB_MEMO_BITS / 64];
	struct glob_seg g = { p, pe, s, se, NULL, (size_t)(se - s) + 1 };
	size_t plen = (size_t)(pe - p), bits;
	bool plain = true, branchy = false;

	/* Most segments are plain words or a lone '*'; settle those without
	 * touching the memo. */
	if (plen == 1 && *p == '*')
		return true;
	for (const char *q = p; q < pe; q++) {
		switch (*q) {
		case '*':
		case '{':
			branchy = true;
			/* fall through */
		case '?':
		case '[':
		case '\\':
			plain = false;
			break;
		default:
			break;
		}
	}
	if (plain)
		return plen == (size_t)(se - s) && !memcmp(p, s, plen);
	if (branchy) {
		/* Only branching (star, braces) can revisit a (p, s) pair,
		 * so only then is the memo worth clearing. */
		bits = (plen + 1) * g.stride;
		if (bits <= GLOB_MEMO_BITS) {
			memset(memo, 0, (bits + 63) / 64 * sizeof memo[0]);
			g.memo = memo;
		}
	}
	return glob_seg_at(&g, p, s, 0);
}

static bool glob_match_at(const char *pat, const char *name, int depth);

/* Matches one of the patterns a dotted group expands to. */
static bool glob_match_expanded(const char *pat, const char *open, const char *close,
				const char *name, int depth)
{
	size_t len = strlen(pat);
	char buf[GLOB_EXPAND_BYTES];

	/* beyond glob_check's bounds: a malformed pattern, no match */
	if (len >= sizeof buf || depth >= GLOB_EXPAND_DEPTH)
		return false;
	for (const char *a = open + 1;; ) {
		const char *b = glob_alt_stop(a, close);

		glob_expand(pat, open, close, a, b, buf, NULL, NULL);
		if (glob_match_at(buf, name, depth + 1))
			return true;
		if (b == close)
			return false;
		a = b + 1;
	}
}

bool glob_match(const char *pat, const char *name)
{
	return glob_match_at(pat, name, 0);
}

static bool glob_match_at(const char *pat, const char *name, int depth)
{
	const char *p = pat, *n = name;
	const char *star_p = NULL, *star_n = NULL;
	bool have_star = false;
	const char *open, *close;

	if (glob_dotted(pat, &open, &close))
		return glob_match_expanded(pat, open, close, name, depth);

	/* "" is the root and only the root; splitting "" would otherwise give
	 * one empty segment that '*' or '**' could match. */
	if (!*pat || !*name)
		return !*pat && !*name;

	while (n) {
		if (p) {
			const char *pe = glob_seg_end(p);

			if (glob_is_starstar(p, pe)) {
				/* Try zero segments first; on a later
				 * mismatch, let it take one more. */
				star_p = glob_next(pe);
				star_n = n;
				have_star = true;
				p = star_p;
				continue;
			}
			const char *ne = glob_name_end(n);

			if (glob_seg_match(p, pe, n, ne)) {
				p = glob_next(pe);
				n = glob_next(ne);
				continue;
			}
		}
		if (!have_star)
			return false;
		/* Greedy backtracking is exact here because every token but
		 * '**' consumes exactly one segment: only the latest '**' ever
		 * needs to grow. */
		star_n = glob_next(glob_name_end(star_n));
		n = star_n;
		p = star_p;
	}
	/* Name used up: what is left of the pattern must be able to match
	 * zero segments. */
	while (p) {
		const char *pe = glob_seg_end(p);

		if (!glob_is_starstar(p, pe))
			return false;
		p = glob_next(pe);
	}
	return true;
}

__attribute__((format(printf, 5, 6)))
static bool glob_fail(char *msg, size_t msgsz, int *errcol, ptrdiff_t col,
		      const char *fmt, ...)
{
	va_list ap;

	if (msg && msgsz) {
		va_start(ap, fmt);
		vsnprintf(msg, msgsz, fmt, ap);
		va_end(ap);
	}
	if (errcol)
		*errcol = (int)col;
	return false;
}

/* The column of q (in pat) in the pattern as written: map[q - pat] for an
 * expansion, else its own offset. */
static ptrdiff_t glob_col(const char *pat, const int *map, const char *q)
{
	return map ? map[q - pat] : q - pat;
}

/* glob_check of a pattern without dotted groups; map: the offset in the
 * written pattern of each byte of pat (NULL: pat is the written one). */
static bool glob_check_plain(const char *pat, const int *map, char *msg, size_t msgsz,
			     int *errcol);

/* glob_check of every pattern pat's dotted groups expand to (pat holds
 * one, at [open, close]); *count: the patterns so far. */
static bool glob_check_expanded(const char *pat, const int *map, const char *open,
				const char *close, int depth, int *count, char *msg,
				size_t msgsz, int *errcol)
{
	char buf[GLOB_EXPAND_BYTES];
	int bmap[GLOB_EXPAND_BYTES];
	ptrdiff_t at = glob_col(pat, map, open);

	if (strlen(pat) >= sizeof buf)
		return glob_fail(msg, msgsz, errcol, at, "a glob with '.' inside '{...}' is "
				 "at most %d bytes", GLOB_EXPAND_BYTES - 1);
	if (depth >= GLOB_EXPAND_DEPTH)
		return glob_fail(msg, msgsz, errcol, at, "more than %d '{...}' holding a '.' "
				 "in one glob", GLOB_EXPAND_DEPTH);
	for (const char *a = open + 1;;) {
		const char *b = glob_alt_stop(a, close);
		const char *o, *c;

		glob_expand(pat, open, close, a, b, buf, bmap, map);
		if (glob_dotted(buf, &o, &c)) {
			if (!glob_check_expanded(buf, bmap, o, c, depth + 1, count, msg,
						 msgsz, errcol))
				return false;
		} else {
			if (++*count > GLOB_EXPANSIONS)
				return glob_fail(msg, msgsz, errcol, at, "'{...}' holding a '.' "
						 "expand to more than %d globs", GLOB_EXPANSIONS);
			if (!glob_check_plain(buf, bmap, msg, msgsz, errcol))
				return false;
		}
		if (b == close)
			return true;
		a = b + 1;
	}
}

bool glob_check(const char *pat, char *msg, size_t msgsz, int *errcol)
{
	const char *open, *close;
	int count = 0;

	if (msg && msgsz)
		msg[0] = '\0';
	if (errcol)
		*errcol = -1;
	if (glob_dotted(pat, &open, &close))
		return glob_check_expanded(pat, NULL, open, close, 0, &count, msg, msgsz,
					   errcol);
	return glob_check_plain(pat, NULL, msg, msgsz, errcol);
}

static bool glob_check_plain(const char *pat, const int *map, char *msg, size_t msgsz,
			     int *errcol)
{
	const char *p = pat;

	/* The root pattern is the one place an empty segment is allowed. */
	if (!*pat)
		return true;

	while (p) {
		const char *pe = glob_seg_end(p);
		const char *open = NULL; /* outermost unclosed '{' */
		int depth = 0;

		if (p == pe) {
			/* Point at the '.' next to the hole: the one after
			 * it, or for a trailing '.', the one before. */
			return glob_fail(msg, msgsz, errcol,
					 glob_col(pat, map, *pe == '.' ? pe : pe - 1),
					 "empty segment in glob");
		}
		if (glob_is_starstar(p, pe)) {
			p = glob_next(pe);
			continue;
		}
		for (const char *q = p; q < pe;) {
			const char *bad;

			switch (*q) {
			case '\\':
				if (q + 1 >= pe)
					return glob_fail(msg, msgsz, errcol,
							 glob_col(pat, map, q),
							 "trailing '\\' in glob");
				q += 2;
				continue;
			case '[': {
				const char *e = glob_class(q, pe, -1, NULL, &bad);

				if (!e)
					return glob_fail(msg, msgsz, errcol,
							 glob_col(pat, map, q),
							 "unterminated '[' in glob");
				if (bad)
					return glob_fail(msg, msgsz, errcol,
							 glob_col(pat, map, bad),
							 "reversed range in '[...]'");
				q = e;
				continue;
			}
			case '*':
				/* Within a segment, '**' would mean the same
				 * as '*' and almost surely is a typo for a
				 * cross-segment '**'; refuse to guess. */
				if (q + 1 < pe && q[1] == '*')
					return glob_fail(msg, msgsz, errcol,
							 glob_col(pat, map, q),
							 "'**' must be a whole segment");
				break;
			case '{':
				if (depth++ == 0)
					open = q;
				break;
			case '}':
				if (depth == 0)
					return glob_fail(msg, msgsz, errcol,
							 glob_col(pat, map, q),
							 "unmatched '}' in glob");
				depth--;
				break;
			default:
				break;
			}
			q++;
		}
		if (depth > 0)
			return glob_fail(msg, msgsz, errcol, glob_col(pat, map, open),
					 "unterminated '{' in glob");
		p = glob_next(pe);
	}
	return true;
}
