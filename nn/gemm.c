// Blocked, packed SGEMM with run-time chosen micro-kernels. See nn/gemm.h for the contract.
//
// Structure: C is cut into tasks, one block of MC rows times one segment of NR-wide column slivers
// (segments of at most NC columns, cut finer when there are few row blocks). A task walks the whole
// depth K in blocks of KC; per block it packs its slivers of B ([kc][NR], zero-padded) and of A
// ([MR][AS]) into its thread's buffers and runs the micro-kernel on every (A, B) sliver pair, MR x NR
// accumulators in registers for the whole kc. A convolution's im2col matrix is packed straight
// from the input (GemmView.conv), so it never exists in memory.
// Only which thread runs a task depends on the thread count; what each C element sums, and in
// which order, does not.
#include "nn/gemm.h"

#include <immintrin.h>
#include <omp.h>
#include <string.h>

#include "util/common.h"

#define KC 256
// Row stride of a packed A sliver: KC plus one cache line, so the MR rows do not all fall into the
// same few L1 sets (a stride of exactly 1 KiB maps 28 rows onto 4 of the 64 sets).
#define AS (KC + 16)
#define NC 1024

typedef void (*UkrFn)(int kc, const float *restrict a, const float *restrict b, float *restrict c,
                      ptrdiff_t ldc, int acc);
typedef struct {
    int mr, nr;
    UkrFn fn;
} Ukr;

// ---------------------------------------------------------------------------------------------
// Micro-kernels: c[MR, NR] (row stride ldc) = (acc ? c : 0) + sum_p a[0..MR)[p] x b[p][0..NR).
// An A sliver stores its MR rows one after another at the fixed stride AS, so every broadcast
// address is the same pointer plus a constant, and packing a row is a plain copy.
// The accumulators start at zero and c is added at the end, so the full-tile path and the edge
// path (through a temporary tile) perform the same float operations per element.

static void ukr_generic_4x16(int kc, const float *restrict a, const float *restrict b,
                             float *restrict c, ptrdiff_t ldc, int acc) {
    float r[4][16] = {{0}};
    for (int p = 0; p < kc; p++)
        for (int i = 0; i < 4; i++)
            for (int j = 0; j < 16; j++) r[i][j] += a[i * AS + p] * b[p * 16 + j];
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
                VEC av = BCAST(a[i * AS + p]);                                                   \
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
DEFINE_UKR(ukr_avx512_16x16, __m512, 16, _mm512_setzero_ps, _mm512_loadu_ps, _mm512_storeu_ps,
           _mm512_set1_ps, _mm512_fmadd_ps, _mm512_add_ps, 16, 1)
DEFINE_UKR(ukr_avx512_8x32, __m512, 16, _mm512_setzero_ps, _mm512_loadu_ps, _mm512_storeu_ps,
           _mm512_set1_ps, _mm512_fmadd_ps, _mm512_add_ps, 8, 2)
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

// Padding a dimension up to the kernel's tile wastes work; pick the AVX-512 shape that wastes
// least (weighted a little toward the larger tiles, which need fewer loads per FMA).
static double tile_use(int M, int N, int mr, int nr) {
    return (double)M / (((M + mr - 1) / mr) * mr) * N / (((N + nr - 1) / nr) * nr);
}

// nr32: only the 32-wide kernels (B prepacked for them).
static Ukr pick_kernel(int M, int N, int nr32) {
    switch (current_isa()) {
    case ISA_AVX512: {
        const Ukr c[4] = {{14, 32, ukr_avx512_14x32}, {8, 32, ukr_avx512_8x32}, {28, 16, ukr_avx512_28x16},
                          {16, 16, ukr_avx512_16x16}};
        const double w[4] = {1.0, 0.9, 0.97, 0.85};
        int best = 0;
        double bu = 0;
        for (int i = 0; i < (nr32 ? 2 : 4); i++) {
            const double u = w[i] * tile_use(M, N, c[i].mr, c[i].nr);
            if (u > bu) bu = u, best = i;
        }
        return c[best];
    }
    case ISA_AVX2: if (!nr32) return (Ukr){6, 16, ukr_avx2_6x16}; break;
    default: if (!nr32) return (Ukr){4, 16, ukr_generic_4x16};
    }
    ct_die("sgemm: B was packed for the AVX-512 kernels, but the %s kernel is in use", sgemm_kernel_name());
}

// ---------------------------------------------------------------------------------------------
// Packing. With 16-channel layers a packed element feeds only 32 flops, so copying it costs as
// much as the arithmetic: the packing routines get AVX-512 clones (GCC picks one at load time).
#if defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_ADDRESS__)
#define PACK_CLONES __attribute__((target_clones("avx512f", "default"), optimize("no-tree-loop-distribute-patterns")))
#else
#define PACK_CLONES
#endif
// (no-tree-loop-distribute-patterns: the copy loops of short channel runs stay inline vector
// code instead of becoming a memmove call per run.)

// Walks the pixels of an im2col matrix in row order without a division per row.
typedef struct {
    int n, p, q;
} Pixel;
static Pixel pixel_of(const ConvShape *s, size_t m) {
    const size_t pq = (size_t)s->P * s->Q;
    return (Pixel){(int)(m / pq), (int)(m % pq) / s->Q, (int)(m % pq) % s->Q};
}
static void pixel_next(const ConvShape *s, Pixel *x) {
    if (++x->q == s->Q) {
        x->q = 0;
        if (++x->p == s->P) x->p = 0, x->n++;
    }
}

// dst[0, len) = im2col row of pixel x, columns [k0, k0 + len) of the convolution input `in`.
PACK_CLONES static void conv_row(const ConvShape *s, const float *in, Pixel x, int k0, int len, float *restrict dst) {
    const int h0 = x.p * s->stride - s->pad, w0 = x.q * s->stride - s->pad, C = s->C, SC = s->S * C;
    int r = k0 / SC, t = (k0 % SC) / C, c = k0 % C;
    const float *img = in + (size_t)x.n * s->H * s->W * C;
    for (int j = 0; j < len;) {
        const int run = CT_MIN(C - c, len - j), h = h0 + r, w = w0 + t;
        if (h >= 0 && h < s->H && w >= 0 && w < s->W) {
            const float *src = img + ((size_t)h * s->W + w) * C + c;
            int i = 0;
            for (; i + 16 <= run; i += 16) __builtin_memcpy(dst + j + i, src + i, 64);  // one vector move
            for (; i < run; i++) dst[j + i] = src[i];
        } else {
            int i = 0;
            for (; i + 16 <= run; i += 16) __builtin_memset(dst + j + i, 0, 64);
            for (; i < run; i++) dst[j + i] = 0.0f;
        }
        j += run;
        c = 0;
        if (++t == s->S) t = 0, r++;
    }
}

// im2col view: rows [pc, pc + kc), columns [j0, j0 + ncols) -> consecutive slivers bp[kc][nr],
// zero-padded. When the channel runs never straddle a sliver (C divides nr, j0 on a run start),
// each run is copied straight into its sliver; otherwise the row is gathered once and split.
PACK_CLONES static void pack_b_conv(float *restrict bp, const GemmView *B, int pc, int kc, int j0, int ncols, int nr) {
    const ConvShape *s = B->conv;
    const int nsl = (ncols + nr - 1) / nr, C = s->C;
    const size_t sl_stride = (size_t)nr * kc;
    Pixel x = pixel_of(s, B->row0 + pc);
    if (nr % C == 0 && j0 % C == 0) {
        const int SC = s->S * C, r0 = j0 / SC, t0 = (j0 % SC) / C;
        for (int p = 0; p < kc; p++, pixel_next(s, &x)) {
            const int h0 = x.p * s->stride - s->pad, w0 = x.q * s->stride - s->pad;
            const float *img = B->p + (size_t)x.n * s->H * s->W * C;
            int r = r0, t = t0;
            for (int j = 0; j < ncols; j += C) {
                float *dst = bp + (size_t)(j / nr) * sl_stride + (size_t)p * nr + j % nr;
                const int h = h0 + r, w = w0 + t;
                if (h >= 0 && h < s->H && w >= 0 && w < s->W) {
                    const float *src = img + ((size_t)h * s->W + w) * C;
                    int i = 0;
                    for (; i + 16 <= C; i += 16) __builtin_memcpy(dst + i, src + i, 64);
                    for (; i < C; i++) dst[i] = src[i];
                } else {
                    for (int i = 0; i < C; i++) dst[i] = 0.0f;
                }
                if (++t == s->S) t = 0, r++;
            }
            for (int j = ncols; j < nsl * nr; j++) bp[(size_t)(j / nr) * sl_stride + (size_t)p * nr + j % nr] = 0.0f;
        }
        return;
    }
    float row[NC];
    for (int p = 0; p < kc; p++, pixel_next(s, &x)) {
        conv_row(s, B->p, x, j0, ncols, row);
        for (int j = ncols; j < nsl * nr; j++) row[j] = 0.0f;
        for (int sl = 0; sl < nsl; sl++) {
            float *dst = bp + sl * sl_stride + (size_t)p * nr;
            for (int j = 0; j < nr; j++) dst[j] = row[sl * nr + j];
        }
    }
}

// Element (i, j) of a block view (GemmBlocks).
static inline const float *block_at(const GemmView *V, int i, int j) {
    const GemmBlocks *b = V->blocks;
    return V->p + b->off[(size_t)(i / b->bi) * b->nbj + j / b->bj] + (ptrdiff_t)(i % b->bi) * V->rs +
           (ptrdiff_t)(j % b->bj) * V->cs;
}

// pack_b of a block view: each run of a row (cs == 1) or column within one block is a strided run.
PACK_CLONES static void pack_b_blocks(float *restrict bp, const GemmView *B, int pc, int kc, int j0, int n, int nr) {
    const GemmBlocks *b = B->blocks;
    if (B->cs == 1) {
        for (int p = 0; p < kc; p++) {
            float *dst = bp + (size_t)p * nr;
            for (int j = j0; j < j0 + n;) {
                const int len = CT_MIN(b->bj - j % b->bj, j0 + n - j);
                const float *src = block_at(B, pc + p, j);
                for (int t = 0; t < len; t++) dst[j - j0 + t] = src[t];
                j += len;
            }
            for (int j = n; j < nr; j++) dst[j] = 0.0f;
        }
        return;
    }
    for (int j = 0; j < n; j++)
        for (int p = 0; p < kc;) {
            const int len = CT_MIN(b->bi - (pc + p) % b->bi, kc - p);
            const float *src = block_at(B, pc + p, j0 + j);
            for (int t = 0; t < len; t++) bp[(size_t)(p + t) * nr + j] = src[t * B->rs];
            p += len;
        }
    for (int p = 0; p < kc; p++)
        for (int j = n; j < nr; j++) bp[(size_t)p * nr + j] = 0.0f;
}

// Strided view rows [pc, pc + kc), columns [j0, j0 + n) (n <= nr) -> bp[kc][nr], zero-padded.
PACK_CLONES static void pack_b(float *restrict bp, const GemmView *B, int pc, int kc, int j0, int n, int nr) {
    if (B->blocks) {
        pack_b_blocks(bp, B, pc, kc, j0, n, nr);
        return;
    }
    if (B->cs == 1) {
        for (int p = 0; p < kc; p++) {
            const float *src = B->p + (pc + p) * B->rs + j0;
            float *dst = bp + (size_t)p * nr;
            for (int j = 0; j < n; j++) dst[j] = src[j];
            for (int j = n; j < nr; j++) dst[j] = 0.0f;
        }
    } else {
        for (int j = 0; j < n; j++) {
            const float *src = B->p + pc * B->rs + (ptrdiff_t)(j0 + j) * B->cs;
            for (int p = 0; p < kc; p++) bp[(size_t)p * nr + j] = src[p * B->rs];
        }
        for (int p = 0; p < kc; p++)
            for (int j = n; j < nr; j++) bp[(size_t)p * nr + j] = 0.0f;
    }
}

// View rows [i0, i0 + m) (m <= mr), columns [pc, pc + kc) -> ap[mr][AS] (row i at ap + i*AS),
// zero-padded rows.
PACK_CLONES static void pack_a(float *restrict ap, const GemmView *A, int pc, int kc, int i0, int m, int mr) {
    if (A->conv) {
        Pixel x = pixel_of(A->conv, A->row0 + i0);
        for (int i = 0; i < m; i++, pixel_next(A->conv, &x)) conv_row(A->conv, A->p, x, pc, kc, ap + (size_t)i * AS);
    } else if (A->blocks) {
        const int bj = A->blocks->bj;
        for (int i = 0; i < m; i++) {
            float *dst = ap + (size_t)i * AS - pc;
            for (int j = pc; j < pc + kc;) {
                const int len = CT_MIN(bj - j % bj, pc + kc - j);
                const float *src = block_at(A, i0 + i, j);
                if (A->cs == 1) memcpy(dst + j, src, (size_t)len * sizeof(float));
                else for (int t = 0; t < len; t++) dst[j + t] = src[t * A->cs];
                j += len;
            }
        }
    } else if (A->cs == 1) {
        for (int i = 0; i < m; i++)
            memcpy(ap + (size_t)i * AS, A->p + (ptrdiff_t)(i0 + i) * A->rs + pc, (size_t)kc * sizeof(float));
    } else {
        for (int p = 0; p < kc; p++) {
            const float *src = A->p + (ptrdiff_t)(pc + p) * A->cs + (ptrdiff_t)i0 * A->rs;
            for (int i = 0; i < m; i++) ap[(size_t)i * AS + p] = src[i * A->rs];
        }
    }
    for (int i = m; i < mr; i++) memset(ap + (size_t)i * AS, 0, (size_t)kc * sizeof(float));
}

// The epilogue on rows [i0, i0 + m), columns [j0, j0 + n) of C (see GemmEpilogue).
PACK_CLONES static void apply_epilogue(const GemmEpilogue *ep, float *restrict c, ptrdiff_t ldc, int i0, int j0,
                                       int m, int n) {
    for (int i = 0; i < m; i++) {
        float *restrict row = c + (ptrdiff_t)i * ldc;
        if (ep->bias)
            for (int j = 0; j < n; j++) row[j] += ep->bias[j0 + j];
        if (ep->res) {
            const float *restrict r = ep->res + (ptrdiff_t)(i0 + i) * ep->ldr + j0;
            for (int j = 0; j < n; j++) row[j] += r[j];
        }
        if (ep->relu)
            for (int j = 0; j < n; j++) row[j] = row[j] > 0.0f ? row[j] : 0.0f;
    }
}

// ---------------------------------------------------------------------------------------------
// A task is one block of MC rows times one segment of B slivers, over the whole depth K: it packs
// its own panels (a little duplicated work across tasks, no barriers), and it alone writes its
// part of C, summing the K blocks in order.
static void gemm_run(int M, int N, int K, const GemmView *A, const GemmView *B, float *C, ptrdiff_t ldc,
                     int accumulate, const GemmEpilogue *ep) {
    if (M <= 0 || N <= 0) return;
    if (K <= 0) {
        if (!accumulate)
            for (int i = 0; i < M; i++) memset(C + (ptrdiff_t)i * ldc, 0, (size_t)N * sizeof(float));
        return;
    }
    if ((A->blocks && A->conv) || (B->blocks && (B->conv || B->packed))) ct_die("sgemm: a block view is a strided view");
    const Ukr u = pick_kernel(M, N, B->packed);
    const int mr = u.mr, nr = u.nr;
    const int MC = mr * (112 / mr);
    const int mc_blocks = (M + MC - 1) / MC;
    const int nthr = omp_in_parallel() ? 1 : omp_get_max_threads();
    const int slivers = (N + nr - 1) / nr;
    int per_seg = CT_MIN(slivers, NC / nr);
    int segs = (slivers + per_seg - 1) / per_seg;
    if (nthr > 1 && mc_blocks * segs < 4 * nthr) {  // few row blocks: cut the columns finer so all threads work
        segs = CT_MIN(slivers, (4 * nthr + mc_blocks - 1) / mc_blocks);
        per_seg = (slivers + segs - 1) / segs;
        segs = (slivers + per_seg - 1) / per_seg;
    }
    // B shared by several row blocks is packed once, by all threads, before the tasks start
    // (bounded: B larger than 32 MB packed is packed per task instead).
    const size_t bfull = (size_t)K * slivers * nr;
    const int prepacked = B->packed;
    const int shared_b = prepacked || (mc_blocks > 1 && bfull * sizeof(float) <= ((size_t)32 << 20));
    const int kcmax = CT_MIN(K, KC);
    const size_t ap_size = (size_t)MC * AS, bp_size = shared_b ? 0 : (size_t)kcmax * per_seg * nr;
    float *buf = ct_alloc(((size_t)nthr * (ap_size + bp_size) + (shared_b && !prepacked ? bfull : 0)) * sizeof(float));
    float *bshared = prepacked ? (float *)B->p : buf + (size_t)nthr * (ap_size + bp_size);
    const int kblocks = (K + KC - 1) / KC;
#pragma omp parallel num_threads(nthr)
    {
        float *ap = buf + (size_t)omp_get_thread_num() * (ap_size + bp_size), *bp = ap + ap_size;
        if (shared_b && !prepacked) {
            // Block pc (depth kc) sliver s lives at pc * slivers * nr + s * nr * kc.
#pragma omp for schedule(static)
            for (int t = 0; t < kblocks * slivers; t++) {
                const int pc = (t / slivers) * KC, sl = t % slivers, kc = CT_MIN(KC, K - pc);
                float *dst = bshared + (size_t)pc * slivers * nr + (size_t)sl * nr * kc;
                if (B->conv) pack_b_conv(dst, B, pc, kc, sl * nr, CT_MIN(nr, N - sl * nr), nr);
                else pack_b(dst, B, pc, kc, sl * nr, CT_MIN(nr, N - sl * nr), nr);
            }
        }
#pragma omp for schedule(dynamic, 1)
        for (int t = 0; t < mc_blocks * segs; t++) {
            const int ib = t / segs, sg = t % segs;
            const int i0 = ib * MC, mc = CT_MIN(MC, M - i0), asl = (mc + mr - 1) / mr;
            const int s0 = sg * per_seg, s1 = CT_MIN(slivers, s0 + per_seg);
            for (int pc = 0; pc < K; pc += KC) {
                const int kc = CT_MIN(KC, K - pc), acc = accumulate || pc > 0;
                // bseg: sliver s0 of this depth block; slivers follow at nr * kc.
                const float *bseg;
                if (shared_b) {
                    bseg = bshared + (size_t)pc * slivers * nr + (size_t)s0 * nr * kc;
                } else {
                    if (B->conv)
                        pack_b_conv(bp, B, pc, kc, s0 * nr, CT_MIN(N, s1 * nr) - s0 * nr, nr);
                    else
                        for (int s = s0; s < s1; s++)
                            pack_b(bp + (size_t)(s - s0) * nr * kc, B, pc, kc, s * nr, CT_MIN(nr, N - s * nr), nr);
                    bseg = bp;
                }
                for (int a = 0; a < asl; a++)
                    pack_a(ap + (size_t)a * mr * AS, A, pc, kc, i0 + a * mr, CT_MIN(mr, mc - a * mr), mr);
                for (int s = s0; s < s1; s++) {
                    const int j0 = s * nr, n = CT_MIN(nr, N - j0);
                    const float *bs = bseg + (size_t)(s - s0) * nr * kc;
                    for (int a = 0; a < asl; a++) {
                        const int m = CT_MIN(mr, mc - a * mr);
                        float *c = C + (ptrdiff_t)(i0 + a * mr) * ldc + j0;
                        if (m == mr && n == nr) {
                            u.fn(kc, ap + (size_t)a * mr * AS, bs, c, ldc, acc);
                        } else {
                            float tile[28 * 32];
                            u.fn(kc, ap + (size_t)a * mr * AS, bs, tile, nr, 0);
                            for (int i = 0; i < m; i++)
                                for (int j = 0; j < n; j++)
                                    c[(ptrdiff_t)i * ldc + j] =
                                        acc ? c[(ptrdiff_t)i * ldc + j] + tile[i * nr + j] : tile[i * nr + j];
                        }
                        if (ep && pc + KC >= K) apply_epilogue(ep, c, ldc, i0 + a * mr, j0, m, n);
                    }
                }
            }
        }
    }
    free(buf);
}

int sgemm_packs_b(void) { return current_isa() == ISA_AVX512; }

size_t sgemm_packed_b_size(int K, int N) { return (size_t)K * ((N + 31) / 32) * 32; }

// The layout of gemm_run's shared B for nr = 32: block pc (depth kc) sliver s at
// pc * slivers * 32 + s * 32 * kc, element (p, j) of the sliver at p * 32 + j.
void sgemm_pack_b(float *dst, const GemmView *B, int K, int N) {
    if (B->conv || B->packed) ct_die("sgemm_pack_b: B must be a strided view");
    const int slivers = (N + 31) / 32;
    for (int pc = 0; pc < K; pc += KC) {
        const int kc = CT_MIN(KC, K - pc);
        for (int sl = 0; sl < slivers; sl++)
            pack_b(dst + (size_t)pc * slivers * 32 + (size_t)sl * 32 * kc, B, pc, kc, sl * 32, CT_MIN(32, N - sl * 32), 32);
    }
}

void sgemm_view(int M, int N, int K, const GemmView *A, const GemmView *B, float *C, ptrdiff_t ldc,
                int accumulate) {
    gemm_run(M, N, K, A, B, C, ldc, accumulate, NULL);
}

void sgemm_view_ep(int M, int N, int K, const GemmView *A, const GemmView *B, float *C, ptrdiff_t ldc,
                   const GemmEpilogue *ep) {
    if (K <= 0) ct_die("sgemm_view_ep: depth %d", K);
    gemm_run(M, N, K, A, B, C, ldc, 0, ep);
}

void sgemm(int M, int N, int K, const float *A, ptrdiff_t a_rs, ptrdiff_t a_cs, const float *B,
           ptrdiff_t b_rs, ptrdiff_t b_cs, float *C, ptrdiff_t ldc, int accumulate) {
    const GemmView a = {A, a_rs, a_cs, NULL, 0, 0, NULL}, b = {B, b_rs, b_cs, NULL, 0, 0, NULL};
    sgemm_view(M, N, K, &a, &b, C, ldc, accumulate);
}
