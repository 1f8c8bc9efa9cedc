// The BN epilogues of the convolution engines, shared so that every engine computes them with the
// same operations and, where the tiles are the same, the same bits (ConvBnEpilogue in
// kernels/conv_gemm.cuh says what they compute):
//   - the data gradient's per-pair masking (engine v2 kernels/conv_tc2.cu, its grouped path
//     kernels/conv_tcg.cu, the wgmma engine kernels/conv_wgmma.cu);
//   - the per-tile sums of the mma.sync engines' 128 x 128 accumulator tiles (v2 and its grouped
//     path: the forward's statistics, the data gradient's {g, g (x - mean)}), over the CTA's
//     columns c0 .. c0 + ncols - 1 (the dense tile: n0 and N - n0; a grouped CTA: its first group's
//     first column and its groups' columns, fewer than 128 when it holds few groups);
//   - the wgmma engine's per-tile sums in v2's order.
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

// The mma.sync engines' per-column constants for conv_bn_mask_pair, in shared memory that the
// pipeline no longer uses: bn_c[col] = mean, bn_c[width + col] = gamma * invstd (fmul_rn, as
// bn_affine_k), bn_c[2 width + col] = beta for the CTA's columns c0 + col, col < ncols; zeros past
// ncols and, for a tail, in the two unused rows. Every thread of the CTA calls it: the first barrier
// waits for the last ldmatrix, the second publishes the constants.
__device__ inline void conv_bn_load_consts(const ConvBnEpilogue &bn, float *bn_c, bool tail, int c0, int ncols,
                                           int width, int tid, int nthreads) {
    __syncthreads();
    for (int i = tid; i < width; i += nthreads) {
        float mu = 0.f, sc = 0.f, be = 0.f;
        if (i < ncols) {
            const int n = c0 + i;
            mu = ct_ld(bn.mean, n);
            if (!tail) {
                sc = __fmul_rn(ct_ld(bn.gamma, n), ct_ld(bn.invstd, n));
                be = ct_ld(bn.beta, n);
            }
        }
        bn_c[i] = mu;
        bn_c[width + i] = sc;
        bn_c[2 * width + i] = be;
    }
    __syncthreads();
}

// The mma.sync engines' tile sums (v2's gemm_tc2_k, the grouped conv_tcg_k): 4 warps as 2 x 2 of
// 64 rows x 64 columns, the m16n8 accumulator layout (c0, c1 at row gi, columns 2ti, 2ti + 1; c2, c3
// at row gi + 8), the CTA's tile at rows m0 .. m0 + 127 and columns c0 + col, col < ncols of the
// N-column output. Each column's rows are added in row order per thread, the 8 lanes of a column by
// a fixed shuffle tree, the two row warps through shared memory (red: 512 floats) as warp 0 +
// warp 1: the same bits on every run, and the same bits in both engines for equal values.
// The last step, by warp row 0's lane-group 0: per valid column, {red[col] + red[128 + col],
// red[256 + col] + red[384 + col]} (the two row warps' partials of the two sums) at
// out[(tile * N + c0 + col) * 2], tile = m0 / 128.
__device__ inline void conv_write_tile_pairs(float *out, const float *red, int N, int m0, int c0, int ncols, int wn,
                                             int ti) {
    out += ((size_t)(m0 / CONV_BN_TILE_ROWS) * N + c0) * 2;
    CV_UNROLL
    for (int ni = 0; ni < 8; ni++)
        CV_UNROLL
        for (int j = 0; j < 2; j++) {
            int col = wn * 64 + ni * 8 + 2 * ti + j;
            if (col >= ncols) continue;
            float *p = out + (size_t)col * 2;
            ct_check_vec_align(p, sizeof(float2));
            CT_COST_ACCESS(p, sizeof(float2), true);
            *(float2 *)p = make_float2(__fadd_rn(red[col], red[128 + col]), __fadd_rn(red[256 + col], red[384 + col]));
        }
}

// BN statistics in the forward epilogue (conv2d_forward_stats_gpu): per column, the sum of its
// valid rows' values exactly as stored (bf16-rounded) and the sum of their squared deviations from
// the tile's own mean (two passes over the accumulators, so the variance is not a difference of
// large sums), as {sum, m2}; batchnorm_add_forward_train_tiles_gpu merges the tiles in tile order.
__device__ inline float conv_bf16_round(float v) { return ct_bf16_to_f32(ct_f32_to_bf16(v)); }
__device__ inline void conv_tile_stats(float (&acc)[4][8][4], float *stats, int M, int N, int m0, int c0, int ncols,
                                       int wm, int wn, int lane, float *red) {
    const int gi = lane / 4, ti = lane % 4, rows = min(CONV_BN_TILE_ROWS, M - m0);
    __syncthreads();  // every warp is past its last ldmatrix: the stages are free for the sums
    float mean[8][2];
    for (int pass = 0; pass < 2; pass++) {
        float sum[8][2];
        CV_UNROLL
        for (int ni = 0; ni < 8; ni++)
            CV_UNROLL
            for (int j = 0; j < 2; j++) {
                float a = 0.f;
                CV_UNROLL
                for (int mi = 0; mi < 4; mi++)
                    CV_UNROLL
                    for (int half = 0; half < 2; half++) {
                        if (wm * 64 + mi * 16 + gi + half * 8 >= rows) continue;
                        float v = conv_bf16_round(acc[mi][ni][half * 2 + j]);
                        if (pass) v = __fmul_rn(__fsub_rn(v, mean[ni][j]), __fsub_rn(v, mean[ni][j]));
                        a = __fadd_rn(a, v);
                    }
                a = __fadd_rn(a, __shfl_xor_sync(0xffffffffu, a, 4));
                a = __fadd_rn(a, __shfl_xor_sync(0xffffffffu, a, 8));
                a = __fadd_rn(a, __shfl_xor_sync(0xffffffffu, a, 16));
                sum[ni][j] = a;
            }
        if (gi == 0)
            CV_UNROLL
            for (int ni = 0; ni < 8; ni++)
                CV_UNROLL
                for (int j = 0; j < 2; j++) red[pass * 256 + wm * 128 + wn * 64 + ni * 8 + 2 * ti + j] = sum[ni][j];
        __syncthreads();
        CV_UNROLL
        for (int ni = 0; ni < 8; ni++)
            CV_UNROLL
            for (int j = 0; j < 2; j++) {
                int col = wn * 64 + ni * 8 + 2 * ti + j;
                mean[ni][j] = __fdiv_rn(__fadd_rn(red[col], red[128 + col]), (float)rows);
            }
    }
    if (wm != 0 || gi != 0) return;
    conv_write_tile_pairs(stats, red, N, m0, c0, ncols, wn, ti);
}

// BN backward sums in the data-gradient epilogue (conv2d_backward_data_bn_gpu,
// conv2d_backward_data_tail_gpu): s[ni][j][0] = sum g and s[ni][j][1] = sum g (x - mean) over the
// thread's valid rows (added in row order by the caller), then as above: {sum g, sum g (x - mean)}.
// The caller's per-column constants may occupy shared memory before red: the first barrier waits
// for every thread to be done with them.
__device__ inline void conv_tile_gsums(float (&s)[8][2][2], float *tiles, int N, int m0, int c0, int ncols, int wm,
                                       int wn, int lane, float *red) {
    const int gi = lane / 4, ti = lane % 4;
    CV_UNROLL
    for (int ni = 0; ni < 8; ni++)
        CV_UNROLL
        for (int j = 0; j < 2; j++)
            CV_UNROLL
            for (int q = 0; q < 2; q++) {
                float a = s[ni][j][q];
                a = __fadd_rn(a, __shfl_xor_sync(0xffffffffu, a, 4));
                a = __fadd_rn(a, __shfl_xor_sync(0xffffffffu, a, 8));
                a = __fadd_rn(a, __shfl_xor_sync(0xffffffffu, a, 16));
                s[ni][j][q] = a;
            }
    __syncthreads();  // every thread is done with the per-channel constants in shared memory
    if (gi == 0)
        CV_UNROLL
        for (int ni = 0; ni < 8; ni++)
            CV_UNROLL
            for (int j = 0; j < 2; j++)
                CV_UNROLL
                for (int q = 0; q < 2; q++) red[q * 256 + wm * 128 + wn * 64 + ni * 8 + 2 * ti + j] = s[ni][j][q];
    __syncthreads();
    if (wm != 0 || gi != 0) return;
    conv_write_tile_pairs(tiles, red, N, m0, c0, ncols, wn, ti);
}

// The wgmma engine's BN epilogues: per-tile sums (the forward's statistics, the data gradient's
// {g, g (x - mean)}) from values parked per element of a 128 x 128 tile (CONV_BN_TILE_ROWS rows
// and columns), each column in engine v2's order so that the bits are v2's (conv_tc2.cu:
// gemm_tc2_k, conv_tile_stats, conv_tile_gsums): v2's thread (row warp wm, lane group gi) adds its
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
