// C API of the CUDA kernels: the GPU twins of nn/layers.h. Same argument order as the CPU layer,
// plus the activation dtype and a stream last. Included by plain C host code (main.c), so it uses
// no CUDA header: streams are the runtime's opaque struct pointer, bf16 values are uint16_t bits.
//
// Conventions
// - NHWC activations, KRSC conv weights, as on the CPU.
// - dtype says how activations and conv/linear operands are stored: CT_F32 (debugging, ~1e-5 of the
//   CPU reference) or CT_BF16 (default on GPU, ~1e-2). Accumulation is always fp32; master weights,
//   optimizer state and BN statistics are fp32.
// - Reductions that feed weights have a fixed order (no float atomics): bit-identical reruns.
// - The same .cu sources run on a real GPU (nvcc) and on the CPU through kernels/emu (g++).
#pragma once
#include <stddef.h>
#include <stdint.h>

#include "nn/layers.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct CUstream_st *ct_stream_t;  // == cudaStream_t
typedef enum { CT_F32 = 0, CT_BF16 = 1 } CtDtype;

// ---------------------------------------------------------------------------------------------
// Convolution and linear as implicit GEMM (kernels/conv.cu, kernels/linear.cu).
// Storage: activations (in, out, din, dout of a conv; in, din of a linear) and the weights passed
// in (`w`: the caller's dtype copy of the fp32 master weights) hold dt elements. Weight and bias
// gradients (dw, db) are ALWAYS fp32 (they feed the fp32 master weights); the linear layer's
// output (logits) and its incoming gradient dout are fp32 too (the losses take fp32 logits),
// and its bias b is fp32. Backward functions overwrite their outputs, like the CPU ones.
// Engines: a generic tiled implicit GEMM (any shape, fp32 or bf16, fp32 math) and a bf16
// tensor-core one (mma.sync) used automatically when dt is bf16, C % 8 == 0 (and K % 8 == 0 for
// the two backward passes) and the gathered pointers are 16-byte aligned.
// Determinism: no atomics; the weight gradient's reduction over N*P*Q is split in a number of
// parts fixed by the shape, partials are summed in order: bit-identical reruns on any GPU.

// Scratch (device floats) conv2d_backward_weight_gpu needs for its split partials; 0 means none
// (work may then be NULL). Depends only on the shape.
size_t conv2d_gpu_work_floats(const ConvShape *s);
void conv2d_forward_gpu(const ConvShape *s, void *out, const void *in, const void *w, CtDtype dt,
                        ct_stream_t stream);
void conv2d_backward_data_gpu(const ConvShape *s, void *din, const void *dout, const void *w,
                              CtDtype dt, ct_stream_t stream);
void conv2d_backward_weight_gpu(const ConvShape *s, float *dw, const void *dout, const void *in,
                                float *work, CtDtype dt, ct_stream_t stream);
// out[N,O] (fp32) = in[N,I] w[O,I]^T + b[O] (b fp32, may be NULL).
void linear_forward_gpu(float *out, const void *in, const void *w, const float *b, int N, int I,
                        int O, CtDtype dt, ct_stream_t stream);
// din (dt, may be NULL), dw (fp32), db (fp32, may be NULL) from dout[N,O] (fp32).
void linear_backward_gpu(void *din, float *dw, float *db, const float *dout, const void *in,
                         const void *w, int N, int I, int O, CtDtype dt, ct_stream_t stream);

// Tests and benchmarks: the same with an explicit engine. CT_CONV_TC on a shape the tensor-core
// engine cannot take is a fatal error. Returns the engine that ran.
typedef enum { CT_CONV_AUTO = 0, CT_CONV_GENERIC = 1, CT_CONV_TC = 2 } CtConvAlgo;
int conv2d_forward_gpu_ex(const ConvShape *s, void *out, const void *in, const void *w, CtDtype dt,
                          ct_stream_t stream, int algo);
int conv2d_backward_data_gpu_ex(const ConvShape *s, void *din, const void *dout, const void *w,
                                CtDtype dt, ct_stream_t stream, int algo);
int conv2d_backward_weight_gpu_ex(const ConvShape *s, float *dw, const void *dout, const void *in,
                                  float *work, CtDtype dt, ct_stream_t stream, int algo);
int linear_forward_gpu_ex(float *out, const void *in, const void *w, const float *b, int N, int I,
                          int O, CtDtype dt, ct_stream_t stream, int algo);

// ---------------------------------------------------------------------------------------------
// Batch norm, pooling, elementwise, losses, optimizer (kernels/batchnorm.cu, pool.cu,
// elementwise.cu, loss.cu, sgd.cu).
// [section owned by the other kernels]

#ifdef __cplusplus
}
#endif
