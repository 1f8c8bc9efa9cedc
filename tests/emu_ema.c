// The EMA kernels (kernels/ema.cu) against their CPU twins (nn/ema.h): several updates with
// changing weights on awkward lengths (1, odd, not a multiple of the block) must give the same
// bits, and the swap must exchange the buffers and refresh the bf16 copy of the live weights.
// Built against the emulated kernels (build/tests/emu_ema) and the real ones (tests/gpu.sh).
// Compiled as C++.
#include <stdio.h>
#include <string.h>

#include "kernels/common.cuh"
#include "kernels/kernels.h"
#include "nn/ema.h"
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
    return test_summary("emu_ema");
}
