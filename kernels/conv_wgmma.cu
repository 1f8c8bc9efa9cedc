// Convolution engine for Hopper (CT_CONV_WGMMA, CTRAIN_CONV_ENGINE=wgmma): the forward implicit
// GEMM of kernels/conv.cu on wgmma (kernels/ptx_wgmma.cuh), warp-specialised.
//
// Why: on engine v2 (mma.sync) every 16x8x16 product costs the issuing warp an instruction plus
// its share of ldmatrix and address arithmetic (docs/BENCHMARKS.md: 2-3 issued instructions per
// 4,096 tensor FLOPs at best). One wgmma m64n128k16 does 64 of those products from shared memory
// with no register operands to load, so the consumer loop issues a handful of instructions per
// 64x128x64 step and the gather arithmetic moves to a separate producer warpgroup.
//
// CTA: 384 threads. Warpgroup 0 produces, warpgroups 1 and 2 consume rows 0-63 and 64-127 of the
// 128 x 128 output tile. A 4-stage ring of 128x64 A (im2col rows) and 128x64 B (weight rows)
// tiles, each in the 128B-swizzle K-major layout (row r: 128 bytes, 16-byte chunk q at
// (q ^ r%8)), 32 KiB per stage; per stage a "full" mbarrier (128 producer arrivals) and an
// "empty" one (256 consumer arrivals).
// Producer: the gather needs a bound check per 16-byte chunk (padding taps read as zeros), which
// cp.async's src-size zero-fill does for free; cp.async.bulk can neither skip nor swizzle, and
// TMA's im2col mode needs driver-API tensor maps (a later step). Each producer thread copies one
// k chunk column of 8 A rows and 8 B rows per k-tile, commits, and once the group of the previous
// k-tile has landed (cp.async.wait_group 1) fences it to the async proxy and arrives on its full
// barrier. Consumer: wait full, 4 wgmma (k16 steps: descriptor start + 32 bytes), commit, wait
// for the previous k-tile's group, release its stage.
// Takes the bf16 forward convolutions v2 takes (channel counts multiples of 8, 16-byte aligned
// operands); runs only on compute 9.0 (and the emulator). The epilogue is v2's: bf16 pairs.
#include "kernels/common.cuh"
#include "kernels/act.cuh"  // ct_check_vec_align
#include "kernels/conv_gemm.cuh"
#include "kernels/kernels.h"
#include "kernels/ptx.cuh"
#include "kernels/ptx_wgmma.cuh"
#include "util/common.h"

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
#define WG_SMEM (1024 + WG_BAR_OFF + 2 * WG_STAGES * 8)

// Byte offset of row r, 16-byte chunk q in a 128B-swizzled tile.
__device__ static inline uint32_t wg_sw(int r, int q) { return (uint32_t)(r * 128 + ((q ^ (r & 7)) * 16)); }

__global__ void __launch_bounds__(WG_THREADS) conv_wgmma_fwd_k(GemmArgs g) {
    CT_DYN_SMEM(unsigned char, raw);
    unsigned char *sm = raw + ((1024 - ct_smem_u32(raw) % 1024) % 1024);  // the swizzle repeats at 1 KiB
    uint64_t *full = (uint64_t *)(sm + WG_BAR_OFF), *empty = full + WG_STAGES;
    const ConvShape &s = g.s;
    // The role from a shuffle: ptxas then knows it is warp-uniform and does not serialise the
    // wgmma behind the role branch (C7520 "WG.AR in divergent path" with a plain tid / 128).
    int tid = threadIdx.x, wg = __shfl_sync(0xffffffffu, tid / 128, 0);
    int m0 = blockIdx.x * WG_BM, n0 = blockIdx.y * WG_BN;
    int ktiles = (g.k_end + WG_BK - 1) / WG_BK;
    if (tid == 0) {
        for (int i = 0; i < WG_STAGES; i++) {
            ct_mbar_init(&full[i], 128);
            ct_mbar_init(&empty[i], 256);
        }
        ct_mbar_init_fence();
    }
    __syncthreads();

    if (wg == 0) {
        // Producer. Chunk column q (k = k0 + 8q), rows r8 + 16i of A and B.
        const uint16_t *a = (const uint16_t *)g.a, *b = (const uint16_t *)g.b;
        int q = tid % 8, r8 = tid / 8;
        const uint16_t *a_row[8], *b_row[8];
        int a_y[8], a_x[8];
        WG_UNROLL
        for (int i = 0; i < 8; i++) {
            int m = m0 + r8 + 16 * i, img = 0, y = -0x40000000, x = 0;
            if (m < g.M) {
                int qq = m % s.Q, t = m / s.Q;
                img = t / s.P;
                y = (t % s.P) * s.stride - s.pad;
                x = qq * s.stride - s.pad;
            }
            a_row[i] = a + ((long long)(img * s.H + (m < g.M ? y : 0)) * s.W + x) * s.C;
            a_y[i] = y;
            a_x[i] = x;
            int n = n0 + r8 + 16 * i;
            b_row[i] = n < g.N ? b + (size_t)n * g.K : NULL;
        }
        // The tap of this thread's chunk column, advanced by 64 channels per k-tile.
        int k = q * 8, c = k % s.C, t = k / s.C, sx = t % s.S, r = t / s.S;
        const int dc = WG_BK % s.C, dt = WG_BK / s.C;
        for (int kt = 0; kt < ktiles; kt++) {
            int st = kt % WG_STAGES;
            ct_mbar_wait(&empty[st], ((kt / WG_STAGES) & 1) ^ 1);
            unsigned char *As = sm + st * WG_STAGE_BYTES, *Bs = As + WG_TILE_BYTES;
            bool kok = k < g.k_end;
            int delta = (r * s.W + sx) * s.C + c;
            WG_UNROLL
            for (int i = 0; i < 8; i++) {
                int row = r8 + 16 * i;
                bool ok = kok && (unsigned)(a_y[i] + r) < (unsigned)s.H && (unsigned)(a_x[i] + sx) < (unsigned)s.W;
                ct_cp_async_cg16(As + wg_sw(row, q), ok ? a_row[i] + delta : a, ok ? 16 : 0);
                bool bok = kok && b_row[i];
                ct_cp_async_cg16(Bs + wg_sw(row, q), bok ? b_row[i] + k : b, bok ? 16 : 0);
            }
            ct_cp_async_commit();
            // Next k-tile's tap: k += 64 with carries through (c, s, r).
            k += WG_BK;
            c += dc;
            t = dt + (c >= s.C);
            c -= c >= s.C ? s.C : 0;
            sx += t;
            while (sx >= s.S) {
                sx -= s.S;
                r++;
            }
            if (kt > 0) {
                ct_cp_async_wait<1>();
                ct_fence_proxy_async();
                ct_mbar_arrive(&full[(kt - 1) % WG_STAGES]);
            }
        }
        if (ktiles > 0) {
            ct_cp_async_wait<0>();
            ct_fence_proxy_async();
            ct_mbar_arrive(&full[(ktiles - 1) % WG_STAGES]);
        }
        return;
    }

    // Consumers: warpgroup cw owns output rows 64cw..64cw+63 of the tile.
    int cw = wg - 1;
    float acc[64];
    WG_UNROLL
    for (int i = 0; i < 64; i++) acc[i] = 0.f;
    uint32_t base = ct_smem_u32(sm);
    // Descriptors of stage 0, k16 step 0; a stage adds 32 KiB, a step 32 bytes (>> 4 in the
    // address field, which never carries: shared addresses stay below 256 KiB).
    uint64_t da0 = ct_wgmma_desc_bits(base + cw * 64 * 128, 16, 1024, CT_SWZ_128);
    uint64_t db0 = ct_wgmma_desc_bits(base + WG_TILE_BYTES, 16, 1024, CT_SWZ_128);
    // One loop, the stage and phase carried along (not unrolled by the stage count: a loop
    // boundary with a group in flight makes ptxas copy the accumulators, which serialises wgmma).
    int st = 0, ph = 0, prev = 0;
    ct_wgmma_fence_operand<64>(acc);
    for (int kt = 0; kt < ktiles; kt++) {
        ct_mbar_wait(&full[st], ph);
        ct_wgmma_fence_operand<64>(acc);
        ct_wgmma_fence();
        uint64_t so = (uint64_t)(st * (WG_STAGE_BYTES >> 4));
        WG_UNROLL
        for (int ks = 0; ks < WG_BK / 16; ks++) ct_wgmma_bf16<128>(acc, da0 + so + 2 * ks, db0 + so + 2 * ks, 1);
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

    // Fragment: warp w of the warpgroup, lane (gi, ti): acc[4j + e] at row 16w + gi + 8(e/2),
    // column 8j + 2ti + e%2.
    uint16_t *c = (uint16_t *)g.c;
    int w = (tid / 32) % 4, lane = tid % 32, gi = lane / 4, ti = lane % 4;
    WG_UNROLL
    for (int half = 0; half < 2; half++) {
        int m = m0 + cw * 64 + w * 16 + gi + half * 8;
        if (m >= g.M) continue;
        WG_UNROLL
        for (int j = 0; j < 16; j++) {
            int n = n0 + 8 * j + 2 * ti;  // even; N is a multiple of 8
            if (n >= g.N) continue;
            uint16_t *p = c + (size_t)m * g.N + n;
            ct_check_vec_align(p, sizeof(uint32_t));
            CT_COST_ACCESS(p, sizeof(uint32_t), true);
            *(uint32_t *)p = ct_f32_to_bf16(acc[4 * j + half * 2]) | (uint32_t)ct_f32_to_bf16(acc[4 * j + half * 2 + 1]) << 16;
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Host side.

// Whether the current device runs sm_90a code (cached per process; the emulator always does).
static int wg_device_ok(void) {
#ifdef CTRAIN_EMU
    return 1;
#else
    static int ok = -1;
    if (ok < 0) {
        int dev = 0, major = 0, minor = 0;
        CT_CUDA_CHECK(cudaGetDevice(&dev));
        CT_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
        CT_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev));
        ok = major == 9 && minor == 0;
    }
    return ok;
#endif
}

extern "C" int ct_conv_wgmma_eligible(int mode, const GemmArgs *g) {
    if (mode != GEMM_FWD || !g->tc_ok || !g->vec_a || !g->vec_b) return 0;
    if (g->N % 8 || !ct_aligned(8, g->c)) return 0;
    return wg_device_ok();
}

extern "C" void ct_conv_wgmma_run(int mode, GemmArgs g, cudaStream_t st) {
    if (mode != GEMM_FWD) ct_die("conv: the wgmma engine runs the forward pass only");
    g.k_split = g.k_end;
    g.c_split_stride = 0;
    long long tiles_m = (g.M + WG_BM - 1) / WG_BM, tiles_n = (g.N + WG_BN - 1) / WG_BN;
    if (tiles_m > 0x7fffffff || tiles_n > 65535) ct_die("conv: GEMM of %d x %d too large for the grid", g.M, g.N);
    dim3 grid((unsigned)tiles_m, (unsigned)tiles_n, 1);
    CT_CUDA_CHECK(cudaFuncSetAttribute(conv_wgmma_fwd_k, cudaFuncAttributeMaxDynamicSharedMemorySize, WG_SMEM));
    CT_LAUNCH(conv_wgmma_fwd_k, grid, WG_THREADS, WG_SMEM, st, g);
    CT_CHECK_LAUNCH("conv GEMM (wgmma)");
}
