// The inline-PTX wrappers under emulation (kernels/ptx_check.cu drives them) against plain host
// arithmetic and the PTX ISA's fragment tables:
//   ldmatrix x1/x2/x4 (and .trans): every lane's registers, element by element;
//   mma.m16n8k16 bf16 with fragments loaded three ways (ldmatrix, ldmatrix.trans, direct loads)
//     == A * B with fp32 accumulation of the bf16 inputs;
//   cp.async with partial sources zero-fills; a read before the wait sees stale shared memory.
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
}

template <typename T>
static T *to_device(const std::vector<T> &h) {
    T *d;
    CT_CUDA_CHECK(cudaMalloc(&d, h.size() * sizeof(T)));
    CT_CUDA_CHECK(cudaMemcpy(d, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
    return d;
}
template <typename T>
static std::vector<T> to_host(const T *d, size_t n) {
    std::vector<T> h(n);
    CT_CUDA_CHECK(cudaMemcpy(h.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost));
    return h;
}

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
        CHECK(err < 1e-6 && mad < 1e-4, "mma via %s: rel err %g, max abs diff %g", names[mode], err, mad);
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

// Reading the destination of a cp.async before waiting for its group: the data is not there
// yet under emulation (poisoned dynamic shared memory), after the wait it is.
__global__ void early_read_kernel(const float *src, float *before, float *after) {
    CT_DYN_SMEM(float, s);
    int i = threadIdx.x;
    ct_cp_async_cg16(s + 4 * i, src + 4 * i);
    ct_cp_async_commit();
    ct_cp_async_cg16(s + 4 * (i + 32), src + 4 * (i + 32));
    ct_cp_async_commit();
    before[i] = s[4 * i];
    ct_cp_async_wait<1>();  // the first group is complete, the second may not be
    after[i] = s[4 * i];
    after[32 + i] = s[4 * (i + 32)];
    ct_cp_async_wait<0>();
    after[64 + i] = s[4 * (i + 32)];
}

static void test_cp_async_wait() {
    std::vector<float> src(64 * 4);
    for (size_t i = 0; i < src.size(); i++) src[i] = (float)i;
    float *ds = to_device(src), *db, *da;
    CT_CUDA_CHECK(cudaMalloc(&db, 32 * sizeof(float)));
    CT_CUDA_CHECK(cudaMalloc(&da, 96 * sizeof(float)));
    CT_LAUNCH(early_read_kernel, 1, 32, 64 * 4 * sizeof(float), 0, ds, db, da);
    CT_CHECK_LAUNCH("early_read_kernel");
    std::vector<float> b = to_host(db, 32), a = to_host(da, 96);
    int stale = 0, ok = 0, ok2 = 0, pending = 0;
    for (int i = 0; i < 32; i++) {
        stale += isnan(b[i]);
        ok += a[i] == src[4 * i];
        pending += isnan(a[32 + i]);
        ok2 += a[64 + i] == src[4 * (i + 32)];
    }
    CHECK(stale == 32, "reads before the wait see stale memory (%d of 32)", stale);
    CHECK(ok == 32, "wait_group 1 completes the older group (%d of 32)", ok);
    CHECK(pending == 32, "wait_group 1 leaves the newest group pending (%d of 32)", pending);
    CHECK(ok2 == 32, "wait_group 0 completes everything (%d of 32)", ok2);
    cudaFree(ds);
    cudaFree(db);
    cudaFree(da);
}

int main() {
    test_ldmatrix();
    test_mma();
    test_cp_async_zero_fill();
    test_cp_async_wait();
    return test_summary("emu_ptx");
}
