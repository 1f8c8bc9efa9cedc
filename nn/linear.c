// CPU fully connected layer, PyTorch layout: w[O, I], out = in w^T + b.
#include "nn/gemm.h"
#include "nn/layers.h"
#include "util/common.h"

void linear_forward(float *out, const float *in, const float *w, const float *b, int N, int I, int O) {
    sgemm(N, O, I, in, I, 1, w, 1, I, out, O, 0);
    if (b) {
#pragma omp parallel for schedule(static)
        for (int n = 0; n < N; n++)
            for (int o = 0; o < O; o++) out[(size_t)n * O + o] += b[o];
    }
}

void linear_backward(float *din, float *dw, float *db, const float *dout, const float *in, const float *w,
                     int N, int I, int O) {
    if (din) sgemm(N, I, O, dout, O, 1, w, I, 1, din, I, 0);     // din = dout w
    sgemm(O, I, N, dout, 1, O, in, I, 1, dw, I, 0);               // dw = dout^T in
    if (db) {
        for (int o = 0; o < O; o++) db[o] = 0.0f;
        for (int n = 0; n < N; n++)
            for (int o = 0; o < O; o++) db[o] += dout[(size_t)n * O + o];
    }
}
