#!/usr/bin/python3
"""PyTorch side of ctrain's end-to-end checks (run with Debian's /usr/bin/python3: torch, torchvision).

  train        replay a ctrain run in PyTorch: the same initial weights and the same batches, dumped by
               `train --dump-batches DIR` (DIR/init.safetensors, DIR/train_batches.bin with the
               learning rate of every step, DIR/val_batches.bin), SGD with the same settings; writes
               the loss of every step and the final val loss/top-1 as JSON. --ranks R replays a
               data-parallel run (DIR/train_batches.rankK.bin, DIR/val_batches.rankK.bin) with
               DistributedDataParallel's semantics: every rank's replica starts the step with the
               same weights and rank 0's BN buffers (broadcast_buffers), backward on its own batch
               with batch statistics over that batch alone, gradients averaged over the ranks, one
               SGD step; the reported loss is the mean over the global batch.
               --ema DECAY [--ema-every K]: also keep timm's ModelEmaV2 average, as `train --ema`
               documents it: starting from the initial state, after every K-th optimizer step
               (global step numbers, from 1) ema += (1 - DECAY) (w - ema) in float32 over the
               weights and the BN running statistics, num_batches_tracked copied; no BN
               recalibration. The EMA model is evaluated beside the plain one (JSON "ema", and per
               epoch with --epoch-log).
  evaluate     val loss/top-1/top-5 of a safetensors state_dict on DIR/val_batches.bin (the images
               ctrain evaluated, already cropped): compared with `train --evaluate`.
  make-weights a torchvision (or CIFAR ResNet) state_dict with random weights AND random BN statistics,
               so that evaluating it exercises every tensor (an untouched BN would hide mix-ups).

               The loss is ctrain's for the run's flags: the cross-entropy with --smoothing, against
               the batch's Mixup/CutMix soft target lam * y(a) + (1 - lam) * y(b) when it was mixed
               (the dump carries lam and the partners' labels; the pixels are already mixed), or with
               --bce timm's BinaryCrossEntropy (--bce-target-thresh, --bce-sum) on the same target.

Batch files: per batch "BTC2" | i32 n, h, w, c, epoch | i64 step | f32 lr | f32 lam | i32 labels[n]
| i32 labels_b[n] | u8 NHWC pixels (trainer/faults.h).
Models and the safetensors writer come from tools/torch_ref.py (the CPU executor's parity reference).
"""
import argparse
import copy
import json
import os
import struct
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_ref import apply_blurpool, build, save_safetensors  # noqa: E402

ST_DT = {"F32": np.float32, "F64": np.float64, "I64": np.int64, "I32": np.int32, "F16": np.float16}


def load_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    base = 8 + n
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        b, e = info["data_offsets"]
        a = np.frombuffer(data[base + b:base + e], dtype=ST_DT[info["dtype"]]).reshape(info["shape"])
        out[name] = torch.from_numpy(a.copy())
    return out


def read_batches(path):
    with open(path, "rb") as f:
        data = f.read()
    off, out = 0, []
    while off < len(data):
        if data[off:off + 4] != b"BTC2":
            raise SystemExit("%s: bad batch record at byte %d (dumped by another ctrain version?)" % (path, off))
        n, h, w, c, epoch = struct.unpack_from("<5i", data, off + 4)
        (step,) = struct.unpack_from("<q", data, off + 24)
        lr, lam = struct.unpack_from("<2f", data, off + 32)
        off += 40
        labels = np.frombuffer(data, np.int32, n, off).astype(np.int64)
        off += 4 * n
        labels_b = np.frombuffer(data, np.int32, n, off).astype(np.int64)
        off += 4 * n
        px = np.frombuffer(data, np.uint8, n * h * w * c, off).reshape(n, h, w, c)
        off += n * h * w * c
        out.append({"n": n, "epoch": epoch, "step": step, "lr": lr, "lam": lam, "labels": torch.from_numpy(labels),
                    "labels_b": torch.from_numpy(labels_b), "px": px})
    return out


def floats(s):
    return [float(v) for v in s.split(",")]


def to_input(px, mean, std):
    c = px.shape[3]
    mean = np.array(mean * c if len(mean) == 1 else mean, np.float32)
    std = np.array(std * c if len(std) == 1 else std, np.float32)
    x = (px.astype(np.float32) / np.float32(255.0) - mean) / std
    return torch.from_numpy(np.ascontiguousarray(x.transpose(0, 3, 1, 2)))


def make_model(a, state):
    m = build(a.arch, a.in_ch, a.classes)
    m.load_state_dict(state, strict=True)
    return m


def evaluate(model, batches, mean, std, tta="none"):
    model.eval()
    n = loss = c1 = c5 = 0
    with torch.no_grad():
        for b in batches:
            x = to_input(b["px"], mean, std)
            logits = model(x)
            if tta == "flip":  # FFCV's lr_tta, averaged: the mirror image is flipped along W (NCHW dim 3)
                logits = (logits + model(torch.flip(x, dims=[3]))) / 2
            loss += F.cross_entropy(logits, b["labels"], reduction="sum").item()
            k = min(5, logits.shape[1])
            top = logits.topk(k, 1).indices
            c1 += (top[:, 0] == b["labels"]).sum().item()
            c5 += (top == b["labels"][:, None]).any(1).sum().item()
            n += b["n"]
    return {"n": n, "loss": loss / n, "top1": 100.0 * c1 / n, "top5": 100.0 * c5 / n}


class Ema:
    """timm ModelEmaV2 with ctrain's arithmetic (nn/ema.c): e + (1 - decay) (w - e), unfused float32."""

    def __init__(self, model, decay, every):
        self.model = copy.deepcopy(model)
        self.every = every
        self.a = torch.tensor(np.float32(1) - np.float32(decay))  # 1.0f - decay in float32, as ctrain

    @torch.no_grad()
    def after_step(self, model, step):
        if step % self.every:
            return
        for e, w in zip(self.model.state_dict().values(), model.state_dict().values()):
            if e.dtype.is_floating_point:
                e.copy_(e + self.a * (w - e))
            else:  # num_batches_tracked: a counter, copied
                e.copy_(w)


def batch_files(a, kind):
    if a.ranks == 1:
        return [read_batches(os.path.join(a.dump, kind + ".bin"))]
    return [read_batches(os.path.join(a.dump, "%s.rank%d.bin" % (kind, r))) for r in range(a.ranks)]


def train_loss(a, logits, b):
    """ctrain's training loss of one batch (trainer flags --label-smoothing, --bce*): on the soft
    target lam * y(labels) + (1 - lam) * y(labels_b), y the smoothed one-hot (timm's mixup_target)."""
    K, lam = logits.shape[1], float(b["lam"])
    if not a.bce:
        if lam >= 1.0:
            return F.cross_entropy(logits, b["labels"], label_smoothing=a.smoothing)
        t = lam * F.one_hot(b["labels"], K).to(logits.dtype) + (1 - lam) * F.one_hot(b["labels_b"], K).to(logits.dtype)
        return F.cross_entropy(logits, t, label_smoothing=a.smoothing)
    off = a.smoothing / K
    on = 1.0 - a.smoothing + off
    def onehot(y):
        return torch.full((len(y), K), off, dtype=logits.dtype).scatter_(1, y.view(-1, 1), on)
    t = onehot(b["labels"]) * lam + onehot(b["labels_b"]) * (1.0 - lam)
    if a.bce_target_thresh >= 0:
        t = t.gt(a.bce_target_thresh).to(logits.dtype)
    if a.bce_sum:
        return F.binary_cross_entropy_with_logits(logits, t, reduction="none").sum(-1).mean()
    return F.binary_cross_entropy_with_logits(logits, t)


def ddp_step(model, opt, per_rank, mean, std, a):
    """One DDP step in one process: the same result as R processes, by construction."""
    params = [p for p in model.parameters()]
    buffers0 = [b.clone() for b in model.buffers()]
    grads, loss_sum, n_sum, buffers_after0 = None, 0.0, 0, None
    for r, b in enumerate(per_rank):
        with torch.no_grad():  # broadcast_buffers: every replica starts from rank 0's buffers
            for buf, b0 in zip(model.buffers(), buffers0):
                buf.copy_(b0)
        opt.zero_grad(set_to_none=True)
        loss = train_loss(a, model(to_input(b["px"], mean, std)), b)
        loss.backward()
        g = [p.grad.detach().clone() for p in params]
        grads = g if grads is None else [x + y for x, y in zip(grads, g)]  # rank order, like ctrain
        loss_sum += loss.item() * b["n"]
        n_sum += b["n"]
        if r == 0:
            buffers_after0 = [buf.clone() for buf in model.buffers()]
    with torch.no_grad():
        for buf, b0 in zip(model.buffers(), buffers_after0):  # rank 0's replica is the one kept
            buf.copy_(b0)
    for p, g in zip(params, grads):
        p.grad = g / len(per_rank)
    opt.step()
    return loss_sum / n_sum


def cmd_train(a):
    init = os.path.join(a.dump, "init.safetensors")
    state = load_safetensors(init)
    model = make_model(a, state)
    with open(init, "rb") as f:  # train --blurpool records it in the metadata (the tensors cannot)
        (n,) = struct.unpack("<Q", f.read(8))
        if json.loads(f.read(n)).get("__metadata__", {}).get("blurpool") == "1":
            apply_blurpool(model)
    named = dict(model.named_parameters())
    decay = [p for n, p in named.items() if not (a.wd_exclude and p.ndim == 1)]
    no_decay = [p for n, p in named.items() if a.wd_exclude and p.ndim == 1]
    groups = [{"params": decay, "weight_decay": a.wd}]
    if no_decay:
        groups.append({"params": no_decay, "weight_decay": 0.0})
    opt = torch.optim.SGD(groups, lr=0.1, momentum=a.momentum, nesterov=bool(a.nesterov))
    mean, std = floats(a.mean), floats(a.std)
    losses, steps = [], []
    model.train()
    ranks = batch_files(a, "train_batches")
    if len({len(f) for f in ranks}) != 1:
        raise SystemExit("ranks dumped different numbers of batches: %s" % [len(f) for f in ranks])
    # --epoch-log: the val top-1 after every epoch and the seconds spent so far (training and those
    # evaluations, not reading the batch files), for time-to-accuracy against ctrain's metrics.jsonl.
    val = [b for f in batch_files(a, "val_batches") for b in f] if a.epoch_log else None
    ema = Ema(model, a.ema, a.ema_every) if a.ema else None
    epoch_log, t_spent, t0 = [], 0.0, time.perf_counter()
    steps_total = len(ranks[0])
    for i, per_rank in enumerate(zip(*ranks)):
        b = per_rank[0]
        if any(x["step"] != b["step"] or x["lr"] != b["lr"] for x in per_rank):
            raise SystemExit("step %d: ranks disagree on the step or the learning rate" % b["step"])
        for g in opt.param_groups:
            g["lr"] = b["lr"]
        if a.ranks == 1:
            opt.zero_grad(set_to_none=True)
            loss = train_loss(a, model(to_input(b["px"], mean, std)), b)
            loss.backward()
            opt.step()
            losses.append(loss.item())
        else:
            losses.append(ddp_step(model, opt, per_rank, mean, std, a))
        steps.append(b["step"])
        if ema is not None:
            ema.after_step(model, b["step"])
        if val is not None and (i + 1 == steps_total or ranks[0][i + 1]["epoch"] != b["epoch"]):
            t1 = time.perf_counter()
            r = evaluate(model, val, mean, std, a.tta)
            model.train()
            re = evaluate(ema.model, val, mean, std, a.tta) if ema is not None else None
            t2 = time.perf_counter()
            t_spent += t2 - t0
            rec = {"epoch": len(epoch_log) + 1, "step": b["step"], "time": t_spent, "eval_time": t2 - t1,
                   "val_top1": r["top1"], "val_loss": r["loss"]}
            if re is not None:
                rec.update({"ema_val_top1": re["top1"], "ema_val_loss": re["loss"]})
            epoch_log.append(rec)
            print("torch: epoch %d val loss %.4f top-1 %.2f%%%s at %.1fs" % (
                len(epoch_log), r["loss"], r["top1"],
                "  |  ema loss %.4f top-1 %.2f%%" % (re["loss"], re["top1"]) if re else "", t_spent), flush=True)
            t0 = time.perf_counter()
    res = evaluate(model, [b for f in batch_files(a, "val_batches") for b in f], mean, std, a.tta)
    res.update({"steps": steps, "losses": losses})
    if ema is not None:
        res["ema"] = evaluate(ema.model, [b for f in batch_files(a, "val_batches") for b in f], mean, std, a.tta)
    if val is not None:
        res["epochs"] = epoch_log
    with open(a.out, "w") as f:
        json.dump(res, f)
    if a.save_weights:
        save_safetensors(a.save_weights, {k: v.detach().numpy() for k, v in model.state_dict().items()})
    if a.save_ema_weights:
        save_safetensors(a.save_ema_weights, {k: v.detach().numpy() for k, v in ema.model.state_dict().items()})
    print("torch: %d steps, final loss %.4f, val loss %.4f top-1 %.2f%%%s" % (
        len(losses), losses[-1], res["loss"], res["top1"],
        "  |  ema loss %.4f top-1 %.2f%%" % (res["ema"]["loss"], res["ema"]["top1"]) if ema is not None else ""))


def cmd_evaluate(a):
    model = make_model(a, load_safetensors(a.weights))
    res = evaluate(model, read_batches(a.val), floats(a.mean), floats(a.std), a.tta)
    print(json.dumps(res))


def cmd_make_weights(a):
    torch.manual_seed(a.seed)
    m = build(a.arch, a.in_ch, a.classes)
    g = torch.Generator().manual_seed(a.seed + 1)
    with torch.no_grad():
        for mod in m.modules():
            if isinstance(mod, torch.nn.BatchNorm2d):
                C = mod.num_features
                mod.weight.copy_(0.5 + torch.rand(C, generator=g))
                mod.bias.copy_(0.2 * torch.randn(C, generator=g))
                mod.running_mean.copy_(0.2 * torch.randn(C, generator=g))
                mod.running_var.copy_(0.5 + torch.rand(C, generator=g))
                mod.num_batches_tracked.fill_(7)
        # Spread the logits: with the default fc init a random network predicts one class for
        # every image, and a top-1 comparison would then check nothing.
        m.fc.weight.mul_(20.0)
        m.fc.bias.zero_()
    save_safetensors(a.out, {k: v.detach().numpy() for k, v in m.state_dict().items()})
    print("wrote %s (%s, %d classes, %d input channels)" % (a.out, a.arch, a.classes, a.in_ch))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    for name in ("train", "evaluate", "make-weights"):
        p = sub.add_parser(name)
        p.add_argument("--arch", required=True)
        p.add_argument("--in-ch", type=int, default=3)
        p.add_argument("--classes", type=int, default=10)
        if name != "make-weights":
            p.add_argument("--mean", required=True, help="comma-separated, as in OUT/config.json")
            p.add_argument("--std", required=True)
    t = sub.choices["train"]
    t.add_argument("--dump", required=True, help="directory written by train --dump-batches")
    t.add_argument("--momentum", type=float, default=0.9)
    t.add_argument("--wd", type=float, default=1e-4)
    t.add_argument("--nesterov", type=int, default=0)
    t.add_argument("--wd-exclude", type=int, default=0)
    t.add_argument("--smoothing", type=float, default=0.0)
    t.add_argument("--bce", action="store_true", help="timm's BinaryCrossEntropy (train --bce)")
    t.add_argument("--bce-target-thresh", type=float, default=-1.0)
    t.add_argument("--bce-sum", action="store_true")
    t.add_argument("--ranks", type=int, default=1, help="replay a --ranks R run with DDP semantics")
    t.add_argument("--tta", choices=["none", "flip"], default="none", help="evaluations average the logits with the mirror image's")
    t.add_argument("--out", required=True, help="JSON with per-step losses and the final val result")
    t.add_argument("--save-weights", help="final state_dict as safetensors")
    t.add_argument("--epoch-log", action="store_true",
                   help="evaluate after every epoch; the JSON gets epochs: val top-1/loss (and the EMA's) and seconds spent so far")
    t.add_argument("--ema", type=float, default=0.0, metavar="DECAY",
                   help="also keep an EMA of the weights and BN statistics (train --ema) and evaluate it")
    t.add_argument("--ema-every", type=int, default=1, metavar="K", help="--ema: update the average every K optimizer steps")
    t.add_argument("--save-ema-weights", help="--ema: the average's final state_dict as safetensors")
    e = sub.choices["evaluate"]
    e.add_argument("--weights", required=True)
    e.add_argument("--val", required=True, help="val_batches.bin from train --dump-batches")
    e.add_argument("--tta", choices=["none", "flip"], default="none", help="flip: average the logits with the mirror image's")
    w = sub.choices["make-weights"]
    w.add_argument("--seed", type=int, default=0)
    w.add_argument("--out", required=True)
    a = ap.parse_args()
    if a.cmd == "train":
        if a.ema and not 0 < a.ema < 1:
            ap.error("--ema: the decay must be in (0, 1) (got %g)" % a.ema)
        if a.ema_every < 1 or (a.ema_every != 1 and not a.ema):
            ap.error("--ema-every: must be >= 1 and needs --ema")
        if a.save_ema_weights and not a.ema:
            ap.error("--save-ema-weights needs --ema")
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "2")))
    {"train": cmd_train, "evaluate": cmd_evaluate, "make-weights": cmd_make_weights}[a.cmd](a)


if __name__ == "__main__":
    main()
