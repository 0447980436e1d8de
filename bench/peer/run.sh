#!/bin/sh
# run.sh [BUILD] — the peer benchmark (on demand, not in CI): dtpc beside
# diffusers on PyTorch's CPU backend, same mid-size Flux, weights and inputs
# (bench/peer/peer.py says how). Makes a virtualenv with torch and diffusers
# from PyPI the first time (PEER_VENV, default /tmp/dtpc-peer-venv; several
# GB: the PyPI torch wheel brings its CUDA libraries), then prints the table.
# Best on an otherwise idle machine: the rows are medians, and their ratios
# only mean something within one run.
set -eu
BUILD=${1:-build}
VENV=${PEER_VENV:-/tmp/dtpc-peer-venv}
[ -x "$BUILD/dtpc" ] || { echo "run.sh: no $BUILD/dtpc (make BUILD=$BUILD first)" >&2; exit 2; }
if ! "$VENV/bin/python" -c 'import torch, diffusers, safetensors' 2>/dev/null; then
	python3 -m venv "$VENV"
	"$VENV/bin/pip" install --quiet torch diffusers safetensors numpy
fi
exec "$VENV/bin/python" bench/peer/peer.py --dtpc "$BUILD/dtpc"
