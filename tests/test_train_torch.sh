# train against PyTorch: resnet20 trained for a few hundred steps by ctrain and by PyTorch
# (tools/torch_train_ref.py) from the same initial weights on the same batches (dumped by ctrain,
# learning rate of every step included). The loss curves agree within float tolerance and the
# final val top-1 within 0.5 points; PyTorch's final weights evaluated by ctrain give PyTorch's top-1.
source "$(dirname "$0")/train_lib.sh"
make_synth "$TMP/d" 2000 1000 16
FL=(-a resnet20 -b 32 --crop-size 16 --val-resize 16 --min-scale 0.5 --lr 0.05 --momentum 0.9 --wd 5e-4 --nesterov
    --label-smoothing 0.1 --lr-schedule cosine --warmup-epochs 0.5 --epochs 4 -p 1)
"$TRAIN" "${FL[@]}" --dump-batches "$TMP/dump" --out "$TMP/run" "$TMP/d" 2>"$TMP/train.log" || { cat "$TMP/train.log"; fail "ctrain run failed"; }
tail -2 "$TMP/train.log"
mean=$("$PIPPY" -c "import json; print(','.join(str(v) for v in json.load(open('$TMP/run/config.json'))['derived']['mean']))")
std=$("$PIPPY" -c "import json; print(','.join(str(v) for v in json.load(open('$TMP/run/config.json'))['derived']['std']))")
"$TORCH_PY" "$CTRAIN_ROOT/tools/torch_train_ref.py" train --arch resnet20 --mean "$mean" --std "$std" --dump "$TMP/dump" \
  --momentum 0.9 --wd 5e-4 --nesterov 1 --smoothing 0.1 --out "$TMP/torch.json" --save-weights "$TMP/torch.safetensors" \
  || fail "PyTorch replay failed"

"$PIPPY" - "$TMP/run/metrics.jsonl" "$TMP/torch.json" <<'PY' || fail "loss curves or accuracy differ"
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
ours = {r["step"]: r["loss"] for r in recs if r["type"] == "step"}
final = [r for r in recs if r["type"] == "epoch"][-1]
ref = json.load(open(sys.argv[2]))
assert ref["steps"] == list(range(1, len(ref["steps"]) + 1)) and sorted(ours) == ref["steps"], "step numbering differs"
n = len(ref["steps"])
assert n >= 200, n
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
assert abs(final["val_top1"] - ref["top1"]) <= 0.5, "val top-1 differs by more than 0.5 points"
assert final["val_top1"] > 60, "the run did not learn"
PY
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
echo "test_train_torch: all passed"
