// The EMA kernels (kernels/ema.cu) against their CPU twins (nn/ema.h): several updates with
// changing weights on awkward lengths (1, odd, not a multiple of the block) must give the same
// bits, and the swap must exchange the buffers and refresh the bf16 copy of the live weights.
// Then the executor's operation on its state tensor (gpu_ema over ema[n_params + n_bufs], moved by
// gpu_upload_ema/gpu_download_ema) against nn/ema.h's ema_apply on a resnet20: the same average,
// the same swapped state, and a bf16 eval forward after the swap that computes with the average
// (the forward of a fresh executor given the swapped weights, bit for bit).
// Built against the emulated kernels (build/tests/emu_ema) and the real ones (tests/gpu.sh).
// Compiled as C++.
#include <stdio.h>
#include <string.h>

#include "kernels/common.cuh"
#include "kernels/kernels.h"
#include "nn/ema.h"
#include "nn/model_cuda.h"
#include "nn/resnet.h"
#include "tests/test.h"
#include "util/bf16.h"
#include "util/common.h"
#include "util/rng.h"

#define CKC(call)                                                                   \
    do {                                                                            \
        cudaError_t err_ = (call);                                                  \
        if (err_ != cudaSuccess) ct_die("%s: %s", #call, cudaGetErrorString(err_)); \
    } while (0)

static Rng rng;

static float *rand_vec(size_t n, float lo, float hi) {
    float *x = (float *)ct_alloc(n * sizeof(float) + 1);
    for (size_t i = 0; i < n; i++) x[i] = lo + (hi - lo) * rng_uniform(&rng);
    return x;
}

static float *to_dev(const float *x, size_t n) {
    float *d = NULL;
    CKC(cudaMalloc((void **)&d, n * sizeof(float)));
    CKC(cudaMemcpy(d, x, n * sizeof(float), cudaMemcpyHostToDevice));
    return d;
}

static float *to_host(const float *d, size_t n) {
    float *h = (float *)ct_alloc(n * sizeof(float) + 1);
    CKC(cudaMemcpy(h, d, n * sizeof(float), cudaMemcpyDeviceToHost));
    return h;
}

static void test_update(size_t n, float decay) {
    float *ema = rand_vec(n, -1.f, 1.f), *dema = to_dev(ema, n);
    float *dw = NULL;
    CKC(cudaMalloc((void **)&dw, n * sizeof(float)));
    for (int step = 0; step < 4; step++) {
        float *w = rand_vec(n, -2.f, 2.f);
        CKC(cudaMemcpy(dw, w, n * sizeof(float), cudaMemcpyHostToDevice));
        ema_update(ema, w, n, decay);
        ema_update_gpu(dema, dw, n, decay, 0);
        free(w);
    }
    float *got = to_host(dema, n);
    CHECK(!memcmp(got, ema, n * sizeof(float)), "ema_update n=%zu decay=%g: GPU not bit-identical to the CPU", n, decay);
    cudaFree(dema), cudaFree(dw);
    free(ema), free(got);
}

// A hand-checked case: the update is a lerp toward w by 1 - decay.
static void test_update_values(void) {
    float ema[3] = {0.f, 1.f, -4.f}, w[3] = {1.f, 1.f, 4.f};
    ema_update(ema, w, 3, 0.75f);
    CHECK(ema[0] == 0.25f && ema[1] == 1.f && ema[2] == -2.f, "ema_update: got %g %g %g, want 0.25 1 -2", ema[0], ema[1],
          ema[2]);
}

static void test_swap(size_t n, int with_bf16) {
    float *a = rand_vec(n, -1.f, 1.f), *b = rand_vec(n, -1.f, 1.f);
    float *da = to_dev(a, n), *db = to_dev(b, n);
    uint16_t *dbf = NULL;
    if (with_bf16) CKC(cudaMalloc((void **)&dbf, n * 2));
    ema_swap(a, b, n);
    ema_swap_gpu(da, db, n, dbf, 0);
    float *ga = to_host(da, n), *gb = to_host(db, n);
    CHECK(!memcmp(ga, a, n * 4) && !memcmp(gb, b, n * 4), "ema_swap n=%zu: GPU buffers differ from the CPU swap", n);
    if (with_bf16) {
        uint16_t *hb = (uint16_t *)ct_alloc(n * 2);
        CKC(cudaMemcpy(hb, dbf, n * 2, cudaMemcpyDeviceToHost));
        int bad = 0;
        for (size_t i = 0; i < n; i++) bad += hb[i] != ct_f32_to_bf16(ga[i]);
        CHECK(bad == 0, "ema_swap n=%zu: bf16 copy differs from the rounded new weights in %d places", n, bad);
        free(hb);
        cudaFree(dbf);
    }
    cudaFree(da), cudaFree(db);
    free(a), free(b), free(ga), free(gb);
}

static void fill(float *x, size_t n, float lo, float hi) {
    for (size_t i = 0; i < n; i++) x[i] = lo + (hi - lo) * rng_uniform(&rng);
}

static void test_exec(void) {
    ResNet *m = resnet_create("resnet20", 3, 10);
    const size_t np = m->n_params, nb = m->n_bufs, n = np + nb;
    fill(m->bufs, nb, 0.5f, 1.5f);  // running statistics away from their initial 0 and 1
    float *avg = (float *)ct_alloc(n * sizeof(float)), *got = (float *)ct_alloc(n * sizeof(float));
    for (size_t i = 0; i < np; i++) avg[i] = m->params[i] * 0.5f + 0.01f;
    fill(avg + np, nb, 0.5f, 1.5f);
    GpuExec *e = gpu_exec_create(m, CT_BF16);
    gpu_upload_ema(e, avg);
    gpu_ema(e, EMA_UPDATE, 0.9f);
    gpu_ema(e, EMA_UPDATE, 0.5f);
    ema_apply(EMA_UPDATE, 0.9f, m->params, np, m->bufs, nb, avg);
    ema_apply(EMA_UPDATE, 0.5f, m->params, np, m->bufs, nb, avg);
    gpu_download_ema(e, got);
    CHECK(!memcmp(got, avg, np * sizeof(float)), "gpu_ema update: the params' average differs from ema_apply's");
    CHECK(!memcmp(got + np, avg + np, nb * sizeof(float)), "gpu_ema update: the bufs' average differs from ema_apply's");

    float *p0 = (float *)ct_alloc(np * sizeof(float)), *b0 = (float *)ct_alloc(nb * sizeof(float));
    memcpy(p0, m->params, np * sizeof(float));
    memcpy(b0, m->bufs, nb * sizeof(float));
    gpu_ema(e, EMA_SWAP, 0);
    ema_apply(EMA_SWAP, 0, m->params, np, m->bufs, nb, avg);  // m now holds the average, avg the weights
    ResNet *h = resnet_create("resnet20", 3, 10);
    gpu_download_state(e, h, NULL);
    gpu_download_ema(e, got);
    CHECK(!memcmp(h->params, m->params, np * sizeof(float)) && !memcmp(h->bufs, m->bufs, nb * sizeof(float)),
          "gpu_ema swap: the live state is not the average");
    CHECK(!memcmp(got, p0, np * sizeof(float)) && !memcmp(got + np, b0, nb * sizeof(float)),
          "gpu_ema swap: the state tensor is not the weights it replaced");

    // The eval forward after the swap runs the average: bf16 weights included.
    const int N = 2, H = 8, W = 8;
    float *x = (float *)ct_alloc((size_t)N * H * W * 3 * sizeof(float));
    fill(x, (size_t)N * H * W * 3, -1.f, 1.f);
    GpuExec *f = gpu_exec_create(m, CT_BF16);
    float a[20], b[20];
    memcpy(a, gpu_forward(e, m, x, N, H, W, 0), sizeof a);
    memcpy(b, gpu_forward(f, m, x, N, H, W, 0), sizeof b);
    CHECK(!memcmp(a, b, sizeof a), "eval forward after gpu_ema swap: logits %g %g differ from the average's %g %g",
          a[0], a[1], b[0], b[1]);
    gpu_ema(e, EMA_SWAP, 0);
    gpu_download_state(e, h, NULL);
    CHECK(!memcmp(h->params, p0, np * sizeof(float)) && !memcmp(h->bufs, b0, nb * sizeof(float)),
          "gpu_ema swap twice: the live state does not come back bit for bit");
    gpu_exec_free(e);
    gpu_exec_free(f);
    resnet_free(m);
    resnet_free(h);
    free(avg), free(got), free(p0), free(b0), free(x);
}

int main(void) {
    rng = rng_make(20261124, 13, 0);
    test_update_values();
    size_t ns[] = {1, 7, 255, 257, 1000, 4099};
    for (size_t i = 0; i < CT_ARRAY_LEN(ns); i++) {
        test_update(ns[i], 0.999f);
        test_update(ns[i], 0.5f);
        test_update(ns[i], 0.1f);
        test_swap(ns[i], (int)(i & 1));
    }
    test_exec();
    return test_summary("emu_ema");
}
