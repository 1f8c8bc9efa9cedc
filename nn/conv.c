// CPU convolution: forward, backward-data, backward-weight, all as GEMMs (nn/gemm.h).
//
// With NHWC activations and KRSC weights, a convolution is out[NPQ, K] = col[NPQ, RSC] w[K, RSC]^T
// where row m of col (the "im2col" matrix) holds the receptive field of output pixel m in (r, s, c)
// order. A 1x1 stride-1 unpadded convolution needs no col at all: the input already is [NHW, C].
// Otherwise col is built for a tile of output rows at a time, so scratch memory stays bounded
// (about TILE_BYTES) whatever the batch size.
#include <string.h>

#include "nn/gemm.h"
#include "nn/layers.h"
#include "util/common.h"

#define TILE_BYTES ((size_t)4 << 20)

ConvShape conv_shape(int N, int H, int W, int C, int K, int R, int S, int stride, int pad) {
    if (N <= 0 || H <= 0 || W <= 0 || C <= 0 || K <= 0 || R <= 0 || S <= 0 || stride <= 0 || pad < 0)
        ct_die("conv_shape: bad dimensions N=%d H=%d W=%d C=%d K=%d R=%d S=%d stride=%d pad=%d", N, H, W, C,
               K, R, S, stride, pad);
    ConvShape s = {N, H, W, C, K, R, S, stride, pad, 0, 0};
    s.P = (H + 2 * pad - R) / stride + 1;
    s.Q = (W + 2 * pad - S) / stride + 1;
    if (H + 2 * pad < R || W + 2 * pad < S)
        ct_die("conv_shape: kernel %dx%d larger than the padded input %dx%d (pad %d)", R, S, H, W, pad);
    return s;
}

static int is_pointwise(const ConvShape *s) {
    return s->R == 1 && s->S == 1 && s->stride == 1 && s->pad == 0;
}

// Rows per im2col tile: whole images when they fit in TILE_BYTES (so col2im can work per image),
// never fewer than one micro-kernel row block. Depends on the shape only, never on threads.
static size_t tile_rows(const ConvShape *s) {
    const size_t rsc = (size_t)s->R * s->S * s->C;
    const size_t pq = (size_t)s->P * s->Q, npq = pq * s->N;
    size_t maxr = TILE_BYTES / (rsc * sizeof(float));
    if (maxr < 112) maxr = 112;
    if (maxr >= npq) return npq;
    if (pq <= maxr) return (maxr / pq) * pq;
    return maxr;
}

// col[rows, RSC] = receptive fields of output rows [m0, m0 + rows); padding reads as zero.
static void im2col(const ConvShape *s, float *col, const float *in, size_t m0, size_t rows) {
    const int C = s->C, R = s->R, S = s->S;
    const size_t rsc = (size_t)R * S * C, pq = (size_t)s->P * s->Q;
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < rows; i++) {
        const size_t m = m0 + i;
        const int n = (int)(m / pq), p = (int)(m % pq) / s->Q, q = (int)(m % pq) % s->Q;
        float *dst = col + i * rsc;
        for (int r = 0; r < R; r++) {
            const int h = p * s->stride - s->pad + r;
            if (h < 0 || h >= s->H) {
                memset(dst + (size_t)r * S * C, 0, (size_t)S * C * sizeof(float));
                continue;
            }
            for (int t = 0; t < S; t++) {
                const int w = q * s->stride - s->pad + t;
                float *d = dst + ((size_t)r * S + t) * C;
                if (w < 0 || w >= s->W) memset(d, 0, (size_t)C * sizeof(float));
                else memcpy(d, in + (((size_t)n * s->H + h) * s->W + w) * C, (size_t)C * sizeof(float));
            }
        }
    }
}

// din += scatter of dcol rows [m0, m0 + rows). One thread per image, rows in increasing order, so
// every din element sums its contributions in (m, r, s) order whatever the thread count.
static void col2im_add(const ConvShape *s, float *din, const float *dcol, size_t m0, size_t rows) {
    const int C = s->C, R = s->R, S = s->S;
    const size_t rsc = (size_t)R * S * C, pq = (size_t)s->P * s->Q;
    const int n0 = (int)(m0 / pq), n1 = (int)((m0 + rows - 1) / pq);
#pragma omp parallel for schedule(static)
    for (int n = n0; n <= n1; n++) {
        size_t a = (size_t)n * pq, b = a + pq;
        if (a < m0) a = m0;
        if (b > m0 + rows) b = m0 + rows;
        for (size_t m = a; m < b; m++) {
            const int p = (int)(m % pq) / s->Q, q = (int)(m % pq) % s->Q;
            const float *src = dcol + (m - m0) * rsc;
            for (int r = 0; r < R; r++) {
                const int h = p * s->stride - s->pad + r;
                if (h < 0 || h >= s->H) continue;
                for (int t = 0; t < S; t++) {
                    const int w = q * s->stride - s->pad + t;
                    if (w < 0 || w >= s->W) continue;
                    float *d = din + (((size_t)n * s->H + h) * s->W + w) * C;
                    const float *g = src + ((size_t)r * S + t) * C;
                    for (int c = 0; c < C; c++) d[c] += g[c];
                }
            }
        }
    }
}

void conv2d_forward(const ConvShape *s, float *out, const float *in, const float *w) {
    const size_t npq = (size_t)s->N * s->P * s->Q;
    const int rsc = s->R * s->S * s->C;
    if (is_pointwise(s)) {
        sgemm((int)npq, s->K, s->C, in, s->C, 1, w, 1, s->C, out, s->K, 0);
        return;
    }
    const size_t T = tile_rows(s);
    float *col = ct_alloc(T * rsc * sizeof(float));
    for (size_t m0 = 0; m0 < npq; m0 += T) {
        const size_t rows = CT_MIN(T, npq - m0);
        im2col(s, col, in, m0, rows);
        sgemm((int)rows, s->K, rsc, col, rsc, 1, w, 1, rsc, out + m0 * s->K, s->K, 0);
    }
    free(col);
}

void conv2d_backward_data(const ConvShape *s, float *din, const float *dout, const float *w) {
    const size_t npq = (size_t)s->N * s->P * s->Q;
    const int rsc = s->R * s->S * s->C;
    if (is_pointwise(s)) {
        sgemm((int)npq, s->C, s->K, dout, s->K, 1, w, s->C, 1, din, s->C, 0);
        return;
    }
    if (s->stride == 1 && s->R == s->S && s->pad <= s->R - 1) {
        // Stride 1: the gradient is a forward convolution of dout with the kernel flipped in space
        // and its K and C swapped, padded by R-1-pad; it lands exactly on [N, H, W, C].
        const int R = s->R, S = s->S, C = s->C, K = s->K;
        float *wt = ct_alloc((size_t)rsc * K * sizeof(float));
        for (int c = 0; c < C; c++)
            for (int r = 0; r < R; r++)
                for (int t = 0; t < S; t++)
                    for (int k = 0; k < K; k++)
                        wt[(((size_t)c * R + r) * S + t) * K + k] =
                            w[(((size_t)k * R + (R - 1 - r)) * S + (S - 1 - t)) * C + c];
        ConvShape ts = conv_shape(s->N, s->P, s->Q, K, C, R, S, 1, R - 1 - s->pad);
        conv2d_forward(&ts, din, dout, wt);
        free(wt);
        return;
    }
    memset(din, 0, (size_t)s->N * s->H * s->W * s->C * sizeof(float));
    const size_t T = tile_rows(s);
    float *dcol = ct_alloc(T * rsc * sizeof(float));
    for (size_t m0 = 0; m0 < npq; m0 += T) {
        const size_t rows = CT_MIN(T, npq - m0);
        sgemm((int)rows, rsc, s->K, dout + m0 * s->K, s->K, 1, w, rsc, 1, dcol, rsc, 0);
        col2im_add(s, din, dcol, m0, rows);
    }
    free(dcol);
}

void conv2d_backward_weight(const ConvShape *s, float *dw, const float *dout, const float *in) {
    const size_t npq = (size_t)s->N * s->P * s->Q;
    const int rsc = s->R * s->S * s->C;
    if (is_pointwise(s)) {
        sgemm(s->K, s->C, (int)npq, dout, 1, s->K, in, s->C, 1, dw, s->C, 0);
        return;
    }
    const size_t T = tile_rows(s);
    float *col = ct_alloc(T * rsc * sizeof(float));
    for (size_t m0 = 0; m0 < npq; m0 += T) {
        const size_t rows = CT_MIN(T, npq - m0);
        im2col(s, col, in, m0, rows);
        sgemm(s->K, rsc, (int)rows, dout + m0 * s->K, 1, s->K, col, rsc, 1, dw, rsc, m0 > 0);
    }
    free(col);
}
