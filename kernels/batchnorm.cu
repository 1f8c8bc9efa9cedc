// Batch norm on the GPU: training forward (batch statistics, running-stat update, fused ReLU),
// eval forward, and backward. Twins of nn/batchnorm.c, with the same arithmetic:
//   forward:  one pass of shifted sums s1 = sum (x - x0), s2 = sum (x - x0)^2 (x0 = row 0, a
//             sample of the data, so the variance does not cancel), accumulated in double;
//             mean, invstd and scale = gamma * invstd per channel; y = (x - mean) * scale + beta;
//   backward: sg = sum g, sgx = sum g * (x - mean) in double (g = dy masked by the fused ReLU);
//             dx = k0 * g + k1 * x + k2 with k0..k2 per channel formed in double.
// Float operations that the CPU does unfused are written __fmul_rn/__fadd_rn so nvcc does not
// contract them into FMAs: the fp32 path then differs from the CPU only in the order of the
// double sums.
//
// Layout and speed. NHWC makes the activation an [M, C] row-major matrix. A thread owns one
// vector of V consecutive channels (16 bytes: 8 bf16 or 4 floats, when C and the pointers allow;
// else V = 1) and walks rows, so its per-channel constants stay in registers and every load is
// a full 16-byte transaction; a block is TX channel vectors x TY rows (TX * TY <= 256), so a warp
// reads contiguous rows even when C is small.
//
// Determinism: channel sums are reduced in fixed stages that do not depend on scheduling: (1) a
// block sums one chunk of rows (each thread strides over the chunk in order, the TY row lanes are
// combined in lane order), writing partial[chunk][c]; (2) one thread per channel adds the chunk
// partials in chunk order. The chunking is a function of M alone.
#include "kernels/common.cuh"
#include "kernels/act.cuh"
#include "kernels/kernels.h"

#define BN_THREADS 256
// Row chunks of the sums: at most 1024 (an H100 holds 132 x 8 blocks of 256 threads, and layer1
// of resnet50 at batch 256 has one block across its 64 channels), at least 64 rows each (the
// double partials, 16 bytes per channel and chunk, stay small beside the rows they sum).
#define BN_MAX_CHUNKS 1024
#define BN_MIN_ROWS 64
#define BN_UNROLL 4
#define BN_TILE_ROWS 128  // rows per tile of conv2d_forward_stats_gpu's statistics (conv_tc2.cu's T2_BM)

static int bn_chunks(int M) {
    int n = (M + BN_MIN_ROWS - 1) / BN_MIN_ROWS;
    if (n > BN_MAX_CHUNKS) n = BN_MAX_CHUNKS;
    if (n < 1) n = 1;
    return n;
}
static int bn_rows_per_chunk(int M) { return (M + bn_chunks(M) - 1) / bn_chunks(M); }
extern "C" int batchnorm_gpu_chunks(int M) { return bn_chunks(M); }

// Workspace: the chunk partials (2 doubles per chunk and channel) or a convolution's tile
// statistics (2 floats per 128-row tile and channel, batchnorm_add_forward_train_tiles_gpu),
// whichever is larger, then 3 floats per channel of constants (scale; or k0, k1, k2).
// A strided data gradient cuts its tiles per stride phase (kernels/conv.cu): at most one more per
// phase, and it takes the BN epilogue at strides up to 2 (CONV_BN_MAX_PHASES).
static int bn_max_tiles(int M) { return (M + BN_TILE_ROWS - 1) / BN_TILE_ROWS + CONV_BN_MAX_PHASES; }
static size_t bn_partial_floats(int M, int C) {
    size_t chunks = (size_t)4 * bn_chunks(M) * C, tiles = (size_t)2 * bn_max_tiles(M) * C;
    return chunks > tiles ? chunks : tiles;
}
extern "C" size_t batchnorm_gpu_work_floats(int M, int C) { return bn_partial_floats(M, C) + (size_t)3 * C; }
static float *bn_consts(float *work, int M, int C) { return work + bn_partial_floats(M, C); }

// ---------------------------------------------------------------------------------------------
// Per-channel parameters of a thread's channel vector.
template <int V>
__device__ static inline void bn_ld_f32(float (&v)[V], const float *p, int c) {
    for (int k = 0; k < V; k++) v[k] = ct_ld(p, (size_t)(c + k));
}

// This thread's place in a block of tx_n channel vectors x ty_n rows: its first channel c0, its
// row lane ty; active when it has a channel vector (the last block across may have fewer, and
// threads past tx_n * ty_n have none).
struct BnLane {
    int tx, ty, ty_n, c0;
    bool active;
};
template <int V>
__device__ static inline BnLane bn_lane(int tx_n, int C) {
    BnLane l;
    l.ty_n = BN_THREADS / tx_n;
    l.tx = threadIdx.x % tx_n;
    l.ty = threadIdx.x / tx_n;
    l.c0 = (blockIdx.x * tx_n + l.tx) * V;
    l.active = l.ty < l.ty_n && l.c0 < C;
    return l;
}

// Block shape for C channels in vectors of V.
struct BnGrid {
    int cv, tx, ty;  // channel vectors; threads along them and along rows (tx * ty <= BN_THREADS)
    unsigned gx;     // blocks along the channel vectors
};
static BnGrid bn_grid(int C, int V) {
    BnGrid g;
    g.cv = C / V;
    g.tx = g.cv < BN_THREADS ? g.cv : BN_THREADS;
    g.ty = BN_THREADS / g.tx;
    g.gx = (unsigned)((g.cv + g.tx - 1) / g.tx);
    return g;
}
// Row blocks for the elementwise passes: enough to fill a large GPU, each thread walking a few
// rows (a grid-stride loop), never more than the rows need.
static unsigned bn_row_blocks(int M, const BnGrid &g) {
    long b = ((long)M + g.ty - 1) / g.ty, cap = 8192 / (long)g.gx;
    if (cap < 1) cap = 1;
    if (b > cap) b = cap;
    if (b > 65535) b = 65535;
    return (unsigned)(b < 1 ? 1 : b);
}

// ---------------------------------------------------------------------------------------------
// Stage 1: per-chunk sums in double.
//   GRAD = 0: s1 = sum (x - k), s2 = sum (x - k)^2 with k = x[0][c] (read here);
//   GRAD = 1: s1 = sum g, s2 = sum g * (x - k) with k = mean, g = dy masked by y > 0 if y.
// partial[(chunk * 2 + 0) * C + c] = s1, partial[(chunk * 2 + 1) * C + c] = s2.
template <typename T, int V, int GRAD>
__global__ void __launch_bounds__(BN_THREADS)
    bn_sums_k(double *partial, const T *x, const T *dy, const T *y, const float *mean, int M, int C,
              int rows, int tx_n) {
    __shared__ double red[2][BN_THREADS * V];
    const BnLane l = bn_lane<V>(tx_n, C);
    const int tx = l.tx, ty = l.ty, ty_n = l.ty_n, c0 = l.c0;
    const bool active = l.active;
    double a1[V], a2[V];
    for (int k = 0; k < V; k++) a1[k] = a2[k] = 0.0;
    if (active) {
        float kc[V];
        if (GRAD) bn_ld_f32<V>(kc, mean, c0);
        else ct_ldv<V>(kc, x, (size_t)c0);
        int r0 = blockIdx.y * rows, r1 = min(M, r0 + rows);
        // BN_UNROLL rows a step: their loads are all issued before the first is used, so a thread
        // keeps several transactions in flight; the sums still take the rows in order.
        for (int rb = r0 + ty; rb < r1; rb += BN_UNROLL * ty_n) {
            float xv[BN_UNROLL][V], g[BN_UNROLL][V];
            for (int u = 0; u < BN_UNROLL; u++) {
                int r = rb + u * ty_n;
                if (r >= r1) break;
                size_t i = (size_t)r * C + c0;
                ct_ldv<V>(xv[u], x, i);
                if (GRAD) {
                    ct_ldv<V>(g[u], dy, i);
                    if (y) {
                        float yv[V];
                        ct_ldv<V>(yv, y, i);
                        for (int k = 0; k < V; k++)
                            if (!(yv[k] > 0.f)) g[u][k] = 0.f;
                    }
                }
            }
            for (int u = 0; u < BN_UNROLL; u++) {
                if (rb + u * ty_n >= r1) break;
                if (GRAD) {
                    for (int k = 0; k < V; k++) {
                        a1[k] += (double)g[u][k];
                        a2[k] += (double)g[u][k] * ((double)xv[u][k] - (double)kc[k]);
                    }
                } else {
                    for (int k = 0; k < V; k++) {
                        double d = (double)xv[u][k] - (double)kc[k];
                        a1[k] += d;
                        a2[k] += d * d;
                    }
                }
            }
        }
    }
    int slot = (ty * tx_n + tx) * V;
    for (int k = 0; k < V; k++) {
        red[0][slot + k] = a1[k];
        red[1][slot + k] = a2[k];
    }
    __syncthreads();
    if (ty == 0 && active) {
        for (int lane = 1; lane < ty_n; lane++)
            for (int k = 0; k < V; k++) {
                a1[k] += red[0][(lane * tx_n + tx) * V + k];
                a2[k] += red[1][(lane * tx_n + tx) * V + k];
            }
        double *p1 = partial + (size_t)blockIdx.y * 2 * C, *p2 = p1 + C;
        for (int k = 0; k < V; k++) {
            ct_st(p1, (size_t)(c0 + k), a1[k]);
            ct_st(p2, (size_t)(c0 + k), a2[k]);
        }
    }
}

// What stage 2 writes for channel c from its mean and biased variance, however they were gathered
// (chunk sums or conv-epilogue tiles): the saved statistics, gamma * invstd, the running averages.
__device__ static void bn_publish_stats(int c, float mean, double var, float *save_mean, float *save_invstd,
                                        float *scale, float *running_mean, float *running_var, const float *gamma,
                                        int M, float momentum, float eps) {
    float invstd = (float)(1.0 / sqrt(var + eps));
    ct_st(save_mean, c, mean);
    ct_st(save_invstd, c, invstd);
    ct_st(scale, c, __fmul_rn(ct_ld(gamma, c), invstd));
    if (running_mean)
        ct_st(running_mean, c, __fadd_rn(__fmul_rn(1.f - momentum, ct_ld(running_mean, c)), __fmul_rn(momentum, mean)));
    if (running_var) {
        double unbiased = M > 1 ? var * M / (M - 1) : var;
        ct_st(running_var, c, (float)((double)__fmul_rn(1.f - momentum, ct_ld(running_var, c)) + (double)momentum * unbiased));
    }
}

// Stage 2 of the forward: statistics, running statistics, scale (nn/batchnorm.c's formulas).
template <typename T>
__global__ void bn_finish_stats_k(float *save_mean, float *save_invstd, float *scale,
                                  float *running_mean, float *running_var, const double *partial,
                                  const T *x, const float *gamma, int nchunks, int M, int C,
                                  float momentum, float eps) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    double s1 = 0.0, s2 = 0.0;
    for (int k = 0; k < nchunks; k++) {
        s1 += ct_ld(partial, (size_t)k * 2 * C + c);
        s2 += ct_ld(partial, (size_t)k * 2 * C + C + c);
    }
    double d = s1 / M, var = fmax(0.0, s2 / M - d * d);
    float mean = (float)((double)ct_ld(x, (size_t)c) + d);
    bn_publish_stats(c, mean, var, save_mean, save_invstd, scale, running_mean, running_var, gamma, M, momentum, eps);
}

// Stage 2 from a convolution epilogue's tile statistics instead of stage 1's chunk sums
// (conv2d_forward_stats_gpu): tile t holds rows [128 t, min(M, 128 t + 128)) as {sum, m2} per
// channel; merged in tile order in double (Chan, Golub and LeVeque's pairwise update), the same
// outputs as bn_finish_stats_k. nn/batchnorm.c's batchnorm_stats_from_tiles_cpu is its twin.
__global__ void bn_finish_tiles_k(float *save_mean, float *save_invstd, float *scale, float *running_mean,
                                  float *running_var, const float *tiles, const float *gamma, int ntiles,
                                  int M, int C, float momentum, float eps) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    double n = 0.0, mu = 0.0, m2 = 0.0;
    for (int t = 0; t < ntiles; t++) {
        double nb = (double)min(BN_TILE_ROWS, M - t * BN_TILE_ROWS);
        double sb = ct_ld(tiles, ((size_t)t * C + c) * 2), qb = ct_ld(tiles, ((size_t)t * C + c) * 2 + 1);
        double d = sb / nb - mu, nn = n + nb;
        mu += d * nb / nn;
        m2 += qb + d * d * n * nb / nn;
        n = nn;
    }
    double var = fmax(0.0, m2 / M);
    float mean = (float)mu;
    bn_publish_stats(c, mean, var, save_mean, save_invstd, scale, running_mean, running_var, gamma, M, momentum, eps);
}

// y = (x - mean) * scale + beta [relu]. scale == NULL (eval): scale = gamma / sqrt(var + eps)
// from the running variance, formed per thread in double like the CPU's.
// res != NULL: y = bn(x) + res [relu] (a residual block's tail; the BN output is never stored).
// rb != NULL (train): res is not the residual but the input of the residual's own batch norm,
// applied here as its forward would (rb = {mean, invstd, gamma, beta}: scale = gamma * invstd as
// bn_publish_stats forms it, the result rounded to T as it would have been stored): the residual
// BN's output is never written (batchnorm_add_bn_forward_train_gpu).
template <typename T, int V>
__global__ void __launch_bounds__(BN_THREADS)
    bn_affine_k(T *y, const T *x, const T *res, const float *mean, const float *scale, const float *gamma,
                const float *var, float eps, const float *beta, int M, int C, int tx_n, int relu,
                BnAffine rb, uint8_t *mask) {
    const BnLane l = bn_lane<V>(tx_n, C);
    if (!l.active) return;
    const int c0 = l.c0;
    float mu[V], sc[V], be[V], rmu[V], rsc[V], rbe[V];
    bn_ld_f32<V>(mu, mean, c0);
    bn_ld_f32<V>(be, beta, c0);
    if (scale) {
        bn_ld_f32<V>(sc, scale, c0);
    } else {
        for (int k = 0; k < V; k++)
            sc[k] = (float)((double)ct_ld(gamma, (size_t)(c0 + k)) / sqrt((double)ct_ld(var, (size_t)(c0 + k)) + eps));
    }
    if (rb.mean) {
        float rg[V], ri[V];
        bn_ld_f32<V>(rmu, rb.mean, c0);
        bn_ld_f32<V>(rbe, rb.beta, c0);
        bn_ld_f32<V>(rg, rb.gamma, c0);
        bn_ld_f32<V>(ri, rb.invstd, c0);
        for (int k = 0; k < V; k++) rsc[k] = __fmul_rn(rg[k], ri[k]);
    }
    for (int r = blockIdx.y * l.ty_n + l.ty; r < M; r += gridDim.y * l.ty_n) {
        size_t i = (size_t)r * C + c0;
        float v[V], rv[V];
        ct_ldv<V>(v, x, i);
        if (res) ct_ldv<V>(rv, res, i);
        if (rb.mean)
            for (int k = 0; k < V; k++) {
                rv[k] = __fadd_rn(__fmul_rn(__fsub_rn(rv[k], rmu[k]), rsc[k]), rbe[k]);
                if (sizeof(T) == 2) rv[k] = ct_bf16_to_f32(ct_f32_to_bf16(rv[k]));
            }
        for (int k = 0; k < V; k++) {
            float o = __fadd_rn(__fmul_rn(__fsub_rn(v[k], mu[k]), sc[k]), be[k]);
            if (res) o = __fadd_rn(o, rv[k]);
            v[k] = relu && !(o > 0.f) ? 0.f : o;
        }
        ct_stv<V>(y, i, v);
        if (V == 8 && mask) {  // bit k: y[c0 + k] > 0 as stored (bn_relu_mask_ok)
            unsigned b = 0;
            for (int k = 0; k < V; k++)
                b |= (unsigned)((sizeof(T) == 2 ? ct_bf16_to_f32(ct_f32_to_bf16(v[k])) : v[k]) > 0.f) << k;
            CT_COST_ACCESS(mask + i / 8, 1, true);
            mask[i / 8] = (uint8_t)b;
        }
    }
}

// Stage 2's per-channel results from the merged sums sg = sum g and sgx = sum g (x - mean): dbeta,
// dgamma and dx's constants (k = [k0 | k1 | k2]), in double.
__device__ static void bn_grad_publish(float *dgamma, float *dbeta, float *k, const float *gamma, const float *mean,
                                       const float *invstd, double sg, double sgx, int c, int M, int C) {
    double inv = ct_ld(invstd, c);
    ct_st(dbeta, c, (float)sg);
    ct_st(dgamma, c, (float)(sgx * inv));
    double a = (double)ct_ld(gamma, c) * inv, b = sgx * inv * inv / M;
    ct_st(k, c, (float)a);
    ct_st(k, (size_t)C + c, (float)(-a * b));
    ct_st(k, (size_t)2 * C + c, (float)(a * (b * ct_ld(mean, c) - sg / M)));
}

// Stage 2 of the backward: dbeta, dgamma, and dx's per-channel constants (k = [k0 | k1 | k2]).
__global__ void bn_finish_grad_k(float *dgamma, float *dbeta, float *k, const double *partial,
                                 const float *gamma, const float *mean, const float *invstd,
                                 int nchunks, int M, int C) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    double sg = 0.0, sgx = 0.0;
    for (int j = 0; j < nchunks; j++) {
        sg += ct_ld(partial, (size_t)j * 2 * C + c);
        sgx += ct_ld(partial, (size_t)j * 2 * C + C + c);
    }
    bn_grad_publish(dgamma, dbeta, k, gamma, mean, invstd, sg, sgx, c, M, C);
}

// Stage 2 from the data-gradient epilogue's tiles (conv2d_backward_data_bn_gpu) instead of stage
// 1's chunk sums: tile t holds {sum g, sum g (x - mean)} of rows [128 t, min(M, 128 t + 128)) per
// channel, merged in tile order in double; the rest as bn_finish_grad_k.
__global__ void bn_finish_grad_tiles_k(float *dgamma, float *dbeta, float *k, const float *tiles,
                                       const float *gamma, const float *mean, const float *invstd, int ntiles,
                                       int M, int C) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    double sg = 0.0, sgx = 0.0;
    for (int t = 0; t < ntiles; t++) {
        sg += ct_ld(tiles, ((size_t)t * C + c) * 2);
        sgx += ct_ld(tiles, ((size_t)t * C + c) * 2 + 1);
    }
    bn_grad_publish(dgamma, dbeta, k, gamma, mean, invstd, sg, sgx, c, M, C);
}

// dx = k0 * g + k1 * x + k2, and with dres the residual's gradient g written (res_acc: added to
// what dres holds) in the same pass. dx or dres may alias dy: each element is read before it is
// written, by the same thread.
template <typename T, int V>
__global__ void __launch_bounds__(BN_THREADS)
    bn_dx_k(T *dx, T *dres, int res_acc, const T *dy, const T *x, const T *y, const float *k, int M, int C,
            int tx_n) {
    const BnLane l = bn_lane<V>(tx_n, C);
    if (!l.active) return;
    const int c0 = l.c0;
    float k0[V], k1[V], k2[V];
    bn_ld_f32<V>(k0, k, c0);
    bn_ld_f32<V>(k1, k + C, c0);
    bn_ld_f32<V>(k2, k + 2 * C, c0);
    for (int r = blockIdx.y * l.ty_n + l.ty; r < M; r += gridDim.y * l.ty_n) {
        size_t i = (size_t)r * C + c0;
        float g[V], xv[V];
        ct_ldv<V>(g, dy, i);
        ct_ldv<V>(xv, x, i);
        if (y) {
            float yv[V];
            ct_ldv<V>(yv, y, i);
            for (int j = 0; j < V; j++)
                if (!(yv[j] > 0.f)) g[j] = 0.f;
        }
        if (dres) {
            float r[V];
            if (res_acc) {
                ct_ldv<V>(r, dres, i);
                for (int j = 0; j < V; j++) r[j] = __fadd_rn(r[j], g[j]);
            } else {
                for (int j = 0; j < V; j++) r[j] = g[j];
            }
            ct_stv<V>(dres, i, r);
        }
        for (int j = 0; j < V; j++) g[j] = __fadd_rn(__fadd_rn(__fmul_rn(k0[j], g[j]), __fmul_rn(k1[j], xv[j])), k2[j]);
        ct_stv<V>(dx, i, g);
    }
}

// ---------------------------------------------------------------------------------------------
// Host side: pick the vector width, then launch.

// 16-byte vectors when C is a multiple of the vector and every activation pointer is aligned
// (cudaMalloc'd activations always are; a view into the middle of one might not be).
template <typename T>
static int bn_vec_width(int C, const void *a, const void *b, const void *c, const void *d,
                        const void *e = NULL) {
    return C % CT_VEC(T) == 0 && ct_aligned(16, a, b, c, d) && ct_aligned(16, e) ? CT_VEC(T) : 1;
}

// The train statistics (save_mean, save_invstd, scale in work's constants, the running ones):
// from a convolution epilogue's tiles, or (tiles == NULL) by a sums pass over x.
template <typename T, int V>
static float *bn_stats_launch(float *save_mean, float *save_invstd, float *running_mean, float *running_var,
                              const T *x, const float *tiles, const float *gamma, int M, int C, float momentum,
                              float eps, float *work, cudaStream_t stream) {
    float *scale = bn_consts(work, M, C);
    if (tiles) {
        int ntiles = (M + BN_TILE_ROWS - 1) / BN_TILE_ROWS;
        CT_LAUNCH(bn_finish_tiles_k, (C + 127) / 128, 128, 0, stream, save_mean, save_invstd, scale, running_mean,
                  running_var, tiles, gamma, ntiles, M, C, momentum, eps);
        return scale;
    }
    int nchunks = bn_chunks(M), rows = bn_rows_per_chunk(M);
    BnGrid g = bn_grid(C, V);
    double *partial = (double *)work;
    CT_LAUNCH((bn_sums_k<T, V, 0>), dim3(g.gx, nchunks), BN_THREADS, 0, stream, partial, x,
              (const T *)NULL, (const T *)NULL, (const float *)NULL, M, C, rows, g.tx);
    CT_LAUNCH(bn_finish_stats_k<T>, (C + 127) / 128, 128, 0, stream, save_mean, save_invstd, scale,
              running_mean, running_var, (const double *)partial, x, gamma, nchunks, M, C, momentum, eps);
    return scale;
}

// Statistics (tiles or a sums pass), then the output pass; rb: the residual's own BN (bn_affine_k).
template <typename T, int V>
static void bn_forward_train_launch(T *y, float *save_mean, float *save_invstd, float *running_mean,
                                    float *running_var, const T *x, const T *res, const float *tiles,
                                    const float *gamma, const float *beta, int M, int C, float momentum, float eps,
                                    int relu, BnAffine rb, uint8_t *mask, float *work, cudaStream_t stream) {
    BnGrid g = bn_grid(C, V);
    float *scale = bn_stats_launch<T, V>(save_mean, save_invstd, running_mean, running_var, x, tiles, gamma, M, C,
                                         momentum, eps, work, stream);
    CT_LAUNCH((bn_affine_k<T, V>), dim3(g.gx, bn_row_blocks(M, g)), BN_THREADS, 0, stream, y, x, res,
              (const float *)save_mean, (const float *)scale, gamma, (const float *)NULL, eps, beta, M,
              C, g.tx, relu, rb, mask);
}

// The ReLU mask a train forward can write beside y (bn_affine_k): one byte per 8 channels of a
// row, so only on the 8-wide bf16 vector path with ReLU.
static int bn_relu_mask_ok(CtDtype dt, int C, int relu, const void *y, const void *x, const void *res) {
    return dt == CT_BF16 && relu && bn_vec_width<uint16_t>(C, y, x, res, NULL) == 8;
}

static int bn_forward_train(void *y, float *save_mean, float *save_invstd, float *running_mean, float *running_var,
                            const void *x, const void *res, const float *tiles, const float *gamma, const float *beta,
                            int M, int C, float momentum, float eps, int relu, uint8_t *mask, BnAffine rb, float *work,
                            CtDtype dt, ct_stream_t stream) {
    if (mask && !bn_relu_mask_ok(dt, C, relu, y, x, res)) mask = NULL;
    CT_DISPATCH(dt, T, {
        if (bn_vec_width<T>(C, y, x, res, NULL) > 1)
            bn_forward_train_launch<T, CT_VEC(T)>((T *)y, save_mean, save_invstd, running_mean, running_var,
                                                  (const T *)x, (const T *)res, tiles, gamma, beta, M, C, momentum,
                                                  eps, relu, rb, mask, work, (cudaStream_t)stream);
        else
            bn_forward_train_launch<T, 1>((T *)y, save_mean, save_invstd, running_mean, running_var, (const T *)x,
                                          (const T *)res, tiles, gamma, beta, M, C, momentum, eps, relu, rb, NULL, work,
                                          (cudaStream_t)stream);
    });
    return mask != NULL;
}

extern "C" int batchnorm_add_forward_train_tiles_gpu(void *y, float *save_mean, float *save_invstd,
                                                     float *running_mean, float *running_var, const void *x,
                                                     const void *res, const float *tiles, const float *gamma,
                                                     const float *beta, int M, int C, float momentum, float eps,
                                                     int relu, uint8_t *relu_mask, float *work, CtDtype dt,
                                                     ct_stream_t stream) {
    if (M < 1 || C < 1) ct_die("batchnorm_forward_train_tiles_gpu: M = %d, C = %d", M, C);
    int wrote = bn_forward_train(y, save_mean, save_invstd, running_mean, running_var, x, res, tiles, gamma, beta, M,
                                 C, momentum, eps, relu, relu_mask, BnAffine{}, work, dt, stream);
    CT_CHECK_LAUNCH("batchnorm forward (train, tile statistics)");
    return wrote;
}

extern "C" int batchnorm_add_forward_train_gpu(void *y, float *save_mean, float *save_invstd,
                                               float *running_mean, float *running_var, const void *x,
                                               const void *res, const float *gamma, const float *beta,
                                               int M, int C, float momentum, float eps, int relu,
                                               uint8_t *relu_mask, float *work, CtDtype dt, ct_stream_t stream) {
    if (M < 1 || C < 1) ct_die("batchnorm_forward_train_gpu: M = %d, C = %d", M, C);
    int wrote = bn_forward_train(y, save_mean, save_invstd, running_mean, running_var, x, res, NULL, gamma, beta, M, C,
                                 momentum, eps, relu, relu_mask, BnAffine{}, work, dt, stream);
    CT_CHECK_LAUNCH("batchnorm_forward_train_gpu");
    return wrote;
}

extern "C" void batchnorm_stats_train_gpu(float *save_mean, float *save_invstd, float *running_mean,
                                          float *running_var, const void *x, const float *tiles, const float *gamma,
                                          int M, int C, float momentum, float eps, float *work, CtDtype dt,
                                          ct_stream_t stream) {
    if (M < 1 || C < 1) ct_die("batchnorm_stats_train_gpu: M = %d, C = %d", M, C);
    CT_DISPATCH(dt, T, {
        if (bn_vec_width<T>(C, x, NULL, NULL, NULL) > 1)
            bn_stats_launch<T, CT_VEC(T)>(save_mean, save_invstd, running_mean, running_var, (const T *)x, tiles,
                                          gamma, M, C, momentum, eps, work, (cudaStream_t)stream);
        else
            bn_stats_launch<T, 1>(save_mean, save_invstd, running_mean, running_var, (const T *)x, tiles, gamma, M,
                                  C, momentum, eps, work, (cudaStream_t)stream);
    });
    CT_CHECK_LAUNCH("batchnorm_stats_train_gpu");
}

extern "C" int batchnorm_add_bn_forward_train_gpu(void *y, float *save_mean, float *save_invstd,
                                                  float *running_mean, float *running_var, const void *x,
                                                  const float *tiles, const void *rx, BnAffine rb,
                                                  const float *gamma, const float *beta, int M, int C,
                                                  float momentum, float eps, int relu, uint8_t *relu_mask,
                                                  float *work, CtDtype dt, ct_stream_t stream) {
    if (M < 1 || C < 1) ct_die("batchnorm_add_bn_forward_train_gpu: M = %d, C = %d", M, C);
    if (!rx || !rb.mean || !rb.invstd || !rb.gamma || !rb.beta) ct_die("batchnorm_add_bn_forward_train_gpu: no residual BN");
    int wrote = bn_forward_train(y, save_mean, save_invstd, running_mean, running_var, x, rx, tiles, gamma, beta, M, C,
                                 momentum, eps, relu, relu_mask, rb, work, dt, stream);
    CT_CHECK_LAUNCH("batchnorm forward (train, residual BN)");
    return wrote;
}
extern "C" void batchnorm_forward_train_gpu(void *y, float *save_mean, float *save_invstd,
                                            float *running_mean, float *running_var, const void *x,
                                            const float *gamma, const float *beta, int M, int C,
                                            float momentum, float eps, int relu, float *work,
                                            CtDtype dt, ct_stream_t stream) {
    batchnorm_add_forward_train_gpu(y, save_mean, save_invstd, running_mean, running_var, x, NULL, gamma,
                                    beta, M, C, momentum, eps, relu, NULL, work, dt, stream);
}

template <typename T, int V>
static void bn_forward_eval_launch(T *y, const T *x, const T *res, const float *gamma, const float *beta,
                                   const float *running_mean, const float *running_var, int M, int C,
                                   float eps, int relu, cudaStream_t stream) {
    BnGrid g = bn_grid(C, V);
    CT_LAUNCH((bn_affine_k<T, V>), dim3(g.gx, bn_row_blocks(M, g)), BN_THREADS, 0, stream, y, x, res,
              running_mean, (const float *)NULL, gamma, running_var, eps, beta, M, C, g.tx, relu, BnAffine{},
              (uint8_t *)NULL);
}

extern "C" void batchnorm_add_forward_eval_gpu(void *y, const void *x, const void *res, const float *gamma,
                                               const float *beta, const float *running_mean,
                                               const float *running_var, int M, int C, float eps, int relu,
                                               CtDtype dt, ct_stream_t stream) {
    if (M < 1 || C < 1) ct_die("batchnorm_forward_eval_gpu: M = %d, C = %d", M, C);
    CT_DISPATCH(dt, T, {
        if (bn_vec_width<T>(C, y, x, res, NULL) > 1)
            bn_forward_eval_launch<T, CT_VEC(T)>((T *)y, (const T *)x, (const T *)res, gamma, beta, running_mean,
                                                 running_var, M, C, eps, relu, (cudaStream_t)stream);
        else
            bn_forward_eval_launch<T, 1>((T *)y, (const T *)x, (const T *)res, gamma, beta, running_mean,
                                         running_var, M, C, eps, relu, (cudaStream_t)stream);
    });
    CT_CHECK_LAUNCH("batchnorm_forward_eval_gpu");
}
extern "C" void batchnorm_forward_eval_gpu(void *y, const void *x, const float *gamma,
                                           const float *beta, const float *running_mean,
                                           const float *running_var, int M, int C, float eps,
                                           int relu, CtDtype dt, ct_stream_t stream) {
    batchnorm_add_forward_eval_gpu(y, x, NULL, gamma, beta, running_mean, running_var, M, C, eps, relu, dt,
                                   stream);
}

template <typename T, int V>
static void bn_backward_launch(T *dx, T *dres, int res_acc, float *dgamma, float *dbeta, const T *dy,
                               const T *x, const T *y, const float *gamma, const float *save_mean,
                               const float *save_invstd, int M, int C, float *work, cudaStream_t stream) {
    int nchunks = bn_chunks(M), rows = bn_rows_per_chunk(M);
    BnGrid g = bn_grid(C, V);
    double *partial = (double *)work;
    float *k = bn_consts(work, M, C);
    CT_LAUNCH((bn_sums_k<T, V, 1>), dim3(g.gx, nchunks), BN_THREADS, 0, stream, partial, x, dy, y,
              save_mean, M, C, rows, g.tx);
    CT_LAUNCH(bn_finish_grad_k, (C + 127) / 128, 128, 0, stream, dgamma, dbeta, k, (const double *)partial,
              gamma, save_mean, save_invstd, nchunks, M, C);
    CT_LAUNCH((bn_dx_k<T, V>), dim3(g.gx, bn_row_blocks(M, g)), BN_THREADS, 0, stream, dx, dres, res_acc, dy,
              x, y, (const float *)k, M, C, g.tx);
}

extern "C" void batchnorm_add_backward_gpu(void *dx, void *dres, int res_acc, float *dgamma, float *dbeta,
                                           const void *dy, const void *x, const void *y, const float *gamma,
                                           const float *save_mean, const float *save_invstd, int M, int C,
                                           float *work, CtDtype dt, ct_stream_t stream) {
    if (M < 1 || C < 1) ct_die("batchnorm_backward_gpu: M = %d, C = %d", M, C);
    CT_DISPATCH(dt, T, {
        if (bn_vec_width<T>(C, dx, dy, x, y, dres) > 1)
            bn_backward_launch<T, CT_VEC(T)>((T *)dx, (T *)dres, res_acc, dgamma, dbeta, (const T *)dy,
                                             (const T *)x, (const T *)y, gamma, save_mean, save_invstd, M, C,
                                             work, (cudaStream_t)stream);
        else
            bn_backward_launch<T, 1>((T *)dx, (T *)dres, res_acc, dgamma, dbeta, (const T *)dy, (const T *)x,
                                     (const T *)y, gamma, save_mean, save_invstd, M, C, work,
                                     (cudaStream_t)stream);
    });
    CT_CHECK_LAUNCH("batchnorm_backward_gpu");
}
extern "C" void batchnorm_backward_gpu(void *dx, float *dgamma, float *dbeta, const void *dy,
                                       const void *x, const void *y, const float *gamma,
                                       const float *save_mean, const float *save_invstd, int M,
                                       int C, float *work, CtDtype dt, ct_stream_t stream) {
    batchnorm_add_backward_gpu(dx, NULL, 0, dgamma, dbeta, dy, x, y, gamma, save_mean, save_invstd, M, C, work,
                               dt, stream);
}

// The backward with the reductions done by the data-gradient epilogue before it (the tiles at the
// start of work, dy already masked by the ReLU): no reduction pass over dy and x.
template <typename T, int V>
static void bn_backward_tiles_launch(T *dx, float *dgamma, float *dbeta, const T *dy, const T *x, const float *tiles,
                                     int ntiles, const float *gamma, const float *save_mean, const float *save_invstd, int M,
                                     int C, float *work, cudaStream_t stream) {
    BnGrid g = bn_grid(C, V);
    float *k = bn_consts(work, M, C);
    CT_LAUNCH(bn_finish_grad_tiles_k, (C + 127) / 128, 128, 0, stream, dgamma, dbeta, k, tiles, gamma, save_mean,
              save_invstd, ntiles, M, C);
    CT_LAUNCH((bn_dx_k<T, V>), dim3(g.gx, bn_row_blocks(M, g)), BN_THREADS, 0, stream, dx, (T *)NULL, 0, dy, x,
              (const T *)NULL, (const float *)k, M, C, g.tx);
}

extern "C" void batchnorm_backward_tiles_gpu(void *dx, float *dgamma, float *dbeta, const void *dy, const void *x,
                                             const float *tiles, int ntiles, const float *gamma, const float *save_mean,
                                             const float *save_invstd, int M, int C, float *work, CtDtype dt,
                                             ct_stream_t stream) {
    if (M < 1 || C < 1 || ntiles < 1 || ntiles > bn_max_tiles(M))
        ct_die("batchnorm_backward_tiles_gpu: M = %d, C = %d, %d tiles", M, C, ntiles);
    CT_DISPATCH(dt, T, {
        if (bn_vec_width<T>(C, dx, dy, x, NULL, NULL) > 1)
            bn_backward_tiles_launch<T, CT_VEC(T)>((T *)dx, dgamma, dbeta, (const T *)dy, (const T *)x, tiles, ntiles, gamma,
                                                   save_mean, save_invstd, M, C, work, (cudaStream_t)stream);
        else
            bn_backward_tiles_launch<T, 1>((T *)dx, dgamma, dbeta, (const T *)dy, (const T *)x, tiles, ntiles, gamma,
                                           save_mean, save_invstd, M, C, work, (cudaStream_t)stream);
    });
    CT_CHECK_LAUNCH("batchnorm backward (tile sums)");
}
