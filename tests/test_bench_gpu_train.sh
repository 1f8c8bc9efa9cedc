#!/usr/bin/env bash
# The GPU training benchmark without a GPU: tools/bench_gpu_train.c built against the emulated
# kernels (build/emu-tools/), tools/bench_gpu_torch.py --dry-run on the CPU, and
# tools/bench_gpu_train.sh end to end in its BENCH_EMULATED mode (the lines parse, the ratio line
# appears, losses are finite); the fused step and the trainer's step sequence must reach the same
# loss; bad arguments and a missing GPU must fail with a message. Speeds here mean nothing.
source "$(dirname "$0")/train_lib.sh"
cd "$CTRAIN_ROOT"
EMU=$CTRAIN_BUILD/emu-tools/bench_gpu_train
[ -x "$EMU" ] || fail "$EMU is missing (./build.sh test builds it)"

# The one-line format both programs print and tools/bench_gpu_train.sh parses.
LINE_RE='^(ctrain |pytorch) resnet[0-9]+ +[0-9]+x[0-9]+ +batch [0-9]+ +(bf16|fp32) [a-z-]+ *: +[0-9.]+ img/s \(median step [0-9.]+ ms\), memory [0-9.]+ MiB held, [0-9.]+ MiB device used, final loss [^,]+, '
loss_of() { sed -n 's/.*final loss \([^,]*\),.*/\1/p' <<<"$1"; }
check_line() { # LINE WHAT
  grep -Eq "$LINE_RE" <<<"$1" || fail "$2: not in the benchmark line format: '$1'"
  local loss
  loss=$(loss_of "$1")
  # A non-finite loss prints as nan/inf: only digits pass.
  [[ $loss =~ ^[0-9]+\.[0-9]+$ ]] && awk -v l="$loss" 'BEGIN { exit !(l < 50) }' \
    || fail "$2: final loss '$loss' is not a finite cross-entropy"
  ok "$2: $1"
}

# 1. The whole script on the emulated tool and the CPU dry run: both lines, and the ratios.
out=$(BENCH_EMULATED=1 BENCH_CONFIGS="resnet20 8 2" WARMUP=1 tools/bench_gpu_train.sh 2) \
  || { echo "$out"; fail "tools/bench_gpu_train.sh (BENCH_EMULATED=1) failed"; }
echo "$out"
fused=$(grep '^ctrain ' <<<"$out") || fail "no ctrain line"
check_line "$fused" "emulated bf16 fused step"
grep -q 'median step .*MiB held' <<<"$fused" && awk -v h="$(sed -n 's/.*memory \([0-9.]*\) MiB held.*/\1/p' <<<"$fused")" \
  'BEGIN { exit !(h > 0) }' || fail "the executor's memory is not reported"
check_line "$(grep '^pytorch ' <<<"$out")" "PyTorch dry run (CIFAR model)"
grep -Eq '^ratio +resnet20 8 2 +ctrain/pytorch: img/s [0-9.]+x, memory held n/a, device used n/a$' <<<"$out" \
  || fail "no ratio line"

# 2. The trainer's step sequence (trainer/step.c) (BN snapshot, loss read back, finiteness check) computes what the fused step does.
trainer=$("$EMU" resnet20 8 2 2 1 --step trainer) || fail "--step trainer failed"
check_line "$trainer" "emulated bf16 trainer step"
awk -v a="$(loss_of "$fused")" -v b="$(loss_of "$trainer")" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= 1e-2 * a) }' \
  || fail "fused and trainer steps disagree: loss $(loss_of "$fused") vs $(loss_of "$trainer")"
ok "fused and trainer steps agree on the loss"
check_line "$("$EMU" resnet20 8 2 2 1 --precision fp32)" "emulated fp32 fused step"
# Without CUDA graphs: the same kernels launched one by one, so the same loss to the bit.
eager=$("$EMU" resnet20 8 2 2 1 --graphs off) || fail "--graphs off failed"
check_line "$eager" "emulated bf16 fused step without graphs"
grep -q 'fused-eager' <<<"$eager" || fail "--graphs off is not labelled: $eager"
[ "$(loss_of "$eager")" = "$(loss_of "$fused")" ] || fail "graphs on/off: loss $(loss_of "$fused") vs $(loss_of "$eager")"
# --profile: the per-op table after the line (times are the emulator's; only the plumbing counts).
prof=$("$EMU" resnet20 8 2 2 1 --profile) || fail "--profile failed"
check_line "$(grep '^ctrain ' <<<"$prof")" "emulated step with --profile"
[ "$(loss_of "$(grep '^ctrain ' <<<"$prof")")" = "$(loss_of "$fused")" ] || fail "--profile changed the loss"
PROF="$prof" "$PIPPY" - <<'PY' || fail "--profile table: $prof"
import os, re
t = os.environ["PROF"]
assert re.search(r"^profile: resnet20, bf16, 3 steps timed", t, re.M), t
kinds = dict()
for m in re.finditer(r"^  (\S+) +(fwd|wgrad|dgrad|bwd)? +([0-9.]+) +([0-9.]+)%$", t, re.M):
    kinds[(m.group(1), m.group(2))] = float(m.group(4))
for k in [("conv", "fwd"), ("conv", "wgrad"), ("conv", "dgrad"), ("bn", "fwd"), ("bn", "bwd"), ("bn_add", "fwd"), ("bn_add", "bwd"), ("fc", "fwd")]:
    assert k in kinds, (k, kinds)
# Every residual add rides in the batch norm before it (a bn_add step of the plan, nn/plan.h).
assert ("add", "fwd") not in kinds, kinds
assert abs(sum(kinds.values()) - 100) < 1.0, sum(kinds.values())
assert re.search(r"the 15 slowest parts:\n +[0-9.]+ ms +[0-9.]+%  \S+", t), t
print("profile table: %d kind/pass rows, shares sum to %.1f%%" % (len(kinds), sum(kinds.values())))
PY
ok "--profile prints a per-op table and leaves the loss alone"

# 3. The torchvision model family through the PyTorch peer.
check_line "$("$TORCH_PY" tools/bench_gpu_torch.py resnet18 32 2 2 1 --dry-run --precision fp32)" "PyTorch dry run (torchvision model)"

# 4. Errors name what is wrong.
expect_fail() { # WHAT MESSAGE-REGEX COMMAND...
  local what=$1 re=$2 msg
  shift 2
  if msg=$("$@" 2>&1); then fail "$what: succeeded"; fi
  grep -Eq -e "$re" <<<"$msg" || fail "$what: message '$msg' lacks /$re/"
  ok "$what fails: $(head -n 1 <<<"$msg")"
}
expect_fail "unknown arch" "unknown ARCH 'resnet7'" "$EMU" resnet7 8 2
expect_fail "bad precision" "--precision must be bf16 or fp32" "$EMU" resnet20 8 2 --precision fp16
expect_fail "bad step" "--step must be fused or trainer" "$EMU" resnet20 8 2 --step both
expect_fail "bad graphs" "--graphs must be on or off" "$EMU" resnet20 8 2 --graphs maybe
expect_fail "missing arguments" "usage:" "$EMU" resnet20 8
expect_fail "torch peer, bad precision" "invalid choice" "$TORCH_PY" tools/bench_gpu_torch.py resnet20 8 2 --precision fp16
if ! "$TORCH_PY" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
  expect_fail "torch peer without CUDA" "sees no CUDA device" "$TORCH_PY" tools/bench_gpu_torch.py resnet20 8 2
fi
if command -v nvidia-smi >/dev/null && nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then
  echo "skipped: the no-GPU refusal (this machine has a GPU)"
else
  expect_fail "bench_gpu_train.sh without a GPU" "no NVIDIA GPU found" tools/bench_gpu_train.sh 2
fi
echo "test_bench_gpu_train: all passed"
