// Channel padding for the tensor-core convolution engines. A bf16 operand travels by 16-byte
// cp.async only when its channel count is a multiple of 8; the 3-channel stem is not, and its
// element-gathered path costs ~67 instructions per mma (docs/BENCHMARKS.md). The executor pads
// the stem's input and weights to 8 channels (the extra channels zero, so the products they add
// are exact zeros) and takes the weight gradient's first C channels back out.
// CPU twins: nn/pad.c.
#include "kernels/common.cuh"
#include "kernels/act.cuh"  // ct_ld, ct_st, CT_DISPATCH, ct_grid_for
#include "kernels/kernels.h"
#include "util/common.h"

#define PAD_THREADS 256

template <typename T>
__global__ void pad_channels_k(T *out, const T *in, size_t rows, int C, int Cpad) {
    size_t n = rows * (size_t)Cpad;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        size_t r = i / Cpad;
        int c = (int)(i - r * Cpad);
        ct_st(out, i, c < C ? ct_ld(in, r * C + c) : 0.f);
    }
}

__global__ void unpad_channels_k(float *out, const float *in, size_t rows, int Cpad, int C) {
    size_t n = rows * (size_t)C;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        size_t r = i / C;
        int c = (int)(i - r * C);
        ct_st(out, i, ct_ld(in, r * Cpad + c));
    }
}

extern "C" void conv_pad_channels_gpu(void *out, const void *in, size_t rows, int C, int Cpad, CtDtype dt,
                                      ct_stream_t st) {
    if (C > Cpad) ct_die("conv_pad_channels_gpu: %d channels do not fit in %d", C, Cpad);
    size_t n = rows * (size_t)Cpad;
    if (!n) return;
    CT_DISPATCH(dt, T, CT_LAUNCH(pad_channels_k<T>, ct_grid_for(n, PAD_THREADS), PAD_THREADS, 0, (cudaStream_t)st,
                                 (T *)out, (const T *)in, rows, C, Cpad));
    CT_CHECK_LAUNCH("conv_pad_channels_gpu");
}

extern "C" void conv_unpad_channels_gpu(float *out, const float *in, size_t rows, int Cpad, int C, ct_stream_t st) {
    if (C > Cpad) ct_die("conv_unpad_channels_gpu: %d channels do not fit in %d", C, Cpad);
    size_t n = rows * (size_t)C;
    if (!n) return;
    CT_LAUNCH(unpad_channels_k, ct_grid_for(n, PAD_THREADS), PAD_THREADS, 0, (cudaStream_t)st, out, in, rows, Cpad, C);
    CT_CHECK_LAUNCH("conv_unpad_channels_gpu");
}
