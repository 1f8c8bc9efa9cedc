# Failure handling of train: a non-finite step is skipped and reported, repeated ones stop the run
# with a clear message and the last good checkpoint kept; a diverging learning rate is caught the
# same way; SIGTERM finishes the step, checkpoints and exits 143; a loader too slow for the
# trainer is reported at the end of the epoch.
# CTRAIN_FAULT_NAN_STEPS="a,b-c" makes those global steps report a NaN loss, and
# CTRAIN_FAULT_NAN_GRAD_STEPS a finite loss with NaN gradients (test hooks in trainer/faults.h).
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

# A starved trainer says so: with every loader worker slowed (CTRAIN_FAULT_LOADER_DELAY_MS, a
# test hook), the epoch ends with a warning naming the share of time spent waiting and what to
# change.
CTRAIN_FAULT_LOADER_DELAY_MS=40 "$TRAIN" "${F[@]}" --epochs 1 --workers 1 --out "$TMP/slow" 2>"$TMP/slow.log" \
  || { cat "$TMP/slow.log"; fail "run with a slow loader failed"; }
grep -Eq "train: warning: [0-9]+% of epoch 1's training time was spent waiting for data: the loader \(1 worker thread\) cannot keep up; give it more --workers" "$TMP/slow.log" \
  || { cat "$TMP/slow.log"; fail "a starved run did not warn"; }
ok "a starved run warns: $(grep -o '[0-9]*% of epoch 1' "$TMP/slow.log")"

# A NaN gradient behind a finite loss goes through the gradient check instead (on the GPU: on the
# device, 4 bytes back). A missed one would reach SGD and make every weight NaN; a caught one must
# leave exactly the state that skipping the same step for a NaN loss leaves: the same final model,
# bit for bit, on each backend. (The device-side BN rollback itself is checked in emu_model.)
grad_fault_matches() { # BINARY NAME ARGS...
  local bin=$1 name=$2; shift 2
  CTRAIN_FAULT_NAN_STEPS=3 "$bin" "$@" --out "$TMP/$name-loss" 2>"$TMP/$name-loss.log" || { cat "$TMP/$name-loss.log"; fail "$name: NaN-loss run failed"; }
  CTRAIN_FAULT_NAN_GRAD_STEPS=3 "$bin" "$@" --out "$TMP/$name-grad" 2>"$TMP/$name-grad.log" || { cat "$TMP/$name-grad.log"; fail "$name: NaN-gradient run failed"; }
  grep -q "step 3: non-finite loss or gradient (nan); step skipped (1 in a row)" "$TMP/$name-grad.log" \
    || { cat "$TMP/$name-grad.log"; fail "$name: NaN gradient not reported"; }
  cmp -s "$TMP/$name-loss/model.safetensors" "$TMP/$name-grad/model.safetensors" \
    || fail "$name: skipping a NaN-gradient step left another state than skipping a NaN-loss step"
  ok "$name: a NaN gradient is caught and skipped like a NaN loss (identical final model)"
}
G=("${SMALL_FLAGS[@]}" -p 1 --epochs 1 "$TMP/d")
grad_fault_matches "$TRAIN" cpu "${G[@]}" --device cpu
if [ -x "$CTRAIN_BUILD/train-emu" ]; then
  g8=(-a resnet20 -b 8 --crop-size 8 --val-resize 8 --lr 0.05 -p 1 --epochs 1 --workers 1 "$TMP/d8")
  make_synth "$TMP/d8" 48 16 8
  grad_fault_matches "${CUDA_TRAIN:-$CTRAIN_BUILD/train-emu}" cuda "${g8[@]}" --device cuda
fi

# Five in a row in epoch 2: the run stops with exit 1; last.ckpt from epoch 1 is kept and resumable.
rc=0
CTRAIN_FAULT_NAN_STEPS=20-30 "$TRAIN" "${F[@]}" --epochs 2 --out "$TMP/many" 2>"$TMP/many.log" || rc=$?
[ $rc = 1 ] || { cat "$TMP/many.log"; fail "repeated NaN steps: exit status $rc, expected 1"; }
grep -q "^train: error: 5 consecutive steps with a non-finite loss or gradient (epoch 2, step 24" "$TMP/many.log" \
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
