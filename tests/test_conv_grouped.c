// Grouped convolution on the CPU (nn/conv_grouped.c through nn/conv.c's entry points):
// - forward, data and weight gradients against a float64 loop written from the definition, on
//   awkward shapes (groups 2-64, 1-32 channels per group, stride 2, odd sizes, Cg != Kg);
// - the same against the DENSE route with block-diagonal weights (zeros outside each group's
//   block): an independent oracle of which channels meet which, through nn/conv.c's own kernels;
// - finite-difference gradient checks of the loss sum(out * G);
// - the epilogue form (bias, residual, ReLU) that BN folding uses;
// - the same bits with 1, 2 and 3 threads;
// - the AVX-512 path (nn/conv_grouped_avx512.c) against the reference loop nests, bit for bit, for
//   every pass and the epilogue form, and each shape's route: the passes that must take the fast
//   path on an AVX-512 CPU do (a test that silently ran the reference twice would prove nothing).
#include <math.h>
#include <omp.h>
#include <string.h>

#include "nn/conv_grouped.h"
#include "nn/layers.h"
#include "tests/test.h"
#include "util/common.h"

typedef struct {
    int N, H, W, C, K, R, stride, pad, groups;
    const char *fast;  // the passes that take the AVX-512 path on an AVX-512 CPU: F forward, D data, W weight
} GShape;

static int g_avx512;  // the CPU has AVX-512F: the fast path must be taken where the shape allows it

static ConvShape mk(const GShape *g) {
    return conv_shape_g(g->N, g->H, g->W, g->C, g->K, g->R, g->R, g->stride, g->pad, g->groups);
}
static size_t n_in(const ConvShape *s) { return (size_t)s->N * s->H * s->W * s->C; }
static size_t n_out(const ConvShape *s) { return (size_t)s->N * s->P * s->Q * s->K; }
static size_t n_w(const ConvShape *s) { return (size_t)s->K * s->R * s->S * (s->C / conv_groups(s)); }

// float64 from the definition: out[n,p,q,k] = sum_{r,s,c<Cg} in[n, h, x, g(k)*Cg + c] w[k,r,s,c].
static void reference(const ConvShape *s, const float *in, const float *w, const float *dout, float *out,
                      float *din, float *dw) {
    const int G = conv_groups(s), Cg = s->C / G, Kg = s->K / G;
    double *ad = calloc(n_in(s), sizeof(double)), *aw = calloc(n_w(s), sizeof(double));
    for (int n = 0; n < s->N; n++)
        for (int p = 0; p < s->P; p++)
            for (int q = 0; q < s->Q; q++)
                for (int k = 0; k < s->K; k++) {
                    const size_t o = (((size_t)n * s->P + p) * s->Q + q) * s->K + k;
                    double acc = 0;
                    for (int r = 0; r < s->R; r++)
                        for (int t = 0; t < s->S; t++) {
                            const int h = p * s->stride - s->pad + r, x = q * s->stride - s->pad + t;
                            if (h < 0 || h >= s->H || x < 0 || x >= s->W) continue;
                            for (int c = 0; c < Cg; c++) {
                                const size_t ii = (((size_t)n * s->H + h) * s->W + x) * s->C + (k / Kg) * Cg + c;
                                const size_t wi = (((size_t)k * s->R + r) * s->S + t) * Cg + c;
                                acc += (double)in[ii] * w[wi];
                                ad[ii] += (double)w[wi] * dout[o];
                                aw[wi] += (double)in[ii] * dout[o];
                            }
                        }
                    out[o] = (float)acc;
                }
    for (size_t i = 0; i < n_in(s); i++) din[i] = (float)ad[i];
    for (size_t i = 0; i < n_w(s); i++) dw[i] = (float)aw[i];
    free(ad), free(aw);
}

// The dense [K, R, S, C] weights equal to grouped w: zero outside each group's channel block.
static float *block_diagonal(const ConvShape *s, const float *w) {
    const int G = conv_groups(s), Cg = s->C / G, Kg = s->K / G, RS = s->R * s->S;
    float *d = ct_zalloc((size_t)s->K * RS * s->C * sizeof(float));
    for (int k = 0; k < s->K; k++)
        for (int t = 0; t < RS; t++)
            for (int c = 0; c < Cg; c++)
                d[((size_t)k * RS + t) * s->C + (k / Kg) * Cg + c] = w[((size_t)k * RS + t) * Cg + c];
    return d;
}

static void check_shape(const GShape *gs) {
    const ConvShape s = mk(gs);
    const size_t ni = n_in(&s), no = n_out(&s), nw = n_w(&s);
    float *in = rand_buf(ni, 1), *w = rand_buf(nw, 1), *dout = rand_buf(no, 1);
    float *out = ct_alloc(no * 4), *din = ct_alloc(ni * 4), *dw = ct_alloc(nw * 4);
    float *ro = ct_alloc(no * 4), *rd = ct_alloc(ni * 4), *rw = ct_alloc(nw * 4);
    reference(&s, in, w, dout, ro, rd, rw);
    for (size_t i = 0; i < no; i++) out[i] = NAN;  // poisoned: every entry point overwrites
    for (size_t i = 0; i < ni; i++) din[i] = 1e30f;
    for (size_t i = 0; i < nw; i++) dw[i] = NAN;
    conv2d_forward(&s, out, in, w);
    conv2d_backward_data(&s, din, dout, w);
    conv2d_backward_weight(&s, dw, dout, in);
    const int Cg = s.C / s.groups, Kg = s.K / s.groups;
    const double e1 = rel_err_norm(out, ro, no), e2 = rel_err_norm(din, rd, ni), e3 = rel_err_norm(dw, rw, nw);
    CHECK(e1 < 2e-6 * sqrt(9.0 * Cg) + 1e-6 && e2 < 2e-6 * sqrt(9.0 * Kg) + 1e-6 &&
              e3 < 2e-6 * sqrt((double)s.N * s.P * s.Q) + 1e-6,
          "grouped conv N%d H%d W%d C%d K%d R%d st%d pad%d g%d: rel err fwd %g data %g weight %g vs float64", s.N, s.H,
          s.W, s.C, s.K, s.R, s.stride, s.pad, s.groups, e1, e2, e3);

    // The dense route with block-diagonal weights: the same forward and data gradient, and a
    // weight gradient whose in-block entries are the grouped one's.
    ConvShape d = s;
    d.groups = 1;
    float *wd = block_diagonal(&s, w), *od = ct_alloc(no * 4), *dd = ct_alloc(ni * 4);
    float *dwd = ct_alloc((size_t)s.K * s.R * s.S * s.C * 4);
    conv2d_forward(&d, od, in, wd);
    conv2d_backward_data(&d, dd, dout, wd);
    conv2d_backward_weight(&d, dwd, dout, in);
    float *dwd_g = ct_alloc(nw * 4);  // the dense gradient's in-block entries, in grouped layout
    const int RS = s.R * s.S;
    for (int k = 0; k < s.K; k++)
        for (int t = 0; t < RS; t++)
            for (int c = 0; c < Cg; c++)
                dwd_g[((size_t)k * RS + t) * Cg + c] = dwd[((size_t)k * RS + t) * s.C + (k / Kg) * Cg + c];
    const double d1 = rel_err_norm(out, od, no), d2 = rel_err_norm(din, dd, ni), d3 = rel_err_norm(dw, dwd_g, nw);
    CHECK(d1 < 1e-5 && d2 < 1e-5 && d3 < 1e-5, "grouped conv g%d C%d K%d st%d: vs dense block-diagonal %g %g %g",
          s.groups, s.C, s.K, s.stride, d1, d2, d3);
    free(wd), free(od), free(dd), free(dwd), free(dwd_g);

    // The inference form: + bias, + residual, ReLU, in that order.
    float *bias = rand_buf(s.K, 1), *res = rand_buf(no, 1), *oe = ct_alloc(no * 4);
    conv2d_grouped_forward(&s, oe, in, w, bias, res, 1);
    int ok = 1;
    for (size_t i = 0; i < no && ok; i++) {
        float v = out[i] + bias[i % s.K];
        v += res[i];
        ok = oe[i] == (v > 0 ? v : 0.0f);
    }
    CHECK(ok, "grouped conv g%d: the epilogue form is not forward + bias + res, ReLU", s.groups);
    free(bias), free(res), free(oe);

    // 1, 2 and 3 threads: the same bits.
    float *o1 = ct_alloc(no * 4), *d1b = ct_alloc(ni * 4), *w1 = ct_alloc(nw * 4);
    for (int th = 1; th <= 3; th += 2) {
        omp_set_num_threads(th);
        conv2d_forward(&s, o1, in, w);
        conv2d_backward_data(&s, d1b, dout, w);
        conv2d_backward_weight(&s, w1, dout, in);
        CHECK(!memcmp(o1, out, no * 4) && !memcmp(d1b, din, ni * 4) && !memcmp(w1, dw, nw * 4),
              "grouped conv g%d C%d K%d: %d and 2 threads differ", s.groups, s.C, s.K, th);
    }
    omp_set_num_threads(2);

    // The route each pass takes, and the reference loop nests' bits, epilogue form included.
    static const char *const pass_name[3] = {"forward", "data gradient", "weight gradient"};
    for (int pass = 0; pass < 3; pass++) {
        const int want = g_avx512 && strchr(gs->fast, "FDW"[pass]) != NULL;
        const char *route = conv_grouped_route(&s, pass);
        CHECK(!strcmp(route, want ? "avx512" : "reference"),
              "grouped conv N%d H%d W%d C%d K%d R%d st%d g%d: %s takes the %s route, expected %s", s.N, s.H, s.W, s.C,
              s.K, s.R, s.stride, s.groups, pass_name[pass], route, want ? "avx512" : "reference");
    }
    float *bias2 = rand_buf(s.K, 1), *res2 = rand_buf(no, 1), *oe2 = ct_alloc(no * 4), *oer = ct_alloc(no * 4);
    res2[no / 2] = NAN;  // the reference's ReLU (v > 0 ? v : 0) makes it 0; the fast path must too
    conv2d_grouped_forward_ref(&s, o1, in, w, NULL, NULL, 0);
    conv2d_grouped_backward_data_ref(&s, d1b, dout, w);
    conv2d_grouped_backward_weight_ref(&s, w1, dout, in);
    conv2d_grouped_forward(&s, oe2, in, w, bias2, res2, 1);
    conv2d_grouped_forward_ref(&s, oer, in, w, bias2, res2, 1);
    const int same_f = !memcmp(o1, out, no * 4), same_d = !memcmp(d1b, din, ni * 4), same_w = !memcmp(w1, dw, nw * 4);
    CHECK(same_f && same_d && same_w && !memcmp(oe2, oer, no * 4),
          "grouped conv N%d H%d W%d C%d K%d R%d st%d pad%d g%d: the %s route differs from the reference loops "
          "(forward %s, data %s, weight %s, epilogue form %s; rel err %g %g %g)",
          s.N, s.H, s.W, s.C, s.K, s.R, s.stride, s.pad, s.groups, g_avx512 ? "avx512" : "reference",
          same_f ? "same" : "DIFFERS", same_d ? "same" : "DIFFERS", same_w ? "same" : "DIFFERS",
          memcmp(oe2, oer, no * 4) ? "DIFFERS" : "same", rel_err_norm(out, o1, no), rel_err_norm(din, d1b, ni),
          rel_err_norm(dw, w1, nw));
    free(bias2), free(res2), free(oe2), free(oer);
    free(o1), free(d1b), free(w1);
    free(in), free(w), free(dout), free(out), free(din), free(dw), free(ro), free(rd), free(rw);
}

// Finite differences of L = sum(out * G) at sampled inputs and weights, L summed in double.
static double loss(const ConvShape *s, const float *in, const float *w, const float *G, float *out) {
    conv2d_forward(s, out, in, w);
    double L = 0;
    for (size_t i = 0; i < n_out(s); i++) L += (double)out[i] * G[i];
    return L;
}
static double fd_err(const ConvShape *s, float *v, size_t n, const float *grad, float *in, float *w, const float *G,
                     float *out) {
    double num = 0, den = 0;
    for (int k = 0; k < 24; k++) {
        const size_t i = rng_below(&test_rng, (uint32_t)n);
        const float save = v[i], h = 1e-2f;
        v[i] = save + h;
        const double lp = loss(s, in, w, G, out);
        v[i] = save - h;
        const double lm = loss(s, in, w, G, out);
        v[i] = save;
        const double fd = (lp - lm) / (2.0 * ((double)(save + h) - (double)save));
        num += (fd - grad[i]) * (fd - grad[i]);
        den += (double)grad[i] * grad[i];
    }
    return sqrt(num / (den + 1e-20));
}
static void gradcheck(const GShape *gs) {
    const ConvShape s = mk(gs);
    float *in = rand_buf(n_in(&s), 1), *w = rand_buf(n_w(&s), 1), *G = rand_buf(n_out(&s), 1);
    float *out = ct_alloc(n_out(&s) * 4), *din = ct_alloc(n_in(&s) * 4), *dw = ct_alloc(n_w(&s) * 4);
    conv2d_backward_data(&s, din, G, w);
    conv2d_backward_weight(&s, dw, G, in);
    const double ex = fd_err(&s, in, n_in(&s), din, in, w, G, out), ew = fd_err(&s, w, n_w(&s), dw, in, w, G, out);
    CHECK(ex < 2e-3 && ew < 2e-3, "grouped conv gradcheck C%d K%d g%d st%d: input %g weight %g", s.C, s.K, s.groups,
          s.stride, ex, ew);
    free(in), free(w), free(G), free(out), free(din), free(dw);
}

int main(void) {
    test_rng = rng_make(25, 0, 0);
    omp_set_num_threads(2);
    __builtin_cpu_init();
    g_avx512 = __builtin_cpu_supports("avx512f");
    if (!g_avx512) printf("conv_grouped: no AVX-512F on this CPU: every pass must take the reference loops\n");
    // N, H, W, C, K, R, stride, pad, groups
    const GShape shapes[] = {
        {2, 7, 9, 8, 8, 3, 1, 1, 2, ""},           // 4 channels per group, odd sizes (K 8: no 16-lane block)
        {2, 9, 7, 64, 64, 3, 2, 1, 32, "FDW"},     // 2 channels per group, stride 2, odd map
        {1, 6, 5, 64, 64, 3, 1, 1, 64, "FDW"},     // depthwise: 1 channel per group
        {2, 5, 5, 128, 128, 3, 1, 1, 4, "FDW"},    // 32 channels per group (broadcast lanes)
        {1, 8, 8, 48, 96, 3, 2, 1, 3, "FDW"},      // Cg 16 != Kg 32, 3 blocks of 16 (a tail of 3)
        {3, 4, 5, 24, 12, 1, 1, 0, 6, ""},         // 1x1 grouped, Cg 4 -> Kg 2
        {1, 5, 7, 20, 40, 5, 2, 2, 5, ""},         // 5x5, stride 2
        {2, 3, 3, 256, 256, 3, 2, 1, 64, "FDW"},   // resnext101_64x4d's layer1 width on a tiny map
        {1, 1, 1, 16, 16, 3, 1, 1, 8, "FDW"},      // a 1x1 map: only the centre tap
        {1, 10, 3, 12, 18, 3, 1, 0, 6, ""},        // no padding, 2 -> 3 channels per group
        {2, 9, 11, 128, 128, 3, 1, 1, 16, "FDW"},  // resnext50's layer2: 8 per group
        {2, 9, 9, 128, 128, 3, 2, 1, 32, "FDW"},   // resnext50's layer1 at stride 2 on an odd map
        {1, 7, 6, 48, 48, 3, 2, 1, 12, "FDW"},     // 4 per group in 3 blocks (tails of one block)
        {2, 5, 9, 20, 32, 5, 1, 2, 2, "FW"},       // Cg 10 -> Kg 16: broadcast, 5 taps (3 + 2), 10 channels (4 + 4 + 2)
        {1, 7, 7, 12, 16, 3, 2, 1, 4, "FW"},       // Cg 3 -> Kg 4: a 12-channel window under a mask
        {2, 6, 7, 16, 8, 3, 1, 1, 2, "D"},         // Cg 8 -> Kg 4: only the data gradient's lanes fit
        {1, 4, 4, 128, 128, 3, 1, 1, 2, "FDW"},    // 64 per group (resnext101_64x4d's layer4 width)
        {2, 5, 5, 64, 64, 1, 1, 0, 16, "FDW"},     // 1x1 grouped, 4 per group
        {1, 3, 5, 80, 80, 3, 1, 1, 20, "FDW"},     // 5 blocks (4 + a tail of 1)
    };
    for (size_t i = 0; i < CT_ARRAY_LEN(shapes); i++) check_shape(&shapes[i]);
    const GShape gc[] = {
        {2, 7, 9, 8, 8, 3, 1, 1, 2, ""},
        {1, 9, 7, 32, 32, 3, 2, 1, 8, "FDW"},
        {1, 5, 6, 64, 64, 3, 1, 1, 64, "FDW"},
        {1, 5, 5, 64, 32, 3, 2, 1, 2, "FDW"},
        {1, 7, 7, 64, 64, 3, 1, 1, 8, "FDW"},
    };
    for (size_t i = 0; i < CT_ARRAY_LEN(gc); i++) gradcheck(&gc[i]);
    return test_summary("conv_grouped");
}
