// Activation storage for the non-conv kernels: load/store an element as float whatever the
// storage type (float, or bf16 kept as raw uint16_t bits so no cuda_bf16.h is needed and the
// emulator sees plain integers), and a dispatch from CtDtype to the two template instances.
//
// bf16 rounding is round-to-nearest-even with NaN kept quiet, bit-identical to
// __float2bfloat16_rn, so a tensor rounded on the host (tests) equals one rounded on the device.
#pragma once
#include <stdint.h>
#include <string.h>

#include "kernels/kernels.h"

__host__ __device__ static inline uint32_t ct_f2u(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}
__host__ __device__ static inline float ct_u2f(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}
__host__ __device__ static inline float ct_bf16_to_f32(uint16_t h) { return ct_u2f((uint32_t)h << 16); }
__host__ __device__ static inline uint16_t ct_f32_to_bf16(float f) {
    uint32_t u = ct_f2u(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);  // quiet NaN
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

__host__ __device__ static inline float ct_ld(const float *p, size_t i) { return p[i]; }
__host__ __device__ static inline float ct_ld(const uint16_t *p, size_t i) { return ct_bf16_to_f32(p[i]); }
__host__ __device__ static inline void ct_st(float *p, size_t i, float v) { p[i] = v; }
__host__ __device__ static inline void ct_st(uint16_t *p, size_t i, float v) { p[i] = ct_f32_to_bf16(v); }

// CT_DISPATCH(dt, T, stmt): runs stmt with T = float (CT_F32) or uint16_t (CT_BF16).
#define CT_DISPATCH(dt, T, ...)                         \
    do {                                                \
        if ((dt) == CT_BF16) {                          \
            typedef uint16_t T;                         \
            __VA_ARGS__;                                \
        } else {                                        \
            typedef float T;                            \
            __VA_ARGS__;                                \
        }                                               \
    } while (0)

// Grid size for a grid-stride elementwise loop over n items with `threads` per block: enough
// blocks to fill a large GPU, never more than needed (small n under the emulator stays cheap).
static inline unsigned ct_grid_for(size_t n, unsigned threads) {
    size_t b = (n + threads - 1) / threads;
    if (b < 1) b = 1;
    if (b > 8192) b = 8192;
    return (unsigned)b;
}
