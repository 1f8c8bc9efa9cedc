// Separable antialiased bilinear resampling (see resample.h for the filter and region semantics).
// This is the loader's hot loop: for a 224 crop it runs ~1M multiply-adds per image, so both passes are
// written as plain float loops over contiguous memory that the compiler vectorises, and the 3-channel
// horizontal pass works on one 4-float vector per tap (the 4th lane is the next pixel's first channel
// and is discarded).
#include "loader/resample.h"

#include <math.h>
#include <string.h>

#include "util/common.h"

typedef float v4f __attribute__((vector_size(16)));

// Filter coefficients for one axis: output i reads n[i] source samples from start[i] with weights
// w[i * kmax + k]. Computed in double like PIL (torch uses float; the difference is far below one level).
typedef struct {
    int *start, *n;
    float *w;
    int kmax;
} Taps;

static int taps_kmax(double in_len, int out_len) {
    double scale = in_len / out_len;
    double support = scale > 1.0 ? scale : 1.0;
    return (int)ceil(support) * 2 + 1;
}

static void taps_compute(Taps *t, int out_len, int in_size, double x0, double len) {
    double scale = len / out_len;
    double fs = scale > 1.0 ? scale : 1.0;
    double support = fs;  // the triangle filter has support 1, widened by the downscale factor
    double inv = 1.0 / fs;
    for (int i = 0; i < out_len; i++) {
        double center = x0 + (i + 0.5) * scale;
        int lo = (int)(center - support + 0.5);
        if (lo < 0) lo = 0;
        int hi = (int)(center + support + 0.5);
        if (hi > in_size) hi = in_size;
        if (hi <= lo) {  // region pinned to an edge within rounding: take the nearest pixel
            lo = (int)center;
            if (lo > in_size - 1) lo = in_size - 1;
            if (lo < 0) lo = 0;
            hi = lo + 1;
        }
        int n = hi - lo;
        if (n > t->kmax) n = t->kmax;  // cannot happen with kmax from taps_kmax; keeps memory safe
        float *w = t->w + (size_t)i * t->kmax;
        double sum = 0, wd[n];
        for (int k = 0; k < n; k++) {
            double x = (k + lo - center + 0.5) * inv;
            double v = 1.0 - fabs(x);
            wd[k] = v > 0 ? v : 0;
            sum += wd[k];
        }
        if (sum <= 0) {  // all taps at exactly distance 1: fall back to the nearest
            for (int k = 0; k < n; k++) wd[k] = 0;
            wd[0] = 1;
            sum = 1;
        }
        for (int k = 0; k < n; k++) w[k] = (float)(wd[k] / sum);
        for (int k = n; k < t->kmax; k++) w[k] = 0;
        t->start[i] = lo;
        t->n[i] = n;
    }
}

void resample_scratch_free(ResampleScratch *s) {
    if (!s) return;
    free(s->buf);
    s->buf = NULL;
    s->cap = 0;
}

static void *scratch_get(ResampleScratch *s, size_t bytes) {
    if (s->cap < bytes) {
        free(s->buf);
        s->buf = ct_alloc(bytes);
        s->cap = bytes;
    }
    return s->buf;
}

static inline uint8_t to_u8(float v) {
    v += 0.5f;
    if (!(v > 0.0f)) return 0;  // also maps NaN to 0
    if (v >= 255.0f) return 255;
    return (uint8_t)(int)v;
}

// Vertical pass over one output row: acc[x] = sum_k w[k] * src_row(start + k)[x], x < len.
static void vpass(float *restrict acc, const uint8_t *src, size_t stride, int start, int n,
                  const float *w, int len) {
    const uint8_t *restrict r0 = src + (size_t)start * stride;
    float w0 = w[0];
    int k = 1;
    if (n >= 2) {  // two taps per sweep halves the traffic on acc
        const uint8_t *restrict r1 = r0 + stride;
        float w1 = w[1];
        for (int x = 0; x < len; x++) acc[x] = w0 * (float)r0[x] + w1 * (float)r1[x];
        k = 2;
    } else {
        for (int x = 0; x < len; x++) acc[x] = w0 * (float)r0[x];
    }
    for (; k + 1 < n; k += 2) {
        const uint8_t *restrict ra = r0 + (size_t)k * stride;
        const uint8_t *restrict rb = ra + stride;
        float wa = w[k], wb = w[k + 1];
        for (int x = 0; x < len; x++) acc[x] += wa * (float)ra[x] + wb * (float)rb[x];
    }
    if (k < n) {
        const uint8_t *restrict ra = r0 + (size_t)k * stride;
        float wa = w[k];
        for (int x = 0; x < len; x++) acc[x] += wa * (float)ra[x];
    }
}

// Horizontal pass of one row, 3 channels: acc holds pixels from column xlo on, padded by one float.
static void hpass3(uint8_t *restrict out, const float *acc, int xlo, const Taps *t, int dw, int flip) {
    for (int j = 0; j < dw; j++) {
        int i = flip ? dw - 1 - j : j;
        const float *p = acc + (size_t)(t->start[i] - xlo) * 3;
        const float *w = t->w + (size_t)i * t->kmax;
        int n = t->n[i];
        v4f s = {0, 0, 0, 0};
        for (int k = 0; k < n; k++) {
            v4f v;
            memcpy(&v, p + 3 * k, sizeof v);
            s += w[k] * v;
        }
        out[3 * j + 0] = to_u8(s[0]);
        out[3 * j + 1] = to_u8(s[1]);
        out[3 * j + 2] = to_u8(s[2]);
    }
}

static void hpass_generic(uint8_t *restrict out, const float *acc, int xlo, const Taps *t, int dw, int C,
                          int flip) {
    for (int j = 0; j < dw; j++) {
        int i = flip ? dw - 1 - j : j;
        const float *p = acc + (size_t)(t->start[i] - xlo) * C;
        const float *w = t->w + (size_t)i * t->kmax;
        int n = t->n[i];
        for (int c = 0; c < C; c++) {
            float s = 0;
            for (int k = 0; k < n; k++) s += w[k] * p[(size_t)k * C + c];
            out[(size_t)j * C + c] = to_u8(s);
        }
    }
}

void resample_u8(uint8_t *dst, int dw, int dh, const uint8_t *src, int sw, int sh, int C,
                 size_t src_stride, double x0, double y0, double cw, double ch, int flip_x,
                 ResampleScratch *scratch) {
    const double eps = 1e-3;
    if (dw < 1 || dh < 1 || sw < 1 || sh < 1 || C < 1 || !(cw > 0) || !(ch > 0) || !(x0 >= -eps) ||
        !(y0 >= -eps) || !(x0 + cw <= sw + eps) || !(y0 + ch <= sh + eps))
        ct_die("resample_u8: bad region (%g,%g %gx%g) of a %dx%dx%d image into %dx%d", x0, y0, cw, ch, sw, sh,
               C, dw, dh);
    if (src_stride == 0) src_stride = (size_t)sw * C;
    ResampleScratch local = {0};
    if (!scratch) scratch = &local;

    Taps tx, ty;
    tx.kmax = taps_kmax(cw, dw);
    ty.kmax = taps_kmax(ch, dh);
    // One allocation: tap tables for both axes, then the intermediate row (all 64-byte aligned pieces).
    size_t sx_i = ((size_t)dw * sizeof(int) + 63) & ~(size_t)63;
    size_t sy_i = ((size_t)dh * sizeof(int) + 63) & ~(size_t)63;
    size_t sx_w = ((size_t)dw * tx.kmax * sizeof(float) + 63) & ~(size_t)63;
    size_t sy_w = ((size_t)dh * ty.kmax * sizeof(float) + 63) & ~(size_t)63;
    size_t row = ((size_t)(sw + 2) * C * sizeof(float) + 63) & ~(size_t)63;
    char *base = scratch_get(scratch, 2 * sx_i + 2 * sy_i + sx_w + sy_w + row);
    tx.start = (int *)base;
    tx.n = (int *)(base + sx_i);
    ty.start = (int *)(base + 2 * sx_i);
    ty.n = (int *)(base + 2 * sx_i + sy_i);
    tx.w = (float *)(base + 2 * sx_i + 2 * sy_i);
    ty.w = (float *)(base + 2 * sx_i + 2 * sy_i + sx_w);
    float *acc = (float *)(base + 2 * sx_i + 2 * sy_i + sx_w + sy_w);

    taps_compute(&tx, dw, sw, x0, cw);
    taps_compute(&ty, dh, sh, y0, ch);
    // Columns the horizontal taps touch: the vertical pass runs over these only (crop before resize).
    int xlo = tx.start[0], xhi = tx.start[dw - 1] + tx.n[dw - 1];
    int len = (xhi - xlo) * C;
    acc[len] = 0;  // the 4th lane of the last 3-channel vector load
    const uint8_t *srcx = src + (size_t)xlo * C;
    for (int y = 0; y < dh; y++) {
        vpass(acc, srcx, src_stride, ty.start[y], ty.n[y], ty.w + (size_t)y * ty.kmax, len);
        uint8_t *out = dst + (size_t)y * dw * C;
        if (C == 3) hpass3(out, acc, xlo, &tx, dw, flip_x);
        else hpass_generic(out, acc, xlo, &tx, dw, C, flip_x);
    }
    resample_scratch_free(&local);
}

void resize_u8(uint8_t *dst, int dw, int dh, const uint8_t *src, int sw, int sh, int C,
               ResampleScratch *scratch) {
    resample_u8(dst, dw, dh, src, sw, sh, C, 0, 0, 0, sw, sh, 0, scratch);
}

int resample_rows_needed(int dh, int sh, double y0, double ch) {
    double scale = ch / dh;
    double support = scale > 1.0 ? scale : 1.0;
    double center = y0 + (dh - 0.5) * scale;
    int hi = (int)(center + support + 0.5);
    if (hi > sh) hi = sh;
    if (hi < 1) hi = 1;
    return hi;
}
