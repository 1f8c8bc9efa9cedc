// The generic convolution engine (CT_CONV_GENERIC): the implicit GEMM of kernels/conv.cu in fp32
// math over fp32 or bf16 storage, 64x64 tiles through shared memory, any shape; the only engine for
// fp32 storage. It gathers the operands of the whole convolution at once (the data gradient walks
// all taps, no stride phases). ct_gemm_generic_launch picks the kernel's template instance for
// conv.cu's ct_gemm_run, which plans the grid and the split-K.
#include "kernels/common.cuh"
#include "kernels/act.cuh"  // ct_ld, ct_st
#include "kernels/conv_gemm.cuh"
#include "kernels/kernels.h"

// ---------------------------------------------------------------------------------------------
// Operand gathers of the generic engine. Pixel offsets are formed in 64 bits: a large batch of
// large images overflows 32-bit element offsets long before it overflows 32-bit pixel counts.

// Groups (ConvShape.groups > 1): the GEMM of one group, whose index the block's y coordinate
// carries (blockIdx.y = group * n_tiles + n_tile): in channels [grp*cg, grp*cg + cg), out channels
// [grp*kg, grp*kg + kg), weights [K, R, S, cg]. A dense convolution is group 0 of 1 (cg = C, kg = K).
struct GnGroup {
    int grp, cg, kg;
};

// im2col element (row j = output pixel npq, column rsc over the group's cg channels); -1 when it is padding.
__device__ static inline long long im2col_off(const ConvShape &s, const GnGroup &gp, int j, int rsc) {
    int q = j % s.Q, t = j / s.Q;
    int p = t % s.P, n = t / s.P;
    int c = rsc % gp.cg, t2 = rsc / gp.cg;
    int sx = t2 % s.S, r = t2 / s.S;
    int h = p * s.stride - s.pad + r, w = q * s.stride - s.pad + sx;
    if (h < 0 || h >= s.H || w < 0 || w >= s.W) return -1;
    return ((long long)(n * s.H + h) * s.W + w) * s.C + gp.grp * gp.cg + c;
}
// Data-gradient gather: row m = input pixel nhw, column rsk over the group's kg outputs; the dout
// element, or -1.
__device__ static inline long long dgrad_off(const ConvShape &s, const GnGroup &gp, int m, int rsk) {
    int w = m % s.W, t = m / s.W;
    int h = t % s.H, n = t / s.H;
    int k = rsk % gp.kg, t2 = rsk / gp.kg;
    int sx = t2 % s.S, r = t2 / s.S;
    int ph = h + s.pad - r, pw = w + s.pad - sx;
    if (ph < 0 || pw < 0 || ph % s.stride || pw % s.stride) return -1;
    int p = ph / s.stride, q = pw / s.stride;
    if (p >= s.P || q >= s.Q) return -1;
    return ((long long)(n * s.P + p) * s.Q + q) * s.K + gp.grp * gp.kg + k;
}
// Data-gradient weight: row rsk, column c -> w[grp*kg + k, r, s, c].
__device__ static inline long long dgrad_w_off(const ConvShape &s, const GnGroup &gp, int rsk, int c) {
    int k = gp.grp * gp.kg + rsk % gp.kg, t2 = rsk / gp.kg;
    int sx = t2 % s.S, r = t2 / s.S;
    return ((long long)(k * s.R + r) * s.S + sx) * gp.cg + c;
}

// ---------------------------------------------------------------------------------------------
// Generic engine: 64x64 output tile per 256-thread block, 16-deep k slices through shared
// memory (operands converted to fp32 on the way in), 4x4 outputs per thread.

// GN_BM, GN_BN, GN_BK: kernels/conv_gemm.cuh (ct_gemm_run sizes the grid and the split plan with them).
#define GN_THREADS 256

template <int MODE, typename TA>
__device__ static inline float gn_load_a(const GemmArgs &g, const GnGroup &gp, const TA *a, int m, int k) {
    if (m >= g.M || k >= g.k_end) return 0.f;
    if (MODE == GEMM_FWD) {
        long long o = im2col_off(g.s, gp, m, k);
        return o < 0 ? 0.f : ct_ld(a, (size_t)o);
    } else if (MODE == GEMM_DGRAD) {
        long long o = dgrad_off(g.s, gp, m, k);
        return o < 0 ? 0.f : ct_ld(a, (size_t)o);
    } else {  // WGRAD: A[k_out, j] = dout[j, grp*kg + k_out]
        return ct_ld(a, (size_t)k * g.s.K + gp.grp * gp.kg + m);
    }
}
template <int MODE, typename TB>
__device__ static inline float gn_load_b(const GemmArgs &g, const GnGroup &gp, const TB *b, int k, int n) {
    if (n >= g.N || k >= g.k_end) return 0.f;
    if (MODE == GEMM_FWD) {
        return ct_ld(b, (size_t)(gp.grp * gp.kg + n) * g.K + k);  // w[grp*kg + n, k]
    } else if (MODE == GEMM_DGRAD) {
        return ct_ld(b, (size_t)dgrad_w_off(g.s, gp, k, n));
    } else {  // WGRAD: B[j, rsc] = im2col
        long long o = im2col_off(g.s, gp, k, n);
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
    // blockIdx.y = group * n_tiles + n_tile (one group: blockIdx.y is the n tile).
    const int G = g.s.groups > 1 ? g.s.groups : 1, n_tiles = (g.N + GN_BN - 1) / GN_BN;
    GnGroup gp;
    gp.grp = G > 1 ? (int)blockIdx.y / n_tiles : 0;
    gp.cg = g.s.C / G;
    gp.kg = g.s.K / G;
    int m0 = blockIdx.x * GN_BM, n0 = (G > 1 ? (int)blockIdx.y % n_tiles : (int)blockIdx.y) * GN_BN;
    // C's row stride and this group's first column (a dense GEMM: N and 0).
    size_t ldc = g.N, c0 = 0;
    if (G > 1) {
        if (MODE == GEMM_FWD) ldc = g.s.K, c0 = (size_t)gp.grp * gp.kg;
        else if (MODE == GEMM_DGRAD) ldc = g.s.C, c0 = (size_t)gp.grp * gp.cg;
        else c0 = (size_t)gp.grp * gp.kg * g.N;  // WGRAD: the group's rows of dw
    }
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
            As[kl][ml] = k < ke ? gn_load_a<MODE>(g, gp, a, m0 + ml, k) : 0.f;
        }
        CV_UNROLL
        for (int i = 0; i < GN_BN * GN_BK / GN_THREADS; i++) {
            int e = tid + i * GN_THREADS;
            int kl = b_k_fast ? e % GN_BK : e / GN_BN, nl = b_k_fast ? e / GN_BK : e % GN_BN;
            int k = k0 + kl;
            Bs[kl][nl] = k < ke ? gn_load_b<MODE>(g, gp, b, k, n0 + nl) : 0.f;
        }
        __syncthreads();
        // __fmaf_rn is fmaf on a GPU; the emulator inlines it as one FMA instruction (kernels/emu/emu.h).
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
                for (int j = 0; j < 4; j++) acc[i][j] = __fmaf_rn(av[i], bv[j], acc[i][j]);
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
            const size_t ci = (size_t)m * ldc + c0 + n;
            if (MODE == GEMM_DGRAD && g.c_acc) v = __fadd_rn(v, ct_ld(c, ci));
            ct_st(c, ci, v);
        }
    }
}

// The kernel is picked first, then launched once (CT_LAUNCH cannot take a template-id).
extern "C" void ct_gemm_generic_launch(int mode, GemmArgs g, CtDtype dt, int a_f32, int c_f32, dim3 grid,
                                       cudaStream_t st) {
    void (*kern)(GemmArgs) = NULL;
    if (dt == CT_F32) {
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
    CT_LAUNCH(kern, grid, GN_THREADS, 0, st, g);
    CT_CHECK_LAUNCH("conv GEMM (generic)");
}

// ---------------------------------------------------------------------------------------------
// Grouped convolutions (ConvShape.groups > 1), every pass, fp32 or bf16 storage: conv.cu's entry
// points send here those that engine v2's block-diagonal path (kernels/conv_tcg.cu) does not take:
// fp32, the engines v1 and generic asked, channels per group that are not 4 or multiples of 8 up
// to 64 (docs/GROUPED.md). One launch covers every group: the
// grid's y holds (group, n tile), so a group's GEMM is the dense one of C/groups -> K/groups
// channels. The weight gradient splits its reduction like the dense one (one plan for all groups,
// from the shape alone): partial z of the whole [K, R*S*C/groups] gradient at work + z * that size.
static void grouped_split(const ConvShape *s, int *splits, int *k_split) {
    int G = conv_groups(s);
    ct_split_plan(s->K, s->R * s->S * (s->C / G), s->N * s->P * s->Q, GN_BM, GN_BN, GN_BK, splits, k_split);
}

extern "C" size_t ct_conv_grouped_work_floats(const ConvShape *s) {
    if (conv_groups(s) <= 1 || s->N * s->P * s->Q <= 0) return 0;
    int splits, k_split;
    grouped_split(s, &splits, &k_split);
    return splits > 1 ? (size_t)splits * s->K * s->R * s->S * (s->C / conv_groups(s)) : 0;
}

extern "C" int ct_conv_grouped_run(int mode, const ConvShape *s, void *c, const void *a, const void *b, int acc,
                                   float *work, CtDtype dt, cudaStream_t st) {
    const int G = conv_groups(s), cg = s->C / G, kg = s->K / G;
    GemmArgs g = {};
    g.s = *s;
    g.a = a;
    g.b = b;
    g.c = c;
    g.c_acc = mode == GEMM_DGRAD && acc;
    if (mode == GEMM_FWD) g.M = s->N * s->P * s->Q, g.N = kg, g.K = s->R * s->S * cg;
    else if (mode == GEMM_DGRAD) g.M = s->N * s->H * s->W, g.N = cg, g.K = s->R * s->S * kg;
    else g.M = kg, g.N = s->R * s->S * cg, g.K = s->N * s->P * s->Q;
    g.k_end = g.k_split = g.K;
    int splits = 1;
    if (mode == GEMM_WGRAD) {
        int k_split;
        grouped_split(s, &splits, &k_split);
        if (splits > 1) {
            if (!work) ct_die("grouped conv weight gradient: no work buffer (conv2d_gpu_work_floats)");
            g.k_split = k_split;
            g.c = work;
            g.c_split_stride = (size_t)s->K * g.N;
        }
    }
    dim3 grid((g.M + GN_BM - 1) / GN_BM, ((g.N + GN_BN - 1) / GN_BN) * G, splits);
    if (grid.y > 65535 || grid.z > 65535) ct_die("grouped conv: GEMM of %d x %d in %d groups too large for the grid", g.M, g.N, G);
    int f32 = dt == CT_F32;
    ct_gemm_generic_launch(mode, g, dt, f32, mode == GEMM_WGRAD ? 1 : f32, grid, st);
    if (splits > 1) ct_conv_reduce_splits((float *)c, work, splits, (size_t)s->K * g.N, st);
    return CT_CONV_GENERIC;
}
