#!/bin/sh
# deps.sh [--debian-only] — installs the Debian packages dtpc builds and tests with, then the
# project's Python environment (torch, diffusers: python/requirements-test.txt)
# at ${DTPC_VENV:-$HOME/.cache/dtpc/venv}, outside the clone so that fresh
# clones on one machine share it.
# Idempotent: installs only what is missing, so `make deps` is cheap to repeat;
# the environment is remade only when requirements-test.txt changes (its hash
# is the stamp). Without PyPI the environment is left out, not an error: the
# tests that need it count as skipped.
set -eu
PKGS="make gcc clang libclang-rt-dev flex bison libcjson-dev libopenblas-dev
      openmpi-bin libopenmpi-dev graphviz python3 python3-numpy python3-venv pkgconf
      groff-base librsvg2-bin"
missing=""
for p in $PKGS; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
		missing="$missing $p"
done
if [ -z "$missing" ]; then
	echo "deps: all installed"
else
	echo "deps: installing$missing"
	SUDO=""
	[ "$(id -u)" -eq 0 ] || SUDO="sudo"
	export DEBIAN_FRONTEND=noninteractive
	$SUDO apt-get update -qq
	# shellcheck disable=SC2086
	$SUDO apt-get install -y -qq --no-install-recommends $missing
fi

# ---- the Python environment ----------------------------------------------------------------
[ "${1:-}" = --debian-only ] && exit 0
venv=${DTPC_VENV:-$HOME/.cache/dtpc/venv}
req=$(dirname "$0")/../python/requirements-test.txt
want=$(sha256sum "$req" | cut -d' ' -f1)
[ "$(cat "$venv/.dtpc-stamp" 2>/dev/null)" = "$want" ] && {
	echo "deps: python environment ready ($venv)"
	exit 0
}
mkdir -p "$(dirname "$venv")"
# one maker at a time (CI jobs side by side); the others find it made
exec 9>"$venv.lock"
flock 9
if [ "$(cat "$venv/.dtpc-stamp" 2>/dev/null)" = "$want" ]; then
	echo "deps: python environment ready ($venv)"
	exit 0
fi
echo "deps: creating the python environment $venv (torch, diffusers: minutes, about 6 GB)"
# made in place (a venv cannot move: its scripts name its path); the stamp,
# written last, is what says it is whole
rm -rf "$venv"
if python3 -m venv "$venv" && "$venv/bin/python" -m pip install -q --retries 2 --timeout 30 -r "$req"; then
	echo "$want" >"$venv/.dtpc-stamp"
	echo "deps: python environment ready ($venv)"
else
	rm -rf "$venv"
	echo "deps: could not create the python environment (PyPI unreachable?): the tests" \
		"that need torch and diffusers will be skipped" >&2
fi
