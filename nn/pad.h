// Channel padding of NHWC / KRSC tensors: the CPU twins of kernels/conv_pad.cu. The GPU executor
// pads the 3-channel stem to 8 channels so that the tensor-core engines take it by 16-byte copies.
#pragma once
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

// out[r, c] = in[r, c] for c < C, 0 for C <= c < Cpad (rows x Cpad out of rows x C).
void pad_channels(float *out, const float *in, size_t rows, int C, int Cpad);
// out[r, c] = in[r, c] for c < C (rows x C out of rows x Cpad).
void unpad_channels(float *out, const float *in, size_t rows, int Cpad, int C);

#ifdef __cplusplus
}
#endif
