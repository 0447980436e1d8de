#!/bin/sh
# deps.sh — installs the Debian packages dtpc builds and tests with.
# Idempotent: installs only what is missing, so `make deps` is cheap to repeat.
set -eu
PKGS="make gcc clang libclang-rt-dev flex bison libcjson-dev libopenblas-dev
      openmpi-bin libopenmpi-dev graphviz python3 python3-numpy pkgconf groff-base
      librsvg2-bin"
missing=""
for p in $PKGS; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
		missing="$missing $p"
done
if [ -z "$missing" ]; then
	echo "deps: all installed"
	exit 0
fi
echo "deps: installing$missing"
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
# shellcheck disable=SC2086
$SUDO apt-get install -y -qq --no-install-recommends $missing
