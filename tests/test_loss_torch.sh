# PyTorch parity of the losses on mixed targets (nn/loss.c through tests/helper_loss), in float64
# with autograd for the gradient:
#   - the soft-target cross-entropy (Mixup/CutMix, softmax_xent_mix): F.cross_entropy with the
#     probability target lam * onehot(a) + (1 - lam) * onehot(b) and label_smoothing (torch smooths
#     the mixed target, which is the mix of the smoothed one-hots);
#   - timm's BinaryCrossEntropy (bce_mix), written out as timm's loss and Mixup define it (timm is
#     not in Debian): the target lam * y(a) + (1 - lam) * y(b), y = full(smoothing / K)
#     .scatter_(label, 1 - smoothing + smoothing / K) (timm's mixup_target), optionally thresholded
#     (target.gt(threshold)), then F.binary_cross_entropy_with_logits, the mean over all elements
#     or (sum_classes) summed over classes and averaged over rows.
# Awkward cases: N = 1, classes not a multiple of 32, lam 0 and 1, a partner equal to the label,
# a threshold with mixing, large logits (BCE's stable form). Loss 1e-5 relative, gradient 1e-5
# norm-wise, top-1 hits (against the dominant label) exact.
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

def xent_ref(z64, a, b, K, eps, lam, thr, summ):
    t = lam * F.one_hot(a.long(), K).double() + (1 - lam) * F.one_hot(b.long(), K).double()
    return F.cross_entropy(z64, t, label_smoothing=eps)

def bce_ref(z64, a, b, K, eps, lam, thr, summ):
    off = eps / K; on = 1.0 - eps + off
    def onehot(y):
        return torch.full((len(y), K), off, dtype=torch.float64).scatter_(1, y.long().view(-1, 1), on)
    t = onehot(a) * lam + onehot(b) * (1.0 - lam)
    if thr >= 0:
        t = t.gt(float(np.float32(thr))).to(t.dtype)
    ref = F.binary_cross_entropy_with_logits(z64, t, reduction='none' if summ else 'mean')
    return ref.sum(-1).mean() if summ else ref

# name, helper arguments (from the case), reference, seed, cases:
# N, K, smoothing, lam, threshold (-1: none), sum_classes, logit scale
LOSSES = [
    ("soft-target cross-entropy", lambda thr, summ: [], xent_ref, 3,
     [(1, 7, 0.1, 0.3, -1, 0, 3), (7, 33, 0.1, 0.62, -1, 0, 3), (6, 10, 0.0, 0.25, -1, 0, 3),
      (5, 1000, 0.2, 0.5, -1, 0, 3), (4, 3, 0.1, 0.0, -1, 0, 3), (4, 3, 0.1, 1.0, -1, 0, 3),
      (64, 100, 0.1, 0.8137, -1, 0, 3)]),
    ("timm BinaryCrossEntropy", lambda thr, summ: ["bce", repr(thr), str(summ)], bce_ref, 5,
     [(1, 7, 0.1, 0.3, -1, 0, 3), (7, 33, 0.0, 0.62, -1, 0, 3), (6, 10, 0.1, 0.25, 0.2, 0, 3),
      (5, 1000, 0.1, 0.5, -1, 1, 3), (4, 3, 0.1, 0.0, -1, 1, 3), (4, 3, 0.0, 1.0, 0.2, 0, 3),
      (64, 100, 0.1, 0.8137, 0.2, 1, 3), (8, 17, 0.1, 0.4, -1, 0, 60)]),
]
for name, args, reference, seed, cases in LOSSES:
    g = torch.Generator().manual_seed(seed)
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
        subprocess.run([helper, f"{tmp}/in", f"{tmp}/out"] + args(thr, summ), check=True)
        out = np.fromfile(f"{tmp}/out", dtype="<f4")
        loss, dz, hits = float(out[0]), out[1:1 + N * K].reshape(N, K), int(out[1 + N * K:].view("<i4")[0])
        z64 = z.double().requires_grad_()
        ref = reference(z64, a, b, K, eps, lam, thr, summ)
        ref.backward()
        gref = z64.grad.numpy()
        dom = a if lam >= 0.5 else b
        hits_ref = int((z.argmax(1) == dom.long()).sum())
        el = abs(loss - ref.item()) / abs(ref.item())
        eg = np.linalg.norm(dz - gref) / np.linalg.norm(gref)
        print(f"{name}: N={N} K={K} eps={eps:.2f} lam={lam:.4f} thr={thr} sum={summ}: loss {loss:.7g} "
              f"torch {ref.item():.7g} (rel {el:.2g}), grad rel {eg:.2g}, hits {hits}/{hits_ref}")
        assert el < 1e-5 and eg < 1e-5 and hits == hits_ref, "mismatch"
    print(f"{name}: PyTorch parity passed")
PY
