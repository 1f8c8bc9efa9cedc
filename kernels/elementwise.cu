// Elementwise GPU kernels: ReLU, the residual junction (add, add + ReLU, in-place gradient
// accumulation), stochastic depth's per-row scale, uint8 NHWC -> normalised activation, and fp32 <-> bf16 conversion.
// Grid-stride loops; each element is computed independently, so any alias of an input with the
// output that the API allows (dx = dy, y = a) is safe.
#include "kernels/common.cuh"
#include "kernels/act.cuh"
#include "kernels/kernels.h"

#define EW_THREADS 256
#define GRID_STRIDE(i, n) \
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (n); i += (size_t)gridDim.x * blockDim.x)

// The operations, each on V consecutive elements from element i (V = 16 bytes of T, or 1).
template <int V>
struct ReluFwd {
    template <typename T>
    __device__ static void at(size_t i, T *y, const T *x) {
        float v[V];
        ct_ldv<V>(v, x, i);
        for (int k = 0; k < V; k++) v[k] = v[k] > 0.f ? v[k] : 0.f;
        ct_stv<V>(y, i, v);
    }
};
template <int V>
struct ReluBwd {
    template <typename T>
    __device__ static void at(size_t i, T *dx, const T *dy, const T *y) {
        float g[V], yv[V];
        ct_ldv<V>(g, dy, i);
        ct_ldv<V>(yv, y, i);
        for (int k = 0; k < V; k++) g[k] = yv[k] > 0.f ? g[k] : 0.f;
        ct_stv<V>(dx, i, g);
    }
};
template <int V>
struct Add {
    template <typename T>
    __device__ static void at(size_t i, T *y, const T *a, const T *b, int relu) {
        float u[V], v[V];
        ct_ldv<V>(u, a, i);
        ct_ldv<V>(v, b, i);
        for (int k = 0; k < V; k++) {
            u[k] = u[k] + v[k];
            if (relu && !(u[k] > 0.f)) u[k] = 0.f;
        }
        ct_stv<V>(y, i, u);
    }
};
template <int V>
struct AddInplace {
    template <typename T>
    __device__ static void at(size_t i, T *y, const T *x) {
        float u[V], v[V];
        ct_ldv<V>(u, y, i);
        ct_ldv<V>(v, x, i);
        for (int k = 0; k < V; k++) u[k] = u[k] + v[k];
        ct_stv<V>(y, i, u);
    }
};
template <int V>
struct RowScale {  // stochastic depth: y = s[row] * x, rows of `row` elements (a vector may straddle two)
    template <typename T>
    __device__ static void at(size_t i, T *y, const T *x, const float *s, size_t row) {
        float v[V];
        ct_ldv<V>(v, x, i);
        for (int k = 0; k < V; k++) v[k] = ct_ld(s, (i + k) / row) * v[k];
        ct_stv<V>(y, i, v);
    }
};
template <int V>
struct Convert {
    template <typename TO, typename TI>
    __device__ static void at(size_t i, TO *out, const TI *in) {
        float v[V];
        ct_ldv<V>(v, in, i);
        ct_stv<V>(out, i, v);
    }
};

// n elements: n / V vectors, then the remaining n % V one by one. Bandwidth needs the 16-byte
// accesses: one 2-byte load per thread leaves most of a memory transaction unused.
template <template <int> class Op, int V, typename... A>
__global__ void ew_k(size_t n, A... a) {
    size_t nv = n / V;
    GRID_STRIDE(j, nv) Op<V>::at(j * V, a...);
    if (V > 1) GRID_STRIDE(t, n - nv * V) Op<1>::at(nv * V + t, a...);
}
// Launches Op over n elements with vectors of V when every pointer is 16-byte aligned (whole
// cudaMalloc'd tensors are), else element by element.
template <template <int> class Op, int V, typename... A>
static void ew_launch(size_t n, const void *p0, const void *p1, const void *p2, ct_stream_t stream, A... a) {
    if (V > 1 && ct_aligned(16, p0, p1, p2))
        CT_LAUNCH((ew_k<Op, V, A...>), ct_grid_for(n / V ? n / V : 1, EW_THREADS), EW_THREADS, 0, stream, n, a...);
    else
        CT_LAUNCH((ew_k<Op, 1, A...>), ct_grid_for(n, EW_THREADS), EW_THREADS, 0, stream, n, a...);
}

template <typename T>
__global__ void normalize_u8_k(T *out, const uint8_t *in, size_t n, int C, const float *mean,
                               const float *std) {
    GRID_STRIDE(i, n) {
        int c = (int)(i % C);
        // Same operation order as the CPU reference: in / 255, minus mean, divided by std.
        ct_st(out, i, (ct_ld(in, i) / 255.0f - ct_ld(mean, c)) / ct_ld(std, c));
    }
}

// Any non-finite float among n (float4 loads, then the tail).
__global__ void any_nonfinite_k(const float *x, size_t n, int *flag, int vec) {
    int bad = 0;
    size_t nv = vec ? n / 4 : 0;
    GRID_STRIDE(j, nv) {
        float4 v = ((const float4 *)x)[j];
        bad |= (__float_as_uint(v.x) & 0x7f800000u) == 0x7f800000u;
        bad |= (__float_as_uint(v.y) & 0x7f800000u) == 0x7f800000u;
        bad |= (__float_as_uint(v.z) & 0x7f800000u) == 0x7f800000u;
        bad |= (__float_as_uint(v.w) & 0x7f800000u) == 0x7f800000u;
    }
    GRID_STRIDE(t, n - nv * 4) bad |= (__float_as_uint(x[nv * 4 + t]) & 0x7f800000u) == 0x7f800000u;
    // One store per warp that saw one; the flag only goes 0 -> 1, so racing stores agree.
    if (__any_sync(0xffffffffu, bad) && (threadIdx.x & 31) == 0) *flag = 1;
}

extern "C" void relu_forward_gpu(void *y, const void *x, size_t n, CtDtype dt, ct_stream_t stream) {
    if (!n) return;
    CT_DISPATCH(dt, T, ew_launch<ReluFwd, CT_VEC(T)>(n, y, x, NULL, stream, (T *)y, (const T *)x));
    CT_CHECK_LAUNCH("relu_forward_gpu");
}
extern "C" void relu_backward_gpu(void *dx, const void *dy, const void *y, size_t n, CtDtype dt,
                                  ct_stream_t stream) {
    if (!n) return;
    CT_DISPATCH(dt, T, ew_launch<ReluBwd, CT_VEC(T)>(n, dx, dy, y, stream, (T *)dx, (const T *)dy, (const T *)y));
    CT_CHECK_LAUNCH("relu_backward_gpu");
}
extern "C" void add_forward_gpu(void *y, const void *a, const void *b, size_t n, int relu, CtDtype dt,
                                ct_stream_t stream) {
    if (!n) return;
    CT_DISPATCH(dt, T, ew_launch<Add, CT_VEC(T)>(n, y, a, b, stream, (T *)y, (const T *)a, (const T *)b, relu));
    CT_CHECK_LAUNCH("add_forward_gpu");
}
extern "C" void add_inplace_gpu(void *y, const void *x, size_t n, CtDtype dt, ct_stream_t stream) {
    if (!n) return;
    CT_DISPATCH(dt, T, ew_launch<AddInplace, CT_VEC(T)>(n, y, x, NULL, stream, (T *)y, (const T *)x));
    CT_CHECK_LAUNCH("add_inplace_gpu");
}
extern "C" void drop_path_gpu(void *y, const void *x, const float *scale, int N, size_t row, CtDtype dt,
                              ct_stream_t stream) {
    size_t n = (size_t)N * row;
    if (!n) return;
    CT_DISPATCH(dt, T, ew_launch<RowScale, CT_VEC(T)>(n, y, x, NULL, stream, (T *)y, (const T *)x, scale, row));
    CT_CHECK_LAUNCH("drop_path_gpu");
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
    int vec = ct_aligned(16, x);
    CT_LAUNCH(any_nonfinite_k, ct_grid_for(vec ? (n + 3) / 4 : n, EW_THREADS), EW_THREADS, 0, stream, x, n, flag, vec);
    CT_CHECK_LAUNCH("any_nonfinite_gpu");
}
// Conversions go 4 elements at a time: 4 floats (16 bytes) to or from 4 bf16 (8 bytes).
extern "C" void f32_to_bf16_gpu(uint16_t *out, const float *in, size_t n, ct_stream_t stream) {
    if (!n) return;
    ew_launch<Convert, 4>(n, out, in, NULL, stream, out, in);
    CT_CHECK_LAUNCH("f32_to_bf16_gpu");
}
extern "C" void bf16_to_f32_gpu(float *out, const uint16_t *in, size_t n, ct_stream_t stream) {
    if (!n) return;
    ew_launch<Convert, 4>(n, out, in, NULL, stream, out, in);
    CT_CHECK_LAUNCH("bf16_to_f32_gpu");
}
extern "C" void convert_act_gpu(void *out, CtDtype dt_out, const void *in, CtDtype dt_in, size_t n,
                                ct_stream_t stream) {
    if (!n) return;
    if (dt_out == CT_BF16 && dt_in == CT_F32) f32_to_bf16_gpu((uint16_t *)out, (const float *)in, n, stream);
    else if (dt_out == CT_F32 && dt_in == CT_BF16) bf16_to_f32_gpu((float *)out, (const uint16_t *)in, n, stream);
    else if (dt_out == CT_F32) ew_launch<Convert, 4>(n, out, in, NULL, stream, (float *)out, (const float *)in);
    else ew_launch<Convert, 4>(n, out, in, NULL, stream, (uint16_t *)out, (const uint16_t *)in);
    CT_CHECK_LAUNCH("convert_act_gpu");
}
