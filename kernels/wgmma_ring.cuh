// The wgmma engine's producer/consumer ring (kernels/conv_wgmma.cu), shared with the check that
// runs it on a tiny GEMM (kernels/ptx_check.cu's ct_ptx_check_ring), so the ring silicon checks is
// the engine's own code. CTA: WG_THREADS threads, warpgroup 0 produces, 1 and 2 consume; a
// WG_STAGES-deep ring of 128 x 64 A and B tiles (128B-swizzled, 32 KiB a stage) with a "full"
// (128 producer arrivals) and an "empty" (256 consumer arrivals) mbarrier per stage.
#pragma once
#include <stdint.h>

#include "kernels/common.cuh"
#include "kernels/ptx.cuh"
#include "kernels/ptx_wgmma.cuh"

#ifdef __CUDACC__
#define WG_UNROLL _Pragma("unroll")
#else
#define WG_UNROLL
#endif

#define WG_BM 128
#define WG_BN 128
#define WG_BK 64
#define WG_STAGES 4
#define WG_THREADS 384
#define WG_TILE_BYTES (WG_BM * WG_BK * 2)          // 16 KiB, A and B alike
#define WG_STAGE_BYTES (2 * WG_TILE_BYTES)         // 32 KiB
#define WG_BAR_OFF (WG_STAGES * WG_STAGE_BYTES)    // barriers after the ring

// Byte offset of row r, 16-byte chunk q in a 128B-swizzled tile.
__device__ static inline uint32_t wg_sw(int r, int q) { return (uint32_t)(r * 128 + ((q ^ (r & 7)) * 16)); }

// The MN-major tiles of the gradients (128 along M or N, 64 along k): two panels of 64 elements,
// each 64 k rows of 128 bytes (ct_wg_tile_offset_mn of 128B swizzle): chunk q (elements 8q..8q+7)
// of k row kk.
__device__ static inline uint32_t wg_sw_mn(int kk, int q) {
    return (uint32_t)((q / 8) * 64 * 128 + kk * 128 + (((q % 8) ^ (kk & 7)) * 16));
}

// The consumers' main loop, both warpgroups alike: wait for a full stage, 4 wgmma (one per k16
// step: a K-major operand's descriptor advances 32 bytes, an MN-major one's 16 rows of 128 bytes),
// commit, wait for the previous k-tile's group and release its stage. TA, TB: the operands are
// MN-major (the transpose bits). da0, db0: stage 0's descriptors; a stage adds 32 KiB (>> 4 in
// the address field, which never carries: shared addresses stay below 256 KiB).
// Producer side of the ring: once k-tile kt's copies are issued, the previous k-tile's group has
// landed (cp.async.wait_group 1): make it visible to the async proxy (wgmma reads through it) and
// arrive on that stage's full barrier. After the loop the last group lands the same way.
__device__ __forceinline__ void wg_land_prev(uint64_t *full, int kt) {
    if (kt > 0) {
        ct_cp_async_wait<1>();
        ct_fence_proxy_async();
        ct_mbar_arrive(&full[(kt - 1) % WG_STAGES]);
    }
}
__device__ __forceinline__ void wg_land_last(uint64_t *full, int ktiles) {
    if (ktiles > 0) {
        ct_cp_async_wait<0>();
        ct_fence_proxy_async();
        ct_mbar_arrive(&full[(ktiles - 1) % WG_STAGES]);
    }
}

template <int TA, int TB>
__device__ __forceinline__ void wg_consume(float (&acc)[64], uint64_t *full, uint64_t *empty, uint64_t da0,
                                           uint64_t db0, int ktiles) {
    const int step_a = TA ? (16 * 128) >> 4 : 32 >> 4, step_b = TB ? (16 * 128) >> 4 : 32 >> 4;
    // One loop, the stage and phase carried along (not unrolled by the stage count: a loop
    // boundary with a group in flight makes ptxas copy the accumulators, which serialises wgmma).
    int st = 0, ph = 0, prev = 0;
    ct_wgmma_fence_operand<64>(acc);
    // Kept rolled on purpose: nvcc 13.0 does (4 HGMMA per kernel in the SASS, no C7510/C7520
    // serialisation notes from ptxas), and an unrolled copy would put a loop boundary with a group
    // in flight in the middle. The pragma pins that for other nvcc versions.
#pragma unroll 1
    for (int kt = 0; kt < ktiles; kt++) {
        ct_mbar_wait(&full[st], ph);
        ct_wgmma_fence_operand<64>(acc);
        ct_wgmma_fence();
        uint64_t so = (uint64_t)(st * (WG_STAGE_BYTES >> 4));
        WG_UNROLL
        for (int ks = 0; ks < WG_BK / 16; ks++)
            ct_wgmma_bf16<128, TA, TB>(acc, da0 + so + step_a * ks, db0 + so + step_b * ks, 1);
        ct_wgmma_commit();
        ct_wgmma_wait<1>();  // the previous k-tile's wgmma are done with their stage
        ct_wgmma_fence_operand<64>(acc);
        if (kt > 0) ct_mbar_arrive(&empty[prev]);
        prev = st;
        if (++st == WG_STAGES) {
            st = 0;
            ph ^= 1;
        }
    }
    ct_wgmma_wait<0>();
    ct_wgmma_fence_operand<64>(acc);
}

