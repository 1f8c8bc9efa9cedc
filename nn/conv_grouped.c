// CPU grouped convolution (ResNeXt's 3x3): forward, data and weight gradients.
//
// Channel block g of the input (Cg = C / groups channels, at g * Cg) feeds only output block g
// (Kg = K / groups channels, at g * Kg), through w[K, R, S, Cg] (KRSC with Cg channels). Each
// group is a small dense convolution; ResNeXt's are 3x3 with Cg = Kg = 4 (resnext50_32x4d's first
// stage) up to 64 (resnext101_64x4d's last), so a per-group GEMM would be 4 to 64 wide and the
// dense routes (Winograd, the small-map GEMM, the direct AVX-512 kernels, nn/conv.c) do not apply:
// they are built around 16+-channel vectors of one dense filter bank. Here every loop nest runs
// over all groups of one output pixel (forward), one input pixel (data gradient) or one group
// and kernel row (weight gradient), its innermost loop over the contiguous channels of a group,
// so no per-group call or packing overhead exists: the cost is the multiply-adds themselves.
// The grouped 3x3s are 5.4% of resnext50_32x4d's multiply-adds at 224 (231M of 4.26G per image;
// the 1x1s, dense, take the GEMM route), so this is where the straightforward form pays enough.
//
// Determinism: every output element is summed by one thread in a fixed (r, s, c / j) order, and
// the work is cut by the shape alone (rows, groups), so the bits do not depend on the thread count.
#include <stdlib.h>
#include <string.h>

#include "nn/conv_grouped.h"
#include "nn/layers.h"
#include "util/common.h"

// wt[g][r][s][c][j] = w[g*Kg + j][r][s][c]: the forward's inner loop then runs over a group's
// Kg outputs with contiguous weights.
static float *weights_rsck_per_group(const ConvShape *s, const float *w) {
    const int G = conv_groups(s), Kg = s->K / G, Cg = s->C / G, RS = s->R * s->S;
    float *wt = ct_alloc((size_t)s->K * RS * Cg * sizeof(float));
    for (int g = 0; g < G; g++)
        for (int j = 0; j < Kg; j++)
            for (int t = 0; t < RS; t++)
                for (int c = 0; c < Cg; c++)
                    wt[(((size_t)g * RS + t) * Cg + c) * Kg + j] = w[(((size_t)g * Kg + j) * RS + t) * Cg + c];
    return wt;
}

void conv2d_grouped_forward_ref(const ConvShape *s, float *out, const float *in, const float *w, const float *bias,
                                const float *res, int relu) {
    const int G = conv_groups(s), Kg = s->K / G, Cg = s->C / G, RS = s->R * s->S, K = s->K, C = s->C;
    float *wt = weights_rsck_per_group(s, w);
#pragma omp parallel for schedule(static)
    for (int np = 0; np < s->N * s->P; np++) {
        const int n = np / s->P, p = np % s->P;
        for (int q = 0; q < s->Q; q++) {
            const size_t o = ((size_t)np * s->Q + q) * K;
            float *restrict acc = out + o;
            memset(acc, 0, (size_t)K * sizeof(float));
            for (int r = 0; r < s->R; r++) {
                const int h = p * s->stride - s->pad + r;
                if (h < 0 || h >= s->H) continue;
                for (int t = 0; t < s->S; t++) {
                    const int x = q * s->stride - s->pad + t;
                    if (x < 0 || x >= s->W) continue;
                    const float *restrict xv = in + (((size_t)n * s->H + h) * s->W + x) * C;
                    const int tap = r * s->S + t;
                    for (int g = 0; g < G; g++) {
                        const float *restrict wg = wt + (((size_t)g * RS + tap) * Cg) * Kg;
                        float *restrict ag = acc + (size_t)g * Kg;
                        for (int c = 0; c < Cg; c++) {
                            const float v = xv[g * Cg + c];
                            const float *restrict wc = wg + (size_t)c * Kg;
#pragma omp simd
                            for (int j = 0; j < Kg; j++) ag[j] += v * wc[j];
                        }
                    }
                }
            }
            if (bias)
                for (int k = 0; k < K; k++) acc[k] += bias[k];
            if (res)
                for (int k = 0; k < K; k++) acc[k] += res[o + k];
            if (relu)
                for (int k = 0; k < K; k++) acc[k] = acc[k] > 0.0f ? acc[k] : 0.0f;
        }
    }
    free(wt);
}

// Gather form: each input pixel sums the taps that reach it, so no two threads write one element.
void conv2d_grouped_backward_data_ref(const ConvShape *s, float *din, const float *dout, const float *w) {
    const int G = conv_groups(s), Kg = s->K / G, Cg = s->C / G, K = s->K, C = s->C, st = s->stride;
#pragma omp parallel for schedule(static)
    for (int nh = 0; nh < s->N * s->H; nh++) {
        const int n = nh / s->H, h = nh % s->H;
        for (int x = 0; x < s->W; x++) {
            float *restrict acc = din + ((size_t)nh * s->W + x) * C;
            memset(acc, 0, (size_t)C * sizeof(float));
            for (int r = 0; r < s->R; r++) {
                const int ph = h + s->pad - r;
                if (ph < 0 || ph % st || ph / st >= s->P) continue;
                for (int t = 0; t < s->S; t++) {
                    const int pw = x + s->pad - t;
                    if (pw < 0 || pw % st || pw / st >= s->Q) continue;
                    const float *restrict dv = dout + (((size_t)n * s->P + ph / st) * s->Q + pw / st) * K;
                    for (int g = 0; g < G; g++) {
                        float *restrict ag = acc + (size_t)g * Cg;
                        for (int j = 0; j < Kg; j++) {
                            const int k = g * Kg + j;
                            const float d = dv[k];
                            const float *restrict wr = w + (((size_t)k * s->R + r) * s->S + t) * Cg;
#pragma omp simd
                            for (int c = 0; c < Cg; c++) ag[c] += d * wr[c];
                        }
                    }
                }
            }
        }
    }
}

// One task per (group, kernel row): it owns dw[g*Kg .. g*Kg + Kg][r][*][*] and sums it over every
// output pixel in (n, p, q) order; the task count comes from the shape alone.
void conv2d_grouped_backward_weight_ref(const ConvShape *s, float *dw, const float *dout, const float *in) {
    const int G = conv_groups(s), Kg = s->K / G, Cg = s->C / G, K = s->K, C = s->C, R = s->R, S = s->S;
#pragma omp parallel for schedule(dynamic, 1)
    for (int gr = 0; gr < G * R; gr++) {
        const int g = gr / R, r = gr % R;
        // acc[j][t][c]: this task's slice of dw, contiguous while it is summed.
        float *acc = ct_zalloc((size_t)Kg * S * Cg * sizeof(float));
        for (int n = 0; n < s->N; n++)
            for (int p = 0; p < s->P; p++) {
                const int h = p * s->stride - s->pad + r;
                if (h < 0 || h >= s->H) continue;
                for (int q = 0; q < s->Q; q++) {
                    const float *restrict dv = dout + (((size_t)n * s->P + p) * s->Q + q) * K + (size_t)g * Kg;
                    for (int t = 0; t < S; t++) {
                        const int x = q * s->stride - s->pad + t;
                        if (x < 0 || x >= s->W) continue;
                        const float *restrict xv = in + (((size_t)n * s->H + h) * s->W + x) * C + (size_t)g * Cg;
                        for (int j = 0; j < Kg; j++) {
                            const float d = dv[j];
                            float *restrict a = acc + ((size_t)j * S + t) * Cg;
#pragma omp simd
                            for (int c = 0; c < Cg; c++) a[c] += d * xv[c];
                        }
                    }
                }
            }
        for (int j = 0; j < Kg; j++)
            memcpy(dw + ((((size_t)g * Kg + j) * R + r) * S) * Cg, acc + (size_t)j * S * Cg,
                   (size_t)S * Cg * sizeof(float));
        free(acc);
    }
}

// The entry points: the AVX-512 path where it takes the shape (the same bits), else the loops above.
void conv2d_grouped_forward(const ConvShape *s, float *out, const float *in, const float *w, const float *bias,
                            const float *res, int relu) {
    if (!conv_grouped_fast_forward(s, out, in, w, bias, res, relu)) conv2d_grouped_forward_ref(s, out, in, w, bias, res, relu);
}
void conv2d_grouped_backward_data(const ConvShape *s, float *din, const float *dout, const float *w) {
    if (!conv_grouped_fast_backward_data(s, din, dout, w)) conv2d_grouped_backward_data_ref(s, din, dout, w);
}
void conv2d_grouped_backward_weight(const ConvShape *s, float *dw, const float *dout, const float *in) {
    if (!conv_grouped_fast_backward_weight(s, dw, dout, in)) conv2d_grouped_backward_weight_ref(s, dw, dout, in);
}
