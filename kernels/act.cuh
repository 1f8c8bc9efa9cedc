// Activation storage for the non-conv kernels: load/store an element as float whatever the
// storage type (float, or bf16 kept as raw uint16_t bits so no cuda_bf16.h is needed and the
// emulator sees plain integers), and a dispatch from CtDtype to the two template instances.
//
// bf16 conversions are util/bf16.h's (round to nearest even, NaN kept quiet, bit-identical to
// __float2bfloat16_rn), so a tensor rounded on the host (tests) equals one rounded on the device.
#pragma once
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"
#include "util/bf16.h"

// Under emulation the element and vector accessors below report each access to the cost counters
// (tools/bench_gpu_cost.c); the counters keep only addresses inside device allocations, so the
// same helpers on shared memory or host buffers count nothing. Off, a flag test; nvcc: nothing.
#if defined(CTRAIN_EMU)
#define CT_COST_ACCESS(p, bytes, write) \
    do {                                \
        if (::emu::g_cost_on) ::emu::cost_access((p), (bytes), (write)); \
    } while (0)
#else
#define CT_COST_ACCESS(p, bytes, write) ((void)0)
#endif

__host__ __device__ static inline float ct_ld(const float *p, size_t i) {
    CT_COST_ACCESS(p + i, 4, false);
    return p[i];
}
__host__ __device__ static inline float ct_ld(const uint16_t *p, size_t i) {
    CT_COST_ACCESS(p + i, 2, false);
    return ct_bf16_to_f32(p[i]);
}
// Counted loads and stores of the other element types kernels keep in global memory: uint8
// images (as float), doubles (reduction partials), int32 (labels, flags).
__host__ __device__ static inline float ct_ld(const uint8_t *p, size_t i) {
    CT_COST_ACCESS(p + i, 1, false);
    return (float)p[i];
}
__host__ __device__ static inline double ct_ld(const double *p, size_t i) {
    CT_COST_ACCESS(p + i, 8, false);
    return p[i];
}
__host__ __device__ static inline int32_t ct_ldi(const int32_t *p, size_t i) {
    CT_COST_ACCESS(p + i, 4, false);
    return p[i];
}
__host__ __device__ static inline void ct_sti(int32_t *p, size_t i, int32_t v) {
    CT_COST_ACCESS(p + i, 4, true);
    p[i] = v;
}
__host__ __device__ static inline void ct_st(double *p, size_t i, double v) {
    CT_COST_ACCESS(p + i, 8, true);
    p[i] = v;
}
__host__ __device__ static inline void ct_st(float *p, size_t i, float v) {
    CT_COST_ACCESS(p + i, 4, true);
    p[i] = v;
}
__host__ __device__ static inline void ct_st(uint16_t *p, size_t i, float v) {
    CT_COST_ACCESS(p + i, 2, true);
    p[i] = ct_f32_to_bf16(v);
}

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

// V consecutive elements as floats in one access: a 16-byte load/store (8 bf16 or 4 floats), an
// 8-byte one (4 bf16: pairs with 4 floats when converting), or, with V = 1, one element. The
// caller guarantees the alignment (ct_aligned). Same values and rounding as V ct_ld/ct_st calls.
// A GPU faults on a vector access that is not aligned to its size; the emulator's host loads
// would not, so under emulation every vector access is checked.
__device__ static inline void ct_check_vec_align(const void *p, size_t bytes) {
#ifndef __CUDACC__
    if ((uintptr_t)p % bytes) {
        fprintf(stderr, "emu: %zu-byte vector access at %p is misaligned (a GPU faults: misaligned address)\n",
                bytes, p);
        abort();
    }
#else
    (void)p, (void)bytes;
#endif
}

template <int V, typename T>
__device__ static inline void ct_ldv(float (&v)[V], const T *p, size_t i) {
    if (V > 1) ct_check_vec_align(p + i, V * sizeof(T));
    static_assert(V == 1 || V * sizeof(T) == 16 || (V == 4 && sizeof(T) == 2), "1 element, 8 or 16 bytes");
    if (V > 1) CT_COST_ACCESS(p + i, V * sizeof(T), false);  // V == 1: ct_ld counts it
    if constexpr (V == 1) {
        v[0] = ct_ld(p, i);
    } else if constexpr (sizeof(T) == 2 && V == 4) {
        uint2 u = *(const uint2 *)(p + i);
        v[0] = ct_u2f(u.x << 16), v[1] = ct_u2f(u.x & 0xffff0000u);
        v[2] = ct_u2f(u.y << 16), v[3] = ct_u2f(u.y & 0xffff0000u);
    } else if constexpr (sizeof(T) == 2) {
        uint4 u = *(const uint4 *)(p + i);
        uint32_t w[4] = {u.x, u.y, u.z, u.w};
        for (int k = 0; k < 4; k++) {
            v[2 * k] = ct_u2f(w[k] << 16);  // the lower address is the low half
            v[2 * k + 1] = ct_u2f(w[k] & 0xffff0000u);
        }
    } else {
        float4 f = *(const float4 *)(p + i);
        v[0] = f.x, v[1] = f.y, v[2] = f.z, v[3] = f.w;
    }
}
template <int V, typename T>
__device__ static inline void ct_stv(T *p, size_t i, const float (&v)[V]) {
    if (V > 1) ct_check_vec_align(p + i, V * sizeof(T));
    if (V > 1) CT_COST_ACCESS(p + i, V * sizeof(T), true);
    if constexpr (V == 1) {
        ct_st(p, i, v[0]);
    } else if constexpr (sizeof(T) == 2 && V == 4) {
        *(uint2 *)(p + i) = make_uint2((uint32_t)ct_f32_to_bf16(v[0]) | (uint32_t)ct_f32_to_bf16(v[1]) << 16,
                                       (uint32_t)ct_f32_to_bf16(v[2]) | (uint32_t)ct_f32_to_bf16(v[3]) << 16);
    } else if constexpr (sizeof(T) == 2) {
        uint32_t w[4];
        for (int k = 0; k < 4; k++)
            w[k] = (uint32_t)ct_f32_to_bf16(v[2 * k]) | (uint32_t)ct_f32_to_bf16(v[2 * k + 1]) << 16;
        *(uint4 *)(p + i) = make_uint4(w[0], w[1], w[2], w[3]);
    } else {
        *(float4 *)(p + i) = make_float4(v[0], v[1], v[2], v[3]);
    }
}
// Elements of T in one 16-byte vector.
#define CT_VEC(T) ((int)(16 / sizeof(T)))
// 1 when every pointer given is a multiple of `bytes` (a power of two); NULL counts as aligned.
static inline int ct_aligned(uintptr_t bytes, const void *a, const void *b = NULL, const void *c = NULL,
                             const void *d = NULL) {
    return (((uintptr_t)a | (uintptr_t)b | (uintptr_t)c | (uintptr_t)d) & (bytes - 1)) == 0;
}
