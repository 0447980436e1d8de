#!/bin/sh
# gpu_bundle.sh BUILD — one folder, BUILD/bundle (and packed, BUILD/bundle.tar.xz), that runs the GPU checks on
# a bare GPU machine (tests/gpu/run.sh BUILD/bundle): dtpc, the GPU test and
# benchmark programs, stripped, laid out as in BUILD, and in lib/ the shared
# libraries they need that such a machine lacks (cJSON, OpenBLAS, Open MPI's
# runtime, the CUDA runtime). cuBLASLt, NCCL and cuDNN are too large to carry
# (half a gigabyte, 200 MB, and cuDNN's engines with the version-matched stub
# that loads them); the GPU machine's CUDA toolkit or its Python packages
# (nvidia-cublas, nvidia-nccl, nvidia-cudnn) provide them: run.sh looks in both.
set -eu
BUILD=${1:-build}
B="$BUILD/bundle"
rm -rf "$B"
mkdir -p "$B/lib" "$B/tests/gpu" "$B/bench/gpu"
cp "$BUILD/dtpc" "$BUILD/libdtpc_cuda.so" "$B/"
# the Python package's library (tests/gpu/torchrun_flux.py), beside libdtpc_cuda.so
cp -L "$BUILD/libdtpc.so" "$B/"
for f in "$BUILD"/tests/gpu/test_* "$BUILD"/bench/gpu/*; do
	[ -f "$f" ] && [ -x "$f" ] || continue
	case $f in *.o|*.d) continue ;; esac
	rel=${f#"$BUILD"/}
	cp "$f" "$B/$rel"
done
find "$B" -type f -perm -u+x -exec strip --strip-debug {} +
# every library a program loads, except the C library's own and the driver's
# (the GPU machine has those), and the two that are too large to carry
for f in $(find "$B" -type f -perm -u+x) "$B/libdtpc_cuda.so"; do
	ldd "$f" | awk '/=> \//{print $3}'
done | sort -u | while read -r lib; do
	case $(basename "$lib") in
	libc.so*|libm.so*|libpthread.so*|libdl.so*|librt.so*|ld-linux*|libcuda.so*|\
	libcublas*|libnccl*|libcudnn*|libstdc++*|libgcc_s*) ;;
	*) cp -L "$lib" "$B/lib/" ;;
	esac
done
du -sh "$B" | awk '{print "gpu-bundle: " $1 " in " $2}'
# packed too: a lent GPU machine takes 64 MiB with the working tree, and
# OpenBLAS alone is 36 MB unpacked (tests/gpu/run.sh BUILD/bundle.tar.xz
# unpacks it)
tar -C "$BUILD" -cJf "$BUILD/bundle.tar.xz" bundle
du -sh "$BUILD/bundle.tar.xz" | awk '{print "gpu-bundle: " $1 " packed in " $2}'
