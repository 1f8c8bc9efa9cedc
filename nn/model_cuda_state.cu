// The GPU executor's state outside the passes: the device state (DevState in
// nn/model_cuda_impl.h) and its life, device selection, host<->device copies of the parameters,
// buffers and optimizer state tensors, the BN buffers' snapshot and rollback, the finiteness check
// of the gradients, the optimizer table's steps (SGD, LARS, AdamW, LAMB: nn/optim.h) with their
// scratch (OptScratch), the EMA of the weights, and pinned host memory for the loader.
#include <string.h>

#include "nn/lars.h"
#include "nn/optim.h"
#include "nn/model_cuda_impl.h"

int gpu_device_count(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return n;
}

int gpu_available(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return n > 0;
}

void gpu_select_device(int device) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n <= 0) ct_die("--device cuda: no CUDA device is usable");
    if (device < 0 || device >= n) ct_die("cuda device %d does not exist (this node has %d)", device, n);
    CK(cudaSetDevice(device));
}

// The device state's life (gpu_exec_create/free): params, grads, the first optimizer tensor (the
// two zeroed), bufs and their snapshot, the bf16 weights, at creation; the second optimizer tensor,
// the EMA and the optimizer scratch on first use.
void dev_state_create(GpuExec *e, const ResNet *m) {
    DevState *d = &e->dev;
    d->params = (float *)dmalloc(e, m->n_params * sizeof(float));
    d->grads = (float *)dmalloc(e, m->n_params * sizeof(float));
    d->mom = (float *)dmalloc(e, m->n_params * sizeof(float));
    d->bufs = (float *)dmalloc(e, m->n_bufs * sizeof(float));
    d->bufs_snap = (float *)dmalloc(e, m->n_bufs * sizeof(float));
    if (e->dt == CT_BF16) d->wbf = (uint16_t *)dmalloc(e, m->n_params * sizeof(uint16_t));
    CK(cudaMemsetAsync(d->grads, 0, m->n_params * sizeof(float), e->st));
    CK(cudaMemsetAsync(d->mom, 0, m->n_params * sizeof(float), e->st));
    e->osc.decay_mode = -1;
    e->osc.lamb_mode = -1;
}

void dev_state_free(GpuExec *e) {
    DevState *d = &e->dev;
    OptScratch *o = &e->osc;
    dfree(d->params);
    dfree(d->grads);
    dfree(d->mom);
    dfree(d->mom2);
    dfree(d->bufs);
    dfree(d->bufs_snap);
    dfree(d->wbf);
    dfree(d->ema);
    dfree(o->decay);
    dfree(o->lars_t);
    dfree(o->lars_norms);
    dfree(o->lamb_t);
    memset(d, 0, sizeof *d);
    memset(o, 0, sizeof *o);
}

void gpu_upload_state(GpuExec *e, const ResNet *m, const SgdState *sgd) {
    CK(cudaMemcpyAsync(e->dev.params, m->params, m->n_params * sizeof(float), cudaMemcpyHostToDevice, e->st));
    CK(cudaMemcpyAsync(e->dev.bufs, m->bufs, m->n_bufs * sizeof(float), cudaMemcpyHostToDevice, e->st));
    if (sgd) {
        if (sgd->n != m->n_params)
            ct_die("gpu: SGD state has %zu elements, model %s has %zu (its flat parameter array)", sgd->n, m->arch, m->n_params);
        CK(cudaMemcpyAsync(e->dev.mom, sgd->buf, m->n_params * sizeof(float), cudaMemcpyHostToDevice, e->st));
    }
    if (e->dev.wbf) f32_to_bf16_gpu(e->dev.wbf, e->dev.params, m->n_params, e->st);
    CK(cudaStreamSynchronize(e->st));
}

void gpu_download_state(GpuExec *e, ResNet *m, SgdState *sgd) {
    CK(cudaMemcpyAsync(m->params, e->dev.params, m->n_params * sizeof(float), cudaMemcpyDeviceToHost, e->st));
    CK(cudaMemcpyAsync(m->bufs, e->dev.bufs, m->n_bufs * sizeof(float), cudaMemcpyDeviceToHost, e->st));
    if (sgd) {
        if (sgd->n != m->n_params)
            ct_die("gpu: SGD state has %zu elements, model %s has %zu (its flat parameter array)", sgd->n, m->arch, m->n_params);
        CK(cudaMemcpyAsync(sgd->buf, e->dev.mom, m->n_params * sizeof(float), cudaMemcpyDeviceToHost, e->st));
    }
    CK(cudaStreamSynchronize(e->st));
}

void gpu_bufs_to_host(GpuExec *e, float *bufs) {
    CK(cudaMemcpyAsync(bufs, e->dev.bufs, e->graph->n_bufs * sizeof(float), cudaMemcpyDeviceToHost, e->st));
    CK(cudaStreamSynchronize(e->st));
}
void gpu_bufs_from_host(GpuExec *e, const float *bufs) {
    CK(cudaMemcpyAsync(e->dev.bufs, bufs, e->graph->n_bufs * sizeof(float), cudaMemcpyHostToDevice, e->st));
    CK(cudaStreamSynchronize(e->st));
}

void gpu_bufs_snapshot(GpuExec *e) {
    CK(cudaMemcpyAsync(e->dev.bufs_snap, e->dev.bufs, e->graph->n_bufs * sizeof(float), cudaMemcpyDeviceToDevice, e->st));
}
void gpu_bufs_rollback(GpuExec *e) {
    CK(cudaMemcpyAsync(e->dev.bufs, e->dev.bufs_snap, e->graph->n_bufs * sizeof(float), cudaMemcpyDeviceToDevice, e->st));
}

int gpu_grads_finite(GpuExec *e) {
    int *flag = (int *)(e->scalars + 2);  // scalars: loss, correct, non-finite flag
    CK(cudaMemsetAsync(flag, 0, sizeof(int), e->st));
    any_nonfinite_gpu(e->dev.grads, resnet_trainable(e->graph), flag, e->st);  // the gradients backward wrote
    CK(cudaMemcpyAsync(e->h_scalars + 2, flag, sizeof(int), cudaMemcpyDeviceToHost, e->st));
    CK(cudaStreamSynchronize(e->st));
    int bad;
    memcpy(&bad, e->h_scalars + 2, sizeof bad);
    return !bad;
}

void gpu_lars_step(GpuExec *e, const ResNet *m, const SgdConfig *cfg, SgdState *st, float lr) {
    if (st->n != m->n_params) ct_die("lars: state has %zu elements, model %s has %zu (its flat parameter array)", st->n, m->arch, m->n_params);
    if (!e->osc.lars_t) {
        e->osc.lars_n = lars_tensors(m, NULL);
        CtLarsTensor *h = (CtLarsTensor *)ct_alloc(sizeof(CtLarsTensor) * (size_t)(e->osc.lars_n ? e->osc.lars_n : 1));
        lars_tensors(m, h);
        e->osc.lars_t = (CtLarsTensor *)dmalloc(e, sizeof(CtLarsTensor) * (size_t)(e->osc.lars_n ? e->osc.lars_n : 1));
        if (!e->osc.lars_norms) e->osc.lars_norms = (double *)dmalloc(e, sizeof(double) * 3 * (size_t)(e->osc.lars_n ? e->osc.lars_n : 1));  // LAMB's 3 too
        CK(cudaMemcpyAsync(e->osc.lars_t, h, sizeof(CtLarsTensor) * (size_t)e->osc.lars_n, cudaMemcpyHostToDevice, e->st));
        CK(cudaStreamSynchronize(e->st));
        free(h);
    }
    prof_mark(e, m->n_ops, PROF_FWD);
    lars_step_gpu(e->dev.params, e->dev.grads, e->dev.mom, e->osc.lars_t, e->osc.lars_n, e->osc.lars_norms, lr, cfg->momentum, cfg->weight_decay,
                  cfg->lars_eta, e->dev.wbf, e->st);
    prof_pass_done(e, 2);
    CK(cudaStreamSynchronize(e->st));
    st->steps++;
}

// The mask of elements that get weight decay, from the entry table (built once per setting; SGD
// and AdamW exclude the same entries: optim_decays).
static void decay_mask(GpuExec *e, const ResNet *m, int exclude) {
    if (e->osc.decay_mode == exclude) return;
    OptConfig c;
    memset(&c, 0, sizeof c);
    c.kind = OPT_SGD;
    c.wd_exclude_norm_bias = exclude;
    uint8_t *h = (uint8_t *)ct_alloc(m->n_params ? m->n_params : 1);
    memset(h, 1, m->n_params);
    optim_decay_mask(&c, m, h);
    if (!e->osc.decay) e->osc.decay = (uint8_t *)dmalloc(e, m->n_params);
    CK(cudaMemcpyAsync(e->osc.decay, h, m->n_params, cudaMemcpyHostToDevice, e->st));
    CK(cudaStreamSynchronize(e->st));
    free(h);
    e->osc.decay_mode = exclude;
}

void gpu_sgd_step(GpuExec *e, const ResNet *m, const SgdConfig *cfg, SgdState *st, float lr) {
    if (st->n != m->n_params)
        ct_die("sgd: state has %zu elements, model %s has %zu (its flat parameter array)", st->n, m->arch, m->n_params);
    decay_mask(e, m, cfg->wd_exclude_bn_bias);
    prof_mark(e, m->n_ops, PROF_FWD);
    sgd_step_gpu(e->dev.params, e->dev.grads, e->dev.mom, e->osc.decay, resnet_trainable(m), lr, cfg->momentum, cfg->weight_decay,
                 cfg->nesterov, st->steps == 0, e->dev.wbf, e->st);
    prof_pass_done(e, 2);
    CK(cudaStreamSynchronize(e->st));
    st->steps++;
}

void *gpu_pinned_alloc(size_t bytes, void *ctx) {
    (void)ctx;
    void *p = NULL;
    cudaError_t err = cudaHostAlloc(&p, bytes ? bytes : 64, cudaHostAllocPortable);
    if (err != cudaSuccess) ct_die("cuda: cannot allocate %zu bytes of pinned host memory: %s", bytes, cudaGetErrorString(err));
    return p;
}
void gpu_pinned_free(void *p, void *ctx) {
    (void)ctx;
    if (p) cudaFreeHost(p);
}

int gpu_pin_host(const void *p, size_t bytes, char *err, size_t errlen) {
    // A shard is mapped read-only, so it is registered read-only (CUDA >= 11.1). Failure is not fatal:
    // the loader still works from pageable memory, only slower to page in and not locked in RAM.
    cudaError_t rc = cudaHostRegister((void *)p, bytes, cudaHostRegisterPortable | cudaHostRegisterReadOnly);
    if (rc != cudaSuccess) {
        cudaGetLastError();  // clear the sticky error so later calls do not report it
        snprintf(err, errlen, "%s", cudaGetErrorString(rc));
        return -1;
    }
    return 0;
}
void gpu_unpin_host(const void *p) {
    if (p && cudaHostUnregister((void *)p) != cudaSuccess) cudaGetLastError();
}

float *gpu_exec_grads(GpuExec *e) { return e->dev.grads; }
float *gpu_exec_params(GpuExec *e) { return e->dev.params; }
ct_stream_t gpu_exec_stream(GpuExec *e) { return (ct_stream_t)e->st; }
size_t gpu_exec_device_bytes(const GpuExec *e) { return e->dev_bytes; }

// EMA of the weights (nn/model_cuda.h): the average stays on the device beside the live state and
// is updated on the compute stream after each optimizer step, with no host traffic.
void gpu_upload_ema(GpuExec *e, const float *ema) {
    const ResNet *m = e->graph;
    size_t n = m->n_params + m->n_bufs;
    if (!e->dev.ema) e->dev.ema = (float *)dmalloc(e, n * sizeof(float));
    CK(cudaMemcpyAsync(e->dev.ema, ema, n * sizeof(float), cudaMemcpyHostToDevice, e->st));
    CK(cudaStreamSynchronize(e->st));
}

void gpu_download_ema(GpuExec *e, float *ema) {
    const ResNet *m = e->graph;
    if (!e->dev.ema) ct_die("internal: gpu_download_ema before gpu_upload_ema");
    CK(cudaMemcpyAsync(ema, e->dev.ema, (m->n_params + m->n_bufs) * sizeof(float), cudaMemcpyDeviceToHost, e->st));
    CK(cudaStreamSynchronize(e->st));
}

// nn/ema.h's ema_apply on the device: the same ranges, the kernels its twins.
void gpu_ema(GpuExec *e, EmaOp op, float decay) {
    const ResNet *m = e->graph;
    DevState *d = &e->dev;
    if (!d->ema) ct_die("internal: gpu_ema before gpu_upload_ema");
    float *ema_bufs = d->ema + m->n_params;
    switch (op) {
    case EMA_UPDATE:
        ema_update_gpu(d->ema, d->params, m->n_params, decay, e->st);
        ema_update_gpu(ema_bufs, d->bufs, m->n_bufs, decay, e->st);
        return;
    case EMA_SWAP:  // the bf16 operand copy follows the params it now holds
        ema_swap_gpu(d->params, d->ema, m->n_params, d->wbf, e->st);
        ema_swap_gpu(d->bufs, ema_bufs, m->n_bufs, NULL, e->st);
        CK(cudaStreamSynchronize(e->st));
        return;
    }
    ct_die("internal: EMA op %d", (int)op);
}

// The optimizer table's GPU steps (nn/optim.h), each the twin of its CPU step.
static void gpu_sgd_entry(GpuExec *e, const ResNet *m, const OptConfig *cfg, OptState *st, float lr) {
    SgdConfig c = optim_sgd_config(cfg);
    SgdState s = {st->n, st->state[0], (long)st->steps};
    if (cfg->kind == OPT_LARS) gpu_lars_step(e, m, &c, &s, lr);
    else gpu_sgd_step(e, m, &c, &s, lr);
    st->steps = s.steps;
}

static void need_mom2(GpuExec *e, const ResNet *m) {
    if (e->dev.mom2) return;
    e->dev.mom2 = (float *)dmalloc(e, m->n_params * sizeof(float));
    CK(cudaMemsetAsync(e->dev.mom2, 0, m->n_params * sizeof(float), e->st));
}

static void gpu_adamw_entry(GpuExec *e, const ResNet *m, const OptConfig *cfg, OptState *st, float lr) {
    if (st->n != m->n_params) ct_die("adamw: state has %zu elements, model %s has %zu (its flat parameter array)", st->n, m->arch, m->n_params);
    need_mom2(e, m);
    decay_mask(e, m, cfg->wd_exclude_norm_bias);
    CtAdamArgs a = optim_adam_args(cfg, lr, st->steps + 1);
    prof_mark(e, m->n_ops, PROF_FWD);
    adamw_step_gpu(e->dev.params, e->dev.grads, e->dev.mom, e->dev.mom2, e->osc.decay, resnet_trainable(m), &a, e->dev.wbf, e->st);
    prof_pass_done(e, 2);
    CK(cudaStreamSynchronize(e->st));
    st->steps++;
}

static void gpu_lamb_entry(GpuExec *e, const ResNet *m, const OptConfig *cfg, OptState *st, float lr) {
    if (st->n != m->n_params) ct_die("lamb: state has %zu elements, model %s has %zu (its flat parameter array)", st->n, m->arch, m->n_params);
    need_mom2(e, m);
    int nt = optim_tensors(cfg, m, NULL);
    if (e->osc.lamb_mode != cfg->wd_exclude_norm_bias) {
        CtLarsTensor *h = (CtLarsTensor *)ct_alloc(sizeof(CtLarsTensor) * (size_t)(nt ? nt : 1));
        optim_tensors(cfg, m, h);
        if (!e->osc.lamb_t) e->osc.lamb_t = (CtLarsTensor *)dmalloc(e, sizeof(CtLarsTensor) * (size_t)(nt ? nt : 1));
        if (!e->osc.lars_norms) e->osc.lars_norms = (double *)dmalloc(e, sizeof(double) * 3 * (size_t)(nt ? nt : 1));
        CK(cudaMemcpyAsync(e->osc.lamb_t, h, sizeof(CtLarsTensor) * (size_t)nt, cudaMemcpyHostToDevice, e->st));
        CK(cudaStreamSynchronize(e->st));
        free(h);
        e->osc.lamb_mode = cfg->wd_exclude_norm_bias;
    }
    CtAdamArgs a = optim_adam_args(cfg, lr, st->steps + 1);
    prof_mark(e, m->n_ops, PROF_FWD);
    lamb_step_gpu(e->osc.lamb_t, nt, e->dev.params, e->dev.grads, e->dev.mom, e->dev.mom2, e->osc.lars_norms, &a, e->dev.wbf, e->st);
    prof_pass_done(e, 2);
    CK(cudaStreamSynchronize(e->st));
    st->steps++;
}

typedef void (*GpuOptStep)(GpuExec *e, const ResNet *m, const OptConfig *cfg, OptState *st, float lr);
static const GpuOptStep GPU_OPT_STEPS[OPT_COUNT] = {gpu_sgd_entry, gpu_sgd_entry, gpu_adamw_entry, gpu_lamb_entry};

void gpu_optim_step(GpuExec *e, const ResNet *m, const OptConfig *cfg, OptState *st, float lr) {
    if (st->kind != cfg->kind) ct_die("internal: %s state stepped as %s", optim_desc(st->kind)->name, optim_desc(cfg->kind)->name);
    GPU_OPT_STEPS[cfg->kind](e, m, cfg, st, lr);
}

// The optimizer's state tensors in table order: mom, then mom2.
void gpu_upload_optim(GpuExec *e, const ResNet *m, const OptState *st) {
    int ns = optim_desc(st->kind)->n_state;
    if (st->n != m->n_params)
        ct_die("gpu: %s state has %zu elements, model %s has %zu (its flat parameter array)", optim_desc(st->kind)->name, st->n, m->arch, m->n_params);
    if (ns > 1) need_mom2(e, m);
    for (int i = 0; i < ns; i++)
        CK(cudaMemcpyAsync(i ? e->dev.mom2 : e->dev.mom, st->state[i], m->n_params * sizeof(float), cudaMemcpyHostToDevice, e->st));
    CK(cudaStreamSynchronize(e->st));
}

void gpu_download_optim(GpuExec *e, const ResNet *m, OptState *st) {
    int ns = optim_desc(st->kind)->n_state;
    if (st->n != m->n_params)
        ct_die("gpu: %s state has %zu elements, model %s has %zu (its flat parameter array)", optim_desc(st->kind)->name, st->n, m->arch, m->n_params);
    if (ns > 1) need_mom2(e, m);
    for (int i = 0; i < ns; i++)
        CK(cudaMemcpyAsync(st->state[i], i ? e->dev.mom2 : e->dev.mom, m->n_params * sizeof(float), cudaMemcpyDeviceToHost, e->st));
    CK(cudaStreamSynchronize(e->st));
}
