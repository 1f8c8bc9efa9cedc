#!/usr/bin/env bash
# One device call's worth of GPU work, on the GPU machine (see tools/gpu_stage.sh for the set-up
# here). Unpacks the staged binaries from .carry/gpu.tar.xz into the tree, then runs in order:
#   1. tests/gpu.sh (kernels and whole steps against the CPU reference, compute-sanitizer,
#      train --device cuda end to end, linkage, a full-size resnet50 step),
#   2. tools/bench_gpu.sh (the conv engines on ResNet-50 shapes; compiled there with nvcc),
#   3. tools/bench_gpu_train.sh (whole training steps, ctrain vs PyTorch + cuDNN),
#   4. per-op GPU time of ctrain's step (bench_gpu_train --profile): resnet50 224 and resnet20 32,
#   5. (part "variants", not in the default list: a call of its own) the run-time variants side by
#      side on resnet50 224 batch 256: default (conv engine v2, BN+add fused, vector max pool),
#      then CTRAIN_CONV_ENGINE=v1, CTRAIN_CONV_ENGINE=wgmma (the Hopper engine: forward, data
#      and weight gradients; the data gradients with a BN epilogue stay on v2), the same with
#      CTRAIN_FUSE_BN_BWD=0 (every data gradient on wgmma), CTRAIN_FUSE_BN_ADD=0, CTRAIN_FUSE_BN_STATS=0, CTRAIN_FUSE_BN_BWD=0, CTRAIN_FUSE_BN_POOL=0,
#      CTRAIN_FUSE_BN_RES=0, CTRAIN_MAXPOOL_SCALAR=1, one at a time.
# Each part's full log goes to $OUT (the device tool brings it back); the last lines printed are
# the summary. GPU_SESSION_PARTS picks parts (default "tests conv train profile"); BENCH_CONFIGS passes to
# tools/bench_gpu_train.sh. A device command may run 600 s at most: if all parts do not fit, run
# "tests" in one call and "conv train profile" in the next. Each part is cut at PART_TIMEOUT
# seconds (default 500) so that a hung one still leaves the others' logs.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-out/gpu-session}
mkdir -p "$OUT"
[ -f .carry/gpu.tar.xz ] || { echo "gpu_session: no .carry/gpu.tar.xz (run tools/gpu_stage.sh here and carry .carry)"; exit 1; }
# Python's tarfile where the image has no xz for tar.
tar -xJf .carry/gpu.tar.xz -C . 2>/dev/null \
  || python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(".", filter="fully_trusted")' .carry/gpu.tar.xz \
  || { echo "gpu_session: unpacking .carry/gpu.tar.xz failed"; exit 1; }
echo "binaries built at commit $(tr '\n' ' ' <build/gpu-stage-commit)"
nvidia-smi -L 2>&1 | tee "$OUT/nvidia-smi.txt"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv 2>&1 | tee -a "$OUT/nvidia-smi.txt"
export CTRAIN_PREBUILT=1
summary=()
part() {  # name, log, command...
  local name=$1 log=$2; shift 2
  local t0=$SECONDS rc=0
  echo "== $name"
  timeout "${PART_TIMEOUT:-500}" "$@" >"$OUT/$log" 2>&1 || rc=$?
  tail -n 25 "$OUT/$log"
  summary+=("$(printf '%-28s %s  %4ds  (%s)' "$name" "$([ $rc = 0 ] && echo PASS || echo "FAIL rc=$rc")" $((SECONDS - t0)) "$OUT/$log")")
}
parts=${GPU_SESSION_PARTS:-tests conv train profile}
[[ " $parts " == *" tests "* ]] && part "tests/gpu.sh" gpu_tests.log bash tests/gpu.sh
[[ " $parts " == *" conv "* ]] && part "tools/bench_gpu.sh" bench_conv.log bash tools/bench_gpu.sh
[[ " $parts " == *" train "* ]] && part "tools/bench_gpu_train.sh" bench_train.log bash tools/bench_gpu_train.sh
[[ " $parts " == *" profile "* ]] && part "per-op profile" profile.log bash -c \
  'build/tools/bench_gpu_train resnet50 224 128 5 2 --profile && build/tools/bench_gpu_train resnet20 32 512 10 3 --profile'
# A variant that fails (the wgmma engine's first run on hardware, say) is reported and the others
# still run: the part fails at the end.
[[ " $parts " == *" variants "* ]] && part "run-time variants" variants.log bash -c '
  rc=0
  for v in "" CTRAIN_CONV_ENGINE=v1 CTRAIN_CONV_ENGINE=wgmma "CTRAIN_CONV_ENGINE=wgmma CTRAIN_FUSE_BN_BWD=0" CTRAIN_FUSE_BN_ADD=0 CTRAIN_FUSE_BN_STATS=0 CTRAIN_FUSE_BN_BWD=0 CTRAIN_FUSE_BN_POOL=0 CTRAIN_FUSE_BN_RES=0 CTRAIN_MAXPOOL_SCALAR=1; do
    echo "variant: ${v:-default}"
    env $v build/tools/bench_gpu_train resnet50 224 256 10 3 || { echo "variant: ${v:-default} FAILED (exit $?)"; rc=1; }
  done
  exit $rc'
echo
echo "== summary"
grep -h -E '^(PASS|FAIL) ' "$OUT/gpu_tests.log" 2>/dev/null
grep -h -E '^ratio' "$OUT/bench_train.log" 2>/dev/null
grep -h -E '^(variant:|ctrain )' "$OUT/variants.log" 2>/dev/null
printf '%s\n' "${summary[@]}"
