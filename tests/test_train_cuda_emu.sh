#!/usr/bin/env bash
# train --device cuda end to end under the CUDA emulator (build/train-emu: main.c and trainer/ compiled with
# CTRAIN_CUDA, linked against the emulated kernels), against train --device cpu on the same tiny
# synthetic dataset:
#   - fp32: the first epoch's step losses within 1e-5 of the CPU run (later ones 3e-2, see
#     compare_metrics) and the final model.safetensors within 20% of
#     what the last epoch moved the weights: the GPU executor, device SGD and eval are wired correctly;
#   - checkpoints are backend-neutral: the GPU run's last.ckpt resumes on the CPU (and the CPU's on
#     the GPU) and continues like an uninterrupted run of the other backend;
#   - bf16 (the default precision) matches the CPU's bf16 mode and stays close to fp32.
source "$(dirname "$0")/train_lib.sh"
# CUDA_TRAIN=./train runs the same checks on a real GPU (tests/gpu.sh does).
EMU=${CUDA_TRAIN:-$CTRAIN_BUILD/train-emu}
[ -x "$EMU" ] || { echo "no $EMU (built by ./build.sh test when nvcc exists)"; exit 1; }
make_synth "$TMP/d" 32 16 16
ARGS="-a resnet20 -b 8 --lr 0.02 --wd 5e-4 --nesterov --crop-size 8 --val-resize 8 -p 1 --workers 1 --seed 7"

"$TRAIN" "$TMP/d" $ARGS --epochs 2 --device cpu --out "$TMP/cpu" >"$TMP/cpu.log" 2>&1 || { cat "$TMP/cpu.log"; fail "cpu run"; }
"$EMU" "$TMP/d" $ARGS --epochs 2 --device cuda --precision fp32 --out "$TMP/gpu" >"$TMP/gpu.log" 2>&1 \
  || { cat "$TMP/gpu.log"; fail "cuda (emulated) run"; }
grep -Eq "device cuda[ ,(]+fp32" "$TMP/gpu.log" || fail "the cuda run did not report device cuda: $(head -5 "$TMP/gpu.log")"
# CUDA graphs (on by default) replay the same kernels: every bit as without them.
grep -q "CUDA graphs" "$TMP/gpu.log" || fail "the cuda run did not say it uses CUDA graphs"
grep -q "capturing a CUDA graph failed" "$TMP/gpu.log" && fail "graph capture failed: $(grep -m1 capturing "$TMP/gpu.log")"
"$EMU" "$TMP/d" $ARGS --epochs 2 --device cuda --precision fp32 --cuda-graphs off --out "$TMP/gpu_eager" >"$TMP/gpu_eager.log" 2>&1 \
  || { cat "$TMP/gpu_eager.log"; fail "cuda (emulated) run without graphs"; }
grep -q "CUDA graphs" "$TMP/gpu_eager.log" && fail "--cuda-graphs off still reports graphs"
cmp -s "$TMP/gpu/model.safetensors" "$TMP/gpu_eager/model.safetensors" || fail "--cuda-graphs on and off end on different weights"
diff <(grep -o '"loss":[^,]*' "$TMP/gpu/metrics.jsonl") <(grep -o '"loss":[^,]*' "$TMP/gpu_eager/metrics.jsonl") >/dev/null \
  || fail "--cuda-graphs on and off log different losses"
ok "CUDA graphs on and off: identical weights and losses"

# compare_metrics A B TOL [N TIGHT]: every step/epoch record's loss fields agree within TOL
# (relative), the first N records within TIGHT. Training is chaotic: last-bit differences between
# the backends (reduction orders) grow ~10x per step on this tiny problem (measured: 1e-7 at step
# 1, 5e-3 in the val loss after 8 steps), so only the first steps can be compared tightly.
compare_metrics() {
  "$PIPPY" - "$@" <<'PY'
import json, sys
a = [json.loads(l) for l in open(sys.argv[1])]
b = [json.loads(l) for l in open(sys.argv[2])]
tol = float(sys.argv[3])
n_tight, tight = (int(sys.argv[4]), float(sys.argv[5])) if len(sys.argv) > 5 else (0, tol)
assert len(a) == len(b), f"{len(a)} vs {len(b)} records"
worst = [0.0, 0.0]
for i, (x, y) in enumerate(zip(a, b)):
    assert x["type"] == y["type"] and x.get("step") == y.get("step"), (x, y)
    t = tight if i < n_tight else tol
    for k in ("loss", "train_loss", "val_loss"):
        if k in x:
            d = abs(x[k] - y[k]) / max(abs(x[k]), 1e-12)
            worst[i >= n_tight] = max(worst[i >= n_tight], d)
            assert d <= t, f"step {x.get('step')} {k}: {x[k]} vs {y[k]} (rel {d:.3g} > {t})"
print(f"{len(a)} records, worst relative loss difference {worst[0]:.3g} in the first {n_tight}, {worst[1]:.3g} after")
PY
}
# compare_models A B REF FRAC: |A - B| <= FRAC * |A - REF| over all float tensors (norms), where
# REF is the model one epoch earlier: the difference must be small next to what an epoch of
# training moves (a stale or lost state after a backend switch is as large as that movement).
compare_models() {
  "$PIPPY" - "$1" "$2" "$3" "$4" <<'PY'
import sys
import numpy as np
from safetensors.numpy import load_file
a, b, ref, frac = load_file(sys.argv[1]), load_file(sys.argv[2]), load_file(sys.argv[3]), float(sys.argv[4])
assert a.keys() == b.keys() == ref.keys()
keys = [k for k in a if a[k].dtype.kind == "f"]
flat = lambda m: np.concatenate([m[k].astype(np.float64).ravel() for k in keys])
A, B, R = flat(a), flat(b), flat(ref)
d, move = np.linalg.norm(A - B), np.linalg.norm(A - R)
print(f"|difference| {d:.3g} = {d / move:.3g} of an epoch's movement {move:.3g} (relative to the weights {d / np.linalg.norm(A):.3g})")
assert d <= frac * move
PY
}
"$TRAIN" "$TMP/d" $ARGS --epochs 1 --device cpu --out "$TMP/c1" >"$TMP/c1.log" 2>&1 || fail "cpu epoch 1"
REF=$TMP/c1/model.safetensors
out=$(compare_metrics "$TMP/cpu/metrics.jsonl" "$TMP/gpu/metrics.jsonl" 3e-2 4 1e-5) || fail "fp32 cuda vs cpu metrics: $out"
ok "fp32 cuda (emulated) vs cpu: $out"

# Distillation on the GPU (teacher forward and both losses on the device) against the CPU's: the
# 2-epoch CPU model above is the teacher.
KD=(--teacher "resnet20:$TMP/cpu/model.safetensors" --kd-alpha 0.6 --kd-temperature 3 --epochs 1)
"$TRAIN" "$TMP/d" $ARGS "${KD[@]}" --device cpu --out "$TMP/kdc" >"$TMP/kdc.log" 2>&1 || { cat "$TMP/kdc.log"; fail "cpu KD run"; }
"$EMU" "$TMP/d" $ARGS "${KD[@]}" --device cuda --precision fp32 --out "$TMP/kdg" >"$TMP/kdg.log" 2>&1 \
  || { cat "$TMP/kdg.log"; fail "cuda (emulated) KD run"; }
out=$(compare_metrics "$TMP/kdc/metrics.jsonl" "$TMP/kdg/metrics.jsonl" 3e-2 4 1e-5) || fail "KD fp32 cuda vs cpu metrics: $out"
ok "distillation, fp32 cuda (emulated) vs cpu: $out"
# LARS on the device (lars_step_gpu) against the CPU's: the update is bit-identical on the same
# gradients, so the steps agree as tightly as SGD's do.
LARS=(${ARGS/--nesterov/} --optimizer lars --lr 2 --lr-schedule poly --warmup-epochs 0.5 --epochs 1)
"$TRAIN" "$TMP/d" "${LARS[@]}" --device cpu --out "$TMP/larsc" >"$TMP/larsc.log" 2>&1 || { cat "$TMP/larsc.log"; fail "cpu LARS run"; }
"$EMU" "$TMP/d" "${LARS[@]}" --device cuda --precision fp32 --out "$TMP/larsg" >"$TMP/larsg.log" 2>&1 \
  || { cat "$TMP/larsg.log"; fail "cuda (emulated) LARS run"; }
out=$(compare_metrics "$TMP/larsc/metrics.jsonl" "$TMP/larsg/metrics.jsonl" 3e-2 4 1e-5) || fail "LARS fp32 cuda vs cpu metrics: $out"
ok "LARS, fp32 cuda (emulated) vs cpu: $out"
# Progressive resizing (4 -> 8 px over the 3 epochs: 4, 6, 8) with evaluation at its own size
# (6 px) and flip TTA: the executor re-plans its memory and re-captures its graphs at every new
# size and around every evaluation; graphs on and off give the same bits, and the run follows the
# CPU's: the first 7 records (epoch 1 at 4 px with its flip-averaged 6 px evaluation, then the
# first two steps at 6 px) within 2e-5, the rest within 10% (measured: 1e-5 at most through step 6,
# then this tiny, unstable problem decorrelates: 1e-3 at step 7, 4% in the last val loss).
# The CPU run sums its convolutions directly (CTRAIN_CPU_WINOGRAD=0 CTRAIN_CPU_SMALL=0), in the
# GPU's order: its default Winograd (4x4+ maps) and pixel-pair (2x2, 1x1) routes round otherwise,
# and this unstable problem turns that into 8e-5 by step 4 and 9e-4 in epoch 1's val loss
# (direct: 1.2e-6 through record 7); the routes themselves are held to float64 in test_layers.
PR=($ARGS --res-start 4 --res-end 8 --res-ramp 0,2 --res-step 2 --val-crop-size 6 --tta flip --epochs 3)
CTRAIN_CPU_WINOGRAD=0 CTRAIN_CPU_SMALL=0 "$TRAIN" "$TMP/d" "${PR[@]}" --device cpu --out "$TMP/prc" >"$TMP/prc.log" 2>&1 \
  || { cat "$TMP/prc.log"; fail "cpu progressive run"; }
"$EMU" "$TMP/d" "${PR[@]}" --device cuda --precision fp32 --out "$TMP/prg" >"$TMP/prg.log" 2>&1 \
  || { cat "$TMP/prg.log"; fail "cuda (emulated) progressive run"; }
"$EMU" "$TMP/d" "${PR[@]}" --device cuda --precision fp32 --cuda-graphs off --out "$TMP/pre" >"$TMP/pre.log" 2>&1 \
  || { cat "$TMP/pre.log"; fail "cuda (emulated) progressive run without graphs"; }
grep -q "capturing a CUDA graph failed" "$TMP/prg.log" && fail "graph capture failed: $(grep -m1 capturing "$TMP/prg.log")"
cmp -s "$TMP/prg/model.safetensors" "$TMP/pre/model.safetensors" || fail "progressive resizing: --cuda-graphs on and off end on different weights"
"$PIPPY" - "$TMP/prg/metrics.jsonl" <<'PY' || fail "progressive cuda run: wrong resolutions in metrics.jsonl"
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
assert [r["res"] for r in recs if r["type"] == "epoch"] == [4, 6, 8] and all(r["val_res"] == 6 for r in recs if r["type"] == "epoch")
assert all(r["res"] == {1: 4, 2: 6, 3: 8}[r["epoch"]] for r in recs if r["type"] == "step")
PY
out=$(compare_metrics "$TMP/prc/metrics.jsonl" "$TMP/prg/metrics.jsonl" 0.1 7 2e-5) || fail "progressive fp32 cuda vs cpu metrics: $out"
ok "progressive resizing + eval size + --tta flip, fp32 cuda (emulated; graphs on = off, bit for bit) vs cpu: $out"
# TTA alone, on the same weights: the GPU's flip-averaged evaluation is the CPU's within fp32
# tolerance, and differs from the plain one.
ev() { "$1" "$TMP/d" $ARGS --val-crop-size 6 --evaluate --resume "$TMP/prc/last.ckpt" "${@:2}" 2>&1 | grep -o "16 images.*top-5 [0-9.]*%"; }
tc=$(ev "$TRAIN" --device cpu --tta flip) && tg=$(ev "$EMU" --device cuda --precision fp32 --tta flip) && pc=$(ev "$TRAIN" --device cpu --tta none) \
  || fail "--evaluate --tta flip runs"
"$PIPPY" - "$tc" "$tg" "$pc" <<'PY' || fail "--tta flip: cuda '$tg' vs cpu '$tc' (plain: '$pc')"
import re, sys
f = lambda s: [float(v) for v in re.findall(r"loss ([0-9.]+)  top-1 ([0-9.]+)%  top-5 ([0-9.]+)%", s)[0]]
c, g, p = map(f, sys.argv[1:])
assert abs(c[0] - g[0]) <= 1e-4 * max(1, c[0]) + 1e-4 and c[1:] == g[1:], (c, g)
assert c[0] != p[0], ("TTA changed nothing", c, p)
PY
ok "--evaluate --tta flip: cuda (emulated) '$tg' = cpu '$tc' (without TTA: '$pc')"
out=$(compare_models "$TMP/cpu/model.safetensors" "$TMP/gpu/model.safetensors" "$REF" 0.2) || fail "fp32 models differ: $out"
ok "final models: $out"

# Backend-neutral checkpoints: 1 epoch on one backend, resume the 2nd on the other.
"$EMU" "$TMP/d" $ARGS --epochs 1 --device cuda --precision fp32 --out "$TMP/g1" >"$TMP/g1.log" 2>&1 || { cat "$TMP/g1.log"; fail "cuda epoch 1"; }
"$TRAIN" "$TMP/d" $ARGS --epochs 2 --device cpu --resume "$TMP/g1/last.ckpt" --out "$TMP/g1c" >"$TMP/g1c.log" 2>&1 \
  || { cat "$TMP/g1c.log"; fail "cpu resume of a cuda checkpoint"; }
out=$(compare_models "$TMP/cpu/model.safetensors" "$TMP/g1c/model.safetensors" "$REF" 0.2) || fail "cuda->cpu resume: $out"
ok "cuda checkpoint resumed on cpu: $out"
"$EMU" "$TMP/d" $ARGS --epochs 2 --device cuda --precision fp32 --resume "$TMP/c1/last.ckpt" --out "$TMP/c1g" >"$TMP/c1g.log" 2>&1 \
  || { cat "$TMP/c1g.log"; fail "cuda resume of a cpu checkpoint"; }
out=$(compare_models "$TMP/cpu/model.safetensors" "$TMP/c1g/model.safetensors" "$REF" 0.2) || fail "cpu->cuda resume: $out"
ok "cpu checkpoint resumed on cuda: $out"

# bf16 (the default precision on cuda) against the CPU's bf16 mode (--precision bf16: rounds where
# the GPU stores bf16). Same rounding points, but not the same bits: where two fp32 sums differ in
# the last bit, one backend rounds to the bf16 value above and the other below, and each such flip
# feeds more in the next layers, so two bf16 runs decorrelate within a step or two on this tiny,
# chaotic problem (measured: step 1 identical, steps 2-4 0.2-1.8% apart, where the fp32 CPU run
# is 0.05% away at step 1). Checked: the first step within 1e-3 of the CPU's bf16 mode, then no
# divergence (10%).
"$EMU" "$TMP/d" $ARGS --epochs 1 --device cuda --out "$TMP/bf" >"$TMP/bf.log" 2>&1 || { cat "$TMP/bf.log"; fail "bf16 run"; }
grep -Eq "device cuda[ ,(]+bf16" "$TMP/bf.log" || fail "bf16 run did not report its precision"
"$TRAIN" "$TMP/d" $ARGS --epochs 1 --device cpu --precision bf16 --out "$TMP/cbf" >"$TMP/cbf.log" 2>&1 \
  || { cat "$TMP/cbf.log"; fail "cpu bf16 run"; }
grep -q "device cpu, bf16 rounding" "$TMP/cbf.log" || fail "cpu bf16 run did not report its precision: $(grep device "$TMP/cbf.log")"
grep -q '"precision": "bf16"' "$TMP/cbf/config.json" || fail "config.json of the cpu bf16 run does not say bf16"
grep -q '"precision": "fp32"' "$TMP/cpu/config.json" || fail "config.json of the cpu run does not say fp32"
out=$(compare_metrics "$TMP/cbf/metrics.jsonl" "$TMP/bf/metrics.jsonl" 0.1 1 1e-3) || fail "bf16 cuda vs cpu bf16: $out"
ok "bf16 cuda (emulated) vs cpu bf16 mode: $out"
# And against fp32: the first step within 1e-2; the next three no further from the fp32 run than
# max(5e-2, 2x the CPU bf16 run's own distance from it): bf16's effect on this chaotic problem is
# itself several percent by step 4 (measured: the CPU bf16 run 3.9% from fp32, the GPU's 5.8%).
out=$("$PIPPY" - "$TMP/cpu/metrics.jsonl" "$TMP/cbf/metrics.jsonl" "$TMP/bf/metrics.jsonl" <<'PY'
import json, sys
f32, cbf, gbf = ([r["loss"] for r in map(json.loads, open(p)) if r["type"] == "step"][:4] for p in sys.argv[1:])
worst = 0.0
for i, (a, c, g) in enumerate(zip(f32, cbf, gbf)):
    d, own = abs(g - a) / a, abs(c - a) / a
    bound = 1e-2 if i == 0 else max(5e-2, 2 * own)
    assert d <= bound, f"step {i + 1}: bf16 cuda {g} vs fp32 cpu {a} (rel {d:.3g} > {bound:.3g}; cpu bf16 {own:.3g})"
    worst = max(worst, d / bound)
print(f"first 4 steps: bf16 cuda {[round(abs(g - a) / a, 4) for a, g in zip(f32, gbf)]}, "
      f"cpu bf16 {[round(abs(c - a) / a, 4) for a, c in zip(f32, cbf)]} from fp32; worst {worst:.2f} of its bound")
PY
) || fail "bf16 losses vs cpu fp32: $out"
ok "bf16 cuda (emulated) vs cpu fp32: $out"

if [ -n "${CUDA_TRAIN:-}" ]; then
  # On a real GPU the data-parallel checks below need several devices and real NCCL: tests/gpu.sh
  # runs its own version of them when the machine has two GPUs or more.
  echo "test_train_cuda_emu: data-parallel checks skipped on a real GPU (see tests/gpu.sh)"
  exit 0
fi

# Data parallel on the GPU: --ranks 2 on two emulated devices (CTRAIN_EMU_DEVICES), gradients
# averaged by dist/gradsync_cuda.cu (bucket events on the compute stream) while backward runs,
# through NCCL (dist/nccl.c loading the stand-in build/libnccl_emu.so: NCCL itself needs a GPU)
# and through host staging (--comm host): both give the same bits, within 1e-5 of --ranks 2 on
# the CPU in the first steps; the replicas are checked equal at every epoch end, and the
# distributed eval equals a single device's.
NCCL_EMU=$CTRAIN_BUILD/libnccl_emu.so
"$TRAIN" "$TMP/d" $ARGS --epochs 2 --ranks 2 --device cpu --out "$TMP/dpc" >"$TMP/dpc.log" 2>&1 || { cat "$TMP/dpc.log"; fail "cpu --ranks 2"; }
CTRAIN_EMU_DEVICES=2 NCCL_LIBRARY=$NCCL_EMU "$EMU" "$TMP/d" $ARGS --epochs 2 --ranks 2 --device cuda --precision fp32 --bucket-mb 1 \
  --comm nccl --out "$TMP/dpg" >"$TMP/dpg.log" 2>&1 || { cat "$TMP/dpg.log"; fail "cuda (emulated) --ranks 2 over NCCL"; }
grep -q "2 data-parallel ranks" "$TMP/dpg.log" || fail "the cuda run did not report 2 ranks"
grep -q "train: NCCL 2.28.0 ($NCCL_EMU): 2 ranks" "$TMP/dpg.log" || fail "the cuda run did not report NCCL: $(grep NCCL "$TMP/dpg.log")"
out=$(compare_metrics "$TMP/dpc/metrics.jsonl" "$TMP/dpg/metrics.jsonl" 3e-2 4 1e-5) || fail "cuda --ranks 2 vs cpu --ranks 2: $out"
ok "data parallel, 2 emulated GPUs over NCCL vs 2 CPU ranks: $out"
CTRAIN_EMU_DEVICES=2 "$EMU" "$TMP/d" $ARGS --epochs 2 --ranks 2 --device cuda --precision fp32 --bucket-mb 1 --comm host \
  --out "$TMP/dph" >"$TMP/dph.log" 2>&1 || { cat "$TMP/dph.log"; fail "cuda (emulated) --ranks 2 through host memory"; }
cmp -s "$TMP/dpg/model.safetensors" "$TMP/dph/model.safetensors" || fail "--comm host and --comm nccl trained different bits"
out=$(CTRAIN_EMU_DEVICES=2 NCCL_LIBRARY=/nonexistent/libnccl.so.2 "$EMU" "$TMP/d" $ARGS --ranks 2 --device cuda --comm nccl 2>&1) \
  && fail "--comm nccl without a loadable NCCL was accepted"
echo "$out" | grep -q "cannot load NCCL (/nonexistent/libnccl.so.2)" || fail "unclear error without NCCL: $out"
ok "--comm host gives NCCL's bits; --comm nccl without NCCL is a clear error"
e1=$("$EMU" "$TMP/d" $ARGS --device cuda --precision fp32 --ranks 1 --evaluate --resume "$TMP/dpg/last.ckpt" 2>&1 | grep -o "16 images.*top-5 [0-9.]*%") \
  || fail "--evaluate on one emulated GPU"
e2=$(CTRAIN_EMU_DEVICES=2 "$EMU" "$TMP/d" $ARGS --device cuda --precision fp32 --ranks 2 --comm host --evaluate --resume "$TMP/dpg/last.ckpt" 2>&1 \
     | grep -o "16 images.*top-5 [0-9.]*%") || fail "--evaluate on two emulated GPUs"
[ "$e1" = "$e2" ] || fail "distributed GPU eval '$e2' vs one GPU '$e1'"
out=$(CTRAIN_EMU_DEVICES=1 "$EMU" "$TMP/d" $ARGS --device cuda --ranks 2 2>&1) && fail "2 GPU ranks on 1 device accepted"
echo "$out" | grep -q "one GPU per rank, and this node has 1" || fail "unclear error for too few GPUs: $out"
ok "distributed GPU eval equals one GPU's ($e2); too few GPUs is a clear error"

# Several nodes: 2 processes x 2 ranks on 4 emulated devices each, over the stand-in NCCL (whose
# ranks meet in shared memory across processes). Each local rank's communicator must be on the
# device of its buffers and streams, which the stand-in checks at every allreduce: communicators
# chosen by global rank put node 1's on devices 2-3 beside buffers on 0-1 (issue 28, bug 1).
# NCCL sums in rank order either way, so the run has the bits of 1 process x 4 ranks.
PORT=$((20000 + ($$ * 7 + RANDOM) % 20000))
N4=(--epochs 1 --device cuda --precision fp32 --bucket-mb 1 --comm nccl)
export CTRAIN_EMU_DEVICES=4 NCCL_LIBRARY=$NCCL_EMU NCCL_EMU_TIMEOUT=60
"$EMU" "$TMP/d" $ARGS "${N4[@]}" --ranks 4 --out "$TMP/r4" >"$TMP/r4.log" 2>&1 || { cat "$TMP/r4.log"; fail "cuda --ranks 4 over NCCL"; }
"$EMU" "$TMP/d" $ARGS "${N4[@]}" --ranks 2 --nodes 2 --node-rank 1 --master 127.0.0.1:$PORT --out "$TMP/n2.node1" >"$TMP/n2.node1.log" 2>&1 &
p1=$!
rc0=0; "$EMU" "$TMP/d" $ARGS "${N4[@]}" --ranks 2 --nodes 2 --node-rank 0 --master 127.0.0.1:$PORT --out "$TMP/n2" >"$TMP/n2.log" 2>&1 || rc0=$?
rc1=0; wait $p1 || rc1=$?
unset CTRAIN_EMU_DEVICES NCCL_LIBRARY NCCL_EMU_TIMEOUT
[ $rc0 = 0 ] && [ $rc1 = 0 ] || { cat "$TMP/n2.log" "$TMP/n2.node1.log"; fail "2 nodes x 2 emulated GPUs over NCCL: exit $rc0/$rc1"; }
cmp -s "$TMP/r4/model.safetensors" "$TMP/n2/model.safetensors" || fail "2 nodes x 2 GPU ranks differ from 1 process x 4"
ok "2 nodes x 2 emulated GPUs over NCCL (communicators on the local ranks' devices) = 1 process x 4, bit for bit"

# --gpus N is --device cuda --ranks N; contradictions are errors.
CTRAIN_EMU_DEVICES=2 "$EMU" "$TMP/d" $ARGS --epochs 1 --gpus 2 --comm host --precision fp32 --out "$TMP/gpus" >"$TMP/gpus.log" 2>&1 \
  || { cat "$TMP/gpus.log"; fail "--gpus 2"; }
grep -q "2 data-parallel ranks" "$TMP/gpus.log" && grep -Eq "device cuda[ ,(]+fp32" "$TMP/gpus.log" || fail "--gpus 2 did not run 2 cuda ranks"
out=$("$EMU" "$TMP/d" $ARGS --gpus 2 --ranks 3 2>&1) && fail "--gpus 2 --ranks 3 accepted"
echo "$out" | grep -q -- "--gpus 2 and --ranks 3 disagree" || fail "unclear --gpus/--ranks error: $out"
out=$("$EMU" "$TMP/d" $ARGS --gpus 2 --device cpu 2>&1) && fail "--gpus with --device cpu accepted"
echo "$out" | grep -q -- "--gpus 2 with --device cpu" || fail "unclear --gpus/--device error: $out"
ok "--gpus N runs N GPU ranks; contradicting flags are errors"
