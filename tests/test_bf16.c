// util/bf16.h against a definition written from the numbers rather than the bits: the two bf16
// neighbours of x are found as values, the nearer one wins, a tie goes to the even significand.
// Every bf16 pattern is tried with the low halves that matter (exact, just above and below the
// tie, the tie itself, the extremes) plus random floats, so ties, subnormals, the overflow to
// inf, infinities, NaNs and -0 are all covered. The CPU reference's round_bf16 must give the
// same bits, since it is what the GPU's bf16 path is tested against.
#include <math.h>
#include <string.h>

#include "nn/layers.h"
#include "tests/test.h"
#include "util/bf16.h"
#include "util/common.h"
#include "util/rng.h"

// The magnitude of bf16 bits b (sign ignored) in double. Exponent field 255 with a zero significand
// comes out as 2^128: the value the next step above the largest finite bf16 would have, which is
// where IEEE rounding puts the boundary to inf.
static double bf16_mag(uint32_t b) {
    int e = (int)((b >> 7) & 0xff), m = (int)(b & 0x7f);
    return e == 0 ? ldexp(m, -133) : ldexp(128 + m, e - 134);
}

static uint16_t ref_f32_to_bf16(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    if (isnan(x)) return (uint16_t)((u >> 16) | 0x40u);  // keep sign and top payload, set the quiet bit
    if (isinf(x)) return (uint16_t)(sign | 0x7f80u);
    double a = fabs((double)x);
    // lo: the largest bf16 magnitude <= a, found by search over the ordered magnitudes.
    uint32_t lo = 0, hi = 0x7f80u;
    while (hi - lo > 1) {
        uint32_t mid = (lo + hi) / 2;
        if (bf16_mag(mid) <= a) lo = mid;
        else hi = mid;
    }
    uint32_t up = lo + 1;
    double dlo = a - bf16_mag(lo), dup = bf16_mag(up) - a;
    uint32_t r = dlo < dup ? lo : dup < dlo ? up : (lo & 1u) ? up : lo;
    return (uint16_t)(sign | r);
}

static float ref_bf16_to_f32(uint16_t h) {
    if ((h & 0x7f80u) == 0x7f80u && (h & 0x7fu)) return NAN;  // compared as "is NaN" below
    double v = (h & 0x7f80u) == 0x7f80u ? INFINITY : bf16_mag(h);
    return (float)((h & 0x8000u) ? -v : v);
}

static void check_one(float x, int *bad) {
    uint32_t u;
    memcpy(&u, &x, 4);
    uint16_t got = ct_f32_to_bf16(x), want = ref_f32_to_bf16(x);
    if (got != want && (*bad)++ < 10) CHECK(0, "ct_f32_to_bf16(%08x) = %04x, want %04x", u, got, want);
    float r = ct_round_bf16(x), back = ct_bf16_to_f32(want);
    if (memcmp(&r, &back, 4) && (*bad)++ < 10) CHECK(0, "ct_round_bf16(%08x) differs from the round trip", u);
}

int main(void) {
    // bf16 -> float: every pattern, exactly (NaNs keep their bits as the top half).
    int bad = 0;
    for (uint32_t h = 0; h < 0x10000u; h++) {
        float f = ct_bf16_to_f32((uint16_t)h), want = ref_bf16_to_f32((uint16_t)h);
        uint32_t fu;
        memcpy(&fu, &f, 4);
        int ok = isnan(want) ? isnan(f) && fu == h << 16 : memcmp(&f, &want, 4) == 0;
        if (!ok && bad++ < 10) CHECK(0, "ct_bf16_to_f32(%04x) = %08x", h, fu);
    }
    CHECK(bad == 0, "ct_bf16_to_f32: %d of 65536 patterns wrong", bad);

    // float -> bf16: every top half with the low halves around the tie, then random bits.
    static const uint32_t lows[] = {0, 1, 0x3fff, 0x7ffe, 0x7fff, 0x8000, 0x8001, 0xc000, 0xfffe, 0xffff};
    const size_t n_grid = 0x10000u * CT_ARRAY_LEN(lows), n = n_grid + 1000000;
    uint32_t *bits = ct_alloc(n * 4);
    for (uint32_t h = 0; h < 0x10000u; h++)
        for (size_t k = 0; k < CT_ARRAY_LEN(lows); k++) bits[h * CT_ARRAY_LEN(lows) + k] = h << 16 | lows[k];
    Rng r = rng_make(2027, 5, 0);
    for (size_t i = n_grid; i < n; i++) bits[i] = rng_u32(&r);
    float *x = ct_alloc(n * 4), *cpu = ct_alloc(n * 4);
    memcpy(x, bits, n * 4);
    bad = 0;
    for (size_t i = 0; i < n; i++) check_one(x[i], &bad);
    CHECK(bad == 0, "float -> bf16: %d values differ from the reference", bad);
    // The CPU reference's in-place rounding: the same bits as ct_round_bf16, NaNs included.
    memcpy(cpu, x, n * 4);
    round_bf16(cpu, n);
    bad = 0;
    for (size_t i = 0; i < n; i++) {
        float want = ct_round_bf16(x[i]);
        if (memcmp(&cpu[i], &want, 4) && bad++ < 10) CHECK(0, "round_bf16(%08x) differs from ct_round_bf16", bits[i]);
    }
    CHECK(bad == 0, "round_bf16: %d values differ from ct_round_bf16", bad);
    free(bits);
    free(x);
    free(cpu);

    // The cases by name, so a failure reads plainly.
    const float ulp = 1.0f / 128;  // bf16 spacing just above 1
    CHECK(ct_f32_to_bf16(1.0f + ulp / 2) == 0x3f80u, "tie below an even significand rounds down");
    CHECK(ct_f32_to_bf16(1.0f + 3 * ulp / 2) == 0x3f82u, "tie below an odd significand rounds up");
    CHECK(ct_f32_to_bf16(-0.0f) == 0x8000u, "-0 keeps its sign");
    CHECK(ct_f32_to_bf16(INFINITY) == 0x7f80u && ct_f32_to_bf16(-INFINITY) == 0xff80u, "infinities kept");
    CHECK(ct_f32_to_bf16(3.4028235e38f) == 0x7f80u, "FLT_MAX rounds to inf, as __float2bfloat16_rn");
    uint32_t snan = 0x7f800001u, nsnan = 0xff800001u;
    float fs, fns;
    memcpy(&fs, &snan, 4);
    memcpy(&fns, &nsnan, 4);
    CHECK(ct_f32_to_bf16(fs) == 0x7fc0u, "a signalling NaN with a low payload stays a (quiet) NaN");
    CHECK(ct_f32_to_bf16(fns) == 0xffc0u, "a negative NaN keeps its sign");
    uint32_t sub = 0x00018000u;  // subnormal exactly between 0x0001 and 0x0002: to the even one
    float fsub;
    memcpy(&fsub, &sub, 4);
    CHECK(ct_f32_to_bf16(fsub) == 0x0002u, "subnormal ties go to even");
    return test_summary("test_bf16");
}
