// Inline-PTX wrappers for the Hopper (sm_90a) asynchronous tensor-core path: wgmma from shared
// memory through matrix descriptors, its fence/commit/wait discipline, mbarriers, the async-proxy
// fence and cp.async.bulk. Like kernels/ptx.cuh: one instruction of inline asm each under nvcc,
// emulated under CTRAIN_EMU (kernels/emu/wgmma.cpp) from the PTX ISA's documented layouts.
// The asm is assembled only for sm_90a (CT_HAS_WGMMA); the other targets of the same file get a
// trap, and host code must not launch a kernel using these on a device other than compute 9.0.
//
// Facts used (PTX ISA, "Asynchronous Warpgroup Level Matrix" sections):
// - A warpgroup is 4 consecutive warps (threads 128i..128i+127); wgmma.* are .sync.aligned over it.
// - wgmma.mma_async m64nNk16 .f32.bf16.bf16, A and B from shared memory: D (64 x N, fp32) =
//   A (64 x 16) * B (16 x N) + (scale_d ? D : 0). With no transpose both operands are "K-major":
//   row m of A and column n of B hold their 16 k values in 2 chunks of 8 (16 bytes).
// - D fragment: warp w of the warpgroup holds rows 16w..16w+15; lane l (g = l/4, t = l%4) holds
//   d[4j + i] = D[16w + g + 8*(i/2)][8j + 2t + (i%2)] for j = 0..N/8-1 (the m16n8 C layout of
//   mma.sync repeated along N).
// - Matrix descriptor (64 bits): start address >> 4 in bits 0-13, leading dimension byte offset
//   (LBO) >> 4 in 16-29, stride dimension byte offset (SBO) >> 4 in 32-45, base offset in 49-51
//   (0 here: patterns start on their repeat boundary), swizzle in 62-63 (0 none, 1 128B, 2 64B,
//   3 32B). Addresses are shared-window addresses.
// - Canonical K-major layouts, element (r, k) of an R x 16 operand (r along M or N):
//     none:  (r%8)*16 + (r/8)*SBO + (k/8)*LBO + (k%8)*2  (8x16-byte "core matrices")
//     W-byte swizzle (W = 32, 64, 128): (r%8)*W + (r/8)*SBO + (k/8)*16 + (k%8)*2, then the
//     16-byte chunk bits of the address [4, 4+b) are XORed with bits [7, 7+b), b = log2(W/16);
//     LBO unused. The pattern repeats every 8*W bytes, so a tile starts 8*W-aligned; a k16 step
//     inside a wider row advances the start address by 32 bytes.
// - Transposed (imm-trans-a/-b = 1, bf16/f16 only): the operand is "MN-major", its rows run along
//   k and hold consecutive m (or n). Swizzle atom of the W-byte mode: 8 k rows of W bytes (W/2
//   elements along MN). Swizzled: LBO is the stride between atoms along MN (the next W/2
//   elements), SBO between atoms along K (the next 8 k rows); no swizzle (atoms of 8 k rows x 16
//   bytes) the other way round. Element (r, k), r along M or N:
//     none:  (r%8)*2 + (k%8)*16 + (r/8)*SBO + (k/8)*LBO  (core matrices of 8 k rows x 16 bytes)
//     W-byte swizzle: (r%(W/2))*2 + (k%8)*W + (r/(W/2))*LBO + (k/8)*SBO, then the same XOR.
//   (PTX ISA "Shared Memory Matrix Layout": swizzle atoms of 8x8 (128B), 4x8 (64B), 2x8 (32B), 1x8
//   (none) 16-byte units for MN-major; "strides": MN-major LBO = stride from the first W/16 16-byte
//   rows to the next.) The 16-byte chunks stay contiguous along MN, so a gather whose 8-element
//   chunks run along M or N (the weight gradient's operands, the data gradient's weights) copies
//   them with cp.async unchanged.
// - wgmma.fence before the first wgmma.mma_async and after the registers or shared operands were
//   touched by other instructions; wgmma.commit_group closes a group; wgmma.wait_group N returns
//   when at most N groups are pending: only then may the accumulators be read or the shared
//   operands be overwritten.
// - Shared memory written by ordinary stores (the generic proxy), cp.async included, must be
//   followed by fence.proxy.async by the writing thread before wgmma (the async proxy) reads it.
// - mbarrier (8 bytes in shared memory): init(count); a phase completes when `count` arrivals
//   have happened and the transaction count is back to 0; arrive.expect_tx adds bytes to it,
//   cp.async.bulk's complete_tx subtracts the bytes it wrote. try_wait.parity(p) is true once the
//   phase of parity p has completed (so parity 1 passes on a fresh barrier).
#pragma once
#include <stdint.h>

#include "kernels/common.cuh"

// Swizzle modes as the descriptor encodes them.
enum { CT_SWZ_NONE = 0, CT_SWZ_128 = 1, CT_SWZ_64 = 2, CT_SWZ_32 = 3 };

// Row width in bytes of a swizzle mode's canonical layout (16 for no swizzle: one core-matrix row).
static __host__ __device__ __forceinline__ int ct_swz_width(int swz) {
    return swz == CT_SWZ_128 ? 128 : swz == CT_SWZ_64 ? 64 : swz == CT_SWZ_32 ? 32 : 16;
}
// The swizzle applied to a byte address (shared-window or tile offset from a 1024-aligned base).
static __host__ __device__ __forceinline__ uint32_t ct_swz_apply(int swz, uint32_t addr) {
    uint32_t bits = swz == CT_SWZ_128 ? 7u : swz == CT_SWZ_64 ? 3u : swz == CT_SWZ_32 ? 1u : 0u;
    return addr ^ (((addr >> 7) & bits) << 4);
}
static __host__ __device__ __forceinline__ uint64_t ct_wgmma_desc_bits(uint32_t addr, uint32_t lbo, uint32_t sbo, int swz) {
    return (uint64_t)((addr >> 4) & 0x3fff) | (uint64_t)((lbo >> 4) & 0x3fff) << 16 |
           (uint64_t)((sbo >> 4) & 0x3fff) << 32 | (uint64_t)(swz & 3) << 62;
}

#if defined(CTRAIN_EMU)

static __device__ __forceinline__ uint32_t ct_smem_u32(const void *p) { return ::emu::smem_offset(p); }
template <int N, int TA = 0, int TB = 0>
static __device__ __forceinline__ void ct_wgmma_bf16(float *d, uint64_t da, uint64_t db, int scale_d) {
    static_assert(N % 8 == 0 && N >= 8 && N <= 256, "wgmma m64nNk16: N a multiple of 8 up to 256");
    ::emu::wgmma_bf16(d, da, db, N, scale_d, TA, TB);
}
static __device__ __forceinline__ void ct_wgmma_fence() { ::emu::wgmma_fence(); }
static __device__ __forceinline__ void ct_wgmma_commit() { ::emu::wgmma_commit(); }
template <int N>
static __device__ __forceinline__ void ct_wgmma_wait() { ::emu::wgmma_wait(N); }
// The fences are emulated (kernels/emu/wgmma.cpp's memory proxies). CT_MUTANT_NO_PROXY_FENCE and
// CT_MUTANT_NO_MBAR_INIT_FENCE delete them from a translation unit that defines them before its
// includes: tests/emu_proxy_fences.cpp shows that each deletion is caught.
static __device__ __forceinline__ void ct_fence_proxy_async() {
#ifndef CT_MUTANT_NO_PROXY_FENCE
    ::emu::fence_proxy_async();
#endif
}
template <int R>
static __device__ __forceinline__ void ct_wgmma_fence_operand(float *d) {}
static __device__ __forceinline__ void ct_mbar_init(uint64_t *bar, int count) { ::emu::mbar_init(bar, count); }
// Orders the inits before the barriers' use by other threads and the async proxy.
static __device__ __forceinline__ void ct_mbar_init_fence() {
#ifndef CT_MUTANT_NO_MBAR_INIT_FENCE
    ::emu::mbar_init_fence();
#endif
}
static __device__ __forceinline__ void ct_mbar_arrive(uint64_t *bar) { ::emu::mbar_arrive(bar, 0); }
static __device__ __forceinline__ void ct_mbar_arrive_expect_tx(uint64_t *bar, uint32_t bytes) { ::emu::mbar_arrive(bar, bytes); }
static __device__ __forceinline__ void ct_mbar_wait(uint64_t *bar, int parity) { ::emu::mbar_wait(bar, parity); }
// Bulk copy of `bytes` (a multiple of 16, both addresses 16-byte aligned) global -> shared; its
// completion subtracts `bytes` from bar's transaction count.
static __device__ __forceinline__ void ct_cp_async_bulk(void *smem, const void *gmem, uint32_t bytes, uint64_t *bar) {
    ::emu::cp_async_bulk(smem, gmem, bytes, bar);
}

#else  // nvcc

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define CT_HAS_WGMMA 1
#else
#define CT_HAS_WGMMA 0
#endif

static __device__ __forceinline__ void ct_wgmma_unavailable() {
#ifdef __CUDA_ARCH__
    __trap();  // built for a target without wgmma: the host side must not have launched this
#endif
}
static __device__ __forceinline__ uint32_t ct_smem_u32(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }
// TA, TB: the transpose immediates (imm-trans-a, imm-trans-b): 0 reads the operand K-major, 1
// MN-major (M-major A, N-major B); bf16 allows both.
template <int N, int TA = 0, int TB = 0>
__device__ __forceinline__ void ct_wgmma_bf16(float *d, uint64_t da, uint64_t db, int scale_d) {
    static_assert(N == 16 || N == 64 || N == 128, "wgmma m64nNk16: N = 16, 64 or 128 wrapped");
    static_assert((TA == 0 || TA == 1) && (TB == 0 || TB == 1), "transpose immediates are 0 or 1");
#if CT_HAS_WGMMA
    if constexpr (N == 16) {
        asm volatile(
            "{\n.reg .pred p;\nsetp.ne.b32 p, %10, 0;\n"
            "wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16 {"
            "%0, %1, %2, %3, %4, %5, %6, %7"
            "}, %8, %9, p, 1, 1, %11, %12;\n}\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
            : "l"(da), "l"(db), "r"(scale_d), "n"(TA), "n"(TB));
    }
    if constexpr (N == 64) {
        asm volatile(
            "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
            "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {"
            "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15,"
            "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
            "}, %32, %33, p, 1, 1, %35, %36;\n}\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
              "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
              "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
              "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
            : "l"(da), "l"(db), "r"(scale_d), "n"(TA), "n"(TB));
    }
    if constexpr (N == 128) {
        asm volatile(
            "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
            "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {"
            "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15,"
            "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31,"
            "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47,"
            "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
            "}, %64, %65, p, 1, 1, %67, %68;\n}\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
              "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
              "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
              "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
              "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
              "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
              "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
              "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
            : "l"(da), "l"(db), "r"(scale_d), "n"(TA), "n"(TB));
    }
#else
    ct_wgmma_unavailable();
#endif
}
static __device__ __forceinline__ void ct_wgmma_fence() {
#if CT_HAS_WGMMA
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#else
    ct_wgmma_unavailable();
#endif
}
static __device__ __forceinline__ void ct_wgmma_commit() {
#if CT_HAS_WGMMA
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#else
    ct_wgmma_unavailable();
#endif
}
// The accumulators are "+f" operands of every wgmma, so the compiler keeps them in registers
// across the asynchronous window; the "memory" clobber orders shared-memory reuse after the wait.
template <int N>
static __device__ __forceinline__ void ct_wgmma_wait() {
#if CT_HAS_WGMMA
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
#else
    ct_wgmma_unavailable();
#endif
}
// Pins accumulator registers at this point (an empty asm reading and writing each), so that the
// compiler neither moves their other uses into an asynchronous window nor copies them there
// (ptxas serialises wgmma when any other instruction touches their registers in flight: C7514).
template <int R>
static __device__ __forceinline__ void ct_wgmma_fence_operand(float *d) {
#pragma unroll
    for (int i = 0; i < R; i++) asm volatile("" : "+f"(d[i])::"memory");
}
static __device__ __forceinline__ void ct_fence_proxy_async() {
#if CT_HAS_WGMMA
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#else
    ct_wgmma_unavailable();
#endif
}
static __device__ __forceinline__ void ct_mbar_init(uint64_t *bar, int count) {
#if CT_HAS_WGMMA
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(ct_smem_u32(bar)), "r"(count) : "memory");
#else
    ct_wgmma_unavailable();
#endif
}
static __device__ __forceinline__ void ct_mbar_init_fence() {
#if CT_HAS_WGMMA
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
#else
    ct_wgmma_unavailable();
#endif
}
static __device__ __forceinline__ void ct_mbar_arrive(uint64_t *bar) {
#if CT_HAS_WGMMA
    asm volatile("{\n.reg .b64 st;\nmbarrier.arrive.shared::cta.b64 st, [%0];\n}\n" ::"r"(ct_smem_u32(bar)) : "memory");
#else
    ct_wgmma_unavailable();
#endif
}
static __device__ __forceinline__ void ct_mbar_arrive_expect_tx(uint64_t *bar, uint32_t bytes) {
#if CT_HAS_WGMMA
    asm volatile("{\n.reg .b64 st;\nmbarrier.arrive.expect_tx.shared::cta.b64 st, [%0], %1;\n}\n"
                 ::"r"(ct_smem_u32(bar)), "r"(bytes) : "memory");
#else
    ct_wgmma_unavailable();
#endif
}
#if CT_HAS_WGMMA
static __device__ __forceinline__ uint32_t ct_mbar_try_wait(uint32_t addr, int parity) {
    uint32_t done;
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done) : "r"(addr), "r"(parity) : "memory");
    return done;
}
static __device__ __forceinline__ uint64_t ct_globaltimer_ns() {
    uint64_t t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}
#endif
// Bounded: a phase that never completes (a wrong expect_tx byte count, a missing arrival) traps
// after CT_MBAR_WAIT_BOUND_NS of %globaltimer instead of hanging the program until someone kills
// it (the launch then fails with an illegal-instruction error at the next synchronisation). No
// printf: any call in a kernel that issues wgmma makes ptxas serialise all of its wgmma (C7510),
// so the trap is all a GPU says; the emulator's twin names the kernel and what the barrier
// still waits for.
#ifndef CT_MBAR_WAIT_BOUND_NS
#define CT_MBAR_WAIT_BOUND_NS 10000000000ull
#endif
static __device__ __forceinline__ void ct_mbar_wait(uint64_t *bar, int parity) {
#if CT_HAS_WGMMA
    uint32_t a = ct_smem_u32(bar);
    if (ct_mbar_try_wait(a, parity)) return;  // try_wait itself suspends for a while: the fast path
    uint64_t t0 = ct_globaltimer_ns();
    while (!ct_mbar_try_wait(a, parity))
        if (ct_globaltimer_ns() - t0 > CT_MBAR_WAIT_BOUND_NS) __trap();
#else
    ct_wgmma_unavailable();
#endif
}
static __device__ __forceinline__ void ct_cp_async_bulk(void *smem, const void *gmem, uint32_t bytes, uint64_t *bar) {
#if CT_HAS_WGMMA
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n"
                 ::"r"(ct_smem_u32(smem)), "l"(gmem), "r"(bytes), "r"(ct_smem_u32(bar)) : "memory");
#else
    ct_wgmma_unavailable();
#endif
}

#endif

// Byte offset of element (r, k) in an R-row operand tile laid out in the canonical K-major layout
// of `swz` (the tile 1024-byte aligned), with K columns in all: the W-byte swizzle modes store
// the k range in panels of W/2 columns (each panel R rows of W bytes, SBO = 8*W); no swizzle
// stores core matrices with SBO = 128 (neighbours along r) and LBO = 16*R (along k).
static __host__ __device__ __forceinline__ uint32_t ct_wg_tile_offset(int swz, int R, int r, int k) {
    if (swz == CT_SWZ_NONE) return (uint32_t)((r % 8) * 16 + (r / 8) * 128 + (k / 8) * 16 * R + (k % 8) * 2);
    int w = ct_swz_width(swz), per = w / 2, panel = k / per, kk = k % per;
    uint32_t a = (uint32_t)(panel * R * w + r * w + kk * 2);
    return ct_swz_apply(swz, a);
}
// Descriptor of k16 step s of such a tile at shared address `base`.
static __device__ __forceinline__ uint64_t ct_wg_tile_desc(int swz, int R, uint32_t base, int s) {
    if (swz == CT_SWZ_NONE) return ct_wgmma_desc_bits(base + (uint32_t)(2 * s * 16 * R), 16u * R, 128u, swz);
    int w = ct_swz_width(swz), steps = w / 32;  // k16 steps per panel row
    uint32_t a = base + (uint32_t)((s / steps) * R * w + (s % steps) * 32);
    return ct_wgmma_desc_bits(a, 16u, 8u * w, swz);
}

// The MN-major twins (transposed operands): element (r, k) of an R x K tile, r along M or N. The
// W-byte swizzle modes store R in panels of W/2 elements, each panel K rows of W bytes (LBO = the
// panel stride K*W, SBO = 8*W); no swizzle stores core matrices of 8 k rows x 8 r, SBO = 128 along
// r and LBO = 16*R along k.
static __host__ __device__ __forceinline__ uint32_t ct_wg_tile_offset_mn(int swz, int R, int K, int r, int k) {
    if (swz == CT_SWZ_NONE) return (uint32_t)((r % 8) * 2 + (k % 8) * 16 + (r / 8) * 128 + (k / 8) * 16 * R);
    int w = ct_swz_width(swz), per = w / 2;
    return ct_swz_apply(swz, (uint32_t)((r / per) * K * w + k * w + (r % per) * 2));
}
static __device__ __forceinline__ uint64_t ct_wg_tile_desc_mn(int swz, int R, int K, uint32_t base, int s) {
    if (swz == CT_SWZ_NONE) return ct_wgmma_desc_bits(base + (uint32_t)(2 * s * 16 * R), 16u * R, 128u, swz);
    int w = ct_swz_width(swz);
    return ct_wgmma_desc_bits(base + (uint32_t)(16 * s * w), (uint32_t)(K * w), 8u * w, swz);
}
