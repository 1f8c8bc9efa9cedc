// The CPU backend (trainer/backend.h): the reference executor of nn/model_cpu.h, host gradients,
// and the host collectives of dist/gradsync.h between ranks that are threads of this process.
#include <math.h>
#include <string.h>

#include "dist/gradsync.h"
#include "nn/ema.h"
#include "nn/fold.h"
#include "nn/layers.h"
#include "nn/model_cpu.h"
#include "trainer/backend_impl.h"
#include "util/common.h"

typedef struct {
    Backend base;
    CpuExec *exec;
    float *grads;         // [n_params], backward order
    float *dlogits;       // [capacity]
    size_t dlogits_cap;
    float *bufs_backup;   // BN running statistics before a step
    GradSync *gradsync;   // data parallel, else NULL
    FoldNet *fold;        // eval forward with BN folded into the convs (fp32 mode only)
} CpuBackend;

static CpuBackend *cpu_of(Backend *b) { return (CpuBackend *)b; }

static int cpu_backend_device_count(void) { return 1; }
static void cpu_backend_loader_memory(LoaderConfig *lc) { (void)lc; }
static void cpu_backend_pin_shard(const Shard *sh) { (void)sh; }

// CPU ranks average through dist/comm.h's host collectives; nothing process-wide to prepare.
static BackendGroup *cpu_backend_group_create(const char *comm_flag, int local, int offset, int world, NodeNet *net) {
    (void)comm_flag, (void)local, (void)offset, (void)world, (void)net;
    return NULL;
}

static Backend *cpu_backend_create(ResNet *m, int bf16, int device, int graphs, const ExecOptions *eo) {
    (void)device, (void)graphs;
    CpuBackend *b = ct_zalloc(sizeof *b);
    b->exec = cpu_exec_create_opts(m, eo);
    cpu_exec_set_bf16(b->exec, bf16);
    return &b->base;
}

static void cpu_backend_free(Backend *base) {
    CpuBackend *b = cpu_of(base);
    if (b->gradsync) gradsync_free(b->gradsync);
    cpu_exec_free(b->exec);
    fold_free(b->fold);
    free(b->grads);
    free(b->dlogits);
    free(b->bufs_backup);
    free(b);
}

static void cpu_backend_bind_thread(const Backend *b) { (void)b; }

static const float *cpu_backend_forward(Backend *base, const uint8_t *x, int N, int hw, const float *mean, const float *std,
                                int train) {
    CpuBackend *b = cpu_of(base);
    // Eval runs BN-folded (nn/fold.h), refolded whenever the live weights or statistics changed
    // since the last fold (checked at every call: whoever changed them need not say so).
    // bf16 mode keeps the reference executor, the oracle of the GPU's bf16 path.
    if (!train && !cpu_exec_bf16(b->exec)) {
        if (!b->fold) b->fold = fold_create(base->m);
        else fold_sync(b->fold, base->m);
        if (b->fold) return fold_forward_u8(b->fold, x, N, hw, hw, mean, std);
    }
    return cpu_forward_u8(b->exec, base->m, x, N, hw, hw, mean, std, train);
}

// Cross-entropy writes dlogits scaled by (1 - alpha); distillation adds its alpha share. With no
// teacher this is the same arithmetic as alpha = 0 (scale 1), which the KD test relies on.
static float cpu_backend_train_losses(Backend *base, Backend *teacher, const uint8_t *x, const int32_t *labels, int N, int hw,
                              const float *mean, const float *std, const LossConfig *lc, int *correct) {
    CpuBackend *b = cpu_of(base);
    int K = base->m->num_classes;
    size_t need = (size_t)N * K;
    if (need > b->dlogits_cap) {
        free(b->dlogits);
        b->dlogits = ct_alloc(sizeof(float) * need);
        b->dlogits_cap = need;
    }
    double alpha = teacher ? lc->kd_alpha : 0.0;
    cpu_exec_set_drop_path_key(b->exec, lc->drop_path_key);
    const float *logits = cpu_backend_forward(base, x, N, hw, mean, std, 1);
    float ce = lc->bce ? bce_mix(b->dlogits, logits, labels, lc->labels_b ? lc->labels_b : labels,
                                 lc->labels_b ? lc->lam : 1.0f, N, K, lc->smoothing, lc->bce_threshold, lc->bce_sum,
                                 (float)(1.0 - alpha), correct)
             : lc->labels_b ? softmax_xent_mix(b->dlogits, logits, labels, lc->labels_b, lc->lam, N, K, lc->smoothing,
                                               (float)(1.0 - alpha), correct)
                            : softmax_xent(b->dlogits, logits, labels, N, K, lc->smoothing, (float)(1.0 - alpha), correct);
    if (!teacher) return ce;
    const float *tl = cpu_backend_forward(teacher, x, N, hw, mean, std, 0);
    float kd = kd_loss(b->dlogits, logits, tl, N, K, (float)lc->kd_temperature, (float)alpha);
    return (float)(1.0 - alpha) * ce + (float)alpha * kd;
}

static void cpu_backend_poison_dlogits(Backend *base) { cpu_of(base)->dlogits[0] = NAN; }

static void cpu_backend_backward(Backend *base) {
    CpuBackend *b = cpu_of(base);
    if (!b->grads) b->grads = ct_alloc(sizeof(float) * base->m->n_params);
    if (b->gradsync) {
        gradsync_begin(b->gradsync);
        cpu_backward(b->exec, base->m, b->dlogits, b->grads, gradsync_ready, b->gradsync);
        gradsync_wait(b->gradsync);
    } else {
        cpu_backward(b->exec, base->m, b->dlogits, b->grads, NULL, NULL);
    }
}

// Only the gradients backward wrote (a frozen backbone's part of the buffer is never written).
static int cpu_backend_grads_finite(Backend *base) { return all_finite(cpu_of(base)->grads, resnet_trainable(base->m)); }

static void cpu_backend_optim(Backend *base, const OptConfig *cfg, OptState *st, float lr) {
    optim_step(cfg, st, base->m, base->m->params, cpu_of(base)->grads, lr);
}

static void cpu_backend_bn_snapshot(Backend *base) {
    CpuBackend *b = cpu_of(base);
    if (!b->bufs_backup) b->bufs_backup = ct_alloc(sizeof(float) * (base->m->n_bufs + 1));
    memcpy(b->bufs_backup, base->m->bufs, base->m->n_bufs * sizeof(float));
}

static void cpu_backend_bn_rollback(Backend *base) {
    memcpy(base->m->bufs, cpu_of(base)->bufs_backup, base->m->n_bufs * sizeof(float));
}

static void cpu_backend_bn_from_rank0(Backend *base, Comm *comm) {
    comm_broadcast(comm, base->m->bufs, base->m->n_bufs * sizeof(float), 0);
}

// The host ResNet is the live state on the CPU.
static void cpu_backend_download(Backend *b, OptState *opt) { (void)b, (void)opt; }
static void cpu_backend_upload(Backend *b, const OptState *opt) { (void)b, (void)opt; }
// The attached host state tensor is the average itself.
static void cpu_backend_ema(Backend *b, EmaOp op, float decay) {
    ema_apply(op, decay, b->m->params, b->m->n_params, b->m->bufs, b->m->n_bufs, b->ema);
}

static void cpu_backend_prefetch(Backend *b, const uint8_t *x, int N, int hw) { (void)b, (void)x, (void)N, (void)hw; }
static void cpu_backend_prefetch_cancel(Backend *b, const uint8_t *x) { (void)b, (void)x; }

static void cpu_backend_attach_gradsync(Backend *base, BackendGroup *g, Comm *comm, int local_rank, size_t bucket_bytes) {
    (void)g, (void)local_rank;
    CpuBackend *b = cpu_of(base);
    if (!b->grads) b->grads = ct_alloc(sizeof(float) * base->m->n_params);
    size_t n_bounds;
    size_t *bounds = resnet_grad_boundaries_alloc(base->m, &n_bounds);
    b->gradsync = gradsync_create(comm, bounds, n_bounds, resnet_trainable(base->m), b->grads, bucket_bytes);
    free(bounds);
}

static int cpu_backend_gradsync_buckets(const Backend *base) {
    const CpuBackend *b = (const CpuBackend *)base;
    return b->gradsync ? gradsync_buckets(b->gradsync) : 0;
}

const BackendOps backend_cpu_ops = {
    .name = "cpu",
    .device_count = cpu_backend_device_count,
    .loader_memory = cpu_backend_loader_memory,
    .pin_shard = cpu_backend_pin_shard,
    .group_create = cpu_backend_group_create,
    .create = cpu_backend_create,
    .free = cpu_backend_free,
    .bind_thread = cpu_backend_bind_thread,
    .forward = cpu_backend_forward,
    .train_losses = cpu_backend_train_losses,
    .poison_dlogits = cpu_backend_poison_dlogits,
    .backward = cpu_backend_backward,
    .grads_finite = cpu_backend_grads_finite,
    .optim_step = cpu_backend_optim,
    .bn_snapshot = cpu_backend_bn_snapshot,
    .bn_rollback = cpu_backend_bn_rollback,
    .bn_from_rank0 = cpu_backend_bn_from_rank0,
    .download = cpu_backend_download,
    .upload = cpu_backend_upload,
    .ema = cpu_backend_ema,
    .stages_batches = 0,
    .prefetch = cpu_backend_prefetch,
    .prefetch_cancel = cpu_backend_prefetch_cancel,
    .attach_gradsync = cpu_backend_attach_gradsync,
    .gradsync_buckets = cpu_backend_gradsync_buckets,
};
