// Host <-> device copies for the emulator/GPU tests: std::vector in, device pointer out; and host
// floats to and from device buffers of a storage dtype (fp32, or bf16 rounded to nearest even:
// what the kernels read and write), the way the kernel tests feed both twins the same numbers.
#pragma once
#include <stdint.h>
#include <stdlib.h>

#include <vector>

#include "kernels/common.cuh"
#include "kernels/kernels.h"
#include "util/bf16.h"
#include "util/common.h"

template <typename T>
static T *to_device(const std::vector<T> &h) {
    T *d;
    CT_CUDA_CHECK(cudaMalloc(&d, h.size() * sizeof(T)));
    CT_CUDA_CHECK(cudaMemcpy(d, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
    return d;
}
template <typename T>
static std::vector<T> to_host(const T *d, size_t n) {
    std::vector<T> h(n);
    CT_CUDA_CHECK(cudaMemcpy(h.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost));
    return h;
}

// Rounds x in place to what a dt buffer holds (a no-op for fp32), so a CPU twin sees the GPU's inputs.
static inline void round_to(float *x, size_t n, CtDtype dt) {
    if (dt == CT_BF16)
        for (size_t i = 0; i < n; i++) x[i] = ct_round_bf16(x[i]);
}

// A fresh device buffer of n dt elements, starting `skew` elements into its allocation *base (a
// skew of 1 makes every 16-byte vector access misaligned); holds x converted to dt, unless x is
// NULL. The allocation is exactly n + skew elements, so the emulator's red zone catches a kernel
// writing past n.
static inline void *dev_act_at(void **base, const float *x, size_t n, CtDtype dt, int skew) {
    size_t es = dt == CT_BF16 ? 2 : 4, len = n + (size_t)skew;
    CT_CUDA_CHECK(cudaMalloc(base, (len ? len : 1) * es));
    char *d = (char *)*base + (size_t)skew * es;
    if (!x) return d;
    if (dt == CT_BF16) {
        uint16_t *h = (uint16_t *)ct_alloc((n ? n : 1) * 2);
        for (size_t i = 0; i < n; i++) h[i] = ct_f32_to_bf16(x[i]);
        CT_CUDA_CHECK(cudaMemcpy(d, h, n * 2, cudaMemcpyHostToDevice));
        free(h);
    } else {
        CT_CUDA_CHECK(cudaMemcpy(d, x, n * 4, cudaMemcpyHostToDevice));
    }
    return d;
}
// The same, aligned as allocated: cudaFree takes the returned pointer.
static inline void *dev_act(const float *x, size_t n, CtDtype dt) {
    void *base;
    return dev_act_at(&base, x, n, dt, 0);
}
static inline float *dev_f32(const float *x, size_t n) { return (float *)dev_act(x, n, CT_F32); }

// A fresh device buffer of `bytes` bytes (exactly: the red zone follows) filled with 0xff bytes:
// NaN in fp32 and in bf16, so an element a kernel leaves unwritten fails the comparison.
static inline void *dev_poisoned(size_t bytes) {
    void *d = NULL;
    CT_CUDA_CHECK(cudaMalloc(&d, bytes ? bytes : 1));
    CT_CUDA_CHECK(cudaMemset(d, 0xff, bytes));
    return d;
}

// n dt elements of d (after the device finished its work) as host floats into x.
static inline void host_act_to(float *x, const void *d, size_t n, CtDtype dt) {
    CT_CUDA_CHECK(cudaDeviceSynchronize());
    if (dt == CT_BF16) {
        uint16_t *h = (uint16_t *)ct_alloc((n ? n : 1) * 2);
        CT_CUDA_CHECK(cudaMemcpy(h, d, n * 2, cudaMemcpyDeviceToHost));
        for (size_t i = 0; i < n; i++) x[i] = ct_bf16_to_f32(h[i]);
        free(h);
    } else {
        CT_CUDA_CHECK(cudaMemcpy(x, d, n * 4, cudaMemcpyDeviceToHost));
    }
}
// The same in a fresh ct_alloc buffer.
static inline float *host_act(const void *d, size_t n, CtDtype dt) {
    float *x = (float *)ct_alloc((n ? n : 1) * sizeof(float));
    host_act_to(x, d, n, dt);
    return x;
}
static inline float *host_f32(const void *d, size_t n) { return host_act(d, n, CT_F32); }

// The emulator's host threads for the launches that follow (n = 1: one, 0: the default, lanes on
// several host threads for race detection). The same bits either way; on a GPU, nothing.
static inline void emu_host_threads(int n) {
#ifdef CTRAIN_EMU
    emu::set_host_threads(n);
#else
    (void)n;
#endif
}
