#!/usr/bin/python3
"""Where does ctrain's float32 training step sit among float32 implementations? (tests/test_parity.sh)

  parity_spread.py REFDIR CTRAIN_DUMP [--top N]

REFDIR is what tools/torch_ref.py wrote (weights.safetensors, ref.safetensors with the float64
answer); CTRAIN_DUMP is helper_parity's --dump of ctrain's float32 logits and gradients ('-': only run
and cache torch's variants, in REFDIR/spread.pt). This reruns
torch's float32 step three ways that are all equally valid float32 answers (NCHW, channels_last,
one thread) and prints, per gradient tensor, each one's norm-wise error against float64 next to
ctrain's. If ctrain's error on a tensor lies inside the spread of torch's own float32 variants,
the difference is the problem's conditioning, not a bug; a bug shows as ctrain far outside it,
typically on the layers that share the buggy code (e.g. only the grouped 3x3s, conv2 of a
ResNeXt block)."""
import argparse
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_ref  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("refdir")
    ap.add_argument("dump")
    ap.add_argument("--top", type=int, default=12)
    a = ap.parse_args()
    torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))  # as torch_ref.py's floor run
    ref, meta = torch_ref.load_safetensors(os.path.join(a.refdir, "ref.safetensors"))
    w, _ = torch_ref.load_safetensors(os.path.join(a.refdir, "weights.safetensors"))
    model = torch_ref.build(meta["arch"], int(meta["in_ch"]), int(meta["classes"]))
    if int(meta.get("blurpool", "0")):
        torch_ref.apply_blurpool(model)
    model.load_state_dict({k: torch.from_numpy(v) for k, v in w.items()}, strict=True)
    x = torch.from_numpy(ref["x"]).permute(0, 3, 1, 2).contiguous()
    labels = torch.from_numpy(ref["labels"])
    smoothing = float(meta["smoothing"])

    def step(channels_last=False, threads=None):
        m = torch_ref.copy.deepcopy(model).float().train()
        xx = x.float()
        if channels_last:
            m = m.to(memory_format=torch.channels_last)
            xx = xx.contiguous(memory_format=torch.channels_last)
        old = torch.get_num_threads()
        if threads:
            torch.set_num_threads(threads)
        logits = m(xx)
        F.cross_entropy(logits, labels, label_smoothing=smoothing).backward()
        torch.set_num_threads(old)
        out = {"logits": logits.detach().double()}
        for n, p in m.named_parameters():
            out["grad." + n] = p.grad.detach().double().contiguous()
        return out

    cache = os.path.join(a.refdir, "spread.pt")  # the torch runs depend on REFDIR alone
    if os.path.exists(cache):
        runs = torch.load(cache)
    else:
        runs = {"nchw": step(), "chlast": step(channels_last=True), "1thr": step(threads=1)}
        torch.save(runs, cache)
    if a.dump == "-":
        return 0
    ct, _ = torch_ref.load_safetensors(a.dump)

    def rel(a, b):
        a = torch.as_tensor(a).double().flatten()
        b = torch.as_tensor(b).double().flatten()
        return ((a - b).norm() / b.norm().clamp_min(1e-30)).item()

    keys = ["logits"] + [k for k in ref if k.startswith("grad.")]
    rows = []
    for k in keys:
        e = {r: rel(v[k], ref[k]) for r, v in runs.items()}
        rows.append((k, rel(ct[k], ref[k]), e, rel(ct[k], runs["nchw"][k])))
    print("%-40s %10s | %10s %10s %10s | %s" % ("vs float64", "ctrain", "torch", "chlast", "1thread",
                                                "ctrain/max(torch)"))
    rows.sort(key=lambda r: -r[1] / max(max(r[2].values()), 1e-30))
    for k, c, e, _ in rows[:a.top]:
        print("%-40s %10.2e | %10.2e %10.2e %10.2e | %.2f" % (k, c, e["nchw"], e["chlast"], e["1thr"],
                                                              c / max(max(e.values()), 1e-30)))
    g = [r for r in rows if r[0].startswith("grad.")]
    grouped = [r for r in g if ".conv2." in r[0]]
    print("ctrain / worst torch float32 variant, over gradients: max %.2f, median %.2f; conv2 (the grouped "
          "3x3 in a ResNeXt) max %.2f" % (max(r[1] / max(max(r[2].values()), 1e-30) for r in g),
                                          sorted(r[1] / max(max(r[2].values()), 1e-30) for r in g)[len(g) // 2],
                                          max(r[1] / max(max(r[2].values()), 1e-30) for r in grouped)))
    print("spread among torch's float32 variants (max/min of their errors), worst tensor: %.2f" %
          max(max(r[2].values()) / max(min(r[2].values()), 1e-30) for r in g))


if __name__ == "__main__":
    sys.exit(main())
