#!/usr/bin/env bash
# CPU training throughput of ctrain against PyTorch (same model, same step, same threads, one run):
#   tools/bench_cpu.sh [THREADS=nproc] [STEPS=10] [ROUNDS=1]
# Builds if needed, then for resnet20 at 32x32 batch 128 and resnet18 at 64x64 batch 32 (or the
# configurations in CPU_BENCH_CONFIGS) runs, one after the other and ROUNDS times over (so every
# peer sees the same neighbours):
#   ctrain          build/tools/bench_cpu_train
#   ctrain-base     $CTRAIN_BASE_BIN (only when set: a saved build of another commit, for before/after)
#   torch2-nchw     PyPI torch (pinned below) in build/torch-venv, eager, NCHW
#   torch2-chlast   the same, eager, channels_last
#   torch2-compile  the same, torch.compile (inductor), channels_last
#   torch2-bf16     the same, eager, channels_last under bf16 autocast: only on a CPU with bf16 units
#                   (lscpu: avx512_bf16 or amx_bf16); without them bf16 is emulated and slower
#   torch113        Debian's torch 1.13 (/usr/bin/python3), eager NCHW: the peer of earlier tables
# Per peer the median over rounds of img/s (wall: median step), img/s by CPU time (process CPU
# seconds / threads: what a step costs when the cores are not shared) and peak RSS; then the ratios
# ctrain / "PyTorch best" (the torch 2 setting with the most img/s by CPU time) and ctrain / 1.13.
# The venv is made on first use (PyPI: torch, torchvision, numpy). Environment:
#   CPU_BENCH_CONFIGS  'ARCH SIZE BATCH' entries separated by ';' (default
#                 'resnet20 32 128;resnet18 64 32'; issue 25's: 'resnext50_32x4d 64 32')
#   TORCH_PEERS   which peers run (default all names above; drop torch2-compile to skip the
#                 minutes of compilation, e.g. TORCH_PEERS="ctrain torch2-chlast")
#   CTRAIN_BIN    the ctrain benchmark binary (default build/tools/bench_cpu_train; a saved copy
#                 keeps a long run independent of rebuilds)
#   OMP_WAIT_POLICY defaults to passive for both sides (spinning threads burn CPU time on a busy box).
set -euo pipefail
cd "$(dirname "$0")/.."
T=${1:-$(nproc)}
STEPS=${2:-10}
ROUNDS=${3:-1}
PIPPY=${PIPPY:-python3}
VENV=build/torch-venv
TORCH_PIN=${TORCH_PIN:-torch==2.15.0}
BF16=$(grep -qwE 'avx512_bf16|amx_bf16' /proc/cpuinfo && echo torch2-bf16 || true)
PEERS=${TORCH_PEERS:-ctrain ${CTRAIN_BASE_BIN:+ctrain-base} torch2-nchw torch2-chlast $BF16 torch2-compile torch113}
IFS=';' read -r -a CONFIGS <<< "${CPU_BENCH_CONFIGS:-resnet20 32 128;resnet18 64 32}"
CTRAIN_BIN=${CTRAIN_BIN:-build/tools/bench_cpu_train}
[ -x "$CTRAIN_BIN" ] || ./build.sh >/dev/null
if [[ " $PEERS " == *" torch2-"* ]] && ! "$VENV/bin/python" -c 'import torch, torchvision, numpy' 2>/dev/null; then
  echo "# installing $TORCH_PIN, torchvision, numpy from PyPI into $VENV" >&2
  "$PIPPY" -m venv "$VENV"
  "$VENV/bin/pip" install -q "$TORCH_PIN" torchvision numpy
fi
export OMP_NUM_THREADS=$T OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
log=build/bench-cpu-lines.txt
: > "$log"
echo "# $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; threads $T, steps $STEPS (+2 warm-up, compile: +3)" \
     "x $ROUNDS rounds; OMP_WAIT_POLICY=$OMP_WAIT_POLICY; load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# CPU flags: $(grep -m1 -ow -E 'avx2|avx512f|avx512_vnni|avx512_bf16|amx_bf16|amx_tile' /proc/cpuinfo | sort -u | tr '\n' ' ')"
for r in $(seq "$ROUNDS"); do
  for cfg in "${CONFIGS[@]}"; do
    for p in $PEERS; do
      tp=(tools/bench_cpu_torch.py $cfg --steps "$STEPS" --warmup 2 --threads "$T")
      case $p in
        ctrain) line=$("$CTRAIN_BIN" $cfg "$STEPS" 2) ;;
        ctrain-base) line=$("${CTRAIN_BASE_BIN:?ctrain-base needs CTRAIN_BASE_BIN}" $cfg "$STEPS" 2) ;;
        torch2-nchw) line=$("$VENV/bin/python" "${tp[@]}") ;;
        torch2-chlast) line=$("$VENV/bin/python" "${tp[@]}" --channels-last) ;;
        torch2-bf16) line=$("$VENV/bin/python" "${tp[@]}" --channels-last --bf16) ;;
        torch2-compile) line=$("$VENV/bin/python" "${tp[@]}" --channels-last --compile --warmup 3 2>build/bench-cpu-compile.err) \
                          || line="torch.compile failed: $(tail -1 build/bench-cpu-compile.err)" ;;
        torch113) line=$(/usr/bin/python3 "${tp[@]}") ;;
        *) echo "bench_cpu.sh: unknown peer '$p' in TORCH_PEERS (ctrain ctrain-base torch2-nchw torch2-chlast torch2-bf16 torch2-compile torch113)" >&2; exit 2 ;;
      esac
      echo "$line"
      echo "$p $line" >> "$log"
    done
  done
done
echo "# load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
"$PIPPY" - "$log" "$T" <<'PY'
import re, statistics, sys
threads = int(sys.argv[2])
rows, batch = {}, {}
for line in open(sys.argv[1]):
    m = re.match(r"(\S+) \S+\s+(\S+)\s+(\d+)x.*?: +([\d.]+) img/s \(median.*?, +([\d.]+) img/s by CPU time, peak RSS (\d+) MB", line)
    if not m:
        print("bench_cpu.sh: no result in: " + line.strip())
        continue
    rows.setdefault((m[2] + " " + m[3], m[1]), []).append([float(m[4]), float(m[5]), float(m[6])])
    batch[m[2] + " " + m[3]] = int(re.search(r"batch +(\d+)", line)[1])
for cfg in dict.fromkeys(k[0] for k in rows):
    med = {p: [statistics.median(v[i] for v in rows[(c, p)]) for i in range(3)] for (c, p) in rows if c == cfg}
    for p, (w, c, rss) in med.items():
        print("median  %-12s %-15s %8.1f img/s (wall) %8.1f img/s by CPU time (%6.2f CPU s/step)  peak RSS %4.0f MB"
              % (cfg, p, w, c, threads * batch[cfg] / c, rss))
    t2 = [p for p in med if p.startswith("torch2-")]
    if "ctrain-base" in med:
        print("ratio   %-12s ctrain / ctrain-base: by CPU time %.2fx, wall %.2fx" % (cfg, med["ctrain"][1] / med["ctrain-base"][1], med["ctrain"][0] / med["ctrain-base"][0]))
    if "ctrain" not in med:
        continue
    f = med["ctrain"]
    peers = ([("PyTorch best (%s)" % max(t2, key=lambda p: med[p][1]), max(t2, key=lambda p: med[p][1]))] if t2 else []) \
        + [(p, p) for p in med if p != "ctrain"]
    for name, p in peers:
        print("ratio   %-12s ctrain / %-28s by CPU time %.2fx, wall %.2fx, peak RSS %.2fx"
              % (cfg, name, f[1] / med[p][1], f[0] / med[p][0], f[2] / med[p][2]))
    if "ctrain-base" in med and t2:
        b, best = med["ctrain-base"], max(t2, key=lambda p: med[p][1])
        print("ratio   %-12s ctrain-base / PyTorch best (%s) by CPU time %.2fx, wall %.2fx"
              % (cfg, best, b[1] / med[best][1], b[0] / med[best][0]))
PY
