#!/usr/bin/env bash
# packdata end to end: images written by PIL, packed, read back by an independent Python reader
# (tests/shard_ref.py) and compared with PIL's own decode of the sources; class-table rules, bad
# files, --strict, thread-count independence, --verify, interrupted runs, --idx, flag errors.
set -euo pipefail
ROOT=${CTRAIN_ROOT:-$(cd "$(dirname "$0")/.." && pwd)}
BIN=${CTRAIN_BIN:-$ROOT}
PY=${TORCH_PY:-/usr/bin/python3}
PD=$BIN/packdata
T=$(mktemp -d /tmp/test_packdata.XXXXXX)
trap 'rm -rf "$T"' EXIT
export PYTHONPATH=$ROOT/tests
fails=0
ok() { echo "ok   $*"; }
bad() { echo "FAIL $*"; fails=$((fails + 1)); }
expect_fail() { # description, needle, command...: must exit non-zero with needle in stderr
  local what=$1 needle=$2; shift 2
  if "$@" >"$T/out.log" 2>"$T/err.log"; then bad "$what: exit 0"; return; fi
  if grep -qF -- "$needle" "$T/err.log"; then ok "$what"; else bad "$what: no '$needle' in: $(head -3 "$T/err.log")"; fi
}
$PY -c 'import PIL, numpy' || { echo "needs $PY with PIL and numpy"; exit 1; }

# ---------------------------------------------------------------------------------------------
# A tree covering the decoders: baseline/progressive/gray/CMYK JPEG, PNG of every kind, a PNG named
# .JPEG, plus files that must be ignored or skipped.
$PY - "$T/src" <<'EOF'
import os, sys
import numpy as np
from PIL import Image
root = sys.argv[1]
rng = np.random.default_rng(1)
def img(h, w, mode="RGB"):
    y, x = np.mgrid[0:h, 0:w]
    a = np.stack([x * 255 // max(w - 1, 1), y * 255 // max(h - 1, 1), (x * 3 + y * 5) % 256], -1)
    a = np.clip(a + rng.integers(-25, 26, a.shape), 0, 255).astype(np.uint8)
    return Image.fromarray(a, "RGB").convert(mode)
def save(split, cls, name, im, **kw):
    d = os.path.join(root, split, cls)
    os.makedirs(d, exist_ok=True)
    im.save(os.path.join(d, name), **kw)
for i in range(3):
    save("train", "ant", f"a{i}.jpg", img(40 + i, 52 - i), quality=92)
save("train", "ant", "prog.jpg", img(33, 47), progressive=True, quality=85)
save("train", "ant", "gray.jpg", img(30, 20, "L"))
save("train", "ant", "cmyk.jpg", img(24, 36, "CMYK"))
save("train", "bee", "png_named.JPEG", img(21, 19), format="PNG")
save("train", "bee", "pal.png", img(17, 23, "P"))
save("train", "bee", "rgba.png", img(25, 15, "RGBA"))
save("train", "bee", "la.png", img(12, 30, "LA"))
save("train", "bee", "gray1.png", img(16, 16, "1"))
save("train", "bee", "interlaced.png", img(19, 27), interlace=1)
a16 = (rng.integers(0, 65536, (14, 18, 3))).astype(">u2")
with open(os.path.join(root, "train", "bee", "rgb16.png"), "wb") as f:  # PIL cannot write 16-bit RGB: by hand
    import zlib, struct
    def chunk(t, d): return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d))
    rows = b"".join(b"\0" + a16[y].tobytes() for y in range(14))
    f.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 18, 14, 16, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))
os.makedirs(os.path.join(root, "train", "bee", "sub"), exist_ok=True)
save("train", "bee/sub", "deep.jpg", img(22, 22))
save("train", "cow", "c0.jpg", img(45, 30))
save("val", "ant", "v0.jpg", img(28, 28))
save("val", "cow", "v1.png", img(26, 31))
os.makedirs(os.path.join(root, "val", "bee"), exist_ok=True)  # empty val class: fine
open(os.path.join(root, "train", "cow", "README.txt"), "w").write("not an image, ignored\n")
open(os.path.join(root, "train", "cow", "noext"), "wb").write(b"\xff\xd8\xff garbage")  # no image extension: ignored
EOF
cp -r "$T/src" "$T/clean"  # the tree without bad files, for --strict's counterpart
# Bad files: zero bytes, truncated JPEG, corrupt PNG, text named .jpg.
: >"$T/src/train/ant/zero.jpg"
head -c 300 "$T/src/train/ant/a0.jpg" >"$T/src/train/ant/trunc.jpg"
$PY -c "
import sys; b=bytearray(open(sys.argv[1],'rb').read()); b[40:60]=b'\x00'*20; open(sys.argv[2],'wb').write(bytes(b))" \
  "$T/src/train/bee/pal.png" "$T/src/train/bee/corrupt.png"
echo "hello" >"$T/src/train/cow/text.jpg"

# ---------------------------------------------------------------------------------------------
# Round trip without resizing: every record equals PIL's decode of its source.
"$PD" --max-short 0 "$T/src" "$T/out" 2>"$T/pack.log" || { cat "$T/pack.log"; bad "packdata on the test tree"; }
grep -q "skipped 4 files" "$T/pack.log" && ok "4 bad files skipped and counted" || bad "skip count: $(tail -3 "$T/pack.log")"
for f in zero.jpg trunc.jpg corrupt.png text.jpg; do
  grep -q "skipping .*$f: " "$T/pack.log" && ok "reported $f with a reason" || bad "$f not reported"
done
! grep -q "README.txt\|noext" "$T/pack.log" && ok "non-image files ignored silently" || bad "non-image file mentioned"
check_tree() { # shard dir, src dir, channels, max_short
$PY - "$@" <<'EOF'
import os, sys
import numpy as np
from PIL import Image
import shard_ref
out, src, C, max_short = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
mode = "RGB" if C == 3 else "L"
fails = 0
def files(split, classes):
    # packdata's order: class by class; in a folder its files sorted, then subfolders sorted.
    res = []
    def walk(d, label):
        names = sorted(os.listdir(d))
        for n in names:
            p = os.path.join(d, n)
            if os.path.isfile(p) and os.path.splitext(n)[1].lower() in (".jpg", ".jpeg", ".png"):
                try:
                    Image.open(p).convert(mode)
                    res.append((p, label))
                except Exception:
                    pass
        for n in names:
            if os.path.isdir(os.path.join(d, n)):
                walk(os.path.join(d, n), label)
    for c in sorted(os.listdir(os.path.join(src, split))):
        walk(os.path.join(src, split, c), classes.index(c))
    return res
train = shard_ref.read_shard(os.path.join(out, "train.shard"))
classes = train["classes"]
if classes != sorted(os.listdir(os.path.join(src, "train"))):
    print("FAIL class table", classes); fails += 1
for split in ("train", "val"):
    sh = shard_ref.read_shard(os.path.join(out, split + ".shard"))
    if sh["classes"] != classes:
        print("FAIL", split, "class table differs from train's"); fails += 1
    want = files(split, classes)
    if len(want) != len(sh["records"]):
        print(f"FAIL {split}: {len(sh['records'])} records, expected {len(want)}"); fails += 1; continue
    worst = 0
    for i, (path, label) in enumerate(want):
        r = sh["records"][i]
        got = shard_ref.decode(sh, i).astype(np.int32)
        ref = Image.open(path).convert(mode)
        if max_short and min(ref.size) > max_short:
            w, h = ref.size
            size = (max_short, max_short * h // w) if w <= h else (max_short * w // h, max_short)
            ref = ref.resize(size, Image.BILINEAR, reducing_gap=None)
        ref = np.asarray(ref).reshape(ref.size[1], ref.size[0], C).astype(np.int32)
        if r["label"] != label or got.shape != ref.shape:
            print(f"FAIL {split} record {i} ({path}): label {r['label']} shape {got.shape}, expected {label} {ref.shape}")
            fails += 1; continue
        # Exact for decoding (same libjpeg-turbo / zlib); CMYK conversion and the resize filter may
        # round differently by one level.
        tol = 1 if ("cmyk" in path or max_short) else 0
        d = int(np.abs(got - ref).max())
        worst = max(worst, d)
        if d > tol:
            print(f"FAIL {split} record {i} ({path}): max pixel difference {d} > {tol}"); fails += 1
    print(f"{split}: {len(want)} records match PIL (worst difference {worst})")
sys.exit(1 if fails else 0)
EOF
}
check_tree "$T/out" "$T/src" 3 0 && ok "round trip, 3 channels: pixels equal PIL's decode" || bad "round trip rgb"

# Gray, resized (short side 16), LZ4-HC; both thread counts must give the same bytes.
OMP_NUM_THREADS=1 "$PD" --channels 1 --max-short 16 --lz4hc "$T/clean" "$T/g1" 2>/dev/null
OMP_NUM_THREADS=2 "$PD" --channels 1 --max-short 16 --lz4hc "$T/clean" "$T/g2" 2>/dev/null
check_tree "$T/g1" "$T/clean" 1 16 && ok "gray + resize: matches PIL (within 1)" || bad "gray/resize round trip"
cmp -s "$T/g1/train.shard" "$T/g2/train.shard" && cmp -s "$T/g1/val.shard" "$T/g2/val.shard" \
  && ok "byte-identical output with 1 and 2 threads" || bad "output differs with thread count"

# JPEG payloads: PIL decodes them (through shard_ref) to what PIL gets by JPEG-compressing the
# lossless pixels itself at the same quality (same libjpeg defaults: 4:2:0, quality tables).
"$PD" --codec jpeg --quality 95 --max-short 0 "$T/clean" "$T/j" 2>/dev/null && "$PD" --verify "$T/j/train.shard" >/dev/null \
  && ok "--codec jpeg packs and verifies" || bad "--codec jpeg"
$PY - "$T/j" "$T/out" <<'EOF' && ok "jpeg payloads match PIL's own JPEG round trip of the pixels" || bad "jpeg payloads"
import io, sys, numpy as np, shard_ref
from PIL import Image
j = shard_ref.read_shard(sys.argv[1] + "/train.shard"); l = shard_ref.read_shard(sys.argv[2] + "/train.shard")
assert j["codec"] == 2 and len(j["records"]) == len(l["records"])
worst = 0
for i in range(len(j["records"])):
    a = shard_ref.decode(j, i).astype(int)
    buf = io.BytesIO(); Image.fromarray(shard_ref.decode(l, i)).save(buf, "JPEG", quality=95)
    b = np.asarray(Image.open(buf).convert("RGB")).astype(int)
    assert a.shape == b.shape, i
    worst = max(worst, np.abs(a - b).max())
print("worst difference to PIL's JPEG round trip:", worst)
assert worst <= 1
EOF

# ---------------------------------------------------------------------------------------------
# Class tables, --strict, single split, empty input.
mkdir -p "$T/src/val/yak" && cp "$T/src/val/ant/v0.jpg" "$T/src/val/yak/"
expect_fail "val class absent from train is an error naming it" "val/yak" "$PD" "$T/src" "$T/o2"
rm -rf "$T/src/val/yak"
expect_fail "--strict: a bad file is fatal" "(--strict)" "$PD" --strict "$T/src" "$T/o3"
[ ! -e "$T/o3/train.shard" ] && [ -z "$(ls "$T/o3" 2>/dev/null)" ] && ok "--strict failure leaves no file" || bad "--strict left files: $(ls "$T/o3")"
"$PD" --strict --split train2 "$T/clean/train" "$T/o4" 2>/dev/null && [ -f "$T/o4/train2.shard" ] \
  && ok "single split -> DST/NAME.shard" || bad "single split"
cp -r "$T/clean/train" "$T/inside"
"$PD" "$T/inside" "$T/inside/shards" 2>/dev/null && "$PD" "$T/inside" "$T/inside/shards" 2>/dev/null \
  && "$PD" --info "$T/inside/shards/train.shard" | grep -q "^classes *3 " && ok "DST inside SRC is not taken for a class" \
  || bad "DST inside SRC: $("$PD" --info "$T/inside/shards/train.shard" | grep classes)"
mkdir -p "$T/empty/train/a"; echo x >"$T/empty/train/a/x.txt"
expect_fail "zero usable images is an error" "no image files" "$PD" "$T/empty" "$T/o5"
mkdir -p "$T/allbad/cls"; : >"$T/allbad/cls/z.jpg"
expect_fail "only undecodable images is an error" "could be decoded" "$PD" "$T/allbad" "$T/o6"
[ ! -e "$T/o6/train.shard" ] && ok "...and leaves no file" || bad "all-bad run left a file"

# ---------------------------------------------------------------------------------------------
# --info, --verify, a flipped payload byte.
"$PD" --info "$T/out/train.shard" >"$T/info.log" && grep -q "^records *15" "$T/info.log" && grep -q "compression" "$T/info.log" \
  && grep -q "histogram" "$T/info.log" && ok "--info" || bad "--info: $(cat "$T/info.log")"
"$PD" --verify "$T/out/train.shard" >/dev/null && ok "--verify passes a good shard" || bad "--verify on a good shard"
cp "$T/out/train.shard" "$T/flip.shard"
off=$($PY -c "import shard_ref,sys; s=shard_ref.read_shard(sys.argv[1]); r=s['records'][5]; print(r['offset']+r['stored']//2)" "$T/flip.shard")
$PY -c "import sys; f=open(sys.argv[1],'r+b'); f.seek(int(sys.argv[2])); b=f.read(1); f.seek(int(sys.argv[2])); f.write(bytes([b[0]^0x10]))" "$T/flip.shard" "$off"
expect_fail "--verify catches a flipped payload byte (names the record)" "record 5" "$PD" --verify "$T/flip.shard"
head -c 1000 "$T/out/train.shard" >"$T/trunc.shard"
expect_fail "truncated shard is rejected by name" "trunc.shard" "$PD" --info "$T/trunc.shard"

# ---------------------------------------------------------------------------------------------
# Interrupted runs: SIGKILL leaves only a temporary that does not open; SIGTERM removes it.
$PY - "$T/big" <<'EOF'
import os, sys, numpy as np
from PIL import Image
rng = np.random.default_rng(2)
d = os.path.join(sys.argv[1], "c"); os.makedirs(d)
for i in range(40):
    Image.fromarray(rng.integers(0, 256, (600, 800, 3), dtype=np.uint8)).save(f"{d}/{i:03d}.png", compress_level=0)
EOF
for sig in KILL TERM; do
  rm -rf "$T/ko"
  OMP_NUM_THREADS=1 "$PD" --max-short 0 --lz4hc "$T/big" "$T/ko" 2>/dev/null & pid=$!
  for _ in $(seq 1 500); do ls "$T/ko"/train.shard.tmp.* >/dev/null 2>&1 && break; sleep 0.01; done
  sleep 0.2
  kill -$sig $pid 2>/dev/null || true
  wait $pid 2>/dev/null || true
  if [ -e "$T/ko/train.shard" ]; then bad "SIG$sig: packdata finished before the kill (test too small?)"; continue; fi
  tmp=$(ls "$T/ko"/train.shard.tmp.* 2>/dev/null || true)
  if [ $sig = KILL ]; then
    [ -n "$tmp" ] && expect_fail "SIGKILL: the leftover temporary is not a valid shard" "not a shard" "$PD" --info "$tmp" \
      || ok "SIGKILL: no file left"
  else
    [ -z "$tmp" ] && ok "SIGTERM: temporary removed, no output file" || bad "SIGTERM left $tmp"
  fi
done

# ---------------------------------------------------------------------------------------------
# --idx (Fashion-MNIST from Debian's dataset-fashion-mnist), checked against the IDX files.
FM=/usr/share/datasets/fashion-mnist
if [ -d $FM ]; then
  "$PD" --idx $FM "$T/fm" 2>/dev/null && ok "--idx packs Fashion-MNIST" || bad "--idx"
  $PY - $FM "$T/fm" <<'EOF' && ok "--idx: counts, labels and pixels match the IDX files" || bad "--idx contents"
import gzip, sys, numpy as np, shard_ref
src, out = sys.argv[1], sys.argv[2]
for split, pre, n in (("train", "train", 60000), ("val", "t10k", 10000)):
    img = np.frombuffer(gzip.open(f"{src}/{pre}-images-idx3-ubyte.gz").read()[16:], np.uint8).reshape(-1, 28, 28, 1)
    lab = np.frombuffer(gzip.open(f"{src}/{pre}-labels-idx1-ubyte.gz").read()[8:], np.uint8)
    s = shard_ref.read_shard(f"{out}/{split}.shard", check_crc=False)
    assert len(s["records"]) == n == len(lab), split
    assert s["classes"][0] == "T-shirt/top" and s["classes"][9] == "Ankle boot" and len(s["classes"]) == 10
    assert [r["label"] for r in s["records"]] == lab.tolist()
    for i in (0, 1, n // 2, n - 1):
        assert (shard_ref.decode(s, i) == img[i]).all(), (split, i)
EOF
fi

# Bad IDX input: each error names the file, and nothing is written.
mkdir -p "$T/idxbad"
$PY - "$T/idxbad" <<'EOF'
import gzip, struct, sys
d = sys.argv[1]
def w(name, magic, dims, data):
    with gzip.open(f"{d}/{name}.gz", "wb") as f:
        f.write(struct.pack(">I", magic) + b"".join(struct.pack(">I", x) for x in dims) + data)
w("train-images-idx3-ubyte", 0x803, (3, 2, 2), bytes(12))
w("train-labels-idx1-ubyte", 0x801, (3,), bytes([0, 1, 2]))
w("t10k-images-idx3-ubyte", 0x803, (2, 2, 2), bytes(8))
w("t10k-labels-idx1-ubyte", 0x801, (2,), bytes([0, 1]))
EOF
"$PD" --idx "$T/idxbad" "$T/idxok" 2>/dev/null && [ "$("$PD" --info "$T/idxok/val.shard" | awk '/^records/ {print $2}')" = 2 ] \
  && ok "--idx on a small hand-made IDX set" || bad "--idx small set"
cp -r "$T/idxbad" "$T/idx1"; $PY -c "import gzip,sys; gzip.open(sys.argv[1],'wb').write(b'\0\0\x08\x01\0\0\0\x02\0')" "$T/idx1/t10k-labels-idx1-ubyte.gz"
expect_fail "--idx: truncated labels named" "t10k-labels-idx1-ubyte.gz: truncated" "$PD" --idx "$T/idx1" "$T/idxo1"
[ ! -e "$T/idxo1/train.shard" ] && ok "--idx: nothing written on bad input" || bad "--idx wrote train.shard despite bad val input"
cp -r "$T/idxbad" "$T/idx2"; $PY -c "import gzip,sys; gzip.open(sys.argv[1],'wb').write(b'\0\0\x08\x02\0\0\0\x03\0\0\0\x02\0\0\0\x02'+bytes(12))" "$T/idx2/train-images-idx3-ubyte.gz"
expect_fail "--idx: wrong magic named" "train-images-idx3-ubyte.gz: IDX magic" "$PD" --idx "$T/idx2" "$T/idxo2"
cp -r "$T/idxbad" "$T/idx3"; $PY -c "import gzip,sys; gzip.open(sys.argv[1],'wb').write(b'\0\0\x08\x01\0\0\0\x03'+bytes([0,1,10]))" "$T/idx3/train-labels-idx1-ubyte.gz"
expect_fail "--idx: label out of range named" "train-labels-idx1-ubyte.gz: label 10" "$PD" --idx "$T/idx3" "$T/idxo3"
cp -r "$T/idxbad" "$T/idx4"; rm "$T/idx4/t10k-images-idx3-ubyte.gz"
expect_fail "--idx: missing file named" "t10k-images-idx3-ubyte" "$PD" --idx "$T/idx4" "$T/idxo4"

# ---------------------------------------------------------------------------------------------
# Flags.
"$PD" --help | grep -q -- "--max-short N" && ok "--help" || bad "--help"
expect_fail "unknown flag" "--frobnicate" "$PD" --frobnicate "$T/src" "$T/o7"
expect_fail "bad --channels" "--channels" "$PD" --channels 2 "$T/src" "$T/o7"
expect_fail "bad --max-short" "--max-short" "$PD" --max-short abc "$T/src" "$T/o7"
expect_fail "bad --codec" "--codec" "$PD" --codec webp "$T/src" "$T/o7"
expect_fail "missing DST" "DST" "$PD" "$T/src"
# packdata's errors carry its own name, and a missing argument is one line, not the whole --help.
expect_fail "errors say packdata" "packdata: error: expected SRC/ and DST/ (got 1 path); see packdata --help" "$PD" "$T/src"
grep -q "usage" "$T/err.log" && bad "a missing DST prints the usage" || ok "a missing DST prints only the error"
expect_fail "missing SRC directory" "not a directory" "$PD" "$T/nope" "$T/o7"

echo "$fails failed"
[ $fails = 0 ]
