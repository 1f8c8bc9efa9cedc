// CPU batch norm over an [M, C] matrix (NHWC activations), PyTorch training semantics.
//
// Per-channel sums run over fixed chunks of rows (the chunk size depends on M only), blocks of 16
// rows accumulated in double (vectorised over channels), and the chunks are combined in index
// order. Float block sums are not enough: the gradient of a BN bias that feeds conv+BN is a sum
// that cancels to ~1e-4 of its terms, and float blocks left it ~1e-2 off (test_parity.sh resnet20).
// Thread count therefore never changes a result, and the double partials keep the statistics
// exact enough to be an oracle.
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "nn/gemm.h"
#include "nn/layers.h"
#include "util/common.h"

// Rows per chunk: at least 64, and at most 512 chunks.
static int chunk_rows(int M) {
    int r = (M + 511) / 512;
    return r < 64 ? 64 : r;
}

enum { SUM_SHIFT, SUM_GRAD };

// Per-channel sums over the M rows:
//   SUM_SHIFT: s1 = sum (x - k), s2 = sum (x - k)^2 with k = mean[] a per-channel shift (one
//              pass for both statistics; with k a sample of the data there is no cancellation
//              worth the name, as in the textbook shifted-data variance)
//   SUM_GRAD:  s1 = sum g, s2 = sum g * (x - mean), g = dy masked by y > 0 when y != NULL
// Each chunk of rows sums blocks of 16 rows in double (vectorised over channels), adds each block
// into double, and the chunks are combined in index order.
// One chunk of rows [r0, r1) into a1[C], a2[C]. Vectorised over channels; the AVX-512 clone does
// 8 doubles per instruction (the double accumulation is what BN's time goes into).
#if defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_ADDRESS__)
__attribute__((target_clones("avx512f", "default")))
#endif
static void chunk_sums(double *restrict a1, double *restrict a2, double *restrict f1, double *restrict f2,
                       int mode, const float *x, const float *dy, const float *y, const float *mean, int r0,
                       int r1, int C) {
    for (int c = 0; c < C; c++) a1[c] = 0;
    for (int c = 0; c < C; c++) a2[c] = 0;
    for (int rb = r0; rb < r1; rb += 16) {
        const int re = CT_MIN(r1, rb + 16);
        for (int c = 0; c < C; c++) f1[c] = 0, f2[c] = 0;
        for (int r = rb; r < re; r++) {
            const float *xr = x + (size_t)r * C;
            if (mode == SUM_SHIFT) {
                for (int c = 0; c < C; c++) {
                    const double d = (double)xr[c] - mean[c];
                    f1[c] += d;
                    f2[c] += d * d;
                }
            } else if (y) {
                const float *gr = dy + (size_t)r * C, *yr = y + (size_t)r * C;
                for (int c = 0; c < C; c++) {
                    const float gv = gr[c], g = yr[c] > 0 ? gv : 0.0f;
                    f1[c] += g;
                    f2[c] += g * ((double)xr[c] - mean[c]);
                }
            } else {
                const float *gr = dy + (size_t)r * C;
                for (int c = 0; c < C; c++) {
                    f1[c] += gr[c];
                    f2[c] += gr[c] * ((double)xr[c] - mean[c]);
                }
            }
        }
        for (int c = 0; c < C; c++) a1[c] += f1[c];
        for (int c = 0; c < C; c++) a2[c] += f2[c];
    }
}

// The same sums for C a multiple of 16, written out in AVX-512 (GCC leaves the masked gradient
// loop scalar): 16 channels at a time, the block and chunk accumulators in registers. The same
// operations in the same order as chunk_sums (no fused multiply-add), so the same results.
#if defined(__GNUC__) && defined(__x86_64__)
#define HAVE_SUMS16 1
__attribute__((target("avx512f"))) static void chunk_sums16(double *restrict a1, double *restrict a2, int mode,
                                                             const float *x, const float *dy, const float *y,
                                                             const float *mean, int r0, int r1, int C) {
    for (int cb = 0; cb < C; cb += 16) {
        const __m512d ml = _mm512_cvtps_pd(_mm256_loadu_ps(mean + cb)), mh = _mm512_cvtps_pd(_mm256_loadu_ps(mean + cb + 8));
        __m512d a1l = _mm512_setzero_pd(), a1h = a1l, a2l = a1l, a2h = a1l;
        for (int rb = r0; rb < r1; rb += 16) {
            const int re = CT_MIN(r1, rb + 16);
            __m512d f1l = _mm512_setzero_pd(), f1h = f1l, f2l = f1l, f2h = f1l;
            for (int r = rb; r < re; r++) {
                const size_t o = (size_t)r * C + cb;
                const __m512d dl = _mm512_sub_pd(_mm512_cvtps_pd(_mm256_loadu_ps(x + o)), ml);
                const __m512d dh = _mm512_sub_pd(_mm512_cvtps_pd(_mm256_loadu_ps(x + o + 8)), mh);
                if (mode == SUM_SHIFT) {
                    f1l = _mm512_add_pd(f1l, dl), f1h = _mm512_add_pd(f1h, dh);
                    f2l = _mm512_add_pd(f2l, _mm512_mul_pd(dl, dl)), f2h = _mm512_add_pd(f2h, _mm512_mul_pd(dh, dh));
                } else {
                    __m512 g = _mm512_loadu_ps(dy + o);
                    if (y) g = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(_mm512_loadu_ps(y + o), _mm512_setzero_ps(), _CMP_GT_OQ), g);
                    const __m512d gl = _mm512_cvtps_pd(_mm512_castps512_ps256(g));
                    const __m512d gh = _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(g), 1)));
                    f1l = _mm512_add_pd(f1l, gl), f1h = _mm512_add_pd(f1h, gh);
                    f2l = _mm512_add_pd(f2l, _mm512_mul_pd(gl, dl)), f2h = _mm512_add_pd(f2h, _mm512_mul_pd(gh, dh));
                }
            }
            a1l = _mm512_add_pd(a1l, f1l), a1h = _mm512_add_pd(a1h, f1h);
            a2l = _mm512_add_pd(a2l, f2l), a2h = _mm512_add_pd(a2h, f2h);
        }
        _mm512_storeu_pd(a1 + cb, a1l), _mm512_storeu_pd(a1 + cb + 8, a1h);
        _mm512_storeu_pd(a2 + cb, a2l), _mm512_storeu_pd(a2 + cb + 8, a2h);
    }
}
#else
#define HAVE_SUMS16 0
#endif

static void channel_sums(double *s1, double *s2, int mode, const float *x, const float *dy, const float *y,
                         const float *mean, int M, int C) {
    const int cr = chunk_rows(M), nchunks = (M + cr - 1) / cr;
    double *part = ct_alloc((size_t)nchunks * C * 2 * sizeof(double));
    // The AVX-512 sums go with the AVX-512 GEMM kernel (forcing "generic" there tests the C loop).
    const int wide = C % 16 == 0 && !strcmp(sgemm_kernel_name(), "avx512");
    (void)wide;
#pragma omp parallel
    {
        double *f1 = ct_alloc((size_t)C * 2 * sizeof(double)), *f2 = f1 + C;
#pragma omp for schedule(static)
        for (int k = 0; k < nchunks; k++) {
            double *a1 = part + (size_t)k * C * 2, *a2 = a1 + C;
#if HAVE_SUMS16
            if (wide)
                chunk_sums16(a1, a2, mode, x, dy, y, mean, k * cr, CT_MIN(M, (k + 1) * cr), C);
            else
#endif
                chunk_sums(a1, a2, f1, f2, mode, x, dy, y, mean, k * cr, CT_MIN(M, (k + 1) * cr), C);
        }
        free(f1);
    }
    for (int c = 0; c < C; c++) s1[c] = 0;
    for (int c = 0; c < C; c++) s2[c] = 0;
    for (int k = 0; k < nchunks; k++) {
        const double *a1 = part + (size_t)k * C * 2, *a2 = a1 + C;
        for (int c = 0; c < C; c++) s1[c] += a1[c];
        for (int c = 0; c < C; c++) s2[c] += a2[c];
    }
    free(part);
}

// The row loops of affine and batchnorm_add_backward for C a multiple of 16, written out in
// AVX-512: the portable build targets baseline x86-64, where GCC left them scalar or 4 wide (at
// 16 channels the backward's row loop took 11% of resnet20's step). The same operations in the
// same order (no fused multiply-add), so the same bits; each vector's loads precede its stores,
// so dx and dres may alias dy as in the C loop.
#if defined(__GNUC__) && defined(__x86_64__)
#define HAVE_ROWS16 1
__attribute__((target("avx512f"))) static void affine_rows16(float *y, const float *x, const float *res,
                                                              const float *mean, const float *scale,
                                                              const float *beta, int r0, int r1, int C, int relu) {
    for (int r = r0; r < r1; r++)
        for (int c = 0; c < C; c += 16) {
            const size_t o = (size_t)r * C + c;
            __m512 v = _mm512_sub_ps(_mm512_loadu_ps(x + o), _mm512_loadu_ps(mean + c));
            v = _mm512_add_ps(_mm512_mul_ps(v, _mm512_loadu_ps(scale + c)), _mm512_loadu_ps(beta + c));
            if (res) v = _mm512_add_ps(v, _mm512_loadu_ps(res + o));
            if (relu) v = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(v, _mm512_setzero_ps(), _CMP_GT_OQ), v);
            _mm512_storeu_ps(y + o, v);
        }
}
__attribute__((target("avx512f"))) static void backward_rows16(float *dx, float *dres, int res_acc, const float *dy,
                                                                const float *x, const float *y, const float *k0,
                                                                const float *k1, const float *k2, int r0, int r1,
                                                                int C) {
    for (int r = r0; r < r1; r++)
        for (int c = 0; c < C; c += 16) {
            const size_t o = (size_t)r * C + c;
            __m512 g = _mm512_loadu_ps(dy + o);
            if (y) g = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(_mm512_loadu_ps(y + o), _mm512_setzero_ps(), _CMP_GT_OQ), g);
            const __m512 xv = _mm512_loadu_ps(x + o);
            if (dres) _mm512_storeu_ps(dres + o, res_acc ? _mm512_add_ps(_mm512_loadu_ps(dres + o), g) : g);
            const __m512 d = _mm512_add_ps(_mm512_mul_ps(_mm512_loadu_ps(k0 + c), g), _mm512_mul_ps(_mm512_loadu_ps(k1 + c), xv));
            _mm512_storeu_ps(dx + o, _mm512_add_ps(d, _mm512_loadu_ps(k2 + c)));
        }
}
#else
#define HAVE_ROWS16 0
#endif

// Rows per OpenMP chunk of the vectorised row loops (a fixed static split: which thread writes a
// row never changes what it writes).
#define ROWS_CHUNK 256

// The AVX-512 row loops go with the AVX-512 GEMM kernel, like the sums (forcing "generic" tests
// the C loops).
static int rows16(int C) { return HAVE_ROWS16 && C % 16 == 0 && !strcmp(sgemm_kernel_name(), "avx512"); }

// y = (x - mean[c]) * scale[c] + beta[c] [+ res], optionally clamped at zero. Subtracting the mean
// first (rather than folding it into a shift) avoids cancellation when invstd is large. The
// residual is added to the float BN output, exactly as add_forward adds two tensors.
static void affine(float *y, const float *x, const float *res, const float *mean, const float *scale,
                   const float *beta, int M, int C, int relu) {
#if HAVE_ROWS16
    if (rows16(C)) {
#pragma omp parallel for schedule(static)
        for (int r0 = 0; r0 < M; r0 += ROWS_CHUNK)
            affine_rows16(y, x, res, mean, scale, beta, r0, CT_MIN(M, r0 + ROWS_CHUNK), C, relu);
        return;
    }
#endif
#pragma omp parallel for schedule(static)
    for (int r = 0; r < M; r++) {
        const size_t o = (size_t)r * C;
        if (res) {
            for (int c = 0; c < C; c++) {
                float v = (x[o + c] - mean[c]) * scale[c] + beta[c];
                v = v + res[o + c];
                y[o + c] = relu && !(v > 0) ? 0.0f : v;
            }
        } else {
            for (int c = 0; c < C; c++) {
                float v = (x[o + c] - mean[c]) * scale[c] + beta[c];
                y[o + c] = relu && !(v > 0) ? 0.0f : v;
            }
        }
    }
}

void batchnorm_forward_train(float *y, float *save_mean, float *save_invstd, float *running_mean,
                             float *running_var, const float *x, const float *gamma, const float *beta,
                             int M, int C, float momentum, float eps, int relu) {
    batchnorm_add_forward_train(y, save_mean, save_invstd, running_mean, running_var, x, NULL, gamma, beta, M, C,
                                momentum, eps, relu);
}

// What a training forward writes for channel c from its mean and biased variance, however they were
// gathered (channel sums or conv-epilogue tiles): the saved statistics, gamma * invstd, the running
// averages.
static void publish_stats(int c, float mean, double var, float *save_mean, float *save_invstd, float *scale,
                          float *running_mean, float *running_var, const float *gamma, int M, float momentum,
                          float eps) {
    save_mean[c] = mean;
    save_invstd[c] = (float)(1.0 / sqrt(var + eps));
    scale[c] = gamma[c] * save_invstd[c];
    if (running_mean) running_mean[c] = (1 - momentum) * running_mean[c] + momentum * save_mean[c];
    if (running_var) {
        const double unbiased = M > 1 ? var * M / (M - 1) : var;
        running_var[c] = (float)((1 - momentum) * running_var[c] + momentum * unbiased);
    }
}

void batchnorm_add_forward_train(float *y, float *save_mean, float *save_invstd, float *running_mean,
                                 float *running_var, const float *x, const float *res, const float *gamma,
                                 const float *beta, int M, int C, float momentum, float eps, int relu) {
    double *sum = ct_alloc((size_t)C * 2 * sizeof(double)), *sq = sum + C;
    float *scale = ct_alloc((size_t)C * 2 * sizeof(float)), *shift = scale + C;
    // One pass: sums of (x - x[0]) and its square, mean and variance from those in double.
    for (int c = 0; c < C; c++) shift[c] = x[c];
    channel_sums(sum, sq, SUM_SHIFT, x, NULL, NULL, shift, M, C);
    for (int c = 0; c < C; c++) {
        const double d = sum[c] / M;
        const double var = fmax(0.0, sq[c] / M - d * d);
        publish_stats(c, (float)(shift[c] + d), var, save_mean, save_invstd, scale, running_mean, running_var, gamma,
                      M, momentum, eps);
    }
    affine(y, x, res, save_mean, scale, beta, M, C, relu);
    free(scale);
    free(sum);
}

void batchnorm_forward_eval(float *y, const float *x, const float *gamma, const float *beta,
                            const float *running_mean, const float *running_var, int M, int C, float eps,
                            int relu) {
    batchnorm_add_forward_eval(y, x, NULL, gamma, beta, running_mean, running_var, M, C, eps, relu);
}

void batchnorm_add_forward_eval(float *y, const float *x, const float *res, const float *gamma,
                                const float *beta, const float *running_mean, const float *running_var, int M,
                                int C, float eps, int relu) {
    float *scale = ct_alloc((size_t)C * sizeof(float));
    for (int c = 0; c < C; c++) scale[c] = (float)(gamma[c] / sqrt((double)running_var[c] + eps));
    affine(y, x, res, running_mean, scale, beta, M, C, relu);
    free(scale);
}

// With g = dy (masked by the fused ReLU) and xhat = (x - mean) * invstd:
//   dbeta = sum g, dgamma = sum g * xhat,
//   dx = gamma * invstd * (g - dbeta / M - xhat * dgamma / M).
void batchnorm_backward(float *dx, float *dgamma, float *dbeta, const float *dy, const float *x,
                        const float *y, const float *gamma, const float *save_mean,
                        const float *save_invstd, int M, int C) {
    batchnorm_add_backward(dx, NULL, 0, dgamma, dbeta, dy, x, y, gamma, save_mean, save_invstd, M, C);
}

// The residual operand's gradient is g itself (d(bn + res)/dres = 1 under the ReLU mask): written
// to dres, or added to it (res_acc) when the residual tensor already holds a gradient.
void batchnorm_add_backward(float *dx, float *dres, int res_acc, float *dgamma, float *dbeta, const float *dy,
                            const float *x, const float *y, const float *gamma, const float *save_mean,
                            const float *save_invstd, int M, int C) {
    double *sg = ct_alloc((size_t)C * 2 * sizeof(double)), *sgx = sg + C;
    float *k0 = ct_alloc((size_t)C * 3 * sizeof(float)), *k1 = k0 + C, *k2 = k1 + C;
    channel_sums(sg, sgx, SUM_GRAD, x, dy, y, save_mean, M, C);
    for (int c = 0; c < C; c++) {
        const double inv = save_invstd[c];
        dbeta[c] = (float)sg[c];
        dgamma[c] = (float)(sgx[c] * inv);
        // dx = k0 * g + k1 * x + k2, expanding xhat = (x - mean) * inv.
        const double a = gamma[c] * inv;
        const double b = sgx[c] * inv * inv / M;  // dgamma / M * inv
        k0[c] = (float)a;
        k1[c] = (float)(-a * b);
        k2[c] = (float)(a * (b * save_mean[c] - sg[c] / M));
    }
#if HAVE_ROWS16
    if (rows16(C)) {
#pragma omp parallel for schedule(static)
        for (int r0 = 0; r0 < M; r0 += ROWS_CHUNK)
            backward_rows16(dx, dres, res_acc, dy, x, y, k0, k1, k2, r0, CT_MIN(M, r0 + ROWS_CHUNK), C);
        free(k0);
        free(sg);
        return;
    }
#endif
#pragma omp parallel for schedule(static)
    for (int r = 0; r < M; r++) {
        const size_t o = (size_t)r * C;
        if (dres) {
            // Every element of dy, y and x is read before dx or dres is written (either may alias dy).
            for (int c = 0; c < C; c++) {
                const float gv = dy[o + c], g = !y || y[o + c] > 0 ? gv : 0.0f;
                const float xv = x[o + c];
                dres[o + c] = res_acc ? dres[o + c] + g : g;
                dx[o + c] = k0[c] * g + k1[c] * xv + k2[c];
            }
        } else if (y) {
            for (int c = 0; c < C; c++) {
                const float gv = dy[o + c], g = y[o + c] > 0 ? gv : 0.0f;
                dx[o + c] = k0[c] * g + k1[c] * x[o + c] + k2[c];
            }
        } else {
            for (int c = 0; c < C; c++) dx[o + c] = k0[c] * dy[o + c] + k1[c] * x[o + c] + k2[c];
        }
    }
    free(k0);
    free(sg);
}

// ---------------------------------------------------------------------------------------------
// Statistics from a convolution's tiles (nn/layers.h; the GPU pair: kernels/conv_tc2.cu's
// t2_tile_stats and kernels/batchnorm.cu's bn_finish_tiles_k).
void batchnorm_tile_stats(float *tiles, const float *y, int M, int C) {
    const int nt = (M + BN_STATS_TILE_ROWS - 1) / BN_STATS_TILE_ROWS;
    for (int t = 0; t < nt; t++) {
        const int r0 = t * BN_STATS_TILE_ROWS, r1 = M < r0 + BN_STATS_TILE_ROWS ? M : r0 + BN_STATS_TILE_ROWS;
        for (int c = 0; c < C; c++) {
            double sum = 0.0, m2 = 0.0;
            for (int r = r0; r < r1; r++) sum += y[(size_t)r * C + c];
            const double mu = sum / (r1 - r0);
            for (int r = r0; r < r1; r++) m2 += (y[(size_t)r * C + c] - mu) * (y[(size_t)r * C + c] - mu);
            tiles[((size_t)t * C + c) * 2] = (float)sum;
            tiles[((size_t)t * C + c) * 2 + 1] = (float)m2;
        }
    }
}

void batchnorm_add_forward_train_tiles(float *y, float *save_mean, float *save_invstd, float *running_mean,
                                       float *running_var, const float *x, const float *res, const float *tiles,
                                       const float *gamma, const float *beta, int M, int C, float momentum,
                                       float eps, int relu) {
    const int nt = (M + BN_STATS_TILE_ROWS - 1) / BN_STATS_TILE_ROWS;
    float *scale = ct_alloc((size_t)C * sizeof(float));
    for (int c = 0; c < C; c++) {
        double n = 0.0, mu = 0.0, m2 = 0.0;
        for (int t = 0; t < nt; t++) {  // Chan, Golub and LeVeque's pairwise update, in tile order
            const int rows = M - t * BN_STATS_TILE_ROWS;
            const double nb = rows < BN_STATS_TILE_ROWS ? rows : BN_STATS_TILE_ROWS;
            const double d = tiles[((size_t)t * C + c) * 2] / nb - mu, nn = n + nb;
            mu += d * nb / nn;
            m2 += tiles[((size_t)t * C + c) * 2 + 1] + d * d * n * nb / nn;
            n = nn;
        }
        const double var = fmax(0.0, m2 / M);
        publish_stats(c, (float)mu, var, save_mean, save_invstd, scale, running_mean, running_var, gamma, M,
                      momentum, eps);
    }
    affine(y, x, res, save_mean, scale, beta, M, C, relu);
    free(scale);
}

// ---------------------------------------------------------------------------------------------
// Backward reductions from a data gradient's tiles (nn/layers.h; the GPU pair: kernels/conv_tc2.cu's
// t2_tile_gsums and kernels/batchnorm.cu's bn_finish_grad_tiles_k).
void batchnorm_relu_grad_tiles(float *g, float *tiles, const float *dy, const float *x, const float *gamma,
                               const float *beta, const float *mean, const float *invstd, int M, int C) {
    const int nt = (M + BN_STATS_TILE_ROWS - 1) / BN_STATS_TILE_ROWS;
    for (int t = 0; t < nt; t++)
        for (int c = 0; c < C; c++) {
            const float sc = gamma[c] * invstd[c];
            float s1 = 0.0f, s2 = 0.0f;
            for (int r = t * BN_STATS_TILE_ROWS; r < M && r < (t + 1) * BN_STATS_TILE_ROWS; r++) {
                const size_t i = (size_t)r * C + c;
                const float d = x[i] - mean[c], o = d * sc + beta[c];
                const float gv = o > 0.0f ? dy[i] : 0.0f;  // bn_affine_k's ReLU, recomputed
                g[i] = gv;
                s1 += gv;
                s2 += gv * d;
            }
            tiles[((size_t)t * C + c) * 2] = s1;
            tiles[((size_t)t * C + c) * 2 + 1] = s2;
        }
}

void batchnorm_tail_grad_tiles(float *g, float *tiles, const float *dy, const float *y, const float *x,
                               const float *mean, int M, int C) {
    const int nt = (M + BN_STATS_TILE_ROWS - 1) / BN_STATS_TILE_ROWS;
    for (int t = 0; t < nt; t++)
        for (int c = 0; c < C; c++) {
            float s1 = 0.0f, s2 = 0.0f;
            for (int r = t * BN_STATS_TILE_ROWS; r < M && r < (t + 1) * BN_STATS_TILE_ROWS; r++) {
                const size_t i = (size_t)r * C + c;
                const float gv = y[i] > 0.0f ? dy[i] : 0.0f;
                g[i] = gv;
                s1 += gv;
                s2 += gv * (x[i] - mean[c]);
            }
            tiles[((size_t)t * C + c) * 2] = s1;
            tiles[((size_t)t * C + c) * 2 + 1] = s2;
        }
}

void batchnorm_backward_tiles(float *dx, float *dgamma, float *dbeta, const float *g, const float *x,
                              const float *tiles, int nt, const float *gamma, const float *save_mean,
                              const float *save_invstd, int M, int C) {
    float *k0 = ct_alloc((size_t)C * 3 * sizeof(float)), *k1 = k0 + C, *k2 = k1 + C;
    for (int c = 0; c < C; c++) {
        double sg = 0.0, sgx = 0.0;
        for (int t = 0; t < nt; t++) {
            sg += tiles[((size_t)t * C + c) * 2];
            sgx += tiles[((size_t)t * C + c) * 2 + 1];
        }
        const double inv = save_invstd[c];
        dbeta[c] = (float)sg;
        dgamma[c] = (float)(sgx * inv);
        const double a = gamma[c] * inv, b = sgx * inv * inv / M;
        k0[c] = (float)a;
        k1[c] = (float)(-a * b);
        k2[c] = (float)(a * (b * save_mean[c] - sg / M));
    }
#pragma omp parallel for schedule(static)
    for (int r = 0; r < M; r++)
        for (int c = 0; c < C; c++) {
            const size_t i = (size_t)r * C + c;
            dx[i] = k0[c] * g[i] + k1[c] * x[i] + k2[c];
        }
    free(k0);
}
