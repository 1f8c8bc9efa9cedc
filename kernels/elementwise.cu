// Elementwise GPU kernels: ReLU, the residual junction (add, add + ReLU, in-place gradient
// accumulation), uint8 NHWC -> normalised activation, and fp32 <-> bf16 conversion.
// Grid-stride loops; each element is computed independently, so any alias of an input with the
// output that the API allows (dx = dy, y = a) is safe.
#include "kernels/common.cuh"
#include "kernels/act.cuh"
#include "kernels/kernels.h"

#define EW_THREADS 256
#define GRID_STRIDE(i, n) \
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (n); i += (size_t)gridDim.x * blockDim.x)

template <typename T>
__global__ void relu_fwd_k(T *y, const T *x, size_t n) {
    GRID_STRIDE(i, n) {
        float v = ct_ld(x, i);
        ct_st(y, i, v > 0.f ? v : 0.f);
    }
}
template <typename T>
__global__ void relu_bwd_k(T *dx, const T *dy, const T *y, size_t n) {
    GRID_STRIDE(i, n) { ct_st(dx, i, ct_ld(y, i) > 0.f ? ct_ld(dy, i) : 0.f); }
}
template <typename T>
__global__ void add_k(T *y, const T *a, const T *b, size_t n, int relu) {
    GRID_STRIDE(i, n) {
        float v = ct_ld(a, i) + ct_ld(b, i);
        if (relu && !(v > 0.f)) v = 0.f;
        ct_st(y, i, v);
    }
}
template <typename T>
__global__ void add_inplace_k(T *y, const T *x, size_t n) {
    GRID_STRIDE(i, n) { ct_st(y, i, ct_ld(y, i) + ct_ld(x, i)); }
}
template <typename T>
__global__ void normalize_u8_k(T *out, const uint8_t *in, size_t n, int C, const float *mean,
                               const float *std) {
    GRID_STRIDE(i, n) {
        int c = (int)(i % C);
        // Same operation order as the CPU reference: in / 255, minus mean, divided by std.
        ct_st(out, i, ((float)in[i] / 255.0f - mean[c]) / std[c]);
    }
}
template <typename TO, typename TI>
__global__ void convert_k(TO *out, const TI *in, size_t n) {
    GRID_STRIDE(i, n) { ct_st(out, i, ct_ld(in, i)); }
}

__global__ void any_nonfinite_k(const float *x, size_t n, int *flag) {
    int bad = 0;
    GRID_STRIDE(i, n) bad |= (__float_as_uint(x[i]) & 0x7f800000u) == 0x7f800000u;
    // One store per warp that saw one; the flag only goes 0 -> 1, so racing stores agree.
    if (__any_sync(0xffffffffu, bad) && (threadIdx.x & 31) == 0) *flag = 1;
}

extern "C" void relu_forward_gpu(void *y, const void *x, size_t n, CtDtype dt, ct_stream_t stream) {
    if (!n) return;
    CT_DISPATCH(dt, T, CT_LAUNCH(relu_fwd_k<T>, ct_grid_for(n, EW_THREADS), EW_THREADS, 0, stream,
                                 (T *)y, (const T *)x, n));
    CT_CHECK_LAUNCH("relu_forward_gpu");
}
extern "C" void relu_backward_gpu(void *dx, const void *dy, const void *y, size_t n, CtDtype dt,
                                  ct_stream_t stream) {
    if (!n) return;
    CT_DISPATCH(dt, T, CT_LAUNCH(relu_bwd_k<T>, ct_grid_for(n, EW_THREADS), EW_THREADS, 0, stream,
                                 (T *)dx, (const T *)dy, (const T *)y, n));
    CT_CHECK_LAUNCH("relu_backward_gpu");
}
extern "C" void add_forward_gpu(void *y, const void *a, const void *b, size_t n, int relu, CtDtype dt,
                                ct_stream_t stream) {
    if (!n) return;
    CT_DISPATCH(dt, T, CT_LAUNCH(add_k<T>, ct_grid_for(n, EW_THREADS), EW_THREADS, 0, stream, (T *)y,
                                 (const T *)a, (const T *)b, n, relu));
    CT_CHECK_LAUNCH("add_forward_gpu");
}
extern "C" void add_inplace_gpu(void *y, const void *x, size_t n, CtDtype dt, ct_stream_t stream) {
    if (!n) return;
    CT_DISPATCH(dt, T, CT_LAUNCH(add_inplace_k<T>, ct_grid_for(n, EW_THREADS), EW_THREADS, 0, stream,
                                 (T *)y, (const T *)x, n));
    CT_CHECK_LAUNCH("add_inplace_gpu");
}
extern "C" void normalize_u8_gpu(void *out, const uint8_t *in, size_t pixels, int C, const float *mean,
                                 const float *std, CtDtype dt, ct_stream_t stream) {
    size_t n = pixels * (size_t)C;
    if (!n) return;
    CT_DISPATCH(dt, T, CT_LAUNCH(normalize_u8_k<T>, ct_grid_for(n, EW_THREADS), EW_THREADS, 0, stream,
                                 (T *)out, in, n, C, mean, std));
    CT_CHECK_LAUNCH("normalize_u8_gpu");
}
extern "C" void any_nonfinite_gpu(const float *x, size_t n, int *flag, ct_stream_t stream) {
    if (!n) return;
    CT_LAUNCH(any_nonfinite_k, ct_grid_for(n, EW_THREADS), EW_THREADS, 0, stream, x, n, flag);
    CT_CHECK_LAUNCH("any_nonfinite_gpu");
}
extern "C" void f32_to_bf16_gpu(uint16_t *out, const float *in, size_t n, ct_stream_t stream) {
    if (!n) return;
    CT_LAUNCH((convert_k<uint16_t, float>), ct_grid_for(n, EW_THREADS), EW_THREADS, 0, stream, out, in, n);
    CT_CHECK_LAUNCH("f32_to_bf16_gpu");
}
extern "C" void bf16_to_f32_gpu(float *out, const uint16_t *in, size_t n, ct_stream_t stream) {
    if (!n) return;
    CT_LAUNCH((convert_k<float, uint16_t>), ct_grid_for(n, EW_THREADS), EW_THREADS, 0, stream, out, in, n);
    CT_CHECK_LAUNCH("bf16_to_f32_gpu");
}
extern "C" void convert_act_gpu(void *out, CtDtype dt_out, const void *in, CtDtype dt_in, size_t n,
                                ct_stream_t stream) {
    if (!n) return;
    if (dt_out == CT_BF16 && dt_in == CT_F32) f32_to_bf16_gpu((uint16_t *)out, (const float *)in, n, stream);
    else if (dt_out == CT_F32 && dt_in == CT_BF16) bf16_to_f32_gpu((float *)out, (const uint16_t *)in, n, stream);
    else if (dt_out == CT_F32) CT_LAUNCH((convert_k<float, float>), ct_grid_for(n, EW_THREADS), EW_THREADS, 0, stream, (float *)out, (const float *)in, n);
    else CT_LAUNCH((convert_k<uint16_t, uint16_t>), ct_grid_for(n, EW_THREADS), EW_THREADS, 0, stream, (uint16_t *)out, (const uint16_t *)in, n);
    CT_CHECK_LAUNCH("convert_act_gpu");
}
