"""FFCV side of the loader benchmark (tools/bench_loader_ffcv.sh sets up its venv and runs it).

  bench_loader_ffcv.py write DIR OUT.beton --mode jpg|raw
      the ImageFolder tree DIR (tools/bench_loader_torch.py make) as an FFCV dataset: RGBImageField
      (write_mode jpg at quality 90, or raw pixels; no max_resolution, so the images keep their size)
      and IntField labels.
  bench_loader_ffcv.py run OUT.beton --crop C [--batch B] [--workers W] [--seconds T] [--ta-wide] [--repeats R]
      FFCV's Loader with its standard ImageNet train pipeline on the CPU:
      RandomResizedCropRGBImageDecoder((C, C)), RandomHorizontalFlip, ToTensor; order RANDOM,
      drop_last. --ta-wide adds torchvision's TrivialAugmentWide applied per image to the uint8 batch
      (FFCV has no TrivialAugment of its own). Rates: images per wall-clock second and per CPU-second
      of the process (getrusage of this process, all its threads, plus reaped children); R measurements
      after one warm-up (numba compiles the pipeline once per process).
"""
import argparse, os, resource, sys, time


def cpu_seconds():
    s, c = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return s.ru_utime + s.ru_stime + c.ru_utime + c.ru_stime


def write(args):
    from torchvision.datasets import ImageFolder
    from ffcv.writer import DatasetWriter
    from ffcv.fields import RGBImageField, IntField
    ds = ImageFolder(args.dir)  # PIL images, labels from the class folders
    w = DatasetWriter(args.out, {'image': RGBImageField(write_mode=args.mode, jpeg_quality=90),
                                 'label': IntField()}, num_workers=1)
    w.from_indexed_dataset(ds)
    print('wrote %d images (%s) to %s, %.1f MiB' % (len(ds), args.mode, args.out, os.path.getsize(args.out) / 2**20))


def run(args):
    import numpy as np
    import torch
    from ffcv.loader import Loader, OrderOption
    from ffcv.fields.rgb_image import RandomResizedCropRGBImageDecoder
    from ffcv.fields.basics import IntDecoder
    from ffcv.transforms import RandomHorizontalFlip, ToTensor
    torch.set_num_threads(1)
    image = [RandomResizedCropRGBImageDecoder((args.crop, args.crop)), RandomHorizontalFlip(), ToTensor()]
    if args.ta_wide:
        import torchvision.transforms as T

        class PerImageTA(torch.nn.Module):
            """torchvision's TrivialAugmentWide on each uint8 HWC image of the batch (as CHW)."""

            def __init__(self):
                super().__init__()
                self.ta = T.TrivialAugmentWide()

            def forward(self, x):
                out = torch.empty_like(x)
                for i in range(x.shape[0]):
                    out[i] = self.ta(x[i].permute(2, 0, 1)).permute(1, 2, 0)
                return out

        image.append(PerImageTA())
    loader = Loader(args.beton, batch_size=args.batch, num_workers=args.workers, order=OrderOption.RANDOM,
                    drop_last=True, os_cache=True,
                    pipelines={'image': image, 'label': [IntDecoder(), ToTensor()]})
    # Epoch 0 compiles the pipeline (numba) and warms the page cache; steady state is measured after.
    n0, t0 = 0, time.time()
    for x, y in loader:
        n0 += x.shape[0]
    first = time.time() - t0
    assert x.dtype == torch.uint8 and tuple(x.shape[1:]) == (args.crop, args.crop, 3), (x.dtype, x.shape)
    tag = 'ffcv-' + os.path.basename(args.beton).split('.')[0] + ('+ta_wide' if args.ta_wide else '')
    # Repeats in one process: numba compiles the pipeline anew in every process (a minute here).
    for rep in range(args.repeats):
        n, t1, c1 = 0, time.time(), cpu_seconds()
        while time.time() - t1 < args.seconds:
            for x, y in loader:
                n += x.shape[0]
        dt, cpu = time.time() - t1, cpu_seconds() - c1
        print('%s train crop %d (%d images): workers %d batch %d | epoch0 %.0f img/s | steady %.0f img/s | '
              '%.0f img per CPU-second' % (tag, args.crop, len(loader.indices), args.workers, args.batch, n0 / first,
                                           n / dt, n / cpu))
        print('RESULT %s mode=train crop=%d workers=%d img_s=%.1f img_per_cpu_s=%.1f' % (
            tag, args.crop, args.workers, n / dt, n / cpu), flush=True)


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest='cmd', required=True)
    w = sub.add_parser('write')
    w.add_argument('dir'); w.add_argument('out'); w.add_argument('--mode', choices=['jpg', 'raw'], default='jpg')
    r = sub.add_parser('run')
    r.add_argument('beton'); r.add_argument('--crop', type=int, default=176); r.add_argument('--batch', type=int, default=64)
    r.add_argument('--workers', type=int, default=1); r.add_argument('--seconds', type=float, default=5)
    r.add_argument('--ta-wide', action='store_true'); r.add_argument('--repeats', type=int, default=1)
    args = ap.parse_args()
    write(args) if args.cmd == 'write' else run(args)


if __name__ == '__main__':
    main()
