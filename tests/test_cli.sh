# train's command line: --help documents every flag with its default; unknown flags, bad values and
# missing or mismatched shards fail before any work with a message naming the culprit.
source "$(dirname "$0")/train_lib.sh"

# expect_err "regex" args...: must exit non-zero, quickly, with an error matching regex.
expect_err() {
  local re=$1; shift
  local out rc=0
  out=$(timeout 60 "$TRAIN" "$@" 2>&1) || rc=$?
  [ $rc -ne 0 ] || fail "train $* exited 0; expected an error matching '$re'"
  [ $rc -lt 124 ] || fail "train $* exited $rc (timeout or crash); expected a clean error"
  grep -qE -- "$re" <<<"$out" || fail "train $*: error does not match '$re': $out"
  grep -q "^train: error:" <<<"$out" || fail "train $*: no 'train: error:' line: $out"
  ok "train $* -> $(echo "$out" | grep '^train: error' | head -1)"
}

help=$("$TRAIN" --help)
# One line per flag entry: its wrapped continuation lines (indented 37 columns) joined to it.
entries=$(awk 'length($0) > 37 && substr($0, 1, 37) ~ /^ +$/ && substr($0, 38, 1) != " " { sub(/^ +/, " "); printf "%s", $0; next }
               { printf "\n%s", $0 } END { print "" }' <<<"$help")
for flag in arch epochs batch-size lr momentum wd nesterov lr-schedule warmup-epochs label-smoothing crop-size \
            val-resize workers seed deterministic resume weights evaluate out device print-freq teacher kd-alpha \
            kd-temperature precision demo config lr-power lr-end val-crop-size res-start res-end res-ramp res-step tta; do
  grep -qE -- "--$flag( |$)" <<<"$help" || fail "--help does not document --$flag"
done
# Every documented flag shows its default in brackets.
undocumented=$(echo "$entries" | grep -E '^  (-., |    )--[a-z]' | grep -v '\[' | grep -vE -- '--(help|version)' || true)
[ -z "$undocumented" ] || fail "flags without a default in --help: $undocumented"
grep -q "usage: train" <<<"$("$TRAIN" -h)" || fail "-h prints no usage"
ok "--help documents every flag with its default"

make_synth "$TMP/d" 200 50 16
make_synth "$TMP/gray" 200 50 16 10 1
make_synth "$TMP/five" 200 50 16 5
mkdir -p "$TMP/mixch" "$TMP/mixcls" "$TMP/onlyval" "$TMP/empty"
ln -s "$(readlink -f "$TMP/d/train.shard")" "$TMP/mixch/train.shard"
ln -s "$(readlink -f "$TMP/gray/val.shard")" "$TMP/mixch/val.shard"
ln -s "$(readlink -f "$TMP/d/train.shard")" "$TMP/mixcls/train.shard"
ln -s "$(readlink -f "$TMP/five/val.shard")" "$TMP/mixcls/val.shard"
ln -s "$(readlink -f "$TMP/d/val.shard")" "$TMP/onlyval/val.shard"
head -c 1000 "$(readlink -f "$TMP/d/train.shard")" > "$TMP/empty/train.shard"
cp "$(readlink -f "$TMP/d/val.shard")" "$TMP/empty/val.shard"

expect_err "unknown flag '--bogus'" --bogus "$TMP/d"
expect_err "unknown flag '-Z'" -Z "$TMP/d"
expect_err "--epochs: 'ten' is not an integer" --epochs ten "$TMP/d"
expect_err "--cuda-graphs: 'maybe' is not on or off" --cuda-graphs maybe "$TMP/d"
expect_err "--epochs: must be >= 1" --epochs 0 "$TMP/d"
expect_err "--lr: 'abc' is not a number" --lr abc "$TMP/d"
expect_err "--lr: must be > 0" --lr=-1 "$TMP/d"
expect_err "--batch-size: must be in" -b 0 "$TMP/d"
expect_err "--momentum: must be in" --momentum 1.5 "$TMP/d"
expect_err "--lr-schedule: 'exp' is not one of step, cosine, linear, poly" --lr-schedule exp "$TMP/d"
expect_err "--lr-power: must be in" --lr-schedule poly --lr-power 0 "$TMP/d"
expect_err "--lr-end: must be in" --lr 0.1 --lr-end 0.5 "$TMP/d"
expect_err "--arch: unknown architecture 'resnet7'" -a resnet7 "$TMP/d"
expect_err "--device: 'tpu' is not one of auto, cpu, cuda" --device tpu "$TMP/d"
expect_err "--precision: 'fp8'" --precision fp8 "$TMP/d"
expect_err "--kd-alpha: must be in" --kd-alpha 2 "$TMP/d"
expect_err "--teacher: 'resnet20' is not ARCH:PATH" --teacher resnet20 "$TMP/d"
expect_err "--teacher: no such file" --teacher resnet20:/nonexistent.safetensors "$TMP/d"
expect_err "--label-smoothing: must be in" --label-smoothing 1 "$TMP/d"
expect_err "--drop-path: must be in \[0, 1\) \(got 1;" --drop-path 1 "$TMP/d"
expect_err "flag --lr needs a value" "$TMP/d" --lr
expect_err "--nesterov: 'maybe' is not a boolean" --nesterov=maybe "$TMP/d"
expect_err "--val-resize: must be in --crop-size" --crop-size 32 --val-resize 16 "$TMP/d"
# Progressive resizing, eval's size and TTA: each bad value names its flag.
expect_err "--res-ramp 5,3: the ramp must end after it starts" --res-start 8 --res-end 16 --res-ramp 5,3 --res-step 8 "$TMP/d"
expect_err "--res-ramp 4,4: the ramp must end after it starts" --res-start 8 --res-ramp 4,4 --crop-size 16 --res-step 8 "$TMP/d"
expect_err "--res-ramp: '5' is not E0,E1" --res-start 8 --res-ramp 5 "$TMP/d"
expect_err "--res-start 8 and --res-end 16 differ: --res-ramp E0,E1 must say" --res-start 8 --res-end 16 "$TMP/d"
expect_err "--res-step: must be in 1..4096 \(got 0\)" --res-step 0 "$TMP/d"
expect_err "--res-step: must be in 1..4096 \(got -32\)" --res-step -32 "$TMP/d"
expect_err "--res-end 20 is not a multiple of --res-step 8" --res-start 8 --res-end 20 --res-ramp 0,1 --res-step 8 "$TMP/d"
expect_err "--res-start: '0' is not a count >= 1 or auto" --res-start 0 "$TMP/d"
# Progressive resizing past the stored size upsamples, as a fixed crop does, with the same warning.
out=$("$TRAIN" -a resnet20 --res-start 16 --res-end 32 --res-ramp 0,1 --res-step 16 -b 100 --epochs 1 --out "$TMP/prog" "$TMP/d" 2>&1) \
  || { echo "$out"; fail "progressive resizing to 32 px on 16 px images was refused"; }
grep -q "^train: warning: --res-end 32 is larger than some images stored in .*train.shard (200 of 200 sampled records have a shorter side, the smallest 16 px)" <<<"$out" \
  || fail "no upsampling warning for --res-end 32 on 16 px images: $out"
ok "--res-end past the stored size trains (upsampled) with a warning"
expect_err "--val-crop-size: '-1' is not a count >= 1 or auto" --val-crop-size -1 "$TMP/d"
expect_err "--val-resize: must be in --val-crop-size \(24\)..8192" --val-crop-size 24 --val-resize 20 "$TMP/d"
expect_err "--tta: 'crop' is not one of none, flip" --tta crop "$TMP/d"
expect_err "unexpected extra argument" "$TMP/d" "$TMP/d"
expect_err "missing SHARDS directory \(or --demo, or --resume RUN_DIR\); see train --help" --epochs 1
out=$("$TRAIN" --epochs 1 2>&1) || true
[ "$(wc -l <<<"$out")" = 1 ] || fail "a missing SHARDS prints more than its error: $out"
grep -q "auto (crop/0.875)" <<<"$entries" || fail "--help does not say --val-resize defaults to auto (crop/0.875)"
grep -qE -- "--overwrite .*\[off\]" <<<"$entries" && grep -qE -- "--reset-head .*\[off\]" <<<"$entries" || fail "--help lacks --overwrite or --reset-head"
expect_err "--reset-head needs --weights" --reset-head "$TMP/d"
expect_err "is not a directory" /nonexistent/shards
expect_err "train.shard: missing" "$TMP/onlyval"
mkdir -p "$TMP/none"
expect_err "val.shard: missing" "$TMP/none"
expect_err "channel count mismatch.*train.shard has 3.*val.shard has 1" "$TMP/mixch"
expect_err "class" "$TMP/mixcls"
expect_err "train.shard" "$TMP/empty"
expect_err "--evaluate needs a model: --weights PATH" --evaluate "$TMP/d"
expect_err "--weights: no such file" --weights /nonexistent.safetensors "$TMP/d"
expect_err "--resume: no such file" --resume /nonexistent.ckpt "$TMP/d"
expect_err "--crop-size: must be in 1..4096" --crop-size 0 "$TMP/d"
expect_err "channel count mismatch" --out "$TMP/o" "$TMP/mixch"
expect_err "--demo takes no SHARDS" --demo "$TMP/d"
# The launchers' environment: each variable is checked and named, never blamed on a flag not given.
WORLD_SIZE=two expect_err "WORLD_SIZE: 'two' is not an integer in 1..4096" "$TMP/d"
WORLD_SIZE=0 expect_err "WORLD_SIZE: '0' is not an integer in 1..4096" "$TMP/d"
SLURM_NNODES=x expect_err "SLURM_NNODES: 'x' is not an integer" "$TMP/d"
WORLD_SIZE=2 NODE_RANK=5 expect_err "NODE_RANK: 5 is not in 0..1 \(WORLD_SIZE is 2\)" "$TMP/d"
WORLD_SIZE=2 RANK=-1 expect_err "RANK: '-1' is not an integer in 0..4095" "$TMP/d"
WORLD_SIZE=2 NODE_RANK=1 MASTER_ADDR=localhost MASTER_PORT=70000 expect_err "MASTER_PORT: '70000' is not an integer in 1..65535" "$TMP/d"
expect_err "--master port: '0' is not an integer in 1..65535" --nodes 2 --master localhost:0 "$TMP/d"
expect_err "--master port: 'http' is not an integer" --nodes 2 --master localhost:http "$TMP/d"
expect_err "--optimizer: 'adam' is not one of sgd, lars" --optimizer adam "$TMP/d"
expect_err "--optimizer lars: --nesterov is not part of LARS" --optimizer lars --nesterov "$TMP/d"
expect_err "--lars-eta: must be in" --optimizer lars --lars-eta 0 "$TMP/d"
expect_err "--betas: '0.9' is not two numbers B1,B2" --optimizer adamw --betas 0.9 "$TMP/d"
expect_err "--betas: each must be in \[0, 1\)" --optimizer lamb --betas 0.9,1 "$TMP/d"
expect_err "--eps: 'x' is not a number > 0 or auto" --optimizer adamw --eps x "$TMP/d"
expect_err "--optimizer adamw: --nesterov is SGD's" --optimizer adamw --nesterov "$TMP/d"
# --nesterov set by --demo or a recipe: the error says where it came from and how to turn it off,
# and --no-nesterov does.
expect_err "--optimizer lamb: --nesterov \(on from --demo\) is SGD's only; add --no-nesterov" --demo --optimizer lamb
printf -- '--nesterov\n' >"$TMP/nest.conf"
expect_err "--optimizer adamw: --nesterov \(on from recipe $TMP/nest.conf:1\) is SGD's only; add --no-nesterov" --config "$TMP/nest.conf" --optimizer adamw "$TMP/d"
out=$("$TRAIN" --demo --optimizer lamb --no-nesterov --dry-run 2>&1)
grep -qE "^  --nesterov +off +command line" <<<"$out" || fail "--demo --optimizer lamb --no-nesterov: nesterov not off"
grep -q "on/off flags" <<<"$help" || fail "--help does not say how to turn an on/off flag off"
# --workers: a count >= 1 or auto.
expect_err "--workers: '0' is not a count >= 1 or auto" -j 0 "$TMP/d"
expect_err "--workers: 'many' is not a count >= 1 or auto" --workers many "$TMP/d"
# --config FILE: errors name FILE:LINE; the command line's value is checked, not the file's.
printf -- '# recipe\n--epochs 2\n--bogus 1\n' > "$TMP/unknown.conf"
expect_err "unknown.conf:3: unknown flag '--bogus'" --config "$TMP/unknown.conf" "$TMP/d"
printf -- '\n--lr abc\n' > "$TMP/badval.conf"
expect_err "badval.conf:2: --lr: 'abc' is not a number" --config "$TMP/badval.conf" "$TMP/d"
printf -- '--epochs 2\n--momentum 1.5\n' > "$TMP/range.conf"
expect_err "range.conf:2: --momentum: must be in" --config "$TMP/range.conf" "$TMP/d"
printf -- 'epochs 3\n' > "$TMP/noflag.conf"
expect_err "noflag.conf:1: expected '--flag value'" --config "$TMP/noflag.conf" "$TMP/d"
printf -- '--config other.conf\n' > "$TMP/nested.conf"
expect_err "nested.conf:1: --config cannot be used in a recipe file" --config "$TMP/nested.conf" "$TMP/d"
expect_err "--config $TMP/none.conf: cannot read" --config "$TMP/none.conf" "$TMP/d"
out=$(timeout 60 "$TRAIN" --config "$TMP/range.conf" --momentum 0.5 --epochs 0 "$TMP/d" 2>&1) && fail "--epochs 0 accepted"
grep -q "^train: error: --epochs: must be >= 1" <<<"$out" || fail "a command-line value blamed on the file: $out"
ok "--config: a command-line value's error names no file line"
[ ! -e "$TMP/o" ] || fail "an invalid run created its output directory"

# Resume mismatches: a resnet20 checkpoint on 10 classes.
printf -- '--epochs 1   # from a recipe file\n--label-smoothing=0.1\n' > "$TMP/small.conf"
"$TRAIN" "${SMALL_FLAGS[@]}" --config "$TMP/small.conf" --out "$TMP/run" "$TMP/d" >/dev/null 2>"$TMP/run.log" \
  || { cat "$TMP/run.log"; fail "small training run failed"; }
grep -Eq "train: device cpu \([0-9]+ CPU threads, [0-9]+ loader workers, auto\)" "$TMP/run.log" \
  || fail "the banner does not show the automatic worker count: $(grep 'train: device' "$TMP/run.log")"
grep -q '"label_smoothing": *0.1' "$TMP/run/config.json" || grep -q '"label-smoothing": *0.1' "$TMP/run/config.json" \
  || fail "config.json does not record the recipe file's value"
# LARS on the CPU trains (finite losses) at a rate plain SGD would not survive.
"$TRAIN" "${SMALL_FLAGS[@]}" --optimizer lars --lr 5 --lr-schedule poly --warmup-epochs 0.2 --epochs 1 --out "$TMP/lars" "$TMP/d" \
  >/dev/null 2>"$TMP/lars.log" || { cat "$TMP/lars.log"; fail "LARS run failed"; }
grep -q '"type":"epoch"' "$TMP/lars/metrics.jsonl" && ! grep -q '"type":"skip"' "$TMP/lars/metrics.jsonl" \
  || fail "LARS run: no epoch record, or skipped steps"
ok "a run from a recipe file; -j auto chose $(grep -o '[0-9]* loader workers' "$TMP/run.log")"
[ -f "$TMP/run/last.ckpt" ] || fail "no last.ckpt"
expect_err "--arch: the run has resnet20, this command gives resnet32" "${SMALL_FLAGS[@]}" -a resnet32 --epochs 2 --resume "$TMP/run/last.ckpt" "$TMP/d"
expect_err "checkpoint has 10 classes, the shards have 5" "${SMALL_FLAGS[@]}" --epochs 2 --resume "$TMP/run/last.ckpt" "$TMP/five"
expect_err "checkpoint has 3 input channels, the shards have 1" "${SMALL_FLAGS[@]}" --epochs 2 --resume "$TMP/run/last.ckpt" "$TMP/gray"
expect_err "finished epoch 1 already" "${SMALL_FLAGS[@]}" --epochs 1 --resume "$TMP/run/last.ckpt" "$TMP/d"
expect_err "--optimizer: the run has sgd, this command gives lars" "${SMALL_FLAGS[@]}" --optimizer lars --epochs 2 --resume "$TMP/run/last.ckpt" "$TMP/d"
expect_err "--optimizer: the run has sgd, this command gives adamw" "${SMALL_FLAGS[@]}" --optimizer adamw --epochs 2 --resume "$TMP/run/last.ckpt" "$TMP/d"

# An --out that holds a run is refused before any work, touching nothing, unless --resume continues
# it or --overwrite replaces it; paths join without doubled slashes when SHARDS and --out end in '/'.
touch "$TMP/run/notes.txt"
before=$(cd "$TMP/run" && ls -l --full-time && md5sum *)
expect_err "--out $TMP/run: already holds a run \(config.json\); add --overwrite to replace it, continue it with: $TRAIN --resume $TMP/run, or choose another --out" \
  "${SMALL_FLAGS[@]}" --epochs 1 --out "$TMP/run" "$TMP/d"
[ "$before" = "$(cd "$TMP/run" && ls -l --full-time && md5sum *)" ] || fail "a refused --out was touched"
expect_err "--overwrite would delete $TMP/run/ while --resume $TMP/run/last.ckpt continues from it" \
  "${SMALL_FLAGS[@]}" --epochs 2 --overwrite --resume "$TMP/run/last.ckpt" --out "$TMP/run" "$TMP/d"
mkdir -p "$TMP/evonly" && touch "$TMP/evonly/events.out.tfevents.1.host.ctrain"
# A directory whose run never took a step (no checkpoint, no metrics record) does not block the
# same command: its files are replaced, with a note.
out=$("$TRAIN" "${SMALL_FLAGS[@]}" --epochs 1 --out "$TMP/evonly" "$TMP/d" 2>&1) || { echo "$out"; fail "a run into a never-stepped directory was refused"; }
grep -q "^train: note: $TMP/evonly holds a run that stopped before its first step" <<<"$out" || fail "no note replacing a never-stepped run: $out"
[ ! -f "$TMP/evonly/events.out.tfevents.1.host.ctrain" ] || fail "the never-stepped run's events file was kept"
ok "a directory whose run stopped before its first step is replaced, with a note"
cp -r "$TMP/run" "$TMP/again"
sleep 1  # a new TensorBoard file name (it holds the start second)
"$TRAIN" "${SMALL_FLAGS[@]}" --epochs 1 --overwrite --out "$TMP/again/" "$TMP/d/" >/dev/null 2>"$TMP/again.log" \
  || { cat "$TMP/again.log"; fail "--overwrite run failed"; }
[ "$(ls "$TMP/again"/events.out.tfevents.* | wc -l)" = 1 ] || fail "--overwrite left the old TensorBoard file: $(ls "$TMP/again")"
[ -f "$TMP/again/notes.txt" ] || fail "--overwrite removed a file ctrain does not write"
[ "$(grep -c '"type":"epoch"' "$TMP/again/metrics.jsonl")" = 1 ] || fail "--overwrite kept old metrics"
grep -q "//" "$TMP/again.log" && fail "a path with a doubled slash: $(grep "//" "$TMP/again.log")"
grep -q "from $TMP/d/; " "$TMP/again.log" && grep -q "out $TMP/again/$" "$TMP/again.log" || fail "paths in the banner: $(cat "$TMP/again.log")"
ok "--out holding a run: refused untouched, --overwrite replaces only ctrain's files, no doubled slashes"
# The default runs/DATE-ARCH takes a suffix when that name holds a run.
now=$(date +%s)
for s in $(seq -1 20); do
  mkdir -p "$TMP/cwd/runs/$(date -d @$((now + s)) +%Y%m%d-%H%M%S)-resnet20" && touch "$TMP/cwd/runs/$(date -d @$((now + s)) +%Y%m%d-%H%M%S)-resnet20/config.json"
done
(cd "$TMP/cwd" && "$TRAIN" "${SMALL_FLAGS[@]}" --epochs 1 "$TMP/d" >/dev/null 2>"$TMP/cwd.log") || { cat "$TMP/cwd.log"; fail "default --out run failed"; }
[ "$(ls -d "$TMP"/cwd/runs/*-resnet20-2 | wc -l)" = 1 ] && [ -f "$(ls -d "$TMP"/cwd/runs/*-resnet20-2)/model.safetensors" ] \
  || fail "the default run name did not take a suffix: $(ls "$TMP/cwd/runs"; cat "$TMP/cwd.log")"
ok "the default output directory takes a suffix instead of overwriting a run"
# A crop larger than the stored images (16 px) is a warning naming both, not an error; a checkpoint
# serves as --weights.
out=$("$TRAIN" --evaluate --crop-size 32 -b 50 --weights "$TMP/run/last.ckpt" "$TMP/d/" 2>&1) || { echo "$out"; fail "--evaluate --weights CKPT"; }
grep -q "^train: warning: --crop-size 32 is larger than some images stored in $TMP/d/val.shard (50 of 50 sampled records have a shorter side, the smallest 16 px)" <<<"$out" \
  || fail "no warning for a crop larger than the images: $out"
grep -q "^train: --weights $TMP/run/last.ckpt is a ctrain checkpoint: loaded its weights and BN statistics, not its optimizer state or position$" <<<"$out" \
  && grep -q "evaluate $TMP/run/last.ckpt on $TMP/d/val.shard: 50 images" <<<"$out" || fail "--weights CKPT: $out"
ok "crop larger than the images: warning; --weights takes a checkpoint"
# Same class count and channels, other class names: the class table hash tells them apart.
# Packing the renamed tree: same images, class folders renamed.
mkdir -p "$TMP/rt/train"
for c in 0 1 2 3 4 5 6 7 8 9; do mkdir -p "$TMP/rt/train/other$c" "$TMP/rt/val/other$c"; done
"$PIPPY" -c "
from PIL import Image; import numpy as np, sys
for s,n in (('train',40),('val',10)):
    for i in range(n):
        Image.fromarray(np.full((16,16,3), i*5 % 256, np.uint8)).save('$TMP/rt/%s/other%d/%03d.png' % (s, i % 10, i))
"
"$PACKDATA" "$TMP/rt" "$TMP/renamed" >/dev/null 2>&1 || fail "packdata of the renamed tree failed"
expect_err "class table differs" "${SMALL_FLAGS[@]}" --epochs 2 --resume "$TMP/run/last.ckpt" "$TMP/renamed"
# A corrupt checkpoint.
cp "$TMP/run/last.ckpt" "$TMP/bad.ckpt"
printf '\x55' | dd of="$TMP/bad.ckpt" bs=1 seek=5000 conv=notrunc 2>/dev/null
expect_err "bad.ckpt: checkpoint checksum mismatch" "${SMALL_FLAGS[@]}" --epochs 2 --resume "$TMP/bad.ckpt" "$TMP/d"
# Weights of another architecture or class count.
expect_err "model.safetensors" "${SMALL_FLAGS[@]}" -a resnet32 --epochs 1 --weights "$TMP/run/model.safetensors" --out "$TMP/o2" "$TMP/d"
expect_err "model.safetensors" --evaluate "${SMALL_FLAGS[@]}" --weights "$TMP/run/model.safetensors" "$TMP/five"
echo "test_cli: all passed"
