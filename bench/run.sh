#!/bin/sh
# run.sh BUILD — the benchmarks (not tests: they print figures, which are
# recorded by hand with the machine and date in docs/performance.md).
set -eu
BUILD=${1:-build}
echo "machine: $(uname -m), $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
echo "date:    $(date -u +%Y-%m-%d)"
echo
python3 bench/check_scaling.py "$BUILD"
echo
python3 bench/compile_scaling.py "$BUILD"
echo
python3 bench/runtime_bench.py "$BUILD"
echo
python3 bench/cost_accuracy.py "$BUILD"
echo
# the pipeline through dtpc.torch beside stock diffusers: the project venv's
# torch and diffusers (make deps)
VENV_PY=$HOME/.cache/dtpc/venv/bin/python
if "$VENV_PY" -c 'import torch, diffusers' 2>/dev/null; then
	"$VENV_PY" bench/pipeline/pipeline_bench.py --build "$BUILD"
else
	echo "pipeline benchmark skipped: no torch and diffusers in $VENV_PY (make deps makes it)"
fi
