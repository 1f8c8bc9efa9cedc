// GPU executor of a ResNet graph: walks nn/resnet.h's op list with the kernels of
// kernels/kernels.h. API and conventions in nn/model_cuda.h. This file owns the executor's life
// (create/free), the forward and backward passes, input staging and their CUDA graphs; the losses
// are nn/model_cuda_loss.cu's, the memory plan (MemPlan) nn/model_cuda_plan.cu's, the device state
// (DevState), its copies and the optimizer steps nn/model_cuda_state.cu's, the profiler
// nn/model_cuda_prof.cu's (the structs they share: nn/model_cuda_impl.h).
//
// The second contribution to a gradient slot (a block input feeds both the residual add and a
// conv or the shortcut) is accumulated in place where the kernel can: a convolution's data
// gradient adds to the slot in its epilogue (conv2d_backward_data_acc_gpu), a fused block tail in
// its dx pass; the other kernels overwrite their output (the CPU convention), so theirs goes
// through a scratch buffer and add_inplace.
// Which batch-norm passes ride in which kernels (the fusions and the options that switch them) is
// decided once per executor by the lowered plan (nn/plan.h); the passes below walk its steps.
#include <string.h>

#include "kernels/mutable.h"
#include "util/bf16.h"
#include "nn/model_cuda_impl.h"

#define BN_MOMENTUM 0.1f
#define BN_EPS 1e-5f

GpuExec *gpu_exec_create(const ResNet *m, CtDtype dt) { return gpu_exec_create_opts(m, dt, NULL); }

const ExecPlan *gpu_exec_plan(const GpuExec *e) { return e->plan; }

void gpu_exec_set_step_hook(GpuExec *e, PlanStepHook fn, void *ctx) {
    e->hook.fn = fn;
    e->hook.ctx = ctx;
}

// The hook's view of step k's output: synchronise, copy the slot to the host as floats.
static void call_hook(GpuExec *e, int k, const PlanStep *ps, int N) {
    const ResNet *m = e->graph;
    if (!e->mem.act[ps->out]) {
        e->hook.fn(e->hook.ctx, k, NULL, 0);
        return;
    }
    int logits = ps->out == m->n_tensors - 1;  // fp32 whatever the dtype
    size_t n = slot_elems(e, ps->out, N), esz = logits ? sizeof(float) : e->esz;
    if (e->hook.cap < n) {
        free(e->hook.buf);
        e->hook.buf = (float *)ct_alloc(n * sizeof(float));
        e->hook.cap = n;
    }
    CK(cudaStreamSynchronize(e->st));
    CK(cudaMemcpy(e->hook.buf, e->mem.act[ps->out], n * esz, cudaMemcpyDeviceToHost));
    if (esz == 2) {  // widen in place, from the end
        const uint16_t *h = (const uint16_t *)e->hook.buf;
        for (size_t j = n; j-- > 0;) e->hook.buf[j] = ct_bf16_to_f32(h[j]);
    }
    e->hook.fn(e->hook.ctx, k, e->hook.buf, n);
}

GpuExec *gpu_exec_create_opts(const ResNet *m, CtDtype dt, const ExecOptions *opts) {
    GpuExec *e = (GpuExec *)ct_zalloc(sizeof(GpuExec));
    e->dt = dt;
    e->opt = opts ? *opts : exec_options_default();
    // fp32 takes the generic engine; a tensor-core engine named for it would be an error.
    e->conv_algo = dt != CT_BF16                              ? CT_CONV_AUTO
                   : e->opt.conv_engine == EXEC_CONV_V1    ? CT_CONV_TC
                   : e->opt.conv_engine == EXEC_CONV_WGMMA ? CT_CONV_WGMMA
                                                           : CT_CONV_TC2;
    e->esz = dt == CT_BF16 ? 2 : 4;
    e->graph = m;
    e->plan = plan_build(m, &e->opt);
    CK(cudaStreamCreateWithFlags(&e->st, cudaStreamNonBlocking));
    CK(cudaStreamCreateWithFlags(&e->cp, cudaStreamNonBlocking));
    for (int i = 0; i < 2; i++) {
        CK(cudaEventCreateWithFlags(&e->in.stage[i].copied, cudaEventDisableTiming));
        CK(cudaEventCreateWithFlags(&e->in.stage[i].consumed, cudaEventDisableTiming));
    }
    dev_state_create(e, m);
    e->scalars = (float *)dmalloc(e, 4 * sizeof(float));
    CK(cudaMallocHost((void **)&e->h_scalars, 4 * sizeof(float)));
    int cin = m->in_channels;
    e->in.meanstd = (float *)dmalloc(e, 2 * (size_t)cin * sizeof(float));
    e->in.h_meanstd = (float *)ct_zalloc(2 * (size_t)cin * sizeof(float));
    gpu_upload_state(e, m, NULL);
    return e;
}

void graph_drop(StepGraph *g) {
    if (g->exec) CK(cudaGraphExecDestroy(g->exec));
    g->exec = NULL;
    g->N = g->gen = 0;
}

void gpu_exec_free(GpuExec *e) {
    if (!e) return;
    prof_free(e->prof);
    drop_path_free(e);
    exec_free_plan(e, e->graph);
    plan_free(e->plan);
    dev_state_free(e);
    dfree(e->scalars);
    dfree(e->in.meanstd);
    dfree(e->in.xf);
    for (int i = 0; i < 2; i++) {
        dfree(e->in.stage[i].d);
        cudaEventDestroy(e->in.stage[i].copied);
        cudaEventDestroy(e->in.stage[i].consumed);
    }
    cudaFreeHost(e->h_scalars);
    free(e->in.h_meanstd);
    free(e->hook.buf);
    cudaStreamDestroy(e->st);
    cudaStreamDestroy(e->cp);
    free(e);
}

// Forward over the plan's steps from act[0] (already written) with batch n.
// Enqueues the forward's kernels on e->st, nothing else (a graph capture records exactly this).
// A step's fusions apply to training passes that update the BN statistics; an eval pass (or a
// frozen backbone's) runs each BN on its own, a PLAN_BN_STATS one into the scratch its reader takes.
static void forward_ops(GpuExec *e, const ResNet *m, int N, int train) {
    CtDtype dt = e->dt;
    cudaStream_t st = e->st;
    const ExecPlan *p = e->plan;
    const int fused = train && !m->freeze_backbone;
    int stats_op = -1;  // the BN whose statistics the previous conv's epilogue left in e->mem.work
    for (int k = 0; k < p->n_steps; k++) {
        const PlanStep *ps = &p->steps[k];
        const int i = ps->op;
        const Op *op = &m->ops[i];
        const TensorDim *di = &e->mem.dims[ps->in], *dout = &e->mem.dims[ps->out];
        void *out = e->mem.act[ps->out];
        const void *in = e->mem.act[ps->in];
        size_t n_in = slot_elems(e, ps->in, N);
        prof_mark(e, i, PROF_FWD);
        switch (ps->kind) {
        case PLAN_CONV: {
            ConvShape s = op_conv_shape(e, op, N);
            const void *x = in, *w = wop(e, m, op->w);
            if (stem_padded(e, op)) {
                conv_pad_channels_gpu(e->mem.xpad, in, (size_t)N * di->H * di->W, di->C, e->mem.cpad, dt, st);
                conv_pad_channels_gpu(e->mem.wpad, w, (size_t)op->K * op->R * op->S, di->C, e->mem.cpad, dt, st);
                x = e->mem.xpad;
                w = e->mem.wpad;
            }
            if (ps->fwd_stats >= 0 && fused && conv2d_forward_stats_gpu(&s, out, e->mem.work, x, w, dt, st, e->conv_algo)) {
                stats_op = ps->fwd_stats;
                break;
            }
            conv2d_forward_gpu_ex(&s, out, x, w, dt, st, e->conv_algo);
            break;
        }
        case PLAN_BN_STATS: {  // applied by the step it feeds; eval: into the scratch, which that step reads
            int M = N * di->H * di->W, C = di->C;
            float *gamma = pparam(e, m, op->w), *beta = pparam(e, m, op->b);
            float *rm = e->dev.bufs + entry(m, op->rm)->offset, *rv = e->dev.bufs + entry(m, op->rv)->offset;
            if (fused)
                batchnorm_stats_train_gpu(e->mem.bnstat + e->mem.bnstat_off[i], e->mem.bnstat + e->mem.bnstat_off[i] + C, rm, rv, in,
                                          stats_op == i ? e->mem.work : NULL, gamma, M, C, BN_MOMENTUM, BN_EPS, e->mem.work,
                                          dt, st);
            else
                batchnorm_add_forward_eval_gpu(e->mem.scratch, in, NULL, gamma, beta, rm, rv, M, C, BN_EPS, op->relu, dt,
                                               st);
            break;
        }
        case PLAN_BN:
        case PLAN_BN_ADD: {  // bn(in) [+ res] [relu] into the step's output
            int M = N * di->H * di->W, C = di->C;
            float *gamma = pparam(e, m, op->w), *beta = pparam(e, m, op->b);
            float *rm = e->dev.bufs + entry(m, op->rm)->offset, *rv = e->dev.bufs + entry(m, op->rv)->offset;
            const void *res = NULL;  // tests/emu_plan.c deletes the residual (mutant) and sees it fail
            if (ps->res >= 0) CT_MUTABLE("plan-tail-residual") res = e->mem.act[ps->res];
            const Op *rbn = ps->residual_bn >= 0 ? &m->ops[ps->residual_bn] : NULL;
            if (rbn) res = e->mem.scratch;  // eval: where the residual's PLAN_BN_STATS step put it
            const float *tiles = stats_op == i ? e->mem.work : NULL;
            if (fused) {
                float *mean = e->mem.bnstat + e->mem.bnstat_off[i], *invstd = mean + C;
                uint8_t *mask = e->mem.relu_mask[i];  // for the tail's backward in the next conv's epilogue
                if (rbn) {
                    BnAffine rb = bn_affine(e, m, ps->residual_bn);
                    e->mem.mask_ok[i] = (uint8_t)batchnorm_add_bn_forward_train_gpu(
                        out, mean, invstd, rm, rv, in, tiles, e->mem.act[rbn->in], rb, gamma, beta, M, C, BN_MOMENTUM,
                        BN_EPS, ps->relu, mask, e->mem.work, dt, st);
                } else if (tiles) {
                    e->mem.mask_ok[i] = (uint8_t)batchnorm_add_forward_train_tiles_gpu(
                        out, mean, invstd, rm, rv, in, res, e->mem.work, gamma, beta, M, C, BN_MOMENTUM, BN_EPS, ps->relu,
                        mask, e->mem.work, dt, st);
                } else {
                    e->mem.mask_ok[i] = (uint8_t)batchnorm_add_forward_train_gpu(out, mean, invstd, rm, rv, in, res, gamma,
                                                                             beta, M, C, BN_MOMENTUM, BN_EPS, ps->relu,
                                                                             mask, e->mem.work, dt, st);
                }
            } else {
                batchnorm_add_forward_eval_gpu(out, in, res, gamma, beta, rm, rv, M, C, BN_EPS, ps->relu, dt, st);
            }
            break;
        }
        case PLAN_RELU:
            relu_forward_gpu(out, in, n_in, dt, st);
            break;
        case PLAN_MAXPOOL:
            if (ps->pool_bn >= 0 && fused) {  // relu(bn(x)) on the fly
                const Op *bn = &m->ops[ps->pool_bn];
                maxpool_forward_bn_gpu(out, e->mem.act[bn->in], bn_affine(e, m, ps->pool_bn), N, di->H, di->W, di->C,
                                       op->R, op->stride, op->pad, dout->H, dout->W, e->opt.maxpool_vector, dt, st);
                break;
            }
            maxpool_forward_gpu(out, ps->pool_bn >= 0 ? e->mem.scratch : in, N, di->H, di->W, di->C, op->R, op->stride,
                                op->pad, dout->H, dout->W, e->opt.maxpool_vector, dt, st);
            break;
        case PLAN_ADD:
            add_forward_gpu(out, in, e->mem.act[ps->res], n_in, ps->relu, dt, st);
            break;
        case PLAN_AVGPOOL:
            avgpool_forward_gpu(out, in, N, di->H * di->W, di->C, dt, st);
            break;
        case PLAN_BLUR:
            blur3x3_forward_gpu(out, in, N, di->H, di->W, di->C, dt, st);
            break;
        case PLAN_FC:
            linear_forward_gpu((float *)out, in, wop(e, m, op->w), op->b >= 0 ? pparam(e, m, op->b) : NULL,
                               N, op->C, op->K, dt, st);
            break;
        case PLAN_DROP_PATH:  // eval: the identity
            if (train) drop_path_gpu(out, in, drop_path_dev(e, i), N, n_in / N, dt, st);
            else CK(cudaMemcpyAsync(out, in, n_in * e->esz, cudaMemcpyDeviceToDevice, st));
            break;
        default:
            ct_die("gpu: plan step %d (%s) has unknown kind %d", k, op->name, ps->kind);
        }
        if (e->hook.fn) call_hook(e, k, ps, N);
    }
}

// Runs enqueue(e, m, N) through graph g when graphs are on: returns 0 when the caller must run
// it eagerly instead (graphs off, a batch size or plan seen for the first time, or a capture that
// failed: then graphs stay off for this executor, with a warning).
typedef void (*PassFn)(GpuExec *e, const ResNet *m, int N);
static int graph_run(GpuExec *e, StepGraph *g, const ResNet *m, int N, PassFn enqueue) {
    if (e->cg.on <= 0) return 0;
    if (g->N != N || g->gen != e->mem.gen) {
        graph_drop(g);
        g->N = N;
        g->gen = e->mem.gen;
        return 0;  // first meeting: eagerly, which also does any lazy set-up outside the capture
    }
    if (!g->exec) {
        cudaGraph_t cg = NULL;
        // Thread-local: other ranks' threads keep making synchronous calls meanwhile.
        CK(cudaStreamBeginCapture(e->st, cudaStreamCaptureModeThreadLocal));
        enqueue(e, m, N);
        cudaError_t err = cudaStreamEndCapture(e->st, &cg);
        if (err == cudaSuccess) err = cudaGraphInstantiateWithFlags(&g->exec, cg, 0);
        if (cg) cudaGraphDestroy(cg);
        if (err != cudaSuccess) {
            (void)cudaGetLastError();
            g->exec = NULL;
            e->cg.on = -1;
            fprintf(stderr, "gpu: capturing a CUDA graph failed (%s); going on without graphs\n",
                    cudaGetErrorString(err));
            return 0;
        }
    }
    CK(cudaGraphLaunch(g->exec, e->st));
    e->cg.launches++;
    return 1;
}

static void forward_train_pass(GpuExec *e, const ResNet *m, int N) { forward_ops(e, m, N, 1); }

// The forward and its host bookkeeping: num_batches_tracked counts training batches, as on the CPU.
static void run_forward(GpuExec *e, ResNet *m, int N, int train) {
    if (train) drop_path_upload(e, m, N);
    if (e->prof || e->hook.fn || !(train && graph_run(e, &e->cg.fwd, m, N, forward_train_pass)))
        forward_ops(e, m, N, train);
    if (train) prof_pass_done(e, 0);
    else if (e->prof) e->prof->n = 0;  // eval passes are not counted
    if (train && !m->freeze_backbone)  // a frozen backbone's BN runs in eval mode: nothing counted
        for (int i = 0; i < m->n_ops; i++)
            if (m->ops[i].kind == OP_BN && m->ops[i].nbt >= 0) m->counts[entry(m, m->ops[i].nbt)->offset]++;
    e->fwd_train_N = train ? N : 0;
}

void gpu_exec_use_graphs(GpuExec *e, int on) {
    if (!on) {
        graph_drop(&e->cg.fwd);
        graph_drop(&e->cg.bwd);
    }
    e->cg.on = on ? (e->cg.on < 0 ? -1 : 1) : 0;
}
int gpu_exec_graphs(const GpuExec *e) { return e->cg.on; }
long gpu_exec_graph_launches(const GpuExec *e) { return e->cg.launches; }

static void check_batch(GpuExec *e, const ResNet *m, int N, int H, int W) {
    if (m != e->graph && (m->n_ops != e->graph->n_ops || m->n_params != e->graph->n_params))
        ct_die("gpu: executor made for %s used with model %s", e->graph->arch, m->arch);
    if (N < 1 || H < 1 || W < 1) ct_die("gpu: bad batch shape N=%d H=%d W=%d", N, H, W);
    exec_plan(e, m, N, H, W);
}

static void input_from_float(GpuExec *e, const ResNet *m, const float *x, int N, int H, int W) {
    size_t n = (size_t)N * H * W * m->in_channels;
    if (e->dt == CT_F32) {
        CK(cudaMemcpyAsync(e->mem.act[0], x, n * sizeof(float), cudaMemcpyHostToDevice, e->st));
        return;
    }
    if (e->in.xf_cap < n) {
        dfree(e->in.xf);
        e->in.xf = (float *)dmalloc(e, n * sizeof(float));
        e->in.xf_cap = n;
    }
    CK(cudaMemcpyAsync(e->in.xf, x, n * sizeof(float), cudaMemcpyHostToDevice, e->st));
    f32_to_bf16_gpu((uint16_t *)e->mem.act[0], e->in.xf, n, e->st);
}

static Stage *stage_batch(GpuExec *e, const ResNet *m, const uint8_t *x, int N, int H, int W) {
    size_t bytes = (size_t)N * H * W * m->in_channels;
    Stage *sg = &e->in.stage[e->in.next];
    e->in.next ^= 1;
    // The compute stream may still be normalising the batch this slot held last time.
    CT_MUTABLE("consumed") CK(cudaStreamWaitEvent(e->cp, sg->consumed, 0));
    if (sg->cap < bytes) {
        CK(cudaStreamSynchronize(e->cp));
        dfree(sg->d);
        sg->d = (uint8_t *)dmalloc(e, bytes);
        sg->cap = bytes;
    }
    CK(cudaMemcpyAsync(sg->d, x, bytes, cudaMemcpyHostToDevice, e->cp));
    CK(cudaEventRecord(sg->copied, e->cp));
    sg->src = x;
    sg->N = N;
    sg->H = H;
    sg->W = W;
    return sg;
}

void gpu_prefetch_u8(GpuExec *e, const uint8_t *x, int N, int H, int W) {
    stage_batch(e, e->graph, x, N, H, W);
}
void gpu_prefetch_wait(GpuExec *e) { CK(cudaStreamSynchronize(e->cp)); }

// A batch staged but never used (a run stopped by a signal): its copy may still read the host
// buffer, which the caller is about to give back to the loader's ring, and the stage must not match
// that buffer when the ring hands it out again with other images.
void gpu_prefetch_cancel(GpuExec *e, const uint8_t *x) {
    for (int i = 0; i < 2; i++) {
        Stage *t = &e->in.stage[i];
        if (t->src != x) continue;
        CT_MUTABLE("cancel") CK(cudaEventSynchronize(t->copied));
        t->src = NULL;
    }
}

static void input_from_u8(GpuExec *e, const ResNet *m, const uint8_t *x, int N, int H, int W,
                          const float *mean, const float *std) {
    int C = m->in_channels;
    if (memcmp(e->in.h_meanstd, mean, C * sizeof(float)) || memcmp(e->in.h_meanstd + C, std, C * sizeof(float))) {
        for (int c = 0; c < C; c++)
            if (!(std[c] != 0.0f)) ct_die("gpu: normalisation std[%d] is %g", c, std[c]);
        memcpy(e->in.h_meanstd, mean, C * sizeof(float));
        memcpy(e->in.h_meanstd + C, std, C * sizeof(float));
        CK(cudaMemcpyAsync(e->in.meanstd, e->in.h_meanstd, 2 * C * sizeof(float), cudaMemcpyHostToDevice, e->st));
        CK(cudaStreamSynchronize(e->st));  // the host copy may change before the copy ran
    }
    Stage *sg = NULL;
    for (int i = 0; i < 2; i++) {
        Stage *t = &e->in.stage[i];
        if (t->src == x && t->N == N && t->H == H && t->W == W) sg = t;
    }
    if (!sg) sg = stage_batch(e, m, x, N, H, W);
    CT_MUTABLE("copied") CK(cudaStreamWaitEvent(e->st, sg->copied, 0));
    normalize_u8_gpu(e->mem.act[0], sg->d, (size_t)N * H * W, C, e->in.meanstd, e->in.meanstd + C, e->dt, e->st);
    CK(cudaEventRecord(sg->consumed, e->st));
    sg->src = NULL;
}

static const float *logits_to_host(GpuExec *e, const ResNet *m, int N) {
    size_t bytes = (size_t)N * m->num_classes * sizeof(float);
    CK(cudaMemcpyAsync(e->mem.h_logits, e->mem.logits, bytes, cudaMemcpyDeviceToHost, e->st));
    CK(cudaStreamSynchronize(e->st));
    return e->mem.h_logits;
}

const float *gpu_forward(GpuExec *e, ResNet *m, const float *x, int N, int H, int W, int train) {
    check_batch(e, m, N, H, W);
    input_from_float(e, m, x, N, H, W);
    run_forward(e, m, N, train);
    return logits_to_host(e, m, N);
}

const float *gpu_forward_u8(GpuExec *e, ResNet *m, const uint8_t *x, int N, int H, int W,
                            const float *mean, const float *std, int train) {
    check_batch(e, m, N, H, W);
    input_from_u8(e, m, x, N, H, W, mean, std);
    run_forward(e, m, N, train);
    return logits_to_host(e, m, N);
}

void gpu_forward_u8_dev(GpuExec *e, ResNet *m, const uint8_t *x, int N, int H, int W, const float *mean,
                        const float *std, int train) {
    check_batch(e, m, N, H, W);
    input_from_u8(e, m, x, N, H, W, mean, std);
    run_forward(e, m, N, train);
}

float *gpu_exec_logits(GpuExec *e) { return e->mem.logits; }
void gpu_exec_sync(GpuExec *e) { CK(cudaStreamSynchronize(e->st)); }

// Gradient target of slot s: its own buffer for the first contribution, else the scratch (the
// caller then adds it with finish_grad).
static void *grad_target(GpuExec *e, int s, uint8_t *init) {
    return init[s] ? e->mem.scratch : e->mem.grad[s];
}
static void finish_grad(GpuExec *e, int s, uint8_t *init, size_t n) {
    if (init[s]) add_inplace_gpu(e->mem.grad[s], e->mem.scratch, n, e->dt, e->st);
    init[s] = 1;
}

// Backward from e->mem.dlogits (device, written) over the plan's steps in reverse.
static void backward_ops(GpuExec *e, const ResNet *m, GradReadyFn ready, void *ctx) {
    int N = e->fwd_train_N;
    if (!N) ct_die("gpu: backward without a preceding training forward");
    CtDtype dt = e->dt;
    cudaStream_t st = e->st;
    const ExecPlan *p = e->plan;
    uint8_t *init = (uint8_t *)ct_zalloc((size_t)m->n_tensors);
    int last = m->n_tensors - 1;
    int tiles_op = -1;  // the BN whose backward sums the previous conv's dgrad epilogue left in e->mem.work
    int tiles_n = 0;    // how many tiles of sums it left
    for (int k = p->n_steps - 1; k >= 0; k--) {
        const PlanStep *ps = &p->steps[k];
        const int i = ps->op;
        const Op *op = &m->ops[i];
        const TensorDim *di = &e->mem.dims[ps->in], *dout = &e->mem.dims[ps->out];
        void *gout = ps->out == last ? (void *)e->mem.dlogits : e->mem.grad[ps->out];
        const void *in = e->mem.act[ps->in];
        size_t n_in = slot_elems(e, ps->in, N);
        // A frozen backbone needs no gradient below fc: backward ends with fc's weight gradients.
        int need_din = ps->in > 0 && !(m->freeze_backbone && op->kind == OP_FC);
        prof_mark(e, i, ps->kind == PLAN_CONV ? PROF_BWD_WGRAD : PROF_BWD);
        switch (ps->kind) {
        case PLAN_CONV: {
            ConvShape s = op_conv_shape(e, op, N);
            if (stem_padded(e, op)) {  // slot 0 needs no data gradient
                conv2d_backward_weight_gpu_ex(&s, e->mem.dwpad, gout, e->mem.xpad, e->mem.work, dt, st, e->conv_algo);
                conv_unpad_channels_gpu(pgrad(e, m, op->w), e->mem.dwpad, (size_t)op->K * op->R * op->S, e->mem.cpad, di->C, st);
            } else {
                conv2d_backward_weight_gpu_ex(&s, pgrad(e, m, op->w), gout, in, e->mem.work, dt, st, e->conv_algo);
            }
            prof_mark(e, i, PROF_BWD_DATA);
            if (!need_din) break;
            // A later contribution is added in the data gradient's epilogue; a fused epilogue that
            // the engine declines falls through to the plain data gradient.
            const void *w = wop(e, m, op->w);
            int tb = ps->bwd_tail, bb = ps->bwd_bn;
            if (tb >= 0 && conv2d_backward_data_tail_gpu(&s, e->mem.grad[ps->in], init[ps->in], e->mem.work, gout, w, in,
                                                         e->mem.mask_ok[tb] ? e->mem.relu_mask[tb] : NULL,
                                                         e->mem.act[m->ops[tb].in], e->mem.bnstat + e->mem.bnstat_off[tb], dt,
                                                         st, e->conv_algo)) {
                tiles_op = tb;
                tiles_n = conv2d_gpu_dgrad_bn_tiles(&s);
            } else if (bb >= 0 && !init[ps->in] &&
                       conv2d_backward_data_bn_gpu(&s, e->mem.grad[ps->in], e->mem.work, gout, w, e->mem.act[m->ops[bb].in],
                                                   pparam(e, m, m->ops[bb].w), pparam(e, m, m->ops[bb].b),
                                                   e->mem.bnstat + e->mem.bnstat_off[bb],
                                                   e->mem.bnstat + e->mem.bnstat_off[bb] + m->ops[bb].C, dt, st, e->conv_algo)) {
                tiles_op = bb;
                tiles_n = conv2d_gpu_dgrad_bn_tiles(&s);
            } else if (init[ps->in]) {
                conv2d_backward_data_acc_gpu_ex(&s, e->mem.grad[ps->in], gout, w, dt, st, e->conv_algo);
            } else {
                conv2d_backward_data_gpu_ex(&s, e->mem.grad[ps->in], gout, w, dt, st, e->conv_algo);
            }
            init[ps->in] = 1;
            break;
        }
        case PLAN_BN:
        case PLAN_BN_STATS:
        case PLAN_BN_ADD: {
            int M = N * di->H * di->W, C = di->C;
            const float *mean = e->mem.bnstat + e->mem.bnstat_off[i], *invstd = mean + C;
            // A tail: dy is masked by the ADD's ReLU, and the residual operand's gradient is
            // written, or accumulated in place, by the dx pass. dx may share dy's pool buffer.
            int rs = ps->kind == PLAN_BN_ADD ? ps->res : -1;
            void *dres = NULL;
            if (rs > 0) CT_MUTABLE("plan-tail-residual-grad") dres = e->mem.grad[rs];
            if (tiles_op == i) {  // reductions done by the conv's dgrad epilogue; gout already masked
                // A tail's masked gout is also the residual's gradient: the plan gives the two one
                // buffer; otherwise it is passed on before dx, which may take gout's buffer.
                if (dres) {
                    if (init[rs]) add_inplace_gpu(dres, gout, n_in, dt, st);
                    else if (dres != gout) CK(cudaMemcpyAsync(dres, gout, n_in * e->esz, cudaMemcpyDeviceToDevice, st));
                    init[rs] = 1;
                }
                batchnorm_backward_tiles_gpu(grad_target(e, ps->in, init), pgrad(e, m, op->w), pgrad(e, m, op->b), gout,
                                             in, e->mem.work, tiles_n, pparam(e, m, op->w), mean, invstd, M, C, e->mem.work, dt,
                                             st);
                finish_grad(e, ps->in, init, n_in);
                break;
            }
            batchnorm_add_backward_gpu(grad_target(e, ps->in, init), dres, dres ? init[rs] : 0, pgrad(e, m, op->w),
                                       pgrad(e, m, op->b), gout, in, ps->relu ? e->mem.act[ps->out] : NULL,
                                       pparam(e, m, op->w), mean, invstd, M, C, e->mem.work, dt, st);
            if (dres) init[rs] = 1;
            finish_grad(e, ps->in, init, n_in);
            break;
        }
        case PLAN_RELU:
            relu_backward_gpu(grad_target(e, ps->in, init), gout, e->mem.act[ps->out], n_in, dt, st);
            finish_grad(e, ps->in, init, n_in);
            break;
        case PLAN_MAXPOOL: {
            int bb = ps->bwd_bn;  // the stem's BN + ReLU, read by the pool alone
            // pool_bn: y was never stored; the kernel recomputes it (and then always runs)
            if (bb >= 0 && !init[ps->in] &&
                maxpool_backward_bn_gpu(e->mem.grad[ps->in], e->mem.work, gout, ps->pool_bn >= 0 ? NULL : in,
                                        e->mem.act[m->ops[bb].in], bn_affine(e, m, bb), N, di->H, di->W, di->C, op->R,
                                        op->stride, op->pad, dout->H, dout->W, e->opt.maxpool_vector, dt, st)) {
                tiles_op = bb;
                tiles_n = (int)((n_in / di->C + 127) / 128);  // the pool's 128-row tiles
                init[ps->in] = 1;
                break;
            }
            if (ps->pool_bn >= 0) ct_die("gpu: op %d (%s): the fused stem's backward did not run", i, op->name);
            maxpool_backward_gpu(grad_target(e, ps->in, init), gout, in, N, di->H, di->W, di->C, op->R,
                                 op->stride, op->pad, dout->H, dout->W, e->opt.maxpool_vector, dt, st);
            finish_grad(e, ps->in, init, n_in);
            break;
        }
        case PLAN_ADD: {
            // The output gradient buffer is ours until this op is done: mask it in place.
            if (ps->relu) relu_backward_gpu(gout, gout, e->mem.act[ps->out], n_in, dt, st);
            int ins[2] = {ps->in, ps->res};
            for (int j = 0; j < 2; j++) {
                int s = ins[j];
                if (s <= 0) continue;
                if (init[s]) add_inplace_gpu(e->mem.grad[s], gout, n_in, dt, st);
                else CK(cudaMemcpyAsync(e->mem.grad[s], gout, n_in * e->esz, cudaMemcpyDeviceToDevice, st));
                init[s] = 1;
            }
            break;
        }
        case PLAN_AVGPOOL:
            avgpool_backward_gpu(grad_target(e, ps->in, init), gout, N, di->H * di->W, di->C, dt, st);
            finish_grad(e, ps->in, init, n_in);
            break;
        case PLAN_BLUR:
            if (need_din) {
                blur3x3_backward_gpu(grad_target(e, ps->in, init), gout, N, di->H, di->W, di->C, dt, st);
                finish_grad(e, ps->in, init, n_in);
            }
            break;
        case PLAN_DROP_PATH:
            CT_MUTABLE("drop-path-bwd") drop_path_gpu(grad_target(e, ps->in, init), gout, drop_path_dev(e, i), N, n_in / N, dt, st);
            finish_grad(e, ps->in, init, n_in);
            break;
        case PLAN_FC:
            linear_backward_gpu(need_din ? grad_target(e, ps->in, init) : NULL, pgrad(e, m, op->w),
                                op->b >= 0 ? pgrad(e, m, op->b) : NULL, (const float *)gout, in,
                                wop(e, m, op->w), N, op->C, op->K, dt, st);
            if (need_din) finish_grad(e, ps->in, init, n_in);
            break;
        default:
            ct_die("gpu: plan step %d (%s) has unknown kind %d", k, op->name, ps->kind);
        }
        if (ready && op->w >= 0) ready(ctx, op->grad_done);  // as resnet_grad_boundaries lists them
        if (m->freeze_backbone && op->kind == OP_FC) break;
    }
    free(init);
}

static void backward_pass(GpuExec *e, const ResNet *m, int N) {
    (void)N;  // backward_ops takes it from the forward; the graph is keyed on it
    backward_ops(e, m, NULL, NULL);
}
// The backward, through a graph unless ready callbacks must run between the ops (a host hook per
// op cannot be replayed).
static void run_backward(GpuExec *e, const ResNet *m, GradReadyFn ready, void *ctx) {
    if (e->prof || ready || !graph_run(e, &e->cg.bwd, m, e->fwd_train_N, backward_pass))
        backward_ops(e, m, ready, ctx);
    prof_pass_done(e, 1);
}

static void grads_to_host(GpuExec *e, const ResNet *m, float *grads) {
    if (grads)
        CK(cudaMemcpyAsync(grads, e->dev.grads, m->n_params * sizeof(float), cudaMemcpyDeviceToHost, e->st));
    CK(cudaStreamSynchronize(e->st));
}

void gpu_backward(GpuExec *e, const ResNet *m, const float *dlogits, float *grads, GradReadyFn ready,
                  void *ctx) {
    int N = e->fwd_train_N;
    if (!N) ct_die("gpu: backward without a preceding training forward");
    CK(cudaMemcpyAsync(e->mem.dlogits, dlogits, (size_t)N * m->num_classes * sizeof(float),
                       cudaMemcpyHostToDevice, e->st));
    run_backward(e, m, ready, ctx);
    grads_to_host(e, m, grads);
}

void gpu_backward_dev(GpuExec *e, const ResNet *m, GradReadyFn ready, void *ctx) {
    if (!e->fwd_train_N) ct_die("gpu: backward without a preceding training forward");
    run_backward(e, m, ready, ctx);
    grads_to_host(e, m, NULL);
}

// The loss comes back with the gradients' synchronisation, not before the backward.
static float loss_and_backward(GpuExec *e, ResNet *m, const int32_t *labels, int N, float smoothing,
                               float *grads, int *correct) {
    enqueue_xent(e, m, labels, labels, 1.0f, N, smoothing, 1.0f);
    run_backward(e, m, NULL, NULL);
    grads_to_host(e, m, grads);
    return xent_result(e, correct);
}

float gpu_train_step(GpuExec *e, ResNet *m, const float *x, const int32_t *labels, int N, int H, int W,
                     float smoothing, float *grads, int *correct) {
    check_batch(e, m, N, H, W);
    input_from_float(e, m, x, N, H, W);
    run_forward(e, m, N, 1);
    return loss_and_backward(e, m, labels, N, smoothing, grads, correct);
}

float gpu_train_step_u8(GpuExec *e, ResNet *m, const uint8_t *x, const int32_t *labels, int N, int H,
                        int W, const float *mean, const float *std, float smoothing, float *grads,
                        int *correct) {
    check_batch(e, m, N, H, W);
    input_from_u8(e, m, x, N, H, W, mean, std);
    run_forward(e, m, N, 1);
    return loss_and_backward(e, m, labels, N, smoothing, grads, correct);
}
