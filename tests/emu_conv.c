// GPU convolution and linear kernels (kernels/conv.cu, kernels/linear.cu) under emulation,
// against the CPU reference layers (nn/layers.h):
//   - every engine (generic fp32, generic bf16, tensor-core bf16) on fixed and randomly drawn small
//     shapes: odd sizes, stride 2 and 3, 1x1, 5x5, 7x7 stems, channels not a multiple of 8, batch 1;
//   - bf16 runs take bf16-rounded inputs and the CPU reference sees the same rounded values, so
//     an fp32 output (weight gradient, linear logits) may differ only by summation order (1e-5)
//     and a bf16 output by its own rounding (1e-2);
//   - outputs are poisoned with NaN before each call (an element left unwritten fails), and every
//     call runs twice: the two results must be bit-identical.
// - BN statistics in engine v2's forward epilogue (conv2d_forward_stats_gpu) against their CPU
//   twins (nn/layers.h batchnorm_tile_stats, batchnorm_add_forward_train_tiles).
// Shapes stay small (the emulator runs one host thread per CUDA thread) and come from the shared
// table tests/conv_cases.h (its flags say which of these checks a case takes part in), plus random
// ones drawn here.
#include <math.h>
#include <string.h>

#include "kernels/kernels.h"
#include "nn/layers.h"
#include "nn/pad.h"
#include "tests/conv_cases.h"
#include "tests/emu_util.h"
#include "tests/phase_rows.h"
#include "tests/test.h"
#include "util/bf16.h"
#include "util/common.h"
#include "util/rng.h"

#define CUDA_OK(call)                                                                                 \
    do {                                                                                              \
        cudaError_t e_ = (call);                                                                      \
        if (e_ != cudaSuccess) ct_die("%s failed at %s:%d: %s", #call, __FILE__, __LINE__, cudaGetErrorString(e_)); \
    } while (0)

static size_t esize(CtDtype dt) { return dt == CT_BF16 ? 2 : 4; }

// Uniform in [-1, 1) from the file's own stream, rounded to what a dt buffer holds (the CPU
// reference sees what the GPU sees).
static float *host_random(size_t n, uint64_t key, CtDtype dt) {
    float *h = (float *)ct_alloc(n * sizeof(float) + 4);
    Rng r = rng_make(20261122, key, n);
    for (size_t i = 0; i < n; i++) h[i] = 2.0f * rng_uniform(&r) - 1.0f;
    round_to(h, n, dt);
    return h;
}
static void poison(void *d, size_t bytes) { CT_CUDA_CHECK(cudaMemset(d, 0xff, bytes)); }
static int dev_equal(const void *a, const void *b, size_t bytes) {
    unsigned char *x = (unsigned char *)ct_alloc(bytes + 1), *y = (unsigned char *)ct_alloc(bytes + 1);
    cudaMemcpy(x, a, bytes, cudaMemcpyDeviceToHost);
    cudaMemcpy(y, b, bytes, cudaMemcpyDeviceToHost);
    int eq = memcmp(x, y, bytes) == 0;
    free(x);
    free(y);
    return eq;
}

// Worst error seen per (kernel, engine) for the report at the end.
enum { K_FWD, K_DGRAD, K_DGRAD_ACC, K_WGRAD, K_LIN_FWD, K_LIN_DIN, K_LIN_DW, K_LIN_DB, NKERN };
static const char *kname[NKERN] = {"conv fwd", "conv dgrad", "dgrad acc", "conv wgrad", "linear fwd",
                                   "linear din", "linear dw", "linear db"};
enum { E_F32, E_BF16, E_TC, E_TC2, E_WG, NENG };
static const char *ename[NENG] = {"generic fp32", "generic bf16", "tensor-core bf16", "tensor-core v2", "wgmma"};
static double worst[NKERN][NENG];
static int runs[NKERN][NENG];

static void record(int k, int e, double err, double tol, const char *what) {
    runs[k][e]++;
    printf("  %-10s %-16s %-36s %.3g\n", kname[k], ename[e], what, err);
    if (!(err <= worst[k][e])) worst[k][e] = err;
    CHECK(err <= tol, "%s %s %s: rel err %.3g > %.1g", kname[k], ename[e], what, err, tol);
}

// Tolerance for an fp32 result of bf16 operands. Emulated mma adds in IEEE fp32 (measured:
// 0 to 1e-7); real tensor cores align the addends of one mma with few extra bits, so on a GPU
// (tests/gpu.sh runs this file) allow 1e-4. Any indexing error is O(1) either way.
static double fp32_out_tol(int engine) { return engine >= E_TC ? 1e-4 : 1e-5; }

static cudaStream_t stream;
// The current device runs the wgmma engine (compute 9.0): elsewhere CT_CONV_WGMMA falls back to v2.
static int g_dev_wgmma = 1;

// EMU_ENGINES=v2 leaves every wgmma check out, EMU_ENGINES=wgmma runs the wgmma engine's checks
// only (beside the v2 runs they compare with): tools/gpu_session.sh runs the two in processes of
// their own on silicon, so a wgmma fault cannot lose the v2 results. Default: every engine.
static int engines_v2(void) { const char *e = getenv("EMU_ENGINES"); return !e || !*e || strcmp(e, "wgmma"); }
static int engines_wg(void) { const char *e = getenv("EMU_ENGINES"); return !e || !*e || strcmp(e, "v2"); }
static int skip_algo(int algo) { return algo == CT_CONV_WGMMA ? !engines_wg() : !engines_v2(); }

static void sync(void) {
    cudaError_t e = cudaStreamSynchronize(stream);
    if (e != cudaSuccess) ct_die("cuda: %s", cudaGetErrorString(e));
}

// rerun: run forward and data gradient twice and compare the bits (the weight gradient, whose
// reduction crosses blocks, always runs twice).
static void test_conv(int N, int H, int W, int C, int K, int R, int S, int stride, int pad, int rerun) {
    ConvShape s = conv_shape(N, H, W, C, K, R, S, stride, pad);
    char what[128];
    snprintf(what, sizeof what, "N%d H%d W%d C%d K%d %dx%d/%d pad %d", N, H, W, C, K, R, S, stride, pad);
    size_t nin = (size_t)N * H * W * C, nout = (size_t)N * s.P * s.Q * K, nw = (size_t)K * R * S * C;
    size_t nwork = conv2d_gpu_work_floats(&s);
    double t0 = ct_now();
    float *work = nwork ? (float *)dev_poisoned(nwork * 4) : NULL;
    float *ref = (float *)ct_alloc((nin > nout ? nin : nout) * 4 + (nw + 1) * 4);
    float *got = (float *)ct_alloc((nin > nout ? nin : nout) * 4 + (nw + 1) * 4);
    for (int dti = 0; dti < 2; dti++) {
        CtDtype dt = dti ? CT_BF16 : CT_F32;
        uint64_t key = ((uint64_t)N * 131 + H) * 131 + W;
        key = ((key * 131 + C) * 131 + K) * 131 + R * 17 + S * 5 + stride;
        float *in = host_random(nin, key * 4 + 0, dt);
        float *w = host_random(nw, key * 4 + 1, dt);
        float *dout = host_random(nout, key * 4 + 2, dt);
        void *d_in = dev_act(in, nin, dt), *d_w = dev_act(w, nw, dt), *d_dout = dev_act(dout, nout, dt);
        void *o1 = dev_poisoned(nout * esize(dt)), *o2 = dev_poisoned(nout * esize(dt));
        void *di1 = dev_poisoned(nin * esize(dt)), *di2 = dev_poisoned(nin * esize(dt));
        float *dw1 = (float *)dev_poisoned(nw * 4), *dw2 = (float *)dev_poisoned(nw * 4);
        for (int algo = CT_CONV_GENERIC; algo <= CT_CONV_WGMMA; algo++) {
            if (algo >= CT_CONV_TC && dt != CT_BF16) continue;
            if (skip_algo(algo)) continue;
            int e = algo == CT_CONV_WGMMA ? E_WG : algo == CT_CONV_TC2 ? E_TC2 : algo == CT_CONV_TC ? E_TC : dt == CT_BF16 ? E_BF16 : E_F32;
            double tol_act = dt == CT_BF16 ? 1e-2 : 1e-5;
            // v2 takes the shapes whose channel counts are multiples of 8 and hands the others to
            // v1; wgmma takes the same shapes, forward and both gradients (every stride phase).
            int v8 = C % 8 == 0 && K % 8 == 0;
            int want = algo >= CT_CONV_TC2 && !v8 ? CT_CONV_TC : algo;
            if (want == CT_CONV_WGMMA && !g_dev_wgmma) want = CT_CONV_TC2;
            int want_fwd = want;

            // Forward.
            int used = 0;
            for (int rep = 0; rep < 1 + rerun; rep++)
                used = conv2d_forward_gpu_ex(&s, rep ? o2 : o1, d_in, d_w, dt, stream, algo);
            sync();
            CHECK(used == want_fwd, "fwd %s: engine %d ran, %d expected", what, used, want_fwd);
            conv2d_forward(&s, ref, in, w);
            host_act_to(got, o1, nout, dt);
            record(K_FWD, e, rel_err_norm(got, ref, nout), tol_act, what);
            if (rerun) CHECK(dev_equal(o1, o2, nout * esize(dt)), "fwd %s %s: reruns differ", ename[e], what);

            // Data and weight gradients.
            for (int rep = 0; rep < 1 + rerun; rep++)
                used = conv2d_backward_data_gpu_ex(&s, rep ? di2 : di1, d_dout, d_w, dt, stream, algo);
            sync();
            CHECK(used == want, "dgrad %s: engine %d ran, %d expected", what, used, want);
            conv2d_backward_data(&s, ref, dout, w);
            host_act_to(got, di1, nin, dt);
            record(K_DGRAD, e, rel_err_norm(got, ref, nin), tol_act, what);
            if (rerun) CHECK(dev_equal(di1, di2, nin * esize(dt)), "dgrad %s %s: reruns differ", ename[e], what);

            // Accumulated in place onto random values (a second gradient contribution): every
            // element must be old + gradient, so an overwrite or a skipped phase is an O(1) error.
            float *old = host_random(nin, key * 4 + 3, dt);
            void *d_acc = dev_act(old, nin, dt);
            used = conv2d_backward_data_acc_gpu_ex(&s, d_acc, d_dout, d_w, dt, stream, algo);
            sync();
            CHECK(used == want, "dgrad acc %s: engine %d ran, %d expected", what, used, want);
            for (size_t i = 0; i < nin; i++) ref[i] += old[i];
            host_act_to(got, d_acc, nin, dt);
            record(K_DGRAD_ACC, e, rel_err_norm(got, ref, nin), tol_act, what);
            cudaFree(d_acc);
            free(old);

            for (int rep = 0; rep < 2; rep++) {
                if (work) poison(work, nwork * 4);
                used = conv2d_backward_weight_gpu_ex(&s, rep ? dw2 : dw1, d_dout, d_in, work, dt, stream, algo);
            }
            sync();
            CHECK(used == want, "wgrad %s: engine %d ran, %d expected", what, used, want);
            conv2d_backward_weight(&s, ref, dout, in);
            host_act_to(got, dw1, nw, CT_F32);
            // fp32 output from exactly representable products: only the summation order differs.
            record(K_WGRAD, e, rel_err_norm(got, ref, nw), fp32_out_tol(e), what);
            CHECK(dev_equal(dw1, dw2, nw * 4), "wgrad %s %s: reruns differ", ename[e], what);
            poison(o1, nout * esize(dt));
            poison(o2, nout * esize(dt));
            poison(di1, nin * esize(dt));
            poison(di2, nin * esize(dt));
            poison(dw1, nw * 4);
            poison(dw2, nw * 4);
        }
        cudaFree(d_in);
        cudaFree(d_w);
        cudaFree(d_dout);
        cudaFree(o1);
        cudaFree(o2);
        cudaFree(di1);
        cudaFree(di2);
        cudaFree(dw1);
        cudaFree(dw2);
        free(in);
        free(w);
        free(dout);
    }
    if (work) cudaFree(work);
    free(ref);
    free(got);
    printf("%s: split work %zu floats, %.2f s\n", what, nwork, ct_now() - t0);
}

// The stem as the GPU executor runs it in bf16: input and weights padded from C to 8 channels
// (kernels/conv_pad.cu against its twins nn/pad.c, bit for bit), the convolution on engine v2,
// the weight gradient's first C channels taken back; against the CPU layers on C channels.
static void test_stem_pad(int N, int H, int W, int C, int K, int R, int S, int stride, int pad) {
    const int CP = 8;
    ConvShape s = conv_shape(N, H, W, C, K, R, S, stride, pad), sp = s;
    sp.C = CP;
    char what[128];
    snprintf(what, sizeof what, "stem N%d H%d W%d C%d->%d K%d %dx%d/%d", N, H, W, C, CP, K, R, S, stride);
    size_t rows = (size_t)N * H * W, wrows = (size_t)K * R * S, nout = (size_t)N * s.P * s.Q * K;
    uint64_t key = 9000000 + (uint64_t)N * 1000 + H * 10 + C;
    float *in = host_random(rows * C, key * 4, CT_BF16), *w = host_random(wrows * C, key * 4 + 1, CT_BF16);
    float *dout = host_random(nout, key * 4 + 2, CT_BF16);
    float *ref = (float *)ct_alloc((rows * CP + nout + wrows * CP) * 4), *got = (float *)ct_alloc((rows * CP + nout + wrows * CP) * 4);
    for (int dti = 0; dti < 2; dti++) {  // the pad kernel in both dtypes against its twin
        CtDtype dt = dti ? CT_BF16 : CT_F32;
        void *d_in = dev_act(in, rows * C, dt), *d_p = dev_poisoned(rows * CP * esize(dt));
        conv_pad_channels_gpu(d_p, d_in, rows, C, CP, dt, stream);
        sync();
        host_act_to(got, d_p, rows * CP, dt);
        pad_channels(ref, in, rows, C, CP);
        CHECK(memcmp(got, ref, rows * CP * 4) == 0, "%s: pad_channels %s differs from its twin", what, dti ? "bf16" : "fp32");
        cudaFree(d_in);
        cudaFree(d_p);
    }
    void *d_in = dev_act(in, rows * C, CT_BF16), *d_w = dev_act(w, wrows * C, CT_BF16);
    void *d_dout = dev_act(dout, nout, CT_BF16);
    void *d_inp = dev_poisoned(rows * CP * 2), *d_wp = dev_poisoned(wrows * CP * 2);
    void *d_out = dev_poisoned(nout * 2);
    float *d_dwp = (float *)dev_poisoned(wrows * CP * 4), *d_dw = (float *)dev_poisoned(wrows * C * 4);
    size_t nwork = conv2d_gpu_work_floats(&sp);
    float *work = nwork ? (float *)dev_poisoned(nwork * 4) : NULL;
    conv_pad_channels_gpu(d_inp, d_in, rows, C, CP, CT_BF16, stream);
    conv_pad_channels_gpu(d_wp, d_w, wrows, C, CP, CT_BF16, stream);
    int used = conv2d_forward_gpu_ex(&sp, d_out, d_inp, d_wp, CT_BF16, stream, CT_CONV_TC2);
    sync();
    CHECK(used == CT_CONV_TC2, "%s: forward ran on engine %d, not v2", what, used);
    conv2d_forward(&s, ref, in, w);
    host_act_to(got, d_out, nout, CT_BF16);
    record(K_FWD, E_TC2, rel_err_norm(got, ref, nout), 1e-2, what);
    used = conv2d_backward_weight_gpu_ex(&sp, d_dwp, d_dout, d_inp, work, CT_BF16, stream, CT_CONV_TC2);
    conv_unpad_channels_gpu(d_dw, d_dwp, wrows, CP, C, stream);
    sync();
    CHECK(used == CT_CONV_TC2, "%s: weight gradient ran on engine %d, not v2", what, used);
    float *dwp = (float *)ct_alloc(wrows * CP * 4);
    host_act_to(dwp, d_dwp, wrows * CP, CT_F32);
    unpad_channels(ref, dwp, wrows, CP, C);
    host_act_to(got, d_dw, wrows * C, CT_F32);
    CHECK(memcmp(got, ref, wrows * C * 4) == 0, "%s: unpad_channels differs from its twin", what);
    conv2d_backward_weight(&s, ref, dout, in);
    record(K_WGRAD, E_TC2, rel_err_norm(got, ref, wrows * C), fp32_out_tol(E_TC2), what);
    void *ptrs[] = {d_in, d_w, d_dout, d_inp, d_wp, d_out, d_dwp, d_dw, work};
    for (size_t i = 0; i < sizeof ptrs / sizeof ptrs[0]; i++)
        if (ptrs[i]) cudaFree(ptrs[i]);
    free(in);
    free(w);
    free(dout);
    free(ref);
    free(got);
    free(dwp);
}

static void test_linear(int N, int I, int O, int bias) {
    char what[96];
    snprintf(what, sizeof what, "N%d I%d O%d%s", N, I, O, bias ? " +bias" : "");
    size_t nin = (size_t)N * I, nout = (size_t)N * O, nw = (size_t)O * I;
    for (int dti = 0; dti < 2; dti++) {
        CtDtype dt = dti ? CT_BF16 : CT_F32;
        uint64_t key = 7000000 + (uint64_t)N * 10007 + I * 101 + O;
        float *in = host_random(nin, key * 4, dt), *w = host_random(nw, key * 4 + 1, dt);
        float *b = host_random(O, key * 4 + 2, CT_F32), *dout = host_random(nout, key * 4 + 3, CT_F32);
        void *d_in = dev_act(in, nin, dt), *d_w = dev_act(w, nw, dt);
        float *d_b = (float *)dev_act(b, O, CT_F32), *d_dout = (float *)dev_act(dout, nout, CT_F32);
        float *o1 = (float *)dev_poisoned(nout * 4), *o2 = (float *)dev_poisoned(nout * 4);
        void *di1 = dev_poisoned(nin * esize(dt)), *di2 = dev_poisoned(nin * esize(dt));
        float *dw1 = (float *)dev_poisoned(nw * 4), *dw2 = (float *)dev_poisoned(nw * 4);
        float *db1 = (float *)dev_poisoned(O * 4), *db2 = (float *)dev_poisoned(O * 4);
        size_t big = nin > nw ? nin : nw;
        if (nout > big) big = nout;
        float *ref = (float *)ct_alloc(big * 4 + 4), *ref2 = (float *)ct_alloc(big * 4 + 4);
        float *ref3 = (float *)ct_alloc(O * 4 + 4), *got = (float *)ct_alloc(big * 4 + 4);

        for (int algo = CT_CONV_GENERIC; algo <= CT_CONV_TC; algo++) {
            if (algo == CT_CONV_TC && dt != CT_BF16) continue;
            int e = algo == CT_CONV_TC ? E_TC : dt == CT_BF16 ? E_BF16 : E_F32;
            int used = 0;
            for (int rep = 0; rep < 2; rep++)
                used = linear_forward_gpu_ex(rep ? o2 : o1, d_in, d_w, bias ? d_b : NULL, N, I, O, dt, stream, algo);
            sync();
            CHECK(used == algo, "linear fwd %s: engine %d ran, %d asked", what, used, algo);
            linear_forward(ref, in, w, bias ? b : NULL, N, I, O);
            host_act_to(got, o1, nout, CT_F32);
            record(K_LIN_FWD, e, rel_err_norm(got, ref, nout), fp32_out_tol(e), what);
            CHECK(dev_equal(o1, o2, nout * 4), "linear fwd %s: reruns differ", what);
            poison(o1, nout * 4);
        }
        // Backward (the generic engine: dout is fp32).
        int e = dt == CT_BF16 ? E_BF16 : E_F32;
        for (int rep = 0; rep < 2; rep++)
            linear_backward_gpu(rep ? di2 : di1, rep ? dw2 : dw1, bias ? (rep ? db2 : db1) : NULL, d_dout, d_in, d_w,
                                N, I, O, dt, stream);
        sync();
        linear_backward(ref, ref2, bias ? ref3 : NULL, dout, in, w, N, I, O);
        host_act_to(got, di1, nin, dt);
        record(K_LIN_DIN, e, rel_err_norm(got, ref, nin), dt == CT_BF16 ? 1e-2 : 1e-5, what);
        host_act_to(got, dw1, nw, CT_F32);
        record(K_LIN_DW, e, rel_err_norm(got, ref2, nw), 1e-5, what);
        CHECK(dev_equal(di1, di2, nin * esize(dt)) && dev_equal(dw1, dw2, nw * 4), "linear bwd %s: reruns differ",
              what);
        if (bias) {
            host_act_to(got, db1, O, CT_F32);
            record(K_LIN_DB, e, rel_err_norm(got, ref3, O), 1e-5, what);
            CHECK(dev_equal(db1, db2, O * 4), "linear db %s: reruns differ", what);
        }
        // din = NULL is allowed (the first layer's input needs no gradient).
        poison(dw1, nw * 4);
        linear_backward_gpu(NULL, dw1, NULL, d_dout, d_in, d_w, N, I, O, dt, stream);
        sync();
        CHECK(dev_equal(dw1, dw2, nw * 4), "linear bwd %s without din: dw differs", what);

        void *ptrs[] = {d_in, d_w, d_b, d_dout, o1, o2, di1, di2, dw1, dw2, db1, db2};
        for (size_t i = 0; i < sizeof ptrs / sizeof ptrs[0]; i++) cudaFree(ptrs[i]);
        free(in);
        free(w);
        free(b);
        free(dout);
        free(ref);
        free(ref2);
        free(ref3);
        free(got);
    }
}

// Engine v2's forward with BN statistics in its epilogue, then the BN forward that uses them:
// - the convolution's output is bit-identical to conv2d_forward_gpu's, and a rerun gives the
//   same statistics bits;
// - the per-tile {sum, m2} agree with the CPU twin on the stored (bf16) output (float sums in a
//   different order: 1e-5 of the tile's sum of |y| for the sum, 1e-4 relative for m2);
// - the BN forward from the GPU's tiles equals the CPU twin given the same tiles bit for bit
//   (mean, invstd, running statistics, the bf16-rounded output), and its statistics agree with
//   the oracle batchnorm_forward_train on the same y (1e-5).
static void test_conv_bn_stats(int N, int H, int W, int C, int K, int R, int S, int stride, int pad) {
    ConvShape s = conv_shape(N, H, W, C, K, R, S, stride, pad);
    const CtDtype dt = CT_BF16;
    const int M = N * s.P * s.Q, nt = (M + BN_STATS_TILE_ROWS - 1) / BN_STATS_TILE_ROWS;
    char what[128];
    snprintf(what, sizeof what, "conv+bn stats N%d H%d W%d C%d K%d %dx%d/%d pad %d", N, H, W, C, K, R, S, stride, pad);
    size_t nin = (size_t)N * H * W * C, nout = (size_t)M * K, nw = (size_t)K * R * S * C;
    size_t nst = conv2d_gpu_stats_floats(M, K), nwork = batchnorm_gpu_work_floats(M, K);
    CHECK(nst == (size_t)2 * nt * K && nst + 3 * (size_t)K <= nwork, "%s: stats %zu floats, work %zu", what, nst, nwork);
    float *in = host_random(nin, 77 + nin, dt), *w = host_random(nw, 78 + nw, dt);
    void *d_in = dev_act(in, nin, dt), *d_w = dev_act(w, nw, dt);
    void *o1 = dev_poisoned(nout * 2), *o2 = dev_poisoned(nout * 2), *yb = dev_poisoned(nout * 2);
    float *work = (float *)dev_poisoned(nwork * 4), *tiles2 = (float *)dev_poisoned(nst * 4);
    conv2d_forward_gpu(&s, o1, d_in, d_w, dt, stream);
    int ran = conv2d_forward_stats_gpu(&s, o2, work, d_in, d_w, dt, stream, CT_CONV_AUTO);
    sync();
    CHECK(ran == 1, "%s: conv2d_forward_stats_gpu did not take the shape", what);
    if (ran != 1) return;
    CHECK(dev_equal(o1, o2, nout * 2), "%s: output differs from conv2d_forward_gpu's", what);
    poison(o2, nout * 2);
    conv2d_forward_stats_gpu(&s, o2, tiles2, d_in, d_w, dt, stream, CT_CONV_AUTO);
    sync();
    CHECK(dev_equal(work, tiles2, nst * 4), "%s: statistics not bit-identical on a rerun", what);
    if (engines_wg()) {  // the wgmma engine's twin of the epilogue: v2's order, so v2's bits under emulation
        poison(o2, nout * 2);
        poison(tiles2, nst * 4);
        int ran2 = conv2d_forward_stats_gpu(&s, o2, tiles2, d_in, d_w, dt, stream, CT_CONV_WGMMA);
        sync();
        CHECK(ran2 == 1, "%s: wgmma: conv2d_forward_stats_gpu did not take the shape", what);
#ifdef CTRAIN_EMU
        CHECK(dev_equal(o1, o2, nout * 2), "%s: wgmma's output differs from v2's", what);
        CHECK(dev_equal(work, tiles2, nst * 4), "%s: wgmma's statistics differ from v2's", what);
#else
        float *s1 = (float *)ct_alloc(nst * 4), *s2 = (float *)ct_alloc(nst * 4);
        host_act_to(s1, work, nst, CT_F32);
        host_act_to(s2, tiles2, nst, CT_F32);
        double es = rel_err_norm(s2, s1, nst);
        CHECK(es <= 1e-2, "%s: wgmma's statistics off v2's by %.3g", what, es);
        free(s1), free(s2);
#endif
    }
    float *y = (float *)ct_alloc(nout * 4), *got = (float *)ct_alloc(nst * 4), *want = (float *)ct_alloc(nst * 4);
    host_act_to(y, o1, nout, dt);
    host_act_to(got, work, nst, CT_F32);
    batchnorm_tile_stats(want, y, M, K);
    double e_sum = 0, e_m2 = 0;
    for (int t = 0; t < nt; t++)
        for (int c = 0; c < K; c++) {
            double abs_sum = 0;
            for (int r = t * BN_STATS_TILE_ROWS; r < M && r < (t + 1) * BN_STATS_TILE_ROWS; r++)
                abs_sum += fabs(y[(size_t)r * K + c]);
            size_t i = ((size_t)t * K + c) * 2;
            double es = fabs(got[i] - want[i]) / (abs_sum + 1e-30), em = fabs(got[i + 1] - want[i + 1]) / (fabs(want[i + 1]) + 1e-30);
            if (!(es <= e_sum)) e_sum = es;
            if (!(em <= e_m2)) e_m2 = em;
        }
    CHECK(e_sum <= 1e-5 && e_m2 <= 1e-4, "%s: tile statistics off the CPU twin: sum %.3g, m2 %.3g", what, e_sum, e_m2);
    record(K_FWD, E_TC2, e_sum > e_m2 ? e_sum : e_m2, 1e-4, what);

    // The BN forward from the GPU's tiles against the CPU twin fed the same tiles.
    float *gamma = host_random(K, 79, CT_F32), *beta = host_random(K, 80, CT_F32), *rs = host_random(2 * K, 81, CT_F32);
    for (int c = 0; c < K; c++) rs[K + c] = 1.0f + 0.5f * rs[K + c];  // a positive running variance
    float *d_gamma = (float *)dev_act(gamma, K, CT_F32), *d_beta = (float *)dev_act(beta, K, CT_F32);
    float *d_rs = (float *)dev_act(rs, 2 * K, CT_F32), *d_ms = (float *)dev_poisoned(2 * K * 4);
    batchnorm_add_forward_train_tiles_gpu(yb, d_ms, d_ms + K, d_rs, d_rs + K, o1, NULL, work, d_gamma, d_beta, M, K,
                                          0.1f, 1e-5f, 1, NULL, work, dt, stream);
    sync();
    float *gy = (float *)ct_alloc(nout * 4), *gms = (float *)ct_alloc(4 * K * 4), *cy = (float *)ct_alloc(nout * 4);
    float *cms = (float *)ct_alloc(4 * K * 4), *oy = (float *)ct_alloc(nout * 4), *oms = (float *)ct_alloc(4 * K * 4);
    host_act_to(gy, yb, nout, dt);
    host_act_to(gms, d_ms, 2 * K, CT_F32);
    host_act_to(gms + 2 * K, d_rs, 2 * K, CT_F32);
    memcpy(cms + 2 * K, rs, 2 * K * 4);
    batchnorm_add_forward_train_tiles(cy, cms, cms + K, cms + 2 * K, cms + 3 * K, y, NULL, got, gamma, beta, M, K,
                                      0.1f, 1e-5f, 1);
    size_t nd = 0;
    for (size_t i = 0; i < nout; i++) nd += ct_round_bf16(cy[i]) != gy[i];
    CHECK(!memcmp(gms, cms, 4 * K * 4), "%s: BN statistics from tiles not bit-identical to the CPU twin", what);
    CHECK(nd == 0, "%s: %zu of %zu BN outputs differ from the rounded CPU twin", what, nd, nout);
    memcpy(oms + 2 * K, rs, 2 * K * 4);
    batchnorm_forward_train(oy, oms, oms + K, oms + 2 * K, oms + 3 * K, y, gamma, beta, M, K, 0.1f, 1e-5f, 1);
    double e_st = 0;
    for (int i = 0; i < 4 * K; i++) {
        double e = fabs(gms[i] - oms[i]) / (fabs(oms[i]) + 1e-3);
        if (!(e <= e_st)) e_st = e;
    }
    CHECK(e_st <= 1e-5, "%s: statistics from tiles off batchnorm_forward_train's by %.3g", what, e_st);
    cudaFree(d_in), cudaFree(d_w), cudaFree(o1), cudaFree(o2), cudaFree(yb), cudaFree(work), cudaFree(tiles2);
    cudaFree(d_gamma), cudaFree(d_beta), cudaFree(d_rs), cudaFree(d_ms);
    free(in), free(w), free(y), free(got), free(want), free(gamma), free(beta), free(rs);
    free(gy), free(gms), free(cy), free(cms), free(oy), free(oms);
}

// BN backward reductions in engine v2's data-gradient epilogue for a conv whose input was
// relu(bn(x)) (conv2d_backward_data_bn_gpu), or, with tail, a block tail's y = relu(bn(x) + res)
// whose gradient already holds the residual path's contribution (conv2d_backward_data_tail_gpu,
// accumulating, mask y > 0): the masked gradient bit-identical to the plain data gradient (tail:
// the accumulating one) masked by the CPU twin (batchnorm_relu_grad_tiles,
// batchnorm_tail_grad_tiles), the tiles within 1e-5 of the twin's, the BN backward from them
// (batchnorm_backward_tiles_gpu) against its twin and against the unfused batchnorm_add_backward_gpu
// (mask from the stored y; tail: its residual gradient bit-identical to the masked gradient).
// Shapes with ragged row and column tiles.

static void test_dgrad_bn(int N, int H, int W, int C, int K, int R, int S, int stride, int pad, int tail) {
    ConvShape s = conv_shape(N, H, W, C, K, R, S, stride, pad);
    int M = N * H * W;
    size_t nin = (size_t)M * C, nout = (size_t)N * s.P * s.Q * K, nw = (size_t)K * R * S * C;
    char what[128];
    snprintf(what, sizeof what, "dgrad+%s N%d H%d W%d C%d K%d %dx%d/%d", tail == 2 ? "tailmask" : tail ? "tail" : "bn", N,
             H, W, C, K, R, S, stride);
    uint64_t key = 977 + ((uint64_t)M * 131 + C) * 131 + K + 7 * tail;
    float *x = host_random(nin, key, CT_BF16), *w = host_random(nw, key + 1, CT_BF16);
    float *dout = host_random(nout, key + 2, CT_BF16), *pv = host_random(4 * (size_t)C, key + 3, CT_F32);
    float *res = host_random(nin, key + 4, CT_BF16), *g0 = host_random(nin, key + 5, CT_BF16);
    float *gamma = pv, *beta = pv + C, *mean = pv + 2 * C, *invstd = pv + 3 * C;
    for (int c = 0; c < C; c++) {
        gamma[c] = 1.0f + 0.5f * gamma[c];
        beta[c] *= 0.5f;
        mean[c] *= 0.2f;
        invstd[c] = 1.5f + invstd[c];
    }
    float *y = (float *)ct_alloc(nin * 4);  // the forward's stored output: the tail's y, else for the unfused backward
    for (size_t i = 0; i < nin; i++) {
        int c = (int)(i % C);
        float o = (x[i] - mean[c]) * (gamma[c] * invstd[c]) + beta[c];
        if (tail) o = ct_round_bf16(o) + res[i];
        y[i] = o > 0.f ? ct_round_bf16(o) : 0.f;
    }
    int nt = conv2d_gpu_dgrad_bn_tiles(&s);
    size_t nwork = batchnorm_gpu_work_floats(M, C), ntile = (size_t)nt * 2 * C;
    void *d_x = dev_act(x, nin, CT_BF16), *d_w = dev_act(w, nw, CT_BF16), *d_dout = dev_act(dout, nout, CT_BF16);
    void *d_y = dev_act(y, nin, CT_BF16);
    float *d_p = (float *)dev_act(pv, 4 * (size_t)C, CT_F32);
    // tail: both gradients start with the residual path's contribution g0 and accumulate
    void *d_plain = tail ? dev_act(g0, nin, CT_BF16) : dev_poisoned(nin * 2);
    void *d_g = tail ? dev_act(g0, nin, CT_BF16) : dev_poisoned(nin * 2), *d_dx = dev_poisoned(nin * 2);
    void *d_dres = dev_poisoned(nin * 2);
    float *work = (float *)dev_poisoned(nwork * 4), *d_db = (float *)dev_poisoned(4 * (size_t)C * 4);
    int want = stride <= 2 && C % 8 == 0 && K % 8 == 0;
    // tail 2: the mask bits of y (the tail forward's relu_mask) instead of y
    uint8_t *hmask = (uint8_t *)ct_zalloc(nin / 8 + 1), *d_mask = NULL;
    for (size_t i = 0; i < nin; i++) hmask[i / 8] |= (uint8_t)((y[i] > 0.f) << (i % 8));
    if (cudaMalloc((void **)&d_mask, nin / 8 + 1) != cudaSuccess) ct_die("cudaMalloc");
    cudaMemcpy(d_mask, hmask, nin / 8 + 1, cudaMemcpyHostToDevice);
    int ran = tail ? conv2d_backward_data_tail_gpu(&s, d_g, 1, work, d_dout, d_w, tail == 2 ? NULL : d_y,
                                                   tail == 2 ? d_mask : NULL, d_x, d_p + 2 * C, CT_BF16, stream,
                                                   CT_CONV_AUTO)
                   : conv2d_backward_data_bn_gpu(&s, d_g, work, d_dout, d_w, d_x, d_p, d_p + C, d_p + 2 * C, d_p + 3 * C,
                                                 CT_BF16, stream, CT_CONV_AUTO);
    if (tail) conv2d_backward_data_acc_gpu_ex(&s, d_plain, d_dout, d_w, CT_BF16, stream, CT_CONV_TC2);
    else conv2d_backward_data_gpu_ex(&s, d_plain, d_dout, d_w, CT_BF16, stream, CT_CONV_TC2);
    sync();
    CHECK(ran == want, "%s: ran %d, expected %d", what, ran, want);
    // The same on the wgmma engine (CT_CONV_WGMMA). Under emulation both engines' GEMMs
    // add the same products in the same order, so the masked gradient and the tiles must have
    // engine v2's bits (the shared masking, the tile sums in v2's order); on a GPU the tensor cores
    // of the two add differently: within bf16 noise of v2's.
    if (ran && engines_wg()) {
        void *d_g2 = tail ? dev_act(g0, nin, CT_BF16) : dev_poisoned(nin * 2);
        float *work2 = (float *)dev_poisoned(nwork * 4);
        int ran2 = tail ? conv2d_backward_data_tail_gpu(&s, d_g2, 1, work2, d_dout, d_w, tail == 2 ? NULL : d_y,
                                                        tail == 2 ? d_mask : NULL, d_x, d_p + 2 * C, CT_BF16, stream,
                                                        CT_CONV_WGMMA)
                        : conv2d_backward_data_bn_gpu(&s, d_g2, work2, d_dout, d_w, d_x, d_p, d_p + C, d_p + 2 * C,
                                                      d_p + 3 * C, CT_BF16, stream, CT_CONV_WGMMA);
        sync();
        CHECK(ran2 == 1, "%s: wgmma: ran %d", what, ran2);
#ifdef CTRAIN_EMU
        CHECK(dev_equal(d_g2, d_g, nin * 2), "%s: wgmma's masked gradient differs from v2's", what);
        CHECK(dev_equal(work2, work, ntile * 4), "%s: wgmma's tiles differ from v2's", what);
#else
        float *a1 = (float *)ct_alloc(nin * 4 + ntile * 4), *a2 = (float *)ct_alloc(nin * 4 + ntile * 4);
        host_act_to(a1, d_g, nin, CT_BF16);
        host_act_to(a2, d_g2, nin, CT_BF16);
        host_act_to(a1 + nin, work, ntile, CT_F32);
        host_act_to(a2 + nin, work2, ntile, CT_F32);
        double eg = rel_err_norm(a2, a1, nin), et = rel_err_norm(a2 + nin, a1 + nin, ntile);
        CHECK(eg <= 1e-2 && et <= 1e-2, "%s: wgmma off v2: masked gradient %.3g, tiles %.3g", what, eg, et);
        free(a1), free(a2);
#endif
        cudaFree(d_g2);
        cudaFree(work2);
    }
    if (ran) {
        float *plain = (float *)ct_alloc(nin * 4), *g = (float *)ct_alloc(nin * 4), *gref = (float *)ct_alloc(nin * 4);
        float *tiles = (float *)ct_alloc(ntile * 4), *tref = (float *)ct_alloc(ntile * 4);
        host_act_to(plain, d_plain, nin, CT_BF16);
        host_act_to(g, d_g, nin, CT_BF16);
        host_act_to(tiles, work, ntile, CT_F32);
        // The twins on the rows in the phases' order (M rows as they are at stride 1).
        PhaseTwin tw = phase_bn_twin(gref, tref, plain, x, y, gamma, beta, mean, invstd, tail, N, H, W, stride, C);
        CHECK(tw.np == nt * 128, "%s: %d tiles, the phases make %d rows", what, nt, tw.np);
        phase_twin_free(&tw);
        CHECK(memcmp(g, gref, nin * 4) == 0, "%s: masked gradient differs from the twin's", what);
        double terr = rel_err_norm(tiles, tref, ntile);
        printf("  %-40s tiles %.3g\n", what, terr);
        CHECK(terr <= 1e-5, "%s: tiles off by %.3g", what, terr);
        // BN backward from the tiles, against its twin (same tiles) and the unfused GPU backward.
        batchnorm_backward_tiles_gpu(d_dx, d_db, d_db + C, d_g, d_x, work, nt, d_p, d_p + 2 * C, d_p + 3 * C, M, C,
                                     work, CT_BF16, stream);
        float *dx = (float *)ct_alloc(nin * 4), *dxref = (float *)ct_alloc(nin * 4), *db = (float *)ct_alloc(8 * (size_t)C);
        float *dbref = (float *)ct_alloc(8 * (size_t)C);
        sync();
        host_act_to(dx, d_dx, nin, CT_BF16);
        host_act_to(db, d_db, 2 * (size_t)C, CT_F32);
        batchnorm_backward_tiles(dxref, dbref, dbref + C, g, x, tiles, nt, gamma, mean, invstd, M, C);
        CHECK(memcmp(db, dbref, 8 * (size_t)C) == 0, "%s: dgamma/dbeta differ from the twin's", what);
        double e1 = rel_err_norm(dx, dxref, nin);
        batchnorm_add_backward_gpu(d_dx, tail ? d_dres : NULL, 0, d_db + 2 * C, d_db + 3 * C, d_plain, d_x, d_y, d_p,
                                   d_p + 2 * C, d_p + 3 * C, M, C, work, CT_BF16, stream);
        sync();
        host_act_to(dxref, d_dx, nin, CT_BF16);
        host_act_to(dbref, d_db + 2 * C, 2 * (size_t)C, CT_F32);
        double e2 = rel_err_norm(dx, dxref, nin), e3 = rel_err_norm(db, dbref, 2 * (size_t)C);
        printf("  %-40s dx vs twin %.3g, vs unfused %.3g; dgamma/dbeta vs unfused %.3g\n", what, e1, e2, e3);
        CHECK(e1 <= 1e-2 && e2 <= 1e-2 && e3 <= 1e-5, "%s: BN backward from tiles off (%.3g %.3g %.3g)", what, e1, e2, e3);
        if (tail) {  // the unfused tail's residual gradient is the fused path's masked gradient
            host_act_to(dxref, d_dres, nin, CT_BF16);
            CHECK(memcmp(dxref, g, nin * 4) == 0, "%s: residual gradient differs from the masked gradient", what);
        }
        free(plain), free(g), free(gref), free(tiles), free(tref), free(dx), free(dxref), free(db), free(dbref);
    }
    cudaFree(d_x), cudaFree(d_w), cudaFree(d_dout), cudaFree(d_y), cudaFree(d_p), cudaFree(d_plain);
    cudaFree(d_g), cudaFree(d_dx), cudaFree(d_dres), cudaFree(work), cudaFree(d_db), cudaFree(d_mask);
    free(hmask);
    free(x), free(w), free(dout), free(pv), free(y), free(res), free(g0);
}

// The weight gradient's split plan (kernels/conv_split.cu split_plan): ~4 waves of 132 SMs, cut so that
// the fp32 partials (written by the GEMM, read back by the reduction: 8 bytes x M x N per split)
// stay within a quarter of the bf16 operand bytes the main loop reads, never below one wave.
// Pinned on resnet50's batch-256 shapes at 224 (M = K_out, N = R*S*C, K = 256*P*Q) where the old
// 4-wave plan (in brackets) wrote more partial bytes than that; then one convolution small enough
// to emulate whose plan differs from the old one, on engines v1 and v2 against the CPU.
static int old_splits(int M, int N, int K, int bm, int bn) {  // the 4-wave plan before the budget
    long long tiles = (long long)((M + bm - 1) / bm) * ((N + bn - 1) / bn);
    int want = (int)((512 + tiles - 1) / tiles), most = K / 256;
    if (want > most) want = most;
    if (want > 64) want = 64;
    if (want < 1) want = 1;
    int ks = (K + want - 1) / want;
    ks = (ks + 31) / 32 * 32;
    return (K + ks - 1) / ks;
}
static void test_split_plan(void) {
    static const int pinned[][4] = {
        // M, N, K, splits on engine v2 (128x128 tiles)
        {512, 4608, 12544, 1},   // layer4 conv2 3x3: 144 tiles, past one wave alone [4]
        {2048, 512, 12544, 3},   // layer4 conv3 1x1 [8]
        {2048, 1024, 12544, 2},  // layer4 projection [4]
        {256, 2304, 50176, 13},  // layer3 conv2 [15]
        {1024, 256, 50176, 15},  // layer3 conv3 [32]
        {64, 576, 802816, 64},   // layer1 conv2: long K, the cap [64]
        {64, 392, 3211264, 64},  // stem (C padded to 8) [64]
    };
    for (size_t i = 0; i < sizeof pinned / sizeof pinned[0]; i++) {
        const int *p = pinned[i];
        int got = conv2d_gpu_wgrad_splits(CT_CONV_TC2, p[0], p[1], p[2]);
        CHECK(got == p[3], "split plan M%d N%d K%d: %d splits, expected %d", p[0], p[1], p[2], got, p[3]);
    }
    // Invariants over a sweep, both engines: at least one split, no more than the 4-wave count,
    // and above one wave's worth the partials' traffic is within budget.
    int checked = 0, differ = 0;
    for (int M = 8; M <= 2048; M *= 2)
        for (int N = 8; N <= 4608; N = N * 3 + 8)
            for (int K = 64; K <= 4000000; K = K * 5 + 32)
                for (int eng = 0; eng < 2; eng++) {
                    int bm = eng ? 128 : (M <= 64 ? 64 : 128), bn = eng ? 128 : 64;
                    int sp = conv2d_gpu_wgrad_splits(eng ? CT_CONV_TC2 : CT_CONV_TC, M, N, K);
                    long long tiles = (long long)((M + bm - 1) / bm) * ((N + bn - 1) / bn);
                    int old = old_splits(M, N, K, bm, bn);
                    CHECK(sp >= 1 && sp <= old, "split plan M%d N%d K%d: %d splits, the 4-wave plan %d", M, N, K, sp, old);
                    if (sp > 1 && tiles * (sp - 1) >= 132)
                        CHECK(8.0 * sp * M * N <= 0.25 * 2.0 * ((double)M + N) * K,
                              "split plan M%d N%d K%d: %d splits above one wave and over the byte budget", M, N, K, sp);
                    checked++, differ += sp != old;
                    if (eng) {  // the wgmma engine's plan (k_split in 64s) fits v2's work buffer
                        int sw = conv2d_gpu_wgrad_splits(CT_CONV_WGMMA, M, N, K);
                        CHECK(sw >= 1 && sw <= sp, "split plan M%d N%d K%d: wgmma %d splits, v2 %d", M, N, K, sw, sp);
                    }
                }
    CHECK(differ > 0, "the split plan never differs from the 4-wave plan");
    printf("split plan: %d shapes x engines checked, %d differ from the 4-wave plan\n", checked, differ);

    // N=3, 34x34, C=144 -> K=24, 3x3 pad 1: the plan differs from the old one on both engines.
    ConvShape s = conv_shape(3, 34, 34, 144, 24, 3, 3, 1, 1);
    int M = s.K, N = s.R * s.S * s.C, K = s.N * s.P * s.Q;
    int s2 = conv2d_gpu_wgrad_splits(CT_CONV_TC2, M, N, K), s1 = conv2d_gpu_wgrad_splits(CT_CONV_TC, M, N, K);
    int o2 = old_splits(M, N, K, 128, 128), o1 = old_splits(M, N, K, 64, 64);
    CHECK(s2 != o2 && s1 != o1, "the emulated shape no longer exercises a changed plan (v2 %d vs %d, v1 %d vs %d)", s2, o2, s1, o1);
    size_t nin = (size_t)s.N * s.H * s.W * s.C, nout = (size_t)s.N * s.P * s.Q * s.K, nw = (size_t)s.K * N;
    size_t nwork = conv2d_gpu_work_floats(&s);
    CHECK(nwork >= (size_t)(s2 > s1 ? s2 : s1) * M * N, "work buffer %zu floats too small", nwork);
    float *in = host_random(nin, 901, CT_BF16), *dout = host_random(nout, 902, CT_BF16);
    float *ref = (float *)ct_alloc(nw * 4), *got = (float *)ct_alloc(nw * 4);
    conv2d_backward_weight(&s, ref, dout, in);
    void *d_in = dev_act(in, nin, CT_BF16), *d_dout = dev_act(dout, nout, CT_BF16);
    float *work = (float *)dev_poisoned(nwork * 4);
    float *dw1 = (float *)dev_poisoned(nw * 4), *dw2 = (float *)dev_poisoned(nw * 4);
    for (int algo = CT_CONV_TC; algo <= CT_CONV_WGMMA; algo++) {
        if (skip_algo(algo) && algo != CT_CONV_TC2) continue;
        int e = algo == CT_CONV_WGMMA ? E_WG : algo == CT_CONV_TC2 ? E_TC2 : E_TC;
        for (int rep = 0; rep < 2; rep++) {
            poison(work, nwork * 4);
            int used = conv2d_backward_weight_gpu_ex(&s, rep ? dw2 : dw1, d_dout, d_in, work, CT_BF16, stream, algo);
            CHECK(used == algo, "split plan shape: engine %d ran, %d expected", used, algo);
        }
        sync();
        host_act_to(got, dw1, nw, CT_F32);
        record(K_WGRAD, e, rel_err_norm(got, ref, nw), fp32_out_tol(e), "split plan shape");
        CHECK(dev_equal(dw1, dw2, nw * 4), "split plan shape %s: reruns differ", ename[e]);
    }
    printf("split plan shape N3 H34 W34 C144 K24 3x3: v2 %d splits (4-wave plan %d), v1 %d (%d), wgmma %d\n", s2, o2,
           s1, o1, conv2d_gpu_wgrad_splits(CT_CONV_WGMMA, M, N, K));
    cudaFree(d_in), cudaFree(d_dout), cudaFree(work), cudaFree(dw1), cudaFree(dw2);
    free(in), free(dout), free(ref), free(got);
}

// A 3x3 data gradient with K output channels on a 1x1 image (M = 1: the cost is the k loop):
// engine v2's gather tables grow with k_end = 9 K (K = 2048: 172 KiB of shared memory, over an
// A100's opt-in 163 KiB; K = 704: 101 KiB, over an L4's 99 KiB), so there the default engine must
// hand it to v1 instead of failing cudaFuncSetAttribute (which ended the run). want: the engine.
static void test_dgrad_wide(int K, int want) {
    ConvShape s = conv_shape(1, 1, 1, 8, K, 3, 3, 1, 1);
    size_t nin = 8, nout = (size_t)K, nw = (size_t)K * 9 * 8;
    float *w = host_random(nw, 77 + K, CT_BF16), *dout = host_random(nout, 78 + K, CT_BF16);
    float ref[8], got[8];
    void *d_w = dev_act(w, nw, CT_BF16), *d_dout = dev_act(dout, nout, CT_BF16), *di = dev_poisoned(nin * 2);
    int used = conv2d_backward_data_gpu_ex(&s, di, d_dout, d_w, CT_BF16, stream, CT_CONV_AUTO);
    sync();
    int dev = 0;
    cudaGetDevice(&dev);
    CHECK(used == want, "dgrad 3x3 K %d on device %d: engine %d ran, %d expected", K, dev, used, want);
    conv2d_backward_data(&s, ref, dout, w);
    host_act_to(got, di, nin, CT_BF16);
    char what[64];
    snprintf(what, sizeof what, "dgrad 3x3 K %d, device %d", K, dev);
    record(K_DGRAD, used == CT_CONV_TC2 ? E_TC2 : E_TC, rel_err_norm(got, ref, nin), 1e-2, what);
    cudaFree(d_w), cudaFree(d_dout), cudaFree(di);
    free(w), free(dout);
}

#ifdef CTRAIN_EMU
// The engines on the other emulated devices (kernels/emu/device.cpp), device d of
// CTRAIN_EMU_DEVICE=h100,a100,l4: an A100 (sm_80: opt-in shared memory 163 KiB, no wgmma) and an
// L4 (sm_89: 99 KiB). Every engine on the shared cases marked CC_DEVICES (3x3 k tails, stride 2,
// 1x1, the 7x7 stem, wgmma's k-tiles; CT_CONV_WGMMA must fall back to v2 there), and the wide data
// gradients above.
static void sweep_device(int d, int wide704, int wide2048) {
    CUDA_OK(cudaSetDevice(d));
    cudaDeviceProp p;
    CUDA_OK(cudaGetDeviceProperties(&p, d));
    printf("device %d: %s (compute %d.%d, opt-in shared memory %zu bytes)\n", d, p.name, p.major, p.minor,
           p.sharedMemPerBlockOptin);
    g_dev_wgmma = p.major == 9 && p.minor == 0;
    cudaStream_t keep = stream;
    CUDA_OK(cudaStreamCreate(&stream));
    for (int i = 0; i < CONV_CASES_N; i++) {  // the cases marked CC_DEVICES
        const ConvCase *c = &CONV_CASES[i];
        if (c->flags & CC_DEVICES) test_conv(c->N, c->H, c->W, c->C, c->K, c->R, c->S, c->stride, c->pad, 0);
    }
    test_dgrad_wide(704, wide704);
    test_dgrad_wide(2048, wide2048);
    CUDA_OK(cudaStreamDestroy(stream));
    stream = keep;
    g_dev_wgmma = 1;
    CUDA_OK(cudaSetDevice(0));
}
#endif

int main(void) {
#ifdef CTRAIN_EMU
    // Three emulated devices unless the caller chose: 0 the H100 every check below runs on, then
    // an A100 and an L4 for sweep_device.
    if (!getenv("CTRAIN_EMU_DEVICES") && !getenv("CTRAIN_EMU_DEVICE")) {
        setenv("CTRAIN_EMU_DEVICES", "3", 1);
        setenv("CTRAIN_EMU_DEVICE", "h100,a100,l4", 1);
    }
#endif
    if (cudaStreamCreate(&stream) != cudaSuccess) ct_die("cudaStreamCreate");
    // The shared cases (tests/conv_cases.h), every engine and pass.
    for (int i = 0; i < CONV_CASES_N; i++) {
        const ConvCase *c = &CONV_CASES[i];
        if (c->flags & CC_ENGINES)
            test_conv(c->N, c->H, c->W, c->C, c->K, c->R, c->S, c->stride, c->pad, (c->flags & CC_RERUN) != 0);
    }
    // Random shapes; every other one with C and K multiples of 8 for the tensor cores.
    Rng r = rng_make(5, 0, 0);
    for (int i = 0; i < 8; i++) {
        int R = 1 + 2 * (int)rng_below(&r, 3), S = i % 3 ? R : 1 + 2 * (int)rng_below(&r, 3);
        int stride = 1 + (int)rng_below(&r, 3), pad = (int)rng_below(&r, (R > S ? R : S) / 2 + 1);
        int N = 1 + (int)rng_below(&r, 3);
        int H = R + (int)rng_below(&r, 6), W = S + (int)rng_below(&r, 6);
        int C = 1 + (int)rng_below(&r, 20), K = 1 + (int)rng_below(&r, 20);
        if (i % 2) {
            C = 8 * (1 + (int)rng_below(&r, 3));
            K = 8 * (1 + (int)rng_below(&r, 3));
        }
        test_conv(N, H, W, C, K, R, S, stride, pad, i == 0);
    }
    test_stem_pad(2, 13, 11, 3, 16, 7, 7, 2, 3);  // ResNet's 7x7/2 stem
    test_stem_pad(1, 9, 9, 3, 8, 3, 3, 1, 1);     // CIFAR ResNet's 3x3 stem
    test_stem_pad(2, 6, 7, 1, 8, 3, 3, 2, 1);     // one channel (grey input)
    for (int i = 0; i < CONV_CASES_N; i++) {
        const ConvCase *c = &CONV_CASES[i];
        if (c->flags & CC_BN_STATS) test_conv_bn_stats(c->N, c->H, c->W, c->C, c->K, c->R, c->S, c->stride, c->pad);
    }
    for (int tail = 0; tail < 3; tail++)  // relu(bn(x)); a block tail, mask from y; from its mask bits
        for (int i = 0; i < CONV_CASES_N; i++) {
            const ConvCase *c = &CONV_CASES[i];
            if (c->flags & CC_BN_DGRAD) test_dgrad_bn(c->N, c->H, c->W, c->C, c->K, c->R, c->S, c->stride, c->pad, tail);
        }
    test_split_plan();
#ifdef CTRAIN_EMU
    {
        int ndev = 1;
        cudaGetDeviceCount(&ndev);
        cudaDeviceProp p0;
        CUDA_OK(cudaGetDeviceProperties(&p0, 0));
        if (p0.sharedMemPerBlockOptin >= 200 * 1024) {  // an sm_90-sized device 0: v2 takes both
            test_dgrad_wide(704, CT_CONV_TC2);
            test_dgrad_wide(2048, CT_CONV_TC2);
        }
        for (int d = 1; d < ndev; d++) {
            cudaDeviceProp p;
            CUDA_OK(cudaGetDeviceProperties(&p, d));
            // Engine v2 needs 64 KiB + 192 bytes per 32 of k_end (FWD/DGRAD tables).
            size_t v704 = 65536 + (size_t)(9 * 704 / 32) * 192, v2048 = 65536 + (size_t)(9 * 2048 / 32) * 192;
            sweep_device(d, v704 <= p.sharedMemPerBlockOptin ? CT_CONV_TC2 : CT_CONV_TC,
                         v2048 <= p.sharedMemPerBlockOptin ? CT_CONV_TC2 : CT_CONV_TC);
        }
    }
#endif
    test_linear(1, 5, 3, 1);
    test_linear(4, 16, 10, 1);
    test_linear(3, 24, 70, 0);
    test_linear(5, 33, 7, 1);
    test_linear(2, 64, 130, 1);

    printf("%-12s %-18s %5s %12s\n", "kernel", "engine", "runs", "worst err");
    for (int k = 0; k < NKERN; k++)
        for (int e = 0; e < NENG; e++)
            if (runs[k][e]) printf("%-12s %-18s %5d %12.3g\n", kname[k], ename[e], runs[k][e], worst[k][e]);
    cudaStreamDestroy(stream);
    return test_summary("emu_conv");
}
