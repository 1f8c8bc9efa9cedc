#!/usr/bin/env bash
# FFCV's loader beside ctrain's, per CPU-second, at the torchvision v2 recipe's 176 px (issue 26:
# ctrain's loader must stay at least 3x FFCV's raw loader per CPU-second with the v2 recipe's
# augmentations on). Installs what FFCV needs itself, never on the test suite's path:
#   apt-get: libopencv-dev libturbojpeg0-dev pkg-config (FFCV's C extension links both; needs root)
#   pip:     ffcv, numba, opencv-python in a venv at build/ffcv-venv over Debian's /usr/bin/python3
#            with --system-site-packages, so FFCV runs on the torch/torchvision 0.14 that the rest
#            of the repository tests against (numpy held at Debian's, which that torch was built for)
# Then the same 500 images as docs/BENCHMARKS.md (bench_loader_torch.py make --count 500 --short 256)
# as an FFCV .beton (RGBImageField write_mode jpg and raw) and as ctrain's shard, and these rows,
# each twice (one worker, batch 64, SECONDS_EACH s steady state after a warm-up epoch):
#   ffcv-jpg / ffcv-raw:  RandomResizedCropRGBImageDecoder((176,176)), RandomHorizontalFlip, ToTensor
#   ffcv-*+ta_wide:       the same + torchvision TrivialAugmentWide per image on the uint8 tensors
#   ctrain plain:         RandomResizedCrop + flip at 176
#   ctrain v2 tools:      + --auto-augment ta_wide --random-erase 0.1 --ra-repeats 4 --mixup 0.2 --cutmix 1
#   ctrain ta_wide:       + --auto-augment ta_wide only (the like-for-like row to ffcv-*+ta_wide)
#   tools/bench_loader_ffcv.sh [setup|run|all]   (default all; env BENCH_DIR=/tmp/ctrain_bench_ffcv,
#                                                 SECONDS_EACH=5, REPEATS=2)
set -euo pipefail
cd "$(dirname "$0")/.."
D=${BENCH_DIR:-/tmp/ctrain_bench_ffcv}
S=${SECONDS_EACH:-5}
R=${REPEATS:-2}
V=build/ffcv-venv
what=${1:-all}
mkdir -p "$D" build

setup() {
  local need=()
  for p in libopencv-dev libturbojpeg0-dev pkg-config; do dpkg -s $p >/dev/null 2>&1 || need+=($p); done
  if [ ${#need[@]} -gt 0 ]; then
    [ "$(id -u)" = 0 ] || { echo "bench_loader_ffcv: apt-get install ${need[*]} needs root; run it as root or install them first" >&2; exit 1; }
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${need[@]}"
  fi
  pkg-config --exists opencv4 libturbojpeg || { echo "bench_loader_ffcv: pkg-config finds no opencv4 / libturbojpeg" >&2; exit 1; }
  [ -x $V/bin/python ] || /usr/bin/python3 -m venv --system-site-packages $V
  local np; np=$(/usr/bin/python3 -c 'import numpy; print(numpy.__version__)')
  echo "numpy==$np" > $V/constraints.txt
  # opencv-python 4.11+ wheels want numpy 2, which Debian's torch 1.13 was not built for.
  echo "opencv-python<4.11" >> $V/constraints.txt
  PIP_CONSTRAINT=$V/constraints.txt $V/bin/pip install -q ffcv numba opencv-python
  $V/bin/python -c 'import ffcv, numba, cv2, torch, torchvision; print("ffcv", ffcv.__version__ if hasattr(ffcv, "__version__") else "?", "numba", numba.__version__, "cv2", cv2.__version__, "torch", torch.__version__, "torchvision", torchvision.__version__)'
}

run() {
  if [ -f build/rules.mk ]; then make -r -s -f build/rules.mk build/tools/bench_loader >/dev/null; else ./build.sh >/dev/null; fi
  local B=build/tools/bench_loader P=$V/bin/python
  [ -d "$D/img256" ] || /usr/bin/python3 tools/bench_loader_torch.py make "$D/img256" --count 500 --short 256
  [ -f "$D/s256.shard" ] || $B pack "$D/img256" "$D/s256.shard"
  for m in jpg raw; do [ -f "$D/$m.beton" ] || $P tools/bench_loader_ffcv.py write "$D/img256" "$D/$m.beton" --mode $m; done
  echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), load average $(cut -d' ' -f1-3 /proc/loadavg)"
  local out=$D/results.txt; : > "$out"
  local common="--crop 176 --workers 1 --batch 64 --seconds $S"
  # FFCV repeats inside one process (its numba compile takes a minute per process); ctrain's runs
  # are separate processes, interleaved between FFCV's.
  for t in "" --ta-wide; do
    for m in raw jpg; do
      $P tools/bench_loader_ffcv.py run "$D/$m.beton" $common $t --repeats "$R" | tee -a "$out"
      [ $m = jpg ] && continue
      for rep in $(seq "$R"); do
        if [ -z "$t" ]; then
          $B run "$D/s256.shard" $common | sed 's/^RESULT ctrain /RESULT ctrain-plain /' | tee -a "$out"
          $B run "$D/s256.shard" $common --auto-augment ta_wide --random-erase 0.1 --ra-repeats 4 --mixup 0.2 --cutmix 1 \
            | sed 's/^RESULT ctrain /RESULT ctrain-v2tools /' | tee -a "$out"
        else
          $B run "$D/s256.shard" $common --auto-augment ta_wide | sed 's/^RESULT ctrain /RESULT ctrain+ta_wide /' | tee -a "$out"
        fi
      done
    done
  done
  echo
  echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "img per CPU-second at 176 px, one worker, batch 64 (each run):"
  awk '/^RESULT/ { for (i=3;i<=NF;i++) { split($i,kv,"="); if (kv[1]=="img_per_cpu_s") v[$2]=v[$2] " " kv[2] } if (!($2 in seen)) { seen[$2]=1; k[++n]=$2 } }
       END { for (i=1;i<=n;i++) printf "  %-18s%s\n", k[i], v[k[i]] }' "$out"
}

case $what in
  setup) setup ;;
  run) run ;;
  all) setup; run ;;
  *) echo "usage: $0 [setup|run|all]" >&2; exit 2 ;;
esac
