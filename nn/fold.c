// BN-folded inference executor (nn/fold.h).
//
// The folded graph keeps the ResNet's slot numbers: a fused conv reads the conv's input slot and
// writes the slot of the BN (or of the residual add folded into it), so slots in between simply
// never exist. Memory: each slot in use gets one of a few buffers, all as large as the largest
// slot; a buffer is taken by an op's output before the op runs and given back after the last op
// that reads its slot (an output never shares a buffer with the op's inputs).
#include "nn/fold.h"

#include <math.h>
#include <string.h>

#include "nn/layers.h"
#include "nn/model_cpu.h"
#include "nn/winograd.h"
#include "util/crc32c.h"
#include "util/common.h"

#define BN_EPS 1e-5

typedef struct {
    int kind;           // OP_CONV (with bias, optional residual, optional ReLU), OP_MAXPOOL, OP_ADD,
                        // OP_RELU, OP_AVGPOOL, OP_FC, OP_BLUR
    int in, in2, out;   // slots; in2: OP_ADD's second operand or a conv's residual, else -1
    int relu;
    int C, K, R, S, stride, pad;
    int groups;         // OP_CONV: > 1 runs conv2d_grouped_forward on KRSC weights (no Winograd, no packing)
    int wino;           // OP_CONV through conv3x3_winograd_ep (weights in its u[16][C][K] form)
    int packed;         // OP_CONV weights packed once into GEMM panels (conv2d_pack_weights)
    size_t w_off, b_off;       // into FoldNet.weights (OP_CONV, OP_FC)
    int e_w, e_g, e_b, e_rm, e_rv, e_fcb;  // the ResNet entries folded from (-1: none)
    char name[48];
} FOp;

struct FoldNet {
    char arch[32];
    int in_channels, num_classes, n_tensors, blurpool;
    size_t n_params, n_bufs;
    int n_ops;
    FOp *ops;
    int *slot_c;        // channels per slot
    float *weights;     // folded conv weights (RSCK, GEMM panels or Winograd u) and biases, fc weight and bias
    size_t n_weights;
    uint32_t state_crc; // CRC-32C of the params and bufs of the last fold (fold_sync)
    float *tmp;         // one folded KRSC conv weight before its Winograd transform
    size_t tmp_floats;
    // Current plan.
    int N, H, W;
    TensorDim *dims;
    int *slot_buf;      // buffer index per slot, -1 when the slot does not exist
    int n_buf;
    size_t buf_floats;
    float *arena;
    size_t arena_floats;
    float *logits;      // [N, classes] of the last forward
    size_t logits_cap;
};

FoldNet *fold_create(const ResNet *m) { return fold_create_ex(m, 1); }

FoldNet *fold_create_ex(const ResNet *m, int winograd) {
    FOp *ops = ct_zalloc((size_t)m->n_ops * sizeof(FOp));
    int *producer = ct_alloc((size_t)m->n_tensors * sizeof(int));  // folded op writing each slot
    for (int t = 0; t < m->n_tensors; t++) producer[t] = -1;
    int n = 0;
    size_t nw = 0, tmp = 0;
    for (int i = 0; i < m->n_ops; i++) {
        const Op *op = &m->ops[i];
        FOp *f = &ops[n];
        *f = (FOp){.kind = op->kind, .in = op->in, .in2 = op->in2, .out = op->out, .relu = op->relu, .C = op->C,
                   .K = op->K, .R = op->R, .S = op->S, .stride = op->stride, .pad = op->pad, .groups = op->groups > 1 ? op->groups : 1, .e_w = -1, .e_g = -1,
                   .e_b = -1, .e_rm = -1, .e_rv = -1, .e_fcb = -1};
        snprintf(f->name, sizeof f->name, "%s", op->name);
        switch (op->kind) {
        case OP_CONV: {
            const Op *bn = i + 1 < m->n_ops ? &m->ops[i + 1] : NULL;
            if (!bn || bn->kind != OP_BN || bn->in != op->out || resnet_slot_readers(m, op->out, m->n_ops) != 1) goto unfoldable;
            f->e_w = op->w, f->e_g = bn->w, f->e_b = bn->b, f->e_rm = bn->rm, f->e_rv = bn->rv;
            f->out = bn->out, f->relu = bn->relu;
            const ConvShape probe = {1, 3, 3, op->C, op->K, op->R, op->S, op->stride, op->pad, 3, 3, 1};
            f->wino = winograd && f->groups == 1 && winograd_ok(&probe);
            const size_t packed = f->wino || f->groups > 1 ? 0 : conv2d_packed_weights_size(&probe);
            f->packed = packed > 0;
            f->w_off = nw, nw += f->wino ? (size_t)16 * op->C * op->K : f->packed ? packed : m->entries[op->w].count;
            f->b_off = nw, nw += op->K;
            tmp = CT_MAX(tmp, f->wino || f->packed ? m->entries[op->w].count : 0);
            i++;  // the BN is inside the conv now
            break;
        }
        case OP_ADD: {
            // Fold the add into the later-produced operand's conv (the other operand is ready by
            // then), when that conv has no ReLU of its own and the add is its output's only reader.
            int pa = producer[op->in], pb = producer[op->in2];
            int p = pa > pb ? pa : pb, other = pa > pb ? op->in2 : op->in;
            if (p >= 0 && ops[p].kind == OP_CONV && ops[p].in2 < 0 && !ops[p].relu &&
                resnet_slot_readers(m, ops[p].out, m->n_ops) == 1) {
                producer[ops[p].out] = -1;
                ops[p].in2 = other;
                ops[p].out = op->out;
                ops[p].relu = op->relu;
                producer[op->out] = p;
                continue;
            }
            break;
        }
        case OP_FC:
            f->e_w = op->w, f->e_fcb = op->b;
            f->w_off = nw, nw += m->entries[op->w].count;
            f->b_off = nw, nw += op->K;
            break;
        case OP_MAXPOOL:
        case OP_RELU:
        case OP_AVGPOOL:
        case OP_BLUR:  // BlurPool's blur stays a layer of its own: it precedes the conv, no BN to fold
            break;
        default:
            goto unfoldable;
        }
        producer[f->out] = n++;
    }
    free(producer);
    FoldNet *fn = ct_zalloc(sizeof *fn);
    snprintf(fn->arch, sizeof fn->arch, "%s", m->arch);
    fn->in_channels = m->in_channels;
    fn->num_classes = m->num_classes;
    fn->blurpool = m->blurpool;
    fn->n_tensors = m->n_tensors;
    fn->n_params = m->n_params;
    fn->n_bufs = m->n_bufs;
    fn->n_ops = n;
    fn->ops = ops;
    fn->slot_c = ct_alloc((size_t)m->n_tensors * sizeof(int));
    for (int t = 0; t < m->n_tensors; t++) fn->slot_c[t] = m->tensors[t].C;
    fn->n_weights = nw;
    fn->weights = ct_alloc(CT_MAX(nw, 1) * sizeof(float));
    fn->tmp_floats = tmp;
    fn->tmp = tmp ? ct_alloc(tmp * sizeof(float)) : NULL;
    fn->dims = ct_alloc((size_t)m->n_tensors * sizeof(TensorDim));
    fn->slot_buf = ct_alloc((size_t)m->n_tensors * sizeof(int));
    fold_refresh(fn, m);
    return fn;
unfoldable:
    free(producer);
    free(ops);
    return NULL;
}

static uint32_t state_crc(const ResNet *m) {
    return crc32c(crc32c(0, m->params, m->n_params * sizeof(float)), m->bufs, m->n_bufs * sizeof(float));
}

int fold_sync(FoldNet *f, const ResNet *m) {
    if (state_crc(m) == f->state_crc) return 0;
    fold_refresh(f, m);
    return 1;
}

void fold_refresh(FoldNet *f, const ResNet *m) {
    if (strcmp(f->arch, m->arch) || f->n_params != m->n_params || f->n_bufs != m->n_bufs ||
        f->num_classes != m->num_classes || f->in_channels != m->in_channels || f->blurpool != m->blurpool)
        ct_die("fold_refresh: %s is not the network this fold was made from (%s)", m->arch, f->arch);
    for (int i = 0; i < f->n_ops; i++) {
        const FOp *op = &f->ops[i];
        if (op->kind == OP_FC) {
            const StateEntry *w = &m->entries[op->e_w];
            memcpy(f->weights + op->w_off, m->params + w->offset, w->count * sizeof(float));
            for (int k = 0; k < op->K; k++)
                f->weights[op->b_off + k] = op->e_fcb >= 0 ? m->params[m->entries[op->e_fcb].offset + k] : 0.0f;
            continue;
        }
        if (op->kind != OP_CONV) continue;
        const float *w = m->params + m->entries[op->e_w].offset;
        const float *gamma = m->params + m->entries[op->e_g].offset, *beta = m->params + m->entries[op->e_b].offset;
        const float *rm = m->bufs + m->entries[op->e_rm].offset, *rv = m->bufs + m->entries[op->e_rv].offset;
        const size_t rsc = (size_t)op->R * op->S * op->C / op->groups;
        float *wf = op->wino || op->packed ? f->tmp : f->weights + op->w_off, *bias = f->weights + op->b_off;
        // The scale and shift in double, each rounded once to float. Direct convs keep the weights
        // RSCK (conv2d_forward_ep) or pack them from RSCK; Winograd's transform reads them KRSC.
        const int K = op->K;
        double *sc = ct_alloc((size_t)K * sizeof(double));
        for (int k = 0; k < K; k++) {
            sc[k] = gamma[k] / sqrt((double)rv[k] + BN_EPS);
            bias[k] = (float)(beta[k] - rm[k] * sc[k]);
        }
        if (op->groups > 1) {  // grouped: the weights stay KRSC (conv2d_grouped_forward's layout)
            for (int k = 0; k < K; k++)
                for (size_t j = 0; j < rsc; j++) wf[k * rsc + j] = (float)(w[k * rsc + j] * sc[k]);
        } else if (op->wino) {
#pragma omp parallel for schedule(static)
            for (int k = 0; k < K; k++)
                for (size_t j = 0; j < rsc; j++) wf[k * rsc + j] = (float)(w[k * rsc + j] * sc[k]);
            winograd_weights(f->weights + op->w_off, wf, K, op->C);
        } else {
            // Transposed in 16-column strips: the reads of a row stay within a cache line, and the
            // 16 rows being written stay in cache while k runs.
#pragma omp parallel for schedule(static)
            for (size_t j0 = 0; j0 < rsc; j0 += 16)
                for (int k = 0; k < K; k++)
                    for (size_t j = j0; j < CT_MIN(j0 + 16, rsc); j++) wf[j * K + k] = (float)(w[k * rsc + j] * sc[k]);
            if (op->packed) {
                const ConvShape probe = {1, 3, 3, op->C, K, op->R, op->S, op->stride, op->pad, 3, 3, 1};
                conv2d_pack_weights(&probe, f->weights + op->w_off, wf);
            }
        }
        free(sc);
    }
    f->state_crc = state_crc(m);
}

void fold_free(FoldNet *f) {
    if (!f) return;
    free(f->ops);
    free(f->slot_c);
    free(f->weights);
    free(f->tmp);
    free(f->dims);
    free(f->slot_buf);
    free(f->arena);
    free(f->logits);
    free(f);
}

int fold_op_count(const FoldNet *f) { return f->n_ops; }
size_t fold_arena_bytes(const FoldNet *f) { return f->arena_floats * sizeof(float); }

// ---------------------------------------------------------------------------------------------
// Planning: shapes, then buffers by lifetime.
static int out_dims(const FOp *op, TensorDim in, int C_out, TensorDim *out) {
    switch (op->kind) {
    case OP_CONV:
    case OP_MAXPOOL: {
        const int R = op->R, S = op->kind == OP_MAXPOOL ? op->R : op->S;
        if (in.H + 2 * op->pad < R || in.W + 2 * op->pad < S) return -1;
        *out = (TensorDim){(in.H + 2 * op->pad - R) / op->stride + 1, (in.W + 2 * op->pad - S) / op->stride + 1, C_out};
        break;
    }
    case OP_AVGPOOL:
    case OP_FC:
        *out = (TensorDim){1, 1, C_out};
        break;
    default:
        *out = (TensorDim){in.H, in.W, C_out};
    }
    return out->H >= 1 && out->W >= 1 ? 0 : -1;
}

static void plan(FoldNet *f, int N, int H, int W) {
    const int T = f->n_tensors;
    for (int t = 0; t < T; t++) f->dims[t] = (TensorDim){0, 0, 0};
    f->dims[0] = (TensorDim){H, W, f->in_channels};
    size_t max_slot = (size_t)H * W * f->in_channels;
    for (int i = 0; i < f->n_ops; i++) {
        const FOp *op = &f->ops[i];
        if (out_dims(op, f->dims[op->in], f->slot_c[op->out], &f->dims[op->out]) != 0)
            ct_die("%s: input %dx%d is too small for the network (a feature map would be empty)", f->arch, H, W);
        const TensorDim d = f->dims[op->out];
        max_slot = CT_MAX(max_slot, (size_t)d.H * d.W * d.C);
    }
    int *last = ct_alloc((size_t)T * sizeof(int));  // last reader of each slot (n_ops: never freed)
    for (int t = 0; t < T; t++) last[t] = -1, f->slot_buf[t] = -1;
    for (int i = 0; i < f->n_ops; i++) {
        last[f->ops[i].in] = i;
        if (f->ops[i].in2 >= 0) last[f->ops[i].in2] = i;
    }
    last[T - 1] = f->n_ops;
    int busy[64] = {0}, nbuf = 0;
    f->slot_buf[0] = 0, busy[0] = 1, nbuf = 1;
    for (int i = 0; i < f->n_ops; i++) {
        const FOp *op = &f->ops[i];
        int b = 0;
        while (b < nbuf && busy[b]) b++;
        if (b == nbuf) {
            if (nbuf == 64) ct_die("%s: fold plan needs more than 64 buffers", f->arch);
            nbuf++;
        }
        busy[b] = 1;
        f->slot_buf[op->out] = b;
        if (last[op->in] == i) busy[f->slot_buf[op->in]] = 0;
        if (op->in2 >= 0 && last[op->in2] == i) busy[f->slot_buf[op->in2]] = 0;
    }
    free(last);
    f->n_buf = nbuf;
    f->buf_floats = (size_t)N * max_slot;
    const size_t total = (size_t)nbuf * f->buf_floats;
    if (total > f->arena_floats) {
        free(f->arena);
        f->arena = ct_alloc(total * sizeof(float));
        f->arena_floats = total;
    }
    f->N = N, f->H = H, f->W = W;
}

static void ensure_plan(FoldNet *f, int N, int H, int W) {
    if (N < 1) ct_die("%s: batch size %d", f->arch, N);
    if (f->N && H == f->H && W == f->W && N <= f->N) return;
    plan(f, f->N && H == f->H && W == f->W ? CT_MAX(N, f->N) : N, H, W);
}

static float *slot(FoldNet *f, int t) { return f->arena + (size_t)f->slot_buf[t] * f->buf_floats; }

static const float *run(FoldNet *f, int N) {
    for (int i = 0; i < f->n_ops; i++) {
        const FOp *op = &f->ops[i];
        const TensorDim din = f->dims[op->in], dout = f->dims[op->out];
        const float *x = slot(f, op->in);
        float *y = slot(f, op->out);
        switch (op->kind) {
        case OP_CONV: {
            ConvShape s = conv_shape_g(N, din.H, din.W, din.C, op->K, op->R, op->S, op->stride, op->pad, op->groups);
            const float *res = op->in2 >= 0 ? slot(f, op->in2) : NULL;
            if (op->groups > 1)
                conv2d_grouped_forward(&s, y, x, f->weights + op->w_off, f->weights + op->b_off, res, op->relu);
            else if (op->wino) conv3x3_winograd_ep(&s, y, x, f->weights + op->w_off, f->weights + op->b_off, res, op->relu);
            else conv2d_forward_ep(&s, y, x, f->weights + op->w_off, op->packed, f->weights + op->b_off, res, op->relu);
            break;
        }
        case OP_FC:
            linear_forward(y, x, f->weights + op->w_off, f->weights + op->b_off, N, op->C, op->K);
            break;
        default:
            if (cpu_plain_op_forward(op->kind, y, x, op->in2 >= 0 ? slot(f, op->in2) : NULL, N, din, dout, op->R,
                                     op->stride, op->pad, op->relu) != 0)
                ct_die("%s: folded op %d (%s) has unknown kind %d", f->arch, i, op->name, op->kind);
        }
    }
    return slot(f, f->n_tensors - 1);
}

// A batch runs CHUNK images at a time: the buffers stay bounded (a resnet50 eval batch of 256
// would otherwise hold 4 x 822 MB), and each image's logits do not depend on its batch anyway.
#define CHUNK 16

static const float *forward(FoldNet *f, const float *xf, const uint8_t *xu, int N, int H, int W, const float *mean,
                            const float *std) {
    if (N < 1) ct_die("%s: batch size %d", f->arch, N);
    const size_t pix = (size_t)H * W, nl = (size_t)N * f->num_classes;
    if (nl > f->logits_cap) {
        free(f->logits);
        f->logits = ct_alloc(nl * sizeof(float));
        f->logits_cap = nl;
    }
    for (int n0 = 0; n0 < N; n0 += CHUNK) {
        const int n = CT_MIN(CHUNK, N - n0);
        ensure_plan(f, n, H, W);
        if (xf) memcpy(slot(f, 0), xf + n0 * pix * f->in_channels, n * pix * f->in_channels * sizeof(float));
        else normalize_u8(slot(f, 0), xu + n0 * pix * f->in_channels, n * pix, f->in_channels, mean, std);
        memcpy(f->logits + (size_t)n0 * f->num_classes, run(f, n), (size_t)n * f->num_classes * sizeof(float));
    }
    return f->logits;
}

const float *fold_forward(FoldNet *f, const float *x, int N, int H, int W) {
    return forward(f, x, NULL, N, H, W, NULL, NULL);
}

const float *fold_forward_u8(FoldNet *f, const uint8_t *x, int N, int H, int W, const float *mean,
                             const float *std) {
    return forward(f, NULL, x, N, H, W, mean, std);
}
