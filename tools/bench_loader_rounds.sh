#!/bin/bash
# Interleaved rounds on a shared machine: per round the loader BEFORE, the loader AFTER (two
# bench_loader binaries) and FFCV's raw loader, all `nice -n 5`, images per CPU-second of each.
# Only ratios within one window mean anything when other jobs share the cores (docs/BENCHMARKS.md,
# "The v2 recipe's per-image tools"). Env: SHARD (bench_loader pack of the images), BETON (FFCV's
# raw.beton of the same images, tools/bench_loader_ffcv.sh), PY (the FFCV venv's python), BEFORE,
# AFTER, ROUNDS (default 6), FLAGS (default: the torchvision v2 recipe's tools at 176 px).
set -u
cd "$(dirname "$0")/.."
SHARD=${SHARD:?set SHARD}; BETON=${BETON:?set BETON}; PY=${PY:-build/ffcv-venv/bin/python}
BEFORE=${BEFORE:?set BEFORE}; AFTER=${AFTER:-build/tools/bench_loader}; ROUNDS=${ROUNDS:-6}
FLAGS=${FLAGS:---crop 176 --workers 1 --batch 64 --seconds 5 --auto-augment ta_wide --random-erase 0.1 --ra-repeats 4 --mixup 0.2 --cutmix 1}
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(date -u), before $BEFORE after $AFTER"
load() { cut -d' ' -f1 /proc/loadavg; }
one() { echo "$1 load $(load) $(nice -n 5 "$2" run "$SHARD" $FLAGS 2>&1 | grep -o 'img_per_cpu_s=[0-9.]*')"; }
for i in $(seq "$ROUNDS"); do
  one before "$BEFORE"
  one after "$AFTER"
  echo "ffcv load $(load) $(nice -n 5 "$PY" tools/bench_loader_ffcv.py run "$BETON" --crop 176 --workers 1 --batch 64 \
      --seconds 5 --repeats 1 2>&1 | grep RESULT | grep -o 'img_per_cpu_s=[0-9.]*')"
done
echo "done $(date -u) load $(cut -d' ' -f1-3 /proc/loadavg)"
