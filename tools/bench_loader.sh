#!/usr/bin/env bash
# Loader benchmark, one command: ctrain's loader (LZ4 shard, worker threads) side by side with
# PyTorch DataLoader + torchvision ImageFolder (the same images as JPEG files, the same transforms,
# the same number of worker processes), for 224 crops from 256-short-side images and 32 crops from
# 64x64 images, train (RandomResizedCrop + flip) and eval (Resize + CenterCrop); then ctrain alone
# at the torchvision v2 recipe's 176 px, plain and with its per-image tools.
#   tools/bench_loader.sh            (env: BENCH_DIR=/tmp/ctrain_bench_loader, SECONDS_EACH=5, WORKERS="1 2",
#                                     N224=1000, N32=2000)
# Rates are reported two ways: images per wall-clock second, and images per CPU-second of the whole
# process tree (per core; the stable figure on a shared, noisy machine).
set -euo pipefail
cd "$(dirname "$0")/.."
D=${BENCH_DIR:-/tmp/ctrain_bench_loader}
S=${SECONDS_EACH:-5}
WORKERS=${WORKERS:-"1 2"}
PY=${TORCH_PY:-/usr/bin/python3}
mkdir -p "$D"
# Build just the benchmark (not the CUDA objects) when the build rules exist; else the full build.
if [ -f build/rules.mk ]; then make -r -s -f build/rules.mk build/tools/bench_loader >/dev/null; else ./build.sh >/dev/null; fi
B=build/tools/bench_loader
[ -d "$D/img256" ] || "$PY" tools/bench_loader_torch.py make "$D/img256" --count "${N224:-1000}" --short 256
[ -d "$D/img64" ] || "$PY" tools/bench_loader_torch.py make "$D/img64" --count "${N32:-2000}" --short 64 --square
[ -f "$D/s256.shard" ] || $B pack "$D/img256" "$D/s256.shard"
[ -f "$D/s64.shard" ] || $B pack "$D/img64" "$D/s64.shard"

echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), load average $(cut -d' ' -f1-3 /proc/loadavg)"
$B profile "$D/s256.shard" --crop 224 --count 3000
$B profile "$D/s64.shard" --crop 32 --count 20000
out=$D/results.txt; : > "$out"
for mode in train eval; do
  ev=""; [ $mode = eval ] && ev=--eval
  for w in $WORKERS; do
    $B run "$D/s256.shard" --crop 224 --workers $w --batch 64 --seconds $S $ev | tee -a "$out"
    "$PY" tools/bench_loader_torch.py run "$D/img256" --crop 224 --workers $w --batch 64 --seconds $S $ev | tee -a "$out"
    $B run "$D/s64.shard" --crop 32 --workers $w --batch 256 --seconds $S $ev | tee -a "$out"
    "$PY" tools/bench_loader_torch.py run "$D/img64" --crop 32 --workers $w --batch 256 --seconds $S $ev | tee -a "$out"
  done
done
# The torchvision v2 recipe's per-image cost: its training crop (176) plain, then with
# TrivialAugmentWide, RandomErasing 0.1, repeated augmentation 4 and Mixup 0.2 / CutMix 1.0.
v2=$D/results_v2.txt; : > "$v2"
for w in $WORKERS; do
  $B run "$D/s256.shard" --crop 176 --workers $w --batch 64 --seconds $S | tee -a "$v2"
  $B run "$D/s256.shard" --crop 176 --workers $w --batch 64 --seconds $S --auto-augment ta_wide --random-erase 0.1 \
    --ra-repeats 4 --mixup 0.2 --cutmix 1 | tee -a "$v2"
done
echo
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "v2 recipe at 176 px (img per CPU-second: plain crop, then with the v2 per-image tools):"
grep '^RESULT' "$v2" | sed 's/.*workers=\([0-9]*\).*img_per_cpu_s=\([0-9.]*\).*/  workers \1: \2/'
# Table: one row per (mode, crop, workers).
awk '
/^RESULT/ {
  who=$2; for (i=3;i<=NF;i++) { split($i,kv,"="); v[kv[1]]=kv[2] }
  key=v["mode"] " " v["crop"] " " v["workers"]
  if (!(key in seen)) { seen[key]=1; keys[++n]=key }
  wall[key,who]=v["img_s"]; cpu[key,who]=v["img_per_cpu_s"]; if (who=="ctrain") mem[key]=v["loader_mib"]
}
END {
  printf "| mode | crop | workers | ctrain img/s (wall) | ctrain img/CPU-s | PyTorch img/s (wall) | PyTorch img/CPU-s | per-core ratio | cores for 3,000 img/s (ctrain / PyTorch) | loader MiB |\n"
  printf "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n"
  for (k=1;k<=n;k++) { split(keys[k],a," "); key=keys[k]
    c=cpu[key,"ctrain"]; t=cpu[key,"torch"]
    printf "| %s | %s | %s | %.0f | %.0f | %.0f | %.0f | %.1fx | %.2f / %.1f | %.1f |\n", a[1], a[2], a[3], wall[key,"ctrain"], c, wall[key,"torch"], t, (t>0?c/t:0), (c>0?3000/c:0), (t>0?3000/t:0), mem[key] }
}' "$out"
