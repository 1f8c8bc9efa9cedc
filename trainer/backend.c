// Backend selection and dispatch (trainer/backend.h). The only file of the trainer that knows
// whether this binary was built with the CUDA backend.
#include "trainer/backend.h"

#include <string.h>

#include "trainer/backend_impl.h"
#include "util/common.h"

// The CUDA backend, or NULL in a train built without nvcc.
static const BackendOps *cuda_ops(void) {
#ifdef CTRAIN_CUDA
    return &backend_cuda_ops;
#else
    return NULL;
#endif
}

static const BackendOps *ops_of(BackendKind kind) {
    if (kind != BACKEND_CUDA) return &backend_cpu_ops;
    if (!cuda_ops()) ct_die("--device cuda: this train was built without CUDA (no nvcc at build time); use --device cpu");
    return cuda_ops();
}

BackendKind backend_resolve(const char *device, int ranks) {
    if (!strcmp(device, "cpu")) return BACKEND_CPU;  // without waking the CUDA runtime
    int gpus = cuda_ops() ? cuda_ops()->device_count() : 0;
    if (!strcmp(device, "auto") && gpus == 0) return BACKEND_CPU;
    ops_of(BACKEND_CUDA);  // dies without a CUDA backend
    if (gpus == 0) ct_die("--device cuda: no usable CUDA device (use --device cpu)");
    if (ranks > gpus) ct_die("--ranks %d with --device cuda: one GPU per rank, and this node has %d", ranks, gpus);
    return BACKEND_CUDA;
}

const char *backend_name(BackendKind kind) { return kind == BACKEND_CUDA ? "cuda" : "cpu"; }
void backend_loader_memory(BackendKind kind, LoaderConfig *lc) { ops_of(kind)->loader_memory(lc); }
void backend_pin_shard(BackendKind kind, const Shard *sh) { ops_of(kind)->pin_shard(sh); }

Backend *backend_create(BackendKind kind, ResNet *m, int bf16, int device, int graphs, const ExecOptions *eo) {
    const BackendOps *ops = ops_of(kind);
    Backend *b = ops->create(m, bf16, device, graphs, eo);
    b->ops = ops;
    b->kind = kind;
    b->m = m;
    b->counts_backup = ct_alloc(sizeof(int64_t) * (m->n_counts + 1));
    return b;
}

void backend_free(Backend *b) {
    if (!b) return;
    free(b->counts_backup);
    b->ops->free(b);
}

BackendKind backend_kind(const Backend *b) { return b->kind; }
void backend_bind_thread(const Backend *b) { b->ops->bind_thread(b); }

const float *backend_forward(Backend *b, const uint8_t *x, int N, int hw, const float *mean, const float *std,
                             int train) {
    return b->ops->forward(b, x, N, hw, mean, std, train);
}

float backend_train_losses(Backend *b, Backend *teacher, const uint8_t *x, const int32_t *labels, int N, int hw,
                           const float *mean, const float *std, const LossConfig *lc, int *correct) {
    if (teacher && teacher->kind != b->kind) ct_die("internal: the teacher runs on another backend than the student");
    return b->ops->train_losses(b, teacher, x, labels, N, hw, mean, std, lc, correct);
}

void backend_poison_dlogits(Backend *b) { b->ops->poison_dlogits(b); }
void backend_backward(Backend *b) { b->ops->backward(b); }
int backend_grads_finite(Backend *b) { return b->ops->grads_finite(b); }
void backend_optim_step(Backend *b, const OptConfig *cfg, OptState *st, float lr) { b->ops->optim_step(b, cfg, st, lr); }

// The batch counters are host state on both backends (the GPU forward increments them in place
// like the CPU one), so they are saved here; the statistics are the implementation's.
void backend_bn_snapshot(Backend *b) {
    b->ops->bn_snapshot(b);
    memcpy(b->counts_backup, b->m->counts, b->m->n_counts * sizeof(int64_t));
}

void backend_bn_rollback(Backend *b) {
    b->ops->bn_rollback(b);
    memcpy(b->m->counts, b->counts_backup, b->m->n_counts * sizeof(int64_t));
}

void backend_bn_from_rank0(Backend *b, Comm *comm) { b->ops->bn_from_rank0(b, comm); }
void backend_download(Backend *b, OptState *opt) { b->ops->download(b, opt); }
void backend_upload(Backend *b, const OptState *opt) { b->ops->upload(b, opt); }
void backend_ema_attach(Backend *b, float *ema) { b->ema = ema; }
void backend_ema(Backend *b, EmaOp op, float decay) {
    if (!b->ema) ct_die("internal: backend_ema without backend_ema_attach");
    b->ops->ema(b, op, decay);
}
int backend_stages_batches(const Backend *b) { return b->ops->stages_batches; }
void backend_prefetch(Backend *b, const uint8_t *x, int N, int hw) { b->ops->prefetch(b, x, N, hw); }
void backend_prefetch_cancel(Backend *b, const uint8_t *x) { b->ops->prefetch_cancel(b, x); }

BackendGroup *backend_group_create(BackendKind kind, const char *comm_flag, int local, int offset, int world,
                                   NodeNet *net) {
    return ops_of(kind)->group_create(comm_flag, local, offset, world, net);
}

void backend_attach_gradsync(Backend *b, BackendGroup *g, Comm *comm, int local_rank, size_t bucket_bytes) {
    b->ops->attach_gradsync(b, g, comm, local_rank, bucket_bytes);
}

int backend_gradsync_buckets(const Backend *b) { return b->ops->gradsync_buckets(b); }
