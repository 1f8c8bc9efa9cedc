// LARS on the GPU: the twin of nn/lars.c. Two launches for the whole model: the per-tensor norms
// (a block a tensor, a thread a chunk, in the chunk order kernels.h fixes, so the sums are the
// CPU's bit for bit), then the update (a row of blocks a tensor). Double and float operations are
// written unfused (__dadd_rn, __fmul_rn, ...) because the CPU's are.
#include "kernels/common.cuh"
#include "kernels/act.cuh"
#include "kernels/chunks.cuh"
#include "kernels/kernels.h"

#define LARS_UPDATE_BLOCKS 16

__global__ void lars_norms_k(const float *p, const float *g, const CtLarsTensor *tensors, double *norms) {
    __shared__ double sw[CT_LARS_CHUNKS], sg[CT_LARS_CHUNKS];
    const CtLarsTensor t = tensors[blockIdx.x];
    size_t a, b;
    chunk_range(t.count, &a, &b);
    double w = 0, gg = 0;
    for (size_t i = a; i < b; i++) {
        double x = p[t.offset + i], y = g[t.offset + i];
        w = __dadd_rn(w, __dmul_rn(x, x));
        gg = __dadd_rn(gg, __dmul_rn(y, y));
    }
    sw[threadIdx.x] = w;
    sg[threadIdx.x] = gg;
    __syncthreads();
    if (threadIdx.x == 0) {
        norms[2 * blockIdx.x] = sqrt(chunks_sum(sw));
        norms[2 * blockIdx.x + 1] = sqrt(chunks_sum(sg));
    }
}

__global__ void lars_update_k(float *p, const float *g, float *buf, const CtLarsTensor *tensors, const double *norms,
                              float lr, float momentum, float wd, float eta, uint16_t *p_bf16) {
    const CtLarsTensor t = tensors[blockIdx.x / LARS_UPDATE_BLOCKS];
    const int sub = blockIdx.x % LARS_UPDATE_BLOCKS;
    float scaled = lr;
    if (!t.skip) {  // nn/lars.c's lars_trust, the same double operations in the same order
        double wn = norms[2 * (blockIdx.x / LARS_UPDATE_BLOCKS)], gn = norms[2 * (blockIdx.x / LARS_UPDATE_BLOCKS) + 1];
        double trust = wn > 0 && gn > 0 ? __dmul_rn((double)eta, wn) / __dadd_rn(gn, __dmul_rn((double)wd, wn)) : 1.0;
        scaled = (float)__dmul_rn((double)lr, trust);
    }
    for (size_t i = sub * (size_t)blockDim.x + threadIdx.x; i < t.count; i += (size_t)LARS_UPDATE_BLOCKS * blockDim.x) {
        size_t k = t.offset + i;
        float w = p[k], v;
        if (t.skip) v = __fadd_rn(__fmul_rn(momentum, buf[k]), __fmul_rn(lr, g[k]));
        else v = __fadd_rn(__fmul_rn(momentum, buf[k]), __fmul_rn(scaled, __fadd_rn(g[k], __fmul_rn(wd, w))));
        buf[k] = v;
        w = __fadd_rn(w, -v);
        p[k] = w;
        if (p_bf16) p_bf16[k] = ct_f32_to_bf16(w);
    }
}

extern "C" void lars_step_gpu(float *params, const float *grads, float *buf, const CtLarsTensor *tensors, int n_tensors,
                              double *norms, float lr, float momentum, float wd, float eta, uint16_t *params_bf16,
                              ct_stream_t stream) {
    if (n_tensors <= 0) return;
    CT_LAUNCH(lars_norms_k, n_tensors, CT_LARS_CHUNKS, 0, stream, params, grads, tensors, norms);
    CT_CHECK_LAUNCH("lars_step_gpu (norms)");
    CT_LAUNCH(lars_update_k, n_tensors * LARS_UPDATE_BLOCKS, 256, 0, stream, params, grads, buf, tensors, norms, lr,
              momentum, wd, eta, params_bf16);
    CT_CHECK_LAUNCH("lars_step_gpu (update)");
}
