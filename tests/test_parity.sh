#!/usr/bin/env bash
# PyTorch parity of the CPU ResNet (the acceptance test of the model): tools/torch_ref.py builds the
# torchvision model (our CIFAR definition for resnet20), runs one training step in float64 on the
# float32 initial values and dumps everything; tests/helper_parity.c loads the same state dict with
# the strict safetensors loader, runs ctrain's float32 forward/backward/SGD and compares:
#   logits, loss 1e-5 relative; every gradient 1e-4 (norm-wise); running stats and weights after
#   one and two SGD steps 1e-5.
# resnet50 in training mode at this size is ill-conditioned (16 Bottleneck blocks of batch-
# statistics BN over as few as 8 values per channel): float32 rounding of the layer outputs alone
# (float64 arithmetic, conv/BN/fc outputs rounded to float32: torch_ref.py --explain-fp32) moves its
# logits by 1.0e-5 and its worst gradient by 9.3e-3, and torch's own float32 run is 5.5e-5 / 1.5e-2
# from the float64 answer. The gradient part is branch flips (torch_ref.py --explain-kinks): 9 of
# 1.6M ReLU signs / max-pool winners lie within float32 rounding of their kink and go the other
# way in float32; forced onto float32's branches, float64 is 2.4e-4 from torch's float32 (resnet18:
# 1 flip of 409,600 makes 4.8e-3, forced 8.0e-6). No float32 implementation can meet 1e-5 / 1e-4
# there, so each resnet50 quantity is held to max(tolerance, 3 x torch float32's own error)
# (helper --floor 3). That error is measured three ways, torch's float32 step in NCHW, in
# channels_last and on one thread, and the largest counts (torch_ref.py --fp32-floor): the three
# differ only in summation order, yet on these models they land up to 57x apart on one tensor, so a
# single run is one draw of the float32 error, not its scale. Measured (tools/parity_spread.py,
# which puts ctrain's error per tensor beside the three torch runs): wide_resnet50_2 32x32 batch 4,
# layer4.2.conv3's gradient 8.7e-3 from float64 in torch NCHW, 7.6e-2 channels_last, 7.5e-2 ctrain;
# resnext50_32x4d 64x64 batch 2, layer4.2.bn3.weight 9.9e-5 NCHW, 5.7e-3 channels_last, 6.8e-3
# ctrain. Against one NCHW run those failed at 2.85x and 23x the floor; against the three, ctrain's
# worst tensor is 0.99x and 1.54x the worst torch run, the median 0.79x and 1.12x, and the error is
# spread over every layer (the grouped 3x3s no worse than the dense ones), as conditioning is and a
# bug in one kind of layer is not. resnet18 and
# resnet20 meet the fixed tolerances outright (worst gradient 8.7e-6 and 2.7e-6, where torch
# float32 has 4.8e-3 and 2.2e-2).
# Both CPU convolution routes are held to this: the direct/GEMM kernels (CTRAIN_CPU_WINOGRAD=0) on
# every case, and the default Winograd F(2x2, 3x3) route (nn/conv.c) on the resnet20/18 cases. Its
# roundings differ from the direct kernels' (per layer it is as close to float64, test_layers), so
# it takes the other branch at a different few ReLU inputs lying within float32 rounding of zero:
# resnet20 at layer3.2's two ReLUs (inputs 4e-9 and 1.1e-6 of their tensor's std from zero), resnet18
# at layer3.0's output ReLU (3.7e-7); freely compared, that alone moves their gradients by 2.2e-2 and
# 4.8e-3 (torch's own float32 run flips one of them too). Against float64 replayed on those branches
# (torch_ref.py --flip) it meets the fixed tolerances (worst gradient 2.5e-6 and 8.2e-6). A change to
# the Winograd kernels' rounding can move these: torch_ref.py --list-kinks lists the candidates.
# resnet50 runs the direct route only: its float32 logits are 5e-5 off in any implementation, and
# Winograd's loss lands at 1.1e-5 against the 1e-5 floor.
set -euo pipefail
ROOT=${CTRAIN_ROOT:-$(cd "$(dirname "$0")/.." && pwd)}
BUILD=${CTRAIN_BUILD:-$ROOT/build}
TORCH_PY=${TORCH_PY:-/usr/bin/python3}
HELPER=$BUILD/tests/helper_parity
[ -x "$HELPER" ] || { echo "missing $HELPER (./build.sh test builds it)"; exit 1; }
"$TORCH_PY" -c 'import torch, torchvision' || { echo "PyTorch not available as $TORCH_PY"; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# One thread each: the box is shared, and OpenMP spinning on an oversubscribed machine is slow.
# (The layers are bit-identical for any thread count; their own tests check that.)
export OMP_NUM_THREADS=1
# run queues a case; the references are made afterwards by one torch_ref.py process (torch
# imported once: --each-line, the same bytes as a process per reference), then each is checked.
refs=() checks=()
run() { # routes (direct, winograd or both), name, torch_ref args..., -- helper args...
  local route=$1 name=$2; shift 2
  local targs=()
  while [ $# -gt 0 ] && [ "$1" != -- ]; do targs+=("$1"); shift; done
  [ $# -gt 0 ] && shift
  refs+=("${targs[*]} --out $tmp/$name")
  checks+=("$route $name $*")
}
t0=$SECONDS
# CIFAR resnet20, 32x32, batch 4: label smoothing, Nesterov, no weight decay on BN and biases.
R20=(--arch resnet20 --batch 4 --size 32 --classes 10 --smoothing 0.1 --nesterov 1 --wd-exclude 1)
run direct r20 "${R20[@]}"
run winograd r20w "${R20[@]}" --flip 17:8807,18:7742
# resnet18, 64x64, batch 2, one input channel and 7 classes: plain momentum, decay everywhere.
R18=(--arch resnet18 --batch 2 --size 64 --in-ch 1 --classes 7)
run direct r18 "${R18[@]}"
run winograd r18w "${R18[@]}" --flip 10:3492
# resnet50, 64x64, batch 2 (Bottleneck, v1.5 strides), Nesterov with decay exclusion.
run direct r50 --arch resnet50 --batch 2 --size 64 --classes 10 --nesterov 1 --wd-exclude 1 --fp32-floor -- --floor 3
# resnext50_32x4d (grouped 3x3s, 32 groups of 4 to 32 channels: nn/conv_grouped.c), 32x32, batch 4
# (batch 2 would leave layer4's BN 2 values per channel: xhat = +-1, its gradient pure cancellation),
# under the same floor rule as resnet50: measured eval logits 2.6e-7, worst gradient at 0.33 of its
# tolerance (measured against the NCHW run alone; the three-run floor only widens it). The rule still
# fails real bugs in the grouped code: docs/GROUPED.md lists the mutants and how this case fails them.
run direct rx50 --arch resnext50_32x4d --batch 4 --size 32 --classes 10 --nesterov 1 --wd-exclude 1 --fp32-floor -- --floor 3
# wide_resnet50_2 (dense, twice resnet50's 3x3 width, 67M parameters: its reference is most of this
# test's time: 5.6 min and 8.7 GB resident for torch_ref.py with the machine's 2 cores loaded 9x),
# 32x32 batch 4, the same rule: eval logits 8.3e-7, train logits 9.3e-4 (torch's own float32 run: 9.2e-4),
# worst gradient at 0.33 of its tolerance (layer4.2.conv3, 0.99x the worst torch run's error).
run direct w50 --arch wide_resnet50_2 --batch 4 --size 32 --classes 10 --nesterov 1 --wd-exclude 1 --fp32-floor -- --floor 3
# BlurPool (FFCV's rule: a [1,2,1]x[1,2,1]/16 depthwise blur on the input of every conv with stride
# > 1 and >= 16 input channels; torch_ref.py applies it with F.conv2d(groups=C)): resnet20 at an
# odd size (33 -> 17 -> 9, the blur's borders on both sides) and resnet18 (layers 2-4's conv1 and
# downsample.0; the 1-channel stem is not blurred), same tolerances.
run both r20b --arch resnet20 --batch 3 --size 33 --classes 10 --smoothing 0.1 --blurpool 1
run both r18b --arch resnet18 --batch 2 --size 64 --in-ch 1 --classes 7 --blurpool 1
# Stochastic depth (--drop-path): timm's DropPath replayed in torch on the rows ctrain draws
# (torch_ref.py ports its rule; the helper checks the rows match) after each block's bn2, p = 0.5 *
# block / 8 over resnet20's 9 blocks, batch 4; the same fixed tolerances (dropped branches change
# which terms exist, not the conditioning).
run direct r20d --arch resnet20 --batch 4 --size 32 --classes 10 --smoothing 0.1 --drop-path 0.5
printf '%s\n' "${refs[@]}" | "$TORCH_PY" "$ROOT/tools/torch_ref.py" --each-line
for c in "${checks[@]}"; do
  read -r route name hargs <<<"$c"
  read -ra hargs <<<"$hargs"
  for r in direct winograd; do
    [ "$route" = both ] || [ "$route" = $r ] || continue
    echo "($name, $r route)"
    CTRAIN_CPU_WINOGRAD=$([ $r = winograd ] && echo 1 || echo 0) "$HELPER" "$tmp/$name" "${hargs[@]}"
  done
done
echo "parity: all models passed in $((SECONDS - t0)) s"
