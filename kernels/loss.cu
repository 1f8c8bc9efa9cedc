// Losses on the GPU: softmax cross-entropy with label smoothing, Hinton distillation, top-k hits.
// Twins of nn/layers.h's softmax_xent / kd_loss / topk_correct.
//
// Logits are small ([N, classes], at most a few hundred thousand floats), so one block walks the
// rows in order and reduces each row with a fixed shared-memory tree: the loss is bit-identical
// run to run and no scratch buffer is needed. The mean loss is accumulated in double in row order.
#include "kernels/common.cuh"
#include "kernels/act.cuh"
#include "kernels/kernels.h"

#define LOSS_THREADS 256

// Tree reductions over the block (all threads must call; result broadcast to every thread).
__device__ static float block_sum(float v, float *sh) {
    sh[threadIdx.x] = v;
    __syncthreads();
    for (int s = LOSS_THREADS / 2; s > 0; s >>= 1) {
        if ((int)threadIdx.x < s) sh[threadIdx.x] += sh[threadIdx.x + s];
        __syncthreads();
    }
    float r = sh[0];
    __syncthreads();
    return r;
}
__device__ static float block_max(float v, float *sh) {
    sh[threadIdx.x] = v;
    __syncthreads();
    for (int s = LOSS_THREADS / 2; s > 0; s >>= 1) {
        if ((int)threadIdx.x < s) sh[threadIdx.x] = fmaxf(sh[threadIdx.x], sh[threadIdx.x + s]);
        __syncthreads();
    }
    float r = sh[0];
    __syncthreads();
    return r;
}
// Number of logits ranked above the label's: x[j] > x[y], plus (first_wins) the equal ones
// before it, so that 0 means "y is the first argmax" (the CPU's top-1 rule) and, without
// first_wins, "< k" means a top-k hit with ties counted as hits (the CPU's top-k rule).
__device__ static int block_rank(const float *x, int K, int y, int first_wins, float *sh) {
    float ref = x[y], cnt = 0.f;
    for (int j = threadIdx.x; j < K; j += LOSS_THREADS)
        cnt += (x[j] > ref || (first_wins && j < y && x[j] == ref)) ? 1.f : 0.f;
    return (int)block_sum(cnt, sh);
}

// Per row: lse = max + log(sum exp(z - max)); loss = lse - (1-eps) z_y - eps/K sum z;
// dz = grad_scale/N * (softmax(z) - (1-eps) onehot - eps/K). A hit is a row whose label is the
// first argmax, as on the CPU.
// dlogits may be NULL (evaluation: loss and hits only), as on the CPU.
__global__ void softmax_xent_k(float *dlogits, const float *logits, const int32_t *labels, int N,
                               int K, float smoothing, float grad_scale, float *loss, int *correct) {
    __shared__ float sh[LOSS_THREADS];
    double total = 0.0;
    int hits = 0;
    float gs = grad_scale / (float)N, off = smoothing / (float)K, on = 1.f - smoothing;
    for (int n = 0; n < N; n++) {
        const float *z = logits + (size_t)n * K;
        float *dz = dlogits ? dlogits + (size_t)n * K : (float *)0;
        int y = labels[n];
        float m = -INFINITY, zs = 0.f;
        for (int j = threadIdx.x; j < K; j += LOSS_THREADS) {
            m = fmaxf(m, z[j]);
            zs += z[j];
        }
        m = block_max(m, sh);
        zs = block_sum(zs, sh);
        float e = 0.f;
        for (int j = threadIdx.x; j < K; j += LOSS_THREADS) e += expf(z[j] - m);
        e = block_sum(e, sh);
        float lse = m + logf(e);
        for (int j = threadIdx.x; dz && j < K; j += LOSS_THREADS) {
            float p = expf(z[j] - m) / e;
            float t = off + (j == y ? on : 0.f);
            dz[j] = gs * (p - t);
        }
        int gt = correct ? block_rank(z, K, y, 1, sh) : 1;
        if (threadIdx.x == 0) {
            total += (double)(lse - on * z[y] - off * zs);
            hits += gt == 0;
        }
    }
    if (threadIdx.x == 0) {
        *loss = (float)(total / N);
        if (correct) *correct = hits;
    }
}

// loss_row = T^2 sum p_t (log p_t - log p_s), p = softmax(z / T);
// d loss / d z_s = T (p_s - p_t); the batch mean and grad_scale scale both.
__global__ void kd_loss_k(float *dlogits, const float *logits, const float *teacher, int N, int K,
                          float T, float grad_scale, float *loss) {
    __shared__ float sh[LOSS_THREADS];
    double total = 0.0;
    float invT = 1.f / T, gs = grad_scale * T / (float)N;
    for (int n = 0; n < N; n++) {
        const float *zs = logits + (size_t)n * K, *zt = teacher + (size_t)n * K;
        float *dz = dlogits ? dlogits + (size_t)n * K : (float *)0;
        float ms = -INFINITY, mt = -INFINITY;
        for (int j = threadIdx.x; j < K; j += LOSS_THREADS) {
            ms = fmaxf(ms, zs[j] * invT);
            mt = fmaxf(mt, zt[j] * invT);
        }
        ms = block_max(ms, sh);
        mt = block_max(mt, sh);
        float es = 0.f, et = 0.f;
        for (int j = threadIdx.x; j < K; j += LOSS_THREADS) {
            es += expf(zs[j] * invT - ms);
            et += expf(zt[j] * invT - mt);
        }
        es = block_sum(es, sh);
        et = block_sum(et, sh);
        float lse_s = ms + logf(es), lse_t = mt + logf(et);
        float kl = 0.f;
        for (int j = threadIdx.x; j < K; j += LOSS_THREADS) {
            float lps = zs[j] * invT - lse_s, lpt = zt[j] * invT - lse_t;
            float pt = expf(lpt), ps = expf(lps);
            if (pt > 0.f) kl += pt * (lpt - lps);
            if (dz) dz[j] += gs * (ps - pt);
        }
        kl = block_sum(kl, sh);
        if (threadIdx.x == 0) total += (double)kl * T * T;
    }
    if (threadIdx.x == 0) *loss = (float)(total / N);
}

__global__ void topk_k(const float *logits, const int32_t *labels, int N, int K, int k, int *count) {
    __shared__ float sh[LOSS_THREADS];
    int hits = 0;
    for (int n = 0; n < N; n++) {
        const float *z = logits + (size_t)n * K;
        int gt = block_rank(z, K, labels[n], 0, sh);
        hits += gt < k;
    }
    if (threadIdx.x == 0) *count = hits;
}

extern "C" void softmax_xent_gpu(float *dlogits, const float *logits, const int32_t *labels, int N,
                                 int K, float smoothing, float grad_scale, float *loss, int *correct,
                                 ct_stream_t stream) {
    CT_LAUNCH(softmax_xent_k, 1, LOSS_THREADS, 0, stream, dlogits, logits, labels, N, K, smoothing,
              grad_scale, loss, correct);
    CT_CHECK_LAUNCH("softmax_xent_gpu");
}
extern "C" void kd_loss_gpu(float *dlogits, const float *logits, const float *teacher_logits, int N,
                            int K, float temperature, float grad_scale, float *loss, ct_stream_t stream) {
    CT_LAUNCH(kd_loss_k, 1, LOSS_THREADS, 0, stream, dlogits, logits, teacher_logits, N, K,
              temperature, grad_scale, loss);
    CT_CHECK_LAUNCH("kd_loss_gpu");
}
extern "C" void topk_correct_gpu(const float *logits, const int32_t *labels, int N, int K, int k,
                                 int *count, ct_stream_t stream) {
    CT_LAUNCH(topk_k, 1, LOSS_THREADS, 0, stream, logits, labels, N, K, k, count);
    CT_CHECK_LAUNCH("topk_correct_gpu");
}
