#!/usr/bin/python3
"""PyTorch + cuDNN peer of tools/bench_gpu_train.c: the same model (tools/torch_ref.py's builder:
torchvision ResNets, the CIFAR ResNets with projection shortcuts), the same step on one random
batch, the same numerics contract as ctrain's bf16 path, one line in the same format.

  python3 tools/bench_gpu_torch.py ARCH SIZE BATCH [STEPS=20] [WARMUP=5] [--precision bf16|fp32]
      [--classes N] [--compile [--compile-mode MODE]] [--dry-run]

The step, as ctrain's: a uint8 NHWC batch in pinned host memory copied to the device and
normalised there ((x/255 - mean)/std with ImageNet's mean/std, as one multiply-add), forward in
channels_last with bf16 autocast over fp32 master weights (fp32: autocast off and TF32 off, since
ctrain's fp32 path is true fp32), fp32 cross-entropy, backward, torch.optim.SGD with train's
defaults (lr 0.1, momentum 0.9, weight decay 1e-4), then the loss read back (loss.item()) and a
synchronize: each step's wall time is its whole cost, as ctrain's is. cudnn.benchmark is on, so
the warm-up steps also pick the convolution algorithms.

Memory: 'held' is torch.cuda.max_memory_allocated (peak of live tensors: weights, gradients,
momentum, activations, cuDNN workspaces); 'device used' is the growth of the device's used memory
from just after CUDA initialised to the end (adds the caching allocator's slack and the cuDNN and
cuBLAS kernels loaded on first use), the same measure as ctrain's.

--compile runs the model under torch.compile (the peer at its best; compiling happens during the
warm-up, which must then be >= 1). --dry-run runs the same code on the CPU (autocast bf16 on the
CPU) so tests can check the script without a GPU; its numbers are not a benchmark.
"""
import argparse
import os
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_ref import build  # noqa: E402

CIFAR = ("resnet20", "resnet32", "resnet44", "resnet56", "resnet110")


def main():
    ap = argparse.ArgumentParser(description="PyTorch peer of bench_gpu_train (one line, same format)")
    ap.add_argument("arch")
    ap.add_argument("size", type=int)
    ap.add_argument("batch", type=int)
    ap.add_argument("steps", type=int, nargs="?", default=20)
    ap.add_argument("warmup", type=int, nargs="?", default=5)
    ap.add_argument("--precision", choices=("bf16", "fp32"), default="bf16")
    ap.add_argument("--classes", type=int, default=None)
    ap.add_argument("--compile", action="store_true", help="run the model under torch.compile")
    ap.add_argument("--compile-mode", default="default", help="torch.compile mode (default, reduce-overhead, max-autotune)")
    ap.add_argument("--dry-run", action="store_true", help="run on the CPU to check the script (no benchmark)")
    a = ap.parse_args()
    if a.steps < 1 or a.batch < 1 or a.size < 8 or a.warmup < 0:
        sys.exit("bench_gpu_torch: STEPS and BATCH must be >= 1, SIZE >= 8, WARMUP >= 0")
    if a.arch not in CIFAR and not a.arch.startswith(("resnet", "resnext", "wide_resnet")):
        sys.exit("bench_gpu_torch: unknown ARCH '%s' (a CIFAR resnet20-110 or a torchvision ResNet, ResNeXt or "
                 "Wide ResNet name)" % a.arch)
    if a.compile and not hasattr(torch, "compile"):
        sys.exit("bench_gpu_torch: --compile: torch %s has no torch.compile" % torch.__version__)
    if a.compile and a.warmup < 1:
        sys.exit("bench_gpu_torch: --compile needs WARMUP >= 1 (compiling happens in the first step)")
    if a.dry_run:
        dev = torch.device("cpu")
        # A check, not a benchmark: one thread, which stays quick on a shared, busy machine where
        # spinning OpenMP threads would wait for each other's time slices.
        torch.set_num_threads(1)
    else:
        if not torch.cuda.is_available():
            sys.exit("bench_gpu_torch: torch %s sees no CUDA device (built for CUDA %s): this benchmark needs "
                     "an NVIDIA GPU and a CUDA build of torch (or --dry-run)" % (torch.__version__, torch.version.cuda))
        dev = torch.device("cuda")
    cuda = dev.type == "cuda"
    bf16 = a.precision == "bf16"
    classes = a.classes or (10 if a.arch in CIFAR else 1000)
    if cuda:
        torch.backends.cudnn.benchmark = True
        if not bf16:  # ctrain's fp32 path does fp32 arithmetic; TF32 would be a lower precision
            torch.backends.cudnn.allow_tf32 = False
            torch.backends.cuda.matmul.allow_tf32 = False
        torch.cuda.synchronize()
        free_before = torch.cuda.mem_get_info()[0]

    torch.manual_seed(1)
    model = build(a.arch, 3, classes).to(dev).to(memory_format=torch.channels_last).train()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
    run_model = torch.compile(model, mode=a.compile_mode) if a.compile else model

    g = torch.Generator().manual_seed(7)
    x_host = torch.randint(0, 256, (a.batch, a.size, a.size, 3), dtype=torch.uint8, generator=g)
    y_host = torch.randint(0, classes, (a.batch,), generator=g)
    if cuda:
        x_host, y_host = x_host.pin_memory(), y_host.pin_memory()
    mean = torch.tensor([0.485, 0.456, 0.406], device=dev).view(1, 3, 1, 1)
    std = torch.tensor([0.229, 0.224, 0.225], device=dev).view(1, 3, 1, 1)
    scale, shift = 1.0 / (255.0 * std), -mean / std

    def step():
        xd = x_host.to(dev, non_blocking=True)
        yd = y_host.to(dev, non_blocking=True)
        # NHWC bytes viewed as NCHW are channels_last already: no transpose is made.
        x = torch.addcmul(shift, xd.permute(0, 3, 1, 2).float(), scale).contiguous(memory_format=torch.channels_last)
        with torch.autocast(device_type=dev.type, dtype=torch.bfloat16, enabled=bf16):
            logits = run_model(x)
        loss = F.cross_entropy(logits.float(), yd)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        value = loss.item()
        if cuda:
            torch.cuda.synchronize()
        return value

    wall, loss = [], float("nan")
    for it in range(a.warmup + a.steps):
        t0 = time.perf_counter()
        loss = step()
        t1 = time.perf_counter()
        if it >= a.warmup:
            wall.append(t1 - t0)
    med = sorted(wall)[len(wall) // 2]  # the upper median for an even count, as bench_gpu_train

    mib = 1048576.0
    if cuda:
        held = torch.cuda.max_memory_allocated() / mib
        used = max(0, free_before - torch.cuda.mem_get_info()[0]) / mib
        cudnn = torch.backends.cudnn.version()
    else:
        held = used = 0.0
        cudnn = None
    mode = "cpu-dry" if a.dry_run else ("compile" if a.compile else "eager")
    print("pytorch %-9s %3dx%-3d batch %-4d %-4s %-7s: %9.1f img/s (median step %.2f ms), "
          "memory %.1f MiB held, %.1f MiB device used, final loss %.4f, torch %s cudnn %s cuda %s%s"
          % (a.arch, a.size, a.size, a.batch, a.precision, mode, a.batch / med, med * 1e3, held, used, loss,
             torch.__version__, cudnn, torch.version.cuda,
             (" compile-mode %s" % a.compile_mode) if a.compile else ""))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
