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
    int *off;  // horizontal only: (start - first column read) * C, the offset into the intermediate row
    float *w;
    int kmax;  // row stride of w (a bound on the tap count)
    int kuse;  // the most taps any output uses: loops run this many, padded with zero weights
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
        // Drop taps of weight exactly zero at either end (an integral scale-1 position has one tap of
        // weight 1): fewer loads, and the sum is unchanged bit for bit (all terms are >= 0).
        int k0 = 0;
        while (n > 1 && wd[k0] == 0) {
            k0++;
            n--;
            lo++;
        }
        while (n > 1 && wd[k0 + n - 1] == 0) n--;
        for (int k = 0; k < n; k++) w[k] = (float)(wd[k0 + k] / sum);
        for (int k = n; k < t->kmax; k++) w[k] = 0;
        t->start[i] = lo;
        t->n[i] = n;
    }
    t->kuse = 1;
    for (int i = 0; i < out_len; i++) t->kuse = t->n[i] > t->kuse ? t->n[i] : t->kuse;
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
        __atomic_store_n(&s->cap, bytes, __ATOMIC_RELAXED);  // the loader reports it from another thread
    }
    return s->buf;
}

static inline uint8_t to_u8(float v) {
    v = nearbyintf(v);  // half to even, like torch.round and the SSE conversion below
    if (!(v > 0.0f)) return 0;  // also maps NaN to 0
    if (v >= 255.0f) return 255;
    return (uint8_t)(int)v;
}

// The vertical kernel is written once (VPASS_KERNEL) and compiled twice, for the x86-64 baseline and
// with AVX2 enabled; the horizontal one has a baseline loop (HPASS3_LOOP) and a hand-written AVX2
// pair loop (HPAIRS_LOOP, run four pixels a step by HQUADS_LOOP). The variant is chosen at run time. All variants do the same float
// operations in the same order (ISO C mode: no fused multiply-add contraction), so their bytes are
// identical on every x86-64 machine.
#define VPASS_KERNEL(SUFFIX, ATTR)                                                                                  \
    /* Vertical pass over one output row: acc[x] = sum_k w[k] * row(start + k)[x], x < len. */               \
    ATTR static void vpass##SUFFIX(float *restrict acc, const uint8_t *src, size_t stride, int start, int n,  \
                                   const float *w, int len) {                                                 \
        const uint8_t *restrict r0 = src + (size_t)start * stride;                                            \
        float w0 = w[0];                                                                                      \
        int k = 1;                                                                                            \
        if (n >= 2) { /* two taps per sweep halves the traffic on acc */                                      \
            const uint8_t *restrict r1 = r0 + stride;                                                         \
            float w1 = w[1];                                                                                  \
            for (int x = 0; x < len; x++) acc[x] = w0 * (float)r0[x] + w1 * (float)r1[x];                     \
            k = 2;                                                                                            \
        } else {                                                                                              \
            for (int x = 0; x < len; x++) acc[x] = w0 * (float)r0[x];                                         \
        }                                                                                                     \
        for (; k + 1 < n; k += 2) {                                                                           \
            const uint8_t *restrict ra = r0 + (size_t)k * stride;                                             \
            const uint8_t *restrict rb = ra + stride;                                                         \
            float wa = w[k], wb = w[k + 1];                                                                   \
            for (int x = 0; x < len; x++) acc[x] += wa * (float)ra[x] + wb * (float)rb[x];                    \
        }                                                                                                     \
        if (k < n) {                                                                                          \
            const uint8_t *restrict ra = r0 + (size_t)k * stride;                                             \
            float wa = w[k];                                                                                  \
            for (int x = 0; x < len; x++) acc[x] += wa * (float)ra[x];                                        \
        }                                                                                                     \
    }

#define HPASS3_KERNEL(SUFFIX, ATTR)                                                                             \
    ATTR static void hpass3##SUFFIX(uint8_t *restrict out, const float *acc, const Taps *t, int dw, int flip) { \
        switch (t->kuse) {                                                                                    \
        case 1: HPASS3_LOOP(1); break;                                                                        \
        case 2: HPASS3_LOOP(2); break;                                                                        \
        case 3: HPASS3_LOOP(3); break;                                                                        \
        case 4: HPASS3_LOOP(4); break;                                                                        \
        case 5: HPASS3_LOOP(5); break;                                                                        \
        case 6: HPASS3_LOOP(6); break;                                                                        \
        default: HPASS3_LOOP(t->kuse); break;                                                                 \
        }                                                                                                     \
    }

#if defined(__SSE2__)
#include <immintrin.h>
// Horizontal pass of one row, 3 channels, taps padded to KM with zero weights (a fixed trip count the
// compiler unrolls). One 4-float vector per tap: the 4th lane is the next pixel's first channel and is
// dropped; acc is padded with zeros past the last column. Rounding and clamping by the SSE
// conversion and saturating packs; the 4-byte store's extra byte is overwritten by the next pixel.
#define HPASS3_LOOP(KM)                                                                                       \
    for (int j = 0; j < dw; j++) {                                                                            \
        int i = flip ? dw - 1 - j : j;                                                                        \
        const float *p = acc + t->off[i];                                                                     \
        const float *w = t->w + (size_t)i * t->kmax;                                                          \
        __m128 s = _mm_setzero_ps();                                                                          \
        for (int k = 0; k < (KM); k++) s = _mm_add_ps(s, _mm_mul_ps(_mm_set1_ps(w[k]), _mm_loadu_ps(p + 3 * k))); \
        __m128i q = _mm_cvtps_epi32(s);                                                                       \
        q = _mm_packs_epi32(q, q);                                                                            \
        q = _mm_packus_epi16(q, q);                                                                           \
        uint32_t v = (uint32_t)_mm_cvtsi128_si32(q);                                                          \
        memcpy(out + 3 * j, &v, j < dw - 1 ? 4 : 3);                                                          \
    }
VPASS_KERNEL(_base, )
HPASS3_KERNEL(_base, )

// The vertical pass by hand for AVX2: VPASS_KERNEL's expressions, 8 columns a step, each byte widened
// by one vpmovzxbd (the compiler's version of the same loop widened through 16 bits with extracts,
// twice the work), the remainder in scalar; the same float operations in the same order per column.
#define CV8(p, x) _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)((p) + (x)))))
__attribute__((target("avx2"))) static void vpass_avx2(float *restrict acc, const uint8_t *src, size_t stride,
                                                       int start, int n, const float *w, int len) {
    const uint8_t *restrict r0 = src + (size_t)start * stride;
    const float w0 = w[0];
    const __m256 W0 = _mm256_set1_ps(w0);
    int k = 1, x;
    if (n >= 2) {
        const uint8_t *restrict r1 = r0 + stride;
        const float w1 = w[1];
        const __m256 W1 = _mm256_set1_ps(w1);
        for (x = 0; x + 8 <= len; x += 8)
            _mm256_storeu_ps(acc + x, _mm256_add_ps(_mm256_mul_ps(W0, CV8(r0, x)), _mm256_mul_ps(W1, CV8(r1, x))));
        for (; x < len; x++) acc[x] = w0 * (float)r0[x] + w1 * (float)r1[x];
        k = 2;
    } else {
        for (x = 0; x + 8 <= len; x += 8) _mm256_storeu_ps(acc + x, _mm256_mul_ps(W0, CV8(r0, x)));
        for (; x < len; x++) acc[x] = w0 * (float)r0[x];
    }
    for (; k + 1 < n; k += 2) {
        const uint8_t *restrict ra = r0 + (size_t)k * stride;
        const uint8_t *restrict rb = ra + stride;
        const float wa = w[k], wb = w[k + 1];
        const __m256 WA = _mm256_set1_ps(wa), WB = _mm256_set1_ps(wb);
        for (x = 0; x + 8 <= len; x += 8)
            _mm256_storeu_ps(acc + x, _mm256_add_ps(_mm256_loadu_ps(acc + x), _mm256_add_ps(_mm256_mul_ps(WA, CV8(ra, x)),
                                                                                         _mm256_mul_ps(WB, CV8(rb, x)))));
        for (; x < len; x++) acc[x] += wa * (float)ra[x] + wb * (float)rb[x];
    }
    if (k < n) {
        const uint8_t *restrict ra = r0 + (size_t)k * stride;
        const float wa = w[k];
        const __m256 WA = _mm256_set1_ps(wa);
        for (x = 0; x + 8 <= len; x += 8)
            _mm256_storeu_ps(acc + x, _mm256_add_ps(_mm256_loadu_ps(acc + x), _mm256_mul_ps(WA, CV8(ra, x))));
        for (; x < len; x++) acc[x] += wa * (float)ra[x];
    }
}
#undef CV8

// AVX2 horizontal pass, two output pixels per 8-float vector (the low half pixel j, the high half
// pixel j+1, each exactly as in HPASS3_LOOP, so the bytes match the baseline). off[j] is in output
// order (flip applied) and wp holds, per pixel pair and tap, the two weights each broadcast 4 times.
#define HPAIRS_LOOP(KM)                                                                                       \
    for (; j + 1 < dw; j += 2) {                                                                              \
        const float *p0 = acc + off[j], *p1 = acc + off[j + 1];                                               \
        const float *w = wp + (size_t)(j / 2) * kstride * 8;                                                  \
        __m256 s = _mm256_setzero_ps();                                                                       \
        for (int k = 0; k < (KM); k++) {                                                                      \
            __m256 v = _mm256_insertf128_ps(_mm256_castps128_ps256(_mm_loadu_ps(p0 + 3 * k)),                 \
                                            _mm_loadu_ps(p1 + 3 * k), 1);                                     \
            s = _mm256_add_ps(s, _mm256_mul_ps(_mm256_load_ps(w + 8 * k), v));                                \
        }                                                                                                     \
        __m256i q = _mm256_cvtps_epi32(s);                                                                    \
        __m128i h = _mm_packs_epi32(_mm256_castsi256_si128(q), _mm256_extracti128_si256(q, 1));               \
        h = _mm_packus_epi16(h, h);                                                                           \
        h = _mm_shuffle_epi8(h, _mm_setr_epi8(0, 1, 2, 4, 5, 6, 3, 7, 8, 9, 10, 11, 12, 13, 14, 15));         \
        uint64_t v8 = (uint64_t)_mm_cvtsi128_si64(h);                                                         \
        memcpy(out + 3 * j, &v8, j + 2 < dw ? 8 : 6);                                                         \
    }
// Four output pixels a step: two pairs as HPAIRS_LOOP computes them (the same sums), converted,
// saturated and packed together (the same integer steps per value), so one pack, one shuffle and a
// 12-byte store serve four pixels instead of two of each.
#define HQUADS_LOOP(KM)                                                                                       \
    for (; j + 3 < dw; j += 4) {                                                                              \
        const float *p0 = acc + off[j], *p1 = acc + off[j + 1], *p2 = acc + off[j + 2], *p3 = acc + off[j + 3]; \
        const float *wa = wp + (size_t)(j / 2) * kstride * 8, *wb = wa + (size_t)kstride * 8;                 \
        __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();                                            \
        for (int k = 0; k < (KM); k++) {                                                                      \
            __m256 v0 = _mm256_insertf128_ps(_mm256_castps128_ps256(_mm_loadu_ps(p0 + 3 * k)),                \
                                             _mm_loadu_ps(p1 + 3 * k), 1);                                    \
            __m256 v1 = _mm256_insertf128_ps(_mm256_castps128_ps256(_mm_loadu_ps(p2 + 3 * k)),                \
                                             _mm_loadu_ps(p3 + 3 * k), 1);                                    \
            s0 = _mm256_add_ps(s0, _mm256_mul_ps(_mm256_load_ps(wa + 8 * k), v0));                            \
            s1 = _mm256_add_ps(s1, _mm256_mul_ps(_mm256_load_ps(wb + 8 * k), v1));                            \
        }                                                                                                     \
        /* per 128-bit half: [pixel j | j + 2] and [j + 1 | j + 3] as 16 bits, then as bytes */               \
        __m256i q = _mm256_packs_epi32(_mm256_cvtps_epi32(s0), _mm256_cvtps_epi32(s1));                       \
        q = _mm256_packus_epi16(q, q);                                                                        \
        __m128i h = _mm_unpacklo_epi32(_mm256_castsi256_si128(q), _mm256_extracti128_si256(q, 1));            \
        h = _mm_shuffle_epi8(h, _mm_setr_epi8(0, 1, 2, 4, 5, 6, 8, 9, 10, 12, 13, 14, 3, 7, 11, 15));         \
        _mm_storel_epi64((__m128i *)(out + 3 * j), h);                                                        \
        uint32_t t4 = (uint32_t)_mm_cvtsi128_si32(_mm_srli_si128(h, 8));                                      \
        memcpy(out + 3 * j + 8, &t4, 4);                                                                      \
    }
__attribute__((target("avx2"))) static void hpass3_pairs_avx2(uint8_t *restrict out, const float *acc,
                                                               const int *off, const float *wp, int kstride,
                                                               int kuse, int dw) {
    int j = 0;
    switch (kuse) {
    case 1: HQUADS_LOOP(1); HPAIRS_LOOP(1); break;
    case 2: HQUADS_LOOP(2); HPAIRS_LOOP(2); break;
    case 3: HQUADS_LOOP(3); HPAIRS_LOOP(3); break;
    case 4: HQUADS_LOOP(4); HPAIRS_LOOP(4); break;
    case 5: HQUADS_LOOP(5); HPAIRS_LOOP(5); break;
    case 6: HQUADS_LOOP(6); HPAIRS_LOOP(6); break;
    default: HQUADS_LOOP(kuse); HPAIRS_LOOP(kuse); break;
    }
    if (j < dw) {  // odd width: the last pixel alone, same arithmetic in the low half
        const float *p = acc + off[j];
        const float *w = wp + (size_t)(j / 2) * kstride * 8;
        __m128 s = _mm_setzero_ps();
        for (int k = 0; k < kuse; k++) s = _mm_add_ps(s, _mm_mul_ps(_mm_load_ps(w + 8 * k), _mm_loadu_ps(p + 3 * k)));
        __m128i q = _mm_cvtps_epi32(s);
        q = _mm_packs_epi32(q, q);
        q = _mm_packus_epi16(q, q);
        uint32_t v = (uint32_t)_mm_cvtsi128_si32(q);
        memcpy(out + 3 * j, &v, 3);
    }
}
#define HAVE_PAIRS 1
static int simd_allowed = 1;
static int use_avx2(void) {
    static int v = -1;
    if (v < 0) {
        __builtin_cpu_init();
        v = __builtin_cpu_supports("avx2") ? 1 : 0;
    }
    return v && __atomic_load_n(&simd_allowed, __ATOMIC_RELAXED);
}
int resample_set_simd(int on) { return __atomic_exchange_n(&simd_allowed, on, __ATOMIC_RELAXED); }
#else
#define HPASS3_LOOP(KM)                                                                                       \
    for (int j = 0; j < dw; j++) {                                                                            \
        int i = flip ? dw - 1 - j : j;                                                                        \
        const float *p = acc + t->off[i];                                                                     \
        const float *w = t->w + (size_t)i * t->kmax;                                                          \
        float s0 = 0, s1 = 0, s2 = 0;                                                                         \
        for (int k = 0; k < (KM); k++) {                                                                      \
            s0 += w[k] * p[3 * k];                                                                            \
            s1 += w[k] * p[3 * k + 1];                                                                        \
            s2 += w[k] * p[3 * k + 2];                                                                        \
        }                                                                                                     \
        out[3 * j] = to_u8(s0);                                                                               \
        out[3 * j + 1] = to_u8(s1);                                                                           \
        out[3 * j + 2] = to_u8(s2);                                                                           \
    }
VPASS_KERNEL(_base, )
HPASS3_KERNEL(_base, )
static int use_avx2(void) { return 0; }
int resample_set_simd(int on) { return 0; }
#define vpass_avx2 vpass_base
#endif

static void hpass_generic(uint8_t *restrict out, const float *acc, const Taps *t, int dw, int C, int flip) {
    for (int j = 0; j < dw; j++) {
        int i = flip ? dw - 1 - j : j;
        const float *p = acc + t->off[i];
        const float *w = t->w + (size_t)i * t->kmax;
        for (int c = 0; c < C; c++) {
            float s = 0;
            for (int k = 0; k < t->kuse; k++) s += w[k] * p[(size_t)k * C + c];
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
    // The row is padded with zeros for the zero-weight taps past the last column.
#define AL(x) (((size_t)(x) + 63) & ~(size_t)63)
    size_t sx_i = AL((size_t)dw * sizeof(int)), sy_i = AL((size_t)dh * sizeof(int));
    size_t sx_w = AL((size_t)dw * tx.kmax * sizeof(float)), sy_w = AL((size_t)dh * ty.kmax * sizeof(float));
    size_t row = AL(((size_t)sw * C + (size_t)tx.kmax * C + 8) * sizeof(float));
    size_t pairs = AL((size_t)(dw + 1) / 2 * tx.kmax * 8 * sizeof(float)) + sx_i;  // AVX2 pass: weights, offsets
    char *base = scratch_get(scratch, 3 * sx_i + 2 * sy_i + sx_w + sy_w + row + pairs);
    tx.start = (int *)base;
    tx.n = (int *)(base + sx_i);
    tx.off = (int *)(base + 2 * sx_i);
    base += 3 * sx_i;
    ty.start = (int *)base;
    ty.n = (int *)(base + sy_i);
    ty.off = NULL;
    base += 2 * sy_i;
    tx.w = (float *)base;
    ty.w = (float *)(base + sx_w);
    float *acc = (float *)(base + sx_w + sy_w);
    float *wpair = (float *)(base + sx_w + sy_w + row);
    int *offo = (int *)(base + sx_w + sy_w + row + pairs - sx_i);
#undef AL

    taps_compute(&tx, dw, sw, x0, cw);
    taps_compute(&ty, dh, sh, y0, ch);
    // Columns the horizontal taps touch: the vertical pass runs over these only (crop before resize).
    int xlo = tx.start[0], xhi = 0;
    for (int i = 0; i < dw; i++) {
        xlo = tx.start[i] < xlo ? tx.start[i] : xlo;
        xhi = tx.start[i] + tx.n[i] > xhi ? tx.start[i] + tx.n[i] : xhi;
    }
    for (int i = 0; i < dw; i++) tx.off[i] = (tx.start[i] - xlo) * C;
    int len = (xhi - xlo) * C;
    memset(acc + len, 0, ((size_t)tx.kmax * C + 8) * sizeof(float));
    const uint8_t *srcx = src + (size_t)xlo * C;
    int avx2 = use_avx2();
#ifdef HAVE_PAIRS
    if (avx2 && C == 3) {  // pair layout in output order (flip applied)
        for (int j = 0; j < dw; j++) {
            int i = flip_x ? dw - 1 - j : j;
            offo[j] = tx.off[i];
            float *wp = wpair + (size_t)(j / 2) * tx.kmax * 8 + (j % 2) * 4;
            for (int k = 0; k < tx.kmax; k++)
                for (int l = 0; l < 4; l++) wp[8 * k + l] = tx.w[(size_t)i * tx.kmax + k];
        }
    }
#endif
    for (int y = 0; y < dh; y++) {
        const float *wy = ty.w + (size_t)y * ty.kmax;
        if (avx2) vpass_avx2(acc, srcx, src_stride, ty.start[y], ty.n[y], wy, len);
        else vpass_base(acc, srcx, src_stride, ty.start[y], ty.n[y], wy, len);
        uint8_t *out = dst + (size_t)y * dw * C;
        if (C != 3) hpass_generic(out, acc, &tx, dw, C, flip_x);
#ifdef HAVE_PAIRS
        else if (avx2) hpass3_pairs_avx2(out, acc, offo, wpair, tx.kmax, tx.kuse, dw);
#endif
        else hpass3_base(out, acc, &tx, dw, flip_x);
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
