// Eval at a scale of exactly 1 (the stored short side equals --val-resize): the loader copies the
// center crop instead of resampling, and the bytes are the same as the resampler gives, because
// at scale 1 every output pixel's centre lands on a source pixel's centre (a single tap of weight
// 1). Checked for both kernels (AVX2 and baseline), grey and RGB, portrait and landscape, odd and
// even margins; a scale other than 1 still resamples.
#include <string.h>

#include "loader/augment.h"
#include "loader/resample.h"
#include "tests/test.h"

static void one(int H, int W, int C, int crop) {
    AugmentConfig a = {.crop = crop, .train = 0, .resize = H < W ? H : W, .seed = 1};
    augment_config_defaults(&a);
    AugmentPlan p;
    augment_plan(&a, H, W, 0, 7, &p);
    uint8_t *img = malloc((size_t)H * W * C), *copied = malloc((size_t)crop * crop * C), *resampled = malloc((size_t)crop * crop * C);
    for (size_t i = 0; i < (size_t)H * W * C; i++) img[i] = (uint8_t)rnd(0, 255);
    CHECK(p.copy, "%dx%d crop %d at scale 1: planned as a copy", H, W, crop);
    augment_apply(&a, &p, img, W, C, copied, NULL);
    for (int simd = 0; simd < 2; simd++) {
        int was = resample_set_simd(simd);
        resample_u8(resampled, crop, crop, img, W, H, C, (size_t)W * C, p.x0, p.y0, p.cw, p.ch, 0, NULL);
        resample_set_simd(was);
        CHECK(!memcmp(copied, resampled, (size_t)crop * crop * C), "%dx%dx%d crop %d (simd %d): copy differs from the resampler",
              H, W, C, crop, simd);
    }
    CHECK(p.rows_needed >= (int)p.y0 + crop && p.rows_needed <= H, "rows needed %d", p.rows_needed);
    free(img);
    free(copied);
    free(resampled);
}

int main(void) {
    int shapes[][4] = {{16, 16, 3, 16}, {16, 16, 3, 14}, {32, 48, 3, 28}, {48, 32, 1, 27}, {37, 64, 3, 32},
                       {64, 37, 3, 33}, {256, 341, 3, 224}, {9, 9, 1, 1}};
    for (size_t i = 0; i < CT_ARRAY_LEN(shapes); i++) one(shapes[i][0], shapes[i][1], shapes[i][2], shapes[i][3]);
    // Not scale 1: a resample, not a copy.
    AugmentConfig a = {.crop = 16, .resize = 18, .seed = 1};
    augment_config_defaults(&a);
    AugmentPlan p;
    augment_plan(&a, 20, 24, 0, 0, &p);
    CHECK(!p.copy, "scale 18/20 planned as a copy");
    return test_summary("test_augment_copy");
}
