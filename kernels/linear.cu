// Linear layer out[N,O] = in[N,I] w[O,I]^T + b[O] on the implicit-GEMM engine of conv.cu: it is
// the 1x1 convolution of an N x 1 x 1 x I image with O filters. The bias gradient is a column
// sum over the batch, one thread per output walking the rows in order (deterministic).
#include "kernels/common.cuh"
#include "kernels/act.cuh"
#include "kernels/conv_gemm.cuh"
#include "kernels/kernels.h"

static ConvShape linear_shape(int N, int I, int O) {
    ConvShape s = {};
    s.N = N;
    s.H = s.W = 1;
    s.C = I;
    s.K = O;
    s.R = s.S = 1;
    s.stride = 1;
    s.pad = 0;
    s.P = s.Q = 1;
    return s;
}

__global__ void bias_grad_k(float *db, const float *dout, int N, int O) {
    for (int o = blockIdx.x * blockDim.x + threadIdx.x; o < O; o += gridDim.x * blockDim.x) {
        float acc = 0.f;
        for (int n = 0; n < N; n++) acc += ct_ld(dout, (size_t)n * O + o);
        ct_st(db, o, acc);
    }
}

extern "C" int linear_forward_gpu_ex(float *out, const void *in, const void *w, const float *b, int N,
                                     int I, int O, CtDtype dt, ct_stream_t st, int algo) {
    if (N <= 0 || O <= 0) return CT_CONV_GENERIC;
    GemmArgs g = {};
    g.s = linear_shape(N, I, O);
    g.a = in;
    g.b = w;
    g.c = out;
    g.bias = b;
    g.M = N;
    g.N = O;
    g.K = g.k_end = I;
    ct_gemm_tc_setup(&g, GEMM_FWD, dt);
    return ct_gemm_run(GEMM_FWD, g, dt, dt == CT_F32, 1, algo, NULL, NULL, (cudaStream_t)st);
}

extern "C" void linear_forward_gpu(float *out, const void *in, const void *w, const float *b, int N, int I,
                                   int O, CtDtype dt, ct_stream_t st) {
    linear_forward_gpu_ex(out, in, w, b, N, I, O, dt, st, CT_CONV_AUTO);
}

extern "C" void linear_backward_gpu(void *din, float *dw, float *db, const float *dout, const void *in,
                                    const void *w, int N, int I, int O, CtDtype dt, ct_stream_t st) {
    if (O <= 0 || I <= 0) return;
    ConvShape s = linear_shape(N, I, O);
    if (N <= 0) {  // an empty batch has zero gradients
        CT_CUDA_CHECK(cudaMemsetAsync(dw, 0, (size_t)O * I * sizeof(float), (cudaStream_t)st));
        if (db) CT_CUDA_CHECK(cudaMemsetAsync(db, 0, (size_t)O * sizeof(float), (cudaStream_t)st));
        return;
    }
    if (din) {  // din[N,I] = dout[N,O] w[O,I]
        GemmArgs g = {};
        g.s = s;
        g.a = dout;
        g.b = w;
        g.c = din;
        g.M = N;
        g.N = I;
        g.K = g.k_end = O;
        ct_gemm_run(GEMM_DGRAD, g, dt, 1, dt == CT_F32, CT_CONV_GENERIC, NULL, NULL, (cudaStream_t)st);
    }
    {  // dw[O,I] = dout^T in, reduced over the batch in one pass (short)
        GemmArgs g = {};
        g.s = s;
        g.a = dout;
        g.b = in;
        g.c = dw;
        g.M = O;
        g.N = I;
        g.K = g.k_end = N;
        g.no_split = 1;
        ct_gemm_run(GEMM_WGRAD, g, dt, 1, 1, CT_CONV_GENERIC, NULL, dw, (cudaStream_t)st);
    }
    if (db) {
        unsigned blocks = (unsigned)((O + 255) / 256);
        CT_LAUNCH(bias_grad_k, blocks, 256, 0, st, db, dout, N, O);
        CT_CHECK_LAUNCH("linear bias gradient");
    }
}
