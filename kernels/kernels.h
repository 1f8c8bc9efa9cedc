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
// [section owned by the conv kernels]

// ---------------------------------------------------------------------------------------------
// Batch norm, pooling, elementwise, losses, optimizer (kernels/batchnorm.cu, pool.cu,
// elementwise.cu, loss.cu, sgd.cu).
// [section owned by the other kernels]

#ifdef __cplusplus
}
#endif
