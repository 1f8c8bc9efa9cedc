// bfloat16 conversions, the one definition for every side that must agree bit for bit: the CPU
// reference (nn/), the CUDA kernels (device and host code under nvcc), the CUDA emulator and the
// tests. A bf16 value is carried as its raw uint16_t bits, the top half of a float32.
//
// float -> bf16 rounds to nearest, ties to even, which is what __float2bfloat16_rn does on the GPU:
// overflow rounds to inf, subnormals round like any other value, and a NaN stays a NaN (quieted:
// plain rounding could carry a signalling NaN's low payload away and leave inf, or wrap
// 0x7fffffff to -0). So a tensor rounded on the host equals one rounded on the device.
//
// Header-only (static inline) and free of anything but stdint/string, so plain C, nvcc and the
// emulator's g++ can all include it; kernels/ may include util/.
#pragma once
#include <stdint.h>
#include <string.h>

// nvcc needs the functions marked for both sides; the emulator (g++, kernels/emu/emu.h) and plain
// C have no such qualifiers to give.
#ifdef __CUDACC__
#define CT_BF16_FN __host__ __device__ static inline
#else
#define CT_BF16_FN static inline
#endif

// The bits of a float and back (memcpy: no aliasing rules broken, compiles to a register move).
CT_BF16_FN uint32_t ct_f2u(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}
CT_BF16_FN float ct_u2f(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

CT_BF16_FN float ct_bf16_to_f32(uint16_t h) { return ct_u2f((uint32_t)h << 16); }

CT_BF16_FN uint16_t ct_f32_to_bf16(float f) {
    uint32_t u = ct_f2u(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);  // NaN: quiet, stays NaN
    u += 0x7fffu + ((u >> 16) & 1u);  // ties to even; the largest finite values carry into inf
    return (uint16_t)(u >> 16);
}

// f rounded to bf16 precision, as a float: what a store to a bf16 tensor and a load back give.
CT_BF16_FN float ct_round_bf16(float f) { return ct_bf16_to_f32(ct_f32_to_bf16(f)); }
