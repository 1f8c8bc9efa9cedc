// Pooling on the GPU: max pool (forward, and the gather-form backward: one thread per input
// element sums the gradients of the windows whose maximum it is, so no atomics and a fixed
// order), global average pool forward and backward. Twins of nn/layers.h's *pool_*.
#include "kernels/common.cuh"
#include "kernels/act.cuh"
#include "kernels/kernels.h"

#define POOL_THREADS 256
#define GRID_STRIDE(i, n) \
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (n); i += (size_t)gridDim.x * blockDim.x)

// V channels per thread (C a multiple of V): V = 16 bytes' worth makes every window element one
// vector load; V = 1 is the scalar form. best[j]: the index (row-major window order) of channel
// c+j's first maximum in window (p, q) of image n, or -1 when the window holds only padding
// (padding never wins: it is not a candidate at all); bv[j] its value.
template <int V, typename T>
__device__ static void window_argmax_v(const T *in, int n, int p, int q, int c, int H, int W, int C, int k,
                                       int stride, int pad, int (&best)[V], float (&bv)[V]) {
    for (int j = 0; j < V; j++) best[j] = -1, bv[j] = 0.f;
    for (int r = 0; r < k; r++) {
        int h = p * stride - pad + r;
        if (h < 0 || h >= H) continue;
        for (int s = 0; s < k; s++) {
            int w = q * stride - pad + s;
            if (w < 0 || w >= W) continue;
            float v[V];
            ct_ldv<V>(v, in, (((size_t)n * H + h) * W + w) * C + c);
            for (int j = 0; j < V; j++)
                if (best[j] < 0 || v[j] > bv[j]) best[j] = r * k + s, bv[j] = v[j];
        }
    }
}

template <int V, typename T>
__global__ void maxpool_fwd_v_k(T *out, const T *in, int N, int H, int W, int C, int k, int stride, int pad,
                                int P, int Q) {
    const int cv = C / V;
    size_t total = (size_t)N * P * Q * cv;
    GRID_STRIDE(i, total) {
        int c = (int)(i % cv) * V;
        size_t t = i / cv;
        int q = (int)(t % Q);
        t /= Q;
        int p = (int)(t % P);
        int n = (int)(t / P);
        int best[V];
        float v[V];
        window_argmax_v<V>(in, n, p, q, c, H, W, C, k, stride, pad, best, v);
        for (int j = 0; j < V; j++)
            if (best[j] < 0) v[j] = -INFINITY;
        ct_stv<V>(out, (((size_t)n * P + p) * Q + q) * C + c, v);
    }
}

template <int V, typename T>
__global__ void maxpool_bwd_v_k(T *din, const T *dout, const T *in, int N, int H, int W, int C, int k, int stride,
                                int pad, int P, int Q) {
    const int cv = C / V;
    size_t total = (size_t)N * H * W * cv;
    GRID_STRIDE(i, total) {
        int c = (int)(i % cv) * V;
        size_t t = i / cv;
        int w = (int)(t % W);
        t /= W;
        int h = (int)(t % H);
        int n = (int)(t / H);
        int p0 = h + pad - k + 1;
        p0 = p0 <= 0 ? 0 : (p0 + stride - 1) / stride;
        int p1 = min(P - 1, (h + pad) / stride);
        int q0 = w + pad - k + 1;
        q0 = q0 <= 0 ? 0 : (q0 + stride - 1) / stride;
        int q1 = min(Q - 1, (w + pad) / stride);
        float g[V];
        for (int j = 0; j < V; j++) g[j] = 0.f;
        for (int p = p0; p <= p1; p++)
            for (int q = q0; q <= q1; q++) {
                int a[V];
                float bv[V], d[V];
                window_argmax_v<V>(in, n, p, q, c, H, W, C, k, stride, pad, a, bv);
                int rs = (h - (p * stride - pad)) * k + (w - (q * stride - pad)), any = 0;
                for (int j = 0; j < V; j++) any |= a[j] == rs;
                if (!any) continue;  // this element wins no lane of window (p, q)
                ct_ldv<V>(d, dout, (((size_t)n * P + p) * Q + q) * C + c);
                for (int j = 0; j < V; j++)
                    if (a[j] == rs) g[j] += d[j];
            }
        ct_stv<V>(din, (((size_t)n * H + h) * W + w) * C + c, g);
    }
}

// Vectors of 16 bytes when C and the pointers allow, else V = 1; CTRAIN_MAXPOOL_SCALAR=1 always
// takes V = 1 (a comparison on a GPU).
static int pool_vec(int C, int V, const void *a, const void *b, const void *c) {
    static int scalar = -1;
    if (scalar < 0) {
        const char *e = getenv("CTRAIN_MAXPOOL_SCALAR");
        scalar = e && !strcmp(e, "1");
    }
    return !scalar && C % V == 0 && ct_aligned(16, a, b, c);
}

extern "C" void maxpool_forward_gpu(void *out, const void *in, int N, int H, int W, int C, int k,
                                    int stride, int pad, int P, int Q, CtDtype dt, ct_stream_t stream) {
    size_t total = (size_t)N * P * Q * C;
    if (!total) return;
    CT_DISPATCH(dt, T, {
        if (pool_vec(C, CT_VEC(T), out, in, NULL))
            CT_LAUNCH((maxpool_fwd_v_k<CT_VEC(T), T>), ct_grid_for(total / CT_VEC(T), POOL_THREADS), POOL_THREADS, 0,
                      stream, (T *)out, (const T *)in, N, H, W, C, k, stride, pad, P, Q);
        else
            CT_LAUNCH((maxpool_fwd_v_k<1, T>), ct_grid_for(total, POOL_THREADS), POOL_THREADS, 0, stream, (T *)out,
                      (const T *)in, N, H, W, C, k, stride, pad, P, Q);
    });
    CT_CHECK_LAUNCH("maxpool_forward_gpu");
}
extern "C" void maxpool_backward_gpu(void *din, const void *dout, const void *in, int N, int H, int W,
                                     int C, int k, int stride, int pad, int P, int Q, CtDtype dt,
                                     ct_stream_t stream) {
    size_t total = (size_t)N * H * W * C;
    if (!total) return;
    CT_DISPATCH(dt, T, {
        if (pool_vec(C, CT_VEC(T), din, dout, in))
            CT_LAUNCH((maxpool_bwd_v_k<CT_VEC(T), T>), ct_grid_for(total / CT_VEC(T), POOL_THREADS), POOL_THREADS, 0,
                      stream, (T *)din, (const T *)dout, (const T *)in, N, H, W, C, k, stride, pad, P, Q);
        else
            CT_LAUNCH((maxpool_bwd_v_k<1, T>), ct_grid_for(total, POOL_THREADS), POOL_THREADS, 0, stream, (T *)din,
                      (const T *)dout, (const T *)in, N, H, W, C, k, stride, pad, P, Q);
    });
    CT_CHECK_LAUNCH("maxpool_backward_gpu");
}

// out[n,c] = mean over HW: one thread per (n, c), summing HW in order (fixed, coalesced over c).
template <typename T>
__global__ void avgpool_fwd_k(T *out, const T *in, int N, int HW, int C) {
    size_t total = (size_t)N * C;
    GRID_STRIDE(i, total) {
        int c = (int)(i % C);
        size_t n = i / C;
        float s = 0.f;
        for (int j = 0; j < HW; j++) s += ct_ld(in, (n * HW + j) * C + c);
        ct_st(out, i, s / (float)HW);
    }
}
template <typename T>
__global__ void avgpool_bwd_k(T *din, const T *dout, int N, int HW, int C) {
    size_t total = (size_t)N * HW * C;
    GRID_STRIDE(i, total) {
        int c = (int)(i % C);
        size_t n = i / ((size_t)HW * C);
        ct_st(din, i, ct_ld(dout, n * C + c) / (float)HW);
    }
}

extern "C" void avgpool_forward_gpu(void *out, const void *in, int N, int HW, int C, CtDtype dt,
                                    ct_stream_t stream) {
    size_t total = (size_t)N * C;
    if (!total) return;
    CT_DISPATCH(dt, T, CT_LAUNCH(avgpool_fwd_k<T>, ct_grid_for(total, POOL_THREADS), POOL_THREADS, 0,
                                 stream, (T *)out, (const T *)in, N, HW, C));
    CT_CHECK_LAUNCH("avgpool_forward_gpu");
}
extern "C" void avgpool_backward_gpu(void *din, const void *dout, int N, int HW, int C, CtDtype dt,
                                     ct_stream_t stream) {
    size_t total = (size_t)N * HW * C;
    if (!total) return;
    CT_DISPATCH(dt, T, CT_LAUNCH(avgpool_bwd_k<T>, ct_grid_for(total, POOL_THREADS), POOL_THREADS, 0,
                                 stream, (T *)din, (const T *)dout, N, HW, C));
    CT_CHECK_LAUNCH("avgpool_backward_gpu");
}
