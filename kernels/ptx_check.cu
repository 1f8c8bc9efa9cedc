// Check kernels for the inline-PTX wrappers of kernels/ptx.cuh. Compiled like every kernel: by
// nvcc for sm_80/sm_90 (so the asm of the real path is assembled on every build with nvcc), and
// by g++ against the emulator, where tests/emu_ptx_layouts.c compares them with plain host
// arithmetic.
// On a GPU the same entry points check the hardware (and so the emulator's layouts).
#include "kernels/common.cuh"
#include "kernels/ptx.cuh"
#include "kernels/ptx_wgmma.cuh"
#include "kernels/devcaps.cuh"
#include "kernels/wgmma_ring.cuh"

#ifdef __CUDACC__
#define PC_UNROLL _Pragma("unroll")
#else
#define PC_UNROLL
#endif

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

// One warp: matrix `m` (32 rows of 8 bf16, row-major) is staged in shared memory; lane l points
// at row l (lanes beyond 8*num point at row 0, as the instruction ignores them). out[l*4 + i] is
// lane l's register i.
__global__ void ptx_ldmatrix_kernel(const uint16_t *m, uint32_t *out, int num, int trans) {
    __shared__ __align__(16) uint16_t tile[32 * 8];
    int lane = threadIdx.x;
    for (int i = lane; i < 32 * 8; i += 32) tile[i] = m[i];
    __syncwarp();
    const uint16_t *row = tile + (lane < 8 * num ? lane : 0) * 8;
    uint32_t r[4] = {0, 0, 0, 0};
    if (!trans) {
        if (num == 1) ct_ldmatrix_x1(r, row);
        else if (num == 2) ct_ldmatrix_x2(r, row);
        else ct_ldmatrix_x4(r, row);
    } else {
        if (num == 1) ct_ldmatrix_x1_trans(r, row);
        else if (num == 2) ct_ldmatrix_x2_trans(r, row);
        else ct_ldmatrix_x4_trans(r, row);
    }
    for (int i = 0; i < 4; i++) out[lane * 4 + i] = r[i];
}

// D (M x N) = A (M x K, row-major) * B + C, fp32; one warp per 16x8 tile of D, K in steps of 16.
// mode 0: B given as N x K (K contiguous): A by ldmatrix.x4, B by ldmatrix.x2 (the conv layout).
// mode 1: B given as K x N (N contiguous): B by ldmatrix.x2.trans.
// mode 2: B as in mode 0, fragments loaded straight from global memory by the documented layout
//         (no ldmatrix): checks mma alone.
// Tiles are staged in shared memory with cp.async.cg (16 bytes), waited for before ldmatrix.
__global__ void ptx_mma_kernel(const uint16_t *A, const uint16_t *B, const float *C, float *D,
                               int M, int N, int K, int mode) {
    __shared__ __align__(16) uint16_t sa[16 * 16];
    __shared__ __align__(16) uint16_t sb[16 * 16];
    int lane = threadIdx.x, g = lane >> 2, t = lane & 3;
    int m0 = blockIdx.y * 16, n0 = blockIdx.x * 8;
    float acc[4];
    for (int i = 0; i < 4; i++) acc[i] = C[(m0 + g + 8 * (i >> 1)) * N + n0 + 2 * t + (i & 1)];
    for (int k0 = 0; k0 < K; k0 += 16) {
        uint32_t a[4], b[2];
        if (mode == 2) {
            for (int r = 0; r < 4; r++) {
                const uint16_t *p = A + (m0 + g + 8 * (r & 1)) * K + k0 + 2 * t + 8 * (r >> 1);
                a[r] = p[0] | (uint32_t)p[1] << 16;
            }
            for (int r = 0; r < 2; r++) {
                const uint16_t *p = B + (n0 + g) * K + k0 + 2 * t + 8 * r;
                b[r] = p[0] | (uint32_t)p[1] << 16;
            }
        } else {
            // A tile 16x16: 32 chunks of 16 bytes (8 bf16), one per lane.
            int ar = lane >> 1, ac = (lane & 1) * 8;
            ct_cp_async_cg16(sa + ar * 16 + ac, A + (m0 + ar) * K + k0 + ac);
            if (mode == 0) {
                // B tile 8 (n) x 16 (k): 16 chunks.
                if (lane < 16) ct_cp_async_cg16(sb + ar * 16 + ac, B + (n0 + ar) * K + k0 + ac);
            } else {
                // B tile 16 (k) x 8 (n): 16 chunks, one row each.
                if (lane < 16) ct_cp_async_cg16(sb + lane * 8, B + (k0 + lane) * N + n0);
            }
            ct_cp_async_commit();
            ct_cp_async_wait<0>();
            __syncwarp();
            // x4 for A: matrices (rows 0-7, k 0-7), (rows 8-15, k 0-7), (rows 0-7, k 8-15),
            // (rows 8-15, k 8-15) = a[0..3].
            ct_ldmatrix_x4(a, sa + (lane & 15) * 16 + (lane >> 4) * 8);
            if (mode == 0) {
                // x2 for B: matrices (n 0-7, k 0-7), (n 0-7, k 8-15) = b[0..1].
                ct_ldmatrix_x2(b, sb + (lane & 7) * 16 + ((lane >> 3) & 1) * 8);
            } else {
                // x2.trans: rows are k (0-7, then 8-15), transposed into the "col" fragment.
                ct_ldmatrix_x2_trans(b, sb + (lane & 15) * 8);
            }
            __syncwarp();  // everyone has read the tile before the next step overwrites it
        }
        ct_mma_m16n8k16_bf16(acc, a, b, acc);
    }
    for (int i = 0; i < 4; i++) D[(m0 + g + 8 * (i >> 1)) * N + n0 + 2 * t + (i & 1)] = acc[i];
}

// cp.async with partial sources: each thread copies chunk i (4 floats) with src_bytes =
// 4 * (i % 5) clamped to 16, into shared memory, then writes the whole chunk out: the bytes past
// src_bytes must be zero. Uses the ca/16, ca/8 and ca/4 forms on alternating chunks.
__global__ void ptx_cp_async_kernel(const float *src, float *dst, int n) {
    __shared__ __align__(16) float s[256 * 4];
    int i = threadIdx.x;
    if (i * 4 >= n) return;
    int src_bytes = 4 * (i % 5);
    if (src_bytes > 16) src_bytes = 16;
    if (i % 3 == 0) {
        ct_cp_async_cg16(s + i * 4, src + i * 4, src_bytes);
    } else if (i % 3 == 1) {
        ct_cp_async_ca16(s + i * 4, src + i * 4, src_bytes);
    } else {
        int b0 = src_bytes < 8 ? src_bytes : 8;
        ct_cp_async_ca8(s + i * 4, src + i * 4, b0);
        ct_cp_async_commit();
        ct_cp_async_ca4(s + i * 4 + 2, src + i * 4 + 2, src_bytes > 8 ? (src_bytes - 8 < 4 ? src_bytes - 8 : 4) : 0);
        ct_cp_async_ca4(s + i * 4 + 3, src + i * 4 + 3, src_bytes > 12 ? src_bytes - 12 : 0);
    }
    ct_cp_async_wait_all();
    for (int k = 0; k < 4; k++) dst[i * 4 + k] = s[i * 4 + k];
}

extern "C" void ct_ptx_check_ldmatrix(const uint16_t *m, uint32_t *out, int num, int trans,
                                      cudaStream_t stream) {
    CT_LAUNCH(ptx_ldmatrix_kernel, 1, 32, 0, stream, m, out, num, trans);
    CT_CHECK_LAUNCH("ptx_ldmatrix_kernel");
}

extern "C" void ct_ptx_check_mma(const uint16_t *A, const uint16_t *B, const float *C, float *D,
                                 int M, int N, int K, int mode, cudaStream_t stream) {
    if (M % 16 || N % 8 || K % 16) ct_die("ct_ptx_check_mma: M %d N %d K %d not multiples of 16/8/16", M, N, K);
    CT_LAUNCH(ptx_mma_kernel, dim3(N / 8, M / 16), 32, 0, stream, A, B, C, D, M, N, K, mode);
    CT_CHECK_LAUNCH("ptx_mma_kernel");
}

extern "C" void ct_ptx_check_cp_async(const float *src, float *dst, int n, cudaStream_t stream) {
    if (n % 4 || n > 1024) ct_die("ct_ptx_check_cp_async: n %d must be a multiple of 4 up to 1024", n);
    CT_LAUNCH(ptx_cp_async_kernel, 1, 256, 0, stream, src, dst, n);
    CT_CHECK_LAUNCH("ptx_cp_async_kernel");
}

// ---------------------------------------------------------------------------------------------
// wgmma (kernels/ptx_wgmma.cuh): one warpgroup computes D (64 x N, fp32) = A (64 x K) * B^T with
// A and B (N x K) row-major bf16 in global memory, staged by plain stores into shared memory in
// the canonical layout of swizzle mode `swz` and read by wgmma through descriptors, K/16 steps in
// one commit group; the first step has scale-d = 0 over accumulators filled with NaN (so D must
// not be read). TA / TB: the operand is staged MN-major (ct_wg_tile_offset_mn, ct_wg_tile_desc_mn)
// and read with the instruction's transpose bit, else K-major (ct_wg_tile_offset, ct_wg_tile_desc).
// D is written from the documented fragment layout. A layout or descriptor the hardware reads
// differently gives errors of order one.
static __host__ __device__ size_t ptx_wg_tile_bytes(int swz, int R, int K, int mn) {
    if (!mn || swz == CT_SWZ_NONE) return (size_t)R * K * 2;
    int per = ct_swz_width(swz) / 2;
    return (size_t)((R + per - 1) / per) * K * ct_swz_width(swz);
}
template <int N, int TA, int TB>
__global__ void __launch_bounds__(128) ptx_wgmma_kernel(const uint16_t *A, const uint16_t *B, float *D, int K, int swz) {
    CT_DYN_SMEM(unsigned char, raw);
    unsigned char *sa = raw + ((1024 - ct_smem_u32(raw) % 1024) % 1024);
    unsigned char *sb = sa + ptx_wg_tile_bytes(swz, 64, K, TA);  // a multiple of 1024 for K % 64 == 0
    int tid = threadIdx.x;
    for (int i = tid; i < 64 * K; i += 128) {
        uint32_t o = TA ? ct_wg_tile_offset_mn(swz, 64, K, i / K, i % K) : ct_wg_tile_offset(swz, 64, i / K, i % K);
        *(uint16_t *)(sa + o) = A[i];
    }
    for (int i = tid; i < N * K; i += 128) {
        uint32_t o = TB ? ct_wg_tile_offset_mn(swz, N, K, i / K, i % K) : ct_wg_tile_offset(swz, N, i / K, i % K);
        *(uint16_t *)(sb + o) = B[i];
    }
    ct_fence_proxy_async();  // generic-proxy stores, then the async proxy (wgmma) reads them
    __syncthreads();
    float acc[N / 2];
PC_UNROLL
    for (int i = 0; i < N / 2; i++) acc[i] = __int_as_float(0x7fc00000);
    uint32_t a0 = ct_smem_u32(sa), b0 = ct_smem_u32(sb);
    ct_wgmma_fence();
    for (int s = 0; s < K / 16; s++) {
        uint64_t da = TA ? ct_wg_tile_desc_mn(swz, 64, K, a0, s) : ct_wg_tile_desc(swz, 64, a0, s);
        uint64_t db = TB ? ct_wg_tile_desc_mn(swz, N, K, b0, s) : ct_wg_tile_desc(swz, N, b0, s);
        ct_wgmma_bf16<N, TA, TB>(acc, da, db, s > 0);
    }
    ct_wgmma_commit();
    ct_wgmma_wait<0>();
    int w = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
PC_UNROLL
    for (int j = 0; j < N / 8; j++)
PC_UNROLL
        for (int e = 0; e < 4; e++) D[(16 * w + g + 8 * (e >> 1)) * N + 8 * j + 2 * t + (e & 1)] = acc[4 * j + e];
}

// Whether this device runs the sm_90a code (wgmma, mbarrier try_wait, cp.async.bulk).
static int ptx_hopper_device() { return ct_dev_has_wgmma(); }

template <int N, int TA, int TB>
static void ptx_wgmma_launch(const uint16_t *A, const uint16_t *B, float *D, int K, int swz, cudaStream_t stream) {
    size_t smem = 1024 + ptx_wg_tile_bytes(swz, 64, K, TA) + ptx_wg_tile_bytes(swz, N, K, TB);
    CT_CUDA_CHECK(cudaFuncSetAttribute(ptx_wgmma_kernel<N, TA, TB>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    CT_LAUNCH((ptx_wgmma_kernel<N, TA, TB>), 1, 128, smem, stream, A, B, D, K, swz);
}
template <int N>
static void ptx_wgmma_launch_n(const uint16_t *A, const uint16_t *B, float *D, int K, int swz, int trans, cudaStream_t stream) {
    if (trans == 0) ptx_wgmma_launch<N, 0, 0>(A, B, D, K, swz, stream);
    else if (trans == 1) ptx_wgmma_launch<N, 1, 0>(A, B, D, K, swz, stream);
    else if (trans == 2) ptx_wgmma_launch<N, 0, 1>(A, B, D, K, swz, stream);
    else ptx_wgmma_launch<N, 1, 1>(A, B, D, K, swz, stream);
}

// trans: bit 0 stages A MN-major (M-major), bit 1 B (N-major). Returns 0 (and does nothing) on a
// device without wgmma.
extern "C" int ct_ptx_check_wgmma(const uint16_t *A, const uint16_t *B, float *D, int N, int K, int swz, int trans,
                                  cudaStream_t stream) {
    if (K % 64 || K <= 0 || K > 256) ct_die("ct_ptx_check_wgmma: K %d must be 64, 128, 192 or 256", K);
    if (trans < 0 || trans > 3) ct_die("ct_ptx_check_wgmma: trans %d not among 0..3", trans);
    if (!ptx_hopper_device()) return 0;
    if (N == 16) ptx_wgmma_launch_n<16>(A, B, D, K, swz, trans, stream);
    else if (N == 64) ptx_wgmma_launch_n<64>(A, B, D, K, swz, trans, stream);
    else if (N == 128) ptx_wgmma_launch_n<128>(A, B, D, K, swz, trans, stream);
    else ct_die("ct_ptx_check_wgmma: N %d not among 16, 64, 128", N);
    CT_CHECK_LAUNCH("ptx_wgmma_kernel");
    return 1;
}

// mbarrier + cp.async.bulk: a two-slot ring through which thread 0 streams `n` bf16 (chunks of
// 256 elements) to the other 127 threads, which copy each chunk out after waiting on its "full"
// barrier (expect_tx of the chunk's bytes) and release it on its "empty" barrier (127 arrivals).
// Exercises init, arrive, arrive.expect_tx, try_wait.parity over several phases, complete_tx.
__global__ void __launch_bounds__(128) ptx_mbarrier_kernel(const uint16_t *src, uint16_t *dst, int n) {
    CT_DYN_SMEM(unsigned char, raw);
    uint64_t *full = (uint64_t *)raw, *empty = full + 2;
    uint16_t *buf = (uint16_t *)(raw + 128);  // two slots of 256 elements
    int tid = threadIdx.x, chunks = n / 256;
    if (tid == 0) {
        for (int i = 0; i < 2; i++) {
            ct_mbar_init(&full[i], 1);
            ct_mbar_init(&empty[i], 127);
        }
        ct_mbar_init_fence();
    }
    __syncthreads();
    if (tid == 0) {
        for (int c = 0; c < chunks; c++) {
            int slot = c % 2, use = c / 2;
            ct_mbar_wait(&empty[slot], (use & 1) ^ 1);  // fresh barrier: parity 1 passes at once
            ct_mbar_arrive_expect_tx(&full[slot], 512);
            ct_cp_async_bulk(buf + slot * 256, src + c * 256, 256, &full[slot]);
            ct_cp_async_bulk(buf + slot * 256 + 128, src + c * 256 + 128, 256, &full[slot]);
        }
    } else {
        for (int c = 0; c < chunks; c++) {
            int slot = c % 2, use = c / 2;
            ct_mbar_wait(&full[slot], use & 1);
            for (int i = tid - 1; i < 256; i += 127) dst[c * 256 + i] = buf[slot * 256 + i];
            ct_mbar_arrive(&empty[slot]);
        }
    }
}

extern "C" int ct_ptx_check_mbarrier(const uint16_t *src, uint16_t *dst, int n, cudaStream_t stream) {
    if (n % 256 || n <= 0) ct_die("ct_ptx_check_mbarrier: n %d must be a positive multiple of 256", n);
    if (!ptx_hopper_device()) return 0;
    CT_LAUNCH(ptx_mbarrier_kernel, 1, 128, 128 + 2 * 256 * 2, stream, src, dst, n);
    CT_CHECK_LAUNCH("ptx_mbarrier_kernel");
    return 1;
}

// ---------------------------------------------------------------------------------------------
// The wgmma engine's producer/consumer ring itself (kernels/wgmma_ring.cuh: cp.async into the
// 128B-swizzled stages, cp.async.wait_group, fence.proxy.async, mbarrier arrive and
// try_wait.parity over several phases of every stage, wgmma from descriptors, the empty-barrier
// release) on a tiny GEMM: D (128 x 128, fp32) = A (128 x K) B^T, A and B row-major bf16,
// K = 64 * k-tiles. With K / 64 > WG_STAGES each stage's barriers turn over more than once.
// The producer gathers as conv_wgmma_fwd_k's (chunk column q of rows r8 + 16i), the consumers
// run wg_consume<0, 0> as its forward does; D is written from the documented fragment layout.
__global__ void __launch_bounds__(WG_THREADS) ptx_ring_kernel(const uint16_t *A, const uint16_t *B, float *D, int K) {
    CT_DYN_SMEM(unsigned char, raw);
    unsigned char *sm = raw + ((1024 - ct_smem_u32(raw) % 1024) % 1024);
    uint64_t *full = (uint64_t *)(sm + WG_BAR_OFF), *empty = full + WG_STAGES;
    int tid = threadIdx.x, wg = __shfl_sync(0xffffffffu, tid / 128, 0), ktiles = K / WG_BK;
    if (tid == 0) {
        for (int i = 0; i < WG_STAGES; i++) {
            ct_mbar_init(&full[i], 128);
            ct_mbar_init(&empty[i], 256);
        }
        ct_mbar_init_fence();
    }
    __syncthreads();
    if (wg == 0) {
        int q = tid % 8, r8 = tid / 8;
        for (int kt = 0; kt < ktiles; kt++) {
            int st = kt % WG_STAGES;
            ct_mbar_wait(&empty[st], ((kt / WG_STAGES) & 1) ^ 1);
            unsigned char *As = sm + st * WG_STAGE_BYTES, *Bs = As + WG_TILE_BYTES;
            PC_UNROLL
            for (int i = 0; i < 8; i++) {
                int row = r8 + 16 * i;
                ct_cp_async_cg16(As + wg_sw(row, q), A + (size_t)row * K + kt * WG_BK + q * 8);
                ct_cp_async_cg16(Bs + wg_sw(row, q), B + (size_t)row * K + kt * WG_BK + q * 8);
            }
            ct_cp_async_commit();
            wg_land_prev(full, kt);
        }
        wg_land_last(full, ktiles);
        return;
    }
    int cw = wg - 1;
    float acc[64];
    PC_UNROLL
    for (int i = 0; i < 64; i++) acc[i] = 0.f;
    uint32_t base = ct_smem_u32(sm);
    uint64_t da0 = ct_wgmma_desc_bits(base + cw * 64 * 128, 16, 1024, CT_SWZ_128);
    uint64_t db0 = ct_wgmma_desc_bits(base + WG_TILE_BYTES, 16, 1024, CT_SWZ_128);
    wg_consume<0, 0>(acc, full, empty, da0, db0, ktiles);
    int w = (tid / 32) % 4, lane = tid % 32, gi = lane / 4, ti = lane % 4;
    PC_UNROLL
    for (int j = 0; j < 16; j++)
        PC_UNROLL
        for (int e = 0; e < 4; e++) D[(cw * 64 + w * 16 + gi + 8 * (e >> 1)) * 128 + 8 * j + 2 * ti + (e & 1)] = acc[4 * j + e];
}

// Returns 0 (and does nothing) on a device without wgmma.
extern "C" int ct_ptx_check_ring(const uint16_t *A, const uint16_t *B, float *D, int K, cudaStream_t stream) {
    if (K % WG_BK || K <= 0) ct_die("ct_ptx_check_ring: K %d must be a positive multiple of %d", K, WG_BK);
    if (!ptx_hopper_device()) return 0;
    size_t smem = 1024 + WG_BAR_OFF + 2 * WG_STAGES * 8;
    CT_CUDA_CHECK(cudaFuncSetAttribute(ptx_ring_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    CT_LAUNCH(ptx_ring_kernel, 1, WG_THREADS, smem, stream, A, B, D, K);
    CT_CHECK_LAUNCH("ptx_ring_kernel");
    return 1;
}
