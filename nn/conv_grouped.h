// Grouped convolution's two implementations (nn/conv_grouped.c, nn/conv_grouped_avx512.c). The
// public entry points (nn/layers.h: conv2d_grouped_*) take the fast path where it applies and the
// reference loop nests otherwise; both give the same bits (docs/GROUPED.md "CPU").
#pragma once
#include "kernels/kernels.h"  // ConvShape

#ifdef __cplusplus
extern "C" {
#endif

enum { CONV_GROUPED_FWD = 0, CONV_GROUPED_DATA = 1, CONV_GROUPED_WEIGHT = 2 };

// The readable loop nests: the definition (and the GPU kernels' oracle). Same contracts as
// conv2d_grouped_forward / _backward_data / _backward_weight.
void conv2d_grouped_forward_ref(const ConvShape *s, float *out, const float *in, const float *w, const float *bias,
                                const float *res, int relu);
void conv2d_grouped_backward_data_ref(const ConvShape *s, float *din, const float *dout, const float *w);
void conv2d_grouped_backward_weight_ref(const ConvShape *s, float *dw, const float *dout, const float *in);

// The AVX-512 path: 1 when it takes pass `pass` of s on this CPU (and the GEMM kernel in use is
// "avx512": CTRAIN_GEMM=generic in the benchmarks, sgemm_set_kernel, turns it off with the rest).
int conv_grouped_fast_ok(const ConvShape *s, int pass);
// Each computes and returns 1 when conv_grouped_fast_ok, else returns 0 having touched nothing.
int conv_grouped_fast_forward(const ConvShape *s, float *out, const float *in, const float *w, const float *bias,
                              const float *res, int relu);
int conv_grouped_fast_backward_data(const ConvShape *s, float *din, const float *dout, const float *w);
int conv_grouped_fast_backward_weight(const ConvShape *s, float *dw, const float *dout, const float *in);

// "avx512" or "reference": the route conv2d_grouped_* take for pass `pass` of s (benchmarks, tests).
const char *conv_grouped_route(const ConvShape *s, int pass);

#ifdef __cplusplus
}
#endif
