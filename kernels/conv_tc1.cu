// Convolution engine v1 (CT_CONV_TC): the implicit GEMM of kernels/conv.cu on bf16 tensor cores
// (mma.sync m16n8k16, ldmatrix, cp.async in a 3-stage pipeline), 128x64x32 tiles, any bf16 shape:
// operands whose 8-element chunks are contiguous and 16-byte aligned are copied by cp.async, others
// (the 3-channel stem) are gathered element by element into the same tiles; the data gradient runs
// once per stride phase (conv.cu sets the phases up). It takes what engine v2 (conv_tc2.cu) does
// not, the linear layer, and everything under --conv-engine v1 (CT_CONV_TC). This file owns the kernel,
// its gathers and stores, and ct_gemm_tc1_launch, which picks the template instance for conv.cu's
// ct_gemm_run (the grid and the split-K are planned there).
#include "kernels/common.cuh"
#include "kernels/act.cuh"  // ct_ld, ct_st, ct_check_vec_align
#include "kernels/conv_gemm.cuh"
#include "kernels/conv_index.cuh"
#include "kernels/kernels.h"
#include "kernels/ptx.cuh"

// ---------------------------------------------------------------------------------------------
// Element access: ct_ld/ct_st (kernels/act.cuh), fp32 or bf16 (raw uint16_t bits, round to nearest
// even on store).

// Two neighbours in one store (i even, the pair aligned).
__device__ static inline void cv_st2(float *p, size_t i, float v0, float v1) {
    ct_check_vec_align(p + i, sizeof(float2));
    CT_COST_ACCESS(p + i, sizeof(float2), true);
    *(float2 *)(p + i) = make_float2(v0, v1);
}
__device__ static inline void cv_st2(uint16_t *p, size_t i, float v0, float v1) {
    ct_check_vec_align(p + i, sizeof(uint32_t));
    CT_COST_ACCESS(p + i, sizeof(uint32_t), true);
    *(uint32_t *)(p + i) = ct_f32_to_bf16(v0) | (uint32_t)ct_f32_to_bf16(v1) << 16;
}
// One bf16 element of a gathered operand as raw bits (the cost counters see it; kernels/act.cuh).
__device__ static inline uint16_t cv_ldu(const uint16_t *p, long long i) {
    CT_COST_ACCESS(p + i, sizeof(uint16_t), false);
    return p[i];
}

// ---------------------------------------------------------------------------------------------
// Tensor-core engine (bf16 operands, fp32 accumulation). 128 threads = 4 warps in a 2x2 grid,
// each warp owns a (16*MI)x32 piece of the (32*MI)x64 tile: MIx4 mma.m16n8k16 per 16-deep k step
// (MI = 4: 128-row tiles; MI = 2: 64-row tiles for weight gradients of <= 64 channels).
//
// Shared-memory tiles hold 16-byte chunks (8 bf16) gathered with cp.async; chunks that are
// padding or out of range are zero-filled with a plain store. Each operand is kept in the
// layout its source is contiguous in, and ldmatrix (.trans where needed) turns it into mma
// fragments:
//   A "mk" [BM][BK+8] (FWD, DGRAD: gathered rows contiguous in k)   -> ldmatrix
//   A "km" [BK][BM+8] (WGRAD: dout rows contiguous in m = k_out)     -> ldmatrix.trans
//   B "nk" [BN][BK+8] (FWD: weight rows contiguous in k = rsc)       -> ldmatrix
//   B "kn" [BK][BN+8] (DGRAD: weights contiguous in c; WGRAD: im2col) -> ldmatrix.trans
// The +8 padding makes the eight 16-byte rows an ldmatrix reads fall in distinct bank groups.

// TC_BM, TC_BN, TC_BK: kernels/conv_gemm.cuh (ct_gemm_run sizes the grid and the split plan with them).
#define TC_STAGES 3
#define TC_THREADS 128
#define TC_A_ELEMS (TC_BM * (TC_BK + 8))  // >= TC_BK * (TC_BM + 8)
#define TC_B_ELEMS (TC_BN * (TC_BK + 8))  // >= TC_BK * (TC_BN + 8)
#define TC_STAGE_ELEMS (TC_A_ELEMS + TC_B_ELEMS)

__device__ static inline void tc_zero16(uint16_t *dst) {
    ct_check_vec_align(dst, sizeof(uint4));
    *(uint4 *)dst = make_uint4(0, 0, 0, 0);
}
__device__ static inline void tc_store8(uint16_t *dst, const uint16_t v[8]) {
    uint4 u;
    u.x = v[0] | (uint32_t)v[1] << 16;
    u.y = v[2] | (uint32_t)v[3] << 16;
    u.z = v[4] | (uint32_t)v[5] << 16;
    u.w = v[6] | (uint32_t)v[7] << 16;
    ct_check_vec_align(dst, sizeof(uint4));
    *(uint4 *)dst = u;
}
// Forward gather: input element at tap (r, sx), channel c of the output pixel whose window
// starts at (y, x) in image img; -1 for padding.
__device__ static inline long long fwd_a_off(const ConvShape &s, int img, int y, int x, int r, int sx, int c) {
    int h = y + r, w = x + sx;
    if (h < 0 || h >= s.H || w < 0 || w >= s.W) return -1;
    return ((long long)(img * s.H + h) * s.W + w) * s.C + c;
}
// Data-gradient gather for one stride phase of the data gradient (see GemmArgs): y, x are the
// phase pixel shifted by (dh, dw), the tap (r, sx) is the phase's (ri, si); a stride-1 gather.
__device__ static inline long long dgrad1_a_off(const ConvShape &s, int img, int y, int x, int r, int sx, int k) {
    int p = y - r, q = x - sx;
    if (p < 0 || q < 0 || p >= s.P || q >= s.Q) return -1;
    return ((long long)(img * s.P + p) * s.Q + q) * s.K + k;
}

// VEC_A / VEC_B: the operand's 8-element chunks are contiguous and 16-byte aligned in memory
// (channel counts multiples of 8, aligned pointers) and travel by cp.async; otherwise each chunk
// is gathered element by element (e.g. the 3-channel stem) and stored with one 16-byte store.
template <int MODE, typename TC, bool VEC_A, bool VEC_B, int MI>
__global__ void __launch_bounds__(TC_THREADS) gemm_tc_k(GemmArgs g) {
    __shared__ __align__(16) uint16_t sm[TC_STAGES * TC_STAGE_ELEMS];
    const bool a_mk = MODE != GEMM_WGRAD;
    const bool b_nk = MODE == GEMM_FWD;
    const int BM = 32 * MI;                          // 2 warps of MI m16 tiles each
    const int A_LD = a_mk ? TC_BK + 8 : BM + 8;      // row pitch in elements
    const int B_LD = b_nk ? TC_BK + 8 : TC_BN + 8;
    const uint16_t *a = (const uint16_t *)g.a;
    const uint16_t *b = (const uint16_t *)g.b;
    const ConvShape &s = g.s;
    // DGRAD runs one stride phase at a time (see GemmArgs): its taps are (r0 + ri*st, s0 + si*st),
    // ri < nr, si < ns, and the gather is that of a stride-1 convolution.
    const int taps_s = MODE == GEMM_DGRAD ? g.ns : s.S;
    int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    int wm = warp / 2, wn = warp % 2;
    int m0 = blockIdx.x * BM, n0 = blockIdx.y * TC_BN;
    int kb = blockIdx.z * g.k_split;
    int ke = min(g.k_end, kb + g.k_split);
    int ktiles = (ke - kb + TC_BK - 1) / TC_BK;

    // Per-thread gather state that does not change along k.
    // A "mk": 4 chunks per thread: rows tid/4 + 32*i, k chunk tid%4.
    // A "km": 4 chunks per thread: k rows (tid + 128*i)/16, m chunk tid%16.
    // B "nk": 2 chunks: rows (tid + 128*i)/4, k chunk tid%4.
    // B "kn": 2 chunks: k rows (tid + 128*i)/8, n chunk tid%8.
    int a_img[MI], a_y[MI], a_x[MI];  // FWD: n, p*st-pad, q*st-pad; DGRAD: n, h+pad, w+pad
    if (a_mk) {
        CV_UNROLL
        for (int i = 0; i < MI; i++) {
            int m = m0 + tid / 4 + 32 * i;
            a_img[i] = -1;
            a_y[i] = a_x[i] = 0;
            if (m < g.M) conv_row_origin<MODE>(g, m, a_img[i], a_y[i], a_x[i]);
        }
    }
    // WGRAD B: the columns (r, s, c) of each thread's chunk are fixed; c = -1 past the end.
    int b_r[8], b_s[8], b_c[8];
    if (MODE == GEMM_WGRAD) {
        int n = n0 + (tid % 8) * 8;
        int c = n % s.C, t = n / s.C, sx = t % s.S, r = t / s.S;
        CV_UNROLL
        for (int e = 0; e < 8; e++) {
            b_r[e] = r;
            b_s[e] = sx;
            b_c[e] = n + e < g.N ? c : -1;
            if (++c == s.C) {
                c = 0;
                if (++sx == s.S) {
                    sx = 0;
                    ++r;
                }
            }
        }
    }

    // Gather state that moves along k: the tile loads run in k order, one BK step apart, so the
    // decompositions of the k indices advance incrementally instead of being divided out per tile
    // (integer division would cost more issue slots than the mma work of a tile).
    //   A "mk": the thread's chunk column kb + (tid%4)*8 as tap (a_r, a_s) and channel a_ch;
    //   B "kn" DGRAD: rows kb + tid/8 + 16*i as (r, s, k_out); WGRAD: as output pixel (img, p, q).
    int cdim = MODE == GEMM_FWD ? s.C : s.K;
    int a_ch = 0, a_s = 0, a_r = 0;
    if (a_mk) {
        int k = kb + (tid % 4) * 8, t = k / cdim;
        a_ch = k % cdim;
        a_s = t % taps_s;
        a_r = t / taps_s;
    }
    int bk_0[2] = {0, 0}, bk_1[2] = {0, 0}, bk_2[2] = {0, 0};  // fastest-varying first
    if (MODE != GEMM_FWD) {
        CV_UNROLL
        for (int i = 0; i < 2; i++) {
            int k = kb + tid / 8 + 16 * i;
            int d0 = MODE == GEMM_DGRAD ? s.K : s.Q, d1 = MODE == GEMM_DGRAD ? taps_s : s.P;
            int t = k / d0;
            bk_0[i] = k % d0;
            bk_1[i] = t % d1;
            bk_2[i] = t / d1;
        }
    }
    auto advance = [&]() {
        if (a_mk) {
            a_ch += TC_BK;
            while (a_ch >= cdim) {
                a_ch -= cdim;
                if (++a_s == taps_s) {
                    a_s = 0;
                    ++a_r;
                }
            }
        }
        if (MODE != GEMM_FWD) {
            int d0 = MODE == GEMM_DGRAD ? s.K : s.Q, d1 = MODE == GEMM_DGRAD ? taps_s : s.P;
            CV_UNROLL
            for (int i = 0; i < 2; i++) {
                bk_0[i] += TC_BK;
                while (bk_0[i] >= d0) {
                    bk_0[i] -= d0;
                    if (++bk_1[i] == d1) {
                        bk_1[i] = 0;
                        ++bk_2[i];
                    }
                }
            }
        }
    };

    auto load_tile = [&](int stage, int k0) {
        uint16_t *As = sm + stage * TC_STAGE_ELEMS;
        uint16_t *Bs = As + TC_A_ELEMS;
        if (MODE == GEMM_WGRAD) {
            CV_UNROLL
            for (int i = 0; i < MI; i++) {
                int id = tid + TC_THREADS * i, kl = id / (BM / 8), mc = (id % (BM / 8)) * 8;
                int j = k0 + kl, m = m0 + mc;
                uint16_t *dst = As + kl * A_LD + mc;
                if (VEC_A) {
                    if (j < ke && m < g.M) ct_cp_async_cg16(dst, a + (size_t)j * s.K + m);
                    else tc_zero16(dst);
                } else {
                    uint16_t v[8];
                    CV_UNROLL
                    for (int e = 0; e < 8; e++) v[e] = j < ke && m + e < g.M ? cv_ldu(a, (long long)j * s.K + m + e) : 0;
                    tc_store8(dst, v);
                }
            }
        } else {
            // The chunk's 8 columns k..k+7 as taps (r, sx) and channel ch (FWD: c, DGRAD: k_out).
            int kc = (tid % 4) * 8, k = k0 + kc;
            int ch = a_ch, sx = a_s, r = a_r;
            if (VEC_A) {
                CV_UNROLL
                for (int i = 0; i < MI; i++) {
                    uint16_t *dst = As + (tid / 4 + 32 * i) * A_LD + kc;
                    long long off = -1;
                    if (k < ke && a_img[i] >= 0)
                        off = MODE == GEMM_FWD ? fwd_a_off(s, a_img[i], a_y[i], a_x[i], r, sx, ch)
                                               : dgrad1_a_off(s, a_img[i], a_y[i], a_x[i], r, sx, ch);
                    if (off >= 0) ct_cp_async_cg16(dst, a + off);
                    else tc_zero16(dst);
                }
            } else {
                int er[8], es[8], ec[8];
                CV_UNROLL
                for (int e = 0; e < 8; e++) {
                    er[e] = r;
                    es[e] = sx;
                    ec[e] = k + e < ke ? ch : -1;
                    if (++ch == cdim) {
                        ch = 0;
                        if (++sx == taps_s) {
                            sx = 0;
                            ++r;
                        }
                    }
                }
                CV_UNROLL
                for (int i = 0; i < MI; i++) {
                    uint16_t v[8];
                    CV_UNROLL
                    for (int e = 0; e < 8; e++) {
                        long long off = -1;
                        if (ec[e] >= 0 && a_img[i] >= 0)
                            off = MODE == GEMM_FWD ? fwd_a_off(s, a_img[i], a_y[i], a_x[i], er[e], es[e], ec[e])
                                                   : dgrad1_a_off(s, a_img[i], a_y[i], a_x[i], er[e], es[e], ec[e]);
                        v[e] = off >= 0 ? cv_ldu(a, off) : 0;
                    }
                    tc_store8(As + (tid / 4 + 32 * i) * A_LD + kc, v);
                }
            }
        }
        CV_UNROLL
        for (int i = 0; i < 2; i++) {
            int id = tid + TC_THREADS * i;
            if (MODE == GEMM_FWD) {
                int nl = id / 4, kc = (id % 4) * 8;
                int n = n0 + nl, k = k0 + kc;
                uint16_t *dst = Bs + nl * B_LD + kc;
                if (VEC_B) {
                    if (n < g.N && k < ke) ct_cp_async_cg16(dst, b + (size_t)n * g.K + k);
                    else tc_zero16(dst);
                } else {
                    uint16_t v[8];
                    CV_UNROLL
                    for (int e = 0; e < 8; e++) v[e] = n < g.N && k + e < ke ? cv_ldu(b, (long long)n * g.K + k + e) : 0;
                    tc_store8(dst, v);
                }
            } else if (MODE == GEMM_DGRAD) {
                int kl = id / 8, nc = (id % 8) * 8;
                int k = k0 + kl, n = n0 + nc;
                uint16_t *dst = Bs + kl * B_LD + nc;
                // w[k_out, r, s, c]: channels n.. are contiguous
                int r = g.r0 + bk_2[i] * s.stride, sx = g.s0 + bk_1[i] * s.stride;
                long long base = ((long long)(bk_0[i] * s.R + r) * s.S + sx) * s.C + n;
                if (VEC_B) {
                    if (k < ke && n < g.N) ct_cp_async_cg16(dst, b + base);
                    else tc_zero16(dst);
                } else {
                    uint16_t v[8];
                    CV_UNROLL
                    for (int e = 0; e < 8; e++) v[e] = k < ke && n + e < g.N ? cv_ldu(b, base + e) : 0;
                    tc_store8(dst, v);
                }
            } else {
                int kl = id / 8, nc = (id % 8) * 8;
                int j = k0 + kl;
                uint16_t *dst = Bs + kl * B_LD + nc;
                int y = bk_1[i] * s.stride - s.pad, x = bk_0[i] * s.stride - s.pad, img = bk_2[i];
                if (VEC_B) {
                    long long off = j < ke && b_c[0] >= 0 ? fwd_a_off(s, img, y, x, b_r[0], b_s[0], b_c[0]) : -1;
                    if (off >= 0) ct_cp_async_cg16(dst, b + off);
                    else tc_zero16(dst);
                } else {
                    uint16_t v[8];
                    CV_UNROLL
                    for (int e = 0; e < 8; e++) {
                        long long off = j < ke && b_c[e] >= 0 ? fwd_a_off(s, img, y, x, b_r[e], b_s[e], b_c[e]) : -1;
                        v[e] = off >= 0 ? cv_ldu(b, off) : 0;
                    }
                    tc_store8(dst, v);
                }
            }
        }
    };

    float acc[MI][4][4];
    CV_UNROLL
    for (int i = 0; i < MI; i++)
        CV_UNROLL
        for (int j = 0; j < 4; j++)
            CV_UNROLL
            for (int e = 0; e < 4; e++) acc[i][j][e] = 0.f;

    for (int st = 0; st < TC_STAGES - 1; st++) {
        if (st < ktiles) {
            load_tile(st, kb + st * TC_BK);
            advance();
        }
        ct_cp_async_commit();
    }
    for (int kt = 0; kt < ktiles; kt++) {
        ct_cp_async_wait<TC_STAGES - 2>();
        __syncthreads();  // tile kt visible to all; everyone is done with tile kt-1's stage
        int pf = kt + TC_STAGES - 1;
        if (pf < ktiles) {
            load_tile(pf % TC_STAGES, kb + pf * TC_BK);
            advance();
        }
        ct_cp_async_commit();
        const uint16_t *As = sm + (kt % TC_STAGES) * TC_STAGE_ELEMS;
        const uint16_t *Bs = As + TC_A_ELEMS;
        CV_UNROLL
        for (int ks = 0; ks < TC_BK; ks += 16) {
            uint32_t af[MI][4], bf[4][2];
            CV_UNROLL
            for (int mi = 0; mi < MI; mi++) {
                int mrow = wm * (16 * MI) + mi * 16;
                if (a_mk) {
                    ct_ldmatrix_x4(af[mi], As + (mrow + lane % 16) * A_LD + ks + (lane / 16) * 8);
                } else {
                    int k = ks + lane % 8 + (lane / 16) * 8, m = mrow + ((lane / 8) & 1) * 8;
                    ct_ldmatrix_x4_trans(af[mi], As + k * A_LD + m);
                }
            }
            CV_UNROLL
            for (int np = 0; np < 2; np++) {  // pairs of n8 tiles
                int ncol = wn * 32 + np * 16;
                uint32_t r4[4];
                if (b_nk) {
                    int n = ncol + lane % 8 + (lane / 16) * 8, k = ks + ((lane / 8) & 1) * 8;
                    ct_ldmatrix_x4(r4, Bs + n * B_LD + k);
                } else {
                    int k = ks + lane % 8 + ((lane / 8) & 1) * 8, n = ncol + (lane / 16) * 8;
                    ct_ldmatrix_x4_trans(r4, Bs + k * B_LD + n);
                }
                bf[2 * np][0] = r4[0];
                bf[2 * np][1] = r4[1];
                bf[2 * np + 1][0] = r4[2];
                bf[2 * np + 1][1] = r4[3];
            }
            CV_UNROLL
            for (int mi = 0; mi < MI; mi++)
                CV_UNROLL
                for (int ni = 0; ni < 4; ni++) ct_mma_m16n8k16_bf16(acc[mi][ni], af[mi], bf[ni], acc[mi][ni]);
        }
    }
    ct_cp_async_wait<0>();

    // Accumulator fragment: c0,c1 at (row g, cols 2t, 2t+1), c2,c3 at row g+8.
    TC *c = (TC *)g.c + (size_t)blockIdx.z * g.c_split_stride;
    int gi = lane / 4, ti = lane % 4;
    CV_UNROLL
    for (int mi = 0; mi < MI; mi++)
        CV_UNROLL
        for (int half = 0; half < 2; half++) {
            int m = m0 + wm * (16 * MI) + mi * 16 + gi + half * 8;
            if (m >= g.M) continue;
            size_t row = m;
            if (MODE == GEMM_DGRAD) row = conv_dgrad_dx_row(g, m);
            CV_UNROLL
            for (int ni = 0; ni < 4; ni++) {
                int n = n0 + wn * 32 + ni * 8 + 2 * ti;  // even
                float v0 = acc[mi][ni][half * 2], v1 = acc[mi][ni][half * 2 + 1];
                if (g.bias) {
                    if (n < g.N) v0 += ct_ld(g.bias, n);
                    if (n + 1 < g.N) v1 += ct_ld(g.bias, n + 1);
                }
                if (MODE == GEMM_DGRAD && g.c_acc) {  // a later gradient contribution: add in place
                    if (n < g.N) v0 = __fadd_rn(v0, ct_ld(c, row * g.N + n));
                    if (n + 1 < g.N) v1 = __fadd_rn(v1, ct_ld(c, row * g.N + n + 1));
                }
                if (g.c_pairs && n + 1 < g.N) {
                    cv_st2(c, row * g.N + n, v0, v1);
                } else {
                    if (n < g.N) ct_st(c, row * g.N + n, v0);
                    if (n + 1 < g.N) ct_st(c, row * g.N + n + 1, v1);
                }
            }
        }
}

// The kernel is picked first, then launched once (CT_LAUNCH cannot take a template-id). mi: m16
// tiles per warp (4: 128-row tiles; 2: 64-row tiles for narrow weight gradients).
extern "C" void ct_gemm_tc1_launch(int mode, GemmArgs g, int c_f32, int mi, dim3 grid, cudaStream_t st) {
    void (*kern)(GemmArgs) = NULL;
#define TC_PICK(MODE, TCT, MI)                                                                    \
    kern = g.vec_a ? (g.vec_b ? gemm_tc_k<MODE, TCT, true, true, MI> : gemm_tc_k<MODE, TCT, true, false, MI>) \
                   : (g.vec_b ? gemm_tc_k<MODE, TCT, false, true, MI> : gemm_tc_k<MODE, TCT, false, false, MI>)
    if (mode == GEMM_FWD && c_f32) TC_PICK(GEMM_FWD, float, 4);
    else if (mode == GEMM_FWD) TC_PICK(GEMM_FWD, uint16_t, 4);
    else if (mode == GEMM_DGRAD) TC_PICK(GEMM_DGRAD, uint16_t, 4);
    else if (mi == 2) TC_PICK(GEMM_WGRAD, float, 2);
    else TC_PICK(GEMM_WGRAD, float, 4);
#undef TC_PICK
    CT_LAUNCH(kern, grid, TC_THREADS, 0, st, g);
    CT_CHECK_LAUNCH("conv GEMM (tensor cores)");
}
