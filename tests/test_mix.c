// Mixup and CutMix (loader/mix.h) against independent arithmetic:
//  - the Beta sampler's mean and variance for alphas below, at and above 1 (a = 1 is uniform);
//  - batch draws: the mixed share follows --mix-prob, the switch picks CutMix at --mix-switch-prob,
//    Mixup's lam is the exact pixel weight, CutMix's lam is 1 - box area / image area with the box
//    inside the image, and a draw depends only on (seed, epoch, batch key);
//  - mix_apply: Mixup pixels equal round(lam a + (1 - lam) b) computed in double from the unmixed
//    batch; CutMix takes exactly the box from the partner (the batch reversed) and nothing else; an
//    odd batch's middle sample is untouched; partner labels are the labels reversed.
#include <string.h>

#include "loader/mix.h"
#include "tests/test.h"

static void test_beta(double a) {
    Rng r = rng_make(99, (uint64_t)(a * 1000), 1);
    const int n = 40000;
    double s = 0, s2 = 0, lo = 1, hi = 0;
    for (int i = 0; i < n; i++) {
        double x = mix_beta(&r, a, a);
        s += x;
        s2 += x * x;
        lo = fmin(lo, x);
        hi = fmax(hi, x);
    }
    double mean = s / n, var = s2 / n - mean * mean, want_var = 1.0 / (4 * (2 * a + 1));
    // Standard errors: mean sqrt(var / n) ~ 0.0025; variance within a few percent at n = 40000.
    CHECK(fabs(mean - 0.5) < 0.01, "Beta(%g, %g): mean %g, want 0.5", a, a, mean);
    CHECK(fabs(var - want_var) < 0.05 * want_var + 0.002, "Beta(%g, %g): variance %g, want %g", a, a, var, want_var);
    CHECK(lo >= 0 && hi <= 1, "Beta(%g, %g): draws in [%g, %g]", a, a, lo, hi);
}

static void test_draws(void) {
    const int H = 28, W = 20;
    MixConfig c = {.mixup_alpha = 0.8f, .cutmix_alpha = 1.0f, .prob = 0.3f, .switch_prob = 0.25f, .seed = 5};
    int mixed = 0, cut = 0, n = 4000;
    for (int b = 0; b < n; b++) {
        MixDraw d;
        mix_draw(&c, 3, (uint64_t)b, H, W, &d);
        if (d.mode == MIX_NONE) {
            CHECK(d.lam == 1.0f, "unmixed batch %d: lam %g", b, d.lam);
            continue;
        }
        mixed++;
        CHECK(d.lam >= 0 && d.lam <= 1, "batch %d: lam %g", b, d.lam);
        if (d.mode == MIX_CUTMIX) {
            cut++;
            CHECK(0 <= d.y0 && d.y0 <= d.y1 && d.y1 <= H && 0 <= d.x0 && d.x0 <= d.x1 && d.x1 <= W,
                  "batch %d: box [%d,%d)x[%d,%d)", b, d.y0, d.y1, d.x0, d.x1);
            float want = (float)(1.0 - (double)(d.y1 - d.y0) * (d.x1 - d.x0) / (H * W));
            CHECK(d.lam == want, "batch %d: cutmix lam %g, box says %g", b, d.lam, want);
        } else {
            CHECK(d.lam == (float)(d.weight / 65536.0), "batch %d: mixup lam %g vs weight %u", b, d.lam, d.weight);
        }
        MixDraw again, other_epoch;
        mix_draw(&c, 3, (uint64_t)b, H, W, &again);
        mix_draw(&c, 4, (uint64_t)b, H, W, &other_epoch);
        CHECK(!memcmp(&again, &d, sizeof d), "batch %d: the same key drew differently", b);
        (void)other_epoch;
    }
    double pm = (double)mixed / n, pc = (double)cut / (mixed ? mixed : 1);
    CHECK(fabs(pm - 0.3) < 0.03, "mixed share %g, --mix-prob 0.3", pm);
    CHECK(fabs(pc - 0.25) < 0.05, "CutMix share of mixed batches %g, --mix-switch-prob 0.25", pc);
    // Epochs draw independently: over many batches the two epochs' lams are not the same sequence.
    int same = 0;
    for (int b = 0; b < 50; b++) {
        MixDraw d0, d1;
        mix_draw(&c, 0, (uint64_t)b, H, W, &d0);
        mix_draw(&c, 1, (uint64_t)b, H, W, &d1);
        same += d0.mode == d1.mode && d0.lam == d1.lam;
    }
    CHECK(same < 40, "epochs 0 and 1 drew the same for %d of 50 batches", same);
    // One of the two alone: every mixed batch is of that kind; prob 0 mixes nothing.
    MixConfig mu = {.mixup_alpha = 0.2f, .prob = 1.0f, .switch_prob = 0.5f, .seed = 1};
    MixConfig cm = {.cutmix_alpha = 1.0f, .prob = 1.0f, .switch_prob = 0.0f, .seed = 1};
    MixConfig off = {.mixup_alpha = 1.0f, .cutmix_alpha = 1.0f, .prob = 0.0f, .seed = 1};
    for (int b = 0; b < 200; b++) {
        MixDraw d;
        mix_draw(&mu, 0, (uint64_t)b, H, W, &d);
        CHECK(d.mode == MIX_MIXUP, "mixup only, batch %d: mode %d", b, d.mode);
        mix_draw(&cm, 0, (uint64_t)b, H, W, &d);
        CHECK(d.mode == MIX_CUTMIX, "cutmix only (switch 0), batch %d: mode %d", b, d.mode);
        mix_draw(&off, 0, (uint64_t)b, H, W, &d);
        CHECK(d.mode == MIX_NONE, "--mix-prob 0, batch %d: mode %d", b, d.mode);
    }
}

static void test_apply(int N, int H, int W, int C) {
    const size_t img = (size_t)H * W * C;
    uint8_t *x = ct_alloc(N * img), *y = ct_alloc(N * img);
    int32_t lab[16], lab_b[16];
    Rng r = rng_make(7, (uint64_t)N, (uint64_t)C);
    for (size_t i = 0; i < N * img; i++) x[i] = (uint8_t)rng_below(&r, 256);
    for (int i = 0; i < N; i++) lab[i] = (int32_t)rng_below(&r, 10);
    MixConfig c = {.mixup_alpha = 0.4f, .cutmix_alpha = 1.0f, .prob = 1.0f, .switch_prob = 0.5f, .seed = 11};
    int seen[3] = {0, 0, 0};
    for (int b = 0; b < 12; b++) {
        MixDraw d;
        mix_draw(&c, 0, (uint64_t)b, H, W, &d);
        seen[d.mode]++;
        memcpy(y, x, N * img);
        mix_apply(&d, y, lab, lab_b, N, H, W, C);
        int bad = 0, lab_bad = 0;
        for (int i = 0; i < N; i++) {
            lab_bad += lab_b[i] != lab[N - 1 - i];
            const uint8_t *a = x + i * img, *p = x + (size_t)(N - 1 - i) * img, *got = y + i * img;
            for (int yy = 0; yy < H; yy++)
                for (int xx = 0; xx < W; xx++)
                    for (int ch = 0; ch < C; ch++) {
                        size_t k = ((size_t)yy * W + xx) * C + ch;
                        int want;
                        if (d.mode == MIX_MIXUP) want = (int)floor((double)d.lam * a[k] + (1.0 - d.lam) * p[k] + 0.5);
                        else if (yy >= d.y0 && yy < d.y1 && xx >= d.x0 && xx < d.x1) want = p[k];
                        else want = a[k];
                        bad += got[k] != want;
                    }
        }
        CHECK(bad == 0 && lab_bad == 0, "N=%d %dx%dx%d batch %d (mode %d, lam %g): %d pixels, %d partner labels differ",
              N, H, W, C, b, d.mode, d.lam, bad, lab_bad);
    }
    CHECK(seen[MIX_MIXUP] > 0 && seen[MIX_CUTMIX] > 0, "both kinds drawn: %d mixup, %d cutmix", seen[1], seen[2]);
    free(x);
    free(y);
}

// Mixup's AVX2 loop (16-bit products, a carry from the low half) against the baseline's 32-bit
// loop, byte for byte: every (x, y) byte pair at weights around each case boundary (0, 1, just
// below, at and above 2^15, 65535, 65536) and random ones, on pair lengths with every tail.
static void test_mixup_simd_bytes(void) {
    const int W = 256, H = 257;  // pixels x = k % 256 against y = k / 256 (row 256: a 256-byte tail)
    const size_t img = (size_t)H * W;
    uint8_t *x = malloc(2 * img), *ys = malloc(2 * img), *yv = malloc(2 * img);
    for (size_t k = 0; k < img; k++) {
        x[k] = (uint8_t)(k % 256);
        x[img + k] = (uint8_t)(k / 256 + k / 65536 * 37);
    }
    uint32_t weights[40] = {0, 1, 2, 255, 256, 32766, 32767, 32768, 32769, 32770, 65534, 65535, 65536};
    Rng r = rng_make(7, 7, 7);
    for (int i = 13; i < 40; i++) weights[i] = (uint32_t)(rng_u64(&r) % 65537);
    int32_t lab[2] = {0, 1}, lab_b[2];
    for (int wi = 0; wi < 40; wi++)
        for (int len = 0; len < 3; len++) {  // whole image, then odd widths: every tail length
            const int w = len == 0 ? W : len == 1 ? 31 : 45, h = len == 0 ? H : 3;
            const size_t n = (size_t)w * h;
            MixDraw d = {.mode = MIX_MIXUP, .weight = weights[wi], .lam = (float)(weights[wi] / 65536.0)};
            memcpy(ys, x, img);
            memcpy(ys + n, x + img, n);
            memcpy(yv, ys, 2 * n);
            mix_set_simd(0);
            mix_apply(&d, ys, lab, lab_b, 2, h, w, 1);
            mix_set_simd(1);
            mix_apply(&d, yv, lab, lab_b, 2, h, w, 1);
            long b = 0;
            for (size_t k = 0; k < 2 * n; k++) b += ys[k] != yv[k];
            CHECK(b == 0, "Mixup weight %u, %dx%d: %ld bytes differ between the AVX2 and baseline loops", weights[wi],
                  w, h, b);
        }
    free(x);
    free(ys);
    free(yv);
}

int main(void) {
    test_beta(0.2);
    test_beta(1.0);
    test_beta(2.5);
    test_draws();
    test_apply(5, 9, 7, 3);  // odd batch: the middle sample is its own partner
    test_apply(4, 16, 16, 1);
    test_apply(1, 3, 5, 3);
    test_apply(4, 33, 35, 3);  // the vector loops' bodies and tails
    // The same without the AVX2 clone of the Mixup loop.
    mix_set_simd(0);
    test_apply(5, 9, 7, 3);
    test_apply(4, 33, 35, 3);
    mix_set_simd(1);
    test_mixup_simd_bytes();
    return test_summary("test_mix");
}
