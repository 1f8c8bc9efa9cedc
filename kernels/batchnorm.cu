// Batch norm on the GPU: training forward (batch statistics, running-stat update, fused ReLU),
// eval forward, and backward. Twins of nn/layers.h's batchnorm_*.
//
// NHWC makes the activation an [M, C] row-major matrix. Channel sums are reduced in two fixed
// stages so the result does not depend on scheduling: (1) a block of 32 channels x BN_LANES row
// lanes sums one chunk of rows (each lane strides over the chunk in order, lanes are combined in
// lane order), writing partial[chunk][c]; (2) one thread per channel adds the chunk partials in
// chunk order. The chunking is a function of M alone. Variance is the two-pass form
// (sum of squared deviations from the mean), as accurate as the CPU's.
#include "kernels/common.cuh"
#include "kernels/act.cuh"
#include "kernels/kernels.h"

#define BN_TX 32     // channels per block (consecutive in memory: coalesced)
#define BN_LANES 8   // row lanes per block
#define BN_MAX_CHUNKS 256
#define BN_MIN_ROWS 64

static int bn_chunks(int M) {
    int n = (M + BN_MIN_ROWS - 1) / BN_MIN_ROWS;
    if (n > BN_MAX_CHUNKS) n = BN_MAX_CHUNKS;
    if (n < 1) n = 1;
    return n;
}
static int bn_rows_per_chunk(int M) { return (M + bn_chunks(M) - 1) / bn_chunks(M); }

extern "C" size_t batchnorm_gpu_work_floats(int M, int C) { return (size_t)2 * bn_chunks(M) * C; }

// partial[chunk*C + c] = sum over the chunk's rows of (x - shift[c])^p, p = 1 or 2 (shift may be
// NULL: zero). Mode 1 only reads x; mode 2 is the squared deviation.
template <typename T>
__global__ void bn_partial_moment(float *partial, const T *x, const float *shift, int M, int C,
                                  int rows, int square) {
    __shared__ float acc[BN_LANES][BN_TX];
    int c = blockIdx.x * BN_TX + threadIdx.x;
    int r0 = blockIdx.y * rows, r1 = min(M, r0 + rows);
    float s = 0.f;
    if (c < C) {
        float sh = shift ? shift[c] : 0.f;
        for (int r = r0 + threadIdx.y; r < r1; r += BN_LANES) {
            float v = ct_ld(x, (size_t)r * C + c) - sh;
            s += square ? v * v : v;
        }
    }
    acc[threadIdx.y][threadIdx.x] = s;
    __syncthreads();
    if (threadIdx.y == 0 && c < C) {
        float t = 0.f;
        for (int l = 0; l < BN_LANES; l++) t += acc[l][threadIdx.x];
        partial[(size_t)blockIdx.y * C + c] = t;
    }
}

__global__ void bn_finish_mean(float *mean, const float *partial, int nchunks, int M, int C) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float s = 0.f;
    for (int k = 0; k < nchunks; k++) s += partial[(size_t)k * C + c];
    mean[c] = s / (float)M;
}

__global__ void bn_finish_var(float *save_invstd, float *running_mean, float *running_var,
                              const float *mean, const float *partial, int nchunks, int M, int C,
                              float momentum, float eps) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float s = 0.f;
    for (int k = 0; k < nchunks; k++) s += partial[(size_t)k * C + c];
    float var = s / (float)M;
    save_invstd[c] = 1.0f / sqrtf(var + eps);
    if (running_mean) running_mean[c] = (1.f - momentum) * running_mean[c] + momentum * mean[c];
    if (running_var) {
        float unbiased = M > 1 ? var * (float)M / (float)(M - 1) : var;
        running_var[c] = (1.f - momentum) * running_var[c] + momentum * unbiased;
    }
}

// y = (x - mean) * invstd * gamma + beta [relu]. In eval mode invstd is computed from the running
// variance on the fly (var_is_invstd = 0).
template <typename T>
__global__ void bn_apply(T *y, const T *x, const float *gamma, const float *beta, const float *mean,
                         const float *scale, int var_is_invstd, float eps, size_t n, int C, int relu) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        int c = (int)(i % C);
        float is = var_is_invstd ? scale[c] : 1.0f / sqrtf(scale[c] + eps);
        float v = (ct_ld(x, i) - mean[c]) * is * gamma[c] + beta[c];
        if (relu && !(v > 0.f)) v = 0.f;
        ct_st(y, i, v);
    }
}

extern "C" void batchnorm_forward_train_gpu(void *y, float *save_mean, float *save_invstd,
                                            float *running_mean, float *running_var, const void *x,
                                            const float *gamma, const float *beta, int M, int C,
                                            float momentum, float eps, int relu, float *work,
                                            CtDtype dt, ct_stream_t stream) {
    int nchunks = bn_chunks(M), rows = bn_rows_per_chunk(M);
    dim3 grid((C + BN_TX - 1) / BN_TX, nchunks), block(BN_TX, BN_LANES);
    unsigned cgrid = (C + 127) / 128;
    size_t n = (size_t)M * C;
    CT_DISPATCH(dt, T, {
        CT_LAUNCH(bn_partial_moment<T>, grid, block, 0, stream, work, (const T *)x, (const float *)NULL,
                  M, C, rows, 0);
        CT_LAUNCH(bn_finish_mean, cgrid, 128, 0, stream, save_mean, (const float *)work, nchunks, M, C);
        CT_LAUNCH(bn_partial_moment<T>, grid, block, 0, stream, work, (const T *)x,
                  (const float *)save_mean, M, C, rows, 1);
        CT_LAUNCH(bn_finish_var, cgrid, 128, 0, stream, save_invstd, running_mean, running_var,
                  (const float *)save_mean, (const float *)work, nchunks, M, C, momentum, eps);
        CT_LAUNCH(bn_apply<T>, ct_grid_for(n, 256), 256, 0, stream, (T *)y, (const T *)x, gamma, beta,
                  (const float *)save_mean, (const float *)save_invstd, 1, eps, n, C, relu);
    });
    CT_CHECK_LAUNCH("batchnorm_forward_train_gpu");
}

extern "C" void batchnorm_forward_eval_gpu(void *y, const void *x, const float *gamma,
                                           const float *beta, const float *running_mean,
                                           const float *running_var, int M, int C, float eps,
                                           int relu, CtDtype dt, ct_stream_t stream) {
    size_t n = (size_t)M * C;
    CT_DISPATCH(dt, T, {
        CT_LAUNCH(bn_apply<T>, ct_grid_for(n, 256), 256, 0, stream, (T *)y, (const T *)x, gamma, beta,
                  running_mean, running_var, 0, eps, n, C, relu);
    });
    CT_CHECK_LAUNCH("batchnorm_forward_eval_gpu");
}

// Backward partials: ps[chunk][c] = sum dy', pq[chunk][c] = sum dy' * (x - mean), where
// dy' = dy masked by y > 0 when the ReLU was fused.
template <typename T>
__global__ void bn_partial_grad(float *ps, float *pq, const T *dy, const T *x, const T *y,
                                const float *mean, int M, int C, int rows) {
    __shared__ float acc_s[BN_LANES][BN_TX];
    __shared__ float acc_q[BN_LANES][BN_TX];
    int c = blockIdx.x * BN_TX + threadIdx.x;
    int r0 = blockIdx.y * rows, r1 = min(M, r0 + rows);
    float s = 0.f, q = 0.f;
    if (c < C) {
        float mu = mean[c];
        for (int r = r0 + threadIdx.y; r < r1; r += BN_LANES) {
            size_t i = (size_t)r * C + c;
            float g = ct_ld(dy, i);
            if (y && !(ct_ld(y, i) > 0.f)) g = 0.f;
            s += g;
            q += g * (ct_ld(x, i) - mu);
        }
    }
    acc_s[threadIdx.y][threadIdx.x] = s;
    acc_q[threadIdx.y][threadIdx.x] = q;
    __syncthreads();
    if (threadIdx.y == 0 && c < C) {
        float ts = 0.f, tq = 0.f;
        for (int l = 0; l < BN_LANES; l++) {
            ts += acc_s[l][threadIdx.x];
            tq += acc_q[l][threadIdx.x];
        }
        ps[(size_t)blockIdx.y * C + c] = ts;
        pq[(size_t)blockIdx.y * C + c] = tq;
    }
}

__global__ void bn_finish_grad(float *dgamma, float *dbeta, const float *ps, const float *pq,
                               const float *invstd, int nchunks, int C) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float s = 0.f, q = 0.f;
    for (int k = 0; k < nchunks; k++) {
        s += ps[(size_t)k * C + c];
        q += pq[(size_t)k * C + c];
    }
    dbeta[c] = s;
    dgamma[c] = q * invstd[c];
}

// dx = gamma * invstd * (dy' - dbeta/M - xhat * dgamma/M)
template <typename T>
__global__ void bn_dx(T *dx, const T *dy, const T *x, const T *y, const float *gamma,
                      const float *mean, const float *invstd, const float *dgamma,
                      const float *dbeta, size_t n, int C, float inv_m) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        int c = (int)(i % C);
        float g = ct_ld(dy, i);
        if (y && !(ct_ld(y, i) > 0.f)) g = 0.f;
        float is = invstd[c];
        float xhat = (ct_ld(x, i) - mean[c]) * is;
        ct_st(dx, i, gamma[c] * is * (g - dbeta[c] * inv_m - xhat * dgamma[c] * inv_m));
    }
}

extern "C" void batchnorm_backward_gpu(void *dx, float *dgamma, float *dbeta, const void *dy,
                                       const void *x, const void *y, const float *gamma,
                                       const float *save_mean, const float *save_invstd, int M,
                                       int C, float *work, CtDtype dt, ct_stream_t stream) {
    int nchunks = bn_chunks(M), rows = bn_rows_per_chunk(M);
    dim3 grid((C + BN_TX - 1) / BN_TX, nchunks), block(BN_TX, BN_LANES);
    float *ps = work, *pq = work + (size_t)nchunks * C;
    size_t n = (size_t)M * C;
    CT_DISPATCH(dt, T, {
        CT_LAUNCH(bn_partial_grad<T>, grid, block, 0, stream, ps, pq, (const T *)dy, (const T *)x,
                  (const T *)y, save_mean, M, C, rows);
        CT_LAUNCH(bn_finish_grad, (C + 127) / 128, 128, 0, stream, dgamma, dbeta, (const float *)ps,
                  (const float *)pq, save_invstd, nchunks, C);
        CT_LAUNCH(bn_dx<T>, ct_grid_for(n, 256), 256, 0, stream, (T *)dx, (const T *)dy, (const T *)x,
                  (const T *)y, gamma, save_mean, save_invstd, (const float *)dgamma,
                  (const float *)dbeta, n, C, 1.0f / (float)M);
    });
    CT_CHECK_LAUNCH("batchnorm_backward_gpu");
}
