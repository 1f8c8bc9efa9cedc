# Shared setup of the train end-to-end tests (sourced by tests/test_train_*.sh and test_cli.sh).
# Synthetic data: 16x16 RGB PNGs in an ImageFolder tree, 10 classes told apart by the orientation
# and frequency of a noisy grating and a colour cast, packed by ./packdata. Cached in the build
# directory (keyed on this file's checksum) so the tests share one copy.
set -euo pipefail
CTRAIN_ROOT=${CTRAIN_ROOT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}
CTRAIN_BUILD=${CTRAIN_BUILD:-$CTRAIN_ROOT/build}
CTRAIN_BIN=${CTRAIN_BIN:-$CTRAIN_ROOT}
TORCH_PY=${TORCH_PY:-/usr/bin/python3}
PIPPY=${PIPPY:-python3}
TRAIN=$CTRAIN_BIN/train
PACKDATA=$CTRAIN_BIN/packdata
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
# The emulated GPU trainer (train-emu) runs a block's CUDA threads as fibers on
# CTRAIN_EMU_HOST_THREADS host threads (kernels/emu/threads.cpp). These tests check what the trainer
# does with the kernels (bits, resume, ranks, streams, graphs), not races inside a kernel: those are
# the emu_* tests' job, under the strict default (a warp's lanes on 2 host threads, truly parallel).
# One host thread gives the same bits for about a third of the CPU time (no futex hand-off at every
# warp collective: one resnet20 step of emu_model 41.7 -> 13.7 CPU-seconds).
export CTRAIN_EMU_HOST_THREADS=${CTRAIN_EMU_HOST_THREADS:-1}

fail() { echo "FAIL: $*" >&2; exit 1; }
ok() { echo "ok: $*"; }

# make_synth DST NTRAIN NVAL SIZE [CLASSES] [CHANNELS]: shards in DST/{train,val}.shard
make_synth() {
  local dst=$1 ntrain=$2 nval=$3 size=$4 classes=${5:-10} channels=${6:-3}
  local key
  key=$( (cat "${BASH_SOURCE[0]}"; echo "$ntrain $nval $size $classes $channels") | md5sum | cut -c1-12)
  local cache=$CTRAIN_BUILD/test-data/synth-$key
  if [ ! -f "$cache/train.shard" ] || [ ! -f "$cache/val.shard" ]; then
    local tmp="$cache.tmp.$$"  # tests run in parallel: each builds in its own directory
    rm -rf "$tmp" && mkdir -p "$tmp"
    "$PIPPY" - "$tmp/src" "$ntrain" "$nval" "$size" "$classes" <<'PY'
import math, os, sys
import numpy as np
from PIL import Image
root, ntrain, nval, size, classes = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
rng = np.random.default_rng(1234)
yy, xx = np.mgrid[0:size, 0:size].astype(np.float64)
for split, n in (("train", ntrain), ("val", nval)):
    for i in range(n):
        k = i % classes
        theta = math.pi * (k % 5) / 5 + rng.normal(0, 0.12)
        freq = (1.5 + 1.0 * (k // 5)) * 2 * math.pi / size
        phase = rng.uniform(0, 2 * math.pi)
        g = np.sin(freq * (xx * math.cos(theta) + yy * math.sin(theta)) + phase)
        cast = np.array([1.0, 0.6, 0.3]) if k % 2 else np.array([0.3, 0.6, 1.0])
        img = 128 + 70 * g[..., None] * cast[None, None, :] + rng.normal(0, 30, (size, size, 3))
        img = np.clip(img, 0, 255).astype(np.uint8)
        d = os.path.join(root, split, "class%02d" % k)
        os.makedirs(d, exist_ok=True)
        Image.fromarray(img).save(os.path.join(d, "%05d.png" % i))
PY
    local chflag=""
    [ "$channels" = 1 ] && chflag="--channels 1"
    "$PACKDATA" $chflag "$tmp/src" "$tmp/out" >/dev/null 2>&1 || { echo "packdata failed" >&2; exit 1; }
    # Published by one rename, so a test beside this one never sees half of it; when another test
    # published the same data first, its copy stays (same inputs, same bytes).
    mkdir -p "$tmp/pub" && mv "$tmp/out/train.shard" "$tmp/out/val.shard" "$tmp/pub/"
    mv -T "$tmp/pub" "$cache" 2>/dev/null || [ -f "$cache/val.shard" ] || { echo "cannot publish $cache" >&2; exit 1; }
    rm -rf "$tmp"
  fi
  mkdir -p "$dst"
  ln -sf "$cache/train.shard" "$dst/train.shard"
  ln -sf "$cache/val.shard" "$dst/val.shard"
}

# same_ckpt A B: two checkpoints hold the same state bit for bit (meta, tensors), their settings
# sections aside (those record each command's output directory, --epochs, workers...).
same_ckpt() {
  "$PIPPY" - "$1" "$2" <<'PY'
import struct, sys
def body(path):
    d = open(path, "rb").read()
    sb = struct.unpack_from("<I", d, 16 + 184)[0]
    return d[:16 + 184] + d[16 + 188:208] + d[208 + sb:-4]
sys.exit(0 if body(sys.argv[1]) == body(sys.argv[2]) else 1)
PY
}

# metrics lines without the wall-clock fields, for bit-for-bit comparisons.
strip_timing() {
  sed -E 's/,"(img_s|data_wait|time|epoch_time|eval_time)":[^,}]*//g' "$1"
}

# The small standard run of these tests: resnet20 on 16x16 synthetic images, batch 32.
SMALL_FLAGS=(-a resnet20 -b 32 --crop-size 16 --val-resize 16 --min-scale 0.5 --lr 0.05 --wd 5e-4 -p 5)

TMP=$(mktemp -d /tmp/ctrain-test.XXXXXX)
# KEEP_TMP=1 keeps the run directories for a look after a failure.
if [ -n "${KEEP_TMP:-}" ]; then echo "tmp: $TMP"; else trap 'rm -rf "$TMP"' EXIT; fi

# Sends signal SIG to the train process PID once RUNDIR/metrics.jsonl holds N step records (or
# after MAX_S seconds, default 60), then waits for it; sets $rc to its exit status.
signal_after_steps() { # SIG PID RUNDIR N [MAX_S]
  local sig=$1 pid=$2 dir=$3 want=$4 i n
  for i in $(seq 1 $((${5:-60} * 10))); do
    n=$(grep -c '"type":"step"' "$dir/metrics.jsonl" 2>/dev/null || true)
    [ "${n:-0}" -ge "$want" ] && break
    sleep 0.1
  done
  kill "-$sig" "$pid"
  rc=0; wait "$pid" || rc=$?
}

# torch_replay RUNDIR DUMPDIR OUTPREFIX ARGS...: tools/torch_train_ref.py train on a ctrain run's
# dumped batches (--dump-batches), normalised with the run's mean/std; writes OUTPREFIX.json and
# OUTPREFIX.safetensors (PyTorch's final weights).
torch_replay() {
  local run=$1 dump=$2 out=$3; shift 3
  local mean std
  mean=$("$PIPPY" -c "import json; print(','.join(str(v) for v in json.load(open('$run/config.json'))['derived']['mean']))")
  std=$("$PIPPY" -c "import json; print(','.join(str(v) for v in json.load(open('$run/config.json'))['derived']['std']))")
  "$TORCH_PY" "$CTRAIN_ROOT/tools/torch_train_ref.py" train --mean "$mean" --std "$std" --dump "$dump" \
    --out "$out.json" --save-weights "$out.safetensors" "$@" || fail "PyTorch replay failed"
}

# compare_with_torch METRICS TORCHJSON MINSTEPS [TOP1_TOL [MIN_TOP1]]: ctrain's per-step losses and
# final val top-1 against the PyTorch replay of the same run: top-1 within TOP1_TOL points
# (default 0.5), and above MIN_TOP1 (default 60: the run learned).
compare_with_torch() {
  "$PIPPY" - "$@" <<'PY'
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
ours = {r["step"]: r["loss"] for r in recs if r["type"] == "step"}
final = [r for r in recs if r["type"] == "epoch"][-1]
ref = json.load(open(sys.argv[2]))
assert ref["steps"] == list(range(1, len(ref["steps"]) + 1)) and sorted(ours) == ref["steps"], "step numbering differs"
n = len(ref["steps"])
assert n >= int(sys.argv[3]), n
diffs = [abs(ours[s] - l) / max(abs(l), 1e-3) for s, l in zip(ref["steps"], ref["losses"])]
# Same weights, same batches: the first steps agree to float rounding, which checks forward,
# backward, label smoothing, SGD (momentum, Nesterov, weight decay) and the schedule exactly.
# Training then amplifies float32 summation-order differences (each step's update depends on
# the last), so later steps are compared as curves: moving averages over 25 steps.
W = 25
def smooth(v):
    return [sum(v[i:i + W]) / W for i in range(len(v) - W + 1)]
a, b = smooth([ours[s] for s in ref["steps"]]), smooth(ref["losses"])
curve = max(abs(x - y) / y for x, y in zip(a, b))
print("%d steps: loss rel. diff first 3 steps max %.2e; first 20: %s" % (n, max(diffs[:3]), " ".join("%.0e" % d for d in diffs[:20])))
print("moving-average (%d steps) loss curves: max rel. diff %.2e; per step mean %.2e" % (W, curve, sum(diffs) / n))
print("final: ctrain loss %.4f torch loss %.4f | val top-1 ctrain %.2f%% torch %.2f%% (val loss %.4f / %.4f)"
      % (ours[n], ref["losses"][-1], final["val_top1"], ref["top1"], final["val_loss"], ref["loss"]))
assert max(diffs[:3]) < 1e-5, "first steps differ beyond float rounding"
assert curve < 0.2, "loss curves drift apart"
tol = float(sys.argv[4]) if len(sys.argv) > 4 else 0.5
least = float(sys.argv[5]) if len(sys.argv) > 5 else 60
assert abs(final["val_top1"] - ref["top1"]) <= tol, "val top-1 differs by more than %g points" % tol
assert final["val_top1"] > least, "the run did not learn (val top-1 at most %g%%)" % least
PY
}

# frozen_check MODEL REF [FC_SHAPE]: backbone bit-identical to REF, fc moved (prints what moved);
# with FC_SHAPE (e.g. 3,2048), also every backbone tensor of REF present and fc.weight of that
# shape, not all zero.
frozen_check() {
  "$TORCH_PY" - "$CTRAIN_ROOT/tools" "$1" "$2" "${3:-}" <<'PY'
import sys
sys.path.insert(0, sys.argv[1])
import numpy as np
from torch_ref import load_safetensors
a, _ = load_safetensors(sys.argv[2])
ref, _ = load_safetensors(sys.argv[3])
n = 0
for k, v in a.items():
    if k.startswith("fc."):
        continue
    assert k in ref, k
    assert v.shape == ref[k].shape and v.tobytes() == ref[k].tobytes(), f"{k} changed"
    n += 1
fc = a["fc.weight"]
assert "fc.weight" not in ref or ref["fc.weight"].shape != fc.shape or not np.array_equal(fc, ref["fc.weight"]), "fc did not move"
if sys.argv[4]:
    shape = tuple(int(d) for d in sys.argv[4].split(","))
    assert n == len(ref) - 2 and fc.shape == shape and np.abs(fc).sum() > 0, fc.shape
print(f"{n} backbone tensors bit-identical, fc.weight {list(fc.shape)} trained")
PY
}

# torchvision_weights OUT [--calibrate-bn] [--drop-nbt]: a seeded torchvision resnet18 for 1000
# classes as safetensors (torchvision's names), the stand-in for downloaded ImageNet weights.
# --calibrate-bn gives BN the statistics a trained network has (averaged over random batches,
# num_batches_tracked 123), so "untouched" is not "still 0 and 1" and frozen features keep a sane
# scale; --drop-nbt leaves num_batches_tracked out, as older torchvision weights do.
torchvision_weights() {
  "$TORCH_PY" - "$CTRAIN_ROOT/tools" "$@" <<'PY' || fail "torchvision weights"
import sys
sys.path.insert(0, sys.argv[1])
import torch, torchvision
from torch_ref import save_safetensors
out, opts = sys.argv[2], set(sys.argv[3:])
assert opts <= {"--calibrate-bn", "--drop-nbt"}, opts
torch.manual_seed(0)
m = torchvision.models.resnet18(num_classes=1000)
if "--calibrate-bn" in opts:
    bns = [mod for mod in m.modules() if isinstance(mod, torch.nn.BatchNorm2d)]
    for bn in bns:
        bn.momentum = None  # cumulative average over the calibration batches
    m.train()
    with torch.no_grad():
        for _ in range(4):
            m(torch.randn(16, 3, 32, 32))
    for bn in bns:
        bn.num_batches_tracked.fill_(123)
sd = {k: v.numpy() for k, v in m.state_dict().items()
      if not ("--drop-nbt" in opts and k.endswith("num_batches_tracked"))}
save_safetensors(out, sd)
PY
}

# eval_summary: the "N images  loss L  top-1 A%  top-5 B%" of train --evaluate's output (stdin).
eval_summary() { grep -o "[0-9]* images.*top-5 [0-9.]*%"; }

# random_png OUT SIZE [SEED]: a SIZExSIZE RGB picture of uniform noise (the predict tests' input).
random_png() {
  "$PIPPY" - "$1" "$2" "${3:-9}" <<'PY' || fail "picture $1"
import sys, numpy as np
from PIL import Image
n, seed = int(sys.argv[2]), int(sys.argv[3])
Image.fromarray(np.random.default_rng(seed).integers(0, 256, (n, n, 3), dtype=np.uint8)).save(sys.argv[1])
PY
}

# predict_vs_torchvision ARCH WEIGHTS PIC PRED_JSON REF [TOL]: torchvision's ARCH (class count from
# fc.weight) loads WEIGHTS with strict=True; its eval logits on PIC (ImageNet mean/std, as
# model.safetensors' metadata says for these runs) match the first record of PRED_JSON (train
# predict --format json --logits) within TOL (relative norm, default 1e-4). Writes REF.x.npy (the
# input) and REF.logits.npy (torchvision's logits) for onnx_vs_torchvision.
predict_vs_torchvision() {
  "$TORCH_PY" - "$CTRAIN_ROOT/tools" "$@" <<'PY'
import json, sys
sys.path.insert(0, sys.argv[1])
import numpy as np, torch, torchvision
from PIL import Image
from torch_ref import load_safetensors
arch, weights, pic, pred, ref_out = sys.argv[2:7]
tol = float(sys.argv[7]) if len(sys.argv) > 7 else 1e-4
sd, _ = load_safetensors(weights)
m = getattr(torchvision.models, arch)(num_classes=sd["fc.weight"].shape[0])
m.load_state_dict({k: torch.from_numpy(v) for k, v in sd.items()}, strict=True)
x = np.asarray(Image.open(pic).convert("RGB"), dtype=np.float32) / 255.0
x = (x - np.array([0.485, 0.456, 0.406], np.float32)) / np.array([0.229, 0.224, 0.225], np.float32)
x = torch.from_numpy(x.transpose(2, 0, 1)[None].copy())
with torch.no_grad():
    ref = m.eval()(x)[0].double().numpy()
np.save(ref_out + ".x.npy", x.numpy())
np.save(ref_out + ".logits.npy", ref)
got = np.array(json.loads(open(pred).readline())["logits"], dtype=np.float64)
rel = np.linalg.norm(got - ref) / np.linalg.norm(ref)
print("%s: predict vs torchvision (strict load of %s) logits rel. %.2e" % (arch, weights.split("/")[-2] + "/" + weights.split("/")[-1], rel))
assert rel <= tol, (got, ref)
PY
}

# onnx_vs_torchvision ONNX REF ARCH: the exported graph passes onnx's full check and onnxruntime's
# logits on REF.x.npy match REF.logits.npy (predict_vs_torchvision's) within 1e-4; its Conv nodes
# carry group 32 for ResNeXt (resnext50_32x4d; 64 for resnext101_64x4d) and only 1 otherwise.
onnx_vs_torchvision() {
  "$PIPPY" - "$@" <<'PY'
import re, sys, numpy as np, onnx, onnxruntime as ort
path, ref, arch = sys.argv[1:4]
x, want = np.load(ref + ".x.npy"), np.load(ref + ".logits.npy")
m = onnx.load(path)
onnx.checker.check_model(m, full_check=True)
groups = sorted({a.i for n in m.graph.node if n.op_type == "Conv" for a in n.attribute if a.name == "group"} | {1})
got = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(["logits"], {"input": x})[0][0]
rel = np.linalg.norm(got - want) / np.linalg.norm(want)
print("%s: onnxruntime vs torchvision logits rel. %.2e; Conv groups %s" % (arch, rel, groups))
assert rel <= 1e-4
g = re.match(r"resnext\d+_(\d+)x", arch)
assert groups == ([1, int(g.group(1))] if g else [1]), groups
PY
}
