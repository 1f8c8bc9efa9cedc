// Losses on the GPU: softmax cross-entropy with label smoothing and soft (Mixup/CutMix) targets,
// timm's binary cross-entropy, Hinton distillation, top-k hits. Twins of nn/layers.h's
// softmax_xent_mix / bce_mix / kd_loss / topk_correct.
//
// Every global access goes through act.cuh's counted loads and stores (tools/bench_gpu_cost).
// Multi-block and deterministic: each block takes rows (row r in block r % grid), reduces each
// row with a fixed shared-memory tree and writes the row's loss and hit into the workspace
// (loss_workspace_bytes); one small block then sums the rows in a fixed order (contiguous runs
// per thread in double, then a fixed tree), so the mean is the same bits run to run whatever the
// grid, and no float atomics are used.
#include "kernels/common.cuh"
#include "kernels/act.cuh"
#include "kernels/kernels.h"

#define LOSS_THREADS 256
#define LOSS_MAX_BLOCKS 1024

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
    float ref = ct_ld(x, (size_t)y), cnt = 0.f;
    for (int j = threadIdx.x; j < K; j += LOSS_THREADS)
        {
        float xj = ct_ld(x, (size_t)j);
        cnt += (xj > ref || (first_wins && j < y && xj == ref)) ? 1.f : 0.f;
    }
    return (int)block_sum(cnt, sh);
}

// Per row: lse = max + log(sum exp(z - max)); with on = 1 - eps, off = eps / K,
// loss = lse - on (lam z_a + (1-lam) z_b) - off sum z; dz = grad_scale/N * (softmax(z) - t),
// t = off + on lam [k == a] + on (1-lam) [k == b]. A hit is a row whose dominant label (a when
// lam >= 0.5, else b) is the first argmax, as on the CPU. dlogits may be NULL (evaluation).
__global__ void xent_rows_k(float *dlogits, const float *logits, const int32_t *labels,
                            const int32_t *labels_b, float lam, int N, int K, float smoothing,
                            float grad_scale, float *row_loss, int *row_hit) {
    __shared__ float sh[LOSS_THREADS];
    float gs = grad_scale / (float)N, off = smoothing / (float)K, on = 1.f - smoothing;
    float ta = on * lam, tb = on * (1.f - lam);
    for (int n = blockIdx.x; n < N; n += gridDim.x) {
        const float *z = logits + (size_t)n * K;
        float *dz = dlogits ? dlogits + (size_t)n * K : (float *)0;
        int ya = ct_ldi(labels, (size_t)n), yb = ct_ldi(labels_b, (size_t)n);
        float m = -INFINITY, zs = 0.f;
        for (int j = threadIdx.x; j < K; j += LOSS_THREADS) {
            float zj = ct_ld(z, (size_t)j);
            m = fmaxf(m, zj);
            zs += zj;
        }
        m = block_max(m, sh);
        zs = block_sum(zs, sh);
        float e = 0.f;
        for (int j = threadIdx.x; j < K; j += LOSS_THREADS) e += expf(ct_ld(z, (size_t)j) - m);
        e = block_sum(e, sh);
        float lse = m + logf(e);
        for (int j = threadIdx.x; dz && j < K; j += LOSS_THREADS) {
            float p = expf(ct_ld(z, (size_t)j) - m) / e;
            float t = off + (j == ya ? ta : 0.f) + (j == yb ? tb : 0.f);
            ct_st(dz, (size_t)j, gs * (p - t));
        }
        int gt = row_hit ? block_rank(z, K, lam >= 0.5f ? ya : yb, 1, sh) : 1;
        if (threadIdx.x == 0) {
            ct_st(row_loss, (size_t)n, lse - on * (lam * ct_ld(z, (size_t)ya) + (1.f - lam) * ct_ld(z, (size_t)yb)) - off * zs);
            if (row_hit) ct_sti(row_hit, (size_t)n, gt == 0);
        }
    }
}

// timm's BinaryCrossEntropy (nn/layers.h bce_mix): t_k = lam y_a + (1-lam) y_b with y = off +
// (on - off) onehot, off = eps / K, on = 1 - eps + off; thresholded to {0, 1} when threshold >= 0;
// per element max(z, 0) - z t + log1p(exp(-|z|)), dz = grad_scale / denom (sigmoid(z) - t); rows
// hold the sum over classes, the sum kernel divides by denom (N K, or N for sum_classes).
__global__ void bce_rows_k(float *dlogits, const float *logits, const int32_t *labels, const int32_t *labels_b,
                           float lam, int N, int K, float smoothing, float threshold, float inv_denom,
                           float grad_scale, float *row_loss, int *row_hit) {
    __shared__ float sh[LOSS_THREADS];
    float off = smoothing / (float)K, on = 1.f - smoothing + off, gs = grad_scale * inv_denom;
    for (int n = blockIdx.x; n < N; n += gridDim.x) {
        const float *z = logits + (size_t)n * K;
        float *dz = dlogits ? dlogits + (size_t)n * K : (float *)0;
        int ya = ct_ldi(labels, (size_t)n), yb = ct_ldi(labels_b, (size_t)n);
        float l = 0.f;
        for (int j = threadIdx.x; j < K; j += LOSS_THREADS) {
            float x = ct_ld(z, (size_t)j);
            float t = lam * (j == ya ? on : off) + (1.f - lam) * (j == yb ? on : off);
            if (threshold >= 0.f) t = t > threshold ? 1.f : 0.f;
            l += fmaxf(x, 0.f) - x * t + log1pf(expf(-fabsf(x)));
            if (dz) ct_st(dz, (size_t)j, gs * (1.f / (1.f + expf(-x)) - t));
        }
        l = block_sum(l, sh);
        int gt = row_hit ? block_rank(z, K, lam >= 0.5f ? ya : yb, 1, sh) : 1;
        if (threadIdx.x == 0) {
            ct_st(row_loss, (size_t)n, l);
            if (row_hit) ct_sti(row_hit, (size_t)n, gt == 0);
        }
    }
}

// loss_row = T^2 sum p_t (log p_t - log p_s), p = softmax(z / T);
// d loss / d z_s = T (p_s - p_t); the batch mean and grad_scale scale both. Rows hold KL only;
// the T^2 / N comes in the sum.
__global__ void kd_rows_k(float *dlogits, const float *logits, const float *teacher, int N, int K,
                          float T, float grad_scale, float *row_loss) {
    __shared__ float sh[LOSS_THREADS];
    float invT = 1.f / T, gs = grad_scale * T / (float)N;
    for (int n = blockIdx.x; n < N; n += gridDim.x) {
        const float *zs = logits + (size_t)n * K, *zt = teacher + (size_t)n * K;
        float *dz = dlogits ? dlogits + (size_t)n * K : (float *)0;
        float ms = -INFINITY, mt = -INFINITY;
        for (int j = threadIdx.x; j < K; j += LOSS_THREADS) {
            ms = fmaxf(ms, ct_ld(zs, (size_t)j) * invT);
            mt = fmaxf(mt, ct_ld(zt, (size_t)j) * invT);
        }
        ms = block_max(ms, sh);
        mt = block_max(mt, sh);
        float es = 0.f, et = 0.f;
        for (int j = threadIdx.x; j < K; j += LOSS_THREADS) {
            es += expf(ct_ld(zs, (size_t)j) * invT - ms);
            et += expf(ct_ld(zt, (size_t)j) * invT - mt);
        }
        es = block_sum(es, sh);
        et = block_sum(et, sh);
        float lse_s = ms + logf(es), lse_t = mt + logf(et);
        float kl = 0.f;
        for (int j = threadIdx.x; j < K; j += LOSS_THREADS) {
            float lps = ct_ld(zs, (size_t)j) * invT - lse_s, lpt = ct_ld(zt, (size_t)j) * invT - lse_t;
            float pt = expf(lpt), ps = expf(lps);
            if (pt > 0.f) kl += pt * (lpt - lps);
            if (dz) ct_st(dz, (size_t)j, ct_ld(dz, (size_t)j) + gs * (ps - pt));
        }
        kl = block_sum(kl, sh);
        if (threadIdx.x == 0) ct_st(row_loss, (size_t)n, kl);
    }
}

__global__ void topk_rows_k(const float *logits, const int32_t *labels, int N, int K, int k, int *row_hit) {
    __shared__ float sh[LOSS_THREADS];
    for (int n = blockIdx.x; n < N; n += gridDim.x) {
        int gt = block_rank(logits + (size_t)n * K, K, ct_ldi(labels, (size_t)n), 0, sh);
        if (threadIdx.x == 0) ct_sti(row_hit, (size_t)n, gt < k);
    }
}

// One block: *loss = scale * sum(row_loss) and *count = sum(row_hit) (either may be NULL). Thread
// t sums rows [t*per, (t+1)*per) in order, in double, then a fixed tree: the order depends on N only.
__global__ void rows_sum_k(const float *row_loss, const int *row_hit, int N, double scale, float *loss,
                           int *count) {
    __shared__ double sd[LOSS_THREADS];
    __shared__ int si[LOSS_THREADS];
    int per = (N + LOSS_THREADS - 1) / LOSS_THREADS;
    int n0 = threadIdx.x * per, n1 = min(N, n0 + per);
    double s = 0.0;
    int h = 0;
    for (int n = n0; n < n1; n++) {
        if (row_loss) s += (double)ct_ld(row_loss, (size_t)n);
        if (row_hit) h += ct_ldi(row_hit, (size_t)n);
    }
    sd[threadIdx.x] = s;
    si[threadIdx.x] = h;
    __syncthreads();
    for (int w = LOSS_THREADS / 2; w > 0; w >>= 1) {
        if ((int)threadIdx.x < w) {
            sd[threadIdx.x] += sd[threadIdx.x + w];
            si[threadIdx.x] += si[threadIdx.x + w];
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        if (loss) ct_st(loss, 0, (float)(sd[0] * scale));
        if (count) ct_sti(count, 0, si[0]);
    }
}

static int loss_blocks(int N) { return N < 1 ? 1 : (N < LOSS_MAX_BLOCKS ? N : LOSS_MAX_BLOCKS); }

// Row losses (float) then row hits (int), 4 bytes each.
extern "C" size_t loss_workspace_bytes(int N) { return (size_t)(N > 0 ? N : 1) * 2 * sizeof(float); }

extern "C" void softmax_xent_mix_gpu(float *dlogits, const float *logits, const int32_t *labels,
                                     const int32_t *labels_b, float lam, int N, int K, float smoothing,
                                     float grad_scale, void *work, float *loss, int *correct,
                                     ct_stream_t stream) {
    float *rows = (float *)work;
    int *hits = correct ? (int *)(rows + N) : (int *)0;
    CT_LAUNCH(xent_rows_k, loss_blocks(N), LOSS_THREADS, 0, stream, dlogits, logits, labels, labels_b, lam, N,
              K, smoothing, grad_scale, rows, hits);
    CT_CHECK_LAUNCH("softmax_xent_mix_gpu");
    CT_LAUNCH(rows_sum_k, 1, LOSS_THREADS, 0, stream, (const float *)rows, (const int *)hits, N, 1.0 / N, loss,
              correct);
    CT_CHECK_LAUNCH("softmax_xent_mix_gpu (sum)");
}
extern "C" void softmax_xent_gpu(float *dlogits, const float *logits, const int32_t *labels, int N,
                                 int K, float smoothing, float grad_scale, void *work, float *loss,
                                 int *correct, ct_stream_t stream) {
    softmax_xent_mix_gpu(dlogits, logits, labels, labels, 1.0f, N, K, smoothing, grad_scale, work, loss,
                         correct, stream);
}
extern "C" void bce_mix_gpu(float *dlogits, const float *logits, const int32_t *labels, const int32_t *labels_b,
                            float lam, int N, int K, float smoothing, float threshold, int sum_classes,
                            float grad_scale, void *work, float *loss, int *correct, ct_stream_t stream) {
    float *rows = (float *)work;
    int *hits = correct ? (int *)(rows + N) : (int *)0;
    double denom = sum_classes ? (double)N : (double)N * K;
    CT_LAUNCH(bce_rows_k, loss_blocks(N), LOSS_THREADS, 0, stream, dlogits, logits, labels, labels_b, lam, N, K,
              smoothing, threshold, (float)(1.0 / denom), grad_scale, rows, hits);
    CT_CHECK_LAUNCH("bce_mix_gpu");
    CT_LAUNCH(rows_sum_k, 1, LOSS_THREADS, 0, stream, (const float *)rows, (const int *)hits, N, 1.0 / denom, loss,
              correct);
    CT_CHECK_LAUNCH("bce_mix_gpu (sum)");
}
extern "C" void kd_loss_gpu(float *dlogits, const float *logits, const float *teacher_logits, int N,
                            int K, float temperature, float grad_scale, void *work, float *loss,
                            ct_stream_t stream) {
    float *rows = (float *)work;
    CT_LAUNCH(kd_rows_k, loss_blocks(N), LOSS_THREADS, 0, stream, dlogits, logits, teacher_logits, N, K,
              temperature, grad_scale, rows);
    CT_CHECK_LAUNCH("kd_loss_gpu");
    double T = temperature;
    CT_LAUNCH(rows_sum_k, 1, LOSS_THREADS, 0, stream, (const float *)rows, (const int *)0, N, T * T / N, loss,
              (int *)0);
    CT_CHECK_LAUNCH("kd_loss_gpu (sum)");
}
extern "C" void topk_correct_gpu(const float *logits, const int32_t *labels, int N, int K, int k,
                                 void *work, int *count, ct_stream_t stream) {
    int *hits = (int *)((float *)work + N);
    CT_LAUNCH(topk_rows_k, loss_blocks(N), LOSS_THREADS, 0, stream, logits, labels, N, K, k, hits);
    CT_CHECK_LAUNCH("topk_correct_gpu");
    CT_LAUNCH(rows_sum_k, 1, LOSS_THREADS, 0, stream, (const float *)0, (const int *)hits, N, 0.0, (float *)0,
              count);
    CT_CHECK_LAUNCH("topk_correct_gpu (sum)");
}
