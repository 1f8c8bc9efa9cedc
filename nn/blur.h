// BlurPool's low-pass filter (--blurpool; Zhang 2019, "Making Convolutional Networks Shift-Invariant
// Again", as FFCV applies it): a fixed depthwise 3x3 binomial blur, [1 2 1]^T [1 2 1] / 16, stride
// 1, zero padding 1, no parameters, run on the input of every strided convolution with at least 16
// input channels (nn/resnet.c decides where). The CPU twin of kernels/blur.cu.
//
// NHWC, out and in of the same shape [N,H,W,C]. Each output sums its in-range taps in row-major
// window order with the integer weights 1, 2, 4 and scales the sum by 1/16 once: products by 1, 2
// and 4 and the scaling are exact in float, so an FMA-contracting compiler gets the same bits, and
// kernels/blur.cu (same order) matches this function bit for bit in fp32.
//
// Backward: the blur is linear and its zero-padded "same" correlation with a symmetric kernel is
// its own adjoint, border included (a zero-padded tap of the forward is a tap the backward skips
// too), so din = blur(dout); tests/test_layers.c checks <blur(x), y> = <x, blur_backward(y)> and
// tests/test_gradcheck.c the finite differences.
#pragma once

#ifdef __cplusplus
extern "C" {
#endif

void blur3x3_forward(float *out, const float *in, int N, int H, int W, int C);
void blur3x3_backward(float *din, const float *dout, int N, int H, int W, int C);

#ifdef __cplusplus
}
#endif
