#!/usr/bin/env bash
# CPU inference of resnet50 and resnet18 at 224: ctrain's eval forward (BN-folded, and the
# reference executor for scale) against PyTorch eval (torch.inference_mode, channels_last) and
# onnxruntime on the graph `train export` writes, all on the same weights and the same input,
# interleaved in one run so they share whatever else the machine is doing:
#   tools/bench_infer.sh [THREADS=2] [BATCH=16] [ITERS=5] [ROUNDS=2]
# Per peer and round one line (img/s from the median wall time of a batch, images per CPU-second,
# peak RSS, the first logits of image 0: they agree across peers), then per arch the median over
# rounds and the ratios ctrain/PyTorch and ctrain/onnxruntime. On a shared machine compare the
# per-CPU-second figures (wall time depends on the neighbours). OMP_WAIT_POLICY defaults to
# passive for every peer (onnxruntime: no spinning): spinning threads burn CPU time on a busy box.
# PyTorch 2.x comes from PyPI into build/infer-venv (made on first use, with torchvision);
# onnxruntime from the pip python3 ($PIPPY), as the test suite uses it.
set -euo pipefail
cd "$(dirname "$0")/.."
T=${1:-2}; BATCH=${2:-16}; ITERS=${3:-5}; ROUNDS=${4:-2}
PIPPY=${PIPPY:-python3}
VENV=build/infer-venv
[ -x build/tools/bench_infer ] && [ -x ./train ] || ./build.sh >/dev/null
if ! "$VENV/bin/python" -c 'import torch, torchvision, numpy' 2>/dev/null; then
  echo "# installing torch 2.x, torchvision, numpy from PyPI into $VENV" >&2
  "$PIPPY" -m venv "$VENV"
  "$VENV/bin/pip" install -q 'torch>=2' torchvision numpy
fi
"$PIPPY" -c 'import onnxruntime, numpy' || { echo "onnxruntime not available as $PIPPY: $PIPPY -m pip install onnxruntime numpy" >&2; exit 1; }
export OMP_NUM_THREADS=$T OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
W=build/bench-infer
mkdir -p "$W"
echo "# $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; threads $T, batch $BATCH, $ITERS timed batches (+1 warm-up)" \
     "x $ROUNDS rounds; OMP_WAIT_POLICY=$OMP_WAIT_POLICY; load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
for arch in resnet50 resnet18; do
  [ -f "$W/$arch.safetensors" ] || build/tools/bench_infer save "$arch" "$W/$arch.safetensors"
  [ -f "$W/$arch.onnx" ] || ./train export --weights "$W/$arch.safetensors" -a "$arch" --onnx "$W/$arch.onnx" >/dev/null
done
log=$W/lines.txt
: > "$log"
for r in $(seq "$ROUNDS"); do
  for arch in resnet50 resnet18; do
    a=(224 "$BATCH" "$ITERS" 1)
    build/tools/bench_infer run "$arch" "${a[@]}" fold "$W/$arch.safetensors" | tee -a "$log"
    "$VENV/bin/python" tools/bench_infer_peers.py torch "$arch" "${a[@]}" "$W/$arch.safetensors" | tee -a "$log"
    "$PIPPY" tools/bench_infer_peers.py ort "$arch" "${a[@]}" "$W/$arch.onnx" | tee -a "$log"
    build/tools/bench_infer run "$arch" "${a[@]}" ref "$W/$arch.safetensors" | tee -a "$log"
  done
done
echo "# load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
"$PIPPY" - "$log" <<'PY'
import re, statistics, sys
rows = {}
for line in open(sys.argv[1]):
    m = re.match(r"(\S+)\s+(\S+) .*?: +([\d.]+) img/s .*?, +([\d.]+) img/CPU-s, peak RSS +(\d+) MB", line)
    if m:
        rows.setdefault((m[2], m[1]), []).append((float(m[3]), float(m[4]), float(m[5])))
for arch in ("resnet50", "resnet18"):
    med = {p: [statistics.median(v[i] for v in rows[(arch, p)]) for i in range(3)]
           for (a, p) in rows if a == arch}
    for p, (w, c, rss) in sorted(med.items()):
        print("median  %-9s %-11s %7.2f img/s  %7.2f img/CPU-s  peak RSS %4.0f MB" % (arch, p, w, c, rss))
    f = med["ctrain-fold"]
    for p in ("pytorch", "onnxrt", "ctrain-ref"):
        print("ratio   %-9s ctrain-fold/%-10s by CPU time %.2fx, wall %.2fx, peak RSS %.2fx"
              % (arch, p, f[1] / med[p][1], f[0] / med[p][0], f[2] / med[p][2]))
PY
