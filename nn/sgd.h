// SGD with momentum, Nesterov and weight decay, PyTorch's torch.optim.SGD formula exactly
// (dampening 0), per element:
//   d   = g + wd * p                     (wd = 0 for excluded params)
//   buf = first step ? d : momentum * buf + d
//   d   = nesterov ? d + momentum * buf : buf      (momentum > 0; else d stays g + wd*p)
//   p  -= lr * d
// The learning rate is passed per step (schedules live in the trainer).
#pragma once
#include <stddef.h>

#include "nn/resnet.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    float momentum;      // 0 disables the buffer
    float weight_decay;
    int nesterov;
    int wd_exclude_bn_bias;  // 1: no weight decay on BN weight/bias and on biases (entry.no_decay)
    int lars;                // 1: LARS (nn/lars.h) instead of SGD: same state, other update
    float lars_eta;          // LARS's trust coefficient
} SgdConfig;

typedef struct {
    size_t n;     // elements (== m->n_params)
    float *buf;   // momentum buffer [n], same layout as params/grads; owned
    long steps;   // steps taken (0: the next step initialises buf with d)
} SgdState;

void sgd_init(SgdState *st, size_t n);  // buf zeroed, steps 0
void sgd_free(SgdState *st);

// The elementwise core on one contiguous range (the GPU kernel's contract): first != 0 means the
// buffer is initialised with d instead of being decayed.
void sgd_update_range(float *p, const float *g, float *buf, size_t n, float lr, float momentum,
                      float wd, int nesterov, int first);

// One step over the params of m that train (all, or fc's with m->freeze_backbone): params[i] -= ..., using grads (same layout) and st->buf.
void sgd_step(const SgdConfig *cfg, SgdState *st, const ResNet *m, float *params, const float *grads,
              float lr);

#ifdef __cplusplus
}
#endif
