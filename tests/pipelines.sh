#!/bin/sh
# pipelines.sh BUILD — dtpc.torch: diffusers' own pipelines (Flux, Flux.2, Qwen-Image,
# Wan, Wan I2V, ChronoEdit, Helios, LTX-Video, LTX-2, SD3) with the transformer
# replaced by dtpc.torch.parallelize, their images
# against the stock pipeline's, on many meshes; refusals; launch mode 2 under
# mpirun. The checks and their tolerances: tests/pipelines.py.
#
# Python: ${DTPC_VENV:-$HOME/.cache/dtpc/venv}/bin/python with torch and diffusers;
# without it every check is skipped, and says so.
#
# Prints one line per check and "pipelines: N passed, N failed, N skipped". One
# family alone: PYTHONPATH=python DTPC_BUILD=build $py tests/pipelines.py FAMILY.
set -u
BUILD=${1:-build}
. tests/lib.sh
repo=$(pwd)
py=${DTPC_VENV:-$HOME/.cache/dtpc/venv}/bin/python
why=""
if ! [ -x "$py" ] || ! "$py" -c 'import torch, diffusers' >/dev/null 2>&1; then
	why="no Python with torch and diffusers at $py (set DTPC_VENV)"
elif nm -D "$BUILD/libdtpc.so" 2>/dev/null | grep -q '__[at]san_init'; then
	# a sanitizer's runtime must be the first library of the process
	why="libdtpc.so is built with a sanitizer: Python cannot load it"
fi
if [ -n "$why" ]; then
	for n in $(python3 tests/pipelines.py --list); do skipped "pipelines/$n" "$why"; done
	summary pipelines
	exit
fi
PYTHONPATH=$repo/python DTPC_BUILD=$BUILD "$py" tests/pipelines.py >"$tmp/out" 2>"$tmp/err"
rc=$?
while IFS= read -r line; do
	case $line in
	"ok   "*)
		ok
		echo "$line"
		;;
	"FAIL "*)
		n=${line#FAIL }
		bad "pipelines/${n%% *}"
		echo "      ${n#* }"
		;;
	"skip "*)
		n=${line#skip }
		skipped "pipelines/${n%%:*}" "${n#*: }"
		;;
	*) echo "$line" ;;
	esac
done <"$tmp/out"
# every check reported: none lost to a crash
for n in $(python3 tests/pipelines.py --list); do
	grep -q "^\(ok  \|FAIL\|skip\) $n\( \|:\|$\)" "$tmp/out" || bad "pipelines/$n (not reported)"
done
if [ $rc != 0 ]; then
	bad pipelines/run
	tail -20 "$tmp/err"
fi
summary pipelines
