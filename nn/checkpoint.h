// Training checkpoints (OUT/last.ckpt, OUT/best.ckpt): everything needed to continue a run bit for
// bit: the model's flat parameters and buffers (BN running statistics), the optimizer's state
// tensors by name, and where the run stands (epoch, step, seed, best val top-1). The class table
// hash and the architecture name guard against resuming onto another dataset or model.
//
// File layout, little-endian. Version 3, what the trainer writes (checkpoint_write):
//   "CTRNCKPT" | u32 3 | u32 meta bytes (= 192) | meta (has_momentum 0) | settings[settings_bytes]
//   | f32 params[n_params] | f32 buffers[n_buffers] | i64 counts[n_counts]
//   | f32 ema_params[n_params] f32 ema_buffers[n_buffers] (when has_ema)
//   | optimizer section | u32 crc32c of all before
// optimizer section: char optimizer[16] (its --optimizer word, NUL-padded) | u32 n_tensors
//   | n_tensors x { char name[32] (NUL-padded) | char dtype[4] ("F32") | u32 ndim (1..4) | u64 shape[4] }
//   | each tensor's data in that order
// The trainer's state tensors are shaped [n_params] (ResNet.params' layout), named by the
// optimizer table (nn/optim.h: momentum_buffer; momentum; exp_avg, exp_avg_sq); the step count
// is meta.opt_steps.
// Versions 1 and 2, what builds before the named state wrote (checkpoint_save[_ema] still write
// them, for tests; every version loads):
//   "CTRNCKPT" | u32 version | u32 meta bytes (= 192) | meta | settings[settings_bytes] | f32 params[n_params]
//   | f32 momentum[n_params] (when has_momentum) | f32 buffers[n_buffers] | i64 counts[n_counts]
//   | f32 ema_params[n_params] f32 ema_buffers[n_buffers] (version 2 only, has_ema)
//   | u32 crc32c of all before
// Their momentum loads as the one state tensor of the optimizer meta.optimizer names (sgd's
// momentum_buffer or lars's momentum).
// The flat arrays are ResNet.params' layout (nn/resnet.h): tensors padded to 8 elements. Files of
// builds before that padding hold the real parameter count instead (tensors back to back); the
// trainer moves them to the padded layout when it loads them (trainer/state.c). They differ only
// when the class count is not a multiple of 8.
// meta: char arch[32] | u32 num_classes | u32 in_channels | u64 class_hash | u32 epoch
//   | u32 has_momentum | i64 global_step | i64 step_in_epoch | u64 seed | f64 best_top1
//   | i32 best_epoch | u32 nonfinite_total | u64 n_params | u64 n_buffers | u64 n_counts
//   | i64 opt_steps | f64 epoch_loss_sum | i64 epoch_correct | i64 epoch_seen | u32 optimizer
//   | u32 frozen
//   | u32 has_ema | u32 ema_every | f64 ema_decay | u32 best_is_ema | u32 blurpool | u32 settings_bytes
//   | u32 epoch_bad
// (the fields after optimizer read 0 from version 1 files, whose padding is zero; blurpool sits at
// its offset, byte 180 of meta, in every version; builds from before it ignore it)
// settings: the run's resolved settings as UTF-8 JSON text (trainer/settings.h), settings_bytes of
// it at meta byte 184, right after the meta block so checkpoint_read_settings reads only the head
// of the file; 0 bytes in files from before it (builds from before it refuse a file that has it:
// the sizes no longer add up).
// Written through ct_atomic_open/commit (temp name, fsync, rename), so a crash never leaves a
// truncated file under the real name.
#pragma once
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    char arch[32];
    uint32_t num_classes;
    uint32_t in_channels;
    uint64_t class_hash;
    // Position: 'epoch' is the epoch to run next when step_in_epoch == 0, otherwise the epoch
    // in progress with step_in_epoch of its batches done (a checkpoint taken on a signal).
    uint32_t epoch;
    int64_t global_step;
    int64_t step_in_epoch;
    uint64_t seed;
    double best_top1;  // best val top-1 so far (percent), -1 when none yet
    int32_t best_epoch;
    uint32_t nonfinite_total;  // steps skipped for a non-finite loss so far
    uint64_t n_params;
    uint64_t n_buffers;  // fp32 buffers (BN running statistics)
    uint64_t n_counts;   // int64 counters (BN num_batches_tracked)
    int64_t opt_steps;   // optimizer steps taken (0: the next initialises the momentum buffer)
    // Accumulators of the epoch in progress (step_in_epoch > 0), so its train loss/top-1 come out
    // the same after a resume.
    double epoch_loss_sum;
    int64_t epoch_correct;
    int64_t epoch_seen;
    uint32_t epoch_bad;  // samples of the epoch in progress whose train record was skipped (meta byte 188)
    // Which optimizer wrote the state (CKPT_OPT_*: nn/optim.h's OptKind); in versions 1 and 2 what
    // the momentum buffer holds: 0 SGD's velocity, 1 LARS's scaled step.
    uint32_t optimizer;
    // 1: trained with --freeze-backbone (only fc's momentum is meaningful); 0 in older files.
    uint32_t frozen;
    // --ema (version 2): the settings the average was made with, and whether best_top1 was the
    // average's val top-1 (1) or the plain weights' (0).
    uint32_t has_ema;  // set by checkpoint_save_ema from its arguments
    uint32_t ema_every;
    double ema_decay;
    uint32_t best_is_ema;
    // 1: the model has BlurPool's blurs (--blurpool, ResNet.blurpool): part of the architecture.
    uint32_t blurpool;
    // The run's resolved settings (JSON text, NUL-terminated) or NULL: saved when set; on load,
    // Checkpoint.settings holds them (meta.settings points there).
    const char *settings;
} CheckpointMeta;
enum { CKPT_OPT_SGD = 0, CKPT_OPT_LARS = 1, CKPT_OPT_ADAMW = 2, CKPT_OPT_LAMB = 3 };

#define CKPT_MAX_OPT_TENSORS 4
typedef struct {
    char name[32];
    uint32_t ndim;
    uint64_t shape[4];
    float *data;  // F32, the product of shape elements
} CkptTensor;

// The optimizer section: the optimizer's name and its state tensors by name.
typedef struct {
    char optimizer[16];
    int n;
    CkptTensor t[CKPT_MAX_OPT_TENSORS];
} CkptOptim;

typedef struct {
    CheckpointMeta meta;
    float *params;    // n_params
    CkptOptim opt;    // version 3's section; versions 1 and 2: the momentum as one named tensor (or none)
    float *momentum;  // n_params: sgd's or lars's buffer (an alias of opt's tensor), NULL otherwise
    float *buffers;   // n_buffers
    int64_t *counts;  // n_counts
    float *ema_params;   // n_params, NULL when the file holds no EMA
    float *ema_buffers;  // n_buffers, likewise
    char *settings;      // the settings JSON text, NULL when the file holds none
} Checkpoint;

// Version 3 (the trainer's): opt holds the state tensors by name (n = 0: none); ema_params and
// ema_buffers may be NULL (no EMA). Dies naming the path on I/O errors.
void checkpoint_write(const char *path, const CheckpointMeta *meta, const float *params, const float *buffers,
                      const int64_t *counts, const float *ema_params, const float *ema_buffers, const CkptOptim *opt);
// Versions 1 and 2, as builds before the named state wrote them (tests make old files with them).
// momentum may be NULL (then none is stored).
void checkpoint_save(const char *path, const CheckpointMeta *meta, const float *params,
                     const float *momentum, const float *buffers, const int64_t *counts);
// The same with an EMA of the weights (ema_params [n_params], ema_buffers [n_buffers]; both NULL
// writes exactly what checkpoint_save writes).
void checkpoint_save_ema(const char *path, const CheckpointMeta *meta, const float *params, const float *momentum,
                         const float *buffers, const int64_t *counts, const float *ema_params,
                         const float *ema_buffers);
// Reads and validates (magic, version, sizes against the file size, checksum). Returns NULL on
// success, else a static error message (the caller names the path). Free with checkpoint_free.
const char *checkpoint_load(const char *path, Checkpoint *out);
void checkpoint_free(Checkpoint *c);
// Only the settings of a checkpoint (reads the file's head, not its tensors; the checksum is left
// to checkpoint_load). Returns NULL on success with *settings the JSON text (malloc'd; NULL when the
// file holds none), else a static error message.
const char *checkpoint_read_settings(const char *path, char **settings);
// The section's tensor named `name`, or NULL.
const CkptTensor *checkpoint_opt_tensor(const Checkpoint *c, const char *name);
// 1 when path starts with the checkpoint magic (so --weights can tell a checkpoint from a
// safetensors file before parsing either); 0 for any other file or one that cannot be read.
int checkpoint_is(const char *path);

#ifdef __cplusplus
}
#endif
