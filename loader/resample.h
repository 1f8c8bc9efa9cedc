// Bilinear resampling of uint8 HWC images with antialiasing on downscale: the same triangle filter as
// PIL's BILINEAR and torchvision's resize(antialias=True), whose support widens with the scale factor
// (support = max(scale, 1) source pixels either side of the output pixel's centre, weights normalised).
//
// One call maps a rectangular region of the source to the whole destination. The region may have
// fractional bounds, which expresses both
//   - crop then resize (RandomResizedCrop): point src at the crop, pass the crop size as sw/sh and
//     the region (0, 0, w, h); taps never reach outside the crop, as in torchvision, and
//   - resize then crop (eval's resize + center crop): pass the whole image and the region
//     (left * sx, top * sy, crop * sx, crop * sy) with sx = sw / resized_w; taps may reach outside
//     the region (clamped to the image), exactly as when resizing the whole image first.
// Passes: vertical first (only over the columns the horizontal taps touch), then horizontal, one
// output row at a time, with a float intermediate row and round-to-nearest at the end.
#pragma once
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

// Scratch buffers reused across calls (coefficient tables and the intermediate row). Zero-initialise
// it, pass it to any number of calls from one thread, then resample_scratch_free. A NULL scratch
// makes the call allocate and free its own.
typedef struct {
    void *buf;
    size_t cap;
} ResampleScratch;
void resample_scratch_free(ResampleScratch *s);

// Resample the region [x0, x0 + cw) x [y0, y0 + ch) of src (sw x sh pixels, C channels, rows
// src_stride bytes apart; 0 means sw * C) into dst (dw x dh x C, packed rows). flip_x mirrors the
// output horizontally (RandomHorizontalFlip applied after the resize). Requires
// 0 <= x0, x0 + cw <= sw, 0 <= y0, y0 + ch <= sh (within 1e-3), cw, ch > 0, dw, dh >= 1, C >= 1.
void resample_u8(uint8_t *dst, int dw, int dh, const uint8_t *src, int sw, int sh, int C,
                 size_t src_stride, double x0, double y0, double cw, double ch, int flip_x,
                 ResampleScratch *scratch);

// Whole image to dw x dh (packdata's --max-short resize, eval's resize).
void resize_u8(uint8_t *dst, int dw, int dh, const uint8_t *src, int sw, int sh, int C,
               ResampleScratch *scratch);

// Tests: 0 forces the x86-64 baseline kernels, 2 the AVX2 ones without the planar AVX-512VL path, 1 (the
// default) the fastest the CPU has (same bytes by construction); returns the previous setting.
int resample_set_simd(int on);
// How many resample_u8 calls in this process took the planar AVX-512VL path (tests: not vacuous).
unsigned long resample_planar_images(void);

// One past the last source row resample_u8 reads for this region (so a caller decoding rows in
// order can stop early).
int resample_rows_needed(int dh, int sh, double y0, double ch);

#ifdef __cplusplus
}
#endif
