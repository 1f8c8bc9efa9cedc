// Mixup and CutMix on uint8 batches (loader/mix.h).
#include "loader/mix.h"

#include <math.h>
#include <string.h>
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#endif

#include "util/common.h"
#include "util/rng.h"

#define MIX_KEY 0x4D49585550ull  // "MIXUP": keeps these draws apart from the crop and flip draws

void mix_config_check(const MixConfig *c) {
    if (!(c->mixup_alpha >= 0)) ct_die("--mixup: alpha must be >= 0 (got %g)", c->mixup_alpha);
    if (!(c->cutmix_alpha >= 0)) ct_die("--cutmix: alpha must be >= 0 (got %g)", c->cutmix_alpha);
    if (!(c->prob >= 0 && c->prob <= 1)) ct_die("--mix-prob: must be in [0, 1] (got %g)", c->prob);
    if (!(c->switch_prob >= 0 && c->switch_prob <= 1))
        ct_die("--mix-switch-prob: must be in [0, 1] (got %g)", c->switch_prob);
}

// Uniform in (0, 1): 53 random bits, never 0.
static double open_uniform(Rng *r) { return ((rng_u64(r) >> 11) + 0.5) * (1.0 / 9007199254740992.0); }

// Gamma(a, 1), Marsaglia and Tsang (2000); a < 1 through Gamma(a + 1) * U^(1/a).
static double gamma_draw(Rng *r, double a) {
    if (a < 1) return gamma_draw(r, a + 1) * pow(open_uniform(r), 1.0 / a);
    const double d = a - 1.0 / 3.0, c = 1.0 / sqrt(9.0 * d);
    for (;;) {
        double x = rng_normal(r), v = 1 + c * x;
        if (v <= 0) continue;
        v = v * v * v;
        const double u = open_uniform(r);
        if (log(u) < 0.5 * x * x + d - d * v + d * log(v)) return d * v;
    }
}

double mix_beta(Rng *r, double a, double b) {
    const double x = gamma_draw(r, a), y = gamma_draw(r, b);
    // Both underflow only for tiny alphas, where Beta puts its mass at the ends anyway.
    if (x + y == 0) return rng_uniform(r) < 0.5 ? 0.0 : 1.0;
    return x / (x + y);
}

// numpy's randint(lo, hi): uniform in [lo, hi).
static int randint(Rng *r, int lo, int hi) { return lo + (int)rng_below(r, (uint32_t)(hi - lo)); }
static int clampi(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }

void mix_draw(const MixConfig *c, int64_t epoch, uint64_t batch_key, int H, int W, MixDraw *d) {
    memset(d, 0, sizeof *d);
    d->mode = MIX_NONE;
    d->lam = 1.0f;
    d->weight = 65536;
    if (!mix_enabled(c)) return;
    Rng r = rng_make(c->seed ^ MIX_KEY, (uint64_t)epoch, batch_key);
    if (!(rng_uniform(&r) < c->prob)) return;
    int cut = c->cutmix_alpha > 0 && (c->mixup_alpha <= 0 || rng_uniform(&r) < c->switch_prob);
    double alpha = cut ? c->cutmix_alpha : c->mixup_alpha;
    double lam = mix_beta(&r, alpha, alpha);
    if (!cut) {
        d->mode = MIX_MIXUP;
        d->weight = (uint32_t)lround(lam * 65536.0);
        d->lam = (float)(d->weight / 65536.0);
        return;
    }
    // timm's rand_bbox: a box of side ratio sqrt(1 - lam) centred uniformly, clipped to the image;
    // lam then becomes the share of the image the box leaves to sample i (correct_lam).
    d->mode = MIX_CUTMIX;
    const double ratio = sqrt(1 - lam);
    const int ch = (int)(H * ratio), cw = (int)(W * ratio);
    const int cy = randint(&r, 0, H), cx = randint(&r, 0, W);
    d->y0 = clampi(cy - ch / 2, 0, H);
    d->y1 = clampi(cy + ch / 2, 0, H);
    d->x0 = clampi(cx - cw / 2, 0, W);
    d->x1 = clampi(cx + cw / 2, 0, W);
    d->lam = (float)(1.0 - (double)(d->y1 - d->y0) * (d->x1 - d->x0) / ((double)H * W));
}

// Mixup of one pair in 16.16 fixed point, (wa x + wb y + 2^15) >> 16 with wa + wb = 2^16. The
// baseline loop is the definition; it was 13% of the v2-tools loader's CPU time before AVX2.
#define MIXUP_PAIR_BODY                                                        \
    for (size_t k = 0; k < n; k++) {                                           \
        const uint32_t x = a[k], y = b[k];                                     \
        a[k] = (uint8_t)((wa * x + wb * y + 32768) >> 16);                     \
        b[k] = (uint8_t)((wa * y + wb * x + 32768) >> 16);                     \
    }
static void mixup_pair(uint8_t *restrict a, uint8_t *restrict b, size_t n, uint32_t wa, uint32_t wb) {
    MIXUP_PAIR_BODY
}
#if defined(__x86_64__) && defined(__GNUC__)
// The same bytes in 16-bit lanes, 32 pixels a step. With s = min(wa, wb) and wa x + wb y =
// 2^16 y + wa (x - y) = 2^16 x + wb (y - x), each output is p + floor((s d + 2^15) / 2^16) for a
// base p in {x, y} and d = +-(x - y); s d fits 25 bits, its high half is vpmulhw's and the + 2^15
// carries one into it exactly when bit 15 of the low half (vpmullw's) is set. s must fit int16:
// s = 32768 (lam exactly 1/2) takes the 32-bit loop (GCC's vpmulld clone of the body).
__attribute__((target("avx2"))) static void mixup_pair_avx2_32(uint8_t *restrict a, uint8_t *restrict b, size_t n,
                                                               uint32_t wa, uint32_t wb) {
    MIXUP_PAIR_BODY
}
__attribute__((target("avx2"))) static inline __m256i mix_step16(__m256i p, __m256i d, __m256i s) {
    __m256i hi = _mm256_mulhi_epi16(s, d), lo = _mm256_mullo_epi16(s, d);
    return _mm256_add_epi16(_mm256_add_epi16(p, hi), _mm256_srli_epi16(lo, 15));
}
__attribute__((target("avx2"))) static void mixup_pair_avx2(uint8_t *restrict a, uint8_t *restrict b, size_t n,
                                                            uint32_t wa, uint32_t wb) {
    const uint32_t sw = wa <= wb ? wa : wb;
    if (sw > 32767) {
        mixup_pair_avx2_32(a, b, n, wa, wb);
        return;
    }
    const __m256i s = _mm256_set1_epi16((short)sw);
    const int swap = wa > wb;  // then a takes x + f(wb, y - x) and b takes y + f(wb, x - y)
    size_t k = 0;
    for (; k + 32 <= n; k += 32) {
        __m256i va = _mm256_loadu_si256((const __m256i *)(a + k)), vb = _mm256_loadu_si256((const __m256i *)(b + k));
        __m256i r[2][2];
        for (int h = 0; h < 2; h++) {
            __m128i xa = h ? _mm256_extracti128_si256(va, 1) : _mm256_castsi256_si128(va);
            __m128i xb = h ? _mm256_extracti128_si256(vb, 1) : _mm256_castsi256_si128(vb);
            __m256i x = _mm256_cvtepu8_epi16(xa), y = _mm256_cvtepu8_epi16(xb);
            __m256i d = _mm256_sub_epi16(x, y), nd = _mm256_sub_epi16(y, x);
            r[0][h] = mix_step16(y, d, s);   // (wa x + wb y + 2^15) >> 16 when wa <= wb
            r[1][h] = mix_step16(x, nd, s);  // (wa y + wb x + 2^15) >> 16 when wa <= wb
        }
        __m256i p = _mm256_permute4x64_epi64(_mm256_packus_epi16(r[0][0], r[0][1]), 0xD8);
        __m256i q = _mm256_permute4x64_epi64(_mm256_packus_epi16(r[1][0], r[1][1]), 0xD8);
        _mm256_storeu_si256((__m256i *)(a + k), swap ? q : p);
        _mm256_storeu_si256((__m256i *)(b + k), swap ? p : q);
    }
    mixup_pair(a + k, b + k, n - k, wa, wb);
}
static int mix_simd_allowed = 1;
static int mix_use_avx2(void) {
    static int v = -1;
    if (v < 0) {
        __builtin_cpu_init();
        v = __builtin_cpu_supports("avx2") ? 1 : 0;
    }
    return v && __atomic_load_n(&mix_simd_allowed, __ATOMIC_RELAXED);
}
int mix_set_simd(int on) { return __atomic_exchange_n(&mix_simd_allowed, on, __ATOMIC_RELAXED); }
#else
static int mix_use_avx2(void) { return 0; }
static void mixup_pair_avx2(uint8_t *a, uint8_t *b, size_t n, uint32_t wa, uint32_t wb) { mixup_pair(a, b, n, wa, wb); }
int mix_set_simd(int on) { return on; }
#endif

void mix_apply(const MixDraw *d, uint8_t *images, const int32_t *labels, int32_t *labels_b, int N, int H, int W,
               int C) {
    for (int i = 0; i < N; i++) labels_b[i] = labels[N - 1 - i];
    const size_t img = (size_t)H * W * C;
    for (int i = 0; i < N / 2; i++) {  // an odd batch's middle sample is its own partner: unchanged
        uint8_t *a = images + (size_t)i * img, *b = images + (size_t)(N - 1 - i) * img;
        if (d->mode == MIX_MIXUP) {
            const uint32_t wa = d->weight, wb = 65536 - d->weight;
            if (mix_use_avx2()) mixup_pair_avx2(a, b, img, wa, wb);
            else mixup_pair(a, b, img, wa, wb);
        } else if (d->mode == MIX_CUTMIX) {
            const size_t row = (size_t)(d->x1 - d->x0) * C;
            uint8_t tmp[4096];
            for (int y = d->y0; y < d->y1; y++) {
                const size_t off = ((size_t)y * W + d->x0) * C;
                for (size_t k0 = 0; k0 < row; k0 += sizeof tmp) {  // swap the box rows
                    const size_t n = CT_MIN(sizeof tmp, row - k0);
                    memcpy(tmp, a + off + k0, n);
                    memcpy(a + off + k0, b + off + k0, n);
                    memcpy(b + off + k0, tmp, n);
                }
            }
        }
    }
}
