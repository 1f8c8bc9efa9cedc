// Convolution forward, data gradient and weight gradient as implicit GEMM (NHWC activations,
// KRSC weights), and the GEMM engine that kernels/linear.cu reuses (a linear layer is a 1x1
// convolution over a 1x1 image).
//
// The three convolutions are one GEMM C[M,N] = sum_k A[M,k] B[k,N] whose operands are gathered
// on the fly from the tensors (no im2col buffer):
//   forward  out[npq, k]  = sum_{rsc} in[n, p*st-pad+r, q*st-pad+s, c]  w[k, rsc]
//   data     din[nhw, c]  = sum_{rsk} dout[n, (h+pad-r)/st, (w+pad-s)/st, k] w[k, r, s, c]
//                           (taps whose division is not exact, or out of range, are zero)
//   weight   dw[k, rsc]   = sum_{npq} dout[npq, k] in[n, p*st-pad+r, q*st-pad+s, c]
// Two engines compute it:
//   - generic: fp32 or bf16 storage, fp32 math, 64x64 tiles through shared memory, any shape.
//   - tc: bf16 tensor cores (mma.sync m16n8k16, ldmatrix, cp.async in a 3-stage pipeline),
//     128x64x32 tiles, any bf16 shape: operands whose 8-element chunks are contiguous and
//     16-byte aligned (channel count along the chunk a multiple of 8) are copied by cp.async,
//     others (the 3-channel stem) are gathered element by element into the same tiles. The
//     data gradient runs once per stride phase (input pixels with equal h % st, w % st), each a
//     stride-1 GEMM over only the taps that reach those pixels: no mma work on skipped taps.
// A third, engine v2 (kernels/conv_tc2.cu: 128x128 tiles, 4 stages, gather tables), takes the
// bf16 convolutions whose operands are all vectorisable; conv_tc_engine() below picks it. A fourth,
// the Hopper engine (kernels/conv_wgmma.cu: wgmma, warp-specialised), takes v2's forward shapes on
// compute 9.0 when CTRAIN_CONV_ENGINE=wgmma.
// The weight gradient reduces over N*P*Q, which is long when K*R*S*C is small: the reduction is
// cut into a number of splits that depends only on the shape (split_plan: enough CTAs to fill the
// GPU, few enough that the partials' traffic stays small against the operands'); each split writes
// its own fp32 partial buffer and a second kernel sums the partials in split order. No atomics
// anywhere, so a rerun is bit-identical.
#include <string.h>

#include "kernels/common.cuh"
#include "kernels/act.cuh"  // ct_ld, ct_st, ct_check_vec_align
#include "kernels/conv_gemm.cuh"
#include "kernels/kernels.h"
#include "kernels/ptx.cuh"
#include "util/common.h"

#ifdef __CUDACC__
#define CV_UNROLL _Pragma("unroll")
#else
#define CV_UNROLL
#endif

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
// Operand gathers shared by both engines. Pixel offsets are formed in 64 bits: a large batch of
// large images overflows 32-bit element offsets long before it overflows 32-bit pixel counts.

// im2col element (row j = output pixel npq, column rsc); -1 when it is padding.
__device__ static inline long long im2col_off(const ConvShape &s, int j, int rsc) {
    int q = j % s.Q, t = j / s.Q;
    int p = t % s.P, n = t / s.P;
    int c = rsc % s.C, t2 = rsc / s.C;
    int sx = t2 % s.S, r = t2 / s.S;
    int h = p * s.stride - s.pad + r, w = q * s.stride - s.pad + sx;
    if (h < 0 || h >= s.H || w < 0 || w >= s.W) return -1;
    return ((long long)(n * s.H + h) * s.W + w) * s.C + c;
}
// Data-gradient gather: row m = input pixel nhw, column rsk; the dout element, or -1.
__device__ static inline long long dgrad_off(const ConvShape &s, int m, int rsk) {
    int w = m % s.W, t = m / s.W;
    int h = t % s.H, n = t / s.H;
    int k = rsk % s.K, t2 = rsk / s.K;
    int sx = t2 % s.S, r = t2 / s.S;
    int ph = h + s.pad - r, pw = w + s.pad - sx;
    if (ph < 0 || pw < 0 || ph % s.stride || pw % s.stride) return -1;
    int p = ph / s.stride, q = pw / s.stride;
    if (p >= s.P || q >= s.Q) return -1;
    return ((long long)(n * s.P + p) * s.Q + q) * s.K + k;
}
// Data-gradient weight: row rsk, column c -> w[k, r, s, c].
__device__ static inline long long dgrad_w_off(const ConvShape &s, int rsk, int c) {
    int k = rsk % s.K, t2 = rsk / s.K;
    int sx = t2 % s.S, r = t2 / s.S;
    return ((long long)(k * s.R + r) * s.S + sx) * s.C + c;
}

// ---------------------------------------------------------------------------------------------
// Generic engine: 64x64 output tile per 256-thread block, 16-deep k slices through shared
// memory (operands converted to fp32 on the way in), 4x4 outputs per thread.

#define GN_BM 64
#define GN_BN 64
#define GN_BK 16
#define GN_THREADS 256

template <int MODE, typename TA>
__device__ static inline float gn_load_a(const GemmArgs &g, const TA *a, int m, int k) {
    if (m >= g.M || k >= g.k_end) return 0.f;
    if (MODE == GEMM_FWD) {
        long long o = im2col_off(g.s, m, k);
        return o < 0 ? 0.f : ct_ld(a, (size_t)o);
    } else if (MODE == GEMM_DGRAD) {
        long long o = dgrad_off(g.s, m, k);
        return o < 0 ? 0.f : ct_ld(a, (size_t)o);
    } else {  // WGRAD: A[k_out, j] = dout[j, k_out]
        return ct_ld(a, (size_t)k * g.s.K + m);
    }
}
template <int MODE, typename TB>
__device__ static inline float gn_load_b(const GemmArgs &g, const TB *b, int k, int n) {
    if (n >= g.N || k >= g.k_end) return 0.f;
    if (MODE == GEMM_FWD) {
        return ct_ld(b, (size_t)n * g.K + k);  // w[n, k]
    } else if (MODE == GEMM_DGRAD) {
        return ct_ld(b, (size_t)dgrad_w_off(g.s, k, n));
    } else {  // WGRAD: B[j, rsc] = im2col
        long long o = im2col_off(g.s, k, n);
        return o < 0 ? 0.f : ct_ld(b, (size_t)o);
    }
}

template <int MODE, typename TA, typename TB, typename TC>
__global__ void __launch_bounds__(GN_THREADS) gemm_generic_k(GemmArgs g) {
    __shared__ float As[GN_BK][GN_BM + 4];
    __shared__ float Bs[GN_BK][GN_BN + 4];
    const TA *a = (const TA *)g.a;
    const TB *b = (const TB *)g.b;
    int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
    int m0 = blockIdx.x * GN_BM, n0 = blockIdx.y * GN_BN;
    int kb = blockIdx.z * g.k_split;
    int ke = min(g.k_end, kb + g.k_split);
    // Which index runs fastest in memory decides the thread -> element map of the tile loads,
    // so that neighbouring threads read neighbouring addresses.
    const bool a_k_fast = MODE != GEMM_WGRAD;  // FWD/DGRAD A rows are contiguous in k
    const bool b_k_fast = MODE == GEMM_FWD;    // FWD B rows are contiguous in k
    float acc[4][4] = {};
    for (int k0 = kb; k0 < ke; k0 += GN_BK) {
        CV_UNROLL
        for (int i = 0; i < GN_BM * GN_BK / GN_THREADS; i++) {
            int e = tid + i * GN_THREADS;
            int kl = a_k_fast ? e % GN_BK : e / GN_BM, ml = a_k_fast ? e / GN_BK : e % GN_BM;
            int k = k0 + kl;
            As[kl][ml] = k < ke ? gn_load_a<MODE>(g, a, m0 + ml, k) : 0.f;
        }
        CV_UNROLL
        for (int i = 0; i < GN_BN * GN_BK / GN_THREADS; i++) {
            int e = tid + i * GN_THREADS;
            int kl = b_k_fast ? e % GN_BK : e / GN_BN, nl = b_k_fast ? e / GN_BK : e % GN_BN;
            int k = k0 + kl;
            Bs[kl][nl] = k < ke ? gn_load_b<MODE>(g, b, k, n0 + nl) : 0.f;
        }
        __syncthreads();
        CV_UNROLL
        for (int kk = 0; kk < GN_BK; kk++) {
            float av[4], bv[4];
            CV_UNROLL
            for (int i = 0; i < 4; i++) av[i] = As[kk][ty + 16 * i];
            CV_UNROLL
            for (int j = 0; j < 4; j++) bv[j] = Bs[kk][tx + 16 * j];
            CV_UNROLL
            for (int i = 0; i < 4; i++)
                CV_UNROLL
                for (int j = 0; j < 4; j++) acc[i][j] = fmaf(av[i], bv[j], acc[i][j]);
        }
        __syncthreads();
    }
    TC *c = (TC *)g.c + (size_t)blockIdx.z * g.c_split_stride;
    CV_UNROLL
    for (int i = 0; i < 4; i++) {
        int m = m0 + ty + 16 * i;
        if (m >= g.M) continue;
        CV_UNROLL
        for (int j = 0; j < 4; j++) {
            int n = n0 + tx + 16 * j;
            if (n >= g.N) continue;
            float v = acc[i][j];
            if (g.bias) v += ct_ld(g.bias, n);
            if (MODE == GEMM_DGRAD && g.c_acc) v = __fadd_rn(v, ct_ld(c, (size_t)m * g.N + n));
            ct_st(c, (size_t)m * g.N + n, v);
        }
    }
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

#define TC_BM 128
#define TC_BN 64
#define TC_BK 32
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
            if (m < g.M) {
                if (MODE == GEMM_FWD) {
                    int q = m % s.Q, t = m / s.Q;
                    a_img[i] = t / s.P;
                    a_y[i] = (t % s.P) * s.stride - s.pad;
                    a_x[i] = q * s.stride - s.pad;
                } else {  // phase pixel (hh, ww): dout row p = hh + dh - ri, column q = ww + dw - si
                    int ww = m % g.Wp, t = m / g.Wp;
                    a_img[i] = t / g.Hp;
                    a_y[i] = t % g.Hp + g.dh;
                    a_x[i] = ww + g.dw;
                }
            }
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
            if (MODE == GEMM_DGRAD) {  // phase pixel -> input pixel
                int ww = m % g.Wp, t = m / g.Wp, hh = t % g.Hp, img = t / g.Hp;
                row = ((size_t)img * s.H + g.ph_h + hh * s.stride) * s.W + g.ph_w + ww * s.stride;
            }
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

// Sum of the split-K partials in split order: dst[i] = sum_z part[z * n + i].
__global__ void reduce_splits_k(float *dst, const float *part, int splits, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        float acc = 0.f;
        for (int z = 0; z < splits; z++) acc += ct_ld(part, (size_t)z * n + i);
        ct_st(dst, i, acc);
    }
}

// ---------------------------------------------------------------------------------------------
// Host side.

static int ceil_div(long long a, long long b) { return (int)((a + b - 1) / b); }

// Split-K plan for the weight gradient. Depends only on the GEMM shape (not on the GPU), so the
// summation order, hence every bit of the result, is the same on any device.
typedef struct {
    int splits, k_split;
} SplitPlan;
// Three pulls: occupancy wants ~4 waves of a 132-SM GPU (512 CTAs); traffic wants few splits,
// since each one writes an M x N fp32 partial that the reduction reads back (8*M*N bytes), which
// on the late layers (few tiles, short K) cost more than the GEMM's operands; and below one wave
// (132 CTAs) SMs would sit idle. So: the 4-wave count, cut to what keeps the partials' traffic
// within a quarter of the bytes the main loop reads ((M + N) * K bf16), but never below one wave.
// On resnet50 at 224, batch 256 this takes the partials from 10.6 to 6.7 MB per image, for weight
// gradients 0.3-2.4% slower in a wave-quantised roofline model (docs/BENCHMARKS.md).
#define SPLIT_AIM_CTAS 512
#define SPLIT_MIN_CTAS 132
static SplitPlan split_plan(int M, int N, int K, int bm, int bn, int bk) {
    SplitPlan sp;
    long long tiles = (long long)ceil_div(M, bm) * ceil_div(N, bn);
    long long want = (SPLIT_AIM_CTAS + tiles - 1) / tiles;
    long long budget = ((long long)M + N) * K / (16LL * M * N);  // 8*s*M*N <= ((M + N)*K*2) / 4
    long long floor_s = (SPLIT_MIN_CTAS + tiles - 1) / tiles;
    if (want > budget) want = budget;
    if (want < floor_s) want = floor_s;
    int most = K / (8 * bk);  // keep >= 8 k-tiles per split
    if (want > most) want = most;
    if (want > CONV_MAX_SPLITS) want = CONV_MAX_SPLITS;
    if (want < 1) want = 1;
    sp.k_split = ceil_div(ceil_div(K, (int)want), bk) * bk;
    sp.splits = ceil_div(K, sp.k_split);
    return sp;
}

extern "C" void ct_split_plan(int M, int N, int K, int bm, int bn, int bk, int *splits, int *k_split) {
    SplitPlan sp = split_plan(M, N, K, bm, bn, bk);
    *splits = sp.splits;
    *k_split = sp.k_split;
}

extern "C" void ct_conv_reduce_splits(float *dst, const float *part, int splits, size_t n, cudaStream_t st) {
    unsigned blocks = (unsigned)((n + 255) / 256);
    if (blocks > 4096) blocks = 4096;
    CT_LAUNCH(reduce_splits_k, blocks, 256, 0, st, dst, part, splits, n);
    CT_CHECK_LAUNCH("conv split-K reduction");
}

// Which tensor-core engine CT_CONV_AUTO takes for bf16: CTRAIN_CONV_ENGINE=v1|v2|wgmma (default
// v2), so one GPU run can compare them. wgmma falls back to v2 for what it does not take (the
// gradients, other devices), v2 to v1.
static int conv_tc_engine(int algo) {
    if (algo != CT_CONV_AUTO) return algo;
    const char *e = getenv("CTRAIN_CONV_ENGINE");
    if (!e || !*e || !strcmp(e, "v2")) return CT_CONV_TC2;
    if (!strcmp(e, "v1")) return CT_CONV_TC;
    if (!strcmp(e, "wgmma")) return CT_CONV_WGMMA;
    ct_die("CTRAIN_CONV_ENGINE=%s: expected v1, v2 or wgmma", e);
}

// Weight gradients with at most 64 output channels (the stem, ResNet layer1) take 64-row tiles:
// a 128-row tile would multiply zeros in half of its mma work.
static int tc_wgrad_bm(int M) { return M <= 64 ? 64 : TC_BM; }

extern "C" size_t conv2d_gpu_work_floats(const ConvShape *s) {
    int M = s->K, N = s->R * s->S * s->C, K = s->N * s->P * s->Q;
    if (M <= 0 || N <= 0 || K <= 0) return 0;
    SplitPlan a = split_plan(M, N, K, GN_BM, GN_BN, GN_BK);
    SplitPlan b = split_plan(M, N, K, tc_wgrad_bm(M), TC_BN, TC_BK);
    int splits = a.splits > b.splits ? a.splits : b.splits, s2, k2;
    ct_conv_tc2_split(M, N, K, &s2, &k2);
    if (s2 > splits) splits = s2;
    return splits > 1 ? (size_t)splits * M * N : 0;
}

// The split count of a bf16 weight-gradient GEMM (M = K_out, N = R*S*C, K = N*P*Q) on engine v1
// (CT_CONV_TC) or v2 (CT_CONV_TC2): the plan depends on the batch, so tools/bench_gpu_cost.c asks
// it for the split partials' traffic at a batch it did not run.
extern "C" int conv2d_gpu_wgrad_splits(int algo, int M, int N, int K) {
    int splits, k_split;
    if (algo == CT_CONV_TC2) ct_conv_tc2_split(M, N, K, &splits, &k_split);
    else splits = split_plan(M, N, K, tc_wgrad_bm(M), TC_BN, TC_BK).splits;
    return splits;
}

// The tensor-core engine takes every bf16 GEMM; operands whose 8-element chunks are contiguous
// and aligned (the channel count along the chunk a multiple of 8) travel by cp.async.
void ct_gemm_tc_setup(GemmArgs *g, int mode, CtDtype dt) {
    const ConvShape *s = &g->s;
    g->tc_ok = dt == CT_BF16;
    int a_chunk_dim = mode == GEMM_FWD ? s->C : s->K;  // FWD: c; DGRAD: k_out; WGRAD: m = k_out
    g->vec_a = a_chunk_dim % 8 == 0 && ct_aligned(16, g->a);
    g->vec_b = s->C % 8 == 0 && ct_aligned(16, g->b);  // FWD: rows of R*S*C; DGRAD, WGRAD: c
}

extern "C" int ct_gemm_run(int mode, GemmArgs g, CtDtype dt, int a_f32, int c_f32, int algo,
                           float *work, float *final_out, cudaStream_t st) {
    int use_tc = algo != CT_CONV_GENERIC && g.tc_ok;
    if (algo == CT_CONV_TC && !use_tc) ct_die("conv: the tensor-core engine takes bf16 operands only (fp32 asked)");
    int mi = use_tc && mode == GEMM_WGRAD && tc_wgrad_bm(g.M) == 64 ? 2 : 4;  // m16 tiles per warp
    int bm = use_tc ? 32 * mi : GN_BM, bn = use_tc ? TC_BN : GN_BN, bk = use_tc ? TC_BK : GN_BK;
    int splits = 1;
    g.k_split = g.k_end;
    g.c_split_stride = 0;
    if (mode == GEMM_WGRAD && !g.no_split) {
        SplitPlan sp = split_plan(g.M, g.N, g.k_end, bm, bn, bk);
        splits = sp.splits;
        g.k_split = sp.k_split;
        if (splits > 1) {
            if (!work) ct_die("conv weight gradient: no work buffer (conv2d_gpu_work_floats)");
            g.c = work;
            g.c_split_stride = (size_t)g.M * g.N;
        }
    }
    // Output pairs (n, n+1) go out in one store when every row starts on a pair boundary.
    size_t c_elem = (use_tc && mode == GEMM_WGRAD) || c_f32 ? 4 : 2;
    g.c_pairs = g.N % 2 == 0 && ((uintptr_t)g.c % (2 * c_elem)) == 0;
    dim3 grid(ceil_div(g.M, bm), ceil_div(g.N, bn), splits);
    if (grid.y > 65535 || grid.z > 65535) ct_die("conv: GEMM of %d x %d too large for the grid", g.M, g.N);
    // The kernel is picked first, then launched once (CT_LAUNCH cannot take a template-id).
    void (*kern)(GemmArgs) = NULL;
    int threads = use_tc ? TC_THREADS : GN_THREADS;
    if (use_tc) {
#define TC_PICK(MODE, TCT, MI)                                                                    \
    kern = g.vec_a ? (g.vec_b ? gemm_tc_k<MODE, TCT, true, true, MI> : gemm_tc_k<MODE, TCT, true, false, MI>) \
                   : (g.vec_b ? gemm_tc_k<MODE, TCT, false, true, MI> : gemm_tc_k<MODE, TCT, false, false, MI>)
        if (mode == GEMM_FWD && c_f32) TC_PICK(GEMM_FWD, float, 4);
        else if (mode == GEMM_FWD) TC_PICK(GEMM_FWD, uint16_t, 4);
        else if (mode == GEMM_DGRAD) TC_PICK(GEMM_DGRAD, uint16_t, 4);
        else if (mi == 2) TC_PICK(GEMM_WGRAD, float, 2);
        else TC_PICK(GEMM_WGRAD, float, 4);
#undef TC_PICK
    } else if (dt == CT_F32) {
        if (mode == GEMM_FWD) kern = gemm_generic_k<GEMM_FWD, float, float, float>;
        else if (mode == GEMM_DGRAD) kern = gemm_generic_k<GEMM_DGRAD, float, float, float>;
        else kern = gemm_generic_k<GEMM_WGRAD, float, float, float>;
    } else if (mode == GEMM_FWD) {  // bf16 operands
        kern = c_f32 ? gemm_generic_k<GEMM_FWD, uint16_t, uint16_t, float>
                     : gemm_generic_k<GEMM_FWD, uint16_t, uint16_t, uint16_t>;
    } else if (mode == GEMM_DGRAD) {
        kern = a_f32 ? gemm_generic_k<GEMM_DGRAD, float, uint16_t, uint16_t>
                     : gemm_generic_k<GEMM_DGRAD, uint16_t, uint16_t, uint16_t>;
    } else {
        kern = a_f32 ? gemm_generic_k<GEMM_WGRAD, float, uint16_t, float>
                     : gemm_generic_k<GEMM_WGRAD, uint16_t, uint16_t, float>;
    }
    CT_LAUNCH(kern, grid, threads, 0, st, g);
    CT_CHECK_LAUNCH(use_tc ? "conv GEMM (tensor cores)" : "conv GEMM (generic)");
    if (splits > 1) ct_conv_reduce_splits(final_out, work, splits, (size_t)g.M * g.N, st);
    return use_tc ? CT_CONV_TC : CT_CONV_GENERIC;
}

static int conv_empty(const ConvShape *s) {
    return s->N <= 0 || s->P <= 0 || s->Q <= 0 || s->K <= 0 || s->C <= 0;
}

// The forward GEMM of convolution s, for every forward entry point.
static GemmArgs fwd_args(const ConvShape *s, void *out, const void *in, const void *w, CtDtype dt) {
    GemmArgs g = {};
    g.s = *s;
    g.a = in;
    g.b = w;
    g.c = out;
    g.M = s->N * s->P * s->Q;
    g.N = s->K;
    g.K = g.k_end = s->R * s->S * s->C;
    ct_gemm_tc_setup(&g, GEMM_FWD, dt);
    return g;
}

// The forward on the engine `algo` resolves to. With stats (BN tiles, conv2d_forward_stats_gpu)
// only engine v2 may run it: a convolution that resolves to another engine runs nothing and
// returns 0 (CT_CONV_AUTO), so the caller convolves as usual and BN gathers its own statistics.
static int conv_forward(const ConvShape *s, void *out, float *stats, const void *in, const void *w, CtDtype dt,
                        ct_stream_t st, int algo) {
    if (conv_empty(s)) return stats ? CT_CONV_AUTO : CT_CONV_GENERIC;
    GemmArgs g = fwd_args(s, out, in, w, dt);
    algo = g.tc_ok ? conv_tc_engine(algo) : algo;
    if (stats) {
        if (algo != CT_CONV_TC2 || !ct_conv_tc2_eligible(GEMM_FWD, &g) || !ct_aligned(8, stats)) return CT_CONV_AUTO;
        g.stats = stats;
    }
    if (algo == CT_CONV_WGMMA && ct_conv_wgmma_eligible(GEMM_FWD, &g)) {
        ct_conv_wgmma_run(GEMM_FWD, g, (cudaStream_t)st);
        return CT_CONV_WGMMA;
    }
    if (algo == CT_CONV_WGMMA) algo = CT_CONV_TC2;
    if (algo == CT_CONV_TC2 && ct_conv_tc2_eligible(GEMM_FWD, &g)) {
        ct_conv_tc2_run(GEMM_FWD, g, NULL, NULL, (cudaStream_t)st);
        return CT_CONV_TC2;
    }
    if (algo == CT_CONV_TC2) algo = CT_CONV_TC;
    return ct_gemm_run(GEMM_FWD, g, dt, dt == CT_F32, dt == CT_F32, algo, NULL, NULL, (cudaStream_t)st);
}

extern "C" int conv2d_forward_gpu_ex(const ConvShape *s, void *out, const void *in, const void *w,
                                     CtDtype dt, ct_stream_t st, int algo) {
    return conv_forward(s, out, NULL, in, w, dt, st, algo);
}

// Engine v2's forward with BN statistics in its epilogue (conv_tc2.cu's t2_tile_stats): bf16 only.
extern "C" int conv2d_forward_stats_gpu(const ConvShape *s, void *out, float *stats, const void *in, const void *w,
                                        CtDtype dt, ct_stream_t st) {
    if (dt != CT_BF16 || !stats) return 0;
    return conv_forward(s, out, stats, in, w, dt, st, CT_CONV_AUTO) == CT_CONV_TC2;
}

// The data gradient on the engine `algo` resolves to; acc: din += the gradient (in place, one
// rounding from fp32: the second contribution to a gradient slot) instead of din = it.
// bn (may be NULL): its bn_* fields ask for the BN backward epilogue (conv2d_backward_data_bn_gpu,
// conv2d_backward_data_tail_gpu), which only engine v2 runs, at stride 1: otherwise nothing runs
// and the result is 0 (CT_CONV_AUTO).
static int conv_dgrad(const ConvShape *s, void *din, const void *dout, const void *w, CtDtype dt, ct_stream_t st,
                      int algo, int acc, const GemmArgs *bn) {
    if (bn && (dt != CT_BF16 || s->stride != 1 || conv_empty(s) || s->N <= 0 || s->H <= 0 || s->W <= 0 ||
               s->C <= 0 || !ct_aligned(8, bn->bn_tiles) || !ct_aligned(4, bn->bn_x) || !ct_aligned(4, bn->bn_y)))
        return CT_CONV_AUTO;
    if (s->N <= 0 || s->H <= 0 || s->W <= 0 || s->C <= 0) return CT_CONV_GENERIC;
    if (conv_empty(s)) {  // no output pixel sees the input: the gradient is zero
        if (!acc)
            CT_CUDA_CHECK(cudaMemsetAsync(din, 0, (size_t)s->N * s->H * s->W * s->C * (dt == CT_F32 ? 4 : 2), (cudaStream_t)st));
        return CT_CONV_GENERIC;
    }
    GemmArgs g = {};
    g.s = *s;
    g.a = dout;
    g.b = w;
    g.c = din;
    g.N = s->C;
    g.c_acc = acc;
    ct_gemm_tc_setup(&g, GEMM_DGRAD, dt);
    algo = g.tc_ok ? conv_tc_engine(algo) : algo;
    if (algo == CT_CONV_WGMMA) algo = CT_CONV_TC2;  // forward only so far
    if (bn) {
        if (algo != CT_CONV_TC2) return CT_CONV_AUTO;
        g.bn_x = bn->bn_x;
        g.bn_y = bn->bn_y;
        g.bn_gamma = bn->bn_gamma;
        g.bn_beta = bn->bn_beta;
        g.bn_mean = bn->bn_mean;
        g.bn_invstd = bn->bn_invstd;
        g.bn_tiles = bn->bn_tiles;
        // Stride 1: one phase, GEMM rows = input pixels, so the tiles are the BN's 128-row tiles.
        GemmArgs t = g;
        t.ph_h = t.ph_w = t.r0 = t.s0 = 0;
        t.Hp = s->H;
        t.Wp = s->W;
        t.nr = s->R;
        t.ns = s->S;
        t.dh = s->pad;
        t.dw = s->pad;
        t.M = s->N * s->H * s->W;
        t.K = t.k_end = s->R * s->S * s->K;
        if (!ct_conv_tc2_eligible(GEMM_DGRAD, &t)) return CT_CONV_AUTO;
    }
    if (algo == CT_CONV_GENERIC || !g.tc_ok) {  // the generic engine walks all taps at once
        g.M = s->N * s->H * s->W;
        g.K = g.k_end = s->R * s->S * s->K;
        return ct_gemm_run(GEMM_DGRAD, g, dt, dt == CT_F32, dt == CT_F32, algo, NULL, NULL, (cudaStream_t)st);
    }
    // Tensor cores: one GEMM per stride phase (one in all for stride 1). A phase whose taps are
    // all skipped (1x1 stride 2, odd rows) still runs with K = 0 and writes its zeros (adds
    // nothing when accumulating).
    int used = algo == CT_CONV_TC2 ? CT_CONV_TC2 : CT_CONV_TC, str = s->stride;
    for (int ph = 0; ph < str; ph++)
        for (int pw = 0; pw < str; pw++) {
            g.ph_h = ph;
            g.ph_w = pw;
            g.Hp = ph < s->H ? (s->H - ph + str - 1) / str : 0;
            g.Wp = pw < s->W ? (s->W - pw + str - 1) / str : 0;
            g.r0 = (ph + s->pad) % str;
            g.s0 = (pw + s->pad) % str;
            g.nr = g.r0 < s->R ? (s->R - g.r0 + str - 1) / str : 0;
            g.ns = g.s0 < s->S ? (s->S - g.s0 + str - 1) / str : 0;
            g.dh = (ph + s->pad - g.r0) / str;
            g.dw = (pw + s->pad - g.s0) / str;
            g.M = s->N * g.Hp * g.Wp;
            g.K = g.k_end = g.nr * g.ns * s->K;
            if (g.K == 0) g.nr = g.ns = 1;  // no taps: keep the kernel's index arithmetic defined
            if (g.M <= 0 || (acc && g.K == 0)) continue;
            if (algo == CT_CONV_TC2 && ct_conv_tc2_eligible(GEMM_DGRAD, &g)) {
                ct_conv_tc2_run(GEMM_DGRAD, g, NULL, NULL, (cudaStream_t)st);
                continue;
            }
            ct_gemm_run(GEMM_DGRAD, g, dt, 0, 0, CT_CONV_TC, NULL, NULL, (cudaStream_t)st);
            used = CT_CONV_TC;  // a phase v2 does not take ran on v1
        }
    return used;
}

extern "C" int conv2d_backward_data_gpu_ex(const ConvShape *s, void *din, const void *dout,
                                           const void *w, CtDtype dt, ct_stream_t st, int algo) {
    return conv_dgrad(s, din, dout, w, dt, st, algo, 0, NULL);
}
extern "C" int conv2d_backward_data_acc_gpu_ex(const ConvShape *s, void *din, const void *dout,
                                               const void *w, CtDtype dt, ct_stream_t st, int algo) {
    return conv_dgrad(s, din, dout, w, dt, st, algo, 1, NULL);
}

// The data gradient of a convolution whose input was y = relu(bn(x)), with the BN backward's
// reductions in its epilogue (conv_tc2.cu's t2_tile_gsums): din = dL/dy masked by the ReLU the
// epilogue recomputes from x (y itself is not read), tiles {sum g, sum g (x - mean)} per 128-row
// tile and channel. Returns 0, having run nothing, where engine v2 does not take it.
extern "C" int conv2d_backward_data_bn_gpu(const ConvShape *s, void *din, float *tiles, const void *dout,
                                           const void *w, const void *x, const float *gamma, const float *beta,
                                           const float *mean, const float *invstd, CtDtype dt, ct_stream_t st) {
    GemmArgs bn = {};
    bn.bn_x = x;
    bn.bn_gamma = gamma;
    bn.bn_beta = beta;
    bn.bn_mean = mean;
    bn.bn_invstd = invstd;
    bn.bn_tiles = tiles;
    return conv_dgrad(s, din, dout, w, dt, st, CT_CONV_AUTO, 0, &bn) == CT_CONV_TC2;
}

// The same for a conv whose input is a block tail's output y = relu(bn(x) + res): mask y > 0 (y
// is this conv's input, so the mask costs one read of it), tiles of x, the tail BN's input.
extern "C" int conv2d_backward_data_tail_gpu(const ConvShape *s, void *din, int acc, float *tiles, const void *dout,
                                             const void *w, const void *y, const void *x, const float *mean,
                                             CtDtype dt, ct_stream_t st) {
    GemmArgs bn = {};
    bn.bn_x = x;
    bn.bn_y = y;
    bn.bn_mean = mean;
    bn.bn_tiles = tiles;
    return conv_dgrad(s, din, dout, w, dt, st, CT_CONV_AUTO, acc, &bn) == CT_CONV_TC2;
}

extern "C" int conv2d_backward_weight_gpu_ex(const ConvShape *s, float *dw, const void *dout,
                                             const void *in, float *work, CtDtype dt, ct_stream_t st,
                                             int algo) {
    if (s->K <= 0 || s->C <= 0 || s->R <= 0 || s->S <= 0) return CT_CONV_GENERIC;
    if (conv_empty(s)) {
        CT_CUDA_CHECK(cudaMemsetAsync(dw, 0, (size_t)s->K * s->R * s->S * s->C * 4, (cudaStream_t)st));
        return CT_CONV_GENERIC;
    }
    GemmArgs g = {};
    g.s = *s;
    g.a = dout;
    g.b = in;
    g.c = dw;
    g.M = s->K;
    g.N = s->R * s->S * s->C;
    g.K = g.k_end = s->N * s->P * s->Q;
    ct_gemm_tc_setup(&g, GEMM_WGRAD, dt);
    algo = g.tc_ok ? conv_tc_engine(algo) : algo;
    if (algo == CT_CONV_WGMMA) algo = CT_CONV_TC2;  // forward only so far
    if (algo == CT_CONV_TC2 && ct_conv_tc2_eligible(GEMM_WGRAD, &g)) {
        ct_conv_tc2_run(GEMM_WGRAD, g, work, dw, (cudaStream_t)st);
        return CT_CONV_TC2;
    }
    if (algo == CT_CONV_TC2) algo = CT_CONV_TC;
    return ct_gemm_run(GEMM_WGRAD, g, dt, dt == CT_F32, 1, algo, work, dw, (cudaStream_t)st);
}

extern "C" void conv2d_forward_gpu(const ConvShape *s, void *out, const void *in, const void *w,
                                   CtDtype dt, ct_stream_t st) {
    conv2d_forward_gpu_ex(s, out, in, w, dt, st, CT_CONV_AUTO);
}
extern "C" void conv2d_backward_data_gpu(const ConvShape *s, void *din, const void *dout, const void *w,
                                         CtDtype dt, ct_stream_t st) {
    conv2d_backward_data_gpu_ex(s, din, dout, w, dt, st, CT_CONV_AUTO);
}
extern "C" void conv2d_backward_data_acc_gpu(const ConvShape *s, void *din, const void *dout, const void *w,
                                             CtDtype dt, ct_stream_t st) {
    conv_dgrad(s, din, dout, w, dt, st, CT_CONV_AUTO, 1, NULL);
}
extern "C" void conv2d_backward_weight_gpu(const ConvShape *s, float *dw, const void *dout, const void *in,
                                           float *work, CtDtype dt, ct_stream_t st) {
    conv2d_backward_weight_gpu_ex(s, dw, dout, in, work, dt, st, CT_CONV_AUTO);
}
