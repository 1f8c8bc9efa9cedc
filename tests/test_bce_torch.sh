# PyTorch parity of nn/loss.c's bce_mix (tests/helper_loss ... bce): timm's BinaryCrossEntropy
# written out in PyTorch as timm's loss and Mixup define it (timm isn't in Debian): the target
# lam * y(a) + (1 - lam) * y(b), y = full(smoothing / K).scatter_(label, 1 - smoothing + smoothing / K)
# (timm's mixup_target), optionally thresholded (target.gt(threshold)), then
# F.binary_cross_entropy_with_logits, mean over all elements or (sum_classes) summed over classes
# and averaged over rows; float64 with autograd for the gradient. Cases: N = 1, classes not a
# multiple of 32, lam 0 and 1, a partner equal to the label, threshold 0.2 with mixing, large
# logits (the stable form). Loss 1e-5 relative, gradient 1e-5 norm-wise, hits exact.
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
g = torch.Generator().manual_seed(5)
# N, K, smoothing, lam, threshold (-1: none), sum_classes, logit scale
cases = [(1, 7, 0.1, 0.3, -1, 0, 3), (7, 33, 0.0, 0.62, -1, 0, 3), (6, 10, 0.1, 0.25, 0.2, 0, 3),
         (5, 1000, 0.1, 0.5, -1, 1, 3), (4, 3, 0.1, 0.0, -1, 1, 3), (4, 3, 0.0, 1.0, 0.2, 0, 3),
         (64, 100, 0.1, 0.8137, 0.2, 1, 3), (8, 17, 0.1, 0.4, -1, 0, 60)]
for N, K, eps, lam, thr, summ, scale in cases:
    z = (torch.randn(N, K, generator=g) * scale).float()
    a = torch.randint(0, K, (N,), generator=g).int()
    b = a.flip(0)
    lam = float(np.float32(lam)); eps = float(np.float32(eps))
    with open(f"{tmp}/in", "wb") as f:
        f.write(struct.pack("<iiff", N, K, eps, lam))
        f.write(z.numpy().astype("<f4").tobytes())
        f.write(a.numpy().astype("<i4").tobytes())
        f.write(b.numpy().astype("<i4").tobytes())
    subprocess.run([helper, f"{tmp}/in", f"{tmp}/out", "bce", repr(thr), str(summ)], check=True)
    out = np.fromfile(f"{tmp}/out", dtype="<f4")
    loss, dz, hits = float(out[0]), out[1:1 + N * K].reshape(N, K), int(out[1 + N * K:].view("<i4")[0])
    off = eps / K; on = 1.0 - eps + off
    def onehot(y):
        return torch.full((N, K), off, dtype=torch.float64).scatter_(1, y.long().view(-1, 1), on)
    t = onehot(a) * lam + onehot(b) * (1.0 - lam)
    if thr >= 0:
        t = t.gt(float(np.float32(thr))).to(t.dtype)
    z64 = z.double().requires_grad_()
    ref = F.binary_cross_entropy_with_logits(z64, t, reduction='none' if summ else 'mean')
    if summ:
        ref = ref.sum(-1).mean()
    ref.backward()
    gref = z64.grad.numpy()
    dom = a if lam >= 0.5 else b
    hits_ref = int((z.argmax(1) == dom.long()).sum())
    el = abs(loss - ref.item()) / abs(ref.item())
    eg = np.linalg.norm(dz - gref) / np.linalg.norm(gref)
    print(f"N={N} K={K} eps={eps:.2f} lam={lam:.4f} thr={thr} sum={summ}: loss {loss:.7g} torch {ref.item():.7g} (rel {el:.2g}), grad rel {eg:.2g}, hits {hits}/{hits_ref}")
    assert el < 1e-5 and eg < 1e-5 and hits == hits_ref, "mismatch"
print("timm BinaryCrossEntropy: PyTorch parity passed")
PY
