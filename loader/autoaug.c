// Augmentation policies on uint8 crops (see autoaug.h). Each op follows torchvision's
// functional_tensor.py on a uint8 tensor step by step, in float32 where torch computes in float32,
// so the rounding lands where torch's does.
#include "loader/autoaug.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <immintrin.h>

#include "util/common.h"

// math.degrees: x * (180 / pi), as CPython's radToDeg.
static double degrees(double x) { return x * (180.0 / M_PI); }

// Every op below computes the same IEEE float32 operations, in the same order, as the per-pixel
// reference in autoaug_ref.c (which follows torchvision's functional_tensor.py; tests/test_autoaug.c
// holds the reference against torchvision and these ops against the reference, byte for byte). What
// changed is where the work goes: per-value functions become 256-entry tables of the same float
// products, the warp's source coordinates are computed per row in a loop without branches, interior
// pixels take a path without bounds checks (SSE2, the x86-64 baseline: its lanes do the scalar
// operations; on AVX2 machines, chosen at run time, whole rows eight pixels a step, warp_row_avx2),
// integer translations become row copies, and
// sharpness's blur is integer arithmetic. The build is ISO C (-std=c11), so GCC contracts no
// multiply-add into an FMA (-ffp-contract=off), and binaries carry no -march.

// Round half to even of a value in [0, 255], as torch.round, without a libm call (no SSE4.1
// roundss in a baseline x86-64 binary): adding and subtracting 2^23 rounds to nearest, ties to even.
static inline float round_even_255f(float v) { return (v + 8388608.0f) - 8388608.0f; }

// ---------------------------------------------------------------- affine warps (grid_sample)

// The affine matrix is the reference's (aa_inverse_affine, loader/autoaug_ref.c): computed once a
// warp, in double as torchvision's Python, so the two cannot drift apart.

// One output pixel of grid_sample(bilinear, zeros) + the fill mask + round, with the bounds checks:
// the reference's expression, for pixels whose four taps are not all inside.
static inline void warp_pixel(const uint8_t *img, int H, int W, int C, int x0, int y0, float wx, float wy,
                              const uint8_t *fill, uint8_t *o) {
    const float ex = 1.0f - wx, sy = 1.0f - wy;
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
    for (int c = 0; c < C; c++) {
        float v = 0.0f;
        if (in00) v += (float)img[((size_t)y0 * W + x0) * C + c] * wnw;
        if (in10) v += (float)img[((size_t)y0 * W + x0 + 1) * C + c] * wne;
        if (in01) v += (float)img[((size_t)(y0 + 1) * W + x0) * C + c] * wsw;
        if (in11) v += (float)img[((size_t)(y0 + 1) * W + x0 + 1) * C + c] * wse;
        if (fill) v = v * mask + (1.0f - mask) * (float)fill[c];
        v = v < 0.0f ? 0.0f : v > 255.0f ? 255.0f : v;
        o[c] = (uint8_t)round_even_255f(v);
    }
}

// Eight bytes from p as two four-float vectors, p[0..3] and p[3..6]: a bilinear tap and its right-hand
// neighbour from one load (the fourth lanes belong to the next pixel, unused).
static inline void load2x4f(const uint8_t *p, __m128 *a, __m128 *b) {
    const __m128i z = _mm_setzero_si128();
    const __m128i w = _mm_unpacklo_epi8(_mm_loadl_epi64((const __m128i *)p), z);  // p[0..7] as 16 bits
    *a = _mm_cvtepi32_ps(_mm_unpacklo_epi16(w, z));
    *b = _mm_cvtepi32_ps(_mm_unpacklo_epi16(_mm_srli_si128(w, 6), z));
}

// sx is ox + k for one k: output columns [lo, hi) come from the source row, the rest is fill.
static void shift_cols(const int *sx, int W, int *lo, int *hi) {
    int a = 0;
    while (a < W && (sx[a] < 0 || sx[a] >= W)) a++;
    int b = a;
    while (b < W && sx[b] >= 0 && sx[b] < W) b++;
    *lo = a, *hi = b;
}

// Integer translations (F.affine's translate by whole pixels, no rotation or shear): the grid lands
// within 1e-4 of whole pixels, where bilinear weights of 1 - d and d (d < 1e-4) move a value by at
// most 255 * 2d plus float32 rounding, far below the 0.5 that would change its rounding, so every
// output byte is the nearest source pixel, the fill or 0. The caller checked the 1e-4.
static void warp_shift(const uint8_t *img, int H, int W, int C, const int *sx, const int *sy, const uint8_t *fill,
                       uint8_t *out) {
    uint8_t f[4] = {0, 0, 0, 0};
    if (fill) memcpy(f, fill, C);
    int lo, hi;
    shift_cols(sx, W, &lo, &hi);
    for (int oy = 0; oy < H; oy++) {
        uint8_t *o = out + (size_t)oy * W * C;
        int a = lo, b = hi;
        if (sy[oy] < 0 || sy[oy] >= H) a = b = W;
        for (int ox = 0; ox < a; ox++) memcpy(o + (size_t)ox * C, f, C);
        if (b > a) memcpy(o + (size_t)a * C, img + ((size_t)sy[oy] * W + sx[a]) * C, (size_t)(b - a) * C);
        for (int ox = b; ox < W; ox++) memcpy(o + (size_t)ox * C, f, C);
    }
}

// warp_shift's bytes written over the image itself, for sy = oy + ky (see warp's caller).
static void warp_shift_inplace(uint8_t *img, int H, int W, int C, const int *sx, const int *sy, const uint8_t *fill) {
    uint8_t f[4] = {0, 0, 0, 0};
    if (fill) memcpy(f, fill, C);
    int lo, hi;
    shift_cols(sx, W, &lo, &hi);
    const int down = sy[0] >= 0;  // source row at or below the output row: top down
    for (int r = 0; r < H; r++) {
        const int oy = down ? r : H - 1 - r;
        uint8_t *o = img + (size_t)oy * W * C;
        int a = lo, b = hi;
        if (sy[oy] < 0 || sy[oy] >= H) a = b = W;
        if (b > a) memmove(o + (size_t)a * C, img + ((size_t)sy[oy] * W + sx[a]) * C, (size_t)(b - a) * C);
        for (int ox = 0; ox < a; ox++) memcpy(o + (size_t)ox * C, f, C);
        for (int ox = b; ox < W; ox++) memcpy(o + (size_t)ox * C, f, C);
    }
}

// One output row of 3 channels, eight pixels per AVX2 step, one pixel per lane: the grid, the floor
// and the bilinear weights as the chunk loop below computes them, the four taps of the interior
// pixels from one 8-byte load per row (see ROWTAPS), the
// interior arithmetic of the SSE2 path, the fill (or 0) where all four taps are outside, and
// warp_pixel for the border pixels in between. Every lane does the baseline's float operations in
// the same order (target avx2 enables no FMA, and -std=c11 contracts nothing), so the bytes are the
// baseline's; aa_set_simd(0) makes the warp take the baseline for tests.
static int aa_simd_allowed = 1;
static int warp_use_avx2(void) {
    static int v = -1;
    if (v < 0) {
        __builtin_cpu_init();
        v = __builtin_cpu_supports("avx2") ? 1 : 0;
    }
    return v && __atomic_load_n(&aa_simd_allowed, __ATOMIC_RELAXED);
}
int aa_set_simd(int on) { return __atomic_exchange_n(&aa_simd_allowed, on, __ATOMIC_RELAXED); }

typedef struct {
    float r0x, r0y, r2x, r2y, hw, hh, bx0;
} WarpK;

__attribute__((target("avx2"))) static void warp_row_avx2(const uint8_t *img, int H, int W, const WarpK *K,
                                                          float byx, float byy, const uint8_t *fill, uint8_t *orow) {
    const __m256 zero = _mm256_setzero_ps(), v255 = _mm256_set1_ps(255.0f), one = _mm256_set1_ps(1.0f);
    const __m256 half = _mm256_set1_ps(0.5f), bx0 = _mm256_set1_ps(K->bx0), r0x = _mm256_set1_ps(K->r0x),
                 r0y = _mm256_set1_ps(K->r0y), r2x = _mm256_set1_ps(K->r2x), r2y = _mm256_set1_ps(K->r2y),
                 hw = _mm256_set1_ps(K->hw), hh = _mm256_set1_ps(K->hh), vbyx = _mm256_set1_ps(byx),
                 vbyy = _mm256_set1_ps(byy);
    const __m256i m1 = _mm256_set1_epi32(-1), Wm1 = _mm256_set1_epi32(W - 1), Hm1 = _mm256_set1_epi32(H - 1),
                  vW = _mm256_set1_epi32(W), vH = _mm256_set1_epi32(H),
                  lim = _mm256_set1_epi32(H * W - W - 2), ff = _mm256_set1_epi32(0xff),
                  iota = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    __m256 fc[3];
    for (int c = 0; c < 3; c++) fc[c] = _mm256_set1_ps(fill ? (float)fill[c] : 0.0f);
    uint8_t fb[3] = {0, 0, 0};
    if (fill) memcpy(fb, fill, 3);
    const __m256i pack = _mm256_setr_epi8(0, 1, 2, 4, 5, 6, 8, 9, 10, 12, 13, 14, -1, -1, -1, -1, 0, 1, 2, 4, 5, 6, 8,
                                          9, 10, 12, 13, 14, -1, -1, -1, -1);
    // Pixels 0,1 | 4,5 and 2,3 | 6,7 as 8-byte pairs; the shuffle makes each 128-bit half
    // [left tap of a, of b, right tap of a, of b] (bytes 0-3 and 3-6 of each 8), the unpacks put them
    // in pixel order.
    const __m256i sel = _mm256_setr_epi8(0, 1, 2, 3, 8, 9, 10, 11, 3, 4, 5, 6, 11, 12, 13, 14, 0, 1, 2, 3, 8, 9, 10, 11,
                                         3, 4, 5, 6, 11, 12, 13, 14);
#define LD8(p) ({ uint64_t u_; memcpy(&u_, (p), 8); (long long)u_; })
#define ROWTAPS(R, L, RT)                                                                                     \
    do {                                                                                                      \
        const __m256i P_ = _mm256_shuffle_epi8(                                                               \
            _mm256_set_epi64x(LD8(R + offs[5]), LD8(R + offs[4]), LD8(R + offs[1]), LD8(R + offs[0])), sel);   \
        const __m256i Q_ = _mm256_shuffle_epi8(                                                               \
            _mm256_set_epi64x(LD8(R + offs[7]), LD8(R + offs[6]), LD8(R + offs[3]), LD8(R + offs[2])), sel);   \
        L = _mm256_unpacklo_epi64(P_, Q_);                                                                    \
        RT = _mm256_unpackhi_epi64(P_, Q_);                                                                   \
    } while (0)
    for (int ox = 0; ox < W; ox += 8) {
        const int nv = W - ox < 8 ? W - ox : 8;
        const __m256 bx = _mm256_add_ps(bx0, _mm256_cvtepi32_ps(_mm256_add_epi32(_mm256_set1_epi32(ox), iota)));
        const __m256 gx = _mm256_add_ps(_mm256_add_ps(_mm256_mul_ps(bx, r0x), vbyx), r2x);
        const __m256 gy = _mm256_add_ps(_mm256_add_ps(_mm256_mul_ps(bx, r0y), vbyy), r2y);
        const __m256 ix = _mm256_sub_ps(_mm256_mul_ps(_mm256_add_ps(gx, one), hw), half);
        const __m256 iy = _mm256_sub_ps(_mm256_mul_ps(_mm256_add_ps(gy, one), hh), half);
        __m256i x0 = _mm256_cvttps_epi32(ix), y0 = _mm256_cvttps_epi32(iy);  // floor: truncation, one less below zero
        x0 = _mm256_add_epi32(x0, _mm256_castps_si256(_mm256_cmp_ps(_mm256_cvtepi32_ps(x0), ix, _CMP_GT_OQ)));
        y0 = _mm256_add_epi32(y0, _mm256_castps_si256(_mm256_cmp_ps(_mm256_cvtepi32_ps(y0), iy, _CMP_GT_OQ)));
        __m256i out = _mm256_or_si256(_mm256_cmpgt_epi32(m1, x0), _mm256_xor_si256(_mm256_cmpgt_epi32(vW, x0), m1));
        out = _mm256_or_si256(out, _mm256_or_si256(_mm256_cmpgt_epi32(m1, y0), _mm256_xor_si256(_mm256_cmpgt_epi32(vH, y0), m1)));
        uint8_t *o = orow + (size_t)ox * 3;
        // Eight pixels all outside (the corners a rotation or shear uncovers): the lanes below would
        // blend the fill (or 0) over everything, so store it without loads or arithmetic.
        if ((_mm256_movemask_ps(_mm256_castsi256_ps(out)) & ((1 << nv) - 1)) == (1 << nv) - 1) {
            for (int l = 0; l < nv; l++) memcpy(o + 3 * l, fb, 3);
            continue;
        }
        const __m256 wx = _mm256_sub_ps(ix, _mm256_cvtepi32_ps(x0)), wy = _mm256_sub_ps(iy, _mm256_cvtepi32_ps(y0));
        const __m256 ex = _mm256_sub_ps(one, wx), sy = _mm256_sub_ps(one, wy);
        const __m256 wnw = _mm256_mul_ps(sy, ex), wne = _mm256_mul_ps(sy, wx), wsw = _mm256_mul_ps(wy, ex),
                     wse = _mm256_mul_ps(wy, wx);
        // Interior (the SSE2 path's test: x0 in [0, W - 1), y0 in [0, H - 1), (y0 + 1) W + x0 + 2 < H W,
        // which also keeps the 8-byte loads inside the image); outside: all four taps out.
        __m256i in = _mm256_and_si256(_mm256_cmpgt_epi32(x0, m1), _mm256_cmpgt_epi32(Wm1, x0));
        in = _mm256_and_si256(in, _mm256_and_si256(_mm256_cmpgt_epi32(y0, m1), _mm256_cmpgt_epi32(Hm1, y0)));
        const __m256i idx = _mm256_add_epi32(_mm256_mullo_epi32(y0, vW), x0);  // wraps only where in is false
        in = _mm256_and_si256(in, _mm256_cmpgt_epi32(lim, idx));
        // The taps: per pixel one 8-byte load per row (as the SSE2 path), regrouped by two byte
        // shuffles and two unpacks per row into one 32-bit word per pixel and tap (hardware gathers
        // are slower here: ~12 ns per 8 words, microcode). Lanes not interior read offset 0 (the
        // caller makes W >= 3, H >= 2, so both rows' 8 bytes exist); their values are replaced below.
        int offs[8];
        _mm256_storeu_si256((__m256i *)offs, _mm256_and_si256(_mm256_add_epi32(idx, _mm256_add_epi32(idx, idx)), in));
        __m256i tnw, tne, tsw, tse;
        ROWTAPS(img, tnw, tne);
        ROWTAPS(img + (size_t)3 * W, tsw, tse);
        // The SSE2 path's mask, ((wnw + wne) + wsw) + wse, per lane.
        const __m256 mk = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(wnw, wne), wsw), wse);
        const __m256 outf = _mm256_castsi256_ps(out);
        __m256i px = _mm256_setzero_si256();
        for (int c = 0; c < 3; c++) {
            const __m128i sh = _mm_cvtsi32_si128(8 * c);
#define TAP(t) _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srl_epi32(t, sh), ff))
            __m256 v = _mm256_mul_ps(TAP(tnw), wnw);
            v = _mm256_add_ps(v, _mm256_mul_ps(TAP(tne), wne));
            v = _mm256_add_ps(v, _mm256_mul_ps(TAP(tsw), wsw));
            v = _mm256_add_ps(v, _mm256_mul_ps(TAP(tse), wse));
#undef TAP
            if (fill) v = _mm256_add_ps(_mm256_mul_ps(v, mk), _mm256_mul_ps(_mm256_sub_ps(one, mk), fc[c]));
            v = _mm256_blendv_ps(v, fc[c], outf);
            v = _mm256_min_ps(_mm256_max_ps(v, zero), v255);
            px = _mm256_or_si256(px, _mm256_sll_epi32(_mm256_cvtps_epi32(v), sh));  // round half to even
        }
        // Four 3-byte pixels per 128-bit half, then 12 + 12 bytes: nothing past the eighth pixel.
        px = _mm256_shuffle_epi8(px, pack);
        if (nv == 8) {
            const __m128i hi = _mm256_extracti128_si256(px, 1);
            _mm_storeu_si128((__m128i *)o, _mm256_castsi256_si128(px));
            _mm_storel_epi64((__m128i *)(o + 12), hi);
            const uint32_t t = (uint32_t)_mm_cvtsi128_si32(_mm_srli_si128(hi, 8));
            memcpy(o + 12 + 8, &t, 4);
        } else {
            uint8_t buf[32];
            _mm_storeu_si128((__m128i *)buf, _mm256_castsi256_si128(px));
            _mm_storeu_si128((__m128i *)(buf + 12), _mm256_extracti128_si256(px, 1));
            memcpy(o, buf, (size_t)nv * 3);
        }
        // Border pixels (some taps in, some out): the reference's expression, one at a time.
        unsigned edge = ~(unsigned)_mm256_movemask_ps(_mm256_castsi256_ps(_mm256_or_si256(in, out))) & ((1u << nv) - 1);
        if (edge) {
            int X0[8], Y0[8];
            float WX[8], WY[8];
            _mm256_storeu_si256((__m256i *)X0, x0);
            _mm256_storeu_si256((__m256i *)Y0, y0);
            _mm256_storeu_ps(WX, wx);
            _mm256_storeu_ps(WY, wy);
            for (; edge; edge &= edge - 1) {
                const int l = __builtin_ctz(edge);
                warp_pixel(img, H, W, 3, X0[l], Y0[l], WX[l], WY[l], fill, o + 3 * l);
            }
        }
    }
#undef ROWTAPS
#undef LD8
}

// _gen_affine_grid + grid_sample(bilinear, zeros, align_corners=False) + the fill mask +
// _cast_squeeze_out's round, float32 throughout as torch (and as autoaug_ref.c's warp).
#define WARP_CHUNK 64
static void warp(uint8_t *img, int H, int W, int C, const double m[6], const uint8_t *fill, uint8_t *tmp) {
    float th[6];
    for (int k = 0; k < 6; k++) th[k] = (float)m[k];
    const float hw = 0.5f * (float)W, hh = 0.5f * (float)H;
    // rescaled_theta = theta^T / [0.5 w, 0.5 h]: column 0 feeds x, column 1 feeds y.
    const float r0x = th[0] / hw, r1x = th[1] / hw, r2x = th[2] / hw;
    const float r0y = th[3] / hh, r1y = th[4] / hh, r2y = th[5] / hh;
    const float bx0 = -(float)W * 0.5f + 0.5f, by0 = -(float)H * 0.5f + 0.5f;
    if (th[1] == 0.0f && th[3] == 0.0f && H <= 4096 && W <= 4096) {
        // No rotation or shear: x depends on the column only and y on the row only (by * r1x is a
        // zero, which leaves the sum as it is). Whole-pixel shifts become row copies.
        int sx[4096], sy[4096], whole = 1;
        for (int ox = 0; ox < W && whole; ox++) {
            const float by = by0 + 0.0f, bx = bx0 + (float)ox;
            const float ix = ((bx * r0x + by * r1x + r2x) + 1.0f) * hw - 0.5f;
            whole = fabsf(ix) < 1e6f;
            const float r = whole ? floorf(ix + 0.5f) : 0.0f;
            whole = whole && fabsf(ix - r) < 1e-4f;
            sx[ox] = (int)r;
        }
        for (int oy = 0; oy < H && whole; oy++) {
            const float by = by0 + (float)oy, bx = bx0;
            const float iy = ((bx * r0y + by * r1y + r2y) + 1.0f) * hh - 0.5f;
            whole = fabsf(iy) < 1e6f;
            const float r = whole ? floorf(iy + 0.5f) : 0.0f;
            whole = whole && fabsf(iy - r) < 1e-4f;
            sy[oy] = (int)r;
        }
        if (whole) {
            // sx must be ox + k (a translation): anything else takes the general path.
            for (int ox = 1; ox < W && whole; ox++) whole = sx[ox] == sx[0] + ox;
            if (whole) {
                // A translation in y too (sy = oy + k): rows move in place, each read before it is
                // overwritten (top down when the source lies below, bottom up when above), which
                // saves the copy back from tmp; memmove covers the overlap within a row.
                int rows = 1;
                for (int oy = 1; oy < H && rows; oy++) rows = sy[oy] == sy[0] + oy;
                if (rows && __atomic_load_n(&aa_simd_allowed, __ATOMIC_RELAXED)) {
                    warp_shift_inplace(img, H, W, C, sx, sy, fill);
                    return;
                }
                warp_shift(img, H, W, C, sx, sy, fill, tmp);
                memcpy(img, tmp, (size_t)H * W * C);
                return;
            }
        }
    }
    int X0[WARP_CHUNK], Y0[WARP_CHUNK];
    float WX[WARP_CHUNK], WY[WARP_CHUNK], WNW[WARP_CHUNK], WNE[WARP_CHUNK], WSW[WARP_CHUNK], WSE[WARP_CHUNK];
    const __m128 zero = _mm_setzero_ps(), v255 = _mm_set1_ps(255.0f), one = _mm_set1_ps(1.0f);
    __m128 fillv = zero;
    if (fill && C == 3) fillv = _mm_setr_ps((float)fill[0], (float)fill[1], (float)fill[2], 0.0f);
    const size_t last = (size_t)H * W;  // pixel index limit for 4-byte loads and stores
    // The AVX2 row: 32-bit offsets and its H W - W - 2 in an int, and two rows of 8 bytes at offset 0.
    const int avx2 = C == 3 && W >= 3 && H >= 2 && last < ((size_t)1 << 29) && warp_use_avx2();
    const WarpK K = {r0x, r0y, r2x, r2y, hw, hh, bx0};
    for (int oy = 0; oy < H; oy++) {
        const float by = by0 + (float)oy;
        const float byx = by * r1x, byy = by * r1y;
        if (avx2) {
            warp_row_avx2(img, H, W, &K, byx, byy, fill, tmp + (size_t)oy * W * 3);
            continue;
        }
        for (int c0 = 0; c0 < W; c0 += WARP_CHUNK) {
            const int n = W - c0 < WARP_CHUNK ? W - c0 : WARP_CHUNK;
            // The grid and grid_sample's unnormalisation: (g + 1) * (size / 2) - 0.5, then floor and
            // the fractions, as the reference computes them (no branches: the compiler vectorises it).
            for (int j = 0; j < n; j++) {
                const float bx = bx0 + (float)(c0 + j);
                const float gx = bx * r0x + byx + r2x;
                const float gy = bx * r0y + byy + r2y;
                const float ix = (gx + 1.0f) * hw - 0.5f;
                const float iy = (gy + 1.0f) * hh - 0.5f;
                int x0 = (int)ix, y0 = (int)iy;  // floor: truncation, one less below zero
                x0 -= (float)x0 > ix;
                y0 -= (float)y0 > iy;
                const float wx = ix - (float)x0, wy = iy - (float)y0, ex = 1.0f - wx, sy = 1.0f - wy;
                X0[j] = x0;
                Y0[j] = y0;
                WX[j] = wx;
                WY[j] = wy;
                // The interior path's bilinear weights, the reference's products, four pixels a step.
                WNW[j] = sy * ex;
                WNE[j] = sy * wx;
                WSW[j] = wy * ex;
                WSE[j] = wy * wx;
            }
            for (int j = 0; j < n; j++) {
                const int x0 = X0[j], y0 = Y0[j], ox = c0 + j;
                uint8_t *o = tmp + ((size_t)oy * W + ox) * C;
                // Interior: all four taps inside; the 4-byte loads and store stay inside the buffers.
                if (C == 3 && (unsigned)x0 < (unsigned)(W - 1) && (unsigned)y0 < (unsigned)(H - 1) &&
                    (size_t)(y0 + 1) * W + x0 + 2 < last && (size_t)oy * W + ox + 1 < last) {
                    const float wnw = WNW[j], wne = WNE[j], wsw = WSW[j], wse = WSE[j];
                    const uint8_t *p = img + ((size_t)y0 * W + x0) * 3, *q = p + (size_t)W * 3;
                    // The 8-byte loads end inside pixel x0 + 2 of their row, which the test above keeps
                    // inside the image.
                    __m128 a, b, c, d;
                    load2x4f(p, &a, &b);
                    load2x4f(q, &c, &d);
                    // v = ((a wnw + b wne) + c wsw) + d wse: the reference's 0 + a wnw is a wnw exactly.
                    __m128 v = _mm_mul_ps(a, _mm_set1_ps(wnw));
                    v = _mm_add_ps(v, _mm_mul_ps(b, _mm_set1_ps(wne)));
                    v = _mm_add_ps(v, _mm_mul_ps(c, _mm_set1_ps(wsw)));
                    v = _mm_add_ps(v, _mm_mul_ps(d, _mm_set1_ps(wse)));
                    if (fill) {
                        const float mask = ((wnw + wne) + wsw) + wse;
                        const __m128 mk = _mm_set1_ps(mask);
                        v = _mm_add_ps(_mm_mul_ps(v, mk), _mm_mul_ps(_mm_sub_ps(one, mk), fillv));
                    }
                    v = _mm_min_ps(_mm_max_ps(v, zero), v255);
                    // cvtps2dq rounds to nearest, ties to even, in the default MXCSR mode: round_even_255f.
                    __m128i r = _mm_cvtps_epi32(v);
                    r = _mm_packs_epi32(r, r);
                    r = _mm_packus_epi16(r, r);
                    // The fourth byte lands on the next pixel, which is written after this one.
                    uint32_t u = (uint32_t)_mm_cvtsi128_si32(r);
                    memcpy(o, &u, 4);
                    continue;
                }
                // All four taps outside: v = 0 and mask = 0, so the reference writes round(fill) or 0.
                if (x0 < -1 || x0 >= W || y0 < -1 || y0 >= H) {
                    for (int c = 0; c < C; c++) o[c] = fill ? fill[c] : 0;
                    continue;
                }
                warp_pixel(img, H, W, C, x0, y0, WX[j], WY[j], fill, o);
            }
        }
    }
    memcpy(img, tmp, (size_t)H * W * C);
}

void aa_affine(uint8_t *img, int H, int W, int C, double angle, double tx, double ty, double shear_x, double shear_y,
               int center_zero, const uint8_t *fill, uint8_t *tmp) {
    // F.affine: center [0, 0] in pixels is (-w/2, -h/2) in its centred coordinates; None is (0, 0).
    double cx = center_zero ? -0.5 * W : 0.0, cy = center_zero ? -0.5 * H : 0.0;
    double m[6];
    aa_inverse_affine(cx, cy, angle, tx, ty, shear_x, shear_y, m);
    warp(img, H, W, C, m, fill, tmp);
}

// ---------------------------------------------------------------- photometric ops

// _blend(img1, img2, ratio): (ratio * img1 + (1 - ratio) * img2).clamp(0, 255).to(uint8), float32.
// The products of a uint8 by a fixed ratio take 256 values: tables of them leave the sums, the clamp
// and the truncation as they were.
static inline uint8_t clamp_trunc(float v) {
    v = v < 0.0f ? 0.0f : v > 255.0f ? 255.0f : v;
    return (uint8_t)v;  // truncation, as .to(torch.uint8)
}

typedef struct {
    float a[256], b[256];  // ratio * k, (1 - ratio) * k
} BlendTab;

static void blend_tab(BlendTab *t, double f) {
    float r = (float)f, r1 = (float)(1.0 - f);
    for (int k = 0; k < 256; k++) t->a[k] = r * (float)k, t->b[k] = r1 * (float)k;
}

// rgb_to_grayscale on uint8: (0.2989 r + 0.587 g + 0.114 b).to(uint8), with the products tabled.
typedef struct {
    float r[256], g[256], b[256];
} GreyTab;

static void grey_tab(GreyTab *t) {
    for (int k = 0; k < 256; k++) t->r[k] = 0.2989f * (float)k, t->g[k] = 0.587f * (float)k, t->b[k] = 0.114f * (float)k;
}

static inline uint8_t grey(const GreyTab *t, const uint8_t *p) { return (uint8_t)((t->r[p[0]] + t->g[p[1]]) + t->b[p[2]]); }

static void apply_lut(uint8_t *img, size_t n, const uint8_t lut[256]) {
    for (size_t i = 0; i < n; i++) img[i] = lut[img[i]];
}

// A per-value blend with a constant second image: (ratio * k + (1 - ratio) * b) for k in 0..255.
static void blend_const_lut(uint8_t lut[256], double f, float b) {
    float r = (float)f, r1 = (float)(1.0 - f);
    for (int k = 0; k < 256; k++) lut[k] = clamp_trunc(r * (float)k + r1 * b);
}

// The per-value ops without tables, 24 bytes a step (three vectors of eight floats; with three
// channels each vector position has a fixed channel, so per-channel constants are three vectors):
// v = a * x + c (a blend with a constant) or v = (x - a) * c (autocontrast), clamped to [0, 255] and
// truncated, the scalar expressions of the tables' entries per lane (max/min give the same values
// as the comparisons for every non-NaN v, and cvttps2dq truncates as the cast). The bytes past the
// last whole step go through the table. Chosen at run time with the warp's AVX2 (aa_set_simd).
__attribute__((target("avx2"))) static void affine_u8_avx2(uint8_t *img, size_t n, const float a[3], const float c[3],
                                                           int sub_first, const uint8_t lut[3][256]) {
    __m256 A[3], K[3];
    for (int v = 0; v < 3; v++) {
        float av[8], cv[8];
        for (int l = 0; l < 8; l++) av[l] = a[(8 * v + l) % 3], cv[l] = c[(8 * v + l) % 3];
        A[v] = _mm256_loadu_ps(av);
        K[v] = _mm256_loadu_ps(cv);
    }
    const __m256 zero = _mm256_setzero_ps(), v255 = _mm256_set1_ps(255.0f);
    const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    size_t i = 0;
    for (; i + 24 <= n; i += 24) {
        __m256i q[3];
        for (int v = 0; v < 3; v++) {
            const __m256 x = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(img + i + 8 * v))));
            __m256 y = sub_first ? _mm256_mul_ps(_mm256_sub_ps(x, A[v]), K[v]) : _mm256_add_ps(_mm256_mul_ps(A[v], x), K[v]);
            y = _mm256_min_ps(_mm256_max_ps(y, zero), v255);
            q[v] = _mm256_cvttps_epi32(y);
        }
        // [x0 0-3, x1 0-3, x2 0-3, x2 0-3 | 4-7 likewise] as bytes, then the dwords in order
        const __m256i b = _mm256_packus_epi16(_mm256_packus_epi32(q[0], q[1]), _mm256_packus_epi32(q[2], q[2]));
        const __m256i o = _mm256_permutevar8x32_epi32(b, order);
        _mm_storeu_si128((__m128i *)(img + i), _mm256_castsi256_si128(o));
        _mm_storel_epi64((__m128i *)(img + i + 16), _mm256_extracti128_si256(o, 1));
    }
    for (; i < n; i++) img[i] = lut[i % 3][img[i]];  // i is a multiple of 24 here: channel i % 3
}

// The per-value blend ops through affine_u8_avx2 where allowed, else the table.
static void blend_const_apply(uint8_t *img, size_t n, double f, float b) {
    uint8_t lut[3][256];
    blend_const_lut(lut[0], f, b);
    if (n >= 24 && warp_use_avx2()) {
        memcpy(lut[1], lut[0], 256);
        memcpy(lut[2], lut[0], 256);
        const float r = (float)f, r1 = (float)(1.0 - f), k = r1 * b;
        const float av[3] = {r, r, r}, cv[3] = {k, k, k};
        affine_u8_avx2(img, n, av, cv, 0, (const uint8_t(*)[256])lut);
        return;
    }
    apply_lut(img, n, lut[0]);
}

static void brightness(uint8_t *img, size_t n, double f) { blend_const_apply(img, n, f, 0.0f); }

// o[i] = _blend's clamp(r a[i] + r1 b[i]) truncated, 16 bytes a step: the lanes do the reference's two
// float32 products and one sum; values are never negative after the clamp, so cvttps2dq truncates as
// .to(uint8). b is uint8 or (for the blur) uint16 holding values up to 255.
static inline __m128 blend4(__m128i ai, __m128i bi, __m128 r, __m128 r1) {
    const __m128 v = _mm_add_ps(_mm_mul_ps(r, _mm_cvtepi32_ps(ai)), _mm_mul_ps(r1, _mm_cvtepi32_ps(bi)));
    return _mm_min_ps(_mm_max_ps(v, _mm_setzero_ps()), _mm_set1_ps(255.0f));
}

static void blend_rows16(const uint8_t *a, const uint16_t *b, uint8_t *o, size_t n, const BlendTab *t, float r,
                         float r1) {
    const __m128i z = _mm_setzero_si128();
    const __m128 rv = _mm_set1_ps(r), r1v = _mm_set1_ps(r1);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m128i a16 = _mm_unpacklo_epi8(_mm_loadl_epi64((const __m128i *)(a + i)), z);
        const __m128i b16 = _mm_loadu_si128((const __m128i *)(b + i));
        const __m128i lo = _mm_cvttps_epi32(blend4(_mm_unpacklo_epi16(a16, z), _mm_unpacklo_epi16(b16, z), rv, r1v));
        const __m128i hi = _mm_cvttps_epi32(blend4(_mm_unpackhi_epi16(a16, z), _mm_unpackhi_epi16(b16, z), rv, r1v));
        const __m128i w = _mm_packs_epi32(lo, hi);
        _mm_storel_epi64((__m128i *)(o + i), _mm_packus_epi16(w, w));
    }
    for (; i < n; i++) o[i] = clamp_trunc(t->a[a[i]] + t->b[b[i]]);
}

// Eight RGB pixels at p split into channel vectors (two byte shuffles per channel) and their grey
// levels: rgb_to_grayscale's float32 products and sums, truncated (the grey tables' values per lane).
// Shared by Color and Contrast, so test_autoaug's Color checks on all 2^24 RGB triples cover both.
__attribute__((target("avx2"), always_inline)) static inline __m256 grey8_avx2(const uint8_t *p, __m256 *R, __m256 *G,
                                                                               __m256 *B) {
#define M(...) _mm_setr_epi8(__VA_ARGS__)
    const __m128i ra = M(0, 3, 6, 9, 12, 15, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1),
                  rb = M(-1, -1, -1, -1, -1, -1, 10, 13, -1, -1, -1, -1, -1, -1, -1, -1),
                  ga = M(1, 4, 7, 10, 13, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1),
                  gb = M(-1, -1, -1, -1, -1, 8, 11, 14, -1, -1, -1, -1, -1, -1, -1, -1),
                  ba = M(2, 5, 8, 11, 14, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1),
                  bb = M(-1, -1, -1, -1, -1, 9, 12, 15, -1, -1, -1, -1, -1, -1, -1, -1);
#undef M
    const __m128i a = _mm_loadu_si128((const __m128i *)p), b = _mm_loadu_si128((const __m128i *)(p + 8));
    *R = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_or_si128(_mm_shuffle_epi8(a, ra), _mm_shuffle_epi8(b, rb))));
    *G = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_or_si128(_mm_shuffle_epi8(a, ga), _mm_shuffle_epi8(b, gb))));
    *B = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_or_si128(_mm_shuffle_epi8(a, ba), _mm_shuffle_epi8(b, bb))));
    const __m256 v = _mm256_add_ps(_mm256_mul_ps(_mm256_set1_ps(0.2989f), *R), _mm256_mul_ps(_mm256_set1_ps(0.587f), *G));
    return _mm256_cvtepi32_ps(_mm256_cvttps_epi32(_mm256_add_ps(v, _mm256_mul_ps(_mm256_set1_ps(0.114f), *B))));
}

// Saturation 8 pixels a step, fused: the bytes split into channels by byte shuffles, the grey level
// as below (the same float32 products and sums, truncated), each channel blended with it as
// blend_rows16 does (two products, one sum, clamp, truncation), then the channels interleaved
// again. Returns the pixels done; the caller finishes the rest.
__attribute__((target("avx2"))) static size_t saturation_avx2(uint8_t *img, size_t px, float r, float r1) {
    const __m256 rv = _mm256_set1_ps(r), r1v = _mm256_set1_ps(r1), zero = _mm256_setzero_ps(),
                 v255 = _mm256_set1_ps(255.0f);
    const __m256i shuf = _mm256_setr_epi8(0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11, 12, 13, 14, 15, 0, 4, 8, 1, 5, 9, 2,
                                          6, 10, 3, 7, 11, 12, 13, 14, 15);
    const __m256i comp = _mm256_setr_epi32(0, 1, 2, 4, 5, 6, 3, 7);
    size_t i = 0;
    for (; i + 8 <= px; i += 8) {
        uint8_t *p = img + 3 * i;
        __m256 R, G, B;
        const __m256 g = grey8_avx2(p, &R, &G, &B);
        const __m256 gr = _mm256_mul_ps(r1v, g);
#define BL(X) _mm256_cvttps_epi32(_mm256_min_ps(_mm256_max_ps(_mm256_add_ps(_mm256_mul_ps(rv, X), gr), zero), v255))
        __m256i q = _mm256_packus_epi16(_mm256_packs_epi32(BL(R), BL(G)), _mm256_packs_epi32(BL(B), BL(B)));
#undef BL
        q = _mm256_permutevar8x32_epi32(_mm256_shuffle_epi8(q, shuf), comp);
        _mm_storeu_si128((__m128i *)p, _mm256_castsi256_si128(q));
        _mm_storel_epi64((__m128i *)(p + 16), _mm256_extracti128_si256(q, 1));
    }
    return i;
}

static void saturation(uint8_t *img, size_t px, int C, double f) {
    if (C == 1) return;  // torchvision: "Match PIL behaviour"
    if (warp_use_avx2()) {
        const size_t done = saturation_avx2(img, px, (float)f, (float)(1.0 - f));
        img += 3 * done;
        px -= done;
        if (!px) return;
    }
    BlendTab t;
    blend_tab(&t, f);
    // 512 pixels at a time: their grey levels (the reference's products and sums, no tables, so the
    // compiler may vectorise it), each repeated for the pixel's three bytes, then the blend 8 bytes a
    // step. The grey level is below 255 (the weights sum to 0.9999), so int conversion is uint8's.
    uint16_t g3[3 * 512];
    for (size_t i0 = 0; i0 < px; i0 += 512) {
        const size_t n = px - i0 < 512 ? px - i0 : 512;
        uint8_t *p = img + i0 * 3;
        for (size_t j = 0; j < n; j++) {
            const float v = 0.2989f * (float)p[3 * j] + 0.587f * (float)p[3 * j + 1];
            const uint16_t g = (uint16_t)(int)(v + 0.114f * (float)p[3 * j + 2]);
            g3[3 * j] = g3[3 * j + 1] = g3[3 * j + 2] = g;
        }
        blend_rows16(p, g3, p, 3 * n, &t, (float)f, (float)(1.0 - f));
    }
}

// The sum of the grey levels of px RGB pixels, 8 a step (grey8_avx2); *done: the pixels summed.
__attribute__((target("avx2"))) static int64_t grey_sum_avx2(const uint8_t *img, size_t px, size_t *done) {
    __m256i acc = _mm256_setzero_si256();  // 8 lanes of at most 255 * (2^31 / 2040) pixels: no overflow below
    size_t i = 0;
    const size_t lim = px < ((size_t)1 << 22) ? px : ((size_t)1 << 22);
    for (; i + 8 <= lim; i += 8) {
        __m256 R, G, B;
        acc = _mm256_add_epi32(acc, _mm256_cvttps_epi32(grey8_avx2(img + 3 * i, &R, &G, &B)));
    }
    int32_t l[8];
    _mm256_storeu_si256((__m256i *)l, acc);
    int64_t s = 0;
    for (int k = 0; k < 8; k++) s += l[k];
    *done = i;
    return s;
}

static void contrast(uint8_t *img, size_t px, int C, double f) {
    // The float32 mean of torch is exact here while the sum of grey levels stays below 2^24
    // (images up to 256 x 256); beyond that torch's summation order decides the last bit.
    int64_t s = 0;
    if (C == 3) {
        GreyTab g;
        grey_tab(&g);
        size_t i = 0;
        if (warp_use_avx2()) s = grey_sum_avx2(img, px, &i);
        for (; i < px; i++) s += grey(&g, img + i * 3);
    } else {
        for (size_t i = 0; i < px; i++) s += img[i];
    }
    float mean = (float)s / (float)px;
    blend_const_apply(img, px * C, f, mean);
}

static void sharpness(uint8_t *img, int H, int W, int C, double f, uint8_t *tmp) {
    if (W <= 2 || H <= 2) return;
    // _blurred_degenerate_image: 3x3 kernel of ones with 5 in the middle, / 13, rounded; the border
    // keeps the image. The reference computes round(s / 13 + 5 c / 13) in double with float32's
    // 1/13 and 5/13, s the 8 neighbours' sum and c the centre; n / 13 is never within 1/26 of a
    // tie (13 is odd) and those constants move the value by under 1e-5, so it is the integer
    // (s + 5 c + 6) / 13 (tests/test_autoaug.c checks every s and c).
    const size_t row = (size_t)W * C;
    BlendTab t;
    blend_tab(&t, f);
    // The border rows and columns blend with themselves: blurred = img there.
    uint16_t blur[3 * 4096];
    for (int y = 0; y < H; y++) {
        uint8_t *m = img + (size_t)y * row;
        uint8_t *o = tmp + (size_t)y * row;  // this row's output, written back one row late
        if (y == 0 || y == H - 1 || row > CT_ARRAY_LEN(blur)) {
            for (size_t i = 0; i < row; i++) o[i] = clamp_trunc(t.a[m[i]] + t.b[m[i]]);
            if (!(y == 0 || y == H - 1)) {
                // Rows wider than the stack buffer: the same integer blur, one value at a time.
                const uint8_t *u = m - row, *d = m + row;
                for (size_t i = C; i < row - C; i++) {
                    unsigned s = u[i - C] + u[i] + u[i + C] + m[i - C] + m[i + C] + d[i - C] + d[i] + d[i + C];
                    o[i] = clamp_trunc(t.a[m[i]] + t.b[(s + 5u * m[i] + 6u) / 13u]);
                }
            }
            continue;
        }
        const uint8_t *u = m - row, *d = m + row;
        for (size_t i = C; i < row - C; i++) {
            unsigned s = (unsigned)u[i - C] + u[i] + u[i + C] + m[i - C] + m[i + C] + d[i - C] + d[i] + d[i + C];
            blur[i] = (uint16_t)((s + 5u * m[i] + 6u) / 13u);
        }
        for (int c = 0; c < C; c++) blur[c] = m[c], blur[row - C + c] = m[row - C + c];
        blend_rows16(m, blur, o, row, &t, (float)f, (float)(1.0 - f));
    }
    // The blur reads the unblended rows above and below, so the blend went to tmp.
    memcpy(img, tmp, (size_t)H * row);
}

static void posterize(uint8_t *img, size_t n, int bits) {
    if (bits < 0) bits = 0;
    if (bits >= 8) return;
    uint8_t mask = (uint8_t)(0xFF << (8 - bits));
    for (size_t i = 0; i < n; i++) img[i] &= mask;
}

// Solarize's table inverts the values from the first k >= thr up (a threshold t; 256: none), so where
// allowed 32 bytes a step: x >= t is max(x, t) == x, and 255 - x is ~x.
__attribute__((target("avx2"))) static size_t solarize_avx2(uint8_t *img, size_t n, int t) {
    const __m256i tv = _mm256_set1_epi8((char)t), ones = _mm256_set1_epi8(-1);
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        const __m256i x = _mm256_loadu_si256((const __m256i *)(img + i));
        const __m256i m = _mm256_cmpeq_epi8(_mm256_max_epu8(x, tv), x);
        _mm256_storeu_si256((__m256i *)(img + i), _mm256_blendv_epi8(x, _mm256_xor_si256(x, ones), m));
    }
    return i;
}

static void solarize(uint8_t *img, size_t n, double thr) {
    uint8_t lut[256];
    int t = 256;
    for (int k = 255; k >= 0; k--) {
        lut[k] = (double)k >= thr ? (uint8_t)(255 - k) : (uint8_t)k;
        if ((double)k >= thr) t = k;
    }
    size_t i = 0;
    if (t == 256) return;  // no value reaches the threshold: the table is the identity
    if (warp_use_avx2()) i = solarize_avx2(img, n, t);
    apply_lut(img + i, n - i, lut);
}

static void solarize_add(uint8_t *img, size_t n, int add) {
    uint8_t lut[256];
    for (int k = 0; k < 256; k++) {
        int v = k < 128 ? k + add : k;
        lut[k] = (uint8_t)(v > 255 ? 255 : v < 0 ? 0 : v);
    }
    apply_lut(img, n, lut);
}

// Per-channel minimum and maximum of an interleaved image: 48 bytes (16 pixels of 3 channels, or 48
// of 1) at a time with SSE2 min/max, each byte lane keeping its channel, then the lanes folded.
static void channel_minmax(const uint8_t *img, size_t n, int C, int lo[3], int hi[3]) {
    __m128i mn[3], mx[3];
    for (int k = 0; k < 3; k++) mn[k] = _mm_set1_epi8((char)0xFF), mx[k] = _mm_setzero_si128();
    size_t i = 0;
    for (; i + 48 <= n; i += 48)
        for (int k = 0; k < 3; k++) {
            __m128i v = _mm_loadu_si128((const __m128i *)(img + i + 16 * k));
            mn[k] = _mm_min_epu8(mn[k], v);
            mx[k] = _mm_max_epu8(mx[k], v);
        }
    for (int c = 0; c < C; c++) lo[c] = 255, hi[c] = 0;
    uint8_t a[48], b[48];
    for (int k = 0; k < 3; k++) {
        _mm_storeu_si128((__m128i *)(a + 16 * k), mn[k]);
        _mm_storeu_si128((__m128i *)(b + 16 * k), mx[k]);
    }
    if (i > 0)
        for (int j = 0; j < 48; j++) {
            int c = j % C;
            lo[c] = a[j] < lo[c] ? a[j] : lo[c];
            hi[c] = b[j] > hi[c] ? b[j] : hi[c];
        }
    for (; i < n; i++) {  // i is a multiple of 48, so the channel is i % C
        int c = (int)(i % C), v = img[i];
        lo[c] = v < lo[c] ? v : lo[c];
        hi[c] = v > hi[c] ? v : hi[c];
    }
}

static void autocontrast(uint8_t *img, size_t px, int C) {
    int lo[3], hi[3];
    channel_minmax(img, px * C, C, lo, hi);
    uint8_t lut[3][256];
    float mnv[3] = {0, 0, 0}, scv[3] = {1, 1, 1};
    for (int c = 0; c < C; c++) {
        float mn = (float)lo[c], scale = 1.0f;
        if (hi[c] > lo[c]) scale = 255.0f / (float)(hi[c] - lo[c]);
        else mn = 0.0f;  // torchvision: a non-finite scale leaves the channel as it is
        for (int k = 0; k < 256; k++) lut[c][k] = clamp_trunc(((float)k - mn) * scale);
        mnv[c] = mn, scv[c] = scale;
    }
    if (C == 3 && px * 3 >= 24 && warp_use_avx2()) {
        affine_u8_avx2(img, px * 3, mnv, scv, 1, (const uint8_t(*)[256])lut);
    } else if (C == 3) {
        for (size_t i = 0; i < px; i++) {
            uint8_t *p = img + i * 3;
            p[0] = lut[0][p[0]], p[1] = lut[1][p[1]], p[2] = lut[2][p[2]];
        }
    } else {
        apply_lut(img, px, lut[0]);
    }
}

static void equalize(uint8_t *img, size_t px, int C) {
    // The channels' histograms in one pass (two copies each, so that runs of equal values do not
    // wait on one counter), then a table per channel.
    uint32_t h2[2][3][256];
    memset(h2, 0, sizeof h2);
    if (C == 3) {
        size_t i = 0;
        for (; i + 2 <= px; i += 2) {
            const uint8_t *p = img + i * 3;
            h2[0][0][p[0]]++, h2[0][1][p[1]]++, h2[0][2][p[2]]++;
            h2[1][0][p[3]]++, h2[1][1][p[4]]++, h2[1][2][p[5]]++;
        }
        for (; i < px; i++) h2[0][0][img[i * 3]]++, h2[0][1][img[i * 3 + 1]]++, h2[0][2][img[i * 3 + 2]]++;
    } else {
        for (size_t i = 0; i < px; i++) h2[i & 1][0][img[i]]++;
    }
    uint8_t lut[3][256];
    int identity[3] = {0, 0, 0};
    for (int c = 0; c < C; c++) {
        int64_t hist[256];
        for (int k = 0; k < 256; k++) hist[k] = (int64_t)h2[0][c][k] + h2[1][c][k];
        // step = (sum of the nonzero bins but the last) // 255, as torchvision and PIL.
        int last = 255;
        while (last > 0 && hist[last] == 0) last--;
        int64_t s = 0;
        for (int k = 0; k < last; k++) s += hist[k];
        int64_t step = s / 255;
        if (step == 0) {
            identity[c] = 1;
            for (int k = 0; k < 256; k++) lut[c][k] = (uint8_t)k;
            continue;
        }
        int64_t cum = 0;
        for (int k = 0; k < 256; k++) {
            int64_t v = (cum + step / 2) / step;  // the LUT shifted by one: entry k uses the cumsum before k
            lut[c][k] = (uint8_t)(v > 255 ? 255 : v);
            cum += hist[k];
        }
    }
    if (C == 3) {
        if (identity[0] && identity[1] && identity[2]) return;
        for (size_t i = 0; i < px; i++) {
            uint8_t *p = img + i * 3;
            p[0] = lut[0][p[0]], p[1] = lut[1][p[1]], p[2] = lut[2][p[2]];
        }
    } else if (!identity[0]) {
        apply_lut(img, px, lut[0]);
    }
}

void aa_apply_op(AaOp op, double mag, const uint8_t *fill, uint8_t *img, int H, int W, int C, uint8_t *tmp) {
    size_t px = (size_t)H * W, n = px * C;
    switch (op) {
    case AA_IDENTITY: break;
    case AA_SHEAR_X: aa_affine(img, H, W, C, 0, 0, 0, degrees(atan(mag)), 0, 1, fill, tmp); break;
    case AA_SHEAR_Y: aa_affine(img, H, W, C, 0, 0, 0, 0, degrees(atan(mag)), 1, fill, tmp); break;
    case AA_TRANSLATE_X: aa_affine(img, H, W, C, 0, (double)(int)mag, 0, 0, 0, 0, fill, tmp); break;
    case AA_TRANSLATE_Y: aa_affine(img, H, W, C, 0, 0, (double)(int)mag, 0, 0, 0, fill, tmp); break;
    case AA_ROTATE: aa_affine(img, H, W, C, -mag, 0, 0, 0, 0, 0, fill, tmp); break;  // F.rotate passes -angle
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

// ---------------------------------------------------------------- torchvision's policies

float aa_linspace(float start, float end, int steps, int i) {
    if (steps == 1) return start;
    float step = (end - start) / (float)(steps - 1);
    return i < steps / 2 ? start + step * (float)i : end - step * (float)(steps - i - 1);
}

// The 14 ops of TrivialAugmentWide and torchvision's RandAugment, in their dictionary order.
static const AaOp TV_OPS[14] = {AA_IDENTITY, AA_SHEAR_X, AA_SHEAR_Y, AA_TRANSLATE_X, AA_TRANSLATE_Y,
                                AA_ROTATE, AA_BRIGHTNESS, AA_COLOR, AA_CONTRAST, AA_SHARPNESS,
                                AA_POSTERIZE, AA_SOLARIZE, AA_AUTOCONTRAST, AA_EQUALIZE};

static int tv_signed(AaOp op) { return op >= AA_SHEAR_X && op <= AA_SHARPNESS; }
static int tv_scalar(AaOp op) { return op == AA_IDENTITY || op == AA_AUTOCONTRAST || op == AA_EQUALIZE; }

double aa_tv_magnitude(AaPolicy p, AaOp op, int bins, int b, int H, int W) {
    int ta = p == AA_POLICY_TA_WIDE;
    switch (op) {
    case AA_SHEAR_X:
    case AA_SHEAR_Y: return aa_linspace(0.0f, ta ? 0.99f : 0.3f, bins, b);
    case AA_TRANSLATE_X: return aa_linspace(0.0f, ta ? 32.0f : (float)(150.0 / 331.0 * W), bins, b);
    case AA_TRANSLATE_Y: return aa_linspace(0.0f, ta ? 32.0f : (float)(150.0 / 331.0 * H), bins, b);
    case AA_ROTATE: return aa_linspace(0.0f, ta ? 135.0f : 30.0f, bins, b);
    case AA_BRIGHTNESS:
    case AA_COLOR:
    case AA_CONTRAST:
    case AA_SHARPNESS: return aa_linspace(0.0f, ta ? 0.99f : 0.9f, bins, b);
    case AA_POSTERIZE: {
        // 8 - (arange(bins) / ((bins - 1) / K)).round().int(): float32 division, half to even.
        float q = (float)b / (float)((bins - 1) / (ta ? 6.0 : 4.0));
        return 8 - (int)nearbyintf(q);
    }
    case AA_SOLARIZE: return aa_linspace(255.0f, 0.0f, bins, b);
    default: return 0.0;
    }
}

// ---------------------------------------------------------------- timm's RandAugment

// timm's _RAND_TRANSFORMS / _RAND_INCREASING_TRANSFORMS order; the increasing set differs only in
// the level mapping of Posterize, Solarize and the enhancements.
static const AaOp TIMM_OPS[15] = {AA_AUTOCONTRAST, AA_EQUALIZE, AA_INVERT, AA_ROTATE, AA_POSTERIZE,
                                  AA_SOLARIZE, AA_SOLARIZE_ADD, AA_COLOR, AA_CONTRAST, AA_BRIGHTNESS,
                                  AA_SHARPNESS, AA_SHEAR_X, AA_SHEAR_Y, AA_TRANSLATE_X, AA_TRANSLATE_Y};

// _randomly_negate: -v if random.random() > 0.5 else v.
static double negate(Rng *r, double v) { return rng_uniform(r) > 0.5f ? -v : v; }

static void timm_op(const AaConfig *c, AaOp op, Rng *r, uint8_t *img, int H, int W, int C, uint8_t *tmp) {
    if (c->op_prob < 1.0 && (double)rng_uniform(r) > c->op_prob) return;
    double m = c->magnitude;
    if (c->mstd > 0) {
        if (isinf(c->mstd)) m = rng_uniform(r) * m;
        else m = m + c->mstd * (double)rng_normal(r);
    }
    double upper = c->mmax ? c->mmax : 10.0;
    m = m < 0.0 ? 0.0 : m > upper ? upper : m;
    double lv = m / 10.0;
    size_t n = (size_t)H * W * C;
    switch (op) {
    case AA_ROTATE: aa_affine(img, H, W, C, -negate(r, lv * 30.0), 0, 0, 0, 0, 0, c->fill, tmp); break;
    case AA_POSTERIZE: {
        int bits = (int)(lv * 4);
        posterize(img, n, c->increasing ? 4 - bits : bits);
        break;
    }
    case AA_SOLARIZE: {
        int t = (int)(lv * 256);
        solarize(img, n, c->increasing ? 256 - t : t);
        break;
    }
    case AA_SOLARIZE_ADD: solarize_add(img, n, (int)(lv * 110)); break;
    case AA_COLOR:
    case AA_CONTRAST:
    case AA_BRIGHTNESS:
    case AA_SHARPNESS: {
        double f;
        if (c->increasing) {
            f = 1.0 + negate(r, lv * 0.9);
            if (f < 0.1) f = 0.1;
        } else {
            f = lv * 1.8 + 0.1;
        }
        if (op == AA_COLOR) saturation(img, (size_t)H * W, C, f);
        else if (op == AA_CONTRAST) contrast(img, (size_t)H * W, C, f);
        else if (op == AA_BRIGHTNESS) brightness(img, n, f);
        else sharpness(img, H, W, C, f, tmp);
        break;
    }
    // PIL's affine (1, f, 0, 0, 1, 0) about the top-left corner is torchvision's shear by atan(f)
    // about center [0, 0]; PIL's translation by +p pixels samples x + p, torchvision's by -p.
    case AA_SHEAR_X:
    case AA_SHEAR_Y: aa_apply_op(op, negate(r, lv * 0.3), c->fill, img, H, W, C, tmp); break;
    case AA_TRANSLATE_X: aa_affine(img, H, W, C, 0, -negate(r, lv * 0.45) * W, 0, 0, 0, 0, c->fill, tmp); break;
    case AA_TRANSLATE_Y: aa_affine(img, H, W, C, 0, 0, -negate(r, lv * 0.45) * H, 0, 0, 0, c->fill, tmp); break;
    default: aa_apply_op(op, 0, c->fill, img, H, W, C, tmp); break;  // AutoContrast, Equalize, Invert
    }
}

void aa_apply(const AaConfig *c, Rng *r, uint8_t *img, int H, int W, int C, uint8_t *tmp) {
    switch (c->policy) {
    case AA_POLICY_NONE: return;
    case AA_POLICY_TA_WIDE:
    case AA_POLICY_RA_TV: {
        int nops = c->policy == AA_POLICY_TA_WIDE ? 1 : c->num_ops;
        for (int k = 0; k < nops; k++) {
            AaOp op = TV_OPS[rng_below(r, 14)];
            int bin = c->policy == AA_POLICY_TA_WIDE ? (int)rng_below(r, (uint32_t)c->bins) : c->magnitude;
            double mag = tv_scalar(op) ? 0.0 : aa_tv_magnitude(c->policy, op, c->bins, bin, H, W);
            if (tv_signed(op) && rng_below(r, 2)) mag = -mag;
            aa_apply_op(op, mag, NULL, img, H, W, C, tmp);
        }
        return;
    }
    case AA_POLICY_RA_TIMM:
        for (int k = 0; k < c->num_ops; k++) timm_op(c, TIMM_OPS[rng_below(r, 15)], r, img, H, W, C, tmp);
        return;
    }
}

// ---------------------------------------------------------------- parsing

int aa_parse(const char *spec, int ra_magnitude, AaConfig *c, char *err, size_t errlen) {
    memset(c, 0, sizeof *c);
    c->bins = 31;
    c->num_ops = 2;
    c->fill[0] = c->fill[1] = c->fill[2] = 128;  // timm's _FILL; the trainer sets the mean colour
    if (!spec || !*spec || !strcmp(spec, "none")) return 0;
    if (!strcmp(spec, "ta_wide")) {
        c->policy = AA_POLICY_TA_WIDE;
        return 0;
    }
    if (!strcmp(spec, "ra")) {
        c->policy = AA_POLICY_RA_TV;
        c->magnitude = ra_magnitude;
        if (ra_magnitude < 0 || ra_magnitude >= c->bins) {
            snprintf(err, errlen, "--ra-magnitude %d: torchvision's RandAugment takes a bin in 0..%d", ra_magnitude,
                     c->bins - 1);
            return -1;
        }
        return 0;
    }
    if (strncmp(spec, "rand", 4) || (spec[4] && spec[4] != '-')) {
        snprintf(err, errlen, "'%s': expected none, ta_wide, ra (torchvision's) or timm's rand-m9-mstd0.5-inc1 form",
                 spec);
        return -1;
    }
    c->policy = AA_POLICY_RA_TIMM;
    c->magnitude = 10;
    c->op_prob = 0.5;
    const char *s = spec + 4;
    while (*s == '-') {
        s++;
        const char *e = strchr(s, '-');
        size_t len = e ? (size_t)(e - s) : strlen(s);
        char sec[64];
        if (len == 0 || len >= sizeof sec) {
            snprintf(err, errlen, "'%s': empty or overlong section", spec);
            return -1;
        }
        memcpy(sec, s, len);
        sec[len] = 0;
        s += len;
        // timm splits a section at its first digit: key, then value.
        size_t k = 0;
        while (sec[k] && !(sec[k] >= '0' && sec[k] <= '9')) k++;
        if (!sec[k]) continue;  // timm ignores a section without a value
        char key[64];
        memcpy(key, sec, k);
        key[k] = 0;
        const char *val = sec + k;
        char *end;
        double v = strtod(val, &end);
        if (*end) {
            snprintf(err, errlen, "'%s': section '%s' has a malformed number", spec, sec);
            return -1;
        }
        int iv = (int)v;
        int is_int = (double)iv == v;
        if (!strcmp(key, "mstd")) {
            c->mstd = v > 100 ? INFINITY : v;  // timm: mstd > 100 means uniform in [0, M]
        } else if (!strcmp(key, "mmax") && is_int && iv > 0) {
            c->mmax = iv;
        } else if (!strcmp(key, "inc") && is_int) {
            // timm reads the value with bool(str), so "inc0" switches the increasing set on too: refuse it.
            if (iv == 0) {
                snprintf(err, errlen, "'%s': timm reads inc0 as on (bool('0') is True); leave inc out or write inc1", spec);
                return -1;
            }
            c->increasing = 1;
        } else if (!strcmp(key, "m") && is_int && iv >= 0) {
            c->magnitude = iv;
        } else if (!strcmp(key, "n") && is_int && iv >= 1 && iv <= 16) {
            c->num_ops = iv;
        } else if (!strcmp(key, "p") && v >= 0 && v <= 1) {
            c->op_prob = v;
        } else if (!strcmp(key, "w")) {
            snprintf(err, errlen, "'%s': the op weights of section '%s' are not supported", spec, sec);
            return -1;
        } else {
            snprintf(err, errlen, "'%s': unknown or out-of-range section '%s' (m, n, mstd, mmax, inc, p)", spec, sec);
            return -1;
        }
    }
    if (*s) {
        snprintf(err, errlen, "'%s': sections are separated by '-'", spec);
        return -1;
    }
    return 0;
}

void aa_describe(const AaConfig *c, char *buf, size_t len) {
    switch (c->policy) {
    case AA_POLICY_NONE: snprintf(buf, len, "none"); break;
    case AA_POLICY_TA_WIDE: snprintf(buf, len, "torchvision TrivialAugmentWide (%d bins)", c->bins); break;
    case AA_POLICY_RA_TV:
        snprintf(buf, len, "torchvision RandAugment n=%d magnitude bin %d of %d", c->num_ops, c->magnitude, c->bins);
        break;
    case AA_POLICY_RA_TIMM:
        snprintf(buf, len, "timm RandAugment n=%d m=%d mstd=%g%s p=%g%s", c->num_ops, c->magnitude, c->mstd,
                 c->mmax ? " mmax" : "", c->op_prob, c->increasing ? " inc" : "");
        break;
    }
}

// ---------------------------------------------------------------- RandomErasing

int erase_apply(const EraseConfig *e, Rng *r, uint8_t *img, int H, int W, int C, int *top, int *left, int *hh,
                int *ww) {
    if (!(e->p > 0) || !(rng_uniform(r) < e->p)) return 0;
    double s0 = e->scale_min, s1 = e->scale_max, q0 = e->ratio_min, q1 = e->ratio_max;
    if (s0 == 0 && s1 == 0) s0 = 0.02, s1 = 0.33;
    if (q0 == 0 && q1 == 0) q0 = 0.3, q1 = 3.3;
    double area = (double)H * W, l0 = log(q0), l1 = log(q1);
    for (int t = 0; t < 10; t++) {
        double ea = area * (s0 + (s1 - s0) * (double)rng_uniform(r));
        double ar = exp(l0 + (l1 - l0) * (double)rng_uniform(r));
        int h = (int)nearbyint(sqrt(ea * ar)), w = (int)nearbyint(sqrt(ea / ar));  // Python round()
        if (!(h < H && w < W)) continue;
        int i = (int)rng_below(r, (uint32_t)(H - h + 1)), j = (int)rng_below(r, (uint32_t)(W - w + 1));
        uint8_t cval[4];
        for (int c = 0; c < C && c < 4; c++) {
            double v = nearbyint(255.0 * e->mean[c]);
            cval[c] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
        }
        for (int y = i; y < i + h; y++)
            for (int x = j; x < j + w; x++)
                for (int c = 0; c < C; c++) {
                    uint8_t *p = img + ((size_t)y * W + x) * C + c;
                    if (e->random) {
                        double v = nearbyint(255.0 * (e->mean[c] + e->std[c] * (double)rng_normal(r)));
                        *p = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
                    } else {
                        *p = cval[c];
                    }
                }
        if (top) *top = i, *left = j, *hh = h, *ww = w;
        return 1;
    }
    return 0;
}
