#!/bin/bash
# Fine-tuning from torchvision weights: a torchvision resnet18 made for 1000 classes, saved without
# num_batches_tracked (as older torchvision weights are), is refused on 10-class shards with an
# error that names --reset-head; with --reset-head it loads (the classifier starts fresh, a note
# names both shapes), trains an epoch, and the exported model.safetensors loads back into
# torchvision's resnet18(num_classes=10) with strict=True. A checkpoint works as --weights too;
# predict with the fine-tuned model gives torchvision's top-5.
source "$(dirname "$0")/train_lib.sh"

make_synth "$TMP/d" 160 32 32
torchvision_weights "$TMP/tv.safetensors" --drop-nbt
FL=(-a resnet18 -b 16 --crop-size 32 --epochs 1 --lr 0.01 -p 5 -j 2)

out=$("$TRAIN" "${FL[@]}" --weights "$TMP/tv.safetensors" --out "$TMP/no" "$TMP/d" 2>&1) && fail "1000-class weights accepted on 10 classes"
grep -q "^train: error: --weights $TMP/tv.safetensors: its classifier fc.weight is \[1000, 512\], fc.bias \[1000\].*add --reset-head" <<<"$out" \
  || fail "head mismatch: unclear error: $out"
[ ! -e "$TMP/no" ] || fail "a refused run created its output directory"
ok "a classifier of another shape is an error naming --reset-head"

"$TRAIN" "${FL[@]}" --weights "$TMP/tv.safetensors" --reset-head --out "$TMP/ft" "$TMP/d" 2>"$TMP/ft.log" \
  || { cat "$TMP/ft.log"; fail "fine-tuning with --reset-head failed"; }
grep -q "^train: --reset-head: the classifier starts fresh (seed 0): fc.weight \[1000, 512\] -> \[10, 512\], fc.bias \[1000\] -> \[10\]" "$TMP/ft.log" \
  || { cat "$TMP/ft.log"; fail "no --reset-head note"; }
ok "--reset-head loads torchvision weights without num_batches_tracked and trains"

"$TORCH_PY" - "$CTRAIN_ROOT/tools" "$TMP/ft/model.safetensors" "$TMP/tv.safetensors" <<'PY' || fail "torchvision cannot load the fine-tuned model"
import sys
sys.path.insert(0, sys.argv[1])
import torch, torchvision
from torch_ref import load_safetensors
sd, meta = load_safetensors(sys.argv[2])
m = torchvision.models.resnet18(num_classes=10)
m.load_state_dict({k: torch.from_numpy(v) for k, v in sd.items()}, strict=True)
tv, _ = load_safetensors(sys.argv[3])
# Fine-tuned, not restarted: the last block moved from the loaded weights only by ten small steps
# (a fresh initialisation would be about 1.4 away in these units).
k = "layer4.1.conv2.weight"
d = float(((sd[k] - tv[k]) ** 2).sum() ** 0.5 / (tv[k] ** 2).sum() ** 0.5)
assert 0 < d < 0.2, d
assert int(sd["bn1.num_batches_tracked"]) == 10, sd["bn1.num_batches_tracked"]
print("torchvision resnet18(num_classes=10) loads model.safetensors strictly (%s moved %.3f of its norm)" % (k, d))
PY
ok "model.safetensors loads back into torchvision"

# A checkpoint as --weights: the weights and BN statistics, arch from the checkpoint.
out=$("$TRAIN" --evaluate --crop-size 32 -b 16 --weights "$TMP/ft/last.ckpt" "$TMP/d" 2>&1) || { echo "$out"; fail "--evaluate --weights CKPT"; }
grep -q "^train: --weights $TMP/ft/last.ckpt is a ctrain checkpoint" <<<"$out" || fail "no checkpoint note: $out"
e1=$(grep -o "32 images.*top-5 [0-9.]*%" <<<"$out")
e2=$("$TRAIN" --evaluate -a resnet18 --crop-size 32 -b 16 --weights "$TMP/ft/model.safetensors" "$TMP/d" 2>&1 | grep -o "32 images.*top-5 [0-9.]*%")
[ -n "$e1" ] && [ "$e1" = "$e2" ] || fail "checkpoint and model.safetensors evaluate differently: '$e1' vs '$e2'"
ok "--evaluate --weights last.ckpt: $e1"

# predict with the fine-tuned (trained) model against torchvision's eval pipeline on the same
# weights: 12 PNGs drawn like the val set. At 32x32 with --resize 32 (torchvision: Resize(32) +
# CenterCrop(32), both the identity here) the pixels are the same: top-5 identical, logits within
# 1e-5 of torch's (relative per image; two fp32 forwards differ only in summation order). With the
# model's own preprocessing (resize 36, crop 32) against torchvision's tensor pipeline (bilinear
# with antialias in float, rounded to uint8 as ctrain stores its crops): top-5 identical, logits
# within 2e-3 (the resize roundings: see test_predict_torch.sh).
"$PIPPY" - "$TMP/pics" <<'PY' || fail "predict pictures"
import math, os, sys
import numpy as np
from PIL import Image
d = sys.argv[1]; os.makedirs(d)
rng = np.random.default_rng(77)
yy, xx = np.mgrid[0:32, 0:32].astype(np.float64)
for i in range(12):
    k = i % 10
    theta = math.pi * (k % 5) / 5 + rng.normal(0, 0.12)
    freq = (1.5 + 1.0 * (k // 5)) * 2 * math.pi / 32
    g = np.sin(freq * (xx * math.cos(theta) + yy * math.sin(theta)) + rng.uniform(0, 2 * math.pi))
    cast = np.array([1.0, 0.6, 0.3]) if k % 2 else np.array([0.3, 0.6, 1.0])
    img = np.clip(128 + 70 * g[..., None] * cast[None, None, :] + rng.normal(0, 30, (32, 32, 3)), 0, 255)
    Image.fromarray(img.astype(np.uint8)).save(os.path.join(d, "p%02d.png" % i))
PY
"$TRAIN" predict --weights "$TMP/ft/model.safetensors" --format json --logits --resize 32 "$TMP/pics" > "$TMP/pred_tight.jsonl" \
  || fail "predict (tight) failed"
"$TRAIN" predict --weights "$TMP/ft/model.safetensors" --format json --logits "$TMP/pics" > "$TMP/pred_model.jsonl" \
  || fail "predict (the model's preprocessing) failed"
"$TORCH_PY" - "$CTRAIN_ROOT/tools" "$TMP/ft/model.safetensors" "$TMP/pred_tight.jsonl" "$TMP/pred_model.jsonl" <<'PY' \
  || fail "predict with the fine-tuned model differs from torchvision's eval pipeline"
import json, sys
sys.path.insert(0, sys.argv[1])
import numpy as np, torch, torchvision
import torchvision.transforms.functional as F
from PIL import Image
from torch_ref import load_safetensors
sd, meta = load_safetensors(sys.argv[2])
m = torchvision.models.resnet18(num_classes=10)
m.load_state_dict({k: torch.from_numpy(v) for k, v in sd.items()}, strict=True)
m.eval()
mean = torch.tensor([float(v) for v in meta["mean"].split(",")]).view(1, 3, 1, 1)
std = torch.tensor([float(v) for v in meta["std"].split(",")]).view(1, 3, 1, 1)
resize, crop = int(meta["val_resize"]), int(meta["crop_size"])
assert (resize, crop) == (36, 32), (resize, crop)
def torch_logits(path, size):
    x = torch.from_numpy(np.asarray(Image.open(path).convert("RGB"))).permute(2, 0, 1).float()
    x = F.center_crop(F.resize(x, size, antialias=True), crop).round().clamp(0, 255)
    with torch.no_grad():
        return m(((x[None] / 255) - mean) / std)[0].double().numpy()
for name, size, tol in (("tight", 32, 1e-5), ("model", resize, 2e-3)):
    worst = 0
    for line in open(sys.argv[3] if name == "tight" else sys.argv[4]):
        r = json.loads(line)
        want = torch_logits(r["file"], size)
        got = np.array(r["logits"], np.float64)
        rel = np.abs(got - want).max() / np.abs(want).max()
        worst = max(worst, rel)
        top_t = list(np.argsort(-want, kind="stable")[:5])
        top_c = [t["index"] for t in r["top"]]
        assert top_c == top_t, (name, r["file"], top_c, top_t)
        assert rel <= tol, (name, r["file"], rel)
    print("predict (%s preprocessing) vs torchvision on the fine-tuned resnet18: top-5 identical on 12 images, logits within %.2g" % (name, worst))
PY
ok "predict with the fine-tuned model: top-5 equal to torchvision's eval pipeline"
echo "test_train_finetune: all passed"
