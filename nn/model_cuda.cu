// GPU executor of a ResNet graph: walks nn/resnet.h's op list with the kernels of
// kernels/kernels.h. API and conventions in nn/model_cuda.h.
//
// Memory plan (per N x H x W, grown when a larger batch or another image size comes):
// - every activation slot has its own buffer (training keeps them all for backward anyway);
//   the logits are fp32 whatever the dtype (the loss reads them);
// - activation-gradient slots share a pool: walking backward, a slot's gradient buffer is taken
//   when its first consumer's backward writes it and given back after its producer's backward
//   read it, best fit from the free buffers, so only the gradients alive together cost memory;
// - one fp32 scratch covers the largest reduction workspace (BN partials, conv split-K partials).
// The second contribution to a gradient slot (a block input feeds both the residual add and a
// conv or the shortcut) goes through a scratch buffer and add_inplace, because every backward
// kernel overwrites its output (the CPU convention); a fused block tail accumulates in place.
// Fusion (resnet_bn_add_fusable, CTRAIN_FUSE_BN_ADD=0 turns it off): bn3 + add [+ relu] runs as one
// batch norm whose last pass adds the residual (the BN output slot is never allocated), and its
// backward writes the residual's gradient in the BN's dx pass (no ReLU pass, no device copies).
#include <string.h>

#include "kernels/common.cuh"
#include "nn/lars.h"
#include "nn/layers.h"  // conv_shape
#include "nn/model_cuda.h"
#include "util/common.h"

#define CK(call) CT_CUDA_CHECK(call)

#define BN_MOMENTUM 0.1f
#define BN_EPS 1e-5f

typedef struct {
    uint8_t *d;           // device copy of the batch
    size_t cap;           // bytes allocated
    const uint8_t *src;   // host pointer it was copied from (NULL: nothing staged)
    int N, H, W;
    cudaEvent_t copied;   // recorded on the copy stream after the copy
    cudaEvent_t consumed; // recorded on the compute stream after normalisation read it
} Stage;

// A CUDA graph of one training pass (forward or backward) for one batch size and one memory plan:
// its kernels' arguments are the plan's pointers and N, so a new plan or N makes it stale.
typedef struct {
    cudaGraphExec_t exec;  // NULL: not captured
    int N, gen;            // batch and plan generation it was (or will be) captured for
} StepGraph;

// Per-op timing (gpu_exec_profile): events recorded between the parts of a pass; after the pass
// the gap between consecutive marks is added to the part the earlier mark opened.
enum { PROF_FWD, PROF_BWD_WGRAD, PROF_BWD_DATA, PROF_BWD, PROF_PARTS };
typedef struct {
    cudaEvent_t *ev;   // [cap]
    int *what;         // [cap]: op * PROF_PARTS + part, or -1 for the closing mark
    int n, cap;
    double *ms;        // [(n_ops + 1) * PROF_PARTS] accumulated milliseconds (op n_ops: SGD)
    long passes[3];    // forward, backward, SGD passes timed
} Prof;

struct GpuExec {
    CtDtype dt;
    size_t esz;  // bytes per activation element
    cudaStream_t st, cp;
    const ResNet *graph;  // the model this executor was made for (shape checks)
    uint8_t *fuse;        // per op: 1 for a BN run together with the ADD after it

    // Model state on the device.
    float *params, *grads, *mom, *bufs;
    float *bufs_snap;  // gpu_bufs_snapshot's copy of bufs
    uint16_t *wbf;     // bf16 copy of params (dt == CT_BF16), refreshed by every SGD step
    float *ema_params, *ema_bufs;  // --ema's average of params and bufs (gpu_ema_*), NULL without
    uint8_t *decay;    // weight-decay mask for the last SgdConfig seen
    int decay_mode;    // -1: mask not built; else cfg->wd_exclude_bn_bias it was built for
    CtLarsTensor *lars_t;  // LARS: the parameter tensors (built on its first step)
    double *lars_norms;    // LARS: 2 norms a tensor
    int lars_n;

    // Plan.
    int pN, pH, pW;
    TensorDim *dims;
    void **act;        // [n_tensors] activation buffers (the logits slot points at `logits`)
    void **grad;       // [n_tensors] gradient buffer of each slot (into gpool), NULL for slot 0
    void **gpool;      // pooled gradient buffers
    int n_gpool;
    void *scratch;     // largest gradient slot, for the second contribution to a slot
    float *work;       // reduction workspace
    size_t work_floats;
    float *bnstat;     // per BN op: mean[C], invstd[C]
    int cpad;          // bf16 stem with < 8 input channels: padded to cpad = 8 (0: not padded)
    void *xpad;        // the input padded to cpad channels
    uint16_t *wpad;    // the stem's weights padded to cpad channels
    float *dwpad;      // the stem's weight gradient over cpad channels
    size_t *bnstat_off;// [n_ops]
    float *logits, *dlogits;
    int32_t *labels, *labels_b;  // labels_b: a mixed batch's partners
    void *loss_work;   // loss_workspace_bytes(N): per-row losses and hits
    float *xf;         // float input staging (gpu_forward with a float batch)
    size_t xf_cap;
    float *scalars;    // device: loss, correct (as int bits)
    float *h_logits;   // pinned host copy of the logits
    float *h_scalars;  // pinned host: loss, correct
    float *meanstd;    // device mean[C], std[C] of the last u8 forward
    float *h_meanstd;  // host copy (to skip identical re-uploads)
    Stage stage[2];
    int next_stage;
    int fwd_train_N;   // N of the last training forward (0: none, backward refused)
    // CUDA graphs (gpu_exec_use_graphs): a pass runs eagerly the first time it meets a batch size
    // and plan, is captured the second time and replayed from then on. A launch costs a few
    // microseconds of host time and ResNet passes are hundreds of small kernels.
    int cg_on;         // 1 on, 0 off, -1 off since a capture failed
    int plan_gen;      // bumped whenever plan() (re)allocates: graphs hold its pointers
    StepGraph cg_fwd, cg_bwd;
    long cg_launches;
    Prof *prof;        // NULL unless profiling (which runs every pass eagerly)
    size_t dev_bytes;  // device memory held
    size_t plan_bytes; // of which the plan's
};

static void *dmalloc(GpuExec *e, size_t bytes) {
    void *p = NULL;
    if (bytes == 0) bytes = 16;
    cudaError_t err = cudaMalloc(&p, bytes);
    if (err != cudaSuccess)
        ct_die("cuda: cannot allocate %zu bytes of device memory (%s); %zu already held by the executor: "
               "use a smaller --batch-size or image size",
               bytes, cudaGetErrorString(err), e->dev_bytes);
    e->dev_bytes += bytes;
    return p;
}
static void dfree(void *p) {
    if (p) cudaFree(p);
}

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

static const StateEntry *entry(const ResNet *m, int i) { return &m->entries[i]; }
static float *pparam(GpuExec *e, const ResNet *m, int i) { return e->params + entry(m, i)->offset; }
static float *pgrad(GpuExec *e, const ResNet *m, int i) { return e->grads + entry(m, i)->offset; }
// Conv / linear weight operand in the activation dtype.
static const void *wop(GpuExec *e, const ResNet *m, int i) {
    size_t off = entry(m, i)->offset;
    return e->dt == CT_BF16 ? (const void *)(e->wbf + off) : (const void *)(e->params + off);
}

GpuExec *gpu_exec_create(const ResNet *m, CtDtype dt) {
    GpuExec *e = (GpuExec *)ct_zalloc(sizeof(GpuExec));
    e->dt = dt;
    e->esz = dt == CT_BF16 ? 2 : 4;
    e->graph = m;
    e->decay_mode = -1;
    e->fuse = (uint8_t *)ct_zalloc((size_t)m->n_ops);
    for (int i = 0; i < m->n_ops; i++) e->fuse[i] = (uint8_t)resnet_bn_add_fusable(m, i);
    CK(cudaStreamCreateWithFlags(&e->st, cudaStreamNonBlocking));
    CK(cudaStreamCreateWithFlags(&e->cp, cudaStreamNonBlocking));
    for (int i = 0; i < 2; i++) {
        CK(cudaEventCreateWithFlags(&e->stage[i].copied, cudaEventDisableTiming));
        CK(cudaEventCreateWithFlags(&e->stage[i].consumed, cudaEventDisableTiming));
    }
    e->params = (float *)dmalloc(e, m->n_params * sizeof(float));
    e->grads = (float *)dmalloc(e, m->n_params * sizeof(float));
    e->mom = (float *)dmalloc(e, m->n_params * sizeof(float));
    e->bufs = (float *)dmalloc(e, m->n_bufs * sizeof(float));
    e->bufs_snap = (float *)dmalloc(e, m->n_bufs * sizeof(float));
    if (dt == CT_BF16) e->wbf = (uint16_t *)dmalloc(e, m->n_params * sizeof(uint16_t));
    e->scalars = (float *)dmalloc(e, 4 * sizeof(float));
    CK(cudaMallocHost((void **)&e->h_scalars, 4 * sizeof(float)));
    int cin = m->in_channels;
    e->meanstd = (float *)dmalloc(e, 2 * (size_t)cin * sizeof(float));
    e->h_meanstd = (float *)ct_zalloc(2 * (size_t)cin * sizeof(float));
    CK(cudaMemsetAsync(e->grads, 0, m->n_params * sizeof(float), e->st));
    CK(cudaMemsetAsync(e->mom, 0, m->n_params * sizeof(float), e->st));
    gpu_upload_state(e, m, NULL);
    return e;
}

static void graph_drop(StepGraph *g) {
    if (g->exec) CK(cudaGraphExecDestroy(g->exec));
    g->exec = NULL;
    g->N = g->gen = 0;
}

static void free_plan(GpuExec *e, const ResNet *m) {
    if (!e->dims) return;
    CK(cudaDeviceSynchronize());
    graph_drop(&e->cg_fwd);
    graph_drop(&e->cg_bwd);
    for (int s = 0; s < m->n_tensors; s++)
        if (e->act[s] != (void *)e->logits) dfree(e->act[s]);
    for (int i = 0; i < e->n_gpool; i++) dfree(e->gpool[i]);
    dfree(e->scratch);
    dfree(e->work);
    dfree(e->bnstat);
    dfree(e->xpad);
    dfree(e->wpad);
    dfree(e->dwpad);
    e->xpad = NULL;
    e->wpad = NULL;
    e->dwpad = NULL;
    dfree(e->logits);
    dfree(e->dlogits);
    dfree(e->labels);
    dfree(e->labels_b);
    dfree(e->loss_work);
    if (e->h_logits) cudaFreeHost(e->h_logits);
    free(e->dims);
    free(e->act);
    free(e->grad);
    free(e->gpool);
    free(e->bnstat_off);
    e->dims = NULL;
    e->act = e->grad = e->gpool = NULL;
    e->n_gpool = 0;
    e->scratch = NULL;
    e->work = e->bnstat = e->logits = e->dlogits = e->h_logits = NULL;
    e->labels = e->labels_b = NULL;
    e->loss_work = NULL;
    e->bnstat_off = NULL;
    e->pN = e->pH = e->pW = 0;
    e->fwd_train_N = 0;
    e->dev_bytes -= e->plan_bytes;
    e->plan_bytes = 0;
}

static void prof_free(Prof *p) {
    if (!p) return;
    for (int i = 0; i < p->cap; i++) cudaEventDestroy(p->ev[i]);
    free(p->ev);
    free(p->what);
    free(p->ms);
    free(p);
}

void gpu_exec_profile(GpuExec *e, const ResNet *m, int on) {
    prof_free(e->prof);
    e->prof = NULL;
    if (!on) return;
    Prof *p = (Prof *)ct_zalloc(sizeof(Prof));
    p->cap = 3 * m->n_ops + 8;
    p->ev = (cudaEvent_t *)ct_zalloc((size_t)p->cap * sizeof(cudaEvent_t));
    p->what = (int *)ct_zalloc((size_t)p->cap * sizeof(int));
    p->ms = (double *)ct_zalloc((size_t)(m->n_ops + 1) * PROF_PARTS * sizeof(double));
    for (int i = 0; i < p->cap; i++) CK(cudaEventCreate(&p->ev[i]));
    e->prof = p;
}


typedef struct {
    double ms;
    int op, part;
} ProfRow;
static int prof_row_desc(const void *a, const void *b) {
    const ProfRow *x = (const ProfRow *)a, *y = (const ProfRow *)b;
    return x->ms < y->ms ? 1 : x->ms > y->ms ? -1 : (x->op - y->op) * PROF_PARTS + (x->part - y->part);
}

void gpu_exec_profile_report(const GpuExec *e, const ResNet *m, int top, FILE *f) {
    const Prof *p = e->prof;
    if (!p || !p->passes[0]) {
        fprintf(f, "profile: no training step was timed\n");
        return;
    }
    static const char *part_name[PROF_PARTS] = {"fwd", "wgrad", "dgrad", "bwd"};
    const double steps = (double)p->passes[0];
    // Per step: by kind and pass, and the whole.
    enum { KINDS = 8 };
    double by[KINDS][PROF_PARTS] = {{0}}, total = 0;
    int nrows = 0;
    ProfRow *rows = (ProfRow *)ct_alloc((size_t)(m->n_ops + 1) * PROF_PARTS * sizeof(ProfRow));
    for (int i = 0; i <= m->n_ops; i++)
        for (int part = 0; part < PROF_PARTS; part++) {
            double ms = p->ms[i * PROF_PARTS + part] / steps;
            if (ms <= 0) continue;
            int kind = i == m->n_ops ? 0 : m->ops[i].kind + 1;  // 0: SGD
            if (kind < KINDS) by[kind][part] += ms;
            total += ms;
            rows[nrows++] = (ProfRow){ms, i, part};
        }
    fprintf(f, "profile: %s, %s, %ld steps timed with events between ops (eager launches: no CUDA graphs)\n",
            m->arch, e->dt == CT_BF16 ? "bf16" : "fp32", p->passes[0]);
    fprintf(f, "  %-10s %-6s %10s %7s\n", "kind", "pass", "ms/step", "share");
    for (int k = 0; k < KINDS; k++)
        for (int part = 0; part < PROF_PARTS; part++)
            if (by[k][part] > 0)
                fprintf(f, "  %-10s %-6s %10.3f %6.1f%%\n", k == 0 ? "sgd" : resnet_op_kind_name(k - 1),
                        k == 0 ? "" : part_name[part], by[k][part], 100 * by[k][part] / total);
    fprintf(f, "  %-17s %10.3f  (the GPU time of the step's passes, as the events saw it)\n", "total", total);
    qsort(rows, nrows, sizeof(ProfRow), prof_row_desc);
    if (top > nrows) top = nrows;
    fprintf(f, "  the %d slowest parts:\n", top);
    for (int r = 0; r < top; r++) {
        const ProfRow *w = &rows[r];
        if (w->op == m->n_ops) {
            fprintf(f, "  %8.3f ms %5.1f%%  sgd over %zu params\n", w->ms, 100 * w->ms / total, m->n_params);
            continue;
        }
        const Op *op = &m->ops[w->op];
        const TensorDim *di = &e->dims[op->in];
        char shape[96];
        if (op->kind == OP_CONV)
            snprintf(shape, sizeof shape, "%dx%d/%d %d->%d @%dx%d", op->R, op->S, op->stride, op->C, op->K, di->H, di->W);
        else
            snprintf(shape, sizeof shape, "%d ch @%dx%d", di->C, di->H, di->W);
        fprintf(f, "  %8.3f ms %5.1f%%  %-22s %-9s %-5s %s\n", w->ms, 100 * w->ms / total, op->name,
                resnet_op_kind_name(op->kind), part_name[w->part], shape);
    }
    free(rows);
}

void gpu_exec_free(GpuExec *e) {
    if (!e) return;
    prof_free(e->prof);
    free_plan(e, e->graph);
    free(e->fuse);
    dfree(e->params);
    dfree(e->grads);
    dfree(e->mom);
    dfree(e->bufs);
    dfree(e->bufs_snap);
    dfree(e->wbf);
    dfree(e->ema_params);
    dfree(e->ema_bufs);
    dfree(e->decay);
    dfree(e->lars_t);
    dfree(e->lars_norms);
    dfree(e->scalars);
    dfree(e->meanstd);
    dfree(e->xf);
    for (int i = 0; i < 2; i++) {
        dfree(e->stage[i].d);
        cudaEventDestroy(e->stage[i].copied);
        cudaEventDestroy(e->stage[i].consumed);
    }
    cudaFreeHost(e->h_scalars);
    free(e->h_meanstd);
    cudaStreamDestroy(e->st);
    cudaStreamDestroy(e->cp);
    free(e);
}

void gpu_upload_state(GpuExec *e, const ResNet *m, const SgdState *sgd) {
    CK(cudaMemcpyAsync(e->params, m->params, m->n_params * sizeof(float), cudaMemcpyHostToDevice, e->st));
    CK(cudaMemcpyAsync(e->bufs, m->bufs, m->n_bufs * sizeof(float), cudaMemcpyHostToDevice, e->st));
    if (sgd) {
        if (sgd->n != m->n_params)
            ct_die("gpu: SGD state has %zu elements, model %s has %zu params", sgd->n, m->arch, m->n_params);
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
            ct_die("gpu: SGD state has %zu elements, model %s has %zu params", sgd->n, m->arch, m->n_params);
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

static size_t slot_elems(const GpuExec *e, int s, int N) {
    return (size_t)N * e->dims[s].H * e->dims[s].W * e->dims[s].C;
}

// The stem (a conv reading the input, slot 0) in bf16 with fewer than 8 input channels runs on
// the input and weights padded to 8 zero-extended channels (kernels/conv_pad.cu), so that the
// tensor-core engine loads it by 16-byte copies instead of element gathers.
static int stem_padded(const GpuExec *e, const Op *op) { return e->cpad && op->in == 0; }

static ConvShape op_conv_shape(const GpuExec *e, const Op *op, int N) {
    const TensorDim *d = &e->dims[op->in];
    ConvShape s = conv_shape(N, d->H, d->W, d->C, op->K, op->R, op->S, op->stride, op->pad);
    if (stem_padded(e, op)) s.C = e->cpad;
    return s;
}

// Build the memory plan for batches of up to N images of H x W.
static void plan(GpuExec *e, const ResNet *m, int N, int H, int W) {
    if (e->dims && N <= e->pN && H == e->pH && W == e->pW) return;
    free_plan(e, m);
    e->dims = (TensorDim *)ct_alloc((size_t)m->n_tensors * sizeof(TensorDim));
    if (resnet_shapes(m, H, W, e->dims) != 0)
        ct_die("%s: input %dx%d is too small for the architecture", m->arch, H, W);
    e->pN = N;
    e->pH = H;
    e->pW = W;
    e->plan_gen++;
    size_t bytes0 = e->dev_bytes;
    int K = m->num_classes, last = m->n_tensors - 1;
    e->logits = (float *)dmalloc(e, (size_t)N * K * sizeof(float));
    e->dlogits = (float *)dmalloc(e, (size_t)N * K * sizeof(float));
    e->labels = (int32_t *)dmalloc(e, (size_t)N * sizeof(int32_t));
    e->labels_b = (int32_t *)dmalloc(e, (size_t)N * sizeof(int32_t));
    e->loss_work = dmalloc(e, loss_workspace_bytes(N));
    CK(cudaMallocHost((void **)&e->h_logits, (size_t)N * K * sizeof(float)));

    e->act = (void **)ct_zalloc((size_t)m->n_tensors * sizeof(void *));
    // A fused BN's own output is never written: no buffer (NULL).
    uint8_t *unused = (uint8_t *)ct_zalloc((size_t)m->n_tensors);
    for (int i = 0; i < m->n_ops; i++)
        if (e->fuse[i]) unused[m->ops[i].out] = 1;
    for (int s = 0; s < m->n_tensors; s++)
        e->act[s] = s == last ? (void *)e->logits : unused[s] ? NULL : dmalloc(e, slot_elems(e, s, N) * e->esz);
    e->cpad = e->dt == CT_BF16 && e->dims[0].C < 8 ? 8 : 0;
    if (e->cpad) {
        size_t wmax = 0;
        for (int i = 0; i < m->n_ops; i++)
            if (m->ops[i].kind == OP_CONV && m->ops[i].in == 0) {
                size_t w = (size_t)m->ops[i].K * m->ops[i].R * m->ops[i].S;
                if (w > wmax) wmax = w;
            }
        e->xpad = dmalloc(e, (size_t)N * H * W * e->cpad * e->esz);
        e->wpad = (uint16_t *)dmalloc(e, wmax * e->cpad * sizeof(uint16_t));
        e->dwpad = (float *)dmalloc(e, wmax * e->cpad * sizeof(float));
    }

    // Gradient pool: walk backward, take a buffer for a slot at its first consumer, give the
    // producer's output buffer back after the producer.
    e->grad = (void **)ct_zalloc((size_t)m->n_tensors * sizeof(void *));
    int *owner = (int *)ct_alloc((size_t)m->n_tensors * sizeof(int));  // pool index per slot
    size_t *cap = (size_t *)ct_zalloc((size_t)2 * m->n_tensors * sizeof(size_t));
    int *busy = (int *)ct_zalloc((size_t)2 * m->n_tensors * sizeof(int));
    int npool = 0;
    size_t max_slot = 0;
    for (int s = 0; s < m->n_tensors; s++) owner[s] = -1;
    for (int i = m->n_ops - 1; i >= 0; i--) {
        const Op *op = &m->ops[i];
        int ins[2] = {op->in, op->kind == OP_ADD ? op->in2 : -1};
        for (int j = 0; j < 2; j++) {
            int s = ins[j];
            if (s <= 0 || owner[s] >= 0 || unused[s]) continue;  // slot 0 (the input) needs no gradient
            size_t need = slot_elems(e, s, N) * e->esz;
            if (need > max_slot) max_slot = need;
            int best = -1;
            for (int b = 0; b < npool; b++) {  // best fit, else the largest free one (it grows)
                if (busy[b]) continue;
                if (best < 0) { best = b; continue; }
                int fits_b = cap[b] >= need, fits_best = cap[best] >= need;
                if (fits_b && (!fits_best || cap[b] < cap[best])) best = b;
                else if (!fits_b && !fits_best && cap[b] > cap[best]) best = b;
            }
            if (best < 0) best = npool++;
            if (cap[best] < need) cap[best] = need;
            busy[best] = 1;
            owner[s] = best;
        }
        if (op->out != last && owner[op->out] >= 0) busy[owner[op->out]] = 0;
    }
    e->n_gpool = npool;
    e->gpool = (void **)ct_zalloc((size_t)(npool ? npool : 1) * sizeof(void *));
    for (int b = 0; b < npool; b++) e->gpool[b] = dmalloc(e, cap[b]);
    for (int s = 0; s < m->n_tensors; s++)
        if (owner[s] >= 0) e->grad[s] = e->gpool[owner[s]];
    e->scratch = dmalloc(e, max_slot);
    free(owner);
    free(cap);
    free(busy);
    free(unused);

    // BN statistics and the reduction workspace.
    e->bnstat_off = (size_t *)ct_zalloc((size_t)m->n_ops * sizeof(size_t));
    size_t nstat = 0, work = 0;
    for (int i = 0; i < m->n_ops; i++) {
        const Op *op = &m->ops[i];
        if (op->kind == OP_BN) {
            e->bnstat_off[i] = nstat;
            int C = e->dims[op->in].C;
            nstat += 2 * (size_t)C;
            size_t w = batchnorm_gpu_work_floats(N * e->dims[op->in].H * e->dims[op->in].W, C);
            if (w > work) work = w;
        } else if (op->kind == OP_CONV) {
            ConvShape s = op_conv_shape(e, op, N);
            size_t w = conv2d_gpu_work_floats(&s);
            if (w > work) work = w;
        }
    }
    e->bnstat = (float *)dmalloc(e, nstat * sizeof(float));
    e->work_floats = work;
    e->work = (float *)dmalloc(e, work * sizeof(float));
    e->plan_bytes = e->dev_bytes - bytes0;
}

// Forward over the op list from act[0] (already written) with batch n.
// Marks the start of part `part` of op `op` (op < 0: the end of the pass) when profiling.
static void prof_mark(GpuExec *e, int op, int part) {
    Prof *p = e->prof;
    if (!p) return;
    ct_cost_tag(op, part);  // the emulator's cost records (tools/bench_gpu_cost.c) take this label
    if (p->n == p->cap) ct_die("gpu: profiler out of events (%d)", p->cap);
    p->what[p->n] = op < 0 ? -1 : op * PROF_PARTS + part;
    CK(cudaEventRecord(p->ev[p->n++], e->st));
}
// Closes a pass: waits for its last mark and adds each gap to the part it belongs to.
static void prof_pass_done(GpuExec *e, int backward) {
    Prof *p = e->prof;
    if (!p || !p->n) return;
    prof_mark(e, -1, 0);
    CK(cudaEventSynchronize(p->ev[p->n - 1]));
    for (int i = 0; i + 1 < p->n; i++) {
        if (p->what[i] < 0) continue;
        float ms = 0;
        CK(cudaEventElapsedTime(&ms, p->ev[i], p->ev[i + 1]));
        p->ms[p->what[i]] += ms;
    }
    p->n = 0;
    p->passes[backward]++;
}

// Enqueues the forward's kernels on e->st, nothing else (a graph capture records exactly this).
static void forward_ops(GpuExec *e, const ResNet *m, int N, int train) {
    CtDtype dt = e->dt;
    cudaStream_t st = e->st;
    for (int i = 0; i < m->n_ops; i++) {
        const Op *op = &m->ops[i];
        if (i > 0 && e->fuse[i - 1]) continue;  // the ADD of a fused pair: done with its BN
        const TensorDim *di = &e->dims[op->in], *dout = &e->dims[op->out];
        void *out = e->act[op->out];
        const void *in = e->act[op->in];
        size_t n_in = slot_elems(e, op->in, N);
        prof_mark(e, i, PROF_FWD);
        switch (op->kind) {
        case OP_CONV: {
            ConvShape s = op_conv_shape(e, op, N);
            const void *x = in, *w = wop(e, m, op->w);
            if (stem_padded(e, op)) {
                conv_pad_channels_gpu(e->xpad, in, (size_t)N * di->H * di->W, di->C, e->cpad, dt, st);
                conv_pad_channels_gpu(e->wpad, w, (size_t)op->K * op->R * op->S, di->C, e->cpad, dt, st);
                x = e->xpad;
                w = e->wpad;
            }
            conv2d_forward_gpu(&s, out, x, w, dt, st);
            break;
        }
        case OP_BN: {
            int M = N * di->H * di->W, C = di->C;
            float *gamma = pparam(e, m, op->w), *beta = pparam(e, m, op->b);
            float *rm = e->bufs + entry(m, op->rm)->offset, *rv = e->bufs + entry(m, op->rv)->offset;
            // Fused with the ADD after it: write the ADD's output, bn(in) + res [relu].
            const Op *add = e->fuse[i] ? &m->ops[i + 1] : NULL;
            const void *res = add ? e->act[add->in == op->out ? add->in2 : add->in] : NULL;
            int relu = add ? add->relu : op->relu;
            if (add) out = e->act[add->out];
            if (train && !m->freeze_backbone) {
                float *mean = e->bnstat + e->bnstat_off[i], *invstd = mean + C;
                batchnorm_add_forward_train_gpu(out, mean, invstd, rm, rv, in, res, gamma, beta, M, C, BN_MOMENTUM,
                                                BN_EPS, relu, e->work, dt, st);
            } else {
                batchnorm_add_forward_eval_gpu(out, in, res, gamma, beta, rm, rv, M, C, BN_EPS, relu, dt, st);
            }
            break;
        }
        case OP_RELU:
            relu_forward_gpu(out, in, n_in, dt, st);
            break;
        case OP_MAXPOOL:
            maxpool_forward_gpu(out, in, N, di->H, di->W, di->C, op->R, op->stride, op->pad, dout->H,
                                dout->W, dt, st);
            break;
        case OP_ADD:
            add_forward_gpu(out, in, e->act[op->in2], n_in, op->relu, dt, st);
            break;
        case OP_AVGPOOL:
            avgpool_forward_gpu(out, in, N, di->H * di->W, di->C, dt, st);
            break;
        case OP_FC:
            linear_forward_gpu((float *)out, in, wop(e, m, op->w), op->b >= 0 ? pparam(e, m, op->b) : NULL,
                               N, op->C, op->K, dt, st);
            break;
        default:
            ct_die("gpu: op %d (%s) has unknown kind %d", i, op->name, op->kind);
        }
    }
}

// Runs enqueue(e, m, N) through graph g when graphs are on: returns 0 when the caller must run
// it eagerly instead (graphs off, a batch size or plan seen for the first time, or a capture that
// failed: then graphs stay off for this executor, with a warning).
typedef void (*PassFn)(GpuExec *e, const ResNet *m, int N);
static int graph_run(GpuExec *e, StepGraph *g, const ResNet *m, int N, PassFn enqueue) {
    if (e->cg_on <= 0) return 0;
    if (g->N != N || g->gen != e->plan_gen) {
        graph_drop(g);
        g->N = N;
        g->gen = e->plan_gen;
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
            e->cg_on = -1;
            fprintf(stderr, "gpu: capturing a CUDA graph failed (%s); going on without graphs\n",
                    cudaGetErrorString(err));
            return 0;
        }
    }
    CK(cudaGraphLaunch(g->exec, e->st));
    e->cg_launches++;
    return 1;
}

static void forward_train_pass(GpuExec *e, const ResNet *m, int N) { forward_ops(e, m, N, 1); }

// The forward and its host bookkeeping: num_batches_tracked counts training batches, as on the CPU.
static void run_forward(GpuExec *e, ResNet *m, int N, int train) {
    if (e->prof || !(train && graph_run(e, &e->cg_fwd, m, N, forward_train_pass))) forward_ops(e, m, N, train);
    if (train) prof_pass_done(e, 0);
    else if (e->prof) e->prof->n = 0;  // eval passes are not counted
    if (train && !m->freeze_backbone)  // a frozen backbone's BN runs in eval mode: nothing counted
        for (int i = 0; i < m->n_ops; i++)
            if (m->ops[i].kind == OP_BN && m->ops[i].nbt >= 0) m->counts[entry(m, m->ops[i].nbt)->offset]++;
    e->fwd_train_N = train ? N : 0;
}

void gpu_exec_use_graphs(GpuExec *e, int on) {
    if (!on) {
        graph_drop(&e->cg_fwd);
        graph_drop(&e->cg_bwd);
    }
    e->cg_on = on ? (e->cg_on < 0 ? -1 : 1) : 0;
}
int gpu_exec_graphs(const GpuExec *e) { return e->cg_on; }
long gpu_exec_graph_launches(const GpuExec *e) { return e->cg_launches; }

static void check_batch(GpuExec *e, const ResNet *m, int N, int H, int W) {
    if (m != e->graph && (m->n_ops != e->graph->n_ops || m->n_params != e->graph->n_params))
        ct_die("gpu: executor made for %s used with model %s", e->graph->arch, m->arch);
    if (N < 1 || H < 1 || W < 1) ct_die("gpu: bad batch shape N=%d H=%d W=%d", N, H, W);
    plan(e, m, N, H, W);
}

static void input_from_float(GpuExec *e, const ResNet *m, const float *x, int N, int H, int W) {
    size_t n = (size_t)N * H * W * m->in_channels;
    if (e->dt == CT_F32) {
        CK(cudaMemcpyAsync(e->act[0], x, n * sizeof(float), cudaMemcpyHostToDevice, e->st));
        return;
    }
    if (e->xf_cap < n) {
        dfree(e->xf);
        e->xf = (float *)dmalloc(e, n * sizeof(float));
        e->xf_cap = n;
    }
    CK(cudaMemcpyAsync(e->xf, x, n * sizeof(float), cudaMemcpyHostToDevice, e->st));
    f32_to_bf16_gpu((uint16_t *)e->act[0], e->xf, n, e->st);
}

static Stage *stage_batch(GpuExec *e, const ResNet *m, const uint8_t *x, int N, int H, int W) {
    size_t bytes = (size_t)N * H * W * m->in_channels;
    Stage *sg = &e->stage[e->next_stage];
    e->next_stage ^= 1;
    // The compute stream may still be normalising the batch this slot held last time.
    CK(cudaStreamWaitEvent(e->cp, sg->consumed, 0));
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

static void input_from_u8(GpuExec *e, const ResNet *m, const uint8_t *x, int N, int H, int W,
                          const float *mean, const float *std) {
    int C = m->in_channels;
    if (memcmp(e->h_meanstd, mean, C * sizeof(float)) || memcmp(e->h_meanstd + C, std, C * sizeof(float))) {
        for (int c = 0; c < C; c++)
            if (!(std[c] != 0.0f)) ct_die("gpu: normalisation std[%d] is %g", c, std[c]);
        memcpy(e->h_meanstd, mean, C * sizeof(float));
        memcpy(e->h_meanstd + C, std, C * sizeof(float));
        CK(cudaMemcpyAsync(e->meanstd, e->h_meanstd, 2 * C * sizeof(float), cudaMemcpyHostToDevice, e->st));
        CK(cudaStreamSynchronize(e->st));  // the host copy may change before the copy ran
    }
    Stage *sg = NULL;
    for (int i = 0; i < 2; i++) {
        Stage *t = &e->stage[i];
        if (t->src == x && t->N == N && t->H == H && t->W == W) sg = t;
    }
    if (!sg) sg = stage_batch(e, m, x, N, H, W);
    CK(cudaStreamWaitEvent(e->st, sg->copied, 0));
    normalize_u8_gpu(e->act[0], sg->d, (size_t)N * H * W, C, e->meanstd, e->meanstd + C, e->dt, e->st);
    CK(cudaEventRecord(sg->consumed, e->st));
    sg->src = NULL;
}

static const float *logits_to_host(GpuExec *e, const ResNet *m, int N) {
    size_t bytes = (size_t)N * m->num_classes * sizeof(float);
    CK(cudaMemcpyAsync(e->h_logits, e->logits, bytes, cudaMemcpyDeviceToHost, e->st));
    CK(cudaStreamSynchronize(e->st));
    return e->h_logits;
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

float *gpu_exec_logits(GpuExec *e) { return e->logits; }
void gpu_exec_sync(GpuExec *e) { CK(cudaStreamSynchronize(e->st)); }

static void check_labels(const ResNet *m, const int32_t *labels, int N) {
    for (int n = 0; n < N; n++)
        if (labels[n] < 0 || labels[n] >= m->num_classes)
            ct_die("gpu: label %d of batch row %d is outside [0, %d)", labels[n], n, m->num_classes);
}

// Enqueues the cross-entropy of the last training forward against the soft target of
// (labels, labels_b, lam) (labels_b == labels: the plain one): dlogits on the device, the loss and
// the hit count copied into h_scalars[0], [1] (valid once the stream has reached that point).
static void enqueue_xent(GpuExec *e, const ResNet *m, const int32_t *labels, const int32_t *labels_b, float lam,
                         int N, float smoothing, float grad_scale) {
    if (N != e->fwd_train_N) ct_die("gpu: loss of %d rows after a training forward of %d", N, e->fwd_train_N);
    check_labels(m, labels, N);
    CK(cudaMemcpyAsync(e->labels, labels, (size_t)N * sizeof(int32_t), cudaMemcpyHostToDevice, e->st));
    const int32_t *lb_dev = e->labels;
    if (labels_b != labels) {
        check_labels(m, labels_b, N);
        CK(cudaMemcpyAsync(e->labels_b, labels_b, (size_t)N * sizeof(int32_t), cudaMemcpyHostToDevice, e->st));
        lb_dev = e->labels_b;
    }
    softmax_xent_mix_gpu(e->dlogits, e->logits, e->labels, lb_dev, lam, N, m->num_classes, smoothing, grad_scale,
                         e->loss_work, e->scalars, (int *)(e->scalars + 1), e->st);
    CK(cudaMemcpyAsync(e->h_scalars, e->scalars, 2 * sizeof(float), cudaMemcpyDeviceToHost, e->st));
}
static float xent_result(const GpuExec *e, int *correct) {
    if (correct) memcpy(correct, e->h_scalars + 1, sizeof(int));
    return e->h_scalars[0];
}

float gpu_loss_xent_mix(GpuExec *e, const ResNet *m, const int32_t *labels, const int32_t *labels_b, float lam,
                        int N, float smoothing, float grad_scale, int *correct) {
    if (!(lam >= 0 && lam <= 1)) ct_die("gpu: mix lam %g is outside [0, 1]", lam);
    enqueue_xent(e, m, labels, labels_b, lam, N, smoothing, grad_scale);
    CK(cudaStreamSynchronize(e->st));
    return xent_result(e, correct);
}

float gpu_loss_xent(GpuExec *e, const ResNet *m, const int32_t *labels, int N, float smoothing,
                    float grad_scale, int *correct) {
    return gpu_loss_xent_mix(e, m, labels, labels, 1.0f, N, smoothing, grad_scale, correct);
}

float gpu_loss_kd(GpuExec *e, const ResNet *m, const float *teacher_logits, int N, float temperature,
                  float grad_scale) {
    if (N != e->fwd_train_N) ct_die("gpu: loss of %d rows after a training forward of %d", N, e->fwd_train_N);
    kd_loss_gpu(e->dlogits, e->logits, teacher_logits, N, m->num_classes, temperature, grad_scale, e->loss_work,
                e->scalars + 2, e->st);
    CK(cudaMemcpyAsync(e->h_scalars + 2, e->scalars + 2, sizeof(float), cudaMemcpyDeviceToHost, e->st));
    CK(cudaStreamSynchronize(e->st));
    return e->h_scalars[2];
}

void gpu_dlogits_poison(GpuExec *e) {
    static const float nan = NAN;
    CK(cudaMemcpyAsync(e->dlogits, &nan, sizeof nan, cudaMemcpyHostToDevice, e->st));
    CK(cudaStreamSynchronize(e->st));  // &nan is pageable: the copy must be done before returning
}

// Gradient target of slot s: its own buffer for the first contribution, else the scratch (the
// caller then adds it with finish_grad).
static void *grad_target(GpuExec *e, int s, uint8_t *init) {
    return init[s] ? e->scratch : e->grad[s];
}
static void finish_grad(GpuExec *e, int s, uint8_t *init, size_t n) {
    if (init[s]) add_inplace_gpu(e->grad[s], e->scratch, n, e->dt, e->st);
    init[s] = 1;
}

// Backward from e->dlogits (device, written) over the op list.
static void backward_ops(GpuExec *e, const ResNet *m, GradReadyFn ready, void *ctx) {
    int N = e->fwd_train_N;
    if (!N) ct_die("gpu: backward without a preceding training forward");
    CtDtype dt = e->dt;
    cudaStream_t st = e->st;
    uint8_t *init = (uint8_t *)ct_zalloc((size_t)m->n_tensors);
    int last = m->n_tensors - 1;
    for (int i = m->n_ops - 1; i >= 0; i--) {
        const Op *op = &m->ops[i];
        if (i > 0 && e->fuse[i - 1]) continue;  // the ADD of a fused pair: done with its BN
        const Op *add = e->fuse[i] ? &m->ops[i + 1] : NULL;
        const TensorDim *di = &e->dims[op->in], *dout = &e->dims[op->out];
        void *gout = add ? e->grad[add->out] : op->out == last ? (void *)e->dlogits : e->grad[op->out];
        const void *in = e->act[op->in];
        size_t n_in = slot_elems(e, op->in, N);
        // A frozen backbone needs no gradient below fc: backward ends with fc's weight gradients.
        int need_din = op->in > 0 && !(m->freeze_backbone && op->kind == OP_FC);
        prof_mark(e, i, op->kind == OP_CONV ? PROF_BWD_WGRAD : PROF_BWD);
        switch (op->kind) {
        case OP_CONV: {
            ConvShape s = op_conv_shape(e, op, N);
            if (stem_padded(e, op)) {  // slot 0 needs no data gradient
                conv2d_backward_weight_gpu(&s, e->dwpad, gout, e->xpad, e->work, dt, st);
                conv_unpad_channels_gpu(pgrad(e, m, op->w), e->dwpad, (size_t)op->K * op->R * op->S, e->cpad, di->C, st);
            } else {
                conv2d_backward_weight_gpu(&s, pgrad(e, m, op->w), gout, in, e->work, dt, st);
            }
            prof_mark(e, i, PROF_BWD_DATA);
            if (need_din) {
                conv2d_backward_data_gpu(&s, grad_target(e, op->in, init), gout, wop(e, m, op->w), dt, st);
                finish_grad(e, op->in, init, n_in);
            }
            break;
        }
        case OP_BN: {
            int M = N * di->H * di->W, C = di->C;
            const float *mean = e->bnstat + e->bnstat_off[i], *invstd = mean + C;
            // Fused: dy is masked by the ADD's ReLU, and the residual operand's gradient is
            // written, or accumulated in place, by the dx pass. dx may share dy's pool buffer.
            int rs = add ? (add->in == op->out ? add->in2 : add->in) : -1;
            void *dres = rs > 0 ? e->grad[rs] : NULL;
            int relu = add ? add->relu : op->relu;
            batchnorm_add_backward_gpu(grad_target(e, op->in, init), dres, dres ? init[rs] : 0, pgrad(e, m, op->w),
                                       pgrad(e, m, op->b), gout, in,
                                       relu ? e->act[add ? add->out : op->out] : NULL, pparam(e, m, op->w), mean,
                                       invstd, M, C, e->work, dt, st);
            if (dres) init[rs] = 1;
            finish_grad(e, op->in, init, n_in);
            break;
        }
        case OP_RELU:
            relu_backward_gpu(grad_target(e, op->in, init), gout, e->act[op->out], n_in, dt, st);
            finish_grad(e, op->in, init, n_in);
            break;
        case OP_MAXPOOL:
            maxpool_backward_gpu(grad_target(e, op->in, init), gout, in, N, di->H, di->W, di->C, op->R,
                                 op->stride, op->pad, dout->H, dout->W, dt, st);
            finish_grad(e, op->in, init, n_in);
            break;
        case OP_ADD: {
            // The output gradient buffer is ours until this op is done: mask it in place.
            if (op->relu) relu_backward_gpu(gout, gout, e->act[op->out], n_in, dt, st);
            int ins[2] = {op->in, op->in2};
            for (int j = 0; j < 2; j++) {
                int s = ins[j];
                if (s <= 0) continue;
                if (init[s]) add_inplace_gpu(e->grad[s], gout, n_in, dt, st);
                else CK(cudaMemcpyAsync(e->grad[s], gout, n_in * e->esz, cudaMemcpyDeviceToDevice, st));
                init[s] = 1;
            }
            break;
        }
        case OP_AVGPOOL:
            avgpool_backward_gpu(grad_target(e, op->in, init), gout, N, di->H * di->W, di->C, dt, st);
            finish_grad(e, op->in, init, n_in);
            break;
        case OP_FC:
            linear_backward_gpu(need_din ? grad_target(e, op->in, init) : NULL, pgrad(e, m, op->w),
                                op->b >= 0 ? pgrad(e, m, op->b) : NULL, (const float *)gout, in,
                                wop(e, m, op->w), N, op->C, op->K, dt, st);
            if (need_din) finish_grad(e, op->in, init, n_in);
            break;
        default:
            ct_die("gpu: op %d (%s) has unknown kind %d", i, op->name, op->kind);
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
    if (e->prof || ready || !graph_run(e, &e->cg_bwd, m, e->fwd_train_N, backward_pass))
        backward_ops(e, m, ready, ctx);
    prof_pass_done(e, 1);
}

static void grads_to_host(GpuExec *e, const ResNet *m, float *grads) {
    if (grads)
        CK(cudaMemcpyAsync(grads, e->grads, m->n_params * sizeof(float), cudaMemcpyDeviceToHost, e->st));
    CK(cudaStreamSynchronize(e->st));
}

void gpu_backward(GpuExec *e, const ResNet *m, const float *dlogits, float *grads, GradReadyFn ready,
                  void *ctx) {
    int N = e->fwd_train_N;
    if (!N) ct_die("gpu: backward without a preceding training forward");
    CK(cudaMemcpyAsync(e->dlogits, dlogits, (size_t)N * m->num_classes * sizeof(float),
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

void gpu_lars_step(GpuExec *e, const ResNet *m, const SgdConfig *cfg, SgdState *st, float lr) {
    if (st->n != m->n_params) ct_die("lars: state has %zu elements, model %s has %zu params", st->n, m->arch, m->n_params);
    if (!e->lars_t) {
        e->lars_n = lars_tensors(m, NULL);
        CtLarsTensor *h = (CtLarsTensor *)ct_alloc(sizeof(CtLarsTensor) * (size_t)(e->lars_n ? e->lars_n : 1));
        lars_tensors(m, h);
        e->lars_t = (CtLarsTensor *)dmalloc(e, sizeof(CtLarsTensor) * (size_t)(e->lars_n ? e->lars_n : 1));
        e->lars_norms = (double *)dmalloc(e, sizeof(double) * 2 * (size_t)(e->lars_n ? e->lars_n : 1));
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

void gpu_sgd_step(GpuExec *e, const ResNet *m, const SgdConfig *cfg, SgdState *st, float lr) {
    if (st->n != m->n_params)
        ct_die("sgd: state has %zu elements, model %s has %zu params", st->n, m->arch, m->n_params);
    if (e->decay_mode != cfg->wd_exclude_bn_bias) {
        // Mask of elements that get weight decay, from the entry table (built once per config).
        uint8_t *h = (uint8_t *)ct_alloc(m->n_params ? m->n_params : 1);
        memset(h, 1, m->n_params);
        for (int i = 0; i < m->n_entries; i++) {
            const StateEntry *en = &m->entries[i];
            if (en->kind == ENTRY_PARAM && cfg->wd_exclude_bn_bias && en->no_decay)
                memset(h + en->offset, 0, en->count);
        }
        if (!e->decay) e->decay = (uint8_t *)dmalloc(e, m->n_params);
        CK(cudaMemcpyAsync(e->decay, h, m->n_params, cudaMemcpyHostToDevice, e->st));
        CK(cudaStreamSynchronize(e->st));
        free(h);
        e->decay_mode = cfg->wd_exclude_bn_bias;
    }
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
