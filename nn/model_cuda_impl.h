// Private to the GPU executor's files (nn/model_cuda*.cu), like trainer/backend_impl.h is to the
// backends: the executor's state (struct GpuExec and the structs it holds) and the small helpers
// and internal calls that more than one of those files needs. The executor is split by concern,
// a struct and a file each: nn/model_cuda.cu (create/free, the forward and backward walks, input
// staging `Staging`, CUDA graphs `Graphs`, the step hook), nn/model_cuda_loss.cu (the losses),
// nn/model_cuda_plan.cu (the memory plan `MemPlan`), nn/model_cuda_state.cu (the device state
// `DevState`: host<->device copies, the optimizer steps and their scratch `OptScratch`, EMA,
// pinned memory) and nn/model_cuda_prof.cu (the per-op profiler `Prof`).
#pragma once
#include "kernels/common.cuh"
#include "nn/layers.h"  // conv_shape
#include "nn/model_cuda.h"
#include "nn/plan.h"
#include "util/common.h"

#define CK(call) CT_CUDA_CHECK(call)

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

// Input staging: uint8 batches copied ahead on the copy stream (gpu_prefetch_u8), the float
// input's staging, the normalisation constants.
typedef struct {
    Stage stage[2];
    int next;          // the stage the next prefetch fills
    float *xf;         // float input staging (gpu_forward with a float batch)
    size_t xf_cap;
    float *meanstd;    // device mean[C], std[C] of the last u8 forward
    float *h_meanstd;  // host copy (to skip identical re-uploads)
} Staging;

// CUDA graphs (gpu_exec_use_graphs): a pass runs eagerly the first time it meets a batch size
// and memory plan, is captured the second time and replayed from then on. A launch costs a few
// microseconds of host time and ResNet passes are hundreds of small kernels.
typedef struct {
    int on;            // 1 on, 0 off, -1 off since a capture failed
    StepGraph fwd, bwd;
    long launches;
} Graphs;

// gpu_exec_set_step_hook: each forward step's output to the host (tests); forwards then run eagerly.
typedef struct {
    PlanStepHook fn;   // NULL: off
    void *ctx;
    float *buf;        // host copy of the step's output handed to fn
    size_t cap;        // floats
} StepHook;

// Stochastic depth (nn/model_cuda_drop.cu): the batch's key and the per-row scales of every
// OP_DROP_PATH op, made on the host by the CPU's own drop_path_scales and uploaded before each
// training forward (outside any graph: the graphs read d, a fixed buffer).
typedef struct {
    uint64_t key;      // gpu_exec_set_drop_path_key
    int n, cap;        // OP_DROP_PATH ops; rows held per op
    int *of;           // [n_ops]: the op's index among them, or -1
    float *h, *d;      // host and device scales [n * cap]
} DropPath;

// The model and optimizer state on the device (nn/model_cuda_state.cu owns it): the flat arrays of
// ResNet.params / ResNet.bufs' layout, live for the executor's life.
typedef struct {
    float *params, *grads, *bufs;
    float *mom;        // the optimizer's first state tensor (sgd, lars: the momentum; adamw, lamb: exp_avg)
    float *mom2;       // its second (adamw, lamb: exp_avg_sq), on first use
    float *bufs_snap;  // gpu_bufs_snapshot's copy of bufs
    uint16_t *wbf;     // bf16 copy of params (dt == CT_BF16), refreshed by every optimizer step
    float *ema;        // --ema's state tensor [n_params + n_bufs] (nn/ema.h; gpu_upload_ema), NULL without
} DevState;

// The optimizer steps' device scratch (nn/model_cuda_state.cu), built on a step's first use for
// the setting it was built for and rebuilt when that changes.
typedef struct {
    uint8_t *decay;    // weight-decay mask for the last setting seen
    int decay_mode;    // -1: mask not built; else the wd_exclude_norm_bias it was built for
    CtLarsTensor *lars_t;  // LARS: the parameter tensors (built on its first step)
    double *lars_norms;    // LARS, LAMB: 3 doubles a tensor (LARS uses 2)
    int lars_n;
    CtLarsTensor *lamb_t;  // LAMB: the parameter tensors, skip as optim_decays says (built for lamb_mode)
    int lamb_mode;         // -1: not built; else the wd_exclude_norm_bias it was built for
} OptScratch;

// The memory plan (nn/model_cuda_plan.cu owns it): the passes' device buffers for batches of up
// to N images of H x W, replaced when a larger batch or another image size comes.
typedef struct {
    int N, H, W;       // what it covers (0: no plan yet)
    TensorDim *dims;   // [n_tensors] slot shapes at H x W
    void **act;        // [n_tensors] activation buffers (the logits slot points at `logits`)
    void **grad;       // [n_tensors] gradient buffer of each slot (into gpool), NULL for slot 0
    void **gpool;      // pooled gradient buffers
    int n_gpool;
    void *scratch;     // largest gradient slot, for the second contribution to a slot
    float *work;       // reduction workspace
    size_t work_floats;
    float *bnstat;     // per BN op: mean[C], invstd[C]
    size_t *bnstat_off;// [n_ops]
    int cpad;          // bf16 stem with < 8 input channels: padded to cpad = 8 (0: not padded)
    void *xpad;        // the input padded to cpad channels
    uint16_t *wpad;    // the stem's weights padded to cpad channels
    float *dwpad;      // the stem's weight gradient over cpad channels
    uint8_t **relu_mask;  // per fused tail BN op with tail_mask: its ReLU mask bits (bf16; NULL: none)
    uint8_t *mask_ok;     // per op: the last train forward wrote relu_mask[op]
    float *logits, *dlogits;
    int32_t *labels, *labels_b;  // labels_b: a mixed batch's partners
    void *loss_work;   // loss_workspace_bytes(N): per-row losses and hits
    float *h_logits;   // pinned host copy of the logits
    int gen;           // bumped whenever exec_plan() (or the drop-path scales) reallocate: graphs hold their pointers
    size_t bytes;      // device memory of the plan's buffers
} MemPlan;

// The executor, by concern: the device and the plan it walks; the model and optimizer state on the
// device; the optimizer's scratch; the memory plan (buffers for one batch shape); input staging;
// graphs; profiler; hook. Each concern's file touches mainly its own struct.
struct GpuExec {
    // Device.
    CtDtype dt;
    size_t esz;  // bytes per activation element
    cudaStream_t st, cp;
    size_t dev_bytes;     // device memory held
    const ResNet *graph;  // the model this executor was made for (shape checks)
    ExecPlan *plan;       // the steps the passes walk, fusions included (nn/plan.h), built at create
    ExecOptions opt;      // its execution options (gpu_exec_create_opts), copied at creation
    int conv_algo;        // the CtConvAlgo every convolution takes: opt's engine on bf16, CT_CONV_AUTO on fp32
    float *scalars;       // device: loss, correct (as int bits), non-finite flag
    float *h_scalars;     // pinned host copy of them
    int fwd_train_N;      // N of the last training forward (0: none, backward refused)

    DevState dev;      // model and optimizer state
    OptScratch osc;    // optimizer steps' scratch
    MemPlan mem;       // the memory plan
    Staging in;        // input staging
    Graphs cg;         // CUDA graphs of the passes
    Prof *prof;        // the profiler: NULL unless profiling (which runs every pass eagerly)
    StepHook hook;     // gpu_exec_set_step_hook
    DropPath drop;     // stochastic depth's scales
};

static inline void *dmalloc(GpuExec *e, size_t bytes) {
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
static inline void dfree(void *p) {
    if (p) cudaFree(p);
}

static inline const StateEntry *entry(const ResNet *m, int i) { return &m->entries[i]; }
static inline float *pparam(GpuExec *e, const ResNet *m, int i) { return e->dev.params + entry(m, i)->offset; }
static inline float *pgrad(GpuExec *e, const ResNet *m, int i) { return e->dev.grads + entry(m, i)->offset; }
// BN op i's saved statistics (the last train forward's) and affine parameters, as the fused
// kernels that apply or recompute it take them.
static inline BnAffine bn_affine(GpuExec *e, const ResNet *m, int i) {
    const Op *bn = &m->ops[i];
    const float *mean = e->mem.bnstat + e->mem.bnstat_off[i];
    BnAffine a = {mean, mean + bn->C, pparam(e, m, bn->w), pparam(e, m, bn->b)};
    return a;
}
// Conv / linear weight operand in the activation dtype.
static inline const void *wop(GpuExec *e, const ResNet *m, int i) {
    size_t off = entry(m, i)->offset;
    return e->dt == CT_BF16 ? (const void *)(e->dev.wbf + off) : (const void *)(e->dev.params + off);
}

static inline size_t slot_elems(const GpuExec *e, int s, int N) {
    return (size_t)N * e->mem.dims[s].H * e->mem.dims[s].W * e->mem.dims[s].C;
}

// The stem (a conv reading the input, slot 0) in bf16 with fewer than 8 input channels runs on
// the input and weights padded to 8 zero-extended channels (kernels/conv_pad.cu), so that the
// tensor-core engine loads it by 16-byte copies instead of element gathers.
static inline int stem_padded(const GpuExec *e, const Op *op) { return e->mem.cpad && op->in == 0; }

static inline ConvShape op_conv_shape(const GpuExec *e, const Op *op, int N) {
    const TensorDim *d = &e->mem.dims[op->in];
    ConvShape s = conv_shape_g(N, d->H, d->W, d->C, op->K, op->R, op->S, op->stride, op->pad, op->groups);
    if (stem_padded(e, op)) s.C = e->mem.cpad;
    return s;
}

// nn/model_cuda.cu: drops a captured graph (a new plan makes it stale).
void graph_drop(StepGraph *g);

// nn/model_cuda_loss.cu: enqueues the cross-entropy of the last training forward against the
// soft target of (labels, labels_b, lam) (labels_b == labels: the plain one): dlogits on the device,
// the loss and the hit count into h_scalars[0], [1] (valid once the stream has reached that point);
// xent_result reads them back.
void enqueue_xent(GpuExec *e, const ResNet *m, const int32_t *labels, const int32_t *labels_b, float lam, int N,
                  float smoothing, float grad_scale);
float xent_result(const GpuExec *e, int *correct);

// nn/model_cuda_state.cu: the device state and optimizer scratch, made at gpu_exec_create (the
// compute stream exists) and released at gpu_exec_free.
void dev_state_create(GpuExec *e, const ResNet *m);
void dev_state_free(GpuExec *e);

// nn/model_cuda_plan.cu: the memory plan for batches of up to N images of H x W (kept when it
// already covers them), and its release.
void exec_plan(GpuExec *e, const ResNet *m, int N, int H, int W);
void exec_free_plan(GpuExec *e, const ResNet *m);

// nn/model_cuda_prof.cu: the profiler's marks (no-ops unless gpu_exec_profile turned it on).
void prof_free(Prof *p);
void prof_mark(GpuExec *e, int op, int part);
void prof_pass_done(GpuExec *e, int backward);

// nn/model_cuda_drop.cu: stochastic depth. drop_path_upload: this training batch's scales to the
// device (before the forward); drop_path_dev: op i's N scales there; drop_path_free at exit.
void drop_path_upload(GpuExec *e, const ResNet *m, int N);
const float *drop_path_dev(const GpuExec *e, int op);
void drop_path_free(GpuExec *e);
