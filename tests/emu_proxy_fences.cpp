// Mutation test of the memory-proxy fences (kernels/ptx_wgmma.cuh): this translation unit compiles
// the wgmma engine (kernels/conv_wgmma.cu) and the PTX checks (kernels/ptx_check.cu) with both
// fences deleted (CT_MUTANT_NO_PROXY_FENCE, CT_MUTANT_NO_MBAR_INIT_FENCE), and each case, in a
// child process, must end in the emulator's error instead of computing (kernels/emu/wgmma.cpp:
// wgmma reads generic-proxy writes no fence published; cp.async.bulk completes on a barrier whose
// init no fence published). On silicon either deletion may pass or fail by timing; in the
// emulator, before it modelled the proxies, all three ran to the right answer. The same kernels
// with their fences (the library's) pass in tests/emu_conv and tests/emu_ptx_layouts.
#define CT_MUTANT_NO_PROXY_FENCE 1
#define CT_MUTANT_NO_MBAR_INIT_FENCE 1
#include "kernels/conv_wgmma.cu"
#include "kernels/ptx_check.cu"

#include <string>
#include <vector>

#include "nn/layers.h"
#include "tests/emu_child.h"
#include "tests/test.h"

template <typename T>
static T *dev_fill(size_t n, T v) {
    std::vector<T> h(n, v);
    T *d = nullptr;
    CT_CUDA_CHECK(cudaMalloc(&d, n * sizeof(T)));
    CT_CUDA_CHECK(cudaMemcpy(d, h.data(), n * sizeof(T), cudaMemcpyHostToDevice));
    return d;
}

static int child(const char *which) {
    const uint16_t one = 0x3f80;  // bf16 1.0
    if (!strcmp(which, "wgmma")) {  // stores, (no) fence.proxy.async, wgmma
        uint16_t *A = dev_fill<uint16_t>(64 * 64, one), *B = dev_fill<uint16_t>(64 * 64, one);
        float *D = dev_fill<float>(64 * 64, 0.f);
        ct_ptx_check_wgmma(A, B, D, 64, 64, CT_SWZ_128, 0, 0);
    } else if (!strcmp(which, "mbarrier")) {  // mbarrier.init, (no) fence.mbarrier_init, cp.async.bulk
        uint16_t *src = dev_fill<uint16_t>(1024, one), *dst = dev_fill<uint16_t>(1024, 0);
        ct_ptx_check_mbarrier(src, dst, 1024, 0);
    } else if (!strcmp(which, "ring")) {  // the engine's ring on a tiny GEMM
        uint16_t *A = dev_fill<uint16_t>(128 * 384, one), *B = dev_fill<uint16_t>(128 * 384, one);
        float *D = dev_fill<float>(128 * 128, 0.f);
        ct_ptx_check_ring(A, B, D, 384, 0);
    } else if (!strcmp(which, "conv")) {  // the engine's ring: cp.async, (no) fence.proxy.async, wgmma
        ConvShape s = conv_shape(1, 6, 6, 16, 16, 3, 3, 1, 1);
        uint16_t *in = dev_fill<uint16_t>(6 * 6 * 16, one), *w = dev_fill<uint16_t>(16 * 9 * 16, one);
        uint16_t *out = dev_fill<uint16_t>(6 * 6 * 16, 0);
        int used = conv2d_forward_gpu_ex(&s, out, in, w, CT_BF16, 0, CT_CONV_WGMMA);
        CT_CUDA_CHECK(cudaDeviceSynchronize());
        fprintf(stderr, "engine %d ran\n", used);
    }
    return 0;  // the parent wants an abort
}

int main(int argc, char **argv) {
    if (argc == 2) return child(argv[1]);
    struct {
        const char *arg, *want;
    } cases[] = {
        {"wgmma", "with no fence.proxy.async since"},
        {"conv", "with no fence.proxy.async since"},
        {"ring", "with no fence.proxy.async since"},
        {"mbarrier", "was not made visible to the async proxy"},
    };
    for (auto &c : cases) {
        ChildRun r = run_child(c.arg, NULL);
        CHECK(r.aborted && r.err.find(c.want) != std::string::npos,
              "with its fence deleted, case %s aborts saying '%s' (aborted %d): %s", c.arg, c.want, r.aborted,
              r.err.c_str());
    }
    return test_summary("emu_proxy_fences");
}
