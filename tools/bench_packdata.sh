#!/usr/bin/env bash
# packdata throughput and shard size against the source JPEG tree, with a peer in the same run:
# PIL decoding + resizing the same files one by one (what a torchvision ImageFolder loader does per
# image before any packing).
#   tools/bench_packdata.sh [N_IMAGES (300)] [WORKDIR (a temp dir, removed)]
# Needs ./packdata (./build.sh), /usr/bin/python3 with PIL and numpy, /usr/bin/time and bc.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
N=${1:-300}
PY=${TORCH_PY:-/usr/bin/python3}
PD=$ROOT/packdata
[ -x "$PD" ] || { echo "build first: ./build.sh" >&2; exit 1; }
for tool in /usr/bin/time bc; do
  command -v $tool >/dev/null || { echo "needs $tool (Debian packages: time, bc)" >&2; exit 1; }
done
if [ -n "${2:-}" ]; then W=$2; mkdir -p "$W"; else W=$(mktemp -d /tmp/bench_packdata.XXXXXX); trap 'rm -rf "$W"' EXIT; fi

# Photo-like JPEGs: a smooth random field (a few octaves of upsampled noise), edges from a couple
# of shapes, mild sensor noise; 500x375 or 375x500 at quality 90, 10 classes, 10% val.
if [ ! -d "$W/src" ]; then
$PY - "$W/src" "$N" <<'EOF'
import os, sys
import numpy as np
from PIL import Image, ImageDraw
root, n = sys.argv[1], int(sys.argv[2])
rng = np.random.default_rng(0)
for i in range(n):
    w, h = (500, 375) if i % 3 else (375, 500)
    img = np.zeros((h, w, 3), np.float32)
    for cells, amp in ((3, 90), (9, 40), (27, 18)):
        small = rng.uniform(0, 255, (cells, cells, 3)).astype(np.uint8)
        img += (np.asarray(Image.fromarray(small).resize((w, h), Image.BICUBIC), np.float32) - 128) * amp / 128
    img += 128 + rng.normal(0, 4, img.shape)
    im = Image.fromarray(np.clip(img, 0, 255).astype(np.uint8))
    d = ImageDraw.Draw(im)
    for _ in range(3):
        x, y = rng.integers(0, w), rng.integers(0, h)
        d.ellipse([x, y, x + rng.integers(20, 150), y + rng.integers(20, 150)], fill=tuple(int(v) for v in rng.integers(0, 256, 3)))
    split = "val" if (i // 10) % 10 == 0 else "train"
    path = os.path.join(root, split, f"class{i % 10:02d}")
    os.makedirs(path, exist_ok=True)
    im.save(os.path.join(path, f"img{i:05d}.JPEG"), quality=90)
EOF
fi
src_bytes=$(du -sb "$W/src" | cut -f1)
ncores=$(nproc)
echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $ncores cores; $N JPEGs of 500x375, $((src_bytes / 1024)) KiB"
echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg) (other work on the machine makes these numbers noisy)"
# Wall-clock img/s depends on what else the machine runs; img per CPU-second (user + sys of all
# threads) is the steadier figure on a shared machine.
printf '\n| %-44s | %7s | %9s | %13s | %12s |\n' "run" "threads" "img/s" "img/CPU-s" "output KiB"
printf '| %-44s | %7s | %9s | %13s | %12s |\n' "---" "---" "---" "---" "---"
row() { # label, threads, images, wall, cpu, bytes
  printf '| %-44s | %7s | %9.0f | %13.0f | %12s |\n' "$1" "$2" "$(echo "$3 / $4" | bc -l)" "$(echo "$3 / $5" | bc -l)" "$6"
}
run() { # label, threads, packdata flags...
  local label=$1 t=$2; shift 2
  rm -rf "$W/out"
  OMP_NUM_THREADS=$t /usr/bin/time -f "%e %U %S" -o "$W/time" "$PD" "$@" "$W/src" "$W/out" 2>"$W/pack.log" \
    || { cat "$W/pack.log" >&2; exit 1; }
  read -r wall user sys <"$W/time"
  row "$label" "$t" "$N" "$wall" "$(echo "$user + $sys" | bc -l)" $(($(cat "$W/out"/*.shard | wc -c) / 1024))
}
run "packdata lz4, --max-short 256 (default)" 1
run "packdata lz4, --max-short 256 (default)" "$ncores"
run "packdata --lz4hc, --max-short 256" "$ncores" --lz4hc
run "packdata --codec jpeg --quality 90, 256" "$ncores" --codec jpeg --quality 90
run "packdata lz4, --max-short 0 (full size)" "$ncores" --max-short 0
# Peer: PIL, one process, decode + convert + resize short side to 256 (antialiased bilinear).
$PY - "$W/src" "$N" <<'EOF'
import glob, sys, time
from PIL import Image
files = sorted(glob.glob(sys.argv[1] + "/*/*/*.JPEG"))
t0, c0 = time.time(), time.process_time()
for f in files:
    im = Image.open(f).convert("RGB")
    w, h = im.size
    s = 256 / min(w, h)
    im = im.resize((max(1, int(w * s)), max(1, int(h * s))) if min(w, h) > 256 else (w, h), Image.BILINEAR, reducing_gap=None)
    im.tobytes()
dt, dc = time.time() - t0, time.process_time() - c0
print("| %-44s | %7s | %9.0f | %13.0f | %12s |" % ("peer: PIL decode + resize 256 (no packing)", 1, len(files) / dt, len(files) / dc, "-"))
EOF
# Decode side: --verify checks every checksum and decodes every record.
rm -rf "$W/out"; "$PD" "$W/src" "$W/out" 2>/dev/null
ntrain=$("$PD" --info "$W/out/train.shard" | awk '/^records/ {print $2}')
/usr/bin/time -f "%e %U %S" -o "$W/time" "$PD" --verify "$W/out/train.shard" >/dev/null
read -r wall user sys <"$W/time"
row "packdata --verify (crc + LZ4 decode, train)" "$ncores" "$ntrain" "$wall" "$(echo "$user + $sys" | bc -l)" "-"
echo
"$PD" --info "$W/out/train.shard" | grep -E "^(bytes|compression|image size)"
