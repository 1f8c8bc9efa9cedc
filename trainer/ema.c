// The trainer's EMA of the weights (trainer/ema.h).
#include "trainer/ema.h"

#include <string.h>

#include "trainer/run.h"

#include "util/common.h"

int ema_on(const Run *r) { return r->model.ema.decay > 0; }

void ema_start(Run *r, const float *ck_params, const float *ck_bufs, const char *note) {
    const Config *c = r->cfg;
    RunEma *e = &r->model.ema;
    if (!(c->ema > 0)) return;
    const ResNet *m = r->model.net;
    e->decay = (float)c->ema;
    e->every = c->ema_every;
    e->state = ct_alloc(sizeof(float) * (m->n_params + m->n_bufs + 1));
    // The host ResNet holds the state training starts from (the upload after this takes it, and
    // the average, to the GPU).
    memcpy(e->state, ck_params ? ck_params : m->params, m->n_params * sizeof(float));
    memcpy(e->state + m->n_params, ck_bufs ? ck_bufs : m->bufs, m->n_bufs * sizeof(float));
    if (note && r->rank.rank == 0) fprintf(stderr, "train: %s\n", note);
    backend_ema_attach(r->model.backend, e->state);
}

void ema_after_step(Run *r, int64_t global_step) {
    const RunEma *e = &r->model.ema;
    if (e->decay > 0 && global_step % e->every == 0) backend_ema(r->model.backend, EMA_UPDATE, e->decay);
}

void ema_exchange(Run *r) { backend_ema(r->model.backend, EMA_SWAP, 0); }

int ema_model_is_best(const Run *r) {
    const RunEma *e = &r->model.ema;
    return ema_on(r) && e->evaluated && e->last_top1 >= e->last_top1_plain;
}

void ema_free(RunEma *e) {
    free(e->state);
    e->state = NULL;
}
