// BlurPool's fixed 3x3 blur on the CPU (nn/blur.h).
#include "nn/blur.h"

#include <stddef.h>

// Integer taps of [1 2 1]^T [1 2 1]; the sum is scaled by 1/16 once.
static const float TAP[3][3] = {{1.f, 2.f, 1.f}, {2.f, 4.f, 2.f}, {1.f, 2.f, 1.f}};

void blur3x3_forward(float *out, const float *in, int N, int H, int W, int C) {
#pragma omp parallel for collapse(2) schedule(static)
    for (int n = 0; n < N; n++)
        for (int h = 0; h < H; h++)
            for (int w = 0; w < W; w++) {
                float *o = out + (((size_t)n * H + h) * W + w) * C;
                for (int c = 0; c < C; c++) o[c] = 0.f;
                for (int r = 0; r < 3; r++) {
                    int hh = h + r - 1;
                    if (hh < 0 || hh >= H) continue;
                    for (int s = 0; s < 3; s++) {
                        int ww = w + s - 1;
                        if (ww < 0 || ww >= W) continue;
                        const float *x = in + (((size_t)n * H + hh) * W + ww) * C;
                        const float t = TAP[r][s];
                        for (int c = 0; c < C; c++) o[c] += t * x[c];
                    }
                }
                for (int c = 0; c < C; c++) o[c] *= 0.0625f;
            }
}

// The adjoint: din[h,w] = sum over the outputs (h-r+1, w-s+1) that read (h,w) through tap (r,s)
// of TAP[r][s] dout; with TAP symmetric (TAP[2-r][2-s] = TAP[r][s]) that is the forward applied
// to dout. kernels/blur.cu's backward is its forward too, so the twins keep one summation order.
void blur3x3_backward(float *din, const float *dout, int N, int H, int W, int C) {
    blur3x3_forward(din, dout, N, H, W, C);
}
