#!/usr/bin/env bash
# Safetensors interchange with the real readers/writers:
#  1. ctrain writes resnet18 (1 channel, 5 classes), resnet20, resnext50_32x4d and wide_resnet50_2 files; PyPI's `safetensors`
#     ($PIPPY) reads them (header, dtypes, metadata) and hands the arrays to torchvision
#     ($TORCH_PY), which loads them with load_state_dict(strict=True); torch's eval-mode logits on
#     a fixed input must match ctrain's own eval logits of the same file (1e-5).
#  2. torchvision models with random BN state are saved by PyPI's safetensors writer; ctrain loads
#     them strictly and its eval logits must match torch's.
set -euo pipefail
ROOT=${CTRAIN_ROOT:-$(cd "$(dirname "$0")/.." && pwd)}
BUILD=${CTRAIN_BUILD:-$ROOT/build}
TORCH_PY=${TORCH_PY:-/usr/bin/python3}
PIPPY=${PIPPY:-python3}
H=$BUILD/tests/helper_stio
[ -x "$H" ] || { echo "missing $H"; exit 1; }
"$PIPPY" -c 'import safetensors, numpy' || { echo "PyPI safetensors not available as $PIPPY"; exit 1; }
"$TORCH_PY" -c 'import torch, torchvision' || { echo "PyTorch not available as $TORCH_PY"; exit 1; }
export OMP_NUM_THREADS=1
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
cd "$T"

# resnext50_32x4d (grouped 3x3s: torch [K, C/32, 3, 3]) and wide_resnet50_2 (twice the 3x3 width) too.
for spec in "resnet18 1 5" "resnext50_32x4d 3 5" "wide_resnet50_2 2 3" "resnet20 3 10"; do  # resnet20 last: the refusal below uses its file
  set -- $spec
  arch=$1 inch=$2 classes=$3
  echo "== $arch in_ch=$inch classes=$classes"
  "$H" save "$arch" "$inch" "$classes" 7 c.safetensors
  # The PyPI reader: every tensor, dtypes, metadata; arrays handed over as .npz; a fixed input.
  "$PIPPY" - "$inch" <<'PY'
import sys, numpy as np
from safetensors import safe_open
from safetensors.numpy import load_file, save_file
d = load_file("c.safetensors")
with safe_open("c.safetensors", framework="numpy") as f:
    meta = f.metadata()
assert meta.get("format") == "pt", meta
nbt = [k for k in d if k.endswith("num_batches_tracked")]
assert nbt and all(d[k].dtype == np.int64 and d[k].shape == () for k in nbt), "num_batches_tracked must be I64 scalars"
assert all(d[k].dtype == np.float32 for k in d if k not in nbt)
np.savez("c.npz", **d)
rng = np.random.default_rng(5)
x = rng.standard_normal((2, 32, 32, int(sys.argv[1])), dtype=np.float32)
save_file({"x": x}, "x.safetensors")
np.save("x.npy", x)
print("pypi safetensors read %d tensors, metadata %s" % (len(d), meta))
PY
  "$H" eval "$arch" "$inch" "$classes" c.safetensors x.safetensors c_logits.safetensors
  # torchvision: strict load of ctrain's weights, eval logits vs ctrain's; then its own model out.
  "$TORCH_PY" - "$ROOT/tools" "$arch" "$inch" "$classes" <<'PY'
import sys, numpy as np, torch
sys.path.insert(0, sys.argv[1])
import torch_ref
arch, inch, classes = sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
x = torch.from_numpy(np.load("x.npy")).permute(0, 3, 1, 2).contiguous()
m = torch_ref.build(arch, inch, classes)
sd = {k: torch.from_numpy(v) for k, v in np.load("c.npz").items()}
m.load_state_dict(sd, strict=True)
m.eval()
with torch.no_grad():
    ref = m.double()(x.double()).numpy()
c, _ = torch_ref.load_safetensors("c_logits.safetensors")
err = np.linalg.norm(c["logits"] - ref) / np.linalg.norm(ref)
print("ctrain file -> torchvision strict load: eval logits rel err %.2e" % err)
assert err < 1e-5, err
# A torchvision model of our own with non-trivial BN state, for the other direction.
torch.manual_seed(11)
t = torch_ref.build(arch, inch, classes)
with torch.no_grad():
    for mod in t.modules():
        if isinstance(mod, torch.nn.BatchNorm2d):
            mod.weight.uniform_(0.5, 1.5); mod.bias.normal_(0, 0.1)
            mod.running_mean.normal_(0, 0.2); mod.running_var.uniform_(0.5, 1.5)
            mod.num_batches_tracked.fill_(77)
t.eval()
np.savez("t.npz", **{k: v.numpy() for k, v in t.state_dict().items()})
with torch.no_grad():
    np.save("t_logits.npy", t.double()(x.double()).numpy())
PY
  "$PIPPY" - <<'PY'
import numpy as np
from safetensors.numpy import save_file
save_file(dict(np.load("t.npz")), "t.safetensors", metadata={"format": "pt"})
PY
  "$H" eval "$arch" "$inch" "$classes" t.safetensors x.safetensors t_logits.safetensors
  "$PIPPY" - <<'PY'
import numpy as np
from safetensors.numpy import load_file
c = load_file("t_logits.safetensors")["logits"]
ref = np.load("t_logits.npy")
err = np.linalg.norm(c - ref) / np.linalg.norm(ref)
print("torchvision file (PyPI writer) -> ctrain strict load: eval logits rel err %.2e" % err)
assert err < 1e-5, err
PY
done
# A torchvision file for the wrong model is refused with the tensor named.
if "$H" eval resnet20 3 7 t.safetensors x.safetensors bad.safetensors 2>err.txt; then
  echo "wrong class count accepted"; exit 1
fi
grep -q "fc.weight' has shape \[10, 64\]" err.txt || { cat err.txt; exit 1; }
echo "wrong model refused: $(cat err.txt)"
echo "safetensors interchange OK"
