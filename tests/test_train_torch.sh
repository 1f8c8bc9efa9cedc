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
echo "test_train_torch: all passed"
