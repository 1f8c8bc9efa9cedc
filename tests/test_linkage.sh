#!/usr/bin/env bash
# The release ./train links neither cuDNN nor cuBLAS (checked both ways: the dynamic section via
# ldd and the symbol table via nm), carries jansson and liblz4 inside (no shared copies), and when
# it was built with nvcc the CUDA runtime is linked statically (cudart's entry points are defined
# inside the binary, no libcudart.so needed). ./train, ./packdata and the tools built beside them
# need no shared library but glibc's (libc, libm, and the loader): libstdc++, libgomp and
# libgcc_s are linked in, so a program carried to another machine (a lent GPU) runs whatever
# that machine's C++ and OpenMP runtimes are.
set -euo pipefail
BIN=${CTRAIN_BIN:-.}/train
RULES=${CTRAIN_BUILD:-build}/rules.mk
[ -x "$BIN" ] || { echo "no executable $BIN"; exit 1; }
[ -f "$RULES" ] || { echo "no $RULES (build first)"; exit 1; }
have_cuda=$(sed -n 's/^HAVE_CUDA := //p' "$RULES")
fail=0

libs=$(ldd "$BIN" 2>&1 || true)
echo "ldd $BIN:"; echo "$libs" | sed 's/^/  /'
if grep -Eiq 'cudnn|cublas' <<<"$libs"; then echo "FAIL: ./train links cuDNN or cuBLAS dynamically"; fail=1; fi
if grep -Eiq 'libcudart\.so' <<<"$libs"; then echo "FAIL: ./train links the CUDA runtime dynamically"; fail=1; fi
# The Debian libraries are linked from their static archives (build.sh's STATIC_LIBS).
if grep -Eiq 'libjansson|liblz4' <<<"$libs"; then echo "FAIL: ./train links jansson or liblz4 dynamically"; fail=1; fi
# Only glibc: every NEEDED entry must be one of glibc's own libraries.
for prog in "$BIN" "${CTRAIN_BIN:-.}/packdata" "${CTRAIN_BUILD:-build}/tools/bench_gpu_train"; do
  [ -x "$prog" ] || continue
  needed=$(objdump -p "$prog" | sed -n 's/^ *NEEDED *//p' | tr '\n' ' ')
  other=$(tr ' ' '\n' <<<"$needed" | grep -Ev '^(libc|libm|libdl|libpthread|librt|ld-linux-x86-64)\.so' | grep . || true)
  if [ -n "$other" ]; then echo "FAIL: $prog needs shared libraries beyond glibc: $other"; fail=1
  else echo "$prog needs only glibc: $needed"; fi
done

# Here-strings, not 'echo | grep -q': with pipefail, grep -q quitting early fails the echo.
# nm -D as well: a stripped binary still has its dynamic symbol table.
syms=$( (nm "$BIN" 2>/dev/null; nm -D "$BIN" 2>/dev/null) || true)
[ -n "$syms" ] || { echo "FAIL: nm found no symbols in $BIN"; fail=1; }
if grep -Eiq 'cudnn|cublas' <<<"$syms"; then
  echo "FAIL: cuDNN/cuBLAS symbols in ./train:"; grep -Ei 'cudnn|cublas' <<<"$syms" | head; fail=1
fi

if [ "$have_cuda" = 1 ]; then
  # Statically linked runtime: cudaMalloc / cudaLaunchKernel are defined (T), not undefined (U),
  # and the executor and kernels are in the binary.
  for s in cudaMalloc cudaLaunchKernel gpu_exec_create batchnorm_forward_train_gpu; do
    if ! grep -Eq " [Tt] $s\$" <<<"$syms"; then echo "FAIL: $s is not defined inside ./train (CUDA backend not linked in?)"; fail=1; fi
  done
  if grep -Eq " U cuda[A-Z]" <<<"$syms"; then echo "FAIL: undefined CUDA runtime symbols (dynamic cudart?)"; fail=1; fi
else
  echo "built without nvcc: checking that no CUDA runtime is linked at all"
  if grep -Eq " [TtU] cudaMalloc\$" <<<"$syms"; then echo "FAIL: CPU-only build contains cudaMalloc"; fail=1; fi
fi
[ $fail = 0 ] && echo "linkage ok (have_cuda=$have_cuda)"
exit $fail
