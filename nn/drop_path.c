// Stochastic depth's draws and its CPU layer (nn/drop_path.h).
#include "nn/drop_path.h"

#include "util/rng.h"

#define DROP_KEY 0xD209BA7ull

uint64_t drop_path_batch_key(uint64_t seed, int64_t epoch, uint64_t batch_key) {
    return rng_make(seed ^ DROP_KEY, (uint64_t)epoch, batch_key).key;
}

int drop_path_scales(float *s, int N, double p, uint64_t key, int block) {
    const float keep = (float)(1.0 - p);
    // torch divides the 0/1 noise (in the tensor's dtype) by the survival rate: 1 / keep in fp32.
    const float scale = keep > 0 ? 1.0f / keep : 0.0f;
    int dropped = 0;
    for (int n = 0; n < N; n++) {
        Rng r = rng_make(key, (uint64_t)block, (uint64_t)n);
        int kept = rng_uniform(&r) < keep;
        s[n] = kept ? scale : 0.0f;
        dropped += !kept;
    }
    return dropped;
}

void drop_path_apply(float *y, const float *x, const float *s, int N, size_t row) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float a = s[n];
        const float *xr = x + (size_t)n * row;
        float *yr = y + (size_t)n * row;
        for (size_t i = 0; i < row; i++) yr[i] = a * xr[i];
    }
}
