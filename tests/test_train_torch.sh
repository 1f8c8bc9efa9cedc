# train against PyTorch: resnet20 trained for a few hundred steps by ctrain and by PyTorch
# (tools/torch_train_ref.py) from the same initial weights on the same batches (dumped by ctrain,
# learning rate of every step included). The loss curves agree within float tolerance and the
# final val top-1 within 0.5 points; PyTorch's final weights evaluated by ctrain give PyTorch's top-1.
# Then the same with the SOTA recipes' tools on (TrivialAugmentWide, RandomErasing, repeated
# augmentation, Mixup/CutMix, timm's BCE with label smoothing): the dumped batches carry what the
# loader drew (augmented, erased, mixed pixels; lam and the partners' labels), and PyTorch's replay
# computes the loss as timm does on them: the same tolerance on the loss curves. The run ends mid-
# way (val top-1 about 40% after 4 epochs of such augmentation on 2000 16 px images), where top-1
# moves fast with small weight differences: it must agree within 4 points (seen: 40.7 / 38.1).
source "$(dirname "$0")/train_lib.sh"
make_synth "$TMP/d" 2000 1000 16
FL=(-a resnet20 -b 32 --crop-size 16 --val-resize 16 --min-scale 0.5 --lr 0.05 --momentum 0.9 --wd 5e-4 --nesterov
    --label-smoothing 0.1 --lr-schedule cosine --warmup-epochs 0.5 --epochs 4 -p 1)
"$TRAIN" "${FL[@]}" --dump-batches "$TMP/dump" --out "$TMP/run" "$TMP/d" 2>"$TMP/train.log" || { cat "$TMP/train.log"; fail "ctrain run failed"; }
tail -2 "$TMP/train.log"
torch_replay "$TMP/run" "$TMP/dump" "$TMP/torch" --arch resnet20 --momentum 0.9 --wd 5e-4 --nesterov 1 --smoothing 0.1
compare_with_torch "$TMP/run/metrics.jsonl" "$TMP/torch.json" 200 || fail "loss curves or accuracy differ"
ok "loss curve and val top-1 match PyTorch"

out=$("$TRAIN" --evaluate -a resnet20 --crop-size 16 --val-resize 16 -b 100 --weights "$TMP/torch.safetensors" "$TMP/d" 2>&1) \
  || { echo "$out"; fail "--evaluate of PyTorch's weights failed"; }
echo "$out"
t1=$(echo "$out" | sed -nE 's/.*top-1 ([0-9.]+)%.*/\1/p')
"$PIPPY" -c "
import json; r = json.load(open('$TMP/torch.json'))
assert abs($t1 - r['top1']) < 0.01, 'ctrain top-1 %s vs PyTorch %.2f on PyTorch-trained weights' % ($t1, r['top1'])
" || fail "--evaluate on PyTorch-trained weights differs"
ok "--evaluate on PyTorch-trained weights gives PyTorch's top-1"

R=("${FL[@]}" --auto-augment ta_wide --random-erase 0.1 --ra-repeats 2 --mixup 0.2 --cutmix 1.0 --bce)
"$TRAIN" "${R[@]}" --dump-batches "$TMP/rdump" --out "$TMP/recipe" "$TMP/d" 2>"$TMP/recipe.log" || { cat "$TMP/recipe.log"; fail "ctrain recipe run failed"; }
tail -2 "$TMP/recipe.log"
torch_replay "$TMP/recipe" "$TMP/rdump" "$TMP/rtorch" --arch resnet20 --momentum 0.9 --wd 5e-4 --nesterov 1 --smoothing 0.1 --bce
compare_with_torch "$TMP/recipe/metrics.jsonl" "$TMP/rtorch.json" 200 4 25 || fail "recipe run: loss curves or accuracy differ"
"$PIPPY" - "$TMP/rdump/train_batches.bin" <<'PY' || fail "the recipe run's dump has no mixed batches"
import struct, sys
d, off, mixed, n_b = open(sys.argv[1], "rb").read(), 0, 0, 0
while off < len(d):
    n, h, w, c, _ = struct.unpack_from("<5i", d, off + 4)
    lam = struct.unpack_from("<f", d, off + 36)[0]
    mixed += lam < 1
    n_b += 1
    off += 40 + 8 * n + n * h * w * c
assert mixed > n_b // 2, (mixed, n_b)
print("recipe dump: %d of %d batches mixed" % (mixed, n_b))
PY
ok "with TrivialAugmentWide, RandomErasing, --ra-repeats 2, Mixup/CutMix and BCE: loss curve and val top-1 match PyTorch's replay"
echo "test_train_torch: all passed"
