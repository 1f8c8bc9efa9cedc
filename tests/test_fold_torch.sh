#!/usr/bin/env bash
# The BN-folded eval forward (nn/fold.h) against torchvision's eval mode on the same weights:
# tests/helper_stio writes a model with non-trivial BN state (gammas, betas, running means and
# variances away from 1/0), torchvision loads it strictly and computes eval logits in float64 (the
# exact answer) and float32; ctrain's folded float32 logits must be within 1e-5 (relative norm)
# of float64, as the unfolded eval forward is in test_safetensors_py.sh. Each line also prints
# torch float32's own distance from float64 and the unfolded executor's, for scale.
set -euo pipefail
ROOT=${CTRAIN_ROOT:-$(cd "$(dirname "$0")/.." && pwd)}
BUILD=${CTRAIN_BUILD:-$ROOT/build}
TORCH_PY=${TORCH_PY:-/usr/bin/python3}
H=$BUILD/tests/helper_stio
[ -x "$H" ] || { echo "missing $H"; exit 1; }
"$TORCH_PY" -c 'import torch, torchvision' || { echo "PyTorch not available as $TORCH_PY"; exit 1; }
export OMP_NUM_THREADS=1
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
cd "$T"
for spec in "resnet20 3 10 2 32 32" "resnet18 1 5 2 48 40" "resnet50 3 7 2 64 64" "resnet34 3 1000 1 33 35"; do
  set -- $spec
  arch=$1 inch=$2 classes=$3 n=$4 h=$5 w=$6
  "$H" save "$arch" "$inch" "$classes" 9 m.safetensors
  "$TORCH_PY" - "$ROOT/tools" "$n" "$h" "$w" "$inch" <<'PY'
import sys, numpy as np
sys.path.insert(0, sys.argv[1])
import torch_ref
n, h, w, c = map(int, sys.argv[2:6])
x = np.random.default_rng(5).standard_normal((n, h, w, c)).astype(np.float32)
torch_ref.save_safetensors("x.safetensors", {"x": x})
PY
  "$H" eval "$arch" "$inch" "$classes" m.safetensors x.safetensors ref.safetensors
  "$H" evalfold "$arch" "$inch" "$classes" m.safetensors x.safetensors fold.safetensors
  "$TORCH_PY" - "$ROOT/tools" "$arch" "$inch" "$classes" <<'PY'
import sys, numpy as np, torch
sys.path.insert(0, sys.argv[1])
import torch_ref
arch, inch, classes = sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
sd, _ = torch_ref.load_safetensors("m.safetensors")
m = torch_ref.build(arch, inch, classes)
m.load_state_dict({k: torch.from_numpy(v) for k, v in sd.items()}, strict=True)
m.eval()
x = torch.from_numpy(torch_ref.load_safetensors("x.safetensors")[0]["x"]).permute(0, 3, 1, 2).contiguous()
with torch.no_grad():
    t32 = m(x).numpy()
    t64 = m.double()(x.double()).numpy()
rel = lambda a: np.linalg.norm(a.astype(np.float64) - t64) / np.linalg.norm(t64)
fold = torch_ref.load_safetensors("fold.safetensors")[0]["logits"]
ref = torch_ref.load_safetensors("ref.safetensors")[0]["logits"]
print("%-9s %s: vs torchvision float64 eval: ctrain folded %.2e, ctrain unfolded %.2e, torch float32 %.2e"
      % (arch, "x".join(map(str, x.shape)), rel(fold), rel(ref), rel(t32)))
assert rel(fold) <= 1e-5, rel(fold)
assert (fold.argmax(1) == t64.argmax(1)).all()
PY
done
echo "ok: folded eval matches torchvision"
