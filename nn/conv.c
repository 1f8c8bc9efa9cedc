// CPU convolution: forward, backward-data, backward-weight, all as GEMMs (nn/gemm.h).
//
// With NHWC activations and KRSC weights, a convolution is out[NPQ, K] = col[NPQ, RSC] w[K, RSC]^T
// where row m of col (the "im2col" matrix) holds the receptive field of output pixel m in (r, s, c)
// order. The GEMM packs col straight from the input (GemmView.conv), so col never exists; a 1x1
// stride-1 unpadded convolution is a plain GEMM on the input. Backward-data of a stride-1 conv is
// itself a forward conv (flipped kernel); strided ones go through a bounded dcol tile and col2im.
#include <immintrin.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "nn/gemm.h"
#include "nn/layers.h"
#include "nn/conv_small.h"
#include "nn/winograd.h"
#include "util/common.h"

#define TILE_BYTES ((size_t)4 << 20)

ConvShape conv_shape(int N, int H, int W, int C, int K, int R, int S, int stride, int pad) {
    if (N <= 0 || H <= 0 || W <= 0 || C <= 0 || K <= 0 || R <= 0 || S <= 0 || stride <= 0 || pad < 0)
        ct_die("conv_shape: bad dimensions N=%d H=%d W=%d C=%d K=%d R=%d S=%d stride=%d pad=%d", N, H, W, C,
               K, R, S, stride, pad);
    ConvShape s = {N, H, W, C, K, R, S, stride, pad, 0, 0, 1};
    s.P = (H + 2 * pad - R) / stride + 1;
    s.Q = (W + 2 * pad - S) / stride + 1;
    if (H + 2 * pad < R || W + 2 * pad < S)
        ct_die("conv_shape: kernel %dx%d larger than the padded input %dx%d (pad %d)", R, S, H, W, pad);
    return s;
}

ConvShape conv_shape_g(int N, int H, int W, int C, int K, int R, int S, int stride, int pad, int groups) {
    if (groups < 1 || C % groups || K % groups)
        ct_die("conv_shape: %d groups do not divide C=%d and K=%d", groups, C, K);
    ConvShape s = conv_shape(N, H, W, C, K, R, S, stride, pad);
    s.groups = groups;
    return s;
}

static int is_pointwise(const ConvShape *s) {
    return s->R == 1 && s->S == 1 && s->stride == 1 && s->pad == 0;
}

// Rows per im2col tile: whole images when they fit in TILE_BYTES (so col2im can work per image),
// never fewer than one micro-kernel row block. Depends on the shape only, never on threads.
static size_t tile_rows(const ConvShape *s) {
    const size_t rsc = (size_t)s->R * s->S * s->C;
    const size_t pq = (size_t)s->P * s->Q, npq = pq * s->N;
    size_t maxr = TILE_BYTES / (rsc * sizeof(float));
    if (maxr < 112) maxr = 112;
    if (maxr >= npq) return npq;
    if (pq <= maxr) return (maxr / pq) * pq;
    return maxr;
}

// din += scatter of dcol rows [m0, m0 + rows). One thread per image, rows in increasing order, so
// every din element sums its contributions in (m, r, s) order whatever the thread count.
static void col2im_add(const ConvShape *s, float *din, const float *dcol, size_t m0, size_t rows) {
    const int C = s->C, R = s->R, S = s->S;
    const size_t rsc = (size_t)R * S * C, pq = (size_t)s->P * s->Q;
    const int n0 = (int)(m0 / pq), n1 = (int)((m0 + rows - 1) / pq);
#pragma omp parallel for schedule(static)
    for (int n = n0; n <= n1; n++) {
        size_t a = (size_t)n * pq, b = a + pq;
        if (a < m0) a = m0;
        if (b > m0 + rows) b = m0 + rows;
        for (size_t m = a; m < b; m++) {
            const int p = (int)(m % pq) / s->Q, q = (int)(m % pq) % s->Q;
            const float *src = dcol + (m - m0) * rsc;
            for (int r = 0; r < R; r++) {
                const int h = p * s->stride - s->pad + r;
                if (h < 0 || h >= s->H) continue;
                for (int t = 0; t < S; t++) {
                    const int w = q * s->stride - s->pad + t;
                    if (w < 0 || w >= s->W) continue;
                    float *d = din + (((size_t)n * s->H + h) * s->W + w) * C;
                    const float *g = src + ((size_t)r * S + t) * C;
                    for (int c = 0; c < C; c++) d[c] += g[c];
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Direct convolution for small channel counts (AVX-512 only, chosen at run time).
//
// A 16-channel 3x3 layer does only 32 flops per im2col element, so the GEMM route spends as long
// packing as computing. Here each image is copied once into a zero-bordered buffer, and the
// kernels read it in place: forward broadcasts input channels against weight vectors (16 output
// channels per register, up to 16 output pixels of a row at once), backward-weight broadcasts
// output gradients against input-channel vectors (against output-channel vectors when C is not a
// multiple of 16). Any stride (backward-data of a stride-1 conv is a stride-1 conv, see
// conv2d_backward_data; strided ones keep the col2im route). Sum orders are fixed: forward sums
// (r, s, c) in increasing order, like the GEMM; backward-weight sums pixels in order within an
// image, images in order within a fixed group, groups in order.
#define DIRECT_MAX_C 64
#define DIRECT_MAX_K 64

static int direct_ok(const ConvShape *s) {
    if (s->R * s->S == 1 || s->K % 16 || s->K > DIRECT_MAX_K || s->C > DIRECT_MAX_C) return 0;
    if (s->pad > s->R - 1 || s->pad > s->S - 1) return 0;
    return !strcmp(sgemm_kernel_name(), "avx512");
}

// xp[(H + 2 pad)][(W + 2 pad)][C] = image n of `in`, zero border.
static void pad_image(const ConvShape *s, float *restrict xp, const float *in, int n) {
    const int Wp = s->W + 2 * s->pad, Hp = s->H + 2 * s->pad, C = s->C;
    const size_t row = (size_t)s->W * C;
    memset(xp, 0, (size_t)s->pad * Wp * C * sizeof(float));
    for (int h = 0; h < s->H; h++) {
        float *d = xp + ((size_t)(h + s->pad) * Wp) * C;
        memset(d, 0, (size_t)s->pad * C * sizeof(float));
        memcpy(d + (size_t)s->pad * C, in + ((size_t)n * s->H + h) * row, row * sizeof(float));
        memset(d + (size_t)(s->pad + s->W) * C, 0, (size_t)s->pad * C * sizeof(float));
    }
    memset(xp + (size_t)(s->pad + s->H) * Wp * C, 0, (size_t)(Hp - s->pad - s->H) * Wp * C * sizeof(float));
}

#if defined(__GNUC__) && defined(__x86_64__)
#define HAVE_DIRECT 1
#pragma GCC push_options
#pragma GCC target("avx512f")
// out[i][kb .. kb + 16 NV) for MR consecutive output pixels, x the padded-input address of pixel
// 0's receptive-field origin; wt is [R][S][C][K]. Per (r, s, c): NV weight loads and MR broadcasts
// feed MR * NV FMAs, so wider K blocks (NV = 2) take fewer loads per FMA.
#define DEFINE_DIRECT_FWD(MR, NV)                                                                        \
    static void direct_fwd_##MR##x##NV(const ConvShape *s, const float *restrict x, const float *restrict wt, \
                                       float *restrict out, int Wp) {                                   \
        const int C = s->C, K = s->K, SC = s->stride * C;                                                \
        for (int kb = 0; kb < K; kb += 16 * NV) {                                                        \
            __m512 acc[MR][NV];                                                                          \
            _Pragma("GCC unroll 16") for (int i = 0; i < MR; i++)                                        \
                _Pragma("GCC unroll 2") for (int v = 0; v < NV; v++) acc[i][v] = _mm512_setzero_ps();    \
            const float *wk = wt + kb;                                                                   \
            for (int r = 0; r < s->R; r++)                                                               \
                for (int t = 0; t < s->S; t++) {                                                         \
                    const float *xr = x + ((size_t)r * Wp + t) * C;                                      \
                    for (int c = 0; c < C; c++, wk += K) {                                               \
                        __m512 wv[NV];                                                                   \
                        _Pragma("GCC unroll 2") for (int v = 0; v < NV; v++) wv[v] = _mm512_loadu_ps(wk + 16 * v); \
                        _Pragma("GCC unroll 16") for (int i = 0; i < MR; i++) {                          \
                            const __m512 xv = _mm512_set1_ps(xr[i * SC + c]);                            \
                            _Pragma("GCC unroll 2") for (int v = 0; v < NV; v++)                         \
                                acc[i][v] = _mm512_fmadd_ps(xv, wv[v], acc[i][v]);                       \
                        }                                                                                \
                    }                                                                                    \
                }                                                                                        \
            _Pragma("GCC unroll 16") for (int i = 0; i < MR; i++)                                        \
                _Pragma("GCC unroll 2") for (int v = 0; v < NV; v++)                                     \
                    _mm512_storeu_ps(out + (size_t)i * K + kb + 16 * v, acc[i][v]);                      \
        }                                                                                                \
    }
DEFINE_DIRECT_FWD(16, 1)
DEFINE_DIRECT_FWD(8, 1)
DEFINE_DIRECT_FWD(4, 1)
DEFINE_DIRECT_FWD(2, 1)
DEFINE_DIRECT_FWD(1, 1)
DEFINE_DIRECT_FWD(12, 2)
DEFINE_DIRECT_FWD(8, 2)
DEFINE_DIRECT_FWD(4, 2)
DEFINE_DIRECT_FWD(2, 2)
DEFINE_DIRECT_FWD(1, 2)

// One output row, cut into pixel blocks: 16 wide with 16-channel K blocks, 8 wide (12 when the row
// is long) with 32-channel ones.
static void direct_fwd_row(const ConvShape *s, const float *x, const float *wt, float *out, int Wp) {
    const int C = s->C, K = s->K;
    int q = 0;
#define DIRECT_STEP(MR, NV) direct_fwd_##MR##x##NV(s, x + (size_t)q * s->stride * C, wt, out + (size_t)q * K, Wp), q += MR
    if (K % 32 == 0) {
        if (s->Q >= 24)
            while (q + 12 <= s->Q) DIRECT_STEP(12, 2);
        while (q + 8 <= s->Q) DIRECT_STEP(8, 2);
        if (q + 4 <= s->Q) DIRECT_STEP(4, 2);
        if (q + 2 <= s->Q) DIRECT_STEP(2, 2);
        if (q < s->Q) DIRECT_STEP(1, 2);
    } else {
        while (q + 16 <= s->Q) DIRECT_STEP(16, 1);
        if (q + 8 <= s->Q) DIRECT_STEP(8, 1);
        if (q + 4 <= s->Q) DIRECT_STEP(4, 1);
        if (q + 2 <= s->Q) DIRECT_STEP(2, 1);
        if (q < s->Q) DIRECT_STEP(1, 1);
    }
#undef DIRECT_STEP
}

// dwn[k][r][s][c] = sum over pixels of image (in order) dout[pix][k] * xp[pix + (r, s)][c].
// C and K multiples of 16; one (tap, 16 channels, 16 output channels) block at a time, its 16
// accumulators in registers for the whole image.
static void direct_bwd_weight_image(const ConvShape *s, float *restrict dwn, const float *restrict xp,
                                    const float *restrict dout) {
    const int C = s->C, K = s->K, Wp = s->W + 2 * s->pad, RSC = s->R * s->S * C;
    for (int r = 0; r < s->R; r++)
        for (int t = 0; t < s->S; t++)
            for (int cb = 0; cb < C; cb += 16)
                for (int kb = 0; kb < K; kb += 16) {
                    __m512 acc[16];
                    for (int k = 0; k < 16; k++) acc[k] = _mm512_setzero_ps();
                    for (int p = 0; p < s->P; p++) {
                        const float *xr = xp + ((size_t)(p * s->stride + r) * Wp + t) * C + cb;
                        const float *g = dout + (size_t)p * s->Q * K + kb;
                        for (int q = 0; q < s->Q; q++, xr += (size_t)s->stride * C, g += K) {
                            const __m512 xv = _mm512_loadu_ps(xr);
                            _Pragma("GCC unroll 16") for (int k = 0; k < 16; k++)
                                acc[k] = _mm512_fmadd_ps(_mm512_set1_ps(g[k]), xv, acc[k]);
                        }
                    }
                    float *d = dwn + (size_t)kb * RSC + ((size_t)r * s->S + t) * C + cb;
                    for (int k = 0; k < 16; k++) _mm512_storeu_ps(d + (size_t)k * RSC, acc[k]);
                }
}
// The same for C not a multiple of 16 (RGB stems): vectorised over 16 output channels instead.
// For a fixed kernel row r the S * C (s, c) items of a pixel's window are contiguous in the padded
// row, so a block of JB items broadcasts JB consecutive floats against the output-gradient vector.
#define DEFINE_DIRECT_BWK(JB)                                                                            \
    static void direct_bwk_##JB(const ConvShape *s, float *restrict dwn, const float *restrict xp,     \
                                const float *restrict dout, int r, int j0, int kb) {                    \
        const int K = s->K, Wp = s->W + 2 * s->pad, SC = s->S * s->C, RSC = s->R * SC;                   \
        __m512 acc[JB];                                                                                  \
        _Pragma("GCC unroll 16") for (int i = 0; i < JB; i++) acc[i] = _mm512_setzero_ps();              \
        for (int p = 0; p < s->P; p++) {                                                                 \
            const float *xr = xp + (size_t)(p * s->stride + r) * Wp * s->C + j0;                         \
            const float *g = dout + (size_t)p * s->Q * K + kb;                                           \
            for (int q = 0; q < s->Q; q++, xr += (size_t)s->stride * s->C, g += K) {                     \
                const __m512 gv = _mm512_loadu_ps(g);                                                    \
                _Pragma("GCC unroll 16") for (int i = 0; i < JB; i++)                                    \
                    acc[i] = _mm512_fmadd_ps(_mm512_set1_ps(xr[i]), gv, acc[i]);                         \
            }                                                                                            \
        }                                                                                                \
        float tile[16];                                                                                  \
        for (int i = 0; i < JB; i++) {                                                                   \
            _mm512_storeu_ps(tile, acc[i]);                                                              \
            for (int k = 0; k < 16; k++) dwn[(size_t)(kb + k) * RSC + (size_t)r * SC + j0 + i] = tile[k]; \
        }                                                                                                \
    }
DEFINE_DIRECT_BWK(16)
DEFINE_DIRECT_BWK(8)
DEFINE_DIRECT_BWK(4)
DEFINE_DIRECT_BWK(2)
DEFINE_DIRECT_BWK(1)

static void direct_bwd_weight_image_k(const ConvShape *s, float *restrict dwn, const float *restrict xp,
                                      const float *restrict dout) {
    const int SC = s->S * s->C;
    for (int r = 0; r < s->R; r++)
        for (int kb = 0; kb < s->K; kb += 16) {
            int j = 0;
            for (; j + 16 <= SC; j += 16) direct_bwk_16(s, dwn, xp, dout, r, j, kb);
            if (j + 8 <= SC) direct_bwk_8(s, dwn, xp, dout, r, j, kb), j += 8;
            if (j + 4 <= SC) direct_bwk_4(s, dwn, xp, dout, r, j, kb), j += 4;
            if (j + 2 <= SC) direct_bwk_2(s, dwn, xp, dout, r, j, kb), j += 2;
            if (j < SC) direct_bwk_1(s, dwn, xp, dout, r, j, kb);
        }
}
#pragma GCC pop_options
#else
#define HAVE_DIRECT 0
#endif

// out[0, n) = relu?(out + bias[j % K] + res): the inference epilogue of one finished output row.
static void row_epilogue(const GemmEpilogue *ep, float *restrict out, const float *restrict res, size_t pixels, int K) {
    for (size_t i = 0; i < pixels; i++) {
        float *restrict o = out + i * K;
        if (ep->bias)
            for (int k = 0; k < K; k++) o[k] += ep->bias[k];
        if (res)
            for (int k = 0; k < K; k++) o[k] += res[i * K + k];
        if (ep->relu)
            for (int k = 0; k < K; k++) o[k] = o[k] > 0.0f ? o[k] : 0.0f;
    }
}

// w is KRSC, or already RSCK (the layout the kernels read) when w_rsck.
static void direct_forward(const ConvShape *s, float *out, const float *in, const float *w, int w_rsck,
                           const GemmEpilogue *ep) {
#if HAVE_DIRECT
    const int R = s->R, S = s->S, C = s->C, K = s->K, Wp = s->W + 2 * s->pad;
    const size_t xsz = (size_t)(s->H + 2 * s->pad) * Wp * C;
    float *wt = w_rsck ? NULL : ct_alloc((size_t)R * S * C * K * sizeof(float));
    if (!w_rsck)
        for (int k = 0; k < K; k++)
            for (int j = 0; j < R * S * C; j++) wt[(size_t)j * K + k] = w[(size_t)k * R * S * C + j];
    const float *wk = w_rsck ? w : wt;
    const int nthr = omp_get_max_threads();
    float *xbuf = ct_alloc((size_t)nthr * xsz * sizeof(float));
#pragma omp parallel for schedule(static)
    for (int n = 0; n < s->N; n++) {
        float *xp = xbuf + (size_t)omp_get_thread_num() * xsz;
        pad_image(s, xp, in, n);
        for (int p = 0; p < s->P; p++) {
            const size_t o = (((size_t)n * s->P + p) * s->Q) * K;
            direct_fwd_row(s, xp + (size_t)p * s->stride * Wp * C, wk, out + o, Wp);
            if (ep) row_epilogue(ep, out + o, ep->res ? ep->res + o : NULL, s->Q, K);
        }
    }
    free(xbuf);
    free(wt);
#else
    (void)s, (void)out, (void)in, (void)w, (void)w_rsck, (void)ep;
    ct_die("direct_forward: not built for this target");
#endif
}

static void direct_backward_weight(const ConvShape *s, float *dw, const float *dout, const float *in) {
#if HAVE_DIRECT
    const int Wp = s->W + 2 * s->pad;
    const size_t xsz = (size_t)(s->H + 2 * s->pad) * Wp * s->C, nw = (size_t)s->K * s->R * s->S * s->C;
    const size_t pqk = (size_t)s->P * s->Q * s->K;
    const int per = (s->N + 15) / 16, G = (s->N + per - 1) / per;  // image groups: from the shape alone
    const int nthr = omp_get_max_threads();
    float *part = ct_alloc((size_t)G * nw * sizeof(float));
    float *xbuf = ct_alloc((size_t)nthr * (xsz + nw) * sizeof(float));
#pragma omp parallel for schedule(dynamic, 1)
    for (int g = 0; g < G; g++) {
        float *xp = xbuf + (size_t)omp_get_thread_num() * (xsz + nw), *dwn = xp + xsz;
        float *pg = part + (size_t)g * nw;
        const int n0 = g * per, n1 = CT_MIN(s->N, n0 + per);
        for (int n = n0; n < n1; n++) {
            pad_image(s, xp, in, n);
            if (s->C % 16 == 0) direct_bwd_weight_image(s, n == n0 ? pg : dwn, xp, dout + (size_t)n * pqk);
            else direct_bwd_weight_image_k(s, n == n0 ? pg : dwn, xp, dout + (size_t)n * pqk);
            if (n != n0)
                for (size_t i = 0; i < nw; i++) pg[i] += dwn[i];
        }
    }
    for (size_t i = 0; i < nw; i++) {
        float v = part[i];
        for (int g = 1; g < G; g++) v += part[(size_t)g * nw + i];
        dw[i] = v;
    }
    free(xbuf);
    free(part);
#else
    (void)s, (void)dw, (void)dout, (void)in;
    ct_die("direct_backward_weight: not built for this target");
#endif
}

// Training forwards (and the stride-1 data gradients, which are forwards) of the 3x3 stride-1
// layers with 16+ output channels run as Winograd F(2x2, 3x3) (nn/winograd.h): 16 multiplies per
// 2x2 outputs instead of 36, 1.4-1.6x faster than the direct kernels on resnet20/18's 32-128
// channel layers (tools/bench_layers; 1.1x on the 16-channel ones), from 4x4 maps on (256 -> 256
// at 4x4, batch 32: 2.1 ms against the GEMM's 3.2, the per-call weight transform included; 2x2
// and 1x1 maps take nn/conv_small.c). The data gradient's filters are transformed straight from w
// (winograd_weights_flipped), without a flipped copy. Their weight gradients run as 16 GEMMs
// in the Winograd domain on every map size (no weight transform there) from 32x32 channels on
// (at 16 the per-tile transforms cost what the products save: the direct kernel stays). The choice depends on the
// shape only (never on the batch or thread count). On by default; --no-cpu-winograd
// (ExecOptions.cpu_winograd) keeps the direct/GEMM route. Per layer it is as close to float64 as the direct kernels
// (tests/test_layers.c); its different roundings make different ReLU branch choices where a
// pre-activation lies within float32 rounding of zero, which is why tests/test_parity.sh holds it
// against float64 replayed on those branches (docs/BENCHMARKS.md).
// o NULL: the defaults (every route on).
static int winograd_enabled(const ConvShape *s, const ExecOptions *o) {
    return (!o || o->cpu_winograd) && winograd_ok_k16(s);
}
// The small-map route (nn/conv_small.c), --no-cpu-small (ExecOptions.cpu_small) turns it off (README).
static int small_enabled(const ConvShape *s, const ExecOptions *o) { return (!o || o->cpu_small) && conv_small_ok(s); }
static int winograd_train_ok(const ConvShape *s, const ExecOptions *o) {
    return s->P * s->Q >= 16 && winograd_enabled(s, o);
}

void conv2d_forward_ex(const ConvShape *s, float *out, const float *in, const float *w, const ExecOptions *o) {
    if (conv_groups(s) > 1) {
        conv2d_grouped_forward(s, out, in, w, NULL, NULL, 0);
        return;
    }
    const size_t npq = (size_t)s->N * s->P * s->Q;
    const int rsc = s->R * s->S * s->C;
    if (small_enabled(s, o)) {
        conv_small_forward(s, out, in, w);
        return;
    }
    if (winograd_train_ok(s, o)) {
        float *u = ct_alloc((size_t)16 * s->C * s->K * sizeof(float));
        winograd_weights(u, w, s->K, s->C);
        conv3x3_winograd_ep(s, out, in, u, NULL, NULL, 0);
        free(u);
        return;
    }
    if (direct_ok(s)) {
        direct_forward(s, out, in, w, 0, NULL);
        return;
    }
    // out[NPQ, K] = im2col(in)[NPQ, RSC] w^T; a pointwise conv's im2col is the input itself.
    const GemmView a = is_pointwise(s) ? (GemmView){in, s->C, 1, NULL, 0, 0, NULL} : (GemmView){in, 0, 0, s, 0, 0, NULL};
    const GemmView b = {w, 1, rsc, NULL, 0, 0, NULL};
    sgemm_view((int)npq, s->K, rsc, &a, &b, out, s->K, 0);
}

// The same convolution with the inference epilogue applied to each output tile while it is in
// cache (GemmEpilogue), instead of separate passes over the whole output. The weights come RSCK
// (wt[(r, s, c)][k]): the GEMM then packs its B panels from contiguous rows, and the direct
// kernels read them as they are, so nothing is transposed per call.
void conv2d_forward_ep(const ConvShape *s, float *out, const float *in, const float *wt, int packed,
                       const float *bias, const float *res, int relu) {
    if (conv_groups(s) > 1) ct_die("conv2d_forward_ep: a grouped convolution takes conv2d_grouped_forward (KRSC weights)");
    const GemmEpilogue ep = {bias, res, s->K, relu};
    if (direct_ok(s)) {
        if (packed) ct_die("conv2d_forward_ep: packed weights for a direct convolution");
        direct_forward(s, out, in, wt, 1, &ep);
        return;
    }
    const GemmView a = is_pointwise(s) ? (GemmView){in, s->C, 1, NULL, 0, 0, NULL} : (GemmView){in, 0, 0, s, 0, 0, NULL};
    const GemmView b = {wt, s->K, 1, NULL, 0, packed, NULL};
    sgemm_view_ep((int)((size_t)s->N * s->P * s->Q), s->K, s->R * s->S * s->C, &a, &b, out, s->K, &ep);
}

void conv2d_backward_data_ex(const ConvShape *s, float *din, const float *dout, const float *w, const ExecOptions *o) {
    if (conv_groups(s) > 1) {
        conv2d_grouped_backward_data(s, din, dout, w);
        return;
    }
    const size_t npq = (size_t)s->N * s->P * s->Q;
    const int rsc = s->R * s->S * s->C;
    if (is_pointwise(s)) {
        sgemm((int)npq, s->C, s->K, dout, s->K, 1, w, s->C, 1, din, s->C, 0);
        return;
    }
    if (small_enabled(s, o)) {
        conv_small_backward_data(s, din, dout, w);
        return;
    }
    // Stride 1 on Winograd: the flipped kernel's filters are transformed straight from w.
    if (s->R == 3 && s->S == 3 && s->stride == 1 && s->pad == 1) {
        const ConvShape ts = conv_shape(s->N, s->P, s->Q, s->K, s->C, 3, 3, 1, 1);
        if (winograd_train_ok(&ts, o)) {
            float *u = ct_alloc((size_t)16 * s->C * s->K * sizeof(float));
            winograd_weights_flipped(u, w, s->K, s->C);
            conv3x3_winograd_ep(&ts, din, dout, u, NULL, NULL, 0);
            free(u);
            return;
        }
    }
    // The flipped-kernel route costs a weight transform (K x RSC); the col2im route a scatter
    // (NPQ x RSC). Late ResNet stages have more weights than output pixels: they take col2im.
    if (s->stride == 1 && s->R == s->S && s->pad <= s->R - 1 && npq > 4 * (size_t)s->K) {
        // Stride 1: the gradient is a forward convolution of dout with the kernel flipped in space
        // and its K and C swapped, padded by R-1-pad; it lands exactly on [N, H, W, C].
        const int R = s->R, S = s->S, C = s->C, K = s->K;
        float *wt = ct_alloc((size_t)rsc * K * sizeof(float));
        for (int c = 0; c < C; c++)
            for (int r = 0; r < R; r++)
                for (int t = 0; t < S; t++)
                    for (int k = 0; k < K; k++)
                        wt[(((size_t)c * R + r) * S + t) * K + k] =
                            w[(((size_t)k * R + (R - 1 - r)) * S + (S - 1 - t)) * C + c];
        ConvShape ts = conv_shape(s->N, s->P, s->Q, K, C, R, S, 1, R - 1 - s->pad);
        conv2d_forward_ex(&ts, din, dout, wt, o);
        free(wt);
        return;
    }
    memset(din, 0, (size_t)s->N * s->H * s->W * s->C * sizeof(float));
    const size_t T = tile_rows(s);
    float *dcol = ct_alloc(T * rsc * sizeof(float));
    for (size_t m0 = 0; m0 < npq; m0 += T) {
        const size_t rows = CT_MIN(T, npq - m0);
        sgemm((int)rows, rsc, s->K, dout + m0 * s->K, s->K, 1, w, rsc, 1, dcol, rsc, 0);
        col2im_add(s, din, dcol, m0, rows);
    }
    free(dcol);
}

// dw[K, RSC] = dout^T[K, NPQ] im2col(in)[NPQ, RSC]. The sum over NPQ is long and the output small,
// so it is cut into a fixed number of row chunks (from the shape alone), each chunk's partial dw
// computed by one thread, the partials then added in chunk order.
void conv2d_backward_weight_ex(const ConvShape *s, float *dw, const float *dout, const float *in, const ExecOptions *o) {
    if (conv_groups(s) > 1) {
        conv2d_grouped_backward_weight(s, dw, dout, in);
        return;
    }
    const size_t npq = (size_t)s->N * s->P * s->Q;
    const int rsc = s->R * s->S * s->C, K = s->K;
    const size_t nw = (size_t)K * rsc;
    if (winograd_enabled(s, o) && K * s->C >= 32 * 32) {
        conv3x3_winograd_backward_weight(s, dw, dout, in);
        return;
    }
    if (direct_ok(s)) {
        direct_backward_weight(s, dw, dout, in);
        return;
    }
    int G = (int)CT_MIN((size_t)32, npq / 4096);
    while (G > 1 && (size_t)G * nw * sizeof(float) > ((size_t)16 << 20)) G--;
    const int pw = is_pointwise(s);
    if (G <= 1) {
        const GemmView a = {dout, 1, K, NULL, 0, 0, NULL};
        const GemmView b = pw ? (GemmView){in, s->C, 1, NULL, 0, 0, NULL} : (GemmView){in, 0, 0, s, 0, 0, NULL};
        sgemm_view(K, rsc, (int)npq, &a, &b, dw, rsc, 0);
        return;
    }
    const size_t chunk = (npq + G - 1) / G;
    float *part = ct_alloc((size_t)G * nw * sizeof(float));
#pragma omp parallel for schedule(dynamic, 1)
    for (int g = 0; g < G; g++) {
        const size_t r0 = (size_t)g * chunk, rows = CT_MIN(chunk, npq - r0);
        const GemmView a = {dout + r0 * K, 1, K, NULL, 0, 0, NULL};
        const GemmView b = pw ? (GemmView){in + r0 * s->C, s->C, 1, NULL, 0, 0, NULL} : (GemmView){in, 0, 0, s, r0, 0, NULL};
        sgemm_view(K, rsc, (int)rows, &a, &b, part + (size_t)g * nw, rsc, 0);
    }
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < nw; i++) {
        float v = part[i];
        for (int g = 1; g < G; g++) v += part[(size_t)g * nw + i];
        dw[i] = v;
    }
    free(part);
}

size_t conv2d_packed_weights_size(const ConvShape *s) {
    if (conv_groups(s) > 1) return 0;
    if (direct_ok(s) || !sgemm_packs_b()) return 0;
    return sgemm_packed_b_size(s->R * s->S * s->C, s->K);
}

void conv2d_pack_weights(const ConvShape *s, float *dst, const float *wt) {
    if (!conv2d_packed_weights_size(s)) ct_die("conv2d_pack_weights: this convolution does not take packed weights");
    const GemmView b = {wt, s->K, 1, NULL, 0, 0, NULL};
    sgemm_pack_b(dst, &b, s->R * s->S * s->C, s->K);
}

void conv2d_forward(const ConvShape *s, float *out, const float *in, const float *w) {
    conv2d_forward_ex(s, out, in, w, NULL);
}
void conv2d_backward_data(const ConvShape *s, float *din, const float *dout, const float *w) {
    conv2d_backward_data_ex(s, din, dout, w, NULL);
}
void conv2d_backward_weight(const ConvShape *s, float *dw, const float *dout, const float *in) {
    conv2d_backward_weight_ex(s, dw, dout, in, NULL);
}
