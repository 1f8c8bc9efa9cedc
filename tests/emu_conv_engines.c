// The conv engines' table and its dispatcher (kernels/conv.cu), under emulation:
// - each engine's supports() against the rules kernels/kernels.h states, written out here on their
//   own (wgmma and v2: bf16 dense convolutions with channel counts multiples of 8, their BN
//   epilogues at stride 1 and 2, wgmma on compute 9.0 only; v2 also grouped ones, with the same
//   epilogues under the same conditions, whose C and K are multiples of 8 and whose channels per
//   group Cg, Kg are each 4 or a multiple of 8 up to 64 with Cg * max(1, 16 / Kg) <= 64 and R*S <= 32 (its block-diagonal path; every case
//   fits the shared memory of both devices); v1: any bf16 dense convolution, no epilogue; generic:
//   anything without an epilogue), on every pass of the shared conv cases
//   (tests/conv_cases.h) in both dtypes, with and without the epilogue, on an H100 and an A100;
// - the dispatcher obeys the table: for every engine asked, pass and case, the engine it runs
//   (conv_engine_for) is the first from the one asked on, in the fallback order, whose supports()
//   accepts the pass (none: an epilogue runs nothing), CT_CONV_AUTO is v2's request;
// - the plan is what runs: on a few cases every pass is launched with every engine asked and the
//   engine the entry point reports must be the one conv_engine_for named.
#include <string.h>

#include "kernels/kernels.h"
#include "nn/layers.h"
#include "tests/conv_cases.h"
#include "tests/emu_util.h"
#include "tests/test.h"
#include "util/common.h"

static const char *PASS[3] = {"fwd", "dgrad", "wgrad"};

// The rules, independently of kernels/conv.cu. dev_wgmma: the device runs the wgmma engine.
static int spec(const char *engine, int pass, const ConvShape *s, CtDtype dt, int epi, int dev_wgmma) {
    int bf16 = dt == CT_BF16, dense = conv_groups(s) == 1, v8 = s->C % 8 == 0 && s->K % 8 == 0;
    if (pass == CT_CONV_WGRAD) epi = 0;  // the weight gradient has no epilogue to ask
    int epi_ok = !epi || pass == CT_CONV_FWD || s->stride <= 2;
    if (!strcmp(engine, "generic")) return !epi;
    if (!strcmp(engine, "v1")) return bf16 && dense && !epi;
    if (!strcmp(engine, "v2")) {
        if (dense) return bf16 && v8 && epi_ok;
        const int Cg = s->C / conv_groups(s), Kg = s->K / conv_groups(s);
        const int cg_ok = Cg == 4 || (Cg % 8 == 0 && Cg <= 64), kg_ok = Kg == 4 || (Kg % 8 == 0 && Kg <= 64);
        return bf16 && v8 && epi_ok && cg_ok && kg_ok && Cg * (Kg < 16 ? 16 / Kg : 1) <= 64 && s->R * s->S <= 32;
    }
    if (!strcmp(engine, "wgmma")) return bf16 && dense && v8 && epi_ok && dev_wgmma;
    CHECK(0, "unknown engine %s in the table", engine);
    return 0;
}

static int streq(const char *a, const char *b) { return a == b || (a && b && !strcmp(a, b)); }

static void check_case(const ConvCase *c, int dev_wgmma, const char *dev) {
    const ConvShape s = conv_case_shape(c, 0);
    const int ne = conv_engine_count();
    for (int dti = 0; dti < 2; dti++) {
        const CtDtype dt = dti ? CT_BF16 : CT_F32;
        for (int pass = 0; pass < 3; pass++)
            for (int epi = 0; epi < (pass == CT_CONV_WGRAD ? 1 : 2); epi++) {
                int sup[8];
                for (int i = 0; i < ne; i++) {
                    sup[i] = conv_engine_supports(i, pass, &s, dt, epi);
                    int want = spec(conv_engine_name(i), pass, &s, dt, epi, dev_wgmma);
                    CHECK(sup[i] == want, "%s %s %s %s%s: %s supports() says %d, the rules %d", dev, c->name, PASS[pass],
                          dti ? "bf16" : "fp32", epi ? " +epilogue" : "", conv_engine_name(i), sup[i], want);
                }
                for (int i = 0; i < ne; i++) {
                    int algo = conv_engine_algo(i);
                    if (algo == CT_CONV_TC && dt == CT_F32) continue;  // a fatal error by contract
                    const char *want = NULL;
                    for (int j = i; j < ne && !want; j++)
                        if (sup[j]) want = conv_engine_name(j);
                    const char *got = conv_engine_for(pass, &s, dt, algo, epi);
                    CHECK(streq(got, want), "%s %s %s %s%s asked %s: %s ran, the table says %s", dev, c->name, PASS[pass],
                          dti ? "bf16" : "fp32", epi ? " +epilogue" : "", conv_engine_name(i), got ? got : "nothing",
                          want ? want : "nothing");
                    if (algo == CT_CONV_TC2)
                        CHECK(streq(conv_engine_for(pass, &s, dt, CT_CONV_AUTO, epi), got),
                              "%s %s %s: CT_CONV_AUTO is not v2's request", dev, c->name, PASS[pass]);
                }
            }
    }
}

// Every pass launched with every engine asked: the engine reported is the planned one.
static void check_live(const ConvCase *c) {
    const ConvShape s = conv_case_shape(c, 0);
    const size_t ni = (size_t)s.N * s.H * s.W * s.C, no = (size_t)s.N * s.P * s.Q * s.K;
    const size_t nw = (size_t)s.K * s.R * s.S * (s.C / conv_groups(&s)), nwork = conv2d_gpu_work_floats(&s);
    for (int dti = 0; dti < 2; dti++) {
        const CtDtype dt = dti ? CT_BF16 : CT_F32;
        void *in = dev_act(NULL, ni, dt), *out = dev_act(NULL, no, dt), *w = dev_act(NULL, nw, dt);
        void *din = dev_act(NULL, ni, dt), *dw = dev_act(NULL, nw, CT_F32), *work = nwork ? dev_act(NULL, nwork, CT_F32) : NULL;
        CT_CUDA_CHECK(cudaMemset(in, 0, ni * (dti ? 2 : 4)));
        CT_CUDA_CHECK(cudaMemset(w, 0, nw * (dti ? 2 : 4)));
        CT_CUDA_CHECK(cudaMemset(out, 0, no * (dti ? 2 : 4)));
        for (int i = 0; i < conv_engine_count(); i++) {
            int algo = conv_engine_algo(i);
            if (algo == CT_CONV_TC && dt == CT_F32) continue;
            int r[3];
            r[0] = conv2d_forward_gpu_ex(&s, out, in, w, dt, NULL, algo);
            r[1] = conv2d_backward_data_gpu_ex(&s, din, out, w, dt, NULL, algo);
            r[2] = conv2d_backward_weight_gpu_ex(&s, (float *)dw, out, in, (float *)work, dt, NULL, algo);
            CT_CUDA_CHECK(cudaDeviceSynchronize());
            for (int p = 0; p < 3; p++) {
                const char *plan = conv_engine_for(p, &s, dt, algo, 0);
                CHECK(streq(conv_engine_algo_name(r[p]), plan), "%s %s %s asked %s: ran %s, planned %s", c->name, PASS[p],
                      dti ? "bf16" : "fp32", conv_engine_name(i), conv_engine_algo_name(r[p]), plan ? plan : "nothing");
            }
        }
        cudaFree(in), cudaFree(out), cudaFree(w), cudaFree(din), cudaFree(dw);
        if (work) cudaFree(work);
    }
}

int main(void) {
#ifdef CTRAIN_EMU
    if (!getenv("CTRAIN_EMU_DEVICES") && !getenv("CTRAIN_EMU_DEVICE")) {  // an H100, then an A100 (no wgmma)
        setenv("CTRAIN_EMU_DEVICES", "2", 1);
        setenv("CTRAIN_EMU_DEVICE", "h100,a100", 1);
    }
#endif
    int ndev = 1;
    cudaGetDeviceCount(&ndev);
    CHECK(conv_engine_count() == 4, "%d engines in the table", conv_engine_count());
    const char *order[] = {"wgmma", "v2", "v1", "generic"};
    for (int i = 0; i < conv_engine_count() && i < 4; i++)
        CHECK(streq(conv_engine_name(i), order[i]), "engine %d is %s, the fallback order has %s", i, conv_engine_name(i), order[i]);
    int cases = 0, live = 0;
    for (int d = 0; d < ndev; d++) {
        cudaDeviceProp p;
        CT_CUDA_CHECK(cudaSetDevice(d));
        CT_CUDA_CHECK(cudaGetDeviceProperties(&p, d));
        const int dev_wgmma = p.major == 9 && p.minor == 0;
        for (int k = 0; k < CONV_CASES_N; k++) {
            check_case(&CONV_CASES[k], dev_wgmma, p.name);
            cases++;
        }
    }
    CT_CUDA_CHECK(cudaSetDevice(0));
    for (int k = 0; k < CONV_CASES_N; k++)
        if (CONV_CASES[k].flags & CC_DISPATCH_LIVE) check_live(&CONV_CASES[k]), live++;
    CHECK(live >= 3, "only %d cases launched live", live);
    printf("%d cases x devices checked against the rules, %d launched live\n", cases, live);
    return test_summary("emu_conv_engines");
}
