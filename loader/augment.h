// Per-sample geometry: torchvision's RandomResizedCrop + RandomHorizontalFlip for training, and
// Resize(short side) + CenterCrop for eval, expressed as a source region for resample_u8.
// All randomness comes from rng_make(seed ^ AUG key, epoch, record index), so a sample's bytes depend
// on nothing else (not on rank, batch position or worker).
#pragma once
#include <stdint.h>

#include "loader/resample.h"
#include "util/rng.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    int crop;           // output side
    int train;
    int resize;         // eval: short side after resize (>= crop)
    float scale_min, scale_max, ratio_min, ratio_max;
    int flip;           // train: horizontal flip with p = 0.5
    uint64_t seed;
} AugmentConfig;

// Fills torchvision's defaults for zero fields (scale 0.08-1, ratio 3/4-4/3, resize floor(crop/0.875)).
// Dies naming the flag on an inconsistent config.
void augment_config_defaults(AugmentConfig *a);

// Integer crop box in source pixels.
typedef struct {
    int top, left, height, width;
} CropBox;

// torchvision.transforms.RandomResizedCrop.get_params: up to ten tries of (area fraction uniform in
// scale, aspect ratio log-uniform in ratio, sizes rounded half-to-even), accepted when the box fits,
// with a uniform position; otherwise the center crop clamped to the ratio range. Returns the number
// of tries used (11 for the fallback), for tests.
int rrc_get_params(Rng *r, int H, int W, float scale_min, float scale_max, float ratio_min, float ratio_max,
                   CropBox *box);

// What to do with one sample: resample region [x0, x0+cw) x [y0, y0+ch) of the image, whose taps
// stay within the box [bx, bx+bw) x [by, by+bh) (train: the crop; eval: the whole image), then flip.
typedef struct {
    int bx, by, bw, bh;
    double x0, y0, cw, ch;  // relative to (bx, by)
    int flip;
    int copy;               // eval at scale 1: the region is whole pixels, copied (what resampling gives)
    int rows_needed;        // source rows [0, rows_needed) suffice (lets the decoder stop early)
} AugmentPlan;

void augment_plan(const AugmentConfig *a, int H, int W, int64_t epoch, uint64_t index, AugmentPlan *p);
// Produce crop x crop x C into dst from the decoded image (at least plan->rows_needed rows valid).
void augment_apply(const AugmentConfig *a, const AugmentPlan *p, const uint8_t *img, int W, int C, uint8_t *dst,
                   ResampleScratch *scratch);

// Test-time flip: dst = src mirrored left-right, N images of H x W x C uint8 (NHWC). dst != src.
void augment_flip_batch(uint8_t *dst, const uint8_t *src, int N, int H, int W, int C);

#ifdef __cplusplus
}
#endif
