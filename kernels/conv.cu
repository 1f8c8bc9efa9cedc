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
// This file is the host side: which engine runs which GEMM (the data gradient's stride phases
// included), the split-K plan's use, and every extern "C" entry point. The engines, one per file:
//   - generic (kernels/conv_generic.cu): fp32 or bf16 storage, fp32 math, 64x64 tiles through
//     shared memory, any shape.
//   - tc, engine v1 (kernels/conv_tc1.cu): bf16 tensor cores (mma.sync m16n8k16, ldmatrix,
//     cp.async in a 3-stage pipeline), 128x64x32 tiles, any bf16 shape: operands whose 8-element
//     chunks are contiguous and 16-byte aligned (channel count along the chunk a multiple of 8) are
//     copied by cp.async, others (the 3-channel stem) are gathered element by element into the same
//     tiles. The data gradient runs once per stride phase (input pixels with equal h % st,
//     w % st), each a stride-1 GEMM over only the taps that reach those pixels: no mma work on
//     skipped taps.
// A third, engine v2 (kernels/conv_tc2.cu: 128x128 tiles, 4 stages, gather tables), takes the
// bf16 convolutions whose operands are all vectorisable; conv_tc_engine() below picks it. A fourth,
// the Hopper engine (kernels/conv_wgmma.cu: wgmma, warp-specialised), takes v2's shapes (forward,
// data gradient phases, weight gradient, and the BN epilogues of the forward and the data
// gradient in v2's summation order) on compute 9.0 when the caller names it (CT_CONV_WGMMA).
// The weight gradient reduces over N*P*Q, which is long when K*R*S*C is small: the reduction is
// cut into a number of splits that depends only on the shape (kernels/conv_split.cu's split_plan:
// enough CTAs to fill the GPU, few enough that the partials' traffic stays small against the
// operands'); each split writes its own fp32 partial buffer and a second kernel sums the partials
// in split order. No atomics anywhere, so a rerun is bit-identical.
#include <string.h>

#include "kernels/common.cuh"
#include "kernels/act.cuh"  // ct_aligned
#include "kernels/conv_gemm.cuh"
#include "kernels/kernels.h"
#include "util/common.h"

// ---------------------------------------------------------------------------------------------
// Host side.

static int ceil_div(long long a, long long b) { return (int)((a + b - 1) / b); }

// The weight gradient's split-K plan (kernels/conv_split.cu) as one value.
typedef struct {
    int splits, k_split;
} SplitPlan;
static SplitPlan split_plan(int M, int N, int K, int bm, int bn, int bk) {
    SplitPlan sp;
    ct_split_plan(M, N, K, bm, bn, bk, &sp.splits, &sp.k_split);
    return sp;
}

// Which tensor-core engine CT_CONV_AUTO takes for bf16: v2, the default. The caller names another
// (the GPU executor passes its ExecOptions' conv engine, nn/exec_options.h); kernels never read the
// environment. wgmma falls back to v2 for what it does not take (other devices, shapes it refuses),
// v2 to v1.
static int conv_tc_engine(int algo) { return algo == CT_CONV_AUTO ? CT_CONV_TC2 : algo; }

// Weight gradients with at most 64 output channels (the stem, ResNet layer1) take 64-row tiles:
// a 128-row tile would multiply zeros in half of its mma work.
static int tc_wgrad_bm(int M) { return M <= 64 ? 64 : TC_BM; }

extern "C" size_t conv2d_gpu_work_floats(const ConvShape *s) {
    if (conv_groups(s) > 1) return ct_conv_grouped_work_floats(s);  // grouped: generic engine only
    int M = s->K, N = s->R * s->S * s->C, K = s->N * s->P * s->Q;
    if (M <= 0 || N <= 0 || K <= 0) return 0;
    SplitPlan a = split_plan(M, N, K, GN_BM, GN_BN, GN_BK);
    SplitPlan b = split_plan(M, N, K, tc_wgrad_bm(M), TC_BN, TC_BK);
    int splits = a.splits > b.splits ? a.splits : b.splits, s2, k2;
    ct_conv_tc2_split(M, N, K, &s2, &k2);
    if (s2 > splits) splits = s2;
    ct_conv_wgmma_split(M, N, K, &s2, &k2);  // never more than v2's; kept for safety
    if (s2 > splits) splits = s2;
    return splits > 1 ? (size_t)splits * M * N : 0;
}

// The split count of a bf16 weight-gradient GEMM (M = K_out, N = R*S*C, K = N*P*Q) on engine v1
// (CT_CONV_TC), v2 (CT_CONV_TC2) or the wgmma engine (CT_CONV_WGMMA): the plan depends on the batch, so tools/bench_gpu_cost.c asks
// it for the split partials' traffic at a batch it did not run.
extern "C" int conv2d_gpu_wgrad_splits(int algo, int M, int N, int K) {
    int splits, k_split;
    if (algo == CT_CONV_TC2) ct_conv_tc2_split(M, N, K, &splits, &k_split);
    else if (algo == CT_CONV_WGMMA) ct_conv_wgmma_split(M, N, K, &splits, &k_split);
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
    int splits = ct_conv_split_args(mode, &g, work, bm, bn, bk);
    // Output pairs (n, n+1) go out in one store when every row starts on a pair boundary.
    size_t c_elem = (use_tc && mode == GEMM_WGRAD) || c_f32 ? 4 : 2;
    g.c_pairs = g.N % 2 == 0 && ((uintptr_t)g.c % (2 * c_elem)) == 0;
    dim3 grid(ceil_div(g.M, bm), ceil_div(g.N, bn), splits);
    if (grid.y > 65535 || grid.z > 65535) ct_die("conv: GEMM of %d x %d too large for the grid", g.M, g.N);
    if (use_tc) ct_gemm_tc1_launch(mode, g, c_f32, mi, grid, st);
    else ct_gemm_generic_launch(mode, g, dt, a_f32, c_f32, grid, st);
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
// only engine v2 or wgmma (v2's summation order) may run it: a convolution that resolves to
// another engine runs nothing and returns 0 (CT_CONV_AUTO), so the caller convolves as usual and
// BN gathers its own statistics.
static int conv_forward(const ConvShape *s, void *out, float *stats, const void *in, const void *w, CtDtype dt,
                        ct_stream_t st, int algo) {
    if (conv_empty(s)) return stats ? CT_CONV_AUTO : CT_CONV_GENERIC;
    if (conv_groups(s) > 1)  // grouped: the generic engine, no BN-statistics epilogue
        return stats ? CT_CONV_AUTO : ct_conv_grouped_run(GEMM_FWD, s, out, in, w, 0, NULL, dt, (cudaStream_t)st);
    GemmArgs g = fwd_args(s, out, in, w, dt);
    algo = g.tc_ok ? conv_tc_engine(algo) : algo;
    if (stats) {
        if (algo == CT_CONV_WGMMA && !ct_conv_wgmma_eligible(GEMM_FWD, &g)) algo = CT_CONV_TC2;
        if ((algo != CT_CONV_TC2 && algo != CT_CONV_WGMMA) || !ct_conv_tc2_eligible(GEMM_FWD, &g) ||
            !ct_aligned(8, stats))
            return CT_CONV_AUTO;
        g.stats = stats;
    }
    if (algo == CT_CONV_WGMMA && ct_conv_wgmma_eligible(GEMM_FWD, &g)) {
        ct_conv_wgmma_run(GEMM_FWD, g, NULL, NULL, (cudaStream_t)st);
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

// The forward with BN statistics in its epilogue (conv_tc2.cu's t2_tile_stats, or the wgmma
// engine's twin in v2's order): bf16 only.
extern "C" int conv2d_forward_stats_gpu(const ConvShape *s, void *out, float *stats, const void *in, const void *w,
                                        CtDtype dt, ct_stream_t st, int algo) {
    if (dt != CT_BF16 || !stats) return 0;
    int used = conv_forward(s, out, stats, in, w, dt, st, algo);
    return used == CT_CONV_TC2 || used == CT_CONV_WGMMA;
}

// The stride phase (ph, pw) of the tensor-core data gradient: the input pixels h = ph + hh*st,
// w = pw + ww*st receive only the taps r = r0 + ri*st, s = s0 + si*st (GemmArgs); M = its pixels.
static void dgrad_phase(const ConvShape *s, GemmArgs *g, int ph, int pw) {
    int str = s->stride;
    g->ph_h = ph;
    g->ph_w = pw;
    g->Hp = ph < s->H ? (s->H - ph + str - 1) / str : 0;
    g->Wp = pw < s->W ? (s->W - pw + str - 1) / str : 0;
    g->r0 = (ph + s->pad) % str;
    g->s0 = (pw + s->pad) % str;
    g->nr = g->r0 < s->R ? (s->R - g->r0 + str - 1) / str : 0;
    g->ns = g->s0 < s->S ? (s->S - g->s0 + str - 1) / str : 0;
    g->dh = (ph + s->pad - g->r0) / str;
    g->dw = (pw + s->pad - g->s0) / str;
    g->M = s->N * g->Hp * g->Wp;
    g->K = g->k_end = g->nr * g->ns * s->K;
    if (g->K == 0) g->nr = g->ns = 1;  // no taps: keep the kernel's index arithmetic defined
}

extern "C" int conv2d_gpu_dgrad_bn_tiles(const ConvShape *s) {
    int n = 0;
    for (int ph = 0; ph < s->stride; ph++)
        for (int pw = 0; pw < s->stride; pw++) {
            GemmArgs g = {};
            dgrad_phase(s, &g, ph, pw);
            n += (g.M + CONV_BN_TILE_ROWS - 1) / CONV_BN_TILE_ROWS;
        }
    return n;
}

// The data gradient on the engine `algo` resolves to; acc: din += the gradient (in place, one
// rounding from fp32: the second contribution to a gradient slot) instead of din = it.
// bn (may be NULL): asks for the BN backward epilogue (conv2d_backward_data_bn_gpu,
// conv2d_backward_data_tail_gpu), which engine v2 and the wgmma engine run (with the same bits),
// at strides 1 and 2 (every phase on one of them, each writing its own tiles): otherwise nothing
// runs and the result is 0 (CT_CONV_AUTO).
static int conv_dgrad(const ConvShape *s, void *din, const void *dout, const void *w, CtDtype dt, ct_stream_t st,
                      int algo, int acc, const ConvBnEpilogue *bn) {
    if (bn && (dt != CT_BF16 || s->stride * s->stride > CONV_BN_MAX_PHASES || conv_empty(s) || s->N <= 0 ||
               s->H <= 0 || s->W <= 0 || s->C <= 0 || !ct_aligned(8, bn->tiles) || !ct_aligned(4, bn->x) ||
               !ct_aligned(4, bn->y)))
        return CT_CONV_AUTO;
    if (bn && conv_groups(s) > 1) return CT_CONV_AUTO;  // grouped: no BN backward epilogue
    if (s->N <= 0 || s->H <= 0 || s->W <= 0 || s->C <= 0) return CT_CONV_GENERIC;
    if (conv_empty(s)) {  // no output pixel sees the input: the gradient is zero
        if (!acc)
            CT_CUDA_CHECK(cudaMemsetAsync(din, 0, (size_t)s->N * s->H * s->W * s->C * (dt == CT_F32 ? 4 : 2), (cudaStream_t)st));
        return CT_CONV_GENERIC;
    }
    if (conv_groups(s) > 1) return ct_conv_grouped_run(GEMM_DGRAD, s, din, dout, w, acc, NULL, dt, (cudaStream_t)st);
    GemmArgs g = {};
    g.s = *s;
    g.a = dout;
    g.b = w;
    g.c = din;
    g.N = s->C;
    g.c_acc = acc;
    ct_gemm_tc_setup(&g, GEMM_DGRAD, dt);
    algo = g.tc_ok ? conv_tc_engine(algo) : algo;
    if (bn) {
        if (algo != CT_CONV_TC2 && algo != CT_CONV_WGMMA) return CT_CONV_AUTO;
        g.bn = *bn;  // tiles: set per phase below
        // Every phase must take v2 or wgmma, whose epilogues write the tiles: else run nothing.
        for (int ph = 0; ph < s->stride; ph++)
            for (int pw = 0; pw < s->stride; pw++) {
                GemmArgs t = g;
                dgrad_phase(s, &t, ph, pw);
                t.bn.tiles = bn->tiles;
                if (t.M > 0 && !ct_conv_tc2_eligible(GEMM_DGRAD, &t) &&
                    !(algo == CT_CONV_WGMMA && ct_conv_wgmma_eligible(GEMM_DGRAD, &t)))
                    return CT_CONV_AUTO;
            }
    }
    if (algo == CT_CONV_GENERIC || !g.tc_ok) {  // the generic engine walks all taps at once
        g.M = s->N * s->H * s->W;
        g.K = g.k_end = s->R * s->S * s->K;
        return ct_gemm_run(GEMM_DGRAD, g, dt, dt == CT_F32, dt == CT_F32, algo, NULL, NULL, (cudaStream_t)st);
    }
    // Tensor cores: one GEMM per stride phase (one in all for stride 1). A phase whose taps are
    // all skipped (1x1 stride 2, odd rows) still runs with K = 0 and writes its zeros (adds
    // nothing when accumulating, so it is skipped then, unless its BN epilogue must mask and sum).
    int used = algo == CT_CONV_WGMMA ? CT_CONV_WGMMA : algo == CT_CONV_TC2 ? CT_CONV_TC2 : CT_CONV_TC, tile0 = 0;
    for (int ph = 0; ph < s->stride; ph++)
        for (int pw = 0; pw < s->stride; pw++) {
            dgrad_phase(s, &g, ph, pw);
            if (bn) {  // this phase's tiles follow the previous phases'
                g.bn.tiles = bn->tiles + (size_t)tile0 * 2 * s->C;
                tile0 += (g.M + CONV_BN_TILE_ROWS - 1) / CONV_BN_TILE_ROWS;
            }
            if (g.M <= 0 || (acc && g.K == 0 && !bn)) continue;
            if (algo == CT_CONV_WGMMA && ct_conv_wgmma_eligible(GEMM_DGRAD, &g)) {
                ct_conv_wgmma_run(GEMM_DGRAD, g, NULL, NULL, (cudaStream_t)st);
                continue;
            }
            if (algo >= CT_CONV_TC2 && ct_conv_tc2_eligible(GEMM_DGRAD, &g)) {
                if (used == CT_CONV_WGMMA) used = CT_CONV_TC2;  // a phase wgmma does not take ran on v2
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
// tile and channel. Returns 0, having run nothing, where engine v2 (or wgmma) does not take it.
extern "C" int conv2d_backward_data_bn_gpu(const ConvShape *s, void *din, float *tiles, const void *dout,
                                           const void *w, const void *x, const float *gamma, const float *beta,
                                           const float *mean, const float *invstd, CtDtype dt, ct_stream_t st,
                                           int algo) {
    ConvBnEpilogue bn = {};
    bn.x = x;
    bn.gamma = gamma;
    bn.beta = beta;
    bn.mean = mean;
    bn.invstd = invstd;
    bn.tiles = tiles;
    int used = conv_dgrad(s, din, dout, w, dt, st, algo, 0, &bn);
    return used == CT_CONV_TC2 || used == CT_CONV_WGMMA;
}

// The same for a conv whose input is a block tail's output y = relu(bn(x) + res): mask y > 0 (y
// is this conv's input, so the mask costs one read of it), tiles of x, the tail BN's input.
extern "C" int conv2d_backward_data_tail_gpu(const ConvShape *s, void *din, int acc, float *tiles, const void *dout,
                                             const void *w, const void *y, const uint8_t *mask, const void *x,
                                             const float *mean, CtDtype dt, ct_stream_t st, int algo) {
    ConvBnEpilogue bn = {};
    bn.x = x;
    bn.y = y;
    bn.mask = mask;
    bn.mean = mean;
    bn.tiles = tiles;
    int used = conv_dgrad(s, din, dout, w, dt, st, algo, acc, &bn);
    return used == CT_CONV_TC2 || used == CT_CONV_WGMMA;
}

extern "C" int conv2d_backward_weight_gpu_ex(const ConvShape *s, float *dw, const void *dout,
                                             const void *in, float *work, CtDtype dt, ct_stream_t st,
                                             int algo) {
    if (s->K <= 0 || s->C <= 0 || s->R <= 0 || s->S <= 0) return CT_CONV_GENERIC;
    if (conv_empty(s)) {
        CT_CUDA_CHECK(cudaMemsetAsync(dw, 0, (size_t)s->K * s->R * s->S * (s->C / conv_groups(s)) * 4, (cudaStream_t)st));
        return CT_CONV_GENERIC;
    }
    if (conv_groups(s) > 1) return ct_conv_grouped_run(GEMM_WGRAD, s, dw, dout, in, 0, work, dt, (cudaStream_t)st);
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
    if (algo == CT_CONV_WGMMA && ct_conv_wgmma_eligible(GEMM_WGRAD, &g)) {
        ct_conv_wgmma_run(GEMM_WGRAD, g, work, dw, (cudaStream_t)st);
        return CT_CONV_WGMMA;
    }
    if (algo == CT_CONV_WGMMA) algo = CT_CONV_TC2;
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
