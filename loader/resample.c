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

// One output of taps_compute: its taps from the filter's center on the input axis.
static inline void taps_one(Taps *t, int i, int in_size, double center, double support, double inv) {
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

static void taps_compute(Taps *t, int out_len, int in_size, double x0, double len) {
    double scale = len / out_len;
    double fs = scale > 1.0 ? scale : 1.0;
    double support = fs;  // the triangle filter has support 1, widened by the downscale factor
    double inv = 1.0 / fs;
    for (int i = 0; i < out_len; i++) taps_one(t, i, in_size, x0 + (i + 0.5) * scale, support, inv);
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
// Planar path (AVX-512VL on 256-bit vectors, chosen at run time; the CPU this loader is measured on has
// it). The horizontal pass above spends a load, an insert and a quarter of its lanes per pixel and tap,
// and its per-four-pixel packing outweighs the 2-3 taps of most training crops. Here the vertical pass
// writes one float row per channel, and the horizontal pass computes eight output pixels of one channel
// per vector: for each tap, the eight source positions start[j] + k lie in a 16-float window (whenever
// the starts of eight consecutive outputs are at most 15 apart, i.e. up to ~2x downscale; other images
// keep the pair path), so two loads and one vpermt2ps give the eight operands. Every output value is
// still 0 + w0 p0 + w1 p1 + ... in tap order with the same weights and operands, and the same
// conversion and saturating packs, so the bytes equal the other paths'.

// The crop's source rows split into one byte plane per channel, once per image (each row feeds
// several output rows; splitting the floats after every vertical pass cost more than the horizontal
// pass saved): 16 pixels a step, three byte shuffles per plane. The vertical pass then runs unchanged
// (vpass_avx2) over each plane.
// Row y of the result: cols8 bytes of red (cols rounded up to 8, the rest zeros), then green, then blue.
__attribute__((target("avx2"))) static void split_planes_avx2(uint8_t *restrict dst, const uint8_t *src,
                                                              size_t stride, int rows, int cols, int cols8) {
#define M(...) _mm_setr_epi8(__VA_ARGS__)
    const __m128i r0 = M(0, 3, 6, 9, 12, 15, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1),
                  r1 = M(-1, -1, -1, -1, -1, -1, 2, 5, 8, 11, 14, -1, -1, -1, -1, -1),
                  r2 = M(-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, 1, 4, 7, 10, 13),
                  g0 = M(1, 4, 7, 10, 13, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1),
                  g1 = M(-1, -1, -1, -1, -1, 0, 3, 6, 9, 12, 15, -1, -1, -1, -1, -1),
                  g2 = M(-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, 2, 5, 8, 11, 14),
                  b0 = M(2, 5, 8, 11, 14, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1),
                  b1 = M(-1, -1, -1, -1, -1, 1, 4, 7, 10, 13, -1, -1, -1, -1, -1, -1),
                  b2 = M(-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, 0, 3, 6, 9, 12, 15);
#undef M
    for (int y = 0; y < rows; y++) {
        const uint8_t *s = src + (size_t)y * stride;
        uint8_t *dr = dst + (size_t)y * 3 * cols8, *dg = dr + cols8, *db = dg + cols8;
        int x = 0;
        // 32 pixels a step: the same byte shuffles on [pixels 0-15 | pixels 16-31] in the two lanes.
        const __m256i R0 = _mm256_broadcastsi128_si256(r0), R1 = _mm256_broadcastsi128_si256(r1),
                      R2 = _mm256_broadcastsi128_si256(r2), G0 = _mm256_broadcastsi128_si256(g0),
                      G1 = _mm256_broadcastsi128_si256(g1), G2 = _mm256_broadcastsi128_si256(g2),
                      B0 = _mm256_broadcastsi128_si256(b0), B1 = _mm256_broadcastsi128_si256(b1),
                      B2 = _mm256_broadcastsi128_si256(b2);
#define LD2(o) _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(s + 3 * x + (o)))), \
                                       _mm_loadu_si128((const __m128i *)(s + 3 * x + 48 + (o))), 1)
        for (; x + 32 <= cols; x += 32) {
            const __m256i a = LD2(0), b = LD2(16), c = LD2(32);
            _mm256_storeu_si256((__m256i *)(dr + x),
                                _mm256_or_si256(_mm256_or_si256(_mm256_shuffle_epi8(a, R0), _mm256_shuffle_epi8(b, R1)),
                                                _mm256_shuffle_epi8(c, R2)));
            _mm256_storeu_si256((__m256i *)(dg + x),
                                _mm256_or_si256(_mm256_or_si256(_mm256_shuffle_epi8(a, G0), _mm256_shuffle_epi8(b, G1)),
                                                _mm256_shuffle_epi8(c, G2)));
            _mm256_storeu_si256((__m256i *)(db + x),
                                _mm256_or_si256(_mm256_or_si256(_mm256_shuffle_epi8(a, B0), _mm256_shuffle_epi8(b, B1)),
                                                _mm256_shuffle_epi8(c, B2)));
        }
#undef LD2
        for (; x + 16 <= cols; x += 16) {
            const __m128i a = _mm_loadu_si128((const __m128i *)(s + 3 * x)),
                          b = _mm_loadu_si128((const __m128i *)(s + 3 * x + 16)),
                          c = _mm_loadu_si128((const __m128i *)(s + 3 * x + 32));
            _mm_storeu_si128((__m128i *)(dr + x), _mm_or_si128(_mm_or_si128(_mm_shuffle_epi8(a, r0), _mm_shuffle_epi8(b, r1)),
                                                               _mm_shuffle_epi8(c, r2)));
            _mm_storeu_si128((__m128i *)(dg + x), _mm_or_si128(_mm_or_si128(_mm_shuffle_epi8(a, g0), _mm_shuffle_epi8(b, g1)),
                                                               _mm_shuffle_epi8(c, g2)));
            _mm_storeu_si128((__m128i *)(db + x), _mm_or_si128(_mm_or_si128(_mm_shuffle_epi8(a, b0), _mm_shuffle_epi8(b, b1)),
                                                               _mm_shuffle_epi8(c, b2)));
        }
        for (; x < cols; x++) {
            dr[x] = s[3 * x];
            dg[x] = s[3 * x + 1];
            db[x] = s[3 * x + 2];
        }
        for (; x < cols8; x++) dr[x] = dg[x] = db[x] = 0;
    }
}

// Horizontal pass from planar rows, eight output pixels a step. Per group g: gb[g] the smallest start of
// its pixels (output order, flip applied), gi the eight starts minus gb[g] (0..15; lanes past dw read
// position 0 with weight 0), gw the eight weights per tap. Rows are zero-padded past their end, so
// padded taps multiply zeros.
#define HPLANAR_LOOP(KM)                                                                                      \
    for (int g = 0; g < ng; g++) {                                                                            \
        const __m256i ix = _mm256_load_si256((const __m256i *)(gi + 8 * g));                                  \
        const float *w = gw + (size_t)g * kstride * 8;                                                        \
        const float *ar = pr + gb[g], *ag = pg + gb[g], *ab = pb + gb[g];                                     \
        __m256 sr = _mm256_setzero_ps(), sg = _mm256_setzero_ps(), sb = _mm256_setzero_ps();                  \
        if (WIN1) { /* every lane's last tap inside the first 16-float window: load it once */               \
            const __m256 rl = _mm256_loadu_ps(ar), rh = _mm256_loadu_ps(ar + 8), gl = _mm256_loadu_ps(ag),     \
                         gh = _mm256_loadu_ps(ag + 8), bl = _mm256_loadu_ps(ab), bh = _mm256_loadu_ps(ab + 8); \
            __m256i ik = ix;                                                                                  \
            for (int k = 0; k < (KM); k++) {                                                                  \
                const __m256 W = _mm256_load_ps(w + 8 * k);                                                   \
                sr = _mm256_add_ps(sr, _mm256_mul_ps(W, _mm256_permutex2var_ps(rl, ik, rh)));                \
                sg = _mm256_add_ps(sg, _mm256_mul_ps(W, _mm256_permutex2var_ps(gl, ik, gh)));                \
                sb = _mm256_add_ps(sb, _mm256_mul_ps(W, _mm256_permutex2var_ps(bl, ik, bh)));                \
                ik = _mm256_add_epi32(ik, one);                                                               \
            }                                                                                                 \
        } else {                                                                                              \
            for (int k = 0; k < (KM); k++) {                                                                  \
                const __m256 W = _mm256_load_ps(w + 8 * k);                                                   \
                sr = _mm256_add_ps(sr, _mm256_mul_ps(W, _mm256_permutex2var_ps(_mm256_loadu_ps(ar + k), ix,     \
                                                                                  _mm256_loadu_ps(ar + k + 8)))); \
                sg = _mm256_add_ps(sg, _mm256_mul_ps(W, _mm256_permutex2var_ps(_mm256_loadu_ps(ag + k), ix,     \
                                                                                  _mm256_loadu_ps(ag + k + 8)))); \
                sb = _mm256_add_ps(sb, _mm256_mul_ps(W, _mm256_permutex2var_ps(_mm256_loadu_ps(ab + k), ix,     \
                                                                                  _mm256_loadu_ps(ab + k + 8)))); \
            }                                                                                                 \
        }                                                                                                     \
        /* per 128-bit half: r g (16 bits) and b b, then bytes r0-3 g0-3 b0-3 b0-3 | r4-7 g4-7 b4-7 b4-7 */   \
        __m256i q = _mm256_packus_epi16(_mm256_packs_epi32(_mm256_cvtps_epi32(sr), _mm256_cvtps_epi32(sg)),   \
                                        _mm256_packs_epi32(_mm256_cvtps_epi32(sb), _mm256_cvtps_epi32(sb)));  \
        q = _mm256_shuffle_epi8(q, shuf);                                                                     \
        q = _mm256_permutevar8x32_epi32(q, comp);                                                             \
        uint8_t *o = out + 24 * (size_t)g;                                                                    \
        if (g + 1 < ng || full) {                                                                             \
            _mm_storeu_si128((__m128i *)o, _mm256_castsi256_si128(q));                                        \
            _mm_storel_epi64((__m128i *)(o + 16), _mm256_extracti128_si256(q, 1));                            \
        } else {                                                                                              \
            uint8_t tmp[32];                                                                                  \
            _mm256_storeu_si256((__m256i *)tmp, q);                                                           \
            memcpy(o, tmp, (size_t)3 * (dw - 8 * g));                                                         \
        }                                                                                                     \
    }
__attribute__((target("avx2,avx512f,avx512vl"))) static void hpass_planar_avx512(uint8_t *restrict out, const float *pr,
                                                                                const float *pg, const float *pb,
                                                                                const int *gb, const int *gi,
                                                                                const float *gw, int kstride,
                                                                                int kuse, int dw, int win1) {
    const int ng = (dw + 7) / 8, full = dw % 8 == 0;
    const __m256i one = _mm256_set1_epi32(1);
    const __m256i shuf = _mm256_setr_epi8(0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11, 12, 13, 14, 15, 0, 4, 8, 1, 5, 9, 2,
                                          6, 10, 3, 7, 11, 12, 13, 14, 15);
    const __m256i comp = _mm256_setr_epi32(0, 1, 2, 4, 5, 6, 3, 7);
    if (win1) {
#define WIN1 1
        switch (kuse) {
        case 1: HPLANAR_LOOP(1); break;
        case 2: HPLANAR_LOOP(2); break;
        case 3: HPLANAR_LOOP(3); break;
        case 4: HPLANAR_LOOP(4); break;
        default: HPLANAR_LOOP(kuse); break;
        }
#undef WIN1
    } else {
#define WIN1 0
        switch (kuse) {
        case 2: HPLANAR_LOOP(2); break;
        case 3: HPLANAR_LOOP(3); break;
        case 4: HPLANAR_LOOP(4); break;
        case 5: HPLANAR_LOOP(5); break;
        case 6: HPLANAR_LOOP(6); break;
        default: HPLANAR_LOOP(kuse); break;
        }
#undef WIN1
    }
}
#undef HPLANAR_LOOP
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
static int use_avx512(void) {
    static int v = -1;
    if (v < 0) {
        __builtin_cpu_init();
        v = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl");
    }
    return v && __atomic_load_n(&simd_allowed, __ATOMIC_RELAXED) == 1;
}
// taps_compute's arithmetic without its per-output branches and memset calls, for kmax <= 8 (every
// crop up to ~3.5x downscale): the same double operations per tap, eight taps in two vectors (lanes
// past n masked to zero), the sum in the same order (the extra +0 terms leave a sum of non-negative
// values unchanged), the same trimming of zero weights (the first and last nonzero lanes) and the same
// divisions (IEEE division is correctly rounded in any lane). Outputs whose weights are all zero take
// taps_compute's fallback through the scalar code.
__attribute__((target("avx2"))) static void taps_avx2(Taps *t, int out_len, int in_size, double x0, double len) {
    double scale = len / out_len;
    double fs = scale > 1.0 ? scale : 1.0;
    double support = fs;
    double inv = 1.0 / fs;
    const __m256d vinv = _mm256_set1_pd(inv), half = _mm256_set1_pd(0.5), one = _mm256_set1_pd(1.0),
                  zero = _mm256_setzero_pd(), sign = _mm256_set1_pd(-0.0);
    const __m128i iota0 = _mm_setr_epi32(0, 1, 2, 3), iota1 = _mm_setr_epi32(4, 5, 6, 7);
    const int km = t->kmax;
    t->kuse = 1;
    for (int i = 0; i < out_len; i++) {
        double center = x0 + (i + 0.5) * scale;
        int lo = (int)(center - support + 0.5);
        if (lo < 0) lo = 0;
        int hi = (int)(center + support + 0.5);
        if (hi > in_size) hi = in_size;
        if (hi <= lo) {
            lo = (int)center;
            if (lo > in_size - 1) lo = in_size - 1;
            if (lo < 0) lo = 0;
            hi = lo + 1;
        }
        int n = hi - lo;
        if (n > km) n = km;
        const __m256d c = _mm256_set1_pd(center);
        const __m128i vlo = _mm_set1_epi32(lo), vn = _mm_set1_epi32(n);
        __m256d a = _mm256_mul_pd(_mm256_add_pd(_mm256_sub_pd(_mm256_cvtepi32_pd(_mm_add_epi32(iota0, vlo)), c), half), vinv);
        __m256d b = _mm256_mul_pd(_mm256_add_pd(_mm256_sub_pd(_mm256_cvtepi32_pd(_mm_add_epi32(iota1, vlo)), c), half), vinv);
        a = _mm256_max_pd(_mm256_sub_pd(one, _mm256_andnot_pd(sign, a)), zero);  // v > 0 ? v : 0
        b = _mm256_max_pd(_mm256_sub_pd(one, _mm256_andnot_pd(sign, b)), zero);
        a = _mm256_and_pd(a, _mm256_castsi256_pd(_mm256_cvtepi32_epi64(_mm_cmpgt_epi32(vn, iota0))));
        b = _mm256_and_pd(b, _mm256_castsi256_pd(_mm256_cvtepi32_epi64(_mm_cmpgt_epi32(vn, iota1))));
        double wd[16];
        _mm256_storeu_pd(wd, a);
        _mm256_storeu_pd(wd + 4, b);
        double sum = 0;
        for (int k = 0; k < 8; k++) sum += wd[k];
        const unsigned nz = (unsigned)_mm256_movemask_pd(_mm256_cmp_pd(a, zero, _CMP_NEQ_OQ)) |
                            (unsigned)_mm256_movemask_pd(_mm256_cmp_pd(b, zero, _CMP_NEQ_OQ)) << 4;
        // The last outputs through the scalar code too: the others store eight floats (their row, then
        // the start of the rows after it, which are written later), and the store must end inside
        // the table (km >= 3, so the vector rows are all but the last two at most).
        if (!(sum > 0) || !nz || (size_t)i * km + 8 > (size_t)out_len * km) {  // also the all-zero fallback
            taps_one(t, i, in_size, center, support, inv);
            t->kuse = t->n[i] > t->kuse ? t->n[i] : t->kuse;
            continue;
        }
        const int k0 = __builtin_ctz(nz), k1 = 31 - __builtin_clz(nz);
        const __m256d s = _mm256_set1_pd(sum);
        float wf[24];
        _mm_storeu_ps(wf, _mm256_cvtpd_ps(_mm256_div_pd(a, s)));
        _mm_storeu_ps(wf + 4, _mm256_cvtpd_ps(_mm256_div_pd(b, s)));
        _mm256_storeu_ps(wf + 8, _mm256_setzero_ps());
        _mm256_storeu_ps(wf + 16, _mm256_setzero_ps());
        float *w = t->w + (size_t)i * km;
        _mm256_storeu_ps(w, _mm256_loadu_ps(wf + k0));  // the nonzero run, then zeros (km <= 8)
        t->start[i] = lo + k0;
        t->n[i] = k1 - k0 + 1;
        t->kuse = t->n[i] > t->kuse ? t->n[i] : t->kuse;
    }
}
static unsigned long planar_images;
unsigned long resample_planar_images(void) { return __atomic_load_n(&planar_images, __ATOMIC_RELAXED); }
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
unsigned long resample_planar_images(void) { return 0; }
#define vpass_avx2 vpass_base
#define taps_avx2 taps_compute
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
    // Planar path: three channel rows (zero-padded for the 16-float windows of the last taps), then per
    // group of eight outputs its base, eight relative starts and eight weights per tap.
    const int ng = (dw + 7) / 8;
    const size_t sw8 = ((size_t)sw + 7) & ~(size_t)7;
    size_t prow = AL((3 * sw8 + tx.kmax + 24) * sizeof(float));  // the float row: R | G | B, then zeros
    const size_t pplane = AL(3 * sw8 * sh);                        // the source's rows split the same way
    size_t planar = prow + AL((size_t)ng * sizeof(int)) + AL((size_t)ng * 8 * sizeof(int)) +
                    AL((size_t)ng * tx.kmax * 8 * sizeof(float)) + pplane;
    char *base = scratch_get(scratch, 3 * sx_i + 2 * sy_i + sx_w + sy_w + row + pairs + planar);
    char *pbase = base + 3 * sx_i + 2 * sy_i + sx_w + sy_w + row + pairs;
    float *prow3 = (float *)pbase;
    int *gb = (int *)(pbase + prow);
    int *gi = (int *)(pbase + prow + AL((size_t)ng * sizeof(int)));
    float *gw = (float *)(pbase + prow + AL((size_t)ng * sizeof(int)) + AL((size_t)ng * 8 * sizeof(int)));
    uint8_t *bpl = (uint8_t *)pbase + planar - pplane;
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

    int avx2 = use_avx2();
    if (avx2 && tx.kmax <= 8) taps_avx2(&tx, dw, sw, x0, cw);
    else taps_compute(&tx, dw, sw, x0, cw);
    if (avx2 && ty.kmax <= 8) taps_avx2(&ty, dh, sh, y0, ch);
    else taps_compute(&ty, dh, sh, y0, ch);
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
    int planar_ok = 0;
#ifdef HAVE_PAIRS
    if (avx2 && C == 3 && use_avx512()) {  // groups of eight outputs in output order (flip applied)
        planar_ok = 1;
        int maxrel = 0;  // the largest start minus its group's base
        for (int g = 0; g < ng && planar_ok; g++) {
            int lo = 1 << 30, hi = -1;
            for (int l = 0; l < 8 && 8 * g + l < dw; l++) {
                int j = 8 * g + l, i = flip_x ? dw - 1 - j : j, st = tx.start[i] - xlo;
                lo = st < lo ? st : lo;
                hi = st > hi ? st : hi;
            }
            if (hi - lo > 15) planar_ok = 0;
            maxrel = hi - lo > maxrel ? hi - lo : maxrel;
            gb[g] = lo;
            for (int l = 0; l < 8; l++) {
                int j = 8 * g + l, i = flip_x ? dw - 1 - j : j;
                float *wg = gw + ((size_t)g * tx.kmax) * 8 + l;
                if (j < dw) {
                    gi[8 * g + l] = tx.start[i] - xlo - lo;
                    for (int k = 0; k < tx.kmax; k++) wg[8 * k] = tx.w[(size_t)i * tx.kmax + k];
                } else {
                    gi[8 * g + l] = 0;
                    for (int k = 0; k < tx.kmax; k++) wg[8 * k] = 0;
                }
            }
        }
        if (planar_ok) {
            // Windows past a plane's last column read the next plane (or the zeros after the last)
            // with zero weights: any finite value gives the same sums.
            int cols = xhi - xlo, cols8 = (cols + 7) & ~7;
            memset(prow3 + 3 * cols8, 0, ((size_t)tx.kmax + 24) * sizeof(float));
            int rlo = ty.start[0], rhi = 0;
            for (int y = 0; y < dh; y++) {
                rlo = ty.start[y] < rlo ? ty.start[y] : rlo;
                rhi = ty.start[y] + ty.n[y] > rhi ? ty.start[y] + ty.n[y] : rhi;
            }
            split_planes_avx2(bpl, srcx + (size_t)rlo * src_stride, src_stride, rhi - rlo, cols, cols8);
            for (int y = 0; y < dh; y++) {
                vpass_avx2(prow3, bpl, (size_t)3 * cols8, ty.start[y] - rlo, ty.n[y], ty.w + (size_t)y * ty.kmax,
                           3 * cols8);
                hpass_planar_avx512(dst + (size_t)y * dw * C, prow3, prow3 + cols8, prow3 + 2 * cols8, gb, gi, gw,
                                    tx.kmax, tx.kuse, dw, maxrel + tx.kuse <= 16);
            }
            __atomic_fetch_add(&planar_images, 1, __ATOMIC_RELAXED);
            resample_scratch_free(&local);
            return;
        }
    }
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
