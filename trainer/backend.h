// The one place where the CPU and the GPU differ. The trainer (step, ranks, state) drives a
// Backend through these calls; trainer/backend_cpu.c implements them with the CPU reference
// executor (nn/model_cpu.h), trainer/backend_cuda.c with the GPU executor (nn/model_cuda.h).
//
// A Backend is made for one model (a rank's replica, or a distillation teacher) and owns its
// executor and, with ranks, its gradient averager. The host ResNet holds the weights, BN
// statistics and counters between calls on the CPU; on the GPU the device copy is the live one,
// and backend_download / backend_upload move it to and from the host (checkpoints, files, the
// replica check).
#pragma once
#include <stddef.h>
#include <stdint.h>

#include "dist/comm.h"
#include "dist/net.h"
#include "loader/loader.h"
#include "loader/shard.h"
#include "nn/resnet.h"
#include "nn/ema.h"
#include "nn/exec_options.h"
#include "nn/optim.h"

typedef enum { BACKEND_CPU = 0, BACKEND_CUDA = 1 } BackendKind;

// --device auto|cpu|cuda -> the backend; dies with what to do when cuda is asked for and this
// binary has no CUDA backend or finds no GPU, or when --ranks asks for more GPUs than there are.
BackendKind backend_resolve(const char *device, int ranks);
const char *backend_name(BackendKind kind);

// Process-wide set-up for a backend, before any rank's backend exists.
// Loader batch rings: pinned host memory on the GPU (the copy stream then runs truly async).
void backend_loader_memory(BackendKind kind, LoaderConfig *lc);
// Locks a shard's mapping in RAM once per node (GPU); a warning, not an error, when refused.
void backend_pin_shard(BackendKind kind, const Shard *sh);

typedef struct Backend Backend;

// bf16: round where the GPU stores bf16 (the CPU's bf16 mode is the oracle of the GPU's).
// device: this node's GPU for the rank (ignored on the CPU). graphs: CUDA graphs (GPU only).
// eo: the execution options (config_exec_options; NULL: the defaults), copied.
Backend *backend_create(BackendKind kind, ResNet *m, int bf16, int device, int graphs, const ExecOptions *eo);
void backend_free(Backend *b);
BackendKind backend_kind(const Backend *b);
// Binds the calling thread to the backend's device (each rank's thread calls it once).
void backend_bind_thread(const Backend *b);

// The losses of one training batch, what train_step computes before the backward.
typedef struct {
    float smoothing;     // label smoothing of the cross-entropy
    float kd_alpha;      // distillation share (0 without a teacher)
    float kd_temperature;
    // The batch's Mixup/CutMix soft target (set per step from the loader batch): labels_b the
    // partners' labels (NULL: not mixed), lam the weight of the batch's own labels.
    const int32_t *labels_b;
    float lam;
    // timm's binary cross-entropy instead of the softmax cross-entropy (nn/layers.h bce_mix):
    // bce_threshold < 0: none; bce_sum: summed over classes, then averaged over rows.
    int bce;
    float bce_threshold;
    int bce_sum;
    // Stochastic depth's masks for this batch (nn/drop_path.h drop_path_batch_key; set per step).
    uint64_t drop_path_key;
} LossConfig;

// Eval or train forward of a uint8 NHWC batch (normalised by mean/std on the backend's device);
// returns host logits [N, classes], valid until the next forward.
const float *backend_forward(Backend *b, const uint8_t *x, int N, int hw, const float *mean, const float *std,
                             int train);
// Training forward, cross-entropy (and distillation from `teacher`, an eval-mode backend of the
// same kind, when not NULL); leaves d(loss)/d(logits) ready for backend_backward. Returns the
// loss (1-alpha)*ce + alpha*kd, and the top-1 hits in *correct.
float backend_train_losses(Backend *b, Backend *teacher, const uint8_t *x, const int32_t *labels, int N, int hw,
                           const float *mean, const float *std, const LossConfig *lc, int *correct);
// Test hook: makes the logits' gradient NaN, so every gradient of the step is.
void backend_poison_dlogits(Backend *b);
// Backward from the last losses; with a gradient averager attached, the average over ranks is
// formed bucket by bucket while backward runs and is complete when this returns.
void backend_backward(Backend *b);
int backend_grads_finite(Backend *b);
// One step of the optimizer table (nn/optim.h) with the averaged gradients; the state stays on the device.
void backend_optim_step(Backend *b, const OptConfig *cfg, OptState *st, float lr);

// BN running statistics and batch counters around a step that may be skipped (non-finite loss).
void backend_bn_snapshot(Backend *b);
void backend_bn_rollback(Backend *b);
// With ranks, evaluation uses rank 0's BN running statistics (DDP's broadcast_buffers).
void backend_bn_from_rank0(Backend *b, Comm *comm);

// Host <-> device: the model state, the optimizer's state tensors when opt != NULL, and the EMA's
// state tensor once attached. No-ops on the CPU.
void backend_download(Backend *b, OptState *opt);
void backend_upload(Backend *b, const OptState *opt);

// EMA of the weights (trainer/ema.h) as a state tensor over the flat buffers (nn/ema.h):
// ema[n_params + n_bufs] is host memory the caller owns, holding the average to start from. Once
// attached (before backend_upload), the upload and download carry it like the optimizer's state
// (the CPU averages into it in place). backend_ema applies nn/ema.h's operation: EMA_UPDATE
// averages the live state in (after an optimizer step), EMA_SWAP exchanges the two (evaluating
// the average is swap, evaluate, swap).
void backend_ema_attach(Backend *b, float *ema);
void backend_ema(Backend *b, EmaOp op, float decay);

// Start copying the next batch to the device while this step computes (GPU; the CPU has nothing
// to stage). backend_stages_batches says whether the loop should hold the next batch early.
int backend_stages_batches(const Backend *b);
void backend_prefetch(Backend *b, const uint8_t *x, int N, int hw);
// A prefetched batch that will not be used (the loop stopped): waits for its copy before the
// caller gives the host buffer back to the loader, and forgets it.
void backend_prefetch_cancel(Backend *b, const uint8_t *x);

// Data parallel. A group holds the process-wide transport of this node's ranks (GPU: NCCL
// communicators per --comm, or host staging; CPU: the host collectives of dist/comm.h); each
// rank's backend then attaches its averager of bucket_bytes buckets.
typedef struct BackendGroup BackendGroup;
BackendGroup *backend_group_create(BackendKind kind, const char *comm_flag, int local, int offset, int world,
                                   NodeNet *net);
void backend_attach_gradsync(Backend *b, BackendGroup *g, Comm *comm, int local_rank, size_t bucket_bytes);
int backend_gradsync_buckets(const Backend *b);
