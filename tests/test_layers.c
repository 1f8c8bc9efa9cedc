// nn/layers.h and nn/gemm.h against naive direct loops (double accumulation) written here, on
// randomly drawn shapes. Every GEMM micro-kernel this CPU can run is exercised.
#include <float.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "nn/blur.h"
#include "nn/gemm.h"
#include "nn/layers.h"
#include "nn/winograd.h"
#include "tests/test.h"
#include "util/common.h"
#include "util/rng.h"

// ---------------------------------------------------------------------------------------------
static void test_gemm(void) {
    for (int it = 0; it < 40; it++) {
        const int M = rnd(1, 70), N = rnd(1, 90), K = it == 0 ? 600 : rnd(1, 300);
        const int ta = rnd(0, 1), tb = rnd(0, 1), acc = rnd(0, 1), ldc = N + rnd(0, 3);
        float *A = rand_buf((size_t)M * K, 1), *B = rand_buf((size_t)K * N, 1);
        float *C = rand_buf((size_t)M * ldc, 1), *C0 = ct_alloc((size_t)M * ldc * sizeof(float));
        memcpy(C0, C, (size_t)M * ldc * sizeof(float));
        const ptrdiff_t a_rs = ta ? 1 : K, a_cs = ta ? M : 1, b_rs = tb ? 1 : N, b_cs = tb ? K : 1;
        sgemm(M, N, K, A, a_rs, a_cs, B, b_rs, b_cs, C, ldc, acc);
        double num = 0, den = 0;
        int pad_ok = 1;
        for (int i = 0; i < M; i++)
            for (int j = 0; j < ldc; j++) {
                if (j >= N) {
                    pad_ok &= C[i * ldc + j] == C0[i * ldc + j];
                    continue;
                }
                double s = acc ? C0[i * ldc + j] : 0;
                for (int p = 0; p < K; p++) s += (double)A[i * a_rs + p * a_cs] * B[p * b_rs + j * b_cs];
                num += (C[i * ldc + j] - s) * (C[i * ldc + j] - s);
                den += s * s;
            }
        const double err = sqrt(num / (den + 1e-30));
        CHECK(err < 1e-5, "sgemm[%s] M=%d N=%d K=%d ta=%d tb=%d acc=%d: rel err %g", sgemm_kernel_name(), M, N, K,
              ta, tb, acc, err);
        CHECK(pad_ok, "sgemm[%s] wrote outside its N=%d columns", sgemm_kernel_name(), N);
        free(A), free(B), free(C), free(C0);
    }
}

// Block views (GemmBlocks) as A and as B, row- and column-contiguous, with blocks that straddle
// the micro-kernel's rows, the 32-wide B slivers and the 256-deep K blocks.
static const float *block_elem(const GemmView *v, int i, int j) {
    const GemmBlocks *b = v->blocks;
    return v->p + b->off[(size_t)(i / b->bi) * b->nbj + j / b->bj] + (ptrdiff_t)(i % b->bi) * v->rs +
           (ptrdiff_t)(j % b->bj) * v->cs;
}
static GemmView random_block_view(int rows, int cols, GemmBlocks *b, ptrdiff_t **off, float **store) {
    b->bi = rnd(1, rows), b->bj = rnd(1, cols), b->nbj = (cols + b->bj - 1) / b->bj;
    const int nbi = (rows + b->bi - 1) / b->bi, nblk = nbi * b->nbj, contig_rows = rnd(0, 1);
    const ptrdiff_t rs = contig_rows ? b->bj : 1, cs = contig_rows ? 1 : b->bi, size = (ptrdiff_t)b->bi * b->bj;
    const int pool = rnd(1, nblk);  // fewer stored blocks than blocks: views share them, like taps
    *store = rand_buf((size_t)pool * size, 1);
    *off = ct_alloc((size_t)nblk * sizeof(ptrdiff_t));
    for (int i = 0; i < nblk; i++) (*off)[i] = rnd(0, pool - 1) * size;
    b->off = *off;
    return (GemmView){*store, rs, cs, NULL, 0, 0, b};
}
static void test_gemm_blocks(void) {
    for (int it = 0; it < 24; it++) {
        const int M = rnd(1, 70), N = rnd(1, 90), K = it < 2 ? 600 : rnd(1, 300), a_blk = it % 2;
        GemmBlocks bl;
        ptrdiff_t *off;
        float *store, *plain;
        const int vr = a_blk ? M : K, vc = a_blk ? K : N;
        const GemmView v = random_block_view(vr, vc, &bl, &off, &store);
        plain = rand_buf((size_t)(a_blk ? K * N : M * K), 1);
        const GemmView p = a_blk ? (GemmView){plain, N, 1, NULL, 0, 0, NULL} : (GemmView){plain, K, 1, NULL, 0, 0, NULL};
        float *C = ct_alloc((size_t)M * N * sizeof(float));
        sgemm_view(M, N, K, a_blk ? &v : &p, a_blk ? &p : &v, C, N, 0);
        double num = 0, den = 0;
        for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++) {
                double s = 0;
                for (int k = 0; k < K; k++)
                    s += a_blk ? (double)*block_elem(&v, i, k) * plain[(size_t)k * N + j]
                               : (double)plain[(size_t)i * K + k] * *block_elem(&v, k, j);
                num += (C[(size_t)i * N + j] - s) * (C[(size_t)i * N + j] - s);
                den += s * s;
            }
        const double err = sqrt(num / (den + 1e-30));
        CHECK(err < 1e-5, "sgemm[%s] block view as %s M=%d N=%d K=%d blocks %dx%d rs=%td cs=%td: rel err %g",
              sgemm_kernel_name(), a_blk ? "A" : "B", M, N, K, bl.bi, bl.bj, v.rs, v.cs, err);
        free(C), free(plain), free(store), free(off);
    }
}

// ---------------------------------------------------------------------------------------------
static double in_at(const ConvShape *s, const float *in, int n, int h, int w, int c) {
    if (h < 0 || h >= s->H || w < 0 || w >= s->W) return 0;
    return in[(((size_t)n * s->H + h) * s->W + w) * s->C + c];
}

static void test_conv_shape(const ConvShape *s) {
    const size_t nin = (size_t)s->N * s->H * s->W * s->C, nout = (size_t)s->N * s->P * s->Q * s->K;
    const size_t nw = (size_t)s->K * s->R * s->S * s->C;
    float *in = rand_buf(nin, 1), *w = rand_buf(nw, 1), *dout = rand_buf(nout, 1);
    float *out = ct_alloc(nout * sizeof(float)), *din = ct_alloc(nin * sizeof(float)), *dw = ct_alloc(nw * sizeof(float));
    float *ref_out = ct_alloc(nout * sizeof(float)), *ref_din = ct_alloc(nin * sizeof(float));
    float *ref_dw = ct_alloc(nw * sizeof(float));
    double *acc_din = calloc(nin, sizeof(double)), *acc_dw = calloc(nw, sizeof(double));
    for (int n = 0; n < s->N; n++)
        for (int p = 0; p < s->P; p++)
            for (int q = 0; q < s->Q; q++)
                for (int k = 0; k < s->K; k++) {
                    double acc = 0;
                    const size_t o = (((size_t)n * s->P + p) * s->Q + q) * s->K + k;
                    for (int r = 0; r < s->R; r++)
                        for (int t = 0; t < s->S; t++)
                            for (int c = 0; c < s->C; c++) {
                                const int h = p * s->stride - s->pad + r, x = q * s->stride - s->pad + t;
                                const size_t wi = (((size_t)k * s->R + r) * s->S + t) * s->C + c;
                                acc += in_at(s, in, n, h, x, c) * w[wi];
                                acc_dw[wi] += in_at(s, in, n, h, x, c) * dout[o];
                                if (h >= 0 && h < s->H && x >= 0 && x < s->W)
                                    acc_din[(((size_t)n * s->H + h) * s->W + x) * s->C + c] += (double)w[wi] * dout[o];
                            }
                    ref_out[o] = (float)acc;
                }
    for (size_t i = 0; i < nin; i++) ref_din[i] = (float)acc_din[i];
    for (size_t i = 0; i < nw; i++) ref_dw[i] = (float)acc_dw[i];
    // Poison outputs: backward must overwrite, never accumulate.
    for (size_t i = 0; i < nout; i++) out[i] = NAN;
    for (size_t i = 0; i < nin; i++) din[i] = 1e30f;
    for (size_t i = 0; i < nw; i++) dw[i] = NAN;
    conv2d_forward(s, out, in, w);
    conv2d_backward_data(s, din, dout, w);
    conv2d_backward_weight(s, dw, dout, in);
    const double e1 = rel_err_norm(out, ref_out, nout), e2 = rel_err_norm(din, ref_din, nin),
                 e3 = rel_err_norm(dw, ref_dw, nw);
    CHECK(e1 < 2e-6 * sqrt(s->R * s->S * s->C) + 1e-6 && e2 < 2e-6 * sqrt(s->R * s->S * s->K) + 1e-6 &&
              e3 < 2e-6 * sqrt((double)s->N * s->P * s->Q) + 1e-6,
          "conv[%s] N%d H%d W%d C%d K%d R%d S%d st%d pad%d: rel err fwd %g data %g weight %g", sgemm_kernel_name(),
          s->N, s->H, s->W, s->C, s->K, s->R, s->S, s->stride, s->pad, e1, e2, e3);
    free(in), free(w), free(dout), free(out), free(din), free(dw), free(ref_out), free(ref_din), free(ref_dw);
    free(acc_din), free(acc_dw);
}

static void test_conv(void) {
    // Fixed cases covering each code path, then random ones.
    const int fixed[][9] = {
        {2, 5, 7, 3, 8, 1, 1, 1, 0},    // pointwise GEMM
        {2, 9, 9, 6, 10, 1, 1, 2, 0},   // 1x1 stride 2 (downsample)
        {3, 8, 8, 5, 16, 3, 3, 1, 1},   // stride 1: transposed-conv backward data
        {2, 9, 7, 4, 12, 3, 3, 2, 1},   // stride 2: col2im backward data
        {1, 15, 13, 3, 17, 7, 7, 2, 3}, // stem
        {2, 6, 5, 3, 5, 3, 2, 1, 0},    // R != S
        {1, 4, 4, 2, 3, 3, 3, 1, 2},    // pad > R - 1 - ... (output larger than input)
        {1, 1, 1, 19, 7, 1, 1, 1, 0},
        {1, 2, 2, 130, 40, 3, 3, 1, 1}, // channel counts past one K block
        // Direct small-channel kernels (AVX-512): forward, backward-weight, backward-data via the
        // flipped forward; pixel-row remainders 8/4/2/1, K blocks of 16, pad 0 and R != 3.
        {2, 9, 31, 16, 16, 3, 3, 1, 1},
        {1, 5, 19, 32, 16, 3, 3, 1, 1},
        {2, 6, 13, 16, 32, 3, 3, 1, 0},
        {1, 7, 6, 3, 48, 3, 3, 1, 1},
        {1, 8, 9, 16, 64, 5, 5, 1, 2},
        {17, 4, 4, 16, 16, 3, 3, 1, 1}, // more images than backward-weight groups
        {1, 3, 39, 32, 32, 3, 3, 1, 1}, // 32-channel K blocks: 12-pixel blocks, remainders 2 and 1
        {1, 3, 15, 16, 64, 3, 3, 1, 1}, // 32-channel K blocks: remainders 8, 4, 2, 1
        {2, 9, 33, 16, 32, 3, 3, 2, 1}, // stride 2 (forward and backward-weight)
        {1, 8, 11, 32, 16, 3, 3, 2, 0},
        {1, 10, 10, 16, 16, 5, 5, 3, 2},
        {1, 15, 13, 3, 16, 7, 7, 2, 3}, // backward-weight over K for C % 16 != 0: 21 items = 16+4+1
        {2, 7, 9, 20, 16, 3, 3, 1, 1},  // 60 items = 3x16+8+4
        // Winograd F(2x2, 3x3) (3x3 stride 1 pad 1, P * Q >= 16): odd edges, a 32-channel block
        // and a 16-channel remainder (K 48), and its flipped backward-data (C 48 -> 16).
        {2, 9, 11, 16, 48, 3, 3, 1, 1},
        {1, 9, 9, 16, 16, 3, 3, 1, 1},   // batch 1, odd 9x9: ragged last tile row and column
        {3, 11, 8, 32, 16, 3, 3, 1, 1},  // K 16 only (remainder block alone); odd H, even W
        {1, 8, 8, 128, 32, 3, 3, 1, 1},  // 128 -> 32 and back (the flipped filters of the data gradient)
        {2, 4, 4, 32, 48, 3, 3, 1, 1},   // 4x4, the smallest map it takes
        {3, 5, 4, 16, 32, 3, 3, 1, 1},   // 5x4: a clipped tile row
        {1, 7, 10, 48, 64, 3, 3, 1, 1},  // 70 pixels: tiles split across two 28-tile blocks
        // Winograd weight gradient (32x32+ channels, any map size): the tile-group route (K C <=
        // 1024) and the per-xi route, a 1x1 map (one tile, three of its outputs clipped), 2x2
        // maps, odd edges, and more tiles than one chunk (xi route) / one group's chunk.
        {1, 1, 1, 32, 32, 3, 3, 1, 1},
        {3, 2, 2, 64, 64, 3, 3, 1, 1},
        {2, 5, 3, 16, 64, 3, 3, 1, 1},
        {2, 16, 18, 64, 64, 3, 3, 1, 1},
        {4, 32, 34, 32, 32, 3, 3, 1, 1},
        // Maps within the kernel's reach (nn/conv_small.c: one GEMM over pixel pairs, the weights
        // a block view): 2x1 and 1x2 maps, channel blocks that straddle the 32-wide column
        // slivers (C 5, K 7) and the 256-deep K blocks (4 x 70 channels), 5x5 on 3x3, 7x7 on 4x3.
        {3, 2, 1, 5, 7, 3, 3, 1, 1},
        {2, 1, 2, 70, 33, 3, 3, 1, 1},
        {3, 2, 2, 70, 45, 3, 3, 1, 1},
        {2, 3, 3, 5, 40, 5, 5, 1, 2},
        {1, 4, 3, 9, 20, 7, 7, 1, 3},
        {33, 2, 2, 16, 48, 3, 3, 1, 1},
    };
    for (size_t i = 0; i < CT_ARRAY_LEN(fixed); i++) {
        const int *f = fixed[i];
        ConvShape s = conv_shape(f[0], f[1], f[2], f[3], f[4], f[5], f[6], f[7], f[8]);
        test_conv_shape(&s);
    }
    for (int it = 0; it < 12; it++) {
        const int R = rnd(0, 3) == 0 ? 1 : rnd(0, 4) == 0 ? 7 : 3;
        const int stride = rnd(1, 2), pad = rnd(0, R / 2 + (R > 1));
        const int H = rnd(R > pad * 2 ? R - 2 * pad : 1, 11), W = rnd(R > pad * 2 ? R - 2 * pad : 1, 11);
        ConvShape s = conv_shape(rnd(1, 3), H, W, rnd(1, 20), rnd(1, 36), R, R, stride, pad);
        test_conv_shape(&s);
    }
    // One shape larger than a scratch tile, so the tiled path (im2col, col2im, accumulating
    // weight GEMM across tiles) runs more than once.
    const int big[][9] = {
        {3, 48, 48, 96, 8, 3, 3, 2, 1},  // two tiles of two whole images
        {1, 32, 32, 128, 4, 3, 3, 1, 1}, // tiles smaller than one image (stride 1)
        {1, 47, 48, 256, 3, 3, 3, 2, 1}, // tiles smaller than one image (col2im)
    };
    for (size_t i = 0; i < CT_ARRAY_LEN(big); i++) {
        const int *f = big[i];
        ConvShape s = conv_shape(f[0], f[1], f[2], f[3], f[4], f[5], f[6], f[7], f[8]);
        test_conv_shape(&s);
    }
}

// Winograd F(2x2, 3x3) against the direct kernels, both against float64, on the training step's
// shapes with ReLU outputs as inputs (like a network's): its transforms add roundings, but on
// these shapes it must stay as close to float64 as the direct route (within 2x, per output and
// norm-wise), so a parity difference of the model cannot come from a less accurate layer.
static void test_winograd_accuracy(void) {
    const int shapes[][4] = {{4, 32, 16, 16}, {4, 16, 32, 32}, {2, 8, 64, 64}, {2, 8, 128, 128}, {1, 9, 16, 48}};
    for (size_t i = 0; i < CT_ARRAY_LEN(shapes); i++) {
        const int *f = shapes[i];
        ConvShape s = conv_shape(f[0], f[1], f[1], f[2], f[3], 3, 3, 1, 1);
        if (!winograd_ok_k16(&s)) {
            printf("winograd accuracy: no AVX-512 here, skipped\n");
            return;
        }
        const size_t nin = (size_t)s.N * s.H * s.W * s.C, nout = (size_t)s.N * s.P * s.Q * s.K, nw = (size_t)s.K * 9 * s.C;
        float *in = rand_buf(nin, 1), *w = rand_buf(nw, sqrtf(6.0f / (9 * s.C))), *wt = ct_alloc(nw * sizeof(float));
        float *u = ct_alloc(16 * (size_t)s.C * s.K * sizeof(float)), *ow = ct_alloc(nout * sizeof(float));
        float *od = ct_alloc(nout * sizeof(float));
        double *ref = ct_alloc(nout * sizeof(double));
        for (size_t j = 0; j < nin; j++) in[j] = in[j] > 0 ? in[j] : 0;
        for (int k = 0; k < s.K; k++)
            for (int j = 0; j < 9 * s.C; j++) wt[(size_t)j * s.K + k] = w[(size_t)k * 9 * s.C + j];
        for (int n = 0; n < s.N; n++)
            for (int p = 0; p < s.P; p++)
                for (int q = 0; q < s.Q; q++)
                    for (int k = 0; k < s.K; k++) {
                        double acc = 0;
                        for (int r = 0; r < 3; r++)
                            for (int t = 0; t < 3; t++)
                                for (int c = 0; c < s.C; c++)
                                    acc += in_at(&s, in, n, p - 1 + r, q - 1 + t, c) * w[(((size_t)k * 3 + r) * 3 + t) * s.C + c];
                        ref[(((size_t)n * s.P + p) * s.Q + q) * s.K + k] = acc;
                    }
        winograd_weights(u, w, s.K, s.C);
        conv3x3_winograd_ep(&s, ow, in, u, NULL, NULL, 0);
        conv2d_forward_ep(&s, od, in, wt, 0, NULL, NULL, 0);
        double ew = 0, ed = 0, nr = 0, mw = 0, md = 0;
        for (size_t j = 0; j < nout; j++) {
            const double dw = ow[j] - ref[j], dd = od[j] - ref[j];
            ew += dw * dw, ed += dd * dd, nr += ref[j] * ref[j];
            mw = fmax(mw, fabs(dw)), md = fmax(md, fabs(dd));
        }
        ew = sqrt(ew / nr), ed = sqrt(ed / nr);
        const double rms = sqrt(nr / nout);
        printf("winograd N%d %2dx%-2d C%3d K%3d vs float64: rel err %.2e (direct %.2e), max |err|/rms %.2e (direct %.2e)\n",
               s.N, s.H, s.W, s.C, s.K, ew, ed, mw / rms, md / rms);
        CHECK(ew <= 2 * ed && mw <= 2 * md, "winograd N%d %dx%d C%d K%d: error %.3g (max %.3g) vs direct %.3g (max %.3g)", s.N,
              s.H, s.W, s.C, s.K, ew, mw / rms, ed, md / rms);
        free(in), free(w), free(wt), free(u), free(ow), free(od), free(ref);
    }
}

// The Winograd weight gradient on both routes against float64 and against the GEMM route
// (im2col + sgemm, the accuracy the direct kernels have): per weight and norm-wise within 2x of
// the GEMM's error; and 1, 2 and 3 threads give the same bits.
static void test_winograd_wgrad(void) {
    const int shapes[][4] = {{16, 32, 32, 32}, {8, 16, 64, 64}, {8, 8, 128, 128}, {4, 4, 256, 128}, {2, 3, 64, 48},
                             {32, 2, 64, 64}, {3, 9, 16, 64}};
    for (size_t i = 0; i < CT_ARRAY_LEN(shapes); i++) {
        const int *f = shapes[i];
        ConvShape s = conv_shape(f[0], f[1], f[1], f[2], f[3], 3, 3, 1, 1);
        if (!winograd_ok_k16(&s)) {
            printf("winograd weight gradient: no AVX-512 here, skipped\n");
            return;
        }
        const int C = s.C, K = s.K, rsc = 9 * C;
        const size_t npq = (size_t)s.N * s.P * s.Q, nin = (size_t)s.N * s.H * s.W * C, nw = (size_t)K * rsc;
        float *in = rand_buf(nin, 1), *dout = rand_buf(npq * K, 1), *col = ct_alloc(npq * rsc * sizeof(float));
        float *dg = ct_alloc(nw * sizeof(float)), *dwv[2][3];
        double *ref = calloc(nw, sizeof(double));
        for (size_t j = 0; j < nin; j++) in[j] = in[j] > 0 ? in[j] : 0;
        for (int n = 0; n < s.N; n++)
            for (int p = 0; p < s.P; p++)
                for (int q = 0; q < s.Q; q++) {
                    const size_t m = ((size_t)n * s.P + p) * s.Q + q;
                    for (int r = 0; r < 3; r++)
                        for (int t = 0; t < 3; t++)
                            for (int c = 0; c < C; c++)
                                col[m * rsc + (r * 3 + t) * C + c] = (float)in_at(&s, in, n, p - 1 + r, q - 1 + t, c);
                    for (int k = 0; k < K; k++)
                        for (int j = 0; j < rsc; j++) ref[(size_t)k * rsc + j] += (double)dout[m * K + k] * col[m * rsc + j];
                }
        sgemm(K, rsc, (int)npq, dout, 1, K, col, rsc, 1, dg, rsc, 0);
        for (int route = 0; route < 2; route++)
            for (int th = 0; th < 3; th++) {
                dwv[route][th] = ct_alloc(nw * sizeof(float));
                omp_set_num_threads(th + 1);
                conv3x3_winograd_backward_weight_ex(&s, dwv[route][th], dout, in, route ? WG_ROUTE_GROUP : WG_ROUTE_XI);
            }
        omp_set_num_threads(2);
        double eg = 0, nr = 0, mg = 0;
        for (size_t j = 0; j < nw; j++) {
            const double d = dg[j] - ref[j];
            eg += d * d, nr += ref[j] * ref[j], mg = fmax(mg, fabs(d));
        }
        const double rms = sqrt(nr / nw);
        eg = sqrt(eg / nr);
        for (int route = 0; route < 2; route++) {
            double ew = 0, mw = 0;
            for (size_t j = 0; j < nw; j++) {
                const double d = dwv[route][0][j] - ref[j];
                ew += d * d, mw = fmax(mw, fabs(d));
            }
            ew = sqrt(ew / nr);
            const int same = !memcmp(dwv[route][0], dwv[route][1], nw * 4) && !memcmp(dwv[route][0], dwv[route][2], nw * 4);
            printf("winograd wgrad (%s) N%d %dx%d C%d K%d vs float64: rel err %.2e (gemm %.2e), max |err|/rms %.2e (gemm %.2e)%s\n",
                   route ? "group" : "xi", s.N, s.H, s.W, C, K, ew, eg, mw / rms, mg / rms, same ? "" : ", THREADS DIFFER");
            CHECK(ew <= 2 * eg && mw <= 2 * mg, "winograd wgrad (%s) N%d %dx%d C%d K%d: error %.3g (max %.3g) vs gemm %.3g (max %.3g)",
                  route ? "group" : "xi", s.N, s.H, s.W, C, K, ew, mw / rms, eg, mg / rms);
            CHECK(same, "winograd wgrad (%s) N%d %dx%d C%d K%d: 1, 2 and 3 threads differ", route ? "group" : "xi", s.N, s.H,
                  s.W, C, K);
            for (int th = 0; th < 3; th++) free(dwv[route][th]);
        }
        free(in), free(dout), free(col), free(dg), free(ref);
    }
}

// ---------------------------------------------------------------------------------------------
static void test_batchnorm(void) {
    for (int it = 0; it < 12; it++) {
        // it >= 8: channel counts the AVX-512 sums take (16 at a time).
        const int M = it == 0 ? 1 : rnd(2, 3000), C = it >= 8 ? 16 * (it - 7) : rnd(1, 40), relu = it % 2;
        const float momentum = 0.1f, eps = 1e-5f;
        float *x = rand_buf((size_t)M * C, 2), *gamma = rand_buf(C, 1), *beta = rand_buf(C, 1);
        for (size_t i = 0; i < (size_t)M * C; i++) x[i] += 3.0f;  // non-zero mean
        float *y = ct_alloc((size_t)M * C * sizeof(float)), *mean = ct_alloc(C * sizeof(float));
        float *invstd = ct_alloc(C * sizeof(float)), *rm = rand_buf(C, 1), *rv = rand_buf(C, 1);
        for (int c = 0; c < C; c++) rv[c] = 1 + rv[c] * 0.5f;
        float *rm0 = ct_alloc(C * sizeof(float)), *rv0 = ct_alloc(C * sizeof(float));
        memcpy(rm0, rm, C * sizeof(float));
        memcpy(rv0, rv, C * sizeof(float));
        batchnorm_forward_train(y, mean, invstd, rm, rv, x, gamma, beta, M, C, momentum, eps, relu);
        double worst = 0, worst_stat = 0;
        double *dmean = ct_alloc(C * sizeof(double)), *dvar = ct_alloc(C * sizeof(double));
        for (int c = 0; c < C; c++) {
            double s = 0, v = 0;
            for (int r = 0; r < M; r++) s += x[(size_t)r * C + c];
            s /= M;
            for (int r = 0; r < M; r++) v += (x[(size_t)r * C + c] - s) * (x[(size_t)r * C + c] - s);
            v /= M;
            dmean[c] = s, dvar[c] = v;
            const double is = 1 / sqrt(v + eps);
            worst_stat = fmax(worst_stat, fabs(mean[c] - s) / (fabs(s) + 1e-3));
            worst_stat = fmax(worst_stat, fabs(invstd[c] - is) / is);
            const double erm = (1 - momentum) * rm0[c] + momentum * s;
            const double erv = (1 - momentum) * rv0[c] + momentum * (M > 1 ? v * M / (M - 1) : v);
            // The running mean blends O(1) values and can land near zero: compare on an O(1) scale.
            worst_stat = fmax(worst_stat, fabs(rm[c] - erm) / (fabs(erm) + 1));
            worst_stat = fmax(worst_stat, fabs(rv[c] - erv) / (fabs(erv) + 1e-3));
            for (int r = 0; r < M; r++) {
                double e = (x[(size_t)r * C + c] - s) * is * gamma[c] + beta[c];
                if (relu && e < 0) e = 0;
                worst = fmax(worst, fabs(y[(size_t)r * C + c] - e));
            }
        }
        CHECK(worst < 1e-5 && worst_stat < 1e-5, "bn train M=%d C=%d relu=%d: max err y %g stats %g", M, C, relu,
              worst, worst_stat);

        // Backward against the closed form in double.
        float *dy = rand_buf((size_t)M * C, 1), *dx = ct_alloc((size_t)M * C * sizeof(float));
        float *dg = ct_alloc(C * sizeof(float)), *db = ct_alloc(C * sizeof(float));
        batchnorm_backward(dx, dg, db, dy, x, relu ? y : NULL, gamma, mean, invstd, M, C);
        double edx = 0, edg = 0;
        // The reference takes the saved float statistics the layer is given: with the exact double
        // mean instead, sum g * (x - mean) moves by (mean error) * sum g, which can be 1e-4 of a
        // small dgamma (seen at M=294 C=5).
        for (int c = 0; c < C; c++) {
            const double is = invstd[c];
            double sg = 0, sgx = 0;
            for (int r = 0; r < M; r++) {
                const size_t o = (size_t)r * C + c;
                const double g = relu && !(y[o] > 0) ? 0 : dy[o];
                sg += g;
                sgx += g * (x[o] - (double)mean[c]) * is;
            }
            edg = fmax(edg, fabs(dg[c] - sgx) / (fabs(sgx) + 1e-3));
            edg = fmax(edg, fabs(db[c] - sg) / (fabs(sg) + 1e-3));
            for (int r = 0; r < M; r++) {
                const size_t o = (size_t)r * C + c;
                const double g = relu && !(y[o] > 0) ? 0 : dy[o];
                const double xh = (x[o] - (double)mean[c]) * is;
                const double e = gamma[c] * is * (g - sg / M - xh * sgx / M);
                edx = fmax(edx, fabs(dx[o] - e) / (1 + fabs(e)));
            }
        }
        CHECK(edx < 1e-4 && edg < 1e-4, "bn backward M=%d C=%d relu=%d: err dx %g dgamma/dbeta %g", M, C, relu, edx,
              edg);
        // dx may alias dy.
        float *dy2 = ct_alloc((size_t)M * C * sizeof(float));
        memcpy(dy2, dy, (size_t)M * C * sizeof(float));
        batchnorm_backward(dy2, dg, db, dy2, x, relu ? y : NULL, gamma, mean, invstd, M, C);
        CHECK(!memcmp(dy2, dx, (size_t)M * C * sizeof(float)), "bn backward in place differs (M=%d C=%d)", M, C);

        // Eval mode with the running statistics.
        batchnorm_forward_eval(y, x, gamma, beta, rm, rv, M, C, eps, relu);
        double ee = 0;
        for (int r = 0; r < M; r++)
            for (int c = 0; c < C; c++) {
                double e = (x[(size_t)r * C + c] - rm[c]) / sqrt(rv[c] + eps) * gamma[c] + beta[c];
                if (relu && e < 0) e = 0;
                ee = fmax(ee, fabs(y[(size_t)r * C + c] - e));
            }
        CHECK(ee < 1e-4, "bn eval M=%d C=%d: max err %g", M, C, ee);
        free(x), free(gamma), free(beta), free(y), free(mean), free(invstd), free(rm), free(rv), free(rm0);
        free(rv0), free(dmean), free(dvar), free(dy), free(dx), free(dg), free(db), free(dy2);
    }
}

// ---------------------------------------------------------------------------------------------
static void test_maxpool(void) {
    for (int it = 0; it < 10; it++) {
        const int k = it < 6 ? 3 : rnd(1, 4), stride = it < 6 ? 2 : rnd(1, 3), pad = rnd(0, k / 2);
        const int N = rnd(1, 3), H = rnd(k, 12), W = rnd(k, 12), C = rnd(1, 9);
        const int P = (H + 2 * pad - k) / stride + 1, Q = (W + 2 * pad - k) / stride + 1;
        const size_t nin = (size_t)N * H * W * C, nout = (size_t)N * P * Q * C;
        float *in = ct_alloc(nin * sizeof(float)), *out = ct_alloc(nout * sizeof(float));
        // Few distinct values, so ties are common and the first-element rule is tested.
        for (size_t i = 0; i < nin; i++) in[i] = (float)rnd(-3, 3);
        float *dout = rand_buf(nout, 1), *din = ct_alloc(nin * sizeof(float));
        double *ref_din = calloc(nin, sizeof(double));
        maxpool_forward(out, in, N, H, W, C, k, stride, pad, P, Q);
        maxpool_backward(din, dout, in, N, H, W, C, k, stride, pad, P, Q);
        int bad = 0;
        for (int n = 0; n < N; n++)
            for (int p = 0; p < P; p++)
                for (int q = 0; q < Q; q++)
                    for (int c = 0; c < C; c++) {
                        size_t best = 0;
                        float m = -INFINITY;
                        int any = 0;
                        for (int r = 0; r < k; r++)
                            for (int t = 0; t < k; t++) {
                                const int h = p * stride - pad + r, w = q * stride - pad + t;
                                if (h < 0 || h >= H || w < 0 || w >= W) continue;
                                const size_t i = (((size_t)n * H + h) * W + w) * C + c;
                                if (!any || in[i] > m) m = in[i], best = i, any = 1;
                            }
                        const size_t o = (((size_t)n * P + p) * Q + q) * C + c;
                        bad += out[o] != m;
                        ref_din[best] += dout[o];
                    }
        double e = 0;
        for (size_t i = 0; i < nin; i++) e = fmax(e, fabs(din[i] - ref_din[i]));
        CHECK(!bad && e < 1e-6, "maxpool N%d H%d W%d C%d k%d s%d p%d: %d wrong maxima, din err %g", N, H, W, C, k,
              stride, pad, bad, e);
        free(in), free(out), free(dout), free(din), free(ref_din);
    }
}

// BlurPool's blur: against its definition (a depthwise 3x3 conv of [1 2 1]^T [1 2 1] / 16, zero
// padding 1, in double), against conv2d_forward with the same filter on the diagonal of a [C,3,3,C]
// weight (torch's groups = C written as a dense conv), and the backward against the transpose
// (each output's gradient scattered back through the taps, in double) and <blur(x), y> =
// <x, blur_backward(y)>, on shapes down to 1x1 (every tap at a border).
static void test_blur(void) {
    static const double tap[3] = {1, 2, 1};
    for (int it = 0; it < 12; it++) {
        const int N = rnd(1, 3), H = it < 2 ? 1 : rnd(1, 9), W = it < 2 ? rnd(1, 3) : rnd(1, 9), C = rnd(1, 19);
        const size_t n = (size_t)N * H * W * C;
        float *x = rand_buf(n, 1), *y = rand_buf(n, 1), *bx = ct_alloc(n * sizeof(float));
        float *by = ct_alloc(n * sizeof(float)), *cx = ct_alloc(n * sizeof(float));
        blur3x3_forward(bx, x, N, H, W, C);
        blur3x3_backward(by, y, N, H, W, C);
        double e = 0, lhs = 0, rhs = 0, eb = 0;
        double *ref_b = calloc(n, sizeof(double));  // the transpose, scattered output by output
        for (int b = 0; b < N; b++)
            for (int h = 0; h < H; h++)
                for (int w = 0; w < W; w++)
                    for (int c = 0; c < C; c++) {
                        double ref = 0;
                        for (int r = 0; r < 3; r++)
                            for (int t = 0; t < 3; t++) {
                                const int hh = h + r - 1, ww = w + t - 1;
                                if (hh < 0 || hh >= H || ww < 0 || ww >= W) continue;
                                ref += tap[r] * tap[t] / 16 * x[(((size_t)b * H + hh) * W + ww) * C + c];
                            }
                        const size_t i = (((size_t)b * H + h) * W + w) * C + c;
                        e = fmax(e, fabs(bx[i] - ref));
                        for (int r = 0; r < 3; r++)
                            for (int t = 0; t < 3; t++) {
                                const int hh = h + r - 1, ww = w + t - 1;
                                if (hh < 0 || hh >= H || ww < 0 || ww >= W) continue;
                                ref_b[(((size_t)b * H + hh) * W + ww) * C + c] += tap[r] * tap[t] / 16 * y[i];
                            }
                    }
        for (size_t i = 0; i < n; i++) lhs += (double)bx[i] * y[i], rhs += (double)x[i] * by[i];
        for (size_t i = 0; i < n; i++) eb = fmax(eb, fabs(by[i] - ref_b[i]));
        float *wd = calloc((size_t)C * 9 * C, sizeof(float));  // KRSC, nonzero only at k == c
        for (int k = 0; k < C; k++)
            for (int r = 0; r < 3; r++)
                for (int t = 0; t < 3; t++) wd[(((size_t)k * 3 + r) * 3 + t) * C + k] = (float)(tap[r] * tap[t] / 16);
        ConvShape s = conv_shape(N, H, W, C, C, 3, 3, 1, 1);
        conv2d_forward(&s, cx, x, wd);
        double ec = max_abs_diff(bx, cx, n);
        // Float outputs: each within an ulp or so of the double answers (|x| < 1); the sums of n
        // products of those within 1e-6 of each other.
        CHECK(e < 1e-6 && ec < 1e-6 && eb < 1e-6 && fabs(lhs - rhs) <= 1e-6 * (fabs(lhs) + 1),
              "blur N%d H%d W%d C%d: err %g vs definition, %g vs dense conv, backward %g vs the transpose; "
              "<Bx,y> %.12g <x,B'y> %.12g", N, H, W, C, e, ec, eb, lhs, rhs);
        free(x), free(y), free(bx), free(by), free(cx), free(wd), free(ref_b);
    }
}

static void test_avgpool_linear(void) {
    const int N = 3, HW = 17, C = 11, O = 7;
    float *in = rand_buf((size_t)N * HW * C, 1), *out = ct_alloc(N * C * sizeof(float));
    float *dout = rand_buf(N * C, 1), *din = ct_alloc((size_t)N * HW * C * sizeof(float));
    avgpool_forward(out, in, N, HW, C);
    avgpool_backward(din, dout, N, HW, C);
    double e = 0, ed = 0;
    for (int n = 0; n < N; n++)
        for (int c = 0; c < C; c++) {
            double s = 0;
            for (int i = 0; i < HW; i++) {
                s += in[((size_t)n * HW + i) * C + c];
                ed = fmax(ed, fabs(din[((size_t)n * HW + i) * C + c] - dout[n * C + c] / (double)HW));
            }
            e = fmax(e, fabs(out[n * C + c] - s / HW));
        }
    CHECK(e < 1e-6 && ed < 1e-7, "avgpool: err fwd %g bwd %g", e, ed);

    float *w = rand_buf(O * C, 1), *b = rand_buf(O, 1), *y = ct_alloc(N * O * sizeof(float));
    float *dy = rand_buf(N * O, 1), *dx = ct_alloc(N * C * sizeof(float)), *dw = ct_alloc(O * C * sizeof(float));
    float *db = ct_alloc(O * sizeof(float));
    linear_forward(y, out, w, b, N, C, O);
    linear_backward(dx, dw, db, dy, out, w, N, C, O);
    double ey = 0, edx = 0, edw = 0, edb = 0;
    for (int n = 0; n < N; n++)
        for (int o = 0; o < O; o++) {
            double s = b[o];
            for (int i = 0; i < C; i++) s += (double)out[n * C + i] * w[o * C + i];
            ey = fmax(ey, fabs(y[n * O + o] - s));
        }
    for (int n = 0; n < N; n++)
        for (int i = 0; i < C; i++) {
            double s = 0;
            for (int o = 0; o < O; o++) s += (double)dy[n * O + o] * w[o * C + i];
            edx = fmax(edx, fabs(dx[n * C + i] - s));
        }
    for (int o = 0; o < O; o++) {
        double sb = 0;
        for (int n = 0; n < N; n++) sb += dy[n * O + o];
        edb = fmax(edb, fabs(db[o] - sb));
        for (int i = 0; i < C; i++) {
            double s = 0;
            for (int n = 0; n < N; n++) s += (double)dy[n * O + o] * out[n * C + i];
            edw = fmax(edw, fabs(dw[o * C + i] - s));
        }
    }
    CHECK(ey < 1e-5 && edx < 1e-5 && edw < 1e-5 && edb < 1e-5, "linear: err y %g dx %g dw %g db %g", ey, edx, edw,
          edb);
    // Without bias: forward equals the biased one minus b; backward without din/db still gives dw.
    float *y2 = ct_alloc(N * O * sizeof(float)), *dw2 = ct_alloc(O * C * sizeof(float));
    linear_forward(y2, out, w, NULL, N, C, O);
    linear_backward(NULL, dw2, NULL, dy, out, w, N, C, O);
    double e2 = 0;
    for (int i = 0; i < N * O; i++) e2 = fmax(e2, fabs(y2[i] + b[i % O] - y[i]));
    CHECK(e2 < 1e-5 && !memcmp(dw, dw2, O * C * sizeof(float)), "linear without bias: err %g", e2);
    free(y2), free(dw2);
    free(in), free(out), free(dout), free(din), free(w), free(b), free(y), free(dy), free(dx), free(dw), free(db);
}

// ---------------------------------------------------------------------------------------------
static void test_losses(void) {
    const int N = 9, K = 13;
    float *z = rand_buf(N * K, 4), *t = rand_buf(N * K, 4), *d = ct_alloc(N * K * sizeof(float));
    int32_t labels[9];
    for (int n = 0; n < N; n++) labels[n] = rnd(0, K - 1);
    for (int si = 0; si < 3; si++) {
        const double eps = si * 0.1;
        int correct = -1;
        const float loss = softmax_xent(d, z, labels, N, K, (float)eps, 2.0f, &correct);
        double L = 0, ed = 0;
        int hits = 0;
        for (int n = 0; n < N; n++) {
            double m = -1e300, s = 0;
            int arg = 0;
            for (int k = 0; k < K; k++) {
                m = fmax(m, z[n * K + k]);
                if (z[n * K + k] > z[n * K + arg]) arg = k;
            }
            hits += arg == labels[n];
            for (int k = 0; k < K; k++) s += exp(z[n * K + k] - m);
            for (int k = 0; k < K; k++) {
                const double logp = z[n * K + k] - m - log(s);
                const double tk = eps / K + (k == labels[n]) * (1 - eps);
                L -= tk * logp / N;
                ed = fmax(ed, fabs(d[n * K + k] - 2.0 * (exp(logp) - tk) / N));
            }
        }
        CHECK(fabs(loss - L) < 1e-5 * (1 + L) && ed < 1e-6 && correct == hits,
              "softmax_xent eps=%g: loss %g vs %g, grad err %g, correct %d vs %d", eps, loss, L, ed, correct, hits);
    }
    for (int ti = 1; ti <= 4; ti *= 4) {
        const double T = ti;
        for (int i = 0; i < N * K; i++) d[i] = 1.0f;  // kd_loss accumulates
        const float loss = kd_loss(d, z, t, N, K, (float)T, 0.5f);
        double L = 0, ed = 0;
        for (int n = 0; n < N; n++) {
            double ms = -1e300, mt = -1e300, ss = 0, st = 0;
            for (int k = 0; k < K; k++) ms = fmax(ms, z[n * K + k] / T), mt = fmax(mt, t[n * K + k] / T);
            for (int k = 0; k < K; k++) ss += exp(z[n * K + k] / T - ms), st += exp(t[n * K + k] / T - mt);
            for (int k = 0; k < K; k++) {
                const double lps = z[n * K + k] / T - ms - log(ss), lpt = t[n * K + k] / T - mt - log(st);
                L += T * T * exp(lpt) * (lpt - lps) / N;
                ed = fmax(ed, fabs(d[n * K + k] - (1.0 + 0.5 * T / N * (exp(lps) - exp(lpt)))));
            }
        }
        CHECK(fabs(loss - L) < 1e-5 * (1 + L) && ed < 1e-6, "kd_loss T=%g: loss %g vs %g, grad err %g", T, loss, L, ed);
    }
    // Top-k with ties: logits 0 1 1 2 and label 1: one logit exceeds it, so top-1 misses, top-2 hits.
    const float tz[4] = {0, 1, 1, 2};
    const int32_t tl[1] = {1};
    CHECK(topk_correct(tz, tl, 1, 4, 1) == 0 && topk_correct(tz, tl, 1, 4, 2) == 1 && topk_correct(tz, tl, 1, 4, 3) == 1,
          "topk_correct tie rule");
    int h5 = topk_correct(z, labels, N, K, 5), ref5 = 0;
    for (int n = 0; n < N; n++) {
        int above = 0;
        for (int k = 0; k < K; k++) above += z[n * K + k] > z[n * K + labels[n]];
        ref5 += above < 5;
    }
    CHECK(h5 == ref5, "top5 %d vs %d", h5, ref5);
    free(z), free(t), free(d);
}

static void test_elementwise(void) {
    const size_t n = 1001;
    float *a = rand_buf(n, 1), *b = rand_buf(n, 1), *y = ct_alloc(n * sizeof(float)), *d = rand_buf(n, 1);
    float *dx = ct_alloc(n * sizeof(float));
    int bad = 0;
    relu_forward(y, a, n);
    for (size_t i = 0; i < n; i++) bad += y[i] != (a[i] > 0 ? a[i] : 0);
    relu_backward(dx, d, y, n);
    for (size_t i = 0; i < n; i++) bad += dx[i] != (a[i] > 0 ? d[i] : 0);
    add_forward(y, a, b, n, 1);
    for (size_t i = 0; i < n; i++) bad += y[i] != (a[i] + b[i] > 0 ? a[i] + b[i] : 0);
    add_forward(y, a, b, n, 0);
    for (size_t i = 0; i < n; i++) bad += y[i] != a[i] + b[i];
    add_inplace(y, b, n);
    for (size_t i = 0; i < n; i++) bad += y[i] != (a[i] + b[i]) + b[i];
    CHECK(!bad, "elementwise: %d mismatches", bad);

    uint8_t px[2 * 3 * 3];
    for (int i = 0; i < 18; i++) px[i] = (uint8_t)(i * 15);
    const float mean[3] = {0.485f, 0.456f, 0.406f}, std[3] = {0.229f, 0.224f, 0.225f};
    float o[18];
    normalize_u8(o, px, 6, 3, mean, std);
    double e = 0;
    for (int i = 0; i < 18; i++) e = fmax(e, fabs(o[i] - (px[i] / 255.0 - mean[i % 3]) / std[i % 3]));
    CHECK(e < 1e-6, "normalize_u8 err %g", e);
    free(a), free(b), free(y), free(d), free(dx);
}

static float f_of(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static void test_round_bf16(void) {
    // bf16 keeps the top 16 bits of a float: 1 + k*2^-7 are its neighbours of 1.
    const float ulp = 1.0f / 128;
    float v[] = {1.0f, 1.0f + ulp / 2, 1.0f + 3 * ulp / 2, 1.0f + ulp / 2 + ulp / 1024, -(1.0f + 3 * ulp / 2),
                 0.0f, -0.0f, INFINITY, -INFINITY, FLT_MAX, f_of(0x7f800001u), f_of(0xffc00000u), f_of(0x00000001u),
                 f_of(0x00018000u), 3.14159265f};
    // Ties to even (1 + ulp/2 -> 1, 1 + 3ulp/2 -> 1 + 2ulp), above the tie up, signs kept, infinities
    // kept, FLT_MAX overflows to inf (as __float2bfloat16_rn), NaNs stay NaN (a signalling NaN's low
    // payload would otherwise truncate to inf), denormals round like any value.
    uint32_t want[] = {0x3f800000u, 0x3f800000u, 0x3f820000u, 0x3f810000u, 0xbf820000u, 0, 0x80000000u,
                       0x7f800000u, 0xff800000u, 0x7f800000u, 0, 0, 0, 0x00020000u, 0x40490000u};
    round_bf16(v, CT_ARRAY_LEN(v));
    for (size_t i = 0; i < CT_ARRAY_LEN(v); i++) {
        uint32_t u;
        memcpy(&u, &v[i], 4);
        if (i == 10 || i == 11) CHECK(isnan(v[i]), "round_bf16: NaN %zu became %08x", i, u);
        else CHECK(u == want[i], "round_bf16 case %zu: %08x, want %08x", i, u, want[i]);
    }
    // Idempotent, and within half an ulp (relative 2^-8: 8 significant bits) of the input.
    const size_t n = 4097;
    float *x = rand_buf(n, 1), *r = ct_alloc(n * sizeof(float)), *r2 = ct_alloc(n * sizeof(float));
    memcpy(r, x, n * sizeof(float));
    round_bf16(r, n);
    memcpy(r2, r, n * sizeof(float));
    round_bf16(r2, n);
    double worst = 0;
    for (size_t i = 0; i < n; i++)
        if (x[i] != 0) worst = fmax(worst, fabs((double)r[i] - x[i]) / fabs((double)x[i]));
    CHECK(!memcmp(r, r2, n * sizeof(float)), "round_bf16 not idempotent");
    CHECK(worst <= 1.0 / 256 && worst > 1.0 / 400, "round_bf16: worst relative error %g, want just under 2^-8", worst);
    free(x), free(r), free(r2);
}

// The fused block tail against the unfused layers it replaces (bn, then add [+ relu]; backward:
// relu_backward, then batchnorm_backward and the residual gradient copied or added): bit for
// bit in fp32, since the same float operations run in the same order.
static void test_batchnorm_add(void) {
    for (int it = 0; it < 6; it++) {
        const int M = it == 0 ? 1 : rnd(2, 2000), C = it >= 4 ? 16 * it : rnd(1, 40), relu = it % 2 == 0,
                  acc = it % 3 == 0;
        const size_t n = (size_t)M * C;
        float *x = rand_buf(n, 2), *res = rand_buf(n, 2), *gamma = rand_buf(C, 1), *beta = rand_buf(C, 1);
        float *rm = rand_buf(C, 1), *rv = rand_buf(C, 1), *rm2 = ct_alloc(C * 4), *rv2 = ct_alloc(C * 4);
        for (int c = 0; c < C; c++) rv[c] = 1 + rv[c] * 0.5f;
        memcpy(rm2, rm, C * 4);
        memcpy(rv2, rv, C * 4);
        float *y = ct_alloc(n * 4), *z = ct_alloc(n * 4), *zf = ct_alloc(n * 4);
        float *mean = ct_alloc(C * 4), *inv = ct_alloc(C * 4), *mean2 = ct_alloc(C * 4), *inv2 = ct_alloc(C * 4);
        batchnorm_forward_train(y, mean, inv, rm, rv, x, gamma, beta, M, C, 0.1f, 1e-5f, 0);
        add_forward(z, y, res, n, relu);
        batchnorm_add_forward_train(zf, mean2, inv2, rm2, rv2, x, res, gamma, beta, M, C, 0.1f, 1e-5f, relu);
        CHECK(!memcmp(z, zf, n * 4) && !memcmp(mean, mean2, C * 4) && !memcmp(rv, rv2, C * 4),
              "bn+add fwd M=%d C=%d relu=%d: differs from bn then add", M, C, relu);
        batchnorm_forward_eval(y, x, gamma, beta, rm, rv, M, C, 1e-5f, 0);
        add_forward(z, y, res, n, relu);
        batchnorm_add_forward_eval(zf, x, res, gamma, beta, rm, rv, M, C, 1e-5f, relu);
        CHECK(!memcmp(z, zf, n * 4), "bn+add eval M=%d C=%d relu=%d: differs from bn then add", M, C, relu);

        // Backward with z as the mask; the residual gradient starts as r0 when accumulated.
        float *dz = rand_buf(n, 1), *r0 = rand_buf(n, 1), *g = ct_alloc(n * 4), *dx = ct_alloc(n * 4);
        float *dr = ct_alloc(n * 4), *dxf = ct_alloc(n * 4), *drf = ct_alloc(n * 4);
        float *dg = ct_alloc(C * 4), *db = ct_alloc(C * 4), *dgf = ct_alloc(C * 4), *dbf = ct_alloc(C * 4);
        if (relu) relu_backward(g, dz, z, n);
        else memcpy(g, dz, n * 4);
        batchnorm_backward(dx, dg, db, g, x, NULL, gamma, mean, inv, M, C);
        memcpy(dr, r0, n * 4);
        if (acc) add_inplace(dr, g, n);
        else memcpy(dr, g, n * 4);
        memcpy(drf, r0, n * 4);
        batchnorm_add_backward(dxf, drf, acc, dgf, dbf, dz, x, relu ? z : NULL, gamma, mean, inv, M, C);
        CHECK(!memcmp(dx, dxf, n * 4) && !memcmp(dr, drf, n * 4) && !memcmp(dg, dgf, C * 4) &&
                  !memcmp(db, dbf, C * 4),
              "bn+add bwd M=%d C=%d relu=%d acc=%d: differs from the unfused layers", M, C, relu, acc);
        float *bufs[] = {x, res, gamma, beta, rm, rv, rm2, rv2, y, z, zf, mean, inv, mean2, inv2, dz, r0, g, dx, dr, dxf, drf, dg, db, dgf, dbf};
        for (size_t i = 0; i < CT_ARRAY_LEN(bufs); i++) free(bufs[i]);
    }
}

// The AVX-512 row loops of batch norm (C % 16 == 0) against the C loops, bit for bit: forward with
// and without residual and ReLU, backward with the mask, the residual gradient written, added,
// and aliasing the output gradient in place (as the executor calls it).
static void test_batchnorm_rows_bits(void) {
    if (!sgemm_set_kernel("avx512")) {
        printf("bn row loops: no AVX-512 here, skipped\n");
        return;
    }
    for (int it = 0; it < 8; it++) {
        const int M = rnd(1, 1500), C = 16 * rnd(1, 4), relu = it % 2, acc = it / 2 % 2, alias = it / 4;
        const size_t n = (size_t)M * C;
        float *x = rand_buf(n, 2), *res = rand_buf(n, 2), *gamma = rand_buf(C, 1), *beta = rand_buf(C, 1);
        float *dz = rand_buf(n, 1), *r0 = rand_buf(n, 1), *out[2][6];
        for (int k = 0; k < 2; k++) {
            sgemm_set_kernel(k ? "generic" : "avx512");
            float *y = ct_alloc(n * 4), *mean = ct_alloc(C * 4), *inv = ct_alloc(C * 4), *dx = ct_alloc(n * 4);
            float *dr = ct_alloc(n * 4), *dgb = ct_alloc(C * 8);
            batchnorm_add_forward_train(y, mean, inv, NULL, NULL, x, it % 3 ? res : NULL, gamma, beta, M, C, 0.1f, 1e-5f, relu);
            memcpy(dr, alias ? dz : r0, n * 4);  // alias: dres is the output gradient's own buffer
            batchnorm_add_backward(dx, dr, acc, dgb, dgb + C, alias ? dr : dz, x, relu ? y : NULL, gamma, mean, inv, M, C);
            out[k][0] = y, out[k][1] = mean, out[k][2] = inv, out[k][3] = dx, out[k][4] = dr, out[k][5] = dgb;
        }
        const size_t sz[6] = {n, C, C, n, n, 2 * (size_t)C};
        int same = 1;
        for (int j = 0; j < 6; j++) same &= !memcmp(out[0][j], out[1][j], sz[j] * 4);
        CHECK(same, "bn row loops M=%d C=%d relu=%d acc=%d alias=%d: AVX-512 and C loops differ", M, C, relu, acc, alias);
        for (int k = 0; k < 2; k++)
            for (int j = 0; j < 6; j++) free(out[k][j]);
        free(x), free(res), free(gamma), free(beta), free(dz), free(r0);
    }
}

// winograd_weights' AVX-512 path against its scalar loop (the generic kernel forced), bit for bit,
// and winograd_weights_flipped against winograd_weights of an explicitly flipped, channel-swapped
// copy: the data gradient's filters must be exactly those of the flipped convolution.
static void test_winograd_weights_bits(void) {
    const int shapes[][2] = {{16, 16}, {32, 48}, {64, 16}, {5, 7}, {48, 80}};
    for (size_t i = 0; i < CT_ARRAY_LEN(shapes); i++) {
        const int K = shapes[i][0], C = shapes[i][1];
        const size_t nw = (size_t)K * 9 * C, nu = (size_t)16 * K * C;
        float *w = rand_buf(nw, 1), *wf = ct_alloc(nw * sizeof(float));
        float *u[2], *uf[2], *ref = ct_alloc(nu * sizeof(float));
        for (int k = 0; k < K; k++)
            for (int r = 0; r < 3; r++)
                for (int t = 0; t < 3; t++)
                    for (int c = 0; c < C; c++)
                        wf[(((size_t)c * 3 + r) * 3 + t) * K + k] = w[(((size_t)k * 3 + 2 - r) * 3 + 2 - t) * C + c];
        for (int v = 0; v < 2; v++) {
            if (!sgemm_set_kernel(v ? "generic" : "avx512")) sgemm_set_kernel("generic");
            u[v] = ct_alloc(nu * sizeof(float)), uf[v] = ct_alloc(nu * sizeof(float));
            winograd_weights(u[v], w, K, C);
            winograd_weights_flipped(uf[v], w, K, C);
        }
        winograd_weights(ref, wf, C, K);
        CHECK(!memcmp(u[0], u[1], nu * 4), "winograd_weights K%d C%d: AVX-512 and scalar differ", K, C);
        CHECK(!memcmp(uf[0], ref, nu * 4) && !memcmp(uf[1], ref, nu * 4),
              "winograd_weights_flipped K%d C%d: differs from the transform of the flipped filters", K, C);
        free(w), free(wf), free(ref);
        for (int v = 0; v < 2; v++) free(u[v]), free(uf[v]);
    }
}

int main(void) {
    test_rng = rng_make(1234, 0, 0);
    const char *kernels[] = {"avx512", "avx2", "generic"};
    const char *dflt = sgemm_kernel_name();
    for (size_t i = 0; i < CT_ARRAY_LEN(kernels); i++) {
        if (!sgemm_set_kernel(kernels[i])) {
            printf("kernel %s: not supported here, skipped\n", kernels[i]);
            continue;
        }
        printf("kernel %s\n", kernels[i]);
        test_gemm();
        test_gemm_blocks();
        test_conv();
        test_batchnorm();
        test_batchnorm_add();
    }
    test_batchnorm_rows_bits();
    test_winograd_weights_bits();
    sgemm_set_kernel(dflt);
    test_winograd_accuracy();
    test_winograd_wgrad();
    test_maxpool();
    test_blur();
    test_avgpool_linear();
    test_losses();
    test_elementwise();
    test_round_bf16();
    return test_summary("test_layers");
}
