// resample_u8 against independent references: torchvision.transforms.functional (resized_crop and
// resize + center_crop with antialias=True on uint8 tensors) and PIL's BILINEAR resize, run by the
// Debian /usr/bin/python3 (TORCH_PY). Cases cover strong and mild downscale, upscale, mixed, 1 and 3
// channels, fractional regions (eval's resize-then-crop) and the horizontal flip. Plus self-checks that
// need no Python: a constant image stays constant, identity size is exact.
#include <math.h>
#include <string.h>
#include <unistd.h>

#include "loader/resample.h"
#include "tests/test.h"
#include "util/common.h"
#include "util/rng.h"

typedef struct {
    int sw, sh, C, dw, dh;
    int mode;  // 0: crop (top, left, h, w) then resize; 1: resize to (rh, rw) then center crop; 2: resize
    int top, left, h, w;  // mode 0
    int rh, rw;           // mode 1
    int flip;
} Case;

static const char *PY =
    "import sys, numpy as np, torch\n"
    "import torchvision.transforms.functional as F\n"
    "from PIL import Image\n"
    "d = sys.argv[1]\n"
    "for line in open(d + '/cases.txt'):\n"
    "    f = [int(v) for v in line.split()]\n"
    "    idx, sw, sh, C, dw, dh, mode, top, left, h, w, rh, rw, flip = f\n"
    "    a = np.fromfile('%s/in%d.raw' % (d, idx), dtype=np.uint8).reshape(sh, sw, C)\n"
    "    t = torch.from_numpy(a).permute(2, 0, 1).contiguous()\n"
    "    im = Image.fromarray(a[:, :, 0] if C == 1 else a)\n"
    "    if mode == 0:\n"
    "        o = F.resized_crop(t, top, left, h, w, [dh, dw], antialias=True)\n"
    "        p = im.crop((left, top, left + w, top + h)).resize((dw, dh), Image.BILINEAR)\n"
    "    elif mode == 1:\n"
    "        o = F.center_crop(F.resize(t, [rh, rw], antialias=True), [dh, dw])\n"
    "        p = F.center_crop(im.resize((rw, rh), Image.BILINEAR), [dh, dw])\n"
    "    else:\n"
    "        o = F.resize(t, [dh, dw], antialias=True)\n"
    "        p = im.resize((dw, dh), Image.BILINEAR)\n"
    "    if flip:\n"
    "        o = F.hflip(o)\n"
    "        p = F.hflip(p)\n"
    "    o.permute(1, 2, 0).contiguous().numpy().tofile('%s/torch%d.raw' % (d, idx))\n"
    "    np.asarray(p, dtype=np.uint8).reshape(dh, dw, C).tofile('%s/pil%d.raw' % (d, idx))\n";

// A smooth image with edges and noise: exercises both the filter shape and rounding.
static void make_image(uint8_t *img, int w, int h, int C, uint64_t seed) {
    Rng r = rng_make(seed, 1, 2);
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++)
            for (int c = 0; c < C; c++) {
                double v = 128 + 90 * sin(0.07 * x * (c + 1) + 0.05 * y) + ((x / 9 + y / 7) % 2 ? 20 : -20);
                v += 30 * (rng_uniform(&r) - 0.5);
                img[((size_t)y * w + x) * C + c] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
            }
}

static void run_ours(const Case *k, const uint8_t *img, uint8_t *out, ResampleScratch *s) {
    if (k->mode == 0) {
        resample_u8(out, k->dw, k->dh, img + ((size_t)k->top * k->sw + k->left) * k->C, k->w, k->h, k->C,
                    (size_t)k->sw * k->C, 0, 0, k->w, k->h, k->flip, s);
    } else if (k->mode == 1) {
        // torchvision center_crop offsets: int(round((size - crop) / 2)), Python rounds half to even.
        int top = (int)nearbyint((k->rh - k->dh) / 2.0), left = (int)nearbyint((k->rw - k->dw) / 2.0);
        double sx = (double)k->sw / k->rw, sy = (double)k->sh / k->rh;
        resample_u8(out, k->dw, k->dh, img, k->sw, k->sh, k->C, 0, left * sx, top * sy, k->dw * sx, k->dh * sy,
                    k->flip, s);
    } else {
        resample_u8(out, k->dw, k->dh, img, k->sw, k->sh, k->C, 0, 0, 0, k->sw, k->sh, k->flip, s);
    }
}

static uint8_t *read_raw(const char *path, size_t want) {
    size_t n = 0;
    char *b = ct_read_file(path, &n);
    if (n != want) ct_die("%s: %zu bytes, expected %zu", path, n, want);
    return (uint8_t *)b;
}

int main(void) {
    ResampleScratch scratch = {0};

    // Self-checks. A constant image stays exactly constant under any region (weights sum to 1).
    {
        uint8_t img[37 * 23 * 3], out[50 * 11 * 3];
        memset(img, 173, sizeof img);
        resample_u8(out, 50, 11, img, 37, 23, 3, 0, 1.25, 2.5, 30.1, 19.7, 1, &scratch);
        int ok = 1;
        for (size_t i = 0; i < sizeof out; i++) ok &= out[i] == 173;
        CHECK(ok, "constant image not preserved");
    }
    // Same size, whole image: the identity, exactly; with flip: the mirror.
    {
        enum { W = 31, H = 17, C = 3 };
        uint8_t img[W * H * C], out[W * H * C], outf[W * H * C];
        make_image(img, W, H, C, 5);
        resize_u8(out, W, H, img, W, H, C, &scratch);
        CHECK(memcmp(out, img, sizeof img) == 0, "identity resize changed pixels");
        resample_u8(outf, W, H, img, W, H, C, 0, 0, 0, W, H, 1, &scratch);
        int ok = 1;
        for (int y = 0; y < H; y++)
            for (int x = 0; x < W; x++)
                for (int c = 0; c < C; c++) ok &= outf[(y * W + x) * C + c] == img[(y * W + (W - 1 - x)) * C + c];
        CHECK(ok, "flipped identity is not the mirror image");
    }
    // The AVX2 and baseline kernels give identical bytes (same operations in the same order), for 1 and 3
    // channels, odd and even widths, flipped or not, up- and downscale.
    {
        int geo[][6] = {{341, 256, 224, 224, 0, 3}, {256, 341, 223, 97, 1, 3}, {64, 64, 32, 32, 1, 3},
                        {50, 40, 117, 81, 0, 3}, {341, 256, 31, 33, 1, 3}, {120, 90, 57, 40, 1, 1}};
        int ok = 1;
        for (size_t g = 0; g < CT_ARRAY_LEN(geo); g++) {
            int sw = geo[g][0], sh = geo[g][1], dw = geo[g][2], dh = geo[g][3], fl = geo[g][4], C = geo[g][5];
            uint8_t *img = ct_alloc((size_t)sw * sh * C), *a = ct_alloc((size_t)dw * dh * C), *b = ct_alloc((size_t)dw * dh * C);
            make_image(img, sw, sh, C, 900 + g);
            resample_u8(a, dw, dh, img, sw, sh, C, 0, 1.5, 2.25, sw - 3.5, sh - 4.0, fl, &scratch);
            int was = resample_set_simd(0);
            resample_u8(b, dw, dh, img, sw, sh, C, 0, 1.5, 2.25, sw - 3.5, sh - 4.0, fl, &scratch);
            resample_set_simd(was);
            ok &= memcmp(a, b, (size_t)dw * dh * C) == 0;
            free(img);
            free(a);
            free(b);
        }
        CHECK(ok, "SIMD and baseline kernels disagree");
    }
    // The same on random geometry: source sizes from 1 to 300, outputs to 200 x 150 (odd widths, widths of
    // 1-7 that leave no full group of the AVX2 passes, every width modulo 4), regions with fractional
    // bounds anywhere in the image up to its borders, up- and downscale up to ~20x, flip or not, and a
    // row stride wider than the image.
    {
        Rng g = rng_make(2612, 7, 1);
        int bad = 0, cases = 0;
        const unsigned long planar0 = resample_planar_images();
        for (int t = 0; t < 300; t++) {
            const int C = t % 4 == 3 ? 1 : 3;
            int sw = 1 + (int)rng_below(&g, t % 5 ? 300 : 9), sh = 1 + (int)rng_below(&g, t % 7 ? 300 : 9);
            int dw = 1 + (int)rng_below(&g, t % 3 ? 200 : 8), dh = 1 + (int)rng_below(&g, t % 2 ? 60 : 150);
            const int pad = (int)rng_below(&g, 3) * 5, fl = (int)rng_below(&g, 2);
            double cw = sw * (0.05 + 0.95 * rng_uniform(&g)), ch = sh * (0.05 + 0.95 * rng_uniform(&g));
            if (t % 6 == 0) cw = sw, ch = sh;  // whole image: taps pinned to both borders
            if (t % 10 == 0) sw = sh = 300, cw = 299.5, ch = 297.25, dw = 97, dh = 101;  // ~3x down: 7-tap sums
            const size_t stride = (size_t)(sw + pad) * C;
            const double x0 = (sw - cw) * rng_uniform(&g), y0 = (sh - ch) * rng_uniform(&g);
            uint8_t *img = ct_alloc(stride * sh), *a = ct_alloc((size_t)dw * dh * C), *b = ct_alloc((size_t)dw * dh * C);
            // Every other image white noise: every tap's product rounds, so any change in the order of
            // the float sums shows in some output byte.
            if (t % 2) make_image(img, (int)(stride / C), sh, C, 5000 + t);
            else
                for (size_t i = 0; i < stride * sh; i++) img[i] = (uint8_t)rng_below(&g, 256);
            int was = resample_set_simd(0);
            resample_u8(b, dw, dh, img, sw, sh, C, stride, x0, y0, cw, ch, fl, &scratch);
            // Level 1: the planar AVX-512VL path where the CPU has it and the geometry allows; level 2:
            // the AVX2 pair path.
            for (int lv = 1; lv <= 2; lv++) {
                resample_set_simd(lv);
                resample_u8(a, dw, dh, img, sw, sh, C, stride, x0, y0, cw, ch, fl, &scratch);
                cases++;
                if (memcmp(a, b, (size_t)dw * dh * C) && bad++ < 5)
                    CHECK(0, "%dx%dx%d region (%g,%g %gx%g) -> %dx%d flip %d simd %d: SIMD and baseline kernels disagree",
                          sw, sh, C, x0, y0, cw, ch, dw, dh, fl, lv);
            }
            resample_set_simd(was);
            free(img);
            free(a);
            free(b);
        }
        CHECK(bad == 0, "SIMD vs baseline on random geometry: %d of %d cases differ", bad, cases);
        printf("resample SIMD vs baseline, random geometry: %d cases, %d differ, %lu on the planar path%s\n", cases, bad,
               resample_planar_images() - planar0,
               __builtin_cpu_supports("avx2") ? "" : " (no AVX2 on this CPU: both runs took the baseline)");
        if (__builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx2"))
            CHECK(resample_planar_images() - planar0 >= 60, "only %lu random cases took the planar path",
                  resample_planar_images() - planar0);
    }
    // Rows needed bound: never less than the rows the taps read (checked by the reference cases below
    // through ASan as well), and for a crop at the top of a tall image well below the image height.
    CHECK(resample_rows_needed(32, 400, 0, 64) <= 66, "rows needed %d", resample_rows_needed(32, 400, 0, 64));

    // Reference cases.
    Case cases[] = {
        {256, 341, 3, 224, 224, 0, 10, 20, 200, 180, 0, 0, 0},   // mild downscale/upscale mix (RRC-like)
        {256, 341, 3, 224, 224, 0, 0, 0, 341, 256, 0, 0, 1},     // whole image, strong-ish downscale, flip
        {341, 256, 3, 224, 224, 0, 50, 60, 40, 70, 0, 0, 0},     // small crop: upscale both axes
        {341, 256, 3, 32, 32, 0, 3, 7, 250, 300, 0, 0, 1},       // big downscale (~9x) into a small crop
        {300, 200, 3, 224, 224, 1, 0, 0, 0, 0, 256, 384, 0},     // eval: resize short side to 256, crop 224
        {97, 130, 3, 56, 56, 1, 0, 0, 0, 0, 85, 64, 0},          // eval at odd sizes: fractional offsets
        {64, 64, 3, 32, 32, 1, 0, 0, 0, 0, 36, 36, 1},           // eval 32 from 64 (resize 36), flipped
        {28, 28, 1, 32, 32, 2, 0, 0, 0, 0, 0, 0, 0},             // grayscale upscale
        {120, 90, 1, 25, 31, 0, 5, 9, 77, 100, 0, 0, 1},         // grayscale, anisotropic downscale
        {500, 375, 3, 256, 192, 2, 0, 0, 0, 0, 0, 0, 0},         // packdata-style --max-short resize
    };
    int ncase = CT_ARRAY_LEN(cases);

    char dir[] = "/tmp/ct_test_resample_XXXXXX";
    if (!mkdtemp(dir)) ct_die_errno("mkdtemp");
    char path[512];
    snprintf(path, sizeof path, "%s/cases.txt", dir);
    FILE *cf = fopen(path, "w");
    if (!cf) ct_die_errno("%s", path);
    uint8_t *imgs[16], *ours[16];
    for (int i = 0; i < ncase; i++) {
        Case *k = &cases[i];
        size_t n = (size_t)k->sw * k->sh * k->C;
        imgs[i] = ct_alloc(n);
        make_image(imgs[i], k->sw, k->sh, k->C, 100 + i);
        snprintf(path, sizeof path, "%s/in%d.raw", dir, i);
        FILE *f = fopen(path, "wb");
        if (!f || fwrite(imgs[i], 1, n, f) != n) ct_die_errno("%s", path);
        fclose(f);
        fprintf(cf, "%d %d %d %d %d %d %d %d %d %d %d %d %d %d\n", i, k->sw, k->sh, k->C, k->dw, k->dh, k->mode,
                k->top, k->left, k->h, k->w, k->rh, k->rw, k->flip);
        ours[i] = ct_alloc((size_t)k->dw * k->dh * k->C);
        run_ours(k, imgs[i], ours[i], &scratch);
    }
    fclose(cf);
    snprintf(path, sizeof path, "%s/ref.py", dir);
    FILE *pf = fopen(path, "w");
    if (!pf) ct_die_errno("%s", path);
    fputs(PY, pf);
    fclose(pf);
    const char *py = getenv("TORCH_PY") ? getenv("TORCH_PY") : "/usr/bin/python3";
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "%s %s/ref.py %s", py, dir, dir);
    int rc = system(cmd);
    CHECK(rc == 0, "reference script failed (%s): torch/torchvision/PIL needed on %s", cmd, py);
    if (rc == 0) {
        for (int i = 0; i < ncase; i++) {
            Case *k = &cases[i];
            size_t n = (size_t)k->dw * k->dh * k->C;
            snprintf(path, sizeof path, "%s/torch%d.raw", dir, i);
            uint8_t *rt = read_raw(path, n);
            snprintf(path, sizeof path, "%s/pil%d.raw", dir, i);
            uint8_t *rp = read_raw(path, n);
            int mt = 0, mp = 0;
            double st = 0, sp = 0;
            for (size_t j = 0; j < n; j++) {
                int dt = abs((int)ours[i][j] - rt[j]), dp = abs((int)ours[i][j] - rp[j]);
                mt = CT_MAX(mt, dt);
                mp = CT_MAX(mp, dp);
                st += dt;
                sp += dp;
            }
            printf("case %d (%dx%dx%d -> %dx%d mode %d): max |ours-torch| %d (mean %.4f), max |ours-PIL| %d (mean %.4f)\n",
                   i, k->sw, k->sh, k->C, k->dw, k->dh, k->mode, mt, st / n, mp, sp / n);
            // torch computes in float with one rounding at the end, as we do: at most one level apart.
            CHECK(mt <= 1 && st / n < 0.01, "case %d: differs from torchvision (max %d, mean %.4f)", i, mt, st / n);
            // PIL rounds its intermediate to uint8 and uses 22-bit fixed-point weights: two levels.
            CHECK(mp <= 2 && sp / n < 0.5, "case %d: differs from PIL (max %d, mean %.4f)", i, mp, sp / n);
            free(rt);
            free(rp);
        }
    }
    for (int i = 0; i < ncase; i++) {
        free(imgs[i]);
        free(ours[i]);
    }
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) ct_warn("could not remove %s", dir);
    resample_scratch_free(&scratch);
    return test_summary("test_resample");
}
