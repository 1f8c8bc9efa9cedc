// GPU executor of a ResNet graph (nn/resnet.h) built on the CUDA kernels (kernels/kernels.h); the
// twin of nn/model_cpu.h, so the trainer drives either backend with the same sequence of calls:
//
//   CPU                                          GPU
//   cpu_exec_create(m)                           gpu_exec_create(m, dtype)   (uploads m's state)
//   cpu_forward[_u8](e, m, x, ...)               gpu_forward[_u8](e, m, x, ...)  (host in, host logits out)
//   cpu_backward(e, m, dlogits, grads, rdy, ctx) gpu_backward(e, m, dlogits, grads, rdy, ctx)
//   cpu_train_step(e, m, x, labels, ...)         gpu_train_step[_u8](e, m, x, labels, ...)
//   sgd_step(cfg, st, m, params, grads, lr)      gpu_sgd_step(e, m, cfg, st, lr)
//   optim_step(cfg, st, m, params, grads, lr)    gpu_optim_step(e, m, cfg, st, lr)
//
// The GPU also has a path with no CPU twin, the one the trainer takes: gpu_forward_u8_dev,
// gpu_loss_xent (and gpu_loss_kd), gpu_backward_dev keep logits, dlogits and gradients on the
// device.
//
// Notes for the trainer:
// - State lives on the device between steps. gpu_download_state(e, m, sgd) copies params, BN
//   running statistics and the momentum buffer into the HOST ResNet/SgdState (before writing a
//   checkpoint, before a CPU-side eval); gpu_upload_state does the reverse (after loading a
//   checkpoint). Checkpoints are therefore backend-neutral. num_batches_tracked (m->counts) is
//   host state that the GPU forward increments in place like the CPU one, so it needs no copy.
// - Gradients stay on the device in one flat fp32 buffer (same layout as m->params, backward
//   order): gpu_exec_grads(e). Functions taking `float *grads` (host) download them when it is
//   not NULL (tests, or a CPU all-reduce); pass NULL in the fast path.
// - Batches: gpu_prefetch_u8(e, x, N, H, W) starts copying the NEXT batch from the loader's
//   (pinned) ring on the copy stream; a following gpu_forward_u8[_dev] or gpu_train_step_u8 with
//   the same pointer and shape uses the staged copy, so the copy overlaps the current step. The
//   host buffer must stay untouched until gpu_prefetch_wait(e) has returned or a synchronising
//   call (gpu_loss_xent, gpu_train_step_u8, ...) has followed the forward that consumed it.
// - Every function below returns after its device work is complete unless it says otherwise
//   (the loss must come back to the host each step anyway); dies with a message on CUDA errors.
// - dtype CT_BF16 (default): bf16 activations and conv/linear operands, fp32 accumulation, fp32
//   master weights / momentum / BN statistics; CT_F32 for debugging (~1e-5 of the CPU backend).
#pragma once
#include <stddef.h>
#include <stdio.h>
#include <stdint.h>

#include "kernels/kernels.h"
#include "nn/ema.h"
#include "nn/exec_options.h"
#include "nn/plan.h"
#include "nn/resnet.h"  // ResNet, GradReadyFn
#include "nn/optim.h"
#include "nn/sgd.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct GpuExec GpuExec;

// 1 if a CUDA device is usable (count > 0 and the runtime initialises); never dies.
int gpu_available(void);
// Number of usable CUDA devices (0 when none or the runtime fails); never dies.
int gpu_device_count(void);
// Selects `device` (cudaSetDevice) for the calling thread; dies naming the device on failure.
void gpu_select_device(int device);

GpuExec *gpu_exec_create(const ResNet *m, CtDtype dt);
// The same under explicit execution options (nn/exec_options.h; NULL: the defaults, which
// gpu_exec_create uses): they choose the fused steps of the plan the executor walks (nn/plan.h).
GpuExec *gpu_exec_create_opts(const ResNet *m, CtDtype dt, const ExecOptions *opts);
// The plan the executor walks (owned by e): its steps in forward order.
const ExecPlan *gpu_exec_plan(const GpuExec *e);
// Calls fn(ctx, step, y, n) after each step of every forward with the step's output copied to the
// host as floats (NULL, 0 for a step whose output has no buffer), the twin of
// cpu_exec_set_step_hook; forwards then run eagerly and synchronise after every step (tests only).
void gpu_exec_set_step_hook(GpuExec *e, PlanStepHook fn, void *ctx);
void gpu_exec_free(GpuExec *e);
// Stochastic depth (OP_DROP_PATH ops): the key of the next training forward's masks
// (nn/drop_path.h drop_path_batch_key), kept until changed; the CPU's twin, cpu_exec_set_drop_path_key.
void gpu_exec_set_drop_path_key(GpuExec *e, uint64_t key);

// Host <-> device copies of the model state (params, BN running stats) and, when sgd != NULL,
// the SGD momentum buffer and step count.
void gpu_upload_state(GpuExec *e, const ResNet *m, const SgdState *sgd);
void gpu_download_state(GpuExec *e, ResNet *m, SgdState *sgd);
// Only the BN running statistics (m->n_bufs floats): back up / restore around a step that may be
// skipped (non-finite loss) without copying the parameters.
void gpu_bufs_to_host(GpuExec *e, float *bufs);
void gpu_bufs_from_host(GpuExec *e, const float *bufs);
// The same on the device, without a host round trip or a synchronisation: snapshot copies the
// statistics aside on the compute stream, rollback copies the snapshot back.
void gpu_bufs_snapshot(GpuExec *e);
void gpu_bufs_rollback(GpuExec *e);
// 1 when every device gradient of the last backward is finite (checked on the device; 4 bytes
// come back). Synchronises the compute stream.
int gpu_grads_finite(GpuExec *e);

// Forward on a host float NHWC input (already normalised) or a host uint8 NHWC batch (normalised
// on the device with mean/std of in_channels floats). Returns the logits [N, num_classes] in a
// host buffer owned by e, valid until the next forward. train as in cpu_forward.
const float *gpu_forward(GpuExec *e, ResNet *m, const float *x, int N, int H, int W, int train);
const float *gpu_forward_u8(GpuExec *e, ResNet *m, const uint8_t *x, int N, int H, int W,
                            const float *mean, const float *std, int train);
// Backward of the last training forward given host dlogits. Device gradients are overwritten;
// grads (host, may be NULL) receives a copy. ready (may be NULL) is called on the host after the
// work of each op producing parameter gradients has been ENQUEUED on gpu_exec_stream(e), with n:
// grads[0, n) are final once the stream reaches that point (record an event there to overlap an
// all-reduce).
void gpu_backward(GpuExec *e, const ResNet *m, const float *dlogits, float *grads, GradReadyFn ready,
                  void *ctx);

// The training step with the loss on the device (what train runs): no logits to the host and
// back. gpu_forward_u8_dev leaves the logits on the device (gpu_exec_logits; returns with the work
// enqueued, not done); gpu_loss_xent writes dlogits = grad_scale * d(cross-entropy) on the device
// and returns the mean loss (*correct: top-1 hits); gpu_loss_kd ADDS the distillation gradient
// (grad_scale * d(T^2 KL)) given the teacher's device logits (another executor on this GPU, its
// forward complete: gpu_exec_sync) and returns that loss; gpu_backward_dev runs the backward from
// those dlogits. The same arithmetic as nn/layers.h's softmax_xent/kd_loss. gpu_dlogits_poison
// (test hook) makes dlogits[0] NaN.
void gpu_forward_u8_dev(GpuExec *e, ResNet *m, const uint8_t *x, int N, int H, int W, const float *mean,
                        const float *std, int train);
float *gpu_exec_logits(GpuExec *e);  // device [N, num_classes] of the last forward
void gpu_exec_sync(GpuExec *e);      // waits for the compute stream
float gpu_loss_xent(GpuExec *e, const ResNet *m, const int32_t *labels, int N, float smoothing,
                    float grad_scale, int *correct);
// The same against the soft target of a Mixup/CutMix pair (nn/layers.h's softmax_xent_mix).
float gpu_loss_xent_mix(GpuExec *e, const ResNet *m, const int32_t *labels, const int32_t *labels_b, float lam,
                        int N, float smoothing, float grad_scale, int *correct);
// timm's binary cross-entropy on that soft target (nn/layers.h's bce_mix; threshold < 0: none).
float gpu_loss_bce_mix(GpuExec *e, const ResNet *m, const int32_t *labels, const int32_t *labels_b, float lam,
                       int N, float smoothing, float threshold, int sum_classes, float grad_scale, int *correct);
float gpu_loss_kd(GpuExec *e, const ResNet *m, const float *teacher_logits, int N, float temperature,
                  float grad_scale);
void gpu_dlogits_poison(GpuExec *e);
void gpu_backward_dev(GpuExec *e, const ResNet *m, GradReadyFn ready, void *ctx);

// Training forward + softmax cross-entropy (label smoothing) + backward, all on the device.
// Returns the mean loss; *correct (may be NULL) gets the top-1 hits. Labels are host int32 and
// are checked against num_classes (dies naming the batch row).
float gpu_train_step(GpuExec *e, ResNet *m, const float *x, const int32_t *labels, int N, int H, int W,
                     float smoothing, float *grads, int *correct);
float gpu_train_step_u8(GpuExec *e, ResNet *m, const uint8_t *x, const int32_t *labels, int N, int H,
                        int W, const float *mean, const float *std, float smoothing, float *grads,
                        int *correct);

// Start copying a uint8 batch on the copy stream (see the note above); returns at once.
void gpu_prefetch_u8(GpuExec *e, const uint8_t *x, int N, int H, int W);
void gpu_prefetch_wait(GpuExec *e);
// A batch prefetched from host buffer x that will not be used: waits for its copy (the buffer is
// then free to be refilled) and forgets the stage, so x coming round the ring again is copied anew.
void gpu_prefetch_cancel(GpuExec *e, const uint8_t *x);

// SGD step on the device over all params (nn/sgd.h semantics; st->steps is advanced like
// sgd_step, st->buf is NOT touched: the momentum lives on the device until gpu_download_state).
void gpu_sgd_step(GpuExec *e, const ResNet *m, const SgdConfig *cfg, SgdState *st, float lr);
// LARS (nn/lars.h), bit-identical to lars_step on the same inputs.
void gpu_lars_step(GpuExec *e, const ResNet *m, const SgdConfig *cfg, SgdState *st, float lr);

// The optimizer table's GPU step (nn/optim.h; sgd and lars through the two above), the twin of
// optim_step on the same inputs, bit for bit; the state lives on the device like SGD's momentum.
void gpu_optim_step(GpuExec *e, const ResNet *m, const OptConfig *cfg, OptState *st, float lr);
// Host <-> device copies of the optimizer's state tensors (gpu_upload_state/gpu_download_state
// move the model's state).
void gpu_upload_optim(GpuExec *e, const ResNet *m, const OptState *st);
void gpu_download_optim(GpuExec *e, const ResNet *m, OptState *st);

// EMA of the weights (the trainer's --ema; nn/ema.h): the state tensor ema[n_params + n_bufs] on the
// device beside the live state. gpu_upload_ema / gpu_download_ema copy it like the optimizer's
// tensors (the upload allocates it on first use); gpu_ema applies nn/ema.h's operation to it and
// the live buffers, enqueued on the compute stream (EMA_UPDATE after the optimizer step; EMA_SWAP
// refreshes the bf16 weight copy and waits, so an eval forward then runs the average).
void gpu_upload_ema(GpuExec *e, const float *ema);
void gpu_download_ema(GpuExec *e, float *ema);
void gpu_ema(GpuExec *e, EmaOp op, float decay);

// Pinned host memory for the loader's batch ring (LoaderConfig.alloc / .free take these as is),
// so the copy stream's transfers are truly asynchronous. Dies naming the size on failure.
void *gpu_pinned_alloc(size_t bytes, void *ctx);
void gpu_pinned_free(void *p, void *ctx);
// Page-locks an existing host range read-only (a shard's mapping: DESIGN "mmap + pin once per
// node"). Returns 0, or -1 with the CUDA error in err (the caller warns and goes on unpinned).
int gpu_pin_host(const void *p, size_t bytes, char *err, size_t errlen);
void gpu_unpin_host(const void *p);

// CUDA graphs for the training forward and backward (off by default). With graphs on, a pass
// runs eagerly the first time it meets a batch size and memory plan, is captured into a graph the
// second time and replayed after that: the same kernels with the same arguments, one launch. A
// backward given ready callbacks always runs eagerly. If a capture fails, the executor warns and
// stays eager. gpu_exec_graphs: 1 on, 0 off, -1 off since a capture failed;
// gpu_exec_graph_launches: graph replays so far.
void gpu_exec_use_graphs(GpuExec *e, int on);
int gpu_exec_graphs(const GpuExec *e);
long gpu_exec_graph_launches(const GpuExec *e);

// Per-op GPU time (for finding what to make faster): with profiling on, CUDA events are recorded
// between the ops (and between a conv's weight and data gradients) of every training forward,
// backward and SGD step, which then run eagerly (no graphs), and their gaps are summed.
// gpu_exec_profile_report prints the time per step by op kind and pass, and the `top` slowest ops.
void gpu_exec_profile(GpuExec *e, const ResNet *m, int on);
void gpu_exec_profile_report(const GpuExec *e, const ResNet *m, int top, FILE *f);

float *gpu_exec_grads(GpuExec *e);        // device [n_params]
float *gpu_exec_params(GpuExec *e);       // device [n_params]
ct_stream_t gpu_exec_stream(GpuExec *e);  // compute stream
size_t gpu_exec_device_bytes(const GpuExec *e);  // device memory held (reporting)

#ifdef __cplusplus
}
#endif
