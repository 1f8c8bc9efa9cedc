#!/usr/bin/env bash
# GPU checks for a machine with an NVIDIA GPU (not part of ./build.sh test: the development
# machine has none, so this script has NOT been run on real hardware yet).
#   1. builds ./train and the emulator tests compiled for the real GPU (./build.sh gpu-tests),
#   2. runs them: every non-conv kernel against the CPU reference, and full resnet20/resnet18
#      training steps of the GPU executor against the CPU executor (fp32 and bf16),
#   3. runs a small training step under compute-sanitizer memcheck and racecheck,
#   4. trains a tiny model with ./train --device cuda against --device cpu (tests/test_train_cuda_emu.sh),
#   5. with two GPUs or more: ./train --gpus 2 over real NCCL against --ranks 2 on the CPU,
#   6. checks the release binary's linkage (tests/test_linkage.sh),
#   7. runs a few full-size training steps (resnet50, 224x224, batch 128, bf16) through
#      build/tools/bench_gpu_train: the executor at a full ImageNet shape (the checks above use
#      batch 2 at 36x36); fails on a crash or a non-finite loss. The comparison with PyTorch +
#      cuDNN is tools/bench_gpu_train.sh (minutes; not run here).
# Usage: tests/gpu.sh            (from anywhere; exits non-zero on the first failure)
# Environment: CUDA_VISIBLE_DEVICES picks the GPU; SANITIZER overrides compute-sanitizer's path.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

step() { printf '\n== %s\n' "$*"; }

command -v nvidia-smi >/dev/null && nvidia-smi -L || true
# CTRAIN_PREBUILT=1: ./train, ./packdata and build/gpu-tests/ were built on another machine and
# brought here (tools/gpu_stage.sh, tools/gpu_session.sh): a GPU machine may lack the headers.
if [ -n "${CTRAIN_PREBUILT:-}" ]; then
  for f in train packdata build/gpu-tests/emu_model build/tools/bench_gpu_train; do
    [ -x "$f" ] || { echo "CTRAIN_PREBUILT is set but $f is missing"; exit 1; }
  done
else
  ./build.sh gpu-tests
fi

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
    CUDA_HOME=$(sed -n 's/^NVCC := //p' build/rules.mk 2>/dev/null | xargs -r dirname | xargs -r dirname)
    SAN=${CUDA_HOME:-/usr/local/cuda}/bin/compute-sanitizer
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

step "data parallel on 2 GPUs (NCCL) against 2 CPU ranks"
NGPU=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
if [ "${NGPU:-0}" -ge 2 ]; then
  dp_check() {
    source tests/train_lib.sh
    make_synth "$TMP/d" 64 32 16
    local A=(-a resnet20 -b 8 --crop-size 8 --val-resize 8 -p 1 --workers 1 --seed 7 --epochs 1 --precision fp32)
    "$TRAIN" "$TMP/d" "${A[@]}" --ranks 2 --device cpu --out "$TMP/c" 2>/dev/null || return 1
    "$TRAIN" "$TMP/d" "${A[@]}" --gpus 2 --comm nccl --out "$TMP/g" 2>&1 | grep -E "NCCL|ranks" || return 1
    "$PIPPY" - "$TMP/c/metrics.jsonl" "$TMP/g/metrics.jsonl" <<'PY'
import json, sys
a = [json.loads(l) for l in open(sys.argv[1]) if '"step"' in l][:3]
b = [json.loads(l) for l in open(sys.argv[2]) if '"step"' in l][:3]
d = max(abs(x["loss"] - y["loss"]) / x["loss"] for x, y in zip(a, b))
print("first 3 steps, --gpus 2 (NCCL) vs --ranks 2 (CPU): worst relative loss difference %.3g" % d)
assert d < 1e-4
PY
  }
  run "train --gpus 2 (NCCL) vs CPU ranks" env CTRAIN_BIN="$ROOT" CTRAIN_BUILD="$ROOT/build" bash -c "$(declare -f dp_check); dp_check"
else
  echo "skipped: ${NGPU:-0} GPU(s) on this machine (needs 2)"
fi

step "linkage of ./train"
run "test_linkage.sh" env CTRAIN_BIN="$ROOT" CTRAIN_BUILD="$ROOT/build" bash tests/test_linkage.sh

step "full-size training steps (resnet50 224x224, batch 128, bf16; speed for information)"
run "bench_gpu_train resnet50 224 b128" build/tools/bench_gpu_train resnet50 224 128 5 2

[ $status = 0 ] && echo "gpu.sh: all passed" || echo "gpu.sh: FAILED"
exit $status
