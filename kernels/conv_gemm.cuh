// Internal interface of the implicit-GEMM engine: between kernels/conv.cu (the host dispatch),
// the engines' files (conv_generic.cu, conv_tc1.cu, conv_tc2.cu, conv_wgmma.cu), the split-K
// (conv_split.cu) and kernels/linear.cu. Not part of the C API (kernels/kernels.h).
#pragma once
#include <stddef.h>

#include "kernels/kernels.h"

enum { GEMM_FWD = CT_CONV_FWD, GEMM_DGRAD = CT_CONV_DGRAD, GEMM_WGRAD = CT_CONV_WGRAD };  // kernels.h's CtConvPass
// Rows per tile of the BN epilogues' per-tile sums (engine v2's CTA rows, T2_BM).
#define CONV_BN_TILE_ROWS 128
#define CONV_MAX_SPLITS 64

#ifdef __CUDACC__
#define CV_UNROLL _Pragma("unroll")
#else
#define CV_UNROLL
#endif

// The data gradient's BN epilogue (conv.cu's conv2d_backward_data_bn_gpu / _tail_gpu): the input
// was y = relu(bn(x)), so C gets the gradient masked by the ReLU recomputed from x, gamma, beta,
// mean, invstd, and `tiles` per 128-row tile and channel its sums {g, g (x - mean)}. With y or mask
// set, the input was a block tail's y = relu(bn(x) + res): the mask is y > 0, read from y or from
// the bits the tail's forward wrote (relu_mask), and only mean is needed.
typedef struct {
    const void *x, *y;
    const uint8_t *mask;
    const float *gamma, *beta, *mean, *invstd;
    float *tiles;
} ConvBnEpilogue;

// C[M,N] = sum_{k < K} A[M,k] B[k,N], operands gathered from the tensors of convolution `s`
// according to the mode (see conv.cu). A linear layer is the 1x1 convolution of a 1x1 image.
typedef struct {
    ConvShape s;
    const void *a, *b;      // FWD: in, w; DGRAD: dout, w; WGRAD: dout, in
    void *c;                // FWD: out; DGRAD: din; WGRAD: dw (fp32)
    const float *bias;      // added to every row of C (linear forward), or NULL
    int M, N, K;            // GEMM sizes
    int k_end;              // == K (the reduction runs over [0, k_end))
    int k_split;            // reduction length per blockIdx.z (set by ct_gemm_run)
    size_t c_split_stride;  // elements between split partial buffers (set by ct_gemm_run)
    CtDtype dt;             // storage of the operands (set by ct_gemm_tc_setup)
    int tc_ok;              // the tensor-core engine may run this GEMM (bf16 operands)
    int vec_a, vec_b;       // operand chunks of 8 are contiguous and 16-byte aligned (cp.async)
    int c_pairs;            // C may be stored two neighbours at a time (set by ct_gemm_run)
    int no_split;           // WGRAD: one pass over the whole reduction (no work buffer)
    // DGRAD on the tensor-core engine runs once per stride phase (ph_h, ph_w): the input pixels
    // h = ph_h + hh*st (hh < Hp), w = ph_w + ww*st (ww < Wp) receive only the taps
    // r = r0 + ri*st (ri < nr), s = s0 + si*st (si < ns), from dout row hh + dh - ri, column
    // ww + dw - si. So no mma work goes to taps that the stride skips (3/4 of them at stride 2).
    int ph_h, ph_w, Hp, Wp, r0, s0, nr, ns, dh, dw;
    // Epilogue options (conv.cu's entry points set them; zero means a plain store).
    float *stats;  // FWD on engine v2: per-tile BN statistics (conv2d_forward_stats_gpu)
    int c_acc;     // DGRAD: C += the product, in place (C = round(float(C) + acc), one rounding)
    // DGRAD on engine v2 with a batch norm's backward reductions in the epilogue (bn.tiles set).
    ConvBnEpilogue bn;
} GemmArgs;

// Sets dt, tc_ok, vec_a, vec_b for operands g->a, g->b of dtype dt.
void ct_gemm_tc_setup(GemmArgs *g, int mode, CtDtype dt);

// Runs the GEMM on stream st with the engine `algo` allows (CtConvAlgo); returns the engine used.
// dt: storage of the operands; a_f32: A is fp32 whatever dt (linear's dout); c_f32: C is fp32.
// WGRAD with several splits writes partials into work, then sums them into final_out.
extern "C" int ct_gemm_run(int mode, GemmArgs g, CtDtype dt, int a_f32, int c_f32, int algo, float *work,
                           float *final_out, cudaStream_t st);

// Generic engine (kernels/conv_generic.cu): fp32 math over fp32 or bf16 storage, any shape. Its
// tiles size ct_gemm_run's grid and split plan; the launch picks the kernel for mode, dt, a_f32
// and c_f32 (as ct_gemm_run's) and runs it on grid.
#define GN_BM 64
#define GN_BN 64
#define GN_BK 16
extern "C" void ct_gemm_generic_launch(int mode, GemmArgs g, CtDtype dt, int a_f32, int c_f32, dim3 grid,
                                       cudaStream_t st);

// Engine v1 (kernels/conv_tc1.cu): bf16 tensor cores, (32*mi) x TC_BN x TC_BK tiles, mi = 4
// (128-row tiles) or 2 (64-row tiles, narrow weight gradients). C is fp32 for WGRAD and for FWD
// with c_f32, bf16 otherwise.
#define TC_BM 128
#define TC_BN 64
#define TC_BK 32
extern "C" void ct_gemm_tc1_launch(int mode, GemmArgs g, int c_f32, int mi, dim3 grid, cudaStream_t st);

// Split-K (kernels/conv_split.cu). The weight gradient's plan for bm x bn x bk tiles: a function of
// the shape only.
extern "C" void ct_split_plan(int M, int N, int K, int bm, int bn, int bk, int *splits, int *k_split);
// Grouped convolutions (kernels/conv_generic.cu): every pass of a groups > 1 convolution on the
// generic engine, all groups in one launch (acc: DGRAD adds into c); the work buffer floats its
// weight gradient's split-K needs (0: none).
extern "C" int ct_conv_grouped_run(int mode, const ConvShape *s, void *c, const void *a, const void *b, int acc,
                                   float *work, CtDtype dt, cudaStream_t st);
extern "C" size_t ct_conv_grouped_work_floats(const ConvShape *s);
// An engine's launch arguments for the plan: g->k_split (= k_end unless a WGRAD splits),
// g->c_split_stride and, when it splits, g->c = work (the partials, ct_conv_reduce_splits' input);
// returns the split count (1: no split).
extern "C" int ct_conv_split_args(int mode, GemmArgs *g, float *work, int bm, int bn, int bk);
// dst[i] = sum over z in order of part[z * n + i] (the split partials).
extern "C" void ct_conv_reduce_splits(float *dst, const float *part, int splits, size_t n, cudaStream_t st);

// Engine v2 (kernels/conv_tc2.cu): 128x128 tiles, 4 stages, gather tables; bf16 only.
// eligible: operands vectorisable, N a multiple of 8, tables within shared memory. run: g as
// conv.cu's dispatcher cleans it up (no other pass's epilogue or accumulation).
extern "C" int ct_conv_tc2_eligible(int mode, const GemmArgs *g);
extern "C" void ct_conv_tc2_split(int M, int N, int K, int *splits, int *k_split);
extern "C" void ct_conv_tc2_run(int mode, GemmArgs g, float *work, float *final_out, cudaStream_t st);

// Engine v2's grouped path (kernels/conv_tcg.cu): several groups per CTA as a block-diagonal GEMM,
// mma.sync on the diagonal blocks only; every pass, bf16, no epilogue. eligible: the shapes it
// takes (channels per group 4 or multiples of 8 up to 64, ...); work_floats: its weight gradient's
// split partials (0: none).
extern "C" int ct_conv_tcg_eligible(int mode, const GemmArgs *g);
extern "C" size_t ct_conv_tcg_work_floats(const ConvShape *s);
extern "C" void ct_conv_tcg_run(int mode, GemmArgs g, float *work, float *final_out, cudaStream_t st);

// Hopper engine (kernels/conv_wgmma.cu): wgmma, warp-specialised; bf16, on compute 9.0 (or the
// emulator). eligible: what v2 takes on such a device (the BN epilogues included).
// WGRAD splits by ct_conv_wgmma_split (the shared plan for its 128x128x64 tiles: never more splits
// than v2's, so v2's work buffer holds them), summing the partials into final_out.
extern "C" int ct_conv_wgmma_eligible(int mode, const GemmArgs *g);
extern "C" void ct_conv_wgmma_split(int M, int N, int K, int *splits, int *k_split);
extern "C" void ct_conv_wgmma_run(int mode, GemmArgs g, float *work, float *final_out, cudaStream_t st);
