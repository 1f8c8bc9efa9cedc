// CPU reference layers: float32, NHWC activations, KRSC convolution weights, OpenMP.
// These are the oracle for every GPU kernel (kernels/kernels.h has the twins with the same
// argument order plus a stream) and the fallback backend.
//
// Conventions
// - Activations are NHWC: element (n, h, w, c) at ((n*H + h)*W + w)*C + c.
// - Convolution weights are KRSC: (k, r, s, c) at ((k*R + r)*S + s)*C + c. Safetensors files use
//   torchvision's OIHW; nn/safetensors.c converts.
// - Backward functions OVERWRITE their outputs (dx, dw, ...), they never accumulate: in a ResNet
//   every parameter is used once, and the graph executor adds the two gradients that meet at a
//   residual junction explicitly.
// - Every reduction has a fixed order that does not depend on the thread count, so results are
//   bit-identical run to run and whatever OMP_NUM_THREADS is.
#pragma once
#include <stddef.h>
#include <stdint.h>

#include "kernels/kernels.h"  // ConvShape
#include "nn/exec_options.h"

#ifdef __cplusplus
extern "C" {
#endif

// ---------------------------------------------------------------------------------------------
// Convolution (no bias, dilation 1). ConvShape is defined in kernels/kernels.h: the GPU twins take
// it too, and kernels may not include nn/. conv_shape checks the dimensions and fills in P and Q;
// conv_shape_g the same with `groups` (C and K multiples of it). Grouped convolutions (groups > 1)
// take every entry point below but conv2d_pack_weights: each sends them to nn/conv_grouped.c
// (its own kernels; the Winograd, small-map, direct and GEMM routes are for dense convolutions).
ConvShape conv_shape(int N, int H, int W, int C, int K, int R, int S, int stride, int pad);
ConvShape conv_shape_g(int N, int H, int W, int C, int K, int R, int S, int stride, int pad, int groups);

// out[N,P,Q,K] = conv(in[N,H,W,C], w[K,R,S,C])
void conv2d_forward(const ConvShape *s, float *out, const float *in, const float *w);
// Inference form (BN folded into the weights and bias): out = relu?(conv(in, w) + bias[k] + res),
// each output tile finished while it is in cache. The weights come transposed, wt[R,S,C,K] (RSCK,
// what the kernels read, made once when folding), or with packed = 1 as conv2d_pack_weights made
// them. bias [K] and res [N,P,Q,K] may be NULL. Bit-identical to conv2d_forward (KRSC w) on its
// direct/GEMM route (conv2d_forward_ex with cpu_winograd and cpu_small off: the training step's
// Winograd and small-map routes round differently) followed by those additions in that order.
void conv2d_forward_ep(const ConvShape *s, float *out, const float *in, const float *wt, int packed,
                       const float *bias, const float *res, int relu);
// Floats of s's weights packed once into GEMM panels (the GEMM route would otherwise pack them at
// every call); 0 when s does not take them (direct kernels, no AVX-512). The batch size and the
// image size do not matter. conv2d_pack_weights packs RSCK wt into dst.
size_t conv2d_packed_weights_size(const ConvShape *s);
void conv2d_pack_weights(const ConvShape *s, float *dst, const float *wt);
// Grouped convolutions (nn/conv_grouped.c), what the entry points above call when groups > 1.
// w is KRSC with C/groups channels; bias [K] and res [N,P,Q,K] may be NULL (the inference
// epilogue, in conv2d_forward_ep's order: + bias, + res, ReLU).
void conv2d_grouped_forward(const ConvShape *s, float *out, const float *in, const float *w, const float *bias,
                            const float *res, int relu);
void conv2d_grouped_backward_data(const ConvShape *s, float *din, const float *dout, const float *w);
void conv2d_grouped_backward_weight(const ConvShape *s, float *dw, const float *dout, const float *in);
// din[N,H,W,C] = gradient wrt the input, given dout[N,P,Q,K]
void conv2d_backward_data(const ConvShape *s, float *din, const float *dout, const float *w);
// dw[K,R,S,C] = gradient wrt the weights, given dout[N,P,Q,K] and the forward input
void conv2d_backward_weight(const ConvShape *s, float *dw, const float *dout, const float *in);
// The same three on the routes o allows (ExecOptions.cpu_winograd, cpu_small: the Winograd and
// small-map routes round differently from the direct/GEMM one); the plain forms above take every
// route (o NULL).
void conv2d_forward_ex(const ConvShape *s, float *out, const float *in, const float *w, const ExecOptions *o);
void conv2d_backward_data_ex(const ConvShape *s, float *din, const float *dout, const float *w, const ExecOptions *o);
void conv2d_backward_weight_ex(const ConvShape *s, float *dw, const float *dout, const float *in,
                               const ExecOptions *o);

// ---------------------------------------------------------------------------------------------
// Batch norm over M = N*H*W rows of C channels (NHWC makes this a [M, C] matrix).
// Training mode normalises with the batch mean and biased variance, saves mean and 1/sqrt(var+eps)
// for backward, and updates the running statistics like PyTorch:
//   running_mean = (1 - momentum) * running_mean + momentum * mean
//   running_var  = (1 - momentum) * running_var  + momentum * var * M / (M - 1)   (unbiased)
// relu != 0 fuses a ReLU on the output (y = max(0, bn(x))).
void batchnorm_forward_train(float *y, float *save_mean, float *save_invstd, float *running_mean,
                             float *running_var, const float *x, const float *gamma, const float *beta,
                             int M, int C, float momentum, float eps, int relu);
void batchnorm_forward_eval(float *y, const float *x, const float *gamma, const float *beta,
                            const float *running_mean, const float *running_var, int M, int C, float eps,
                            int relu);
// Gradients of the training-mode forward. y is the forward output when relu was fused (its zeros
// mask dy), NULL otherwise. dx may alias dy.
void batchnorm_backward(float *dx, float *dgamma, float *dbeta, const float *dy, const float *x,
                        const float *y, const float *gamma, const float *save_mean,
                        const float *save_invstd, int M, int C);
// A residual block's tail in one pass: y = bn(x) + res [relu] (the BN output never stored), and
// its backward: g = dy masked by y > 0 (y NULL: no ReLU); dres = g, or dres += g when res_acc
// (the residual tensor already holds a gradient: accumulated in place); dx, dgamma, dbeta as in
// batchnorm_backward of g. dx or dres may alias dy. res == NULL / dres == NULL: plain batch norm.
void batchnorm_add_forward_train(float *y, float *save_mean, float *save_invstd, float *running_mean,
                                 float *running_var, const float *x, const float *res, const float *gamma,
                                 const float *beta, int M, int C, float momentum, float eps, int relu);
// CPU twins of the BN statistics gathered in a convolution's epilogue (kernels/conv_tc2.cu,
// conv2d_forward_stats_gpu) and of the train forward that uses them
// (batchnorm_add_forward_train_tiles_gpu). Tiles of BN_STATS_TILE_ROWS rows of the [M, C] output y:
// tiles[(t * C + c) * 2] = sum of y[r][c] over the tile's rows, [.. + 1] = sum of (y - tile mean)^2
// (here in double, rounded to float; the GPU adds in float in its own fixed order). The forward
// merges the tiles in tile order in double exactly as the GPU kernel does, then normalises like
// batchnorm_add_forward_train.
#define BN_STATS_TILE_ROWS 128
void batchnorm_tile_stats(float *tiles, const float *y, int M, int C);
void batchnorm_add_forward_train_tiles(float *y, float *save_mean, float *save_invstd, float *running_mean,
                                       float *running_var, const float *x, const float *res, const float *tiles,
                                       const float *gamma, const float *beta, int M, int C, float momentum,
                                       float eps, int relu);
// CPU twins of the BN backward reductions in a data gradient's epilogue (kernels/conv.cu,
// conv2d_backward_data_bn_gpu) and of the backward that uses them (batchnorm_backward_tiles_gpu),
// for a BN with ReLU whose output fed the convolution: g = dy where the forward's ReLU passed,
// recomputed from x with bn_affine_k's float operations ((x - mean) * (gamma * invstd) + beta > 0),
// else 0 (g may alias dy); tiles per BN_STATS_TILE_ROWS rows and channel {sum g, sum g (x - mean)}
// in float, in row order (the GPU adds in its own fixed order). The backward merges the tiles in
// tile order in double, then dx as batchnorm_add_backward does.
void batchnorm_relu_grad_tiles(float *g, float *tiles, const float *dy, const float *x, const float *gamma,
                               const float *beta, const float *mean, const float *invstd, int M, int C);
// The same for a residual block's tail y = relu(bn(x) + res) whose output y fed the convolution
// (conv2d_backward_data_tail_gpu): g = dy where y > 0, else 0; the sums as above. The residual's
// gradient is g itself.
void batchnorm_tail_grad_tiles(float *g, float *tiles, const float *dy, const float *y, const float *x,
                               const float *mean, int M, int C);
// batchnorm_backward_tiles merges `ntiles` tiles: (M + 127) / 128, or more where a strided data
// gradient cut its tiles per stride phase (conv2d_gpu_dgrad_bn_tiles).
void batchnorm_backward_tiles(float *dx, float *dgamma, float *dbeta, const float *g, const float *x,
                              const float *tiles, int ntiles, const float *gamma, const float *save_mean,
                              const float *save_invstd, int M, int C);
void batchnorm_add_forward_eval(float *y, const float *x, const float *res, const float *gamma,
                                const float *beta, const float *running_mean, const float *running_var, int M,
                                int C, float eps, int relu);
void batchnorm_add_backward(float *dx, float *dres, int res_acc, float *dgamma, float *dbeta, const float *dy,
                            const float *x, const float *y, const float *gamma, const float *save_mean,
                            const float *save_invstd, int M, int C);

// ---------------------------------------------------------------------------------------------
// Elementwise.
void relu_forward(float *y, const float *x, size_t n);
void relu_backward(float *dx, const float *dy, const float *y, size_t n);  // dx may alias dy
// y = a + b, optionally followed by a ReLU (the residual junction of a block).
void add_forward(float *y, const float *a, const float *b, size_t n, int relu);
void add_inplace(float *y, const float *x, size_t n);  // y += x (gradient accumulation)
// x = bfloat16(x) in place, round to nearest even, NaN kept NaN: what a store to a bf16 tensor on
// the GPU does (__float2bfloat16_rn). The CPU executor's bf16 mode calls it where the GPU's bf16
// path stores activations, activation gradients and conv/linear weight operands.
void round_bf16(float *x, size_t n);
// 1 when no element of x is inf or NaN (the trainer's check before an optimizer step).
int all_finite(const float *x, size_t n);

// ---------------------------------------------------------------------------------------------
// Max pooling, square window k, stride, pad (ResNet: 3, 2, 1). Padding never wins (acts as -inf).
// Ties go to the first element in window order (row-major), like PyTorch.
void maxpool_forward(float *out, const float *in, int N, int H, int W, int C, int k, int stride,
                     int pad, int P, int Q);
// Gather form: each input element sums the gradients of the windows whose maximum it is.
void maxpool_backward(float *din, const float *dout, const float *in, int N, int H, int W, int C,
                      int k, int stride, int pad, int P, int Q);

// Global average pool: out[N,C] = mean over H*W of in[N,H,W,C].
void avgpool_forward(float *out, const float *in, int N, int HW, int C);
void avgpool_backward(float *din, const float *dout, int N, int HW, int C);

// ---------------------------------------------------------------------------------------------
// Linear: out[N,O] = in[N,I] w[O,I]^T + b[O] (PyTorch layout). b may be NULL.
void linear_forward(float *out, const float *in, const float *w, const float *b, int N, int I, int O);
// din may be NULL (not needed); db may be NULL when there is no bias.
void linear_backward(float *din, float *dw, float *db, const float *dout, const float *in,
                     const float *w, int N, int I, int O);

// Input: uint8 NHWC batch -> float, out = (in / 255 - mean[c]) / std[c].
void normalize_u8(float *out, const uint8_t *in, size_t pixels, int C, const float *mean,
                  const float *std);

// ---------------------------------------------------------------------------------------------
// Losses. logits[N,K]. Both return the mean loss over the batch and write its gradient, scaled by
// grad_scale, into dlogits (softmax_xent overwrites, kd_loss accumulates).
// Cross-entropy with label smoothing eps (PyTorch's definition: target = (1-eps)*onehot + eps/K).
// correct (may be NULL) receives the number of argmax hits; probs are not kept.
float softmax_xent(float *dlogits, const float *logits, const int32_t *labels, int N, int K,
                   float smoothing, float grad_scale, int *correct);
// The same against the soft target of a mixed pair (Mixup/CutMix): lam * s(labels) +
// (1 - lam) * s(labels_b), s(y) the smoothed one-hot; lam in [0, 1]. A hit is a row whose
// argmax is the dominant label (labels when lam >= 0.5, else labels_b).
float softmax_xent_mix(float *dlogits, const float *logits, const int32_t *labels, const int32_t *labels_b,
                       float lam, int N, int K, float smoothing, float grad_scale, int *correct);
// timm's BinaryCrossEntropy on the same target t = lam * s(labels) + (1 - lam) * s(labels_b)
// (timm's mixup_target: s(y) = eps/K + (1 - eps) onehot(y)): with threshold >= 0 each t_k becomes
// 1 when t_k > threshold, else 0 (timm's target_threshold; < 0: none); the loss is
// F.binary_cross_entropy_with_logits, the mean over rows and classes, or with sum_classes the
// mean over rows of the sum over classes (timm's sum_classes). Hits as softmax_xent_mix.
float bce_mix(float *dlogits, const float *logits, const int32_t *labels, const int32_t *labels_b, float lam,
              int N, int K, float smoothing, float threshold, int sum_classes, float grad_scale, int *correct);
// Hinton distillation: T^2 * KL(softmax(teacher/T) || softmax(student/T)), mean over the batch.
float kd_loss(float *dlogits, const float *logits, const float *teacher_logits, int N, int K,
              float temperature, float grad_scale);
// Top-k hits: number of rows whose label is among the k largest logits (ties count as hits only
// if strictly fewer than k logits exceed the label's).
int topk_correct(const float *logits, const int32_t *labels, int N, int K, int k);

#ifdef __cplusplus
}
#endif
