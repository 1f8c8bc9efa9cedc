// Per-layer timings of the CPU reference layers on the shapes of resnet20 (32x32, batch 128),
// resnet18 (64x64, batch 32) and the grouped 3x3s of resnext50_32x4d (64x64, batch 32; model name
// "resnext50", each pass on the route conv2d_grouped_* take and on the reference loop nests). Prints one row per layer and pass with the best-of-reps time and
// GFLOP/s, and "x count" = time times how often the shape occurs in one training step of the
// model, so the rows that dominate a step stand out.
//   build/tools/bench_layers [reps] [filter]     (OMP_NUM_THREADS as usual; CTRAIN_GEMM=avx2|generic)
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "nn/conv_grouped.h"
#include "nn/gemm.h"
#include "nn/layers.h"
#include "util/common.h"
#include "util/rng.h"
#include "tools/exec_env.h"

#include <omp.h>

static float *rand_buf(size_t n) {
    float *p = ct_alloc(n * sizeof(float));
    Rng r = rng_make(1, n, 0);
    for (size_t i = 0; i < n; i++) p[i] = 2 * rng_uniform(&r) - 1;
    return p;
}

static int g_reps = 5;
static double g_total;

static void row(const char *model, const char *name, const char *pass, double sec, double flops, int count) {
    printf("%-9s %-30s %-8s %9.3f ms %8.1f GFLOP/s  x%-2d %9.2f ms\n", model, name, pass, sec * 1e3,
           flops > 0 ? flops / sec * 1e-9 : 0.0, count, sec * count * 1e3);
    g_total += sec * count;
}

// CPU seconds of the whole process divided by the thread count: on a shared, overloaded machine
// wall time mostly measures the neighbours, CPU time what the layer itself costs (a lower bound
// of the wall time on idle cores). CTRAIN_BENCH_WALL=1 switches to wall time.
static double now_cost(void) {
    static int wall = -1;
    if (wall < 0) wall = getenv("CTRAIN_BENCH_WALL") != NULL;
    if (wall) return ct_now();
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (ts.tv_sec + ts.tv_nsec * 1e-9) / omp_get_max_threads();
}

#define TIME_BEST(best, stmt)                              \
    do {                                                   \
        best = 1e30;                                       \
        for (int rep_ = 0; rep_ < g_reps; rep_++) {        \
            double t0_ = now_cost();                       \
            stmt;                                          \
            double t_ = now_cost() - t0_;                  \
            if (t_ < best) best = t_;                      \
        }                                                  \
    } while (0)

// The CPU routes the convolutions take (CTRAIN_CPU_WINOGRAD=0, CTRAIN_CPU_SMALL=0 turn them off).
static ExecOptions g_opt;

static void bench_conv(const char *model, int N, int H, int C, int K, int R, int stride, int count) {
    const int pad = R / 2;
    ConvShape s = conv_shape(N, H, H, C, K, R, R, stride, pad);
    const size_t nin = (size_t)N * H * H * C, nout = (size_t)N * s.P * s.Q * K, nw = (size_t)K * R * R * C;
    float *in = rand_buf(nin), *w = rand_buf(nw), *out = rand_buf(nout), *din = rand_buf(nin), *dw = rand_buf(nw);
    const double flops = 2.0 * nout * R * R * C;
    char name[64];
    snprintf(name, sizeof name, "conv %dx%d s%d %d->%d @%d", R, R, stride, C, K, H);
    double t;
    TIME_BEST(t, conv2d_forward_ex(&s, out, in, w, &g_opt));
    row(model, name, "fwd", t, flops, count);
    if (C > 3) {  // the stem's input gradient is never needed
        TIME_BEST(t, conv2d_backward_data_ex(&s, din, out, w, &g_opt));
        row(model, name, "bwd-data", t, flops, count);
    }
    TIME_BEST(t, conv2d_backward_weight_ex(&s, dw, out, in, &g_opt));
    row(model, name, "bwd-wgt", t, flops, count);
    free(in), free(w), free(out), free(din), free(dw);
}

static void bench_bn(const char *model, int M, int C, int relu, int count) {
    float *x = rand_buf((size_t)M * C), *y = rand_buf((size_t)M * C), *dy = rand_buf((size_t)M * C);
    float *g = rand_buf(C), *b = rand_buf(C), *mean = rand_buf(C), *inv = rand_buf(C), *rm = rand_buf(C);
    float *rv = rand_buf(C), *dg = rand_buf(C), *db = rand_buf(C);
    for (int c = 0; c < C; c++) rv[c] = 1;
    char name[64];
    snprintf(name, sizeof name, "bn%s M=%d C=%d", relu ? "+relu" : "", M, C);
    double t;
    TIME_BEST(t, batchnorm_forward_train(y, mean, inv, rm, rv, x, g, b, M, C, 0.1f, 1e-5f, relu));
    row(model, name, "fwd", t, 0, count);
    TIME_BEST(t, batchnorm_backward(dy, dg, db, dy, x, relu ? y : NULL, g, mean, inv, M, C));
    row(model, name, "bwd", t, 0, count);
    free(x), free(y), free(dy), free(g), free(b), free(mean), free(inv), free(rm), free(rv), free(dg), free(db);
}

static void bench_add(const char *model, size_t n, int count) {
    float *a = rand_buf(n), *b = rand_buf(n), *y = rand_buf(n);
    char name[64];
    snprintf(name, sizeof name, "add+relu n=%zu", n);
    double t;
    TIME_BEST(t, add_forward(y, a, b, n, 1));
    row(model, name, "fwd", t, 0, count);
    TIME_BEST(t, relu_backward(a, b, y, n));
    row(model, name, "bwd", t, 0, count);
    TIME_BEST(t, add_inplace(a, b, n));
    row(model, name, "grad-add", t, 0, count);
    free(a), free(b), free(y);
}

// A grouped 3x3 (ResNeXt's conv2: C -> C, pad 1) with `groups` groups: each pass on its route
// (conv_grouped_route: avx512 or reference) and on the reference loops ("-ref" rows, not added to
// the total; their sum is printed apart).
static double g_total_ref;
static void bench_gconv(const char *model, int N, int H, int C, int stride, int groups, int count) {
    ConvShape s = conv_shape_g(N, H, H, C, C, 3, 3, stride, 1, groups);
    const int Cg = C / groups;
    const size_t nin = (size_t)N * H * H * C, nout = (size_t)N * s.P * s.Q * C, nw = (size_t)C * 9 * Cg;
    float *in = rand_buf(nin), *w = rand_buf(nw), *out = rand_buf(nout), *din = rand_buf(nin), *dw = rand_buf(nw);
    const double flops = 2.0 * nout * 9 * Cg;
    char name[64];
    snprintf(name, sizeof name, "gconv 3x3 s%d %d g%d(x%d) @%d", stride, C, groups, Cg, H);
    double t, save;
    TIME_BEST(t, conv2d_grouped_forward(&s, out, in, w, NULL, NULL, 0));
    row(model, name, conv_grouped_route(&s, CONV_GROUPED_FWD)[0] == 'a' ? "fwd" : "fwd*", t, flops, count);
    save = g_total;
    TIME_BEST(t, conv2d_grouped_forward_ref(&s, out, in, w, NULL, NULL, 0));
    row(model, name, "fwd-ref", t, flops, count);
    g_total_ref += g_total - save, g_total = save;
    TIME_BEST(t, conv2d_grouped_backward_data(&s, din, out, w));
    row(model, name, conv_grouped_route(&s, CONV_GROUPED_DATA)[0] == 'a' ? "bwd-data" : "bwd-dat*", t, flops, count);
    save = g_total;
    TIME_BEST(t, conv2d_grouped_backward_data_ref(&s, din, out, w));
    row(model, name, "data-ref", t, flops, count);
    g_total_ref += g_total - save, g_total = save;
    TIME_BEST(t, conv2d_grouped_backward_weight(&s, dw, out, in));
    row(model, name, conv_grouped_route(&s, CONV_GROUPED_WEIGHT)[0] == 'a' ? "bwd-wgt" : "bwd-wgt*", t, flops, count);
    save = g_total;
    TIME_BEST(t, conv2d_grouped_backward_weight_ref(&s, dw, out, in));
    row(model, name, "wgt-ref", t, flops, count);
    g_total_ref += g_total - save, g_total = save;
    free(in), free(w), free(out), free(din), free(dw);
}

static int want(const char *filter, const char *model) { return !filter || strstr(model, filter); }

int main(int argc, char **argv) {
    g_opt = tool_exec_options();
    if (argc > 1) g_reps = atoi(argv[1]);
    if (g_reps < 1) ct_die("bench_layers: reps must be >= 1 (got '%s')", argv[1]);
    const char *filter = argc > 2 ? argv[2] : NULL;
    const char *k = getenv("CTRAIN_GEMM");
    if (k && !sgemm_set_kernel(k)) ct_die("CTRAIN_GEMM=%s: not a kernel this CPU runs (avx512, avx2, generic)", k);
    printf("# bench_layers: %d threads, gemm kernel %s, best of %d, %s\n", omp_get_max_threads(), sgemm_kernel_name(),
           g_reps, getenv("CTRAIN_BENCH_WALL") ? "wall time" : "process CPU time / threads");
    printf("%-9s %-30s %-8s %12s %16s  %-3s %12s\n", "model", "layer", "pass", "time", "rate", "cnt", "x count");
    if (want(filter, "resnet20")) {
        const char *m = "resnet20";
        const int N = 128;
        g_total = 0;
        bench_conv(m, N, 32, 3, 16, 3, 1, 1);
        bench_conv(m, N, 32, 16, 16, 3, 1, 6);
        bench_conv(m, N, 32, 16, 32, 3, 2, 1);
        bench_conv(m, N, 32, 16, 32, 1, 2, 1);
        bench_conv(m, N, 16, 32, 32, 3, 1, 5);
        bench_conv(m, N, 16, 32, 64, 3, 2, 1);
        bench_conv(m, N, 16, 32, 64, 1, 2, 1);
        bench_conv(m, N, 8, 64, 64, 3, 1, 5);
        bench_bn(m, N * 32 * 32, 16, 1, 7);
        bench_bn(m, N * 16 * 16, 32, 1, 7);
        bench_bn(m, N * 8 * 8, 64, 1, 7);
        bench_add(m, (size_t)N * 32 * 32 * 16, 3);
        bench_add(m, (size_t)N * 16 * 16 * 32, 3);
        bench_add(m, (size_t)N * 8 * 8 * 64, 3);
        printf("%-9s %-30s %-8s %50.2f ms (sum of the rows above, x count)\n", m, "total", "", g_total * 1e3);
    }
    if (want(filter, "resnet18")) {
        const char *m = "resnet18";
        const int N = 32;
        g_total = 0;
        bench_conv(m, N, 64, 3, 64, 7, 2, 1);
        {
            float *in = rand_buf((size_t)N * 32 * 32 * 64), *out = rand_buf((size_t)N * 16 * 16 * 64);
            float *din = rand_buf((size_t)N * 32 * 32 * 64);
            double t;
            TIME_BEST(t, maxpool_forward(out, in, N, 32, 32, 64, 3, 2, 1, 16, 16));
            row(m, "maxpool 3x3 s2 64 @32", "fwd", t, 0, 1);
            TIME_BEST(t, maxpool_backward(din, out, in, N, 32, 32, 64, 3, 2, 1, 16, 16));
            row(m, "maxpool 3x3 s2 64 @32", "bwd", t, 0, 1);
            free(in), free(out), free(din);
        }
        bench_conv(m, N, 16, 64, 64, 3, 1, 4);
        bench_conv(m, N, 16, 64, 128, 3, 2, 1);
        bench_conv(m, N, 16, 64, 128, 1, 2, 1);
        bench_conv(m, N, 8, 128, 128, 3, 1, 3);
        bench_conv(m, N, 8, 128, 256, 3, 2, 1);
        bench_conv(m, N, 8, 128, 256, 1, 2, 1);
        bench_conv(m, N, 4, 256, 256, 3, 1, 3);
        bench_conv(m, N, 4, 256, 512, 3, 2, 1);
        bench_conv(m, N, 4, 256, 512, 1, 2, 1);
        bench_conv(m, N, 2, 512, 512, 3, 1, 3);
        bench_bn(m, N * 32 * 32, 64, 1, 1);
        bench_bn(m, N * 16 * 16, 64, 1, 4);
        bench_bn(m, N * 8 * 8, 128, 1, 5);
        bench_bn(m, N * 4 * 4, 256, 1, 5);
        bench_bn(m, N * 2 * 2, 512, 1, 5);
        printf("%-9s %-30s %-8s %50.2f ms (sum of the rows above, x count)\n", m, "total", "", g_total * 1e3);
    }
    if (want(filter, "resnext50")) {
        // resnext50_32x4d at 64x64: layer1 16x16 (4 channels per group) to layer4 2x2 (32 per group);
        // each stage's first block has the stride.
        const char *m = "resnext50";
        const int N = 32;
        g_total = g_total_ref = 0;
        bench_gconv(m, N, 16, 128, 1, 32, 3);
        bench_gconv(m, N, 16, 256, 2, 32, 1);
        bench_gconv(m, N, 8, 256, 1, 32, 3);
        bench_gconv(m, N, 8, 512, 2, 32, 1);
        bench_gconv(m, N, 4, 512, 1, 32, 5);
        bench_gconv(m, N, 4, 1024, 2, 32, 1);
        bench_gconv(m, N, 2, 1024, 1, 32, 2);
        printf("%-9s %-30s %-8s %50.2f ms (grouped 3x3s, x count; '*': the reference route)\n", m, "total", "", g_total * 1e3);
        printf("%-9s %-30s %-8s %50.2f ms (the same on the reference loops: %.2fx)\n", m, "total-ref", "",
               g_total_ref * 1e3, g_total_ref / g_total);
    }
    return 0;
}
