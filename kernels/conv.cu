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
// This file is the host side: the table of engines, the one dispatcher that picks an engine for
// each GEMM of a pass (the data gradient's stride phases included), the split-K plan's use, and
// every extern "C" entry point. The engines, in fallback order (the table below; docs/HACKING.md
// says why each is kept and which is the default):
//   - wgmma (kernels/conv_wgmma.cu): Hopper wgmma, warp-specialised, 128x128x64 tiles; bf16 on
//     compute 9.0, the shapes v2 takes, with both BN epilogues in v2's summation order.
//   - v2 (kernels/conv_tc2.cu): mma.sync, 128x128 tiles, 4 stages, gather tables; bf16 with
//     vectorisable operands (channel counts multiples of 8, 16-byte aligned), tables within the
//     device's shared memory; the BN statistics (forward) and BN backward (data gradient, stride
//     1 and 2) epilogues. The default. Grouped convolutions on its block-diagonal path
//     (kernels/conv_tcg.cu: several groups per CTA, mma on the diagonal blocks only) where the
//     channels per group allow, with both BN epilogues; wgmma hands grouped shapes to it.
//   - v1 (kernels/conv_tc1.cu): mma.sync m16n8k16, ldmatrix, cp.async in a 3-stage pipeline,
//     128x64x32 tiles, any bf16 shape: operands whose 8-element chunks are contiguous and aligned
//     travel by cp.async, others (the 3-channel stem) are gathered element by element. No epilogue.
//   - generic (kernels/conv_generic.cu): fp32 or bf16 storage, fp32 math, 64x64 tiles through
//     shared memory, any shape, grouped convolutions too (every group in one launch: those v2 does
//     not take). No epilogue.
// Each engine says what it takes (`supports`: pass, shape, dtype, operand alignment, epilogue);
// the dispatcher runs the requested engine where it takes the GEMM, else the first engine after
// it in the table that does; an epilogue no engine from the requested one on takes runs nothing
// (the caller then runs the unfused passes). The data gradient on the tensor-core engines runs
// once per stride phase (input pixels with equal h % st, w % st), each a stride-1 GEMM over only
// the taps that reach those pixels (no mma work on skipped taps), each phase dispatched alone.
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

// Weight gradients with at most 64 output channels (the stem, ResNet layer1) take 64-row tiles on
// engine v1: a 128-row tile would multiply zeros in half of its mma work.
static int tc_wgrad_bm(int M) { return M <= 64 ? 64 : TC_BM; }

// The tensor-core engines take bf16 GEMMs; operands whose 8-element chunks are contiguous and
// aligned (the channel count along the chunk a multiple of 8) travel by cp.async.
void ct_gemm_tc_setup(GemmArgs *g, int mode, CtDtype dt) {
    const ConvShape *s = &g->s;
    g->dt = dt;
    g->tc_ok = dt == CT_BF16;
    int a_chunk_dim = mode == GEMM_FWD ? s->C : s->K;  // FWD: c; DGRAD: k_out; WGRAD: m = k_out
    g->vec_a = a_chunk_dim % 8 == 0 && ct_aligned(16, g->a);
    g->vec_b = s->C % 8 == 0 && ct_aligned(16, g->b);  // FWD: rows of R*S*C; DGRAD, WGRAD: c
}

// The GEMM on engine v1 (algo CT_CONV_TC, bf16) or the generic engine (CT_CONV_GENERIC, or any
// algo with fp32 operands); also kernels/linear.cu's. Returns the engine used.
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

// ---------------------------------------------------------------------------------------------
// The engines.

typedef struct {
    const char *name;  // as --conv-engine spells it
    int algo;          // CtConvAlgo
    int phased;        // its data gradient runs once per stride phase (dgrad_phase)
    // Takes this GEMM of pass `pass` (GEMM_FWD, _DGRAD, _WGRAD): g holds the shape, the dtype
    // (g->dt, g->tc_ok), the operands' alignment (g->vec_a, vec_b, c) and the epilogue asked
    // (g->stats on FWD, g->bn.tiles on DGRAD; see conv_epilogue).
    int (*supports)(int pass, const GemmArgs *g);
    // Runs it; work and final_out: WGRAD's split partials and the gradient they sum into (NULL
    // for the other passes). g arrives cleaned up (engine_run): no other pass's epilogue.
    void (*run)(int pass, GemmArgs g, float *work, float *final_out, cudaStream_t st);
    // The weight gradient's split plan for its tiles (M = K_out, N = R*S*C, K = N*P*Q).
    void (*wgrad_split)(int M, int N, int K, int *splits, int *k_split);
} ConvEngine;

static int conv_epilogue(int pass, const GemmArgs *g) {
    return (pass == GEMM_FWD && g->stats) || (pass == GEMM_DGRAD && g->bn.tiles);
}
// The BN epilogues' own conditions (v2's and wgmma's: the same tiles, the same order): the
// statistics' float2 stores; the data gradient's per-phase tiles (at most CONV_BN_MAX_PHASES
// phases: stride 1 or 2) and its loads of x and y.
static int bn_epilogue_ok(int pass, const GemmArgs *g) {
    if (pass == GEMM_FWD) return ct_aligned(8, g->stats);
    return g->s.stride * g->s.stride <= CONV_BN_MAX_PHASES && ct_aligned(8, g->bn.tiles) && ct_aligned(4, g->bn.x) &&
           ct_aligned(4, g->bn.y);
}

static int wgmma_supports(int pass, const GemmArgs *g) {
    if (conv_groups(&g->s) > 1 || !ct_conv_wgmma_eligible(pass, g)) return 0;
    if (!conv_epilogue(pass, g)) return 1;
    if (!bn_epilogue_ok(pass, g)) return 0;
    // The statistics are v2's tile sums in v2's order: taken where v2 would take them too.
    return pass != GEMM_FWD || ct_conv_tc2_eligible(GEMM_FWD, g);
}
static void wgmma_run(int pass, GemmArgs g, float *work, float *final_out, cudaStream_t st) {
    ct_conv_wgmma_run(pass, g, work, final_out, st);
}

// Grouped shapes: the block-diagonal path (kernels/conv_tcg.cu) where it takes them, with both BN
// epilogues under the dense tiles' conditions.
static int v2_supports(int pass, const GemmArgs *g) {
    if (!(conv_groups(&g->s) > 1 ? ct_conv_tcg_eligible(pass, g) : ct_conv_tc2_eligible(pass, g))) return 0;
    return !conv_epilogue(pass, g) || bn_epilogue_ok(pass, g);
}
static void v2_run(int pass, GemmArgs g, float *work, float *final_out, cudaStream_t st) {
    if (conv_groups(&g.s) > 1) ct_conv_tcg_run(pass, g, work, final_out, st);
    else ct_conv_tc2_run(pass, g, work, final_out, st);
}

static int v1_supports(int pass, const GemmArgs *g) {
    return g->tc_ok && conv_groups(&g->s) == 1 && !conv_epilogue(pass, g);
}
static void v1_run(int pass, GemmArgs g, float *work, float *final_out, cudaStream_t st) {
    ct_gemm_run(pass, g, CT_BF16, 0, pass == GEMM_WGRAD, CT_CONV_TC, work, final_out, st);
}
static void v1_split(int M, int N, int K, int *splits, int *k_split) {
    ct_split_plan(M, N, K, tc_wgrad_bm(M), TC_BN, TC_BK, splits, k_split);
}

static int generic_supports(int pass, const GemmArgs *g) { return !conv_epilogue(pass, g); }
static void generic_run(int pass, GemmArgs g, float *work, float *final_out, cudaStream_t st) {
    if (conv_groups(&g.s) > 1) {  // every group in one launch (conv_generic.cu)
        ct_conv_grouped_run(pass, &g.s, pass == GEMM_WGRAD ? final_out : g.c, g.a, g.b, g.c_acc, work, g.dt, st);
        return;
    }
    int f32 = g.dt == CT_F32;
    ct_gemm_run(pass, g, g.dt, f32, pass == GEMM_WGRAD || f32, CT_CONV_GENERIC, work, final_out, st);
}
static void generic_split(int M, int N, int K, int *splits, int *k_split) {
    ct_split_plan(M, N, K, GN_BM, GN_BN, GN_BK, splits, k_split);
}

// The fallback order: an engine that does not take a GEMM hands it to the next one.
static const ConvEngine ENGINES[] = {
    {"wgmma", CT_CONV_WGMMA, 1, wgmma_supports, wgmma_run, ct_conv_wgmma_split},
    {"v2", CT_CONV_TC2, 1, v2_supports, v2_run, ct_conv_tc2_split},
    {"v1", CT_CONV_TC, 1, v1_supports, v1_run, v1_split},
    {"generic", CT_CONV_GENERIC, 0, generic_supports, generic_run, generic_split},
};
enum { N_ENGINES = (int)(sizeof ENGINES / sizeof ENGINES[0]) };
// CT_CONV_AUTO's engine on bf16 until silicon decides (docs/HACKING.md, "Conv engines"); the
// caller names another (the GPU executor passes its ExecOptions' conv engine, nn/exec_options.h).
// Kernels never read the environment.
#define CONV_DEFAULT_ENGINE CT_CONV_TC2

static int engine_index(int algo) {
    if (algo == CT_CONV_AUTO) algo = CONV_DEFAULT_ENGINE;
    for (int i = 0; i < N_ENGINES; i++)
        if (ENGINES[i].algo == algo) return i;
    ct_die("conv: no engine %d (CtConvAlgo: %d generic, %d v1, %d v2, %d wgmma)", algo, CT_CONV_GENERIC, CT_CONV_TC,
           CT_CONV_TC2, CT_CONV_WGMMA);
}

// Where the fallback starts for the requested engine: itself.
static int chain_start(int algo, const GemmArgs *g) {
    if (algo == CT_CONV_TC && !g->tc_ok) ct_die("conv: the tensor-core engine takes bf16 operands only (fp32 asked)");
    return engine_index(algo);
}
// The one fallback path, every pass: the first engine from `start` on that takes the GEMM; NULL
// when none does (only an epilogue can go untaken: the generic engine takes every plain GEMM).
static const ConvEngine *pick(int pass, const GemmArgs *g, int start) {
    for (int i = start; i < N_ENGINES; i++)
        if (ENGINES[i].supports(pass, g)) return &ENGINES[i];
    return NULL;
}
// The argument clean-up every engine's run would otherwise repeat: an epilogue or accumulation
// belongs to one pass. dry: plan only (conv_engine_for), nothing launched.
static void engine_run(const ConvEngine *e, int pass, GemmArgs g, float *work, float *final_out, cudaStream_t st,
                       int dry) {
    if (dry) return;
    if (pass != GEMM_FWD) g.stats = NULL;
    if (pass != GEMM_DGRAD) {
        g.c_acc = 0;
        g.bn.tiles = NULL;
    }
    e->run(pass, g, work, final_out, st);
}

extern "C" size_t conv2d_gpu_work_floats(const ConvShape *s) {
    if (conv_groups(s) > 1) {  // grouped: the generic engine's plan or v2's grouped path's
        size_t a = ct_conv_grouped_work_floats(s), b = ct_conv_tcg_work_floats(s);
        return a > b ? a : b;
    }
    int M = s->K, N = s->R * s->S * s->C, K = s->N * s->P * s->Q;
    if (M <= 0 || N <= 0 || K <= 0) return 0;
    int splits = 1;
    for (int i = 0; i < N_ENGINES; i++) {  // any engine may run it: the largest plan
        int sp, ks;
        ENGINES[i].wgrad_split(M, N, K, &sp, &ks);
        if (sp > splits) splits = sp;
    }
    return splits > 1 ? (size_t)splits * M * N : 0;
}

// The split count of a weight-gradient GEMM (M = K_out, N = R*S*C, K = N*P*Q) on engine algo
// (CT_CONV_AUTO: the default): the plan depends on the batch, so tools/bench_gpu_cost.c asks it
// for the split partials' traffic at a batch it did not run.
extern "C" int conv2d_gpu_wgrad_splits(int algo, int M, int N, int K) {
    int splits, k_split;
    ENGINES[engine_index(algo)].wgrad_split(M, N, K, &splits, &k_split);
    return splits;
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

// The forward on the first engine from `algo` on that takes it. With stats (BN tiles,
// conv2d_forward_stats_gpu) only v2 or wgmma take it: otherwise nothing runs and the result is 0
// (CT_CONV_AUTO), so the caller convolves as usual and BN gathers its own statistics.
static int conv_forward(const ConvShape *s, void *out, float *stats, const void *in, const void *w, CtDtype dt,
                        ct_stream_t st, int algo, int dry) {
    if (conv_empty(s)) return stats ? CT_CONV_AUTO : CT_CONV_GENERIC;
    GemmArgs g = fwd_args(s, out, in, w, dt);
    g.stats = stats;
    const ConvEngine *e = pick(GEMM_FWD, &g, chain_start(algo, &g));
    if (!e) return CT_CONV_AUTO;
    engine_run(e, GEMM_FWD, g, NULL, NULL, (cudaStream_t)st, dry);
    return e->algo;
}

extern "C" int conv2d_forward_gpu_ex(const ConvShape *s, void *out, const void *in, const void *w,
                                     CtDtype dt, ct_stream_t st, int algo) {
    return conv_forward(s, out, NULL, in, w, dt, st, algo, 0);
}

// The forward with BN statistics in its epilogue (conv_bn_epi.cuh's conv_tile_stats, or the wgmma
// engine's twin in v2's order): bf16 only.
extern "C" int conv2d_forward_stats_gpu(const ConvShape *s, void *out, float *stats, const void *in, const void *w,
                                        CtDtype dt, ct_stream_t st, int algo) {
    if (dt != CT_BF16 || !stats) return 0;
    int used = conv_forward(s, out, stats, in, w, dt, st, algo, 0);
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

// The data gradient's GEMM over all taps at once (an engine that does not tile by phase).
static GemmArgs dgrad_args(const ConvShape *s, void *din, const void *dout, const void *w, CtDtype dt, int acc) {
    GemmArgs g = {};
    g.s = *s;
    g.a = dout;
    g.b = w;
    g.c = din;
    g.N = s->C;
    g.c_acc = acc;
    ct_gemm_tc_setup(&g, GEMM_DGRAD, dt);
    g.M = s->N * s->H * s->W;
    g.K = g.k_end = s->R * s->S * s->K;
    return g;
}

// The data gradient from engine `algo` on; acc: din += the gradient (in place, one rounding from
// fp32: the second contribution to a gradient slot) instead of din = it. bn (may be NULL): asks
// for the BN backward epilogue (conv2d_backward_data_bn_gpu, conv2d_backward_data_tail_gpu),
// which v2 and wgmma run (with the same bits) at strides 1 and 2: every non-empty phase must find
// an engine that takes it with the epilogue (each phase writes its own tiles), else nothing runs
// and the result is 0 (CT_CONV_AUTO). Returns the engine furthest down the fallback order that ran
// a phase.
static int conv_dgrad(const ConvShape *s, void *din, const void *dout, const void *w, CtDtype dt, ct_stream_t st,
                      int algo, int acc, const ConvBnEpilogue *bn, int dry) {
    if (s->N <= 0 || s->H <= 0 || s->W <= 0 || s->C <= 0) return bn ? CT_CONV_AUTO : CT_CONV_GENERIC;
    if (conv_empty(s)) {  // no output pixel sees the input: the gradient is zero
        if (bn) return CT_CONV_AUTO;
        if (!acc && !dry)
            CT_CUDA_CHECK(cudaMemsetAsync(din, 0, (size_t)s->N * s->H * s->W * s->C * (dt == CT_F32 ? 4 : 2), (cudaStream_t)st));
        return CT_CONV_GENERIC;
    }
    GemmArgs g = dgrad_args(s, din, dout, w, dt, acc);
    const int start = chain_start(algo, &g);
    const ConvEngine *whole = pick(GEMM_DGRAD, &g, start);  // no epilogue yet: never NULL
    if (!whole->phased) {  // all taps at once; such an engine takes no epilogue
        if (bn) return CT_CONV_AUTO;
        engine_run(whole, GEMM_DGRAD, g, NULL, NULL, (cudaStream_t)st, dry);
        return whole->algo;
    }
    if (bn) {
        g.bn = *bn;
        for (int ph = 0; ph < s->stride; ph++)
            for (int pw = 0; pw < s->stride; pw++) {
                GemmArgs t = g;
                dgrad_phase(s, &t, ph, pw);
                if (t.M > 0 && !pick(GEMM_DGRAD, &t, start)) return CT_CONV_AUTO;
            }
    }
    // One GEMM per stride phase (one in all for stride 1). A phase whose taps are all skipped
    // (1x1 stride 2, odd rows) still runs with K = 0 and writes its zeros (adds nothing when
    // accumulating, so it is skipped then, unless its BN epilogue must mask and sum).
    int used = start, tile0 = 0;
    for (int ph = 0; ph < s->stride; ph++)
        for (int pw = 0; pw < s->stride; pw++) {
            dgrad_phase(s, &g, ph, pw);
            if (bn) {  // this phase's tiles follow the previous phases'
                g.bn.tiles = bn->tiles + (size_t)tile0 * 2 * s->C;
                tile0 += (g.M + CONV_BN_TILE_ROWS - 1) / CONV_BN_TILE_ROWS;
            }
            if (g.M <= 0 || (acc && g.K == 0 && !bn)) continue;
            const ConvEngine *e = pick(GEMM_DGRAD, &g, start);
            if (!e) ct_die("conv: no engine takes data-gradient phase (%d, %d) of a %dx%d/%d conv", ph, pw, s->R, s->S, s->stride);
            if (e - ENGINES > used) used = (int)(e - ENGINES);
            engine_run(e, GEMM_DGRAD, g, NULL, NULL, (cudaStream_t)st, dry);
        }
    return ENGINES[used].algo;
}

extern "C" int conv2d_backward_data_gpu_ex(const ConvShape *s, void *din, const void *dout,
                                           const void *w, CtDtype dt, ct_stream_t st, int algo) {
    return conv_dgrad(s, din, dout, w, dt, st, algo, 0, NULL, 0);
}
extern "C" int conv2d_backward_data_acc_gpu_ex(const ConvShape *s, void *din, const void *dout,
                                               const void *w, CtDtype dt, ct_stream_t st, int algo) {
    return conv_dgrad(s, din, dout, w, dt, st, algo, 1, NULL, 0);
}

// The data gradient of a convolution whose input was y = relu(bn(x)), with the BN backward's
// reductions in its epilogue (conv_bn_epi.cuh's conv_tile_gsums): din = dL/dy masked by the ReLU the
// epilogue recomputes from x (y itself is not read), tiles {sum g, sum g (x - mean)} per 128-row
// tile and channel. Returns 0, having run nothing, where engine v2 (or wgmma) does not take it.
extern "C" int conv2d_backward_data_bn_gpu(const ConvShape *s, void *din, float *tiles, const void *dout,
                                           const void *w, const void *x, const float *gamma, const float *beta,
                                           const float *mean, const float *invstd, CtDtype dt, ct_stream_t st,
                                           int algo) {
    if (dt != CT_BF16 || !tiles) return 0;
    ConvBnEpilogue bn = {};
    bn.x = x;
    bn.gamma = gamma;
    bn.beta = beta;
    bn.mean = mean;
    bn.invstd = invstd;
    bn.tiles = tiles;
    int used = conv_dgrad(s, din, dout, w, dt, st, algo, 0, &bn, 0);
    return used == CT_CONV_TC2 || used == CT_CONV_WGMMA;
}

// The same for a conv whose input is a block tail's output y = relu(bn(x) + res): mask y > 0 (y
// is this conv's input, so the mask costs one read of it), tiles of x, the tail BN's input.
extern "C" int conv2d_backward_data_tail_gpu(const ConvShape *s, void *din, int acc, float *tiles, const void *dout,
                                             const void *w, const void *y, const uint8_t *mask, const void *x,
                                             const float *mean, CtDtype dt, ct_stream_t st, int algo) {
    if (dt != CT_BF16 || !tiles) return 0;
    ConvBnEpilogue bn = {};
    bn.x = x;
    bn.y = y;
    bn.mask = mask;
    bn.mean = mean;
    bn.tiles = tiles;
    int used = conv_dgrad(s, din, dout, w, dt, st, algo, acc, &bn, 0);
    return used == CT_CONV_TC2 || used == CT_CONV_WGMMA;
}

static GemmArgs wgrad_args(const ConvShape *s, float *dw, const void *dout, const void *in, CtDtype dt) {
    GemmArgs g = {};
    g.s = *s;
    g.a = dout;
    g.b = in;
    g.c = dw;
    g.M = s->K;
    g.N = s->R * s->S * s->C;
    g.K = g.k_end = s->N * s->P * s->Q;
    ct_gemm_tc_setup(&g, GEMM_WGRAD, dt);
    return g;
}

static int conv_wgrad(const ConvShape *s, float *dw, const void *dout, const void *in, float *work, CtDtype dt,
                      ct_stream_t st, int algo, int dry) {
    if (s->K <= 0 || s->C <= 0 || s->R <= 0 || s->S <= 0) return CT_CONV_GENERIC;
    if (conv_empty(s)) {
        if (!dry)
            CT_CUDA_CHECK(cudaMemsetAsync(dw, 0, (size_t)s->K * s->R * s->S * (s->C / conv_groups(s)) * 4, (cudaStream_t)st));
        return CT_CONV_GENERIC;
    }
    GemmArgs g = wgrad_args(s, dw, dout, in, dt);
    const ConvEngine *e = pick(GEMM_WGRAD, &g, chain_start(algo, &g));  // generic takes any: never NULL
    engine_run(e, GEMM_WGRAD, g, work, dw, (cudaStream_t)st, dry);
    return e->algo;
}

extern "C" int conv2d_backward_weight_gpu_ex(const ConvShape *s, float *dw, const void *dout,
                                             const void *in, float *work, CtDtype dt, ct_stream_t st,
                                             int algo) {
    return conv_wgrad(s, dw, dout, in, work, dt, st, algo, 0);
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
    conv_dgrad(s, din, dout, w, dt, st, CT_CONV_AUTO, 1, NULL, 0);
}
extern "C" void conv2d_backward_weight_gpu(const ConvShape *s, float *dw, const void *dout, const void *in,
                                           float *work, CtDtype dt, ct_stream_t st) {
    conv2d_backward_weight_gpu_ex(s, dw, dout, in, work, dt, st, CT_CONV_AUTO);
}

// ---------------------------------------------------------------------------------------------
// The table, observable (tests/emu_conv_engines.c, docs/HACKING.md "Conv engines"). Queries assume
// 16-byte aligned operands and, with an epilogue, aligned epilogue buffers.

extern "C" int conv_engine_count(void) { return N_ENGINES; }
extern "C" const char *conv_engine_name(int i) { return i >= 0 && i < N_ENGINES ? ENGINES[i].name : NULL; }
extern "C" int conv_engine_algo(int i) { return i >= 0 && i < N_ENGINES ? ENGINES[i].algo : CT_CONV_AUTO; }
extern "C" const char *conv_engine_algo_name(int algo) {
    for (int i = 0; i < N_ENGINES; i++)
        if (ENGINES[i].algo == algo) return ENGINES[i].name;
    return NULL;
}

static float epilogue_dummy[4] __attribute__((aligned(16)));  // an aligned epilogue buffer, never written

// Engine i's own verdict on pass `pass` of s, asked as the dispatcher asks it: the data gradient of
// a phased engine per non-empty stride phase (it takes the pass when it takes every phase).
extern "C" int conv_engine_supports(int i, int pass, const ConvShape *s, CtDtype dt, int epilogue) {
    if (i < 0 || i >= N_ENGINES || pass < GEMM_FWD || pass > GEMM_WGRAD) return 0;
    const ConvEngine *e = &ENGINES[i];
    GemmArgs g = pass == GEMM_FWD     ? fwd_args(s, NULL, NULL, NULL, dt)
                 : pass == GEMM_DGRAD ? dgrad_args(s, NULL, NULL, NULL, dt, 0)
                                      : wgrad_args(s, NULL, NULL, NULL, dt);
    if (epilogue && pass == GEMM_FWD) g.stats = epilogue_dummy;
    if (epilogue && pass == GEMM_DGRAD) g.bn.tiles = epilogue_dummy;
    if (pass != GEMM_DGRAD || !e->phased) return e->supports(pass, &g);
    for (int ph = 0; ph < s->stride; ph++)
        for (int pw = 0; pw < s->stride; pw++) {
            GemmArgs t = g;
            dgrad_phase(s, &t, ph, pw);
            if (t.M > 0 && !e->supports(pass, &t)) return 0;
        }
    return 1;
}

// The engine the dispatcher runs for pass `pass` of s when `algo` is asked (the _ex entry points'
// result by name), or NULL where an epilogue is asked and no engine takes it (nothing would run).
extern "C" const char *conv_engine_for(int pass, const ConvShape *s, CtDtype dt, int algo, int epilogue) {
    int r = CT_CONV_AUTO;
    if (pass == GEMM_FWD) {
        r = conv_forward(s, NULL, epilogue ? epilogue_dummy : NULL, NULL, NULL, dt, NULL, algo, 1);
    } else if (pass == GEMM_DGRAD) {
        ConvBnEpilogue bn = {};
        bn.tiles = epilogue_dummy;
        r = conv_dgrad(s, NULL, NULL, NULL, dt, NULL, algo, 0, epilogue ? &bn : NULL, 1);
    } else if (pass == GEMM_WGRAD) {
        r = conv_wgrad(s, NULL, NULL, NULL, NULL, dt, NULL, algo, 1);
    }
    return r == CT_CONV_AUTO ? NULL : conv_engine_algo_name(r);
}
