#!/usr/bin/python3
"""PyTorch CPU peer of tools/bench_cpu_train.c: the same model (tools/torch_ref.py's builder:
torchvision ResNets, the CIFAR ResNets with projection shortcuts), the same step (forward, cross
entropy, backward, SGD momentum 0.9 weight decay 5e-4) on random data, the same thread count.

  /usr/bin/python3 tools/bench_cpu_torch.py ARCH SIZE BATCH [--steps 10] [--warmup 2]
      [--classes N] [--threads T] [--channels-last] [--compile] [--bf16]

Prints one line in bench_cpu_train's format: img/s from the median wall time of a step, img/s
from process CPU time / threads, peak RSS (includes the torch library itself). --compile wraps the
model in torch.compile (torch 2.x, inductor's C++ backend: needs g++); its compilation happens in
the warm-up steps, which are not timed. --bf16 runs forward and loss under torch.autocast("cpu",
bfloat16) (worth it only on a CPU with bf16 units: AVX512-BF16 or AMX).
"""
import argparse
import os
import resource
import statistics
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_ref import build  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("arch")
    ap.add_argument("size", type=int)
    ap.add_argument("batch", type=int)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--classes", type=int, default=None)
    ap.add_argument("--threads", type=int, default=int(os.environ.get("OMP_NUM_THREADS", os.cpu_count())))
    ap.add_argument("--channels-last", action="store_true")
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--bf16", action="store_true")
    a = ap.parse_args()
    if a.steps < 1 or a.batch < 1 or a.size < 8:
        sys.exit("bench_cpu_torch: steps, batch must be >= 1 and size >= 8")
    torch.set_num_threads(a.threads)
    torch.manual_seed(1)
    classes = a.classes or (10 if a.arch in ("resnet20", "resnet32", "resnet44", "resnet56", "resnet110") else 1000)
    model = build(a.arch, 3, classes).train()
    x = torch.randn(a.batch, 3, a.size, a.size)
    y = torch.randint(0, classes, (a.batch,))
    if a.channels_last:
        model = model.to(memory_format=torch.channels_last)
        x = x.contiguous(memory_format=torch.channels_last)
    if a.compile:
        if not hasattr(torch, "compile"):
            sys.exit("bench_cpu_torch: --compile needs torch 2.x (this is torch %s)" % torch.__version__)
        if a.warmup < 1:
            sys.exit("bench_cpu_torch: --compile needs at least one warm-up step (it compiles there)")
        model = torch.compile(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=5e-4)
    wall, cpu = [], 0.0
    for it in range(a.warmup + a.steps):
        t0, c0 = time.perf_counter(), time.process_time()
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.bf16):
            loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        t1, c1 = time.perf_counter(), time.process_time()
        if it >= a.warmup:
            wall.append(t1 - t0)
            cpu += c1 - c0
    med = statistics.median_low(wall)
    mode = ("chlast" if a.channels_last else "nchw") + ("+compile" if a.compile else "") + ("+bf16" if a.bf16 else "")
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    print("pytorch %-9s %3dx%-3d batch %-4d threads %d %-12s: %8.1f img/s (median step %.1f ms), "
          "%8.1f img/s by CPU time, peak RSS %.0f MB, torch %s, final loss %.3f"
          % (a.arch, a.size, a.size, a.batch, a.threads, mode,
             a.batch / med, med * 1e3, a.batch * a.steps / (cpu / a.threads), rss, torch.__version__, loss.item()))


if __name__ == "__main__":
    main()
