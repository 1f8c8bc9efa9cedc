#!/usr/bin/env bash
# WORK IN PROGRESS, NOT IN THE SUITE (the name is not tests/test_*.sh on purpose) and not yet seen
# passing: the emulated-GPU half of issue 25's lifecycle. Status on 2026-11-28 (2-core machine at
# load 14-26, this script at nice 5):
#   - a resnext50_32x4d bf16 step under the emulator costs ~50 s of CPU on one host thread
#     (CTRAIN_EMU_HOST_THREADS=1; two host threads spend 3x the CPU on futex hand-offs), so this
#     script is ~10 min of CPU per model: far over the ~120 s a suite test may take. It ran as far
#     as step 1 (straight and SIGTERM runs bit-identical there: loss 1.58587289) before the deadline.
#   - check 2 as written cannot hold at these shapes: at 16x16, batch 4 (layer3/4 at 1x1, BN over 4
#     values) the first loss is ill-conditioned in bf16 on the CPU alone: resnet50 1.532 (bf16) vs
#     2.104 (fp32), resnext50_32x4d 2.663 vs 1.646, wide_resnet50_2 1.837 vs 1.523; the emulated
#     GPU's bf16 gives 1.586. A mutant generic engine reading the next group's filters moves it only
#     to 1.579. fp32 does not rescue it at this shape: the emulated GPU's fp32 first loss is 1.61820
#     against the CPU's 1.64604 (1.7%), and the CPU alone moves resnet50's by 0.5% (2.10414 with its
#     Winograd/small-map routes, 2.11465 direct; the emulated GPU's fp32 2.09106, as far off as
#     resnext's): summation order is amplified ~1e4 here, groups or not. Next: a
#     better-conditioned shape (32x32 or more, batch 8+), measured before a tolerance is set, and
#     its emulator cost.
# Mutant binaries for the seen-failing step (CUDA_TRAIN=PATH): the GPU resume without
# gpu_upload_optim (trainer/backend_cuda.c), safetensors' grouped filters rotated by one group
# (nn/safetensors.c), the generic engine's grouped forward on the next group's filters
# (kernels/conv_generic.cu); none has run to its check yet.
#
# The run lifecycle of resnext50_32x4d (grouped 3x3s) and wide_resnet50_2 under the emulated GPU
# (build/train-emu, --device cuda, bf16 training: issue 25's "on the CPU and under the emulated
# GPU"; tests/test_train_resnext.sh is the CPU half), on 16x16 synthetic images (every stage runs:
# layer3 and layer4 at 1x1), 4 classes, batch 4, two epochs of one step each:
#   - the first step's loss is the CPU backend's on the same initial weights and batch: within
#     STEP1_BF16 of the CPU's bf16 mode (the same rounding points) and STEP1_FP32 of its fp32;
#   - SIGTERM during epoch 1's evaluation checkpoints and exits 143; --resume then ends exactly like
#     the straight run (metrics.jsonl, model.safetensors, last.ckpt, bit for bit: the momentum and
#     the BN statistics come back to the device);
#   - --evaluate of last.ckpt = --evaluate -a ARCH of model.safetensors, on the device;
#   - predict --device cuda (fp32) on a PNG: torchvision's ARCH loading the emulated run's
#     model.safetensors with strict=True gives the same logits within 1e-4, and predict --device
#     cpu on the same file within PREDICT_TOL; the exported ONNX graph runs in onnxruntime alike.
# Which conv engine takes the grouped convolutions (generic today) does not matter to any check.
# The emulator runs on one host thread here (CTRAIN_EMU_HOST_THREADS=1): this test checks the
# lifecycle, not races (tests/emu_* do), and one thread costs a third of the CPU time of two
# (their barrier hand-offs are futex calls): a step of resnext50_32x4d is still ~50 s of CPU.
# CUDA_TRAIN=./train runs it on a real GPU; RESNEXT_ARCHS narrows the models.
# Seen failing (a mutant build/train-emu each, via CUDA_TRAIN; see the commit that added this
# test): the GPU backend's resume without the optimizer state; model.safetensors written with the
# grouped filters one group off; the generic engine's grouped forward reading the next group's
# filters.
source "$(dirname "$0")/train_lib.sh"
EMU=${CUDA_TRAIN:-$CTRAIN_BUILD/train-emu}
[ -x "$EMU" ] || { echo "no $EMU (built by ./build.sh test)"; exit 1; }
make_synth "$TMP/d" 4 4 16 4
export CTRAIN_EMU_HOST_THREADS=${CTRAIN_EMU_HOST_THREADS:-1}
random_png "$TMP/pic.png" 16
ARCHS=${RESNEXT_ARCHS:-resnext50_32x4d wide_resnet50_2}
common=(-b 4 --crop-size 16 --val-resize 16 --lr 0.01 --wd 5e-4 -p 1 --workers 1 --seed 3)
# Measured (resnext50_32x4d / wide_resnet50_2): see the commit; the bounds leave room above it.
STEP1_BF16=${STEP1_BF16:-2e-3} STEP1_FP32=${STEP1_FP32:-1e-2} PREDICT_TOL=${PREDICT_TOL:-1e-5}

for A in $ARCHS; do
  C=(-a "$A" "${common[@]}")
  G=("${C[@]}" --device cuda)
  O=$TMP/$A
  # 1. Train on the device: the straight run (in the background: the emulator runs on one core)
  # and one that SIGTERM stops in epoch 1's evaluation (its step record is written before it; a
  # signal before the handler is set would kill the run: on a loaded machine that can take a minute).
  "$EMU" "$TMP/d" "${G[@]}" --epochs 2 --out "$O/s" >"$O.s.log" 2>&1 &
  straight=$!
  "$EMU" "$TMP/d" "${G[@]}" --epochs 2 --out "$O/i" >"$O.i.log" 2>&1 &
  signal_after_steps TERM $! "$O/i" 1 3600
  wait $straight || { cat "$O.s.log"; fail "$A: cuda (emulated) run"; }
  grep -Eq "device cuda[ ,(]+bf16" "$O.s.log" || fail "$A: the run did not report device cuda, bf16: $(grep -m1 device "$O.s.log")"

  # 2. The first step against the CPU backend's.
  "$TRAIN" "$TMP/d" "${C[@]}" --device cpu --precision bf16 --epochs 1 --out "$O/cbf" >"$TMP/log" 2>&1 || { cat "$TMP/log"; fail "$A: cpu bf16 run"; }
  "$TRAIN" "$TMP/d" "${C[@]}" --device cpu --epochs 1 --out "$O/c32" >"$TMP/log" 2>&1 || { cat "$TMP/log"; fail "$A: cpu fp32 run"; }
  out=$("$PIPPY" - "$O/s/metrics.jsonl" "$O/cbf/metrics.jsonl" "$O/c32/metrics.jsonl" "$STEP1_BF16" "$STEP1_FP32" <<'PY'
import json, sys
g, cbf, c32 = ([r["loss"] for r in map(json.loads, open(p)) if r["type"] == "step"][0] for p in sys.argv[1:4])
dbf, d32 = abs(g - cbf) / abs(cbf), abs(g - c32) / abs(c32)
print(f"step 1 loss {g:.6f}: cpu bf16 {cbf:.6f} (rel {dbf:.2e}), cpu fp32 {c32:.6f} (rel {d32:.2e})")
assert dbf <= float(sys.argv[4]) and d32 <= float(sys.argv[5])
PY
) || fail "$A: first step on the device vs the CPU: $out"
  ok "$A: cuda (emulated) $out"

  # 3. The stopped run resumed: the straight run, bit for bit.
  [ $rc = 143 ] || { cat "$O.i.log"; fail "$A: SIGTERM: exit status $rc, expected 143"; }
  grep -q "SIGTERM: checkpoint saved to $O/i/last.ckpt after epoch 1" "$O.i.log" || { cat "$O.i.log"; fail "$A: no checkpoint after epoch 1"; }
  "$EMU" "$TMP/d" "${G[@]}" --epochs 2 --resume "$O/i/last.ckpt" --out "$O/i" >"$O.r.log" 2>&1 || { cat "$O.r.log"; fail "$A: resume"; }
  cmp -s <(strip_timing "$O/s/metrics.jsonl") <(strip_timing "$O/i/metrics.jsonl") \
    || { diff <(strip_timing "$O/s/metrics.jsonl") <(strip_timing "$O/i/metrics.jsonl") | head; fail "$A: interrupted + resumed run logged other metrics"; }
  cmp -s "$O/s/model.safetensors" "$O/i/model.safetensors" || fail "$A: interrupted + resumed model.safetensors differs from the straight run's"
  same_ckpt "$O/s/last.ckpt" "$O/i/last.ckpt" || fail "$A: interrupted + resumed last.ckpt differs from the straight run's"
  ok "$A: cuda (emulated) SIGTERM after epoch 1 + --resume = the straight run, bit for bit"

  # 4. Evaluate on the device: the checkpoint = model.safetensors (the two side by side).
  "$EMU" "$TMP/d" "${G[@]}" --evaluate --resume "$O/s/last.ckpt" >"$O.e1.log" 2>&1 &
  e1pid=$!
  e2=$("$EMU" "$TMP/d" "${G[@]}" --evaluate --weights "$O/s/model.safetensors" 2>&1 | eval_summary) || fail "$A: --evaluate --weights"
  wait $e1pid || { cat "$O.e1.log"; fail "$A: --evaluate --resume"; }
  e1=$(eval_summary <"$O.e1.log") || fail "$A: --evaluate --resume printed no result: $(cat "$O.e1.log")"
  [ "$e1" = "$e2" ] || fail "$A: on the device, last.ckpt evaluates '$e1', model.safetensors '$e2'"
  ok "$A: cuda (emulated) --evaluate: last.ckpt = model.safetensors: ${e1%%  top-5*}"

  # 5. predict on the device = torchvision (strict) = predict on the CPU; export = onnxruntime.
  "$EMU" predict --device cuda --weights "$O/s/model.safetensors" --format json --logits "$TMP/pic.png" >"$O/pg.json" 2>"$TMP/log" \
    || { cat "$TMP/log"; fail "$A: predict --device cuda"; }
  grep -q "cuda" "$TMP/log" || fail "$A: predict did not say it ran on cuda: $(cat "$TMP/log")"
  "$TRAIN" predict --device cpu --weights "$O/s/model.safetensors" --format json --logits "$TMP/pic.png" >"$O/pc.json" 2>"$TMP/log" \
    || { cat "$TMP/log"; fail "$A: predict --device cpu"; }
  predict_vs_torchvision "$A" "$O/s/model.safetensors" "$TMP/pic.png" "$O/pg.json" "$O/tv" || fail "$A: predict (cuda) vs torchvision"
  out=$("$PIPPY" - "$O/pg.json" "$O/pc.json" "$PREDICT_TOL" <<'PY'
import json, sys, numpy as np
g, c = (np.array(json.loads(open(p).readline())["logits"], np.float64) for p in sys.argv[1:3])
rel = np.linalg.norm(g - c) / np.linalg.norm(c)
print(f"predict cuda vs cpu logits rel. {rel:.2e}")
assert rel <= float(sys.argv[3]), (g, c)
PY
) || fail "$A: $out"
  "$EMU" export --weights "$O/s/model.safetensors" --onnx "$O/m.onnx" 2>"$TMP/log" || { cat "$TMP/log"; fail "$A: export"; }
  onnx_vs_torchvision "$O/m.onnx" "$O/tv" "$A" || fail "$A: onnxruntime vs torchvision"
  ok "$A: the cuda (emulated) run's model: predict cuda = torchvision (strict) = predict cpu ($out) = onnxruntime"
done
echo "lifecycle_resnext_emu: all passed"
