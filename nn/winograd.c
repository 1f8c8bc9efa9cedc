// Winograd F(2x2, 3x3) for the 3x3 stride-1 pad-1 convolutions of inference (nn/fold.c) and of
// the CPU training step's forwards and stride-1 data gradients (nn/conv.c).
//
// A 2x2 block of outputs of a 3x3 convolution needs 16 multiplies per (input, output channel)
// pair in the Winograd domain instead of 36 directly: per 4x4 input tile d and filter g,
//   Y = A^T [ (G g G^T) .* (B^T d B) ] A
// and summing over input channels turns the 16 elementwise products into 16 independent GEMMs
// (tile x C) by (C x K). ResNet-18/34 spend ~80% of their flops in such convolutions, so this
// cuts their inference work by ~40%. The transforms are additions only (G has halves: the
// weights are transformed once, in double); the error is a few float32 roundings more than the
// direct sum, checked in tests/test_fold.c against conv2d_forward.
//
// Work is split into blocks of TB tiles (in (image, tile row, tile column) order); a block is
// transformed, multiplied and transformed back by one thread in buffers that stay in its cache,
// so each output depends only on its own tile: the result is the same bits for any thread count
// and batch size.
#include "nn/winograd.h"

#include <immintrin.h>
#include <omp.h>
#include <string.h>

#include "nn/gemm.h"
#include "util/common.h"

#define MR 14        // tiles per micro-kernel row block
#define TB (2 * MR)  // tiles per block

int winograd_ok(const ConvShape *s) { return winograd_ok_k16(s) && s->K % 32 == 0; }

int winograd_ok_k16(const ConvShape *s) {
    if (s->R != 3 || s->S != 3 || s->stride != 1 || s->pad != 1 || s->C % 16 || s->K % 16) return 0;
    return !strcmp(sgemm_kernel_name(), "avx512");
}

// u[xi][c][k] (xi = 4 i + j) = (G g G^T)[i][j] of filter g = w[k][.][.][c] (KRSC).
void winograd_weights(float *u, const float *w, int K, int C) {
    // c outer, k inner: the 16 output rows u[xi][c][.] are written contiguously.
#pragma omp parallel for schedule(static)
    for (int c = 0; c < C; c++)
        for (int k = 0; k < K; k++) {
            double g[3][3], t[4][3];
            for (int r = 0; r < 3; r++)
                for (int s = 0; s < 3; s++) g[r][s] = w[(((size_t)k * 3 + r) * 3 + s) * C + c];
            for (int s = 0; s < 3; s++) {
                t[0][s] = g[0][s];
                t[1][s] = 0.5 * (g[0][s] + g[1][s] + g[2][s]);
                t[2][s] = 0.5 * (g[0][s] - g[1][s] + g[2][s]);
                t[3][s] = g[2][s];
            }
            for (int i = 0; i < 4; i++) {
                const double v[4] = {t[i][0], 0.5 * (t[i][0] + t[i][1] + t[i][2]), 0.5 * (t[i][0] - t[i][1] + t[i][2]),
                                     t[i][2]};
                for (int j = 0; j < 4; j++) u[((size_t)(4 * i + j) * C + c) * K + k] = (float)v[j];
            }
        }
}

#if defined(__GNUC__) && defined(__x86_64__)
#pragma GCC push_options
#pragma GCC target("avx512f")
// v[xi][t][C] = B^T d B for the tiles [t0, t0 + nt) of the block (the rest of TB zero).
static void input_transform(const ConvShape *s, float *restrict v, const float *restrict in, size_t t0, int nt,
                            int tw, int th) {
    const int C = s->C;
    for (int t = 0; t < TB; t++) {
        if (t >= nt) {
            for (int xi = 0; xi < 16; xi++) memset(v + ((size_t)xi * TB + t) * C, 0, (size_t)C * sizeof(float));
            continue;
        }
        const size_t tile = t0 + t;
        const int n = (int)(tile / ((size_t)th * tw)), ty = (int)(tile / tw % th), tx = (int)(tile % tw);
        const float *img = in + (size_t)n * s->H * s->W * C;
        const float *src[4][4];
        for (int i = 0; i < 4; i++)
            for (int j = 0; j < 4; j++) {
                const int y = 2 * ty - 1 + i, x = 2 * tx - 1 + j;
                src[i][j] = y >= 0 && y < s->H && x >= 0 && x < s->W ? img + ((size_t)y * s->W + x) * C : NULL;
            }
        for (int c = 0; c < C; c += 16) {
            __m512 d[4][4], q[4][4];
            for (int i = 0; i < 4; i++)
                for (int j = 0; j < 4; j++) d[i][j] = src[i][j] ? _mm512_loadu_ps(src[i][j] + c) : _mm512_setzero_ps();
            for (int j = 0; j < 4; j++) {
                q[0][j] = _mm512_sub_ps(d[0][j], d[2][j]);
                q[1][j] = _mm512_add_ps(d[1][j], d[2][j]);
                q[2][j] = _mm512_sub_ps(d[2][j], d[1][j]);
                q[3][j] = _mm512_sub_ps(d[1][j], d[3][j]);
            }
            for (int i = 0; i < 4; i++) {
                float *o = v + ((size_t)(4 * i) * TB + t) * C + c;
                const size_t xs = (size_t)TB * C;
                _mm512_storeu_ps(o, _mm512_sub_ps(q[i][0], q[i][2]));
                _mm512_storeu_ps(o + xs, _mm512_add_ps(q[i][1], q[i][2]));
                _mm512_storeu_ps(o + 2 * xs, _mm512_sub_ps(q[i][2], q[i][1]));
                _mm512_storeu_ps(o + 3 * xs, _mm512_sub_ps(q[i][1], q[i][3]));
            }
        }
    }
}

// m[xi][t][kb .. kb + 16 NV) = v[xi][t][C] u[xi][C][kb ..]: MR tiles x 16 NV output channels in
// registers, the input channels summed in order.
#define DEFINE_BLOCK_GEMM_KB(NV)                                                                         \
    static void block_gemm_kb##NV(const ConvShape *s, float *restrict mx, const float *restrict vx,     \
                                  const float *restrict ux, int kb) {                                    \
        const int C = s->C, K = s->K;                                                                    \
        for (int tg = 0; tg < TB; tg += MR) {                                                            \
            __m512 acc[MR][NV];                                                                          \
            for (int i = 0; i < MR; i++)                                                                 \
                for (int v = 0; v < NV; v++) acc[i][v] = _mm512_setzero_ps();                            \
            const float *a = vx + (size_t)tg * C, *b = ux + kb;                                          \
            for (int c = 0; c < C; c++, b += K) {                                                        \
                __m512 bv[NV];                                                                           \
                for (int v = 0; v < NV; v++) bv[v] = _mm512_loadu_ps(b + 16 * v);                        \
                _Pragma("GCC unroll 14") for (int i = 0; i < MR; i++) {                                  \
                    const __m512 x = _mm512_set1_ps(a[(size_t)i * C + c]);                              \
                    for (int v = 0; v < NV; v++) acc[i][v] = _mm512_fmadd_ps(x, bv[v], acc[i][v]);       \
                }                                                                                        \
            }                                                                                            \
            for (int i = 0; i < MR; i++)                                                                 \
                for (int v = 0; v < NV; v++) _mm512_storeu_ps(mx + (size_t)(tg + i) * K + kb + 16 * v, acc[i][v]); \
        }                                                                                                \
    }
DEFINE_BLOCK_GEMM_KB(2)
DEFINE_BLOCK_GEMM_KB(1)

// m[xi][t][K] = v[xi][t][C] u[xi][C][K] for all 16 xi: 32-channel blocks, a 16-channel remainder
// (training's 16-channel layers, conv.c).
static void block_gemm(const ConvShape *s, float *restrict m, const float *restrict v, const float *restrict u) {
    const int C = s->C, K = s->K;
    for (int xi = 0; xi < 16; xi++) {
        const float *vx = v + (size_t)xi * TB * C, *ux = u + (size_t)xi * C * K;
        float *mx = m + (size_t)xi * TB * K;
        int kb = 0;
        for (; kb + 32 <= K; kb += 32) block_gemm_kb2(s, mx, vx, ux, kb);
        if (kb < K) block_gemm_kb1(s, mx, vx, ux, kb);
    }
}

// out = relu?(A^T m A + bias + res) for the tiles [t0, t0 + nt), clipped at odd edges.
static void output_transform(const ConvShape *s, float *restrict out, const float *restrict m, const float *bias,
                             const float *res, int relu, size_t t0, int nt, int tw, int th) {
    const int K = s->K;
    const size_t xs = (size_t)TB * K;
    for (int t = 0; t < nt; t++) {
        const size_t tile = t0 + t;
        const int n = (int)(tile / ((size_t)th * tw)), ty = (int)(tile / tw % th), tx = (int)(tile % tw);
        for (int k = 0; k < K; k += 16) {
            const float *p = m + (size_t)t * K + k;
            __m512 r[2][4];
            for (int j = 0; j < 4; j++) {
                const __m512 m0 = _mm512_loadu_ps(p + (size_t)j * xs), m1 = _mm512_loadu_ps(p + (size_t)(4 + j) * xs);
                const __m512 m2 = _mm512_loadu_ps(p + (size_t)(8 + j) * xs), m3 = _mm512_loadu_ps(p + (size_t)(12 + j) * xs);
                r[0][j] = _mm512_add_ps(_mm512_add_ps(m0, m1), m2);
                r[1][j] = _mm512_sub_ps(_mm512_sub_ps(m1, m2), m3);
            }
            const __m512 b = bias ? _mm512_loadu_ps(bias + k) : _mm512_setzero_ps();
            for (int i = 0; i < 2; i++) {
                const int y = 2 * ty + i;
                if (y >= s->P) break;
                const __m512 yv[2] = {_mm512_add_ps(_mm512_add_ps(r[i][0], r[i][1]), r[i][2]),
                                      _mm512_sub_ps(_mm512_sub_ps(r[i][1], r[i][2]), r[i][3])};
                for (int j = 0; j < 2; j++) {
                    const int x = 2 * tx + j;
                    if (x >= s->Q) break;
                    const size_t o = (((size_t)n * s->P + y) * s->Q + x) * K + k;
                    __m512 val = _mm512_add_ps(yv[j], b);
                    if (res) val = _mm512_add_ps(val, _mm512_loadu_ps(res + o));
                    if (relu) val = _mm512_max_ps(val, _mm512_setzero_ps());
                    _mm512_storeu_ps(out + o, val);
                }
            }
        }
    }
}
#pragma GCC pop_options

void conv3x3_winograd_ep(const ConvShape *s, float *out, const float *in, const float *u, const float *bias,
                         const float *res, int relu) {
    if (!winograd_ok_k16(s)) ct_die("conv3x3_winograd_ep: shape C=%d K=%d %dx%d/%d pad %d not supported", s->C, s->K, s->R,
                                s->S, s->stride, s->pad);
    const int th = (s->P + 1) / 2, tw = (s->Q + 1) / 2;
    const size_t tiles = (size_t)s->N * th * tw, blocks = (tiles + TB - 1) / TB;
    const size_t vsz = (size_t)16 * TB * s->C, msz = (size_t)16 * TB * s->K;
    const int nthr = omp_in_parallel() ? 1 : omp_get_max_threads();
    float *buf = ct_alloc((size_t)nthr * (vsz + msz) * sizeof(float));
#pragma omp parallel for schedule(static) num_threads(nthr)
    for (size_t bk = 0; bk < blocks; bk++) {
        float *v = buf + (size_t)omp_get_thread_num() * (vsz + msz), *m = v + vsz;
        const size_t t0 = bk * TB;
        const int nt = (int)CT_MIN((size_t)TB, tiles - t0);
        input_transform(s, v, in, t0, nt, tw, th);
        block_gemm(s, m, v, u);
        output_transform(s, out, m, bias, res, relu, t0, nt, tw, th);
    }
    free(buf);
}
#else
void conv3x3_winograd_ep(const ConvShape *s, float *out, const float *in, const float *u, const float *bias,
                         const float *res, int relu) {
    (void)out, (void)in, (void)u, (void)bias, (void)res, (void)relu;
    ct_die("conv3x3_winograd_ep: not built for this target (C=%d K=%d)", s->C, s->K);
}
#endif
