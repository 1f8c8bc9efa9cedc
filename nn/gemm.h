// Single-precision GEMM for the CPU layers: C[M,N] = (accumulate ? C : 0) + A[M,K] B[K,N].
// A and B are strided views (element (i, j) of A at A[i*a_rs + j*a_cs]), so transposes cost
// nothing to express; C is row-major with leading dimension ldc.
//
// Blocked and packed (Goto-style): K in blocks of a fixed size, A and B copied into contiguous
// panels, a register-blocked micro-kernel (AVX-512, AVX2+FMA or portable C, chosen at run time).
// Every C element is computed by exactly one thread and sums its products in increasing k, so
// the result is bit-identical whatever the thread count. OpenMP-parallel inside; called from
// inside a parallel region it runs on the calling thread alone.
#pragma once
#include <stddef.h>

#include "nn/layers.h"

#ifdef __cplusplus
extern "C" {
#endif

void sgemm(int M, int N, int K, const float *A, ptrdiff_t a_rs, ptrdiff_t a_cs, const float *B,
           ptrdiff_t b_rs, ptrdiff_t b_cs, float *C, ptrdiff_t ldc, int accumulate);

// An operand view: either strided memory, or the im2col matrix of a convolution input, never
// materialised (row m = output pixel (n, p, q), column (r, s, c) = input pixel
// (n, p*stride - pad + r, q*stride - pad + s), channel c, zero in the padding), built on the fly
// while packing. row0/col0 shift the origin of the im2col view.
// A block view (GemmView.blocks) cuts the matrix into bi x bj blocks, each a strided view with its
// own origin: element (i, j) is p[off[(i / bi) * nbj + j / bj] + (i % bi) * rs + (j % bj) * cs].
// A convolution on a map no larger than its kernel's reach is one GEMM whose blocks are the
// kernel's taps (nn/conv_small.c), read in place from the weights.
typedef struct {
    const ptrdiff_t *off;  // [rows / bi][nbj] block origins (>= 0)
    int bi, bj, nbj;
} GemmBlocks;
typedef struct {
    const float *p;
    ptrdiff_t rs, cs;
    const ConvShape *conv;  // NULL: strided view
    size_t row0;
    int packed;                // B only: p holds panels from sgemm_pack_b (rs, cs, conv unused)
    const GemmBlocks *blocks;  // NULL: one block (plain strided view); not with conv or packed
} GemmView;
void sgemm_view(int M, int N, int K, const GemmView *A, const GemmView *B, float *C, ptrdiff_t ldc,
                int accumulate);

// sgemm_view, then on each finished tile of C while it is still in cache (inference: a
// convolution with batch norm folded in, followed by its residual add and ReLU):
//   C[i][j] = relu?(C[i][j] + bias[j] + res[i * ldr + j])      bias / res may be NULL.
// The products are summed exactly as sgemm_view sums them, so the result has the same bits as
// sgemm_view followed by the same additions in a separate pass.
typedef struct {
    const float *bias;  // [N] or NULL
    const float *res;   // [M, ldr] or NULL
    ptrdiff_t ldr;
    int relu;
} GemmEpilogue;
void sgemm_view_ep(int M, int N, int K, const GemmView *A, const GemmView *B, float *C, ptrdiff_t ldc,
                   const GemmEpilogue *ep);

// B packed once for many products (inference weights), in the panels sgemm_view would otherwise
// pack at every call: sgemm_pack_b writes sgemm_packed_b_size(K, N) floats from the view B
// (K x N), and a view {dst, .packed = 1} then stands for it. Same sums, same bits. The panels
// are those of the 32-wide AVX-512 kernels: sgemm_view dies on packed B when another kernel is in
// use (sgemm_packs_b says whether to pack).
int sgemm_packs_b(void);
size_t sgemm_packed_b_size(int K, int N);
void sgemm_pack_b(float *dst, const GemmView *B, int K, int N);

// The micro-kernel in use: "avx512", "avx2" or "generic".
const char *sgemm_kernel_name(void);
// Force a kernel (tests, benchmarks). Returns 0 when this CPU cannot run it (nothing changes).
int sgemm_set_kernel(const char *name);

#ifdef __cplusplus
}
#endif
