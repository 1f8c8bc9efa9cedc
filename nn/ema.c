// EMA of the weights on the CPU (nn/ema.h).
#include "nn/ema.h"

#include "util/common.h"

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

void ema_apply(EmaOp op, float decay, float *params, size_t n_params, float *bufs, size_t n_bufs, float *ema) {
    switch (op) {
    case EMA_UPDATE:
        ema_update(ema, params, n_params, decay);
        ema_update(ema + n_params, bufs, n_bufs, decay);
        return;
    case EMA_SWAP:
        ema_swap(params, ema, n_params);
        ema_swap(bufs, ema + n_params, n_bufs);
        return;
    }
    ct_die("internal: EMA op %d", (int)op);
}
