// The inline-PTX wrappers (kernels/ptx_check.cu drives them) against plain host arithmetic and
// the PTX ISA's fragment tables. Built both ways: under emulation (./build.sh test) and for the
// real GPU (./build.sh gpu-tests, run by tests/gpu.sh), where it checks that the emulator's
// layouts are the hardware's. (C++ in a .c file, like the other tests/emu_*.c: both builds
// compile it as C++.)
//   ldmatrix x1/x2/x4 (and .trans): every lane's registers, element by element;
//   mma.m16n8k16 bf16 with fragments loaded three ways (ldmatrix, ldmatrix.trans, direct loads)
//     == A * B with fp32 accumulation of the bf16 inputs;
//   cp.async with partial sources zero-fills;
//   wgmma m64nNk16 (N = 16, 64, 128) from shared-memory descriptors in each swizzle mode (none,
//     32B, 64B, 128B), each operand K-major or MN-major (the transpose bits) == A * B^T, the
//     first k step with scale-d = 0 over NaN accumulators;
//   mbarrier + cp.async.bulk: a two-slot ring over several phases delivers every chunk;
//   the wgmma engine's own producer/consumer ring (kernels/wgmma_ring.cuh) on a tiny GEMM.
// The wgmma, mbarrier and ring checks need sm_90a: on another GPU they say "skipped".
// The emulator-only semantics (a read before cp.async.wait_group is stale) are in emu_ptx.cpp.
#include "kernels/common.cuh"
#include "kernels/ptx.cuh"
#include "tests/test.h"
#include "util/rng.h"

#include <vector>

extern "C" {
void ct_ptx_check_ldmatrix(const uint16_t *m, uint32_t *out, int num, int trans, cudaStream_t stream);
void ct_ptx_check_mma(const uint16_t *A, const uint16_t *B, const float *C, float *D, int M, int N,
                      int K, int mode, cudaStream_t stream);
void ct_ptx_check_cp_async(const float *src, float *dst, int n, cudaStream_t stream);
int ct_ptx_check_wgmma(const uint16_t *A, const uint16_t *B, float *D, int N, int K, int swz, int trans,
                       cudaStream_t stream);
int ct_ptx_check_mbarrier(const uint16_t *src, uint16_t *dst, int n, cudaStream_t stream);
int ct_ptx_check_ring(const uint16_t *A, const uint16_t *B, float *D, int K, cudaStream_t stream);
}

#include "tests/emu_util.h"

static void test_ldmatrix() {
    // 32 rows x 8 columns of distinct 16-bit values.
    std::vector<uint16_t> m(32 * 8);
    for (int i = 0; i < 32 * 8; i++) m[i] = (uint16_t)(0x100 + i);
    uint16_t *dm = to_device(m);
    uint32_t *dout;
    CT_CUDA_CHECK(cudaMalloc(&dout, 32 * 4 * sizeof(uint32_t)));
    for (int trans = 0; trans < 2; trans++)
        for (int num : {1, 2, 4}) {
            CT_CUDA_CHECK(cudaMemset(dout, 0, 32 * 4 * sizeof(uint32_t)));
            ct_ptx_check_ldmatrix(dm, dout, num, trans, 0);
            std::vector<uint32_t> out = to_host(dout, 32 * 4);
            int bad = 0;
            for (int l = 0; l < 32; l++)
                for (int i = 0; i < num; i++) {
                    int g = l >> 2, t = l & 3;
                    // Matrix i is rows 8i..8i+7 of m.
                    uint16_t lo, hi;
                    if (!trans) {
                        lo = m[(8 * i + g) * 8 + 2 * t];
                        hi = m[(8 * i + g) * 8 + 2 * t + 1];
                    } else {
                        lo = m[(8 * i + 2 * t) * 8 + g];
                        hi = m[(8 * i + 2 * t + 1) * 8 + g];
                    }
                    uint32_t want = lo | (uint32_t)hi << 16;
                    if (out[l * 4 + i] != want) {
                        if (bad++ < 5)
                            fprintf(stderr, "ldmatrix x%d%s lane %d reg %d: %08x, want %08x\n", num,
                                    trans ? ".trans" : "", l, i, out[l * 4 + i], want);
                    }
                }
            CHECK(bad == 0, "ldmatrix x%d trans %d: %d registers wrong", num, trans, bad);
        }
    cudaFree(dm);
    cudaFree(dout);
}

static uint16_t bf16_bits(float f) { return __bfloat16_as_ushort(__float2bfloat16(f)); }
static float bf16_val(uint16_t b) { return __bfloat162float(__ushort_as_bfloat16(b)); }

static void test_mma() {
    const int M = 32, N = 16, K = 48;
    std::vector<uint16_t> A(M * K), Bnk(N * K), Bkn(K * N);
    std::vector<float> C(M * N);
    Rng ra = rng_make(7, 1, 0), rb = rng_make(7, 2, 0), rc = rng_make(7, 3, 0);
    for (int i = 0; i < M * K; i++) A[i] = bf16_bits(rng_normal(&ra));
    for (int n = 0; n < N; n++)
        for (int k = 0; k < K; k++) {
            uint16_t b = bf16_bits(rng_normal(&rb));
            Bnk[n * K + k] = b;
            Bkn[k * N + n] = b;
        }
    for (int i = 0; i < M * N; i++) C[i] = rng_normal(&rc);
    // Reference in double from the same bf16 values: products of bf16 are exact in fp32, so the
    // only difference is fp32 summation (about K * 2^-24 relative).
    std::vector<float> ref(M * N);
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
            double s = C[m * N + n];
            for (int k = 0; k < K; k++) s += (double)bf16_val(A[m * K + k]) * bf16_val(Bnk[n * K + k]);
            ref[m * N + n] = (float)s;
        }
    uint16_t *dA = to_device(A), *dBnk = to_device(Bnk), *dBkn = to_device(Bkn);
    float *dC = to_device(C), *dD;
    CT_CUDA_CHECK(cudaMalloc(&dD, M * N * sizeof(float)));
    // The comparison can tell a wrong layout: B read as K x N instead of N x K differs a lot.
    {
        std::vector<float> wrong(M * N);
        for (int m = 0; m < M; m++)
            for (int n = 0; n < N; n++) {
                double s = C[m * N + n];
                for (int k = 0; k < K; k++) s += (double)bf16_val(A[m * K + k]) * bf16_val(Bnk[k * N + n]);
                wrong[m * N + n] = (float)s;
            }
        CHECK(rel_err_norm(wrong.data(), ref.data(), M * N) > 0.1, "reference sanity");
    }
    const char *names[3] = {"ldmatrix", "ldmatrix.trans for B", "direct fragments"};
    for (int mode = 0; mode < 3; mode++) {
        CT_CUDA_CHECK(cudaMemset(dD, 0xff, M * N * sizeof(float)));
        ct_ptx_check_mma(dA, mode == 1 ? dBkn : dBnk, dC, dD, M, N, K, mode, 0);
        std::vector<float> D = to_host(dD, M * N);
        double err = rel_err_norm(D.data(), ref.data(), M * N);
        double mad = max_abs_diff(D.data(), ref.data(), M * N);
        // Tensor cores accumulate in fp32 in their own order (and may truncate): a wrong layout
        // gives errors of order one, far above these bounds.
        CHECK(err < 1e-5 && mad < 1e-3, "mma via %s: rel err %g, max abs diff %g", names[mode], err, mad);
    }
    cudaFree(dA);
    cudaFree(dBnk);
    cudaFree(dBkn);
    cudaFree(dC);
    cudaFree(dD);
}

static void test_cp_async_zero_fill() {
    const int n = 1024;
    std::vector<float> src(n);
    for (int i = 0; i < n; i++) src[i] = 1.0f + i;
    float *ds = to_device(src), *dd;
    CT_CUDA_CHECK(cudaMalloc(&dd, n * sizeof(float)));
    ct_ptx_check_cp_async(ds, dd, n, 0);
    std::vector<float> out = to_host(dd, n);
    int bad = 0;
    for (int i = 0; i < n / 4; i++) {
        int keep = i % 5;  // floats copied; the rest of the 4 are zero-filled
        if (keep > 4) keep = 4;
        for (int k = 0; k < 4; k++) bad += out[i * 4 + k] != (k < keep ? src[i * 4 + k] : 0.0f);
    }
    CHECK(bad == 0, "cp.async zero-fill: %d wrong floats", bad);
    cudaFree(ds);
    cudaFree(dd);
}

static void test_wgmma() {
    const int K = 64;
    const char *swz_name[4] = {"no swizzle", "128B swizzle", "64B swizzle", "32B swizzle"};
    for (int N : {16, 64, 128}) {
        std::vector<uint16_t> A(64 * K), B(N * K);
        Rng ra = rng_make(11, 1, N), rb = rng_make(11, 2, N);
        for (auto &v : A) v = bf16_bits(rng_normal(&ra));
        for (auto &v : B) v = bf16_bits(rng_normal(&rb));
        std::vector<float> ref(64 * N), wrong(64 * N);
        for (int m = 0; m < 64; m++)
            for (int n = 0; n < N; n++) {
                double s = 0, w = 0;
                for (int k = 0; k < K; k++) {
                    s += (double)bf16_val(A[m * K + k]) * bf16_val(B[n * K + k]);
                    // A wrong reading the comparison must tell: k chunks of 8 swapped in pairs.
                    w += (double)bf16_val(A[m * K + (k ^ 8)]) * bf16_val(B[n * K + k]);
                }
                ref[m * N + n] = (float)s;
                wrong[m * N + n] = (float)w;
            }
        CHECK(rel_err_norm(wrong.data(), ref.data(), 64 * N) > 0.1, "wgmma reference sanity");
        uint16_t *dA = to_device(A), *dB = to_device(B);
        float *dD;
        CT_CUDA_CHECK(cudaMalloc(&dD, 64 * N * sizeof(float)));
        const char *trans_name[4] = {"K-major A and B", "M-major A", "N-major B", "M-major A, N-major B"};
        for (int tr = 0; tr < 4; tr++)
        for (int swz = 0; swz < 4; swz++) {
            // An N-major B narrower than its swizzle atom (N = 16 under 64B or 128B) is not a
            // canonical layout: not checked.
            int atom = swz == 1 ? 64 : swz == 2 ? 32 : swz == 3 ? 16 : 8;
            if ((tr & 2) && N % atom) continue;
            CT_CUDA_CHECK(cudaMemset(dD, 0xff, 64 * N * sizeof(float)));
            if (!ct_ptx_check_wgmma(dA, dB, dD, N, K, swz, tr, 0)) {
                printf("wgmma: skipped (not an sm_90a device)\n");
                cudaFree(dA);
                cudaFree(dB);
                cudaFree(dD);
                return;
            }
            std::vector<float> D = to_host(dD, 64 * N);
            double err = rel_err_norm(D.data(), ref.data(), 64 * N);
            double mad = max_abs_diff(D.data(), ref.data(), 64 * N);
            CHECK(err < 1e-5 && mad < 1e-3, "wgmma m64n%dk16, %s, %s: rel err %g, max abs diff %g", N,
                  swz_name[swz], trans_name[tr], err, mad);
        }
        cudaFree(dA);
        cudaFree(dB);
        cudaFree(dD);
    }
}

static void test_mbarrier() {
    const int n = 256 * 7;
    std::vector<uint16_t> src(n);
    for (int i = 0; i < n; i++) src[i] = (uint16_t)(i * 7 + 3);
    uint16_t *ds = to_device(src), *dd;
    CT_CUDA_CHECK(cudaMalloc(&dd, n * sizeof(uint16_t)));
    CT_CUDA_CHECK(cudaMemset(dd, 0, n * sizeof(uint16_t)));
    if (!ct_ptx_check_mbarrier(ds, dd, n, 0)) {
        printf("mbarrier: skipped (not an sm_90a device)\n");
    } else {
        std::vector<uint16_t> out = to_host(dd, n);
        int bad = 0;
        for (int i = 0; i < n; i++) bad += out[i] != src[i];
        CHECK(bad == 0, "mbarrier ring with cp.async.bulk: %d of %d elements wrong", bad, n);
    }
    cudaFree(ds);
    cudaFree(dd);
}

// The wgmma engine's ring (kernels/wgmma_ring.cuh) on a 128 x 128 x 384 GEMM: 6 k-tiles through
// 4 stages, so every stage's full and empty barriers complete more than one phase.
static void test_ring() {
    const int K = 384;
    std::vector<uint16_t> A(128 * K), B(128 * K);
    Rng ra = rng_make(13, 1, 0), rb = rng_make(13, 2, 0);
    for (auto &v : A) v = bf16_bits(rng_normal(&ra));
    for (auto &v : B) v = bf16_bits(rng_normal(&rb));
    std::vector<float> ref(128 * 128);
    for (int m = 0; m < 128; m++)
        for (int n = 0; n < 128; n++) {
            double s = 0;
            for (int k = 0; k < K; k++) s += (double)bf16_val(A[m * K + k]) * bf16_val(B[n * K + k]);
            ref[m * 128 + n] = (float)s;
        }
    uint16_t *dA = to_device(A), *dB = to_device(B);
    float *dD;
    CT_CUDA_CHECK(cudaMalloc(&dD, 128 * 128 * sizeof(float)));
    CT_CUDA_CHECK(cudaMemset(dD, 0xff, 128 * 128 * sizeof(float)));
    if (!ct_ptx_check_ring(dA, dB, dD, K, 0)) {
        printf("wgmma ring: skipped (not an sm_90a device)\n");
    } else {
        CT_CUDA_CHECK(cudaDeviceSynchronize());
        std::vector<float> D = to_host(dD, 128 * 128);
        double err = rel_err_norm(D.data(), ref.data(), 128 * 128);
        CHECK(err < 1e-5, "the wgmma engine's ring (cp.async, proxy fence, mbarriers, wgmma) on 128x128x%d: rel err %g",
              K, err);
    }
    cudaFree(dA);
    cudaFree(dB);
    cudaFree(dD);
}

int main() {
    test_ldmatrix();
    test_mma();
    test_cp_async_zero_fill();
    test_wgmma();
    test_mbarrier();
    test_ring();
    return test_summary("emu_ptx_layouts");
}
