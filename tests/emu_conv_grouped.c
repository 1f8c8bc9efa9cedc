// Grouped convolutions on the GPU (kernels/conv_generic.cu's ct_conv_grouped_run, through
// kernels/conv.cu's entry points) under emulation, against the CPU oracle (nn/conv_grouped.c):
// - forward, data gradient (written and accumulated in place) and weight gradient, fp32 and bf16
//   storage, on awkward shapes: groups 2-64, 1-32 channels per group, Cg != Kg, stride 2, odd maps,
//   a weight gradient long enough to split its reduction (the partials' work buffer);
// - the engine that runs is the one the rules below name: bf16 asked of v2, wgmma or auto runs on
//   v2's block-diagonal tensor-core path (kernels/conv_tcg.cu) where the shape qualifies (tc_rule),
//   everything else on the generic engine, and the entry point says so; the fused BN epilogues
//   (statistics in the forward, BN backward in the data gradient) run on that path and decline
//   the rest (fp32, the generic engine's shapes), running nothing, so the executor takes the plain
//   passes (test_dgrad_bn below has the data gradient's checks);
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
#include "tests/phase_rows.h"
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

// ---------------------------------------------------------------------------------------------
// The data gradient's BN backward epilogue on v2's grouped path (kernels/conv_tcg.cu with
// kernels/conv_bn_epi.cuh's conv_bn_mask_pair and conv_tile_gsums): ResNeXt's conv2, whose input
// was relu(bn1(x)) (conv2d_backward_data_bn_gpu), and a grouped conv reading a block tail's
// y = relu(bn(x) + res), accumulating (conv2d_backward_data_tail_gpu, the mask from y or from its
// bits). Against the unfused route on the same GPU and the CPU twins:
// - taken exactly where v2's grouped path takes the data gradient at stride 1 or 2, running on it;
//   declined (nothing written) elsewhere, so the executor takes the plain passes;
// - the masked gradient bit for bit the plain grouped data gradient (tail: the accumulating one)
//   masked by the CPU twin (batchnorm_relu_grad_tiles / batchnorm_tail_grad_tiles) on the rows in
//   the stride phases' order;
// - the tiles {sum g, sum g (x - mean)} bit for bit those sums added in v2's order (v2_order_sum:
//   the dense engines' tiles, whose order the shared epilogue keeps), and within 1e-5 of the twin's
//   row-order sums; bit for bit again on a rerun;
// - the BN backward from the tiles (batchnorm_backward_tiles_gpu) against the unfused
//   batchnorm_add_backward_gpu: dx within bf16 noise (1e-2), dgamma and dbeta within 1e-5.

// One tile column's sum as the mma.sync engines' epilogue adds it: row warp wm's lane group gi adds
// rows 64wm + 16mi + gi + 8h (mi < 4, h < 2) in that order, the lane groups meet by the shuffle tree
// ((0+1)+(2+3))+((4+5)+(6+7)), the row warps as warp 0 + warp 1. v[r * ld]: row r's value.
static float v2_order_sum(const float *v, size_t ld, int rows) {
    float part[2];
    for (int wm = 0; wm < 2; wm++) {
        float a[8];
        for (int gi = 0; gi < 8; gi++) {
            a[gi] = 0.f;
            for (int mi = 0; mi < 4; mi++)
                for (int h = 0; h < 2; h++) {
                    int r = wm * 64 + mi * 16 + gi + h * 8;
                    if (r < rows) a[gi] += v[(size_t)r * ld];
                }
        }
        part[wm] = ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
    }
    return part[0] + part[1];
}

static int bn_dgrad_cases;  // fused grouped data gradients checked (taken and compared)
static const char *BN_VARIANT[] = {"bn", "tail", "tailmask"};

// tail 0: relu(bn(x)) input; 1: a tail's y, mask from y; 2: from the tail forward's mask bits.
static void test_dgrad_bn(const ConvShape *sp, int tail) {
    const ConvShape s = *sp;
    const int N = s.N, H = s.H, W = s.W, C = s.C, K = s.K, G = conv_groups(&s), M = N * H * W;
    const size_t nin = (size_t)M * C, nout = (size_t)N * s.P * s.Q * K, nw = (size_t)K * s.R * s.S * (C / G);
    char what[160];
    snprintf(what, sizeof what, "grouped dgrad+%s N%d %dx%d C%d K%d g%d %dx%d/%d", BN_VARIANT[tail], N, H, W, C, K, G,
             s.R, s.S, s.stride);
    const uint64_t key = 7717 + (((uint64_t)M * 131 + C) * 131 + K) * 67 + (uint64_t)G * 5 + (uint64_t)tail;
    float *x = host_random(nin, key, CT_BF16), *w = host_random(nw, key + 1, CT_BF16);
    float *dout = host_random(nout, key + 2, CT_BF16), *pv = host_random(4 * (size_t)C, key + 3, CT_F32);
    float *res = host_random(nin, key + 4, CT_BF16), *g0 = host_random(nin, key + 5, CT_BF16);
    float *gamma = pv, *beta = pv + C, *mean = pv + 2 * C, *invstd = pv + 3 * C;
    for (int c = 0; c < C; c++) {  // about half of the ReLU's inputs positive
        gamma[c] = 1.0f + 0.5f * gamma[c];
        beta[c] *= 0.5f;
        mean[c] *= 0.2f;
        invstd[c] = 1.5f + invstd[c];
    }
    float *y = (float *)ct_alloc(nin * 4);  // the forward's stored output: the tail's y, else the unfused backward's
    for (size_t i = 0; i < nin; i++) {
        int c = (int)(i % C);
        float o = (x[i] - mean[c]) * (gamma[c] * invstd[c]) + beta[c];
        if (tail) o = ct_round_bf16(o) + res[i];
        y[i] = o > 0.f ? ct_round_bf16(o) : 0.f;
    }
    uint8_t *hmask = (uint8_t *)ct_zalloc(nin / 8 + 1), *d_mask = NULL;
    for (size_t i = 0; i < nin; i++) hmask[i / 8] |= (uint8_t)((y[i] > 0.f) << (i % 8));
    if (cudaMalloc((void **)&d_mask, nin / 8 + 1) != cudaSuccess) ct_die("cudaMalloc");
    cudaMemcpy(d_mask, hmask, nin / 8 + 1, cudaMemcpyHostToDevice);
    const int nt = conv2d_gpu_dgrad_bn_tiles(&s);
    const size_t nwork = batchnorm_gpu_work_floats(M, C), ntile = (size_t)nt * 2 * C;
    void *d_x = dev_act(x, nin, CT_BF16), *d_w = dev_act(w, nw, CT_BF16), *d_dout = dev_act(dout, nout, CT_BF16);
    void *d_y = dev_act(y, nin, CT_BF16);
    float *d_p = (float *)dev_act(pv, 4 * (size_t)C, CT_F32);
    // tail: both gradients start with the residual path's contribution g0 and accumulate onto it
    void *d_plain = tail ? dev_act(g0, nin, CT_BF16) : dev_poisoned(nin * 2);
    void *d_g = tail ? dev_act(g0, nin, CT_BF16) : dev_poisoned(nin * 2), *d_g2 = tail ? dev_act(g0, nin, CT_BF16) : dev_poisoned(nin * 2);
    void *d_dx = dev_poisoned(nin * 2), *d_dres = dev_poisoned(nin * 2);
    float *work = (float *)dev_poisoned(nwork * 4), *work2 = (float *)dev_poisoned(nwork * 4);
    float *d_db = (float *)dev_poisoned(4 * (size_t)C * 4);
    ct_stream_t st = (ct_stream_t)stream;
#define RUN_FUSED(dg, wk)                                                                                           \
    (tail ? conv2d_backward_data_tail_gpu(&s, dg, 1, wk, d_dout, d_w, tail == 2 ? NULL : d_y, tail == 2 ? d_mask : NULL, \
                                          d_x, d_p + 2 * C, CT_BF16, st, CT_CONV_AUTO)                              \
          : conv2d_backward_data_bn_gpu(&s, dg, wk, d_dout, d_w, d_x, d_p, d_p + C, d_p + 2 * C, d_p + 3 * C, CT_BF16, \
                                        st, CT_CONV_AUTO))
    const int ran = RUN_FUSED(d_g, work);
    const int plain = tail ? conv2d_backward_data_acc_gpu_ex(&s, d_plain, d_dout, d_w, CT_BF16, st, CT_CONV_AUTO)
                           : conv2d_backward_data_gpu_ex(&s, d_plain, d_dout, d_w, CT_BF16, st, CT_CONV_AUTO);
    sync();
    const int want = tc_rule(&s) && s.stride <= 2;
    CHECK(ran == want, "%s: the fused BN backward ran %d, the rules say %d", what, ran, want);
    CHECK(!want || plain == CT_CONV_TC2, "%s: the plain data gradient ran engine %d, not v2's grouped path", what, plain);
    if (!ran) {  // declined: nothing written (the executor then runs the plain passes)
        float *t = (float *)ct_alloc(ntile * 4 + 4);
        host_act_to(t, work, ntile, CT_F32);
        int untouched = 1;
        for (size_t i = 0; i < ntile; i++) untouched &= isnan(t[i]);
        CHECK(untouched, "%s: declined, but tiles were written", what);
        free(t);
    } else {
        bn_dgrad_cases++;
        float *pl = (float *)ct_alloc(nin * 4), *g = (float *)ct_alloc(nin * 4), *gref = (float *)ct_alloc(nin * 4);
        float *tiles = (float *)ct_alloc(ntile * 4), *tref = (float *)ct_alloc(ntile * 4);
        host_act_to(pl, d_plain, nin, CT_BF16);
        host_act_to(g, d_g, nin, CT_BF16);
        host_act_to(tiles, work, ntile, CT_F32);
        // The twins on the rows in the phases' order.
        PhaseTwin tw = phase_bn_twin(gref, tref, pl, x, y, gamma, beta, mean, invstd, tail, N, H, W, s.stride, C);
        const int np = tw.np, *order = tw.order;
        const float *px = tw.px, *pg = tw.pg;
        CHECK(np == nt * 128, "%s: %d tiles, the phases make %d rows", what, nt, np);
        CHECK(memcmp(g, gref, nin * 4) == 0, "%s: masked gradient differs from the plain one masked by the twin", what);
        // The tiles in v2's order from the twin's masked gradient: bit for bit.
        float *gd = (float *)ct_alloc((size_t)np * C * 4);
        for (int i = 0; i < np; i++)
            for (int c = 0; c < C; c++) gd[(size_t)i * C + c] = pg[(size_t)i * C + c] * (px[(size_t)i * C + c] - mean[c]);
        int bad = 0, first = -1;
        for (int t = 0; t < nt; t++) {
            int rows = 0;
            while (rows < 128 && order[t * 128 + rows] >= 0) rows++;
            for (int c = 0; c < C; c++) {
                float s0 = v2_order_sum(pg + (size_t)t * 128 * C + c, (size_t)C, rows);
                float s1 = v2_order_sum(gd + (size_t)t * 128 * C + c, (size_t)C, rows);
                size_t i = ((size_t)t * C + c) * 2;
                if (memcmp(&tiles[i], &s0, 4) || memcmp(&tiles[i + 1], &s1, 4)) {
                    if (first < 0) first = (int)(i / 2);
                    bad++;
                }
            }
        }
        CHECK(bad == 0, "%s: %d of %d tile columns differ from v2's order (first: tile %d column %d)", what, bad,
              nt * C, first < 0 ? 0 : first / C, first < 0 ? 0 : first % C);
        const double terr = rel_err_norm(tiles, tref, ntile);
        CHECK(terr <= 1e-5, "%s: tiles off the twin's by %.3g", what, terr);
        // A rerun: the same bits.
        const int ran2 = RUN_FUSED(d_g2, work2);
        sync();
        CHECK(ran2 && dev_equal(d_g, d_g2, nin * 2) && dev_equal(work, work2, ntile * 4), "%s: rerun not bit-identical", what);
        // BN backward from the tiles against the unfused GPU backward (mask from the stored y).
        batchnorm_backward_tiles_gpu(d_dx, d_db, d_db + C, d_g, d_x, work, nt, d_p, d_p + 2 * C, d_p + 3 * C, M, C,
                                     work, CT_BF16, stream);
        float *dx = (float *)ct_alloc(nin * 4), *dxref = (float *)ct_alloc(nin * 4), *db = (float *)ct_alloc(8 * (size_t)C);
        float *dbref = (float *)ct_alloc(8 * (size_t)C);
        sync();
        host_act_to(dx, d_dx, nin, CT_BF16);
        host_act_to(db, d_db, 2 * (size_t)C, CT_F32);
        batchnorm_add_backward_gpu(d_dx, tail ? d_dres : NULL, 0, d_db + 2 * C, d_db + 3 * C, d_plain, d_x, d_y, d_p,
                                   d_p + 2 * C, d_p + 3 * C, M, C, work2, CT_BF16, stream);
        sync();
        host_act_to(dxref, d_dx, nin, CT_BF16);
        host_act_to(dbref, d_db + 2 * C, 2 * (size_t)C, CT_F32);
        const double e1 = rel_err_norm(dx, dxref, nin), e2 = rel_err_norm(db, dbref, 2 * (size_t)C);
        printf("    %-52s %d tiles: v2-order bits %s, vs twin %.2g; dx vs unfused %.2g, dgamma/dbeta %.2g\n", what, nt,
               bad ? "DIFFER" : "equal", terr, e1, e2);
        CHECK(e1 <= 1e-2 && e2 <= 1e-5, "%s: BN backward from the tiles off the unfused one (dx %.3g, dgamma/dbeta %.3g)",
              what, e1, e2);
        if (tail) {  // the unfused tail's residual gradient is the fused path's masked gradient
            host_act_to(dxref, d_dres, nin, CT_BF16);
            CHECK(memcmp(dxref, g, nin * 4) == 0, "%s: residual gradient differs from the masked gradient", what);
        }
        phase_twin_free(&tw), free(gd);
        free(pl), free(g), free(gref), free(tiles), free(tref), free(dx), free(dxref), free(db), free(dbref);
    }
#undef RUN_FUSED
    cudaFree(d_x), cudaFree(d_w), cudaFree(d_dout), cudaFree(d_y), cudaFree(d_p), cudaFree(d_plain), cudaFree(d_g);
    cudaFree(d_g2), cudaFree(d_dx), cudaFree(d_dres), cudaFree(work), cudaFree(work2), cudaFree(d_db), cudaFree(d_mask);
    free(hmask), free(x), free(w), free(dout), free(pv), free(y), free(res), free(g0);
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
        // the CPU twin's (batchnorm_tile_stats) of that output.
        const int M = (int)(no / K), nt = (M + BN_STATS_TILE_ROWS - 1) / BN_STATS_TILE_ROWS;
        const size_t nst = (size_t)2 * K * nt;
        float *tiles = (float *)dev_poisoned(nst * 4), *tiles2 = (float *)dev_poisoned(nst * 4);
        float *stats_dev = (float *)dev_poisoned((size_t)4 * C * 4);
        void *o2 = dev_poisoned(no * 2);
        int st_ran = conv2d_forward_stats_gpu(&s, o2, tiles, din_, dw_, dt, (ct_stream_t)stream, CT_CONV_AUTO);
        sync();
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
        // The data gradient's BN backward epilogue, each form (test_dgrad_bn).
        for (int tail = 0; tail < 3; tail++) test_dgrad_bn(&s, tail);
    }
    if (dt == CT_F32 && algo == CT_CONV_GENERIC) {  // bf16 only: fp32 runs the plain passes
        float *tl = (float *)dev_poisoned((size_t)2 * C * conv2d_gpu_dgrad_bn_tiles(&s) * 4);
        int bn_ran = conv2d_backward_data_bn_gpu(&s, dd, tl, ddo, dw_, din_, (float *)dgw, (float *)dgw, (float *)dgw,
                                                 (float *)dgw, dt, (ct_stream_t)stream, CT_CONV_AUTO);
        int tail_ran = conv2d_backward_data_tail_gpu(&s, dd, 1, tl, ddo, dw_, din_, NULL, din_, (float *)dgw, dt,
                                                     (ct_stream_t)stream, CT_CONV_AUTO);
        sync();
        CHECK(!bn_ran && !tail_ran, "grouped conv g%d fp32: the fused BN backward ran (%d, %d)", G, bn_ran, tail_ran);
        cudaFree(tl);
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
    // The fused BN backward on shapes past conv_cases.h's: several 128-row tiles per stride phase,
    // ragged; a last slab of fewer groups than the CTA holds (48 groups of 4: 32 + 16; 12 groups
    // with Cg 8, Kg 16: 8 + 4), so a CTA's columns stop short of 128 and the next slab's start past 0.
    {
        static const int more[][9] = {
            // N, H, W, C, K, R, stride, pad, groups
            {2, 19, 17, 64, 64, 3, 2, 1, 16},
            {1, 9, 7, 192, 192, 3, 1, 1, 48},
            {1, 11, 13, 96, 192, 3, 2, 1, 12},
            {1, 12, 11, 128, 128, 3, 1, 1, 32},  // 132 rows: a one-row last tile
        };
        for (size_t i = 0; i < CT_ARRAY_LEN(more); i++) {
            const int *v = more[i];
            const ConvShape s = conv_shape_g(v[0], v[1], v[2], v[3], v[4], v[5], v[5], v[6], v[7], v[8]);
            for (int tail = 0; tail < 3; tail++) test_dgrad_bn(&s, tail);
        }
    }
    CHECK(bn_dgrad_cases >= 40, "only %d grouped runs checked the fused BN backward", bn_dgrad_cases);
    {  // the last shape must have split its weight gradient, or the work-buffer path went untested
        const ConvShape s = conv_shape_g(2, 16, 16, 8, 8, 3, 3, 1, 1, 2);
        CHECK(conv2d_gpu_work_floats(&s) > 0, "the split weight-gradient shape did not split");
    }
    cudaStreamDestroy(stream);
    return test_summary("emu_conv_grouped");
}
