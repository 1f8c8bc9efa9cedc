#!/usr/bin/env bash
# GPU training-step throughput of ctrain against PyTorch + cuDNN (same model, batch, precision and
# SGD step, one run; needs an NVIDIA GPU):
#   tools/bench_gpu_train.sh [STEPS=20]
# Builds (./build.sh: needs nvcc), prints the GPU and the versions, then for each configuration
# runs build/tools/bench_gpu_train and tools/bench_gpu_torch.py, prints both lines and the ratios
# ctrain / PyTorch (img/s, memory held, device memory used).
# Environment:
#   BENCH_CONFIGS  'ARCH SIZE BATCH' separated by ';' (default 'resnet50 224 256;resnet18 224 256;resnet20 32 512':
#                  batch 256, the size the targets name)
#   WARMUP (5), PRECISION (bf16 | fp32), STEP (ctrain's step: fused | trainer, see bench_gpu_train.c),
#   GRAPHS (ctrain's CUDA graphs: on | off)
#   TORCH_COMPILE=1  also runs PyTorch under torch.compile (TORCH_COMPILE_MODE, default 'default');
#                    compiling takes minutes per model
#   TORCH_PY         python with a CUDA build of torch (default: the first of python3, /usr/bin/python3 with one)
#   BENCH_EMULATED=1 the emulated bench_gpu_train (build/emu-tools, made by ./build.sh test) against
#                    bench_gpu_torch.py --dry-run on the CPU: checks this script without a GPU
#                    (tests/test_bench_gpu_train.sh); its numbers mean nothing
set -euo pipefail
cd "$(dirname "$0")/.."
STEPS=${1:-20}
WARMUP=${WARMUP:-5}
PRECISION=${PRECISION:-bf16}
STEP=${STEP:-fused}
GRAPHS=${GRAPHS:-on}
B=${CTRAIN_BUILD:-${BUILD_DIR:-build}}
die() { echo "bench_gpu_train.sh: $*" >&2; exit 1; }

if [ -n "${BENCH_EMULATED:-}" ]; then
  CT=$B/emu-tools/bench_gpu_train
  [ -x "$CT" ] || die "$CT is missing: BENCH_EMULATED=1 uses the emulated build of ./build.sh test"
  TORCH_FLAGS=(--dry-run)
  echo "# EMULATED: ctrain under kernels/emu, PyTorch on the CPU; a check of this script, not a benchmark"
else
  if ! command -v nvidia-smi >/dev/null || ! nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then
    die "no NVIDIA GPU found (nvidia-smi is missing or lists no GPU): this benchmark needs one; without a GPU, the emulated check is BENCH_EMULATED=1 (after ./build.sh test)"
  fi
  if [ -z "${CTRAIN_PREBUILT:-}" ]; then  # tools/gpu_session.sh brings binaries built elsewhere
    log=$(mktemp)
    ./build.sh >"$log" 2>&1 || { tail -n 30 "$log" >&2; rm -f "$log"; die "./build.sh failed"; }
    rm -f "$log"
  fi
  CT=$B/tools/bench_gpu_train
  [ -x "$CT" ] || die "./build.sh made no $CT: it needs nvcc and libcudart_static.a (set NVCC=/path/to/nvcc)"
  TORCH_FLAGS=()
fi

# Debian's /usr/bin/python3 (the tests' torch) is a CPU build; a GPU machine's torch may live elsewhere.
if [ -n "${TORCH_PY:-}" ]; then PY=$TORCH_PY
else
  PY=""
  want='import sys, torch, torchvision; sys.exit(0 if torch.cuda.is_available() else 1)'
  [ -n "${BENCH_EMULATED:-}" ] && want='import torch, torchvision'
  for p in python3 /usr/bin/python3; do
    command -v "$p" >/dev/null && "$p" -c "$want" 2>/dev/null && { PY=$p; break; }
  done
  [ -n "$PY" ] || die "no python3 with torch, torchvision and CUDA found (set TORCH_PY)"
fi

echo "# $(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')$(git diff --quiet HEAD -- 2>/dev/null || echo ' (modified)');" \
     "steps $STEPS (+$WARMUP warm-up), precision $PRECISION, ctrain step $STEP, graphs $GRAPHS; load average $(cut -d' ' -f1-3 /proc/loadavg)"
if [ -z "${BENCH_EMULATED:-}" ]; then
  nvidia-smi -L | sed 's/^/# /'
  nvidia-smi --query-gpu=driver_version,memory.total,clocks.max.sm,power.limit --format=csv | sed 's/^/# /'
  NVCC=$(sed -n 's/^NVCC := //p' "$B/rules.mk")
  echo "# nvcc: $("$NVCC" --version | tail -n 2 | head -n 1)"
fi
echo "# $("$PY" -c 'import sys, torch, torchvision; print("python", sys.executable, "| torch", torch.__version__, "cuda", torch.version.cuda, "cudnn", torch.backends.cudnn.version(), "| torchvision", torchvision.__version__)')"

source "$(dirname "${BASH_SOURCE[0]}")/bench_lines.sh"
field() { bench_field "$@"; }
ratio() { # CONFIG CTRAIN_LINE PYTORCH_LINE
  local ci pi
  ci=$(field 1 "$2"); pi=$(field 1 "$3")
  if [ -z "$ci" ] || [ -z "$pi" ]; then echo "ratio   $1: cannot parse the lines above"; return 1; fi
  printf 'ratio   %-22s ctrain/pytorch%s: img/s %s, memory held %s, device used %s\n' "$1" "${4:-}" "$(bench_ratio "$ci" "$pi")" \
    "$(bench_ratio "$(field 3 "$2")" "$(field 3 "$3")")" "$(bench_ratio "$(field 4 "$2")" "$(field 4 "$3")")"
}

IFS=';' read -ra CONFIGS <<<"${BENCH_CONFIGS:-resnet50 224 256;resnet18 224 256;resnet20 32 512}"
status=0
for cfg in "${CONFIGS[@]}"; do
  [ -n "${cfg// /}" ] || continue
  read -r arch size batch extra <<<"$cfg" || true
  [ -n "${batch:-}" ] && [ -z "${extra:-}" ] || die "BENCH_CONFIGS: '$cfg' is not 'ARCH SIZE BATCH'"
  cfg="$arch $size $batch"
  args=("$arch" "$size" "$batch" "$STEPS" "$WARMUP" --precision "$PRECISION")
  rc=0; c=$("$CT" "${args[@]}" --step "$STEP" --graphs "$GRAPHS") || rc=$?
  [ -z "$c" ] || echo "$c"
  if [ $rc != 0 ]; then echo "FAILED  ctrain $cfg (exit $rc)"; status=1; continue; fi
  if ! p=$("$PY" tools/bench_gpu_torch.py "${args[@]}" ${TORCH_FLAGS[@]+"${TORCH_FLAGS[@]}"}); then echo "FAILED  pytorch $cfg"; status=1; continue; fi
  echo "$p"
  ratio "$cfg" "$c" "$p" "" || status=1
  if [ -n "${TORCH_COMPILE:-}" ]; then
    if pc=$("$PY" tools/bench_gpu_torch.py "${args[@]}" ${TORCH_FLAGS[@]+"${TORCH_FLAGS[@]}"} --compile --compile-mode "${TORCH_COMPILE_MODE:-default}"); then
      echo "$pc"
      ratio "$cfg" "$c" "$pc" " (compiled)" || status=1
    else
      echo "note    torch.compile run failed for $cfg (error above); the eager line stands"
    fi
  fi
done
exit $status
