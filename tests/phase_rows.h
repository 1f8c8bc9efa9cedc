// The rows of an [N*H*W, C] input in the order a stride-st data gradient's phases produce them
// (kernels/kernels.h: phase (ph, pw) row-major, then image, row, column of the phase grid), each
// phase padded with -1 (no row) to whole 128-row tiles, so that the CPU twins, run on rows in this
// order, cut the tiles the GPU's fused BN backward cuts. tests/emu_conv.c (dense) and
// tests/emu_conv_grouped.c (grouped) check their tile sums on these rows.
#pragma once
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "nn/layers.h"
#include "util/common.h"

// Fills order (room for N*H*W + st*st*127 entries) and returns the padded length.
static inline int phase_rows(int *order, int N, int H, int W, int st) {
    int k = 0;
    for (int ph = 0; ph < st; ph++)
        for (int pw = 0; pw < st; pw++) {
            int k0 = k;
            for (int n = 0; n < N; n++)
                for (int h = ph; h < H; h += st)
                    for (int w = pw; w < W; w += st) order[k++] = (n * H + h) * W + w;
            while ((k - k0) % 128) order[k++] = -1;
        }
    return k;
}
// a's rows in that order, -1 rows zero (ct_alloc'd; 4 bytes more so that n * C = 0 allocates).
static inline float *rows_gather(const float *a, const int *order, int n, int C) {
    float *b = (float *)ct_alloc((size_t)n * C * 4 + 4);
    for (int i = 0; i < n; i++)
        for (int c = 0; c < C; c++) b[(size_t)i * C + c] = order[i] < 0 ? 0.f : a[(size_t)order[i] * C + c];
    return b;
}

// The CPU twins of the fused BN backward run on those rows: batchnorm_relu_grad_tiles (the mask
// recomputed from x), or batchnorm_tail_grad_tiles (the mask y > 0) when tail. Writes their tiles
// to tref and their masked gradient, back in input order, to gref (N*H*W rows). The phase-ordered
// rows stay in the result for further checks: order (np entries, -1 = padding), x and the masked
// gradient (np x C each); phase_twin_free releases them.
typedef struct {
    int *order, np;
    float *px, *pg;
} PhaseTwin;
static inline PhaseTwin phase_bn_twin(float *gref, float *tref, const float *plain, const float *x, const float *y,
                                      const float *gamma, const float *beta, const float *mean, const float *invstd,
                                      int tail, int N, int H, int W, int st, int C) {
    PhaseTwin t;
    t.order = (int *)ct_alloc(((size_t)N * H * W + (size_t)st * st * 127) * sizeof(int));
    t.np = phase_rows(t.order, N, H, W, st);
    float *pp = rows_gather(plain, t.order, t.np, C), *py = rows_gather(y, t.order, t.np, C);
    t.px = rows_gather(x, t.order, t.np, C);
    t.pg = (float *)ct_alloc((size_t)t.np * C * 4 + 4);
    if (tail) batchnorm_tail_grad_tiles(t.pg, tref, pp, py, t.px, mean, t.np, C);
    else batchnorm_relu_grad_tiles(t.pg, tref, pp, t.px, gamma, beta, mean, invstd, t.np, C);
    for (int i = 0; i < t.np; i++)
        if (t.order[i] >= 0) memcpy(gref + (size_t)t.order[i] * C, t.pg + (size_t)i * C, (size_t)C * 4);
    free(pp), free(py);
    return t;
}
static inline void phase_twin_free(PhaseTwin *t) { free(t->order), free(t->px), free(t->pg); }
