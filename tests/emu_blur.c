// BlurPool's GPU blur (kernels/blur.cu) against its CPU twin (nn/blur.h), forward and backward,
// fp32 and bf16, on awkward shapes: 1x1 and one-row images (every tap at a border), channel
// counts that are not multiples of 4 or 8 (the scalar kernel), multiples of 8 (the 16-byte
// vector kernel) and a misaligned buffer with such a count (the scalar kernel again).
// The twins sum the same taps in the same order and scale once by 1/16, so both dtypes must agree
// BIT FOR BIT once the CPU result is rounded where the GPU stores bf16 (the input is rounded first).
// Its own file because tests/emu_kernels.c is past the size this project keeps files to; built
// against the emulated kernels (./build.sh test) and the real ones (build/gpu-tests, tests/gpu.sh).
#include <stdio.h>
#include <string.h>

#include "kernels/common.cuh"
#include "kernels/kernels.h"
#include "nn/blur.h"
#include "tests/emu_util.h"
#include "tests/test.h"
#include "util/bf16.h"
#include "util/common.h"
#include "util/rng.h"

static size_t n_diff(const float *a, const float *b, size_t n) {
    size_t k = 0;
    for (size_t i = 0; i < n; i++) k += memcmp(&a[i], &b[i], sizeof(float)) != 0;
    return k;
}

static void test_blur(int N, int H, int W, int C, int skew, CtDtype dt) {
    const size_t n = (size_t)N * H * W * C;
    float *x = rand_buf(n, 2), *g = rand_buf(n, 1);
    round_to(x, n, dt);
    round_to(g, n, dt);
    float *want = (float *)ct_alloc((n + 1) * 4), *wantb = (float *)ct_alloc((n + 1) * 4);
    blur3x3_forward(want, x, N, H, W, C);
    blur3x3_backward(wantb, g, N, H, W, C);
    round_to(want, n, dt);
    round_to(wantb, n, dt);
    void *b0, *b1, *b2, *b3;
    void *dx = dev_act_at(&b0, x, n, dt, skew), *dy = dev_act_at(&b1, NULL, n, dt, skew);
    void *dg = dev_act_at(&b2, g, n, dt, skew), *ddx = dev_act_at(&b3, NULL, n, dt, skew);
    blur3x3_forward_gpu(dy, dx, N, H, W, C, dt, 0);
    blur3x3_backward_gpu(ddx, dg, N, H, W, C, dt, 0);
    float *got = host_act(dy, n, dt), *gotb = host_act(ddx, n, dt);
    size_t df = n_diff(got, want, n), db = n_diff(gotb, wantb, n);
    CHECK(df == 0 && db == 0, "blur %dx%dx%dx%d skew %d %s: %zu forward and %zu backward elements differ from the CPU "
          "(max |diff| %g, %g)", N, H, W, C, skew, dt == CT_BF16 ? "bf16" : "fp32", df, db, max_abs_diff(got, want, n),
          max_abs_diff(gotb, wantb, n));
    CT_CUDA_CHECK(cudaFree(b0));
    CT_CUDA_CHECK(cudaFree(b1));
    CT_CUDA_CHECK(cudaFree(b2));
    CT_CUDA_CHECK(cudaFree(b3));
    free(x), free(g), free(want), free(wantb), free(got), free(gotb);
}

int main(void) {
    test_rng = rng_make(20261124, 13, 0);
    for (int d = 0; d < 2; d++) {
        CtDtype dt = d ? CT_BF16 : CT_F32;
        test_blur(1, 1, 1, 3, 0, dt);    // a single pixel: only the centre tap
        test_blur(2, 1, 7, 5, 0, dt);    // one row
        test_blur(1, 6, 1, 13, 0, dt);   // one column
        test_blur(2, 5, 7, 17, 0, dt);   // odd everything
        test_blur(1, 7, 5, 16, 0, dt);   // 16-byte vectors (4 floats / 8 bf16)
        test_blur(3, 4, 4, 24, 0, dt);
        test_blur(1, 5, 3, 8, 1, dt);    // vector-sized C, misaligned: the scalar kernel
        test_blur(2, 9, 8, 64, 0, dt);   // resnet20's stage-2 input width, 8x8 of stage 3 + 1
    }
    return test_summary("emu_blur");
}
