#!/usr/bin/env python3
"""Peers of tools/bench_infer.c: the same eval forward in PyTorch and in onnxruntime.

  bench_infer_peers.py torch ARCH SIZE BATCH ITERS WARMUP WEIGHTS.safetensors  (a venv with torch 2.x,
      torchvision: eval(), torch.inference_mode(), channels_last, the torchvision model loaded
      strictly from the file ctrain wrote)
  bench_infer_peers.py ort ARCH SIZE BATCH ITERS WARMUP MODEL.onnx  (onnxruntime, the graph that
      `train export` wrote; intra-op threads = THREADS, one inter-op thread, no spinning when
      OMP_WAIT_POLICY=passive, as the OpenMP peers then do not spin either)

THREADS comes from OMP_NUM_THREADS. The input is bench_infer.c's: uint8 NHWC pixel i is
(i * 2654435761 mod 2^32) >> 13 & 255, normalised with ImageNet's mean and std. Prints one line in
bench_infer's format: img/s from the median wall time of a batch, images per CPU-second of the
process, peak RSS, and the first three logits of image 0.
"""
import os
import resource
import statistics
import sys
import time

import numpy as np


def images(n, size):
    i = np.arange(n * size * size * 3, dtype=np.uint64)
    x = (((i * np.uint64(2654435761)) % np.uint64(1 << 32)) >> np.uint64(13)) & np.uint64(255)
    x = x.astype(np.float32).reshape(n, size, size, 3)
    mean = np.array([0.485, 0.456, 0.406], np.float32)
    std = np.array([0.229, 0.224, 0.225], np.float32)
    return np.ascontiguousarray(((x / np.float32(255) - mean) / std).transpose(0, 3, 1, 2))  # NCHW


def timed(fn, iters, warmup):
    wall, cpu, out = [], 0.0, None
    for it in range(warmup + iters):
        t0, c0 = time.perf_counter(), time.process_time()
        out = fn()
        t1, c1 = time.perf_counter(), time.process_time()
        if it >= warmup:
            wall.append(t1 - t0)
            cpu += c1 - c0
    return statistics.median_low(wall), cpu, out


def main():
    if len(sys.argv) != 8 or sys.argv[1] not in ("torch", "ort"):
        sys.exit(__doc__)
    peer, arch = sys.argv[1], sys.argv[2]
    size, batch, iters, warmup = map(int, sys.argv[3:7])
    path = sys.argv[7]
    threads = int(os.environ.get("OMP_NUM_THREADS", os.cpu_count()))
    x = images(batch, size)
    if peer == "torch":
        import torch
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        from torch_ref import build, load_safetensors

        torch.set_num_threads(threads)
        m = build(arch, 3, 1000)
        sd, _ = load_safetensors(path)
        m.load_state_dict({k: torch.from_numpy(v) for k, v in sd.items()}, strict=True)
        m = m.eval().to(memory_format=torch.channels_last)
        xt = torch.from_numpy(x).contiguous(memory_format=torch.channels_last)

        def run():
            with torch.inference_mode():
                return m(xt).numpy()
        name, version = "pytorch", "torch " + torch.__version__
    else:
        import onnxruntime as ort

        so = ort.SessionOptions()
        so.intra_op_num_threads = threads
        so.inter_op_num_threads = 1
        so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        if os.environ.get("OMP_WAIT_POLICY", "").lower() == "passive":
            so.add_session_config_entry("session.intra_op.allow_spinning", "0")
        s = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])

        def run():
            return s.run(["logits"], {"input": x})[0]
        name, version = "onnxrt", "onnxruntime " + ort.__version__
    med, cpu, out = timed(run, iters, warmup)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    print("%-11s %-9s %dx%d batch %-3d threads %d: %7.2f img/s (median batch %.1f ms), %7.2f img/CPU-s, "
          "peak RSS %4.0f MB, logits[0][:3] %.5f %.5f %.5f, %s"
          % (name, arch, size, size, batch, threads, batch / med, med * 1e3, batch * iters / cpu, rss,
             out[0][0], out[0][1], out[0][2], version))


if __name__ == "__main__":
    main()
