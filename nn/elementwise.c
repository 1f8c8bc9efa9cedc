// CPU elementwise layers: ReLU, residual add, gradient accumulation, input normalisation, bf16 rounding.
#include <string.h>

#include "nn/layers.h"
#include "util/bf16.h"
#include "util/common.h"

void relu_forward(float *y, const float *x, size_t n) {
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) {
        const float v = x[i];
        y[i] = v > 0 ? v : 0.0f;
    }
}

// The mask is the output: y > 0 exactly where the input was positive (PyTorch's threshold_backward).
void relu_backward(float *dx, const float *dy, const float *y, size_t n) {
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) {
        const float g = dy[i];  // loaded unconditionally, so the select vectorises
        dx[i] = y[i] > 0 ? g : 0.0f;
    }
}

void add_forward(float *y, const float *a, const float *b, size_t n, int relu) {
    if (relu) {
#pragma omp parallel for schedule(static)
        for (size_t i = 0; i < n; i++) {
            const float v = a[i] + b[i];
            y[i] = v > 0 ? v : 0.0f;
        }
    } else {
#pragma omp parallel for schedule(static)
        for (size_t i = 0; i < n; i++) y[i] = a[i] + b[i];
    }
}

void add_inplace(float *y, const float *x, size_t n) {
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) y[i] += x[i];
}

void round_bf16(float *x, size_t n) {
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) x[i] = ct_round_bf16(x[i]);
}

int all_finite(const float *x, size_t n) {
    const uint32_t *u = (const uint32_t *)x;  // exponent all ones: inf or NaN
    int bad = 0;
#pragma omp parallel for schedule(static) reduction(| : bad)
    for (size_t i = 0; i < n; i++) bad |= (u[i] & 0x7f800000u) == 0x7f800000u;
    return !bad;
}

// Computed exactly as written, in float, so it matches torchvision's ToTensor + Normalize bit for bit.
void normalize_u8(float *out, const uint8_t *in, size_t pixels, int C, const float *mean, const float *std) {
#pragma omp parallel for schedule(static)
    for (size_t p = 0; p < pixels; p++)
        for (int c = 0; c < C; c++) out[p * C + c] = (in[p * C + c] / 255.0f - mean[c]) / std[c];
}
