// SGD on the GPU over the flat parameter buffer: the twin of nn/sgd.h's sgd_update_range
// (PyTorch's torch.optim.SGD, dampening 0, same operation order), in one launch for the whole
// model. Weight decay is switched per element by a byte mask (BN weight/bias and biases are
// excluded when asked), so no per-tensor launches are needed. When a bf16 copy of the weights
// exists (the operands of the bf16 convolutions), it is refreshed in the same pass.
#include "kernels/common.cuh"
#include "kernels/act.cuh"
#include "kernels/kernels.h"

// One element. The float operations are written unfused (__fmul_rn/__fadd_rn) because the CPU's
// are: nvcc would otherwise contract them into FMAs and the two backends' weights would part in
// the last bit from the first step.
__device__ static inline void sgd_one(float &p, float g, float &buf, bool decays, float lr, float momentum,
                                      float wd, int nesterov, int first) {
    float d = g;
    float w = decays ? wd : 0.0f;
    if (w != 0.0f) d = __fadd_rn(d, __fmul_rn(w, p));
    if (momentum != 0.0f) {
        float b = first ? d : __fadd_rn(__fmul_rn(momentum, buf), d);
        buf = b;
        d = nesterov ? __fadd_rn(d, __fmul_rn(momentum, b)) : b;
    }
    p = __fadd_rn(p, __fmul_rn(-lr, d));
}

// n elements as n / 4 float4 vectors (vec != 0: every pointer 16-byte aligned) and a scalar tail.
__global__ void sgd_k(float *p, const float *g, float *buf, const uint8_t *decay, size_t n, float lr,
                      float momentum, float wd, int nesterov, int first, uint16_t *p_bf16, int vec) {
    size_t nv = vec ? n / 4 : 0;
    for (size_t j = blockIdx.x * (size_t)blockDim.x + threadIdx.x; j < nv; j += (size_t)gridDim.x * blockDim.x) {
        float pv[4], gv[4], bv[4] = {0.f, 0.f, 0.f, 0.f};
        ct_ldv<4>(pv, p, j * 4);
        ct_ldv<4>(gv, g, j * 4);
        if (momentum != 0.0f && !first) ct_ldv<4>(bv, buf, j * 4);
        if (decay) ct_check_vec_align(decay + j * 4, sizeof(uint32_t));
        if (decay) CT_COST_ACCESS(decay + j * 4, 4, false);
        uint32_t dm = decay ? *(const uint32_t *)(decay + j * 4) : 0x01010101u;
        for (int k = 0; k < 4; k++)
            sgd_one(pv[k], gv[k], bv[k], (dm >> (8 * k)) & 0xffu, lr, momentum, wd, nesterov, first);
        ct_stv<4>(p, j * 4, pv);
        if (momentum != 0.0f) ct_stv<4>(buf, j * 4, bv);
        if (p_bf16) ct_stv<4>(p_bf16, j * 4, pv);
    }
    for (size_t i = nv * 4 + blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        float pi = ct_ld(p, i), b = momentum != 0.0f && !first ? ct_ld(buf, i) : 0.f;
        sgd_one(pi, ct_ld(g, i), b, !decay || ct_ld(decay, i) != 0.f, lr, momentum, wd, nesterov, first);
        ct_st(p, i, pi);
        if (momentum != 0.0f) ct_st(buf, i, b);
        if (p_bf16) ct_st(p_bf16, i, pi);
    }
}

extern "C" void sgd_step_gpu(float *params, const float *grads, float *buf, const uint8_t *decay,
                             size_t n, float lr, float momentum, float wd, int nesterov, int first,
                             uint16_t *params_bf16, ct_stream_t stream) {
    if (!n) return;
    // The bf16 copy holds 4 elements in 8 bytes: 8-byte alignment is what it needs.
    int vec = ct_aligned(16, params, grads, buf) && ct_aligned(4, decay) && ct_aligned(8, params_bf16);
    CT_LAUNCH(sgd_k, ct_grid_for(vec ? (n + 3) / 4 : n, 256), 256, 0, stream, params, grads, buf, decay, n, lr,
              momentum, wd, nesterov, first, params_bf16, vec);
    CT_CHECK_LAUNCH("sgd_step_gpu");
}
