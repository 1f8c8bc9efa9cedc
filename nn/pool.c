// CPU pooling: max pooling (PyTorch tie and padding rules) and global average pooling.
#include <math.h>
#include <string.h>

#include "nn/layers.h"
#include "util/common.h"

// Index (h * W + w) of the maximum of window (p, q) for channel c of one image, or -1 when the
// window holds only padding. Strict '>' keeps the first maximum in row-major window order; a NaN
// wins and stays, as in PyTorch.
static inline int window_argmax(const float *img, int H, int W, int C, int c, int k, int stride, int pad,
                                int p, int q, float *maxval) {
    int best = -1;
    float m = -INFINITY;
    for (int r = 0; r < k; r++) {
        const int h = p * stride - pad + r;
        if (h < 0 || h >= H) continue;
        for (int t = 0; t < k; t++) {
            const int w = q * stride - pad + t;
            if (w < 0 || w >= W) continue;
            const float v = img[((size_t)h * W + w) * C + c];
            if (best < 0 || v > m || (isnan(v) && !isnan(m))) {
                m = v;
                best = h * W + w;
            }
        }
    }
    *maxval = m;
    return best;
}

void maxpool_forward(float *out, const float *in, int N, int H, int W, int C, int k, int stride, int pad,
                     int P, int Q) {
#pragma omp parallel for collapse(2) schedule(static)
    for (int n = 0; n < N; n++)
        for (int p = 0; p < P; p++) {
            const float *img = in + (size_t)n * H * W * C;
            for (int q = 0; q < Q; q++) {
                float *o = out + (((size_t)n * P + p) * Q + q) * C;
                for (int c = 0; c < C; c++) {
                    float m;
                    window_argmax(img, H, W, C, c, k, stride, pad, p, q, &m);
                    o[c] = m;
                }
            }
        }
}

// Gather form: input element (h, w) looks at every window that contains it, in (p, q) order, and
// adds that window's gradient when it is the window's argmax.
void maxpool_backward(float *din, const float *dout, const float *in, int N, int H, int W, int C, int k,
                      int stride, int pad, int P, int Q) {
#pragma omp parallel for collapse(2) schedule(static)
    for (int n = 0; n < N; n++)
        for (int h = 0; h < H; h++) {
            const float *img = in + (size_t)n * H * W * C;
            // Windows p with p*stride - pad <= h <= p*stride - pad + k - 1.
            int p0 = (h + pad - k + 1 + stride - 1) / stride;
            if (h + pad - k + 1 < 0) p0 = 0;
            const int p1 = CT_MIN(P - 1, (h + pad) / stride);
            for (int w = 0; w < W; w++) {
                int q0 = (w + pad - k + 1 + stride - 1) / stride;
                if (w + pad - k + 1 < 0) q0 = 0;
                const int q1 = CT_MIN(Q - 1, (w + pad) / stride);
                float *d = din + (((size_t)n * H + h) * W + w) * C;
                for (int c = 0; c < C; c++) {
                    float g = 0.0f, m;
                    for (int p = p0; p <= p1; p++)
                        for (int q = q0; q <= q1; q++)
                            if (window_argmax(img, H, W, C, c, k, stride, pad, p, q, &m) == h * W + w)
                                g += dout[(((size_t)n * P + p) * Q + q) * C + c];
                    d[c] = g;
                }
            }
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
