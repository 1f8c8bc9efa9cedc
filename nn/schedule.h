// Learning-rate schedules, evaluated per optimizer step from the global step number alone, so a
// resumed run continues on exactly the curve it left (no schedule state to checkpoint).
//
// Every schedule starts with an optional linear warmup over warmup_epochs (may be fractional):
//   lr(t) = base_lr * (t + 1) / W                              for t < W = warmup steps
// then, with T = epochs * steps_per_epoch:
//   step:   base_lr * gamma ^ floor(epoch / step_size)          (pytorch/examples imagenet: 0.1 every 30)
//   cosine: base_lr * 0.5 * (1 + cos(pi * (t - W) / (T - W)))  to 0
//   linear: base_lr * (T - t) / (T - W)                         to 0 at step T, one past the last
//           (FFCV's "cyclic" ImageNet schedule, which interpolates [0, lr_peak_epoch, epochs] ->
//           [~0, lr, 0] per iteration; its decay equals this step for step. Its warmup starts at
//           1e-4 * lr and peaks at step W; ctrain's shared warmup peaks one step earlier.)
//   poly:   (base_lr - end_lr) * (1 - (t + 1 - W) / (T - W + 1)) ^ power + end_lr
//           (MLPerf ResNet's PolynomialDecayWithWarmup, mlcommons/training image_classification
//           lars_util.py: decay_steps = train_steps - warmup_steps + 1, end_lr 1e-4, power 2. The
//           reference counts steps from 0 with lr 0 at step 0; ctrain's step t is its step t + 1,
//           which makes both the warmup and the decay agree exactly.)
// tools/torch_train_ref.py implements step and cosine for the PyTorch comparison.
#pragma once
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { LR_STEP = 0, LR_COSINE = 1, LR_LINEAR = 2, LR_POLY = 3 } LrKind;

typedef struct {
    LrKind kind;
    double base_lr;
    int epochs;            // total epochs of the run
    int64_t steps_per_epoch;
    double warmup_epochs;  // linear warmup length, may be 0 or fractional
    int step_size;         // step: epochs between decays
    double gamma;          // step: decay factor
    double power;          // poly: exponent (MLPerf: 2)
    double end_lr;         // poly: the rate the decay approaches at step T
} LrSchedule;

// The learning rate of global step t (0-based, t = epoch * steps_per_epoch + step in epoch).
double lr_at(const LrSchedule *s, int64_t t);
// "step", "cosine", "linear" or "poly" -> kind; returns 0 on an unknown name.
int lr_kind_parse(const char *name, LrKind *out);
const char *lr_kind_name(LrKind k);
#define LR_KIND_LIST "step, cosine, linear, poly"

#ifdef __cplusplus
}
#endif
