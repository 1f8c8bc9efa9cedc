// nn/fold.h, the BN-folded inference executor, against the reference eval forward (nn/model_cpu.h),
// and the fused conv epilogue (conv2d_forward_ep) against conv2d_forward plus separate passes.
// tests/test_fold_torch.sh checks the folded logits against torchvision in float64.
#include <omp.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "nn/fold.h"
#include "nn/gemm.h"
#include "nn/layers.h"
#include "nn/model_cpu.h"
#include "nn/resnet.h"
#include "nn/winograd.h"
#include "tests/test.h"
#include "util/common.h"
#include "util/rng.h"

// The references here are the direct/GEMM convolutions: the training executor's Winograd and
// small-map routes (nn/conv.c) stay off, so Winograd is compared against something else and
// conv2d_forward_ep against the route it must match bit for bit.
static const ExecOptions DIRECT = {EXEC_CONV_V2, 1, 1, 1, 1, 1, 1, 0, 0};

// conv2d_forward_ep must equal conv2d_forward followed by + bias, + res, ReLU, bit for bit: the
// direct kernels (small C and K, AVX-512) and the GEMM (pointwise, im2col, depth over one K block).
static void test_conv_ep(void) {
    int packed_checked = 0;
    const int shapes[][8] = {
        // N, H, W, C, K, R, stride, pad
        {2, 9, 7, 3, 16, 3, 1, 1},   {1, 7, 5, 5, 7, 3, 2, 1},     {3, 6, 6, 19, 33, 1, 1, 0},
        {2, 9, 11, 24, 40, 1, 2, 0}, {1, 23, 21, 3, 64, 7, 2, 3},  {2, 10, 9, 64, 64, 3, 1, 1},
        {2, 8, 8, 96, 40, 3, 1, 1},  {1, 13, 3, 300, 17, 1, 1, 0}, {5, 5, 5, 17, 130, 3, 2, 1},
        {2, 6, 7, 70, 45, 3, 1, 1},  {4, 9, 9, 40, 96, 1, 2, 0},
    };
    for (size_t t = 0; t < sizeof shapes / sizeof shapes[0]; t++) {
        const int *d = shapes[t];
        ConvShape s = conv_shape(d[0], d[1], d[2], d[3], d[4], d[5], d[5], d[6], d[7]);
        const size_t nin = (size_t)s.N * s.H * s.W * s.C, nout = (size_t)s.N * s.P * s.Q * s.K;
        float *x = rand_buf(nin, 1.0f), *w = rand_buf((size_t)s.K * s.R * s.S * s.C, 0.3f);
        float *bias = rand_buf(s.K, 0.5f), *res = rand_buf(nout, 1.0f);
        float *ref = ct_alloc(nout * sizeof(float)), *got = ct_alloc(nout * sizeof(float));
        const size_t rsc = (size_t)s.R * s.S * s.C;
        float *wt = ct_alloc(rsc * s.K * sizeof(float));  // RSCK
        for (int k = 0; k < s.K; k++)
            for (size_t j = 0; j < rsc; j++) wt[j * s.K + k] = w[k * rsc + j];
        for (int mode = 0; mode < 4; mode++) {
            const int use_res = mode & 1, relu = mode >> 1;
            conv2d_forward_ex(&s, ref, x, w, &DIRECT);
            for (size_t i = 0; i < nout; i++) {
                float v = ref[i] + bias[i % s.K];
                if (use_res) v += res[i];
                ref[i] = relu && !(v > 0) ? 0.0f : v;
            }
            memset(got, 0xff, nout * sizeof(float));  // NaN: every element must be written
            conv2d_forward_ep(&s, got, x, wt, 0, bias, use_res ? res : NULL, relu);
            CHECK(!memcmp(ref, got, nout * sizeof(float)), "conv ep shape %zu (C=%d K=%d %dx%d/%d) res %d relu %d: %.3g",
                  t, s.C, s.K, s.R, s.S, s.stride, use_res, relu, max_abs_diff(got, ref, nout));
            // Weights packed once into GEMM panels: the same bits.
            const size_t np = conv2d_packed_weights_size(&s);
            if (np) {
                float *wp = ct_alloc(np * sizeof(float));
                conv2d_pack_weights(&s, wp, wt);
                memset(got, 0xff, nout * sizeof(float));
                conv2d_forward_ep(&s, got, x, wp, 1, bias, use_res ? res : NULL, relu);
                CHECK(!memcmp(ref, got, nout * sizeof(float)), "packed conv ep shape %zu (C=%d K=%d) res %d relu %d: %.3g", t,
                      s.C, s.K, use_res, relu, max_abs_diff(got, ref, nout));
                packed_checked++;
                free(wp);
            }
        }
        free(x), free(w), free(wt), free(bias), free(res), free(ref), free(got);
    }
    printf("conv epilogue: %d checks with packed weights\n", packed_checked);
    CHECK(packed_checked > 0 || strcmp(sgemm_kernel_name(), "avx512"), "no shape took packed weights");
}

// Winograd F(2x2, 3x3) against the direct convolution with the same epilogue: odd output sizes
// (clipped edge tiles), 1x1 images, tile counts that are not a multiple of the block, several
// block sizes of C and K. Winograd adds a few roundings (the transforms) to each output: held to
// 1e-5 of the output's norm (measured up to ~1e-6); a coefficient off by 2% gives 1e-2.
static void test_winograd(void) {
    const int shapes[][5] = {{3, 7, 9, 16, 32}, {1, 1, 1, 32, 64}, {2, 14, 14, 64, 64}, {1, 5, 6, 48, 96},
                             {2, 3, 29, 128, 32}, {1, 7, 7, 512, 512}};
    if (strcmp(sgemm_kernel_name(), "avx512")) {
        printf("winograd: no AVX-512 here, the fold keeps direct convolutions\n");
        return;
    }
    for (size_t t = 0; t < sizeof shapes / sizeof shapes[0]; t++) {
        const int *d = shapes[t];
        ConvShape s = conv_shape(d[0], d[1], d[2], d[3], d[4], 3, 3, 1, 1);
        CHECK(winograd_ok(&s), "shape %zu should take winograd", t);
        const size_t nin = (size_t)s.N * s.H * s.W * s.C, nout = (size_t)s.N * s.P * s.Q * s.K;
        float *x = rand_buf(nin, 1.0f), *w = rand_buf((size_t)s.K * 9 * s.C, 0.2f);
        float *bias = rand_buf(s.K, 0.5f), *res = rand_buf(nout, 1.0f);
        float *u = ct_alloc((size_t)16 * s.C * s.K * sizeof(float));
        float *ref = ct_alloc(nout * sizeof(float)), *got = ct_alloc(nout * sizeof(float));
        winograd_weights(u, w, s.K, s.C);
        for (int mode = 0; mode < 3; mode++) {
            const float *b = mode ? bias : NULL, *r = mode == 2 ? res : NULL;
            conv2d_forward_ex(&s, ref, x, w, &DIRECT);
            for (size_t i = 0; i < nout; i++) {
                float v = ref[i] + (b ? b[i % s.K] : 0.0f) + (r ? r[i] : 0.0f);
                ref[i] = mode == 2 && !(v > 0) ? 0.0f : v;
            }
            memset(got, 0xff, nout * sizeof(float));
            conv3x3_winograd_ep(&s, got, x, u, b, r, mode == 2);
            const double e = rel_err_norm(got, ref, nout);
            CHECK(e <= 1e-5, "winograd shape %zu (N=%d %dx%d C=%d K=%d) mode %d: rel err %.3g", t, s.N, s.H, s.W, s.C, s.K,
                  mode, e);
            if (mode == 2) printf("winograd N=%d %2dx%-2d C=%3d K=%3d: rel. norm error vs direct %.2e\n", s.N, s.H, s.W, s.C, s.K, e);
        }
        free(x), free(w), free(bias), free(res), free(u), free(ref), free(got);
    }
}

// Non-trivial BN state: gammas around 1 (some negative), running means and variances well away
// from 0 / 1 (down to 0.05, where folding scales weights by up to ~4.5).
static void randomize_bn(ResNet *m, uint64_t seed) {
    Rng r = rng_make(seed, 7, 0);
    for (int i = 0; i < m->n_entries; i++) {
        const StateEntry *e = &m->entries[i];
        float *p = e->kind == ENTRY_PARAM ? m->params + e->offset : e->kind == ENTRY_BUF ? m->bufs + e->offset : NULL;
        if (!p || e->is_conv || !strncmp(e->name, "fc.", 3)) continue;
        for (size_t j = 0; j < e->count; j++) {
            if (strstr(e->name, "running_var")) p[j] = 0.05f + 1.5f * rng_uniform(&r);
            else if (strstr(e->name, "running_mean")) p[j] = 0.3f * rng_normal(&r);
            else if (strstr(e->name, "weight")) p[j] = 1.0f + 0.4f * rng_normal(&r);
            else p[j] = 0.2f * rng_normal(&r);
        }
    }
}

// Folded vs reference eval logits. The fold multiplies each weight by its channel's BN scale
// before the sum instead of scaling the sum: both are float32 with about 1 ulp (6e-8 relative)
// per rounding, so each layer's outputs differ by a few ulp of their magnitude and the difference
// grows with depth; measured 3e-7 (resnet20) to 1.3e-6 (resnet18), 3e-6 for resnet34. 1e-5 leaves 3x
// room and still catches a wrong fold (leaving out eps gives 3e-4 to 1.2e-3).
// arch may end in "+blurpool": the network with BlurPool's blurs (folded as layers of their own).
static void test_arch(const char *arch, int in_ch, int classes, int N, int H, int W) {
    char base[32];
    snprintf(base, sizeof base, "%s", arch);
    char *plus = strchr(base, '+');
    if (plus) *plus = 0;
    ResNet *m = resnet_create_ex(base, in_ch, classes, plus != NULL);
    resnet_init(m, 5, 0);
    randomize_bn(m, 6);
    const size_t nx = (size_t)N * H * W * in_ch;
    uint8_t *xu = ct_alloc(nx);
    for (size_t i = 0; i < nx; i++) xu[i] = (uint8_t)rng_below(&test_rng, 256);
    const float mean[3] = {0.485f, 0.456f, 0.406f}, std[3] = {0.229f, 0.224f, 0.225f};
    float *x = ct_alloc(nx * sizeof(float));
    normalize_u8(x, xu, (size_t)N * H * W, in_ch, mean, std);
    const size_t nl = (size_t)N * classes;

    CpuExec *e = cpu_exec_create_opts(m, &DIRECT);
    float *ref = ct_alloc(nl * sizeof(float));
    memcpy(ref, cpu_forward(e, m, x, N, H, W, 0), nl * sizeof(float));
    FoldNet *f = fold_create(m);
    CHECK(f != NULL, "%s does not fold", arch);
    if (!f) return;
    float *got = ct_alloc(nl * sizeof(float));
    FoldNet *fd = fold_create_ex(m, 0);  // without Winograd
    const double err_direct = rel_err_norm(fold_forward(fd, x, N, H, W), ref, nl);
    CHECK(err_direct <= 1e-5, "%s: folded (no Winograd) vs reference eval %.3g", arch, err_direct);
    fold_free(fd);
    memcpy(got, fold_forward(f, x, N, H, W), nl * sizeof(float));
    double err = rel_err_norm(got, ref, nl);
    printf("%-9s %d x %dx%dx%d: %2d folded ops, %zu KB of activation buffers (reference eval %zu KB); "
           "folded vs reference logits rel. norm %.2e (no Winograd %.2e)\n",
           arch, N, H, W, in_ch, fold_op_count(f), fold_arena_bytes(f) >> 10, cpu_exec_arena_bytes(e) >> 10, err, err_direct);
    CHECK(err <= 1e-5, "%s: folded vs reference eval %.3g", arch, err);

    // The uint8 entry is normalize_u8 + the float entry.
    CHECK(!memcmp(fold_forward_u8(f, xu, N, H, W, mean, std), got, nl * sizeof(float)), "%s: u8 path", arch);
    // Thread count does not change a bit.
    const int nt = omp_get_max_threads();
    omp_set_num_threads(1);
    CHECK(!memcmp(fold_forward(f, x, N, H, W), got, nl * sizeof(float)), "%s: 1 thread differs", arch);
    omp_set_num_threads(nt > 1 ? nt : 3);
    CHECK(!memcmp(fold_forward(f, x, N, H, W), got, nl * sizeof(float)), "%s: %d threads differ", arch, nt > 1 ? nt : 3);
    omp_set_num_threads(nt);
    // Each image's logits are the same bits alone as in the batch (the plan keeps the larger N).
    for (int n = 0; n < N; n++) {
        const float *one = fold_forward(f, x + (size_t)n * H * W * in_ch, 1, H, W);
        CHECK(!memcmp(one, got + (size_t)n * classes, classes * sizeof(float)), "%s: image %d alone differs", arch, n);
    }
    // After the weights and statistics change, a refresh follows them; without one the fold is stale.
    randomize_bn(m, 8);
    for (size_t i = 0; i < 50; i++) m->params[(i * 7919) % m->n_params] *= 1.5f;
    memcpy(ref, cpu_forward(e, m, x, N, H, W, 0), nl * sizeof(float));
    CHECK(rel_err_norm(fold_forward(f, x, N, H, W), ref, nl) > 1e-3, "%s: stale fold matches new weights", arch);
    CHECK(fold_sync(f, m) == 1, "%s: fold_sync missed a change", arch);
    CHECK(fold_sync(f, m) == 0, "%s: fold_sync refolded an unchanged state", arch);
    err = rel_err_norm(fold_forward(f, x, N, H, W), ref, nl);
    CHECK(err <= 1e-5, "%s: after fold_sync %.3g", arch, err);
    // Two weights swapped: same values, other places; the running statistics alone changed.
    float t = m->params[3];
    m->params[3] = m->params[4], m->params[4] = t;
    CHECK(t == m->params[3] || fold_sync(f, m) == 1, "%s: fold_sync missed a swap", arch);
    m->bufs[m->n_bufs - 1] += 0.25f;
    CHECK(fold_sync(f, m) == 1, "%s: fold_sync missed a running-statistics change", arch);
    fold_refresh(f, m);
    memcpy(ref, cpu_forward(e, m, x, N, H, W, 0), nl * sizeof(float));
    err = rel_err_norm(fold_forward(f, x, N, H, W), ref, nl);
    CHECK(err <= 1e-5, "%s: after fold_refresh %.3g", arch, err);
    // The fold is a copy: freeing the ResNet leaves it working.
    memcpy(got, fold_forward(f, x, N, H, W), nl * sizeof(float));
    cpu_exec_free(e);
    resnet_free(m);
    CHECK(!memcmp(fold_forward(f, x, N, H, W), got, nl * sizeof(float)), "%s: fold depends on the freed ResNet", arch);
    fold_free(f);
    free(xu), free(x), free(ref), free(got);
}

static void test_unfoldable(void) {
    ResNet *m = resnet_create("resnet20", 3, 10);
    m->ops[1].in = 0;  // the stem BN reads the input: its conv's output has no BN to fold into
    CHECK(fold_create(m) == NULL, "a graph with a BN not after its conv must not fold");
    resnet_free(m);
}

int main(void) {
    test_rng = rng_make(41, 0, 0);
    test_conv_ep();
    test_winograd();
    test_arch("resnet20", 3, 10, 3, 32, 32);
    test_arch("resnet20", 3, 7, 2, 19, 13);
    test_arch("resnet18", 1, 5, 2, 36, 28);
    test_arch("resnet50", 3, 11, 2, 40, 33);
    test_arch("resnet20", 1, 4, 37, 12, 10);  // more images than a chunk (fold.c: 16), a partial last one
    test_arch("resnet20+blurpool", 3, 7, 2, 19, 13);
    test_arch("resnet18+blurpool", 1, 5, 2, 36, 28);
    test_unfoldable();
    return test_summary("test_fold");
}
