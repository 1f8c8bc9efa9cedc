// Grouped convolutions on the GPU (kernels/conv_generic.cu's ct_conv_grouped_run, through
// kernels/conv.cu's entry points) under emulation, against the CPU oracle (nn/conv_grouped.c):
// - forward, data gradient (written and accumulated in place) and weight gradient, fp32 and bf16
//   storage, on awkward shapes: groups 2-64, 1-32 channels per group, Cg != Kg, stride 2, odd maps,
//   a weight gradient long enough to split its reduction (the partials' work buffer);
// - the engine that runs is the one the rules below name: bf16 asked of v2, wgmma or auto runs on
//   v2's block-diagonal tensor-core path (kernels/conv_tcg.cu) where the shape qualifies (tc_rule),
//   everything else on the generic engine, and the entry point says so; the fused BN epilogues
//   (statistics in the forward, BN backward in the data gradient) decline grouped shapes, running
//   nothing, so the executor takes the plain passes;
// - outputs are poisoned with NaN first (an element left unwritten fails), and a second run gives
//   the same bits.
// bf16 runs take bf16-rounded operands and the CPU sees the same values: an fp32 output (the
// weight gradient) may differ by summation order only (1e-5), a bf16 output by its rounding (1e-2).
#include <math.h>
#include <string.h>

#include "kernels/kernels.h"
#include "nn/layers.h"
#include "tests/conv_cases.h"
#include "tests/emu_util.h"
#include "tests/test.h"
#include "util/bf16.h"
#include "util/common.h"
#include "util/rng.h"

static cudaStream_t stream;
static size_t esize(CtDtype dt) { return dt == CT_BF16 ? 2 : 4; }

// Uniform in [-1, 1) from the file's own stream, rounded to what a dt buffer holds (the CPU
// reference sees what the GPU sees).
static float *host_random(size_t n, uint64_t key, CtDtype dt) {
    float *h = (float *)ct_alloc(n * sizeof(float) + 4);
    Rng r = rng_make(20261127, key, n);
    for (size_t i = 0; i < n; i++) h[i] = 2.0f * rng_uniform(&r) - 1.0f;
    round_to(h, n, dt);
    return h;
}
static void sync(void) {
    cudaError_t e = cudaStreamSynchronize(stream);
    if (e != cudaSuccess) ct_die("cuda: %s", cudaGetErrorString(e));
}

static const int ALGOS[] = {CT_CONV_GENERIC, CT_CONV_TC, CT_CONV_TC2, CT_CONV_WGMMA, CT_CONV_AUTO};

// v2's grouped path takes (written out apart from kernels/conv_tcg.cu): C and K multiples of 8,
// channels per group Cg and Kg each 4 or a multiple of 8 up to 64, Cg * max(1, 16 / Kg) <= 64, R*S <= 32 (every
// case here fits an emulated H100's shared memory).
static int chan_ok(int c) { return c == 4 || (c % 8 == 0 && c <= 64); }
static int tc_rule(const ConvShape *s) {
    const int G = conv_groups(s), Cg = s->C / G, Kg = s->K / G;
    return s->C % 8 == 0 && s->K % 8 == 0 && chan_ok(Cg) && chan_ok(Kg) && Cg * (Kg < 16 ? 16 / Kg : 1) <= 64 &&
           s->R * s->S <= 32;
}
static int tc_cases;  // grouped shapes run on the tensor-core path (bf16)
static int stats_cases;  // of which the forward's fused BN statistics were checked
static void poison(void *d, size_t bytes) { CT_CUDA_CHECK(cudaMemset(d, 0xff, bytes)); }
static int dev_equal(const void *a, const void *b, size_t bytes) {
    unsigned char *x = (unsigned char *)ct_alloc(bytes + 1), *y = (unsigned char *)ct_alloc(bytes + 1);
    cudaMemcpy(x, a, bytes, cudaMemcpyDeviceToHost);
    cudaMemcpy(y, b, bytes, cudaMemcpyDeviceToHost);
    int eq = memcmp(x, y, bytes) == 0;
    free(x), free(y);
    return eq;
}

static void test_shape(int N, int H, int W, int C, int K, int R, int stride, int pad, int G, CtDtype dt, int algo) {
    const ConvShape s = conv_shape_g(N, H, W, C, K, R, R, stride, pad, G);
    const size_t ni = (size_t)N * H * W * C, no = (size_t)N * s.P * s.Q * K, nw = (size_t)K * R * R * (C / G);
    const uint64_t key = ((uint64_t)G << 32) ^ ((uint64_t)C << 16) ^ (uint64_t)(K * 131 + H * 7 + stride);
    float *in = host_random(ni, key, dt), *w = host_random(nw, key + 1, dt), *dout = host_random(no, key + 2, dt);
    float *prior = host_random(ni, key + 3, dt);  // what the accumulating data gradient adds to
    float *ro = (float *)ct_alloc(no * 4), *rd = (float *)ct_alloc(ni * 4), *rw = (float *)ct_alloc(nw * 4);
    conv2d_forward(&s, ro, in, w);
    conv2d_backward_data(&s, rd, dout, w);
    conv2d_backward_weight(&s, rw, dout, in);
    float *racc = (float *)ct_alloc(ni * 4);
    for (size_t i = 0; i < ni; i++) racc[i] = prior[i] + rd[i];

    void *din_ = dev_act(in, ni, dt), *dw_ = dev_act(w, nw, dt), *ddo = dev_act(dout, no, dt);
    void *dout_ = dev_poisoned(no * esize(dt)), *dd = dev_poisoned(ni * esize(dt)), *dacc = dev_act(prior, ni, dt);
    float *dgw = (float *)dev_poisoned(nw * 4), *dgw2 = (float *)dev_poisoned(nw * 4);
    const size_t work_n = conv2d_gpu_work_floats(&s);
    float *work = NULL;
    if (work_n) cudaMalloc((void **)&work, work_n * 4);
    int e1 = conv2d_forward_gpu_ex(&s, dout_, din_, dw_, dt, (ct_stream_t)stream, algo);
    int e2 = conv2d_backward_data_gpu_ex(&s, dd, ddo, dw_, dt, (ct_stream_t)stream, algo);
    int e3 = conv2d_backward_data_acc_gpu_ex(&s, dacc, ddo, dw_, dt, (ct_stream_t)stream, algo);
    int e4 = conv2d_backward_weight_gpu_ex(&s, dgw, ddo, din_, work, dt, (ct_stream_t)stream, algo);
    conv2d_backward_weight_gpu_ex(&s, dgw2, ddo, din_, work, dt, (ct_stream_t)stream, algo);
    sync();
    const int tc = dt == CT_BF16 && (algo == CT_CONV_TC2 || algo == CT_CONV_WGMMA || algo == CT_CONV_AUTO) && tc_rule(&s);
    const int want = tc ? CT_CONV_TC2 : CT_CONV_GENERIC;
    tc_cases += tc;
    CHECK(e1 == want && e2 == want && e3 == want && e4 == want,
          "grouped conv C%d K%d g%d %s asked engine %d: ran %d %d %d %d, the rules say %d", C, K, G,
          dt == CT_BF16 ? "bf16" : "fp32", algo, e1, e2, e3, e4, want);
    float *go = (float *)ct_alloc(no * 4), *gd = (float *)ct_alloc(ni * 4), *ga = (float *)ct_alloc(ni * 4);
    float *gw = (float *)ct_alloc(nw * 4), *gw2 = (float *)ct_alloc(nw * 4);
    host_act_to(go, dout_, no, dt);
    host_act_to(gd, dd, ni, dt);
    host_act_to(ga, dacc, ni, dt);
    host_act_to(gw, dgw, nw, CT_F32);
    host_act_to(gw2, dgw2, nw, CT_F32);
    const double tol = dt == CT_BF16 ? 1e-2 : 1e-5;
    const double x1 = rel_err_norm(go, ro, no), x2 = rel_err_norm(gd, rd, ni), x3 = rel_err_norm(ga, racc, ni);
    const double x4 = rel_err_norm(gw, rw, nw);
    printf("  %-4s engine %d  N%d %dx%d C%d K%d R%d st%d g%d (work %zu): fwd %.2g dgrad %.2g acc %.2g wgrad %.2g\n",
           dt == CT_BF16 ? "bf16" : "fp32", algo, N, H, W, C, K, R, stride, G, work_n, x1, x2, x3, x4);
    CHECK(x1 <= tol && x2 <= tol && x3 <= tol && x4 <= 1e-5,
          "grouped conv %s N%d %dx%d C%d K%d R%d st%d g%d: fwd %.3g dgrad %.3g acc %.3g wgrad %.3g vs the CPU",
          dt == CT_BF16 ? "bf16" : "fp32", N, H, W, C, K, R, stride, G, x1, x2, x3, x4);
    CHECK(!memcmp(gw, gw2, nw * 4), "grouped conv g%d: the weight gradient differs between two runs", G);

    if (dt == CT_BF16 && algo == CT_CONV_AUTO) {
        // The forward's BN statistics epilogue: taken where v2's grouped path takes the forward
        // (kernels/conv_tcg.cu tg_tile_stats), its output the plain forward's bits and its tiles
        // the CPU twin's (batchnorm_tile_stats) of that output; the data gradient's BN backward
        // still declines grouped shapes.
        const int M = (int)(no / K), nt = (M + BN_STATS_TILE_ROWS - 1) / BN_STATS_TILE_ROWS;
        const size_t nst = (size_t)2 * K * nt;
        float *tiles = (float *)dev_poisoned(nst * 4), *tiles2 = (float *)dev_poisoned(nst * 4);
        float *stats_dev = (float *)dev_poisoned((size_t)4 * C * 4);
        void *o2 = dev_poisoned(no * 2);
        int st_ran = conv2d_forward_stats_gpu(&s, o2, tiles, din_, dw_, dt, (ct_stream_t)stream, CT_CONV_AUTO);
        int bn_ran = conv2d_backward_data_bn_gpu(&s, dd, tiles2, ddo, dw_, din_, stats_dev, stats_dev, stats_dev,
                                                 stats_dev, dt, (ct_stream_t)stream, CT_CONV_AUTO);
        sync();
        CHECK(!bn_ran, "grouped conv g%d: the fused BN backward took it (%d)", G, bn_ran);
        CHECK(!st_ran == !tc, "grouped conv C%d K%d g%d: the fused statistics ran %d, the rules say %d", C, K, G,
              st_ran, tc);
        if (st_ran && tc) {
            stats_cases++;
            CHECK(dev_equal(dout_, o2, no * 2), "grouped conv g%d: the stats forward's output differs", G);
            float *y = (float *)ct_alloc(no * 4), *got = (float *)ct_alloc(nst * 4), *want = (float *)ct_alloc(nst * 4);
            host_act_to(y, o2, no, dt);
            host_act_to(got, tiles, nst, CT_F32);
            batchnorm_tile_stats(want, y, M, K);
            double e_sum = 0, e_m2 = 0;
            for (int t = 0; t < nt; t++)
                for (int c = 0; c < K; c++) {
                    double abs_sum = 0;
                    for (int r = t * BN_STATS_TILE_ROWS; r < M && r < (t + 1) * BN_STATS_TILE_ROWS; r++)
                        abs_sum += fabs(y[(size_t)r * K + c]);
                    size_t i = ((size_t)t * K + c) * 2;
                    double es = fabs(got[i] - want[i]) / (abs_sum + 1e-30);
                    double em = fabs(got[i + 1] - want[i + 1]) / (fabs(want[i + 1]) + 1e-30);
                    if (!(es <= e_sum)) e_sum = es;
                    if (!(em <= e_m2)) e_m2 = em;
                }
            printf("    fused statistics: %d tiles x %d columns, sum %.2g m2 %.2g off the CPU twin\n", nt, K, e_sum, e_m2);
            CHECK(e_sum <= 1e-5 && e_m2 <= 1e-4, "grouped conv N%d %dx%d C%d K%d st%d g%d: tile statistics off the CPU twin: sum %.3g, m2 %.3g",
                  N, H, W, C, K, stride, G, e_sum, e_m2);
            poison(tiles2, nst * 4);
            conv2d_forward_stats_gpu(&s, o2, tiles2, din_, dw_, dt, (ct_stream_t)stream, CT_CONV_AUTO);
            sync();
            CHECK(dev_equal(tiles, tiles2, nst * 4), "grouped conv g%d: statistics not bit-identical on a rerun", G);
            free(y), free(got), free(want);
        }
        cudaFree(tiles), cudaFree(tiles2), cudaFree(stats_dev), cudaFree(o2);
    }
    cudaFree(din_), cudaFree(dw_), cudaFree(ddo), cudaFree(dout_), cudaFree(dd), cudaFree(dacc), cudaFree(dgw);
    cudaFree(dgw2);
    if (work) cudaFree(work);
    free(in), free(w), free(dout), free(prior), free(ro), free(rd), free(rw), free(racc);
    free(go), free(gd), free(ga), free(gw), free(gw2);
}

int main(void) {
    cudaStreamCreate(&stream);
    // The grouped cases of tests/conv_cases.h (square kernels).
    int ngrouped = 0;
    for (int i = 0; i < CONV_CASES_N; i++) {
        const ConvCase *f = &CONV_CASES[i];
        if (f->groups <= 1) continue;
        ngrouped++;
        for (int d = 0; d < 2; d++) {
            const CtDtype dt = d ? CT_BF16 : CT_F32;
            // Every engine on the cases marked CC_GROUPED_ALL; the rest with the default (auto) only:
            // each one resolves to the same generic launch, and the emulator runs a host thread per
            // CUDA thread.
            const int na = (f->flags & CC_GROUPED_ALL) && dt == CT_BF16 ? (int)CT_ARRAY_LEN(ALGOS) : 1;
            for (int a = 0; a < na; a++) {
                const int algo = na == 1 ? (dt == CT_BF16 ? CT_CONV_AUTO : CT_CONV_GENERIC) : ALGOS[a];
                test_shape(f->N, f->H, f->W, f->C, f->K, f->R, f->stride, f->pad, f->groups, dt, algo);
            }
        }
    }
    CHECK(ngrouped >= 7, "only %d grouped cases in tests/conv_cases.h", ngrouped);
    CHECK(tc_cases >= 10, "only %d grouped runs on the tensor-core path", tc_cases);
    CHECK(stats_cases >= 5, "only %d grouped runs checked the fused statistics", stats_cases);
    {  // the last shape must have split its weight gradient, or the work-buffer path went untested
        const ConvShape s = conv_shape_g(2, 16, 16, 8, 8, 3, 3, 1, 1, 2);
        CHECK(conv2d_gpu_work_floats(&s) > 0, "the split weight-gradient shape did not split");
    }
    cudaStreamDestroy(stream);
    return test_summary("emu_conv_grouped");
}
