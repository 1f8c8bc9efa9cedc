// LARS, layer-wise adaptive rate scaling (You, Gitman, Ginsburg 2017), in the form MLPerf's
// ResNet-50 uses (TensorFlow's LARSOptimizer with a skip list, NVIDIA's "sgdwfastlars"). Per
// parameter tensor w with gradient g:
//   adapted (every tensor but BN parameters and biases, entry.no_decay):
//     trust = eta * |w| / (|g| + wd * |w|)        (1 when |w| or |g| is 0; norms are L2 per tensor)
//     v     = momentum * v + lr * trust * (g + wd * w)
//   skipped (BN parameters, biases): no adaptation and no weight decay
//     v     = momentum * v + lr * g
//   then w -= v.
// The momentum buffer holds the step with the learning rate inside it, unlike torch.optim.SGD's;
// it starts at 0, so the first step is lr * trust * d like SGD's first.
#pragma once
#include <stddef.h>

#include "kernels/kernels.h"
#include "nn/resnet.h"
#include "nn/sgd.h"

#ifdef __cplusplus
extern "C" {
#endif

// Chunk j of a tensor of n elements, [*lo, *hi): the chunk order of kernels.h that every chunked
// norm follows (LARS's, LAMB's) on both backends.
static inline void lars_chunk(size_t n, int j, size_t *lo, size_t *hi) {
    size_t len = (n + CT_LARS_CHUNKS - 1) / CT_LARS_CHUNKS;
    *lo = (size_t)j * len;
    *hi = *lo + len < n ? *lo + len : n;
    if (*lo > n) *lo = n;
}
// The chunks' partial sums added in chunk order.
static inline double lars_chunks_sum(const double *c) {
    double s = 0;
    for (int j = 0; j < CT_LARS_CHUNKS; j++) s += c[j];
    return s;
}

// The trust ratio of one tensor from its norms (the rule above, exposed for tests).
double lars_trust(double w_norm, double g_norm, double eta, double wd);

// The update over tensors given as ranges of the flat buffers (the GPU kernel's contract,
// kernels.h: norms summed in CT_LARS_CHUNKS chunks, so both backends agree bit for bit).
void lars_update(const CtLarsTensor *t, int n_tensors, float *params, const float *grads, float *buf, float lr,
                 float momentum, float wd, float eta);
// m's parameter tensors as ranges, BN parameters and biases marked skip; returns their count
// (out may be NULL to count).
int lars_tensors(const ResNet *m, CtLarsTensor *out);

// One step over all params of m (cfg: momentum, weight_decay, lars_eta; nesterov is refused by
// the trainer's flags). Norms are summed in double in a fixed order: bit-reproducible.
// The GPU twin is gpu_lars_step (nn/model_cuda.h).
void lars_step(const SgdConfig *cfg, SgdState *st, const ResNet *m, float *params, const float *grads, float lr);

#ifdef __cplusplus
}
#endif
