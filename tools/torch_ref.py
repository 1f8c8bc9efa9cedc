#!/usr/bin/python3
"""PyTorch reference for ctrain's CPU ResNet: one training step, dumped for tests/helper_parity.c.

Run with Debian's /usr/bin/python3 (torch + torchvision). Writes into --out:
  weights.safetensors  the initial state_dict (torchvision names, OIHW, num_batches_tracked I64),
                       float32; ctrain must load it with its strict loader.
  ref.safetensors      x (NHWC float32), labels (I64), eval_logits, logits, loss, grad.<name>,
                       post.<bn buffer> (running stats after the training forward),
                       step1.<name>, step2.<name> (params after one and two SGD steps with the
                       same gradients), all float64; __metadata__ holds the configuration.

The reference runs in float64 on the float32 initial values, so it is the exact answer to the
question ctrain answers in float32: comparisons then measure ctrain's own rounding, not a mix of
two float32 summation orders. --report-fp32 also runs torch in float32 and prints how far that is
from the float64 reference (the scale of fp32 error to expect).

The safetensors files are written by a few lines of code here (numpy only: Debian's python has no
safetensors package); tests/test_safetensors_py.sh checks ctrain's files with the real package.
"""
import argparse
import copy
import json
import os
import struct
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torchvision


# ---------------------------------------------------------------------------------------------
# CIFAR ResNet (He et al. 2016, section 4.2) with projection shortcuts, torchvision naming.
class CifarBasicBlock(nn.Module):
    def __init__(self, inplanes, planes, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = None
        if stride != 1 or inplanes != planes:
            self.downsample = nn.Sequential(nn.Conv2d(inplanes, planes, 1, stride, bias=False), nn.BatchNorm2d(planes))

    def forward(self, x):
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        sc = x if self.downsample is None else self.downsample(x)
        return self.relu(out + sc)


class CifarResNet(nn.Module):
    def __init__(self, depth, in_ch, num_classes):
        super().__init__()
        assert (depth - 2) % 6 == 0
        n = (depth - 2) // 6
        self.conv1 = nn.Conv2d(in_ch, 16, 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(16)
        self.relu = nn.ReLU(inplace=True)
        inplanes = 16
        for s, planes in enumerate([16, 32, 64]):
            blocks = []
            for i in range(n):
                blocks.append(CifarBasicBlock(inplanes, planes, 2 if (s > 0 and i == 0) else 1))
                inplanes = planes
            setattr(self, "layer%d" % (s + 1), nn.Sequential(*blocks))
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(64, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.constant_(m.weight, 1)
                nn.init.constant_(m.bias, 0)

    def forward(self, x):
        x = self.relu(self.bn1(self.conv1(x)))
        x = self.layer3(self.layer2(self.layer1(x)))
        return self.fc(torch.flatten(self.avgpool(x), 1))


def blur_input(mod, inputs):
    """BlurPool as FFCV's BlurPoolConv2d computes it (a depthwise F.conv2d of [1,2,1]x[1,2,1]/16,
    stride 1, padding 1, groups = channels, on the conv's input), as a forward pre-hook so the
    state_dict keeps torchvision's names (FFCV's wrapper would rename conv1 to conv1.conv)."""
    x = inputs[0]
    f = torch.tensor([1.0, 2.0, 1.0], dtype=x.dtype)
    k = (f[:, None] * f[None, :] / 16).expand(x.shape[1], 1, 3, 3).contiguous()
    return (F.conv2d(x, k, None, 1, 1, 1, x.shape[1]),)


def apply_blurpool(model):
    """FFCV's rule (apply_blurpool in its ImageNet example): every Conv2d with max(stride) > 1 and
    in_channels >= 16 gets the blur on its input."""
    for mod in model.modules():
        if isinstance(mod, nn.Conv2d) and max(mod.stride) > 1 and mod.in_channels >= 16:
            mod.register_forward_pre_hook(blur_input)


# ---------------------------------------------------------------------------------------------
# Stochastic depth as timm applies it (timm/layers/drop.py drop_path, timm/models/resnet.py
# make_blocks): on each block's residual branch after its last BN, before the shortcut's add, block
# net_block_idx of net_num_blocks at p = rate * idx / (num - 1), a kept row scaled by 1 / keep_prob.
# The rows are ctrain's (nn/drop_path.c, util/rng.h: splitmix64 keys), drawn here by a port of its
# rule so that both sides drop the same rows; ref.safetensors carries them (drop.<block>) and the
# helper checks ctrain drew exactly these.
M64 = (1 << 64) - 1


def mix64(z):
    z = (z + 0x9E3779B97F4A7C15) & M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


def rng_key(seed, a, b):
    return mix64(mix64(mix64(seed) ^ a) ^ b)


def ctrain_drop_rows(key, block, n_rows, p):
    keep = np.float32(1.0 - p)
    rows = []
    for n in range(n_rows):
        u = (mix64((rng_key(key, block, n) + 0xD1B54A32D192ED03) & M64) >> 40) / 16777216.0
        rows.append(1.0 if u < keep else 0.0)
    return rows


def apply_drop_path(model, rate, key, n_rows):
    """Forward hooks on every block's last BN (state_dict names unchanged); returns {block: rows}."""
    blocks = [b for name in ("layer1", "layer2", "layer3", "layer4") if hasattr(model, name)
              for b in getattr(model, name)]
    masks = {}
    for idx, blk in enumerate(blocks):
        p = rate * idx / (len(blocks) - 1)
        if not p > 0:
            continue
        rows = ctrain_drop_rows(key, idx, n_rows, p)
        masks[idx] = rows

        def hook(mod, inp, out, rows=rows, keep_prob=1.0 - p):
            if not mod.training:
                return None
            random_tensor = torch.tensor(rows, dtype=out.dtype).view(-1, 1, 1, 1)
            random_tensor.div_(keep_prob)  # timm's scale_by_keep
            return out * random_tensor
        (blk.bn3 if hasattr(blk, "bn3") else blk.bn2).register_forward_hook(hook)
    return masks


def build(arch, in_ch, classes):
    if arch in ("resnet20", "resnet32", "resnet44", "resnet56", "resnet110"):
        return CifarResNet(int(arch[6:]), in_ch, classes)
    m = getattr(torchvision.models, arch)(num_classes=classes)
    if in_ch != 3:
        m.conv1 = nn.Conv2d(in_ch, 64, 7, 2, 3, bias=False)
        nn.init.kaiming_normal_(m.conv1.weight, mode="fan_out", nonlinearity="relu")
    return m


# ---------------------------------------------------------------------------------------------
# Minimal safetensors writer (format: u64 LE header length, JSON header, raw little-endian data).
DT = {np.dtype("float32"): "F32", np.dtype("float64"): "F64", np.dtype("int64"): "I64", np.dtype("int32"): "I32"}


def save_safetensors(path, tensors, metadata=None):
    header, blobs, off = {}, [], 0
    if metadata:
        header["__metadata__"] = {k: str(v) for k, v in metadata.items()}
    for name, a in tensors.items():
        a = np.array(a, order="C", copy=False)  # (ascontiguousarray would make 0-d arrays 1-d)
        b = a.astype(a.dtype.newbyteorder("<"), copy=False).tobytes()
        header[name] = {"dtype": DT[a.dtype], "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - (8 + len(h)) % 8) % 8)
    with open(path + ".tmp", "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)
    os.replace(path + ".tmp", path)


def load_safetensors(path):
    """Returns ({name: numpy array}, metadata) of a safetensors file (F32/F64/I64/I32 only)."""
    inv = {v: k for k, v in DT.items()}
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    meta = header.pop("__metadata__", {})
    out = {}
    for name, d in header.items():
        b, e = d["data_offsets"]
        dt = inv[d["dtype"]].newbyteorder("<")
        out[name] = np.frombuffer(blob[8 + n + b:8 + n + e], dtype=dt).reshape(d["shape"]).copy()
    return out, meta


def np_of(t):
    return t.detach().cpu().numpy()


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--arch", required=True)
    ap.add_argument("--in-ch", type=int, default=3)
    ap.add_argument("--classes", type=int, default=10)
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--size", type=int, default=64)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--smoothing", type=float, default=0.0)
    ap.add_argument("--lr", type=float, default=0.1)
    ap.add_argument("--momentum", type=float, default=0.9)
    ap.add_argument("--wd", type=float, default=5e-4)
    ap.add_argument("--nesterov", type=int, default=0)
    ap.add_argument("--wd-exclude", type=int, default=0, help="no weight decay on BN params and biases")
    ap.add_argument("--report-fp32", action="store_true")
    ap.add_argument("--explain-fp32", action="store_true",
                    help="print the error of a float64 run whose conv/BN/fc outputs are rounded to float32: "
                         "the part of the float32 error that comes from storing activations alone")
    ap.add_argument("--explain-kinks", action="store_true",
                    help="count the ReLU signs and max-pool winners that differ between torch's float32 and "
                         "float64 runs, and print the float32 error again with float64 forced onto float32's "
                         "branches: the part of the error that comes from taking the other side of a kink")
    ap.add_argument("--fp32-floor", action="store_true",
                    help="also store floor.<key>: torch's own float32 error against the float64 reference, the "
                         "largest of three equally valid float32 runs (NCHW, channels_last, one thread)")
    ap.add_argument("--flip", default="",
                    help="CALL:INDEX,...: in the training forward, the ReLU call CALL (0-based, in execution "
                         "order) takes the other branch at flat element INDEX (NCHW). The reference on the "
                         "branches a float32 run chose where an input lies within rounding of zero")
    ap.add_argument("--list-kinks", type=int, default=0, metavar="N",
                    help="print the N ReLU inputs of the float64 training forward nearest to zero relative to "
                         "their tensor's standard deviation (as CALL:INDEX margin), for --flip, and exit")
    ap.add_argument("--blurpool", type=int, default=0, help="FFCV's BlurPool on the strided convs (ctrain --blurpool)")
    ap.add_argument("--drop-path", type=float, default=0.0,
                    help="timm's stochastic depth at this drop_path_rate, on ctrain's rows (ctrain --drop-path)")
    ap.add_argument("--out", required=True)
    a = ap.parse_args(argv)
    torch.manual_seed(a.seed)
    torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))
    model = build(a.arch, a.in_ch, a.classes)
    if a.blurpool:
        apply_blurpool(model)
    # ctrain's key of epoch 1's first batch (nn/drop_path.c drop_path_batch_key, seed ^ its tag).
    drop_key = rng_key(a.seed ^ 0xD209BA7, 1, 0)
    drop_masks = apply_drop_path(model, a.drop_path, drop_key, a.batch) if a.drop_path > 0 else {}
    # Non-trivial BN state so that a swapped gamma/beta or a mean/var mix-up cannot pass.
    g = torch.Generator().manual_seed(a.seed + 1)
    with torch.no_grad():
        for mod in model.modules():
            if isinstance(mod, nn.BatchNorm2d):
                C = mod.num_features
                mod.weight.copy_(0.5 + torch.rand(C, generator=g))
                mod.bias.copy_(0.1 * torch.randn(C, generator=g))
                mod.running_mean.copy_(0.1 * torch.randn(C, generator=g))
                mod.running_var.copy_(0.5 + torch.rand(C, generator=g))
                mod.num_batches_tracked.fill_(3)
    os.makedirs(a.out, exist_ok=True)
    sd = {k: np_of(v) for k, v in model.state_dict().items()}
    save_safetensors(os.path.join(a.out, "weights.safetensors"), sd)

    x32 = torch.randn(a.batch, a.in_ch, a.size, a.size, generator=g)
    labels = torch.randint(0, a.classes, (a.batch,), generator=g)

    flips = [tuple(map(int, f.split(":"))) for f in a.flip.split(",") if f]
    record = [] if a.list_kinks else None

    def run(dtype, round_outputs=False, channels_last=False, threads=None):
        m = copy.deepcopy(model).to(dtype)
        if channels_last:
            m = m.to(memory_format=torch.channels_last)
        old_threads = torch.get_num_threads()
        if threads:
            torch.set_num_threads(threads)
        if flips or record is not None:
            calls = [0]

            def relu_hook(mod, inp, out):
                if not mod.training:
                    return None
                i = calls[0]
                calls[0] += 1
                x = inp[0]
                if record is not None:
                    record.append(x.detach() / x.detach().std())
                mask = (x > 0).to(x.dtype).flatten()
                for ci, fi in flips:
                    if ci == i:
                        mask[fi] = 1 - mask[fi]
                return x * mask.view_as(x)
            for mod in m.modules():
                if isinstance(mod, nn.ReLU):
                    mod.inplace = False  # the hook needs the pre-activation
                    mod.register_forward_hook(relu_hook)
        if round_outputs:
            for mod in m.modules():
                if isinstance(mod, (nn.Conv2d, nn.BatchNorm2d, nn.Linear)):
                    mod.register_forward_hook(lambda mod, i, o: o.float().to(dtype))
        x = x32.to(dtype)
        if channels_last:
            x = x.contiguous(memory_format=torch.channels_last)
        m.eval()
        with torch.no_grad():
            eval_logits = m(x)
        m.train()
        logits = m(x)
        loss = F.cross_entropy(logits, labels, label_smoothing=a.smoothing)
        loss.backward()
        named = dict(m.named_parameters())
        decay = [p for n, p in named.items() if not (a.wd_exclude and (p.ndim == 1))]
        no_decay = [p for n, p in named.items() if a.wd_exclude and p.ndim == 1]
        groups = [{"params": decay, "weight_decay": a.wd}]
        if no_decay:
            groups.append({"params": no_decay, "weight_decay": 0.0})
        opt = torch.optim.SGD(groups, lr=a.lr, momentum=a.momentum, nesterov=bool(a.nesterov))
        out = {"eval_logits": eval_logits, "logits": logits, "loss": loss.reshape(1)}
        for n, p in named.items():
            out["grad." + n] = p.grad.clone()
        for n, b in m.named_buffers():
            out["post." + n] = b.clone()
        opt.step()
        for n, p in named.items():
            out["step1." + n] = p.detach().clone()
        opt.step()  # same gradients again: exercises buf = momentum * buf + d
        for n, p in named.items():
            out["step2." + n] = p.detach().clone()
        torch.set_num_threads(old_threads)
        return out

    ref = run(torch.float64)
    if a.list_kinks:
        near = []
        for i, x in enumerate(record):
            v, idx = x.abs().flatten().topk(min(a.list_kinks, x.numel()), largest=False)
            near += [(m, i, j) for m, j in zip(v.tolist(), idx.tolist())]
        for m, i, j in sorted(near)[:a.list_kinks]:
            print("%d:%d margin %.2e" % (i, j, m))
        return 0
    tensors = {"x": np_of(x32.permute(0, 2, 3, 1)), "labels": np_of(labels).astype(np.int64)}
    for k, v in ref.items():
        tensors[k] = np_of(v)
    for idx, rows in drop_masks.items():
        tensors["drop.%d" % idx] = np.array(rows, dtype=np.float64)
    r32 = run(torch.float32) if (a.report_fp32 or a.fp32_floor) else None

    def rel(k, r=None):
        r = r32 if r is None else r
        d = (r[k].double() - ref[k].double()).norm()
        return (d / ref[k].double().norm().clamp_min(1e-30)).item()

    if a.fp32_floor:
        # Norm-wise relative error of torch float32 against the float64 reference, per quantity:
        # how much float32 rounding alone moves each result on this problem (its conditioning).
        # One float32 run is one sample of that error: where a result hangs on a few ReLU inputs
        # within rounding of zero or on BN channels of a few nearly equal values, two equally valid
        # float32 summation orders land up to 9x apart (wide_resnet50_2 32x32 batch 4:
        # layer4.2.conv3's gradient 8.7e-3 from float64 in torch's NCHW run, 7.6e-2 in its
        # channels_last run; tools/parity_spread.py). The floor is the largest of three torch runs
        # that differ only in summation order: NCHW, channels_last, and one thread.
        others = [run(torch.float32, channels_last=True), run(torch.float32, threads=1)]
        for k in ref:
            if ref[k].dtype.is_floating_point:
                tensors["floor." + k] = np.array([max(rel(k, r) for r in [r32] + others)], dtype=np.float64)
    meta = {k: getattr(a, k) for k in ("arch", "in_ch", "classes", "batch", "size", "seed", "smoothing", "lr",
                                        "momentum", "wd", "nesterov", "wd_exclude", "blurpool", "drop_path")}
    meta["drop_key"] = str(drop_key)
    meta["torch"] = torch.__version__
    save_safetensors(os.path.join(a.out, "ref.safetensors"), tensors, meta)
    print("%s: loss %.6f, %d params, reference in float64 written to %s" %
          (a.arch, ref["loss"].item(), sum(p.numel() for p in model.parameters()), a.out))

    if a.report_fp32:
        # How far torch's own float32 run is from the float64 reference (the fp32 noise floor).
        grads = [k for k in ref if k.startswith("grad.")]
        worst = max(grads, key=rel)
        print("torch fp32 vs fp64: logits %.2e loss %.2e eval_logits %.2e worst grad %.2e (%s)" %
              (rel("logits"), rel("loss"), rel("eval_logits"), rel(worst), worst[5:]))
    if a.explain_fp32:
        r32 = run(torch.float64, round_outputs=True)
        grads = [k for k in ref if k.startswith("grad.")]
        worst = max(grads, key=rel)
        print("fp64 with fp32-rounded conv/BN/fc outputs vs fp64: logits %.2e loss %.2e worst grad %.2e (%s)" %
              (rel("logits"), rel("loss"), rel(worst), worst[5:]))
    if a.explain_kinks:
        explain_kinks(model, x32, labels, a.smoothing)


def explain_kinks(model, x32, labels, smoothing):
    """A gradient is piecewise smooth: ReLU and max-pool choose a branch per element. Where an input
    lies within rounding of a kink (a pre-activation ~1e-7 from zero, a near-tie in a pooling
    window), float32 and float64 can take different branches, and with batch statistics over a few
    rows one such element moves a whole channel's gradient. This separates that from the smooth
    part: run float32 recording its branches, then float64 once freely and once forced onto them."""
    def run(dtype, record=None, replay=None):
        m = copy.deepcopy(model).to(dtype)
        m.train()
        calls = [0]

        def hook(mod, inp, out):
            i = calls[0]
            calls[0] += 1
            if isinstance(mod, nn.ReLU):
                if record is not None:
                    record.append(inp[0].detach() > 0)
                if replay is not None:
                    return inp[0] * replay[i].to(dtype)
            else:
                o, idx = F.max_pool2d(inp[0], mod.kernel_size, mod.stride, mod.padding, return_indices=True)
                if record is not None:
                    record.append(idx)
                if replay is not None:
                    return inp[0].flatten(2).gather(2, replay[i].flatten(2)).view_as(o)
        for mod in m.modules():
            if isinstance(mod, nn.ReLU):
                mod.inplace = False  # the hook needs the pre-activation
            if isinstance(mod, (nn.ReLU, nn.MaxPool2d)):
                mod.register_forward_hook(hook)
        F.cross_entropy(m(x32.to(dtype)), labels, label_smoothing=smoothing).backward()
        return {n: p.grad.double() for n, p in m.named_parameters()}

    b32, b64 = [], []
    g32 = run(torch.float32, record=b32)
    g64 = run(torch.float64, record=b64)
    g64f = run(torch.float64, replay=b32)
    flips = sum(int((p != q).sum()) for p, q in zip(b32, b64))
    total = sum(p.numel() for p in b32)

    def worst(a, b):
        return max((((a[k] - b[k]).norm() / b[k].norm().clamp_min(1e-30)).item(), k) for k in a)
    print("kinks: %d of %d ReLU/max-pool branch choices differ between float32 and float64" % (flips, total))
    print("  torch float32 vs float64:                          worst grad %.2e (%s)" % worst(g32, g64))
    print("  torch float32 vs float64 on float32's branches:    worst grad %.2e (%s)" % worst(g32, g64f))


if __name__ == "__main__":
    # --each-line: one reference per line of stdin (that line's arguments), in one process, so
    # torch is imported once (tests/test_parity.sh: ~3 CPU-s an import, ten references). Each call
    # seeds torch, sets its thread count and builds its own model, so a reference's bytes are the
    # same as in a process of its own.
    if sys.argv[1:] == ["--each-line"]:
        import shlex
        for line in sys.stdin:
            if line.strip():
                rc = main(shlex.split(line))
                if rc:
                    sys.exit(rc)
        sys.exit(0)
    sys.exit(main())
