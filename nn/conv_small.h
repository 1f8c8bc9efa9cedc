// Convolutions on maps no larger than the kernel's reach, as one GEMM over pixel pairs
// (nn/conv_small.c). conv2d_forward / conv2d_backward_data take this route when conv_small_ok.
#pragma once
#include "kernels/kernels.h"  // ConvShape

#ifdef __cplusplus
extern "C" {
#endif

// Stride 1, odd square kernel with "same" padding, and every output pixel within the kernel's
// reach of every input pixel (3x3: maps of 1x1 to 2x2), with fewer pixel pairs than taps.
int conv_small_ok(const ConvShape *s);
// Same contract as conv2d_forward / conv2d_backward_data (nn/layers.h).
void conv_small_forward(const ConvShape *s, float *out, const float *in, const float *w);
void conv_small_backward_data(const ConvShape *s, float *din, const float *dout, const float *w);

#ifdef __cplusplus
}
#endif
