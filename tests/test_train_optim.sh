# The optimizer table end to end (nn/optim.h): AdamW and LAMB runs resume bit for bit on the CPU
# and on the emulated GPU (2 epochs straight = 1 + resume + 1: the checkpoint's named state
# tensors exp_avg, exp_avg_sq and the step count carry everything); a checkpoint in the format of
# builds before the named state (version 1: SGD's momentum as one array) still resumes bit for bit;
# resuming with another optimizer, or without a state tensor the run needs, is refused by name.
source "$(dirname "$0")/train_lib.sh"
make_synth "$TMP/d" 64 16 16
same() { # same A B WHAT
  cmp -s <(strip_timing "$1/metrics.jsonl") <(strip_timing "$2/metrics.jsonl") \
    || { diff <(strip_timing "$1/metrics.jsonl") <(strip_timing "$2/metrics.jsonl") | head || true; fail "$3: metrics.jsonl differ"; }
  cmp -s "$1/model.safetensors" "$2/model.safetensors" || fail "$3: model.safetensors differ"
  ok "$3: bit-identical metrics.jsonl and model.safetensors"
}
version() { od -An -tu4 -j8 -N4 "$1" | tr -d ' '; }
# resume_same BIN WHAT FLAGS...: 2 epochs straight vs 1 epoch, resume, 1 more (a step schedule
# that does not depend on --epochs).
resume_same() {
  local bin=$1 what=$2; shift 2
  local d="$TMP/$what"
  "$bin" "$@" --epochs 2 --out "$d-a" >"$d-a.log" 2>&1 || { cat "$d-a.log"; fail "$what: straight run failed"; }
  "$bin" "$@" --epochs 1 --out "$d-b" >"$d-b.log" 2>&1 || { cat "$d-b.log"; fail "$what: first epoch failed"; }
  [ "$(version "$d-b/last.ckpt")" = 3 ] || fail "$what: last.ckpt is version $(version "$d-b/last.ckpt"), expected 3"
  "$bin" "$@" --epochs 2 --resume "$d-b/last.ckpt" --out "$d-b" >"$d-b2.log" 2>&1 || { cat "$d-b2.log"; fail "$what: resume failed"; }
  same "$d-a" "$d-b" "$what: 2 epochs vs 1 + resume + 1"
  same_ckpt "$d-a/last.ckpt" "$d-b/last.ckpt" || fail "$what: last.ckpt after resume differs from the straight run's"
}
STEP=(--lr-schedule step --lr-step-size 1 --lr-gamma 0.5 "$TMP/d")
resume_same "$TRAIN" cpu-adamw "${SMALL_FLAGS[@]}" --optimizer adamw --lr 0.003 --wd 0.05 --betas 0.9,0.99 "${STEP[@]}"
grep -a -q exp_avg_sq "$TMP/cpu-adamw-b/last.ckpt" || fail "no state tensor named exp_avg_sq in the AdamW checkpoint"
resume_same "$TRAIN" cpu-lamb "${SMALL_FLAGS[@]}" --optimizer lamb --lr 0.01 --wd 0.02 --no-wd-bn "${STEP[@]}"
# The two differ from SGD and from each other (the flag reached the step).
cmp -s "$TMP/cpu-adamw-a/model.safetensors" "$TMP/cpu-lamb-a/model.safetensors" && fail "adamw and lamb trained the same weights"

# Another optimizer's state is refused, naming both; so is a run that needs a tensor the file lacks.
out=$("$TRAIN" "${SMALL_FLAGS[@]}" --optimizer adamw --epochs 2 --resume "$TMP/cpu-lamb-b/last.ckpt" --out "$TMP/x" "${STEP[@]}" 2>&1) \
  && fail "resuming a lamb checkpoint with adamw was accepted"
# The recorded settings refuse it first (trainer/settings.c); the checkpoint's own check is behind
# them for files without a settings record.
grep -q -e "--optimizer: the run has lamb, this command gives adamw" <<<"$out" \
  || fail "another optimizer: $out"
"$TRAIN" "${SMALL_FLAGS[@]}" --momentum 0 --epochs 1 --out "$TMP/m0" "${STEP[@]}" >"$TMP/m0.log" 2>&1 || { cat "$TMP/m0.log"; fail "momentum 0 run"; }
out=$("$TRAIN" "${SMALL_FLAGS[@]}" --momentum 0.9 --epochs 2 --resume "$TMP/m0/last.ckpt" --out "$TMP/m0" "${STEP[@]}" 2>&1) \
  && fail "resuming a run without momentum with --momentum 0.9 was accepted"
grep -q -e "--momentum: the run has 0, this command gives 0.9" <<<"$out" || fail "missing state tensor: $out"
ok "another optimizer and a missing state tensor are refused by name"

# The format of builds before the named state: SGD's momentum array, version 1. (helper_ckpt old
# writes it with the old writer, checkpoint_save: on 2026-11-27 its file was byte for byte what
# main's build before this change wrote for the same run.)
SGD=("${SMALL_FLAGS[@]}" --nesterov "${STEP[@]}")
"$TRAIN" "${SGD[@]}" --epochs 2 --out "$TMP/sgd-a" >"$TMP/sgd-a.log" 2>&1 || { cat "$TMP/sgd-a.log"; fail "sgd run"; }
"$TRAIN" "${SGD[@]}" --epochs 1 --out "$TMP/sgd-b" >"$TMP/sgd-b.log" 2>&1 || { cat "$TMP/sgd-b.log"; fail "sgd first epoch"; }
"$CTRAIN_BUILD/tests/helper_ckpt" old "$TMP/sgd-b/last.ckpt" "$TMP/old.ckpt" >/dev/null || fail "helper_ckpt old"
[ "$(version "$TMP/old.ckpt")" = 1 ] || fail "the old-format file is version $(version "$TMP/old.ckpt")"
mv "$TMP/old.ckpt" "$TMP/sgd-b/last.ckpt"
"$TRAIN" "${SGD[@]}" --epochs 2 --resume "$TMP/sgd-b/last.ckpt" --out "$TMP/sgd-b" >"$TMP/sgd-b2.log" 2>&1 \
  || { cat "$TMP/sgd-b2.log"; fail "resume from the old format failed"; }
same "$TMP/sgd-a" "$TMP/sgd-b" "version 1 checkpoint (momentum array): 1 + resume + 1 vs 2 epochs"

# The emulated GPU (build/train-emu), fp32: AdamW and LAMB on the device resume bit for bit too.
EMU=$CTRAIN_BUILD/train-emu
if [ -x "$EMU" ]; then
  make_synth "$TMP/e" 16 8 16
  ARGS=(-a resnet20 -b 8 --crop-size 8 --val-resize 8 -p 1 --workers 1 --seed 7 --device cuda --precision fp32
        --lr-schedule step --lr-step-size 1 --lr-gamma 0.5 "$TMP/e")
  resume_same "$EMU" gpu-adamw "${ARGS[@]}" --optimizer adamw --lr 0.003 --wd 0.05 --no-wd-bn
  resume_same "$EMU" gpu-lamb "${ARGS[@]}" --optimizer lamb --lr 0.01 --wd 0.02 --no-wd-bn
else
  echo "no $EMU: the emulated GPU part is skipped (built by ./build.sh test when nvcc exists)"
fi
echo "PASS"
