// LARS for the CPU backend (nn/lars.h).
#include "nn/lars.h"

#include <math.h>

#include "util/common.h"

double lars_trust(double w_norm, double g_norm, double eta, double wd) {
    if (!(w_norm > 0) || !(g_norm > 0)) return 1.0;
    return eta * w_norm / (g_norm + wd * w_norm);
}

// Sequential on purpose: a fixed summation order whatever the thread count, and a tensor's norm
// costs one pass next to the forward and backward passes that made its gradient.
static double norm2(const float *x, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++) s += (double)x[i] * x[i];
    return sqrt(s);
}

void lars_step(const SgdConfig *cfg, SgdState *st, const ResNet *m, float *params, const float *grads, float lr) {
    if (st->n != m->n_params) ct_die("lars: state has %zu elements, model %s has %zu params", st->n, m->arch, m->n_params);
    const float mom = cfg->momentum, wd = cfg->weight_decay;
    for (int i = 0; i < m->n_entries; i++) {
        const StateEntry *e = &m->entries[i];
        if (e->kind != ENTRY_PARAM) continue;
        float *w = params + e->offset, *v = st->buf + e->offset;
        const float *g = grads + e->offset;
        if (e->no_decay) {
#pragma omp parallel for schedule(static)
            for (size_t k = 0; k < e->count; k++) {
                v[k] = mom * v[k] + lr * g[k];
                w[k] -= v[k];
            }
            continue;
        }
        const float scaled = (float)(lr * lars_trust(norm2(w, e->count), norm2(g, e->count), cfg->lars_eta, wd));
#pragma omp parallel for schedule(static)
        for (size_t k = 0; k < e->count; k++) {
            v[k] = mom * v[k] + scaled * (g[k] + wd * w[k]);
            w[k] -= v[k];
        }
    }
    st->steps++;
}
