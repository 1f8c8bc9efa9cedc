#!/usr/bin/env bash
# CPU training throughput of ctrain against PyTorch (same model, same step, same threads, one run):
#   tools/bench_cpu.sh [THREADS=nproc] [STEPS=10]
# Builds if needed, then for resnet20 at 32x32 batch 128 and resnet18 at 64x64 batch 32 prints
# both lines and the ratios ctrain / PyTorch (wall img/s, img/s by CPU time, peak RSS).
# Environment passes through to both unchanged (e.g. OMP_WAIT_POLICY=passive on a busy machine).
set -euo pipefail
cd "$(dirname "$0")/.."
T=${1:-$(nproc)}
STEPS=${2:-10}
[ -x build/tools/bench_cpu_train ] || ./build.sh >/dev/null
export OMP_NUM_THREADS=$T
echo "# $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; threads $T, steps $STEPS (+2 warm-up);" \
     "OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-unset}; load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
field() { sed -n "s/.*: *\([0-9.]*\) img\/s (median.*, *\([0-9.]*\) img\/s by CPU time, peak RSS \([0-9]*\) MB.*/\\$1/p"; }
for cfg in "resnet20 32 128" "resnet18 64 32"; do
  c=$(build/tools/bench_cpu_train $cfg "$STEPS" 2)
  p=$(/usr/bin/python3 tools/bench_cpu_torch.py $cfg --steps "$STEPS" --warmup 2 --threads "$T")
  echo "$c"
  echo "$p"
  awk -v cw="$(field 1 <<<"$c")" -v pw="$(field 1 <<<"$p")" -v cc="$(field 2 <<<"$c")" -v pc="$(field 2 <<<"$p")" \
      -v cm="$(field 3 <<<"$c")" -v pm="$(field 3 <<<"$p")" -v cfg="$cfg" \
      'BEGIN { printf "ratio   %-22s ctrain/pytorch: wall %.2fx, by CPU time %.2fx, peak RSS %.2fx\n", cfg, cw/pw, cc/pc, cm/pm }'
done
