// Convolutions on maps no larger than the kernel's reach (resnet18/34's last stage at 32-64 pixel
// inputs: 3x3 kernels on 2x2 and 1x1 maps): every output pixel p sees every input pixel q, through
// the tap (qy - py + pad, qx - px + pad). The im2col GEMM multiplies R*S taps per output pixel,
// most of them padding (20 of 36 on a 2x2 map); here the whole layer is one GEMM over the pixel
// pairs instead, H*W taps per output pixel, none of them zero:
//   out[n][(p, k)] = sum_(q, c) in[n][(q, c)] w[k][tap(q, p)][c]
// The (q, c) x (p, k) matrix of weights is never built: it is a block view (nn/gemm.h,
// GemmBlocks) whose block (p, q) is tap(q, p)'s slice of w, read in place while packing.
// The GEMM sums every element in a fixed order, so results do not depend on the thread count.
#include "nn/conv_small.h"

#include <stdlib.h>

#include "nn/gemm.h"
#include "util/common.h"

int conv_small_ok(const ConvShape *s) {
    if (s->stride != 1 || s->R != s->S || s->R % 2 == 0 || s->R == 1 || s->pad != (s->R - 1) / 2) return 0;
    if (s->P != s->H || s->Q != s->W) return 0;
    return s->H - 1 <= s->pad && s->W - 1 <= s->pad && s->H * s->W < s->R * s->S;
}

// off[p][q] = offset of tap(q, p)'s C channels within a KRSC filter row.
static ptrdiff_t *tap_offsets(const ConvShape *s) {
    const int HW = s->H * s->W;
    ptrdiff_t *off = ct_alloc((size_t)HW * HW * sizeof(ptrdiff_t));
    for (int p = 0; p < HW; p++)
        for (int q = 0; q < HW; q++) {
            const int r = q / s->W - p / s->W + s->pad, t = q % s->W - p % s->W + s->pad;
            off[(size_t)p * HW + q] = ((ptrdiff_t)r * s->S + t) * s->C;
        }
    return off;
}

// Rows (p, k), columns (q, c): w[k][tap(q, p)][c], contiguous along c.
static GemmView weight_view(const ConvShape *s, const float *w, const GemmBlocks *b) {
    return (GemmView){w, (ptrdiff_t)s->R * s->S * s->C, 1, NULL, 0, 0, b};
}

// Transposed, so that the weights are the A operand: out^T[(p, k)][n] = W[(p, k)][(q, c)] in^T.
// A's rows are then contiguous runs of w (packing is a copy), and B, the few images' pixels, is
// packed once and stays in cache. The K x N result is transposed into place afterwards.
void conv_small_forward(const ConvShape *s, float *out, const float *in, const float *w) {
    const int HW = s->H * s->W, N = s->N, PK = HW * s->K;
    ptrdiff_t *off = tap_offsets(s);
    const GemmBlocks blocks = {off, s->K, s->C, HW};
    const GemmView a = weight_view(s, w, &blocks);
    const GemmView b = {in, 1, (ptrdiff_t)HW * s->C, NULL, 0, 0, NULL};
    float *t = ct_alloc((size_t)PK * N * sizeof(float));
    sgemm_view(PK, N, HW * s->C, &a, &b, t, N, 0);
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++)
        for (int j = 0; j < PK; j++) out[(size_t)n * PK + j] = t[(size_t)j * N + n];
    free(t);
    free(off);
}

// din[n][(q, c)] = sum_(p, k) dout[n][(p, k)] w[k][tap(q, p)][c]: the same block view, now as B.
void conv_small_backward_data(const ConvShape *s, float *din, const float *dout, const float *w) {
    const int HW = s->H * s->W;
    ptrdiff_t *off = tap_offsets(s);
    const GemmBlocks blocks = {off, s->K, s->C, HW};
    const GemmView a = {dout, (ptrdiff_t)HW * s->K, 1, NULL, 0, 0, NULL};
    const GemmView b = weight_view(s, w, &blocks);
    sgemm_view(s->N, HW * s->C, HW * s->K, &a, &b, din, (ptrdiff_t)HW * s->C, 0);
    free(off);
}
