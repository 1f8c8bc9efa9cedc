// Check kernels for the inline-PTX wrappers of kernels/ptx.cuh. Compiled like every kernel: by
// nvcc for sm_80/sm_90 (so the asm of the real path is assembled on every build with nvcc), and
// by g++ against the emulator, where tests/emu_ptx_layouts.c compares them with plain host
// arithmetic.
// On a GPU the same entry points check the hardware (and so the emulator's layouts).
#include "kernels/common.cuh"
#include "kernels/ptx.cuh"

extern "C" {
void ct_ptx_check_ldmatrix(const uint16_t *m, uint32_t *out, int num, int trans, cudaStream_t stream);
void ct_ptx_check_mma(const uint16_t *A, const uint16_t *B, const float *C, float *D, int M, int N,
                      int K, int mode, cudaStream_t stream);
void ct_ptx_check_cp_async(const float *src, float *dst, int n, cudaStream_t stream);
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
