// One training step and one evaluation pass of a rank. With ranks, both reduce what they count
// over all ranks, so every rank takes the same decisions.
#pragma once
#include <stdint.h>

#include "loader/loader.h"
#include "trainer/run.h"

typedef struct {
    double loss, top1, top5;
    int64_t n;  // val records counted: every record exactly once across ranks
} EvalResult;

typedef struct {
    float loss;      // mean over the global batch (NaN/inf when the step was skipped)
    int64_t correct, n;
    int skipped;     // non-finite loss or gradient on some rank: no update anywhere
    int stop;        // some rank was asked to stop (SIGINT/SIGTERM)
} StepResult;

// Forward, loss, backward (gradients averaged over ranks while it runs) and the optimizer step
// at learning rate lr. global_step counts from 1. stop_requested: this rank got a signal.
StepResult step_train(Run *r, const LoaderBatch *b, double lr, int64_t global_step, int stop_requested);
// Every val record exactly once across ranks (no padding); with ranks, rank 0's BN statistics
// (DDP's broadcast_buffers). The loss is the plain cross-entropy (no smoothing). dump: also
// write the val batches to --dump-batches.
EvalResult step_evaluate(Run *r, int dump);
