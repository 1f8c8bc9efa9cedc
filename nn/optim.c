// The optimizer table (nn/optim.h).
#include "nn/optim.h"

#include <math.h>
#include <string.h>

#include "nn/lars.h"
#include "util/common.h"

static void check_state(const char *name, const OptState *st, const ResNet *m) {
    if (st->n != m->n_params)
        ct_die("%s: state has %zu elements, model %s has %zu (its flat parameter array)", name, st->n, m->arch, m->n_params);
}

// SGD and LARS run nn/sgd.h's and nn/lars.h's steps on the state's one tensor.
static void sgd_entry(const OptConfig *cfg, OptState *st, const ResNet *m, float *params, const float *grads, float lr) {
    SgdConfig c = optim_sgd_config(cfg);
    SgdState s = {st->n, st->state[0], (long)st->steps};
    if (cfg->kind == OPT_LARS) lars_step(&c, &s, m, params, grads, lr);
    else sgd_step(&c, &s, m, params, grads, lr);
    st->steps = s.steps;
}

static void adamw_entry(const OptConfig *cfg, OptState *st, const ResNet *m, float *params, const float *grads, float lr) {
    check_state("adamw", st, m);
    size_t n = resnet_trainable(m);
    uint8_t *mask = ct_alloc(n ? n : 1);
    optim_decay_mask(cfg, m, mask);
    CtAdamArgs a = optim_adam_args(cfg, lr, st->steps + 1);
    adamw_update(params, grads, st->state[0], st->state[1], mask, n, &a);
    free(mask);
    st->steps++;
}

static void lamb_entry(const OptConfig *cfg, OptState *st, const ResNet *m, float *params, const float *grads, float lr) {
    check_state("lamb", st, m);
    int nt = optim_tensors(cfg, m, NULL);
    CtLarsTensor *t = ct_alloc(sizeof *t * (size_t)(nt ? nt : 1));
    double *norms = ct_alloc(sizeof(double) * 3 * (size_t)(nt ? nt : 1));
    optim_tensors(cfg, m, t);
    CtAdamArgs a = optim_adam_args(cfg, lr, st->steps + 1);
    lamb_update(t, nt, params, grads, st->state[0], st->state[1], norms, &a);
    free(t);
    free(norms);
    st->steps++;
}

const OptDesc OPT_TABLE[OPT_COUNT] = {
    [OPT_SGD] = {"sgd", 1, {"momentum_buffer"}, 1, 0, sgd_entry},
    [OPT_LARS] = {"lars", 1, {"momentum"}, 1, 1, sgd_entry},
    [OPT_ADAMW] = {"adamw", 2, {"exp_avg", "exp_avg_sq"}, 0, 0, adamw_entry},
    [OPT_LAMB] = {"lamb", 2, {"exp_avg", "exp_avg_sq"}, 0, 0, lamb_entry},
};

const OptDesc *optim_desc(OptKind k) {
    if ((int)k < 0 || k >= OPT_COUNT) ct_die("internal: optimizer kind %d", (int)k);
    return &OPT_TABLE[k];
}

const OptDesc *optim_find(const char *name) {
    for (int k = 0; k < OPT_COUNT; k++)
        if (!strcmp(OPT_TABLE[k].name, name)) return &OPT_TABLE[k];
    return NULL;
}

const char *optim_names(void) { return "sgd, lars, adamw, lamb"; }

int optim_saved_state(const OptConfig *cfg) {
    const OptDesc *d = optim_desc(cfg->kind);
    return d->state_needs_momentum && !(cfg->momentum > 0) ? 0 : d->n_state;
}

SgdConfig optim_sgd_config(const OptConfig *cfg) {
    SgdConfig c = {cfg->momentum, cfg->weight_decay, cfg->nesterov, cfg->wd_exclude_norm_bias, cfg->kind == OPT_LARS,
                   cfg->lars_eta};
    return c;
}

void optim_init(OptState *st, OptKind kind, size_t n) {
    memset(st, 0, sizeof *st);
    st->kind = kind;
    st->n = n;
    for (int i = 0; i < optim_desc(kind)->n_state; i++) st->state[i] = ct_zalloc(CT_MAX(n, 1) * sizeof(float));
}

void optim_free(OptState *st) {
    for (int i = 0; i < OPT_MAX_STATE; i++) free(st->state[i]), st->state[i] = NULL;
    st->n = 0;
}

void optim_step(const OptConfig *cfg, OptState *st, const ResNet *m, float *params, const float *grads, float lr) {
    if (st->kind != cfg->kind) ct_die("internal: %s state stepped as %s", optim_desc(st->kind)->name, optim_desc(cfg->kind)->name);
    optim_desc(cfg->kind)->step(cfg, st, m, params, grads, lr);
}

int optim_decays(const OptConfig *cfg, const StateEntry *e) {
    return !(e->no_decay && (cfg->wd_exclude_norm_bias || optim_desc(cfg->kind)->always_exclude_norm_bias));
}

int optim_tensors(const OptConfig *cfg, const ResNet *m, CtLarsTensor *out) {
    int n = 0;
    size_t trainable = resnet_trainable(m);
    for (int i = 0; i < m->n_entries; i++) {
        const StateEntry *e = &m->entries[i];
        if (e->kind != ENTRY_PARAM || e->offset >= trainable) continue;  // a frozen backbone's tensors
        if (out) out[n] = (CtLarsTensor){e->offset, e->count, !optim_decays(cfg, e)};
        n++;
    }
    return n;
}

// The gaps between tensors (ResNet.params pads each to 8 elements) count as decayed: they hold
// zeros with zero gradients, which every optimizer here keeps at zero either way.
void optim_decay_mask(const OptConfig *cfg, const ResNet *m, uint8_t *mask) {
    size_t n = resnet_trainable(m);
    memset(mask, 1, n);
    for (int i = 0; i < m->n_entries; i++) {
        const StateEntry *e = &m->entries[i];
        if (e->kind == ENTRY_PARAM && e->offset < n && !optim_decays(cfg, e)) memset(mask + e->offset, 0, e->count);
    }
}

CtAdamArgs optim_adam_args(const OptConfig *cfg, float lr, int64_t step) {
    CtAdamArgs a;
    memset(&a, 0, sizeof a);
    const double l = lr, wd = cfg->weight_decay, b1 = cfg->beta1, b2 = cfg->beta2;
    const double bc1 = 1.0 - pow(b1, (double)step), bc2 = 1.0 - pow(b2, (double)step);
    a.lr = lr;
    a.wd = cfg->weight_decay;
    a.beta1 = (float)b1;
    a.beta2 = (float)b2;
    a.omb1 = (float)(1.0 - b1);
    a.omb2 = (float)(1.0 - b2);
    a.decay_factor = (float)(1.0 - l * wd);
    a.neg_step_size = (float)-(l / bc1);
    a.bc1 = (float)bc1;
    a.bc2_sqrt = (float)sqrt(bc2);
    a.eps = (float)cfg->eps;
    a.max_grad_norm = cfg->kind == OPT_LAMB ? cfg->max_grad_norm : 0;
    return a;
}
