// ResNet graph builder: ops, tensor slots, state table, torchvision initialisation.
#include "nn/resnet.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "util/common.h"
#include "util/rng.h"

typedef struct {
    const char *name;
    int depth, cifar, bottleneck;
    int blocks[4];  // blocks per stage (CIFAR: 3 stages)
    int groups, width_per_group;  // torchvision's Bottleneck arguments (1, 64 for plain ResNets)
} ArchSpec;

static const ArchSpec ARCHS[] = {
    {"resnet18", 18, 0, 0, {2, 2, 2, 2}, 1, 64},    {"resnet34", 34, 0, 0, {3, 4, 6, 3}, 1, 64},
    {"resnet50", 50, 0, 1, {3, 4, 6, 3}, 1, 64},    {"resnet101", 101, 0, 1, {3, 4, 23, 3}, 1, 64},
    {"resnet152", 152, 0, 1, {3, 8, 36, 3}, 1, 64}, {"resnet20", 20, 1, 0, {3, 3, 3, 0}, 1, 64},
    {"resnet32", 32, 1, 0, {5, 5, 5, 0}, 1, 64},    {"resnet44", 44, 1, 0, {7, 7, 7, 0}, 1, 64},
    {"resnet56", 56, 1, 0, {9, 9, 9, 0}, 1, 64},    {"resnet110", 110, 1, 0, {18, 18, 18, 0}, 1, 64},
    {"resnext50_32x4d", 50, 0, 1, {3, 4, 6, 3}, 32, 4},
    {"resnext101_32x8d", 101, 0, 1, {3, 4, 23, 3}, 32, 8},
    {"resnext101_64x4d", 101, 0, 1, {3, 4, 23, 3}, 64, 4},
    {"wide_resnet50_2", 50, 0, 1, {3, 4, 6, 3}, 1, 128},
    {"wide_resnet101_2", 101, 0, 1, {3, 4, 23, 3}, 1, 128},
};

static const ArchSpec *find_arch(const char *arch) {
    if (!arch) return NULL;
    for (size_t i = 0; i < CT_ARRAY_LEN(ARCHS); i++)
        if (strcmp(ARCHS[i].name, arch) == 0) return &ARCHS[i];
    return NULL;
}

int resnet_arch_valid(const char *arch) { return find_arch(arch) != NULL; }

const char *resnet_op_kind_name(int kind) {
    switch (kind) {
    case OP_CONV: return "conv";
    case OP_BN: return "batchnorm";
    case OP_RELU: return "relu";
    case OP_MAXPOOL: return "maxpool";
    case OP_ADD: return "add";
    case OP_AVGPOOL: return "avgpool";
    case OP_FC: return "fc";
    case OP_BLUR: return "blur";
    case OP_DROP_PATH: return "drop_path";
    }
    return "?";
}

const char *resnet_arch_list(void) {
    return "resnet18, resnet34, resnet50, resnet101, resnet152, resnext50_32x4d, resnext101_32x8d, resnext101_64x4d, "
           "wide_resnet50_2, wide_resnet101_2, resnet20, resnet32, resnet44, resnet56, resnet110";
}

// ---------------------------------------------------------------------------------------------
// Builder: appends ops, slots and entries with growable arrays.
typedef struct {
    ResNet *m;
    int cap_ops, cap_tensors, cap_entries;
    int blur_in, blur_out;  // the last blur's input and output slots (-1: none yet)
    int block, n_blocks;    // stochastic depth: this block's index over the network, and their count
} Builder;

static size_t align_up(size_t n) {
    return (n + RESNET_PARAM_ALIGN - 1) / RESNET_PARAM_ALIGN * RESNET_PARAM_ALIGN;
}

// The flat parameter layout, in the order backward produces the gradients (the ops walked
// backwards): at[entry] = its offset, done[op] (may be NULL) = the end of its tensors; padded: each
// tensor's end rounded up to RESNET_PARAM_ALIGN, else back to back (builds before the padding).
// Returns the flat size.
static size_t param_layout(const ResNet *m, int padded, size_t *at, size_t *done) {
    size_t off = 0;
    for (int i = m->n_ops - 1; i >= 0; i--) {
        const Op *o = &m->ops[i];
        int ids[2] = {o->w, o->b};
        for (int k = 0; k < 2; k++) {
            if (ids[k] < 0) continue;
            at[ids[k]] = off;
            off += m->entries[ids[k]].count;
            if (padded) off = align_up(off);
        }
        if (done) done[i] = off;
    }
    return off;
}

static int new_slot(Builder *b, int C) {
    ResNet *m = b->m;
    if (m->n_tensors == b->cap_tensors) {
        b->cap_tensors = b->cap_tensors ? 2 * b->cap_tensors : 64;
        m->tensors = ct_realloc(m->tensors, b->cap_tensors * sizeof(TensorSlot));
    }
    m->tensors[m->n_tensors].C = C;
    return m->n_tensors++;
}

static Op *new_op(Builder *b, int kind, const char *name) {
    ResNet *m = b->m;
    if (m->n_ops == b->cap_ops) {
        b->cap_ops = b->cap_ops ? 2 * b->cap_ops : 64;
        m->ops = ct_realloc(m->ops, b->cap_ops * sizeof(Op));
    }
    Op *op = &m->ops[m->n_ops++];
    memset(op, 0, sizeof *op);
    op->kind = kind;
    op->in = op->in2 = op->out = -1;
    op->groups = 1;
    op->w = op->b = op->rm = op->rv = op->nbt = -1;
    snprintf(op->name, sizeof op->name, "%s", name);
    return op;
}

static int new_entry(Builder *b, const char *prefix, const char *suffix, int kind, int ndim,
                     const int64_t *shape, int is_conv, int no_decay) {
    ResNet *m = b->m;
    if (m->n_entries == b->cap_entries) {
        b->cap_entries = b->cap_entries ? 2 * b->cap_entries : 128;
        m->entries = ct_realloc(m->entries, b->cap_entries * sizeof(StateEntry));
    }
    StateEntry *e = &m->entries[m->n_entries];
    memset(e, 0, sizeof *e);
    snprintf(e->name, sizeof e->name, "%s%s%s", prefix, prefix[0] ? "." : "", suffix);
    e->kind = kind;
    e->ndim = ndim;
    e->count = 1;
    for (int i = 0; i < ndim; i++) {
        e->shape[i] = shape[i];
        e->count *= (size_t)shape[i];
    }
    e->is_conv = is_conv;
    e->no_decay = no_decay;
    if (kind == ENTRY_BUF) {
        e->offset = m->n_bufs;
        m->n_bufs += e->count;
    } else if (kind == ENTRY_COUNT) {
        e->offset = m->n_counts;
        m->n_counts += e->count;
    }
    // ENTRY_PARAM offsets are assigned after the graph is complete (backward order).
    return m->n_entries++;
}

// BlurPool (ResNet.blurpool): FFCV's rule, stride > 1 and at least 16 input channels, puts the
// blur on the conv's input; a second strided conv of the same tensor reuses that blur.
static int blur_input(Builder *b, const char *conv_name, int in) {
    if (b->blur_in == in) return b->blur_out;
    char n[48];
    snprintf(n, sizeof n, "%s.blur", conv_name);
    Op *op = new_op(b, OP_BLUR, n);
    op->in = in;
    op->C = op->K = b->m->tensors[in].C;
    op->R = op->S = 3;
    op->stride = op->pad = 1;
    op->out = new_slot(b, op->C);
    b->blur_in = in;
    b->blur_out = op->out;
    return op->out;
}

static int add_conv_g(Builder *b, const char *name, int in, int K, int R, int stride, int pad, int groups) {
    int C = b->m->tensors[in].C;
    if (b->m->blurpool && stride > 1 && C >= 16) in = blur_input(b, name, in);
    int64_t shape[4] = {K, C / groups, R, R};
    int w = new_entry(b, name, "weight", ENTRY_PARAM, 4, shape, 1, 0);
    Op *op = new_op(b, OP_CONV, name);
    op->in = in;
    op->C = C;
    op->K = K;
    op->R = op->S = R;
    op->stride = stride;
    op->pad = pad;
    op->groups = groups;
    op->w = w;
    op->out = new_slot(b, K);
    return op->out;
}

static int add_conv(Builder *b, const char *name, int in, int K, int R, int stride, int pad) {
    return add_conv_g(b, name, in, K, R, stride, pad, 1);
}

static int add_bn(Builder *b, const char *name, int in, int relu) {
    int C = b->m->tensors[in].C;
    int64_t shape[1] = {C};
    int w = new_entry(b, name, "weight", ENTRY_PARAM, 1, shape, 0, 1);
    int bb = new_entry(b, name, "bias", ENTRY_PARAM, 1, shape, 0, 1);
    int rm = new_entry(b, name, "running_mean", ENTRY_BUF, 1, shape, 0, 0);
    int rv = new_entry(b, name, "running_var", ENTRY_BUF, 1, shape, 0, 0);
    int nbt = new_entry(b, name, "num_batches_tracked", ENTRY_COUNT, 0, NULL, 0, 0);
    Op *op = new_op(b, OP_BN, name);
    op->in = in;
    op->C = op->K = C;
    op->relu = relu;
    op->w = w;
    op->b = bb;
    op->rm = rm;
    op->rv = rv;
    op->nbt = nbt;
    op->out = new_slot(b, C);
    return op->out;
}

static int add_add(Builder *b, const char *name, int a, int c, int relu) {
    Op *op = new_op(b, OP_ADD, name);
    op->in = a;
    op->in2 = c;
    op->C = op->K = b->m->tensors[a].C;
    op->relu = relu;
    op->out = new_slot(b, op->C);
    return op->out;
}

// timm's DropPath on the branch t, after its last BN (and before the shortcut's ADD), with timm's
// linear rule block_dpr = drop_path_rate * net_block_idx / (net_num_blocks - 1) (make_blocks in
// timm/models/resnet.py), in double as Python computes it; no op where that is 0 (the first block).
static int add_drop_path(Builder *b, const char *prefix, int t) {
    int idx = b->block++;
    if (!(b->m->drop_path > 0) || b->n_blocks < 2) return t;
    double p = b->m->drop_path * idx / (b->n_blocks - 1);
    if (!(p > 0)) return t;
    char n[48];
    snprintf(n, sizeof n, "%s.drop_path", prefix);
    Op *op = new_op(b, OP_DROP_PATH, n);
    op->in = t;
    op->C = op->K = b->m->tensors[t].C;
    op->drop = p;
    op->drop_block = idx;
    op->out = new_slot(b, op->C);
    return op->out;
}

// BasicBlock (expansion 1): conv3x3(stride) bn relu conv3x3 bn, + shortcut, relu.
static int basic_block(Builder *b, const char *prefix, int x, int planes, int stride) {
    char n[48];
    int inplanes = b->m->tensors[x].C;
    snprintf(n, sizeof n, "%s.conv1", prefix);
    int t = add_conv(b, n, x, planes, 3, stride, 1);
    snprintf(n, sizeof n, "%s.bn1", prefix);
    t = add_bn(b, n, t, 1);
    snprintf(n, sizeof n, "%s.conv2", prefix);
    t = add_conv(b, n, t, planes, 3, 1, 1);
    snprintf(n, sizeof n, "%s.bn2", prefix);
    t = add_bn(b, n, t, 0);
    t = add_drop_path(b, prefix, t);
    int sc = x;
    if (stride != 1 || inplanes != planes) {
        snprintf(n, sizeof n, "%s.downsample.0", prefix);
        sc = add_conv(b, n, x, planes, 1, stride, 0);
        snprintf(n, sizeof n, "%s.downsample.1", prefix);
        sc = add_bn(b, n, sc, 0);
    }
    return add_add(b, prefix, t, sc, 1);
}

// Bottleneck (expansion 4, torchvision v1.5: the stride sits on the 3x3), with torchvision's
// width = int(planes * width_per_group / 64) * groups for conv1/conv2 and conv2 in `groups`.
static int bottleneck_block(Builder *b, const char *prefix, int x, int planes, int stride) {
    char n[48];
    int inplanes = b->m->tensors[x].C;
    const int groups = b->m->groups, width = planes * b->m->width_per_group / 64 * groups;
    snprintf(n, sizeof n, "%s.conv1", prefix);
    int t = add_conv(b, n, x, width, 1, 1, 0);
    snprintf(n, sizeof n, "%s.bn1", prefix);
    t = add_bn(b, n, t, 1);
    snprintf(n, sizeof n, "%s.conv2", prefix);
    t = add_conv_g(b, n, t, width, 3, stride, 1, groups);
    snprintf(n, sizeof n, "%s.bn2", prefix);
    t = add_bn(b, n, t, 1);
    snprintf(n, sizeof n, "%s.conv3", prefix);
    t = add_conv(b, n, t, planes * 4, 1, 1, 0);
    snprintf(n, sizeof n, "%s.bn3", prefix);
    t = add_bn(b, n, t, 0);
    t = add_drop_path(b, prefix, t);
    int sc = x;
    if (stride != 1 || inplanes != planes * 4) {
        snprintf(n, sizeof n, "%s.downsample.0", prefix);
        sc = add_conv(b, n, x, planes * 4, 1, stride, 0);
        snprintf(n, sizeof n, "%s.downsample.1", prefix);
        sc = add_bn(b, n, sc, 0);
    }
    return add_add(b, prefix, t, sc, 1);
}

ResNet *resnet_create(const char *arch, int in_channels, int num_classes) {
    return resnet_create_ex(arch, in_channels, num_classes, 0);
}

ResNet *resnet_create_ex(const char *arch, int in_channels, int num_classes, int blurpool) {
    return resnet_create_dp(arch, in_channels, num_classes, blurpool, 0.0);
}

ResNet *resnet_create_dp(const char *arch, int in_channels, int num_classes, int blurpool, double drop_path) {
    const ArchSpec *a = find_arch(arch);
    if (!a || in_channels < 1 || num_classes < 1 || !(drop_path >= 0 && drop_path < 1)) return NULL;
    ResNet *m = ct_zalloc(sizeof *m);
    snprintf(m->arch, sizeof m->arch, "%s", a->name);
    m->depth = a->depth;
    m->cifar = a->cifar;
    m->bottleneck = a->bottleneck;
    m->groups = a->groups;
    m->width_per_group = a->width_per_group;
    m->in_channels = in_channels;
    m->num_classes = num_classes;
    m->blurpool = blurpool != 0;
    m->drop_path = drop_path;
    Builder b = {m, 0, 0, 0, -1, -1, 0, 0};
    for (int s = 0; s < 4; s++) b.n_blocks += a->blocks[s];

    int x = new_slot(&b, in_channels);
    int n_stages = a->cifar ? 3 : 4;
    if (a->cifar) {
        x = add_conv(&b, "conv1", x, 16, 3, 1, 1);
        x = add_bn(&b, "bn1", x, 1);
    } else {
        x = add_conv(&b, "conv1", x, 64, 7, 2, 3);
        x = add_bn(&b, "bn1", x, 1);
        Op *op = new_op(&b, OP_MAXPOOL, "maxpool");
        op->in = x;
        op->C = op->K = 64;
        op->R = op->S = 3;
        op->stride = 2;
        op->pad = 1;
        op->out = new_slot(&b, 64);
        x = op->out;
    }
    for (int s = 0; s < n_stages; s++) {
        int planes = (a->cifar ? 16 : 64) << s;
        for (int i = 0; i < a->blocks[s]; i++) {
            char prefix[32];
            snprintf(prefix, sizeof prefix, "layer%d.%d", s + 1, i);
            int stride = (s > 0 && i == 0) ? 2 : 1;
            x = a->bottleneck ? bottleneck_block(&b, prefix, x, planes, stride)
                              : basic_block(&b, prefix, x, planes, stride);
        }
    }
    Op *op = new_op(&b, OP_AVGPOOL, "avgpool");
    op->in = x;
    op->C = op->K = m->tensors[x].C;
    op->out = new_slot(&b, op->C);
    x = op->out;
    int I = m->tensors[x].C;
    int64_t wshape[2] = {num_classes, I}, bshape[1] = {num_classes};
    int w = new_entry(&b, "fc", "weight", ENTRY_PARAM, 2, wshape, 0, 0);
    int bias = new_entry(&b, "fc", "bias", ENTRY_PARAM, 1, bshape, 0, 1);
    op = new_op(&b, OP_FC, "fc");
    op->in = x;
    op->C = I;
    op->K = num_classes;
    op->w = w;
    op->b = bias;
    op->out = new_slot(&b, num_classes);

    // Parameter offsets in the order backward produces the gradients: walk the ops backwards.
    // Every tensor starts at a multiple of RESNET_PARAM_ALIGN elements (see resnet.h); an op's
    // grad_done includes the gap after its tensors, so the buckets cover the whole flat array.
    size_t *at = ct_alloc(CT_MAX((size_t)m->n_entries, 1) * sizeof(size_t));
    size_t *done = ct_alloc(CT_MAX((size_t)m->n_ops, 1) * sizeof(size_t));
    m->n_params = param_layout(m, 1, at, done);
    for (int i = 0; i < m->n_ops; i++) m->ops[i].grad_done = done[i];
    for (int i = 0; i < m->n_entries; i++)
        if (m->entries[i].kind == ENTRY_PARAM) m->entries[i].offset = at[i];
    free(at);
    free(done);
    m->params = ct_zalloc(CT_MAX(m->n_params, 1) * sizeof(float));
    m->bufs = ct_zalloc(CT_MAX(m->n_bufs, 1) * sizeof(float));
    m->counts = ct_zalloc(CT_MAX(m->n_counts, 1) * sizeof(int64_t));
    for (int i = 0; i < m->n_entries; i++) {
        StateEntry *e = &m->entries[i];
        if (e->kind == ENTRY_BUF && strstr(e->name, "running_var"))
            for (size_t j = 0; j < e->count; j++) m->bufs[e->offset + j] = 1.0f;
    }
    return m;
}

void resnet_free(ResNet *m) {
    if (!m) return;
    free(m->ops);
    free(m->tensors);
    free(m->entries);
    free(m->params);
    free(m->bufs);
    free(m->counts);
    free(m);
}

size_t resnet_param_count(const ResNet *m) {
    size_t n = 0;
    for (int i = 0; i < m->n_entries; i++)
        if (m->entries[i].kind == ENTRY_PARAM) n += m->entries[i].count;
    return n;
}

void resnet_params_unpack(const ResNet *m, float *dst, const float *packed) {
    size_t *at = ct_alloc(CT_MAX((size_t)m->n_entries, 1) * sizeof(size_t));
    param_layout(m, 0, at, NULL);  // the layout of builds before the padding
    memset(dst, 0, m->n_params * sizeof(float));
    for (int i = 0; i < m->n_entries; i++) {
        const StateEntry *e = &m->entries[i];
        if (e->kind == ENTRY_PARAM) memcpy(dst + e->offset, packed + at[i], e->count * sizeof(float));
    }
    free(at);
}

void resnet_zero_padding(const ResNet *m, float *flat) {
    // The gaps are what follows each tensor up to the next multiple of RESNET_PARAM_ALIGN.
    for (int i = 0; i < m->n_entries; i++) {
        const StateEntry *e = &m->entries[i];
        if (e->kind != ENTRY_PARAM) continue;
        size_t end = e->offset + e->count;
        memset(flat + end, 0, (align_up(end) - end) * sizeof(float));
    }
}

static int ends_with(const char *s, const char *suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

void resnet_init(ResNet *m, uint64_t seed, int zero_init_residual) {
    for (int i = 0; i < m->n_entries; i++) {
        StateEntry *e = &m->entries[i];
        Rng r = rng_make(seed, (uint64_t)i, 0x5EED);
        if (e->kind == ENTRY_COUNT) {
            for (size_t j = 0; j < e->count; j++) m->counts[e->offset + j] = 0;
            continue;
        }
        if (e->kind == ENTRY_BUF) {
            float v = ends_with(e->name, "running_var") ? 1.0f : 0.0f;
            for (size_t j = 0; j < e->count; j++) m->bufs[e->offset + j] = v;
            continue;
        }
        float *p = m->params + e->offset;
        if (e->is_conv) {
            // kaiming_normal_(mode='fan_out', nonlinearity='relu'): std = sqrt(2 / (K*R*S)).
            double fan_out = (double)e->shape[0] * e->shape[2] * e->shape[3];
            float std = (float)sqrt(2.0 / fan_out);
            for (size_t j = 0; j < e->count; j++) p[j] = std * rng_normal(&r);
        } else if (strncmp(e->name, "fc.", 3) == 0) {
            // nn.Linear default: kaiming_uniform_(a=sqrt(5)) gives bound 1/sqrt(fan_in); the bias
            // uses the same bound.
            int fan_in = (int)m->entries[resnet_find_entry(m, "fc.weight")].shape[1];
            float bound = 1.0f / sqrtf((float)fan_in);
            for (size_t j = 0; j < e->count; j++) p[j] = bound * (2.0f * rng_uniform(&r) - 1.0f);
        } else {
            // BatchNorm: weight 1, bias 0.
            float v = ends_with(e->name, ".weight") ? 1.0f : 0.0f;
            for (size_t j = 0; j < e->count; j++) p[j] = v;
        }
    }
    if (zero_init_residual) {
        const char *last = m->bottleneck ? ".bn3.weight" : ".bn2.weight";
        for (int i = 0; i < m->n_entries; i++) {
            StateEntry *e = &m->entries[i];
            if (strncmp(e->name, "layer", 5) == 0 && ends_with(e->name, last))
                memset(m->params + e->offset, 0, e->count * sizeof(float));
        }
    }
}

int resnet_slot_readers(const ResNet *m, int s, int n_ops) {
    int r = 0;
    for (int j = 0; j < n_ops; j++) r += (m->ops[j].in == s) + (m->ops[j].kind == OP_ADD && m->ops[j].in2 == s);
    return r;
}

int resnet_shapes(const ResNet *m, int H, int W, TensorDim *dims) {
    if (H < 1 || W < 1) return -1;
    dims[0].H = H;
    dims[0].W = W;
    dims[0].C = m->in_channels;
    for (int i = 0; i < m->n_ops; i++) {
        const Op *op = &m->ops[i];
        TensorDim in = dims[op->in], out = in;
        out.C = m->tensors[op->out].C;
        switch (op->kind) {
        case OP_CONV:
        case OP_MAXPOOL:
            if (in.H + 2 * op->pad < op->R || in.W + 2 * op->pad < op->S) return -1;
            out.H = (in.H + 2 * op->pad - op->R) / op->stride + 1;
            out.W = (in.W + 2 * op->pad - op->S) / op->stride + 1;
            break;
        case OP_ADD: {
            TensorDim b = dims[op->in2];
            if (b.H != in.H || b.W != in.W || b.C != in.C) return -1;
            break;
        }
        case OP_AVGPOOL:
        case OP_FC:
            out.H = out.W = 1;
            break;
        default:
            break;
        }
        if (out.H < 1 || out.W < 1) return -1;
        dims[op->out] = out;
    }
    return 0;
}

size_t resnet_grad_boundaries(const ResNet *m, size_t *out, size_t max) {
    size_t n = 0;
    for (int i = m->n_ops - 1; i >= 0; i--) {
        if (m->ops[i].w < 0) continue;  // the executors call ready only after ops with parameters
        if (n < max) out[n] = m->ops[i].grad_done;
        n++;
        if (m->freeze_backbone && m->ops[i].kind == OP_FC) break;  // backward stops there too
    }
    return n;
}

size_t *resnet_grad_boundaries_alloc(const ResNet *m, size_t *n) {
    *n = resnet_grad_boundaries(m, NULL, 0);
    size_t *b = ct_alloc(CT_MAX(*n, 1) * sizeof(size_t));
    resnet_grad_boundaries(m, b, *n);
    return b;
}

size_t resnet_trainable(const ResNet *m) {
    if (!m->freeze_backbone) return m->n_params;
    for (int i = m->n_ops - 1; i >= 0; i--)
        if (m->ops[i].kind == OP_FC) return m->ops[i].grad_done;
    return m->n_params;
}

int resnet_find_entry(const ResNet *m, const char *name) {
    for (int i = 0; i < m->n_entries; i++)
        if (strcmp(m->entries[i].name, name) == 0) return i;
    return -1;
}

void oihw_to_krsc(float *dst, const float *src, int K, int C, int R, int S) {
    for (int k = 0; k < K; k++)
        for (int c = 0; c < C; c++)
            for (int r = 0; r < R; r++)
                for (int s = 0; s < S; s++)
                    dst[(((size_t)k * R + r) * S + s) * C + c] = src[(((size_t)k * C + c) * R + r) * S + s];
}

void krsc_to_oihw(float *dst, const float *src, int K, int C, int R, int S) {
    for (int k = 0; k < K; k++)
        for (int c = 0; c < C; c++)
            for (int r = 0; r < R; r++)
                for (int s = 0; s < S; s++)
                    dst[(((size_t)k * C + c) * R + r) * S + s] = src[(((size_t)k * R + r) * S + s) * C + c];
}

void resnet_print(const ResNet *m, FILE *f) {
    static const char *kinds[] = {"conv", "bn", "relu", "maxpool", "add", "avgpool", "fc", "blur", "drop_path"};
    fprintf(f, "%s%s: in_channels %d, classes %d, %d ops, %d slots, %zu params (flat %zu), %zu buffers\n", m->arch,
            m->blurpool ? " (blurpool)" : "", m->in_channels, m->num_classes, m->n_ops, m->n_tensors, resnet_param_count(m), m->n_params,
            m->n_bufs);
    for (int i = 0; i < m->n_ops; i++) {
        const Op *o = &m->ops[i];
        fprintf(f, "  %3d %-8s %-24s in %d in2 %d out %d C %d K %d R %d stride %d pad %d groups %d relu %d grad_done %zu\n",
                i, kinds[o->kind], o->name, o->in, o->in2, o->out, o->C, o->K, o->R, o->stride, o->pad,
                o->groups ? o->groups : 1, o->relu, o->grad_done);
    }
}
