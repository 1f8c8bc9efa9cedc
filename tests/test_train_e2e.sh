# train end to end on synthetic shards: the console output, OUT/config.json, OUT/metrics.jsonl,
# TensorBoard event files read back with TensorBoard's own reader, checkpoints, model.safetensors
# loaded into PyTorch (strict state_dict) and --evaluate against PyTorch on the same images, also
# for a torchvision resnet18 state_dict made by PyTorch.
source "$(dirname "$0")/train_lib.sh"
make_synth "$TMP/d" 1000 300 16

# Two epochs, progress without a terminal (plain lines).
"$TRAIN" "${SMALL_FLAGS[@]}" --epochs 2 --lr-schedule cosine --warmup-epochs 0.5 --nesterov --label-smoothing 0.1 \
  --out "$TMP/run" "$TMP/d" > "$TMP/stdout" 2> "$TMP/stderr" || { cat "$TMP/stderr"; fail "training run failed"; }
cat "$TMP/stderr"
grep -q "global batch 32" "$TMP/stderr" || fail "global batch not printed"
grep -qE "^epoch 1/2 \[5/31\] loss [0-9.]+ \(avg [0-9.]+\) lr [0-9.e-]+ [0-9]+ img/s data-wait [0-9.]+% ETA" "$TMP/stderr" \
  || fail "no plain progress line for step 5"
grep -qE "^epoch 2/2  train loss [0-9.]+ top-1 [0-9.]+%  \|  val loss [0-9.]+ top-1 [0-9.]+% top-5 [0-9.]+%.*data-wait" "$TMP/stderr" \
  || fail "no epoch summary line"
for f in config.json metrics.jsonl last.ckpt best.ckpt model.safetensors; do [ -s "$TMP/run/$f" ] || fail "no $f"; done
ls "$TMP/run"/events.out.tfevents.* >/dev/null || fail "no TensorBoard event file"
[ -z "$(ls "$TMP/run" | grep tmp || true)" ] || fail "temporary files left in OUT: $(ls "$TMP/run")"
ok "console output and OUT files"

"$PIPPY" - "$TMP/run" <<'PY' || fail "config/metrics/events check"
import glob, json, math, os, sys
run = sys.argv[1]
cfg = json.load(open(os.path.join(run, "config.json")))
s = cfg["settings"]
assert s["arch"] == "resnet20" and s["epochs"] == 2 and s["batch-size"] == 32 and s["nesterov"] is True, s
assert abs(s["lr"] - 0.05) < 1e-12 and s["lr-schedule"] == "cosine" and abs(s["label-smoothing"] - 0.1) < 1e-12, s
for k in ("momentum", "wd", "warmup-epochs", "crop-size", "val-resize", "workers", "seed", "deterministic", "device",
          "print-freq", "teacher", "kd-alpha", "kd-temperature", "precision", "resume", "weights", "shards"):
    assert k in s, "config.json settings lack " + k
d = cfg["derived"]
assert d["global_batch"] == 32 and d["steps_per_epoch"] == 31 and d["classes"] == 10 and d["channels"] == 3, d
assert d["train_records"] == 1000 and d["val_records"] == 300 and d["parameters"] > 270000, d
assert cfg["git_commit"] and cfg["machine"]["cpus"] >= 1 and cfg["machine"]["cpu"] and cfg["command"][0].endswith("train"), cfg
# Floats as the shortest text that reads back (0.05, not 0.050000000000000003; the mean of the
# float normalisation as 0.485), and git_commit is ctrain's own, fixed when it was built.
text = open(os.path.join(run, "config.json")).read()
assert '"lr": 0.05,' in text and '"label-smoothing": 0.1,' in text, text
assert d["mean"] == [0.485, 0.456, 0.406] and '0.485' in text and '0.48500001' not in text, d["mean"]
import subprocess
root = os.environ.get("CTRAIN_ROOT", ".")
head = subprocess.run(["git", "-C", root, "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True).stdout.strip()
if head:
    assert cfg["git_commit"].split("-")[0] == head, (cfg["git_commit"], head)
recs = [json.loads(l) for l in open(os.path.join(run, "metrics.jsonl"))]
steps = [r for r in recs if r["type"] == "step"]
epochs = [r for r in recs if r["type"] == "epoch"]
assert [r["step"] for r in steps] == [5, 10, 15, 20, 25, 30, 31, 36, 41, 46, 51, 56, 61, 62], [r["step"] for r in steps]
for r in steps:
    for k in ("epoch", "loss", "loss_avg", "top1", "lr", "img_s", "data_wait", "time"):
        assert k in r and math.isfinite(r[k]), (k, r)
assert len(epochs) == 2 and [e["epoch"] for e in epochs] == [1, 2] and epochs[1]["step"] == 62
for e in epochs:
    for k in ("train_loss", "train_top1", "val_loss", "val_top1", "val_top5", "lr", "epoch_time", "data_wait", "img_s"):
        assert k in e and math.isfinite(e[k]), (k, e)
    assert 0 <= e["val_top1"] <= e["val_top5"] <= 100
# Warmup then cosine: lr rises over the first 15 steps (0.5 epochs), then falls.
lrs = [r["lr"] for r in steps]
assert lrs[0] < lrs[1] < lrs[2] and lrs[3] > lrs[-1], lrs
assert epochs[1]["val_top1"] > 30, "did not learn: %s" % epochs[1]
# TensorBoard's own reader.
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
files = glob.glob(os.path.join(run, "events.out.tfevents.*"))
assert len(files) == 1, files
acc = EventAccumulator(files[0])
acc.Reload()
tags = acc.Tags()["scalars"]
for t in ("train/loss", "train/lr", "val/top1", "val/top5", "val/loss", "train/top1"):
    assert t in tags, (t, tags)
loss = acc.Scalars("train/loss")
assert [e.step for e in loss] == [r["step"] for r in steps], [e.step for e in loss]
for e, r in zip(loss, steps):
    assert abs(e.value - r["loss"]) <= 1e-6 * max(1, abs(r["loss"])), (e, r)
vt = acc.Scalars("val/top1")
assert [e.step for e in vt] == [31, 62] and all(abs(a.value - b["val_top1"]) < 1e-4 for a, b in zip(vt, epochs)), vt
print("config.json, metrics.jsonl and TensorBoard events agree (%d step records, %d epochs, val top-1 %.2f%%)"
      % (len(steps), len(epochs), epochs[-1]["val_top1"]))
PY
ok "config.json, metrics.jsonl, TensorBoard events"

# The PyPI safetensors package reads model.safetensors; PyTorch loads it strictly and agrees with
# --evaluate on the very images ctrain evaluated.
"$PIPPY" -c "
from safetensors.numpy import load_file
t = load_file('$TMP/run/model.safetensors')
assert t['conv1.weight'].shape == (16, 3, 3, 3) and t['fc.weight'].shape == (10, 64), {k: v.shape for k, v in t.items()}
assert t['bn1.num_batches_tracked'].dtype.name == 'int64' and int(t['bn1.num_batches_tracked']) == 62
print('safetensors package reads model.safetensors:', len(t), 'tensors')
" || fail "safetensors package cannot read model.safetensors"
mean=$("$PIPPY" -c "import json; print(','.join(str(v) for v in json.load(open('$TMP/run/config.json'))['derived']['mean']))")
std=$("$PIPPY" -c "import json; print(','.join(str(v) for v in json.load(open('$TMP/run/config.json'))['derived']['std']))")

# compare_eval ARCH WEIGHTS [TTA]: ctrain --evaluate vs PyTorch on ctrain's dumped val images
# (TTA flip: both average the logits of each image and its mirror).
compare_eval() {
  local arch=$1 w=$2 tta=${3:-none} dump=$TMP/eval-$1-${3:-none}
  local line
  line=$("$TRAIN" --evaluate -a "$arch" --crop-size 16 --val-resize 16 -b 64 --tta "$tta" --weights "$w" --dump-batches "$dump" "$TMP/d" 2>&1) \
    || { echo "$line"; fail "train --evaluate $arch failed"; }
  echo "$line"
  "$TORCH_PY" "$CTRAIN_ROOT/tools/torch_train_ref.py" evaluate --arch "$arch" --mean "$mean" --std "$std" --weights "$w" \
    --tta "$tta" --val "$dump/val_batches.bin" > "$TMP/torch_eval.json" || fail "torch evaluate $arch failed"
  "$PIPPY" - "$line" "$TMP/torch_eval.json" <<'PY' || fail "ctrain --evaluate differs from PyTorch ($arch)"
import json, re, sys
m = re.search(r"(\d+) images  loss ([0-9.]+)  top-1 ([0-9.]+)%  top-5 ([0-9.]+)%", sys.argv[1])
n, loss, t1, t5 = int(m.group(1)), float(m.group(2)), float(m.group(3)), float(m.group(4))
ref = json.load(open(sys.argv[2]))
print("ctrain: %d images loss %.4f top-1 %.2f top-5 %.2f | torch: %d images loss %.4f top-1 %.2f top-5 %.2f" %
      (n, loss, t1, t5, ref["n"], ref["loss"], ref["top1"], ref["top5"]))
assert n == ref["n"] == 300
assert abs(t1 - ref["top1"]) < 0.01 and abs(t5 - ref["top5"]) < 0.01
assert abs(loss - ref["loss"]) <= 2e-4 * max(1.0, ref["loss"]) + 1e-4
PY
}
compare_eval resnet20 "$TMP/run/model.safetensors"
ok "model.safetensors loads into PyTorch; --evaluate agrees with PyTorch"
compare_eval resnet20 "$TMP/run/model.safetensors" flip
ok "--evaluate --tta flip agrees with PyTorch averaging the logits of each image and its mirror"

# A torchvision resnet18 state_dict written by PyTorch, with random BN statistics.
"$TORCH_PY" "$CTRAIN_ROOT/tools/torch_train_ref.py" make-weights --arch resnet18 --classes 10 --seed 3 --out "$TMP/tv18.safetensors" >/dev/null \
  || fail "make-weights failed"
compare_eval resnet18 "$TMP/tv18.safetensors"
ok "--evaluate on torchvision resnet18 weights agrees with PyTorch"

# The other direction for torchvision itself: a ctrain-trained resnet18 loads into
# torchvision.models.resnet18(num_classes=10) with strict=True and evaluates the same.
"$TRAIN" -a resnet18 -b 32 --crop-size 16 --val-resize 16 --lr 0.02 --epochs 1 -p 10 --out "$TMP/r18" "$TMP/d" 2>"$TMP/r18.log" \
  || { cat "$TMP/r18.log"; fail "resnet18 run failed"; }
compare_eval resnet18 "$TMP/r18/model.safetensors"
ok "a ctrain resnet18 loads into torchvision and evaluates the same"

# Curves from metrics.jsonl (util/plot).
if [ -x "$CTRAIN_BUILD/tools/plot" ]; then
  "$CTRAIN_BUILD/tools/plot" "$TMP/run/metrics.jsonl" "$TMP/curves.png" >/dev/null 2>&1 || fail "tools/plot cannot read metrics.jsonl"
  [ -s "$TMP/curves.png" ] || fail "no curves.png"
  ok "tools/plot renders metrics.jsonl"
fi
echo "test_train_e2e: all passed"
