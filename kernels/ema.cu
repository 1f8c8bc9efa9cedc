// EMA of the weights on the GPU: the twin of nn/ema.h. The float operations are written unfused
// (__fsub_rn/__fmul_rn/__fadd_rn) like the CPU's, so the averages are the same bits on both.
#include "kernels/common.cuh"
#include "kernels/act.cuh"
#include "kernels/kernels.h"

__global__ void ema_update_k(float *ema, const float *w, size_t n, float a) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        float e = ema[i];
        ema[i] = __fadd_rn(e, __fmul_rn(a, __fsub_rn(w[i], e)));
    }
}

__global__ void ema_swap_k(float *a, float *b, size_t n, uint16_t *a_bf16) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        float t = a[i], u = b[i];
        a[i] = u;
        b[i] = t;
        if (a_bf16) a_bf16[i] = ct_f32_to_bf16(u);
    }
}

extern "C" void ema_update_gpu(float *ema, const float *w, size_t n, float decay, ct_stream_t stream) {
    if (!n) return;
    const float a = 1.0f - decay;  // in float, as nn/ema.c computes it
    CT_LAUNCH(ema_update_k, ct_grid_for(n, 256), 256, 0, stream, ema, w, n, a);
    CT_CHECK_LAUNCH("ema_update_gpu");
}

extern "C" void ema_swap_gpu(float *a, float *b, size_t n, uint16_t *a_bf16, ct_stream_t stream) {
    if (!n) return;
    CT_LAUNCH(ema_swap_k, ct_grid_for(n, 256), 256, 0, stream, a, b, n, a_bf16);
    CT_CHECK_LAUNCH("ema_swap_gpu");
}
