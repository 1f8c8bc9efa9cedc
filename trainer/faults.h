// Test hooks and debugging dumps. Faults are injected only through CTRAIN_FAULT_* variables, so
// the end-to-end tests can show that each failure is survived or reported:
//   CTRAIN_FAULT_NAN_STEPS="a,b,c-d"   these global steps report a NaN loss
//   CTRAIN_FAULT_NAN_GRAD_STEPS="..."  these steps get a NaN gradient (a finite loss)
//   CTRAIN_FAULT_STALL="RANK:STEP"     that rank stops responding before that step (the others
//                                      must end the run within --timeout, naming it)
//   CTRAIN_FAULT_DIVERGE=RANK          that rank's replica starts with one weight changed (the
//                                      replica check must catch it)
//   CTRAIN_FAULT_LOADER_DELAY_MS=n     (trainer/data.c) every loader worker sleeps n ms a chunk
// --dump-batches DIR writes the initial weights and every batch for tools/torch_train_ref.py.
#pragma once
#include <stdint.h>
#include <stdio.h>

#include "loader/loader.h"
#include "nn/resnet.h"

typedef struct {
    int64_t lo[16], hi[16];
    int n;
} StepSet;

typedef struct {
    StepSet nan_loss, nan_grad;
    int stall_rank;  // -1: none
    int64_t stall_step;
    FILE *dump_train;  // --dump-batches: this rank's training batches, else NULL
} Faults;

// Reads the CTRAIN_FAULT_* variables for `rank` of `world`; applies CTRAIN_FAULT_DIVERGE to m.
void faults_init(Faults *f, int rank, int world, ResNet *m);
int faults_step_in(const StepSet *set, int64_t step);
// Blocks forever when this rank is the one to stall at `step` (a hung peer).
void faults_maybe_stall(const Faults *f, int rank, int64_t step);

// --dump-batches: DIR/NAME.bin, or DIR/NAME.rankK.bin for each rank of a data-parallel run.
FILE *dump_open(const char *dir, const char *name, int rank, int world);
//   per batch: "BTC2" | i32 n, h, w, c | i32 epoch | i64 global step | f32 lr | f32 lam | i32 labels[n]
//   | i32 labels_b[n] | u8 pixels[n*h*w*c]; lam and labels_b: the Mixup/CutMix soft target
//   lam * y(labels) + (1 - lam) * y(labels_b) (lam 1, labels_b = labels: not mixed); the pixels are
//   the batch as the model saw it (cropped, augmented, erased, mixed), before normalisation.
void dump_batch(FILE *f, const char *dir, const LoaderBatch *b, int hw, int c, int epoch, int64_t step, float lr);
void dump_close(FILE *f, const char *dir);
