// EMA of the weights on the CPU (nn/ema.h).
#include "nn/ema.h"

void ema_update(float *ema, const float *w, size_t n, float decay) {
    const float a = 1.0f - decay;
    // -std=c11 keeps the products unfused (no FMA contraction), as the kernel writes them.
#pragma omp parallel for schedule(static) if (n > 65536)
    for (size_t i = 0; i < n; i++) {
        float d = w[i] - ema[i];
        ema[i] = ema[i] + a * d;
    }
}

void ema_swap(float *a, float *b, size_t n) {
    for (size_t i = 0; i < n; i++) {
        float t = a[i];
        a[i] = b[i];
        b[i] = t;
    }
}
