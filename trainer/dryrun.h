// Look before the leap: --dry-run prints every resolved setting with where it came from (default,
// --demo, environment, recipe FILE:LINE, command line, a checkpoint's record), the global batch,
// the data set sizes, the steps per epoch, the estimated checkpoint size and the free disk, and
// exits without training or writing. Nothing needs a GPU, so recipes for 8 GPUs can be checked on
// a laptop. The same estimates give the free-space warning at the start of a run and the note on
// the default --lr at a global batch other than 256.
#pragma once
#include <stdint.h>
#include <stdio.h>

#include "trainer/config.h"

int dryrun_main(const Config *c, const ConfigGiven *given);
// Bytes of one checkpoint of the model (its settings text aside); -1 for an unknown architecture.
int64_t dryrun_checkpoint_bytes(const char *arch, int channels, int classes, int blurpool, int momentum, int ema);
// Free bytes for an unprivileged writer where dir is (or would be made); -1 when unknown.
int64_t dryrun_free_bytes(const char *dir);
// The note when the default --lr (0.1, tuned for a global batch of 256) meets another global batch.
void dryrun_lr_note(const Config *c, const ConfigGiven *given, int global_batch, FILE *f);
