// The optimizer table's GPU steps against its CPU steps (nn/optim.h) under the CUDA emulator:
// AdamW (kernels/adamw.cu vs nn/adamw.c) and LAMB (kernels/lamb.cu vs nn/lamb.c) over tensors of
// awkward sizes (fewer elements than chunks, not a multiple of them, an all-zero gradient, an
// all-zero weight, excluded BN-like ones), with LAMB's global clipping active and off: params,
// both moments and the bf16 weight copy bit for bit after several steps. Then the model-level
// steps (gpu_optim_step vs optim_step on a resnet20's flat buffers, with and without the BN/bias
// exclusion, a frozen backbone) and the state's round trip through gpu_upload_optim /
// gpu_download_optim. Compiled as C++.
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "kernels/common.cuh"
#include "kernels/kernels.h"
#include "nn/model_cuda.h"
#include "nn/optim.h"
#include "tests/emu_util.h"
#include "tests/test.h"
#include "util/bf16.h"
#include "util/common.h"
#include "util/rng.h"

static float *rand_vec(size_t n, float lo, float hi) {
    float *x = (float *)ct_alloc((n ? n : 1) * sizeof(float));
    for (size_t i = 0; i < n; i++) x[i] = lo + (hi - lo) * rng_uniform(&test_rng);
    return x;
}

static OptConfig adam_config(OptKind kind, float wd, int exclude, double max_grad_norm) {
    OptConfig c;
    memset(&c, 0, sizeof c);
    c.kind = kind;
    c.weight_decay = wd;
    c.wd_exclude_norm_bias = exclude;
    c.beta1 = 0.9;
    c.beta2 = 0.999;
    c.eps = kind == OPT_LAMB ? 1e-6 : 1e-8;
    c.max_grad_norm = max_grad_norm;
    return c;
}

static int same_bits(const float *a, const float *b, size_t n) { return !memcmp(a, b, n * sizeof(float)); }

// Kernel level: both twins on the same flat buffers for 4 steps.
static void test_kernels(OptKind kind, double max_grad_norm, float gscale) {
    const size_t sizes[] = {1, 7, 255, 256, 1000, 4099, 16, 300};
    const int skip[] = {1, 0, 0, 1, 0, 0, 0, 0};
    const int nt = (int)CT_ARRAY_LEN(sizes);
    CtLarsTensor t[CT_ARRAY_LEN(sizes)];
    size_t n = 0;
    for (int i = 0; i < nt; i++) t[i] = CtLarsTensor{n, sizes[i], skip[i]}, n += sizes[i];
    float *p = rand_vec(n, -1.f, 1.f), *m = (float *)ct_zalloc(n * 4), *v = (float *)ct_zalloc(n * 4);
    for (size_t i = 0; i < sizes[7]; i++) p[t[7].offset + i] = 0;  // |w| = 0: trust 1
    uint8_t *mask = (uint8_t *)ct_alloc(n);
    for (int i = 0; i < nt; i++) memset(mask + t[i].offset, !skip[i], sizes[i]);
    float *dp = dev_f32(p, n), *dm = dev_f32(m, n), *dv = dev_f32(v, n), *dg = dev_f32(NULL, n);
    uint8_t *dmask = NULL;
    CtLarsTensor *dt = NULL;
    double *dnorms = NULL;
    uint16_t *dbf = NULL;
    CT_CUDA_CHECK(cudaMalloc(&dmask, n));
    CT_CUDA_CHECK(cudaMalloc(&dt, sizeof t));
    CT_CUDA_CHECK(cudaMalloc(&dnorms, 3 * sizeof(double) * nt));
    CT_CUDA_CHECK(cudaMalloc(&dbf, n * 2));
    CT_CUDA_CHECK(cudaMemcpy(dmask, mask, n, cudaMemcpyHostToDevice));
    CT_CUDA_CHECK(cudaMemcpy(dt, t, sizeof t, cudaMemcpyHostToDevice));
    double *norms = (double *)ct_alloc(3 * sizeof(double) * nt);
    OptConfig c = adam_config(kind, 0.05f, 0, max_grad_norm);
    for (int step = 1; step <= 4; step++) {
        float *g = rand_vec(n, -gscale, gscale);
        for (size_t i = 0; i < sizes[5]; i++) g[t[5].offset + i] = 0;  // |g| = 0
        CT_CUDA_CHECK(cudaMemcpy(dg, g, n * 4, cudaMemcpyHostToDevice));
        CtAdamArgs a = optim_adam_args(&c, 0.01f / step, step);
        if (kind == OPT_ADAMW) {
            adamw_update(p, g, m, v, mask, n, &a);
            adamw_step_gpu(dp, dg, dm, dv, dmask, n, &a, dbf, 0);
        } else {
            lamb_update(t, nt, p, g, m, v, norms, &a);
            lamb_step_gpu(dt, nt, dp, dg, dm, dv, dnorms, &a, dbf, 0);
        }
        free(g);
    }
    CT_CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<float> gp = to_host(dp, n), gm = to_host(dm, n), gv = to_host(dv, n);
    std::vector<uint16_t> hb = to_host(dbf, n);
    const char *name = optim_desc(kind)->name;
    CHECK(same_bits(gp.data(), p, n), "%s (max_grad_norm %g, |g| up to %g): params not bit-identical to the CPU's", name,
          max_grad_norm, gscale);
    CHECK(same_bits(gm.data(), m, n), "%s: exp_avg not bit-identical to the CPU's", name);
    CHECK(same_bits(gv.data(), v, n), "%s: exp_avg_sq not bit-identical to the CPU's", name);
    int bad = 0;
    for (size_t i = 0; i < n; i++) bad += hb[i] != ct_f32_to_bf16(gp[i]);
    CHECK(bad == 0, "%s: bf16 weight copy differs from the rounded params in %d places", name, bad);
    if (kind == OPT_LAMB && max_grad_norm > 0) {  // whether the clip was in force, as each case means it
        double G = 0;
        for (int i = 0; i < nt; i++) G += norms[3 * i];
        CHECK((sqrt(G) > max_grad_norm) == (max_grad_norm < 100), "lamb: |g| = %g against max_grad_norm %g", sqrt(G),
              max_grad_norm);
    }
    cudaFree(dp), cudaFree(dm), cudaFree(dv), cudaFree(dg), cudaFree(dmask), cudaFree(dt), cudaFree(dnorms), cudaFree(dbf);
    free(p), free(m), free(v), free(mask), free(norms);
}

// Model level: the table's CPU step and GPU step on a resnet20's flat buffers.
static void test_model(OptKind kind, int exclude, int frozen) {
    ResNet *mc = resnet_create("resnet20", 3, 10), *mg = resnet_create("resnet20", 3, 10);
    resnet_init(mc, 5, 0);
    resnet_init(mg, 5, 0);
    mc->freeze_backbone = mg->freeze_backbone = frozen;
    const size_t n = mc->n_params;
    OptConfig c = adam_config(kind, kind == OPT_ADAMW ? 0.05f : 0.01f, exclude, 1.0);
    OptState sc, sg;
    optim_init(&sc, kind, n);
    optim_init(&sg, kind, n);
    GpuExec *e = gpu_exec_create(mg, CT_F32);
    gpu_upload_optim(e, mg, &sg);
    float *g = (float *)ct_zalloc(n * 4);
    for (int step = 0; step < 3; step++) {
        size_t tr = resnet_trainable(mc);
        for (size_t i = 0; i < tr; i++) g[i] = 0.02f * (rng_uniform(&test_rng) - 0.5f);
        resnet_zero_padding(mc, g);
        CT_CUDA_CHECK(cudaMemcpy(gpu_exec_grads(e), g, n * 4, cudaMemcpyHostToDevice));
        float lr = 0.003f * (step + 1);
        optim_step(&c, &sc, mc, mc->params, g, lr);
        gpu_optim_step(e, mg, &c, &sg, lr);
    }
    gpu_download_state(e, mg, NULL);
    gpu_download_optim(e, mg, &sg);
    const char *name = optim_desc(kind)->name;
    CHECK(sc.steps == 3 && sg.steps == 3, "%s: steps %lld / %lld", name, (long long)sc.steps, (long long)sg.steps);
    CHECK(same_bits(mc->params, mg->params, n), "%s model step (exclude %d, frozen %d): params differ from the CPU's", name,
          exclude, frozen);
    for (int i = 0; i < 2; i++)
        CHECK(same_bits(sc.state[i], sg.state[i], n), "%s model step: state %s differs from the CPU's", name,
              optim_desc(kind)->state[i]);
    // An excluded BN weight was not decayed: with exclusion its update differs from the run without.
    if (frozen) {  // the backbone untouched, bit for bit
        ResNet *m0 = resnet_create("resnet20", 3, 10);
        resnet_init(m0, 5, 0);
        size_t tr = resnet_trainable(mc);
        CHECK(same_bits(m0->params + tr, mc->params + tr, n - tr), "%s: a frozen backbone moved", name);
        resnet_free(m0);
    }
    // Round trip: the state uploaded comes back the same.
    OptState rt;
    optim_init(&rt, kind, n);
    gpu_upload_optim(e, mg, &sc);
    gpu_download_optim(e, mg, &rt);
    CHECK(same_bits(rt.state[0], sc.state[0], n) && same_bits(rt.state[1], sc.state[1], n), "%s: state round trip", name);
    optim_free(&rt);
    gpu_exec_free(e);
    optim_free(&sc), optim_free(&sg);
    free(g);
    resnet_free(mc), resnet_free(mg);
}

// Weight decay exclusion on the CPU: with --no-wd-bn a BN weight's AdamW step equals the step
// with wd 0; without it, the decoupled decay p (1 - lr wd) shows.
static void test_exclusion(void) {
    ResNet *m = resnet_create("resnet20", 3, 10);
    resnet_init(m, 3, 0);
    const StateEntry *bn = &m->entries[resnet_find_entry(m, "bn1.weight")];
    const StateEntry *conv = &m->entries[resnet_find_entry(m, "conv1.weight")];
    float *g = (float *)ct_zalloc(m->n_params * 4);
    for (size_t i = 0; i < m->n_params; i++) g[i] = 0.01f;
    float r[3][2];
    for (int k = 0; k < 3; k++) {
        ResNet *mm = resnet_create("resnet20", 3, 10);
        resnet_init(mm, 3, 0);
        OptConfig c = adam_config(OPT_ADAMW, k == 2 ? 0.f : 0.1f, k == 1, 0);
        OptState s;
        optim_init(&s, OPT_ADAMW, mm->n_params);
        optim_step(&c, &s, mm, mm->params, g, 0.01f);
        r[k][0] = mm->params[bn->offset];
        r[k][1] = mm->params[conv->offset];
        optim_free(&s);
        resnet_free(mm);
    }
    CHECK(r[1][0] == r[2][0] && r[0][0] != r[2][0], "--no-wd-bn: bn1.weight %.9g (excluded) vs %.9g (wd 0) vs %.9g (decayed)",
          r[1][0], r[2][0], r[0][0]);
    CHECK(r[1][1] == r[0][1] && r[1][1] != r[2][1], "--no-wd-bn: conv1.weight must still decay");
    free(g);
    resnet_free(m);
}

int main(void) {
    test_kernels(OPT_ADAMW, 0, 0.5f);
    test_kernels(OPT_LAMB, 1.0, 0.5f);   // |g| ~ 17: clipped
    test_kernels(OPT_LAMB, 0, 0.5f);     // no clipping
    test_kernels(OPT_LAMB, 1e6, 0.5f);   // clipping on but not in force
    test_model(OPT_ADAMW, 0, 0);
    test_model(OPT_ADAMW, 1, 0);
    test_model(OPT_LAMB, 1, 0);
    test_model(OPT_LAMB, 0, 1);
    test_exclusion();
    return test_summary("emu_optim");
}
