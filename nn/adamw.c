// AdamW for the CPU backend (nn/optim.h), torch.optim.AdamW's single-tensor step in torch 1.13's
// operation order (no amsgrad, no maximize):
//   p = p * (1 - lr wd)                          (decoupled weight decay, decayed tensors only)
//   m = m * beta1 + (1 - beta1) g                (exp_avg.mul_(beta1).add_(g, alpha=1 - beta1))
//   v = v * beta2 + ((1 - beta2) g) g            (exp_avg_sq.mul_(beta2).addcmul_(g, g, value=1 - beta2))
//   p = p + (-(lr / bc1) m) / (sqrt(v) / sqrt(bc2) + eps)   bc_i = 1 - beta_i^step
// Each operation rounded to float on its own (torch's vectorised CPU kernels fuse some of them
// into FMAs, so torch itself is within a few float ulps of this, not bit-equal); the GPU's
// kernels/adamw.cu does exactly these operations, so the two backends are bit-identical.
#include <math.h>

#include "nn/optim.h"

void adamw_update(float *params, const float *grads, float *exp_avg, float *exp_avg_sq, const uint8_t *decay, size_t n,
                  const CtAdamArgs *a) {
    const CtAdamArgs s = *a;
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) {
        float w = (!decay || decay[i]) ? params[i] * s.decay_factor : params[i];
        float g = grads[i];
        float mm = exp_avg[i] * s.beta1 + s.omb1 * g;
        float vv = exp_avg_sq[i] * s.beta2 + (s.omb2 * g) * g;
        float den = sqrtf(vv) / s.bc2_sqrt + s.eps;
        params[i] = w + (s.neg_step_size * mm) / den;
        exp_avg[i] = mm;
        exp_avg_sq[i] = vv;
    }
}
