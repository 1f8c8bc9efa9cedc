// The data gradient's BN backward epilogue, per output pair, shared by engine v2
// (kernels/conv_tc2.cu) and the wgmma engine (kernels/conv_wgmma.cu) so that both mask with the
// same operations (ConvBnEpilogue in kernels/conv_gemm.cuh says what it computes).
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
