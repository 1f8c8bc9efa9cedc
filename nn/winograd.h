// Winograd F(2x2, 3x3) convolution (nn/winograd.c): the 3x3 stride-1 pad-1 layers of a BN-folded
// network (nn/fold.h), with the same epilogue as conv2d_forward_ep, and of the CPU training step
// (nn/conv.c: forward, data gradient, weight gradient).
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
// u[16][K][C] = the filters of the data gradient's convolution (dout[N,P,Q,K] -> din[N,H,W,C]: w
// turned by 180 degrees, K and C swapped) in the Winograd domain, for conv3x3_winograd_ep with
// C and K exchanged; the bits winograd_weights gives for that flipped copy of w.
void winograd_weights_flipped(float *u, const float *w, int K, int C);
// out[N,P,Q,K] = relu?(conv(in, w) + bias[k] + res), w given as winograd_weights' u. bias and res
// may be NULL. Same bits for any thread count and batch size.
void conv3x3_winograd_ep(const ConvShape *s, float *out, const float *in, const float *u, const float *bias,
                         const float *res, int relu);
// dw[K,3,3,C] (KRSC) = the weight gradient of that convolution (no bias) from dout[N,P,Q,K] and
// in[N,H,W,C], as 16 GEMMs in the Winograd domain (any map size). Same bits for any thread count.
void conv3x3_winograd_backward_weight(const ConvShape *s, float *dw, const float *dout, const float *in);
// The same on a chosen route (tests): WG_ROUTE_AUTO picks by K C as the one above does;
// WG_ROUTE_XI splits the 16 Winograd-domain elements over threads, WG_ROUTE_GROUP fixed tile groups.
enum { WG_ROUTE_AUTO, WG_ROUTE_XI, WG_ROUTE_GROUP };
void conv3x3_winograd_backward_weight_ex(const ConvShape *s, float *dw, const float *dout, const float *in, int route);
#ifdef __cplusplus
}
#endif
