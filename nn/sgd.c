// SGD with momentum / Nesterov / weight decay, torch.optim.SGD's update order exactly.
#include "nn/sgd.h"

#include <string.h>

#include "util/common.h"

void sgd_init(SgdState *st, size_t n) {
    st->n = n;
    st->buf = ct_zalloc(CT_MAX(n, 1) * sizeof(float));
    st->steps = 0;
}

void sgd_free(SgdState *st) {
    free(st->buf);
    st->buf = NULL;
    st->n = 0;
}

void sgd_update_range(float *p, const float *g, float *buf, size_t n, float lr, float momentum,
                      float wd, int nesterov, int first) {
    // Same operation order as PyTorch's _single_tensor_sgd (dampening 0) so fp32 results match:
    // d = g + wd*p; buf = m*buf + d (or d); d = nesterov ? d + m*buf : buf; p += -lr*d.
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) {
        float d = g[i];
        if (wd != 0.0f) d = d + wd * p[i];
        if (momentum != 0.0f) {
            float b = first ? d : momentum * buf[i] + d;
            buf[i] = b;
            d = nesterov ? d + momentum * b : b;
        }
        p[i] = p[i] + (-lr) * d;
    }
}

void sgd_step(const SgdConfig *cfg, SgdState *st, const ResNet *m, float *params, const float *grads,
              float lr) {
    if (st->n != m->n_params) ct_die("sgd: state has %zu elements, model %s has %zu (its flat parameter array)", st->n, m->arch, m->n_params);
    int first = st->steps == 0;
    size_t trainable = resnet_trainable(m);
    for (int i = 0; i < m->n_entries; i++) {
        const StateEntry *e = &m->entries[i];
        if (e->kind != ENTRY_PARAM || e->offset >= trainable) continue;  // frozen: no decay, no momentum either
        float wd = (cfg->wd_exclude_bn_bias && e->no_decay) ? 0.0f : cfg->weight_decay;
        sgd_update_range(params + e->offset, grads + e->offset, st->buf + e->offset, e->count, lr,
                         cfg->momentum, wd, cfg->nesterov, first);
    }
    st->steps++;
}
