// Grouped convolution on tensor cores: engine v2's path for groups > 1 (kernels/conv.cu sends a
// grouped GEMM that ct_conv_tcg_eligible takes here from v2's run; wgmma falls back to it by the
// table's order). docs/GROUPED.md has the design and its counts.
//
// Several groups per CTA as a block-diagonal GEMM. A CTA takes gpc = 128 / max(Cg, Kg) groups
// (32 groups of 4: all 128 channels of resnext50's layer1), i.e. a slab of gpc*Ci gathered channels
// (Ci: the A side's channels per group, Cg forward, Kg data gradient) and gpc*Ko output channels.
// Forward and data gradient (one kernel, MODE picks the gathers):
//   - rows: 128 output pixels (forward) or input pixels of one stride phase (data gradient, the
//     phases and tap lists of conv.cu's dgrad_phase, as v2), 4 warps of 64 rows x 64 columns;
//   - the reduction runs over tap pairs: one pipeline stage holds the A tile of two taps (128 rows
//     x the slab's 8-channel chunks each, cp.async, XOR-swizzled rows), and one m16n8k16 takes its
//     k16 as (tap t, chunk c) + (tap t+1, chunk c). An n8 fragment of output columns is issued only
//     over the chunks of its own groups' channels (the diagonal blocks): Kg = Cg = 4, an n8 spans 2
//     groups and a chunk holds those two groups' 8 channels, 50% of the mma work useful; Kg >= 8,
//     100% (an odd tap count adds one half-empty pair: 9 taps issue 10 taps' work);
//   - B (the weights of the CTA's groups, every tap) is loaded once per CTA into shared memory as
//     8x8 blocks per (fragment, tap, chunk) with zeros where a chunk holds another group's channels,
//     so the main loop's B reads are one ldmatrix.x2 per (fragment, chunk) and no bounds checks.
// Weight gradient: a CTA per (tap, slab of groups, split of the N*P*Q reduction); rows the slab's
// output channels (m16 blocks), columns its input channels of that tap (n8 chunks), k = 32
// pixels a stage as v2's weight gradient; an (m16, n8) pair is issued only where its rows' and
// columns' groups meet: Kg = 16+ 100% useful, Kg = 8 50%, Kg = 4 25%. Splits and their fixed-order
// reduction as the dense engines (conv_split.cu): no atomics, the same bits on every run.
// Takes (ct_conv_tcg_eligible): bf16, C and K multiples of 8 with 16-byte aligned operands, Cg and
// Kg each 4 or a multiple of 8 up to 64, Cg * max(1, 16 / Kg) <= 64 (a weight-gradient m16 block
// reaches at most 8 column chunks), R*S <= 32 (a row's in-map taps are a bit mask) and the shared
// memory fitting the device. Both BN epilogues run on it, v2's contracts over a CTA's columns
// (kernels/conv_bn_epi.cuh): the forward's statistics (conv_tile_stats, columns gs*Kg .. + ng*Kg)
// and the data gradient's BN backward at strides 1 and 2 (conv_bn_mask_pair + conv_tile_gsums,
// columns gs*Cg .. + ng*Cg: ResNeXt's conv2 does bn1's backward reductions).
#include <string.h>

#include "kernels/common.cuh"
#include "kernels/act.cuh"  // ct_check_vec_align, ct_aligned
#include "kernels/conv_bn_epi.cuh"
#include "kernels/conv_gemm.cuh"
#include "kernels/conv_index.cuh"
#include "kernels/devcaps.cuh"
#include "kernels/kernels.h"
#include "kernels/ptx.cuh"
#include "util/common.h"

#ifdef __CUDACC__
#define TG_UNROLL _Pragma("unroll")
#else
#define TG_UNROLL
#endif

#define TG_BM 128
#define TG_THREADS 128
#define TG_STAGES 2   // tap pairs in flight (forward, data gradient): 64 KiB each at 16 chunks a row
#define TG_WSTAGES 4  // 32-pixel tiles in flight (weight gradient): 16 KiB each
#define TG_WBK 32
#define TG_MAXFR 16   // n8 fragments of a CTA (128 columns)
#define TG_WNB 8      // column chunks one weight-gradient m16 block reaches, at most
#define TG_FAR (-0x20000000)  // a row past M: no tap brings it inside the map

typedef struct {
    int gpc;    // groups per CTA
    int ci, ko; // channels per group on the gathered (A) side and on the output side
    int arc;    // A row chunks in shared memory (8 or 16)
    int nchf;   // A chunks per tap that one n8 fragment reduces over
    int taps;   // FWD: R*S; DGRAD: the phase's nr*ns; WGRAD: R*S
    int slabs;  // CTA columns: ceil(G / gpc)
    size_t smem;
} TgPlan;

typedef struct {
    const char *ptr;  // the row's window origin at the slab's first channel (may lie outside the tensor)
    unsigned taps;    // bit t: tap t lands inside the map (0 for a row past M)
    int pad;
} TgRow;
typedef struct {
    int delta, dy, dx, pad;
} TgTap;

// ---------------------------------------------------------------------------------------------
// Forward and data gradient.

// ARC: A row chunks (8 or 16); NCHF: chunks per fragment and tap when it is 1, 2, 4 or 8 (every
// resnext width; the loop then unrolls), 0: p.nchf at run time.
template <int MODE, int ARC, int NCHF>
__global__ void __launch_bounds__(TG_THREADS) conv_tcg_k(GemmArgs g, TgPlan p) {
    CT_DYN_SMEM(uint16_t, sm);
    const ConvShape &s = g.s;
    const uint16_t *a = (const uint16_t *)g.a, *w = (const uint16_t *)g.b;
    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    const int G = s.groups, m0 = blockIdx.x * TG_BM, gs = blockIdx.y * p.gpc, ng = min(p.gpc, G - gs);
    const int ci = p.ci, ko = p.ko, taps = p.taps, nchf = NCHF ? NCHF : p.nchf;
    const int wm = warp / 2, wn = warp % 2;
    const int cin_tot = MODE == GEMM_FWD ? s.C : s.K;  // channels of the gathered tensor
    const int cb0 = gs * ci / 8;                         // the slab's first chunk (gs*ci: a multiple of 8)
    const int slab_ch = (ng * ci + 7) / 8, ncols = ng * ko, nfr = (ncols + 7) / 8;
    const int stage_elems = 2 * TG_BM * ARC * 8;
    uint16_t *bs = sm + TG_STAGES * stage_elems;
    const int b_elems = nfr * taps * nchf * 64;
    TgRow *rows = (TgRow *)(bs + b_elems);
    TgTap *tt = (TgTap *)(rows + TG_BM);
    const int hh = MODE == GEMM_FWD ? s.H : s.P, ww = MODE == GEMM_FWD ? s.W : s.Q;

    for (int t = tid; t < taps; t += TG_THREADS) {
        TgTap e = {0, 0, 0, 0};
        if (MODE == GEMM_FWD) {
            int r = t / s.S, sx = t % s.S;
            e.dy = r, e.dx = sx, e.delta = (r * s.W + sx) * s.C;
        } else {
            int ri = t / g.ns, si = t % g.ns;
            e.dy = -ri, e.dx = -si, e.delta = -(ri * s.Q + si) * s.K;
        }
        tt[t] = e;
    }
    // Per row, once: its pointer and which taps land inside the map, so that a tile load costs a
    // bit test and an address add per chunk.
    for (int i = tid; i < TG_BM; i += TG_THREADS) {
        int m = m0 + i, img = 0, y = TG_FAR, x = 0;
        if (m < g.M) conv_row_origin<MODE>(g, m, img, y, x);
        unsigned bits = 0;
        for (int t = 0; t < taps; t++) {
            int dy, dx;
            if (MODE == GEMM_FWD) dy = t / s.S, dx = t % s.S;
            else dy = -(t / g.ns), dx = -(t % g.ns);
            if ((unsigned)(y + dy) < (unsigned)hh && (unsigned)(x + dx) < (unsigned)ww) bits |= 1u << t;
        }
        TgRow r = {(const char *)(a + ((long long)(img * hh + y) * ww + x) * cin_tot + gs * ci), bits, 0};
        rows[i] = r;
    }
    // B: per (fragment j, tap, chunk cc) an 8x8 block, row = output column 8j + row, 8 gathered
    // channels; the channels of another group are zeros (that is the block diagonal).
    for (int e = tid; e < b_elems / 4; e += TG_THREADS) {
        int quad = e % 2, row = (e / 2) % 8, blk = e / 16;
        int cc = blk % nchf, t = (blk / nchf) % taps, j = blk / (nchf * taps);
        int nloc = 8 * j + row, o = gs * ko + nloc, go = o / ko;
        int c0 = ((gs * ko + 8 * j) / ko) * ci / 8;  // the fragment's first chunk (global)
        int cg0 = (c0 + cc) * 8 + quad * 4, gi = cg0 / ci;
        uint2 v = make_uint2(0u, 0u);
        if (nloc < ncols && gi == go) {
            int cl = cg0 - gi * ci;
            if (MODE == GEMM_FWD) {  // w[o, tap, cl .. cl+3]
                const uint16_t *src = w + ((size_t)o * taps + t) * ci + cl;
                ct_check_vec_align(src, sizeof(uint2));
                CT_COST_ACCESS(src, sizeof(uint2), false);
                v = *(const uint2 *)src;
            } else {  // element (c = o, k_out = cg0 + q) = w[k_out, r, s, o - go*Cg]
                int ri = t / g.ns, si = t % g.ns;
                int r = g.r0 + ri * s.stride, sx = g.s0 + si * s.stride;
                uint16_t h[4];
                TG_UNROLL
                for (int q = 0; q < 4; q++) {
                    const uint16_t *src = w + ((size_t)((cg0 + q) * s.R + r) * s.S + sx) * ko + (o - go * ko);
                    CT_COST_ACCESS(src, 2, false);
                    h[q] = *src;
                }
                v = make_uint2(h[0] | (uint32_t)h[1] << 16, h[2] | (uint32_t)h[3] << 16);
            }
        }
        *(uint2 *)(bs + blk * 64 + row * 8 + quad * 4) = v;
    }
    __syncthreads();  // tables visible to the loads

    // A tile of tap pair tp: thread = chunk q of rows tid/ARC + (128/ARC) k, each row's state read
    // once for both taps; padding, rows past M, chunks past the slab and the missing second tap of
    // an odd count go zero-filled. rstep is a multiple of 8: the swizzle (q ^ (r & 7)) is per thread.
    const int lq = tid & (ARC - 1), lr = tid / ARC;
    const int a_dst = lr * ARC * 8 + ((lq ^ (lr & 7)) * 8);
    auto load_a = [&](int stage, int tp) {
        uint16_t *As = sm + stage * stage_elems + a_dst;
        constexpr int rstep = TG_THREADS / ARC;
        int off[2];        // bytes from a row's pointer to this thread's chunk at the tap
        unsigned bit[2];   // the tap's bit, 0 where the chunk is past the slab or the tap past the end
        TG_UNROLL
        for (int h = 0; h < 2; h++) {
            const int t = 2 * tp + h;
            bit[h] = t < taps && lq < slab_ch ? 1u << t : 0u;
            off[h] = (tt[t < taps ? t : 0].delta + lq * 8) * 2;
        }
        TG_UNROLL
        for (int k = 0; k < ARC; k++) {
            const TgRow rw = rows[lr + k * rstep];
            TG_UNROLL
            for (int h = 0; h < 2; h++)
                ct_cp_async_cg16(As + (h * TG_BM + k * rstep) * ARC * 8, rw.ptr + off[h], rw.taps & bit[h] ? 16 : 0);
        }
    };

    // Warps 2 x 2: rows wm*64 + 16 mi (mi < 4), fragments wn*8 + jj (jj < 8). ldmatrix lanes: A x4 =
    // rows lane%16 of the m16 block, k half lane/16 = the pair's tap (the m16 blocks at constant
    // offsets); B x2 = row lane%8 of the block of tap 2tp + (lane/8)%2 (lanes 16-31 unused).
    const int sw = lane & 7;
    const int a_base = ((lane / 16) * TG_BM + wm * 64 + lane % 16) * ARC * 8;
    const int jstride = taps * nchf * 64, j0 = wn * 8;
    // Each fragment's first A chunk (its first group's channels), fixed over the loop.
    int c0r[8];
    TG_UNROLL
    for (int jj = 0; jj < 8; jj++) c0r[jj] = ((gs * ko + 8 * (j0 + jj)) / ko) * ci / 8 - cb0;

    float acc[4][8][4];
    TG_UNROLL
    for (int i = 0; i < 4; i++)
        TG_UNROLL
        for (int j = 0; j < 8; j++)
            TG_UNROLL
            for (int e = 0; e < 4; e++) acc[i][j][e] = 0.f;

    const int ntp = (taps + 1) / 2;
    TG_UNROLL
    for (int st = 0; st < TG_STAGES - 1; st++) {
        if (st < ntp) load_a(st, st);
        ct_cp_async_commit();
    }
    for (int tp = 0; tp < ntp; tp++) {
        const int stage = tp % TG_STAGES;
        ct_cp_async_wait<TG_STAGES - 2>();
        __syncthreads();  // pair tp visible; every warp is done with the stage refilled next
        if (tp + TG_STAGES - 1 < ntp) load_a((tp + TG_STAGES - 1) % TG_STAGES, tp + TG_STAGES - 1);
        ct_cp_async_commit();
        const uint16_t *As = sm + stage * stage_elems;
        const int tl = min(2 * tp + ((lane >> 3) & 1), taps - 1);  // an odd count's last pair: A is zero
        const uint16_t *Bt = bs + (tl * nchf + j0 * taps * nchf) * 64 + (lane & 7) * 8;
        const uint16_t *Aw = As + a_base;
        TG_UNROLL
        for (int jj = 0; jj < 8; jj++) {
            if (j0 + jj >= nfr) break;
            const uint16_t *Bj = Bt + jj * jstride;
            TG_UNROLL
            for (int cc = 0; cc < nchf; cc++) {
                uint32_t bf[2];
                ct_ldmatrix_x2(bf, Bj + cc * 64);
                const uint16_t *Ac = Aw + ((c0r[jj] + cc) ^ sw) * 8;
                TG_UNROLL
                for (int mi = 0; mi < 4; mi++) {
                    uint32_t af[4];
                    ct_ldmatrix_x4(af, Ac + mi * 16 * ARC * 8);
                    ct_mma_m16n8k16_bf16(acc[mi][jj], af, bf, acc[mi][jj]);
                }
            }
        }
    }
    ct_cp_async_wait<0>();

    // Accumulator fragment: c0,c1 at (row gi, cols 2ti, 2ti+1), c2,c3 at row gi+8.
    const int gi = lane / 4, ti = lane % 4, ldc = MODE == GEMM_FWD ? s.K : s.C;
    uint16_t *c = (uint16_t *)g.c;
    // BN backward in the data-gradient epilogue (conv2d_backward_data_bn_gpu / _tail_gpu): engine
    // v2's contract over the CTA's columns gs*Cg + col (col < ncols): the gradient masked by the
    // BN's ReLU (conv_bn_mask_pair, recomputed from x, or y > 0 for a tail), then per 128-row tile
    // and column {sum g, sum g (x - mean)} in v2's order (conv_tile_gsums). The per-column
    // constants go to shared memory, which the pipeline no longer uses (the stages: at least 32 KiB).
    const bool bn = MODE == GEMM_DGRAD && g.bn.tiles, tail = bn && (g.bn.y || g.bn.mask);
    float *bn_c = (float *)sm;
    float gsum[8][2][2];
    if (bn) {
        conv_bn_load_consts(g.bn, bn_c, tail, gs * ko, ncols, TG_BM, tid, TG_THREADS);
        TG_UNROLL
        for (int jj = 0; jj < 8; jj++)
            TG_UNROLL
            for (int j = 0; j < 2; j++) gsum[jj][j][0] = gsum[jj][j][1] = 0.f;
    }
    TG_UNROLL
    for (int mi = 0; mi < 4; mi++)
        TG_UNROLL
        for (int half = 0; half < 2; half++) {
            const int m = m0 + wm * 64 + mi * 16 + gi + half * 8;
            if (m >= g.M) continue;
            size_t row = m;
            if (MODE == GEMM_DGRAD) row = conv_dgrad_dx_row(g, m);
            TG_UNROLL
            for (int jj = 0; jj < 8; jj++) {
                const int n = 8 * (j0 + jj) + 2 * ti;
                if (j0 + jj >= nfr || n >= ncols) continue;
                float v0 = acc[mi][jj][half * 2], v1 = acc[mi][jj][half * 2 + 1];
                const size_t e = row * ldc + gs * ko + n;  // even: gs*ko and n are
                uint16_t *pc = c + e;
                ct_check_vec_align(pc, sizeof(uint32_t));
                if (MODE == GEMM_DGRAD && g.c_acc) {  // a later gradient contribution: add in place
                    CT_COST_ACCESS(pc, sizeof(uint32_t), false);
                    uint32_t old = *(const uint32_t *)pc;
                    v0 = __fadd_rn(v0, ct_bf16_to_f32((uint16_t)(old & 0xffffu)));
                    v1 = __fadd_rn(v1, ct_bf16_to_f32((uint16_t)(old >> 16)));
                }
                uint32_t word = ct_f32_to_bf16(v0) | (uint32_t)ct_f32_to_bf16(v1) << 16;
                if (bn) {  // mask by the forward's ReLU, then the sums
                    float gv[2], gd[2];
                    word = conv_bn_mask_pair(g.bn, e, word, tail, bn_c + n, bn_c + TG_BM + n, bn_c + 2 * TG_BM + n, gv, gd);
                    TG_UNROLL
                    for (int j = 0; j < 2; j++) {
                        gsum[jj][j][0] = __fadd_rn(gsum[jj][j][0], gv[j]);
                        gsum[jj][j][1] = __fadd_rn(gsum[jj][j][1], gd[j]);
                    }
                }
                CT_COST_ACCESS(pc, sizeof(uint32_t), true);
                *(uint32_t *)pc = word;
            }
        }
    // The statistics of what was stored (bf16-rounded), per row tile and column (conv_tile_stats).
    if (MODE == GEMM_FWD && g.stats) conv_tile_stats(acc, g.stats, g.M, s.K, m0, gs * ko, ncols, wm, wn, lane, (float *)sm);
    if (bn) conv_tile_gsums(gsum, g.bn.tiles, s.C, m0, gs * ko, ncols, wm, wn, lane, (float *)sm + 3 * TG_BM);
}

// ---------------------------------------------------------------------------------------------
// Weight gradient.

__device__ static inline int tg_kr(int row, int chunk) { return row * 128 + ((chunk ^ (row & 7)) * 8); }

__global__ void __launch_bounds__(TG_THREADS) conv_tcg_wgrad_k(GemmArgs g, TgPlan p) {
    CT_DYN_SMEM(uint16_t, sm);
    const ConvShape &s = g.s;
    const uint16_t *a = (const uint16_t *)g.a, *b = (const uint16_t *)g.b;
    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    const int G = s.groups, Kg = s.K / G, Cg = s.C / G, taps = p.taps;
    const int tap = blockIdx.x % taps, gs = (blockIdx.x / taps) * p.gpc, ng = min(p.gpc, G - gs);
    const int tr = tap / s.S, tsx = tap % s.S;
    const int rows_o = ng * Kg, cols_c = ng * Cg, slab_o = rows_o / 8, slab_c = (cols_c + 7) / 8;
    const int cb0 = gs * Cg / 8;
    const int kb = blockIdx.z * g.k_split, ke = min(g.k_end, kb + g.k_split);
    const int ktiles = ke > kb ? (ke - kb + TG_WBK - 1) / TG_WBK : 0;

    // Loads as v2's weight gradient: thread row r4 (pixel), chunks q4 + 4i.
    const int q4 = tid % 4, r4 = tid / 4;
    int dst[4];
    TG_UNROLL
    for (int i = 0; i < 4; i++) dst[i] = tg_kr(r4, q4 + 4 * i);
    const uint16_t *wa = a + (size_t)(kb + r4) * s.K + gs * Kg + 8 * q4;
    ConvPixel px = conv_pixel(s, kb + r4);
    const ConvPixel pstep = conv_pixel(s, TG_WBK);
    auto load_tile = [&](uint16_t *As, int t) {
        uint16_t *Bs = As + TG_WBK * 128;
        const bool jok = kb + t * TG_WBK + r4 < ke;
        TG_UNROLL
        for (int i = 0; i < 4; i++) {
            bool ok = jok && q4 + 4 * i < slab_o;
            ct_cp_async_cg16(As + dst[i], wa + 32 * i, ok ? 16 : 0);
        }
        wa += (size_t)TG_WBK * s.K;
        const int y = px.p * s.stride - s.pad + tr, x = px.q * s.stride - s.pad + tsx;
        const bool pok = jok && (unsigned)y < (unsigned)s.H && (unsigned)x < (unsigned)s.W;
        const uint16_t *bp = b + ((long long)(px.img * s.H + y) * s.W + x) * s.C + gs * Cg + 8 * q4;
        TG_UNROLL
        for (int i = 0; i < 4; i++) {
            bool ok = pok && q4 + 4 * i < slab_c;
            ct_cp_async_cg16(Bs + dst[i], bp + 32 * i, ok ? 16 : 0);
        }
        conv_pixel_step(s, px, pstep);
    };

    // Warp's m16 blocks mb = 2*warp + mi: rows (output channels) 16 mb ..; the column chunks
    // [lo, lo + nb) of the groups those rows belong to.
    int lo[2], nb[2], a_off[2];
    TG_UNROLL
    for (int mi = 0; mi < 2; mi++) {
        const int mb = 2 * warp + mi, r0 = 16 * mb;
        lo[mi] = 0, nb[mi] = 0;
        if (r0 < rows_o) {
            const int gl = (gs * Kg + r0) / Kg, gh = min((gs * Kg + r0 + 15) / Kg, gs + ng - 1);
            lo[mi] = gl * Cg / 8 - cb0;
            nb[mi] = min(((gh + 1) * Cg + 7) / 8 - cb0, slab_c) - lo[mi];
        }
        a_off[mi] = tg_kr(lane % 8 + (lane / 16) * 8, 2 * mb + ((lane / 8) & 1));
    }
    const int b_row = lane % 8 + ((lane / 8) & 1) * 8;

    float acc[2][TG_WNB][4];
    TG_UNROLL
    for (int i = 0; i < 2; i++)
        TG_UNROLL
        for (int j = 0; j < TG_WNB; j++)
            TG_UNROLL
            for (int e = 0; e < 4; e++) acc[i][j][e] = 0.f;

    const int tile_elems = 2 * TG_WBK * 128;
    TG_UNROLL
    for (int st = 0; st < TG_WSTAGES - 1; st++) {
        if (st < ktiles) load_tile(sm + st * tile_elems, st);
        ct_cp_async_commit();
    }
    for (int kt = 0; kt < ktiles; kt++) {
        const int stage = kt % TG_WSTAGES;
        ct_cp_async_wait<TG_WSTAGES - 2>();
        __syncthreads();
        if (kt + TG_WSTAGES - 1 < ktiles) load_tile(sm + ((kt + TG_WSTAGES - 1) % TG_WSTAGES) * tile_elems, kt + TG_WSTAGES - 1);
        ct_cp_async_commit();
        const uint16_t *As = sm + stage * tile_elems, *Bs = As + TG_WBK * 128;
        TG_UNROLL
        for (int kh = 0; kh < 2; kh++)
            TG_UNROLL
            for (int mi = 0; mi < 2; mi++) {
                if (nb[mi] <= 0) continue;
                uint32_t af[4];
                ct_ldmatrix_x4_trans(af, As + a_off[mi] + kh * 16 * 128);
                TG_UNROLL
                for (int jj = 0; jj < TG_WNB; jj++) {
                    if (jj >= nb[mi]) break;
                    uint32_t bf[2];
                    ct_ldmatrix_x2_trans(bf, Bs + tg_kr(kh * 16 + b_row, lo[mi] + jj));
                    ct_mma_m16n8k16_bf16(acc[mi][jj], af, bf, acc[mi][jj]);
                }
            }
    }
    ct_cp_async_wait<0>();

    // dw[o, tap, c - go*Cg] where o's and c's groups agree (the diagonal blocks only).
    float *out = (float *)g.c + (size_t)blockIdx.z * g.c_split_stride;
    const int gi = lane / 4, ti = lane % 4;
    TG_UNROLL
    for (int mi = 0; mi < 2; mi++)
        TG_UNROLL
        for (int half = 0; half < 2; half++) {
            const int ol = 16 * (2 * warp + mi) + gi + half * 8;
            if (nb[mi] <= 0 || ol >= rows_o) continue;
            const int o = gs * Kg + ol, go = o / Kg;
            TG_UNROLL
            for (int jj = 0; jj < TG_WNB; jj++) {
                if (jj >= nb[mi]) continue;
                const int cl = 8 * (lo[mi] + jj) + 2 * ti, c = gs * Cg + cl;
                if (cl >= cols_c || c / Cg != go) continue;
                float *pd = out + ((size_t)o * taps + tap) * Cg + (c - go * Cg);
                ct_check_vec_align(pd, sizeof(float2));
                CT_COST_ACCESS(pd, sizeof(float2), true);
                *(float2 *)pd = make_float2(acc[mi][jj][half * 2], acc[mi][jj][half * 2 + 1]);
            }
        }
}

// ---------------------------------------------------------------------------------------------
// Host side.

static int tg_chan_ok(int c) { return c == 4 || (c % 8 == 0 && c <= 64); }

// The plan of pass `mode` of g, or 0 where the path does not take it.
static int tg_plan(int mode, const GemmArgs *g, TgPlan *p) {
    const ConvShape *s = &g->s;
    const int G = conv_groups(s);
    if (G <= 1 || !g->tc_ok || !g->vec_a || !g->vec_b) return 0;
    if (s->C % 8 || s->K % 8 || s->C % G || s->K % G) return 0;
    const int Cg = s->C / G, Kg = s->K / G;
    if (!tg_chan_ok(Cg) || !tg_chan_ok(Kg) || Cg * (Kg < 16 ? 16 / Kg : 1) > 64) return 0;
    if (s->R * s->S > 32) return 0;  // a row's in-map taps are one 32-bit mask
    if (!ct_aligned(8, g->c)) return 0;
    memset(p, 0, sizeof *p);
    p->ci = mode == GEMM_DGRAD ? Kg : Cg;
    p->ko = mode == GEMM_DGRAD ? Cg : Kg;
    p->taps = mode == GEMM_DGRAD ? g->nr * g->ns : s->R * s->S;
    if (mode == GEMM_DGRAD && g->K == 0) p->taps = 0;
    p->nchf = (p->ko % 8 ? 2 : 1) * p->ci / 8;
    if (p->nchf < 1) p->nchf = 1;
    const int need_even = Cg == 4 || Kg == 4;  // the slab's first channel a multiple of 8
    int gpc = 128 / (Cg > Kg ? Cg : Kg);
    if (gpc > G) gpc = G;
    const size_t optin = ct_dev_caps().smem_optin;
    for (; gpc >= 1; gpc /= 2) {
        if (need_even && gpc % 2) return 0;
        if (mode == GEMM_WGRAD) {
            p->smem = (size_t)TG_WSTAGES * 2 * TG_WBK * 128 * 2;
        } else {
            int slab_ch = (gpc * p->ci + 7) / 8, nfr = (gpc * p->ko + 7) / 8;
            p->arc = slab_ch <= 8 ? 8 : 16;
            p->smem = (size_t)TG_STAGES * 2 * TG_BM * p->arc * 16 + (size_t)nfr * p->taps * p->nchf * 128 +
                      TG_BM * sizeof(TgRow) + (size_t)(p->taps ? p->taps : 1) * sizeof(TgTap);
        }
        if (p->smem <= optin) break;
    }
    if (gpc < 1) return 0;
    p->gpc = gpc;
    p->slabs = (G + gpc - 1) / gpc;
    return 1;
}

extern "C" int ct_conv_tcg_eligible(int mode, const GemmArgs *g) {
    TgPlan p;
    return tg_plan(mode, g, &p);
}

static void tg_wgrad_split(const ConvShape *s, const TgPlan *p, int *splits, int *k_split) {
    // CTAs: one per (tap, slab); the shared plan sized as that many 128x128 tiles.
    ct_split_plan(p->slabs * 128, p->taps * 128, s->N * s->P * s->Q, 128, 128, TG_WBK, splits, k_split);
}

extern "C" size_t ct_conv_tcg_work_floats(const ConvShape *s) {
    GemmArgs g = {};
    g.s = *s;
    g.tc_ok = g.vec_a = g.vec_b = 1;
    TgPlan p;
    if (s->N * s->P * s->Q <= 0 || !tg_plan(GEMM_WGRAD, &g, &p)) return 0;
    int splits, k_split;
    tg_wgrad_split(s, &p, &splits, &k_split);
    return splits > 1 ? (size_t)splits * s->K * s->R * s->S * (s->C / conv_groups(s)) : 0;
}

template <int MODE, int ARC>
static void (*tg_kernel_arc(int nchf))(GemmArgs, TgPlan) {
    switch (nchf) {
    case 1: return conv_tcg_k<MODE, ARC, 1>;
    case 2: return conv_tcg_k<MODE, ARC, 2>;
    case 4: return conv_tcg_k<MODE, ARC, 4>;
    case 8: return conv_tcg_k<MODE, ARC, 8>;
    default: return conv_tcg_k<MODE, ARC, 0>;
    }
}
template <int MODE>
static void (*tg_kernel(const TgPlan &p))(GemmArgs, TgPlan) {
    return p.arc == 8 ? tg_kernel_arc<MODE, 8>(p.nchf) : tg_kernel_arc<MODE, 16>(p.nchf);
}

extern "C" void ct_conv_tcg_run(int mode, GemmArgs g, float *work, float *final_out, cudaStream_t st) {
    TgPlan p;
    if (!tg_plan(mode, &g, &p)) ct_die("conv: grouped tensor-core path given a shape it does not take (groups %d)", g.s.groups);
    if (mode == GEMM_WGRAD) {
        int splits, k_split;
        tg_wgrad_split(&g.s, &p, &splits, &k_split);
        g.k_end = g.s.N * g.s.P * g.s.Q;
        g.k_split = g.k_end;
        g.c_split_stride = 0;
        const size_t n = (size_t)g.s.K * g.s.R * g.s.S * (g.s.C / conv_groups(&g.s));
        if (splits > 1) {
            if (!work) ct_die("grouped conv weight gradient: no work buffer (conv2d_gpu_work_floats)");
            g.k_split = k_split;
            g.c = work;
            g.c_split_stride = n;
        }
        long long ctas = (long long)p.taps * p.slabs;
        if (ctas > 0x7fffffff || splits > 65535) ct_die("grouped conv: weight gradient grid too large");
        dim3 grid((unsigned)ctas, 1, splits);
        CT_CUDA_CHECK(cudaFuncSetAttribute(conv_tcg_wgrad_k, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)p.smem));
        CT_LAUNCH(conv_tcg_wgrad_k, grid, TG_THREADS, p.smem, st, g, p);
        CT_CHECK_LAUNCH("grouped conv weight gradient (tensor cores)");
        if (splits > 1) ct_conv_reduce_splits(final_out, work, splits, n, st);
        return;
    }
    if (g.M <= 0) return;
    long long tiles_m = (g.M + TG_BM - 1) / TG_BM;
    if (tiles_m > 0x7fffffff || p.slabs > 65535) ct_die("grouped conv: GEMM of %d rows in %d slabs too large for the grid", g.M, p.slabs);
    dim3 grid((unsigned)tiles_m, p.slabs, 1);
    void (*kern)(GemmArgs, TgPlan) = mode == GEMM_FWD ? tg_kernel<GEMM_FWD>(p) : tg_kernel<GEMM_DGRAD>(p);
    CT_CUDA_CHECK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)p.smem));
    CT_LAUNCH(kern, grid, TG_THREADS, p.smem, st, g, p);
    CT_CHECK_LAUNCH("grouped conv (tensor cores)");
}
