// --ema DECAY [--ema-every K]: an exponential moving average of the weights, timm's ModelEma.
//
// What is averaged: the parameters and the BN running statistics (running_mean, running_var), with
// the same decay, as timm averages the whole state dict; num_batches_tracked is a counter, not a
// statistic, so the average keeps the plain model's. The average starts as a copy of the weights
// training starts from (the initialisation, --weights, or a --resume checkpoint that has none) and
// is updated after every K-th optimizer step (global step % K == 0; a skipped step, whose weights
// did not change, updates nothing). Per element: ema += (1 - DECAY) * (w - ema) (nn/ema.h; the GPU
// keeps the average on the device, kernels/ema.cu, the same bits). The average is one state tensor
// over the flat buffers, [n_params + n_bufs] (params, then bufs), which the backend moves with the
// optimizer's state (backend_upload/backend_download) and updates or swaps in with one operation
// (backend_ema).
//
// Evaluation reports both models; the best of the two by val top-1 is what best.ckpt's best_top1
// counts (best_is_ema says which), and model.safetensors holds the EMA weights when their last val
// top-1 is at least the plain weights' (metadata "weights": "ema" or "plain"). Checkpoints carry the
// average (nn/checkpoint.h version 2), so SIGINT + --resume continues it bit for bit. With ranks
// every rank keeps its own average: the parameters are the same on all ranks (they follow the
// same averaged gradients), the BN statistics are each rank's, like the plain model's; evaluation
// uses rank 0's, as for the plain model (DDP's broadcast_buffers).
#pragma once
#include <stdint.h>

typedef struct Run Run;  // trainer/run.h

typedef struct {
    float decay;           // 0: off
    int every;             // update every K optimizer steps
    float *state;          // the average [n_params + n_bufs] (live on the CPU; the GPU's after backend_download)
    // The last evaluation of each model: which weights model.safetensors holds.
    int evaluated;
    double last_top1, last_top1_plain;
} RunEma;

// Takes ck_params/ck_bufs (a --resume checkpoint's average, may be NULL) or the current weights as
// the start, and attaches it to the backend. Called once the model and checkpoint are loaded,
// before the backend_upload that takes it to the device.
void ema_start(Run *r, const float *ck_params, const float *ck_bufs, const char *note);
int ema_on(const Run *r);
// After a successful optimizer step global_step (counted from 1).
void ema_after_step(Run *r, int64_t global_step);
// Exchanges the live state and the average: evaluating the average is exchange, step_evaluate,
// exchange (the live weights come back bit for bit).
void ema_exchange(Run *r);
// Whether model.safetensors holds the average (its last val top-1 >= the plain weights').
int ema_model_is_best(const Run *r);
void ema_free(RunEma *e);
