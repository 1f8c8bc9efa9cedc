# Determinism of train on the CPU backend: two runs with different --workers give bit-identical
# metrics (wall-clock fields aside) and weights; 2 epochs straight equal 1 epoch + resume + 1 epoch
# (also from a checkpoint in the unpadded layout of older builds), and equal a run interrupted by
# SIGINT in the middle of an epoch and resumed, bit for bit.
source "$(dirname "$0")/train_lib.sh"
make_synth "$TMP/d" 512 128 16
F=("${SMALL_FLAGS[@]}" --lr-schedule step --lr-step-size 1 --lr-gamma 0.5 --nesterov -p 2 "$TMP/d")

"$TRAIN" "${F[@]}" --epochs 2 --workers 2 --out "$TMP/a" 2>"$TMP/a.log" || { cat "$TMP/a.log"; fail "run a failed"; }
"$TRAIN" "${F[@]}" --epochs 2 --workers 3 --out "$TMP/b" 2>"$TMP/b.log" || { cat "$TMP/b.log"; fail "run b failed"; }
same() { # same A B WHAT
  cmp -s <(strip_timing "$1/metrics.jsonl") <(strip_timing "$2/metrics.jsonl") \
    || { diff <(strip_timing "$1/metrics.jsonl") <(strip_timing "$2/metrics.jsonl") | head || true; fail "$3: metrics.jsonl differ"; }
  cmp -s "$1/model.safetensors" "$2/model.safetensors" || fail "$3: model.safetensors differ"
  ok "$3: bit-identical metrics.jsonl and model.safetensors"
}
[ "$(grep -c '"type":"step"' "$TMP/a/metrics.jsonl")" = 16 ] || fail "expected 16 step records"
same "$TMP/a" "$TMP/b" "--workers 2 vs --workers 3"

# 1 epoch, stop, resume for the second (the step schedule does not depend on --epochs).
"$TRAIN" "${F[@]}" --epochs 1 --out "$TMP/c" 2>"$TMP/c.log" || { cat "$TMP/c.log"; fail "run c failed"; }
cp "$TMP/c/last.ckpt" "$TMP/c-epoch1.ckpt"
cp -r "$TMP/c" "$TMP/o"  # the run directory after epoch 1, for the unpadded checkpoint below
"$TRAIN" "${F[@]}" --epochs 2 --resume "$TMP/c/last.ckpt" --out "$TMP/c" 2>"$TMP/c2.log" || { cat "$TMP/c2.log"; fail "resume c failed"; }
grep -q "resuming .* at epoch 2 step 0/16" "$TMP/c2.log" || { cat "$TMP/c2.log"; fail "resume did not start at epoch 2"; }
same "$TMP/a" "$TMP/c" "2 epochs vs 1 + resume + 1"
same_ckpt "$TMP/a/last.ckpt" "$TMP/c/last.ckpt" || fail "last.ckpt after resume differs from the straight run's"

# A checkpoint in the layout of builds before the parameter padding (tensors back to back; resnet20
# on 10 classes has 650 fc floats, so every later tensor moves): it loads into the padded layout and
# the resumed run is the straight run bit for bit.
"$CTRAIN_BUILD/tests/helper_ckpt" pack "$TMP/c-epoch1.ckpt" "$TMP/o/last.ckpt" >"$TMP/pack.log" || fail "helper_ckpt pack failed"
grep -q "packed 272480 -> 272474 floats" "$TMP/pack.log" || fail "old layout: $(cat "$TMP/pack.log"), expected 272480 -> 272474"
"$TRAIN" "${F[@]}" --epochs 2 --resume "$TMP/o/last.ckpt" --out "$TMP/o" 2>"$TMP/o.log" || { cat "$TMP/o.log"; fail "resume from the unpadded layout failed"; }
same "$TMP/a" "$TMP/o" "unpadded (old) checkpoint: 1 + resume + 1 vs 2 epochs"
same_ckpt "$TMP/a/last.ckpt" "$TMP/o/last.ckpt" || fail "last.ckpt after resuming the unpadded file differs from the straight run's"

# SIGINT mid-epoch: the step finishes, last.ckpt is written, exit status 130; resuming gives the same run.
# The interrupted runs here get the loader delay (timing only, not the bits), so the signal lands
# in the step it is aimed at however fast the CPU step has become (the progressive run's 16-step
# epoch at 12 px took 0.13 s, less than two of signal_after_steps' polls).
rm -rf "$TMP/e"
CTRAIN_FAULT_LOADER_DELAY_MS=40 "$TRAIN" "${F[@]}" --epochs 2 -p 1 --out "$TMP/e" 2>"$TMP/e.log" &
signal_after_steps INT $! "$TMP/e" 5
[ $rc = 130 ] || { cat "$TMP/e.log"; fail "SIGINT: exit status $rc, expected 130"; }
grep -q "SIGINT: checkpoint saved to $TMP/e/last.ckpt at epoch 1 step" "$TMP/e.log" || { cat "$TMP/e.log"; fail "no checkpoint message"; }
[ -f "$TMP/e/model.safetensors" ] && fail "an interrupted run wrote model.safetensors"
"$TRAIN" "${F[@]}" --epochs 2 -p 1 --resume "$TMP/e/last.ckpt" --out "$TMP/e" 2>"$TMP/e2.log" || { cat "$TMP/e2.log"; fail "resume e failed"; }
grep -q "resuming" "$TMP/e2.log" || fail "no resume message"
"$TRAIN" "${F[@]}" --epochs 2 -p 1 --out "$TMP/f" 2>"$TMP/f.log" || fail "run f failed"
same "$TMP/f" "$TMP/e" "SIGINT mid-epoch + resume vs straight"

# The per-step schedules depend on --epochs and the step within the epoch: a poly run (MLPerf's
# formula) interrupted mid-epoch resumes on the same curve, and its logged rates are the formula's.
P=("${SMALL_FLAGS[@]}" --lr-schedule poly --lr-power 2 --lr-end 0.001 --warmup-epochs 0.5 -p 1 --epochs 2 "$TMP/d")
"$TRAIN" "${P[@]}" --out "$TMP/g" 2>"$TMP/g.log" || { cat "$TMP/g.log"; fail "poly run g failed"; }
CTRAIN_FAULT_LOADER_DELAY_MS=40 "$TRAIN" "${P[@]}" --out "$TMP/h" 2>"$TMP/h.log" &
signal_after_steps INT $! "$TMP/h" 11
[ $rc = 130 ] || { cat "$TMP/h.log"; fail "poly SIGINT: exit status $rc, expected 130"; }
"$TRAIN" "${P[@]}" --resume "$TMP/h/last.ckpt" --out "$TMP/h" 2>"$TMP/h2.log" || { cat "$TMP/h2.log"; fail "poly resume failed"; }
same "$TMP/g" "$TMP/h" "poly schedule: SIGINT mid-epoch + resume vs straight"
python3 - "$TMP/g/metrics.jsonl" <<'PY' || fail "poly: logged lr differs from MLPerf's formula"
import json, sys
T, W, lr, end = 32, 8, 0.05, 0.001  # 16 steps an epoch, 2 epochs, warmup 0.5 epoch
for line in open(sys.argv[1]):
    r = json.loads(line)
    if r.get("type") != "step": continue
    t = r["step"] - 1
    want = lr * (t + 1) / W if t < W else (lr - end) * (1 - (t + 1 - W) / (T - W + 1)) ** 2 + end
    assert abs(r["lr"] - want) < 1e-7 * want, (t, r["lr"], want)
PY
ok "poly: logged learning rates follow MLPerf's formula"
# Progressive resizing (8 -> 16 px over epochs 1..3 counting from 1: 8, 12, 16) with evaluation at
# its own size and flip TTA, and the v2 recipe's per-sample tools (TrivialAugmentWide,
# RandomErasing, repeated augmentation: 512 records keep 16 steps an epoch) and stochastic depth
# (--drop-path 0.3: its rows keyed on the batch's epoch and position): interrupted in the middle of
# the ramp's epoch and resumed with another worker count, the run is the straight run bit for bit,
# and each epoch trained at its size.
R=("${SMALL_FLAGS[@]}" --res-start 8 --res-end 16 --res-ramp 0,2 --res-step 4 --val-crop-size 12 --tta flip -p 1 --epochs 3
   --auto-augment ta_wide --random-erase 0.25 --ra-repeats 2 --drop-path 0.3 "$TMP/d")
"$TRAIN" "${R[@]}" --workers 2 --out "$TMP/r" 2>"$TMP/r.log" || { cat "$TMP/r.log"; fail "progressive run r failed"; }
grep -q "progressive resizing: 8 px through epoch 1, 16 px from epoch 3 on" "$TMP/r.log" || fail "no progressive-resizing banner: $(head -5 "$TMP/r.log")"
grep -q "evaluation at 12x12 (short side resized to 16), logits averaged with the mirror image's" "$TMP/r.log" \
  || fail "no eval-size banner: $(head -6 "$TMP/r.log")"
grep -qE "^epoch 2/3 \[16/16\] .* res 12px" "$TMP/r.log" || fail "the progress line does not show epoch 2's 12 px"
python3 - "$TMP/r/metrics.jsonl" <<'PY' || fail "metrics.jsonl: wrong resolutions"
import json, sys
want = {1: 8, 2: 12, 3: 16}
recs = [json.loads(l) for l in open(sys.argv[1])]
assert all(r["res"] == want[r["epoch"]] for r in recs if r["type"] in ("step", "epoch")), "res per epoch"
assert all(r["val_res"] == 12 for r in recs if r["type"] == "epoch"), "val_res"
assert len([r for r in recs if r["type"] == "step"]) == 48
PY
CTRAIN_FAULT_LOADER_DELAY_MS=40 "$TRAIN" "${R[@]}" --workers 1 --out "$TMP/s" 2>"$TMP/s.log" &
signal_after_steps INT $! "$TMP/s" 21
[ $rc = 130 ] || { cat "$TMP/s.log"; fail "progressive SIGINT: exit status $rc, expected 130"; }
grep -q "checkpoint saved to $TMP/s/last.ckpt at epoch 2 step" "$TMP/s.log" || { cat "$TMP/s.log"; fail "not stopped in epoch 2 (the ramp's)"; }
"$TRAIN" "${R[@]}" --workers 3 --resume "$TMP/s/last.ckpt" --out "$TMP/s" 2>"$TMP/s2.log" || { cat "$TMP/s2.log"; fail "progressive resume failed"; }
same "$TMP/r" "$TMP/s" "progressive resizing + --tta flip + ta_wide/erase/repeats + drop path: SIGINT mid-ramp + resume (workers 1, then 3) vs straight (workers 2)"
grep -q '"drop-path": *0.3' "$TMP/s/config.json" || fail "config.json does not record --drop-path 0.3"
# A resume that changes the rate is refused by name (the trajectory would change).
out=$("$TRAIN" "${R[@]}" --drop-path 0.1 --resume "$TMP/s/last.ckpt" --out "$TMP/s" 2>&1) && fail "a resume with another --drop-path ran"
grep -q -- "--drop-path" <<<"$out" || fail "the refused resume does not name --drop-path: $out"
ok "a resume with another --drop-path is refused by name"
echo "test_train_resume: all passed"
