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

// The Winograd-domain filters, in double, rounded once to float. flip = 0: u[xi][c][k] (xi = 4 i +
// j) = (G g G^T)[i][j] of filter g = w[k][.][.][c] (KRSC). flip = 1: the filters of the data
// gradient's convolution (dout -> din: the kernel turned by 180 degrees, input and output channels
// swapped), u[xi][k][c] = (G g' G^T)[i][j] with g'[r][s] = w[k][2 - r][2 - s][c]; the same numbers
// winograd_weights would make of that flipped KRSC copy, without making it.
static void g_transform(double v[4][4], const double g[3][3]) {
    double t[4][3];
    for (int s = 0; s < 3; s++) {
        t[0][s] = g[0][s];
        t[1][s] = 0.5 * (g[0][s] + g[1][s] + g[2][s]);
        t[2][s] = 0.5 * (g[0][s] - g[1][s] + g[2][s]);
        t[3][s] = g[2][s];
    }
    for (int i = 0; i < 4; i++) {
        v[i][0] = t[i][0];
        v[i][1] = 0.5 * (t[i][0] + t[i][1] + t[i][2]);
        v[i][2] = 0.5 * (t[i][0] - t[i][1] + t[i][2]);
        v[i][3] = t[i][2];
    }
}

static void weights_scalar(float *u, const float *w, int K, int C, int flip) {
    // c outer, k inner: the 16 output rows u[xi][c][.] are written contiguously.
#pragma omp parallel for schedule(static)
    for (int c = 0; c < C; c++)
        for (int k = 0; k < K; k++) {
            double g[3][3], v[4][4];
            for (int r = 0; r < 3; r++)
                for (int s = 0; s < 3; s++)
                    g[r][s] = w[(((size_t)k * 3 + (flip ? 2 - r : r)) * 3 + (flip ? 2 - s : s)) * C + c];
            g_transform(v, g);
            for (int xi = 0; xi < 16; xi++)
                u[flip ? ((size_t)xi * K + k) * C + c : ((size_t)xi * C + c) * K + k] = (float)v[xi / 4][xi % 4];
        }
}

static int weights_vector_ok(int K, int C);
static void weights_avx512(float *u, const float *w, int K, int C, int flip);

void winograd_weights(float *u, const float *w, int K, int C) {
    if (weights_vector_ok(K, C)) weights_avx512(u, w, K, C, 0);
    else weights_scalar(u, w, K, C, 0);
}

void winograd_weights_flipped(float *u, const float *w, int K, int C) {
    if (weights_vector_ok(K, C)) weights_avx512(u, w, K, C, 1);
    else weights_scalar(u, w, K, C, 1);
}

#if defined(__GNUC__) && defined(__x86_64__)
#pragma GCC push_options
#pragma GCC target("avx512f")
// o[xi * xs] = (B^T d B)[xi] for one 16-channel slice of a tile.
static inline void bt_d_b(float *restrict o, size_t xs, __m512 d[4][4]) {
    __m512 q[4][4];
    for (int j = 0; j < 4; j++) {
        q[0][j] = _mm512_sub_ps(d[0][j], d[2][j]);
        q[1][j] = _mm512_add_ps(d[1][j], d[2][j]);
        q[2][j] = _mm512_sub_ps(d[2][j], d[1][j]);
        q[3][j] = _mm512_sub_ps(d[1][j], d[3][j]);
    }
    for (int i = 0; i < 4; i++) {
        float *r = o + (size_t)(4 * i) * xs;
        _mm512_storeu_ps(r, _mm512_sub_ps(q[i][0], q[i][2]));
        _mm512_storeu_ps(r + xs, _mm512_add_ps(q[i][1], q[i][2]));
        _mm512_storeu_ps(r + 2 * xs, _mm512_sub_ps(q[i][2], q[i][1]));
        _mm512_storeu_ps(r + 3 * xs, _mm512_sub_ps(q[i][1], q[i][3]));
    }
}

// v[xi * vs + t][C] = B^T d B of tile `tile` ((image, tile row, tile column) order), rows of the
// input outside the image read as zero. Interior tiles (most of them) skip the per-pixel checks,
// which cost as much as the transform itself at 16 channels.
static void input_tile(const ConvShape *s, float *restrict v, size_t vs, const float *restrict in, size_t tile,
                       int tw, int th) {
    const int C = s->C;
    const int n = (int)(tile / ((size_t)th * tw)), ty = (int)(tile / tw % th), tx = (int)(tile % tw);
    const int y0 = 2 * ty - 1, x0 = 2 * tx - 1;
    const float *img = in + (size_t)n * s->H * s->W * C;
    const size_t xs = vs * C;
    if (y0 >= 0 && x0 >= 0 && y0 + 3 < s->H && x0 + 3 < s->W) {
        const float *b = img + ((size_t)y0 * s->W + x0) * C;
        const size_t rs = (size_t)s->W * C;
        for (int c = 0; c < C; c += 16) {
            __m512 d[4][4];
            for (int i = 0; i < 4; i++)
                for (int j = 0; j < 4; j++) d[i][j] = _mm512_loadu_ps(b + i * rs + (size_t)j * C + c);
            bt_d_b(v + c, xs, d);
        }
        return;
    }
    // Edge tiles: pixels outside the image load as zero through an empty mask (from a valid
    // address), without branches, which mispredicted here as often as they were taken.
    const float *src[4][4];
    __mmask16 mk[4][4];
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 4; j++) {
            const int y = y0 + i, x = x0 + j, ok = y >= 0 && y < s->H && x >= 0 && x < s->W;
            src[i][j] = ok ? img + ((size_t)y * s->W + x) * C : img;
            mk[i][j] = ok ? 0xFFFF : 0;
        }
    for (int c = 0; c < C; c += 16) {
        __m512 d[4][4];
        for (int i = 0; i < 4; i++)
            for (int j = 0; j < 4; j++) d[i][j] = _mm512_maskz_loadu_ps(mk[i][j], src[i][j] + c);
        bt_d_b(v + c, xs, d);
    }
}

// v[xi][t][C] = B^T d B for the tiles [t0, t0 + nt) of the block (the rest of TB zero).
static void input_transform(const ConvShape *s, float *restrict v, const float *restrict in, size_t t0, int nt,
                            int tw, int th) {
    const int C = s->C;
    for (int t = 0; t < TB; t++) {
        if (t >= nt) {
            for (int xi = 0; xi < 16; xi++) memset(v + ((size_t)xi * TB + t) * C, 0, (size_t)C * sizeof(float));
            continue;
        }
        input_tile(s, v + (size_t)t * C, TB, in, t0 + t, tw, th);
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

// ---------------------------------------------------------------------------------------------
// Weight gradient. With Y = A^T [(G g G^T) .* V] A per tile, dL/dg = G^T [(A dY A^T) .* V] G, and
// summed over the tiles the 16 elementwise products become 16 GEMMs again:
//   m[xi][k][c] = sum over tiles of e[xi][t][k] v[xi][t][c],   e = A dY A^T (4x4 from 2x2),
// then dw[k][., .][c] = G^T m[.][k][c] G. 16 multiplies per tile and (k, c) instead of the direct
// sum's 36, and no per-call weight transform (the G^T . G at the end is 16 K C adds), so it pays
// on every map size, 2x2 included.

// The rows (a, b) and operation (+1 add, -1 subtract) of B^T d: row i of B^T d is d[a] op d[b]
// (B^T = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1]); the same pairs for columns, as input_tile.
static const int BT_ROW[4][3] = {{0, 2, -1}, {1, 2, 1}, {2, 1, -1}, {1, 3, -1}};
// Row i of A dY (A = [1 0; 1 1; 1 -1; 0 -1]): coefficients of dY's rows 0 and 1.
static const int A_ROW[4][2] = {{1, 0}, {1, 1}, {1, -1}, {0, -1}};

static inline __m512 combine(__m512 x, __m512 y, int op) { return op > 0 ? _mm512_add_ps(x, y) : _mm512_sub_ps(x, y); }
static inline __m512 a_comb(__m512 x, __m512 y, const int *co) {
    if (co[0] && co[1]) return co[1] > 0 ? _mm512_add_ps(x, y) : _mm512_sub_ps(x, y);
    if (co[0]) return x;
    return _mm512_sub_ps(_mm512_setzero_ps(), y);
}

// For the nt tiles from tile t0 and one xi = 4 i + j: v[t][C] = (B^T d B)[i][j] (the operations of
// input_tile for that element, so the same bits) and e[t][K] = (A dY A^T)[i][j], dY outputs past
// the edge of an odd map read as zero (the forward clipped them: their gradient is zero).
static void xi_tiles(const ConvShape *s, float *restrict v, float *restrict e, const float *restrict in,
                     const float *restrict dout, size_t t0, int nt, int xi, int tw, int th) {
    const int C = s->C, K = s->K, H = s->H, W = s->W, P = s->P, Q = s->Q, i = xi / 4, j = xi % 4;
    const int *ri = BT_ROW[i], *cj = BT_ROW[j], *ai = A_ROW[i], *aj = A_ROW[j];
    // The tile's (image, row, column), stepped along instead of divided out per tile.
    int n = (int)(t0 / ((size_t)th * tw)), ty = (int)(t0 / tw % th), tx = (int)(t0 % tw);
    for (int t = 0; t < nt; t++) {
        const float *img = in + (size_t)n * H * W * C, *gimg = dout + (size_t)n * P * Q * K;
        const float *src[2][2], *g[2][2];  // d[ri[a]][cj[b]], dY[a][b]; empty masks load zero
        __mmask16 ms[2][2], mg[2][2];
        for (int a = 0; a < 2; a++) {
            const int y = 2 * ty - 1 + ri[a], gy = 2 * ty + a;
            for (int b = 0; b < 2; b++) {
                const int x = 2 * tx - 1 + cj[b], gx = 2 * tx + b;
                const int oks = y >= 0 && y < H && x >= 0 && x < W, okg = ai[a] && aj[b] && gy < P && gx < Q;
                src[a][b] = oks ? img + ((size_t)y * W + x) * C : img;
                g[a][b] = okg ? gimg + ((size_t)gy * Q + gx) * K : gimg;
                ms[a][b] = oks ? 0xFFFF : 0;
                mg[a][b] = okg ? 0xFFFF : 0;
            }
        }
        if (++tx == tw) {
            tx = 0;
            if (++ty == th) ty = 0, n++;
        }
        float *vt = v + (size_t)t * C;
        for (int c = 0; c < C; c += 16) {
            __m512 d[2][2];
            for (int a = 0; a < 2; a++)
                for (int b = 0; b < 2; b++) d[a][b] = _mm512_maskz_loadu_ps(ms[a][b], src[a][b] + c);
            // q[i][col] = d[ri0][col] op d[ri1][col], then q[i][cj0] op' q[i][cj1].
            const __m512 q0 = combine(d[0][0], d[1][0], ri[2]), q1 = combine(d[0][1], d[1][1], ri[2]);
            _mm512_storeu_ps(vt + c, combine(q0, q1, cj[2]));
        }
        float *et = e + (size_t)t * K;
        for (int k = 0; k < K; k += 16) {
            __m512 d[2][2];
            for (int a = 0; a < 2; a++)
                for (int b = 0; b < 2; b++) d[a][b] = _mm512_maskz_loadu_ps(mg[a][b], g[a][b] + k);
            const __m512 r0 = a_comb(d[0][0], d[1][0], ai), r1 = a_comb(d[0][1], d[1][1], ai);
            _mm512_storeu_ps(et + k, a_comb(r0, r1, aj));
        }
    }
}

// e[xi * es + t][K] = A dY A^T of tile `tile`, all 16 xi at once (the tile-group route below).
static void grad_tile(const ConvShape *s, float *restrict e, size_t es, const float *restrict dout, size_t tile,
                      int tw, int th) {
    const int K = s->K;
    const int n = (int)(tile / ((size_t)th * tw)), ty = (int)(tile / tw % th), tx = (int)(tile % tw);
    const float *src[2][2];
    __mmask16 mk[2][2];
    for (int a = 0; a < 2; a++)
        for (int b = 0; b < 2; b++) {
            const int y = 2 * ty + a, x = 2 * tx + b, ok = y < s->P && x < s->Q;
            src[a][b] = ok ? dout + (((size_t)n * s->P + y) * s->Q + x) * K : dout;
            mk[a][b] = ok ? 0xFFFF : 0;
        }
    const size_t xs = es * K;
    for (int k = 0; k < K; k += 16) {
        __m512 d[2][2], r[4][2];
        for (int a = 0; a < 2; a++)
            for (int b = 0; b < 2; b++) d[a][b] = _mm512_maskz_loadu_ps(mk[a][b], src[a][b] + k);
        for (int i = 0; i < 4; i++)
            for (int b = 0; b < 2; b++) r[i][b] = a_comb(d[0][b], d[1][b], A_ROW[i]);
        for (int i = 0; i < 4; i++)
            for (int j = 0; j < 4; j++) _mm512_storeu_ps(e + (size_t)(4 * i + j) * xs + k, a_comb(r[i][0], r[i][1], A_ROW[j]));
    }
}

// m[k][c] (+)= sum over the nt tiles of e[t][kb + i] v[t][c] for 16 output channels kb + i and all
// C: 16 accumulators (one per k, 16 input channels each) over the tiles, in tile order. first:
// store instead of adding to m.
static void wgrad_block(float *restrict m, const float *restrict e, const float *restrict v, int nt, int K, int C,
                        int kb, int first) {
    for (int cb = 0; cb < C; cb += 16) {
        __m512 acc[16];
        for (int i = 0; i < 16; i++) acc[i] = _mm512_setzero_ps();
        const float *vp = v + cb, *ep = e + kb;
        for (int t = 0; t < nt; t++, vp += C, ep += K) {
            const __m512 x = _mm512_loadu_ps(vp);
            _Pragma("GCC unroll 16") for (int i = 0; i < 16; i++)
                acc[i] = _mm512_fmadd_ps(_mm512_set1_ps(ep[i]), x, acc[i]);
        }
        float *mp = m + (size_t)kb * C + cb;
        for (int i = 0; i < 16; i++) {
            float *o = mp + (size_t)i * C;
            _mm512_storeu_ps(o, first ? acc[i] : _mm512_add_ps(_mm512_loadu_ps(o), acc[i]));
        }
    }
}

// dw[k][r][t][c] = (G^T m[.][k][c] G)[r][t], G = [1 0 0; .5 .5 .5; .5 -.5 .5; 0 0 1].
static void wgrad_output(float *restrict dw, const float *restrict m, int K, int C, int k) {
    const size_t xs = (size_t)K * C;
    const __m512 h = _mm512_set1_ps(0.5f);
    for (int c = 0; c < C; c += 16) {
        __m512 z[3][4];
        for (int j = 0; j < 4; j++) {
            const float *p = m + (size_t)k * C + c + (size_t)j * xs;
            const __m512 m0 = _mm512_loadu_ps(p), m1 = _mm512_loadu_ps(p + 4 * xs);
            const __m512 m2 = _mm512_loadu_ps(p + 8 * xs), m3 = _mm512_loadu_ps(p + 12 * xs);
            const __m512 sp = _mm512_mul_ps(h, _mm512_add_ps(m1, m2));
            z[0][j] = _mm512_add_ps(m0, sp);
            z[1][j] = _mm512_mul_ps(h, _mm512_sub_ps(m1, m2));
            z[2][j] = _mm512_add_ps(sp, m3);
        }
        for (int r = 0; r < 3; r++) {
            const __m512 sp = _mm512_mul_ps(h, _mm512_add_ps(z[r][1], z[r][2]));
            float *o = dw + (((size_t)k * 3 + r) * 3) * C + c;
            _mm512_storeu_ps(o, _mm512_add_ps(z[r][0], sp));
            _mm512_storeu_ps(o + C, _mm512_mul_ps(h, _mm512_sub_ps(z[r][1], z[r][2])));
            _mm512_storeu_ps(o + 2 * C, _mm512_add_ps(sp, z[r][3]));
        }
    }
}
// winograd_weights in AVX-512, 16 channels c at a time: the scalar loop's double operations in
// the same order, 8 lanes wide (so the same bits; test_layers compares them). Per filter row k
// the 16 x 16 results are vectors over c: the flipped layout u[xi][k][c] takes them as they are;
// u[xi][c][k] gets them through a 16 x 16 block transposed in cache. The scalar loop read the
// filters at a stride of 9 C floats and took 1.6 ms for 256 x 256 channels, more than the
// Winograd convolution of a 4x4 map at batch 32 it served.
static inline __m512d half_t(__m512d a, __m512d b, __m512d c, int minus) {
    const __m512d ab = minus ? _mm512_sub_pd(a, b) : _mm512_add_pd(a, b);
    return _mm512_mul_pd(_mm512_set1_pd(0.5), _mm512_add_pd(ab, c));
}
static void weights_avx512(float *u, const float *w, int K, int C, int flip) {
    const int kb = K / 16, cb = C / 16;
#pragma omp parallel for schedule(static)
    for (int b = 0; b < kb * cb; b++) {
        const int k0 = (b / cb) * 16, c0 = (b % cb) * 16;
        float tmp[16][16][16];  // [xi][k - k0][c - c0]
        for (int kk = 0; kk < 16; kk++) {
            const int k = k0 + kk;
            for (int h = 0; h < 2; h++) {
                __m512d g[3][3], t[4][3];
                for (int r = 0; r < 3; r++)
                    for (int s = 0; s < 3; s++)
                        g[r][s] = _mm512_cvtps_pd(_mm256_loadu_ps(
                            w + (((size_t)k * 3 + (flip ? 2 - r : r)) * 3 + (flip ? 2 - s : s)) * C + c0 + 8 * h));
                for (int s = 0; s < 3; s++) {
                    t[0][s] = g[0][s];
                    t[1][s] = half_t(g[0][s], g[1][s], g[2][s], 0);
                    t[2][s] = half_t(g[0][s], g[1][s], g[2][s], 1);
                    t[3][s] = g[2][s];
                }
                for (int i = 0; i < 4; i++) {
                    const __m512d v[4] = {t[i][0], half_t(t[i][0], t[i][1], t[i][2], 0),
                                          half_t(t[i][0], t[i][1], t[i][2], 1), t[i][2]};
                    for (int j = 0; j < 4; j++) {
                        const __m256 f = _mm512_cvtpd_ps(v[j]);
                        if (flip) _mm256_storeu_ps(u + ((size_t)(4 * i + j) * K + k) * C + c0 + 8 * h, f);
                        else _mm256_storeu_ps(&tmp[4 * i + j][kk][8 * h], f);
                    }
                }
            }
        }
        if (!flip)
            for (int xi = 0; xi < 16; xi++)
                for (int cc = 0; cc < 16; cc++) {
                    float *dst = u + ((size_t)xi * C + c0 + cc) * K + k0;
                    for (int kk = 0; kk < 16; kk++) dst[kk] = tmp[xi][kk][cc];
                }
    }
}
static int weights_vector_ok(int K, int C) { return K % 16 == 0 && C % 16 == 0 && !strcmp(sgemm_kernel_name(), "avx512"); }

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

// Two ways to split the work, both summing every m element in tile order within fixed sub-blocks
// of WG_SUB tiles (in registers, from zero) added in order, so thread count never changes a bit:
// - xi route (K C > WG_GROUP_KC): each of the 16 Winograd-domain elements xi belongs to one
//   thread, which transforms a chunk of tiles for that xi alone into a cache-sized buffer (WG_BUF
//   floats) and adds it into m[xi]: transforms and sums stay on one core, no barrier, no partials.
// - group route (small K C, where the per-tile transform costs as much as the 16 K C products and
//   the xi route would redo it 16 times): the tiles are cut into at most WG_GROUPS fixed groups,
//   each group's tiles transformed once for all 16 xi and summed into its own partial m, and
//   the partials added in group order.
#define WG_SUB 64
#define WG_BUF ((size_t)1 << 14)
#define WG_GROUPS 16
#define WG_GROUP_KC ((size_t)32 * 32)

static void wgrad_groups(const ConvShape *s, float *m, const float *dout, const float *in, size_t tiles, int nthr,
                         int tw, int th) {
    const int C = s->C, K = s->K;
    const size_t kc = (size_t)K * C;
    // Tiles per group: whole sub-blocks, from the shape alone.
    size_t per = (tiles + WG_GROUPS - 1) / WG_GROUPS;
    per = (per + WG_SUB - 1) / WG_SUB * WG_SUB;
    const int G = (int)((tiles + per - 1) / per);
    size_t ch = WG_BUF * 4 / (16 * (size_t)(C + K)) / WG_SUB * WG_SUB;  // 16 xi per tile here
    if (ch < WG_SUB) ch = WG_SUB;
    float *part = G > 1 ? ct_alloc((size_t)G * 16 * kc * sizeof(float)) : m;
    float *buf = ct_alloc((size_t)nthr * 16 * ch * (C + K) * sizeof(float));
#pragma omp parallel for schedule(dynamic, 1) num_threads(nthr)
    for (int g = 0; g < G; g++) {
        float *v = buf + (size_t)omp_get_thread_num() * 16 * ch * (C + K), *e = v + 16 * ch * C;
        float *pg = part + (size_t)g * 16 * kc;
        const size_t g0 = (size_t)g * per, g1 = CT_MIN(tiles, g0 + per);
        for (size_t t0 = g0; t0 < g1; t0 += ch) {
            const int nt = (int)CT_MIN(ch, g1 - t0);
            for (int t = 0; t < nt; t++) {
                input_tile(s, v + (size_t)t * C, ch, in, t0 + t, tw, th);
                grad_tile(s, e + (size_t)t * K, ch, dout, t0 + t, tw, th);
            }
            for (int xi = 0; xi < 16; xi++)
                for (int kb = 0; kb < K; kb += 16)
                    for (int b = 0; b < nt; b += WG_SUB)
                        wgrad_block(pg + xi * kc, e + ((size_t)xi * ch + b) * K, v + ((size_t)xi * ch + b) * C,
                                    CT_MIN(WG_SUB, nt - b), K, C, kb, t0 == g0 && b == 0);
        }
    }
    if (G > 1) {
#pragma omp parallel for schedule(static) num_threads(nthr)
        for (size_t i = 0; i < 16 * kc; i++) {
            float a = part[i];
            for (int g = 1; g < G; g++) a += part[(size_t)g * 16 * kc + i];
            m[i] = a;
        }
        free(part);
    }
    free(buf);
}

static void wgrad_xi(const ConvShape *s, float *m, const float *dout, const float *in, size_t tiles, int nthr, int tw,
                     int th) {
    const int C = s->C, K = s->K;
    size_t ch = WG_BUF / (size_t)(C + K) / WG_SUB * WG_SUB;
    if (ch < WG_SUB) ch = WG_SUB;
    if (ch > tiles) ch = tiles;
    float *buf = ct_alloc((size_t)nthr * ch * (C + K) * sizeof(float));
#pragma omp parallel num_threads(nthr)
    {
        // Thread `id` owns xi = id, id + nth, ...; chunks outer, so a chunk's input and output
        // gradient are read from cache by all of the thread's xi.
        const int id = omp_get_thread_num(), nth = omp_get_num_threads();
        float *v = buf + (size_t)id * ch * (C + K), *e = v + ch * C;
        for (size_t t0 = 0; t0 < tiles; t0 += ch) {
            const int nt = (int)CT_MIN(ch, tiles - t0);
            for (int xi = id; xi < 16; xi += nth) {
                float *mx = m + (size_t)xi * K * C;
                xi_tiles(s, v, e, in, dout, t0, nt, xi, tw, th);
                for (int kb = 0; kb < K; kb += 16)
                    for (int b = 0; b < nt; b += WG_SUB)
                        wgrad_block(mx, e + (size_t)b * K, v + (size_t)b * C, CT_MIN(WG_SUB, nt - b), K, C, kb,
                                    t0 == 0 && b == 0);
            }
        }
    }
    free(buf);
}

void conv3x3_winograd_backward_weight_ex(const ConvShape *s, float *dw, const float *dout, const float *in, int route) {
    if (!winograd_ok_k16(s))
        ct_die("conv3x3_winograd_backward_weight: shape C=%d K=%d %dx%d/%d pad %d not supported", s->C, s->K, s->R,
               s->S, s->stride, s->pad);
    const int C = s->C, K = s->K, th = (s->P + 1) / 2, tw = (s->Q + 1) / 2;
    const size_t tiles = (size_t)s->N * th * tw;
    const int nthr = omp_in_parallel() ? 1 : omp_get_max_threads();
    float *m = ct_alloc((size_t)16 * K * C * sizeof(float));
    if (route == WG_ROUTE_GROUP || (route == WG_ROUTE_AUTO && (size_t)K * C <= WG_GROUP_KC))
        wgrad_groups(s, m, dout, in, tiles, nthr, tw, th);
    else
        wgrad_xi(s, m, dout, in, tiles, nthr, tw, th);
#pragma omp parallel for schedule(static) num_threads(nthr)
    for (int k = 0; k < K; k++) wgrad_output(dw, m, K, C, k);
    free(m);
}

void conv3x3_winograd_backward_weight(const ConvShape *s, float *dw, const float *dout, const float *in) {
    conv3x3_winograd_backward_weight_ex(s, dw, dout, in, WG_ROUTE_AUTO);
}

#else
static int weights_vector_ok(int K, int C) { (void)K, (void)C; return 0; }
static void weights_avx512(float *u, const float *w, int K, int C, int flip) {
    (void)u, (void)w, (void)K, (void)C, (void)flip;
}
void conv3x3_winograd_ep(const ConvShape *s, float *out, const float *in, const float *u, const float *bias,
                         const float *res, int relu) {
    (void)out, (void)in, (void)u, (void)bias, (void)res, (void)relu;
    ct_die("conv3x3_winograd_ep: not built for this target (C=%d K=%d)", s->C, s->K);
}
void conv3x3_winograd_backward_weight(const ConvShape *s, float *dw, const float *dout, const float *in) {
    (void)dw, (void)dout, (void)in;
    ct_die("conv3x3_winograd_backward_weight: not built for this target (C=%d K=%d)", s->C, s->K);
}
void conv3x3_winograd_backward_weight_ex(const ConvShape *s, float *dw, const float *dout, const float *in, int route) {
    (void)route;
    conv3x3_winograd_backward_weight(s, dw, dout, in);
}
#endif
