#!/usr/bin/env bash
# Builds and runs the GPU convolution benchmark (tools/bench_conv.cu) on a machine with a GPU.
#   tools/bench_gpu.sh [batch] [iterations] [--cases]   (defaults 64 10; --cases: tests/conv_cases.h's small cases)
# Needs only nvcc and gcc: the conv kernels and util/common.c are compiled here, nothing else.
set -euo pipefail
cd "$(dirname "$0")/.."
NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
ARCH=${CUDA_ARCH:-90}
OUT=${BENCH_DIR:-build/bench-gpu}
mkdir -p "$OUT"
# CTRAIN_PREBUILT=1 with $OUT/bench_conv present (tools/gpu_stage.sh builds it off the device):
# no compiling on the GPU machine, whose device time is short.
# BENCH_BUILD_ONLY=1: build and stop (tools/gpu_stage.sh, on a machine without a GPU).
if [ -z "${CTRAIN_PREBUILT:-}" ] || [ ! -x "$OUT/bench_conv" ]; then
  gcc -std=c11 -O2 -D_GNU_SOURCE -I. -c util/common.c -o "$OUT/common.o"
  # On Hopper build for sm_90a, which the wgmma engine needs (its code for plain sm_90 traps).
  GA=$ARCH
  [ "$ARCH" = 90 ] && GA=90a
  # The C++ runtime linked in, as build.sh does for every program that travels (only glibc dynamic).
  "$NVCC" -std=c++17 -O3 -lineinfo -I. -DCTRAIN_CUDA -gencode arch=compute_$GA,code=sm_$GA \
    -Xcompiler -static-libgcc,-static-libstdc++ \
    -o "$OUT/bench_conv" tools/bench_conv.cu kernels/conv.cu kernels/conv_generic.cu kernels/conv_tc1.cu kernels/conv_split.cu \
    kernels/conv_tc2.cu kernels/conv_wgmma.cu kernels/linear.cu "$OUT/common.o"
fi
[ -n "${BENCH_BUILD_ONLY:-}" ] && exit 0
"$OUT/bench_conv" "${1:-64}" "${2:-10}" "${@:3}"
