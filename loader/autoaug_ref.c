// The scalar reference of the augmentation ops (see autoaug.h): the per-pixel code that
// tests/test_autoaug.c holds against torchvision 0.14, kept as written so that the fast ops of
// autoaug.c can be held to the same bytes on any image, size and magnitude without Python
// (tests/test_autoaug.c compares both on thousands of cases). Not on the loader's path.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loader/autoaug.h"
#include "util/common.h"

// math.degrees: x * (180 / pi), as CPython's radToDeg.
static double degrees(double x) { return x * (180.0 / M_PI); }

// Round half to even of a value in [0, 255], as torch.round, without a libm call: binaries are
// built without SSE4.1 (no -march), where nearbyintf and floorf are function calls, and the warps
// and sharpness made one per output byte (6 ms of a 176 px warp's 7 went there). Adding and
// subtracting 2^23 (2^52) rounds in the default rounding mode, which is to nearest, ties to even.
static inline float round_even_255f(float v) { return (v + 8388608.0f) - 8388608.0f; }
static inline double round_even_255(double v) { return (v + 4503599627370496.0) - 4503599627370496.0; }

// ---------------------------------------------------------------- affine warps (grid_sample)

// torchvision.transforms.functional._get_inverse_affine_matrix (scale 1), in double as Python.
void aa_inverse_affine(double cx, double cy, double angle, double tx, double ty, double shx, double shy,
                           double m[6]) {
    // math.radians: x * (pi / 180), one rounding as CPython's degToRad.
    const double deg2rad = M_PI / 180.0;
    double rot = angle * deg2rad, sx = shx * deg2rad, sy = shy * deg2rad;
    double a = cos(rot - sy) / cos(sy);
    double b = -cos(rot - sy) * tan(sx) / cos(sy) - sin(rot);
    double c = sin(rot - sy) / cos(sy);
    double d = -sin(rot - sy) * tan(sx) / cos(sy) + cos(rot);
    m[0] = d;
    m[1] = -b;
    m[2] = 0.0;
    m[3] = -c;
    m[4] = a;
    m[5] = 0.0;
    m[2] += m[0] * (-cx - tx) + m[1] * (-cy - ty);
    m[5] += m[3] * (-cx - tx) + m[4] * (-cy - ty);
    m[2] += cx;
    m[5] += cy;
}

// _gen_affine_grid + grid_sample(bilinear, zeros, align_corners=False) + the fill mask +
// _cast_squeeze_out's round, float32 throughout as torch.
static void warp(uint8_t *img, int H, int W, int C, const double m[6], const uint8_t *fill, uint8_t *tmp) {
    float th[6];
    for (int k = 0; k < 6; k++) th[k] = (float)m[k];
    const float hw = 0.5f * (float)W, hh = 0.5f * (float)H;
    // rescaled_theta = theta^T / [0.5 w, 0.5 h]: column 0 feeds x, column 1 feeds y.
    const float r0x = th[0] / hw, r1x = th[1] / hw, r2x = th[2] / hw;
    const float r0y = th[3] / hh, r1y = th[4] / hh, r2y = th[5] / hh;
    for (int oy = 0; oy < H; oy++) {
        const float by = -(float)H * 0.5f + 0.5f + (float)oy;
        for (int ox = 0; ox < W; ox++) {
            const float bx = -(float)W * 0.5f + 0.5f + (float)ox;
            const float gx = bx * r0x + by * r1x + r2x;
            const float gy = bx * r0y + by * r1y + r2y;
            // grid_sample's CPU kernel: (g + 1) * (size / 2) - 0.5, weights from the fractions.
            const float ix = (gx + 1.0f) * hw - 0.5f;
            const float iy = (gy + 1.0f) * hh - 0.5f;
            int x0 = (int)ix, y0 = (int)iy;  // floor: truncation, one less below zero
            x0 -= (float)x0 > ix;
            y0 -= (float)y0 > iy;
            const float fx = (float)x0, fy = (float)y0;
            const float wx = ix - fx, wy = iy - fy, ex = 1.0f - wx, sy = 1.0f - wy;
            const float wnw = sy * ex, wne = sy * wx, wsw = wy * ex, wse = wy * wx;
            const int in00 = x0 >= 0 && x0 < W && y0 >= 0 && y0 < H, in10 = x0 + 1 >= 0 && x0 + 1 < W && y0 >= 0 && y0 < H;
            const int in01 = x0 >= 0 && x0 < W && y0 + 1 >= 0 && y0 + 1 < H;
            const int in11 = x0 + 1 >= 0 && x0 + 1 < W && y0 + 1 >= 0 && y0 + 1 < H;
            float mask = 0.0f;
            if (fill) {
                if (in00) mask += wnw;
                if (in10) mask += wne;
                if (in01) mask += wsw;
                if (in11) mask += wse;
            }
            uint8_t *o = tmp + ((size_t)oy * W + ox) * C;
            for (int c = 0; c < C; c++) {
                float v = 0.0f;
                if (in00) v += (float)img[((size_t)y0 * W + x0) * C + c] * wnw;
                if (in10) v += (float)img[((size_t)y0 * W + x0 + 1) * C + c] * wne;
                if (in01) v += (float)img[((size_t)(y0 + 1) * W + x0) * C + c] * wsw;
                if (in11) v += (float)img[((size_t)(y0 + 1) * W + x0 + 1) * C + c] * wse;
                if (fill) v = v * mask + (1.0f - mask) * (float)fill[c];
                // torch.round then the clamp; clamping first gives the same bytes.
                v = v < 0.0f ? 0.0f : v > 255.0f ? 255.0f : v;
                o[c] = (uint8_t)round_even_255f(v);
            }
        }
    }
    memcpy(img, tmp, (size_t)H * W * C);
}

void aa_affine_ref(uint8_t *img, int H, int W, int C, double angle, double tx, double ty, double shear_x, double shear_y,
               int center_zero, const uint8_t *fill, uint8_t *tmp) {
    // F.affine: center [0, 0] in pixels is (-w/2, -h/2) in its centred coordinates; None is (0, 0).
    double cx = center_zero ? -0.5 * W : 0.0, cy = center_zero ? -0.5 * H : 0.0;
    double m[6];
    aa_inverse_affine(cx, cy, angle, tx, ty, shear_x, shear_y, m);
    warp(img, H, W, C, m, fill, tmp);
}

// ---------------------------------------------------------------- photometric ops

// _blend(img1, img2, ratio): (ratio * img1 + (1 - ratio) * img2).clamp(0, 255).to(uint8), float32.
static inline uint8_t blend1(float r, float r1, float a, float b) {
    float v = r * a + r1 * b;
    v = v < 0.0f ? 0.0f : v > 255.0f ? 255.0f : v;
    return (uint8_t)v;  // truncation, as .to(torch.uint8)
}

// rgb_to_grayscale on uint8: (0.2989 r + 0.587 g + 0.114 b).to(uint8).
static inline uint8_t grey(const uint8_t *p) {
    float v = 0.2989f * (float)p[0] + 0.587f * (float)p[1];
    v = v + 0.114f * (float)p[2];
    return (uint8_t)v;
}

static void brightness(uint8_t *img, size_t n, double f) {
    float r = (float)f, r1 = (float)(1.0 - f);
    for (size_t i = 0; i < n; i++) img[i] = blend1(r, r1, (float)img[i], 0.0f);
}

static void saturation(uint8_t *img, size_t px, int C, double f) {
    if (C == 1) return;  // torchvision: "Match PIL behaviour"
    float r = (float)f, r1 = (float)(1.0 - f);
    for (size_t i = 0; i < px; i++) {
        uint8_t *p = img + i * 3;
        float g = (float)grey(p);
        for (int c = 0; c < 3; c++) p[c] = blend1(r, r1, (float)p[c], g);
    }
}

static void contrast(uint8_t *img, size_t px, int C, double f) {
    // The float32 mean of torch is exact here while the sum of grey levels stays below 2^24
    // (images up to 256 x 256); beyond that torch's summation order decides the last bit.
    int64_t s = 0;
    for (size_t i = 0; i < px; i++) s += C == 3 ? grey(img + i * 3) : img[i];
    float mean = (float)s / (float)px;
    float r = (float)f, r1 = (float)(1.0 - f);
    for (size_t i = 0; i < px * C; i++) img[i] = blend1(r, r1, (float)img[i], mean);
}

static void sharpness(uint8_t *img, int H, int W, int C, double f, uint8_t *tmp) {
    if (W <= 2 || H <= 2) return;
    // _blurred_degenerate_image: 3x3 kernel of ones with 5 in the middle, / 13, rounded; the border
    // keeps the image. The exact value is never within 1/26 of a rounding tie, so float32's
    // summation order cannot change the result.
    const double k1 = (double)(1.0f / 13.0f), k5 = (double)(5.0f / 13.0f);
    memcpy(tmp, img, (size_t)H * W * C);
    for (int y = 1; y < H - 1; y++)
        for (int x = 1; x < W - 1; x++)
            for (int c = 0; c < C; c++) {
                int s = 0;
                for (int dy = -1; dy <= 1; dy++)
                    for (int dx = -1; dx <= 1; dx++)
                        if (dx || dy) s += img[((size_t)(y + dy) * W + x + dx) * C + c];
                double v = s * k1 + img[((size_t)y * W + x) * C + c] * k5;
                tmp[((size_t)y * W + x) * C + c] = (uint8_t)round_even_255(v);  // v in [0, 255]
            }
    float r = (float)f, r1 = (float)(1.0 - f);
    for (size_t i = 0; i < (size_t)H * W * C; i++) img[i] = blend1(r, r1, (float)img[i], (float)tmp[i]);
}

static void posterize(uint8_t *img, size_t n, int bits) {
    if (bits < 0) bits = 0;
    if (bits >= 8) return;
    uint8_t mask = (uint8_t)(0xFF << (8 - bits));
    for (size_t i = 0; i < n; i++) img[i] &= mask;
}

static void solarize(uint8_t *img, size_t n, double thr) {
    for (size_t i = 0; i < n; i++)
        if ((double)img[i] >= thr) img[i] = (uint8_t)(255 - img[i]);
}

static void solarize_add(uint8_t *img, size_t n, int add) {
    for (size_t i = 0; i < n; i++)
        if (img[i] < 128) {
            int v = img[i] + add;
            img[i] = (uint8_t)(v > 255 ? 255 : v < 0 ? 0 : v);
        }
}

static void autocontrast(uint8_t *img, size_t px, int C) {
    for (int c = 0; c < C; c++) {
        int lo = 255, hi = 0;
        for (size_t i = 0; i < px; i++) {
            int v = img[i * C + c];
            lo = v < lo ? v : lo;
            hi = v > hi ? v : hi;
        }
        float mn = (float)lo, scale = 1.0f;
        if (hi > lo) scale = 255.0f / (float)(hi - lo);
        else mn = 0.0f;  // torchvision: a non-finite scale leaves the channel as it is
        for (size_t i = 0; i < px; i++) {
            float v = ((float)img[i * C + c] - mn) * scale;
            v = v < 0.0f ? 0.0f : v > 255.0f ? 255.0f : v;
            img[i * C + c] = (uint8_t)v;
        }
    }
}

static void equalize(uint8_t *img, size_t px, int C) {
    for (int c = 0; c < C; c++) {
        int64_t hist[256] = {0};
        for (size_t i = 0; i < px; i++) hist[img[i * C + c]]++;
        // step = (sum of the nonzero bins but the last) // 255, as torchvision and PIL.
        int last = 255;
        while (last > 0 && hist[last] == 0) last--;
        int64_t s = 0;
        for (int k = 0; k < last; k++) s += hist[k];
        int64_t step = s / 255;
        if (step == 0) continue;
        uint8_t lut[256];
        int64_t cum = 0;
        for (int k = 0; k < 256; k++) {
            int64_t v = (cum + step / 2) / step;  // the LUT shifted by one: entry k uses the cumsum before k
            lut[k] = (uint8_t)(v > 255 ? 255 : v);
            cum += hist[k];
        }
        for (size_t i = 0; i < px; i++) img[i * C + c] = lut[img[i * C + c]];
    }
}

void aa_apply_op_ref(AaOp op, double mag, const uint8_t *fill, uint8_t *img, int H, int W, int C, uint8_t *tmp) {
    size_t px = (size_t)H * W, n = px * C;
    switch (op) {
    case AA_IDENTITY: break;
    case AA_SHEAR_X: aa_affine_ref(img, H, W, C, 0, 0, 0, degrees(atan(mag)), 0, 1, fill, tmp); break;
    case AA_SHEAR_Y: aa_affine_ref(img, H, W, C, 0, 0, 0, 0, degrees(atan(mag)), 1, fill, tmp); break;
    case AA_TRANSLATE_X: aa_affine_ref(img, H, W, C, 0, (double)(int)mag, 0, 0, 0, 0, fill, tmp); break;
    case AA_TRANSLATE_Y: aa_affine_ref(img, H, W, C, 0, 0, (double)(int)mag, 0, 0, 0, fill, tmp); break;
    case AA_ROTATE: aa_affine_ref(img, H, W, C, -mag, 0, 0, 0, 0, 0, fill, tmp); break;  // F.rotate passes -angle
    case AA_BRIGHTNESS: brightness(img, n, 1.0 + mag); break;
    case AA_COLOR: saturation(img, px, C, 1.0 + mag); break;
    case AA_CONTRAST: contrast(img, px, C, 1.0 + mag); break;
    case AA_SHARPNESS: sharpness(img, H, W, C, 1.0 + mag, tmp); break;
    case AA_POSTERIZE: posterize(img, n, (int)mag); break;
    case AA_SOLARIZE: solarize(img, n, mag); break;
    case AA_AUTOCONTRAST: autocontrast(img, px, C); break;
    case AA_EQUALIZE: equalize(img, px, C); break;
    case AA_INVERT:
        for (size_t i = 0; i < n; i++) img[i] = (uint8_t)(255 - img[i]);
        break;
    case AA_SOLARIZE_ADD: solarize_add(img, n, (int)mag); break;
    default: ct_die("autoaug: unknown op %d", (int)op);
    }
}

