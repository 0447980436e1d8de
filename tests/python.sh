#!/bin/sh
# python.sh BUILD — the Python package (python/dtpc): tests/python/ranks.py
# (Ranks against Graph.run and `dtpc run`, persistence counted, the compile
# cache, failures, an interrupt, refusals, MPI ranks) and tests/python/cost.py
# (dtpc.cost and dtpc.suggest against the program, their refusals) with the
# system Python and Debian's numpy; tests/python/torch_tensors.py (torch
# tensors as weights and inputs) and tests/python/porting.py (dtpc.porting.compare
# on the SD3 and Flux.2 ports, correct and broken), tests/python/launch.py
# (torchrun's mode without a GPU: the NCCL id through torchrun's store, the
# refusals on every rank; SIGINT through a dtpc.torch pipeline step) and
# tests/python/ltx2_transformer.py (dtpc.torch's LTX-2 adapter against the
# stock transformer on 4 meshes, its refusals, a perturbed-weight control) and
# tests/python/helios_transformer.py (dtpc.torch's Helios adapter with and
# without the history latents on 3 meshes, its refusals, a perturbed-weight
# control), tests/python/minimax_h3_transformer.py (the MiniMax-H3 adapter on
# 7 meshes, two packed sequences, its refusals, a perturbed-weight control) and
# tests/python/qwenimage21_transformer.py (the Qwen-Image 2.1 adapter's cached
# decode step on 10 meshes, its refusals, a perturbed-weight control) and
# examples/python/flux_pipeline.py in launch modes 1 and 2 (an image each,
# the same bytes)
# with the project's environment (`make deps`), each skipped without it; and
# `pip install ./python` into a scratch venv finding a `make install` by pkg-config or by
# PATH and the loader's path. Ends with "python: N passed, N failed, N
# skipped".
set -u
BUILD=${1:-build}
. tests/lib.sh

PY=python3
[ -x /usr/bin/python3 ] && PY=/usr/bin/python3

# checks PYTHON SCRIPT NAME: each "ok NAME", "FAIL NAME: why" and "skip NAME:
# why" line the script prints is one check; a script that does not reach
# its last line ("checks done") fails
checks() {
	"$1" "$2" "$tmp" >"$tmp/$3.out" 2>&1
	while IFS= read -r line; do
		case $line in
		"ok "*) ok ;;
		"FAIL "*) bad "python/$3/${line#FAIL }" ;;
		"skip "*)
			c_rest=${line#skip }
			skipped "python/$3/${c_rest%%:*}" "${c_rest#*: }"
			;;
		esac
	done <"$tmp/$3.out"
	grep -A12 '^FAIL' "$tmp/$3.out" | grep -v '^FAIL' | head -40
	if ! grep -qx 'checks done' "$tmp/$3.out"; then
		bad "python/$3: ended early"
		tail -20 "$tmp/$3.out"
	fi
}

if ! "$PY" -c 'import numpy' >/dev/null 2>&1; then
	skipped python "numpy is missing for $PY (apt-get install python3-numpy)"
	summary python
	exit
fi
if nm -D "$BUILD/libdtpc.so" 2>/dev/null | grep -q '__[at]san_init'; then
	# a sanitizer's runtime must be the first library of the process
	skipped python "libdtpc.so is built with a sanitizer: Python cannot load it"
	summary python
	exit
fi
export PYTHONPATH=python DTPC_BUILD="$BUILD"
checks "$PY" tests/python/ranks.py ranks
checks "$PY" tests/python/cost.py cost

vpy=$(dtpc_venv_python)
if [ -n "$vpy" ]; then
	checks "$vpy" tests/python/torch_tensors.py torch
	checks "$vpy" tests/python/porting.py porting
	checks "$vpy" tests/python/launch.py launch
	checks "$vpy" tests/python/ltx2_transformer.py ltx2
	checks "$vpy" tests/python/helios_transformer.py helios
	checks "$vpy" tests/python/minimax_h3_transformer.py minimax_h3
	checks "$vpy" tests/python/qwenimage21_transformer.py qwenimage21
	# the README's example in launch modes 1 (4 local ranks) and 2 (mpirun -np
	# 4): an image each, the same bytes (every rank runs the pipeline, rank 0
	# saves; the tiny random pipeline is seeded)
	if timeout 300 "$vpy" examples/python/flux_pipeline.py --out "$tmp/flux-local.png" \
		>"$tmp/example-local.out" 2>&1 && [ "$(head -c 4 "$tmp/flux-local.png" | od -An -c |
		tr -d ' ')" = '211PNG' ]; then ok; else
		bad python/example-flux-local
		tail -20 "$tmp/example-local.out"
	fi
	if ! command -v mpirun >/dev/null; then
		skipped python/example-flux-mpi "no mpirun (apt-get install openmpi-bin)"
	elif timeout 300 mpirun -np 4 --oversubscribe --allow-run-as-root --mca btl self,vader \
		"$vpy" examples/python/flux_pipeline.py --mpi --out "$tmp/flux-mpi.png" \
		>"$tmp/example-mpi.out" 2>&1 && cmp -s "$tmp/flux-local.png" "$tmp/flux-mpi.png"; then
		ok
	else
		bad "python/example-flux-mpi: no image, or not mode 1's"
		tail -20 "$tmp/example-mpi.out"
	fi
else
	skipped python/torch "no project Python environment (make deps makes it)"
	skipped python/porting "no project Python environment (make deps makes it)"
	skipped python/launch "no project Python environment (make deps makes it)"
	skipped python/ltx2 "no project Python environment (make deps makes it)"
	skipped python/helios "no project Python environment (make deps makes it)"
	skipped python/minimax_h3 "no project Python environment (make deps makes it)"
	skipped python/qwenimage21 "no project Python environment (make deps makes it)"
	skipped python/example-flux "no project Python environment (make deps makes it)"
fi

# ---- installed: make install, pip install ./python, import dtpc from elsewhere ---------------
version=$(sed -n 's/^#define DTPC_VERSION "\(.*\)"/\1/p' graph/version.h)
if grep -qx "version = \"$version\"" python/pyproject.toml; then ok; else
	bad "python/version: python/pyproject.toml's version is not graph/version.h's $version"
fi

prefix=$tmp/prefix
# numpy from the system (no download); setuptools too (--no-build-isolation):
# the check runs without the network. From a copy: setuptools writes its
# metadata beside the package.
if ! make -s BUILD="$BUILD" install PREFIX="$prefix" DESTDIR= >"$tmp/make.out" 2>&1; then
	bad python/make-install
	tail -20 "$tmp/make.out"
elif ! "$PY" -m venv --system-site-packages "$tmp/venv" >"$tmp/venv.out" 2>&1; then
	skipped python/pip-install "no venv for $PY (apt-get install python3-venv): $(tail -1 "$tmp/venv.out")"
elif ! cp -r python "$tmp/src" || ! "$tmp/venv/bin/python" -m pip install -q --no-index \
	--no-build-isolation "$tmp/src" >"$tmp/pip.out" 2>&1; then
	bad python/pip-install
	tail -20 "$tmp/pip.out"
else
	ok
	cat >"$tmp/use.py" <<'PYEOF'
import os, sys
import numpy as np
import dtpc
prefix = sys.argv[1]
assert dtpc.__file__.startswith(sys.prefix), dtpc.__file__  # the installed package
lib, prog = dtpc._lib.library()._name, dtpc._lib.program()
assert lib.startswith(prefix) and prog.startswith(prefix), (lib, prog)
assert os.path.isfile(os.path.join(dtpc.models_dir(), "flux.plan")), dtpc.models_dir()
assert dtpc.models_dir().startswith(prefix), dtpc.models_dir()
with open("m.plan", "w") as f:
    f.write("model m { input x : [1, 4, 8]; proj_in = linear(x, 8); output proj_in; }\n"
            "plan p { model m; mesh tp = 2; \"proj_in\" : colwise; }\n")
g = dtpc.compile_cached("m.plan", plan="p", cache_dir="cache")
with dtpc.Ranks(g) as r:
    r.bind_weights(3)
    y = r.run({"x": np.ones((1, 4, 8))})["proj_in"]
assert y.shape == (1, 4, 8) and np.isfinite(y).all() and np.abs(y).sum() > 0, y
print("installed ok")
PYEOF
	# by pkg-config alone, then by PATH and the loader's path alone
	for how in pkg-config path; do
		mkdir -p "$tmp/use-$how"
		if [ $how = pkg-config ]; then
			set -- PKG_CONFIG_PATH="$prefix/lib/pkgconfig"
		else
			set -- PKG_CONFIG_PATH= PATH="$prefix/bin:$PATH" LD_LIBRARY_PATH="$prefix/lib"
		fi
		if (cd "$tmp/use-$how" && env -u DTPC_BUILD -u PYTHONPATH -u DTPC_LIB -u DTPC \
			-u DTPC_MODELS "$@" "$tmp/venv/bin/python" "$tmp/use.py" "$prefix") \
			>"$tmp/use.out" 2>&1 && grep -qx 'installed ok' "$tmp/use.out"; then ok; else
			bad "python/installed-by-$how"
			tail -20 "$tmp/use.out"
		fi
	done
	# the control: with neither, the error names what is missing and how to get it
	(cd "$tmp" && env -u DTPC_BUILD -u PYTHONPATH -u DTPC_LIB -u DTPC PKG_CONFIG_PATH= \
		"$tmp/venv/bin/python" -c 'import dtpc; dtpc.Graph.open("x")') >"$tmp/none.out" 2>&1
	if grep -q "dtpc.DtpcError: cannot find libdtpc.so (looked in pkg-config dtpc, the loader's path): .*make install" \
		"$tmp/none.out"; then ok; else
		bad python/installed-missing-named
		tail -5 "$tmp/none.out"
	fi
fi

summary python
