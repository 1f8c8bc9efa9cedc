// The non-conv GPU kernels (batch norm, pooling, elementwise, losses, SGD) against the CPU
// reference layers (nn/layers.h, nn/sgd.h) on random shapes, awkward ones included (odd sizes,
// channel counts that are not multiples of 8 or 32, batch 1, several BN row chunks).
// Built twice: against the emulated kernels (build/tests/emu_kernels, part of ./build.sh test) and
// against the real ones (build/gpu-tests/emu_kernels, tests/gpu.sh). Compiled as C++.
//
// Inputs are rounded to the storage dtype first, so both sides see the same numbers: fp32 must
// agree within 1e-5 (norm-wise relative), bf16 outputs within 1e-2 (their own rounding).
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "kernels/common.cuh"
#include "kernels/kernels.h"
#include "nn/layers.h"
#include "nn/lars.h"
#include "nn/sgd.h"
#include "tests/emu_util.h"
#include "tests/test.h"
#include "util/bf16.h"
#include "util/common.h"
#include "util/rng.h"

#define CKC(call)                                                                           \
    do {                                                                                    \
        cudaError_t err_ = (call);                                                          \
        if (err_ != cudaSuccess) ct_die("%s: %s", #call, cudaGetErrorString(err_));         \
    } while (0)

static const char *dtname(CtDtype dt) { return dt == CT_BF16 ? "bf16" : "fp32"; }
static double tol(CtDtype dt) { return dt == CT_BF16 ? 1e-2 : 1e-5; }
static double worst[2];  // largest error seen per dtype (report)
static void note(CtDtype dt, double err) {
    if (err > worst[dt]) worst[dt] = err;
}

static float *rand_vec(size_t n, float lo, float hi, CtDtype dt) {
    float *x = (float *)ct_alloc((n ? n : 1) * sizeof(float));
    for (size_t i = 0; i < n; i++) x[i] = lo + (hi - lo) * rng_uniform(&test_rng);
    round_to(x, n, dt);
    return x;
}

static void expect_close(const char *what, const float *got, const float *want, size_t n, double t, CtDtype dt) {
    double e = rel_err_norm(got, want, n);
    note(dt, e);
    CHECK(e <= t, "%s (%s): relative error %.3g > %.3g", what, dtname(dt), e, t);
}

// ---------------------------------------------------------------------------------------------
static void test_batchnorm(int M, int C, int relu, CtDtype dt) {
    char what[96];
    size_t n = (size_t)M * C;
    float *x = rand_vec(n, -2.f, 3.f, dt);
    for (size_t i = 0; i < n; i++) x[i] += (float)(i % C) * 0.25f;  // per-channel offsets
    round_to(x, n, dt);
    float *gamma = rand_vec(C, 0.5f, 1.5f, CT_F32), *beta = rand_vec(C, -0.5f, 0.5f, CT_F32);
    float *rm = rand_vec(C, -0.1f, 0.1f, CT_F32), *rv = rand_vec(C, 0.9f, 1.1f, CT_F32);
    float *rm_c = (float *)ct_alloc(C * 4), *rv_c = (float *)ct_alloc(C * 4);
    memcpy(rm_c, rm, C * 4);
    memcpy(rv_c, rv, C * 4);
    float *y = (float *)ct_alloc(n * 4), *mean = (float *)ct_alloc(C * 4), *invstd = (float *)ct_alloc(C * 4);
    batchnorm_forward_train(y, mean, invstd, rm_c, rv_c, x, gamma, beta, M, C, 0.1f, 1e-5f, relu);

    void *dx_ = dev_act(x, n, dt), *dy_ = dev_act(NULL, n, dt);
    float *dg = dev_f32(gamma, C), *db = dev_f32(beta, C), *drm = dev_f32(rm, C), *drv = dev_f32(rv, C);
    float *dmean = dev_f32(NULL, C), *dinv = dev_f32(NULL, C);
    float *work = dev_f32(NULL, batchnorm_gpu_work_floats(M, C));
    batchnorm_forward_train_gpu(dy_, dmean, dinv, drm, drv, dx_, dg, db, M, C, 0.1f, 1e-5f, relu, work, dt, 0);
    float *gy = host_act(dy_, n, dt), *gm = host_f32(dmean, C), *gi = host_f32(dinv, C);
    float *grm = host_f32(drm, C), *grv = host_f32(drv, C);
    snprintf(what, sizeof what, "bn fwd train M=%d C=%d relu=%d: y", M, C, relu);
    expect_close(what, gy, y, n, tol(dt), dt);
    // Statistics are fp32 computed from the same (rounded) inputs: fp32 tolerance in both modes.
    snprintf(what, sizeof what, "bn fwd train M=%d C=%d: mean", M, C);
    expect_close(what, gm, mean, C, 1e-5, dt);
    snprintf(what, sizeof what, "bn fwd train M=%d C=%d: invstd", M, C);
    expect_close(what, gi, invstd, C, 1e-5, dt);
    snprintf(what, sizeof what, "bn fwd train M=%d C=%d: running mean/var", M, C);
    expect_close(what, grm, rm_c, C, 1e-5, dt);
    expect_close(what, grv, rv_c, C, 1e-5, dt);

    // Determinism: a second run gives the same bits.
    float *drm2 = dev_f32(rm, C), *drv2 = dev_f32(rv, C);
    void *dy2 = dev_act(NULL, n, dt);
    batchnorm_forward_train_gpu(dy2, dmean, dinv, drm2, drv2, dx_, dg, db, M, C, 0.1f, 1e-5f, relu, work, dt, 0);
    float *gy2 = host_act(dy2, n, dt), *gm2 = host_f32(dmean, C);
    CHECK(!memcmp(gy2, gy, n * 4) && !memcmp(gm2, gm, C * 4), "bn fwd M=%d C=%d (%s): rerun not bit-identical", M, C,
          dtname(dt));

    // Eval forward with the (CPU-updated) running statistics.
    float *ye = (float *)ct_alloc(n * 4);
    batchnorm_forward_eval(ye, x, gamma, beta, rm_c, rv_c, M, C, 1e-5f, relu);
    float *drmc = dev_f32(rm_c, C), *drvc = dev_f32(rv_c, C);
    batchnorm_forward_eval_gpu(dy2, dx_, dg, db, drmc, drvc, M, C, 1e-5f, relu, dt, 0);
    float *gye = host_act(dy2, n, dt);
    snprintf(what, sizeof what, "bn fwd eval M=%d C=%d relu=%d", M, C, relu);
    expect_close(what, gye, ye, n, tol(dt), dt);

    // Backward: the ReLU mask comes from y (the GPU's own y, rounded like the CPU input).
    float *dy = rand_vec(n, -1.f, 1.f, dt);
    float *yr = (float *)ct_alloc(n * 4);
    memcpy(yr, gy, n * 4);  // what the GPU stored; its zeros are exactly the CPU's zeros
    float *dxc = (float *)ct_alloc(n * 4), *dgam = (float *)ct_alloc(C * 4), *dbet = (float *)ct_alloc(C * 4);
    batchnorm_backward(dxc, dgam, dbet, dy, x, relu ? yr : NULL, gamma, mean, invstd, M, C);
    void *ddy = dev_act(dy, n, dt), *dyr = dev_act(yr, n, dt);
    float *ddg = dev_f32(NULL, C), *ddb = dev_f32(NULL, C);
    // dx aliases dy (allowed by the API): the executor does this.
    float *dmean_c = dev_f32(mean, C), *dinv_c = dev_f32(invstd, C);
    batchnorm_backward_gpu(ddy, ddg, ddb, ddy, dx_, relu ? dyr : NULL, dg, dmean_c, dinv_c, M, C, work, dt, 0);
    float *gdx = host_act(ddy, n, dt), *gdg = host_f32(ddg, C), *gdb = host_f32(ddb, C);
    snprintf(what, sizeof what, "bn bwd M=%d C=%d relu=%d: dx", M, C, relu);
    {
        // dx = gamma * invstd * (dy - mean(dy) - xhat * mean(dy * xhat)) cancels: with M = 1 it is
        // exactly 0 and each side's rounding leaves a different ~1e-7 of gamma * invstd * dy. So
        // the error is measured against the larger of |dx| and the size of what cancels.
        double num = 0, den = 0, scale = 0;
        for (size_t i = 0; i < n; i++) {
            double d = (double)gdx[i] - dxc[i], k = (double)gamma[i % C] * invstd[i % C] * dy[i];
            num += d * d;
            den += (double)dxc[i] * dxc[i];
            scale += k * k;
        }
        double e = sqrt(num / fmax(fmax(den, scale), 1e-30));
        note(dt, e);
        CHECK(e <= tol(dt), "%s (%s): error %.3g of max(|dx|, |gamma invstd dy|) > %.3g", what, dtname(dt), e, tol(dt));
    }
    snprintf(what, sizeof what, "bn bwd M=%d C=%d relu=%d: dgamma", M, C, relu);
    expect_close(what, gdg, dgam, C, 1e-5, dt);
    snprintf(what, sizeof what, "bn bwd M=%d C=%d relu=%d: dbeta", M, C, relu);
    expect_close(what, gdb, dbet, C, 1e-5, dt);

    void *dptrs[] = {dx_, dy_, dg, db, drm, drv, dmean, dinv, work, drm2, drv2, dy2, drmc, drvc, ddy, dyr, ddg, ddb, dmean_c, dinv_c};
    for (size_t i = 0; i < CT_ARRAY_LEN(dptrs); i++) cudaFree(dptrs[i]);
    float *hptrs[] = {x, gamma, beta, rm, rv, rm_c, rv_c, y, mean, invstd, gy, gm, gi, grm, grv, gy2, gm2, ye, gye, dy, yr, dxc, dgam, dbet, gdx, gdg, gdb};
    for (size_t i = 0; i < CT_ARRAY_LEN(hptrs); i++) free(hptrs[i]);
}

// ---------------------------------------------------------------------------------------------
static void test_elementwise(size_t n, int C, CtDtype dt) {
    char what[96];
    float *a = rand_vec(n, -1.f, 1.f, dt), *b = rand_vec(n, -1.f, 1.f, dt);
    float *want = (float *)ct_alloc(n * 4);
    void *da = dev_act(a, n, dt), *db = dev_act(b, n, dt), *dout = dev_act(NULL, n, dt);

    relu_forward(want, a, n);
    relu_forward_gpu(dout, da, n, dt, 0);
    float *got = host_act(dout, n, dt);
    snprintf(what, sizeof what, "relu fwd n=%zu", n);
    expect_close(what, got, want, n, 0.0, dt);  // exact: max(0, x) of a representable x
    free(got);

    relu_backward(want, b, a, n);
    relu_backward_gpu(dout, db, da, n, dt, 0);
    got = host_act(dout, n, dt);
    snprintf(what, sizeof what, "relu bwd n=%zu", n);
    expect_close(what, got, want, n, 0.0, dt);
    free(got);

    for (int relu = 0; relu < 2; relu++) {
        add_forward(want, a, b, n, relu);
        add_forward_gpu(dout, da, db, n, relu, dt, 0);
        got = host_act(dout, n, dt);
        snprintf(what, sizeof what, "add fwd n=%zu relu=%d", n, relu);
        expect_close(what, got, want, n, dt == CT_BF16 ? 1e-2 : 0.0, dt);
        free(got);
    }

    memcpy(want, a, n * 4);
    add_inplace(want, b, n);
    add_inplace_gpu(da, db, n, dt, 0);  // da = a + b
    got = host_act(da, n, dt);
    snprintf(what, sizeof what, "add_inplace n=%zu", n);
    expect_close(what, got, want, n, dt == CT_BF16 ? 1e-2 : 0.0, dt);
    free(got);

    // uint8 -> normalised activation.
    size_t pixels = n / C;
    if (pixels) {
        uint8_t *u = (uint8_t *)ct_alloc(pixels * C);
        Rng r = rng_make(7, n, C);
        for (size_t i = 0; i < pixels * C; i++) u[i] = (uint8_t)rng_below(&r, 256);
        float *mean = rand_vec(C, 0.3f, 0.6f, CT_F32), *std = rand_vec(C, 0.2f, 0.3f, CT_F32);
        normalize_u8(want, u, pixels, C, mean, std);
        uint8_t *du = NULL;
        CKC(cudaMalloc(&du, pixels * C));
        CKC(cudaMemcpy(du, u, pixels * C, cudaMemcpyHostToDevice));
        float *dm = dev_f32(mean, C), *ds = dev_f32(std, C);
        normalize_u8_gpu(dout, du, pixels, C, dm, ds, dt, 0);
        got = host_act(dout, pixels * C, dt);
        snprintf(what, sizeof what, "normalize_u8 pixels=%zu C=%d", pixels, C);
        expect_close(what, got, want, pixels * C, dt == CT_BF16 ? 1e-2 : 1e-6, dt);
        free(got);
        cudaFree(du);
        cudaFree(dm);
        cudaFree(ds);
        free(u);
        free(mean);
        free(std);
    }
    cudaFree(da);
    cudaFree(db);
    cudaFree(dout);
    free(a);
    free(b);
    free(want);
}

// fp32 -> bf16 must round exactly like the host reference (nearest even), including ties,
// subnormals, infinities and NaN; bf16 -> fp32 is exact.
// The device conversions against util/bf16.h on the host (tests/test_bf16.c holds that header to an
// independent definition; on a real GPU this compares the hardware's bits with it).
static void test_convert(void) {
    const size_t n = 1000;
    float *x = (float *)ct_alloc(n * 4);
    for (size_t i = 0; i < n; i++) x[i] = (rng_uniform(&test_rng) - 0.5f) * powf(2.f, (float)((int)(i % 60) - 30));
    uint32_t special[] = {0x3f808000u, 0x3f818000u, 0x00000001u, 0x807fffffu, 0x7f800000u, 0xff800000u,
                          0x7fc00001u, 0x7f7fffffu, 0x00000000u, 0x80000000u};
    for (size_t i = 0; i < CT_ARRAY_LEN(special); i++) memcpy(&x[i], &special[i], 4);
    float *dx = dev_f32(x, n);
    uint16_t *dh = NULL;
    CKC(cudaMalloc(&dh, n * 2));
    f32_to_bf16_gpu(dh, dx, n, 0);
    uint16_t *h = (uint16_t *)ct_alloc(n * 2);
    CKC(cudaDeviceSynchronize());
    CKC(cudaMemcpy(h, dh, n * 2, cudaMemcpyDeviceToHost));
    int bad = 0;
    for (size_t i = 0; i < n; i++) bad += h[i] != ct_f32_to_bf16(x[i]);
    CHECK(bad == 0, "f32_to_bf16: %d of %zu values rounded differently from the host", bad, n);
    bf16_to_f32_gpu(dx, dh, n, 0);
    float *back = host_f32(dx, n);
    bad = 0;
    for (size_t i = 0; i < n; i++) {
        float w = ct_bf16_to_f32(h[i]);
        bad += memcmp(&back[i], &w, 4) != 0;
    }
    CHECK(bad == 0, "bf16_to_f32: %d of %zu values differ", bad, n);
    // convert_act_gpu: fp32 -> fp32 is a copy.
    float *dy = dev_f32(NULL, n);
    convert_act_gpu(dy, CT_F32, dx, CT_F32, n, 0);
    float *cp = host_f32(dy, n);
    CHECK(!memcmp(cp, back, n * 4), "convert_act_gpu fp32 copy differs");
    cudaFree(dx);
    cudaFree(dh);
    cudaFree(dy);
    free(x);
    free(h);
    free(back);
    free(cp);
}

// any_nonfinite_gpu against all_finite: one bad element anywhere (first, last, in a later
// grid-stride round) raises the flag; a clean array leaves it alone, both ways.
static void test_nonfinite(void) {
    const size_t sizes[] = {1, 31, 33, 1000, 300001};
    uint32_t bads[] = {0x7f800000u, 0xff800000u, 0x7fc00000u, 0xffffffffu};
    for (size_t si = 0; si < CT_ARRAY_LEN(sizes); si++) {
        size_t n = sizes[si];
        float *x = (float *)ct_alloc(n * 4);
        for (size_t i = 0; i < n; i++) x[i] = (rng_uniform(&test_rng) - 0.5f) * 3e38f;  // huge but finite
        float *dx = dev_f32(x, n);
        int *dflag = NULL, flag;
        CKC(cudaMalloc(&dflag, sizeof(int)));
        for (int preset = 0; preset < 2; preset++) {  // a clean array must not clear a raised flag
            CKC(cudaMemcpy(dflag, &preset, sizeof(int), cudaMemcpyHostToDevice));
            any_nonfinite_gpu(dx, n, dflag, 0);
            CKC(cudaMemcpy(&flag, dflag, sizeof(int), cudaMemcpyDeviceToHost));
            CHECK(flag == preset && all_finite(x, n), "any_nonfinite n=%zu: clean array, flag %d -> %d", n, preset, flag);
        }
        size_t where[] = {0, n - 1, n / 2, n > 70000 ? 70000 : n / 3};
        for (size_t w = 0; w < CT_ARRAY_LEN(where); w++) {
            float keep = x[where[w]];
            memcpy(&x[where[w]], &bads[w], 4);
            CKC(cudaMemcpy(dx + where[w], &x[where[w]], 4, cudaMemcpyHostToDevice));
            int zero = 0;
            CKC(cudaMemcpy(dflag, &zero, sizeof(int), cudaMemcpyHostToDevice));
            any_nonfinite_gpu(dx, n, dflag, 0);
            CKC(cudaMemcpy(&flag, dflag, sizeof(int), cudaMemcpyDeviceToHost));
            CHECK(flag == 1 && !all_finite(x, n), "any_nonfinite n=%zu: %08x at %zu missed (gpu %d, cpu %d)", n,
                  bads[w], where[w], flag, !all_finite(x, n));
            x[where[w]] = keep;
            CKC(cudaMemcpy(dx + where[w], &keep, 4, cudaMemcpyHostToDevice));
        }
        cudaFree(dx);
        cudaFree(dflag);
        free(x);
    }
}

// ---------------------------------------------------------------------------------------------
static void test_maxpool(int N, int H, int W, int C, int k, int stride, int pad, int ties, CtDtype dt) {
    char what[128];
    int P = (H + 2 * pad - k) / stride + 1, Q = (W + 2 * pad - k) / stride + 1;
    size_t nin = (size_t)N * H * W * C, nout = (size_t)N * P * Q * C;
    float *x = rand_vec(nin, -2.f, 2.f, dt);
    if (ties)  // few distinct values: many ties, which must go to the first element in window order
        for (size_t i = 0; i < nin; i++) x[i] = floorf(x[i]);
    float *out = (float *)ct_alloc(nout * 4);
    maxpool_forward(out, x, N, H, W, C, k, stride, pad, P, Q);
    void *dxin = dev_act(x, nin, dt), *dout = dev_act(NULL, nout, dt);
    maxpool_forward_gpu(dout, dxin, N, H, W, C, k, stride, pad, P, Q, 1, dt, 0);
    float *got = host_act(dout, nout, dt);
    snprintf(what, sizeof what, "maxpool fwd %dx%dx%dx%d k%d s%d p%d ties=%d", N, H, W, C, k, stride, pad, ties);
    expect_close(what, got, out, nout, 0.0, dt);  // a max is exact

    float *g = rand_vec(nout, -1.f, 1.f, dt);
    float *din = (float *)ct_alloc(nin * 4);
    maxpool_backward(din, g, x, N, H, W, C, k, stride, pad, P, Q);
    void *dg = dev_act(g, nout, dt), *ddin = dev_act(NULL, nin, dt);
    maxpool_backward_gpu(ddin, dg, dxin, N, H, W, C, k, stride, pad, P, Q, 1, dt, 0);
    float *gdin = host_act(ddin, nin, dt);
    snprintf(what, sizeof what, "maxpool bwd %dx%dx%dx%d k%d s%d p%d ties=%d", N, H, W, C, k, stride, pad, ties);
    expect_close(what, gdin, din, nin, dt == CT_BF16 ? 1e-2 : 1e-6, dt);

    // With the BN + ReLU before the pool folded in (the stem): xb is the BN's input, y = relu(bn(xb))
    // made here with the apply pass's float operations and rounded to dt. Forward on the fly: the
    // plain pool of y, bit for bit. Backward with the BN's reductions: the masked gradient
    // bit-identical to the plain kernel's masked by the twin (batchnorm_tail_grad_tiles), the tiles
    // within 1e-5 of the twin's; with y recomputed from xb (in = NULL; the scalar form where C does
    // not allow vectors) the same bits as with y stored.
    int M = N * H * W, ntile = (M + 127) / 128;
    float *xb = rand_vec(nin, -2.f, 2.f, dt), *bp = rand_vec(4 * (size_t)C, -0.5f, 0.5f, CT_F32);
    for (int c = 0; c < C; c++) bp[2 * C + c] += 1.0f, bp[3 * C + c] += 1.2f;  // gamma, invstd > 0
    BnAffine hb = {bp, bp + 3 * C, bp + 2 * C, bp + C};  // mean, invstd, gamma, beta
    float *yb = (float *)ct_alloc(nin * 4);
    for (size_t i = 0; i < nin; i++) {
        int c = (int)(i % C);
        float o = (xb[i] - hb.mean[c]) * (hb.gamma[c] * hb.invstd[c]) + hb.beta[c];
        yb[i] = o > 0.f ? (dt == CT_BF16 ? ct_round_bf16(o) : o) : 0.f;
    }
    float *gref = (float *)ct_alloc(nin * 4), *tref = (float *)ct_alloc((size_t)ntile * C * 8);
    void *dxb = dev_act(xb, nin, dt), *dyb = dev_act(yb, nin, dt), *dbn = dev_act(NULL, nin, dt);
    void *dbn2 = dev_act(NULL, nin, dt), *dpl = dev_act(NULL, nin, dt), *dpo = dev_act(NULL, nout, dt);
    void *dpo2 = dev_act(NULL, nout, dt);
    float *dbp = dev_f32(bp, 4 * (size_t)C), *dtiles = dev_f32(NULL, (size_t)ntile * C * 2);
    float *dtiles2 = dev_f32(NULL, (size_t)ntile * C * 2);
    BnAffine db = {dbp, dbp + 3 * C, dbp + 2 * C, dbp + C};
    snprintf(what, sizeof what, "maxpool+bn %dx%dx%dx%d k%d s%d p%d", N, H, W, C, k, stride, pad);
    maxpool_forward_gpu(dpo, dyb, N, H, W, C, k, stride, pad, P, Q, 1, dt, 0);
    maxpool_forward_bn_gpu(dpo2, dxb, db, N, H, W, C, k, stride, pad, P, Q, 1, dt, 0);
    float *po = host_act(dpo, nout, dt), *po2 = host_act(dpo2, nout, dt);
    CHECK(memcmp(po, po2, nout * 4) == 0, "%s: forward on the fly differs from pooling the stored y", what);
    maxpool_backward_gpu(dpl, dg, dyb, N, H, W, C, k, stride, pad, P, Q, 1, dt, 0);
    int ran = maxpool_backward_bn_gpu(dbn, dtiles, dg, dyb, dxb, db, N, H, W, C, k, stride, pad, P, Q, 1, dt, 0);
    int ran2 = maxpool_backward_bn_gpu(dbn2, dtiles2, dg, NULL, dxb, db, N, H, W, C, k, stride, pad, P, Q, 1, dt, 0);
    CHECK(ran == (C % (dt == CT_BF16 ? 8 : 4) == 0) && ran2, "%s: ran %d %d", what, ran, ran2);
    float *gpl = host_act(dpl, nin, dt), *gbn2 = host_act(dbn2, nin, dt);
    float *tiles2 = host_f32(dtiles2, (size_t)ntile * C * 2);
    batchnorm_tail_grad_tiles(gref, tref, gpl, yb, xb, hb.mean, M, C);
    CHECK(memcmp(gbn2, gref, nin * 4) == 0, "%s: masked gradient (y recomputed) differs from the twin's", what);
    double terr = rel_err_norm(tiles2, tref, (size_t)ntile * C * 2);
    printf("  %-44s tiles %.3g\n", what, terr);
    CHECK(terr <= 1e-5, "%s: tiles off by %.3g", what, terr);
    if (ran) {
        float *gbn = host_act(dbn, nin, dt), *tiles = host_f32(dtiles, (size_t)ntile * C * 2);
        CHECK(memcmp(gbn, gbn2, nin * 4) == 0 && memcmp(tiles, tiles2, (size_t)ntile * C * 8) == 0,
              "%s: y stored and y recomputed differ", what);
        free(gbn), free(tiles);
    }
    void *dfree_[] = {dxb, dyb, dbn, dbn2, dpl, dpo, dpo2, dbp, dtiles, dtiles2};
    for (size_t i = 0; i < CT_ARRAY_LEN(dfree_); i++) cudaFree(dfree_[i]);
    free(xb), free(bp), free(yb), free(gref), free(tref), free(po), free(po2), free(gpl), free(gbn2), free(tiles2);
    cudaFree(dxin);
    cudaFree(dout);
    cudaFree(dg);
    cudaFree(ddin);
    free(x);
    free(out);
    free(got);
    free(g);
    free(din);
    free(gdin);
}

static void test_avgpool(int N, int HW, int C, CtDtype dt) {
    char what[96];
    size_t nin = (size_t)N * HW * C, nout = (size_t)N * C;
    float *x = rand_vec(nin, -2.f, 2.f, dt), *out = (float *)ct_alloc(nout * 4);
    avgpool_forward(out, x, N, HW, C);
    void *dx = dev_act(x, nin, dt), *dout = dev_act(NULL, nout, dt);
    avgpool_forward_gpu(dout, dx, N, HW, C, dt, 0);
    float *got = host_act(dout, nout, dt);
    snprintf(what, sizeof what, "avgpool fwd N=%d HW=%d C=%d", N, HW, C);
    expect_close(what, got, out, nout, tol(dt), dt);
    float *g = rand_vec(nout, -1.f, 1.f, dt), *din = (float *)ct_alloc(nin * 4);
    avgpool_backward(din, g, N, HW, C);
    void *dg = dev_act(g, nout, dt);
    avgpool_backward_gpu(dx, dg, N, HW, C, dt, 0);
    float *gdin = host_act(dx, nin, dt);
    snprintf(what, sizeof what, "avgpool bwd N=%d HW=%d C=%d", N, HW, C);
    expect_close(what, gdin, din, nin, tol(dt), dt);
    cudaFree(dx);
    cudaFree(dout);
    cudaFree(dg);
    free(x);
    free(out);
    free(got);
    free(g);
    free(din);
    free(gdin);
}

// ---------------------------------------------------------------------------------------------
// Losses: logits are fp32 on both backends, so fp32 tolerances (the CPU sums rows in double).
// lam < 1 is a Mixup/CutMix batch: the soft target of (lab, partner) with partner = lab reversed
// (the loader's pairing); lam < 0.5 makes the partner the dominant label for the hit count.
static void test_losses(int N, int K, float smoothing, float T, float lam) {
    char what[128];
    size_t n = (size_t)N * K;
    float *z = rand_vec(n, -4.f, 4.f, CT_F32), *t = rand_vec(n, -3.f, 3.f, CT_F32);
    if (K > 3) z[1] = z[2] = 5.0f;  // a tie for the top-1 rule (first index wins on the CPU)
    int32_t *lab = (int32_t *)ct_alloc(N * 4), *lab_b = (int32_t *)ct_alloc(N * 4);
    Rng r = rng_make(11, N, K);
    for (int i = 0; i < N; i++) lab[i] = (int32_t)rng_below(&r, K);
    if (K > 3) lab[0] = 2;  // tied with index 1, which comes first: not a hit
    for (int i = 0; i < N; i++) lab_b[i] = lab[N - 1 - i];
    float *dz = (float *)ct_alloc(n * 4);
    int correct = -1;
    float loss = softmax_xent_mix(dz, z, lab, lab_b, lam, N, K, smoothing, 0.5f, &correct);

    float *dz_d = dev_f32(NULL, n), *z_d = dev_f32(z, n), *t_d = dev_f32(t, n), *sc = dev_f32(NULL, 4);
    void *work = NULL;
    CKC(cudaMalloc(&work, loss_workspace_bytes(N)));
    int32_t *lab_d = NULL, *lab_b_d = NULL;
    CKC(cudaMalloc(&lab_d, N * 4));
    CKC(cudaMalloc(&lab_b_d, N * 4));
    CKC(cudaMemcpy(lab_d, lab, N * 4, cudaMemcpyHostToDevice));
    CKC(cudaMemcpy(lab_b_d, lab_b, N * 4, cudaMemcpyHostToDevice));
    softmax_xent_mix_gpu(dz_d, z_d, lab_d, lab_b_d, lam, N, K, smoothing, 0.5f, work, sc, (int *)(sc + 1), 0);
    float *gdz = host_f32(dz_d, n), *gsc = host_f32(sc, 2);
    int gcorrect;
    memcpy(&gcorrect, &gsc[1], 4);
    snprintf(what, sizeof what, "softmax_xent_mix N=%d K=%d eps=%g lam=%g: loss", N, K, smoothing, lam);
    expect_close(what, &gsc[0], &loss, 1, 1e-5, CT_F32);
    snprintf(what, sizeof what, "softmax_xent_mix N=%d K=%d eps=%g lam=%g: dlogits", N, K, smoothing, lam);
    expect_close(what, gdz, dz, n, 1e-5, CT_F32);
    CHECK(gcorrect == correct, "softmax_xent_mix N=%d K=%d lam=%g: %d hits, CPU %d", N, K, lam, gcorrect, correct);

    // timm's binary cross-entropy on the same target: without a threshold, with 0.2, summed over classes.
    for (int v = 0; v < 3; v++) {
        float thr = v == 1 ? 0.2f : -1.f;
        int summ = v == 2;
        float *bdz = (float *)ct_alloc(n * 4), *bz_d = dev_f32(NULL, n);
        int bcorrect = -1, bg;
        float bl = bce_mix(bdz, z, lab, lab_b, lam, N, K, smoothing, thr, summ, 0.5f, &bcorrect);
        bce_mix_gpu(bz_d, z_d, lab_d, lab_b_d, lam, N, K, smoothing, thr, summ, 0.5f, work, sc, (int *)(sc + 1), 0);
        float *bg_dz = host_f32(bz_d, n), *bsc = host_f32(sc, 2);
        memcpy(&bg, &bsc[1], 4);
        snprintf(what, sizeof what, "bce_mix N=%d K=%d eps=%g lam=%g thr=%g sum=%d: loss", N, K, smoothing, lam, thr, summ);
        expect_close(what, &bsc[0], &bl, 1, 1e-5, CT_F32);
        snprintf(what, sizeof what, "bce_mix N=%d K=%d eps=%g lam=%g thr=%g sum=%d: dlogits", N, K, smoothing, lam, thr, summ);
        expect_close(what, bg_dz, bdz, n, 1e-5, CT_F32);
        CHECK(bg == bcorrect, "bce_mix N=%d K=%d lam=%g: %d hits, CPU %d", N, K, lam, bg, bcorrect);
        free(bdz);
        free(bg_dz);
        free(bsc);
        CKC(cudaFree(bz_d));
    }

    // Distillation accumulates onto the cross-entropy gradient.
    float kd = kd_loss(dz, z, t, N, K, T, 0.5f);
    kd_loss_gpu(dz_d, z_d, t_d, N, K, T, 0.5f, work, sc, 0);
    free(gdz);
    free(gsc);
    gdz = host_f32(dz_d, n);
    gsc = host_f32(sc, 1);
    snprintf(what, sizeof what, "kd_loss N=%d K=%d T=%g: loss", N, K, T);
    expect_close(what, &gsc[0], &kd, 1, 1e-5, CT_F32);
    snprintf(what, sizeof what, "kd_loss N=%d K=%d T=%g: dlogits (accumulated)", N, K, T);
    expect_close(what, gdz, dz, n, 1e-5, CT_F32);

    // The plain cross-entropy is the mix at lam = 1, bit for bit (CPU) and on the device.
    float plain = softmax_xent(dz, z, lab, N, K, smoothing, 0.5f, &correct);
    float same = softmax_xent_mix(NULL, z, lab, lab_b, 1.0f, N, K, smoothing, 0.5f, NULL);
    CHECK(memcmp(&plain, &same, 4) == 0, "softmax_xent N=%d K=%d: %.9g, mix at lam=1 %.9g", N, K, plain, same);
    softmax_xent_gpu(dz_d, z_d, lab_d, N, K, smoothing, 0.5f, work, sc, (int *)(sc + 1), 0);
    free(gdz);
    free(gsc);
    gdz = host_f32(dz_d, n);
    gsc = host_f32(sc, 2);
    memcpy(&gcorrect, &gsc[1], 4);
    snprintf(what, sizeof what, "softmax_xent N=%d K=%d eps=%g: loss", N, K, smoothing);
    expect_close(what, &gsc[0], &plain, 1, 1e-5, CT_F32);
    snprintf(what, sizeof what, "softmax_xent N=%d K=%d eps=%g: dlogits", N, K, smoothing);
    expect_close(what, gdz, dz, n, 1e-5, CT_F32);
    CHECK(gcorrect == correct, "softmax_xent N=%d K=%d: %d hits, CPU %d", N, K, gcorrect, correct);

    int ks[] = {1, 3, 5};
    for (size_t i = 0; i < CT_ARRAY_LEN(ks); i++) {
        int want = topk_correct(z, lab, N, K, ks[i]);
        topk_correct_gpu(z_d, lab_d, N, K, ks[i], work, (int *)sc, 0);
        int got;
        CKC(cudaDeviceSynchronize());
        CKC(cudaMemcpy(&got, sc, 4, cudaMemcpyDeviceToHost));
        CHECK(got == want, "topk N=%d K=%d k=%d: %d hits, CPU %d", N, K, ks[i], got, want);
    }
    cudaFree(dz_d);
    cudaFree(z_d);
    cudaFree(t_d);
    cudaFree(sc);
    cudaFree(work);
    cudaFree(lab_d);
    cudaFree(lab_b_d);
    free(z);
    free(t);
    free(lab);
    free(lab_b);
    free(dz);
    free(gdz);
    free(gsc);
}

// ---------------------------------------------------------------------------------------------
// LARS: three steps over tensors of awkward sizes (fewer elements than chunks, not a multiple of
// them, one all-zero gradient, skipped BN-like ones) against the CPU's lars_update: the same bits.
static void test_lars(void) {
    const size_t sizes[] = {1, 7, 255, 256, 1000, 4099, 16};
    const int skip[] = {1, 0, 0, 1, 0, 0, 0};
    const int nt = (int)CT_ARRAY_LEN(sizes);
    CtLarsTensor t[CT_ARRAY_LEN(sizes)];
    size_t n = 0;
    for (int i = 0; i < nt; i++) t[i] = (CtLarsTensor){n, sizes[i], skip[i]}, n += sizes[i];
    float *p = rand_vec(n, -1.f, 1.f, CT_F32), *buf = (float *)ct_zalloc(n * 4);
    float *dp = dev_f32(p, n), *dbuf = dev_f32(buf, n), *dgr = dev_f32(NULL, n);
    CtLarsTensor *dt = NULL;
    double *dnorms = NULL;
    uint16_t *dbf = NULL;
    CKC(cudaMalloc(&dt, sizeof t));
    CKC(cudaMalloc(&dnorms, 2 * sizeof(double) * nt));
    CKC(cudaMalloc(&dbf, n * 2));
    CKC(cudaMemcpy(dt, t, sizeof t, cudaMemcpyHostToDevice));
    for (int step = 0; step < 3; step++) {
        float *g = rand_vec(n, -0.5f, 0.5f, CT_F32);
        for (size_t i = 0; i < sizes[5]; i++) g[t[5].offset + i] = 0;  // trust 1: decay alone
        CKC(cudaMemcpy(dgr, g, n * 4, cudaMemcpyHostToDevice));
        float lr = 10.f / (step + 1);
        lars_update(t, nt, p, g, buf, lr, 0.9f, 5e-5f, 0.001f);
        lars_step_gpu(dp, dgr, dbuf, dt, nt, dnorms, lr, 0.9f, 5e-5f, 0.001f, dbf, 0);
        free(g);
    }
    float *gp = host_f32(dp, n), *gb = host_f32(dbuf, n);
    expect_close("lars: params", gp, p, n, 1e-6, CT_F32);
    CHECK(!memcmp(gp, p, n * 4), "lars: params not bit-identical to the CPU update");
    CHECK(!memcmp(gb, buf, n * 4), "lars: momentum not bit-identical to the CPU update");
    uint16_t *hb = (uint16_t *)ct_alloc(n * 2);
    CKC(cudaMemcpy(hb, dbf, n * 2, cudaMemcpyDeviceToHost));
    int bad = 0;
    for (size_t i = 0; i < n; i++) bad += hb[i] != ct_f32_to_bf16(gp[i]);
    CHECK(bad == 0, "lars: bf16 weight copy differs from the rounded params in %d places", bad);
    cudaFree(dp), cudaFree(dbuf), cudaFree(dgr), cudaFree(dt), cudaFree(dnorms), cudaFree(dbf);
    free(p), free(buf), free(gp), free(gb), free(hb);
}

// ---------------------------------------------------------------------------------------------
// SGD: three steps (the first initialises the momentum buffer) over a buffer where every third
// element is excluded from weight decay, against sgd_update_range on the same ranges.
static void test_sgd(size_t n, float momentum, float wd, int nesterov) {
    char what[96];
    float *p = rand_vec(n, -1.f, 1.f, CT_F32), *buf = (float *)ct_zalloc(n * 4);
    uint8_t *decay = (uint8_t *)ct_alloc(n);
    for (size_t i = 0; i < n; i++) decay[i] = i % 3 != 0;
    float *dp = dev_f32(p, n), *dbuf = dev_f32(buf, n), *dgr = dev_f32(NULL, n);
    uint8_t *ddecay = NULL;
    uint16_t *dbf = NULL;
    CKC(cudaMalloc(&ddecay, n));
    CKC(cudaMalloc(&dbf, n * 2));
    CKC(cudaMemcpy(ddecay, decay, n, cudaMemcpyHostToDevice));
    for (int step = 0; step < 3; step++) {
        float *g = rand_vec(n, -0.5f, 0.5f, CT_F32);
        CKC(cudaMemcpy(dgr, g, n * 4, cudaMemcpyHostToDevice));
        float lr = 0.1f / (step + 1);
        for (size_t i = 0; i < n; i++)  // CPU: element by element with the element's decay
            sgd_update_range(p + i, g + i, buf + i, 1, lr, momentum, decay[i] ? wd : 0.f, nesterov, step == 0);
        sgd_step_gpu(dp, dgr, dbuf, ddecay, n, lr, momentum, wd, nesterov, step == 0, dbf, 0);
        free(g);
    }
    float *gp = host_f32(dp, n), *gb = host_f32(dbuf, n);
    snprintf(what, sizeof what, "sgd n=%zu m=%g wd=%g nesterov=%d: params", n, momentum, wd, nesterov);
    expect_close(what, gp, p, n, 1e-6, CT_F32);
    // The kernel keeps the CPU's unfused operations (no FMA contraction): the same bits.
    CHECK(!memcmp(gp, p, n * 4), "%s: not bit-identical to the CPU update", what);
    snprintf(what, sizeof what, "sgd n=%zu m=%g wd=%g nesterov=%d: momentum", n, momentum, wd, nesterov);
    if (momentum != 0.f) expect_close(what, gb, buf, n, 1e-6, CT_F32);
    if (momentum != 0.f) CHECK(!memcmp(gb, buf, n * 4), "%s: not bit-identical to the CPU update", what);
    uint16_t *hb = (uint16_t *)ct_alloc(n * 2);
    CKC(cudaMemcpy(hb, dbf, n * 2, cudaMemcpyDeviceToHost));
    int bad = 0;
    for (size_t i = 0; i < n; i++) bad += hb[i] != ct_f32_to_bf16(gp[i]);
    CHECK(bad == 0, "sgd: bf16 weight copy differs from the rounded params in %d places", bad);
    cudaFree(dp);
    cudaFree(dbuf);
    cudaFree(dgr);
    cudaFree(ddecay);
    cudaFree(dbf);
    free(p);
    free(buf);
    free(decay);
    free(gp);
    free(gb);
    free(hb);
}

// The fused block tail, batchnorm_add_*: y = bn(x) + res [relu], and its backward writing (or
// accumulating into) the residual's gradient, against the CPU twin. In bf16 the CPU twin gets the
// GPU's rounded inputs, so what is left is the order of the statistics' sums.
static void test_batchnorm_add(int M, int C, int relu, int res_acc, CtDtype dt) {
    char what[112];
    size_t n = (size_t)M * C;
    float *x = rand_vec(n, -2.f, 3.f, dt), *res = rand_vec(n, -2.f, 2.f, dt);
    float *gamma = rand_vec(C, 0.5f, 1.5f, CT_F32), *beta = rand_vec(C, -0.5f, 0.5f, CT_F32);
    float *rm = rand_vec(C, -0.1f, 0.1f, CT_F32), *rv = rand_vec(C, 0.9f, 1.1f, CT_F32);
    float *y = (float *)ct_alloc(n * 4), *mean = (float *)ct_alloc(C * 4), *invstd = (float *)ct_alloc(C * 4);
    float *rm_c = (float *)ct_alloc(C * 4), *rv_c = (float *)ct_alloc(C * 4);
    memcpy(rm_c, rm, C * 4);
    memcpy(rv_c, rv, C * 4);
    batchnorm_add_forward_train(y, mean, invstd, rm_c, rv_c, x, res, gamma, beta, M, C, 0.1f, 1e-5f, relu);
    void *dx_ = dev_act(x, n, dt), *dres_ = dev_act(res, n, dt), *dy_ = dev_act(NULL, n, dt);
    float *dg = dev_f32(gamma, C), *db = dev_f32(beta, C), *drm = dev_f32(rm, C), *drv = dev_f32(rv, C);
    float *dmean = dev_f32(NULL, C), *dinv = dev_f32(NULL, C);
    float *work = dev_f32(NULL, batchnorm_gpu_work_floats(M, C));
    uint8_t *dmask = NULL;
    CT_CUDA_CHECK(cudaMalloc((void **)&dmask, n / 8 + 1));
    int wrote = batchnorm_add_forward_train_gpu(dy_, dmean, dinv, drm, drv, dx_, dres_, dg, db, M, C, 0.1f, 1e-5f, relu,
                                                dmask, work, dt, 0);
    float *gy = host_act(dy_, n, dt), *gm = host_f32(dmean, C), *grv = host_f32(drv, C);
    // The ReLU mask (relu, bf16, C a multiple of 8): bit for bit y > 0 as stored.
    CHECK(wrote == (relu && dt == CT_BF16 && C % 8 == 0), "bn+add fwd M=%d C=%d relu=%d (%s): mask written %d", M, C,
          relu, dtname(dt), wrote);
    if (wrote) {
        uint8_t *hm = (uint8_t *)ct_alloc(n / 8);
        cudaMemcpy(hm, dmask, n / 8, cudaMemcpyDeviceToHost);
        size_t bad = 0;
        for (size_t i = 0; i < n; i++) bad += ((hm[i / 8] >> (i % 8)) & 1) != (gy[i] > 0.f);
        CHECK(bad == 0, "bn+add fwd M=%d C=%d: %zu mask bits differ from y > 0", M, C, bad);
        free(hm);
    }
    cudaFree(dmask);
    snprintf(what, sizeof what, "bn+add fwd train M=%d C=%d relu=%d: y", M, C, relu);
    expect_close(what, gy, y, n, tol(dt), dt);
    // Where both sides' statistics agree bit for bit (they do on these shapes), the one rounding
    // of bn(x) + res must be the CPU twin's exactly: a misplaced rounding shows here, not hidden
    // by the bf16 tolerance.
    float *ginv = host_f32(dinv, C);
    if (!memcmp(gm, mean, C * 4) && !memcmp(ginv, invstd, C * 4)) {
        size_t nd = 0;
        for (size_t i = 0; i < n; i++) nd += gy[i] != (dt == CT_BF16 ? ct_round_bf16(y[i]) : y[i]);
        CHECK(nd == 0, "%s (%s): %zu of %zu elements differ from the rounded CPU twin", what, dtname(dt), nd, n);
    }
    free(ginv);
    snprintf(what, sizeof what, "bn+add fwd train M=%d C=%d: mean, running var", M, C);
    expect_close(what, gm, mean, C, 1e-5, dt);
    expect_close(what, grv, rv_c, C, 1e-5, dt);

    // Eval: the same pass with the running statistics.
    float *ye = (float *)ct_alloc(n * 4);
    batchnorm_add_forward_eval(ye, x, res, gamma, beta, rm_c, rv_c, M, C, 1e-5f, relu);
    float *drmc = dev_f32(rm_c, C), *drvc = dev_f32(rv_c, C);
    void *dye = dev_act(NULL, n, dt);
    batchnorm_add_forward_eval_gpu(dye, dx_, dres_, dg, db, drmc, drvc, M, C, 1e-5f, relu, dt, 0);
    float *gye = host_act(dye, n, dt);
    snprintf(what, sizeof what, "bn+add fwd eval M=%d C=%d relu=%d", M, C, relu);
    expect_close(what, gye, ye, n, tol(dt), dt);

    // Backward: the mask from the GPU's y; the residual gradient starts as r0 (res_acc) and must
    // end as r0 + g exactly (one rounding in bf16); dx aliases dy as the executor may do.
    float *dy = rand_vec(n, -1.f, 1.f, dt), *r0 = rand_vec(n, -1.f, 1.f, dt);
    float *dxc = (float *)ct_alloc(n * 4), *dgam = (float *)ct_alloc(C * 4), *dbet = (float *)ct_alloc(C * 4);
    float *drc = (float *)ct_alloc(n * 4);
    memcpy(drc, r0, n * 4);
    batchnorm_add_backward(dxc, drc, res_acc, dgam, dbet, dy, x, relu ? gy : NULL, gamma, mean, invstd, M, C);
    round_to(drc, n, dt);  // the GPU stores the residual gradient in dt
    void *ddy = dev_act(dy, n, dt), *dyr = dev_act(gy, n, dt), *ddr = dev_act(r0, n, dt);
    float *ddg = dev_f32(NULL, C), *ddb = dev_f32(NULL, C), *dmean_c = dev_f32(mean, C), *dinv_c = dev_f32(invstd, C);
    batchnorm_add_backward_gpu(ddy, ddr, res_acc, ddg, ddb, ddy, dx_, relu ? dyr : NULL, dg, dmean_c, dinv_c, M, C,
                               work, dt, 0);
    float *gdx = host_act(ddy, n, dt), *gdr = host_act(ddr, n, dt), *gdg = host_f32(ddg, C);
    CHECK(!memcmp(gdr, drc, n * 4), "bn+add bwd M=%d C=%d relu=%d acc=%d (%s): residual gradient not exact", M, C,
          relu, res_acc, dtname(dt));
    snprintf(what, sizeof what, "bn+add bwd M=%d C=%d relu=%d acc=%d: dx", M, C, relu, res_acc);
    expect_close(what, gdx, dxc, n, tol(dt), dt);
    snprintf(what, sizeof what, "bn+add bwd M=%d C=%d relu=%d: dgamma", M, C, relu);
    expect_close(what, gdg, dgam, C, 1e-5, dt);

    void *dptrs[] = {dx_, dres_, dy_, dg, db, drm, drv, dmean, dinv, work, drmc, drvc, dye, ddy, dyr, ddr, ddg, ddb, dmean_c, dinv_c};
    for (size_t i = 0; i < CT_ARRAY_LEN(dptrs); i++) cudaFree(dptrs[i]);
    float *hptrs[] = {x, res, gamma, beta, rm, rv, y, mean, invstd, rm_c, rv_c, gy, gm, grv, ye, gye, dy, r0, dxc, dgam, dbet, drc, gdx, gdr, gdg};
    for (size_t i = 0; i < CT_ARRAY_LEN(hptrs); i++) free(hptrs[i]);
}

// A tail whose residual is another BN's output (a downsampling block's bn3 beside the shortcut's
// BN): batchnorm_stats_train_gpu + batchnorm_add_bn_forward_train_gpu against the two passes they
// replace (that BN's forward into a buffer, then batchnorm_add_forward_train(_tiles)_gpu), bit for
// bit: the output, both BNs' saved and running statistics. tiles: statistics from host-made tiles
// (nn/batchnorm.c's batchnorm_tile_stats) instead of the sums pass.
static void test_batchnorm_res_bn(int M, int C, int relu, int tiles, CtDtype dt) {
    size_t n = (size_t)M * C, nt = conv2d_gpu_stats_floats(M, C);
    float *x = rand_vec(n, -2.f, 3.f, dt), *rx = rand_vec(n, -3.f, 2.f, dt), *p[8];
    for (int i = 0; i < 8; i++) p[i] = rand_vec(C, i % 4 == 3 ? 0.9f : 0.5f, i % 4 == 3 ? 1.1f : 1.5f, CT_F32);
    float *tx = (float *)ct_alloc(nt * 4), *trx = (float *)ct_alloc(nt * 4);
    batchnorm_tile_stats(tx, x, M, C);
    batchnorm_tile_stats(trx, rx, M, C);
    void *dx = dev_act(x, n, dt), *drx = dev_act(rx, n, dt), *dr = dev_act(NULL, n, dt);
    void *dy1 = dev_act(NULL, n, dt), *dy2 = dev_act(NULL, n, dt);
    float *dp[2][8], *st[2][4];  // [path][gamma, beta, rgamma, rbeta, rm, rv, rrm, rrv], [path][mean, inv, rmean, rinv]
    for (int k = 0; k < 2; k++) {
        for (int i = 0; i < 8; i++) dp[k][i] = dev_f32(p[i], C);
        for (int i = 0; i < 4; i++) st[k][i] = dev_f32(NULL, C);
    }
    float *dtx = dev_f32(tx, nt), *dtrx = dev_f32(trx, nt), *work = dev_f32(NULL, batchnorm_gpu_work_floats(M, C));
    const float m = 0.1f, eps = 1e-5f;
    float **a = dp[0], **b = dp[1], **sa = st[0], **sb = st[1];
    if (tiles) {
        batchnorm_add_forward_train_tiles_gpu(dr, sa[2], sa[3], a[6], a[7], drx, NULL, dtrx, a[2], a[3], M, C, m, eps, 0,
                                              NULL, work, dt, 0);
        batchnorm_add_forward_train_tiles_gpu(dy1, sa[0], sa[1], a[4], a[5], dx, dr, dtx, a[0], a[1], M, C, m, eps, relu,
                                              NULL, work, dt, 0);
    } else {
        batchnorm_add_forward_train_gpu(dr, sa[2], sa[3], a[6], a[7], drx, NULL, a[2], a[3], M, C, m, eps, 0, NULL, work,
                                        dt, 0);
        batchnorm_add_forward_train_gpu(dy1, sa[0], sa[1], a[4], a[5], dx, dr, a[0], a[1], M, C, m, eps, relu, NULL, work,
                                        dt, 0);
    }
    batchnorm_stats_train_gpu(sb[2], sb[3], b[6], b[7], drx, tiles ? dtrx : NULL, b[2], M, C, m, eps, work, dt, 0);
    BnAffine rb = {sb[2], sb[3], b[2], b[3]};
    batchnorm_add_bn_forward_train_gpu(dy2, sb[0], sb[1], b[4], b[5], dx, tiles ? dtx : NULL, drx, rb, b[0], b[1], M, C,
                                       m, eps, relu, NULL, work, dt, 0);
    float *y1 = host_act(dy1, n, dt), *y2 = host_act(dy2, n, dt);
    CHECK(!memcmp(y1, y2, n * 4), "bn+bn(res) fwd M=%d C=%d relu=%d tiles=%d (%s): output differs from the two passes",
          M, C, relu, tiles, dtname(dt));
    for (int i = 0; i < 8; i++) {
        float *h1 = host_f32(i < 4 ? st[0][i] : dp[0][i], C), *h2 = host_f32(i < 4 ? st[1][i] : dp[1][i], C);
        CHECK(!memcmp(h1, h2, C * 4), "bn+bn(res) fwd M=%d C=%d tiles=%d (%s): statistics %d differ", M, C, tiles,
              dtname(dt), i);
        free(h1), free(h2);
    }
    for (int k = 0; k < 2; k++) {
        for (int i = 0; i < 8; i++) cudaFree(dp[k][i]);
        for (int i = 0; i < 4; i++) cudaFree(st[k][i]);
    }
    cudaFree(dx), cudaFree(drx), cudaFree(dr), cudaFree(dy1), cudaFree(dy2), cudaFree(dtx), cudaFree(dtrx), cudaFree(work);
    for (int i = 0; i < 8; i++) free(p[i]);
    free(x), free(rx), free(tx), free(trx), free(y1), free(y2);
}

int main(void) {
    double t0 = ct_now();
    test_rng = rng_make(20261122, 5, 0);
    test_convert();
    test_nonfinite();
    for (int d = 0; d < 2; d++) {
        CtDtype dt = d ? CT_BF16 : CT_F32;
        // (M, C): one row, batch-1 images, odd channel counts, > 32 channels, several row chunks;
        // 16-byte vectors (C a multiple of 8 / 4) with few and many channel vectors per block,
        // one (33 bf16 vectors) that does not divide the block, and more channel vectors than a
        // block holds (2056: 257 bf16 / 514 fp32 vectors, several blocks across).
        int bn[][2] = {{1, 3},    {15, 5},   {49, 13}, {2 * 7 * 7, 40}, {300, 17}, {1 * 9 * 11, 64},
                       {520, 32}, {70, 264}, {3, 2056}, {2, 8}};
        for (size_t i = 0; i < CT_ARRAY_LEN(bn); i++) test_batchnorm(bn[i][0], bn[i][1], (int)(i & 1), dt);
        test_batchnorm(300, 17, 1, dt);
        // The fused tail: vector and scalar paths, one and several row chunks, with and without
        // ReLU and in-place accumulation of the residual gradient.
        int bna[][2] = {{1, 3}, {49, 13}, {2 * 7 * 7, 40}, {300, 64}, {70, 264}, {3, 2056}};
        for (size_t i = 0; i < CT_ARRAY_LEN(bna); i++)
            test_batchnorm_add(bna[i][0], bna[i][1], (int)(i % 3 != 1), (int)(i & 1), dt);
        for (size_t i = 0; i < CT_ARRAY_LEN(bna); i++)
            test_batchnorm_res_bn(bna[i][0], bna[i][1], (int)(i % 3 != 1), (int)(i & 1), dt);
        test_elementwise(1, 1, dt);
        test_elementwise(3 * 37, 3, dt);
        test_elementwise(2 * 5 * 5 * 13, 13, dt);
        test_maxpool(1, 7, 7, 3, 3, 2, 1, 0, dt);
        test_maxpool(2, 8, 9, 5, 3, 2, 1, 1, dt);
        test_maxpool(1, 6, 5, 9, 2, 2, 0, 1, dt);
        test_maxpool(2, 5, 5, 1, 3, 1, 1, 1, dt);
        // 16-byte vectors over channels (C a multiple of 8 bf16 / 4 floats): the stem's 3x3/2
        // pad 1, ties, one and several vectors, windows that overlap and windows that do not.
        test_maxpool(2, 9, 7, 8, 3, 2, 1, 1, dt);
        test_maxpool(1, 6, 6, 24, 3, 2, 1, 0, dt);
        test_maxpool(1, 5, 4, 16, 2, 2, 0, 1, dt);
        test_maxpool(2, 13, 11, 72, 3, 2, 1, 1, dt);  // 3 row tiles (the last ragged), 2 channel groups
        test_avgpool(1, 1, 7, dt);
        test_avgpool(2, 49, 13, dt);
        test_avgpool(3, 16, 40, dt);
    }
    test_losses(1, 1, 0.f, 1.f, 1.f);
    test_losses(3, 10, 0.1f, 4.f, 1.f);
    test_losses(5, 300, 0.f, 2.f, 1.f);
    test_losses(2, 1000, 0.2f, 1.5f, 1.f);
    // Mixed targets, awkward shapes: N = 1 (its own partner), K not a multiple of 32, lam on
    // either side of 0.5 (the dominant label switches), and more rows than blocks-per-grid cap.
    test_losses(1, 7, 0.1f, 2.f, 0.3f);
    test_losses(7, 33, 0.1f, 4.f, 0.62f);
    test_losses(6, 10, 0.f, 1.f, 0.25f);
    test_losses(1030, 3, 0.2f, 2.f, 0.5f);
    test_losses(9, 1001, 0.1f, 1.5f, 0.0f);
    test_lars();
    test_sgd(1, 0.9f, 1e-4f, 0);
    test_sgd(1000, 0.9f, 5e-4f, 1);
    test_sgd(777, 0.f, 1e-3f, 0);
    test_sgd(333, 0.5f, 0.f, 0);
    printf("worst relative error: fp32 %.3g, bf16 %.3g (%.1f s)\n", worst[CT_F32], worst[CT_BF16], ct_now() - t0);
    return test_summary("emu_kernels");
}
