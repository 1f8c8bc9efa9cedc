// Winograd F(2x2, 3x3) convolution for inference (nn/winograd.c): the 3x3 stride-1 pad-1 layers
// of a BN-folded network (nn/fold.h), with the same epilogue as conv2d_forward_ep.
#pragma once
#include "nn/layers.h"

#ifdef __cplusplus
extern "C" {
#endif

// 1 when conv3x3_winograd_ep handles s: 3x3, stride 1, pad 1, C a multiple of 16, K of 32, and
// the AVX-512 kernels in use (sgemm_kernel_name).
int winograd_ok(const ConvShape *s);
// The same with K a multiple of 16 only (what conv3x3_winograd_ep accepts; the 16-channel
// remainder block is slower per flop, so the folded executor keeps to winograd_ok).
int winograd_ok_k16(const ConvShape *s);
// u[16][C][K] = the filters w[K,3,3,C] (KRSC) in the Winograd domain (G g G^T, in double).
void winograd_weights(float *u, const float *w, int K, int C);
// out[N,P,Q,K] = relu?(conv(in, w) + bias[k] + res), w given as winograd_weights' u. bias and res
// may be NULL. Same bits for any thread count and batch size.
void conv3x3_winograd_ep(const ConvShape *s, float *out, const float *in, const float *u, const float *bias,
                         const float *res, int relu);
#ifdef __cplusplus
}
#endif
