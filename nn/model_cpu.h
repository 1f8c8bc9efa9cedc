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

#include "nn/resnet.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct CpuExec CpuExec;

CpuExec *cpu_exec_create(const ResNet *m);
// The same with the execution options it takes (nn/exec_options.h: the CPU convolution routes and
// the BN + ADD fusion; o NULL or cpu_exec_create: the defaults). Copied: o need not outlive the call.
CpuExec *cpu_exec_create_ex(const ResNet *m, const ExecOptions *o);
void cpu_exec_free(CpuExec *e);

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
