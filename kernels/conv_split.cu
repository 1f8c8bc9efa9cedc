// Split-K of the convolution weight gradients, for every engine that splits (generic, v1, v2, wgmma). The
// weight gradient reduces over N*P*Q, which is long when K*R*S*C is small: the reduction is cut into
// a number of splits that depends only on the shape (split_plan: enough CTAs to fill the GPU, few
// enough that the partials' traffic stays small against the operands'); each split writes its own
// fp32 partial buffer and reduce_splits_k sums the partials in split order. No atomics anywhere, so
// a rerun is bit-identical.
#include "kernels/common.cuh"
#include "kernels/act.cuh"  // ct_ld, ct_st
#include "kernels/conv_gemm.cuh"
#include "kernels/kernels.h"

// Sum of the split-K partials in split order: dst[i] = sum_z part[z * n + i].
__global__ void reduce_splits_k(float *dst, const float *part, int splits, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        float acc = 0.f;
        for (int z = 0; z < splits; z++) acc += ct_ld(part, (size_t)z * n + i);
        ct_st(dst, i, acc);
    }
}

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

extern "C" int ct_conv_split_args(int mode, GemmArgs *g, float *work, int bm, int bn, int bk) {
    int splits = 1;
    g->k_split = g->k_end;
    g->c_split_stride = 0;
    if (mode == GEMM_WGRAD && !g->no_split) {
        SplitPlan sp = split_plan(g->M, g->N, g->k_end, bm, bn, bk);
        splits = sp.splits;
        g->k_split = sp.k_split;
        if (splits > 1) {
            if (!work) ct_die("conv weight gradient: no work buffer (conv2d_gpu_work_floats)");
            g->c = work;
            g->c_split_stride = (size_t)g->M * g->N;
        }
    }
    return splits;
}

extern "C" void ct_conv_reduce_splits(float *dst, const float *part, int splits, size_t n, cudaStream_t st) {
    unsigned blocks = (unsigned)((n + 255) / 256);
    if (blocks > 4096) blocks = 4096;
    CT_LAUNCH(reduce_splits_k, blocks, 256, 0, st, dst, part, splits, n);
    CT_CHECK_LAUNCH("conv split-K reduction");
}
