// Pooling on the GPU: max pool (forward, and the gather-form backward: one thread per input
// element sums the gradients of the windows whose maximum it is, so no atomics and a fixed
// order), the same with the BN + ReLU before it applied on the fly (forward) and that BN's backward
// reductions (backward), global average pool forward and backward. Twins of nn/layers.h's *pool_* (and batchnorm_tail_grad_tiles).
#include "kernels/common.cuh"
#include "kernels/act.cuh"
#include "kernels/kernels.h"

#define POOL_THREADS 256
#define GRID_STRIDE(i, n) \
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (n); i += (size_t)gridDim.x * blockDim.x)

// The pool's input as a thread reads it, channels [c, c + V) at element i: the stored tensor, or
// (bn.mean set) y = relu(bn(x)) recomputed from the BN's input x with bn_affine_k's operations
// and rounded to T as the stored y would be (maxpool_forward_bn_gpu: y is never written).
template <int V, typename T>
struct PoolSrc {
    const T *p;
    bool bn;
    float mu[V], sc[V], be[V];
    __device__ void load(float (&v)[V], size_t i) const {
        ct_ldv<V>(v, p, i);
        if (!bn) return;
        for (int j = 0; j < V; j++) {
            float o = __fadd_rn(__fmul_rn(__fsub_rn(v[j], mu[j]), sc[j]), be[j]);
            o = o > 0.f ? o : 0.f;
            v[j] = sizeof(T) == 2 ? ct_bf16_to_f32(ct_f32_to_bf16(o)) : o;
        }
    }
};
template <int V, typename T>
__device__ static PoolSrc<V, T> pool_src(const T *p, BnAffine bn, int c) {
    PoolSrc<V, T> s;
    s.p = p;
    s.bn = bn.mean != NULL;
    for (int j = 0; j < V; j++) s.mu[j] = s.sc[j] = s.be[j] = 0.f;
    if (s.bn)
        for (int j = 0; j < V; j++) {
            s.mu[j] = ct_ld(bn.mean, (size_t)(c + j));
            s.sc[j] = __fmul_rn(ct_ld(bn.gamma, (size_t)(c + j)), ct_ld(bn.invstd, (size_t)(c + j)));
            s.be[j] = ct_ld(bn.beta, (size_t)(c + j));
        }
    return s;
}

// V channels per thread (C a multiple of V): V = 16 bytes' worth makes every window element one
// vector load; V = 1 is the scalar form. best[j]: the index (row-major window order) of channel
// c+j's first maximum in window (p, q) of image n, or -1 when the window holds only padding
// (padding never wins: it is not a candidate at all); bv[j] its value.
template <int V, typename T>
__device__ static void window_argmax_v(const PoolSrc<V, T> &in, int n, int p, int q, int c, int H, int W, int C, int k,
                                       int stride, int pad, int (&best)[V], float (&bv)[V]) {
    for (int j = 0; j < V; j++) best[j] = -1, bv[j] = 0.f;
    for (int r = 0; r < k; r++) {
        int h = p * stride - pad + r;
        if (h < 0 || h >= H) continue;
        for (int s = 0; s < k; s++) {
            int w = q * stride - pad + s;
            if (w < 0 || w >= W) continue;
            float v[V];
            in.load(v, (((size_t)n * H + h) * W + w) * C + c);
            for (int j = 0; j < V; j++)
                if (best[j] < 0 || v[j] > bv[j]) best[j] = r * k + s, bv[j] = v[j];
        }
    }
}

template <int V, typename T>
__global__ void maxpool_fwd_v_k(T *out, const T *in, BnAffine bn, int N, int H, int W, int C, int k, int stride,
                                int pad, int P, int Q) {
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
        window_argmax_v<V>(pool_src<V>(in, bn, c), n, p, q, c, H, W, C, k, stride, pad, best, v);
        for (int j = 0; j < V; j++)
            if (best[j] < 0) v[j] = -INFINITY;
        ct_stv<V>(out, (((size_t)n * P + p) * Q + q) * C + c, v);
    }
}

// g = the gradient of input element (n, h, w, c .. c+V): the sum, in window order, of the output
// gradients of the windows whose maximum it is.
template <int V, typename T>
__device__ static void maxpool_grad_at(float (&g)[V], const T *dout, const PoolSrc<V, T> &in, int n, int h, int w,
                                       int c, int H, int W, int C, int k, int stride, int pad, int P, int Q) {
    int p0 = h + pad - k + 1;
    p0 = p0 <= 0 ? 0 : (p0 + stride - 1) / stride;
    int p1 = min(P - 1, (h + pad) / stride);
    int q0 = w + pad - k + 1;
    q0 = q0 <= 0 ? 0 : (q0 + stride - 1) / stride;
    int q1 = min(Q - 1, (w + pad) / stride);
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
        float g[V];
        maxpool_grad_at<V>(g, dout, pool_src<V>(in, BnAffine{}, c), n, h, w, c, H, W, C, k, stride, pad, P, Q);
        ct_stv<V>(din, (((size_t)n * H + h) * W + w) * C + c, g);
    }
}

// The backward of relu(bn(x)) -> max pool with the BN's backward reductions (the stem): block
// (tile, channel group) takes input rows [128 tile, +128) (rows = pixels of the [N*H*W, C] input)
// and POOL_BN_LANES channel vectors; per element g = the pooled gradient masked by y > 0 (y = the
// pool's input, stored in `in` or, in == NULL, recomputed from x), stored, and per row lane
// {sum g, sum g (x - mean)} in row order, then the row lanes in lane order:
// tiles[(tile * C + c) * 2 + {0, 1}] as conv2d_backward_data_bn_gpu leaves them.
#define POOL_BN_ROWS 128
#define POOL_BN_LANES 8
template <int V, typename T>
__global__ void __launch_bounds__(POOL_THREADS)
    maxpool_bwd_bn_k(T *din, float *tiles, const T *dout, const T *in, const T *x, BnAffine bn, int N, int H, int W,
                     int C, int k, int stride, int pad, int P, int Q) {
    __shared__ float red[2][POOL_THREADS * V];
    const int rl = POOL_THREADS / POOL_BN_LANES, tx = threadIdx.x % POOL_BN_LANES, ty = threadIdx.x / POOL_BN_LANES;
    const int c = (blockIdx.y * POOL_BN_LANES + tx) * V, M = N * H * W, m0 = blockIdx.x * POOL_BN_ROWS;
    const bool active = c < C;
    float s1[V], s2[V], mu[V];
    for (int j = 0; j < V; j++) s1[j] = s2[j] = mu[j] = 0.f;
    if (active) {
        const PoolSrc<V, T> src = in ? pool_src<V>(in, BnAffine{}, c) : pool_src<V>(x, bn, c);
        for (int j = 0; j < V; j++) mu[j] = ct_ld(bn.mean, (size_t)(c + j));
        for (int r = m0 + ty; r < M && r < m0 + POOL_BN_ROWS; r += rl) {
            int w = r % W, h = (r / W) % H, n = r / (W * H);
            float g[V], yv[V], xv[V];
            maxpool_grad_at<V>(g, dout, src, n, h, w, c, H, W, C, k, stride, pad, P, Q);
            src.load(yv, (size_t)r * C + c);
            ct_ldv<V>(xv, x, (size_t)r * C + c);
            for (int j = 0; j < V; j++) {
                if (sizeof(T) == 2) g[j] = ct_bf16_to_f32(ct_f32_to_bf16(g[j]));  // summed as stored
                g[j] = yv[j] > 0.f ? g[j] : 0.f;
                s1[j] = __fadd_rn(s1[j], g[j]);
                s2[j] = __fadd_rn(s2[j], __fmul_rn(g[j], __fsub_rn(xv[j], mu[j])));
            }
            ct_stv<V>(din, (size_t)r * C + c, g);
        }
    }
    for (int j = 0; j < V; j++) {
        red[0][threadIdx.x * V + j] = s1[j];
        red[1][threadIdx.x * V + j] = s2[j];
    }
    __syncthreads();
    if (ty != 0 || !active) return;
    for (int l = 1; l < rl; l++)
        for (int j = 0; j < V; j++) {
            s1[j] = __fadd_rn(s1[j], red[0][(l * POOL_BN_LANES + tx) * V + j]);
            s2[j] = __fadd_rn(s2[j], red[1][(l * POOL_BN_LANES + tx) * V + j]);
        }
    float *t = tiles + ((size_t)blockIdx.x * C + c) * 2;
    for (int j = 0; j < V; j++) {
        ct_st(t, (size_t)2 * j, s1[j]);
        ct_st(t, (size_t)2 * j + 1, s2[j]);
    }
}

// Vectors of 16 bytes when vec (the caller's choice: ExecOptions.maxpool_vector, nn/exec_options.h),
// C and the pointers allow, else V = 1 (vec = 0 keeps V = 1 everywhere: a comparison on a GPU).
static int pool_vec(int vec, int C, int V, const void *a, const void *b, const void *c) {
    return vec && C % V == 0 && ct_aligned(16, a, b, c);
}

static void maxpool_forward(void *out, const void *in, BnAffine bn, int N, int H, int W, int C, int k, int stride,
                            int pad, int P, int Q, int vec, CtDtype dt, ct_stream_t stream) {
    size_t total = (size_t)N * P * Q * C;
    if (!total) return;
    CT_DISPATCH(dt, T, {
        if (pool_vec(vec, C, CT_VEC(T), out, in, NULL))
            CT_LAUNCH((maxpool_fwd_v_k<CT_VEC(T), T>), ct_grid_for(total / CT_VEC(T), POOL_THREADS), POOL_THREADS, 0,
                      stream, (T *)out, (const T *)in, bn, N, H, W, C, k, stride, pad, P, Q);
        else
            CT_LAUNCH((maxpool_fwd_v_k<1, T>), ct_grid_for(total, POOL_THREADS), POOL_THREADS, 0, stream, (T *)out,
                      (const T *)in, bn, N, H, W, C, k, stride, pad, P, Q);
    });
    CT_CHECK_LAUNCH("maxpool_forward_gpu");
}
extern "C" void maxpool_forward_gpu(void *out, const void *in, int N, int H, int W, int C, int k,
                                    int stride, int pad, int P, int Q, int vec, CtDtype dt, ct_stream_t stream) {
    maxpool_forward(out, in, BnAffine{}, N, H, W, C, k, stride, pad, P, Q, vec, dt, stream);
}
extern "C" void maxpool_forward_bn_gpu(void *out, const void *x, BnAffine bn, int N, int H, int W, int C, int k,
                                       int stride, int pad, int P, int Q, int vec, CtDtype dt, ct_stream_t stream) {
    if (!bn.mean || !bn.invstd || !bn.gamma || !bn.beta) ct_die("maxpool_forward_bn_gpu: no BN statistics");
    maxpool_forward(out, x, bn, N, H, W, C, k, stride, pad, P, Q, vec, dt, stream);
}
extern "C" void maxpool_backward_gpu(void *din, const void *dout, const void *in, int N, int H, int W,
                                     int C, int k, int stride, int pad, int P, int Q, int vec, CtDtype dt,
                                     ct_stream_t stream) {
    size_t total = (size_t)N * H * W * C;
    if (!total) return;
    CT_DISPATCH(dt, T, {
        if (pool_vec(vec, C, CT_VEC(T), din, dout, in))
            CT_LAUNCH((maxpool_bwd_v_k<CT_VEC(T), T>), ct_grid_for(total / CT_VEC(T), POOL_THREADS), POOL_THREADS, 0,
                      stream, (T *)din, (const T *)dout, (const T *)in, N, H, W, C, k, stride, pad, P, Q);
        else
            CT_LAUNCH((maxpool_bwd_v_k<1, T>), ct_grid_for(total, POOL_THREADS), POOL_THREADS, 0, stream, (T *)din,
                      (const T *)dout, (const T *)in, N, H, W, C, k, stride, pad, P, Q);
    });
    CT_CHECK_LAUNCH("maxpool_backward_gpu");
}

extern "C" int maxpool_backward_bn_gpu(void *din, float *tiles, const void *dout, const void *in, const void *x,
                                       BnAffine bn, int N, int H, int W, int C, int k, int stride, int pad, int P,
                                       int Q, int vec, CtDtype dt, ct_stream_t stream) {
    int M = N * H * W;
    if (!bn.mean || (!in && (!bn.invstd || !bn.gamma || !bn.beta))) ct_die("maxpool_backward_bn_gpu: no BN statistics");
    if (M < 1 || C < 1 || P < 1 || Q < 1 || !ct_aligned(8, tiles)) return 0;
    CT_DISPATCH(dt, T, {
        // Without y (in == NULL) nothing else can run this backward: the scalar form then.
        int v = pool_vec(vec, C, CT_VEC(T), din, dout, in) && ct_aligned(16, x);
        if (!v && in) return 0;
        if (v) {
            dim3 grid((M + POOL_BN_ROWS - 1) / POOL_BN_ROWS, (C / CT_VEC(T) + POOL_BN_LANES - 1) / POOL_BN_LANES);
            CT_LAUNCH((maxpool_bwd_bn_k<CT_VEC(T), T>), grid, POOL_THREADS, 0, stream, (T *)din, tiles,
                      (const T *)dout, (const T *)in, (const T *)x, bn, N, H, W, C, k, stride, pad, P, Q);
        } else {
            dim3 grid((M + POOL_BN_ROWS - 1) / POOL_BN_ROWS, (C + POOL_BN_LANES - 1) / POOL_BN_LANES);
            CT_LAUNCH((maxpool_bwd_bn_k<1, T>), grid, POOL_THREADS, 0, stream, (T *)din, tiles, (const T *)dout,
                      (const T *)in, (const T *)x, bn, N, H, W, C, k, stride, pad, P, Q);
        }
    });
    CT_CHECK_LAUNCH("maxpool_backward_bn_gpu");
    return 1;
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
