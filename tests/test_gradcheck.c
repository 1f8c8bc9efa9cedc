// Finite-difference gradient checks of every CPU layer with a backward, and bit-identical results
// with 1 and 2 OpenMP threads.
//
// For a layer y = f(x, w) the scalar L = sum(y * G) with a fixed random G has dL/dy = G, so the
// backward called with dy = G must give dL/dx and dL/dw. Each is compared with the central
// difference (L(v + h) - L(v - h)) / 2h at randomly sampled elements, L summed in double.
// Shapes are drawn at random: odd sizes, stride 2, 1x1 and 7x7 kernels, channel counts that are
// not multiples of 8, batch 1.
#include <math.h>
#include <omp.h>
#include <string.h>

#include "nn/blur.h"
#include "nn/drop_path.h"
#include "nn/layers.h"
#include "tests/test.h"
#include "util/common.h"
#include "util/rng.h"

// The layer under test: forward(ctx) writes its output into out; the loss is sum(out * G).
typedef void (*ForwardFn)(void *ctx, float *out);
typedef struct {
    ForwardFn fwd;
    void *ctx;
    float *out;      // [nout] scratch for the forward
    const float *G;  // [nout]
    size_t nout;
} Probe;

static double probe_loss(const Probe *pr) {
    pr->fwd(pr->ctx, pr->out);
    double L = 0;
    for (size_t i = 0; i < pr->nout; i++) L += (double)pr->out[i] * pr->G[i];
    return L;
}

// Compare analytic grad[n] of the tensor v[n] with central differences at `samples` elements.
// Returns the norm-wise relative error over the sampled elements.
static double check_tensor(const Probe *pr, float *v, const float *grad, size_t n, float h, int samples) {
    double num2 = 0, den2 = 0;
    for (int k = 0; k < samples; k++) {
        size_t i = (size_t)rng_below(&test_rng, (uint32_t)n);
        const float save = v[i];
        v[i] = save + h;
        const double lp = probe_loss(pr);
        v[i] = save - h;
        const double lm = probe_loss(pr);
        v[i] = save;
        const double fd = (lp - lm) / (2.0 * ((double)(save + h) - (double)save));
        num2 += (fd - grad[i]) * (fd - grad[i]);
        den2 += (double)grad[i] * grad[i];
    }
    return sqrt(num2 / (den2 + 1e-20));
}

// ---------------------------------------------------------------------------------------------
typedef struct {
    ConvShape s;
    float *in, *w;
} ConvCtx;
static void conv_fwd(void *c, float *out) {
    ConvCtx *x = c;
    conv2d_forward(&x->s, out, x->in, x->w);
}

static void gradcheck_conv(ConvShape s) {
    const size_t nin = (size_t)s.N * s.H * s.W * s.C, nout = (size_t)s.N * s.P * s.Q * s.K;
    const size_t nw = (size_t)s.K * s.R * s.S * (s.C / conv_groups(&s));
    ConvCtx c = {s, rand_buf(nin, 1), rand_buf(nw, 1)};
    float *G = rand_buf(nout, 1), *din = ct_alloc(nin * 4), *dw = ct_alloc(nw * 4), *out = ct_alloc(nout * 4);
    conv2d_backward_data(&s, din, G, c.w);
    conv2d_backward_weight(&s, dw, G, c.in);
    Probe pr = {conv_fwd, &c, out, G, nout};
    const double ex = check_tensor(&pr, c.in, din, nin, 1e-2f, 30);
    const double ew = check_tensor(&pr, c.w, dw, nw, 1e-2f, 30);
    CHECK(ex < 1e-3 && ew < 1e-3, "conv N%d H%d W%d C%d K%d R%d st%d pad%d g%d: grad err in %g w %g", s.N, s.H, s.W,
          s.C, s.K, s.R, s.stride, s.pad, conv_groups(&s), ex, ew);
    free(c.in), free(c.w), free(G), free(din), free(dw), free(out);
}

// ---------------------------------------------------------------------------------------------
typedef struct {
    int M, C, relu;
    float *x, *gamma, *beta;
} BnCtx;
static void bn_fwd(void *c, float *out) {
    BnCtx *b = c;
    float *mean = ct_alloc(b->C * 4), *inv = ct_alloc(b->C * 4);
    batchnorm_forward_train(out, mean, inv, NULL, NULL, b->x, b->gamma, b->beta, b->M, b->C, 0.1f, 1e-5f, b->relu);
    free(mean), free(inv);
}

static void gradcheck_bn(int M, int C, int relu) {
    BnCtx b = {M, C, relu, rand_buf((size_t)M * C, 2), rand_buf(C, 1), rand_buf(C, 1)};
    const size_t n = (size_t)M * C;
    float *G = rand_buf(n, 1), *y = ct_alloc(n * 4), *dx = ct_alloc(n * 4), *dg = ct_alloc(C * 4),
          *db = ct_alloc(C * 4), *mean = ct_alloc(C * 4), *inv = ct_alloc(C * 4), *rm = rand_buf(C, 1),
          *rv = rand_buf(C, 1), *pre = ct_alloc(n * 4);
    batchnorm_forward_train(y, mean, inv, rm, rv, b.x, b.gamma, b.beta, M, C, 0.1f, 1e-5f, relu);
    batchnorm_forward_train(pre, mean, inv, rm, rv, b.x, b.gamma, b.beta, M, C, 0.1f, 1e-5f, 0);
    // With the ReLU fused, an output whose pre-activation is near zero could cross the kink under
    // a perturbation (its derivative is undefined there): such outputs get zero weight in the loss
    // (G = 0, for the backward too), so every output that counts stays on one side of the kink.
    const float h = 1e-3f;
    if (relu)
        for (size_t i = 0; i < n; i++)
            if (fabsf(pre[i]) < 0.05f) G[i] = 0.0f;
    batchnorm_backward(dx, dg, db, G, b.x, relu ? y : NULL, b.gamma, mean, inv, M, C);
    Probe pr = {bn_fwd, &b, ct_alloc(n * 4), G, n};
    const double ex = check_tensor(&pr, b.x, dx, n, h, 30);
    const double eg = check_tensor(&pr, b.gamma, dg, C, h, 10);
    const double eb = check_tensor(&pr, b.beta, db, C, h, 10);
    CHECK(ex < 2e-3 && eg < 2e-3 && eb < 2e-3, "bn M%d C%d relu%d: grad err x %g gamma %g beta %g", M, C, relu, ex, eg,
          eb);
    free(b.x), free(b.gamma), free(b.beta), free(G), free(y), free(dx), free(dg), free(db), free(mean), free(inv);
    free(rm), free(rv), free(pre), free(pr.out);
}

// ---------------------------------------------------------------------------------------------
typedef struct {
    int N, H, W, C, k, stride, pad, P, Q;
    float *in;
} PoolCtx;
static void maxpool_fwd(void *c, float *out) {
    PoolCtx *p = c;
    maxpool_forward(out, p->in, p->N, p->H, p->W, p->C, p->k, p->stride, p->pad, p->P, p->Q);
}
static void avgpool_fwd(void *c, float *out) {
    PoolCtx *p = c;
    avgpool_forward(out, p->in, p->N, p->H * p->W, p->C);
}

static void gradcheck_pool(int N, int H, int W, int C) {
    PoolCtx p = {N, H, W, C, 3, 2, 1, (H + 2 - 3) / 2 + 1, (W + 2 - 3) / 2 + 1, NULL};
    const size_t nin = (size_t)N * H * W * C, nout = (size_t)N * p.P * p.Q * C;
    // Distinct values at least 0.01 apart (a shuffled grid), so a perturbation of 1e-3 never
    // changes which element is a window's maximum.
    p.in = ct_alloc(nin * 4);
    for (size_t i = 0; i < nin; i++) p.in[i] = 0.01f * (float)i - 0.005f * (float)nin;
    for (size_t i = nin - 1; i > 0; i--) {
        size_t j = rng_below(&test_rng, (uint32_t)(i + 1));
        float t = p.in[i];
        p.in[i] = p.in[j], p.in[j] = t;
    }
    float *G = rand_buf(nout, 1), *din = ct_alloc(nin * 4);
    maxpool_backward(din, G, p.in, N, H, W, C, 3, 2, 1, p.P, p.Q);
    Probe pr = {maxpool_fwd, &p, ct_alloc(nout * 4), G, nout};
    const double e = check_tensor(&pr, p.in, din, nin, 1e-3f, 40);
    CHECK(e < 1e-3, "maxpool N%d H%d W%d C%d: grad err %g", N, H, W, C, e);
    free(G), free(din), free(pr.out);

    float *Ga = rand_buf((size_t)N * C, 1), *dina = ct_alloc(nin * 4);
    avgpool_backward(dina, Ga, N, H * W, C);
    Probe pa = {avgpool_fwd, &p, ct_alloc((size_t)N * C * 4), Ga, (size_t)N * C};
    const double ea = check_tensor(&pa, p.in, dina, nin, 1e-2f, 30);
    CHECK(ea < 1e-3, "avgpool N%d HW%d C%d: grad err %g", N, H * W, C, ea);
    free(Ga), free(dina), free(pa.out), free(p.in);
}

// BlurPool's blur (no parameters): dL/dx against finite differences, every element checked on a
// small input (borders and corners included, where the zero padding makes the adjoint differ from
// a plain re-blur if it were wrong); and 1 vs 2 threads give the same bits.
static int same_bits(const float *a, const float *b, size_t n);
static void blur_fwd(void *c, float *out) {
    PoolCtx *p = c;
    blur3x3_forward(out, p->in, p->N, p->H, p->W, p->C);
}
static void gradcheck_blur(int N, int H, int W, int C) {
    PoolCtx p = {N, H, W, C, 3, 1, 1, H, W, NULL};
    const size_t n = (size_t)N * H * W * C;
    p.in = rand_buf(n, 1);
    float *G = rand_buf(n, 1), *din = ct_alloc(n * 4);
    blur3x3_backward(din, G, N, H, W, C);
    Probe pr = {blur_fwd, &p, ct_alloc(n * 4), G, n};
    const double e = check_tensor(&pr, p.in, din, n, 1e-2f, (int)CT_MIN(n, 200));
    float *o1 = ct_alloc(n * 4), *o2 = ct_alloc(n * 4);
    omp_set_num_threads(1);
    blur3x3_forward(o1, p.in, N, H, W, C);
    omp_set_num_threads(2);
    blur3x3_forward(o2, p.in, N, H, W, C);
    CHECK(e < 1e-3 && same_bits(o1, o2, n), "blur N%d H%d W%d C%d: grad err %g, threads %s", N, H, W, C, e,
          same_bits(o1, o2, n) ? "agree" : "DIFFER");
    free(G), free(din), free(pr.out), free(p.in), free(o1), free(o2);
}

// ---------------------------------------------------------------------------------------------
typedef struct {
    int N, I, O;
    float *in, *w, *b;
} LinCtx;
static void linear_fwd(void *c, float *out) {
    LinCtx *l = c;
    linear_forward(out, l->in, l->w, l->b, l->N, l->I, l->O);
}

static void gradcheck_linear(int N, int I, int O) {
    LinCtx l = {N, I, O, rand_buf((size_t)N * I, 1), rand_buf((size_t)O * I, 1), rand_buf(O, 1)};
    float *G = rand_buf((size_t)N * O, 1), *din = ct_alloc((size_t)N * I * 4), *dw = ct_alloc((size_t)O * I * 4),
          *db = ct_alloc(O * 4);
    linear_backward(din, dw, db, G, l.in, l.w, N, I, O);
    Probe pr = {linear_fwd, &l, ct_alloc((size_t)N * O * 4), G, (size_t)N * O};
    const double ex = check_tensor(&pr, l.in, din, (size_t)N * I, 1e-2f, 20);
    const double ew = check_tensor(&pr, l.w, dw, (size_t)O * I, 1e-2f, 20);
    const double eb = check_tensor(&pr, l.b, db, O, 1e-2f, 10);
    CHECK(ex < 1e-3 && ew < 1e-3 && eb < 1e-3, "linear N%d I%d O%d: grad err in %g w %g b %g", N, I, O, ex, ew, eb);
    free(l.in), free(l.w), free(l.b), free(G), free(din), free(dw), free(db), free(pr.out);
}

// ---------------------------------------------------------------------------------------------
// Losses are scalars already: the probe's "output" is the loss itself and G = 1.
typedef struct {
    int N, K, kd;
    float eps_or_T;
    float *z, *t;
    int32_t *labels, *labels_b;  // labels_b: the Mixup/CutMix partners (soft target), else NULL
    float lam;
} LossCtx;
static void loss_fwd(void *c, float *out) {
    LossCtx *l = c;
    out[0] = l->kd ? kd_loss(NULL, l->z, l->t, l->N, l->K, l->eps_or_T, 1.0f)
           : l->labels_b ? softmax_xent_mix(NULL, l->z, l->labels, l->labels_b, l->lam, l->N, l->K, l->eps_or_T, 1.0f, NULL)
                         : softmax_xent(NULL, l->z, l->labels, l->N, l->K, l->eps_or_T, 1.0f, NULL);
}

static void gradcheck_loss(int kd, int N, int K, float param) {
    LossCtx l = {N, K, kd, param, rand_buf((size_t)N * K, 3), rand_buf((size_t)N * K, 3), ct_alloc(N * 4), NULL, 1.0f};
    for (int n = 0; n < N; n++) l.labels[n] = rnd(0, K - 1);
    float *d = ct_zalloc((size_t)N * K * 4), one = 1.0f, out;
    if (kd) kd_loss(d, l.z, l.t, N, K, param, 1.0f);
    else softmax_xent(d, l.z, l.labels, N, K, param, 1.0f, NULL);
    Probe pr = {loss_fwd, &l, &out, &one, 1};
    const double e = check_tensor(&pr, l.z, d, (size_t)N * K, 1e-2f, 30);
    CHECK(e < 2e-3, "%s N%d K%d param %g: grad err %g", kd ? "kd_loss" : "softmax_xent", N, K, param, e);
    free(l.z), free(l.t), free(l.labels), free(d);
}

// The soft-target cross-entropy of a mixed batch (partner = the batch reversed, as the loader pairs).
static void gradcheck_loss_mix(int N, int K, float eps, float lam) {
    LossCtx l = {N, K, 0, eps, rand_buf((size_t)N * K, 3), NULL, ct_alloc(N * 4), ct_alloc(N * 4), lam};
    for (int n = 0; n < N; n++) l.labels[n] = rnd(0, K - 1);
    for (int n = 0; n < N; n++) l.labels_b[n] = l.labels[N - 1 - n];
    float *d = ct_zalloc((size_t)N * K * 4), one = 1.0f, out;
    softmax_xent_mix(d, l.z, l.labels, l.labels_b, lam, N, K, eps, 1.0f, NULL);
    Probe pr = {loss_fwd, &l, &out, &one, 1};
    const double e = check_tensor(&pr, l.z, d, (size_t)N * K, 1e-2f, 30);
    CHECK(e < 2e-3, "softmax_xent_mix N%d K%d eps %g lam %g: grad err %g", N, K, eps, lam, e);
    free(l.z), free(l.labels), free(l.labels_b), free(d);
}

// ---------------------------------------------------------------------------------------------
// Stochastic depth through a block's tail, as the CPU executor runs it when the block drops rows:
// out = relu(res + s[n] * bn(x)) over N samples of HW rows, s from drop_path_scales at p 0.5 (some
// samples dropped, some kept at 1 / (1 - p)). A dropped sample still has an x gradient: its rows
// are in the batch statistics the kept rows are normalised with. Central differences of
// sum(out * G) against the layers' backward (bn's with dy = s * masked G, the residual's = masked G)
// for x, gamma, beta and res; outputs within 0.05 of the ReLU's kink get no weight.
typedef struct {
    int N, HW, C;
    float *x, *gamma, *beta, *res, *s, *yb, *mean, *inv, *rm, *rv;
} DropCtx;
static void drop_fwd(void *c, float *out) {
    DropCtx *d = c;
    const int M = d->N * d->HW;
    batchnorm_forward_train(d->yb, d->mean, d->inv, d->rm, d->rv, d->x, d->gamma, d->beta, M, d->C, 0.1f, 1e-5f, 0);
    drop_path_apply(d->yb, d->yb, d->s, d->N, (size_t)d->HW * d->C);
    add_forward(out, d->yb, d->res, (size_t)M * d->C, 1);
}

static void gradcheck_drop_path(void) {
    const int N = 6, HW = 5, C = 4, M = N * HW;
    const size_t n = (size_t)M * C;
    DropCtx d = {N, HW, C, rand_buf(n, 2), rand_buf(C, 1), rand_buf(C, 1), rand_buf(n, 1), ct_alloc(N * 4),
                 ct_alloc(n * 4), ct_alloc(C * 4), ct_alloc(C * 4), ct_zalloc(C * 4), ct_zalloc(C * 4)};
    const double p = 0.5;
    const int dropped = drop_path_scales(d.s, N, p, drop_path_batch_key(5, 2, 1), 3);
    for (int i = 0; i < N; i++)
        CHECK(d.s[i] == 0.f || d.s[i] == 2.0f, "drop path: row %d scale %g, want 0 or 1 / (1 - 0.5)", i, d.s[i]);
    CHECK(dropped > 0 && dropped < N, "drop path: %d of %d samples dropped (the check needs both kinds)", dropped, N);
    float *G = rand_buf(n, 1), *out = ct_alloc(n * 4), *g = ct_alloc(n * 4), *dx = ct_alloc(n * 4);
    float *dg = ct_alloc(C * 4), *db = ct_alloc(C * 4);
    drop_fwd(&d, out);
    for (size_t i = 0; i < n; i++) {  // pre-activation = out where positive; find it again for the kink
        float pre = d.yb[i] + d.res[i];
        if (fabsf(pre) < 0.05f) G[i] = 0.0f;
        g[i] = pre > 0 ? G[i] : 0.0f;  // the ADD's ReLU: also the residual's gradient
    }
    float *dz = ct_alloc(n * 4);
    drop_path_apply(dz, g, d.s, N, (size_t)HW * C);  // the drop_path step's backward
    drop_fwd(&d, out);  // the statistics of this forward for the backward
    batchnorm_backward(dx, dg, db, dz, d.x, NULL, d.gamma, d.mean, d.inv, M, C);
    Probe pr = {drop_fwd, &d, ct_alloc(n * 4), G, n};
    const float h = 1e-3f;
    const double ex = check_tensor(&pr, d.x, dx, n, h, 40), eg = check_tensor(&pr, d.gamma, dg, C, h, 8);
    const double eb = check_tensor(&pr, d.beta, db, C, h, 8), er = check_tensor(&pr, d.res, g, n, h, 40);
    // A dropped sample's x gradient is not zero (the statistics), a dropped sample's gamma share is.
    double dropped_dx = 0;
    for (int i = 0; i < N; i++)
        if (d.s[i] == 0.f)
            for (size_t j = 0; j < (size_t)HW * C; j++) dropped_dx += fabs(dx[(size_t)i * HW * C + j]);
    printf("drop path tail: %d of %d samples dropped; grad err x %.2g gamma %.2g beta %.2g res %.2g\n", dropped, N, ex,
           eg, eb, er);
    CHECK(ex < 2e-3 && eg < 2e-3 && eb < 2e-3 && er < 2e-3, "drop path tail: grad err x %g gamma %g beta %g res %g", ex,
          eg, eb, er);
    CHECK(dropped_dx > 0, "drop path tail: the dropped samples' x gradient is 0 (the batch statistics carry one)");
    free(d.x), free(d.gamma), free(d.beta), free(d.res), free(d.s), free(d.yb), free(d.mean), free(d.inv), free(d.rm);
    free(d.rv), free(G), free(out), free(g), free(dx), free(dg), free(db), free(dz), free(pr.out);

    // The draws: each of seed, epoch, batch position and block changes the rows (a key without the
    // epoch would drop the same rows every epoch), and p is the drop frequency (20000 rows at 0.3:
    // 3 standard deviations are 0.0097).
    enum { R = 20000 };
    float *a = ct_alloc(R * sizeof(float)), *b = ct_alloc(R * sizeof(float));
    const uint64_t k0 = drop_path_batch_key(5, 2, 1);
    const uint64_t other[] = {drop_path_batch_key(6, 2, 1), drop_path_batch_key(5, 3, 1), drop_path_batch_key(5, 2, 2)};
    const char *what[] = {"seed", "epoch", "batch position"};
    int n_dropped = drop_path_scales(a, R, 0.3, k0, 3);
    CHECK(fabs(n_dropped / (double)R - 0.3) < 0.0097, "drop path: %d of %d rows dropped at p 0.3", n_dropped, R);
    for (int i = 0; i < 4; i++) {
        drop_path_scales(b, R, 0.3, i < 3 ? other[i] : k0, i < 3 ? 3 : 4);
        int same = 0;
        for (int n = 0; n < R; n++) same += a[n] == b[n];
        CHECK(same < R * 0.7, "drop path: another %s draws the same rows (%d of %d agree)", i < 3 ? what[i] : "block",
              same, R);
    }
    free(a), free(b);
}

// Determinism: every layer run with 1 and with 2 threads gives the same bits.
static int same_bits(const float *a, const float *b, size_t n) { return !memcmp(a, b, n * sizeof(float)); }

static void determinism(void) {
    // Shapes large enough to split into several GEMM tasks, im2col tiles and BN chunks.
    ConvShape shapes[] = {conv_shape(4, 33, 31, 20, 24, 3, 3, 1, 1), conv_shape(3, 32, 32, 64, 40, 3, 3, 2, 1),
                          conv_shape(2, 17, 17, 24, 36, 1, 1, 1, 0), conv_shape(2, 32, 30, 3, 16, 7, 7, 2, 3),
                          conv_shape(3, 17, 15, 32, 48, 3, 3, 1, 1)};  // the last one: Winograd (AVX-512)
    for (size_t si = 0; si < CT_ARRAY_LEN(shapes); si++) {
        const ConvShape *s = &shapes[si];
        const size_t nin = (size_t)s->N * s->H * s->W * s->C, nout = (size_t)s->N * s->P * s->Q * s->K;
        const size_t nw = (size_t)s->K * s->R * s->S * s->C;
        float *in = rand_buf(nin, 1), *w = rand_buf(nw, 1), *dout = rand_buf(nout, 1);
        float *r[2][3];
        for (int t = 0; t < 2; t++) {
            omp_set_num_threads(t + 1);
            r[t][0] = ct_alloc(nout * 4), r[t][1] = ct_alloc(nin * 4), r[t][2] = ct_alloc(nw * 4);
            conv2d_forward(s, r[t][0], in, w);
            conv2d_backward_data(s, r[t][1], dout, w);
            conv2d_backward_weight(s, r[t][2], dout, in);
        }
        CHECK(same_bits(r[0][0], r[1][0], nout) && same_bits(r[0][1], r[1][1], nin) && same_bits(r[0][2], r[1][2], nw),
              "conv shape %zu differs between 1 and 2 threads", si);
        for (int t = 0; t < 2; t++) free(r[t][0]), free(r[t][1]), free(r[t][2]);
        free(in), free(w), free(dout);
    }
    {
        const int M = 40000, C = 24;
        float *x = rand_buf((size_t)M * C, 1), *g = rand_buf(C, 1), *b = rand_buf(C, 1), *dy = rand_buf((size_t)M * C, 1);
        float *o[2][6];
        for (int t = 0; t < 2; t++) {
            omp_set_num_threads(t + 1);
            float *rm = ct_zalloc(C * 4), *rv = ct_zalloc(C * 4);
            o[t][0] = ct_alloc((size_t)M * C * 4), o[t][1] = ct_alloc(C * 4), o[t][2] = ct_alloc(C * 4);
            o[t][3] = ct_alloc((size_t)M * C * 4), o[t][4] = ct_alloc(C * 4), o[t][5] = ct_alloc(C * 4);
            batchnorm_forward_train(o[t][0], o[t][1], o[t][2], rm, rv, x, g, b, M, C, 0.1f, 1e-5f, 1);
            batchnorm_backward(o[t][3], o[t][4], o[t][5], dy, x, o[t][0], g, o[t][1], o[t][2], M, C);
            free(rm), free(rv);
        }
        int ok = same_bits(o[0][0], o[1][0], (size_t)M * C) && same_bits(o[0][3], o[1][3], (size_t)M * C);
        for (int k = 1; k < 6; k++)
            if (k != 3) ok &= same_bits(o[0][k], o[1][k], C);
        CHECK(ok, "batchnorm differs between 1 and 2 threads");
        for (int t = 0; t < 2; t++)
            for (int k = 0; k < 6; k++) free(o[t][k]);
        free(x), free(g), free(b), free(dy);
    }
    {
        const int N = 64, I = 300, O = 100;
        float *in = rand_buf((size_t)N * I, 1), *w = rand_buf((size_t)O * I, 1), *dy = rand_buf((size_t)N * O, 1);
        float *o[2][4];
        for (int t = 0; t < 2; t++) {
            omp_set_num_threads(t + 1);
            o[t][0] = ct_alloc((size_t)N * O * 4), o[t][1] = ct_alloc((size_t)N * I * 4);
            o[t][2] = ct_alloc((size_t)O * I * 4), o[t][3] = ct_alloc(O * 4);
            linear_forward(o[t][0], in, w, NULL, N, I, O);
            linear_backward(o[t][1], o[t][2], o[t][3], dy, in, w, N, I, O);
        }
        CHECK(same_bits(o[0][0], o[1][0], (size_t)N * O) && same_bits(o[0][1], o[1][1], (size_t)N * I) &&
                  same_bits(o[0][2], o[1][2], (size_t)O * I) && same_bits(o[0][3], o[1][3], O),
              "linear differs between 1 and 2 threads");
        for (int t = 0; t < 2; t++)
            for (int k = 0; k < 4; k++) free(o[t][k]);
        free(in), free(w), free(dy);
    }
    omp_set_num_threads(2);
}

int main(void) {
    test_rng = rng_make(99, 0, 0);
    for (int it = 0; it < 10; it++) {
        const int R = it % 4 == 0 ? 1 : it % 4 == 1 ? 7 : 3, stride = rnd(1, 2), pad = it % 3 == 0 ? 0 : R / 2;
        const int lo = R > 2 * pad ? R - 2 * pad : 1;
        ConvShape s = conv_shape(it < 3 ? 1 : rnd(1, 3), rnd(lo, 9) | 1, rnd(lo, 10), rnd(1, 13), rnd(1, 11), R, R,
                                 stride, pad);
        gradcheck_conv(s);
    }
    // The training step's Winograd F(2x2, 3x3) route (3x3 stride-1 pad-1, 16+ channels, 8x8+ maps;
    // on by default with AVX-512): forward and flipped data gradient through the transforms.
    gradcheck_conv(conv_shape(1, 9, 9, 16, 16, 3, 3, 1, 1));
    gradcheck_conv(conv_shape(2, 8, 11, 32, 48, 3, 3, 1, 1));
    const int bn[][2] = {{7, 5}, {50, 3}, {333, 13}, {3, 2}};  // M = 2 is degenerate: xhat = +-1 whatever x is
    for (size_t i = 0; i < CT_ARRAY_LEN(bn); i++) {
        gradcheck_bn(bn[i][0], bn[i][1], 0);
        gradcheck_bn(bn[i][0], bn[i][1], 1);
    }
    gradcheck_pool(1, 7, 9, 5);
    gradcheck_pool(2, 8, 5, 3);
    gradcheck_blur(1, 1, 1, 3);
    gradcheck_blur(2, 5, 7, 3);
    gradcheck_blur(1, 9, 4, 17);
    gradcheck_linear(1, 7, 5);
    gradcheck_linear(5, 33, 10);
    gradcheck_loss(0, 6, 10, 0.0f);
    gradcheck_loss(0, 1, 7, 0.1f);
    gradcheck_loss(1, 6, 10, 1.0f);
    gradcheck_loss(1, 3, 9, 4.0f);
    gradcheck_loss_mix(6, 10, 0.0f, 0.3f);
    gradcheck_loss_mix(5, 7, 0.1f, 0.62f);
    gradcheck_loss_mix(1, 3, 0.2f, 0.5f);
    gradcheck_drop_path();
    determinism();
    // Grouped (nn/conv_grouped*.c; tests/test_conv_grouped.c has more): 4 channels per group at
    // stride 2 on an odd map (permuted lanes on AVX-512), 32 per group (broadcast lanes). Last, so
    // the draws above stay what they were (the BN case M3 C2 sits near its bound under others).
    gradcheck_conv(conv_shape_g(1, 9, 7, 64, 64, 3, 3, 2, 1, 16));
    gradcheck_conv(conv_shape_g(1, 5, 6, 64, 64, 3, 3, 1, 1, 2));
    return test_summary("test_gradcheck");
}
