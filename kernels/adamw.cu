// AdamW on the GPU over the flat parameter buffer: the twin of nn/adamw.c's adamw_update
// (torch.optim.AdamW's single-tensor step, torch 1.13's operation order), one launch for the
// whole model. Weight decay is switched per element by the byte mask SGD uses. The float
// operations are written unfused (__fmul_rn, __fdiv_rn, ...) because the CPU's are: nvcc would
// otherwise contract them into FMAs and the two backends would part in the last bit.
#include "kernels/common.cuh"
#include "kernels/act.cuh"
#include "kernels/kernels.h"

__device__ static inline void adamw_one(float &p, float g, float &m, float &v, bool decays, const CtAdamArgs &a) {
    float w = decays ? __fmul_rn(p, a.decay_factor) : p;
    float mm = __fadd_rn(__fmul_rn(m, a.beta1), __fmul_rn(a.omb1, g));
    float vv = __fadd_rn(__fmul_rn(v, a.beta2), __fmul_rn(__fmul_rn(a.omb2, g), g));
    float den = __fadd_rn(__fdiv_rn(__fsqrt_rn(vv), a.bc2_sqrt), a.eps);
    p = __fadd_rn(w, __fdiv_rn(__fmul_rn(a.neg_step_size, mm), den));
    m = mm;
    v = vv;
}

__global__ void adamw_k(float *p, const float *g, float *m, float *v, const uint8_t *decay, size_t n, CtAdamArgs a,
                        uint16_t *p_bf16) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        float pi = ct_ld(p, i), mi = ct_ld(m, i), vi = ct_ld(v, i);
        adamw_one(pi, ct_ld(g, i), mi, vi, !decay || ct_ld(decay, i) != 0.f, a);
        ct_st(p, i, pi);
        ct_st(m, i, mi);
        ct_st(v, i, vi);
        if (p_bf16) ct_st(p_bf16, i, pi);
    }
}

extern "C" void adamw_step_gpu(float *params, const float *grads, float *exp_avg, float *exp_avg_sq, const uint8_t *decay,
                               size_t n, const CtAdamArgs *a, uint16_t *params_bf16, ct_stream_t stream) {
    if (!n) return;
    CT_LAUNCH(adamw_k, ct_grid_for(n, 256), 256, 0, stream, params, grads, exp_avg, exp_avg_sq, decay, n, *a,
              params_bf16);
    CT_CHECK_LAUNCH("adamw_step_gpu");
}
