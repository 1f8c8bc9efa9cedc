# The new user's session, end to end on a small generated tree (issue 24, "a run is one thing"):
#   - SIGINT mid-run prints a command; run verbatim, it continues the run in its directory with
#     its settings, bit for bit the uninterrupted run; config.json lists both commands;
#   - a changed --lr on resume is refused, naming the flag with both values;
#   - --evaluate --weights RUN/model.safetensors with no other flag (no SHARDS either) gives the
#     run's final val top-1, and --evaluate RUN_DIR evaluates its best model;
#   - predict and export from best.ckpt and from the run directory give what best.safetensors gives;
#     predict skips a notes.txt inside a folder;
#   - a bit-flipped train record is reported, skipped and counted, with the same bits for 1 and 2
#     loader workers; --strict-data makes it fatal, and the same command then runs once repaired
#     (the failed start left no directory that blocks it);
#   - --dry-run of every recipe in recipes/ works on a CPU machine.
source "$(dirname "$0")/train_lib.sh"
make_synth "$TMP/d" 256 64 16
cd "$TMP"
F=(-a resnet20 -b 32 --crop-size 16 --val-resize 16 --lr 0.05 -p 1 --epochs 2)

# 1. Interrupted and resumed with the printed command vs straight.
"$TRAIN" "${F[@]}" -o runs/straight d 2>straight.log || { cat straight.log; fail "straight run failed"; }
CTRAIN_FAULT_LOADER_DELAY_MS=40 "$TRAIN" "${F[@]}" -o runs/sig d 2>sig.log &
signal_after_steps INT $! runs/sig 5
[ $rc = 130 ] || { cat sig.log; fail "SIGINT: exit status $rc, expected 130"; }
grep -q "^train: stopping after this step" sig.log || { cat sig.log; fail "no message at once on SIGINT"; }
hint=$(sed -n 's/^train: SIGINT: checkpoint saved to .* resume with: //p' sig.log)
[ "$hint" = "$TRAIN --resume runs/sig" ] || { cat sig.log; fail "the hint is '$hint', expected '$TRAIN --resume runs/sig'"; }
eval "$hint" 2>resume.log || { cat resume.log; fail "the printed command failed: $hint"; }
cmp -s <(strip_timing runs/sig/metrics.jsonl) <(strip_timing runs/straight/metrics.jsonl) \
  || { diff <(strip_timing runs/sig/metrics.jsonl) <(strip_timing runs/straight/metrics.jsonl) | head || true; fail "resumed metrics differ"; }
cmp -s runs/sig/model.safetensors runs/straight/model.safetensors || fail "resumed model.safetensors differs"
"$PIPPY" - runs/sig <<'PY' || fail "config.json or metrics.jsonl of the resumed run"
import json, sys
run = sys.argv[1]
cfg = json.load(open(run + "/config.json"))
cmds = [c["argv"][1:] for c in cfg["commands"]]
assert len(cmds) == 2 and cmds[1] == ["--resume", "runs/sig"], cmds
assert cfg["settings"]["crop-size"] == 16 and cfg["settings"]["lr"] == 0.05, cfg["settings"]
t = [json.loads(l)["time"] for l in open(run + "/metrics.jsonl") if '"type":"step"' in l]
assert all(b >= a for a, b in zip(t, t[1:])), ("metrics time restarts", t)
PY
ok "SIGINT, then the printed '$hint' verbatim: bit-identical to the straight run; config.json keeps both commands"

out=$("$TRAIN" --resume runs/sig --lr 0.2 --epochs 3 2>&1) && fail "a resume with another --lr was accepted"
grep -q "^  --lr: the run has 0.05, this command gives 0.2$" <<<"$out" || fail "the refusal does not name --lr: $out"
grep -q -- "--weights runs/sig/last.ckpt .*--lr 0.2" <<<"$out" || fail "the refusal does not say how to start from the weights: $out"
ok "a changed --lr is refused: $(grep -- '--lr:' <<<"$out")"

# 2. The model carries its evaluation.
want=$("$PIPPY" -c "import json; print('%.2f' % [json.loads(l) for l in open('runs/sig/metrics.jsonl') if '\"epoch\"' in l and '\"type\":\"epoch\"' in l][-1]['val_top1'])")
out=$("$TRAIN" --evaluate --weights runs/sig/model.safetensors 2>&1) || { echo "$out"; fail "--evaluate --weights RUN/model.safetensors alone failed"; }
got=$(sed -n 's/.* top-1 \([0-9.]*\)%.*/\1/p' <<<"$out" | tail -1)
[ "$got" = "$want" ] || fail "--evaluate --weights RUN/model.safetensors: top-1 '$got', the run ended at $want"
best=$("$PIPPY" -c "import json; print('%.2f' % max(json.loads(l)['val_top1'] for l in open('runs/sig/metrics.jsonl') if '\"type\":\"epoch\"' in l))")
out=$("$TRAIN" --evaluate runs/sig 2>&1) || { echo "$out"; fail "--evaluate RUN_DIR failed"; }
got=$(sed -n 's/.* top-1 \([0-9.]*\)%.*/\1/p' <<<"$out" | tail -1)
[ "$got" = "$best" ] || fail "--evaluate RUN_DIR: top-1 '$got', the run's best was $best"
ok "--evaluate --weights model.safetensors alone: $want% (the run's last); --evaluate RUN_DIR: $best% (its best)"

# 3. The best model is a file; predict and export take checkpoints and run directories.
[ -f runs/sig/best.safetensors ] || fail "no best.safetensors"
mkdir -p imgs && "$PIPPY" - imgs <<'PY'
import sys, numpy as np
from PIL import Image
rng = np.random.default_rng(5)
for i in range(3):
    Image.fromarray(rng.integers(0, 256, (20, 18, 3), dtype=np.uint8)).save("%s/img%d.png" % (sys.argv[1], i))
open(sys.argv[1] + "/notes.txt", "w").write("not an image\n")
PY
"$TRAIN" predict --weights runs/sig/best.safetensors --format json imgs >p_st.json 2>p_st.log || { cat p_st.log; fail "predict from best.safetensors (a notes.txt in the folder)"; }
grep -q "skipped 1 file without an image extension" p_st.log || fail "predict does not say it skipped notes.txt: $(cat p_st.log)"
for w in runs/sig/best.ckpt runs/sig; do
  "$TRAIN" predict --weights "$w" --format json imgs >p.json 2>p.log || { cat p.log; fail "predict --weights $w"; }
  cmp -s p.json p_st.json || { diff p.json p_st.json | head || true; fail "predict --weights $w differs from best.safetensors"; }
done
"$TRAIN" export --weights runs/sig/best.safetensors --onnx st.onnx >/dev/null 2>&1 || fail "export from best.safetensors"
for w in runs/sig/best.ckpt runs/sig; do
  "$TRAIN" export --weights "$w" --onnx w.onnx >/dev/null 2>e.log || { cat e.log; fail "export --weights $w"; }
  "$PIPPY" - w.onnx st.onnx <<'PY' || fail "export --weights $w differs from best.safetensors'"
import onnx, sys
a, b = (onnx.load(p) for p in sys.argv[1:])
for m in (a, b): m.doc_string = ""  # names the file it came from
sys.exit(0 if a.SerializeToString() == b.SerializeToString() else 1)
PY
done
ok "predict and export from best.ckpt and the run directory equal best.safetensors'"

# A third command extends the run: config.json lists all three.
"$TRAIN" --resume runs/sig --epochs 3 2>extend.log || { cat extend.log; fail "--resume RUN_DIR --epochs 3"; }
"$PIPPY" -c "
import json; c = json.load(open('runs/sig/config.json'))['commands']
assert [x['argv'][1:] for x in c[1:]] == [['--resume', 'runs/sig'], ['--resume', 'runs/sig', '--epochs', '3']], c" \
  || fail "config.json does not list the three commands of the run"
ok "--resume RUN_DIR --epochs 3 extends the run; config.json lists its three commands"

# 4. A bit-flipped train record: reported once, skipped, counted; the same bits for 1 and 2 workers.
mkdir -p bad && cp -L d/train.shard bad/train.shard && ln -sf "$(readlink -f d/val.shard)" bad/val.shard
"$PIPPY" -c "
import struct; p = 'bad/train.shard'; b = bytearray(open(p, 'rb').read())
index = struct.unpack_from('<Q', b, 72)[0]  # index_offset; record 100's payload (docs/SHARD_FORMAT.md)
off, stored = struct.unpack_from('<QI', b, index + 32 * 100)
b[off + stored // 2] ^= 0x10; open(p, 'wb').write(b)"
B=(-a resnet20 -b 32 --crop-size 16 --val-resize 16 --lr 0.05 -p 1 --epochs 1)
"$TRAIN" "${B[@]}" -j 1 -o runs/bad1 bad 2>bad1.log || { cat bad1.log; fail "a run with a bad train record failed"; }
"$TRAIN" "${B[@]}" -j 2 -o runs/bad2 bad 2>bad2.log || { cat bad2.log; fail "a run with a bad train record failed (2 workers)"; }
[ "$(grep -c 'warning: .*train.shard: record .*skipped' bad1.log)" = 1 ] || { cat bad1.log; fail "the bad record is not reported exactly once"; }
grep -q '"bad_records":1' runs/bad1/metrics.jsonl || fail "metrics.jsonl does not count the bad record"
grep -q "1 bad record skipped" bad1.log || fail "the epoch line does not count the bad record"
cmp -s <(strip_timing runs/bad1/metrics.jsonl) <(strip_timing runs/bad2/metrics.jsonl) || fail "bad record: -j 1 and -j 2 differ"
cmp -s runs/bad1/model.safetensors runs/bad2/model.safetensors || fail "bad record: -j 1 and -j 2 models differ"
ok "a bit-flipped train record: $(grep -o 'record [0-9]*: [^;]*' bad1.log | head -1), skipped and counted, same bits for -j 1 and 2"

# --strict-data: the first bad record is fatal; a run that fails so before its first step (every
# record damaged here) leaves no directory that blocks the same command once the shard is repaired.
"$PIPPY" -c "
import struct; p = 'bad/train.shard'; b = bytearray(open(p, 'rb').read())
index, n = struct.unpack_from('<Q', b, 72)[0], struct.unpack_from('<Q', b, 16)[0]
for i in range(n):
    off, stored = struct.unpack_from('<QI', b, index + 32 * i)
    b[off + stored // 2] ^= 0x10
open(p, 'wb').write(b)"
S=("${B[@]}" --strict-data -o runs/strict bad)
"$TRAIN" "${S[@]}" >strict.log 2>&1 && fail "--strict-data accepted a bad record"
grep -q "payload checksum mismatch" strict.log || fail "--strict-data: $(cat strict.log)"
cp -L d/train.shard bad/train.shard
"$TRAIN" "${S[@]}" 2>strict2.log || { cat strict2.log; fail "the same command after a failed start (shard repaired)"; }
ok "--strict-data stops at the bad record; the same command runs again once it is repaired"

# 5. --help fits 100 columns and every flag has a group; --version names the commit.
help=$("$TRAIN" --help)
[ -z "$(awk 'length > 100' <<<"$help")" ] || fail "--help lines over 100 columns: $(awk 'length > 100' <<<"$help" | head -3)"
grep -q "^other:" <<<"$help" && fail "flags without a --help group: $(sed -n '/^other:/,/^$/p' <<<"$help")"
grep -q "^ctrain [0-9.]* (commit [0-9a-f]" <<<"$("$TRAIN" --version)" || fail "--version: $("$TRAIN" --version)"
ok "--help: $(wc -l <<<"$help") lines, none over 100 columns, every flag in a group; $("$TRAIN" --version)"

# 6. --dry-run of every recipe, on this CPU machine.
for f in "$CTRAIN_ROOT"/recipes/*.conf; do
  out=$("$TRAIN" --config "$f" --dry-run d 2>&1) || { echo "$out"; fail "--dry-run --config $f"; }
  grep -q "global batch: " <<<"$out" && grep -q "recipe $f:[0-9]" <<<"$out" && grep -q "steps per epoch" <<<"$out" \
    || fail "--dry-run --config $f does not show the settings' sources, global batch and steps: $out"
done
ok "--dry-run of all $(ls "$CTRAIN_ROOT"/recipes/*.conf | wc -l) recipes on the CPU"
