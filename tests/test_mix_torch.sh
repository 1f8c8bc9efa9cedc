# PyTorch parity of the soft-target cross-entropy (Mixup/CutMix): F.cross_entropy with probability
# targets lam * onehot(a) + (1 - lam) * onehot(b) and label_smoothing (torch applies the smoothing
# to the mixed target, which is the mix of the smoothed one-hots), in float64 with autograd for the
# gradient, against nn/loss.c's softmax_xent_mix (tests/helper_loss.c) on awkward shapes: N = 1,
# classes not a multiple of 32, lam 0 and 1, a partner equal to the label. Loss 1e-5 relative,
# gradient 1e-5 norm-wise; top-1 hits against the dominant label.
set -euo pipefail
ROOT=${CTRAIN_ROOT:-$(cd "$(dirname "$0")/.." && pwd)}
BUILD=${CTRAIN_BUILD:-$ROOT/build}
TORCH_PY=${TORCH_PY:-/usr/bin/python3}
HELPER=$BUILD/tests/helper_loss
[ -x "$HELPER" ] || { echo "missing $HELPER (./build.sh test builds it)"; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
OMP_NUM_THREADS=1 "$TORCH_PY" - "$HELPER" "$tmp" <<'PY'
import struct, subprocess, sys
import numpy as np, torch
import torch.nn.functional as F
helper, tmp = sys.argv[1], sys.argv[2]
g = torch.Generator().manual_seed(3)
cases = [(1, 7, 0.1, 0.3), (7, 33, 0.1, 0.62), (6, 10, 0.0, 0.25), (5, 1000, 0.2, 0.5), (4, 3, 0.1, 0.0),
         (4, 3, 0.1, 1.0), (64, 100, 0.1, 0.8137)]
for N, K, eps, lam in cases:
    z = (torch.randn(N, K, generator=g) * 3).float()
    a = torch.randint(0, K, (N,), generator=g).int()
    b = a.flip(0)
    lam = float(np.float32(lam))
    with open(f"{tmp}/in", "wb") as f:
        f.write(struct.pack("<iiff", N, K, eps, lam))
        f.write(z.numpy().astype("<f4").tobytes())
        f.write(a.numpy().astype("<i4").tobytes())
        f.write(b.numpy().astype("<i4").tobytes())
    subprocess.run([helper, f"{tmp}/in", f"{tmp}/out"], check=True)
    out = np.fromfile(f"{tmp}/out", dtype="<f4")
    loss, dz, hits = float(out[0]), out[1:1 + N * K].reshape(N, K), int(out[1 + N * K:].view("<i4")[0])
    z64 = z.double().requires_grad_()
    t = lam * F.one_hot(a.long(), K).double() + (1 - lam) * F.one_hot(b.long(), K).double()
    ref = F.cross_entropy(z64, t, label_smoothing=float(np.float32(eps)))
    ref.backward()
    gref = z64.grad.numpy()
    dom = a if lam >= 0.5 else b
    hits_ref = int((z.argmax(1) == dom.long()).sum())
    el = abs(loss - ref.item()) / abs(ref.item())
    eg = np.linalg.norm(dz - gref) / np.linalg.norm(gref)
    print(f"N={N} K={K} eps={eps} lam={lam:.4f}: loss {loss:.7g} torch {ref.item():.7g} (rel {el:.2g}), grad rel {eg:.2g}, hits {hits}/{hits_ref}")
    assert el < 1e-5 and eg < 1e-5 and hits == hits_ref, "mismatch"
print("soft-target cross-entropy: PyTorch parity passed")
PY
