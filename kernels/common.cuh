// Included first by every kernels/*.cu. The same source builds two ways:
//   real GPU:   nvcc (CTRAIN_CUDA), CUDA's own headers;
//   emulation:  g++ -x c++ -include kernels/emu/emu.h -DCTRAIN_EMU (tests, build/train-emu).
// This file maps the few constructs that cannot be spelled the same in both to portable macros.
//
// HOW TO WRITE A KERNEL THAT RUNS IN BOTH (the emulator checks what it can, nvcc checks the rest:
// `./build.sh` compiles every .cu with nvcc for sm_80 and sm_90 whenever nvcc is installed)
//  1. Launch only with CT_LAUNCH(kernel, grid, block, smem_bytes, stream, args...), never <<<>>>.
//     Template kernels: the comma in `k<64, 4>` splits macro arguments, so parenthesize it or
//     name it first (both checked with nvcc and the emulator):
//         CT_LAUNCH((conv_fwd_kernel<64, 4>), grid, block, smem, stream, x, w, y);
//         auto *k = conv_fwd_kernel<64, 4>;  CT_LAUNCH(k, grid, block, smem, stream, x, w, y);
//     Then check: CT_CHECK_LAUNCH("conv_fwd") (dies naming the kernel on a launch error).
//  2. Dynamic shared memory: CT_DYN_SMEM(float, tile); inside the kernel (declares `float *tile`,
//     16-byte aligned, the block's whole dynamic buffer). Never `extern __shared__`. For more than
//     48 KiB call cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes)
//     once, as on a GPU: the emulator enforces the same limits (48 KiB default, the device's
//     opt-in maximum: 227 KiB on sm_90, 163 KiB on sm_80, 99 KiB on sm_89; kernels/devcaps.cuh
//     says what the current device allows). The buffer is 16-byte aligned, no more (the
//     emulator shifts it within 1 KiB): a kernel needing 1 KiB alignment realigns it.
//  3. Static shared memory: `__shared__ float buf[N];` inside the kernel (no initialiser), as usual.
//     Blocks run one at a time under emulation, so it is a static variable there.
//  4. Warp operations only with explicit masks (__shfl_*_sync, __ballot_sync, __syncwarp...). The
//     lanes named in a mask must all reach the same operation with the same mask (else the
//     emulator aborts with a message); lanes that returned early are left out, as on a GPU.
//  5. No inline asm in kernels: use the wrappers of kernels/ptx.cuh (mma.sync, ldmatrix, cp.async).
//  6. No __CUDA_ARCH__ tests for correctness paths (it is undefined under emulation); CT_EMU is 1
//     under emulation, 0 otherwise, for the rare place that must differ (e.g. a smaller tile to
//     keep emulated tests fast). bf16: __nv_bfloat16 / __float2bfloat16 (round to nearest even) /
//     __bfloat162float, __nv_bfloat162 helpers; fp16 likewise.
//  7. Host side: wrap runtime calls in CT_CUDA_CHECK(call). Streams, events and graph capture
//     behave as on a GPU but run synchronously (work runs when issued; capture records closures).
//  8. Emulated CUDA threads are fibers spread over a few host threads that run at once: a
//     __syncthreads costs about a microsecond per CUDA thread, so keep test shapes small
//     (docs/EMULATION.md has measured costs; tests/emu_bench measures them again).
#pragma once

#include "util/common.h"

#if defined(CTRAIN_EMU)
#include "kernels/emu/emu.h"
#define CT_EMU 1
#define CT_LAUNCH(kernel, grid, block, smem, stream, ...) \
    EMU_LAUNCH(kernel, grid, block, smem, stream, ##__VA_ARGS__)
#define CT_DYN_SMEM(T, name) T *name = reinterpret_cast<T *>(::emu::dyn_smem())
#else
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#define CT_EMU 0
#define CT_LAUNCH(kernel, grid, block, smem, stream, ...) \
    kernel<<<(grid), (block), (smem), (stream)>>>(__VA_ARGS__)
#define CT_DYN_SMEM(T, name)                                   \
    extern __shared__ __align__(16) unsigned char ct_dyn_smem_[]; \
    T *name = reinterpret_cast<T *>(ct_dyn_smem_)
#endif

// Dies naming the call, file and line when a runtime call fails.
#define CT_CUDA_CHECK(call)                                                               \
    do {                                                                                  \
        cudaError_t ct_err_ = (call);                                                     \
        if (ct_err_ != cudaSuccess)                                                       \
            ct_die("CUDA: %s failed at %s:%d: %s", #call, __FILE__, __LINE__,             \
                   cudaGetErrorString(ct_err_));                                          \
    } while (0)

// After a CT_LAUNCH: a bad configuration (too many threads, too much shared memory) is reported
// here, naming the kernel. Does not synchronise.
#define CT_CHECK_LAUNCH(name)                                                             \
    do {                                                                                  \
        cudaError_t ct_err_ = cudaGetLastError();                                         \
        if (ct_err_ != cudaSuccess)                                                       \
            ct_die("CUDA: launch of %s failed at %s:%d: %s", (name), __FILE__, __LINE__,  \
                   cudaGetErrorString(ct_err_));                                          \
    } while (0)

static __host__ __device__ inline unsigned ct_cdiv(unsigned a, unsigned b) { return (a + b - 1) / b; }
