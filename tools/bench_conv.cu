// GPU benchmark of the convolution engines on the shared conv cases (tests/conv_cases.h: ResNet-50's
// layers at the given batch by default; --cases: the awkward small ones the emulated tests run, a
// correctness sweep on silicon): the generic implicit GEMM
// (fp32 and bf16) and the bf16 tensor-core engines (v1; v2 where it takes the shape, a '*'
// marks a v1 fallback; the Hopper wgmma engine on compute 9.0 for the forward, the data gradient
// and the weight gradient, a '*' marks a v2/v1 fallback), side by side, in ms and TFLOP/s, plus the relative difference of each
// tensor-core result to the generic bf16 one (a correctness check on real hardware, where the
// emulated tests cannot go). Needs a GPU; build and run with
//   tools/bench_gpu.sh [batch] [iters] [--cases]
// (grouped cases: the v2 column is its block-diagonal path (kernels/conv_tcg.cu) where it takes the
// shape; v1 and wgmma hand them on, so their columns are starred)
// (build.sh does not build .cu tools).
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

#include "kernels/kernels.h"
#include "tests/conv_cases.h"
#include "util/bf16.h"
#include "util/common.h"

#define CK(x)                                                                                   \
    do {                                                                                        \
        cudaError_t e_ = (x);                                                                   \
        if (e_ != cudaSuccess) ct_die("%s:%d: %s: %s", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
    } while (0)

static void fill(void *d, size_t n, CtDtype dt, unsigned seed) {
    size_t es = dt == CT_BF16 ? 2 : 4;
    unsigned char *h = (unsigned char *)malloc(n * es);
    unsigned x = seed * 2654435761u + 1;
    for (size_t i = 0; i < n; i++) {
        x = x * 1664525u + 1013904223u;
        float f = ((x >> 8) * (1.0f / 16777216.0f)) * 2.f - 1.f;
        if (dt == CT_BF16) {
            uint16_t b = (uint16_t)(ct_f2u(f) >> 16);  // truncated: any bf16 data will do for timing
            memcpy(h + 2 * i, &b, 2);
        } else {
            memcpy(h + 4 * i, &f, 4);
        }
    }
    CK(cudaMemcpy(d, h, n * es, cudaMemcpyHostToDevice));
    free(h);
}

static double rel_diff(const void *a, const void *b, size_t n, int bf16) {
    size_t es = bf16 ? 2 : 4;
    unsigned char *x = (unsigned char *)malloc(n * es), *y = (unsigned char *)malloc(n * es);
    CK(cudaMemcpy(x, a, n * es, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(y, b, n * es, cudaMemcpyDeviceToHost));
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        float u, v;
        if (bf16) {
            u = ct_bf16_to_f32(((uint16_t *)x)[i]);
            v = ct_bf16_to_f32(((uint16_t *)y)[i]);
        } else {
            u = ((float *)x)[i];
            v = ((float *)y)[i];
        }
        num += (double)(u - v) * (u - v);
        den += (double)v * v;
    }
    free(x);
    free(y);
    return sqrt(num / (den > 0 ? den : 1));
}

int main(int argc, char **argv) {
    int B = 64, iters = 10, small = 0, npos = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--cases")) small = 1;
        else if (npos++ == 0) B = atoi(argv[i]);
        else iters = atoi(argv[i]);
    }
    if (B <= 0 || iters <= 0) ct_die("usage: bench_conv [batch] [iters] [--cases] (batch and iters > 0)");
    const ConvCase *cases = small ? CONV_CASES : CONV_BENCH_CASES;
    const int ncases = small ? CONV_CASES_N : CONV_BENCH_CASES_N;
    cudaStream_t st;
    CK(cudaStreamCreate(&st));
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    printf("device %s, %s, %d iterations per timing\n", prop.name, small ? "the small conv cases (their own batch)" : "ResNet-50 cases", iters);
    if (!small) printf("batch %d\n", B);
    printf("%-18s %-6s %9s %9s %9s %9s %9s %9s %9s %9s %9s %9s %10s %10s %10s\n", "layer", "pass", "f32 ms",
           "f32 TF/s", "bf16 ms", "bf16 TF/s", "tc ms", "tc TF/s", "tc2 ms", "tc2 TF/s", "wg ms", "wg TF/s",
           "tc-vs-bf16", "tc2-vs-bf16", "wg-vs-bf16");
    double tot[5] = {0, 0, 0, 0, 0};
    for (int li = 0; li < ncases; li++) {
        const ConvCase *L = &cases[li];
        const ConvShape s = conv_case_shape(L, B);
        const int cg = s.C / (s.groups > 1 ? s.groups : 1);
        size_t nin = (size_t)s.N * s.H * s.W * s.C, nout = (size_t)s.N * s.P * s.Q * s.K;
        size_t nw = (size_t)s.K * s.R * s.S * cg;
        double flops = 2.0 * nout * s.R * s.S * cg;
        void *in[2], *w[2], *dout[2], *out[5], *din[5];
        float *dw[5], *work = NULL;
        size_t nwork = conv2d_gpu_work_floats(&s);
        if (nwork) CK(cudaMalloc(&work, nwork * 4));
        for (int d = 0; d < 2; d++) {
            CtDtype dt = d ? CT_BF16 : CT_F32;
            size_t es = d ? 2 : 4;
            CK(cudaMalloc(&in[d], nin * es));
            CK(cudaMalloc(&w[d], nw * es));
            CK(cudaMalloc(&dout[d], nout * es));
            fill(in[d], nin, dt, 1);
            fill(w[d], nw, dt, 2);
            fill(dout[d], nout, dt, 3);
        }
        for (int v = 0; v < 5; v++) {
            size_t es = v ? 2 : 4;
            CK(cudaMalloc(&out[v], nout * es));
            CK(cudaMalloc(&din[v], nin * es));
            CK(cudaMalloc(&dw[v], nw * 4));
        }
        for (int pass = 0; pass < 3; pass++) {
            double ms[5] = {-1, -1, -1, -1, -1};
            int fell_back = 0, wg_fell_back = 0;  // v2 (wgmma) did not take the shape: its column timed v1 (v2 or v1)
            for (int v = 0; v < 5; v++) {  // 0: generic fp32, 1: generic bf16, 2: engine v1, 3: v2, 4: wgmma
                int d = v ? 1 : 0;
                int algo = v == 4 ? CT_CONV_WGMMA : v == 3 ? CT_CONV_TC2 : v == 2 ? CT_CONV_TC : CT_CONV_GENERIC;
                CtDtype dt = d ? CT_BF16 : CT_F32;
                for (int it = -1; it < iters; it++) {
                    if (it == 0) CK(cudaEventRecord(e0, st));
                    int ran;
                    if (pass == 0) ran = conv2d_forward_gpu_ex(&s, out[v], in[d], w[d], dt, st, algo);
                    else if (pass == 1) ran = conv2d_backward_data_gpu_ex(&s, din[v], dout[d], w[d], dt, st, algo);
                    else ran = conv2d_backward_weight_gpu_ex(&s, dw[v], dout[d], in[d], work, dt, st, algo);
                    if (v == 3 && ran != CT_CONV_TC2) fell_back = 1;
                    if (v == 4 && ran != CT_CONV_WGMMA) wg_fell_back = 1;
                }
                CK(cudaEventRecord(e1, st));
                CK(cudaEventSynchronize(e1));
                float t;
                CK(cudaEventElapsedTime(&t, e0, e1));
                ms[v] = t / iters;
                tot[v] += ms[v];
            }
            double diff[5] = {-1, -1, -1, -1, -1};
            for (int v = 2; v < 5; v++) {
                if (pass == 0) diff[v] = rel_diff(out[v], out[1], nout, 1);
                else if (pass == 1) diff[v] = rel_diff(din[v], din[1], nin, 1);
                else diff[v] = rel_diff(dw[v], dw[1], nw, 0);
            }
            static const char *pn[3] = {"fwd", "dgrad", "wgrad"};
            printf("%-18.18s %-6s", L->name, pn[pass]);
            for (int v = 0; v < 5; v++) {
                int star = (v == 3 && fell_back) || (v == 4 && wg_fell_back);
                if (ms[v] < 0) printf(" %9s %9s", "-", "-");
                else printf(" %9.3f %8.1f%s", ms[v], flops / (ms[v] * 1e-3) / 1e12, star ? "*" : " ");
            }
            printf(" %10.2e %10.2e %10.2e\n", diff[2], diff[3], diff[4]);
        }
        for (int d = 0; d < 2; d++) {
            cudaFree(in[d]);
            cudaFree(w[d]);
            cudaFree(dout[d]);
        }
        for (int v = 0; v < 5; v++) {
            cudaFree(out[v]);
            cudaFree(din[v]);
            cudaFree(dw[v]);
        }
        if (work) cudaFree(work);
    }
    CK(cudaGetLastError());
    printf("sum of the timed passes (ms): f32 %.2f  bf16 %.2f  tc (v1) %.2f  tc2 (v2, '*' rows v1) %.2f  "
           "wgmma ('*' rows v2/v1) %.2f\n", tot[0], tot[1], tot[2], tot[3], tot[4]);
    return 0;
}
