// EMA of the weights on the CPU (nn/ema.h).
#include "nn/ema.h"

void ema_update(float *ema, const float *w, size_t n, float decay) {
    const float a = 1.0f - decay;
    // -std=c11 keeps the products unfused (no FMA contraction), as the kernel writes them.
    // Threads only for large models: a resnet20's 272k floats take 0.03 ms on one core, while
    // waking a second thread on a busy machine cost 13-33 ms (docs/BENCHMARKS.md).
#pragma omp parallel for schedule(static) if (n > (1u << 22))
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
