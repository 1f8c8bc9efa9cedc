// CPU convolution: forward, backward-data, backward-weight, all as GEMMs (nn/gemm.h).
//
// With NHWC activations and KRSC weights, a convolution is out[NPQ, K] = col[NPQ, RSC] w[K, RSC]^T
// where row m of col (the "im2col" matrix) holds the receptive field of output pixel m in (r, s, c)
// order. The GEMM packs col straight from the input (GemmView.conv), so col never exists; a 1x1
// stride-1 unpadded convolution is a plain GEMM on the input. Backward-data of a stride-1 conv is
// itself a forward conv (flipped kernel); strided ones go through a bounded dcol tile and col2im.
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
    // out[NPQ, K] = im2col(in)[NPQ, RSC] w^T; a pointwise conv's im2col is the input itself.
    const GemmView a = is_pointwise(s) ? (GemmView){in, s->C, 1, NULL, 0} : (GemmView){in, 0, 0, s, 0};
    const GemmView b = {w, 1, rsc, NULL, 0};
    sgemm_view((int)npq, s->K, rsc, &a, &b, out, s->K, 0);
}

void conv2d_backward_data(const ConvShape *s, float *din, const float *dout, const float *w) {
    const size_t npq = (size_t)s->N * s->P * s->Q;
    const int rsc = s->R * s->S * s->C;
    if (is_pointwise(s)) {
        sgemm((int)npq, s->C, s->K, dout, s->K, 1, w, s->C, 1, din, s->C, 0);
        return;
    }
    // The flipped-kernel route costs a weight transform (K x RSC); the col2im route a scatter
    // (NPQ x RSC). Late ResNet stages have more weights than output pixels: they take col2im.
    if (s->stride == 1 && s->R == s->S && s->pad <= s->R - 1 && npq > 4 * (size_t)s->K) {
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

// dw[K, RSC] = dout^T[K, NPQ] im2col(in)[NPQ, RSC]. The sum over NPQ is long and the output small,
// so it is cut into a fixed number of row chunks (from the shape alone), each chunk's partial dw
// computed by one thread, the partials then added in chunk order.
void conv2d_backward_weight(const ConvShape *s, float *dw, const float *dout, const float *in) {
    const size_t npq = (size_t)s->N * s->P * s->Q;
    const int rsc = s->R * s->S * s->C, K = s->K;
    const size_t nw = (size_t)K * rsc;
    int G = (int)CT_MIN((size_t)32, npq / 4096);
    while (G > 1 && (size_t)G * nw * sizeof(float) > ((size_t)16 << 20)) G--;
    const int pw = is_pointwise(s);
    if (G <= 1) {
        const GemmView a = {dout, 1, K, NULL, 0};
        const GemmView b = pw ? (GemmView){in, s->C, 1, NULL, 0} : (GemmView){in, 0, 0, s, 0};
        sgemm_view(K, rsc, (int)npq, &a, &b, dw, rsc, 0);
        return;
    }
    const size_t chunk = (npq + G - 1) / G;
    float *part = ct_alloc((size_t)G * nw * sizeof(float));
#pragma omp parallel for schedule(dynamic, 1)
    for (int g = 0; g < G; g++) {
        const size_t r0 = (size_t)g * chunk, rows = CT_MIN(chunk, npq - r0);
        const GemmView a = {dout + r0 * K, 1, K, NULL, 0};
        const GemmView b = pw ? (GemmView){in + r0 * s->C, s->C, 1, NULL, 0} : (GemmView){in, 0, 0, s, r0};
        sgemm_view(K, rsc, (int)rows, &a, &b, part + (size_t)g * nw, rsc, 0);
    }
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < nw; i++) {
        float v = part[i];
        for (int g = 1; g < G; g++) v += part[(size_t)g * nw + i];
        dw[i] = v;
    }
    free(part);
}
