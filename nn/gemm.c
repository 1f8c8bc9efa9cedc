// Blocked, packed SGEMM with run-time chosen micro-kernels. See nn/gemm.h for the contract.
//
// Structure (per block of NC columns and KC depth):
//   1. B[kc, nc] is packed into slivers of NR columns, each stored k-major ([kc][NR]), zero-padded.
//   2. The M rows are cut into blocks of MC; a task is one row block times a range of B slivers.
//      A task packs its rows of A into slivers of MR rows ([kc][MR]) and runs the micro-kernel on
//      every (A sliver, B sliver) pair: MR x NR accumulators held in registers for the whole kc.
// Only the partition of C into tasks depends on the thread count; what each C element sums, and
// in which order, does not.
#include "nn/gemm.h"

#include <immintrin.h>
#include <omp.h>
#include <string.h>

#include "util/common.h"

#define KC 256
#define NC 2048

typedef void (*UkrFn)(int kc, const float *restrict a, const float *restrict b, float *restrict c,
                      ptrdiff_t ldc, int acc);
typedef struct {
    int mr, nr;
    UkrFn fn;
} Ukr;

// ---------------------------------------------------------------------------------------------
// Micro-kernels: c[MR, NR] (row stride ldc) = (acc ? c : 0) + sum_p a[p][0..MR) x b[p][0..NR).
// The accumulators start at zero and c is added at the end, so the full-tile path and the edge
// path (through a temporary tile) perform the same float operations per element.

static void ukr_generic_4x16(int kc, const float *restrict a, const float *restrict b,
                             float *restrict c, ptrdiff_t ldc, int acc) {
    float r[4][16] = {{0}};
    for (int p = 0; p < kc; p++)
        for (int i = 0; i < 4; i++)
            for (int j = 0; j < 16; j++) r[i][j] += a[p * 4 + i] * b[p * 16 + j];
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 16; j++) c[i * ldc + j] = acc ? c[i * ldc + j] + r[i][j] : r[i][j];
}

#define DEFINE_UKR(NAME, VEC, VW, ZERO, LOAD, STORE, BCAST, FMA, ADD, MR, NV)                     \
    static void NAME(int kc, const float *restrict a, const float *restrict b, float *restrict c, \
                     ptrdiff_t ldc, int acc) {                                                   \
        VEC r[MR][NV];                                                                           \
        _Pragma("GCC unroll 32") for (int i = 0; i < MR; i++)                                    \
            _Pragma("GCC unroll 4") for (int v = 0; v < NV; v++) r[i][v] = ZERO();               \
        for (int p = 0; p < kc; p++) {                                                           \
            VEC bv[NV];                                                                          \
            _Pragma("GCC unroll 4") for (int v = 0; v < NV; v++) bv[v] = LOAD(b + (p * NV + v) * VW); \
            _Pragma("GCC unroll 32") for (int i = 0; i < MR; i++) {                              \
                VEC av = BCAST(a[p * MR + i]);                                                   \
                _Pragma("GCC unroll 4") for (int v = 0; v < NV; v++) r[i][v] = FMA(av, bv[v], r[i][v]); \
            }                                                                                    \
        }                                                                                        \
        if (acc) {                                                                               \
            _Pragma("GCC unroll 32") for (int i = 0; i < MR; i++)                                \
                _Pragma("GCC unroll 4") for (int v = 0; v < NV; v++)                             \
                    STORE(c + i * ldc + v * VW, ADD(LOAD(c + i * ldc + v * VW), r[i][v]));        \
        } else {                                                                                 \
            _Pragma("GCC unroll 32") for (int i = 0; i < MR; i++)                                \
                _Pragma("GCC unroll 4") for (int v = 0; v < NV; v++) STORE(c + i * ldc + v * VW, r[i][v]); \
        }                                                                                        \
    }

#pragma GCC push_options
#pragma GCC target("avx2,fma")
DEFINE_UKR(ukr_avx2_6x16, __m256, 8, _mm256_setzero_ps, _mm256_loadu_ps, _mm256_storeu_ps,
           _mm256_set1_ps, _mm256_fmadd_ps, _mm256_add_ps, 6, 2)
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx512f")
DEFINE_UKR(ukr_avx512_14x32, __m512, 16, _mm512_setzero_ps, _mm512_loadu_ps, _mm512_storeu_ps,
           _mm512_set1_ps, _mm512_fmadd_ps, _mm512_add_ps, 14, 2)
DEFINE_UKR(ukr_avx512_28x16, __m512, 16, _mm512_setzero_ps, _mm512_loadu_ps, _mm512_storeu_ps,
           _mm512_set1_ps, _mm512_fmadd_ps, _mm512_add_ps, 28, 1)
#pragma GCC pop_options

// ---------------------------------------------------------------------------------------------
// Kernel choice. 0 = not decided yet; decided once from the CPU, or forced by sgemm_set_kernel.
enum { ISA_UNSET = 0, ISA_GENERIC, ISA_AVX2, ISA_AVX512 };
static int g_isa = ISA_UNSET;

static int isa_supported(int isa) {
    __builtin_cpu_init();
    switch (isa) {
    case ISA_GENERIC: return 1;
    case ISA_AVX2: return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    case ISA_AVX512: return __builtin_cpu_supports("avx512f");
    }
    return 0;
}

static int current_isa(void) {
    int isa = __atomic_load_n(&g_isa, __ATOMIC_RELAXED);
    if (isa == ISA_UNSET) {
        isa = isa_supported(ISA_AVX512) ? ISA_AVX512 : isa_supported(ISA_AVX2) ? ISA_AVX2 : ISA_GENERIC;
        __atomic_store_n(&g_isa, isa, __ATOMIC_RELAXED);
    }
    return isa;
}

const char *sgemm_kernel_name(void) {
    switch (current_isa()) {
    case ISA_AVX512: return "avx512";
    case ISA_AVX2: return "avx2";
    default: return "generic";
    }
}

int sgemm_set_kernel(const char *name) {
    int isa = !strcmp(name, "avx512") ? ISA_AVX512 : !strcmp(name, "avx2") ? ISA_AVX2
            : !strcmp(name, "generic") ? ISA_GENERIC : ISA_UNSET;
    if (isa == ISA_UNSET || !isa_supported(isa)) return 0;
    __atomic_store_n(&g_isa, isa, __ATOMIC_RELAXED);
    return 1;
}

static Ukr pick_kernel(int N) {
    switch (current_isa()) {
    case ISA_AVX512:
        // The wide kernel wastes half its columns on a 16-wide B; the tall one fits it exactly.
        if (((N + 31) / 32) * 32 > ((N + 15) / 16) * 16 && N < 128) return (Ukr){28, 16, ukr_avx512_28x16};
        return (Ukr){14, 32, ukr_avx512_14x32};
    case ISA_AVX2: return (Ukr){6, 16, ukr_avx2_6x16};
    default: return (Ukr){4, 16, ukr_generic_4x16};
    }
}

// ---------------------------------------------------------------------------------------------
// Packing.

// B rows [0, kc), columns [j0, j0 + n) (n <= nr) -> bp[kc][nr], zero-padded columns.
static void pack_b(float *restrict bp, const float *B, ptrdiff_t b_rs, ptrdiff_t b_cs, int kc, int j0,
                   int n, int nr) {
    if (b_cs == 1) {
        for (int p = 0; p < kc; p++) {
            const float *src = B + p * b_rs + j0;
            float *dst = bp + (size_t)p * nr;
            memcpy(dst, src, (size_t)n * sizeof(float));
            for (int j = n; j < nr; j++) dst[j] = 0.0f;
        }
    } else {
        for (int j = 0; j < n; j++) {
            const float *src = B + (ptrdiff_t)(j0 + j) * b_cs;
            for (int p = 0; p < kc; p++) bp[(size_t)p * nr + j] = src[p * b_rs];
        }
        for (int p = 0; p < kc; p++)
            for (int j = n; j < nr; j++) bp[(size_t)p * nr + j] = 0.0f;
    }
}

// A rows [i0, i0 + m) (m <= mr), columns [0, kc) -> ap[kc][mr], zero-padded rows.
static void pack_a(float *restrict ap, const float *A, ptrdiff_t a_rs, ptrdiff_t a_cs, int kc, int i0,
                   int m, int mr) {
    if (a_rs == 1) {
        for (int p = 0; p < kc; p++) {
            const float *src = A + p * a_cs + i0;
            float *dst = ap + (size_t)p * mr;
            for (int i = 0; i < m; i++) dst[i] = src[i];
            for (int i = m; i < mr; i++) dst[i] = 0.0f;
        }
    } else {
        for (int i = 0; i < m; i++) {
            const float *src = A + (ptrdiff_t)(i0 + i) * a_rs;
            for (int p = 0; p < kc; p++) ap[(size_t)p * mr + i] = src[p * a_cs];
        }
        for (int p = 0; p < kc; p++)
            for (int i = m; i < mr; i++) ap[(size_t)p * mr + i] = 0.0f;
    }
}

// ---------------------------------------------------------------------------------------------

void sgemm(int M, int N, int K, const float *A, ptrdiff_t a_rs, ptrdiff_t a_cs, const float *B,
           ptrdiff_t b_rs, ptrdiff_t b_cs, float *C, ptrdiff_t ldc, int accumulate) {
    if (M <= 0 || N <= 0) return;
    if (K <= 0) {
        if (!accumulate)
            for (int i = 0; i < M; i++) memset(C + (ptrdiff_t)i * ldc, 0, (size_t)N * sizeof(float));
        return;
    }
    const Ukr u = pick_kernel(N);
    const int mr = u.mr, nr = u.nr;
    const int MC = mr * (112 / mr);  // 112 rows: 28x16 and 14x32 both divide it
    const int mc_blocks = (M + MC - 1) / MC;
    const int nthr = omp_in_parallel() ? 1 : omp_get_max_threads();
    const int ncmax = N < NC ? N : NC;
    float *bp = ct_alloc((size_t)KC * ((ncmax + nr - 1) / nr) * nr * sizeof(float));
    float *ap_all = ct_alloc((size_t)nthr * MC * KC * sizeof(float));

    for (int jc = 0; jc < N; jc += NC) {
        const int nc = CT_MIN(NC, N - jc);
        const int slivers = (nc + nr - 1) / nr;
        // Few row blocks (small M): also split the columns so that every thread has work.
        int segs = 1;
        if (mc_blocks < 4 * nthr) segs = CT_MIN(slivers, (4 * nthr + mc_blocks - 1) / mc_blocks);
        const int per_seg = (slivers + segs - 1) / segs;
        segs = (slivers + per_seg - 1) / per_seg;
        for (int pc = 0; pc < K; pc += KC) {
            const int kc = CT_MIN(KC, K - pc);
            const int acc = accumulate || pc > 0;
            const float *Bblk = B + pc * b_rs + jc * b_cs;
            const float *Ablk = A + pc * a_cs;
#pragma omp parallel num_threads(nthr)
            {
#pragma omp for schedule(static)
                for (int s = 0; s < slivers; s++)
                    pack_b(bp + (size_t)s * nr * kc, Bblk, b_rs, b_cs, kc, s * nr, CT_MIN(nr, nc - s * nr), nr);
                float *ap = ap_all + (size_t)omp_get_thread_num() * MC * KC;
#pragma omp for schedule(dynamic, 1)
                for (int t = 0; t < mc_blocks * segs; t++) {
                    const int ib = t / segs, sg = t % segs;
                    const int i0 = ib * MC, mc = CT_MIN(MC, M - i0);
                    const int s0 = sg * per_seg, s1 = CT_MIN(slivers, s0 + per_seg);
                    const int asl = (mc + mr - 1) / mr;
                    for (int a = 0; a < asl; a++)
                        pack_a(ap + (size_t)a * mr * kc, Ablk, a_rs, a_cs, kc, i0 + a * mr, CT_MIN(mr, mc - a * mr), mr);
                    for (int s = s0; s < s1; s++) {
                        const int j0 = s * nr, n = CT_MIN(nr, nc - j0);
                        const float *bs = bp + (size_t)s * nr * kc;
                        for (int a = 0; a < asl; a++) {
                            const int m = CT_MIN(mr, mc - a * mr);
                            float *c = C + (ptrdiff_t)(i0 + a * mr) * ldc + jc + j0;
                            if (m == mr && n == nr) {
                                u.fn(kc, ap + (size_t)a * mr * kc, bs, c, ldc, acc);
                            } else {
                                float tile[28 * 32];
                                u.fn(kc, ap + (size_t)a * mr * kc, bs, tile, nr, 0);
                                for (int i = 0; i < m; i++)
                                    for (int j = 0; j < n; j++)
                                        c[(ptrdiff_t)i * ldc + j] = acc ? c[(ptrdiff_t)i * ldc + j] + tile[i * nr + j] : tile[i * nr + j];
                            }
                        }
                    }
                }
            }
        }
    }
    free(ap_all);
    free(bp);
}
