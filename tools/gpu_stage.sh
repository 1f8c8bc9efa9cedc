#!/usr/bin/env bash
# Prepares a GPU session on THIS machine (which has the Debian headers and libraries that a lent
# GPU machine may lack): builds the release binaries and the GPU test programs, then copies them,
# debug info stripped (symbols kept: tests/test_linkage.sh reads them), with their repository
# paths, into .carry/gpu.tar.xz (the sm_80 + sm_90 kernels make the programs large; compressed they
# leave room under the device tool's 64 MiB). The Hopper files (kernels/conv_wgmma.cu, the wgmma
# and mbarrier checks of kernels/ptx_check.cu) are built for sm_90a instead of sm_90 (build.sh's
# NVFLAGS_90A; bench_conv: tools/bench_gpu.sh), and the programs that carry them are checked for
# sm_90a code before packing. A lent session has 15 minutes of device time in all, which is one
# call of at most 540 s: stage here first (about 5 minutes from a fresh clone), then
#   run(command="tools/gpu_session.sh", carry=[".carry"], timeout_s=560)
# (tools/gpu_session.sh --plan shows what that call runs). .carry/ is ignored by git. The device
# tool carries at most 64 MiB with the working tree. The programs link only glibc dynamically
# (tests/test_linkage.sh), so the GPU machine's other libraries cannot matter.
set -euo pipefail
cd "$(dirname "$0")/.."
T0=$SECONDS
./build.sh >/dev/null
./build.sh gpu-tests >/dev/null
[ -x build/tools/bench_gpu_train ] || { echo "gpu_stage: build/tools/bench_gpu_train missing (nvcc?)" >&2; exit 1; }
# The conv benchmark too (tools/bench_gpu.sh would compile it on the device; sm_90: H100/H200).
NVCC=${NVCC:-$(sed -n 's/^NVCC := //p' build/rules.mk)} BENCH_DIR=build/bench-gpu BENCH_BUILD_ONLY=1 tools/bench_gpu.sh
rm -rf .carry/gpu
mkdir -p .carry/gpu/build/gpu-tests .carry/gpu/build/tools .carry/gpu/build/bench-gpu
files=(train packdata build/tools/bench_gpu_train build/bench-gpu/bench_conv)
# The GPU builds of today's tests/emu_*.c (build.sh's GPU_TESTS), not whatever build/gpu-tests holds.
for src in tests/emu_*.c; do
  t=build/gpu-tests/$(basename "$src" .c)
  [ -x "$t" ] || { echo "gpu_stage: $t missing (./build.sh gpu-tests did not build it)" >&2; exit 1; }
  files+=("$t")
done
# ptxas writes its "-arch sm_90a" into each sm_90a cubin; grep -c reads all of strings' output
# (grep -q would stop early, and pipefail would count strings' SIGPIPE as a failure).
for f in train build/tools/bench_gpu_train build/bench-gpu/bench_conv build/gpu-tests/emu_conv \
         build/gpu-tests/emu_ptx_layouts; do
  [ "$(strings -a "$f" | grep -c -- '-arch sm_90a')" -gt 0 ] \
    || { echo "gpu_stage: $f holds no sm_90a code: the wgmma engine and its checks would not run on an H100" >&2; exit 1; }
done
for f in "${files[@]}"; do
  cp "$f" ".carry/gpu/$f"
  strip --strip-debug ".carry/gpu/$f"
done
cp build/rules.mk .carry/gpu/build/rules.mk
git rev-parse HEAD >.carry/gpu/build/gpu-stage-commit
git status --porcelain --untracked-files=no | grep -q . && echo "dirty" >>.carry/gpu/build/gpu-stage-commit
tar -C .carry/gpu -cJf .carry/gpu.tar.xz .
rm -rf .carry/gpu
for f in train packdata build/tools/bench_gpu_train; do  # what travels must not need the image's C++ or OpenMP runtime
  if ldd "$f" | grep -Eq 'libstdc\+\+|libgomp|libgcc_s'; then echo "gpu_stage: $f links libstdc++/libgomp/libgcc_s dynamically" >&2; exit 1; fi
done
size=$(du -sm .carry | cut -f1)
bytes=$(stat -c %s .carry/gpu.tar.xz)
echo "gpu_stage: .carry/gpu.tar.xz holds ${#files[@]} programs, $(awk -v b="$bytes" 'BEGIN { printf "%.1f", b / 1048576 }') MiB, built at $(git rev-parse --short HEAD) in $((SECONDS - T0)) s"
[ "$size" -lt 48 ] || { echo "gpu_stage: ${size} MiB leaves too little of the 64 MiB carry limit for the tree" >&2; exit 1; }
