// Inference executor on the CPU with batch norm folded into the convolutions (eval mode only).
//
// In eval mode a BN after a conv is a per-output-channel affine map with fixed coefficients, so
//   bn(conv(x, w)) = conv(x, w * s) + (beta - mean * s),   s = gamma / sqrt(running_var + eps)
// and the network becomes convolutions with a bias, whose residual add and ReLU are applied to
// each output tile while it is still in cache (conv2d_forward_ep). The folded weights are stored
// as the kernels read them, made once per fold: GEMM panels (conv2d_pack_weights), RSCK for the
// direct kernels, the Winograd domain for 3x3 stride-1 convs (nn/winograd.h). Nothing training
// needs is kept: activations live only until their last reader, in a few equally sized buffers
// reused in turn.
//
// The fold is a copy: the ResNet (what is trained and saved) is never modified, and a FoldNet
// does not point into it, so the ResNet may be freed after fold_create. fold_refresh recomputes
// the copy after the ResNet's weights or running statistics changed (evaluation during training).
//
// Numerics: float32 like the reference executor (nn/model_cpu.h) but not the same bits: the BN
// scale multiplies the weights before the sum instead of the sum after it, and Winograd sums
// transformed values. tests/test_fold.c holds the two executors to a tolerance, and
// tests/test_fold_torch.sh the folded logits to torchvision's in float64.
#pragma once
#include <stddef.h>
#include <stdint.h>

#include "nn/resnet.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct FoldNet FoldNet;

// Folds m's current state. NULL when the graph has a BN that does not directly follow a conv
// whose output only it reads (never the case for the ResNets of nn/resnet.h); the caller then
// keeps the reference executor.
// The 3x3 stride-1 convolutions run as Winograd F(2x2, 3x3) (nn/winograd.h) where the CPU has
// the AVX-512 kernels; fold_create_ex(m, 0) keeps them direct (comparisons, benchmarks).
FoldNet *fold_create(const ResNet *m);
FoldNet *fold_create_ex(const ResNet *m, int winograd);
// Refolds from m, which must be the network fold_create saw (same arch, channels and classes).
void fold_refresh(FoldNet *f, const ResNet *m);
// fold_refresh only when m's params or running statistics differ from the last fold's (their
// CRC-32C, a read of the state: about a tenth of a refold). Returns 1 when it refolded.
int fold_sync(FoldNet *f, const ResNet *m);
void fold_free(FoldNet *f);

// Eval forward of a float NHWC input x[N,H,W,in_channels] (already normalised). Returns the
// logits [N, num_classes], owned by f, valid until the next forward. Dies (naming the model and
// size) if H x W is too small for the architecture.
const float *fold_forward(FoldNet *f, const float *x, int N, int H, int W);
// Same from a uint8 NHWC batch: x = (u8/255 - mean[c]) / std[c] (normalize_u8).
const float *fold_forward_u8(FoldNet *f, const uint8_t *x, int N, int H, int W, const float *mean,
                             const float *std);

// Operations of the folded graph (a ResNet-50 folds into 56: 53 convs, the pools and fc) and bytes of the
// activation buffers of the current plan.
int fold_op_count(const FoldNet *f);
size_t fold_arena_bytes(const FoldNet *f);

#ifdef __cplusplus
}
#endif
