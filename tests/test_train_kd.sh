# Distillation: --kd-alpha 0 trains bit-identically to no teacher (the teacher runs, but its share of
# the loss and gradient is zero); alpha > 0 changes training and stays finite; a teacher that does not
# fit the data is a clear error. (The KD loss gradient is checked by finite differences in
# tests/test_gradcheck.c.)
source "$(dirname "$0")/train_lib.sh"
make_synth "$TMP/d" 512 128 16
F=("${SMALL_FLAGS[@]}" --lr-schedule cosine "$TMP/d")
grep -q "kd_loss" "$CTRAIN_ROOT/tests/test_gradcheck.c" || fail "tests/test_gradcheck.c has no KD gradient check"

# Teacher: a resnet32 trained for one epoch.
"$TRAIN" "${F[@]}" -a resnet32 --epochs 1 --out "$TMP/teacher" 2>"$TMP/t.log" || { cat "$TMP/t.log"; fail "teacher run failed"; }
T=resnet32:$TMP/teacher/model.safetensors

"$TRAIN" "${F[@]}" --epochs 1 --out "$TMP/plain" 2>"$TMP/p.log" || { cat "$TMP/p.log"; fail "plain run failed"; }
"$TRAIN" "${F[@]}" --epochs 1 --teacher "$T" --kd-alpha 0 --out "$TMP/a0" 2>"$TMP/a0.log" || { cat "$TMP/a0.log"; fail "alpha 0 run failed"; }
cmp -s <(strip_timing "$TMP/plain/metrics.jsonl") <(strip_timing "$TMP/a0/metrics.jsonl") \
  || { diff <(strip_timing "$TMP/plain/metrics.jsonl") <(strip_timing "$TMP/a0/metrics.jsonl") | head || true; fail "alpha 0 differs from no teacher"; }
cmp -s "$TMP/plain/model.safetensors" "$TMP/a0/model.safetensors" || fail "alpha 0 weights differ from no teacher"
grep -q '"teacher": "resnet32:' "$TMP/a0/config.json" || fail "config.json does not record the teacher"
n=$(grep -o "^train: resnet32 ([0-9]* parameters)" "$TMP/t.log" | grep -o "[0-9]* parameters")
grep -q "^train: teacher resnet32 ($n) from $TMP/teacher/model.safetensors$" "$TMP/a0.log" || { cat "$TMP/a0.log"; fail "the banner does not confirm the teacher"; }
ok "--kd-alpha 0 is bit-identical to training without a teacher"

"$TRAIN" "${F[@]}" --epochs 1 --teacher "$T" --kd-alpha 0.7 --kd-temperature 3 --out "$TMP/a7" 2>"$TMP/a7.log" \
  || { cat "$TMP/a7.log"; fail "alpha 0.7 run failed"; }
cmp -s "$TMP/plain/model.safetensors" "$TMP/a7/model.safetensors" && fail "alpha 0.7 gave the same weights as no teacher"
"$PIPPY" - "$TMP/a7/metrics.jsonl" <<'PY' || fail "KD run metrics"
import json, math, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
assert all(math.isfinite(r["loss"]) for r in recs if r["type"] == "step")
e = [r for r in recs if r["type"] == "epoch"][-1]
assert math.isfinite(e["train_loss"]) and math.isfinite(e["val_loss"]), e
print("KD alpha 0.7: train loss %.4f val top-1 %.2f%%" % (e["train_loss"], e["val_top1"]))
PY
ok "--kd-alpha 0.7 trains (finite, different from no teacher)"

# A teacher of the wrong architecture for its file, or with another class count.
out=$("$TRAIN" "${F[@]}" --epochs 1 --teacher "resnet20:$TMP/teacher/model.safetensors" --out "$TMP/x" 2>&1) && fail "wrong teacher arch accepted"
echo "$out" | grep -q "^train: error: .*teacher/model.safetensors" || fail "wrong teacher arch: unclear error: $out"
make_synth "$TMP/five" 200 50 16 5
out=$("$TRAIN" "${SMALL_FLAGS[@]}" --epochs 1 --teacher "$T" --out "$TMP/y" "$TMP/five" 2>&1) && fail "teacher with 10 classes accepted on 5-class data"
echo "$out" | grep -q "^train: error: .*fc" || fail "teacher class mismatch: unclear error: $out"
ok "mismatched teachers are clear errors"
echo "test_train_kd: all passed"
