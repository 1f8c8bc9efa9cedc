// CPU executor: walks the lowered plan of a ResNet (nn/plan.h: the steps the GPU executor runs)
// with the reference layers of nn/layers.h. Of the plan's fusions only the block tail (bn_add)
// changes what the CPU computes; the others move a BN's passes into the kernels around it on the
// GPU and compute the same values, which the CPU computes in the BN's own step.
//
// Memory plan. Time runs over forward steps 0..n-1 (op i at time i) and then backward steps
// n..2n-1 (op i at time 2n-1-i). Every buffer (activation slot, gradient slot) gets a lifetime
// [first write, last read] on that timeline and an offset in one arena; buffers whose lifetimes
// do not intersect may share memory. Offsets are assigned greedily, largest buffer first, at the
// lowest offset that does not collide with an already placed buffer of intersecting lifetime.
// A fused pair (bn3 + add, a bn_add step) runs at the BN's step in both directions, so
// both ops' buffers are live over both steps of the pair.
#include "nn/model_cpu.h"

#include <string.h>

#include "nn/blur.h"
#include "nn/drop_path.h"
#include "nn/layers.h"
#include "nn/plan.h"
#include "util/common.h"

#define BN_MOMENTUM 0.1f
#define BN_EPS 1e-5f
#define NONE ((size_t)-1)

struct CpuExec {
    int n_ops, n_tensors;
    // Current plan.
    int planned, N, H, W, train;
    TensorDim *dims;
    size_t *act_off;   // per slot: offset of the activation in the arena (floats)
    size_t *grad_off;  // per slot: offset of its gradient, NONE when no gradient is kept
    float *arena;
    size_t arena_floats;
    float *scratch;    // gradient contributions that must be added to an already written gradient
    size_t scratch_floats;
    float *dlogits;    // cpu_train_step's loss gradient
    // Per BN op: batch mean and 1/sqrt(var+eps) saved by the training forward.
    size_t *bn_off;
    float *bn_save;
    // Backward bookkeeping.
    char *grad_written;
    ExecPlan *plan;  // the steps both passes walk
    uint8_t *fuse;   // per op: 1 for a BN run together with the ADD after it (the plan's bn_add steps)
    PlanStepHook hook;  // cpu_exec_set_step_hook
    void *hook_ctx;
    int forward_was_train;  // batch size of the last forward if it was a training one, else 0
    size_t dlogits_cap;
    // bf16 mode (cpu_exec_set_bf16): wq holds the params rounded to bf16, the conv/fc operands.
    int bf16;
    float *wq;
    size_t wq_cap;
    ExecOptions opt;  // the routes and fusions it takes (cpu_exec_create_opts)
    // Stochastic depth: the batch's key (cpu_exec_set_drop_path_key) and the last training
    // forward's per-row scales, drop_cap rows per OP_DROP_PATH op (drop_of[op] its index, or -1).
    uint64_t drop_key;
    int *drop_of, n_drop, drop_cap;
    float *drop_s;
};

CpuExec *cpu_exec_create(const ResNet *m) { return cpu_exec_create_opts(m, NULL); }

CpuExec *cpu_exec_create_opts(const ResNet *m, const ExecOptions *opts) {
    CpuExec *e = ct_zalloc(sizeof *e);
    e->opt = opts ? *opts : exec_options_default();
    e->plan = plan_build(m, &e->opt);
    e->n_ops = m->n_ops;
    e->n_tensors = m->n_tensors;
    e->dims = ct_zalloc(m->n_tensors * sizeof(TensorDim));
    e->act_off = ct_zalloc(m->n_tensors * sizeof(size_t));
    e->grad_off = ct_zalloc(m->n_tensors * sizeof(size_t));
    e->grad_written = ct_zalloc(m->n_tensors);
    e->bn_off = ct_zalloc(m->n_ops * sizeof(size_t));
    e->fuse = ct_zalloc(m->n_ops);
    for (int i = 0; i < m->n_ops; i++) e->fuse[i] = (uint8_t)(plan_step_of(e->plan, i)->kind == PLAN_BN_ADD &&
                                                               plan_step_of(e->plan, i)->op == i);
    size_t bn_total = 0;
    for (int i = 0; i < m->n_ops; i++) {
        e->bn_off[i] = bn_total;
        if (m->ops[i].kind == OP_BN) bn_total += 2 * (size_t)m->ops[i].C;
    }
    e->bn_save = ct_zalloc(CT_MAX(bn_total, 1) * sizeof(float));
    e->drop_of = ct_alloc(CT_MAX(m->n_ops, 1) * sizeof(int));
    for (int i = 0; i < m->n_ops; i++) e->drop_of[i] = m->ops[i].kind == OP_DROP_PATH ? e->n_drop++ : -1;
    return e;
}

void cpu_exec_set_drop_path_key(CpuExec *e, uint64_t key) { e->drop_key = key; }

const float *cpu_exec_drop_path_scales(const CpuExec *e, int op) {
    return e->drop_of[op] < 0 || !e->drop_s ? NULL : e->drop_s + (size_t)e->drop_of[op] * e->drop_cap;
}

void cpu_exec_free(CpuExec *e) {
    if (!e) return;
    free(e->dims);
    free(e->act_off);
    free(e->grad_off);
    free(e->grad_written);
    free(e->fuse);
    plan_free(e->plan);
    free(e->bn_off);
    free(e->bn_save);
    free(e->arena);
    free(e->scratch);
    free(e->dlogits);
    free(e->wq);
    free(e->drop_of);
    free(e->drop_s);
    free(e);
}

size_t cpu_exec_arena_bytes(const CpuExec *e) { return e->arena_floats * sizeof(float); }

void cpu_exec_set_bf16(CpuExec *e, int on) { e->bf16 = on != 0; }
const ExecPlan *cpu_exec_plan(const CpuExec *e) { return e->plan; }
void cpu_exec_set_step_hook(CpuExec *e, PlanStepHook fn, void *ctx) {
    e->hook = fn;
    e->hook_ctx = ctx;
}
int cpu_exec_bf16(const CpuExec *e) { return e->bf16; }

// A tensor the GPU's bf16 path stores in bf16: round it where the GPU would (bf16 mode only).
static void store(const CpuExec *e, float *p, size_t n) {
    if (e->bf16 && p) round_bf16(p, n);
}

// ---------------------------------------------------------------------------------------------
// Planning.
typedef struct {
    size_t size;        // floats
    int start, end;     // lifetime, inclusive
    size_t *off;        // where to store the assigned offset
} Interval;

static int cmp_interval(const void *a, const void *b) {
    const Interval *x = a, *y = b;
    if (x->size != y->size) return x->size < y->size ? 1 : -1;
    return x->start - y->start;  // deterministic tie break
}

static size_t place_intervals(Interval *iv, int n) {
    qsort(iv, n, sizeof *iv, cmp_interval);
    size_t total = 0;
    // Candidate offsets are 0 and the ends of already placed buffers; take the lowest that fits.
    for (int i = 0; i < n; i++) {
        size_t best = NONE;
        for (int c = -1; c < i; c++) {
            size_t cand = c < 0 ? 0 : *iv[c].off + iv[c].size;
            if (best != NONE && cand >= best) continue;
            int ok = 1;
            for (int j = 0; j < i && ok; j++) {
                if (iv[j].start > iv[i].end || iv[i].start > iv[j].end) continue;  // disjoint in time
                size_t a0 = *iv[j].off, a1 = a0 + iv[j].size;
                if (cand < a1 && a0 < cand + iv[i].size) ok = 0;
            }
            if (ok) best = cand;
        }
        *iv[i].off = best;
        total = CT_MAX(total, best + iv[i].size);
    }
    return total;
}

// Does op's backward read its input activation / output activation?
static int bwd_needs_input(const Op *op) {
    return op->kind == OP_CONV || op->kind == OP_BN || op->kind == OP_MAXPOOL || op->kind == OP_FC;
}
static int bwd_needs_output(const Op *op) { return (op->kind == OP_BN || op->kind == OP_ADD) && op->relu; }

// The forward steps op k's work may run at: [span_lo, span_hi] (a fused pair runs at its BN's).
static int span_lo(const CpuExec *e, int k) { return k > 0 && e->fuse[k - 1] ? k - 1 : k; }
static int span_hi(const CpuExec *e, int k) { return e->fuse[k] ? k + 1 : k; }

static void plan(CpuExec *e, const ResNet *m, int N, int H, int W, int train) {
    if (resnet_shapes(m, H, W, e->dims) != 0)
        ct_die("%s: input %dx%d is too small for the network (a feature map would be empty)", m->arch, H, W);
    int n = m->n_ops, T = 2 * n;
    int *producer = ct_alloc(m->n_tensors * sizeof(int));
    for (int t = 0; t < m->n_tensors; t++) producer[t] = -1;
    for (int i = 0; i < n; i++) producer[m->ops[i].out] = i;

    Interval *iv = ct_alloc(2 * m->n_tensors * sizeof(Interval));
    int niv = 0;
    size_t max_slot = 0;
    for (int t = 0; t < m->n_tensors; t++) {
        size_t size = (size_t)N * e->dims[t].H * e->dims[t].W * e->dims[t].C;
        max_slot = CT_MAX(max_slot, size);
        if (producer[t] >= 0 && e->fuse[producer[t]]) size = 0;  // a fused BN's output: never stored
        int start = producer[t] < 0 ? 0 : span_lo(e, producer[t]), end = start;
        int first_bwd_use = T;  // gradient: time of the first contribution
        for (int i = 0; i < n; i++) {
            const Op *op = &m->ops[i];
            int lo = span_lo(e, i), hi = span_hi(e, i), blo = T - 1 - hi, bhi = T - 1 - lo;
            if (op->in == t || op->in2 == t) {
                end = CT_MAX(end, hi);
                if (train && op->in == t && bwd_needs_input(op)) end = CT_MAX(end, bhi);
                if (train) first_bwd_use = CT_MIN(first_bwd_use, blo);
            }
            if (op->out == t && train && bwd_needs_output(op)) end = CT_MAX(end, bhi);
        }
        if (t == m->n_tensors - 1) end = T;  // logits stay valid until the next forward
        iv[niv++] = (Interval){size, start, end, &e->act_off[t]};
        e->grad_off[t] = NONE;
        // A gradient for every slot but the input and the logits (the caller passes dlogits).
        if (train && t != 0 && t != m->n_tensors - 1 && producer[t] >= 0) {
            int gend = T - 1 - span_lo(e, producer[t]);
            iv[niv++] = (Interval){size, first_bwd_use, gend, &e->grad_off[t]};
        }
    }
    size_t total = place_intervals(iv, niv);
    free(iv);
    free(producer);
    if (total > e->arena_floats) {
        free(e->arena);
        e->arena = ct_alloc(total * sizeof(float));
        e->arena_floats = total;
    }
    if (train && max_slot > e->scratch_floats) {
        free(e->scratch);
        e->scratch = ct_alloc(max_slot * sizeof(float));
        e->scratch_floats = max_slot;
    }
    e->planned = 1;
    e->N = N;
    e->H = H;
    e->W = W;
    e->train = train;
}

static void ensure_plan(CpuExec *e, const ResNet *m, int N, int H, int W, int train) {
    if (N < 1) ct_die("%s: batch size %d", m->arch, N);
    if (e->planned && H == e->H && W == e->W && N <= e->N && (!train || e->train)) return;
    // Keep the larger batch of the two so alternating train/eval batch sizes do not re-plan.
    if (e->planned && H == e->H && W == e->W) N = CT_MAX(N, e->N);
    plan(e, m, N, H, W, train || (e->planned && e->train && H == e->H && W == e->W));
}

// ---------------------------------------------------------------------------------------------
// Forward.
static float *act(CpuExec *e, int t) { return e->arena + e->act_off[t]; }

// Conv / linear weight operand: the fp32 master weights, or their bf16 rounding in bf16 mode.
static const float *weight(const CpuExec *e, const ResNet *m, int entry) {
    return (e->bf16 ? e->wq : m->params) + m->entries[entry].offset;
}

// bf16 mode: round this step's conv/fc weights (the GPU refreshes its bf16 copy after every SGD
// step; here the params may change between any two calls, so every forward re-rounds them).
static void refresh_weights(CpuExec *e, const ResNet *m) {
    if (!e->bf16) return;
    if (e->wq_cap < m->n_params) {
        free(e->wq);
        e->wq = ct_alloc(CT_MAX(m->n_params, 1) * sizeof(float));
        e->wq_cap = m->n_params;
    }
    for (int i = 0; i < m->n_entries; i++) {
        const StateEntry *en = &m->entries[i];
        if (en->kind != ENTRY_PARAM || en->ndim < 2) continue;
        memcpy(e->wq + en->offset, m->params + en->offset, en->count * sizeof(float));
        round_bf16(e->wq + en->offset, en->count);
    }
}

int cpu_plain_op_forward(int kind, float *y, const float *x, const float *x2, int N, TensorDim din, TensorDim dout,
                         int R, int stride, int pad, int relu) {
    const size_t n = (size_t)N * din.H * din.W * din.C;
    switch (kind) {
    case OP_RELU:
        relu_forward(y, x, n);
        return 0;
    case OP_MAXPOOL:
        maxpool_forward(y, x, N, din.H, din.W, din.C, R, stride, pad, dout.H, dout.W);
        return 0;
    case OP_ADD:
        add_forward(y, x, x2, n, relu);
        return 0;
    case OP_AVGPOOL:
        avgpool_forward(y, x, N, din.H * din.W, din.C);
        return 0;
    case OP_BLUR:
        blur3x3_forward(y, x, N, din.H, din.W, din.C);
        return 0;
    case OP_DROP_PATH:  // the eval forward: the identity
        if (y != x) memcpy(y, x, n * sizeof(float));
        return 0;
    default:
        return -1;
    }
}

static void forward_ops(CpuExec *e, ResNet *m, int N, int train) {
    refresh_weights(e, m);
    if (train && e->n_drop && N > e->drop_cap) {
        free(e->drop_s);
        e->drop_s = ct_alloc((size_t)e->n_drop * N * sizeof(float));
        e->drop_cap = N;
    }
    store(e, act(e, 0), (size_t)N * e->H * e->W * m->in_channels);
    const ExecPlan *p = e->plan;
    for (int k = 0; k < p->n_steps; k++) {
        const PlanStep *ps = &p->steps[k];
        const int i = ps->op;
        const Op *op = &m->ops[i];
        const TensorDim din = e->dims[op->in];
        // A tail (bn_add) writes its ADD's output: y = bn(x) + res [relu].
        const Op *add = ps->add >= 0 ? &m->ops[ps->add] : NULL;
        const int out = ps->out;
        const TensorDim dout = e->dims[out];
        float *y = act(e, out);
        const float *x = act(e, op->in);
        const float *res = add ? act(e, ps->res) : NULL;
        switch (op->kind) {
        case OP_CONV: {
            ConvShape s = conv_shape_g(N, din.H, din.W, din.C, op->K, op->R, op->S, op->stride, op->pad, op->groups);
            conv2d_forward_ex(&s, y, x, weight(e, m, op->w), &e->opt);
            break;
        }
        case OP_BN: {
            const float *gamma = m->params + m->entries[op->w].offset;
            const float *beta = m->params + m->entries[op->b].offset;
            float *rm = m->bufs + m->entries[op->rm].offset, *rv = m->bufs + m->entries[op->rv].offset;
            int M = N * din.H * din.W;
            if (train && !m->freeze_backbone) {
                float *sm = e->bn_save + e->bn_off[i], *si = sm + op->C;
                batchnorm_add_forward_train(y, sm, si, rm, rv, x, res, gamma, beta, M, op->C, BN_MOMENTUM, BN_EPS,
                                            add ? add->relu : op->relu);
                m->counts[m->entries[op->nbt].offset] += 1;
            } else {
                batchnorm_add_forward_eval(y, x, res, gamma, beta, rm, rv, M, op->C, BN_EPS,
                                           add ? add->relu : op->relu);
            }
            break;
        }
        case OP_FC:
            linear_forward(y, x, weight(e, m, op->w), op->b >= 0 ? m->params + m->entries[op->b].offset : NULL,
                           N, op->C, op->K);
            break;
        case OP_DROP_PATH:
            if (train) {  // this batch's rows, kept for the backward
                float *s = e->drop_s + (size_t)e->drop_of[i] * e->drop_cap;
                drop_path_scales(s, N, op->drop, e->drop_key, op->drop_block);
                drop_path_apply(y, x, s, N, (size_t)din.H * din.W * din.C);
            } else {
                memcpy(y, x, (size_t)N * din.H * din.W * din.C * sizeof(float));
            }
            break;
        default:
            if (cpu_plain_op_forward(op->kind, y, x, op->in2 >= 0 ? act(e, op->in2) : NULL, N, din, dout, op->R,
                                     op->stride, op->pad, op->relu) != 0)
                ct_die("%s: op %d (%s) has unknown kind %d", m->arch, i, op->name, op->kind);
        }
        if (out != m->n_tensors - 1) store(e, y, (size_t)N * dout.H * dout.W * dout.C);  // logits stay fp32
        if (e->hook) e->hook(e->hook_ctx, k, y, (size_t)N * dout.H * dout.W * dout.C);
    }
    e->forward_was_train = train ? N : 0;
}

const float *cpu_forward(CpuExec *e, ResNet *m, const float *x, int N, int H, int W, int train) {
    ensure_plan(e, m, N, H, W, train);
    memcpy(act(e, 0), x, (size_t)N * H * W * m->in_channels * sizeof(float));
    forward_ops(e, m, N, train);
    return act(e, m->n_tensors - 1);
}

const float *cpu_forward_u8(CpuExec *e, ResNet *m, const uint8_t *x, int N, int H, int W,
                            const float *mean, const float *std, int train) {
    ensure_plan(e, m, N, H, W, train);
    normalize_u8(act(e, 0), x, (size_t)N * H * W, m->in_channels, mean, std);
    forward_ops(e, m, N, train);
    return act(e, m->n_tensors - 1);
}

// ---------------------------------------------------------------------------------------------
// Backward. A slot's gradient is written by the first contribution (backward runs the consumers
// in reverse op order) and accumulated by the later ones through the scratch buffer.
static float *grad_dest(CpuExec *e, int t) {
    if (e->grad_off[t] == NONE) return NULL;
    return e->grad_written[t] ? e->scratch : e->arena + e->grad_off[t];
}

// A large gradient copy (residual branches), split over the threads.
static void copy_parallel(float *dst, const float *src, size_t n) {
    const size_t B = (size_t)1 << 15;
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i += B) memcpy(dst + i, src + i, CT_MIN(B, n - i) * sizeof(float));
}

static void grad_commit(CpuExec *e, int t, const float *dst, size_t n) {
    if (!dst) return;
    if (e->grad_written[t]) {
        add_inplace(e->arena + e->grad_off[t], dst, n);
        store(e, e->arena + e->grad_off[t], n);
    }
    e->grad_written[t] = 1;
}

void cpu_backward(CpuExec *e, const ResNet *m, const float *dlogits, float *grads, GradReadyFn ready,
                  void *ctx) {
    int N = e->forward_was_train;
    if (N <= 0 || !e->train) ct_die("%s: cpu_backward without a preceding training forward", m->arch);
    memset(e->grad_written, 0, m->n_tensors);
    // The gaps between tensors (resnet.h) are part of every bucket the ready callback reports:
    // they must read zero, whatever the caller's buffer held.
    resnet_zero_padding(m, grads);
    const ExecPlan *p = e->plan;
    for (int k = p->n_steps - 1; k >= 0; k--) {
        const PlanStep *ps = &p->steps[k];
        const int i = ps->op;
        const Op *op = &m->ops[i];
        const Op *add = ps->add >= 0 ? &m->ops[ps->add] : NULL;
        const int out = ps->out;
        const TensorDim din = e->dims[op->in], dout = e->dims[out];
        const float *dy = out == m->n_tensors - 1 ? dlogits : e->arena + e->grad_off[out];
        const float *x = act(e, op->in);
        const float *y = act(e, out);
        size_t n_in = (size_t)N * din.H * din.W * din.C;
        // A frozen backbone needs no gradient below fc: backward ends with fc's weight gradients.
        float *dx = m->freeze_backbone && op->kind == OP_FC ? NULL : grad_dest(e, op->in);
        switch (op->kind) {
        case OP_CONV: {
            ConvShape s = conv_shape_g(N, din.H, din.W, din.C, op->K, op->R, op->S, op->stride, op->pad, op->groups);
            conv2d_backward_weight_ex(&s, grads + m->entries[op->w].offset, dy, x, &e->opt);
            if (dx) conv2d_backward_data_ex(&s, dx, dy, weight(e, m, op->w), &e->opt);
            break;
        }
        case OP_BN: {
            const float *sm = e->bn_save + e->bn_off[i], *si = sm + op->C;
            float *tmp = dx ? dx : e->scratch;  // the BN input always has a gradient in a ResNet
            // Fused with its ADD: the residual operand's gradient is written (or accumulated in
            // place) by the same pass; dy is masked by the ADD's ReLU.
            int rs = add ? ps->res : -1;
            float *dres = rs >= 0 && e->grad_off[rs] != NONE ? e->arena + e->grad_off[rs] : NULL;
            int res_acc = dres && e->grad_written[rs];
            batchnorm_add_backward(tmp, dres, res_acc, grads + m->entries[op->w].offset,
                                   grads + m->entries[op->b].offset, dy, x,
                                   (add ? add->relu : op->relu) ? y : NULL, m->params + m->entries[op->w].offset,
                                   sm, si, N * din.H * din.W, op->C);
            if (dres) {
                store(e, dres, n_in);
                e->grad_written[rs] = 1;
            }
            break;
        }
        case OP_RELU:
            if (dx) relu_backward(dx, dy, y, n_in);
            break;
        case OP_MAXPOOL:
            if (dx) maxpool_backward(dx, dy, x, N, din.H, din.W, din.C, op->R, op->stride, op->pad, dout.H, dout.W);
            break;
        case OP_ADD: {
            // d(a+b) with a fused ReLU: both operands receive relu'(y) * dy. When one of them
            // already holds a gradient, da/db is the scratch buffer and the commit adds it.
            float *da = dx ? dx : e->scratch;
            if (op->relu) relu_backward(da, dy, y, n_in);
            else memcpy(da, dy, n_in * sizeof(float));
            grad_commit(e, op->in, dx, n_in);
            float *db = grad_dest(e, op->in2);
            if (db && db != da && e->grad_written[op->in2]) {
                // Add da straight in: the same sum as copying it to scratch and committing that.
                add_inplace(e->arena + e->grad_off[op->in2], da, n_in);
                store(e, e->arena + e->grad_off[op->in2], n_in);
            } else {
                if (db && db != da) copy_parallel(db, da, n_in);
                grad_commit(e, op->in2, db, n_in);
            }
            dx = NULL;  // already committed
            break;
        }
        case OP_AVGPOOL:
            if (dx) avgpool_backward(dx, dy, N, din.H * din.W, din.C);
            break;
        case OP_BLUR:
            if (dx) blur3x3_backward(dx, dy, N, din.H, din.W, din.C);
            break;
        case OP_DROP_PATH:
            if (dx) drop_path_apply(dx, dy, e->drop_s + (size_t)e->drop_of[i] * e->drop_cap, N, n_in / N);
            break;
        case OP_FC:
            linear_backward(dx, grads + m->entries[op->w].offset,
                            op->b >= 0 ? grads + m->entries[op->b].offset : NULL, dy, x,
                            weight(e, m, op->w), N, op->C, op->K);
            break;
        default:
            ct_die("%s: op %d (%s) has unknown kind %d", m->arch, i, op->name, op->kind);
        }
        if (op->kind != OP_ADD) {
            // A conv's later contribution is added to the slot before rounding: the GPU adds it in
            // the data gradient's epilogue (conv2d_backward_data_acc_gpu), one rounding from fp32.
            if (!(op->kind == OP_CONV && dx == e->scratch)) store(e, dx, n_in);
            grad_commit(e, op->in, dx, n_in);
        }
        if (ready && (op->w >= 0)) ready(ctx, op->grad_done);
        if (m->freeze_backbone && op->kind == OP_FC) break;
    }
}

float cpu_train_step(CpuExec *e, ResNet *m, const float *x, const int32_t *labels, int N, int H, int W,
                     float smoothing, float *grads, int *correct) {
    const float *logits = cpu_forward(e, m, x, N, H, W, 1);
    size_t nk = (size_t)N * m->num_classes;
    if (nk > e->dlogits_cap) {
        free(e->dlogits);
        e->dlogits = ct_alloc(nk * sizeof(float));
        e->dlogits_cap = nk;
    }
    float loss = softmax_xent(e->dlogits, logits, labels, N, m->num_classes, smoothing, 1.0f, correct);
    cpu_backward(e, m, e->dlogits, grads, NULL, NULL);
    return loss;
}
