#!/usr/bin/env bash
# Execution options are settings (nn/exec_options.h, trainer/config's execution flags):
#   - config.json's "exec_options" holds every option (and the precision) with the value the
#     executors received, from a flag or from an old variable (an alias), and the banner says so;
#   - a resume with another value of an option is refused naming it, with both values (and the
#     variable, when an alias set it);
#   - a node started with another value is refused at the rendezvous, naming the option and both values;
#   - an option changes the bits where it applies: --no-cpu-winograd on resnet20 (3x3 stride-1
#     layers with 16 channels on 8x8 maps: the Winograd route runs by default) trains other weights;
#     --conv-engine v1 on the emulated GPU names the engine it ran;
#   - the defaults compute what the tree computed before the options were settings: the emulated
#     GPU step's losses and weights are pinned below (commit 1d81775, the last before the change;
#     the same bits as its train-emu, compared live). CPU weights are not pinned here: the CPU
#     kernels are chosen at run time (AVX-512, AVX2), so their bits belong to the machine;
#     CTRAIN_BASE_BIN=DIR (a directory with train and train-emu of another commit) compares the
#     CPU and GPU defaults with that build live.
source "$(dirname "$0")/train_lib.sh"
EMU=$CTRAIN_BUILD/train-emu
make_synth "$TMP/d" 16 8 16
A=(-a resnet20 -b 8 --lr 0.05 --wd 5e-4 --crop-size 8 --val-resize 8 -p 1 --workers 1 --seed 3 --epochs 1)

# 1. config.json records every option; the defaults, then values from flags and from aliases.
"$TRAIN" "$TMP/d" "${A[@]}" --device cpu --out "$TMP/cpu" 2>"$TMP/cpu.log" || { cat "$TMP/cpu.log"; fail "default cpu run"; }
exec_json() { "$PIPPY" -c 'import json, sys; print(json.dumps(json.load(open(sys.argv[1]))["exec_options"], sort_keys=True))' "$1/config.json"; }
want='{"conv-engine": "v2", "cpu-small": "on", "cpu-winograd": "on", "fuse-bn-add": "on", "fuse-bn-bwd": "on", "fuse-bn-pool": "on", "fuse-bn-res": "on", "fuse-bn-stats": "on", "maxpool-vector": "on", "precision": "fp32"}'
got=$(exec_json "$TMP/cpu") || fail "config.json has no exec_options object"
[ "$got" = "$want" ] || fail "config.json exec_options: $got, expected $want"
grep -q "execution options" "$TMP/cpu.log" && fail "a default run reported execution options away from the defaults"
ok "config.json's exec_options: every option with its default"

CTRAIN_CPU_WINOGRAD=0 CTRAIN_CONV_ENGINE=wgmma "$TRAIN" "$TMP/d" "${A[@]}" --device cpu --no-fuse-bn-add --no-maxpool-vector \
  --out "$TMP/nw" 2>"$TMP/nw.log" || { cat "$TMP/nw.log"; fail "cpu run with options"; }
got=$(exec_json "$TMP/nw")
for kv in '"conv-engine": "wgmma"' '"cpu-winograd": "off"' '"fuse-bn-add": "off"' '"maxpool-vector": "off"' '"cpu-small": "on"'; do
  grep -qF "$kv" <<<"$got" || fail "config.json exec_options lacks $kv: $got"
done
grep -q "note: --no-cpu-winograd from the environment (CTRAIN_CPU_WINOGRAD=0, an alias of the flag)" "$TMP/nw.log" \
  || { cat "$TMP/nw.log"; fail "the alias was not reported"; }
grep -q "execution options: --conv-engine wgmma, --no-maxpool-vector, --no-fuse-bn-add, --no-cpu-winograd" "$TMP/nw.log" \
  || { cat "$TMP/nw.log"; fail "the banner does not list the options away from the defaults"; }
# A flag wins over its alias.
"$TRAIN" "$TMP/d" "${A[@]}" --device cpu --dry-run --cpu-winograd=on >/dev/null 2>"$TMP/dry.log" || true
CTRAIN_CPU_WINOGRAD=0 "$TRAIN" "$TMP/d" "${A[@]}" --device cpu --dry-run --cpu-winograd=on >"$TMP/dry.out" 2>"$TMP/dry.log" \
  || { cat "$TMP/dry.log"; fail "--dry-run"; }
grep -q "CTRAIN_CPU_WINOGRAD=0 ignored: --cpu-winograd given" "$TMP/dry.log" || { cat "$TMP/dry.log"; fail "the flag did not win over the alias"; }
CTRAIN_FUSE_BN_RES=0 "$TRAIN" "$TMP/d" "${A[@]}" --device cpu --dry-run >"$TMP/dry2.out" 2>&1 || fail "--dry-run with an alias"
grep -Eq "fuse-bn-res +off +environment \\\$CTRAIN_FUSE_BN_RES" "$TMP/dry2.out" || { cat "$TMP/dry2.out"; fail "--dry-run does not say the alias set --fuse-bn-res"; }
err=$(CTRAIN_CONV_ENGINE=v3 "$TRAIN" "$TMP/d" "${A[@]}" --dry-run 2>&1) && fail "CTRAIN_CONV_ENGINE=v3 was accepted"
grep -q "CTRAIN_CONV_ENGINE=v3: 'v3' is not one of v2, v1, wgmma (it is an alias of --conv-engine)" <<<"$err" || fail "bad alias: $err"
ok "options from flags and aliases recorded (a flag wins; --dry-run and the banner say where each came from)"

# 2. The option changes the bits where it applies.
cmp -s "$TMP/cpu/model.safetensors" "$TMP/nw/model.safetensors" && fail "--no-cpu-winograd trained the same weights"
"$TRAIN" "$TMP/d" "${A[@]}" --device cpu --no-cpu-winograd --out "$TMP/nwf" 2>/dev/null || fail "--no-cpu-winograd run"
"$TRAIN" "$TMP/d" "${A[@]}" --device cpu --fuse-bn-add=off --maxpool-vector=off --conv-engine wgmma --out "$TMP/nwg" 2>/dev/null || fail "flags run"
cmp -s "$TMP/nw/model.safetensors" "$TMP/nwg/model.safetensors" && fail "--no-cpu-winograd did not change the weights it should"
CTRAIN_CPU_WINOGRAD=0 "$TRAIN" "$TMP/d" "${A[@]}" --device cpu --out "$TMP/nwa" 2>/dev/null || fail "alias run"
cmp -s "$TMP/nwf/model.safetensors" "$TMP/nwa/model.safetensors" || fail "--no-cpu-winograd and CTRAIN_CPU_WINOGRAD=0 differ"
ok "--no-cpu-winograd trains other bits than the default, the same as its alias"

# 3. A resume with another value is refused by name; the same value resumes.
err=$("$TRAIN" --resume "$TMP/cpu" --epochs 2 --no-cpu-winograd 2>&1) && fail "a resume with --no-cpu-winograd was accepted"
grep -q -- "--cpu-winograd: the run has on, this command gives off" <<<"$err" || fail "resume refusal does not name the option: $err"
err=$(CTRAIN_FUSE_BN_ADD=0 "$TRAIN" --resume "$TMP/cpu" --epochs 2 2>&1) && fail "a resume with CTRAIN_FUSE_BN_ADD=0 was accepted"
grep -q -- "--fuse-bn-add: the run has on, this command gives off (from the environment's CTRAIN_FUSE_BN_ADD)" <<<"$err" \
  || fail "resume refusal does not name the alias: $err"
err=$("$TRAIN" --resume "$TMP/nw" --epochs 2 --conv-engine v2 2>&1) && fail "a resume with --conv-engine v2 (run: wgmma) was accepted"
grep -q -- "--conv-engine: the run has wgmma, this command gives v2" <<<"$err" || fail "resume refusal does not name the engine: $err"
"$TRAIN" --resume "$TMP/nw" --epochs 2 >"$TMP/nw2.log" 2>&1 || { cat "$TMP/nw2.log"; fail "resume with the recorded options"; }
[ "$(exec_json "$TMP/nw")" = "$got" ] || fail "the resumed run's config.json lost its options: $(exec_json "$TMP/nw")"
ok "a resume with another option is refused naming it (flag or alias); the recorded options resume"

# 4. A node with another option is refused at the rendezvous.
PORT=$((20000 + ($$ * 7 + RANDOM) % 20000))
"$TRAIN" "$TMP/d" "${A[@]}" --device cpu --nodes 2 --node-rank 1 --master 127.0.0.1:$PORT --out "$TMP/n1" --no-fuse-bn-add \
  2>"$TMP/n1.log" &
p1=$!
rc0=0; "$TRAIN" "$TMP/d" "${A[@]}" --device cpu --nodes 2 --node-rank 0 --master 127.0.0.1:$PORT --out "$TMP/n0" 2>"$TMP/n0.log" || rc0=$?
rc1=0; wait $p1 || rc1=$?
[ $rc0 = 1 ] && [ $rc1 = 1 ] || { cat "$TMP/n0.log" "$TMP/n1.log"; fail "nodes with different --fuse-bn-add: exit $rc0/$rc1"; }
grep -q "node 1's settings differ from node 0's: --fuse-bn-add: node 1 has off, node 0 has on;" "$TMP/n0.log" \
  || { cat "$TMP/n0.log"; fail "node 0 did not refuse node 1 naming --fuse-bn-add"; }
grep -q "node 0 refused this node: node 1's settings differ from node 0's: --fuse-bn-add" "$TMP/n1.log" \
  || { cat "$TMP/n1.log"; fail "node 1 not told which option"; }
ok "a node with another execution option is refused at the rendezvous, naming it on both sides"

# 5. The defaults compute what they did before the options were settings (emulated GPU, bf16).
[ -x "$EMU" ] || { echo "no $EMU (./build.sh test builds it when nvcc exists)"; exit 1; }
"$EMU" "$TMP/d" "${A[@]}" --device cuda --out "$TMP/gpu" 2>"$TMP/gpu.log" || { cat "$TMP/gpu.log"; fail "emulated gpu run"; }
losses=$(grep -o '"loss":[^,]*' "$TMP/gpu/metrics.jsonl" | tr '\n' ' ')
[ "$losses" = '"loss":2.45073342 "loss":2.47520542 ' ] || fail "emulated GPU default losses $losses, pinned 2.45073342 2.47520542"
sum=$(sha256sum <"$TMP/gpu/model.safetensors" | cut -c1-16)
[ "$sum" = 45b119c38fd843df ] || fail "emulated GPU default weights sha256 $sum, pinned 45b119c38fd843df"
ok "emulated GPU defaults: the losses and weights of 1d81775"
if [ -n "${CTRAIN_BASE_BIN:-}" ]; then
  "$CTRAIN_BASE_BIN/train" "$TMP/d" "${A[@]}" --device cpu --out "$TMP/base" 2>/dev/null || fail "$CTRAIN_BASE_BIN/train"
  cmp -s "$TMP/cpu/model.safetensors" "$TMP/base/model.safetensors" || fail "CPU defaults differ from $CTRAIN_BASE_BIN/train's"
  diff <(strip_timing "$TMP/cpu/metrics.jsonl") <(strip_timing "$TMP/base/metrics.jsonl") >/dev/null || fail "CPU metrics differ from the base's"
  CTRAIN_CPU_WINOGRAD=0 "$CTRAIN_BASE_BIN/train" "$TMP/d" "${A[@]}" --device cpu --out "$TMP/basenw" 2>/dev/null || fail "base nw"
  cmp -s "$TMP/nwf/model.safetensors" "$TMP/basenw/model.safetensors" || fail "--no-cpu-winograd differs from the base's CTRAIN_CPU_WINOGRAD=0"
  "$CTRAIN_BASE_BIN/train-emu" "$TMP/d" "${A[@]}" --device cuda --out "$TMP/basegpu" 2>/dev/null || fail "$CTRAIN_BASE_BIN/train-emu"
  cmp -s "$TMP/gpu/model.safetensors" "$TMP/basegpu/model.safetensors" || fail "emulated GPU defaults differ from the base's"
  ok "CPU (default and --no-cpu-winograd) and emulated GPU runs equal $CTRAIN_BASE_BIN's bit for bit"
fi
