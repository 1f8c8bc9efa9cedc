// Convolution engine v2 (CT_CONV_TC2): the implicit GEMM of kernels/conv.cu with bigger tiles and a
// main loop that is loads, ldmatrix and mma plus a pointer increment.
//
// Why a second engine: the v1 tensor-core kernel (128x64 CTA tile, 64x32 warp tiles) spends most
// of its issue slots on gather address arithmetic (9-11 instructions per mma, docs/BENCHMARKS.md).
// Here
//   - 128x128x32 CTA tiles, 4 warps of 64x64 (32 mma per 16-deep step against 8 ldmatrix.x4);
//   - 4 cp.async stages in dynamic shared memory (64 KiB, cudaFuncSetAttribute);
//   - XOR-swizzled tiles instead of padded rows: the 8 rows one ldmatrix reads land in 8 distinct
//     16-byte bank groups, and the tiles are exactly 16 KiB per stage;
//   - the k decomposition (tap, channel) is computed once per CTA into a table in shared memory
//     (one 16-byte entry per k-tile and chunk column for the gathered A operand, one offset per
//     k row for the data gradient's weights), so a tile load costs a table read plus, per chunk,
//     two bound checks and an address add;
//   - per-thread row state (image, window origin, row pointers) computed once before the loop;
//   - CTAs rasterised in groups of 8 row tiles so that consecutive CTAs share B tiles in L2.
// It takes the bf16 convolutions whose operand chunks of 8 are contiguous and 16-byte aligned
// (channel counts multiples of 8) and whose tables fit; conv.cu sends the others to v1. The
// weight gradient uses the same fixed split plan and fixed-order reduction as v1 (no atomics).
#include <string.h>

#include "kernels/common.cuh"
#include "kernels/act.cuh"  // ct_check_vec_align, ct_st
#include "kernels/conv_bn_epi.cuh"
#include "kernels/conv_gemm.cuh"
#include "kernels/conv_index.cuh"
#include "kernels/devcaps.cuh"
#include "kernels/kernels.h"
#include "kernels/ptx.cuh"
#include "util/common.h"

#ifdef __CUDACC__
#define T2_UNROLL _Pragma("unroll")
#else
#define T2_UNROLL
#endif

#define T2_BM 128
static_assert(T2_BM == CONV_BN_TILE_ROWS, "the BN epilogues' tiles are the CTA's rows");
#define T2_BN 128
#define T2_BK 32
#define T2_STAGES 4
#define T2_THREADS 128
#define T2_TILE_ELEMS (T2_BM * T2_BK)                      // 4096 bf16 = 8 KiB, A and B alike
#define T2_STAGE_BYTES (2 * T2_TILE_ELEMS * 2)             // 16 KiB
#define T2_PIPE_BYTES (T2_STAGES * T2_STAGE_BYTES)         // 64 KiB
#define T2_RASTER 8                                        // row tiles per rasterisation group
#define T2_OUT 0x10000000                                  // a tap offset no window reaches

// Tile layouts (bf16 elements). "rk": 128 rows of 32 k (FWD/DGRAD A, FWD B), rows of 4 chunks;
// "kr": 32 k rows of 128 (WGRAD A, DGRAD/WGRAD B), rows of 16 chunks. The chunk index is XORed
// with row bits so that any 8 consecutive rows at one logical chunk use 8 distinct bank groups.
__device__ static inline int t2_rk(int row, int chunk) { return row * 32 + ((chunk ^ ((row >> 1) & 3)) * 8); }
__device__ static inline int t2_kr(int row, int chunk) { return row * 128 + ((chunk ^ (row & 7)) * 8); }

// Gather entry of the A operand (FWD/DGRAD) for one k-tile and chunk column: element offset of
// the tap and channel relative to the row's base, and the tap's shift (tr, ts) for the bound check.
typedef struct {
    int delta, tr, ts, pad;
} T2Tap;

// Epilogue options in g: stats (forward) also writes per-tile BN statistics (conv_bn_epi.cuh's
// conv_tile_stats over the tile's columns n0 .. N - 1); bn.tiles (data gradient) masks by the BN's
// ReLU and writes its backward sums (conv_tile_gsums); c_acc (data gradient) adds the product to
// C's bf16 values instead of overwriting them.
template <int MODE, typename TC>
__global__ void __launch_bounds__(T2_THREADS) gemm_tc2_k(GemmArgs g, int tiles_m, int tiles_n) {
    CT_DYN_SMEM(uint16_t, sm);
    const ConvShape &s = g.s;
    const uint16_t *a = (const uint16_t *)g.a;
    const uint16_t *b = (const uint16_t *)g.b;
    int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    int wm = warp / 2, wn = warp % 2;
    // Rasterisation: CTAs walk groups of T2_RASTER row tiles column by column.
    int bid = blockIdx.x, per_group = T2_RASTER * tiles_n, grp = bid / per_group;
    int first_m = grp * T2_RASTER, gsize = min(tiles_m - first_m, T2_RASTER);
    int in_grp = bid - grp * per_group;
    int m0 = (first_m + in_grp % gsize) * T2_BM, n0 = (in_grp / gsize) * T2_BN;
    int kb = blockIdx.z * g.k_split;
    int ke = min(g.k_end, kb + g.k_split);
    int ktiles = (ke - kb + T2_BK - 1) / T2_BK;
    if (ktiles < 0) ktiles = 0;

    T2Tap *tab_a = (T2Tap *)((unsigned char *)sm + T2_PIPE_BYTES);
    int *tab_b = (int *)(tab_a + 4 * ktiles);
    const int taps_s = MODE == GEMM_DGRAD ? g.ns : s.S;
    // Tables, once per CTA. k = kb + tile*32 + chunk*8: FWD (r, s, c) of the window, DGRAD the
    // phase tap (ri, si) and output channel; a chunk past the end gets a shift no row passes.
    if (MODE != GEMM_WGRAD) {
        int cdim = MODE == GEMM_FWD ? s.C : s.K;
        for (int e = tid; e < 4 * ktiles; e += T2_THREADS) {
            int k = kb + e * 8;
            T2Tap t = {0, T2_OUT, T2_OUT, 0};
            if (k < ke) {
                int ch = k % cdim, tt = k / cdim, sx = tt % taps_s, r = tt / taps_s;
                if (MODE == GEMM_FWD) {
                    t.delta = (r * s.W + sx) * s.C + ch;
                    t.tr = r;
                    t.ts = sx;
                } else {
                    t.delta = ch - (r * s.Q + sx) * s.K;
                    t.tr = -r;
                    t.ts = -sx;
                }
            }
            tab_a[e] = t;
        }
    }
    if (MODE == GEMM_DGRAD) {  // weight row offsets w[k_out, r0 + ri*st, s0 + si*st, :]
        for (int e = tid; e < T2_BK * ktiles; e += T2_THREADS) {
            int k = kb + e, off = (int)0x80000000u;  // no row: negative, and offset 0 once masked
            if (k < ke) {
                int ko = k % s.K, tt = k / s.K, si = tt % taps_s, ri = tt / taps_s;
                off = ((ko * s.R + g.r0 + ri * s.stride) * s.S + g.s0 + si * s.stride) * s.C;
            }
            tab_b[e] = off;
        }
    }

    // Per-thread load assignment. "rk" tiles: rows tid/4 + 32*i, chunk tid%4; "kr" tiles: row
    // tid/4, chunks tid%4 + 4*i. Destinations within a stage, in elements.
    const int q4 = tid % 4, r4 = tid / 4;
    int dst_rk = t2_rk(r4, q4);  // + i * 32 rows = + i * 1024 elements (swizzle bits unchanged)
    int dst_kr[4];
    T2_UNROLL
    for (int i = 0; i < 4; i++) dst_kr[i] = t2_kr(r4, q4 + 4 * i);

    // A rows (FWD/DGRAD): window origin (y, x) and the row's base offset; a row past M gets a
    // y that fails every bound check.
    const uint16_t *a_row[4];  // the row's window origin (may point outside the tensor: never read)
    int a_y[4], a_x[4];
    int hh = MODE == GEMM_FWD ? s.H : s.P, wwid = MODE == GEMM_FWD ? s.W : s.Q;
    if (MODE != GEMM_WGRAD) {
        T2_UNROLL
        for (int i = 0; i < 4; i++) {
            int m = m0 + r4 + 32 * i, img = 0, y = -2 * T2_OUT, x = 0;
            if (m < g.M) conv_row_origin<MODE>(g, m, img, y, x);
            int cd = MODE == GEMM_FWD ? s.C : s.K;
            a_row[i] = a + ((long long)(img * hh + y) * wwid + x) * cd;
            a_y[i] = y;
            a_x[i] = x;
        }
    }
    // FWD B rows: weight rows n at k = kb + chunk; one k offset advanced by 32 per tile.
    const uint16_t *b_row[4];
    bool b_ok[4];
    int b_k = 0;
    if (MODE == GEMM_FWD) {
        T2_UNROLL
        for (int i = 0; i < 4; i++) {
            int n = n0 + r4 + 32 * i;
            b_ok[i] = n < g.N;
            b_row[i] = b + (size_t)(b_ok[i] ? n : 0) * g.K + kb + q4 * 8;
        }
    }
    // DGRAD B / WGRAD A columns: chunk i covers columns c0 + 8*(q4 + 4*i) of the n (m) range.
    int col_ok = 0;  // bit i: chunk i inside the GEMM
    if (MODE == GEMM_DGRAD) {
        T2_UNROLL
        for (int i = 0; i < 4; i++) col_ok |= (n0 + 8 * (q4 + 4 * i) < g.N) << i;
    }
    // WGRAD A: dout rows j (one per thread per tile), columns m; WGRAD B: im2col row j = output
    // pixel (img, p, q) advanced by 32 pixels per tile, columns (r, s, c) fixed per chunk.
    const uint16_t *wa_ptr = NULL;
    int wb_r[4], wb_s[4], wb_off[4];
    ConvPixel px = {0, 0, 0}, pstep = {0, 0, 0};
    if (MODE == GEMM_WGRAD) {
        T2_UNROLL
        for (int i = 0; i < 4; i++) col_ok |= (m0 + 8 * (q4 + 4 * i) < g.M) << i;
        wa_ptr = a + (size_t)(kb + r4) * s.K + m0 + 8 * q4;
        T2_UNROLL
        for (int i = 0; i < 4; i++) {
            int n = n0 + 8 * (q4 + 4 * i);
            wb_r[i] = T2_OUT;
            wb_s[i] = 0;
            wb_off[i] = 0;
            if (n < g.N) {
                int c = n % s.C, t = n / s.C, sx = t % s.S, r = t / s.S;
                wb_r[i] = r;
                wb_s[i] = sx;
                wb_off[i] = (r * s.W + sx) * s.C + c;
            }
        }
        px = conv_pixel(s, kb + r4);
        pstep = conv_pixel(s, T2_BK);
    }

    // Chunks that are padding or past the end go with src-size 0: zero-filled, nothing read. The
    // ISA still wants a 16-byte aligned source there (no exception for src-size 0): every
    // computed address is a multiple of 8 elements from an aligned base, including the data
    // gradient's k tail, whose table entries hold offset 0 with the sign bit as "no row" (an
    // offset of -1 was 2 bytes off alignment). They may point outside the tensor (padding taps,
    // rows past M): naming the base instead, as the wgmma engine's producer does, costs a select
    // per chunk, 2.28 -> 2.93 instructions per HMMA in the forward's main loop (sm_90 SASS).
    auto load_tile = [&](uint16_t *As, int t) {
        uint16_t *Bs = As + T2_TILE_ELEMS;
        int k0 = kb + t * T2_BK;
        if (MODE != GEMM_WGRAD) {
            T2Tap e = tab_a[t * 4 + q4];
            T2_UNROLL
            for (int i = 0; i < 4; i++) {
                bool ok = (unsigned)(a_y[i] + e.tr) < (unsigned)hh && (unsigned)(a_x[i] + e.ts) < (unsigned)wwid;
                ct_cp_async_cg16(As + dst_rk + i * 1024, a_row[i] + e.delta, ok ? 16 : 0);
            }
        } else {
            bool jok = k0 + r4 < ke;
            T2_UNROLL
            for (int i = 0; i < 4; i++) {
                bool ok = jok && (col_ok >> i & 1);
                ct_cp_async_cg16(As + dst_kr[i], wa_ptr + 32 * i, ok ? 16 : 0);
            }
            wa_ptr += (size_t)T2_BK * s.K;
        }
        if (MODE == GEMM_FWD) {
            bool kok = k0 + q4 * 8 < ke;
            T2_UNROLL
            for (int i = 0; i < 4; i++) {
                bool ok = kok && b_ok[i];
                ct_cp_async_cg16(Bs + dst_rk + i * 1024, b_row[i] + b_k, ok ? 16 : 0);
            }
            b_k += T2_BK;
        } else if (MODE == GEMM_DGRAD) {
            int off = tab_b[t * T2_BK + r4];
            const uint16_t *row = b + (off & 0x7fffffff) + n0 + 8 * q4;
            T2_UNROLL
            for (int i = 0; i < 4; i++) {
                bool ok = off >= 0 && (col_ok >> i & 1);
                ct_cp_async_cg16(Bs + dst_kr[i], row + 32 * i, ok ? 16 : 0);
            }
        } else {
            int y = px.p * s.stride - s.pad, x = px.q * s.stride - s.pad;
            const uint16_t *bp = b + (long long)((px.img * s.H + y) * s.W + x) * s.C;
            bool jok = k0 + r4 < ke;
            T2_UNROLL
            for (int i = 0; i < 4; i++) {
                bool ok = jok && (unsigned)(y + wb_r[i]) < (unsigned)s.H && (unsigned)(x + wb_s[i]) < (unsigned)s.W;
                ct_cp_async_cg16(Bs + dst_kr[i], bp + wb_off[i], ok ? 16 : 0);
            }
            // Next pixel 32 on: add the precomputed (img, p, q) step with carries.
            conv_pixel_step(s, px, pstep);
        }
    };

    // ldmatrix source offsets per lane (elements within a tile): a register part fixed over the
    // loop plus a constant. "rk" tiles: the register part depends on the k half (the swizzle
    // flips chunk bits), the 16-row tile adds 512; "kr" tiles: it depends on the 16-wide tile,
    // the k half adds 2048. So an ldmatrix costs at most one address add per distinct register.
    int a_reg[4], b_reg[4];
    T2_UNROLL
    for (int x = 0; x < 4; x++) {
        a_reg[x] = MODE != GEMM_WGRAD ? t2_rk(wm * 64 + lane % 16, (x & 1) * 2 + lane / 16)
                                      : t2_kr(lane % 8 + (lane / 16) * 8, wm * 8 + x * 2 + ((lane / 8) & 1));
        b_reg[x] = MODE == GEMM_FWD ? t2_rk(wn * 64 + lane % 8 + (lane / 16) * 8, (x & 1) * 2 + ((lane / 8) & 1))
                                    : t2_kr(lane % 8 + ((lane / 8) & 1) * 8, wn * 8 + x * 2 + lane / 16);
    }
    auto a_lm = [&](int kh, int i) { return MODE != GEMM_WGRAD ? a_reg[kh] + i * 512 : a_reg[i] + kh * 2048; };
    auto b_lm = [&](int kh, int i) { return MODE == GEMM_FWD ? b_reg[kh] + i * 512 : b_reg[i] + kh * 2048; };

    if (MODE != GEMM_WGRAD) __syncthreads();  // tables visible
    float acc[4][8][4];
    T2_UNROLL
    for (int i = 0; i < 4; i++)
        T2_UNROLL
        for (int j = 0; j < 8; j++)
            T2_UNROLL
            for (int e = 0; e < 4; e++) acc[i][j][e] = 0.f;

    T2_UNROLL
    for (int st = 0; st < T2_STAGES - 1; st++) {
        if (st < ktiles) load_tile(sm + st * (2 * T2_TILE_ELEMS), st);
        ct_cp_async_commit();
    }
    // One k-tile: wait for it, prefetch STAGES-1 ahead into the stage freed last, multiply.
    auto step = [&](int kt, int stage) {
        ct_cp_async_wait<T2_STAGES - 2>();
        __syncthreads();  // tile kt visible to all; everyone is done with the stage refilled next
        if (kt + T2_STAGES - 1 < ktiles)
            load_tile(sm + ((stage + T2_STAGES - 1) % T2_STAGES) * (2 * T2_TILE_ELEMS), kt + T2_STAGES - 1);
        ct_cp_async_commit();
        const uint16_t *As = sm + stage * (2 * T2_TILE_ELEMS);
        const uint16_t *Bs = As + T2_TILE_ELEMS;
        T2_UNROLL
        for (int kh = 0; kh < 2; kh++) {
            uint32_t bf[8][2];
            T2_UNROLL
            for (int np = 0; np < 4; np++) {
                uint32_t r[4];
                if (MODE == GEMM_FWD) ct_ldmatrix_x4(r, Bs + b_lm(kh, np));
                else ct_ldmatrix_x4_trans(r, Bs + b_lm(kh, np));
                bf[2 * np][0] = r[0];
                bf[2 * np][1] = r[1];
                bf[2 * np + 1][0] = r[2];
                bf[2 * np + 1][1] = r[3];
            }
            T2_UNROLL
            for (int mi = 0; mi < 4; mi++) {
                uint32_t af[4];
                if (MODE != GEMM_WGRAD) ct_ldmatrix_x4(af, As + a_lm(kh, mi));
                else ct_ldmatrix_x4_trans(af, As + a_lm(kh, mi));
                T2_UNROLL
                for (int ni = 0; ni < 8; ni++) ct_mma_m16n8k16_bf16(acc[mi][ni], af, bf[ni], acc[mi][ni]);
            }
        }
    };
    // Unrolled by the stage count (every stage address a constant), then the last < 4 tiles.
    int kt = 0;
    for (; kt + T2_STAGES <= ktiles; kt += T2_STAGES)
        T2_UNROLL
        for (int u = 0; u < T2_STAGES; u++) step(kt + u, u);
    for (; kt < ktiles; kt++) step(kt, kt % T2_STAGES);
    ct_cp_async_wait<0>();

    // Accumulator fragment: c0,c1 at (row g, cols 2t, 2t+1), c2,c3 at row g+8.
    TC *c = (TC *)g.c + (size_t)blockIdx.z * g.c_split_stride;
    int gi = lane / 4, ti = lane % 4;
    // BN backward in the data-gradient epilogue: the tile's per-channel constants (mean, the
    // forward's scale gamma * invstd and beta, so the ReLU mask is recomputed with its exact
    // operations) in shared memory, which the pipeline no longer uses.
    const bool bn = MODE == GEMM_DGRAD && g.bn.tiles, tail = bn && (g.bn.y || g.bn.mask);
    float *bn_c = (float *)sm;
    float gs[8][2][2];
    if (bn) {
        conv_bn_load_consts(g.bn, bn_c, tail, n0, g.N - n0, T2_BN, tid, T2_THREADS);
        T2_UNROLL
        for (int ni = 0; ni < 8; ni++)
            T2_UNROLL
            for (int j = 0; j < 2; j++) gs[ni][j][0] = gs[ni][j][1] = 0.f;
    }
    T2_UNROLL
    for (int mi = 0; mi < 4; mi++)
        T2_UNROLL
        for (int half = 0; half < 2; half++) {
            int m = m0 + wm * 64 + mi * 16 + gi + half * 8;
            if (m >= g.M) continue;
            size_t row = m;
            if (MODE == GEMM_DGRAD) row = conv_dgrad_dx_row(g, m);
            T2_UNROLL
            for (int ni = 0; ni < 8; ni++) {
                int n = n0 + wn * 64 + ni * 8 + 2 * ti;  // even; N is a multiple of 8
                if (n >= g.N) continue;
                float v0 = acc[mi][ni][half * 2], v1 = acc[mi][ni][half * 2 + 1];
                TC *p = c + row * g.N + n;
                if (sizeof(TC) == 4) {
                    ct_check_vec_align(p, sizeof(float2));
                    CT_COST_ACCESS(p, sizeof(float2), true);
                    *(float2 *)p = make_float2(v0, v1);
                } else {
                    ct_check_vec_align(p, sizeof(uint32_t));
                    if (MODE == GEMM_DGRAD && g.c_acc) {  // a later gradient contribution: add in place
                        CT_COST_ACCESS(p, sizeof(uint32_t), false);
                        uint32_t old = *(const uint32_t *)p;
                        v0 = __fadd_rn(v0, ct_bf16_to_f32((uint16_t)(old & 0xffffu)));
                        v1 = __fadd_rn(v1, ct_bf16_to_f32((uint16_t)(old >> 16)));
                    }
                    uint32_t word = ct_f32_to_bf16(v0) | (uint32_t)ct_f32_to_bf16(v1) << 16;
                    if (bn) {  // mask by the forward's ReLU, then the sums
                        int col = wn * 64 + ni * 8 + 2 * ti;
                        float gv[2], gd[2];
                        word = conv_bn_mask_pair(g.bn, row * g.N + n, word, tail, bn_c + col, bn_c + T2_BN + col,
                                                 bn_c + 2 * T2_BN + col, gv, gd);
                        T2_UNROLL
                        for (int j = 0; j < 2; j++) {
                            gs[ni][j][0] = __fadd_rn(gs[ni][j][0], gv[j]);
                            gs[ni][j][1] = __fadd_rn(gs[ni][j][1], gd[j]);
                        }
                    }
                    CT_COST_ACCESS(p, sizeof(uint32_t), true);
                    *(uint32_t *)p = word;
                }
            }
        }
    if (MODE == GEMM_FWD && g.stats) conv_tile_stats(acc, g.stats, g.M, g.N, m0, n0, g.N - n0, wm, wn, lane, (float *)sm);
    if (bn) conv_tile_gsums(gs, g.bn.tiles, g.N, m0, n0, g.N - n0, wm, wn, lane, (float *)sm + 3 * T2_BN);
}

// ---------------------------------------------------------------------------------------------
// Host side.

static size_t t2_smem_bytes(int mode, int k_split) {
    size_t kt = ((size_t)k_split + T2_BK - 1) / T2_BK;
    size_t bytes = T2_PIPE_BYTES;
    if (mode != GEMM_WGRAD) bytes += kt * 4 * sizeof(T2Tap);
    if (mode == GEMM_DGRAD) bytes += kt * T2_BK * sizeof(int);
    return bytes;
}

extern "C" int ct_conv_tc2_eligible(int mode, const GemmArgs *g) {
    if (!g->tc_ok || !g->vec_a || !g->vec_b) return 0;
    // Every column chunk of C is whole (N a multiple of 8) and stores go out in pairs.
    if (g->N % 8 || !ct_aligned(8, g->c)) return 0;
    // The pipeline and the gather tables (which grow with k_end: a 3x3 data gradient with 2048
    // output channels needs 172 KiB) must fit the device's opt-in shared memory: 227 KiB on
    // sm_90, 163 KiB on sm_80, 99 KiB on sm_86/89/120. Else conv.cu takes engine v1.
    if (t2_smem_bytes(mode, mode == GEMM_WGRAD ? 0 : g->k_end) > ct_dev_caps().smem_optin) return 0;
    return 1;
}

extern "C" void ct_conv_tc2_split(int M, int N, int K, int *splits, int *k_split) {
    ct_split_plan(M, N, K, T2_BM, T2_BN, T2_BK, splits, k_split);
}

extern "C" void ct_conv_tc2_run(int mode, GemmArgs g, float *work, float *final_out, cudaStream_t st) {
    int splits = ct_conv_split_args(mode, &g, work, T2_BM, T2_BN, T2_BK);
    int tiles_m = (g.M + T2_BM - 1) / T2_BM, tiles_n = (g.N + T2_BN - 1) / T2_BN;
    long long ctas = (long long)tiles_m * tiles_n;
    if (ctas > 0x7fffffff || splits > 65535) ct_die("conv: GEMM of %d x %d too large for the grid", g.M, g.N);
    dim3 grid((unsigned)ctas, 1, splits);
    size_t smem = t2_smem_bytes(mode, g.k_split);
    void (*kern)(GemmArgs, int, int) = mode == GEMM_FWD     ? gemm_tc2_k<GEMM_FWD, uint16_t>
                                       : mode == GEMM_DGRAD ? gemm_tc2_k<GEMM_DGRAD, uint16_t>
                                                            : gemm_tc2_k<GEMM_WGRAD, float>;
    CT_CUDA_CHECK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    CT_LAUNCH(kern, grid, T2_THREADS, smem, st, g, tiles_m, tiles_n);
    CT_CHECK_LAUNCH("conv GEMM (tensor cores v2)");
    if (splits > 1) ct_conv_reduce_splits(final_out, work, splits, (size_t)g.M * g.N, st);
}

// Floats of the forward's per-tile BN statistics (g.stats): {sum, m2} per 128-row tile and channel.
extern "C" size_t conv2d_gpu_stats_floats(int M, int C) { return (size_t)2 * ((M + T2_BM - 1) / T2_BM) * C; }
