// The BN epilogues of the convolution engines: the data gradient's per-pair masking, shared by
// engine v2 (kernels/conv_tc2.cu) and the wgmma engine (kernels/conv_wgmma.cu) so that both mask
// with the same operations (ConvBnEpilogue in kernels/conv_gemm.cuh says what it computes), and
// the wgmma engine's per-tile sums in v2's order.
#pragma once
#include "kernels/act.cuh"  // ct_check_vec_align
#include "kernels/common.cuh"
#include "kernels/conv_gemm.cuh"

// word: the gradient pair at element e = row * N + n (n even) as it would be stored (bf16 pair).
// mu[j], sc[j], be[j]: column n + j's mean, gamma * invstd (fmul_rn) and beta (sc, be unused for a
// tail). Returns the masked pair to store; gv[j] is the masked gradient (bf16-exact fp32) and
// gd[j] = gv[j] * (x - mean), the two addends of the tile sums.
__device__ __forceinline__ uint32_t conv_bn_mask_pair(const ConvBnEpilogue &bn, size_t e, uint32_t word, bool tail,
                                                      const float *mu, const float *sc, const float *be, float gv[2],
                                                      float gd[2]) {
    const uint16_t *xp = (const uint16_t *)bn.x + e;
    ct_check_vec_align(xp, sizeof(uint32_t));
    CT_COST_ACCESS(xp, sizeof(uint32_t), false);
    uint32_t xw = *(const uint32_t *)xp, yw = 0;
    if (tail && bn.mask) {  // the forward's mask bits, as y's sign pattern
        CT_COST_ACCESS(bn.mask + e / 8, 1, false);
        unsigned b = bn.mask[e / 8] >> (e % 8);
        yw = (b & 1u ? 0x3f80u : 0u) | (b & 2u ? 0x3f800000u : 0u);  // bf16 1.0 or 0
    } else if (tail) {  // the stored block output y: mask y > 0
        const uint16_t *yp = (const uint16_t *)bn.y + e;
        ct_check_vec_align(yp, sizeof(uint32_t));
        CT_COST_ACCESS(yp, sizeof(uint32_t), false);
        yw = *(const uint32_t *)yp;
    }
    CV_UNROLL
    for (int j = 0; j < 2; j++) {
        float xv = ct_bf16_to_f32((uint16_t)(j ? xw >> 16 : xw & 0xffffu));
        float d = __fsub_rn(xv, mu[j]);
        // relu(bn(x)) recomputed with bn_affine_k's operations, or y > 0
        float o = tail ? ct_bf16_to_f32((uint16_t)(j ? yw >> 16 : yw & 0xffffu))
                       : __fadd_rn(__fmul_rn(d, sc[j]), be[j]);
        gv[j] = o > 0.f ? ct_bf16_to_f32((uint16_t)(j ? word >> 16 : word & 0xffffu)) : 0.f;
        gd[j] = __fmul_rn(gv[j], d);
    }
    return ct_f32_to_bf16(gv[0]) | (uint32_t)ct_f32_to_bf16(gv[1]) << 16;
}

// The wgmma engine's BN epilogues: per-tile sums (the forward's statistics, the data gradient's
// {g, g (x - mean)}) from values parked per element of a 128 x 128 tile (CONV_BN_TILE_ROWS rows
// and columns), each column in engine v2's order so that the bits are v2's (conv_tc2.cu:
// gemm_tc2_k, t2_tile_stats, t2_tile_gsums): v2's thread (row warp wm, lane group gi) adds its
// rows 64wm + 16mi + gi + 8h (mi = 0..3, h = 0..1, rows past the GEMM skipped) in that order, the
// 8 lane groups meet by the shuffle tree ((0+1)+(2+3))+((4+5)+(6+7)), and the two row warps as
// warp 0 + warp 1. val(r): row r's value.
template <typename F>
__device__ __forceinline__ float conv_v2_order_sum(F val, int rows) {
    float part[2];
    for (int wm = 0; wm < 2; wm++) {
        float a[8];
        for (int gi = 0; gi < 8; gi++) {
            a[gi] = 0.f;
            for (int mi = 0; mi < 4; mi++)
                for (int h = 0; h < 2; h++) {
                    int r = wm * 64 + mi * 16 + gi + h * 8;
                    if (r < rows) a[gi] = __fadd_rn(a[gi], val(r));
                }
        }
        part[wm] = __fadd_rn(__fadd_rn(__fadd_rn(a[0], a[1]), __fadd_rn(a[2], a[3])),
                             __fadd_rn(__fadd_rn(a[4], a[5]), __fadd_rn(a[6], a[7])));
    }
    return __fadd_rn(part[0], part[1]);
}
__device__ inline void conv_write_tile_pair(float *out, int N, int m0, int n, float a, float b) {
    float *p = out + ((size_t)(m0 / CONV_BN_TILE_ROWS) * N + n) * 2;
    ct_check_vec_align(p, sizeof(float2));
    CT_COST_ACCESS(p, sizeof(float2), true);
    *(float2 *)p = make_float2(a, b);
}
// Forward: park[r * 128 + col] = the stored (bf16) value; {sum, sum of squared deviations from the
// tile's own mean} as v2's two passes.
__device__ inline void conv_park_tile_stats(const float *park, float *stats, int M, int N, int m0, int n0,
                                            int col) {
    int n = n0 + col, rows = min(CONV_BN_TILE_ROWS, M - m0);
    if (n >= N) return;
    float sum = conv_v2_order_sum([&](int r) { return park[r * CONV_BN_TILE_ROWS + col]; }, rows);
    float mean = __fdiv_rn(sum, (float)rows);
    float m2 = conv_v2_order_sum(
        [&](int r) {
            float d = __fsub_rn(park[r * CONV_BN_TILE_ROWS + col], mean);
            return __fmul_rn(d, d);
        },
        rows);
    conv_write_tile_pair(stats, N, m0, n, sum, m2);
}
// Data gradient: park[(r * 128 + col) * 2 + q], q = 0: g, 1: g (x - mean).
__device__ inline void conv_park_tile_gsums(const float *park, float *tiles, int M, int N, int m0, int n0,
                                            int col) {
    int n = n0 + col, rows = min(CONV_BN_TILE_ROWS, M - m0);
    if (n >= N) return;
    const float *pc = park + (size_t)col * 2;
    float s0 = conv_v2_order_sum([&](int r) { return pc[(size_t)r * CONV_BN_TILE_ROWS * 2]; }, rows);
    float s1 = conv_v2_order_sum([&](int r) { return pc[(size_t)r * CONV_BN_TILE_ROWS * 2 + 1]; }, rows);
    conv_write_tile_pair(tiles, N, m0, n, s0, s1);
}
