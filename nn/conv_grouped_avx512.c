// Grouped convolution, the fast path: AVX-512 over several groups at once, chosen at run time.
//
// The reference loop nests (nn/conv_grouped.c) run their innermost loop over one group's 4 to 64
// channels, so 4- and 8-channel groups (resnext50_32x4d's first two stages) use a quarter or half
// of a vector and pay loop control per 16 multiply-adds. Here a 16-lane vector spans the outputs of
// 16 / Kg whole groups (Kg = 1, 2, 4, 8: "permute" lanes) or 16 outputs of one group (Kg a multiple
// of 16: "broadcast" lanes):
// - forward and weight gradient: lanes over output channels k. Lane k needs input channel
//   group(k) * Cg + c: with permute lanes the 16 / Kg groups' inputs are one window of 16 / Kg * Cg
//   <= 16 channels, loaded once per pixel and permuted per c (vpermps); with broadcast lanes it is
//   one scalar (a broadcast load).
// - data gradient: the same with the roles of C and K swapped (lanes over input channels, the
//   output gradient permuted or broadcast), in the gather form, so no two threads write one value.
// Nothing is padded or packed per group: the only per-call work is one transpose of the weights.
//
// Same bits as the reference, for any thread count. Every output element is summed in the
// reference's order (forward: taps r, s then channel c; data gradient: taps then j; weight
// gradient: pixels n, p, q), from +0, with a separate multiply and add (no FMA: ctrain builds with
// -std=c11, whose -ffp-contract=off keeps the compiler from fusing them either), skipping the same
// out-of-range taps, and the epilogue adds bias then residual then clamps as the reference does.
// So the path is a pure speed change: tests/test_conv_grouped.c compares the two bit for bit.
// The cost is one add per multiply where an FMA would do both; the permutes already take the
// shuffle port, so the kernels are not bound by the multiply-adds alone.
//
// What takes the reference instead: the vector side's channel count not a multiple of 16 (or above
// 4096), Kg (Cg for the data gradient) neither a multiple of 16 nor a divisor of 16 that is at least
// the other side's per-group count, or a CPU without AVX-512F. ResNeXt's and depthwise shapes all
// qualify.
#include <immintrin.h>
#include <stdlib.h>
#include <string.h>

#include "nn/conv_grouped.h"
#include "nn/gemm.h"
#include "util/common.h"

#if defined(__GNUC__) && defined(__x86_64__)
#define HAVE_GROUPED_AVX512 1
#else
#define HAVE_GROUPED_AVX512 0
#endif

enum { LANES_NONE = 0, LANES_PERMUTE = 1, LANES_BROADCAST = 2 };
#define MAX_BLOCKS 256  // vector blocks of 16 channels: up to 4096 channels on the vector side

// Lanes over the vector side (per-group count X, total X * G) with the other side's per-group count Y.
static int lane_mode(int X, int Y, int G) {
    if ((X * G) % 16 || X * G > 16 * MAX_BLOCKS) return LANES_NONE;
    if (X % 16 == 0) return LANES_BROADCAST;
    if (16 % X == 0 && Y <= X) return LANES_PERMUTE;
    return LANES_NONE;
}

static int pass_mode(const ConvShape *s, int pass) {
    const int G = conv_groups(s), Cg = s->C / G, Kg = s->K / G;
    return pass == CONV_GROUPED_DATA ? lane_mode(Cg, Kg, G) : lane_mode(Kg, Cg, G);
}


int conv_grouped_fast_ok(const ConvShape *s, int pass) {
    return HAVE_GROUPED_AVX512 && conv_groups(s) > 1 && pass_mode(s, pass) != LANES_NONE &&
           !strcmp(sgemm_kernel_name(), "avx512");
}

const char *conv_grouped_route(const ConvShape *s, int pass) {
    return conv_grouped_fast_ok(s, pass) ? "avx512" : "reference";
}

#if HAVE_GROUPED_AVX512
// What one pass's kernels read: the shape, the mode and its permute tables.
typedef struct {
    const ConvShape *s;
    int G, Cg, Kg, mode;
    int X, Y;            // per-group counts of the vector side and of the permuted/broadcast side
    int L;               // permute lanes: the window of Y-side channels one vector block reads
    int nblk;            // 16-lane blocks of the vector side
    uint16_t lmask;      // the window's load mask (its first L lanes)
    int wofs[MAX_BLOCKS]; // first Y-side channel that vector block b reads (its first group's)
    int32_t idx[16][16]; // permute lanes: idx[y][lane] = (lane / X) * Y + y
} Lanes;

static void lanes_init(Lanes *l, const ConvShape *s, int pass) {
    memset(l, 0, sizeof *l);
    l->s = s;
    l->G = conv_groups(s), l->Cg = s->C / l->G, l->Kg = s->K / l->G;
    l->mode = pass_mode(s, pass);
    const int data = pass == CONV_GROUPED_DATA;
    l->X = data ? l->Cg : l->Kg, l->Y = data ? l->Kg : l->Cg;
    l->nblk = (data ? s->C : s->K) / 16;
    if (l->mode == LANES_PERMUTE) {
        l->L = 16 / l->X * l->Y;
        l->lmask = l->L >= 16 ? 0xFFFF : (uint16_t)((1u << l->L) - 1);
        for (int y = 0; y < l->Y; y++)
            for (int lane = 0; lane < 16; lane++) l->idx[y][lane] = lane / l->X * l->Y + y;
    }
    for (int b = 0; b < l->nblk; b++) l->wofs[b] = l->mode == LANES_PERMUTE ? b * l->L : b * 16 / l->X * l->Y;
}

#pragma GCC push_options
#pragma GCC target("avx512f")
#define AI static inline __attribute__((always_inline))

// acc[i] (i < NB) += the products of one tap for vector blocks b0 .. b0 + NB: the Y-side values of
// one pixel (xp: C or K floats) against wp (wp[y * ld + i * 16 + lane]: the tap's weights for y),
// y in increasing order.
AI void tap_blocks(const Lanes *l, __m512 *acc, const int NB, int b0, const float *restrict xp,
                   const float *restrict wp, size_t ld) {
    if (l->mode == LANES_PERMUTE) {
        __m512 xv[4];
#pragma GCC unroll 4
        for (int i = 0; i < NB; i++) xv[i] = _mm512_maskz_loadu_ps(l->lmask, xp + l->wofs[b0 + i]);
        for (int y = 0; y < l->Y; y++) {
            const __m512i ix = _mm512_loadu_si512(l->idx[y]);
#pragma GCC unroll 4
            for (int i = 0; i < NB; i++)
                acc[i] = _mm512_add_ps(acc[i], _mm512_mul_ps(_mm512_permutexvar_ps(ix, xv[i]),
                                                             _mm512_loadu_ps(wp + y * ld + i * 16)));
        }
    } else {
        const float *xs[4];
#pragma GCC unroll 4
        for (int i = 0; i < NB; i++) xs[i] = xp + l->wofs[b0 + i];
        for (int y = 0; y < l->Y; y++)
#pragma GCC unroll 4
            for (int i = 0; i < NB; i++)
                acc[i] = _mm512_add_ps(acc[i],
                                       _mm512_mul_ps(_mm512_set1_ps(xs[i][y]), _mm512_loadu_ps(wp + y * ld + i * 16)));
    }
}

// One output pixel's NB blocks: taps in (r, s) order, then the reference's epilogue.
AI void fwd_pixel_blocks(const Lanes *l, const int NB, int b0, float *restrict out, const float *restrict in,
                         const float *restrict wt, const float *bias, const float *res, int relu, int n, int p, int q) {
    const ConvShape *s = l->s;
    const int h0 = p * s->stride - s->pad, x0 = q * s->stride - s->pad, K = s->K;
    const int r0 = h0 < 0 ? -h0 : 0, r1 = CT_MIN(s->R, s->H - h0), t0 = x0 < 0 ? -x0 : 0, t1 = CT_MIN(s->S, s->W - x0);
    __m512 acc[4];
#pragma GCC unroll 4
    for (int i = 0; i < NB; i++) acc[i] = _mm512_setzero_ps();
    for (int r = r0; r < r1; r++)
        for (int t = t0; t < t1; t++) {
            const float *xp = in + (((size_t)n * s->H + h0 + r) * s->W + x0 + t) * s->C;
            const float *wp = wt + (size_t)(r * s->S + t) * l->Y * K + (size_t)b0 * 16;
            tap_blocks(l, acc, NB, b0, xp, wp, (size_t)K);
        }
#pragma GCC unroll 4
    for (int i = 0; i < NB; i++) {
        const size_t k = (size_t)(b0 + i) * 16;
        __m512 v = acc[i];
        if (bias) v = _mm512_add_ps(v, _mm512_loadu_ps(bias + k));
        if (res) v = _mm512_add_ps(v, _mm512_loadu_ps(res + k));
        if (relu) v = _mm512_max_ps(v, _mm512_setzero_ps());  // v > 0 ? v : 0, NaN -> 0 as the reference
        _mm512_storeu_ps(out + k, v);
    }
}

static void fwd_row(const Lanes *l, float *out, const float *in, const float *wt, const float *bias, const float *res,
                    int relu, int n, int p) {
    const ConvShape *s = l->s;
    for (int q = 0; q < s->Q; q++) {
        const size_t o = (((size_t)n * s->P + p) * s->Q + q) * s->K;
        const float *ro = res ? res + o : NULL;
        int b = 0;
        for (; b + 4 <= l->nblk; b += 4) fwd_pixel_blocks(l, 4, b, out + o, in, wt, bias, ro, relu, n, p, q);
        for (; b < l->nblk; b++) fwd_pixel_blocks(l, 1, b, out + o, in, wt, bias, ro, relu, n, p, q);
    }
}

// One input pixel's NB blocks of the data gradient: the taps that reach it in (r, s) order.
AI void data_pixel_blocks(const Lanes *l, const int NB, int b0, float *restrict din, const float *restrict dout,
                          const float *restrict wd, int n, int h, int x) {
    const ConvShape *s = l->s;
    const int st = s->stride, C = s->C;
    __m512 acc[4];
#pragma GCC unroll 4
    for (int i = 0; i < NB; i++) acc[i] = _mm512_setzero_ps();
    for (int r = 0; r < s->R; r++) {
        const int ph = h + s->pad - r;
        if (ph < 0 || ph % st || ph / st >= s->P) continue;
        for (int t = 0; t < s->S; t++) {
            const int pw = x + s->pad - t;
            if (pw < 0 || pw % st || pw / st >= s->Q) continue;
            const float *dv = dout + (((size_t)n * s->P + ph / st) * s->Q + pw / st) * s->K;
            const float *wp = wd + (size_t)(r * s->S + t) * l->Y * C + (size_t)b0 * 16;
            tap_blocks(l, acc, NB, b0, dv, wp, (size_t)C);
        }
    }
#pragma GCC unroll 4
    for (int i = 0; i < NB; i++) _mm512_storeu_ps(din + (size_t)(b0 + i) * 16, acc[i]);
}

static void data_row(const Lanes *l, float *din, const float *dout, const float *wd, int n, int h) {
    const ConvShape *s = l->s;
    for (int x = 0; x < s->W; x++) {
        float *d = din + (((size_t)n * s->H + h) * s->W + x) * s->C;
        int b = 0;
        for (; b + 4 <= l->nblk; b += 4) data_pixel_blocks(l, 4, b, d, dout, wd, n, h, x);
        for (; b < l->nblk; b++) data_pixel_blocks(l, 1, b, d, dout, wd, n, h, x);
    }
}

// Weight gradient of output block b, kernel row r, taps t0 .. t0 + TN, channels c0 .. c0 + CN of
// each group: TN x CN accumulators (at most 3 x 4: with the operands they stay in registers) over
// every output pixel in (n, p, q) order, then scattered to dw[k][r][t][c] (lanes are k).
AI void wgt_task(const Lanes *l, float *restrict dw, const float *restrict dout, const float *restrict in, int b, int r,
                 int t0, const int TN, int c0, const int CN, const int PERM) {
    const ConvShape *s = l->s;
    const int K = s->K, C = s->C, st = s->stride;
    __m512 acc[3][4];
#pragma GCC unroll 3
    for (int tt = 0; tt < TN; tt++)
#pragma GCC unroll 4
        for (int cc = 0; cc < CN; cc++) acc[tt][cc] = _mm512_setzero_ps();
    const int ws = l->wofs[b] + (PERM ? 0 : c0);
    __m512i ix[4];
#pragma GCC unroll 4
    for (int cc = 0; cc < CN; cc++) ix[cc] = PERM ? _mm512_loadu_si512(l->idx[c0 + cc]) : _mm512_setzero_si512();
    for (int n = 0; n < s->N; n++)
        for (int p = 0; p < s->P; p++) {
            const int h = p * st - s->pad + r;
            if (h < 0 || h >= s->H) continue;
            const float *xrow = in + ((size_t)n * s->H + h) * s->W * C;
            const float *drow = dout + ((size_t)n * s->P + p) * s->Q * K + (size_t)b * 16;
            for (int q = 0; q < s->Q; q++) {
                const __m512 dv = _mm512_loadu_ps(drow + (size_t)q * K);
#pragma GCC unroll 3
                for (int tt = 0; tt < TN; tt++) {
                    const int x = q * st - s->pad + t0 + tt;
                    if (x < 0 || x >= s->W) continue;
                    const float *xp = xrow + (size_t)x * C;
                    if (PERM) {
                        const __m512 xv = _mm512_maskz_loadu_ps(l->lmask, xp + ws);
#pragma GCC unroll 4
                        for (int cc = 0; cc < CN; cc++)
                            acc[tt][cc] = _mm512_add_ps(acc[tt][cc], _mm512_mul_ps(_mm512_permutexvar_ps(ix[cc], xv), dv));
                    } else {
#pragma GCC unroll 4
                        for (int cc = 0; cc < CN; cc++)
                            acc[tt][cc] = _mm512_add_ps(acc[tt][cc], _mm512_mul_ps(_mm512_set1_ps(xp[ws + cc]), dv));
                    }
                }
            }
        }
    const int Cg = l->Cg, RS = s->R * s->S;
#pragma GCC unroll 3
    for (int tt = 0; tt < TN; tt++)
#pragma GCC unroll 4
        for (int cc = 0; cc < CN; cc++) {
            float v[16];
            _mm512_storeu_ps(v, acc[tt][cc]);
            for (int lane = 0; lane < 16; lane++)
                dw[(((size_t)b * 16 + lane) * RS + (size_t)r * s->S + t0 + tt) * Cg + c0 + cc] = v[lane];
        }
}

// TN and CN as constants, so the accumulators stay in registers.
#define WGT_CN(TN)                                                                          \
    switch (cn) {                                                                           \
    case 1: wgt_task(l, dw, dout, in, b, r, t0, TN, c0, 1, PERM); break;                         \
    case 2: wgt_task(l, dw, dout, in, b, r, t0, TN, c0, 2, PERM); break;                         \
    case 3: wgt_task(l, dw, dout, in, b, r, t0, TN, c0, 3, PERM); break;                         \
    default: wgt_task(l, dw, dout, in, b, r, t0, TN, c0, 4, PERM); break;                        \
    }
AI void wgt_task_tn(const Lanes *l, float *dw, const float *dout, const float *in, int b, int r, int t0, int tn,
                    int c0, int cn, const int PERM) {
    if (tn == 3) {
        WGT_CN(3)
    } else if (tn == 2) {
        WGT_CN(2)
    } else {
        WGT_CN(1)
    }
}
#undef WGT_CN
static void wgt_task_any(const Lanes *l, float *dw, const float *dout, const float *in, int b, int r, int t0, int tn,
                         int c0, int cn) {
    if (l->mode == LANES_PERMUTE) wgt_task_tn(l, dw, dout, in, b, r, t0, tn, c0, cn, 1);
    else wgt_task_tn(l, dw, dout, in, b, r, t0, tn, c0, cn, 0);
}
#pragma GCC pop_options

// The per-call weight transposes: wt[tap][y][v] = w[k][tap][c] with v the vector side's channel.
// Forward / weight gradient: v = k, y = c (wt[tap][c][k]); data gradient: v = c, y = j.
static float *weights_forward(const ConvShape *s, const float *w) {
    const int G = conv_groups(s), Cg = s->C / G, RS = s->R * s->S, K = s->K;
    float *wt = ct_alloc((size_t)K * RS * Cg * sizeof(float));
    for (int k = 0; k < K; k++)
        for (int t = 0; t < RS; t++)
            for (int c = 0; c < Cg; c++) wt[((size_t)t * Cg + c) * K + k] = w[((size_t)k * RS + t) * Cg + c];
    return wt;
}
static float *weights_data(const ConvShape *s, const float *w) {
    const int G = conv_groups(s), Cg = s->C / G, Kg = s->K / G, RS = s->R * s->S, C = s->C;
    float *wd = ct_alloc((size_t)s->K * RS * Cg * sizeof(float));
    for (int g = 0; g < G; g++)
        for (int j = 0; j < Kg; j++)
            for (int t = 0; t < RS; t++)
                for (int c = 0; c < Cg; c++)
                    wd[((size_t)t * Kg + j) * C + (size_t)g * Cg + c] = w[(((size_t)g * Kg + j) * RS + t) * Cg + c];
    return wd;
}
#endif

int conv_grouped_fast_forward(const ConvShape *s, float *out, const float *in, const float *w, const float *bias,
                              const float *res, int relu) {
    if (!conv_grouped_fast_ok(s, CONV_GROUPED_FWD)) return 0;
#if HAVE_GROUPED_AVX512
    Lanes l;
    lanes_init(&l, s, CONV_GROUPED_FWD);
    float *wt = weights_forward(s, w);
#pragma omp parallel for schedule(static)
    for (int np = 0; np < s->N * s->P; np++) fwd_row(&l, out, in, wt, bias, res, relu, np / s->P, np % s->P);
    free(wt);
#else
    (void)out, (void)in, (void)w, (void)bias, (void)res, (void)relu;
#endif
    return 1;
}

int conv_grouped_fast_backward_data(const ConvShape *s, float *din, const float *dout, const float *w) {
    if (!conv_grouped_fast_ok(s, CONV_GROUPED_DATA)) return 0;
#if HAVE_GROUPED_AVX512
    Lanes l;
    lanes_init(&l, s, CONV_GROUPED_DATA);
    float *wd = weights_data(s, w);
#pragma omp parallel for schedule(static)
    for (int nh = 0; nh < s->N * s->H; nh++) data_row(&l, din, dout, wd, nh / s->H, nh % s->H);
    free(wd);
#else
    (void)din, (void)dout, (void)w;
#endif
    return 1;
}

// Tasks (block, kernel row, 3 taps, 4 channels): their count and cut come from the shape alone, and
// each owns its dw values outright.
int conv_grouped_fast_backward_weight(const ConvShape *s, float *dw, const float *dout, const float *in) {
    if (!conv_grouped_fast_ok(s, CONV_GROUPED_WEIGHT)) return 0;
#if HAVE_GROUPED_AVX512
    Lanes l;
    lanes_init(&l, s, CONV_GROUPED_WEIGHT);
    const int nt = (s->S + 2) / 3, nc = (l.Cg + 3) / 4, ntask = l.nblk * s->R * nt * nc;
#pragma omp parallel for schedule(dynamic, 1)
    for (int task = 0; task < ntask; task++) {
        int i = task;
        const int ci = i % nc;
        i /= nc;
        const int ti = i % nt;
        i /= nt;
        const int r = i % s->R, b = i / s->R;
        const int t0 = ti * 3, c0 = ci * 4;
        wgt_task_any(&l, dw, dout, in, b, r, t0, CT_MIN(3, s->S - t0), c0, CT_MIN(4, l.Cg - c0));
    }
#else
    (void)dw, (void)dout, (void)in;
#endif
    return 1;
}
