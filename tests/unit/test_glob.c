/* test_glob.c — unit tests for compiler/glob.c (dotted module-name globs). */
#include <string.h>
#include <time.h>

#include "compiler/glob.h"
#include "tests/unit/unit.h"

/* Every pattern matched here must also pass glob_check, so a test can never
 * pass by relying on what glob_match happens to do with a malformed one. */
static bool m(const char *pat, const char *name)
{
	char msg[128];
	int col;

	if (!glob_check(pat, msg, sizeof msg, &col)) {
		printf("# unexpected check failure for \"%s\": %s at %d\n", pat,
		       msg, col);
		return false;
	}
	return glob_match(pat, name);
}

#define MATCH(pat, name) UNIT_CHECK(m(pat, name), "'%s' matches '%s'", pat, name)
#define NOMATCH(pat, name)                                                  \
	UNIT_CHECK(!m(pat, name) && glob_check(pat, NULL, 0, NULL),         \
		   "'%s' does not match '%s'", pat, name)

/* glob_check must reject pat with exactly this message and column. */
static void bad(const char *pat, const char *want, int wantcol)
{
	char msg[128] = "(unset)";
	int col = -2;
	bool ok = glob_check(pat, msg, sizeof msg, &col);

	UNIT_CHECK(!ok && strcmp(msg, want) == 0 && col == wantcol,
		   "check('%s') -> \"%s\" at %d (got %s, \"%s\" at %d)", pat,
		   want, wantcol, ok ? "ok" : "error", msg, col);
}

static void good(const char *pat)
{
	char msg[128] = "";
	int col = -2;
	bool ok = glob_check(pat, msg, sizeof msg, &col);

	UNIT_CHECK(ok && col == -1, "check('%s') accepts (msg \"%s\")", pat, msg);
}

static void test_literals(void)
{
	MATCH("blocks.0.attn", "blocks.0.attn");
	NOMATCH("blocks.0.attn", "blocks.0.attn.to_q");
	NOMATCH("blocks.0.attn", "blocks.0");
	NOMATCH("blocks.0.attn", "blocks.0.att");
	NOMATCH("blocks.0.attn", "blocks.0.attnx");
	NOMATCH("Blocks", "blocks");
	NOMATCH("blocks.1", "blocks.10");
}

static void test_star(void)
{
	MATCH("blocks.*.attn", "blocks.0.attn");
	MATCH("blocks.*.attn", "blocks.27.attn");
	NOMATCH("blocks.*.attn", "blocks.0.attn.to_q");
	NOMATCH("blocks.*.attn", "blocks.attn");
	NOMATCH("blocks.*.attn", "blocks.0.1.attn");
	MATCH("*", "transformer");
	NOMATCH("*", "transformer.blocks");
	MATCH("to_*", "to_q");
	MATCH("to_*", "to_");
	NOMATCH("to_*", "to");
	MATCH("*_out", "proj_out");
	MATCH("*a*b*", "xxaYYbzz");
	MATCH("*a*b*", "ab");
	NOMATCH("*a*b*", "ba");
	NOMATCH("a*", "a.b");
	MATCH("*.*", "a.b");
	NOMATCH("*.*", "a");
	NOMATCH("*.*", "a.b.c");
}

static void test_starstar(void)
{
	MATCH("**.to_q", "to_q");
	MATCH("**.to_q", "blocks.3.attn.to_q");
	NOMATCH("**.to_q", "blocks.3.attn.to_k");
	NOMATCH("**.to_q", "blocks.3.attn.to_q.lora");
	MATCH("blocks.**", "blocks");
	MATCH("blocks.**", "blocks.3.attn");
	NOMATCH("blocks.**", "blocks_x.3");
	NOMATCH("blocks.**", "transformer.blocks");
	MATCH("**", "a");
	MATCH("**", "a.b.c");
	MATCH("a.**.b", "a.b");
	MATCH("a.**.b", "a.x.y.b");
	NOMATCH("a.**.b", "a.x.y.c");
	MATCH("a.**.b.**.c", "a.b.b.c.c");
	MATCH("**.attn.*", "blocks.2.attn.to_out");
	NOMATCH("**.attn.*", "blocks.2.attn");
	/* Backtracking must be able to push '**' past an earlier partial
	 * match of what follows it. */
	MATCH("**.a.b", "a.a.b");
	MATCH("**.a.*.c", "a.a.a.x.c");
	MATCH("**.**", "a");
}

static void test_question(void)
{
	MATCH("blocks.?", "blocks.7");
	NOMATCH("blocks.?", "blocks.12");
	NOMATCH("blocks.?", "blocks");
	MATCH("to_?", "to_v");
	NOMATCH("a?b", "a.b");
	MATCH("??", "ab");
}

static void test_classes(void)
{
	MATCH("to_[qkv]", "to_k");
	NOMATCH("to_[qkv]", "to_o");
	MATCH("blocks.[0-9]", "blocks.4");
	NOMATCH("blocks.[0-9]", "blocks.x");
	MATCH("[a-z0-9_]x", "_x");
	MATCH("to_[!qkv]", "to_o");
	NOMATCH("to_[!qkv]", "to_q");
	MATCH("to_[^qkv]", "to_o");
	NOMATCH("to_[^qkv]", "to_v");
	MATCH("[]a]", "]");
	MATCH("[]a]", "a");
	NOMATCH("[!]a]", "a");
	MATCH("[!]a]", "b");
	MATCH("[a-]", "-");
	MATCH("[-a]", "-");
	NOMATCH("[a-c]", "-");
	MATCH("[\\]]", "]");
	MATCH("[*?]x", "*x");
	NOMATCH("[*?]x", "ax");
	NOMATCH("[a]", "");
	NOMATCH("x[a]", "x");
}

static void test_braces(void)
{
	MATCH("to_{q,k,v}", "to_q");
	MATCH("to_{q,k,v}", "to_v");
	NOMATCH("to_{q,k,v}", "to_o");
	NOMATCH("to_{q,k,v}", "to_qk");
	MATCH("blocks.*.{attn,ff}.**", "blocks.1.ff.net.0");
	NOMATCH("blocks.*.{attn,ff}.**", "blocks.1.norm1");
	MATCH("{attn,ff}{1,2}", "ff2");
	/* Nested groups, and alternatives of different lengths that force a
	 * backtrack into the group. */
	MATCH("a{b,c{d,e}}f", "acef");
	MATCH("a{b,c{d,e}}f", "abf");
	NOMATCH("a{b,c{d,e}}f", "acf");
	MATCH("{a,ab}c", "abc");
	MATCH("{*_q,[kv]}", "to_q");
	MATCH("{*_q,[kv]}", "k");
	NOMATCH("{*_q,[kv]}", "to_k");
	MATCH("x{?y,z}", "xay");
	MATCH("norm{,1}", "norm");
	MATCH("norm{,1}", "norm1");
	NOMATCH("norm{,1}", "norm2");
	MATCH("a{}b", "ab");
	MATCH("{[,}],x}", "}");
	MATCH("{a\\,b,c}", "a,b");
	NOMATCH("{a\\,b,c}", "a");
	MATCH("a,b", "a,b"); /* ',' is literal outside braces */
	/* Alternatives holding a '.' span segments (expanded as a shell's
	 * braces): SD3's last block has no to_add_out. */
	MATCH("blocks.*.attn.{to_out.0,to_add_out}", "blocks.3.attn.to_out.0");
	MATCH("blocks.*.attn.{to_out.0,to_add_out}", "blocks.3.attn.to_add_out");
	NOMATCH("blocks.*.attn.{to_out.0,to_add_out}", "blocks.3.attn.to_out");
	NOMATCH("blocks.*.attn.{to_out.0,to_add_out}", "blocks.3.attn.to_out.1");
	MATCH("attn.to_{q,k.v}", "attn.to_k.v");
	MATCH("attn.to_{q,k.v}", "attn.to_q");
	NOMATCH("attn.to_{q,k.v}", "attn.to_k");
	MATCH("{ff,ff_context}.net.{0.proj,2}", "ff_context.net.0.proj");
	MATCH("{ff,ff_context}.net.{0.proj,2}", "ff.net.2");
	NOMATCH("{ff,ff_context}.net.{0.proj,2}", "ff.net.0");
	MATCH("{a.{b.c,d},e}.f", "a.b.c.f");
	MATCH("{a.{b.c,d},e}.f", "a.d.f");
	MATCH("{a.{b.c,d},e}.f", "e.f");
	NOMATCH("{a.{b.c,d},e}.f", "a.b.f");
	MATCH("{**.norm_q,x.y}", "blocks.0.attn.norm_q");
	MATCH("{**.norm_q,x.y}", "norm_q");
	MATCH("{a.b,c}.*", "c.z");
	NOMATCH("{a.b,c}.*", "a.b");
	MATCH("{a\\.b,c.d}", "c.d"); /* an escaped '.' makes no group dotted */
	NOMATCH("{a\\.b,c}", "a.b");
}

static void test_escapes(void)
{
	MATCH("a\\*", "a*");
	NOMATCH("a\\*", "ab");
	MATCH("\\?", "?");
	NOMATCH("\\?", "x");
	MATCH("\\[x]", "[x]");
	MATCH("\\{a\\}", "{a}");
	bad("\\{a}", "unmatched '}' in glob", 3); /* '}' escaped '{' can't close */
	MATCH("\\a\\b", "ab");
	/* An escaped '.' is a literal dot inside one segment; names never
	 * have one, so it matches nothing rather than splitting. */
	good("a\\.b");
	NOMATCH("a\\.b", "a.b");
	MATCH("\\*\\*", "**");
	NOMATCH("\\*\\*", "a.b");
}

static void test_root(void)
{
	MATCH("", "");
	NOMATCH("", "a");
	NOMATCH("**", "");
	NOMATCH("*", "");
	NOMATCH("{,a}", "");
	NOMATCH("a", "");
}

static void test_errors(void)
{
	good("");
	good("**");
	good("a.**.b");
	good("[]]");
	good("[!]]");
	good("{a,{b,c},}");
	good("a,b");
	bad("to_[qk", "unterminated '[' in glob", 3);
	bad("[]", "unterminated '[' in glob", 0);
	bad("[!]", "unterminated '[' in glob", 0);
	bad("x[a.b]", "unterminated '[' in glob", 1);
	bad("[a\\", "unterminated '[' in glob", 0);
	bad("a**b", "'**' must be a whole segment", 1);
	bad("x.**b", "'**' must be a whole segment", 2);
	bad("***", "'**' must be a whole segment", 0);
	bad("{**,a}", "'**' must be a whole segment", 1);
	bad("to_{q,k", "unterminated '{' in glob", 3);
	bad("{a,{b", "unterminated '{' in glob", 0);
	bad("to_{q,k.v", "unterminated '{' in glob", 3);
	/* errors inside a dotted group's expansion, at their column as written */
	bad("a.{b..c,d}", "empty segment in glob", 5);
	bad("x.{to_out.0,a**b}", "'**' must be a whole segment", 13);
	bad("{a.b,c}.[z-a]", "reversed range in '[...]'", 9);
	bad("{a.{b.{c.{d.{e.{f.{g.{h.{i.{j.{k.{l.{m.{n.{o.{p.{q.r,s},s},s},s},s},s},s},s},s},s},"
	    "s},s},s},s},s},s},s}", "more than 16 '{...}' holding a '.' in one glob", 48);
	bad("{a.b,c}{a.b,c}{a.b,c}{a.b,c}{a.b,c}{a.b,c}{a.b,c}{a.b,c}{a.b,c}",
	    "'{...}' holding a '.' expand to more than 256 globs", 56);
	bad("a}", "unmatched '}' in glob", 1);
	bad("{a}}", "unmatched '}' in glob", 3);
	bad("a\\", "trailing '\\' in glob", 1);
	bad("a.b\\", "trailing '\\' in glob", 3);
	bad("a..b", "empty segment in glob", 2);
	bad(".a", "empty segment in glob", 0);
	bad("a.", "empty segment in glob", 1);
	bad(".", "empty segment in glob", 0);
	bad("**..x", "empty segment in glob", 3);
	bad("[z-a]", "reversed range in '[...]'", 1);
	bad("x[09a-Z]", "reversed range in '[...]'", 4);
	/* First problem in scan order wins. */
	bad("a..b**", "empty segment in glob", 2);

	/* msg may be NULL/0 and is truncated safely when small. */
	char tiny[8];
	int col = 0;

	UNIT_CHECK(!glob_check("a}", tiny, sizeof tiny, &col) &&
			   strcmp(tiny, "unmatch") == 0 && col == 1,
		   "small msg buffer is truncated and terminated (\"%s\")", tiny);
	UNIT_CHECK(!glob_check("a}", NULL, 0, NULL), "NULL msg and errcol are fine");
}

/* CPU time is what blowup costs, and clock() needs no POSIX feature macro. */
static double now(void)
{
	return (double)clock() / CLOCKS_PER_SEC;
}

static void test_pathological(void)
{
	char name[256] = "";
	char seg[8];
	double t0;
	bool yes, no;

	for (int i = 0; i < 40; i++) {
		snprintf(seg, sizeof seg, "%s%c", i ? "." : "", 'a' + i % 26);
		strcat(name, seg);
	}
	t0 = now();
	yes = m("**.**.**.**.**.**.**.**.n", name); /* 40th segment is 'n' */
	no = m("**.**.**.**.**.**.**.**.x", name);
	UNIT_CHECK(yes, "many '**' finds the last segment");
	UNIT_CHECK(!no, "many '**' rejects a missing segment");
	/* Within one segment: stars and braces memoised. */
	yes = m("*a*a*a*a*a*a*a*a*a*a*", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa");
	no = m("*a*a*a*a*a*a*a*a*a*a*b", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa");
	UNIT_CHECK(yes && !no, "many '*' in one segment");
	no = m("?*a*a*a*a*a*a*a*a*a*a*b", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa");
	UNIT_CHECK(!no, "many '*' after a '?' in one segment");
	no = m("{a,aa,aaa}{a,aa,aaa}{a,aa,aaa}{a,aa,aaa}{a,aa,aaa}{a,aa,aaa}b",
	       "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa");
	UNIT_CHECK(!no, "stacked brace groups");
	UNIT_CHECK(now() - t0 < 0.5, "pathological patterns are fast (%.3fs)",
		   now() - t0);
}

int main(void)
{
	test_literals();
	test_star();
	test_starstar();
	test_question();
	test_classes();
	test_braces();
	test_escapes();
	test_root();
	test_errors();
	test_pathological();
	return unit_done();
}
