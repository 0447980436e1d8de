#!/bin/sh
# install.sh BUILD — the installed library as a deployment uses it: `make
# install` into a temporary prefix, then a small C program built with
# `pkg-config --cflags --libs dtpc` opens a graph compiled by the installed
# dtpc, runs it on a one-rank local world with seeded weights and inputs and
# reads its output, against the installed libdtpc.so (and once linked
# statically, through Libs.private). The installed .so exports only dtpc_*
# symbols (_init and _fini, if a toolchain exports them, are allowed); its
# soname is libdtpc.so.MAJOR; DESTDIR stages; `make uninstall` removes
# every file; the compiler library and the cost library use of the runtime
# only the graph format (their includes and the objects they link). Ends with "install: N passed, N
# failed, N skipped".
set -u
BUILD=${1:-build}
. tests/lib.sh

prefix=$tmp/prefix
version=$(sed -n 's/^#define DTPC_VERSION "\(.*\)"/\1/p' graph/version.h)
soname=libdtpc.so.${version%%.*}
export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"

# check NAME COMMAND...: passes when COMMAND succeeds
check() {
	c_name=$1
	shift
	if "$@" >"$tmp/check.out" 2>&1; then ok; else
		bad "install/$c_name"
		head -20 "$tmp/check.out"
	fi
}

if ! make -s BUILD="$BUILD" install PREFIX="$prefix" DESTDIR= >"$tmp/make.out" 2>&1; then
	bad install/make-install
	tail -20 "$tmp/make.out"
	summary install
	exit
fi
ok

files="bin/dtpc lib/libdtpc.so lib/$soname lib/libdtpc.so.$version lib/libdtpc.a
include/dtpc.h lib/pkgconfig/dtpc.pc share/man/man1/dtpc.1 share/man/man5/dtpc-plan.5
share/dtpc/models/flux.plan share/dtpc/models/wan.plan"
missing=""
for f in $files; do
	[ -e "$prefix/$f" ] || missing="$missing $f"
done
if [ -z "$missing" ]; then ok; else bad "install/files: missing$missing"; fi

if readelf -d "$prefix/lib/libdtpc.so.$version" | grep -q "Library soname: \[$soname\]"; then ok; else
	bad "install/soname: not $soname"
	readelf -d "$prefix/lib/libdtpc.so.$version" | grep -i soname
fi

# Only the API is exported: no internal name (graph_parse, exec_op...).
nm -D --defined-only "$prefix/lib/libdtpc.so" | awk '{ print $NF }' >"$tmp/syms"
grep -v -e '^dtpc_' -e '^_init$' -e '^_fini$' "$tmp/syms" >"$tmp/extra"
if [ -s "$tmp/extra" ]; then
	bad "install/exports: $(wc -l <"$tmp/extra") symbols besides dtpc_*"
	head -10 "$tmp/extra"
elif grep -q '^dtpc_session_run$' "$tmp/syms"; then ok; else
	bad "install/exports: dtpc_session_run is not exported"
fi
# and every function the installed dtpc.h declares is (one declared without
# DTPC_API would be hidden: the header promises what the library lacks)
sed -n 's/^\(DTPC_API \)\{0,1\}[a-z][a-z0-9_ ]* \**\(dtpc_[a-z0-9_]*\)(.*/\2/p' \
	"$prefix/include/dtpc.h" | sort -u >"$tmp/api"
sort -u "$tmp/syms" >"$tmp/syms.sorted"
comm -23 "$tmp/api" "$tmp/syms.sorted" >"$tmp/hidden"
if [ "$(wc -l <"$tmp/api")" -ge 30 ] && [ ! -s "$tmp/hidden" ]; then ok; else
	bad "install/exports-api: $(wc -l <"$tmp/api") functions declared; not exported: $(tr '\n' ' ' <"$tmp/hidden")"
fi

cat >"$tmp/m.plan" <<'PLAN'
model m { input x : [1, 4, 8]; proj_in = linear(x, 8); y = gelu(proj_in); output y; }
plan p { model m; }
PLAN
check compile-plan "$prefix/bin/dtpc" "$tmp/m.plan" --plan p -o "$tmp/m.graph"

cat >"$tmp/use.c" <<'PROG'
/* Open a graph, one rank, seeded weights and inputs, run, read output 0. */
#include <dtpc.h>
#include <math.h>
#include <stdio.h>

#define TRY(call)                                                               \
	do {                                                                    \
		if ((call) != DTPC_OK) {                                        \
			fprintf(stderr, "%s: %s\n", #call, dtpc_last_error());  \
			return 1;                                               \
		}                                                               \
	} while (0)

int main(int argc, char **argv)
{
	dtpc_graph *g;
	dtpc_local_world *w;
	dtpc_comm *c;
	dtpc_session *s;
	const char *name;
	const float *y;
	const int64_t *shape;
	int nd;
	double sum = 0;

	if (argc != 2)
		return 2;
	TRY(dtpc_graph_open_file(argv[1], &g));
	TRY(dtpc_local_world_create(1, 0, &w));
	TRY(dtpc_comm_local(w, 0, &c));
	TRY(dtpc_session_create(g, c, DTPC_DEVICE_CPU, &s));
	TRY(dtpc_session_bind_weights_seed(s, 7));
	TRY(dtpc_session_bind_inputs_seed(s, 7));
	TRY(dtpc_session_run(s));
	TRY(dtpc_session_output(s, 0, &name, &y, &shape, &nd));
	for (int i = 0; i < 32; i++)
		sum += fabs(y[i]);
	printf("%s [%lld, %lld, %lld] %s\n", name, (long long)shape[0], (long long)shape[1],
	       (long long)shape[2], isfinite(sum) && sum > 0 ? "finite, not zero" : "BAD");
	dtpc_session_free(s);
	dtpc_comm_free(c);
	dtpc_local_world_free(w);
	dtpc_graph_free(g);
	return 0;
}
PROG
want="y [1, 4, 8] finite, not zero"

# shellcheck disable=SC2046 # pkg-config's words are separate arguments
if ${CC:-cc} -o "$tmp/use" "$tmp/use.c" $(pkg-config --cflags --libs dtpc) -lm >"$tmp/cc.out" 2>&1; then
	ok
	out=$(LD_LIBRARY_PATH="$prefix/lib" "$tmp/use" "$tmp/m.graph" 2>&1)
	if [ "$out" = "$want" ]; then ok; else bad "install/run-shared: $out"; fi
	# the program ran against the installed library, not another one
	if LD_LIBRARY_PATH="$prefix/lib" ldd "$tmp/use" | grep -q "$soname => $prefix/lib/$soname"; then ok; else
		bad "install/ldd: $soname not resolved in the prefix"
		LD_LIBRARY_PATH="$prefix/lib" ldd "$tmp/use" | grep dtpc
	fi
else
	bad install/cc-shared
	head -20 "$tmp/cc.out"
fi

# Statically: libdtpc.a and the libraries of Libs.private.
# shellcheck disable=SC2046
if ${CC:-cc} -o "$tmp/use-static" "$tmp/use.c" $(pkg-config --cflags dtpc) "$prefix/lib/libdtpc.a" \
	$(pkg-config --static --libs dtpc | sed 's/-ldtpc//') -lm >"$tmp/cc.out" 2>&1; then
	out=$(env -u LD_LIBRARY_PATH "$tmp/use-static" "$tmp/m.graph" 2>&1)
	if [ "$out" = "$want" ]; then ok; else bad "install/run-static: $out"; fi
else
	bad install/cc-static
	head -20 "$tmp/cc.out"
fi

# The man pages format without warnings.
if command -v groff >/dev/null 2>&1; then
	for m in man1/dtpc.1 man5/dtpc-plan.5; do
		if groff -man -Tutf8 -ww -z "$prefix/share/man/$m" >"$tmp/groff" 2>&1 && ! [ -s "$tmp/groff" ]; then
			ok
		else
			bad "install/man: $m"
			head -5 "$tmp/groff"
		fi
	done
else
	skipped install/man "groff is not installed"
fi

check uninstall make -s BUILD="$BUILD" uninstall PREFIX="$prefix" DESTDIR=
left=$(find "$prefix" ! -type d | sed "s|^$prefix/||")
if [ -z "$left" ]; then ok; else bad "install/uninstall left: $left"; fi

# DESTDIR stages under another root; the .pc file names the final prefix.
stage=$tmp/stage
check destdir make -s BUILD="$BUILD" install PREFIX=/opt/dtpc DESTDIR="$stage"
if [ -x "$stage/opt/dtpc/bin/dtpc" ] &&
	grep -qx 'prefix=/opt/dtpc' "$stage/opt/dtpc/lib/pkgconfig/dtpc.pc"; then ok; else
	bad "install/destdir: not staged under DESTDIR with prefix /opt/dtpc"
fi

# ---- the layers: cost -> compiler -> graph <- runtime ------------------------------------
# The graph format (graph/) is a layer of its own that includes nothing
# outside graph/; libdtpcc (compiler/, compiler/ops/) includes of the others
# only graph/; the runtime (runtime/, runtime/ops/, runtime/cuda/) nothing
# of compiler/ or cli/; the cost model (cost/, libdtpcost) only cost/,
# compiler/ and graph/. A link of libdtpcc, or of libdtpcost, takes from
# libdtpc only graph/'s objects (the loader, the op table, the stats, the
# file), which need nothing else of it, and libdtpc holds no writer: a
# deployment never writes a graph (docs/architecture.md). Negative
# controls: copies of compiler/, graph/ and cost/ with a forbidden include,
# and copies of the archives with an object calling the session API, are
# caught.

# layer_includes ALLOWED DIR...: prints the quoted includes with a folder of
# each DIR/*.[ch] whose folder is not in ALLOWED (an extended regular
# expression of folders, e.g. 'compiler|graph'); exits 1 when there is none
# (the rule holds), 0 when there are, 2 when no DIR has an include with a
# folder at all (nothing was checked). A name without a folder is the
# file's own folder or a generated header of BUILD/gen.
layer_includes() {
	li_allowed=$1
	shift
	for dir; do
		for f in "$dir"/*.c "$dir"/*.h; do
			[ -f "$f" ] || continue
			grep -H -n '^[[:space:]]*#[[:space:]]*include[[:space:]]*"[^"]*/' "$f"
		done
	done >"$tmp/layer.all"
	[ -s "$tmp/layer.all" ] || return 2
	grep -v -E "\"($li_allowed)/[^\"]*\"" "$tmp/layer.all"
}

# layer_rule NAME ALLOWED DIR...: one check of layer_includes
layer_rule() {
	lr_name=$1 lr_allowed=$2
	shift 2
	layer_includes "$lr_allowed" "$@" >"$tmp/layer.inc"
	case $? in
	1) ok ;;
	0)
		bad "install/layer-includes-$lr_name: $* include outside $lr_allowed"
		cat "$tmp/layer.inc"
		;;
	*) bad "install/layer-includes-$lr_name: no include of $* was read" ;;
	esac
}

# layer_objects COMPILER.a RUNTIME.a: the members of RUNTIME.a that a link of
# COMPILER.a pulls in, directly or through each other, one per line
layer_objects() {
	{
		nm -g --undefined-only "$1" | awk '{ print "need", $NF }'
		nm -A -g --defined-only "$2" | awk '{ split($1, p, ":"); print "def", p[2], $NF }'
		nm -A -g --undefined-only "$2" | awk '{ split($1, p, ":"); print "use", p[2], $NF }'
	} | awk '
		$1 == "need" { queue[++n] = $2 }
		$1 == "def" { where[$3] = $2 }
		$1 == "use" { uses[$2] = uses[$2] " " $3 }
		END {
			for (i = 1; i <= n; i++) {
				o = where[queue[i]]
				if (o == "" || (o in pulled))
					continue
				pulled[o] = 1
				print o
				k = split(uses[o], u, " ")
				for (j = 1; j <= k; j++)
					queue[++n] = u[j]
			}
		}' | sort
}
# graph/'s objects but the writer, which is libdtpcc's own
layer_allowed=$(for f in graph/*.c; do basename "$f" .c; done | grep -vx graph_write | sed 's/$/.o/' | sort)

layer_rule graph 'graph' graph
layer_rule compiler 'compiler|graph' compiler compiler/ops
layer_rule runtime 'runtime|graph|kernels' runtime runtime/ops runtime/cuda
layer_rule cost 'cost|compiler|graph' cost
mkdir -p "$tmp/compiler-bad/ops" "$tmp/graph-bad"
cp compiler/*.c compiler/*.h "$tmp/compiler-bad/"
cp compiler/ops/*.c "$tmp/compiler-bad/ops/"
printf '#include "runtime/session.h"\n' >>"$tmp/compiler-bad/driver.c"
printf '#include "runtime/op_runtime.h"\n' >>"$tmp/compiler-bad/ops/linear.c"
layer_includes 'compiler|graph' "$tmp/compiler-bad" "$tmp/compiler-bad/ops" >"$tmp/layer.bad"
if grep -q 'driver\.c:.*runtime/session\.h' "$tmp/layer.bad" &&
	grep -q 'ops/linear\.c:.*runtime/op_runtime\.h' "$tmp/layer.bad"; then ok; else
	bad "install/layer-includes-control: a runtime include in compiler/ or compiler/ops/ went unnoticed"
fi
mkdir -p "$tmp/cost-bad"
cp cost/*.c cost/*.h "$tmp/cost-bad/"
printf '#include "runtime/session.h"\n' >>"$tmp/cost-bad/model.c"
layer_includes 'cost|compiler|graph' "$tmp/cost-bad" >"$tmp/layer.bad"
if grep -q 'model\.c:.*runtime/session\.h' "$tmp/layer.bad"; then ok; else
	bad "install/layer-includes-cost-control: a runtime include in cost/ went unnoticed"
fi
cp graph/*.c graph/*.h "$tmp/graph-bad/"
printf '#include "compiler/ir.h"\n' >>"$tmp/graph-bad/graph_load.c"
layer_includes 'graph' "$tmp/graph-bad" >"$tmp/layer.bad"
if grep -q 'graph_load\.c:.*compiler/ir\.h' "$tmp/layer.bad"; then ok; else
	bad "install/layer-includes-graph-control: a compiler include in graph/ went unnoticed"
fi
if ar t "$BUILD/libdtpc.a" | grep -qx 'graph_write\.o'; then
	bad "install/layer-no-writer: libdtpc.a holds the graph writer"
elif ar t "$BUILD/libdtpcc.a" | grep -qx 'graph_write\.o'; then ok; else
	bad "install/layer-no-writer: libdtpcc.a lacks the graph writer"
fi

layer_objects "$BUILD/libdtpcc.a" "$BUILD/libdtpc.a" >"$tmp/layer.objs"
# at least the loader (driver.c reads every graph back before writing it),
# so an empty list from a failing nm does not pass
echo "$layer_allowed" >"$tmp/layer.allowed"
if grep -qx 'graph_load\.o' "$tmp/layer.objs" &&
	[ -z "$(comm -23 "$tmp/layer.objs" "$tmp/layer.allowed")" ]; then ok; else
	bad "install/layer-objects: libdtpcc pulls in of libdtpc: $(tr '\n' ' ' <"$tmp/layer.objs")"
fi
layer_objects "$BUILD/libdtpcost.a" "$BUILD/libdtpc.a" >"$tmp/layer.objs"
# the loader at least (the model loads the graphs it compiles)
if grep -qx 'graph_load\.o' "$tmp/layer.objs" &&
	[ -z "$(comm -23 "$tmp/layer.objs" "$tmp/layer.allowed")" ]; then ok; else
	bad "install/layer-objects-cost: libdtpcost pulls in of libdtpc: $(tr '\n' ' ' <"$tmp/layer.objs")"
fi
printf '#include "runtime/dtpc.h"\nint layer_bad(dtpc_session *s);\nint layer_bad(dtpc_session *s) { return dtpc_session_run(s); }\n' \
	>"$tmp/layer_bad.c"
cp "$BUILD/libdtpcc.a" "$tmp/libbad.a"
if ${CC:-cc} -I. -c -o "$tmp/layer_bad.o" "$tmp/layer_bad.c" && ar rcs "$tmp/libbad.a" "$tmp/layer_bad.o" &&
	layer_objects "$tmp/libbad.a" "$BUILD/libdtpc.a" | grep -qx 'session\.o'; then ok; else
	bad "install/layer-objects-control: a call of dtpc_session_run in libdtpcc went unnoticed"
fi
cp "$BUILD/libdtpcost.a" "$tmp/libbad.a"
if ar rcs "$tmp/libbad.a" "$tmp/layer_bad.o" &&
	layer_objects "$tmp/libbad.a" "$BUILD/libdtpc.a" | grep -qx 'session\.o'; then ok; else
	bad "install/layer-objects-cost-control: a call of dtpc_session_run in libdtpcost went unnoticed"
fi

summary install
