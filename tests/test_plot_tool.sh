#!/usr/bin/env bash
# tools/plot on a metrics.jsonl: writes a PNG (checked by PIL, an independent decoder) with one panel
# per metric; a file with nothing numeric is an error naming it, and leaves no PNG behind.
set -euo pipefail
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT
cat > "$d/metrics.jsonl" <<'J'
{"type":"step","epoch":0,"step":1,"loss":2.3,"lr":0.1}
{"type":"step","epoch":0,"step":2,"loss":2.1,"lr":0.1}
not json at all
{"type":"epoch","epoch":1,"train_loss":1.8,"val_loss":1.5,"val_top1":0.5,"extra":{"nested":[1,{"x":2}]}}
{"type":"epoch","epoch":2,"train_loss":1.1,"val_loss":1.2,"val_top1":0.66}
J
"$CTRAIN_BUILD/tools/plot" "$d/metrics.jsonl" 2>"$d/err" >"$d/out"
grep -q "3 panels, 4 curves, 5 lines; 1 constant series left out" "$d/out" || { cat "$d/out"; exit 1; }
grep -q 'metrics.jsonl:3' "$d/err"
"$TORCH_PY" - "$d/curves.png" <<'PY'
import sys
from PIL import Image
im = Image.open(sys.argv[1]); im.load()
assert im.size == (1640, 760), im.size   # 3 panels: step loss, epoch loss, epoch top1 (the constant lr has none)
colors = im.getcolors(1 << 20)
assert any(c == (31, 119, 180) for _, c in colors) and any(c == (255, 127, 14) for _, c in colors)
print("ok", im.size)
PY
echo '{"type":"step","note":"x"}' > "$d/empty.jsonl"
if "$CTRAIN_BUILD/tools/plot" "$d/empty.jsonl" "$d/empty.png" 2>"$d/err"; then echo "expected failure"; exit 1; fi
grep -q 'empty.jsonl' "$d/err"
[ ! -e "$d/empty.png" ]
ls "$d" | grep -q tmp && { echo "temporary left behind"; exit 1; }
echo ok
