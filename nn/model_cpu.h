// CPU executor of a ResNet graph (nn/resnet.h) built on the reference layers (nn/layers.h).
//
// Memory is planned once per (N, H, W, mode): every activation and activation-gradient slot gets
// an offset in one arena from its lifetime on the forward+backward timeline, so slots that are
// never alive together share memory. In training mode an activation is kept until the backward
// that reads it (conv/fc inputs, BN inputs, ReLU-fused outputs, maxpool inputs); BN outputs that
// feed only a residual add are dropped right after the add. A call with a smaller N reuses the
// plan; a larger N, another H x W, or training after an eval-only plan re-plans.
//
// The model's state (m->params, m->bufs, m->counts) is read and, in training forward, the BN
// running statistics and counts are updated in place (PyTorch semantics, momentum 0.1, eps 1e-5).
#pragma once
#include <stddef.h>
#include <stdint.h>

#include "nn/exec_options.h"
#include "nn/plan.h"
#include "nn/resnet.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct CpuExec CpuExec;

CpuExec *cpu_exec_create(const ResNet *m);
// The same under explicit execution options (nn/exec_options.h; NULL: the defaults, which
// cpu_exec_create uses). The executor walks the plan they give (nn/plan.h), the one the GPU
// executor made with the same options walks: the same steps, the same block tails.
CpuExec *cpu_exec_create_opts(const ResNet *m, const ExecOptions *opts);
const ExecPlan *cpu_exec_plan(const CpuExec *e);
// Calls fn(ctx, step, y, n) after each step of every forward with the step's output (n floats,
// NHWC, as stored: rounded to bf16 in bf16 mode). Tests compare it, step by step, with the GPU
// executor's (gpu_exec_set_step_hook). NULL: off.
void cpu_exec_set_step_hook(CpuExec *e, PlanStepHook fn, void *ctx);
void cpu_exec_free(CpuExec *e);
// Stochastic depth (OP_DROP_PATH ops, nn/drop_path.h): the key of the next training forward's
// masks (drop_path_batch_key), kept until changed; 0 at creation.
void cpu_exec_set_drop_path_key(CpuExec *e, uint64_t key);
// The scales the last training forward used at graph op `op` (N of them), NULL for another kind.
const float *cpu_exec_drop_path_scales(const CpuExec *e, int op);

// Forward pass on a float NHWC input x[N,H,W,in_channels] (already normalised).
// train = 1: batch statistics, running stats/counts of m updated (m->freeze_backbone: BN in eval
// mode, nothing updated, but the activations fc's backward needs are kept), activations kept for
// cpu_backward. train = 0: running statistics (eval mode), nothing kept.
// Returns the logits [N, num_classes], owned by e, valid until the next forward.
// Dies (naming the model and size) if H x W is too small for the architecture.
const float *cpu_forward(CpuExec *e, ResNet *m, const float *x, int N, int H, int W, int train);
// Same from a uint8 NHWC batch: x = (u8/255 - mean[c]) / std[c] (normalize_u8).
const float *cpu_forward_u8(CpuExec *e, ResNet *m, const uint8_t *x, int N, int H, int W,
                            const float *mean, const float *std, int train);

// The forward of one parameter-free op of the op list on N images, with the reference layers:
// OP_RELU, OP_MAXPOOL (R x R window, stride, pad), OP_ADD (y = x + x2, relu fused), OP_AVGPOOL,
// OP_BLUR; din/dout are its input and output slot shapes. Both CPU walks of the op list run these
// ops through it (this executor and the BN-folded one, nn/fold.c). 0, or -1 when kind is none of them.
int cpu_plain_op_forward(int kind, float *y, const float *x, const float *x2, int N, TensorDim din, TensorDim dout,
                         int R, int stride, int pad, int relu);

// Backward of the last training forward, given dlogits[N, num_classes]. OVERWRITES every gradient
// in grads[resnet_trainable(m)] (all of them unless m->freeze_backbone: then only fc's, and the
// rest of grads is left as it was) and zeroes the padding between tensors (nn/resnet.h) (same layout as m->params; conv gradients KRSC). If ready != NULL it is
// called after each op that produced parameter gradients with n: grads[0, n) are final from then
// on (n grows to m->n_params; see Op.grad_done and GradReadyFn in nn/resnet.h).
void cpu_backward(CpuExec *e, const ResNet *m, const float *dlogits, float *grads, GradReadyFn ready,
                  void *ctx);

// One training forward + softmax cross-entropy (label smoothing) + backward. Returns the mean
// loss; *correct (may be NULL) gets the number of top-1 hits. Gradients as cpu_backward.
float cpu_train_step(CpuExec *e, ResNet *m, const float *x, const int32_t *labels, int N, int H, int W,
                     float smoothing, float *grads, int *correct);

// bf16 mode (off by default): compute as the GPU backend's bf16 path does. fp32 arithmetic
// throughout, but every value the GPU stores in bf16 is rounded to bf16 at the same point: the
// input, every activation but the logits, every activation gradient (each contribution and each
// sum), and the conv/linear weight operands (BN parameters, weight gradients, BN statistics and
// the optimizer stay fp32). This makes the CPU the oracle for the GPU's bf16 numerics: the two
// differ only by summation order, not by where rounding happens. Takes effect at the next forward.
void cpu_exec_set_bf16(CpuExec *e, int on);
int cpu_exec_bf16(const CpuExec *e);

// Bytes of the activation arena of the current plan (memory reporting, tests).
size_t cpu_exec_arena_bytes(const CpuExec *e);

#ifdef __cplusplus
}
#endif
