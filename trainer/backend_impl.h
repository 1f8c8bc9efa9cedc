// What a backend implementation provides (trainer/backend_cpu.c, trainer/backend_cuda.c): the
// calls of trainer/backend.h as a table, so backend.c dispatches without knowing either. Only the
// backend files include this.
#pragma once
#include "trainer/backend.h"

typedef struct {
    const char *name;
    // Process-wide.
    int (*device_count)(void);  // usable devices (the CPU counts as 1)
    void (*loader_memory)(LoaderConfig *lc);
    void (*pin_shard)(const Shard *sh);
    BackendGroup *(*group_create)(const char *comm_flag, int local, int offset, int world, NodeNet *net);
    // Per model.
    Backend *(*create)(ResNet *m, int bf16, int device, int graphs, const ExecOptions *eo);
    void (*free)(Backend *b);
    void (*bind_thread)(const Backend *b);
    const float *(*forward)(Backend *b, const uint8_t *x, int N, int hw, const float *mean, const float *std, int train);
    float (*train_losses)(Backend *b, Backend *teacher, const uint8_t *x, const int32_t *labels, int N, int hw,
                          const float *mean, const float *std, const LossConfig *lc, int *correct);
    void (*poison_dlogits)(Backend *b);
    void (*backward)(Backend *b);
    int (*grads_finite)(Backend *b);
    void (*optim_step)(Backend *b, const OptConfig *cfg, OptState *st, float lr);
    void (*bn_snapshot)(Backend *b);
    void (*bn_rollback)(Backend *b);
    void (*bn_from_rank0)(Backend *b, Comm *comm);
    void (*download)(Backend *b, OptState *opt);
    void (*upload)(Backend *b, const OptState *opt);
    void (*ema)(Backend *b, EmaOp op, float decay);  // on b->ema (upload/download carry it)
    int stages_batches;
    void (*prefetch)(Backend *b, const uint8_t *x, int N, int hw);
    void (*prefetch_cancel)(Backend *b, const uint8_t *x);
    void (*attach_gradsync)(Backend *b, BackendGroup *g, Comm *comm, int local_rank, size_t bucket_bytes);
    int (*gradsync_buckets)(const Backend *b);
} BackendOps;

// The head of every implementation's backend struct.
struct Backend {
    const BackendOps *ops;
    BackendKind kind;
    ResNet *m;
    int64_t *counts_backup;  // m->counts before a step (host state on both backends)
    float *ema;  // backend_ema_attach's host state tensor [n_params + n_bufs], NULL without --ema
};

extern const BackendOps backend_cpu_ops;
extern const BackendOps backend_cuda_ops;  // only in builds with the CUDA backend
