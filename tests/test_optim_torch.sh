#!/usr/bin/env bash
# AdamW and LAMB (nn/optim.h) against their peers on the same tensors: a resnet20's flat
# parameters (every trainable tensor, BN weights and biases among them), five steps of random
# gradients at changing rates, run by tests/helper_optim through the optimizer table's CPU step,
# and in PyTorch by
#   - adamw: torch.optim.AdamW itself (Debian's torch), the BN/bias tensors in a param group with
#     weight_decay 0 when --no-wd-bn is on;
#   - lamb: timm's Lamb (timm/optim/lamb.py: global gradient clipping by max_grad_norm, moments,
#     bias correction, L2 decay added to the update, trust ratio |w| / |update| only where the group
#     decays) written out below in torch ops, as timm is not a Debian package.
# Each is run in float32 (as torch/timm would) and in float64 (the exact answer). ctrain's params
# and moments must be within max(1e-5, 3x torch float32's own error) of float64, relative norms:
# params measured on what the five steps moved them, moments on their size. Each line prints the
# errors for scale.
set -euo pipefail
ROOT=${CTRAIN_ROOT:-$(cd "$(dirname "$0")/.." && pwd)}
BUILD=${CTRAIN_BUILD:-$ROOT/build}
TORCH_PY=${TORCH_PY:-/usr/bin/python3}
H=$BUILD/tests/helper_optim
[ -x "$H" ] || { echo "missing $H"; exit 1; }
"$TORCH_PY" -c 'import torch' || { echo "PyTorch not available as $TORCH_PY"; exit 1; }
export OMP_NUM_THREADS=1
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
"$H" layout resnet20 10 > "$T/layout.txt"
LRS=0.001,0.002,0.004,0.003,0.0005
# optimizer no_wd_bn wd beta1 beta2 eps max_grad_norm
for spec in "adamw 0 0.05 0.9 0.999 1e-8 0" "adamw 1 0.05 0.8 0.99 1e-8 0" "lamb 1 0.02 0.9 0.999 1e-6 1" \
            "lamb 0 0.02 0.9 0.999 1e-6 0" "lamb 1 0 0.9 0.999 1e-6 1"; do
  rm -f "$T"/*.bin
  "$TORCH_PY" - "$H" "$T" "$LRS" $spec <<'PY'
import subprocess, sys, numpy as np, torch
H, d, lrs_arg = sys.argv[1], sys.argv[2], sys.argv[3]
lrs = [float(np.float32(x)) for x in lrs_arg.split(",")]  # ctrain takes the rate as a float
opt, no_wd_bn, wd, b1, b2, eps, maxn = sys.argv[4], int(sys.argv[5]), float(sys.argv[6]), float(sys.argv[7]), \
    float(sys.argv[8]), float(sys.argv[9]), float(sys.argv[10])
lines = open(d + "/layout.txt").read().split("\n")
n = int(lines[0])
ents = [(l.split()[0], int(l.split()[1]), int(l.split()[2]), int(l.split()[3])) for l in lines[1:] if l.strip()]
rng = np.random.default_rng(11)
p0 = np.zeros(n, np.float32)
for name, off, cnt, nd in ents:  # BN weights near 1, the rest small
    base = 1.0 if name.endswith(".weight") and "bn" in name else 0.0
    p0[off:off + cnt] = base + 0.1 * rng.standard_normal(cnt)
p0.tofile(d + "/p0.bin")
gs = []
for k, scale in enumerate([0.01, 0.001, 0.02, 0.003, 0.01]):  # |g| about 5, 0.5, 10, 1.6, 5: clipped or not
    g = np.zeros(n, np.float32)
    for name, off, cnt, nd in ents:
        g[off:off + cnt] = scale * rng.standard_normal(cnt)
    g.tofile(d + "/g%d.bin" % (k + 1))
    gs.append(g)
decays = [not (no_wd_bn and nd) for _, _, _, nd in ents]

def run(dtype):
    ps = [torch.tensor(p0[off:off + cnt], dtype=dtype, requires_grad=True) for _, off, cnt, _ in ents]
    if opt == "adamw":
        groups = [{"params": [p for p, dc in zip(ps, decays) if dc], "weight_decay": wd},
                  {"params": [p for p, dc in zip(ps, decays) if not dc], "weight_decay": 0.0}]
        o = torch.optim.AdamW([g for g in groups if g["params"]], lr=lrs[0], betas=(b1, b2), eps=eps)
        for k, lr in enumerate(lrs):
            for p, (_, off, cnt, _) in zip(ps, ents):
                p.grad = torch.tensor(gs[k][off:off + cnt], dtype=dtype)
            for grp in o.param_groups:
                grp["lr"] = lr
            o.step()
        st = [(o.state[p]["exp_avg"], o.state[p]["exp_avg_sq"]) for p in ps]
    else:  # timm's Lamb (single-tensor path) with its defaults: bias correction, grad averaging
        m = [torch.zeros_like(p) for p in ps]
        v = [torch.zeros_like(p) for p in ps]
        with torch.no_grad():
            for k, lr in enumerate(lrs):
                grads = [torch.tensor(gs[k][off:off + cnt], dtype=dtype) for _, off, cnt, _ in ents]
                clip = None
                if maxn > 0:  # _get_clip_grad_norm: over every gradient of every group
                    gn = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))
                    clip = (gn / maxn).clamp_(min=1.0)
                step = k + 1
                bc1, bc2 = 1 - b1 ** step, 1 - b2 ** step
                for i, p in enumerate(ps):
                    grad = grads[i] if clip is None else grads[i] / clip
                    m[i].mul_(b1).add_(grad, alpha=1 - b1)
                    v[i].mul_(b2).addcmul_(grad, grad, value=1 - b2)
                    denom = (v[i].sqrt() / (bc2 ** 0.5)).add_(eps)
                    update = (m[i] / bc1).div_(denom)
                    w = wd if decays[i] else 0.0
                    if w != 0:  # decay into the update, then the layer-wise trust ratio
                        update.add_(p, alpha=w)
                        wn, un = p.norm(2.0), update.norm(2.0)
                        one = torch.ones_like(wn)
                        update.mul_(torch.where(wn > 0, torch.where(un > 0, wn / un, one), one))
                    p.add_(update, alpha=-lr)
        st = list(zip(m, v))
    P = p0.astype(np.float64).copy()
    M, V = np.zeros(n), np.zeros(n)
    for (name, off, cnt, _), p, (a, b) in zip(ents, ps, st):
        P[off:off + cnt] = p.detach().double().numpy()
        M[off:off + cnt] = a.double().numpy()
        V[off:off + cnt] = b.double().numpy()
    return P, M, V

subprocess.check_call([H, "run", "resnet20", "10", opt, str(no_wd_bn), sys.argv[6], sys.argv[7], sys.argv[8], sys.argv[9],
                       sys.argv[10], d, lrs_arg], stdout=subprocess.DEVNULL)
ct = lambda s: np.fromfile(d + "/ct_%s.bin" % s, np.float32).astype(np.float64)
C = (ct("params"), ct("exp_avg"), ct("exp_avg_sq"))
R64, R32 = run(torch.float64), run(torch.float32)
moved = np.linalg.norm(R64[0] - p0.astype(np.float64))
scale = (moved, np.linalg.norm(R64[1]), np.linalg.norm(R64[2]))
ok = True
msg = []
for what, c, r32, r64, s in zip(("params", "exp_avg", "exp_avg_sq"), C, R32, R64, scale):
    e_ct, e_t32, e_same = np.linalg.norm(c - r64) / s, np.linalg.norm(r32 - r64) / s, np.linalg.norm(c - r32) / s
    tol = max(1e-5, 3 * e_t32)
    ok &= bool(e_ct <= tol)
    msg.append("%s %.1e (torch f32 %.1e, tol %.0e; ctrain vs torch f32 %.1e)" % (what, e_ct, e_t32, tol, e_same))
print("%s no_wd_bn=%d wd=%g betas=%g,%g max_grad_norm=%g: %s" % (opt, no_wd_bn, wd, b1, b2, maxn, "; ".join(msg)))
sys.exit(0 if ok else 1)
PY
done
echo "PASS: test_optim_torch"
