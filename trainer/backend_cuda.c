// The GPU backend (trainer/backend.h): the GPU executor of nn/model_cuda.h, whose device copy of
// the model is the live one; losses on the device (the logits never leave it in training);
// gradients averaged on a communication stream (dist/gradsync_cuda.h) by NCCL or host staging.
// Linked only into binaries built with the CUDA backend (trainer/backend.c decides).
#include <string.h>

#include "dist/gradsync_cuda.h"
#include "dist/nccl.h"
#include "nn/model_cuda.h"
#include "trainer/backend_impl.h"
#include "util/common.h"

typedef struct {
    Backend base;
    GpuExec *exec;
    int device;
    GpuGradSync *gradsync;  // data parallel, else NULL
} CudaBackend;

struct BackendGroup {
    const NcclLib *nccl;  // NULL: host staging
    void **comms;         // [local] NCCL communicators
};

static CudaBackend *cuda_of(Backend *b) { return (CudaBackend *)b; }

static int cuda_backend_device_count(void) { return gpu_available() ? gpu_device_count() : 0; }

static void cuda_backend_loader_memory(LoaderConfig *lc) {
    lc->alloc = gpu_pinned_alloc;  // batches leave the ring by DMA on the copy stream
    lc->free = gpu_pinned_free;
}

// The loader's workers read records from the mapping for the whole run: lock it in RAM once
// (read-only host registration). Not fatal when the system refuses (ulimit -l, size).
static void cuda_backend_pin_shard(const Shard *sh) {
    char err[256];
    if (!sh->base || !sh->size) return;
    if (gpu_pin_host(sh->base, sh->size, err, sizeof err) != 0)
        ct_warn("%s: could not pin the %.1f MB mapping (%s); reading it unpinned", sh->path, sh->size / 1e6, err);
}

// Local rank k runs on device k (cuda_backend_create): its communicator must be made there too.
// (The global rank modulo the device count put node 1's communicators of --nodes 2 --ranks 4 on
// 8-GPU nodes on GPUs 4-7, beside buffers on 0-3.)
static void select_device_cb(void *ctx, int local_rank) {
    (void)ctx;
    gpu_select_device(local_rank);
}

// NCCL communicators for the GPU ranks of this process (--comm); no communicators means host
// staging. With several nodes, node 0 makes NCCL's unique id and sends it to the others over the
// rendezvous link.
static BackendGroup *cuda_backend_group_create(const char *comm_flag, int local, int offset, int world, NodeNet *net) {
    char err[800];
    BackendGroup *g = ct_zalloc(sizeof *g);
    g->nccl = strcmp(comm_flag, "host") ? nccl_load(err, sizeof err) : NULL;
    if (!g->nccl) {
        if (!strcmp(comm_flag, "nccl")) ct_die("--comm nccl: %s", err);
        if (!strcmp(comm_flag, "auto"))
            ct_warn("%s; GPU gradients are averaged through pinned host memory instead (slower; --comm host "
                    "silences this)", err);
        return g;
    }
    NcclId id;
    memset(&id, 0, sizeof id);
    if (offset == 0 && nccl_unique_id(g->nccl, &id, err, sizeof err)) ct_die("NCCL %s: %s", nccl_describe(g->nccl), err);
    if (net && net_broadcast(net, &id, sizeof id, 0, err, sizeof err)) ct_die("NCCL unique id from node 0: %s", err);
    g->comms = ct_zalloc(local * sizeof(void *));
    int *ranks = ct_alloc(local * sizeof(int));
    for (int k = 0; k < local; k++) ranks[k] = offset + k;
    if (nccl_init_ranks(g->nccl, g->comms, local, world, ranks, &id, select_device_cb, NULL, err, sizeof err))
        ct_die("NCCL %s: %s; --comm host averages the gradients through host memory instead", nccl_describe(g->nccl), err);
    free(ranks);
    if (offset == 0) fprintf(stderr, "train: NCCL %s: %d ranks\n", nccl_describe(g->nccl), world);
    return g;
}

static Backend *cuda_backend_create(ResNet *m, int bf16, int device, int graphs, const ExecOptions *eo) {
    CudaBackend *b = ct_zalloc(sizeof *b);
    b->device = device;
    gpu_select_device(device);  // one GPU per rank of this node
    b->exec = gpu_exec_create_opts(m, bf16 ? CT_BF16 : CT_F32, eo);  // uploads m's state
    gpu_exec_use_graphs(b->exec, graphs);
    return &b->base;
}

static void cuda_backend_free(Backend *base) {
    CudaBackend *b = cuda_of(base);
    if (b->gradsync) gpu_gradsync_free(b->gradsync);
    gpu_exec_free(b->exec);
    free(b);
}

static void cuda_backend_bind_thread(const Backend *base) { gpu_select_device(((const CudaBackend *)base)->device); }

static const float *cuda_backend_forward(Backend *base, const uint8_t *x, int N, int hw, const float *mean, const float *std,
                                 int train) {
    return gpu_forward_u8(cuda_of(base)->exec, base->m, x, N, hw, hw, mean, std, train);
}

// The CPU backend's arithmetic on the device (see backend_cpu.c); only the loss comes back.
static float cuda_backend_train_losses(Backend *base, Backend *teacher, const uint8_t *x, const int32_t *labels, int N, int hw,
                               const float *mean, const float *std, const LossConfig *lc, int *correct) {
    GpuExec *e = cuda_of(base)->exec;
    double alpha = teacher ? lc->kd_alpha : 0.0;
    gpu_exec_set_drop_path_key(e, lc->drop_path_key);
    gpu_forward_u8_dev(e, base->m, x, N, hw, hw, mean, std, 1);
    float ce = lc->bce ? gpu_loss_bce_mix(e, base->m, labels, lc->labels_b ? lc->labels_b : labels,
                                          lc->labels_b ? lc->lam : 1.0f, N, lc->smoothing, lc->bce_threshold,
                                          lc->bce_sum, (float)(1.0 - alpha), correct)
             : lc->labels_b ? gpu_loss_xent_mix(e, base->m, labels, lc->labels_b, lc->lam, N, lc->smoothing,
                                                (float)(1.0 - alpha), correct)
                            : gpu_loss_xent(e, base->m, labels, N, lc->smoothing, (float)(1.0 - alpha), correct);
    if (!teacher) return ce;
    GpuExec *te = cuda_of(teacher)->exec;
    gpu_forward_u8_dev(te, teacher->m, x, N, hw, hw, mean, std, 0);
    gpu_exec_sync(te);
    float kd = gpu_loss_kd(e, base->m, gpu_exec_logits(te), N, (float)lc->kd_temperature, (float)alpha);
    return (float)(1.0 - alpha) * ce + (float)alpha * kd;
}

static void cuda_backend_poison_dlogits(Backend *base) { gpu_dlogits_poison(cuda_of(base)->exec); }

// The gradients stay on the device; only the finiteness flag comes back.
static void cuda_backend_backward(Backend *base) {
    CudaBackend *b = cuda_of(base);
    if (b->gradsync) {
        gpu_gradsync_begin(b->gradsync);
        gpu_backward_dev(b->exec, base->m, gpu_gradsync_ready, b->gradsync);
        gpu_gradsync_wait(b->gradsync);
    } else {
        gpu_backward_dev(b->exec, base->m, NULL, NULL);
    }
}

static int cuda_backend_grads_finite(Backend *base) { return gpu_grads_finite(cuda_of(base)->exec); }

static void cuda_backend_optim(Backend *base, const OptConfig *cfg, OptState *st, float lr) {
    gpu_optim_step(cuda_of(base)->exec, base->m, cfg, st, lr);
}

// On the device, without a host round trip.
static void cuda_backend_bn_snapshot(Backend *base) { gpu_bufs_snapshot(cuda_of(base)->exec); }
static void cuda_backend_bn_rollback(Backend *base) { gpu_bufs_rollback(cuda_of(base)->exec); }

static void cuda_backend_bn_from_rank0(Backend *base, Comm *comm) {
    GpuExec *e = cuda_of(base)->exec;
    gpu_bufs_to_host(e, base->m->bufs);
    comm_broadcast(comm, base->m->bufs, base->m->n_bufs * sizeof(float), 0);
    gpu_bufs_from_host(e, base->m->bufs);
}

static void cuda_backend_download(Backend *base, OptState *opt) {
    gpu_download_state(cuda_of(base)->exec, base->m, NULL);
    if (opt) gpu_download_optim(cuda_of(base)->exec, base->m, opt);
    if (base->ema) gpu_download_ema(cuda_of(base)->exec, base->ema);
}
static void cuda_backend_upload(Backend *base, const OptState *opt) {
    gpu_upload_state(cuda_of(base)->exec, base->m, NULL);
    if (opt) gpu_upload_optim(cuda_of(base)->exec, base->m, opt);
    if (base->ema) gpu_upload_ema(cuda_of(base)->exec, base->ema);
}

static void cuda_backend_ema(Backend *b, EmaOp op, float decay) { gpu_ema(cuda_of(b)->exec, op, decay); }

static void cuda_backend_prefetch(Backend *base, const uint8_t *x, int N, int hw) {
    gpu_prefetch_u8(cuda_of(base)->exec, x, N, hw, hw);
}
static void cuda_backend_prefetch_cancel(Backend *base, const uint8_t *x) { gpu_prefetch_cancel(cuda_of(base)->exec, x); }

static void cuda_backend_attach_gradsync(Backend *base, BackendGroup *g, Comm *comm, int local_rank, size_t bucket_bytes) {
    CudaBackend *b = cuda_of(base);
    size_t n_bounds;
    size_t *bounds = resnet_grad_boundaries_alloc(base->m, &n_bounds);
    b->gradsync = gpu_gradsync_create(comm, bounds, n_bounds, resnet_trainable(base->m), gpu_exec_grads(b->exec), bucket_bytes,
                                      local_rank, gpu_exec_stream(b->exec), g->nccl, g->comms ? g->comms[local_rank] : NULL);
    free(bounds);
}

static int cuda_backend_gradsync_buckets(const Backend *base) {
    const CudaBackend *b = (const CudaBackend *)base;
    return b->gradsync ? gpu_gradsync_buckets(b->gradsync) : 0;
}

const BackendOps backend_cuda_ops = {
    .name = "cuda",
    .device_count = cuda_backend_device_count,
    .loader_memory = cuda_backend_loader_memory,
    .pin_shard = cuda_backend_pin_shard,
    .group_create = cuda_backend_group_create,
    .create = cuda_backend_create,
    .free = cuda_backend_free,
    .bind_thread = cuda_backend_bind_thread,
    .forward = cuda_backend_forward,
    .train_losses = cuda_backend_train_losses,
    .poison_dlogits = cuda_backend_poison_dlogits,
    .backward = cuda_backend_backward,
    .grads_finite = cuda_backend_grads_finite,
    .optim_step = cuda_backend_optim,
    .bn_snapshot = cuda_backend_bn_snapshot,
    .bn_rollback = cuda_backend_bn_rollback,
    .bn_from_rank0 = cuda_backend_bn_from_rank0,
    .download = cuda_backend_download,
    .upload = cuda_backend_upload,
    .ema = cuda_backend_ema,
    .stages_batches = 1,
    .prefetch = cuda_backend_prefetch,
    .prefetch_cancel = cuda_backend_prefetch_cancel,
    .attach_gradsync = cuda_backend_attach_gradsync,
    .gradsync_buckets = cuda_backend_gradsync_buckets,
};
