# Failure handling of train: a non-finite step is skipped and reported, repeated ones stop the run
# with a clear message and the last good checkpoint kept; a diverging learning rate is caught the
# same way; SIGTERM finishes the step, checkpoints and exits 143.
# CTRAIN_FAULT_NAN_STEPS="a,b-c" makes those global steps report a NaN loss (test hook in main.c).
source "$(dirname "$0")/train_lib.sh"
make_synth "$TMP/d" 512 128 16
F=("${SMALL_FLAGS[@]}" --lr-schedule step -p 4 "$TMP/d")

# One bad step: skipped, reported, the run goes on.
CTRAIN_FAULT_NAN_STEPS=7 "$TRAIN" "${F[@]}" --epochs 1 --out "$TMP/one" 2>"$TMP/one.log" || { cat "$TMP/one.log"; fail "run with one NaN step failed"; }
grep -q "epoch 1 step 7: non-finite loss or gradient (nan); step skipped (1 in a row)" "$TMP/one.log" || { cat "$TMP/one.log"; fail "skip not reported"; }
grep -q '"type":"skip","epoch":1,"step":7' "$TMP/one/metrics.jsonl" || fail "no skip record in metrics.jsonl"
grep -q '"skipped_steps":1' "$TMP/one/metrics.jsonl" || fail "epoch record does not count the skipped step"
[ -f "$TMP/one/model.safetensors" ] || fail "run with one skipped step did not finish"
ok "a single non-finite step is skipped and reported"

# Five in a row in epoch 2: the run stops with exit 1; last.ckpt from epoch 1 is kept and resumable.
rc=0
CTRAIN_FAULT_NAN_STEPS=20-30 "$TRAIN" "${F[@]}" --epochs 2 --out "$TMP/many" 2>"$TMP/many.log" || rc=$?
[ $rc = 1 ] || { cat "$TMP/many.log"; fail "repeated NaN steps: exit status $rc, expected 1"; }
grep -q "ctrain: error: 5 consecutive steps with a non-finite loss or gradient (epoch 2, step 24" "$TMP/many.log" \
  || { cat "$TMP/many.log"; fail "no clear stop message"; }
grep -q "last good checkpoint is kept" "$TMP/many.log" || fail "message does not mention the kept checkpoint"
[ -f "$TMP/many/model.safetensors" ] && fail "a stopped run wrote model.safetensors"
"$TRAIN" "${F[@]}" --epochs 1 --out "$TMP/ref1" 2>/dev/null || fail "reference 1-epoch run failed"
cmp -s "$TMP/many/last.ckpt" "$TMP/ref1/last.ckpt" || fail "last.ckpt is not the epoch-1 checkpoint"
"$TRAIN" "${F[@]}" --epochs 2 --resume "$TMP/many/last.ckpt" --out "$TMP/many" 2>"$TMP/resume.log" || { cat "$TMP/resume.log"; fail "resume after the stop failed"; }
ok "repeated non-finite steps stop the run; the last good checkpoint is kept and resumes"

# A learning rate that makes training blow up for real.
rc=0
"$TRAIN" "${F[@]}" --epochs 1 --lr 1e9 --momentum 0 --out "$TMP/div" 2>"$TMP/div.log" || rc=$?
[ $rc = 1 ] || { cat "$TMP/div.log"; fail "diverging run: exit status $rc, expected 1"; }
grep -q "the run has diverged" "$TMP/div.log" || { cat "$TMP/div.log"; fail "divergence not reported"; }
ok "a diverging run stops with a clear message"

# SIGTERM: finish the step, checkpoint, exit 128+15.
"$TRAIN" "${F[@]}" --epochs 50 -p 1 --out "$TMP/term" 2>"$TMP/term.log" &
signal_after_steps TERM $! "$TMP/term" 3
[ $rc = 143 ] || { cat "$TMP/term.log"; fail "SIGTERM: exit status $rc, expected 143"; }
grep -q "SIGTERM: checkpoint saved to $TMP/term/last.ckpt" "$TMP/term.log" || { cat "$TMP/term.log"; fail "no SIGTERM checkpoint message"; }
[ -f "$TMP/term/last.ckpt" ] || fail "no last.ckpt after SIGTERM"
ok "SIGTERM checkpoints and exits 143"
echo "test_train_faults: all passed"
