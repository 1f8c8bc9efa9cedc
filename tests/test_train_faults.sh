# ctrain-test: alone (a starved loader must show against the step time, and no other test may slow the step)
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
same_ckpt "$TMP/many/last.ckpt" "$TMP/ref1/last.ckpt" || fail "last.ckpt is not the epoch-1 checkpoint"
"$TRAIN" "${F[@]}" --epochs 2 --resume "$TMP/many/last.ckpt" --out "$TMP/many" 2>"$TMP/resume.log" || { cat "$TMP/resume.log"; fail "resume after the stop failed"; }
ok "repeated non-finite steps stop the run; the last good checkpoint is kept and resumes"

# A learning rate that makes training blow up for real.
rc=0
"$TRAIN" "${F[@]}" --epochs 1 --lr 1e9 --momentum 0 --out "$TMP/div" 2>"$TMP/div.log" || rc=$?
[ $rc = 1 ] || { cat "$TMP/div.log"; fail "diverging run: exit status $rc, expected 1"; }
grep -q "the run has diverged" "$TMP/div.log" || { cat "$TMP/div.log"; fail "divergence not reported"; }
ok "a diverging run stops with a clear message"

# A corrupt val record. (1) A payload whose checksum fails is found before any training: the run
# stops at once naming the file and the record. (2) A payload that passes its checksum but does
# not decode (caught only when the epoch is evaluated) costs the evaluation, not the epoch:
# last.ckpt is written before evaluating, and --resume from it after repairing the shard
# evaluates and goes on to the same final model as an undisturbed run, bit for bit.
corrupt_val() { # SRC_DIR DST_DIR RECORD MODE(byte|lz4)
  mkdir -p "$2" && cp "$1/train.shard" "$1/val.shard" "$2/"
  "$TORCH_PY" - "$CTRAIN_ROOT/tests" "$2/val.shard" "$3" "$4" <<'PY' || fail "corrupting a val record"
import struct, sys
sys.path.insert(0, sys.argv[1])
import shard_ref
path, k, mode = sys.argv[2], int(sys.argv[3]), sys.argv[4]
sh = shard_ref.read_shard(path)
raw = bytearray(sh["raw"])
r = sh["records"][k]
if mode == "byte":  # one flipped bit in the payload, tables untouched
    raw[r["offset"] + r["stored"] // 2] ^= 0x10
else:  # a malformed LZ4 block (a literal run longer than the block) with a matching checksum
    raw[r["offset"]:r["offset"] + r["stored"]] = b"\xff" * r["stored"]
    (coff, csize) = struct.unpack_from("<QQ", raw, 40)
    (ioff, isize) = struct.unpack_from("<QQ", raw, 72)
    struct.pack_into("<I", raw, ioff + 32 * k + 28, shard_ref.crc32c(bytes(raw[r["offset"]:r["offset"] + r["stored"]])))
    c = shard_ref.crc32c(bytes(raw[:124]))
    c = shard_ref.crc32c(bytes(raw[coff:coff + csize]), c)
    c = shard_ref.crc32c(bytes(raw[ioff:ioff + isize]), c)
    struct.pack_into("<I", raw, 124, c)
open(path, "wb").write(raw)
PY
}
V=("${SMALL_FLAGS[@]}" --lr-schedule step -p 4 --epochs 2)
corrupt_val "$TMP/d" "$TMP/dcrc" 37 byte
rc=0; "$TRAIN" "${V[@]}" --out "$TMP/vcrc" "$TMP/dcrc" 2>"$TMP/vcrc.log" || rc=$?
[ $rc = 1 ] || { cat "$TMP/vcrc.log"; fail "corrupt val payload: exit status $rc, expected 1"; }
grep -q "^train: error: $TMP/dcrc/val.shard: record 37: payload checksum mismatch.*found checking the val shard before training" "$TMP/vcrc.log" \
  || { cat "$TMP/vcrc.log"; fail "corrupt val payload: unclear error"; }
[ -f "$TMP/vcrc/metrics.jsonl" ] && grep -q '"type":"step"' "$TMP/vcrc/metrics.jsonl" && fail "trained before finding the corrupt val record"
ok "a val payload with a bad checksum stops the run before training: $(grep -o 'record 37: payload checksum mismatch' "$TMP/vcrc.log")"

corrupt_val "$TMP/d" "$TMP/dlz4" 37 lz4
rc=0; "$TRAIN" "${V[@]}" --out "$TMP/vlz4" "$TMP/dlz4" 2>"$TMP/vlz4.log" || rc=$?
[ $rc = 1 ] || { cat "$TMP/vlz4.log"; fail "undecodable val payload: exit status $rc, expected 1"; }
grep -q "^train: error: $TMP/dlz4/val.shard: record 37: corrupt LZ4 payload" "$TMP/vlz4.log" \
  || { cat "$TMP/vlz4.log"; fail "undecodable val payload: unclear error"; }
[ -f "$TMP/vlz4/last.ckpt" ] || { cat "$TMP/vlz4.log"; fail "the epoch's training was lost (no last.ckpt)"; }
cp "$TMP/d/val.shard" "$TMP/dlz4/val.shard"
"$TRAIN" "${V[@]}" --resume "$TMP/vlz4/last.ckpt" --out "$TMP/vlz4" "$TMP/dlz4" 2>"$TMP/vlz4r.log" \
  || { cat "$TMP/vlz4r.log"; fail "resume after repairing the val shard failed"; }
"$TRAIN" "${V[@]}" --out "$TMP/vref" "$TMP/d" 2>/dev/null || fail "reference run failed"
grep -c '"type":"epoch"' "$TMP/vlz4/metrics.jsonl" | grep -qx 2 || fail "resumed run's metrics.jsonl lacks the epoch records"
cmp -s "$TMP/vlz4/model.safetensors" "$TMP/vref/model.safetensors" \
  || fail "resuming from the pre-evaluation checkpoint gave another model than an undisturbed run"
ok "an undecodable val record costs the evaluation, not the epoch: resumed from last.ckpt to the same model bit for bit"

# SIGTERM: finish the step, checkpoint, exit 128+15.
"$TRAIN" "${F[@]}" --epochs 50 -p 1 --out "$TMP/term" 2>"$TMP/term.log" &
signal_after_steps TERM $! "$TMP/term" 3
[ $rc = 143 ] || { cat "$TMP/term.log"; fail "SIGTERM: exit status $rc, expected 143"; }
grep -q "SIGTERM: checkpoint saved to $TMP/term/last.ckpt" "$TMP/term.log" || { cat "$TMP/term.log"; fail "no SIGTERM checkpoint message"; }
[ -f "$TMP/term/last.ckpt" ] || fail "no last.ckpt after SIGTERM"
ok "SIGTERM checkpoints and exits 143"
echo "test_train_faults: all passed"
