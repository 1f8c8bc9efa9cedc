// Inline-PTX wrappers: the only way kernels use PTX. Under nvcc each is one instruction of inline
// asm; under emulation (CTRAIN_EMU) each is emulated from the PTX ISA's documented fragment layouts
// (kernels/emu/ptx.cpp), exchanging data between the 32 lanes of the warp through warp barriers.
// All lanes of the warp must call mma/ldmatrix together (they are .sync.aligned).
//
// Fragment layouts (PTX ISA, "Matrix Fragments for mma.m16n8k16"), with g = lane >> 2 (groupID)
// and t = lane % 4 (threadID_in_group); a b32 register holds two bf16, the lower-indexed element in
// the low 16 bits:
//   A (16x16, row-major M x K), a[r] for r = 0..3 holds A[g + 8*(r&1)][2t + 8*(r>>1) + {0,1}]
//   B (16x8,  K x N, "col"),    b[r] for r = 0..1 holds B[2t + 8*r + {0,1}][g]
//   C, D (16x8 fp32),           c[i] for i = 0..3 is   C[g + 8*(i>>1)][2t + (i&1)]
// ldmatrix .m8n8 .b16: lanes 8i..8i+7 give the row addresses (16 bytes each) of matrix i; lane l
// receives in r[i] row l>>2, columns 2(l%4), 2(l%4)+1 of matrix i (.trans: of its transpose).
// So ldmatrix.x4 of a row-major 16x16 A tile (lanes 0-15 rows 0-15 at column 0, lanes 16-31 rows
// 0-15 at column 8) yields exactly a[0..3]; ldmatrix.x2 of an N x K (K contiguous) B tile yields b.
#pragma once
#include <stdint.h>

#include "kernels/common.cuh"

#if defined(CTRAIN_EMU)

// D = A * B + C (fp32 accumulate). d may alias c.
static __device__ __forceinline__ void ct_mma_m16n8k16_bf16(float *d, const uint32_t *a,
                                                            const uint32_t *b, const float *c) {
    ::emu::mma_m16n8k16_bf16(d, a, b, c);
}
static __device__ __forceinline__ void ct_ldmatrix_x1(uint32_t *r, const void *row) { ::emu::ldmatrix(r, 1, false, row); }
static __device__ __forceinline__ void ct_ldmatrix_x2(uint32_t *r, const void *row) { ::emu::ldmatrix(r, 2, false, row); }
static __device__ __forceinline__ void ct_ldmatrix_x4(uint32_t *r, const void *row) { ::emu::ldmatrix(r, 4, false, row); }
static __device__ __forceinline__ void ct_ldmatrix_x1_trans(uint32_t *r, const void *row) { ::emu::ldmatrix(r, 1, true, row); }
static __device__ __forceinline__ void ct_ldmatrix_x2_trans(uint32_t *r, const void *row) { ::emu::ldmatrix(r, 2, true, row); }
static __device__ __forceinline__ void ct_ldmatrix_x4_trans(uint32_t *r, const void *row) { ::emu::ldmatrix(r, 4, true, row); }
// cp.async: copy `src_bytes` (0..16) bytes from global to shared and zero-fill the rest of the 16
// (4/8 for the .ca forms). Completes only at a cp_async_wait covering its group.
static __device__ __forceinline__ void ct_cp_async_cg16(void *smem, const void *gmem, int src_bytes = 16) { ::emu::cp_async(smem, gmem, 16, src_bytes); }
static __device__ __forceinline__ void ct_cp_async_ca16(void *smem, const void *gmem, int src_bytes = 16) { ::emu::cp_async(smem, gmem, 16, src_bytes); }
static __device__ __forceinline__ void ct_cp_async_ca8(void *smem, const void *gmem, int src_bytes = 8) { ::emu::cp_async(smem, gmem, 8, src_bytes); }
static __device__ __forceinline__ void ct_cp_async_ca4(void *smem, const void *gmem, int src_bytes = 4) { ::emu::cp_async(smem, gmem, 4, src_bytes); }
static __device__ __forceinline__ void ct_cp_async_commit() { ::emu::cp_async_commit(); }
// Wait until at most N of this thread's committed groups are still pending.
template <int N>
static __device__ __forceinline__ void ct_cp_async_wait() { ::emu::cp_async_wait(N); }
static __device__ __forceinline__ void ct_cp_async_wait_all() { ::emu::cp_async_commit(); ::emu::cp_async_wait(0); }

#else  // nvcc

static __device__ __forceinline__ uint32_t ct_smem_addr(const void *p) {
    return (uint32_t)__cvta_generic_to_shared(p);
}
static __device__ __forceinline__ void ct_mma_m16n8k16_bf16(float *d, const uint32_t *a,
                                                            const uint32_t *b, const float *c) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%10, %11, %12, %13};\n"
        : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]), "f"(c[1]),
          "f"(c[2]), "f"(c[3]));
}
static __device__ __forceinline__ void ct_ldmatrix_x1(uint32_t *r, const void *row) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x1.shared.b16 {%0}, [%1];\n" : "=r"(r[0]) : "r"(ct_smem_addr(row)));
}
static __device__ __forceinline__ void ct_ldmatrix_x2(uint32_t *r, const void *row) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];\n"
                 : "=r"(r[0]), "=r"(r[1]) : "r"(ct_smem_addr(row)));
}
static __device__ __forceinline__ void ct_ldmatrix_x4(uint32_t *r, const void *row) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(ct_smem_addr(row)));
}
static __device__ __forceinline__ void ct_ldmatrix_x1_trans(uint32_t *r, const void *row) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x1.trans.shared.b16 {%0}, [%1];\n" : "=r"(r[0]) : "r"(ct_smem_addr(row)));
}
static __device__ __forceinline__ void ct_ldmatrix_x2_trans(uint32_t *r, const void *row) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];\n"
                 : "=r"(r[0]), "=r"(r[1]) : "r"(ct_smem_addr(row)));
}
static __device__ __forceinline__ void ct_ldmatrix_x4_trans(uint32_t *r, const void *row) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(ct_smem_addr(row)));
}
static __device__ __forceinline__ void ct_cp_async_cg16(void *smem, const void *gmem, int src_bytes = 16) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(ct_smem_addr(smem)), "l"(gmem), "r"(src_bytes) : "memory");
}
static __device__ __forceinline__ void ct_cp_async_ca16(void *smem, const void *gmem, int src_bytes = 16) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 16, %2;\n" ::"r"(ct_smem_addr(smem)), "l"(gmem), "r"(src_bytes) : "memory");
}
static __device__ __forceinline__ void ct_cp_async_ca8(void *smem, const void *gmem, int src_bytes = 8) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;\n" ::"r"(ct_smem_addr(smem)), "l"(gmem), "r"(src_bytes) : "memory");
}
static __device__ __forceinline__ void ct_cp_async_ca4(void *smem, const void *gmem, int src_bytes = 4) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(ct_smem_addr(smem)), "l"(gmem), "r"(src_bytes) : "memory");
}
static __device__ __forceinline__ void ct_cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
static __device__ __forceinline__ void ct_cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory"); }
static __device__ __forceinline__ void ct_cp_async_wait_all() { asm volatile("cp.async.wait_all;\n" ::: "memory"); }

#endif
