#!/usr/bin/env bash
# train predict on a short run's model.safetensors: a folder walked in name order, JPEG/PNG (gray
# too), an undecodable file reported by name and skipped (exit status 1), class names from the
# file's metadata and --classes, the table and JSON formats, and the logits of an image already at
# the crop size equal to ctrain's eval forward on the same normalised pixels (tests/helper_stio).
source "$(dirname "$0")/train_lib.sh"
H=$CTRAIN_BUILD/tests/helper_stio
[ -x "$H" ] || fail "missing $H"
make_synth "$TMP/d" 64 20 16
"$TRAIN" "${SMALL_FLAGS[@]}" --epochs 1 --out "$TMP/run" "$TMP/d" > /dev/null 2> "$TMP/stderr" || { cat "$TMP/stderr"; fail "training run failed"; }
W=$TMP/run/model.safetensors

"$PIPPY" - "$TMP/img" "$TMP/x.safetensors" <<'PY' || fail "making images"
import os, sys, numpy as np
from PIL import Image
from safetensors.numpy import save_file
d = sys.argv[1]
os.makedirs(os.path.join(d, "sub"))
rng = np.random.default_rng(3)
a = rng.integers(0, 256, (16, 16, 3), dtype=np.uint8)
Image.fromarray(a).save(os.path.join(d, "a.png"))
Image.fromarray(rng.integers(0, 256, (30, 40, 3), dtype=np.uint8)).save(os.path.join(d, "b.jpg"), quality=90)
Image.fromarray(rng.integers(0, 256, (20, 20), dtype=np.uint8)).save(os.path.join(d, "sub", "c.png"))
open(os.path.join(d, "bad.jpg"), "wb").write(b"\xff\xd8\xff\xe0 not really a jpeg")
mean, std = np.array([0.485, 0.456, 0.406], np.float32), np.array([0.229, 0.224, 0.225], np.float32)
x = ((a.astype(np.float32) / np.float32(255) - mean) / std)[None]
save_file({"x": np.ascontiguousarray(x)}, sys.argv[2])
PY
"$H" eval resnet20 3 10 "$W" "$TMP/x.safetensors" "$TMP/ref.safetensors" || fail "ctrain eval"

rc=0; "$TRAIN" predict --weights "$W" --format json --logits "$TMP/img" > "$TMP/out.jsonl" 2> "$TMP/stderr" || rc=$?
cat "$TMP/stderr"
[ "$rc" = 1 ] || fail "exit status $rc with an undecodable file (want 1)"
grep -q "bad.jpg" "$TMP/stderr" || fail "the undecodable file is not named on stderr"
"$PIPPY" - "$TMP/out.jsonl" "$TMP/ref.safetensors" "$TMP/img" <<'PY' || fail "predict --format json"
import json, sys, numpy as np
from safetensors.numpy import load_file
recs = [json.loads(l) for l in open(sys.argv[1])]
d = sys.argv[3]
assert [r["file"] for r in recs] == [d + "/a.png", d + "/b.jpg", d + "/bad.jpg", d + "/sub/c.png"], [r["file"] for r in recs]
assert "error" in recs[2] and "top" not in recs[2], recs[2]
for r in recs[:2] + recs[3:]:
    top = r["top"]
    assert len(top) == 5 and len(r["logits"]) == 10
    probs = [t["prob"] for t in top]
    assert probs == sorted(probs, reverse=True) and 0 < sum(probs) <= 1 + 1e-6, probs
    assert all(t["name"] == "class%02d" % t["index"] for t in top), top
    lg = np.array(r["logits"]); p = np.exp(lg - lg.max()); p /= p.sum()
    assert abs(p[top[0]["index"]] - probs[0]) < 1e-6 and top[0]["index"] == int(lg.argmax())
ref = load_file(sys.argv[2])["logits"][0]
got = np.array(recs[0]["logits"], np.float32)
rel = np.linalg.norm(got - ref) / np.linalg.norm(ref)
print("a.png (16x16, the crop size): predict vs ctrain eval logits rel. norm %.2e, max abs %.2e" % (rel, np.abs(got - ref).max()))
assert rel <= 1e-5, rel
PY
ok "json: folder order, formats, decode failure, logits"

# The resize path: a 40x30 PNG through predict --resize 20 against the same preprocessing done with
# PIL as torchvision's eval transforms do it (Resize(20): short side 20, long int(20 * 40 / 30) = 26,
# bilinear with antialias; CenterCrop(16): offsets round((26 - 16) / 2), round((20 - 16) / 2)).
# ctrain resamples in float and PIL in fixed point, so about a tenth of the pixels differ by one
# level or two (tests/test_resample.c bounds that): the logits agree to ~1e-2, and the check is
# that they are several times closer than those of the crop one pixel lower (the geometry).
"$PIPPY" - "$TMP/b.png" "$TMP/xb.safetensors" <<'PY' || fail "making the resize input"
import sys, numpy as np
from PIL import Image
from safetensors.numpy import save_file
rng = np.random.default_rng(8)
yy, xx = np.mgrid[0:30, 0:40]
img = np.clip(np.stack([xx * 6, yy * 8, (xx + yy) * 3], -1) + rng.integers(0, 40, (30, 40, 3)), 0, 255).astype(np.uint8)
Image.fromarray(img).save(sys.argv[1])
r = np.asarray(Image.fromarray(img).resize((26, 20), Image.BILINEAR))
c = np.stack([r[2:18, 5:21], r[3:19, 5:21]]).astype(np.float32)
mean, std = np.array([0.485, 0.456, 0.406], np.float32), np.array([0.229, 0.224, 0.225], np.float32)
save_file({"x": np.ascontiguousarray((c / np.float32(255) - mean) / std)}, sys.argv[2])
PY
"$H" eval resnet20 3 10 "$W" "$TMP/xb.safetensors" "$TMP/refb.safetensors" || fail "ctrain eval (resize input)"
"$TRAIN" predict --weights "$W" --resize 20 --format json --logits "$TMP/b.png" > "$TMP/b.json" || fail "predict --resize"
"$PIPPY" - "$TMP/b.json" "$TMP/refb.safetensors" <<'PY' || fail "predict's resize + center crop differ from torchvision's"
import json, sys, numpy as np
from safetensors.numpy import load_file
got = np.array(json.loads(open(sys.argv[1]).read())["logits"], np.float32)
ref, shifted = load_file(sys.argv[2])["logits"]
rel = np.linalg.norm(got - ref) / np.linalg.norm(ref)
rel_shift = np.linalg.norm(got - shifted) / np.linalg.norm(shifted)
print("40x30 PNG, resize 20, crop 16: predict vs PIL-preprocessed eval logits rel. norm %.2e (crop one pixel lower: %.2e)"
      % (rel, rel_shift))
assert rel <= 3e-2 and rel * 3 < rel_shift, (rel, rel_shift)
PY
ok "resize + center crop as torchvision's eval transforms"

# --tta flip: a.png is at the crop size, so its mirror is the mirrored PNG's crop; the logits are
# the float32 average of predict's on a.png and on the mirrored file.
"$PIPPY" -c "from PIL import Image, ImageOps; import sys; ImageOps.mirror(Image.open(sys.argv[1])).save(sys.argv[2])" \
  "$TMP/img/a.png" "$TMP/a_mirror.png" || fail "mirroring a.png"
"$TRAIN" predict --weights "$W" --format json --logits "$TMP/img/a.png" "$TMP/a_mirror.png" > "$TMP/plain.jsonl" || fail "predict plain"
"$TRAIN" predict --weights "$W" --format json --logits --tta flip "$TMP/img/a.png" > "$TMP/tta.jsonl" || fail "predict --tta flip"
"$PIPPY" - "$TMP/plain.jsonl" "$TMP/tta.jsonl" <<'PY' || fail "predict --tta flip is not the average of the image's and its mirror's logits"
import json, sys, numpy as np
a, m = (np.array(json.loads(l)["logits"], np.float32) for l in open(sys.argv[1]))
t = np.array(json.loads(open(sys.argv[2]).read())["logits"], np.float32)
want = (a + m) * np.float32(0.5)
print("predict --tta flip vs mean of a.png's and its mirror's logits: max abs %.2e (image vs mirror: %.2e)"
      % (np.abs(t - want).max(), np.abs(a - m).max()))
assert np.abs(t - want).max() <= 1e-6 * np.abs(want).max() and np.abs(a - m).max() > 1e-3
PY
out=$("$TRAIN" predict --weights "$W" --tta vflip "$TMP/img/a.png" 2>&1) && fail "--tta vflip accepted"
grep -q -- "--tta vflip: must be none or flip" <<<"$out" || fail "unclear --tta error: $out"
ok "predict --tta flip averages the logits of the image and its mirror"

# The subcommands' flags (one parser, trainer/modelfile.c's subcommand_parse): --flag=V and the
# short aliases work; an unknown flag, a flag without its value, a value out of range and a stray
# export argument are errors that name the argument.
"$TRAIN" predict --weights="$W" --top-k=2 -b 1 --format=json "$TMP/img/a.png" \
  | "$PIPPY" -c 'import json, sys; assert len(json.loads(sys.stdin.read())["top"]) == 2' || fail "predict --weights=W --top-k=2"
out=$("$TRAIN" predict --weights "$W" --bogus "$TMP/img/a.png" 2>&1) && fail "predict --bogus accepted"
grep -q "predict: unknown flag '--bogus'" <<<"$out" || fail "unclear unknown-flag error: $out"
out=$("$TRAIN" predict --weights "$W" "$TMP/img/a.png" --top-k 2>&1) && fail "predict --top-k without a value accepted"
grep -q -- "--top-k: needs a value" <<<"$out" || fail "unclear missing-value error: $out"
out=$("$TRAIN" predict --weights "$W" -k 0 "$TMP/img/a.png" 2>&1) && fail "predict -k 0 accepted"
grep -q -- "--top-k: .0. is not an integer in 1\.\." <<<"$out" || fail "unclear range error: $out"
out=$("$TRAIN" export --weights "$W" stray.onnx 2>&1) && fail "export with a stray argument accepted"
grep -q "export: unknown argument 'stray.onnx'" <<<"$out" || fail "unclear export error: $out"
ok "subcommand flags: --flag=V, aliases, and errors naming the argument"

# Batches: 23 files with an undecodable one in the middle, decoded over threads and forwarded in
# batches of 5: the output keeps the input order, is byte-identical for 1 and 2 threads, and the
# logits match the one-image batches'. The emulated GPU backend (train-emu predict --device cuda,
# fp32) gives the same classes with logits within 1e-5.
"$PIPPY" - "$TMP/many" <<'PY' || fail "making the batch inputs"
import os, sys, numpy as np
from PIL import Image
d = sys.argv[1]; os.makedirs(d)
rng = np.random.default_rng(5)
for i in range(23):
    if i == 11:
        open(os.path.join(d, "f%02d.png" % i), "wb").write(b"not a png")
        continue
    Image.fromarray(rng.integers(0, 256, (16 + i % 3, 16 + i % 5, 3), dtype=np.uint8)).save(os.path.join(d, "f%02d.png" % i))
PY
for v in "-b 5 -j 1" "-b 5 -j 2" "-b 1 -j 2"; do
  "$TRAIN" predict --weights "$W" --format json --logits $v "$TMP/many" > "$TMP/many${v// /}.jsonl" 2>/dev/null && fail "predict $v: exit 0 with an undecodable file"
done
cmp -s "$TMP/many-b5-j1.jsonl" "$TMP/many-b5-j2.jsonl" || fail "predict: 1 and 2 threads give different output"
EMU=$CTRAIN_BUILD/train-emu
if [ -x "$EMU" ]; then
  "$EMU" predict --weights "$W" --format json --logits -b 5 --device cuda "$TMP/many" > "$TMP/many-gpu.jsonl" 2>/dev/null && fail "predict --device cuda: exit 0 with an undecodable file"
fi
"$PIPPY" - "$TMP/many" "$TMP/many-b5-j2.jsonl" "$TMP/many-b1-j2.jsonl" "$TMP/many-gpu.jsonl" <<'PY' || fail "batched predict"
import json, os, sys, numpy as np
d = sys.argv[1]
def load(p):
    return [json.loads(l) for l in open(p)]
b5, b1 = load(sys.argv[2]), load(sys.argv[3])
assert [r["file"] for r in b5] == [os.path.join(d, "f%02d.png" % i) for i in range(23)], [r["file"] for r in b5]
assert "error" in b5[11] and all("top" in r for i, r in enumerate(b5) if i != 11)
rel = lambda a, b: max(np.abs(np.array(x["logits"]) - np.array(y["logits"])).max() / np.abs(np.array(y["logits"])).max()
                       for x, y in zip(a, b) if "logits" in y)
r1 = rel(b5, b1)
print("batches of 5 vs of 1: largest logit difference %.2g of the largest logit" % r1)
assert r1 <= 1e-5 and [r.get("top") and r["top"][0]["index"] for r in b5] == [r.get("top") and r["top"][0]["index"] for r in b1]
if os.path.exists(sys.argv[4]):
    g = load(sys.argv[4])
    rg = rel(g, b5)
    print("emulated GPU vs CPU: largest logit difference %.2g of the largest logit" % rg)
    assert [r["file"] for r in g] == [r["file"] for r in b5] and rg <= 1e-5, rg
PY
ok "batched over threads (and the emulated GPU): input order kept, deterministic"

"$TRAIN" predict --weights "$W" -k 3 "$TMP/img/a.png" "$TMP/img/sub/c.png" > "$TMP/table" 2> "$TMP/stderr" || { cat "$TMP/stderr"; fail "predict table"; }
cat "$TMP/table"
[ "$(grep -cE '^ +[123]\. +[0-9.]+%  +[0-9]+  class[0-9]{2}$' "$TMP/table")" = 6 ] || fail "table rows"
printf 'zero\none\ntwo\nthree\nfour\nfive\nsix\nseven\neight\nnine\n' > "$TMP/names.txt"
"$TRAIN" predict --weights "$W" --classes "$TMP/names.txt" --format json "$TMP/img/a.png" > "$TMP/named" || fail "--classes"
"$PIPPY" -c "import json,sys; t=json.load(open(sys.argv[1]))['top']; n='zero one two three four five six seven eight nine'.split(); assert all(x['name']==n[x['index']] for x in t), t" "$TMP/named" || fail "--classes names"
head -3 "$TMP/names.txt" > "$TMP/short.txt"
if "$TRAIN" predict --weights "$W" --classes "$TMP/short.txt" "$TMP/img/a.png" > /dev/null 2> "$TMP/stderr"; then fail "3 names for 10 classes accepted"; fi
grep -q -- "--classes" "$TMP/stderr" || fail "--classes error does not name the flag"
"$TRAIN" predict --help | grep -q "top-k" || fail "predict --help"
ok "table, --classes, --help"
