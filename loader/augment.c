// Augmentation geometry (see augment.h). Crop before resize: the resampler only ever touches the
// box's rows and the columns its taps need.
#include "loader/augment.h"

#include <math.h>
#include <string.h>

#include "util/common.h"

#define AUG_KEY 0x6175676d656e7431ull  // "augment1"

void augment_config_defaults(AugmentConfig *a) {
    if (a->crop < 1) ct_die("augment: --crop must be >= 1 (got %d)", a->crop);
    if (a->scale_min == 0 && a->scale_max == 0) {
        a->scale_min = 0.08f;
        a->scale_max = 1.0f;
    }
    if (a->ratio_min == 0 && a->ratio_max == 0) {
        a->ratio_min = 3.0f / 4.0f;
        a->ratio_max = 4.0f / 3.0f;
    }
    if (!(a->scale_min > 0 && a->scale_min <= a->scale_max && a->scale_max <= 1))
        ct_die("augment: crop scale range %g-%g must satisfy 0 < min <= max <= 1", a->scale_min, a->scale_max);
    if (!(a->ratio_min > 0 && a->ratio_min <= a->ratio_max))
        ct_die("augment: crop ratio range %g-%g must satisfy 0 < min <= max", a->ratio_min, a->ratio_max);
    if (a->resize == 0) a->resize = (int)floor(a->crop / 0.875);
    if (a->resize < a->crop) ct_die("augment: --val-resize %d is smaller than --crop %d", a->resize, a->crop);
}

int rrc_get_params(Rng *r, int H, int W, float scale_min, float scale_max, float ratio_min, float ratio_max,
                   CropBox *box) {
    double area = (double)H * W;
    double lr0 = log((double)ratio_min), lr1 = log((double)ratio_max);
    for (int t = 1; t <= 10; t++) {
        double target = area * (scale_min + (scale_max - scale_min) * (double)rng_uniform(r));
        double ar = exp(lr0 + (lr1 - lr0) * (double)rng_uniform(r));
        int w = (int)nearbyint(sqrt(target * ar));  // Python's round(): half to even
        int h = (int)nearbyint(sqrt(target / ar));
        if (w > 0 && w <= W && h > 0 && h <= H) {
            box->top = (int)rng_below(r, (uint32_t)(H - h + 1));
            box->left = (int)rng_below(r, (uint32_t)(W - w + 1));
            box->height = h;
            box->width = w;
            return t;
        }
    }
    double in_ratio = (double)W / H;
    int w, h;
    if (in_ratio < ratio_min) {
        w = W;
        h = (int)nearbyint(w / (double)ratio_min);
    } else if (in_ratio > ratio_max) {
        h = H;
        w = (int)nearbyint(h * (double)ratio_max);
    } else {
        w = W;
        h = H;
    }
    if (h < 1) h = 1;
    if (w < 1) w = 1;
    if (h > H) h = H;
    if (w > W) w = W;
    box->top = (H - h) / 2;
    box->left = (W - w) / 2;
    box->height = h;
    box->width = w;
    return 11;
}

void augment_plan(const AugmentConfig *a, int H, int W, int64_t epoch, uint64_t index, AugmentPlan *p) {
    // Whole, padding included: a plan is a pure function of its inputs down to the byte (tests
    // compare plans with memcmp).
    memset(p, 0, sizeof *p);
    if (a->train) {
        Rng r = rng_make(a->seed ^ AUG_KEY, (uint64_t)epoch, index);
        CropBox b;
        rrc_get_params(&r, H, W, a->scale_min, a->scale_max, a->ratio_min, a->ratio_max, &b);
        p->bx = b.left;
        p->by = b.top;
        p->bw = b.width;
        p->bh = b.height;
        p->x0 = 0;
        p->y0 = 0;
        p->cw = b.width;
        p->ch = b.height;
        p->flip = a->flip ? rng_uniform(&r) < 0.5f : 0;
        p->rows_needed = b.top + b.height;
    } else {
        // torchvision Resize(int): short side -> resize, long side -> int(resize * long / short);
        // CenterCrop: offsets int(round((size - crop) / 2)).
        int nh, nw;
        if (W <= H) {
            nw = a->resize;
            nh = (int)((double)a->resize * H / W);
        } else {
            nh = a->resize;
            nw = (int)((double)a->resize * W / H);
        }
        if (nh < a->crop) nh = a->crop;  // only when rounding bites on extreme aspect ratios
        if (nw < a->crop) nw = a->crop;
        int top = (int)nearbyint((nh - a->crop) / 2.0), left = (int)nearbyint((nw - a->crop) / 2.0);
        double sx = (double)W / nw, sy = (double)H / nh;
        p->bx = 0;
        p->by = 0;
        p->bw = W;
        p->bh = H;
        p->x0 = left * sx;
        p->y0 = top * sy;
        p->cw = a->crop * sx;
        p->ch = a->crop * sy;
        p->flip = 0;
        p->rows_needed = resample_rows_needed(a->crop, H, p->y0, p->ch);
        // The image is stored at the eval size already: each output pixel's centre is a source
        // pixel's centre, the filter a single tap of weight 1, so a copy gives the same bytes.
        p->copy = nw == W && nh == H;
    }
}

void augment_apply(const AugmentConfig *a, const AugmentPlan *p, const uint8_t *img, int W, int C, uint8_t *dst,
                   ResampleScratch *scratch) {
    const uint8_t *box = img + ((size_t)p->by * W + p->bx) * C;
    if (p->copy) {
        const size_t row = (size_t)a->crop * C;
        for (int y = 0; y < a->crop; y++)
            memcpy(dst + y * row, box + ((size_t)((int)p->y0 + y) * W + (int)p->x0) * C, row);
        return;
    }
    resample_u8(dst, a->crop, a->crop, box, p->bw, p->bh, C, (size_t)W * C, p->x0, p->y0, p->cw, p->ch, p->flip,
                scratch);
}

void augment_flip_batch(uint8_t *dst, const uint8_t *src, int N, int H, int W, int C) {
    size_t row = (size_t)W * C;
    for (size_t y = 0; y < (size_t)N * H; y++) {
        const uint8_t *s = src + y * row;
        uint8_t *d = dst + y * row;
        for (int x = 0; x < W; x++) memcpy(d + (size_t)(W - 1 - x) * C, s + (size_t)x * C, (size_t)C);
    }
}
