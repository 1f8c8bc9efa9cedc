// CPU batch norm over an [M, C] matrix (NHWC activations), PyTorch training semantics.
//
// Per-channel sums run over fixed chunks of rows (the chunk size depends on M only); each chunk's
// partial sums are in double, and the chunks are combined in index order. Thread count therefore
// never changes a result, and double partials keep the statistics exact enough to be an oracle.
#include <math.h>
#include <string.h>

#include "nn/layers.h"
#include "util/common.h"

// Rows per chunk: at least 64, and at most 512 chunks.
static int chunk_rows(int M) {
    int r = (M + 511) / 512;
    return r < 64 ? 64 : r;
}

// out[c] = sum over rows of f(row, c), with f selected by mode:
//   0: x                       (mean)
//   1: (x - mean)^2            (variance)
//   2: g, 3: g * (x - mean)    (backward: g = dy masked by y > 0 when y != NULL)
static void channel_sums(double *out, int mode, const float *x, const float *dy, const float *y,
                         const float *mean, int M, int C) {
    const int cr = chunk_rows(M), nchunks = (M + cr - 1) / cr;
    double *part = ct_alloc((size_t)nchunks * C * sizeof(double));
#pragma omp parallel for schedule(static)
    for (int k = 0; k < nchunks; k++) {
        double *acc = part + (size_t)k * C;
        for (int c = 0; c < C; c++) acc[c] = 0;
        const int r1 = CT_MIN(M, (k + 1) * cr);
        for (int r = k * cr; r < r1; r++) {
            const size_t o = (size_t)r * C;
            switch (mode) {
            case 0:
                for (int c = 0; c < C; c++) acc[c] += x[o + c];
                break;
            case 1:
                for (int c = 0; c < C; c++) {
                    const double d = (double)x[o + c] - mean[c];
                    acc[c] += d * d;
                }
                break;
            case 2:
                for (int c = 0; c < C; c++) acc[c] += (y && !(y[o + c] > 0)) ? 0.0 : dy[o + c];
                break;
            case 3:
                for (int c = 0; c < C; c++) {
                    const double g = (y && !(y[o + c] > 0)) ? 0.0 : dy[o + c];
                    acc[c] += g * ((double)x[o + c] - mean[c]);
                }
                break;
            }
        }
    }
    for (int c = 0; c < C; c++) out[c] = 0;
    for (int k = 0; k < nchunks; k++)
        for (int c = 0; c < C; c++) out[c] += part[(size_t)k * C + c];
    free(part);
}

// y = (x - mean[c]) * scale[c] + beta[c], optionally clamped at zero. Subtracting the mean first
// (rather than folding it into a shift) avoids cancellation when invstd is large.
static void affine(float *y, const float *x, const float *mean, const float *scale, const float *beta, int M,
                   int C, int relu) {
#pragma omp parallel for schedule(static)
    for (int r = 0; r < M; r++) {
        const size_t o = (size_t)r * C;
        for (int c = 0; c < C; c++) {
            float v = (x[o + c] - mean[c]) * scale[c] + beta[c];
            y[o + c] = relu && !(v > 0) ? 0.0f : v;
        }
    }
}

void batchnorm_forward_train(float *y, float *save_mean, float *save_invstd, float *running_mean,
                             float *running_var, const float *x, const float *gamma, const float *beta,
                             int M, int C, float momentum, float eps, int relu) {
    double *sum = ct_alloc((size_t)C * sizeof(double));
    float *scale = ct_alloc((size_t)C * sizeof(float));
    channel_sums(sum, 0, x, NULL, NULL, NULL, M, C);
    for (int c = 0; c < C; c++) save_mean[c] = (float)(sum[c] / M);
    channel_sums(sum, 1, x, NULL, NULL, save_mean, M, C);
    for (int c = 0; c < C; c++) {
        const double var = sum[c] / M;
        save_invstd[c] = (float)(1.0 / sqrt(var + eps));
        scale[c] = gamma[c] * save_invstd[c];
        if (running_mean) running_mean[c] = (1 - momentum) * running_mean[c] + momentum * save_mean[c];
        if (running_var) {
            const double unbiased = M > 1 ? var * M / (M - 1) : var;
            running_var[c] = (float)((1 - momentum) * running_var[c] + momentum * unbiased);
        }
    }
    affine(y, x, save_mean, scale, beta, M, C, relu);
    free(scale);
    free(sum);
}

void batchnorm_forward_eval(float *y, const float *x, const float *gamma, const float *beta,
                            const float *running_mean, const float *running_var, int M, int C, float eps,
                            int relu) {
    float *scale = ct_alloc((size_t)C * sizeof(float));
    for (int c = 0; c < C; c++) scale[c] = (float)(gamma[c] / sqrt((double)running_var[c] + eps));
    affine(y, x, running_mean, scale, beta, M, C, relu);
    free(scale);
}

// With g = dy (masked by the fused ReLU) and xhat = (x - mean) * invstd:
//   dbeta = sum g, dgamma = sum g * xhat,
//   dx = gamma * invstd * (g - dbeta / M - xhat * dgamma / M).
void batchnorm_backward(float *dx, float *dgamma, float *dbeta, const float *dy, const float *x,
                        const float *y, const float *gamma, const float *save_mean,
                        const float *save_invstd, int M, int C) {
    double *sg = ct_alloc((size_t)C * 2 * sizeof(double)), *sgx = sg + C;
    float *k0 = ct_alloc((size_t)C * 3 * sizeof(float)), *k1 = k0 + C, *k2 = k1 + C;
    channel_sums(sg, 2, x, dy, y, save_mean, M, C);
    channel_sums(sgx, 3, x, dy, y, save_mean, M, C);
    for (int c = 0; c < C; c++) {
        const double inv = save_invstd[c];
        dbeta[c] = (float)sg[c];
        dgamma[c] = (float)(sgx[c] * inv);
        // dx = k0 * g + k1 * x + k2, expanding xhat = (x - mean) * inv.
        const double a = gamma[c] * inv;
        const double b = sgx[c] * inv * inv / M;  // dgamma / M * inv
        k0[c] = (float)a;
        k1[c] = (float)(-a * b);
        k2[c] = (float)(a * (b * save_mean[c] - sg[c] / M));
    }
#pragma omp parallel for schedule(static)
    for (int r = 0; r < M; r++) {
        const size_t o = (size_t)r * C;
        for (int c = 0; c < C; c++) {
            const float g = (y && !(y[o + c] > 0)) ? 0.0f : dy[o + c];
            dx[o + c] = k0[c] * g + k1[c] * x[o + c] + k2[c];
        }
    }
    free(k0);
    free(sg);
}
