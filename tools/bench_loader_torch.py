#!/usr/bin/python3
"""PyTorch side of the loader benchmark, and the benchmark's image generator.

  bench_loader_torch.py make DIR --count N --short S [--classes 10] [--square]
      writes DIR/classNN/imgNNNNN.jpg: photo-like synthetic JPEGs (quality 90), short side S,
      aspect ratios 3:4 to 4:3 (or square), deterministic.
  bench_loader_torch.py run DIR --crop C [--workers W] [--batch B] [--seconds T] [--eval] [--val-resize R]
      torchvision ImageFolder + DataLoader with the same transforms as ctrain's loader:
      RandomResizedCrop(C) + RandomHorizontalFlip (eval: Resize(R) + CenterCrop(C)), PILToTensor
      (uint8, normalisation left to the device as in ctrain). W worker processes, torch threads 1.
Run with Debian's /usr/bin/python3 (torch, torchvision, PIL).
"""
import argparse, os, sys, time

def make(args):
    import numpy as np
    from PIL import Image
    rng = np.random.default_rng(1)
    for k in range(args.count):
        c = k % args.classes
        d = os.path.join(args.dir, 'class%02d' % c)
        os.makedirs(d, exist_ok=True)
        r = 1.0 if args.square else float(np.exp(rng.uniform(np.log(3 / 4), np.log(4 / 3))))
        h, w = (args.short, int(round(args.short * r))) if r >= 1 else (int(round(args.short / r)), args.short)
        # Photo-like: smooth random field over a few octaves, a few hard-edged shapes, sensor noise.
        img = np.zeros((h, w, 3), np.float32)
        for o in range(5):
            gh, gw = 2 + 3 * 2 ** o, 2 + 3 * 2 ** o
            g = rng.normal(size=(gh, gw, 3)).astype(np.float32)
            up = np.asarray(Image.fromarray(((g - g.min()) / (np.ptp(g) + 1e-6) * 255).astype(np.uint8)).resize(
                (w, h), Image.BICUBIC), np.float32) - 128
            img += up * (0.9 ** (o * 2))
        for _ in range(6):
            y0, x0 = rng.integers(0, h), rng.integers(0, w)
            y1, x1 = min(h, y0 + rng.integers(h // 8, h // 2)), min(w, x0 + rng.integers(w // 8, w // 2))
            img[y0:y1, x0:x1] += rng.normal(0, 40, size=3).astype(np.float32)
        img = img * 0.6 + 128 + rng.normal(0, 4, size=img.shape).astype(np.float32)
        a = np.clip(img, 0, 255).astype(np.uint8)
        Image.fromarray(a).save(os.path.join(d, 'img%05d.jpg' % k), quality=90)
    print('made %d JPEGs (short side %d) in %s' % (args.count, args.short, args.dir))

def cpu_seconds(pids):
    """utime + stime of the given processes (this one and the DataLoader workers), from /proc."""
    tick = os.sysconf('SC_CLK_TCK')
    total = 0.0
    for pid in pids:
        with open('/proc/%d/stat' % pid) as f:
            fields = f.read().rsplit(')', 1)[1].split()
        total += (int(fields[11]) + int(fields[12])) / tick
    return total

def run(args):
    import torch
    import torchvision.transforms as T
    from torchvision.datasets import ImageFolder
    torch.set_num_threads(1)
    if args.eval:
        tf = T.Compose([T.Resize(args.val_resize or int(args.crop / 0.875)), T.CenterCrop(args.crop), T.PILToTensor()])
    else:
        tf = T.Compose([T.RandomResizedCrop(args.crop), T.RandomHorizontalFlip(), T.PILToTensor()])
    ds = ImageFolder(args.dir, transform=tf)
    dl = torch.utils.data.DataLoader(ds, batch_size=args.batch, shuffle=not args.eval, num_workers=args.workers,
                                     drop_last=not args.eval, persistent_workers=args.workers > 0)
    # Epoch 0 warms the page cache and starts the workers; steady state is measured after it.
    n0, t0 = 0, time.time()
    for x, y in dl:
        n0 += x.shape[0]
    first = time.time() - t0
    pids = [os.getpid()] + ([w.pid for w in dl._iterator._workers] if args.workers > 0 else [])
    n, t1, c1 = 0, time.time(), cpu_seconds(pids)
    while time.time() - t1 < args.seconds:
        for x, y in dl:
            n += x.shape[0]
    dt, cpu = time.time() - t1, cpu_seconds(pids) - c1
    per = max(args.workers, 1)
    print('torch %-5s crop %3d from %s (%d images): workers %d batch %d | epoch0 %.0f img/s | steady %.0f img/s '
          '= %.0f img/s per worker | %.0f img per CPU-second (main + workers)' % (
              'eval' if args.eval else 'train', args.crop, args.dir, len(ds), args.workers, args.batch, n0 / first,
              n / dt, n / dt / per, n / cpu))
    print('RESULT torch mode=%s crop=%d workers=%d img_s=%.1f img_s_per_worker=%.1f img_per_cpu_s=%.1f' % (
        'eval' if args.eval else 'train', args.crop, args.workers, n / dt, n / dt / per, n / cpu))

def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest='cmd', required=True)
    m = sub.add_parser('make')
    m.add_argument('dir'); m.add_argument('--count', type=int, default=1000); m.add_argument('--short', type=int, default=256)
    m.add_argument('--classes', type=int, default=10); m.add_argument('--square', action='store_true')
    r = sub.add_parser('run')
    r.add_argument('dir'); r.add_argument('--crop', type=int, default=224); r.add_argument('--workers', type=int, default=1)
    r.add_argument('--batch', type=int, default=64); r.add_argument('--seconds', type=float, default=5)
    r.add_argument('--eval', action='store_true'); r.add_argument('--val-resize', type=int, default=0)
    args = ap.parse_args()
    make(args) if args.cmd == 'make' else run(args)

if __name__ == '__main__':
    main()
