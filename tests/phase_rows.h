// The rows of an [N*H*W, C] input in the order a stride-st data gradient's phases produce them
// (kernels/kernels.h: phase (ph, pw) row-major, then image, row, column of the phase grid), each
// phase padded with -1 (no row) to whole 128-row tiles, so that the CPU twins, run on rows in this
// order, cut the tiles the GPU's fused BN backward cuts. tests/emu_conv.c (dense) and
// tests/emu_conv_grouped.c (grouped) check their tile sums on these rows.
#pragma once
#include <stddef.h>

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
