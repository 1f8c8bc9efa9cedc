// The optimizers as a table. Each entry names its state tensors (per parameter, shaped like it:
// the flat arrays below have ResNet.params' layout), its hyperparameters (OptConfig's fields it
// reads) and its CPU step; the GPU step of the same shape is gpu_optim_step (nn/model_cuda.h),
// and each CPU step's elementwise core is the twin of a kernel in kernels/*.cu:
//   name   state tensors           CPU core (nn/)            GPU kernel (kernels/)
//   sgd    momentum_buffer         sgd_update_range (sgd.c)  sgd_step_gpu (sgd.cu)
//   lars   momentum                lars_update (lars.c)      lars_step_gpu (lars.cu)
//   adamw  exp_avg, exp_avg_sq     adamw_update (adamw.c)    adamw_step_gpu (adamw.cu)
//   lamb   exp_avg, exp_avg_sq     lamb_update (lamb.c)      lamb_step_gpu (lamb.cu)
// The step count (torch's per-parameter 'step', the same for every parameter here) is
// OptState.steps. Checkpoints store the state tensors by these names (nn/checkpoint.h), so a
// resume can tell which optimizer wrote them.
//
// Which parameters are decayed: every one, except with wd_exclude_norm_bias (--no-wd-bn) the BN
// weights/biases and biases (entry.no_decay: exactly timm's param_groups_weight_decay filter,
// ndim <= 1). LARS always excludes them (MLPerf's skip list). For LAMB an excluded tensor also
// gets no trust ratio (timm: adaptation only where weight_decay != 0).
#pragma once
#include <stddef.h>
#include <stdint.h>

#include "kernels/kernels.h"
#include "nn/resnet.h"
#include "nn/sgd.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { OPT_SGD = 0, OPT_LARS = 1, OPT_ADAMW = 2, OPT_LAMB = 3, OPT_COUNT } OptKind;
#define OPT_MAX_STATE 2

typedef struct {
    OptKind kind;
    float momentum;          // sgd, lars (0: SGD keeps no buffer)
    float weight_decay;
    int nesterov;            // sgd
    int wd_exclude_norm_bias;  // no decay on BN parameters and biases (lars: always)
    float lars_eta;          // lars: trust coefficient
    double beta1, beta2;     // adamw, lamb (Python floats in torch/timm: derived scalars in double)
    double eps;              // adamw, lamb
    double max_grad_norm;    // lamb: the gradients are divided by max(|g| / this, 1), |g| over all (0: no clipping)
} OptConfig;

typedef struct OptState OptState;

typedef struct {
    const char *name;                       // --optimizer's word
    int n_state;                            // state tensors per parameter
    const char *state[OPT_MAX_STATE];       // their names
    int state_needs_momentum;               // the state is saved only with momentum > 0 (sgd, lars)
    int always_exclude_norm_bias;           // lars
    // The CPU step over the params of m that train; advances st->steps.
    void (*step)(const OptConfig *cfg, OptState *st, const ResNet *m, float *params, const float *grads, float lr);
} OptDesc;

struct OptState {
    OptKind kind;
    size_t n;                        // elements of each state tensor (== m->n_params)
    float *state[OPT_MAX_STATE];     // [n] each, named by the table; owned
    int64_t steps;                   // steps taken (0: none yet)
};

extern const OptDesc OPT_TABLE[OPT_COUNT];
const OptDesc *optim_desc(OptKind k);
// The entry named `name`, or NULL.
const OptDesc *optim_find(const char *name);
// "sgd, lars, adamw, lamb" (for messages).
const char *optim_names(void);
// The state tensors this configuration keeps in checkpoints (0 for SGD/LARS without momentum).
int optim_saved_state(const OptConfig *cfg);
// SGD's and LARS's hyperparameters as nn/sgd.h's struct.
SgdConfig optim_sgd_config(const OptConfig *cfg);

void optim_init(OptState *st, OptKind kind, size_t n);  // state zeroed, steps 0
void optim_free(OptState *st);
// One CPU step (the table's).
void optim_step(const OptConfig *cfg, OptState *st, const ResNet *m, float *params, const float *grads, float lr);

// Whether weight decay applies to entry e under cfg (and, for LARS and LAMB, the trust ratio).
int optim_decays(const OptConfig *cfg, const StateEntry *e);
// m's training parameter tensors as ranges, `skip` set where optim_decays is 0; returns their
// count (out may be NULL to count).
int optim_tensors(const OptConfig *cfg, const ResNet *m, CtLarsTensor *out);
// The per-element decay mask over [0, resnet_trainable(m)): 1 where decayed.
void optim_decay_mask(const OptConfig *cfg, const ResNet *m, uint8_t *mask);
// The scalars of step number `step` (counted from 1) at rate lr, computed once in double and
// rounded where torch rounds them, so both backends use the same ones.
CtAdamArgs optim_adam_args(const OptConfig *cfg, float lr, int64_t step);

// The CPU cores, twins of the kernels of the same shape (kernels.h: adamw_step_gpu, lamb_step_gpu).
// adamw_update: over [0, n) of the flat buffers, decay[i] != 0 decays element i (NULL: all).
void adamw_update(float *params, const float *grads, float *exp_avg, float *exp_avg_sq, const uint8_t *decay, size_t n,
                  const CtAdamArgs *a);
// lamb_update: over the tensors (skip: neither decayed nor adapted); norms: 3 doubles a tensor.
void lamb_update(const CtLarsTensor *t, int n_tensors, float *params, const float *grads, float *exp_avg,
                 float *exp_avg_sq, double *norms, const CtAdamArgs *a);

#ifdef __cplusplus
}
#endif
