// LARS for the CPU backend (nn/lars.h).
#include "nn/lars.h"

#include <math.h>

#include "util/common.h"

double lars_trust(double w_norm, double g_norm, double eta, double wd) {
    if (!(w_norm > 0) || !(g_norm > 0)) return 1.0;
    return eta * w_norm / (g_norm + wd * w_norm);
}

// The chunked order kernels.h fixes for both backends (the GPU gives each chunk a thread), so the
// norms, and with them the steps, are the same bits on both.
static void norms(const float *w, const float *g, size_t n, double *wn, double *gn) {
    double cw[CT_LARS_CHUNKS], cg[CT_LARS_CHUNKS];
#pragma omp parallel for schedule(static)
    for (int j = 0; j < CT_LARS_CHUNKS; j++) {
        size_t a, b;
        lars_chunk(n, j, &a, &b);
        double sw = 0, sg = 0;
        for (size_t i = a; i < b; i++) {
            sw += (double)w[i] * w[i];
            sg += (double)g[i] * g[i];
        }
        cw[j] = sw, cg[j] = sg;
    }
    *wn = sqrt(lars_chunks_sum(cw));
    *gn = sqrt(lars_chunks_sum(cg));
}

void lars_update(const CtLarsTensor *t, int n_tensors, float *params, const float *grads, float *buf, float lr,
                 float momentum, float wd, float eta) {
    for (int i = 0; i < n_tensors; i++) {
        float *w = params + t[i].offset, *v = buf + t[i].offset;
        const float *g = grads + t[i].offset;
        const size_t n = t[i].count;
        if (t[i].skip) {
#pragma omp parallel for schedule(static)
            for (size_t k = 0; k < n; k++) {
                v[k] = momentum * v[k] + lr * g[k];
                w[k] -= v[k];
            }
            continue;
        }
        double wn, gn;
        norms(w, g, n, &wn, &gn);
        const float scaled = (float)(lr * lars_trust(wn, gn, eta, wd));
#pragma omp parallel for schedule(static)
        for (size_t k = 0; k < n; k++) {
            v[k] = momentum * v[k] + scaled * (g[k] + wd * w[k]);
            w[k] -= v[k];
        }
    }
}

int lars_tensors(const ResNet *m, CtLarsTensor *out) {
    int n = 0;
    size_t trainable = resnet_trainable(m);
    for (int i = 0; i < m->n_entries; i++) {
        const StateEntry *e = &m->entries[i];
        if (e->kind != ENTRY_PARAM || e->offset >= trainable) continue;  // a frozen backbone's tensors
        if (out) out[n] = (CtLarsTensor){e->offset, e->count, e->no_decay};
        n++;
    }
    return n;
}

void lars_step(const SgdConfig *cfg, SgdState *st, const ResNet *m, float *params, const float *grads, float lr) {
    if (st->n != m->n_params) ct_die("lars: state has %zu elements, model %s has %zu (its flat parameter array)", st->n, m->arch, m->n_params);
    int nt = lars_tensors(m, NULL);
    CtLarsTensor *t = ct_alloc(sizeof *t * (size_t)(nt ? nt : 1));
    lars_tensors(m, t);
    lars_update(t, nt, params, grads, st->buf, lr, cfg->momentum, cfg->weight_decay, cfg->lars_eta);
    free(t);
    st->steps++;
}
