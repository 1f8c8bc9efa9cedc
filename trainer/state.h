// Where a run stands, and the files that carry it: checkpoints (OUT/last.ckpt, best.ckpt; saved,
// loaded with every compatibility check, resumed) and the final model.safetensors.
#pragma once
#include <stdint.h>

#include "trainer/config.h"

// The position of a run; it mirrors the checkpoint's metadata (nn/checkpoint.h).
typedef struct {
    int epoch;              // epoch in progress (0-based)
    int64_t step_in_epoch;  // batches of it done
    double best_top1;       // -1 before the first evaluation
    int best_epoch;
    int best_is_ema;        // --ema: best_top1 is the average's (best.ckpt then holds the best EMA)
    uint32_t nonfinite_total;
    // Accumulators of the epoch in progress (a resume mid-epoch reports the same train figures).
    double epoch_loss_sum;
    int64_t epoch_correct, epoch_seen;
    uint32_t epoch_bad;  // samples of this epoch whose train record failed and was skipped
} Position;

typedef struct Run Run;  // trainer/run.h

// OUT/name with the model, the optimizer's state tensors, BN statistics and position after global_step steps.
void state_save_checkpoint(Run *r, const char *name, int64_t global_step);
// Loads a checkpoint's weights into r's model (and, with restore_position, its optimizer state and
// position) after checking it fits: architecture, channels, classes, class table, sizes. Errors
// name flag (--resume, --weights) and path.
void state_load_checkpoint(Run *r, const char *flag, const char *path, int restore_position);
// The architecture recorded in a checkpoint (--resume or --weights without --arch takes it); dies
// naming flag and path.
const char *state_checkpoint_arch(const char *path, const char *flag);
// Whether a checkpoint's network has BlurPool's blurs (--blurpool); the same use and errors.
int state_checkpoint_blurpool(const char *path, const char *flag);
int state_is_checkpoint(const char *path);
// --weights: a .safetensors file (torchvision names) or a ctrain checkpoint (its weights and BN
// statistics, not its optimizer state or position). A classifier of another shape is an error that says
// to add --reset-head; with reset_head the model keeps its freshly initialised fc, with a note.
void state_load_weights(Run *r, const char *path, int reset_head);
// OUT/model.safetensors: torchvision names; its metadata holds arch, num_classes, in_channels, the
// eval preprocessing (mean, std, crop_size, val_resize) and the class table (classes, a JSON array).
void state_save_model(Run *r, char *path_out, size_t path_len);
// OUT/best.safetensors: the weights of best.ckpt (the average's when its val top-1 was the best,
// Position.best_is_ema) with model.safetensors' metadata; written with best.ckpt.
void state_save_best_model(Run *r);
