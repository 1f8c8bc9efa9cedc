// LAMB on the GPU: the twin of nn/lamb.c (timm's Lamb: global gradient clipping, Adam moments with
// bias correction, L2 weight decay added to the update, the per-tensor trust ratio |w| / |u|).
// Three launches for the whole model: the gradients' squared norms (a block a tensor, a thread a
// chunk, in the chunk order kernels.h fixes for LARS, so the sums are the CPU's bit for bit), the
// moments with the norms of the weights and of the update, then the update. Float and double
// operations are written unfused because the CPU's are.
#include "kernels/common.cuh"
#include "kernels/act.cuh"
#include "kernels/chunks.cuh"
#include "kernels/kernels.h"

#define LAMB_UPDATE_BLOCKS 16

__global__ void lamb_gnorm_k(const float *g, const CtLarsTensor *tensors, double *norms) {
    __shared__ double sg[CT_LARS_CHUNKS];
    const CtLarsTensor t = tensors[blockIdx.x];
    size_t a, b;
    chunk_range(t.count, &a, &b);
    double s = 0;
    for (size_t i = a; i < b; i++) {
        double y = g[t.offset + i];
        s = __dadd_rn(s, __dmul_rn(y, y));
    }
    sg[threadIdx.x] = s;
    __syncthreads();
    if (threadIdx.x == 0) norms[3 * blockIdx.x] = chunks_sum(sg);
}

// The clip divisor of nn/lamb.c: max(sqrt(sum of the tensors' squared norms in order) / max, 1).
__device__ static inline float lamb_clip(const double *norms, int n_tensors, double max_grad_norm) {
    if (!(max_grad_norm > 0)) return 1.0f;
    double G = 0;
    for (int t = 0; t < n_tensors; t++) G = __dadd_rn(G, norms[3 * t]);
    double c = sqrt(G) / max_grad_norm;
    return (float)(c > 1.0 ? c : 1.0);
}

// The update of one element before the trust ratio (m, v already the new moments).
__device__ static inline float lamb_u(float w, float mm, float vv, bool decays, const CtAdamArgs &a) {
    float den = __fadd_rn(__fdiv_rn(__fsqrt_rn(vv), a.bc2_sqrt), a.eps);
    float u = __fdiv_rn(__fdiv_rn(mm, a.bc1), den);
    return decays ? __fadd_rn(u, __fmul_rn(a.wd, w)) : u;
}

__global__ void lamb_moments_k(const float *p, const float *g, float *m, float *v, const CtLarsTensor *tensors,
                               int n_tensors, double *norms, CtAdamArgs a) {
    __shared__ double sw[CT_LARS_CHUNKS], su[CT_LARS_CHUNKS];
    __shared__ float clip;
    if (threadIdx.x == 0) clip = lamb_clip(norms, n_tensors, a.max_grad_norm);
    __syncthreads();
    const CtLarsTensor t = tensors[blockIdx.x];
    const bool adapt = !t.skip && a.wd != 0.0f;
    size_t lo, hi;
    chunk_range(t.count, &lo, &hi);
    double w2 = 0, u2 = 0;
    for (size_t i = lo; i < hi; i++) {
        size_t k = t.offset + i;
        float gg = __fdiv_rn(g[k], clip), w = p[k];
        float mm = __fadd_rn(__fmul_rn(m[k], a.beta1), __fmul_rn(a.omb1, gg));
        float vv = __fadd_rn(__fmul_rn(v[k], a.beta2), __fmul_rn(__fmul_rn(a.omb2, gg), gg));
        m[k] = mm;
        v[k] = vv;
        float u = lamb_u(w, mm, vv, adapt, a);
        w2 = __dadd_rn(w2, __dmul_rn((double)w, (double)w));
        u2 = __dadd_rn(u2, __dmul_rn((double)u, (double)u));
    }
    sw[threadIdx.x] = w2;
    su[threadIdx.x] = u2;
    __syncthreads();
    if (threadIdx.x == 0) {
        norms[3 * blockIdx.x + 1] = sqrt(chunks_sum(sw));
        norms[3 * blockIdx.x + 2] = sqrt(chunks_sum(su));
    }
}

__global__ void lamb_update_k(float *p, const float *m, const float *v, const CtLarsTensor *tensors, const double *norms,
                              CtAdamArgs a, uint16_t *p_bf16) {
    const int ti = blockIdx.x / LAMB_UPDATE_BLOCKS, sub = blockIdx.x % LAMB_UPDATE_BLOCKS;
    const CtLarsTensor t = tensors[ti];
    const bool adapt = !t.skip && a.wd != 0.0f;
    float trust = 1.0f;
    if (adapt) {  // nn/lamb.c's: 1 when either norm is 0
        double wn = norms[3 * ti + 1], un = norms[3 * ti + 2];
        trust = wn > 0 && un > 0 ? (float)(wn / un) : 1.0f;
    }
    const float neg_lr = -a.lr;
    for (size_t i = sub * (size_t)blockDim.x + threadIdx.x; i < t.count; i += (size_t)LAMB_UPDATE_BLOCKS * blockDim.x) {
        size_t k = t.offset + i;
        float w = p[k];
        float u = lamb_u(w, m[k], v[k], adapt, a);
        if (adapt) u = __fmul_rn(u, trust);
        w = __fadd_rn(w, __fmul_rn(neg_lr, u));
        p[k] = w;
        if (p_bf16) p_bf16[k] = ct_f32_to_bf16(w);
    }
}

extern "C" void lamb_step_gpu(const CtLarsTensor *tensors, int n_tensors, float *params, const float *grads, float *exp_avg,
                              float *exp_avg_sq, double *norms, const CtAdamArgs *a, uint16_t *params_bf16,
                              ct_stream_t stream) {
    if (n_tensors <= 0) return;
    if (a->max_grad_norm > 0) {
        CT_LAUNCH(lamb_gnorm_k, n_tensors, CT_LARS_CHUNKS, 0, stream, grads, tensors, norms);
        CT_CHECK_LAUNCH("lamb_step_gpu (gradient norms)");
    }
    CT_LAUNCH(lamb_moments_k, n_tensors, CT_LARS_CHUNKS, 0, stream, params, grads, exp_avg, exp_avg_sq, tensors, n_tensors,
              norms, *a);
    CT_CHECK_LAUNCH("lamb_step_gpu (moments)");
    CT_LAUNCH(lamb_update_k, n_tensors * LAMB_UPDATE_BLOCKS, 256, 0, stream, params, exp_avg, exp_avg_sq, tensors, norms,
              *a, params_bf16);
    CT_CHECK_LAUNCH("lamb_step_gpu (update)");
}
