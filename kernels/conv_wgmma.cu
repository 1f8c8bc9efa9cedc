// Convolution engine for Hopper (CT_CONV_WGMMA, --conv-engine wgmma): the implicit GEMMs of
// kernels/conv.cu (forward, data gradient, weight gradient) on wgmma (kernels/ptx_wgmma.cuh),
// warp-specialised.
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
// Takes the bf16 convolutions v2 takes (channel counts multiples of 8, 16-byte aligned operands);
// runs only on compute 9.0 (and the emulator). The epilogues are v2's: bf16 pairs (added in place
// with c_acc), fp32 pairs for the weight gradient, and the data gradient's BN backward epilogue
// with v2's bits (masking shared through kernels/conv_bn_epi.cuh, tile sums in v2's order). The gradients' gathers and tile layouts: conv_wgmma_bwd_k below.
#include "kernels/common.cuh"
#include "kernels/act.cuh"  // ct_check_vec_align
#include "kernels/conv_bn_epi.cuh"
#include "kernels/conv_gemm.cuh"
#include "kernels/conv_index.cuh"
#include "kernels/devcaps.cuh"
#include "kernels/kernels.h"
#include "kernels/ptx.cuh"
#include "kernels/ptx_wgmma.cuh"
#include "util/common.h"

#include "kernels/wgmma_ring.cuh"

#define WG_SMEM (1024 + WG_BAR_OFF + (2 * WG_STAGES + 2) * 8)  // + the epilogues' two barriers
static_assert(WG_BM == CONV_BN_TILE_ROWS, "the BN epilogues' tiles are the CTA's rows");
static_assert(WG_STAGES * WG_STAGE_BYTES >= WG_BM * WG_BN * 2 * 4, "the BN epilogues park 2 floats per element in the ring");

__global__ void __launch_bounds__(WG_THREADS) conv_wgmma_fwd_k(GemmArgs g) {
    CT_DYN_SMEM(unsigned char, raw);
    unsigned char *sm = raw + ((1024 - ct_smem_u32(raw) % 1024) % 1024);  // the swizzle repeats at 1 KiB
    uint64_t *full = (uint64_t *)(sm + WG_BAR_OFF), *empty = full + WG_STAGES;
    uint64_t *epi = empty + WG_STAGES;  // the BN statistics epilogue's two consumer barriers
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
        ct_mbar_init(&epi[0], 256);
        ct_mbar_init(&epi[1], 256);
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
            if (m < g.M) conv_row_origin<GEMM_FWD>(g, m, img, y, x);
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
            wg_land_prev(full, kt);
        }
        wg_land_last(full, ktiles);
        return;
    }

    // Consumers: warpgroup cw owns output rows 64cw..64cw+63 of the tile.
    int cw = wg - 1;
    float acc[64];
    WG_UNROLL
    for (int i = 0; i < 64; i++) acc[i] = 0.f;
    uint32_t base = ct_smem_u32(sm);
    // Descriptors of stage 0, k16 step 0 (K-major: rows of 128 bytes, atoms of 8 rows).
    uint64_t da0 = ct_wgmma_desc_bits(base + cw * 64 * 128, 16, 1024, CT_SWZ_128);
    uint64_t db0 = ct_wgmma_desc_bits(base + WG_TILE_BYTES, 16, 1024, CT_SWZ_128);
    wg_consume<0, 0>(acc, full, empty, da0, db0, ktiles);

    // Fragment: warp w of the warpgroup, lane (gi, ti): acc[4j + e] at row 16w + gi + 8(e/2),
    // column 8j + 2ti + e%2.
    uint16_t *c = (uint16_t *)g.c;
    int w = (tid / 32) % 4, lane = tid % 32, gi = lane / 4, ti = lane % 4;
    // BN statistics (g.stats, conv2d_forward_stats_gpu) with engine v2's bits: each stored value
    // parked in the ring (free once both consumer warpgroups are past their last wgmma: barrier
    // epi[0]), then summed per column in v2's order (conv_park_tile_stats) after barrier epi[1].
    float *park = (float *)sm;
    if (g.stats) {
        ct_mbar_arrive(&epi[0]);
        ct_mbar_wait(&epi[0], 0);
    }
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
            uint32_t word = ct_f32_to_bf16(acc[4 * j + half * 2]) | (uint32_t)ct_f32_to_bf16(acc[4 * j + half * 2 + 1]) << 16;
            *(uint32_t *)p = word;
            if (g.stats) {
                float *pk = park + (size_t)(m - m0) * WG_BN + (n - n0);
                pk[0] = ct_bf16_to_f32((uint16_t)(word & 0xffffu));
                pk[1] = ct_bf16_to_f32((uint16_t)(word >> 16));
            }
        }
    }
    if (g.stats) {
        ct_mbar_arrive(&epi[1]);
        ct_mbar_wait(&epi[1], 0);
        if (tid >= 256) conv_park_tile_stats(park, g.stats, g.M, g.N, m0, n0, tid - 256);
    }
}

// ---------------------------------------------------------------------------------------------
// The gradients: the same CTA, ring and consumers, other gathers (the GEMMs of kernels/conv.cu).
// DGRAD (one launch per stride phase, as engine v2): A = dout rows of the phase's input pixels,
// K-major like the forward's (k = (ri, si, k_out), 8 output channels per chunk, the tap walked by
// carries); B = the flipped weights, N-major: k row (ri, si, k_out) is the weight row
// w[k_out, r0 + ri*st, s0 + si*st, :], whose channels are contiguous, so a chunk is 8 input
// channels and goes by cp.async as it is; the row offsets come from a per-CTA table in shared
// memory (one load per thread and k-tile). WGRAD: k runs over output pixels; A = dout
// (M-major: a pixel's output channels are contiguous), B = the input's im2col (N-major: (r, s, c)
// with c contiguous), a thread pair per pixel row, its (img, p, q) advanced with carries. Both
// read MN-major tiles through the transpose bits. The split-K plan (ct_conv_wgmma_split) is a
// function of the shape only and its partials are summed in split order by ct_conv_reduce_splits,
// so the bits depend on nothing but the shape.
template <int MODE>
__global__ void __launch_bounds__(WG_THREADS) conv_wgmma_bwd_k(GemmArgs g) {
    CT_DYN_SMEM(unsigned char, raw);
    unsigned char *sm = raw + ((1024 - ct_smem_u32(raw) % 1024) % 1024);
    uint64_t *full = (uint64_t *)(sm + WG_BAR_OFF), *empty = full + WG_STAGES;
    uint64_t *epi = empty + WG_STAGES;  // DGRAD: the BN epilogue's two consumer barriers
    int *tab = (int *)(epi + 2);        // DGRAD: weight row offset per k (-1: none)
    const ConvShape &s = g.s;
    int tid = threadIdx.x, wg = __shfl_sync(0xffffffffu, tid / 128, 0);
    int m0 = blockIdx.x * WG_BM, n0 = blockIdx.y * WG_BN;
    int kb = blockIdx.z * g.k_split, ke = min(g.k_end, kb + g.k_split);
    int ktiles = ke > kb ? (ke - kb + WG_BK - 1) / WG_BK : 0;
    if (tid == 0) {
        for (int i = 0; i < WG_STAGES; i++) {
            ct_mbar_init(&full[i], 128);
            ct_mbar_init(&empty[i], 256);
        }
        if (MODE == GEMM_DGRAD) {
            ct_mbar_init(&epi[0], 256);
            ct_mbar_init(&epi[1], 256);
        }
        ct_mbar_init_fence();
    }
    if (MODE == GEMM_DGRAD)
        for (int e = tid; e < ktiles * WG_BK; e += WG_THREADS) {
            int k = kb + e, off = -1;
            if (k < ke) {
                int ko = k % s.K, tt = k / s.K, si = tt % g.ns, ri = tt / g.ns;
                off = ((ko * s.R + g.r0 + ri * s.stride) * s.S + g.s0 + si * s.stride) * s.C;
            }
            tab[e] = off;
        }
    __syncthreads();

    if (wg == 0) {
        const uint16_t *a = (const uint16_t *)g.a, *b = (const uint16_t *)g.b;
        if (MODE == GEMM_DGRAD) {
            // A as the forward's: chunk column q (k = k0 + 8q), rows r8 + 16i (phase pixels).
            int q = tid % 8, r8 = tid / 8;
            const uint16_t *a_row[8];
            int a_y[8], a_x[8];
            WG_UNROLL
            for (int i = 0; i < 8; i++) {
                int m = m0 + r8 + 16 * i, img = 0, y = -0x40000000, x = 0;
                if (m < g.M) conv_row_origin<GEMM_DGRAD>(g, m, img, y, x);
                a_row[i] = a + ((long long)(img * s.P + (m < g.M ? y : 0)) * s.Q + x) * s.K;
                a_y[i] = y;
                a_x[i] = x;
            }
            // B: k row kb2 = tid / 2, the 8 chunks of panel hb = tid % 2 (one table load per k-tile).
            const int kb2 = tid / 2, hb = tid % 2;
            int bcol = 0;  // bit u: chunk u of the panel inside the GEMM
            WG_UNROLL
            for (int u = 0; u < 8; u++) bcol |= (n0 + 64 * hb + 8 * u < g.N) << u;
            const uint16_t *bp = b + n0 + 64 * hb;
            // The phase tap (ri, si) and output channel of this thread's A chunk column.
            int k = kb + q * 8, c = k % s.K, t = k / s.K, sx = t % g.ns, r = t / g.ns;
            const int dc = WG_BK % s.K, dt = WG_BK / s.K;
            for (int kt = 0; kt < ktiles; kt++) {
                int st = kt % WG_STAGES;
                ct_mbar_wait(&empty[st], ((kt / WG_STAGES) & 1) ^ 1);
                unsigned char *As = sm + st * WG_STAGE_BYTES, *Bs = As + WG_TILE_BYTES;
                bool kok = k < ke;
                int delta = c - (r * s.Q + sx) * s.K;
                WG_UNROLL
                for (int i = 0; i < 8; i++) {
                    bool ok = kok && (unsigned)(a_y[i] - r) < (unsigned)s.P && (unsigned)(a_x[i] - sx) < (unsigned)s.Q;
                    ct_cp_async_cg16(As + wg_sw(r8 + 16 * i, q), ok ? a_row[i] + delta : a, ok ? 16 : 0);
                }
                int off = tab[kt * WG_BK + kb2];
                WG_UNROLL
                for (int u = 0; u < 8; u++) {
                    bool ok = (bcol >> u & 1) && off >= 0;
                    ct_cp_async_cg16(Bs + wg_sw_mn(kb2, 8 * hb + u), ok ? bp + off + 8 * u : b, ok ? 16 : 0);
                }
                ct_cp_async_commit();
                k += WG_BK;
                c += dc;
                t = dt + (c >= s.K);
                c -= c >= s.K ? s.K : 0;
                sx += t;
                while (sx >= g.ns) {
                    sx -= g.ns;
                    r++;
                }
                wg_land_prev(full, kt);
            }
        } else {
            // One pixel row j = kb + 64kt + kk per thread pair (kk = tid / 2), the 8 chunks of
            // panel h = tid % 2 in A (dout[j, m0 + 64h + 8u], contiguous) and B (im2col columns
            // n = n0 + 64h + 8u, whose taps (r, s) and channels are fixed for the thread): one
            // pixel's (img, p, q) to advance per k-tile, 8 bound checks against fixed taps.
            const int kk = tid / 2, h = tid % 2;
            int acol = 0, wr[8], ws[8], woff[8];
            WG_UNROLL
            for (int u = 0; u < 8; u++) {
                acol |= (m0 + 64 * h + 8 * u < g.M) << u;
                int n = n0 + 64 * h + 8 * u;
                wr[u] = 0x10000000;  // a tap no window reaches: columns past N read nothing
                ws[u] = woff[u] = 0;
                if (n < g.N) {
                    int c = n % s.C, t = n / s.C;
                    ws[u] = t % s.S;
                    wr[u] = t / s.S;
                    woff[u] = (wr[u] * s.W + ws[u]) * s.C + c;
                }
            }
            const uint16_t *ap = a + (size_t)(kb + kk) * s.K + m0 + 64 * h;
            int j = kb + kk;
            ConvPixel px = conv_pixel(s, j);
            const ConvPixel pstep = conv_pixel(s, WG_BK);
            for (int kt = 0; kt < ktiles; kt++) {
                int st = kt % WG_STAGES;
                ct_mbar_wait(&empty[st], ((kt / WG_STAGES) & 1) ^ 1);
                unsigned char *As = sm + st * WG_STAGE_BYTES, *Bs = As + WG_TILE_BYTES;
                bool jok = j < ke;
                int y = px.p * s.stride - s.pad, x = px.q * s.stride - s.pad;
                const uint16_t *bp = b + ((long long)(px.img * s.H + y) * s.W + x) * s.C;
                WG_UNROLL
                for (int u = 0; u < 8; u++) {
                    bool ok = jok && (acol >> u & 1);
                    ct_cp_async_cg16(As + wg_sw_mn(kk, 8 * h + u), ok ? ap + 8 * u : a, ok ? 16 : 0);
                    ok = jok && (unsigned)(y + wr[u]) < (unsigned)s.H && (unsigned)(x + ws[u]) < (unsigned)s.W;
                    ct_cp_async_cg16(Bs + wg_sw_mn(kk, 8 * h + u), ok ? bp + woff[u] : b, ok ? 16 : 0);
                }
                ct_cp_async_commit();
                ap += (size_t)WG_BK * s.K;
                j += WG_BK;
                // The pixel 64 on: the precomputed (img, p, q) step with carries.
                conv_pixel_step(s, px, pstep);
                wg_land_prev(full, kt);
            }
        }
        wg_land_last(full, ktiles);
        return;
    }

    int cw = wg - 1;
    float acc[64];
    WG_UNROLL
    for (int i = 0; i < 64; i++) acc[i] = 0.f;
    uint32_t base = ct_smem_u32(sm);
    // MN-major descriptors: LBO = the 64-element panel stride (8 KiB), SBO = 8 k rows (1 KiB).
    // DGRAD's A is K-major (the forward's); WGRAD's A panel cw holds this warpgroup's 64 rows.
    const int ta = MODE == GEMM_WGRAD;
    uint64_t da0 = ta ? ct_wgmma_desc_bits(base + cw * 64 * 128, 64 * 128, 1024, CT_SWZ_128)
                      : ct_wgmma_desc_bits(base + cw * 64 * 128, 16, 1024, CT_SWZ_128);
    uint64_t db0 = ct_wgmma_desc_bits(base + WG_TILE_BYTES, 64 * 128, 1024, CT_SWZ_128);
    if (MODE == GEMM_WGRAD) wg_consume<1, 1>(acc, full, empty, da0, db0, ktiles);
    else wg_consume<0, 1>(acc, full, empty, da0, db0, ktiles);

    // Fragment as the forward's. DGRAD: bf16 pairs at the phase's input pixel, added in place
    // with c_acc (one rounding, as v2); WGRAD: fp32 pairs into this split's partial.
    int w = (tid / 32) % 4, lane = tid % 32, gi = lane / 4, ti = lane % 4;
    // BN backward epilogue: each pair masked as v2 masks it (conv_bn_epi.cuh), its two addends
    // {g, g (x - mean)} parked per element in the ring (128 x 128 x 2 floats = the ring's 128 KiB;
    // free once both consumer warpgroups are past their last wgmma: barrier epi[0]), then summed
    // per column in v2's order (conv_park_tile_gsums) after barrier epi[1].
    const bool bn = MODE == GEMM_DGRAD && g.bn.tiles, tail = bn && (g.bn.y || g.bn.mask);
    float *park = (float *)sm;
    if (bn) {
        ct_mbar_arrive(&epi[0]);
        ct_mbar_wait(&epi[0], 0);
    }
    WG_UNROLL
    for (int half = 0; half < 2; half++) {
        int m = m0 + cw * 64 + w * 16 + gi + half * 8;
        if (m >= g.M) continue;
        size_t row = m;
        if (MODE == GEMM_DGRAD) row = conv_dgrad_dx_row(g, m);
        WG_UNROLL
        for (int j = 0; j < 16; j++) {
            int n = n0 + 8 * j + 2 * ti;  // even; N is a multiple of 8
            if (n >= g.N) continue;
            float v0 = acc[4 * j + half * 2], v1 = acc[4 * j + half * 2 + 1];
            if (MODE == GEMM_WGRAD) {
                float *p = (float *)g.c + (size_t)blockIdx.z * g.c_split_stride + row * g.N + n;
                ct_check_vec_align(p, sizeof(float2));
                CT_COST_ACCESS(p, sizeof(float2), true);
                *(float2 *)p = make_float2(v0, v1);
                continue;
            }
            uint16_t *p = (uint16_t *)g.c + row * g.N + n;
            ct_check_vec_align(p, sizeof(uint32_t));
            if (g.c_acc) {
                CT_COST_ACCESS(p, sizeof(uint32_t), false);
                uint32_t old = *(const uint32_t *)p;
                v0 = __fadd_rn(v0, ct_bf16_to_f32((uint16_t)(old & 0xffffu)));
                v1 = __fadd_rn(v1, ct_bf16_to_f32((uint16_t)(old >> 16)));
            }
            uint32_t word = ct_f32_to_bf16(v0) | (uint32_t)ct_f32_to_bf16(v1) << 16;
            if (bn) {
                float mu[2], sc[2] = {0.f, 0.f}, be[2] = {0.f, 0.f}, gv[2], gd[2];
                WG_UNROLL
                for (int e = 0; e < 2; e++) {
                    mu[e] = ct_ld(g.bn.mean, n + e);
                    if (!tail) {
                        sc[e] = __fmul_rn(ct_ld(g.bn.gamma, n + e), ct_ld(g.bn.invstd, n + e));
                        be[e] = ct_ld(g.bn.beta, n + e);
                    }
                }
                word = conv_bn_mask_pair(g.bn, row * g.N + n, word, tail, mu, sc, be, gv, gd);
                float *pk = park + ((size_t)(m - m0) * WG_BN + (n - n0)) * 2;
                pk[0] = gv[0];
                pk[1] = gd[0];
                pk[2] = gv[1];
                pk[3] = gd[1];
            }
            CT_COST_ACCESS(p, sizeof(uint32_t), true);
            *(uint32_t *)p = word;
        }
    }
    if (bn) {
        ct_mbar_arrive(&epi[1]);
        ct_mbar_wait(&epi[1], 0);
        if (tid >= 256) conv_park_tile_gsums(park, g.bn.tiles, g.M, g.N, m0, n0, tid - 256);
    }
}

// ---------------------------------------------------------------------------------------------
// Host side.

// Dynamic shared memory of a launch: the ring and barriers, plus DGRAD's weight row table.
static size_t wg_smem_bytes(int mode, int k_split) {
    size_t kt = ((size_t)k_split + WG_BK - 1) / WG_BK;
    return WG_SMEM + (mode == GEMM_DGRAD ? kt * WG_BK * sizeof(int) : 0);
}

extern "C" int ct_conv_wgmma_eligible(int mode, const GemmArgs *g) {
    if (!g->tc_ok || !g->vec_a || !g->vec_b) return 0;
    if (g->N % 8 || !ct_aligned(8, g->c)) return 0;
    // sm_90a code only (per device: ranks may sit on different GPUs), within its opt-in limit.
    if (!ct_dev_has_wgmma()) return 0;
    return wg_smem_bytes(mode, mode == GEMM_DGRAD ? g->k_end : 0) <= ct_dev_caps().smem_optin;
}

// The weight gradient's split plan for this engine's tiles: k_split a multiple of 64, so no k-tile
// straddles a split's end (with v2's multiples of 32 half of such a tile multiplies zeros).
extern "C" void ct_conv_wgmma_split(int M, int N, int K, int *splits, int *k_split) {
    ct_split_plan(M, N, K, WG_BM, WG_BN, WG_BK, splits, k_split);
}

extern "C" void ct_conv_wgmma_run(int mode, GemmArgs g, float *work, float *final_out, cudaStream_t st) {
    int splits = ct_conv_split_args(mode, &g, work, WG_BM, WG_BN, WG_BK);
    long long tiles_m = (g.M + WG_BM - 1) / WG_BM, tiles_n = (g.N + WG_BN - 1) / WG_BN;
    if (tiles_m > 0x7fffffff || tiles_n > 65535 || splits > 65535)
        ct_die("conv: GEMM of %d x %d too large for the grid", g.M, g.N);
    dim3 grid((unsigned)tiles_m, (unsigned)tiles_n, (unsigned)splits);
    size_t smem = wg_smem_bytes(mode, g.k_split);
    void (*kern)(GemmArgs) = mode == GEMM_FWD     ? conv_wgmma_fwd_k
                             : mode == GEMM_DGRAD ? conv_wgmma_bwd_k<GEMM_DGRAD>
                                                  : conv_wgmma_bwd_k<GEMM_WGRAD>;
    CT_CUDA_CHECK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    CT_LAUNCH(kern, grid, WG_THREADS, smem, st, g);
    CT_CHECK_LAUNCH("conv GEMM (wgmma)");
    if (splits > 1) ct_conv_reduce_splits(final_out, work, splits, (size_t)g.M * g.N, st);
}
