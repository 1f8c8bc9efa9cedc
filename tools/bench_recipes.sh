#!/usr/bin/env bash
# Recipe ablation on Fashion-MNIST (issue 13), on a fixed number of CPU threads, in one run:
#   tools/bench_recipes.sh [--quick] [--subset N] [--only NAME[,NAME...]] [--out DIR] [--threads N]
# Trains the demo recipe (`train --demo`), then the demo with one element changed at a time (turned
# off if the demo has it, on if not), then the combination of the changes that beat the demo, then
# that combination for one more epoch; prints
# wall time, CPU time and test top-1 (best and final, plain and EMA) of each from its metrics.jsonl.
# Then replays the demo run in PyTorch (tools/torch_train_ref.py: same initial weights, same batches,
# same learning rate every step, same threads) and prints the time each needs to reach the same
# test top-1. Results land in OUT (default build/bench_recipes, build/bench_recipes_quick with --quick):
# OUT/runs/NAME/ (the run, time.txt, log.txt), OUT/results.md (the tables).
# Runs already in OUT are trained again; those not selected by --only are reported as they are.
# The environment passes through to both trainers: on a busy machine set OMP_WAIT_POLICY=passive,
# or OpenMP's spinning threads inflate wall and CPU time alike (docs/BENCHMARKS.md).
set -euo pipefail
cd "$(dirname "$0")/.."

VARIANTS=(demo notta minscale lr04 noprog ema999 ema996x2 mixup cutmix nols blurpool
          tawide randaug erase rarep bce droppath nowdbn lamb v2tools rsbtools combo combo_ep torch)
# What each single-change variant changes in the demo recipe: elements the demo has are turned off
# (notta, nols, noprog: 4 epochs at 28 px), the others on; minscale goes back to the previous demo
# recipe's crops, lr04 tries the rate that won on 4 epochs at 28 px. EMA: ~2340 steps in 5 epochs,
# so 0.999 averages over about the last 1000 steps and 0.996 every 2 steps over about the last 500.
declare -A FLAGS=(
  [demo]="" [notta]="--tta none" [minscale]="--min-scale 0.75" [lr04]="--lr 0.4"
  [noprog]="--epochs 4 --res-start 28"
  [ema999]="--ema 0.999" [ema996x2]="--ema 0.996 --ema-every 2"
  [mixup]="--mixup 0.2" [cutmix]="--cutmix 1.0" [nols]="--label-smoothing 0"
  # BlurPool on the demo's resnet20 (28x28 Fashion-MNIST: stages at 28, 14, 7 px): the blur goes on
  # the input of layer2.0.conv1 and layer2.0.downsample.0 (one shared blur of the 16-channel 28x28
  # map) and of layer3.0.conv1 and layer3.0.downsample.0 (32 channels, 14x14): the only strided
  # convs; the 1-channel stem has stride 1 and fewer than 16 input channels.
  [blurpool]="--blurpool"
  # Issue 26's elements, one at a time on the demo, at the recipes' values where they have one
  # (torchvision's v2 recipe: TrivialAugmentWide, RandomErasing 0.1, 4 repeats -- 3 here, the
  # RSB value, so both recipes' repeat counts are not needed --, no decay on norm layers; RSB
  # A2: RandAugment m7-mstd0.5-inc1, BCE, drop path 0.05, LAMB at A3's 8e-3 and 0.02 decay with
  # biases and BN exempt). The demo keeps its label smoothing 0.1 under --bce (timm's BCE smoothing).
  [tawide]="--auto-augment ta_wide" [randaug]="--auto-augment rand-m7-mstd0.5-inc1"
  [erase]="--random-erase 0.1" [rarep]="--ra-repeats 3" [bce]="--bce" [droppath]="--drop-path 0.05"
  [nowdbn]="--no-wd-bn" [lamb]="--optimizer lamb --no-nesterov --lr 0.008 --wd 0.02 --no-wd-bn"
  # The two recipes' augmentation and loss sets together on the demo's schedule and model.
  [v2tools]="--auto-augment ta_wide --random-erase 0.1 --mixup 0.2 --cutmix 1.0 --mix-prob 1 --ra-repeats 4 --no-wd-bn"
  [rsbtools]="--optimizer lamb --no-nesterov --lr 0.008 --wd 0.02 --no-wd-bn --bce --bce-target-thresh 0.2 --label-smoothing 0 --auto-augment rand-m7-mstd0.5-inc1 --mixup 0.1 --cutmix 1.0 --mix-prob 1 --drop-path 0.05 --ra-repeats 3"
)

usage() {
  cat <<EOF
usage: tools/bench_recipes.sh [--quick] [--subset N] [--only NAME[,NAME...]] [--out DIR] [--threads N]

  --quick        1 epoch per run (2 for combo_ep): checks the script, measures nothing
  --subset N     train on the first N training images and test on the first N/6 test images
                 (packed into OUT/data/): checks the script on a busy machine, measures nothing
  --only NAMES   run only these variants (comma-separated; default: all, in this order):
                   demo      the demo recipe as it is (train --demo)
                   notta     without test-time flip averaging (--tta none)
                   minscale  the crops of the previous demo recipe (--min-scale 0.75)
                   lr04      --lr 0.4 (the best rate for 4 epochs at 28 px)
                   noprog    no progressive resizing: 4 epochs at 28 px
                   ema999    + --ema 0.999
                   ema996x2  + --ema 0.996 --ema-every 2
                   mixup     + --mixup 0.2
                   cutmix    + --cutmix 1.0
                   nols      label smoothing off (--label-smoothing 0)
                   blurpool  + --blurpool (FFCV's BlurPool: a fixed 3x3 blur before layer2.0's and
                             layer3.0's conv1 and downsample.0, the demo resnet20's strided convs)
                   tawide    + --auto-augment ta_wide (torchvision v2's TrivialAugmentWide)
                   randaug   + --auto-augment rand-m7-mstd0.5-inc1 (RSB A1/A2's RandAugment)
                   erase     + --random-erase 0.1
                   rarep     + --ra-repeats 3 (repeated augmentation)
                   bce       + --bce (timm's BinaryCrossEntropy)
                   droppath  + --drop-path 0.05 (stochastic depth)
                   nowdbn    + --no-wd-bn
                   lamb      LAMB: --optimizer lamb --no-nesterov --lr 0.008 --wd 0.02 --no-wd-bn
                   v2tools   torchvision v2's augmentations, mixing, 4 repeats and --no-wd-bn together
                   rsbtools  RSB A2's: LAMB, BCE, RandAugment, Mixup 0.1/CutMix 1, drop path, 3 repeats
                   combo     the demo + every change whose run beat the demo's final top-1
                   combo_ep  combo with one more epoch
                   torch     the demo recipe in PyTorch (replaying a --dump-batches run), time to
                             the same test top-1 as ctrain's demo run (needs demo's run in OUT)
                 combo and combo_ep use the runs of the single elements found in OUT; combo_ep runs
                 one epoch more than combo (noprog's 4 included).
  --out DIR      results directory (default build/bench_recipes, with --quick build/bench_recipes_quick)
  --threads N    CPU threads for both trainers (OMP_NUM_THREADS; default 2)
  -h, --help     this help
EOF
}

die() { echo "bench_recipes.sh: $*" >&2; exit 2; }

QUICK=0 ONLY="" OUT="" THREADS=2 SUBSET=0
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) QUICK=1 ;;
    --only) [ $# -ge 2 ] || die "--only needs a value (variants: ${VARIANTS[*]})"; ONLY=$2; shift ;;
    --only=*) ONLY=${1#--only=} ;;
    --out) [ $# -ge 2 ] || die "--out needs a directory"; OUT=$2; shift ;;
    --out=*) OUT=${1#--out=} ;;
    --threads) [ $# -ge 2 ] || die "--threads needs a number"; THREADS=$2; shift ;;
    --threads=*) THREADS=${1#--threads=} ;;
    --subset) [ $# -ge 2 ] || die "--subset needs a number of images"; SUBSET=$2; shift ;;
    --subset=*) SUBSET=${1#--subset=} ;;
    -h|--help) usage; exit 0 ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
  shift
done
[[ "$THREADS" =~ ^[1-9][0-9]*$ ]] || die "--threads: expected a positive integer, got '$THREADS'"
[[ "$SUBSET" =~ ^[0-9]+$ ]] && { [ "$SUBSET" = 0 ] || [ "$SUBSET" -ge 60 ]; } \
  || die "--subset: expected a number of training images >= 60, got '$SUBSET'"
[ -n "$OUT" ] || OUT=build/bench_recipes$([ $QUICK = 1 ] && echo _quick || true)
SELECTED=()
if [ -z "$ONLY" ]; then
  SELECTED=("${VARIANTS[@]}")
else
  IFS=, read -r -a SELECTED <<<"$ONLY"
  [ ${#SELECTED[@]} -gt 0 ] || die "--only: empty list (variants: ${VARIANTS[*]})"
  for v in "${SELECTED[@]}"; do
    [[ " ${VARIANTS[*]} " == *" $v "* ]] || die "--only: unknown variant '$v' (variants: ${VARIANTS[*]})"
  done
fi
[ "${BENCH_RECIPES_PARSE_ONLY:-0}" = 1 ] && { echo "quick=$QUICK subset=$SUBSET out=$OUT threads=$THREADS only=${SELECTED[*]}"; exit 0; }

[ -x ./train ] || ./build.sh >/dev/null
export OMP_NUM_THREADS=$THREADS
mkdir -p "$OUT/runs"
OUT=$(cd "$OUT" && pwd)
ROOT=$PWD
# train --demo reads shards/fashion-mnist under its working directory: the full set here (packed
# on first use), or with --subset a smaller one made from the same IDX files.
WORKDIR=$ROOT
if [ "$SUBSET" != 0 ]; then
  WORKDIR=$OUT/data
  if [ ! -f "$WORKDIR/shards/fashion-mnist/val.shard" ] || [ "$(cat "$WORKDIR/subset" 2>/dev/null)" != "$SUBSET" ]; then
    rm -rf "$WORKDIR" && mkdir -p "$WORKDIR/idx"
    /usr/bin/python3 - /usr/share/datasets/fashion-mnist "$WORKDIR/idx" "$SUBSET" <<'PY'
import gzip, struct, sys
src, dst, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
for split, k in (("train", n), ("t10k", max(10, n // 6))):
    for kind, item in (("images-idx3", 784), ("labels-idx1", 1)):
        with gzip.open("%s/%s-%s-ubyte.gz" % (src, split, kind)) as f:
            data = f.read()
        hdr = 16 if item == 784 else 8
        out = data[:4] + struct.pack(">I", k) + data[8:hdr] + data[hdr:hdr + k * item]
        with open("%s/%s-%s-ubyte" % (dst, split, kind), "wb") as f:
            f.write(out)
PY
    "$ROOT/packdata" --idx "$WORKDIR/idx" "$WORKDIR/shards/fashion-mnist" >/dev/null
    echo "$SUBSET" >"$WORKDIR/subset"
  fi
fi
EPOCHS=5  # the demo's
if [ $QUICK = 1 ]; then
  EPOCHS=1
  FLAGS[noprog]="--epochs 1 --res-start 28"
fi
{
  echo "# tools/bench_recipes.sh $([ $QUICK = 1 ] && echo --quick) $([ "$SUBSET" != 0 ] && echo "--subset $SUBSET") (threads $THREADS)"
  echo "# $(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)," \
       "$(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores, OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-unset}," \
       "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
} >"$OUT/header.txt"
cat "$OUT/header.txt"

# train NAME EXTRA_FLAGS...: one ctrain run into OUT/runs/NAME, timed by /usr/bin/time.
train() {
  local name=$1; shift
  local dir=$OUT/runs/$name
  mkdir -p "$dir"
  echo "$*" >"$dir/args.txt"
  echo "== $name: train --demo --epochs $EPOCHS $* (load $(cut -d' ' -f1 /proc/loadavg))"
  if ! (cd "$WORKDIR" && /usr/bin/time -f "%e %U %S" -o "$dir/time.txt" "$ROOT/train" --demo --epochs "$EPOCHS" --out "$dir" --overwrite "$@" \
      >"$dir/log.txt" 2>&1); then
    tail -5 "$dir/log.txt" >&2
    echo "bench_recipes.sh: $name failed (log: $dir/log.txt)" >&2
    exit 1
  fi
  grep '^epoch [0-9]*/' "$dir/log.txt" | tail -1
}

for v in "${SELECTED[@]}"; do
  case "$v" in
    combo|combo_ep)
      flags=$(/usr/bin/python3 tools/bench_recipes.py combo "$OUT") || exit 1
      echo "== $v: elements that beat the demo: ${flags:-none}"
      if [ "$v" = combo ]; then
        # shellcheck disable=SC2086
        train combo $flags
      else
        # One epoch more than combo, whose flags may set their own (prog): the last --epochs wins.
        e=$(sed -n 's/.*--epochs \([0-9]*\).*/\1/p' <<<"$flags")
        # shellcheck disable=SC2086
        train combo_ep $flags --epochs $((${e:-$EPOCHS} + 1))
      fi ;;
    torch)
      [ -f "$OUT/runs/demo/metrics.jsonl" ] || die "torch: needs the demo run in $OUT (run --only demo,torch)"
      dump=$OUT/runs/torch/dump
      mkdir -p "$OUT/runs/torch"
      echo "== torch: dumping the demo run's batches (ctrain, not timed for the comparison)"
      rm -rf "$dump"
      (cd "$WORKDIR" && "$ROOT/train" --demo --epochs "$EPOCHS" --out "$OUT/runs/torch/ctrain" --overwrite \
        --dump-batches "$dump" >"$OUT/runs/torch/dump_log.txt" 2>&1) || { tail -5 "$OUT/runs/torch/dump_log.txt" >&2; exit 1; }
      echo "== torch: replaying them in PyTorch (load $(cut -d' ' -f1 /proc/loadavg))"
      # The demo's recipe, as torch_train_ref.py spells it (DEMO_ARGS in trainer/config.c).
      /usr/bin/time -f "%e %U %S" -o "$OUT/runs/torch/time.txt" /usr/bin/python3 tools/torch_train_ref.py train \
        --arch resnet20 --in-ch 1 --classes 10 --mean 0.286 --std 0.353 --dump "$dump" --momentum 0.9 --wd 5e-4 \
        --nesterov 1 --smoothing 0.1 --tta flip --epoch-log --out "$OUT/runs/torch/torch.json" | tee "$OUT/runs/torch/log.txt"
      rm -rf "$dump" ;;  # ~50 MB an epoch: not worth keeping
    *) # shellcheck disable=SC2086
      train "$v" ${FLAGS[$v]} ;;
  esac
done

/usr/bin/python3 tools/bench_recipes.py report "$OUT" | tee "$OUT/results.md"
