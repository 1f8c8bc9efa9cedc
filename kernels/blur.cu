// BlurPool's fixed 3x3 blur on the GPU: the twin of nn/blur.h (blur3x3_forward/backward), same
// taps in the same order (integer weights 1, 2, 4 summed row-major, the sum scaled by 1/16 once),
// so fp32 results equal the CPU's bit for bit and bf16 ones differ only by the storage rounding
// the CPU's bf16 mode applies too. One thread per V channels of one output pixel; V = 16 bytes'
// worth when C and the pointers allow, else 1. The backward is the forward (the blur is its own
// adjoint; nn/blur.h says why): no atomics, one fixed order.
#include "kernels/common.cuh"
#include "kernels/act.cuh"
#include "kernels/kernels.h"

#define BLUR_THREADS 256

template <int V, typename T>
__global__ void blur3x3_v_k(T *out, const T *in, int N, int H, int W, int C) {
    const int cv = C / V;
    size_t total = (size_t)N * H * W * cv;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x) {
        int c = (int)(i % cv) * V;
        size_t t = i / cv;
        int w = (int)(t % W);
        t /= W;
        int h = (int)(t % H);
        int n = (int)(t / H);
        float acc[V];
        for (int j = 0; j < V; j++) acc[j] = 0.f;
        for (int r = 0; r < 3; r++) {
            int hh = h + r - 1;
            if (hh < 0 || hh >= H) continue;
            for (int s = 0; s < 3; s++) {
                int ww = w + s - 1;
                if (ww < 0 || ww >= W) continue;
                const float tap = (float)((r == 1 ? 2 : 1) * (s == 1 ? 2 : 1));
                float v[V];
                ct_ldv<V>(v, in, (((size_t)n * H + hh) * W + ww) * C + c);
                for (int j = 0; j < V; j++) acc[j] += tap * v[j];
            }
        }
        for (int j = 0; j < V; j++) acc[j] *= 0.0625f;
        ct_stv<V>(out, (((size_t)n * H + h) * W + w) * C + c, acc);
    }
}

static void blur_launch(void *out, const void *in, int N, int H, int W, int C, CtDtype dt, ct_stream_t stream) {
    size_t total = (size_t)N * H * W * C;
    if (!total) return;
    CT_DISPATCH(dt, T, {
        if (C % CT_VEC(T) == 0 && ct_aligned(16, out, in, NULL))
            CT_LAUNCH((blur3x3_v_k<CT_VEC(T), T>), ct_grid_for(total / CT_VEC(T), BLUR_THREADS), BLUR_THREADS, 0,
                      stream, (T *)out, (const T *)in, N, H, W, C);
        else
            CT_LAUNCH((blur3x3_v_k<1, T>), ct_grid_for(total, BLUR_THREADS), BLUR_THREADS, 0, stream, (T *)out,
                      (const T *)in, N, H, W, C);
    });
}

extern "C" void blur3x3_forward_gpu(void *out, const void *in, int N, int H, int W, int C, CtDtype dt,
                                    ct_stream_t stream) {
    blur_launch(out, in, N, H, W, C, dt, stream);
    CT_CHECK_LAUNCH("blur3x3_forward_gpu");
}
extern "C" void blur3x3_backward_gpu(void *din, const void *dout, int N, int H, int W, int C, CtDtype dt,
                                     ct_stream_t stream) {
    blur_launch(din, dout, N, H, W, C, dt, stream);
    CT_CHECK_LAUNCH("blur3x3_backward_gpu");
}
