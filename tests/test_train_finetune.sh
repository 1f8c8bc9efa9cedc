#!/bin/bash
# Fine-tuning from torchvision weights: a torchvision resnet18 made for 1000 classes, saved without
# num_batches_tracked (as older torchvision weights are), is refused on 10-class shards with an
# error that names --reset-head; with --reset-head it loads (the classifier starts fresh, a note
# names both shapes), trains an epoch, and the exported model.safetensors loads back into
# torchvision's resnet18(num_classes=10) with strict=True. A checkpoint works as --weights too.
source "$(dirname "$0")/train_lib.sh"

make_synth "$TMP/d" 160 32 32
"$TORCH_PY" - "$CTRAIN_ROOT/tools" "$TMP/tv.safetensors" <<'PY' || fail "torchvision weights"
import sys
sys.path.insert(0, sys.argv[1])
import torch, torchvision
from torch_ref import save_safetensors
torch.manual_seed(0)
m = torchvision.models.resnet18(num_classes=1000)
sd = {k: v.numpy() for k, v in m.state_dict().items() if not k.endswith("num_batches_tracked")}
save_safetensors(sys.argv[2], sd)
PY
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
echo "test_train_finetune: all passed"
