// CPU pooling: max pooling (PyTorch tie and padding rules) and global average pooling.
#include <math.h>
#include <string.h>

#include "nn/layers.h"
#include "util/common.h"

// Maximum and its position (h * W + w) of window (p, q) of one image, for all C channels at once
// (vectorised across channels). The first maximum in row-major window order wins; a NaN wins and
// stays, as in PyTorch ('v > max || isnan(v)'). Padding is skipped; a window always holds at
// least one real element (pad < k).
static inline void window_max(const float *img, int H, int W, int C, int k, int stride, int pad, int p, int q,
                              float *restrict m, int *restrict idx) {
    int first = 1;
    for (int r = 0; r < k; r++) {
        const int h = p * stride - pad + r;
        if (h < 0 || h >= H) continue;
        for (int t = 0; t < k; t++) {
            const int w = q * stride - pad + t;
            if (w < 0 || w >= W) continue;
            const float *x = img + ((size_t)h * W + w) * C;
            const int pos = h * W + w;
            if (first) {
                for (int c = 0; c < C; c++) m[c] = x[c], idx[c] = pos;
                first = 0;
            } else {
                for (int c = 0; c < C; c++) {
                    const int take = (x[c] > m[c]) | (x[c] != x[c]);
                    m[c] = take ? x[c] : m[c];
                    idx[c] = take ? pos : idx[c];
                }
            }
        }
    }
}

void maxpool_forward(float *out, const float *in, int N, int H, int W, int C, int k, int stride, int pad,
                     int P, int Q) {
    if (pad >= k) ct_die("maxpool: padding %d must be smaller than the window %d", pad, k);
#pragma omp parallel
    {
        int *idx = ct_alloc((size_t)C * sizeof(int));
#pragma omp for collapse(2) schedule(static)
        for (int n = 0; n < N; n++)
            for (int p = 0; p < P; p++) {
                const float *img = in + (size_t)n * H * W * C;
                for (int q = 0; q < Q; q++)
                    window_max(img, H, W, C, k, stride, pad, p, q, out + (((size_t)n * P + p) * Q + q) * C, idx);
            }
        free(idx);
    }
}

// Each window routes its gradient to its maximum. One thread per image visits the windows in
// (p, q) order, so an element that is the maximum of several windows sums their gradients in
// that fixed order (the same sum as gathering over the windows that contain it).
void maxpool_backward(float *din, const float *dout, const float *in, int N, int H, int W, int C, int k,
                      int stride, int pad, int P, int Q) {
    if (pad >= k) ct_die("maxpool: padding %d must be smaller than the window %d", pad, k);
#pragma omp parallel
    {
        int *idx = ct_alloc((size_t)C * sizeof(int));
        float *m = ct_alloc((size_t)C * sizeof(float));
#pragma omp for schedule(static)
        for (int n = 0; n < N; n++) {
            const float *img = in + (size_t)n * H * W * C;
            float *d = din + (size_t)n * H * W * C;
            memset(d, 0, (size_t)H * W * C * sizeof(float));
            for (int p = 0; p < P; p++)
                for (int q = 0; q < Q; q++) {
                    window_max(img, H, W, C, k, stride, pad, p, q, m, idx);
                    const float *g = dout + (((size_t)n * P + p) * Q + q) * C;
                    for (int c = 0; c < C; c++) d[(size_t)idx[c] * C + c] += g[c];
                }
        }
        free(m);
        free(idx);
    }
}

void avgpool_forward(float *out, const float *in, int N, int HW, int C) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        float *o = out + (size_t)n * C;
        for (int c = 0; c < C; c++) o[c] = 0.0f;
        for (int i = 0; i < HW; i++) {
            const float *x = in + ((size_t)n * HW + i) * C;
            for (int c = 0; c < C; c++) o[c] += x[c];
        }
        const float inv = 1.0f / HW;
        for (int c = 0; c < C; c++) o[c] *= inv;
    }
}

void avgpool_backward(float *din, const float *dout, int N, int HW, int C) {
    const float inv = 1.0f / HW;
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++)
        for (int i = 0; i < HW; i++) {
            float *d = din + ((size_t)n * HW + i) * C;
            const float *g = dout + (size_t)n * C;
            for (int c = 0; c < C; c++) d[c] = g[c] * inv;
        }
}
