// LAMB for the CPU backend (nn/optim.h): timm's Lamb (timm/optim/lamb.py) with its defaults:
// bias correction, grad averaging, L2 decay added to the update (not decoupled), no trust clip,
// adaptation only of decayed tensors (always_adapt off). Per step:
//   c = max(sqrt(sum over all training tensors of |g_t|^2) / max_grad_norm, 1)   (no clipping: 1)
//   per tensor, g = g / c:
//     m = m * beta1 + (1 - beta1) g;  v = v * beta2 + ((1 - beta2) g) g
//     u = (m / bc1) / (sqrt(v) / sqrt(bc2) + eps)        bc_i = 1 - beta_i^step
//     decayed (wd != 0 and not excluded): u = u + wd w; u = u * trust, trust = |w| / |u| (1 when
//     either norm is 0)
//     w = w + (-lr) u
// Squared norms are summed in double in LARS's chunk order (kernels.h: CT_LARS_CHUNKS chunks,
// each in element order, then the chunks in order; the global one over tensors in order), the
// trust ratio is rounded to float once; kernels/lamb.cu does the same operations, so the two
// backends are bit-identical. timm sums its norms in float32, so it is within float rounding of
// this, not bit-equal.
#include <math.h>

#include "nn/lars.h"  // the chunk order
#include "nn/optim.h"

static inline float lamb_u(float w, float mm, float vv, int decays, const CtAdamArgs *a) {
    float den = sqrtf(vv) / a->bc2_sqrt + a->eps;
    float u = (mm / a->bc1) / den;
    return decays ? u + a->wd * w : u;
}

static double gnorm2(const float *g, size_t n) {
    double c[CT_LARS_CHUNKS];
#pragma omp parallel for schedule(static)
    for (int j = 0; j < CT_LARS_CHUNKS; j++) {
        size_t a, b;
        lars_chunk(n, j, &a, &b);
        double s = 0;
        for (size_t i = a; i < b; i++) s += (double)g[i] * g[i];
        c[j] = s;
    }
    return lars_chunks_sum(c);
}

void lamb_update(const CtLarsTensor *t, int n_tensors, float *params, const float *grads, float *exp_avg,
                 float *exp_avg_sq, double *norms, const CtAdamArgs *a) {
    float clip = 1.0f;
    if (a->max_grad_norm > 0) {
        for (int i = 0; i < n_tensors; i++) norms[3 * i] = gnorm2(grads + t[i].offset, t[i].count);
        double G = 0;
        for (int i = 0; i < n_tensors; i++) G += norms[3 * i];
        double c = sqrt(G) / a->max_grad_norm;
        clip = (float)(c > 1.0 ? c : 1.0);
    }
    for (int i = 0; i < n_tensors; i++) {
        float *w = params + t[i].offset, *m = exp_avg + t[i].offset, *v = exp_avg_sq + t[i].offset;
        const float *g = grads + t[i].offset;
        const size_t n = t[i].count;
        const int adapt = !t[i].skip && a->wd != 0.0f;
        double cw[CT_LARS_CHUNKS], cu[CT_LARS_CHUNKS];
#pragma omp parallel for schedule(static)
        for (int j = 0; j < CT_LARS_CHUNKS; j++) {
            size_t lo, hi;
            lars_chunk(n, j, &lo, &hi);
            double sw = 0, su = 0;
            for (size_t k = lo; k < hi; k++) {
                float gg = g[k] / clip;
                float mm = m[k] * a->beta1 + a->omb1 * gg;
                float vv = v[k] * a->beta2 + (a->omb2 * gg) * gg;
                m[k] = mm;
                v[k] = vv;
                float u = lamb_u(w[k], mm, vv, adapt, a);
                sw += (double)w[k] * (double)w[k];
                su += (double)u * (double)u;
            }
            cw[j] = sw, cu[j] = su;
        }
        norms[3 * i + 1] = sqrt(lars_chunks_sum(cw));
        norms[3 * i + 2] = sqrt(lars_chunks_sum(cu));
        float trust = 1.0f;
        if (adapt && norms[3 * i + 1] > 0 && norms[3 * i + 2] > 0) trust = (float)(norms[3 * i + 1] / norms[3 * i + 2]);
        const float neg_lr = -a->lr;
#pragma omp parallel for schedule(static)
        for (size_t k = 0; k < n; k++) {
            float u = lamb_u(w[k], m[k], v[k], adapt, a);
            if (adapt) u = u * trust;
            w[k] = w[k] + neg_lr * u;
        }
    }
}
