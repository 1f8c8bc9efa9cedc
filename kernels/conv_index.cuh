// The index arithmetic the tensor-core engines share (v1 kernels/conv_tc1.cu, v2 kernels/conv_tc2.cu,
// its grouped path kernels/conv_tcg.cu, the Hopper engine kernels/conv_wgmma.cu): which pixels a
// GEMM row gathers and stores, and the weight gradient's walk over output pixels. One statement of
// each, so that the engines cannot drift apart on a stride phase or a carry.
#pragma once
#include "kernels/common.cuh"
#include "kernels/conv_gemm.cuh"

// A GEMM row m < g.M of the forward or the data gradient as (image, window origin): the forward's
// output pixel (p, q) reads its input window from (p * stride - pad, q * stride - pad); the data
// gradient's phase pixel (h, w) of stride phase (ph_h, ph_w) (conv_gemm.cuh's phase plan) reads
// dout from (h + dh, w + dw), tap (ri, si) at (h + dh - ri, w + dw - si).
template <int MODE>
__device__ __forceinline__ void conv_row_origin(const GemmArgs &g, int m, int &img, int &y, int &x) {
    if (MODE == GEMM_FWD) {
        int q = m % g.s.Q, t = m / g.s.Q;
        img = t / g.s.P;
        y = (t % g.s.P) * g.s.stride - g.s.pad;
        x = q * g.s.stride - g.s.pad;
    } else {
        int w = m % g.Wp, t = m / g.Wp;
        img = t / g.Hp;
        y = t % g.Hp + g.dh;
        x = w + g.dw;
    }
}

// The data gradient's phase pixel m -> the row of dx it stores: input pixel
// (ph_h + h * stride, ph_w + w * stride).
__device__ __forceinline__ size_t conv_dgrad_dx_row(const GemmArgs &g, int m) {
    int w = m % g.Wp, t = m / g.Wp, h = t % g.Hp, img = t / g.Hp;
    return ((size_t)img * g.s.H + g.ph_h + h * g.s.stride) * g.s.W + g.ph_w + w * g.s.stride;
}

// An output pixel (img, p, q) as the weight gradient's reduction index j = (img * P + p) * Q + q.
// The loaders walk it by a fixed step (conv_pixel of the step: st.q < Q, st.p < P) with carries,
// so that the main loop divides nothing.
typedef struct {
    int img, p, q;
} ConvPixel;
__device__ __forceinline__ ConvPixel conv_pixel(const ConvShape &s, int j) {
    ConvPixel px;
    px.q = j % s.Q;
    px.p = (j / s.Q) % s.P;
    px.img = j / (s.P * s.Q);
    return px;
}
__device__ __forceinline__ void conv_pixel_step(const ConvShape &s, ConvPixel &px, const ConvPixel &st) {
    px.q += st.q;
    int cq = px.q >= s.Q;
    px.q -= cq ? s.Q : 0;
    px.p += st.p + cq;
    int cp = px.p >= s.P;
    px.p -= cp ? s.P : 0;
    px.img += st.img + cp;
}
