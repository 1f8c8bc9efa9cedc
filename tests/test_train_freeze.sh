#!/bin/bash
# --freeze-backbone (linear probe): only fc trains, BN runs in eval mode.
#   - CPU, from torchvision-made weights with non-trivial BN statistics and --reset-head: every
#     tensor but fc.* (weights, BN running statistics, num_batches_tracked) is bit-identical to the
#     loaded file after training, fc moved, and the loss fell;
#   - --ranks 2 (gradients averaged over the fc prefix only): the same holds;
#   - checkpoints record it: --resume without the flag is refused naming it; with it, 1 epoch +
#     resume = 2 epochs straight, bit for bit;
#   - the GPU path under the emulator (build/train-emu), fp32 and bf16, SGD and LARS: backbone
#     bit-identical, fp32 step losses (LARS: fc) within 1e-5 (1e-6) of the CPU's (the oracle);
#   - a frozen step is cheaper than a full one (backward stops after fc): timed, printed.
source "$(dirname "$0")/train_lib.sh"

make_synth "$TMP/d" 160 32 32
torchvision_weights "$TMP/tv.safetensors" --calibrate-bn
FL=(-a resnet18 -b 16 --crop-size 32 --lr 0.005 -p 1 -j 2 --weights "$TMP/tv.safetensors" --reset-head --freeze-backbone)

"$TRAIN" "${FL[@]}" --epochs 2 --device cpu --out "$TMP/cpu" "$TMP/d" 2>"$TMP/cpu.log" || { cat "$TMP/cpu.log"; fail "cpu linear probe"; }
out=$(frozen_check "$TMP/cpu/model.safetensors" "$TMP/tv.safetensors") || fail "cpu: $out"
# It learns: both epoch losses fall.
"$PIPPY" - "$TMP/cpu/metrics.jsonl" <<'PY' || fail "cpu linear probe did not learn"
import json, sys
e = [json.loads(l) for l in open(sys.argv[1]) if '"type":"epoch"' in l]
assert len(e) == 2 and e[1]["train_loss"] < e[0]["train_loss"] and e[1]["val_loss"] < e[0]["val_loss"], e
print(f"train loss {e[0]['train_loss']:.3f} -> {e[1]['train_loss']:.3f}, val loss {e[0]['val_loss']:.3f} -> {e[1]['val_loss']:.3f}")
PY
ok "cpu: $out"

# Two ranks: only fc's gradients are averaged (the buckets stop at fc).
"$TRAIN" "${FL[@]}" --epochs 1 --device cpu --ranks 2 -b 8 --out "$TMP/r2" "$TMP/d" 2>"$TMP/r2.log" || { cat "$TMP/r2.log"; fail "--ranks 2 linear probe"; }
out=$(frozen_check "$TMP/r2/model.safetensors" "$TMP/tv.safetensors") || fail "--ranks 2: $out"
ok "--ranks 2: $out"

# Checkpoints keep it.
"$TRAIN" "${FL[@]}" --epochs 1 --device cpu --out "$TMP/e1" "$TMP/d" 2>/dev/null || fail "1-epoch run"
R=(-a resnet18 -b 16 --crop-size 32 --lr 0.005 -p 1 -j 2 --epochs 2 --device cpu --resume "$TMP/e1/last.ckpt" --out "$TMP/e1")
out=$("$TRAIN" "${R[@]}" --no-freeze-backbone "$TMP/d" 2>&1) && fail "resuming a frozen run with --no-freeze-backbone was accepted"
grep -q "^  --freeze-backbone: the run has on, this command gives off" <<<"$out" || fail "unclear mismatch error: $out"
"$TRAIN" "${R[@]}" "$TMP/d" 2>"$TMP/res.log" || { cat "$TMP/res.log"; fail "resume (--freeze-backbone from the checkpoint's settings)"; }
cmp -s "$TMP/e1/model.safetensors" "$TMP/cpu/model.safetensors" || fail "1 epoch + resume differs from 2 epochs straight"
ok "--resume keeps it: a mismatch is refused, 1 epoch + resume = 2 epochs bit for bit"

# A frozen step costs a forward and fc's backward: time both kinds of step on the same data.
FULL=(-a resnet18 -b 16 --crop-size 32 --lr 0.005 -p 1 -j 2 --weights "$TMP/tv.safetensors" --reset-head --epochs 1 --device cpu)
t0=$(date +%s.%N); "$TRAIN" "${FULL[@]}" --out "$TMP/full" "$TMP/d" 2>/dev/null || fail "full fine-tune run"
t1=$(date +%s.%N); "$TRAIN" "${FULL[@]}" --freeze-backbone --out "$TMP/frz" "$TMP/d" 2>/dev/null || fail "frozen run"
t2=$(date +%s.%N)
echo "timing (1 epoch of 10 steps, resnet18 at 32 px, batch 16, whole process): full $(echo "$t1 - $t0" | bc) s, frozen $(echo "$t2 - $t1" | bc) s"

EMU=${CUDA_TRAIN:-$CTRAIN_BUILD/train-emu}
if [ -x "$EMU" ]; then
  # The GPU executor under the emulator: a resnet20 whose BN statistics come from a short CPU run.
  make_synth "$TMP/d8" 32 16 8
  A=(-a resnet20 -b 8 --crop-size 8 --val-resize 8 --lr 0.05 -p 1 --workers 1 --seed 3)
  "$TRAIN" "${A[@]}" --epochs 1 --device cpu --out "$TMP/base" "$TMP/d8" 2>/dev/null || fail "base resnet20 run"
  B=("${A[@]}" --epochs 1 --weights "$TMP/base/model.safetensors" --freeze-backbone)
  "$TRAIN" "${B[@]}" --device cpu --out "$TMP/c20" "$TMP/d8" 2>"$TMP/c20.log" || { cat "$TMP/c20.log"; fail "cpu resnet20 probe"; }
  "$EMU" "${B[@]}" --device cuda --precision fp32 --out "$TMP/g20" "$TMP/d8" 2>"$TMP/g20.log" || { cat "$TMP/g20.log"; fail "cuda (emulated) fp32 probe"; }
  out=$(frozen_check "$TMP/g20/model.safetensors" "$TMP/base/model.safetensors") || fail "cuda fp32: $out"
  "$PIPPY" - "$TMP/c20/metrics.jsonl" "$TMP/g20/metrics.jsonl" <<'PY' || fail "cuda fp32 probe vs cpu"
import json, sys
a = [json.loads(l) for l in open(sys.argv[1]) if '"type":"step"' in l]
b = [json.loads(l) for l in open(sys.argv[2]) if '"type":"step"' in l]
assert len(a) == len(b) > 0
worst = max(abs(x["loss"] - y["loss"]) / abs(x["loss"]) for x, y in zip(a, b))
assert worst < 1e-5, worst
print(f"{len(a)} step losses within {worst:.2g} of the cpu's")
PY
  ok "cuda (emulated) fp32: $out"
  "$EMU" "${B[@]}" --device cuda --out "$TMP/gbf" "$TMP/d8" 2>"$TMP/gbf.log" || { cat "$TMP/gbf.log"; fail "cuda (emulated) bf16 probe"; }
  out=$(frozen_check "$TMP/gbf/model.safetensors" "$TMP/base/model.safetensors") || fail "cuda bf16: $out"
  ok "cuda (emulated) bf16: $out"
  # LARS (per-tensor trust ratios) touches only fc's tensors too, on both backends.
  L=("${A[@]}" --epochs 1 --weights "$TMP/base/model.safetensors" --freeze-backbone --optimizer lars --lr 2 --lr-schedule poly)
  "$TRAIN" "${L[@]}" --device cpu --out "$TMP/lc" "$TMP/d8" 2>"$TMP/lc.log" || { cat "$TMP/lc.log"; fail "cpu LARS probe"; }
  "$EMU" "${L[@]}" --device cuda --precision fp32 --out "$TMP/lg" "$TMP/d8" 2>"$TMP/lg.log" || { cat "$TMP/lg.log"; fail "cuda LARS probe"; }
  out=$(frozen_check "$TMP/lc/model.safetensors" "$TMP/base/model.safetensors") || fail "cpu LARS: $out"
  out=$(frozen_check "$TMP/lg/model.safetensors" "$TMP/base/model.safetensors") || fail "cuda LARS: $out"
  "$PIPPY" -c "
import sys, numpy as np
from safetensors.numpy import load_file
a, b = load_file(sys.argv[1])['fc.weight'], load_file(sys.argv[2])['fc.weight']
d = float(np.abs(a - b).max()); print('fc.weight cpu vs cuda: max difference %.2g' % d); assert d < 1e-6
" "$TMP/lc/model.safetensors" "$TMP/lg/model.safetensors" || fail "LARS probe: cuda and cpu fc differ"
  ok "LARS, cpu and cuda (emulated): $out"
fi
echo "test_train_freeze: all passed"
