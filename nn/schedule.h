// Learning-rate schedules, evaluated per optimizer step from the global step number alone, so a
// resumed run continues on exactly the curve it left (no schedule state to checkpoint).
//
// Both schedules start with an optional linear warmup over warmup_epochs (may be fractional):
//   lr(t) = base_lr * (t + 1) / W                              for t < W = warmup steps
// then
//   step:   base_lr * gamma ^ floor(epoch / step_size)          (pytorch/examples imagenet: 0.1 every 30)
//   cosine: base_lr * 0.5 * (1 + cos(pi * (t - W) / (T - W)))  T = epochs * steps_per_epoch
// tools/torch_train_ref.py implements the same formulas for the PyTorch comparison.
#pragma once
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { LR_STEP = 0, LR_COSINE = 1 } LrKind;

typedef struct {
    LrKind kind;
    double base_lr;
    int epochs;            // total epochs of the run
    int64_t steps_per_epoch;
    double warmup_epochs;  // linear warmup length, may be 0 or fractional
    int step_size;         // step: epochs between decays
    double gamma;          // step: decay factor
} LrSchedule;

// The learning rate of global step t (0-based, t = epoch * steps_per_epoch + step in epoch).
double lr_at(const LrSchedule *s, int64_t t);
// "step" or "cosine" -> kind; returns 0 on an unknown name.
int lr_kind_parse(const char *name, LrKind *out);
const char *lr_kind_name(LrKind k);

#ifdef __cplusplus
}
#endif
