// Sampler and augmentation geometry:
//  - the epoch permutation is a permutation, a pure function of (seed, epoch);
//  - train: every rank gets exactly floor(N / (B*R)) batches of B, the ranks' batches tile the first
//    floor(N / (B*R)) global batches of the permutation, only the last partial global batch is dropped;
//  - eval: every record exactly once across ranks for record counts not divisible by ranks x batch;
//  - RandomResizedCrop boxes stay inside the image for all shapes, and their statistics match
//    torchvision's own RandomResizedCrop.get_params (run by /usr/bin/python3) within sampling error;
//  - flip rate 1/2; eval geometry and the train crop+flip pipeline match torchvision pixel for pixel
//    within one level (Resize + CenterCrop; resized_crop + hflip).
#include <math.h>
#include <string.h>
#include <unistd.h>

#include "loader/augment.h"
#include "loader/sampler.h"
#include "tests/test.h"
#include "util/common.h"

static void check_perm(void) {
    uint64_t n = 1000;
    uint32_t *p = ct_alloc(n * 4), *q = ct_alloc(n * 4), *r = ct_alloc(n * 4);
    uint8_t *seen = ct_zalloc(n);
    sampler_permutation(p, n, 42, 3);
    sampler_permutation(q, n, 42, 3);
    sampler_permutation(r, n, 42, 4);
    int ok = 1;
    for (uint64_t i = 0; i < n; i++) {
        ok &= p[i] < n && !seen[p[i]];
        if (p[i] < n) seen[p[i]] = 1;
    }
    CHECK(ok, "not a permutation");
    CHECK(memcmp(p, q, n * 4) == 0, "permutation not reproducible");
    int same = 0, fixed = 0;
    for (uint64_t i = 0; i < n; i++) {
        same += p[i] == r[i];
        fixed += p[i] == i;
    }
    CHECK(same < 20, "epochs 3 and 4 agree in %d places", same);
    CHECK(fixed < 20, "%d fixed points: not shuffled", fixed);
    // Position of record 0 is uniform over epochs (chi-square-free check: mean near n/2).
    double mean = 0;
    for (int e = 0; e < 400; e++) {
        sampler_permutation(p, n, 7, e);
        for (uint64_t i = 0; i < n; i++)
            if (p[i] == 0) mean += i;
    }
    mean /= 400;
    CHECK(fabs(mean - 499.5) < 4 * 288.7 / sqrt(400), "record 0's mean position %.1f", mean);
    free(p);
    free(q);
    free(r);
    free(seen);
}

static void check_train_share(uint64_t n, int B, int R) {
    uint64_t G = (uint64_t)B * R, full = n / G;
    uint32_t *perm = ct_alloc((n ? n : 1) * 4);
    sampler_permutation(perm, n, 9, 2);
    uint64_t *idx = ct_alloc(B * sizeof(uint64_t));
    int ok = 1;
    for (int r = 0; r < R; r++) {
        Sampler s;
        sampler_init(&s, n, B, r, R, 1, 9);
        sampler_set_epoch(&s, 2);
        CHECK(sampler_num_batches(&s) == (int64_t)full, "n=%llu B=%d R=%d: %lld batches, want %llu",
              (unsigned long long)n, B, R, (long long)sampler_num_batches(&s), (unsigned long long)full);
        CHECK(sampler_num_samples(&s) == full * B, "train samples per rank");
        for (uint64_t b = 0; b < full; b++) {
            int c = sampler_batch(&s, (int64_t)b, idx);
            ok &= c == B;
            for (int i = 0; i < c; i++) ok &= idx[i] == perm[b * G + (uint64_t)r * B + i];
        }
        CHECK(sampler_batch(&s, (int64_t)full, idx) == 0, "batch past the end not empty");
        sampler_free(&s);
    }
    CHECK(ok, "n=%llu B=%d R=%d: rank batches do not tile the permutation's global batches",
          (unsigned long long)n, B, R);
    CHECK(n - full * G < G, "dropped more than a partial global batch");
    free(perm);
    free(idx);
}

static void check_eval_cover(uint64_t n, int B, int R) {
    uint32_t *hits = ct_zalloc((n ? n : 1) * 4);
    uint64_t *idx = ct_alloc(B * sizeof(uint64_t));
    int ok = 1;
    int64_t maxb = 0, minb = INT64_MAX;
    for (int r = 0; r < R; r++) {
        Sampler s;
        sampler_init(&s, n, B, r, R, 0, 1);
        sampler_set_epoch(&s, 5);
        int64_t nb = sampler_num_batches(&s);
        maxb = CT_MAX(maxb, nb);
        minb = CT_MIN(minb, nb);
        uint64_t tot = 0;
        for (int64_t b = 0; b < nb; b++) {
            int c = sampler_batch(&s, b, idx);
            ok &= c >= 1 && c <= B && (b == nb - 1 || c == B);
            for (int i = 0; i < c; i++) {
                ok &= idx[i] < n;
                if (idx[i] < n) hits[idx[i]]++;
            }
            tot += c;
        }
        ok &= tot == sampler_num_samples(&s);
        sampler_free(&s);
    }
    for (uint64_t i = 0; i < n; i++) ok &= hits[i] == 1;
    CHECK(ok, "eval n=%llu B=%d R=%d: records not covered exactly once", (unsigned long long)n, B, R);
    CHECK(maxb - minb <= 1, "eval ranks differ by %lld batches", (long long)(maxb - minb));
    free(hits);
    free(idx);
}

static void check_rrc_bounds(void) {
    int shapes[][2] = {{1, 1}, {1, 500}, {500, 1}, {2, 3}, {256, 341}, {341, 256}, {100, 400}, {28, 28}, {7, 1000}};
    int ok = 1;
    for (size_t s = 0; s < CT_ARRAY_LEN(shapes); s++) {
        int H = shapes[s][0], W = shapes[s][1];
        for (int i = 0; i < 3000; i++) {
            Rng r = rng_make(3, s, i);
            CropBox b;
            rrc_get_params(&r, H, W, 0.08f, 1.0f, 0.75f, 4.0f / 3.0f, &b);
            ok &= b.height >= 1 && b.width >= 1 && b.top >= 0 && b.left >= 0 && b.top + b.height <= H &&
                  b.left + b.width <= W;
        }
    }
    CHECK(ok, "RandomResizedCrop box outside the image");
}

// Stats of N boxes for an H x W image: means of h, w, top, left, h*w, the fallback share, and two
// second moments (log aspect squared: tells log-uniform from uniform ratios; width squared).
enum { NSTAT = 8 };
static void rrc_stats(int H, int W, int n, double *mean, double *sd) {
    double s[NSTAT] = {0}, s2[NSTAT] = {0};
    for (int i = 0; i < n; i++) {
        Rng r = rng_make(11, (uint64_t)H * 100000 + W, i);
        CropBox b;
        int tries = rrc_get_params(&r, H, W, 0.08f, 1.0f, 0.75f, 4.0f / 3.0f, &b);
        double la = log((double)b.width / b.height);
        double v[NSTAT] = {b.height, b.width, b.top, b.left, (double)b.height * b.width, tries == 11, la * la,
                           (double)b.width * b.width};
        for (int k = 0; k < NSTAT; k++) {
            s[k] += v[k];
            s2[k] += v[k] * v[k];
        }
    }
    for (int k = 0; k < NSTAT; k++) {
        mean[k] = s[k] / n;
        sd[k] = sqrt(fmax(s2[k] / n - mean[k] * mean[k], 0));
    }
}

static const char *PY =
    "import sys, numpy as np, torch\n"
    "import torchvision.transforms as T, torchvision.transforms.functional as F\n"
    "d = sys.argv[1]\n"
    "torch.manual_seed(0)\n"
    "out = []\n"
    "for line in open(d + '/rrc.txt'):\n"
    "    H, W, n = [int(v) for v in line.split()]\n"
    "    img = torch.zeros(1, H, W, dtype=torch.uint8)\n"
    "    v = np.zeros((n, 8))\n"
    "    for k in range(n):\n"
    "        i, j, h, w = T.RandomResizedCrop.get_params(img, [0.08, 1.0], [3.0 / 4.0, 4.0 / 3.0])\n"
    "        v[k] = [h, w, i, j, h * w, 0, np.log(w / h) ** 2, w * w]\n"
    "    out.append(' '.join('%.6f' % m for m in v.mean(0)))\n"
    "open(d + '/rrc_out.txt', 'w').write('\\n'.join(out) + '\\n')\n"
    "for line in open(d + '/px.txt'):\n"
    "    f = [int(v) for v in line.split()]\n"
    "    k, H, W, C, mode, crop, resize, top, left, h, w, flip = f\n"
    "    a = np.fromfile('%s/in%d.raw' % (d, k), dtype=np.uint8).reshape(H, W, C)\n"
    "    t = torch.from_numpy(a).permute(2, 0, 1).contiguous()\n"
    "    if mode == 0:\n"
    "        o = F.resized_crop(t, top, left, h, w, [crop, crop], antialias=True)\n"
    "        if flip: o = F.hflip(o)\n"
    "    else:\n"
    "        o = T.CenterCrop(crop)(T.Resize(resize, antialias=True)(t))\n"
    "    o.permute(1, 2, 0).contiguous().numpy().tofile('%s/out%d.raw' % (d, k))\n";

static void make_image(uint8_t *img, int w, int h, int C, uint64_t seed) {
    Rng r = rng_make(seed, 4, 5);
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++)
            for (int c = 0; c < C; c++) {
                double v = 128 + 100 * sin(0.11 * x + 0.07 * y * (c + 1)) + 25 * (rng_uniform(&r) - 0.5);
                img[((size_t)y * w + x) * C + c] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
            }
}

static void check_against_torchvision(void) {
    char dir[] = "/tmp/ct_test_sampler_XXXXXX";
    if (!mkdtemp(dir)) ct_die_errno("mkdtemp");
    char path[512], cmd[1200];
    // RRC statistics: the box distribution, not the bytes (torch's generator is not ours).
    int shapes[][2] = {{256, 341}, {100, 400}, {64, 64}};
    int ns = CT_ARRAY_LEN(shapes), n = 20000;
    snprintf(path, sizeof path, "%s/rrc.txt", dir);
    FILE *f = fopen(path, "w");
    for (int s = 0; s < ns; s++) fprintf(f, "%d %d %d\n", shapes[s][0], shapes[s][1], n);
    fclose(f);

    // Pixel cases: train (crop box from our sampler, flip) and eval (Resize + CenterCrop).
    typedef struct {
        int H, W, C, train, crop, resize;
    } Px;
    Px px[] = {{256, 341, 3, 1, 224, 0}, {341, 256, 3, 1, 224, 0}, {64, 64, 3, 1, 32, 0}, {28, 28, 1, 1, 24, 0},
               {256, 341, 3, 0, 224, 256}, {375, 500, 3, 0, 224, 256}, {64, 80, 3, 0, 32, 36}, {28, 28, 1, 0, 24, 0},
               {97, 61, 3, 0, 56, 70}};
    int np = CT_ARRAY_LEN(px);
    uint8_t *ours[16];
    snprintf(path, sizeof path, "%s/px.txt", dir);
    f = fopen(path, "w");
    for (int k = 0; k < np; k++) {
        Px *p = &px[k];
        size_t sz = (size_t)p->H * p->W * p->C;
        uint8_t *img = ct_alloc(sz);
        make_image(img, p->W, p->H, p->C, 50 + k);
        snprintf(path, sizeof path, "%s/in%d.raw", dir, k);
        FILE *g = fopen(path, "wb");
        if (!g || fwrite(img, 1, sz, g) != sz) ct_die_errno("%s", path);
        fclose(g);
        AugmentConfig a = {.crop = p->crop, .train = p->train, .resize = p->resize, .flip = 1, .seed = 77};
        augment_config_defaults(&a);
        // Pick an epoch/index whose draw flips, so the flip path is compared too (train cases).
        AugmentPlan plan;
        uint64_t index = 0;
        do augment_plan(&a, p->H, p->W, 1, index++, &plan);
        while (p->train && plan.flip == (k % 2) && index < 100);
        ours[k] = ct_alloc((size_t)p->crop * p->crop * p->C);
        augment_apply(&a, &plan, img, p->W, p->C, ours[k], NULL);
        fprintf(f, "%d %d %d %d %d %d %d %d %d %d %d %d\n", k, p->H, p->W, p->C, p->train ? 0 : 1, p->crop, a.resize,
                plan.by, plan.bx, plan.bh, plan.bw, plan.flip);
        free(img);
    }
    fclose(f);
    snprintf(path, sizeof path, "%s/ref.py", dir);
    f = fopen(path, "w");
    fputs(PY, f);
    fclose(f);
    const char *py = getenv("TORCH_PY") ? getenv("TORCH_PY") : "/usr/bin/python3";
    snprintf(cmd, sizeof cmd, "%s %s/ref.py %s", py, dir, dir);
    int rc = system(cmd);
    CHECK(rc == 0, "reference script failed: %s", cmd);
    if (rc == 0) {
        snprintf(path, sizeof path, "%s/rrc_out.txt", dir);
        f = fopen(path, "r");
        const char *names[NSTAT] = {"height", "width", "top", "left", "area", "fallback", "logasp^2", "width^2"};
        for (int s = 0; s < ns; s++) {
            double ref[NSTAT], mean[NSTAT], sd[NSTAT];
            for (int k = 0; k < NSTAT; k++)
                if (fscanf(f, "%lf", &ref[k]) != 1) ct_die("short rrc_out.txt");
            rrc_stats(shapes[s][0], shapes[s][1], n, mean, sd);
            for (int k = 0; k < NSTAT; k++) {
                if (k == 5) continue;  // torchvision does not say when it fell back
                // Both are means of n draws: their difference has sd ~ sd * sqrt(2/n); allow 5 of those.
                double tol = 5 * sd[k] * sqrt(2.0 / n) + 1e-9;
                printf("rrc %dx%d %-8s ours %12.5f torchvision %12.5f (tol %.5f)\n", shapes[s][0], shapes[s][1],
                       names[k], mean[k], ref[k], tol);
                CHECK(fabs(mean[k] - ref[k]) <= tol, "rrc %dx%d: mean %s %.3f vs torchvision %.3f", shapes[s][0],
                      shapes[s][1], names[k], mean[k], ref[k]);
            }
            printf("rrc %dx%d fallback share %.4f\n", shapes[s][0], shapes[s][1], mean[5]);
        }
        fclose(f);
        for (int k = 0; k < np; k++) {
            Px *p = &px[k];
            size_t sz = (size_t)p->crop * p->crop * p->C, got = 0;
            snprintf(path, sizeof path, "%s/out%d.raw", dir, k);
            uint8_t *ref = (uint8_t *)ct_read_file(path, &got);
            int m = 0;
            if (got == sz)
                for (size_t i = 0; i < sz; i++) m = CT_MAX(m, abs((int)ours[k][i] - ref[i]));
            printf("pixels case %d (%s %dx%dx%d -> %d): max diff %d\n", k, p->train ? "train" : "eval", p->H, p->W,
                   p->C, p->crop, m);
            CHECK(got == sz && m <= 1, "case %d: %s pipeline differs from torchvision by %d levels", k,
                  p->train ? "train" : "eval", m);
            free(ref);
        }
    }
    for (int k = 0; k < np; k++) free(ours[k]);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) ct_warn("could not remove %s", dir);
}

int main(void) {
    check_perm();
    uint64_t ns[] = {0, 1, 5, 20, 97, 1000, 1001, 4099};
    int bs[] = {1, 3, 16}, rs[] = {1, 2, 3, 4, 8};
    for (size_t i = 0; i < CT_ARRAY_LEN(ns); i++)
        for (size_t j = 0; j < CT_ARRAY_LEN(bs); j++)
            for (size_t k = 0; k < CT_ARRAY_LEN(rs); k++) {
                check_train_share(ns[i], bs[j], rs[k]);
                check_eval_cover(ns[i], bs[j], rs[k]);
            }
    check_rrc_bounds();
    // Flip rate and plan determinism.
    AugmentConfig a = {.crop = 32, .train = 1, .flip = 1, .seed = 5};
    augment_config_defaults(&a);
    int flips = 0, same = 1;
    for (int i = 0; i < 20000; i++) {
        AugmentPlan p, q;
        augment_plan(&a, 64, 64, 3, i, &p);
        augment_plan(&a, 64, 64, 3, i, &q);
        flips += p.flip;
        same &= memcmp(&p, &q, sizeof p) == 0;
    }
    CHECK(same, "augment_plan not a pure function of its inputs");
    CHECK(fabs(flips / 20000.0 - 0.5) < 0.015, "flip rate %.4f", flips / 20000.0);
    check_against_torchvision();
    return test_summary("test_sampler");
}
