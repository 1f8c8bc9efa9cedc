#!/usr/bin/env bash
# GPU checks for a machine with an NVIDIA GPU (not part of ./build.sh test: the development
# machine has none, so this script has NOT been run on real hardware yet).
#   1. builds ./train and the emulator tests compiled for the real GPU (./build.sh gpu-tests),
#   2. runs them: every non-conv kernel against the CPU reference, and full resnet20/resnet18
#      training steps of the GPU executor against the CPU executor (fp32 and bf16),
#   3. runs a small training step under compute-sanitizer memcheck and racecheck,
#   4. trains a tiny model with ./train --device cuda against --device cpu (tests/test_train_cuda_emu.sh),
#   5. checks the release binary's linkage (tests/test_linkage.sh).
# Usage: tests/gpu.sh            (from anywhere; exits non-zero on the first failure)
# Environment: CUDA_VISIBLE_DEVICES picks the GPU; SANITIZER overrides compute-sanitizer's path.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

step() { printf '\n== %s\n' "$*"; }

command -v nvidia-smi >/dev/null && nvidia-smi -L || true
./build.sh gpu-tests

status=0
run() {  # name, command...: runs, records failure, continues
  local name=$1; shift
  local t0=$SECONDS
  if "$@"; then printf 'PASS  %-36s %4ds\n' "$name" $((SECONDS - t0))
  else printf 'FAIL  %-36s %4ds\n' "$name" $((SECONDS - t0)); status=1; fi
}

step "kernels and executor against the CPU reference (real GPU)"
for t in build/gpu-tests/emu_*; do
  [[ -x $t && $t != *.* ]] || continue
  run "$(basename "$t")" env EMU_MODEL_ALL=1 "$t"
done

step "compute-sanitizer"
SAN=${SANITIZER:-}
if [ -z "$SAN" ]; then
  if command -v compute-sanitizer >/dev/null; then SAN=$(command -v compute-sanitizer)
  else
    CUDA_HOME=$(sed -n 's/^NVCC := //p' build/rules.mk | xargs dirname | xargs dirname)
    SAN=$CUDA_HOME/bin/compute-sanitizer
  fi
fi
if [ -x "$SAN" ]; then
  # A small training step (resnet20, fp32) keeps the sanitizers' slowdown bounded; the kernel
  # test covers the remaining kernels with awkward shapes.
  run "memcheck emu_model (quick)" env EMU_MODEL_QUICK=1 "$SAN" --tool memcheck --leak-check full --error-exitcode 1 build/gpu-tests/emu_model
  run "racecheck emu_model (quick)" env EMU_MODEL_QUICK=1 "$SAN" --tool racecheck --racecheck-report all --error-exitcode 1 build/gpu-tests/emu_model
  run "memcheck emu_kernels" "$SAN" --tool memcheck --error-exitcode 1 build/gpu-tests/emu_kernels
  run "racecheck emu_kernels" "$SAN" --tool racecheck --error-exitcode 1 build/gpu-tests/emu_kernels
  run "synccheck emu_kernels" "$SAN" --tool synccheck --error-exitcode 1 build/gpu-tests/emu_kernels
else
  echo "compute-sanitizer not found (set SANITIZER=/path/to/compute-sanitizer)"; status=1
fi

step "train --device cuda end to end against --device cpu (real GPU)"
run "test_train_cuda_emu.sh (CUDA_TRAIN=./train)" env CUDA_TRAIN="$ROOT/train" CTRAIN_BIN="$ROOT" CTRAIN_BUILD="$ROOT/build" bash tests/test_train_cuda_emu.sh

step "linkage of ./train"
run "test_linkage.sh" env CTRAIN_BIN="$ROOT" CTRAIN_BUILD="$ROOT/build" bash tests/test_linkage.sh

[ $status = 0 ] && echo "gpu.sh: all passed" || echo "gpu.sh: FAILED"
exit $status
