// The GPU executor's state outside the passes (struct GpuExec in nn/model_cuda_impl.h): device
// selection, host<->device copies of the parameters, buffers and momentum, the BN buffers'
// snapshot and rollback, the finiteness check of the gradients, the optimizer table's steps (SGD,
// LARS, AdamW, LAMB: nn/optim.h) and their state,
// the EMA of the weights, and pinned host memory for the loader.
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

void gpu_upload_state(GpuExec *e, const ResNet *m, const SgdState *sgd) {
    CK(cudaMemcpyAsync(e->params, m->params, m->n_params * sizeof(float), cudaMemcpyHostToDevice, e->st));
    CK(cudaMemcpyAsync(e->bufs, m->bufs, m->n_bufs * sizeof(float), cudaMemcpyHostToDevice, e->st));
    if (sgd) {
        if (sgd->n != m->n_params)
            ct_die("gpu: SGD state has %zu elements, model %s has %zu (its flat parameter array)", sgd->n, m->arch, m->n_params);
        CK(cudaMemcpyAsync(e->mom, sgd->buf, m->n_params * sizeof(float), cudaMemcpyHostToDevice, e->st));
    }
    if (e->wbf) f32_to_bf16_gpu(e->wbf, e->params, m->n_params, e->st);
    CK(cudaStreamSynchronize(e->st));
}

void gpu_download_state(GpuExec *e, ResNet *m, SgdState *sgd) {
    CK(cudaMemcpyAsync(m->params, e->params, m->n_params * sizeof(float), cudaMemcpyDeviceToHost, e->st));
    CK(cudaMemcpyAsync(m->bufs, e->bufs, m->n_bufs * sizeof(float), cudaMemcpyDeviceToHost, e->st));
    if (sgd) {
        if (sgd->n != m->n_params)
            ct_die("gpu: SGD state has %zu elements, model %s has %zu (its flat parameter array)", sgd->n, m->arch, m->n_params);
        CK(cudaMemcpyAsync(sgd->buf, e->mom, m->n_params * sizeof(float), cudaMemcpyDeviceToHost, e->st));
    }
    CK(cudaStreamSynchronize(e->st));
}

void gpu_bufs_to_host(GpuExec *e, float *bufs) {
    CK(cudaMemcpyAsync(bufs, e->bufs, e->graph->n_bufs * sizeof(float), cudaMemcpyDeviceToHost, e->st));
    CK(cudaStreamSynchronize(e->st));
}
void gpu_bufs_from_host(GpuExec *e, const float *bufs) {
    CK(cudaMemcpyAsync(e->bufs, bufs, e->graph->n_bufs * sizeof(float), cudaMemcpyHostToDevice, e->st));
    CK(cudaStreamSynchronize(e->st));
}

void gpu_bufs_snapshot(GpuExec *e) {
    CK(cudaMemcpyAsync(e->bufs_snap, e->bufs, e->graph->n_bufs * sizeof(float), cudaMemcpyDeviceToDevice, e->st));
}
void gpu_bufs_rollback(GpuExec *e) {
    CK(cudaMemcpyAsync(e->bufs, e->bufs_snap, e->graph->n_bufs * sizeof(float), cudaMemcpyDeviceToDevice, e->st));
}

int gpu_grads_finite(GpuExec *e) {
    int *flag = (int *)(e->scalars + 2);  // scalars: loss, correct, non-finite flag
    CK(cudaMemsetAsync(flag, 0, sizeof(int), e->st));
    any_nonfinite_gpu(e->grads, resnet_trainable(e->graph), flag, e->st);  // the gradients backward wrote
    CK(cudaMemcpyAsync(e->h_scalars + 2, flag, sizeof(int), cudaMemcpyDeviceToHost, e->st));
    CK(cudaStreamSynchronize(e->st));
    int bad;
    memcpy(&bad, e->h_scalars + 2, sizeof bad);
    return !bad;
}

void gpu_lars_step(GpuExec *e, const ResNet *m, const SgdConfig *cfg, SgdState *st, float lr) {
    if (st->n != m->n_params) ct_die("lars: state has %zu elements, model %s has %zu (its flat parameter array)", st->n, m->arch, m->n_params);
    if (!e->lars_t) {
        e->lars_n = lars_tensors(m, NULL);
        CtLarsTensor *h = (CtLarsTensor *)ct_alloc(sizeof(CtLarsTensor) * (size_t)(e->lars_n ? e->lars_n : 1));
        lars_tensors(m, h);
        e->lars_t = (CtLarsTensor *)dmalloc(e, sizeof(CtLarsTensor) * (size_t)(e->lars_n ? e->lars_n : 1));
        if (!e->lars_norms) e->lars_norms = (double *)dmalloc(e, sizeof(double) * 3 * (size_t)(e->lars_n ? e->lars_n : 1));  // LAMB's 3 too
        CK(cudaMemcpyAsync(e->lars_t, h, sizeof(CtLarsTensor) * (size_t)e->lars_n, cudaMemcpyHostToDevice, e->st));
        CK(cudaStreamSynchronize(e->st));
        free(h);
    }
    prof_mark(e, m->n_ops, PROF_FWD);
    lars_step_gpu(e->params, e->grads, e->mom, e->lars_t, e->lars_n, e->lars_norms, lr, cfg->momentum, cfg->weight_decay,
                  cfg->lars_eta, e->wbf, e->st);
    prof_pass_done(e, 2);
    CK(cudaStreamSynchronize(e->st));
    st->steps++;
}

// The mask of elements that get weight decay, from the entry table (built once per setting; SGD
// and AdamW exclude the same entries: optim_decays).
static void decay_mask(GpuExec *e, const ResNet *m, int exclude) {
    if (e->decay_mode == exclude) return;
    OptConfig c;
    memset(&c, 0, sizeof c);
    c.kind = OPT_SGD;
    c.wd_exclude_norm_bias = exclude;
    uint8_t *h = (uint8_t *)ct_alloc(m->n_params ? m->n_params : 1);
    memset(h, 1, m->n_params);
    optim_decay_mask(&c, m, h);
    if (!e->decay) e->decay = (uint8_t *)dmalloc(e, m->n_params);
    CK(cudaMemcpyAsync(e->decay, h, m->n_params, cudaMemcpyHostToDevice, e->st));
    CK(cudaStreamSynchronize(e->st));
    free(h);
    e->decay_mode = exclude;
}

void gpu_sgd_step(GpuExec *e, const ResNet *m, const SgdConfig *cfg, SgdState *st, float lr) {
    if (st->n != m->n_params)
        ct_die("sgd: state has %zu elements, model %s has %zu (its flat parameter array)", st->n, m->arch, m->n_params);
    decay_mask(e, m, cfg->wd_exclude_bn_bias);
    prof_mark(e, m->n_ops, PROF_FWD);
    sgd_step_gpu(e->params, e->grads, e->mom, e->decay, resnet_trainable(m), lr, cfg->momentum, cfg->weight_decay,
                 cfg->nesterov, st->steps == 0, e->wbf, e->st);
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

float *gpu_exec_grads(GpuExec *e) { return e->grads; }
float *gpu_exec_params(GpuExec *e) { return e->params; }
ct_stream_t gpu_exec_stream(GpuExec *e) { return (ct_stream_t)e->st; }
size_t gpu_exec_device_bytes(const GpuExec *e) { return e->dev_bytes; }

// EMA of the weights (nn/model_cuda.h): the average stays on the device beside the live state and
// is updated on the compute stream after each optimizer step, with no host traffic.
void gpu_ema_set(GpuExec *e, const float *params, const float *bufs) {
    const ResNet *m = e->graph;
    if (!e->ema_params) {
        e->ema_params = (float *)dmalloc(e, m->n_params * sizeof(float));
        e->ema_bufs = (float *)dmalloc(e, (m->n_bufs + 1) * sizeof(float));
    }
    CK(cudaMemcpyAsync(e->ema_params, params, m->n_params * sizeof(float), cudaMemcpyHostToDevice, e->st));
    CK(cudaMemcpyAsync(e->ema_bufs, bufs, m->n_bufs * sizeof(float), cudaMemcpyHostToDevice, e->st));
    CK(cudaStreamSynchronize(e->st));
}

void gpu_ema_get(GpuExec *e, float *params, float *bufs) {
    const ResNet *m = e->graph;
    if (!e->ema_params) ct_die("internal: gpu_ema_get without gpu_ema_set");
    CK(cudaMemcpyAsync(params, e->ema_params, m->n_params * sizeof(float), cudaMemcpyDeviceToHost, e->st));
    CK(cudaMemcpyAsync(bufs, e->ema_bufs, m->n_bufs * sizeof(float), cudaMemcpyDeviceToHost, e->st));
    CK(cudaStreamSynchronize(e->st));
}

void gpu_ema_update(GpuExec *e, float decay) {
    ema_update_gpu(e->ema_params, e->params, e->graph->n_params, decay, e->st);
    ema_update_gpu(e->ema_bufs, e->bufs, e->graph->n_bufs, decay, e->st);
}

// The bf16 operand copy follows the params it now holds, so an eval forward runs the average.
void gpu_ema_swap(GpuExec *e) {
    if (!e->ema_params) ct_die("internal: gpu_ema_swap without gpu_ema_set");
    ema_swap_gpu(e->params, e->ema_params, e->graph->n_params, e->wbf, e->st);
    ema_swap_gpu(e->bufs, e->ema_bufs, e->graph->n_bufs, NULL, e->st);
    CK(cudaStreamSynchronize(e->st));
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
    if (e->mom2) return;
    e->mom2 = (float *)dmalloc(e, m->n_params * sizeof(float));
    CK(cudaMemsetAsync(e->mom2, 0, m->n_params * sizeof(float), e->st));
}

static void gpu_adamw_entry(GpuExec *e, const ResNet *m, const OptConfig *cfg, OptState *st, float lr) {
    if (st->n != m->n_params) ct_die("adamw: state has %zu elements, model %s has %zu (its flat parameter array)", st->n, m->arch, m->n_params);
    need_mom2(e, m);
    decay_mask(e, m, cfg->wd_exclude_norm_bias);
    CtAdamArgs a = optim_adam_args(cfg, lr, st->steps + 1);
    prof_mark(e, m->n_ops, PROF_FWD);
    adamw_step_gpu(e->params, e->grads, e->mom, e->mom2, e->decay, resnet_trainable(m), &a, e->wbf, e->st);
    prof_pass_done(e, 2);
    CK(cudaStreamSynchronize(e->st));
    st->steps++;
}

static void gpu_lamb_entry(GpuExec *e, const ResNet *m, const OptConfig *cfg, OptState *st, float lr) {
    if (st->n != m->n_params) ct_die("lamb: state has %zu elements, model %s has %zu (its flat parameter array)", st->n, m->arch, m->n_params);
    need_mom2(e, m);
    int nt = optim_tensors(cfg, m, NULL);
    if (e->lamb_mode != cfg->wd_exclude_norm_bias) {
        CtLarsTensor *h = (CtLarsTensor *)ct_alloc(sizeof(CtLarsTensor) * (size_t)(nt ? nt : 1));
        optim_tensors(cfg, m, h);
        if (!e->lamb_t) e->lamb_t = (CtLarsTensor *)dmalloc(e, sizeof(CtLarsTensor) * (size_t)(nt ? nt : 1));
        if (!e->lars_norms) e->lars_norms = (double *)dmalloc(e, sizeof(double) * 3 * (size_t)(nt ? nt : 1));
        CK(cudaMemcpyAsync(e->lamb_t, h, sizeof(CtLarsTensor) * (size_t)nt, cudaMemcpyHostToDevice, e->st));
        CK(cudaStreamSynchronize(e->st));
        free(h);
        e->lamb_mode = cfg->wd_exclude_norm_bias;
    }
    CtAdamArgs a = optim_adam_args(cfg, lr, st->steps + 1);
    prof_mark(e, m->n_ops, PROF_FWD);
    lamb_step_gpu(e->lamb_t, nt, e->params, e->grads, e->mom, e->mom2, e->lars_norms, &a, e->wbf, e->st);
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
        CK(cudaMemcpyAsync(i ? e->mom2 : e->mom, st->state[i], m->n_params * sizeof(float), cudaMemcpyHostToDevice, e->st));
    CK(cudaStreamSynchronize(e->st));
}

void gpu_download_optim(GpuExec *e, const ResNet *m, OptState *st) {
    int ns = optim_desc(st->kind)->n_state;
    if (st->n != m->n_params)
        ct_die("gpu: %s state has %zu elements, model %s has %zu (its flat parameter array)", optim_desc(st->kind)->name, st->n, m->arch, m->n_params);
    if (ns > 1) need_mom2(e, m);
    for (int i = 0; i < ns; i++)
        CK(cudaMemcpyAsync(st->state[i], i ? e->mom2 : e->mom, m->n_params * sizeof(float), cudaMemcpyDeviceToHost, e->st));
    CK(cudaStreamSynchronize(e->st));
}
