// loader/autoaug.c against torchvision's own ops, run by Debian's /usr/bin/python3 (TORCH_PY) on
// the same uint8 images and parameters: every op of TrivialAugmentWide / RandAugment through
// torchvision.transforms.autoaugment._apply_op (BILINEAR, fill None and a fill colour), timm's
// fractional translations through F.affine, SolarizeAdd against timm's LUT, RandomErasing against
// F.erase on the normalised tensor, and the magnitude tables against torchvision's. Photometric
// ops and integer translations must be byte-exact; rotations and shears sample a float32 grid
// whose rounding torch's kernel may order differently: at most 1 level on under 2% of the values (measured: up to 1.1%, rotations exact).
// Then, without Python: timm's policy grammar, its level mapping at m7, and determinism of the
// policies (same key, same bytes).
#include <math.h>
#include <string.h>
#include <unistd.h>

#include "loader/autoaug.h"
#include "tests/test.h"
#include "util/common.h"
#include "util/rng.h"

static const char *PY =
    "import sys, math, numpy as np, torch\n"
    "import torchvision\n"
    "import torchvision.transforms.functional as F\n"
    "from torchvision.transforms.autoaugment import _apply_op, TrivialAugmentWide, RandAugment\n"
    "from torchvision.transforms import InterpolationMode as IM\n"
    "d = sys.argv[1]\n"
    "NAMES = ['Identity', 'ShearX', 'ShearY', 'TranslateX', 'TranslateY', 'Rotate', 'Brightness', 'Color',\n"
    "         'Contrast', 'Sharpness', 'Posterize', 'Solarize', 'AutoContrast', 'Equalize', 'Invert', 'SolarizeAdd']\n"
    "for line in open(d + '/cases.txt'):\n"
    "    f = line.split()\n"
    "    idx, H, W, C, op, kind, hasfill = [int(v) for v in f[:7]]\n"
    "    mag, tx, ty = [float(v) for v in f[7:10]]\n"
    "    fill = [float(v) for v in f[10:10 + C]] if hasfill else None\n"
    "    a = np.fromfile('%s/in%d.raw' % (d, idx), dtype=np.uint8).reshape(H, W, C)\n"
    "    t = torch.from_numpy(a).permute(2, 0, 1).contiguous()\n"
    "    if kind == 1:\n"
    "        o = F.affine(t, angle=0.0, translate=[tx, ty], scale=1.0, shear=[0.0, 0.0],\n"
    "                     interpolation=IM.BILINEAR, fill=fill)\n"
    "    elif NAMES[op] == 'SolarizeAdd':\n"
    "        lut = torch.tensor([min(255, i + int(mag)) if i < 128 else i for i in range(256)], dtype=torch.uint8)\n"
    "        o = lut[t.long()]\n"
    "    else:\n"
    "        o = _apply_op(t, NAMES[op], mag, interpolation=IM.BILINEAR, fill=fill)\n"
    "    o.permute(1, 2, 0).contiguous().numpy().tofile('%s/torch%d.raw' % (d, idx))\n"
    "# RandomErasing's value 0 on the normalised tensor\n"
    "for line in open(d + '/erase.txt'):\n"
    "    idx, H, W, C, i, j, h, w = [int(v) for v in line.split()[:8]]\n"
    "    ms = [float(v) for v in line.split()[8:]]\n"
    "    mean, std = ms[:C], ms[C:2 * C]\n"
    "    a = np.fromfile('%s/ein%d.raw' % (d, idx), dtype=np.uint8).reshape(H, W, C)\n"
    "    t = F.normalize(torch.from_numpy(a).permute(2, 0, 1).float() / 255, mean, std)\n"
    "    o = F.erase(t, i, j, h, w, torch.tensor(0.0))\n"
    "    o.permute(1, 2, 0).contiguous().numpy().astype('<f4').tofile('%s/etorch%d.raw' % (d, idx))\n"
    "# magnitude tables: TA wide (any size), RandAugment on a 29 x 37 image\n"
    "with open(d + '/mags.txt', 'w') as out:\n"
    "    for pol, sp in (('ta', TrivialAugmentWide()._augmentation_space(31)),\n"
    "                    ('ra', RandAugment()._augmentation_space(31, (29, 37)))):\n"
    "        for name, (m, signed) in sp.items():\n"
    "            if m.ndim == 0: continue\n"
    "            out.write('%s %s %d %s\\n' % (pol, name, int(signed), ' '.join(repr(float(v)) for v in m)))\n"
    "print('torchvision', torchvision.__version__)\n";

static void make_image(uint8_t *img, int w, int h, int C, uint64_t seed) {
    Rng r = rng_make(seed, 3, 4);
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++)
            for (int c = 0; c < C; c++) {
                double v = 110 + 80 * sin(0.11 * x * (c + 1) + 0.07 * y) + ((x / 5 + y / 4) % 2 ? 25 : -25);
                v += 40 * (rng_uniform(&r) - 0.5);
                img[((size_t)y * w + x) * C + c] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
            }
}

typedef struct {
    int op, kind, hasfill;  // kind 1: aa_affine with float translation (timm's relative translate)
    double mag, tx, ty;
    int C;
} Case;

static uint8_t *read_raw(const char *path, size_t n) {
    uint8_t *b = ct_alloc(n);
    FILE *f = fopen(path, "rb");
    if (!f || fread(b, 1, n, f) != n) ct_die("%s: missing or short (did the reference script run?)", path);
    fclose(f);
    return b;
}

static const char *OPNAME[AA_N_OPS] = {"Identity", "ShearX", "ShearY", "TranslateX", "TranslateY", "Rotate",
                                       "Brightness", "Color", "Contrast", "Sharpness", "Posterize", "Solarize",
                                       "AutoContrast", "Equalize", "Invert", "SolarizeAdd"};

static int op_of(const char *name) {
    for (int i = 0; i < AA_N_OPS; i++)
        if (!strcmp(OPNAME[i], name)) return i;
    return -1;
}

static void python_checks(void) {
    char dir[] = "/tmp/ct_autoaug_XXXXXX";
    if (!mkdtemp(dir)) ct_die_errno("mkdtemp");
    const int H = 29, W = 37;
    const uint8_t fill3[3] = {124, 116, 104};
    Case cases[160];
    int n = 0;
    // Each op at a few magnitudes, signed where torchvision signs, on RGB and grey images.
    const double enh[] = {-0.99, -0.5, 0.3, 0.99}, geo_shear[] = {-0.99, -0.3, 0.21, 0.5};
    const double rot[] = {-135, -30, 7.5, 21, 90};
    for (int C = 1; C <= 3; C += 2)
        for (int hasfill = 0; hasfill <= 1; hasfill++) {
            for (int k = 0; k < 4; k++) {
                cases[n++] = (Case){AA_SHEAR_X, 0, hasfill, geo_shear[k], 0, 0, C};
                cases[n++] = (Case){AA_SHEAR_Y, 0, hasfill, geo_shear[k], 0, 0, C};
            }
            for (int k = 0; k < 5; k++) cases[n++] = (Case){AA_ROTATE, 0, hasfill, rot[k], 0, 0, C};
            cases[n++] = (Case){AA_TRANSLATE_X, 0, hasfill, -12.9, 0, 0, C};
            cases[n++] = (Case){AA_TRANSLATE_Y, 0, hasfill, 31.0, 0, 0, C};
            cases[n++] = (Case){AA_IDENTITY, 1, hasfill, 0, -4.35, 0, C};  // timm TranslateXRel: -0.45 * 0.26 * 37 px
            cases[n++] = (Case){AA_IDENTITY, 1, hasfill, 0, 0, 5.625, C};
        }
    for (int C = 1; C <= 3; C += 2) {
        for (int k = 0; k < 4; k++) {
            cases[n++] = (Case){AA_BRIGHTNESS, 0, 0, enh[k], 0, 0, C};
            cases[n++] = (Case){AA_COLOR, 0, 0, enh[k], 0, 0, C};
            cases[n++] = (Case){AA_CONTRAST, 0, 0, enh[k], 0, 0, C};
            cases[n++] = (Case){AA_SHARPNESS, 0, 0, enh[k], 0, 0, C};
        }
        for (int b = 0; b <= 8; b += 2) cases[n++] = (Case){AA_POSTERIZE, 0, 0, b, 0, 0, C};
        const double thr[] = {0, 76.5, 128, 255};
        for (int k = 0; k < 4; k++) cases[n++] = (Case){AA_SOLARIZE, 0, 0, thr[k], 0, 0, C};
        cases[n++] = (Case){AA_AUTOCONTRAST, 0, 0, 0, 0, 0, C};
        cases[n++] = (Case){AA_EQUALIZE, 0, 0, 0, 0, 0, C};
        cases[n++] = (Case){AA_INVERT, 0, 0, 0, 0, 0, C};
        cases[n++] = (Case){AA_IDENTITY, 0, 0, 0, 0, 0, C};
        cases[n++] = (Case){AA_SOLARIZE_ADD, 0, 0, 77, 0, 0, C};
    }
    CHECK(n <= (int)CT_ARRAY_LEN(cases), "case table overflow");
    char path[256];
    snprintf(path, sizeof path, "%s/cases.txt", dir);
    FILE *cf = fopen(path, "w");
    if (!cf) ct_die_errno("%s", path);
    uint8_t *ours[160], *tmp = ct_alloc((size_t)H * W * 3);
    for (int i = 0; i < n; i++) {
        Case *k = &cases[i];
        size_t sz = (size_t)H * W * k->C;
        uint8_t *img = ct_alloc(sz);
        make_image(img, W, H, k->C, 50 + i);
        // Low-contrast, narrow-histogram inputs for autocontrast and equalize (their interesting case).
        if (k->op == AA_AUTOCONTRAST || k->op == AA_EQUALIZE)
            for (size_t j = 0; j < sz; j++) img[j] = (uint8_t)CT_MIN(60 + img[j] / 3, 120);  // a heavy top bin
        snprintf(path, sizeof path, "%s/in%d.raw", dir, i);
        test_write_file(path, img, sz);
        fprintf(cf, "%d %d %d %d %d %d %d %.17g %.17g %.17g", i, H, W, k->C, k->op, k->kind, k->hasfill, k->mag, k->tx,
                k->ty);
        for (int c = 0; c < k->C; c++) fprintf(cf, " %d", fill3[c]);
        fputc('\n', cf);
        const uint8_t *fill = k->hasfill ? fill3 : NULL;
        if (k->kind == 1) aa_affine(img, H, W, k->C, 0, k->tx, k->ty, 0, 0, 0, fill, tmp);
        else aa_apply_op((AaOp)k->op, k->mag, fill, img, H, W, k->C, tmp);
        ours[i] = img;
    }
    fclose(cf);
    // RandomErasing: our uint8 box of round(255 mean), normalised, against F.erase(value 0) of the
    // normalised tensor.
    const float mean3[3] = {0.485f, 0.456f, 0.406f}, std3[3] = {0.229f, 0.224f, 0.225f};
    float *eours[4];
    int nerase = 0;
    snprintf(path, sizeof path, "%s/erase.txt", dir);
    FILE *ef = fopen(path, "w");
    if (!ef) ct_die_errno("%s", path);
    for (int e = 0; e < 4; e++) {
        int C = e % 2 ? 1 : 3;
        EraseConfig ec = {0};
        ec.p = 1;
        for (int c = 0; c < 3; c++) ec.mean[c] = C == 1 ? 0.286f : mean3[c], ec.std[c] = C == 1 ? 0.353f : std3[c];
        size_t sz = (size_t)H * W * C;
        uint8_t *img = ct_alloc(sz);
        make_image(img, W, H, C, 900 + e);
        snprintf(path, sizeof path, "%s/ein%d.raw", dir, e);
        test_write_file(path, img, sz);
        Rng r = rng_make(7, 8, (uint64_t)e);
        int i0, j0, h0, w0;
        int did = erase_apply(&ec, &r, img, H, W, C, &i0, &j0, &h0, &w0);
        CHECK(did, "erase %d: p = 1 erased nothing", e);
        CHECK(did && h0 < H && w0 < W && i0 + h0 <= H && j0 + w0 <= W, "erase %d: box %d,%d %dx%d outside", e, i0, j0, h0, w0);
        fprintf(ef, "%d %d %d %d %d %d %d %d", e, H, W, C, i0, j0, h0, w0);
        for (int c = 0; c < C; c++) fprintf(ef, " %.9g", ec.mean[c]);
        for (int c = 0; c < C; c++) fprintf(ef, " %.9g", ec.std[c]);
        fputc('\n', ef);
        eours[e] = ct_alloc(sz * sizeof(float));
        for (size_t j = 0; j < sz; j++) eours[e][j] = (img[j] / 255.0f - ec.mean[j % C]) / ec.std[j % C];
        free(img);
        nerase++;
    }
    fclose(ef);
    snprintf(path, sizeof path, "%s/ref.py", dir);
    test_write_file(path, PY, strlen(PY));
    const char *py = getenv("TORCH_PY") ? getenv("TORCH_PY") : "/usr/bin/python3";
    char cmd[600];
    snprintf(cmd, sizeof cmd, "%s %s/ref.py %s", py, dir, dir);
    int rc = system(cmd);
    CHECK(rc == 0, "reference script failed (%s): torch/torchvision needed on %s", cmd, py);
    if (rc == 0) {
        for (int i = 0; i < n; i++) {
            Case *k = &cases[i];
            size_t sz = (size_t)H * W * k->C;
            snprintf(path, sizeof path, "%s/torch%d.raw", dir, i);
            uint8_t *rt = read_raw(path, sz);
            int mx = 0;
            size_t ndiff = 0;
            for (size_t j = 0; j < sz; j++) {
                int d = abs((int)ours[i][j] - rt[j]);
                mx = CT_MAX(mx, d);
                ndiff += d != 0;
            }
            int grid = k->op == AA_ROTATE || k->op == AA_SHEAR_X || k->op == AA_SHEAR_Y || k->kind == 1;
            if (mx || grid)
                printf("%-12s C=%d fill=%d mag %-8g tx %-6g ty %-6g: max |ours-torchvision| %d, %zu of %zu values differ\n",
                       OPNAME[k->op], k->C, k->hasfill, k->mag, k->tx, k->ty, mx, ndiff, sz);
            if (grid)
                CHECK(mx <= 1 && ndiff * 50 < sz, "%s mag %g C=%d fill %d: beyond the float32 grid bound", OPNAME[k->op],
                      k->mag, k->C, k->hasfill);
            else
                CHECK(mx == 0, "%s mag %g C=%d fill %d: not byte-exact (max %d, %zu values)", OPNAME[k->op], k->mag, k->C,
                      k->hasfill, mx, ndiff);
            free(rt);
        }
        for (int e = 0; e < nerase; e++) {
            int C = e % 2 ? 1 : 3;
            size_t sz = (size_t)H * W * C;
            snprintf(path, sizeof path, "%s/etorch%d.raw", dir, e);
            float *rt = (float *)read_raw(path, sz * sizeof(float));
            double mx = 0, bound = 0;
            for (size_t j = 0; j < sz; j++) {
                float s = C == 1 ? 0.353f : std3[j % C];
                mx = fmax(mx, fabs((double)eours[e][j] - rt[j]));
                bound = fmax(bound, 0.5 / (255.0 * s) + 1e-6);
            }
            printf("erase %d (C=%d): max |ours - torchvision| %.3g on the normalised tensor (bound %.3g)\n", e, C, mx, bound);
            CHECK(mx <= bound, "erase %d: %.3g beyond the uint8 rounding of the mean (%.3g)", e, mx, bound);
            free(rt);
        }
        // Magnitude tables.
        snprintf(path, sizeof path, "%s/mags.txt", dir);
        FILE *mf = fopen(path, "r");
        CHECK(mf != NULL, "no magnitude tables from the reference");
        char line[4096];
        int tables = 0, ulp1 = 0;
        while (mf && fgets(line, sizeof line, mf)) {
            char pol[8], name[32];
            int sgn, off;
            if (sscanf(line, "%7s %31s %d%n", pol, name, &sgn, &off) != 3) continue;
            int op = op_of(name);
            CHECK(op >= 0, "unknown torchvision op %s", name);
            if (op < 0) continue;
            AaPolicy p = !strcmp(pol, "ta") ? AA_POLICY_TA_WIDE : AA_POLICY_RA_TV;
            char *s = line + off;
            for (int b = 0; b < 31; b++) {
                double tv = strtod(s, &s);
                double us = aa_tv_magnitude(p, (AaOp)op, 31, b, 29, 37);
                float tf = (float)tv, uf = (float)us;
                int32_t ti, ui;
                memcpy(&ti, &tf, 4);
                memcpy(&ui, &uf, 4);
                ulp1 += ti != ui;
                CHECK(abs(ti - ui) <= 1, "%s %s bin %d: %.9g, torchvision %.9g", pol, name, b, us, tv);
            }
            tables++;
        }
        if (mf) fclose(mf);
        printf("magnitude tables: %d compared, %d entries one float32 ulp from torchvision's\n", tables, ulp1);
        CHECK(tables == 22, "expected 22 tables of 31 bins, got %d", tables);
    }
    for (int i = 0; i < n; i++) free(ours[i]);
    for (int e = 0; e < nerase; e++) free(eours[e]);
    free(tmp);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) ct_warn("could not remove %s", dir);
}

static void grammar_checks(void) {
    AaConfig c;
    char err[256];
    CHECK(aa_parse("rand-m7-mstd0.5-inc1", 9, &c, err, sizeof err) == 0, "rand-m7-mstd0.5-inc1: %s", err);
    CHECK(c.policy == AA_POLICY_RA_TIMM && c.magnitude == 7 && c.mstd == 0.5 && c.increasing && c.num_ops == 2 &&
              c.op_prob == 0.5 && c.mmax == 0,
          "rand-m7-mstd0.5-inc1 parsed as m %d mstd %g inc %d n %d", c.magnitude, c.mstd, c.increasing, c.num_ops);
    CHECK(aa_parse("rand-m9-n3-mstd101-mmax15-p0.8", 9, &c, err, sizeof err) == 0 && c.num_ops == 3 && isinf(c.mstd) &&
              c.mmax == 15 && !c.increasing && c.op_prob == 0.8,
          "rand-m9-n3-mstd101-mmax15: %s", err);
    CHECK(aa_parse("rand", 9, &c, err, sizeof err) == 0 && c.magnitude == 10 && c.num_ops == 2, "plain rand");
    CHECK(aa_parse("ta_wide", 9, &c, err, sizeof err) == 0 && c.policy == AA_POLICY_TA_WIDE, "ta_wide");
    CHECK(aa_parse("ra", 9, &c, err, sizeof err) == 0 && c.policy == AA_POLICY_RA_TV && c.magnitude == 9, "ra");
    CHECK(aa_parse("none", 9, &c, err, sizeof err) == 0 && c.policy == AA_POLICY_NONE, "none");
    const char *bad[] = {"rand-m7-inc0", "rand-q3", "rand-m7x", "rand-w0", "randm7", "trivial", "ra_wide", "rand-m7--n2"};
    for (size_t i = 0; i < CT_ARRAY_LEN(bad); i++) {
        err[0] = 0;
        CHECK(aa_parse(bad[i], 9, &c, err, sizeof err) != 0 && strstr(err, "'") != NULL, "'%s' accepted", bad[i]);
    }
    CHECK(aa_parse("ra", 31, &c, err, sizeof err) != 0 && strstr(err, "--ra-magnitude"), "ra magnitude 31 accepted");
}

// timm's level mapping at m9 with p = 1 and no noise, observed through its effect on images: the
// Posterize (inc) keeps 4 - int(3.6) = 1 bit; Solarize (inc) uses 256 - int(230.4) = 26;
// SolarizeAdd adds int(99.0) = 99; BrightnessIncreasing is 1 +- 0.81.
static void timm_level_checks(void) {
    const int H = 8, W = 8, C = 3;
    uint8_t img[8 * 8 * 3], ref[8 * 8 * 3], tmp[8 * 8 * 3];
    AaConfig c;
    char err[128];
    aa_parse("rand-m9-inc1-p1-n1", 9, &c, err, sizeof err);
    // Drive single ops by searching keys whose first op draw is the op wanted.
    int seen[AA_N_OPS] = {0};
    for (uint64_t key = 0; key < 4000; key++) {
        make_image(img, W, H, C, 1);
        memcpy(ref, img, sizeof img);
        Rng r = rng_make(11, 0, key), probe = r;
        static const AaOp T[15] = {AA_AUTOCONTRAST, AA_EQUALIZE, AA_INVERT, AA_ROTATE, AA_POSTERIZE, AA_SOLARIZE,
                                   AA_SOLARIZE_ADD, AA_COLOR, AA_CONTRAST, AA_BRIGHTNESS, AA_SHARPNESS, AA_SHEAR_X,
                                   AA_SHEAR_Y, AA_TRANSLATE_X, AA_TRANSLATE_Y};
        AaOp op = T[rng_below(&probe, 15)];
        aa_apply(&c, &r, img, H, W, C, tmp);
        if (op == AA_POSTERIZE) {
            for (int i = 0; i < H * W * C; i++) ref[i] &= 0x80;
        } else if (op == AA_SOLARIZE) {
            for (int i = 0; i < H * W * C; i++) ref[i] = ref[i] >= 26 ? 255 - ref[i] : ref[i];
        } else if (op == AA_SOLARIZE_ADD) {
            for (int i = 0; i < H * W * C; i++) ref[i] = ref[i] < 128 ? CT_MIN(255, ref[i] + 99) : ref[i];
        } else if (op == AA_BRIGHTNESS) {
            // 1 +- 0.63: the sign is the op's second draw.
            uint8_t a[8 * 8 * 3], b[8 * 8 * 3];
            memcpy(a, ref, sizeof a);
            memcpy(b, ref, sizeof b);
            aa_apply_op(AA_BRIGHTNESS, 0.9 * 0.9, NULL, a, H, W, C, tmp);
            aa_apply_op(AA_BRIGHTNESS, -0.9 * 0.9, NULL, b, H, W, C, tmp);
            CHECK(!memcmp(img, a, sizeof a) || !memcmp(img, b, sizeof b), "timm BrightnessIncreasing m9 is not 1 +- 0.81");
            seen[op]++;
            continue;
        } else {
            continue;
        }
        seen[op]++;
        CHECK(!memcmp(img, ref, sizeof img), "timm %s at m9 (inc) differs from its level mapping", OPNAME[op]);
    }
    CHECK(seen[AA_POSTERIZE] && seen[AA_SOLARIZE] && seen[AA_SOLARIZE_ADD] && seen[AA_BRIGHTNESS],
          "level checks did not meet every op");
}

// torchvision's policies use only their tables' magnitudes: RandAugment the bin it was given (9),
// TrivialAugmentWide any bin; each result must equal aa_apply_op at +- a table entry (the table
// itself is checked against torchvision's above).
static void tv_policy_magnitudes(void) {
    const int H = 16, W = 16, C = 3;
    uint8_t src[16 * 16 * 3], img[16 * 16 * 3], ref[16 * 16 * 3], tmp[16 * 16 * 3];
    make_image(src, W, H, C, 9);
    for (int pol = 0; pol < 2; pol++) {
        AaConfig c;
        char err[128];
        aa_parse(pol ? "ta_wide" : "ra", 9, &c, err, sizeof err);
        c.num_ops = 1;
        int checked = 0;
        for (uint64_t key = 0; key < 300; key++) {
            static const AaOp T[14] = {AA_IDENTITY, AA_SHEAR_X, AA_SHEAR_Y, AA_TRANSLATE_X, AA_TRANSLATE_Y, AA_ROTATE,
                                       AA_BRIGHTNESS, AA_COLOR, AA_CONTRAST, AA_SHARPNESS, AA_POSTERIZE, AA_SOLARIZE,
                                       AA_AUTOCONTRAST, AA_EQUALIZE};
            Rng r = rng_make(3, 4, key), probe = r;
            AaOp op = T[rng_below(&probe, 14)];
            if (op != AA_BRIGHTNESS && op != AA_SOLARIZE && op != AA_POSTERIZE && op != AA_CONTRAST) continue;
            memcpy(img, src, sizeof img);
            aa_apply(&c, &r, img, H, W, C, tmp);
            int match = 0;
            for (int b = pol ? 0 : 9; b <= (pol ? 30 : 9) && !match; b++)
                for (int sg = -1; sg <= 1 && !match; sg += 2) {
                    memcpy(ref, src, sizeof ref);
                    aa_apply_op(op, sg * aa_tv_magnitude(c.policy, op, 31, b, H, W), NULL, ref, H, W, C, tmp);
                    match = !memcmp(ref, img, sizeof img);
                }
            CHECK(match, "%s: %s with a magnitude outside its table", pol ? "ta_wide" : "ra", OPNAME[op]);
            checked++;
        }
        CHECK(checked > 40, "only %d draws checked", checked);
    }
}

// Same key, same bytes; different keys give different images; each TA op is drawn about 1/14 of
// the time (chi-square against uniform).
static void policy_checks(void) {
    const int H = 24, W = 20, C = 3;
    size_t sz = (size_t)H * W * C;
    uint8_t *a = ct_alloc(sz), *b = ct_alloc(sz), *tmp = ct_alloc(sz), *src = ct_alloc(sz);
    make_image(src, W, H, C, 5);
    const char *specs[] = {"ta_wide", "ra", "rand-m7-mstd0.5-inc1", "rand-m9-mstd0.5"};
    for (size_t s = 0; s < CT_ARRAY_LEN(specs); s++) {
        AaConfig c;
        char err[128];
        CHECK(aa_parse(specs[s], 9, &c, err, sizeof err) == 0, "%s", err);
        int changed = 0, distinct = 0;
        for (uint64_t k = 0; k < 64; k++) {
            memcpy(a, src, sz);
            memcpy(b, src, sz);
            Rng r1 = rng_make(1, 2, k), r2 = rng_make(1, 2, k);
            aa_apply(&c, &r1, a, H, W, C, tmp);
            aa_apply(&c, &r2, b, H, W, C, tmp);
            CHECK(!memcmp(a, b, sz), "%s: key %llu not deterministic", specs[s], (unsigned long long)k);
            changed += memcmp(a, src, sz) != 0;
            Rng r3 = rng_make(1, 2, k + 1000);
            memcpy(b, src, sz);
            aa_apply(&c, &r3, b, H, W, C, tmp);
            distinct += memcmp(a, b, sz) != 0;
        }
        CHECK(changed > 32 && distinct > 32, "%s: only %d of 64 images changed, %d differ across keys", specs[s], changed,
              distinct);
    }
    free(a);
    free(b);
    free(tmp);
    free(src);
}

// The fast ops of autoaug.c against the scalar reference of autoaug_ref.c (the code the Python
// checks above held against torchvision before the fast paths existed): the same bytes for every
// op, on sizes from 3 x 3 to the v2 recipe's 176 x 176, grey and RGB, with and without a fill,
// at TrivialAugmentWide's and RandAugment's magnitudes and in between, including whole-pixel
// translations (the row-copy path), fractional ones (timm's), translations past the image, and
// the shear/rotation interiors (the SSE2 path) and borders.
static void fast_vs_reference(void) {
    static const int sizes[][2] = {{3, 3}, {4, 7}, {29, 37}, {64, 48}, {176, 176}};
    const uint8_t fill3[3] = {124, 116, 104};
    Rng pr = rng_make(77, 1, 2);
    size_t maxsz = 176 * 176 * 3;
    uint8_t *src = ct_alloc(maxsz), *a = ct_alloc(maxsz), *b = ct_alloc(maxsz), *t1 = ct_alloc(maxsz),
            *t2 = ct_alloc(maxsz);
    int cases = 0, failed = 0;
    for (size_t si = 0; si < CT_ARRAY_LEN(sizes); si++)
        for (int C = 1; C <= 3; C += 2) {
            const int H = sizes[si][0], W = sizes[si][1], big = H * W > 10000;
            const size_t sz = (size_t)H * W * C;
            for (int op = 0; op < AA_N_OPS; op++) {
                const int geo = op >= AA_SHEAR_X && op <= AA_ROTATE;
                const int reps = big ? (geo ? 6 : 3) : (geo ? 150 : 10);
                for (int k = 0; k < reps; k++) {
                    const int hasfill = k & 1;
                    double mag = 0;
                    float u = rng_uniform(&pr) * 2 - 1;
                    switch (op) {
                    case AA_SHEAR_X:
                    case AA_SHEAR_Y: mag = 0.99 * u; break;
                    case AA_TRANSLATE_X:
                    case AA_TRANSLATE_Y: mag = k < 4 ? (double)((k - 2) * W) : 40.0 * u; break;  // past the image too
                    case AA_ROTATE: mag = k == 2 ? 90 : k == 3 ? 180 : 135.0 * u; break;
                    case AA_BRIGHTNESS:
                    case AA_COLOR:
                    case AA_CONTRAST:
                    case AA_SHARPNESS: mag = 0.99 * u; break;
                    case AA_POSTERIZE: mag = k % 9; break;
                    case AA_SOLARIZE: mag = 128 + 128 * u; break;
                    case AA_SOLARIZE_ADD: mag = 110 * (u + 1) / 2; break;
                    default: break;
                    }
                    make_image(src, W, H, C, 300 + (uint64_t)cases);
                    // Narrow histograms and flat channels for autocontrast and equalize, every other time.
                    if ((op == AA_AUTOCONTRAST || op == AA_EQUALIZE) && (k & 2))
                        for (size_t j = 0; j < sz; j++) src[j] = (uint8_t)(j % C == 0 ? 77 : CT_MIN(60 + src[j] / 3, 120));
                    memcpy(a, src, sz);
                    memcpy(b, src, sz);
                    const uint8_t *fill = hasfill ? fill3 : NULL;
                    // Odd reps of the translations: timm's fractional ones through aa_affine.
                    if ((op == AA_TRANSLATE_X || op == AA_TRANSLATE_Y) && k >= 4 && (k & 2)) {
                        double tx = op == AA_TRANSLATE_X ? mag * 0.37 : 0, ty = op == AA_TRANSLATE_Y ? mag * 0.37 : 0;
                        aa_affine(a, H, W, C, 0, tx, ty, 0, 0, 0, fill, t1);
                        aa_affine_ref(b, H, W, C, 0, tx, ty, 0, 0, 0, fill, t2);
                    } else {
                        aa_apply_op((AaOp)op, mag, fill, a, H, W, C, t1);
                        aa_apply_op_ref((AaOp)op, mag, fill, b, H, W, C, t2);
                    }
                    cases++;
                    if (memcmp(a, b, sz)) {
                        size_t nd = 0;
                        for (size_t j = 0; j < sz; j++) nd += a[j] != b[j];
                        if (failed++ < 10)
                            CHECK(0, "%s mag %g on %dx%dx%d fill %d: %zu of %zu bytes differ from the reference", OPNAME[op],
                                  mag, H, W, C, hasfill, nd, sz);
                    }
                }
            }
        }
    CHECK(failed == 0, "%d of %d cases differ from the reference", failed, cases);
    printf("fast ops vs the scalar reference: %d cases, %d differ\n", cases, failed);
    // The integer form of sharpness's blur, for every neighbour sum and centre.
    const double k1 = (double)(1.0f / 13.0f), k5 = (double)(5.0f / 13.0f);
    int bad = 0;
    for (int sum = 0; sum <= 8 * 255; sum++)
        for (int c = 0; c <= 255; c++) {
            double v = sum * k1 + c * k5;
            bad += (int)nearbyint(v) != (sum + 5 * c + 6) / 13;
        }
    CHECK(bad == 0, "sharpness: (s + 5c + 6) / 13 differs from the float reference for %d (s, c)", bad);
    // Every RGB triple once (a 4096 x 4096 image) through saturation, whose grey level and blend
    // the fast path takes from tables of the reference's products.
    const size_t npx = (size_t)1 << 24;
    uint8_t *all = ct_alloc(npx * 3), *all2 = ct_alloc(npx * 3);
    for (double f = -0.75; f <= 0.99; f += 0.87) {
        for (size_t i = 0; i < npx; i++) all[i * 3] = (uint8_t)(i >> 16), all[i * 3 + 1] = (uint8_t)(i >> 8), all[i * 3 + 2] = (uint8_t)i;
        memcpy(all2, all, npx * 3);
        aa_apply_op(AA_COLOR, f, NULL, all, 4096, 4096, 3, NULL);
        aa_apply_op_ref(AA_COLOR, f, NULL, all2, 4096, 4096, 3, NULL);
        size_t nd = 0;
        for (size_t i = 0; i < npx * 3; i++) nd += all[i] != all2[i];
        CHECK(nd == 0, "Color mag %g on every RGB triple: %zu bytes differ from the reference", f, nd);
    }
    free(all);
    free(all2);
    free(src);
    free(a);
    free(b);
    free(t1);
    free(t2);
}

// The warp's AVX2 path (eight interior pixels a step, chosen at run time) against its SSE2 baseline
// and the scalar reference, byte for byte: random affine warps (rotation, both shears, fractional
// translations, about the centre and the corner, with and without a fill) on random images of
// awkward sizes (odd widths, widths around the 8-pixel group and the 64-pixel chunk, one-row and
// one-column strips), so groups straddle borders, chunk ends and the image's last pixels.
static void warp_simd_vs_baseline(void) {
    static const int sizes[][2] = {{1, 9}, {9, 1}, {2, 8}, {7, 9}, {8, 16}, {13, 31}, {17, 63}, {31, 65},
                                   {61, 97}, {100, 57}, {129, 130}, {176, 176}};
    const uint8_t fill3[3] = {200, 7, 131};
    Rng pr = rng_make(2611, 3, 5);
    size_t maxsz = 176 * 176 * 3;
    uint8_t *src = ct_alloc(maxsz), *a = ct_alloc(maxsz), *b = ct_alloc(maxsz), *r = ct_alloc(maxsz),
            *t = ct_alloc(maxsz);
    int cases = 0, bad_base = 0, bad_ref = 0;
    for (size_t si = 0; si < CT_ARRAY_LEN(sizes); si++) {
        const int H = sizes[si][0], W = sizes[si][1];
        const size_t sz = (size_t)H * W * 3;
        const int reps = H * W > 10000 ? 12 : 40;
        for (int k = 0; k < reps; k++) {
            const double angle = (k % 4 == 0) ? 0 : 180.0 * (2 * rng_uniform(&pr) - 1);
            const double shx = (k % 3 == 0) ? 0 : 44.0 * (2 * rng_uniform(&pr) - 1);
            const double shy = (k % 5 == 0) ? 0 : 44.0 * (2 * rng_uniform(&pr) - 1);
            const double tx = (k & 1) ? W * 0.6 * (2 * rng_uniform(&pr) - 1) : 0;
            const double ty = (k & 2) ? H * 0.6 * (2 * rng_uniform(&pr) - 1) : 0;
            const int center_zero = (k >> 2) & 1;
            const uint8_t *fill = (k % 3 == 1) ? fill3 : NULL;
            make_image(src, W, H, 3, 7000 + (uint64_t)cases);
            memcpy(a, src, sz);
            memcpy(b, src, sz);
            memcpy(r, src, sz);
            aa_affine(a, H, W, 3, angle, tx, ty, shx, shy, center_zero, fill, t);
            int was = aa_set_simd(0);
            aa_affine(b, H, W, 3, angle, tx, ty, shx, shy, center_zero, fill, t);
            aa_set_simd(was);
            aa_affine_ref(r, H, W, 3, angle, tx, ty, shx, shy, center_zero, fill, t);
            cases++;
            if (memcmp(a, b, sz) && bad_base++ < 5)
                CHECK(0, "warp %dx%d angle %g shear %g,%g translate %g,%g fill %d: AVX2 and SSE2 paths differ", H, W,
                      angle, shx, shy, tx, ty, fill != NULL);
            if (memcmp(a, r, sz) && bad_ref++ < 5)
                CHECK(0, "warp %dx%d angle %g shear %g,%g translate %g,%g fill %d: differs from the reference", H, W,
                      angle, shx, shy, tx, ty, fill != NULL);
        }
    }
    CHECK(bad_base == 0 && bad_ref == 0, "warp: %d of %d cases differ between AVX2 and SSE2, %d from the reference",
          bad_base, cases, bad_ref);
    printf("warp AVX2 vs SSE2 vs reference: %d cases, %d / %d differ%s\n", cases, bad_base, bad_ref,
           __builtin_cpu_supports("avx2") ? "" : " (no AVX2 on this CPU: both runs took the SSE2 path)");
    free(src);
    free(a);
    free(b);
    free(r);
    free(t);
}

int main(void) {
    test_rng = rng_make(26, 1, 1);
    warp_simd_vs_baseline();
    fast_vs_reference();
    grammar_checks();
    timm_level_checks();
    policy_checks();
    tv_policy_magnitudes();
    python_checks();
    return test_summary("test_autoaug");
}
