#include "nn/onnx.h"

#include <math.h>
#include <string.h>

#include "util/common.h"
#include "util/varint.h"

// Protobuf wire format: varints (wire type 0) and length-delimited fields (wire type 2) are all
// ONNX needs here. A nested message is built in its own growing buffer and then appended to its
// parent as bytes, so no length has to be known in advance. Field numbers from onnx.proto3:
//   ModelProto { int64 ir_version = 1; string producer_name = 2; string producer_version = 3;
//                string doc_string = 6; GraphProto graph = 7; OperatorSetIdProto opset_import = 8;
//                StringStringEntryProto metadata_props = 14; }
//   OperatorSetIdProto { string domain = 1; int64 version = 2; }
//   StringStringEntryProto { string key = 1; string value = 2; }
//   GraphProto { NodeProto node = 1; string name = 2; TensorProto initializer = 5;
//                ValueInfoProto input = 11; ValueInfoProto output = 12; }
//   NodeProto { string input = 1; string output = 2; string name = 3; string op_type = 4;
//               AttributeProto attribute = 5; }
//   AttributeProto { string name = 1; int64 i = 3; int64 ints = 8; AttributeType type = 20; }
//     (AttributeType INT = 2, INTS = 7)
//   TensorProto { int64 dims = 1; int32 data_type = 2; string name = 8; bytes raw_data = 9; }
//     (DataType FLOAT = 1; raw_data is little-endian, row-major)
//   ValueInfoProto { string name = 1; TypeProto type = 2; }
//   TypeProto { Tensor tensor_type = 1; }  Tensor { int32 elem_type = 1; TensorShapeProto shape = 2; }
//   TensorShapeProto { Dimension dim = 1; }  Dimension { int64 dim_value = 1; string dim_param = 2; }
// Repeated scalars are written one tag per element (unpacked); proto3 parsers accept both forms.
typedef struct {
    uint8_t *p;
    size_t n, cap;
} Pb;

static void pb_put(Pb *b, const void *data, size_t n) {
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n) cap *= 2;
        b->p = ct_realloc(b->p, cap);
        b->cap = cap;
    }
    if (n) memcpy(b->p + b->n, data, n);
    b->n += n;
}
static void pb_varint(Pb *b, uint64_t v) {
    uint8_t tmp[10];
    pb_put(b, tmp, ct_varint_encode(tmp, v));
}
static void pb_int(Pb *b, int field, int64_t v) {
    pb_varint(b, (uint64_t)field << 3);
    pb_varint(b, (uint64_t)v);  // negative int64 as ten bytes, as protobuf does
}
static void pb_bytes(Pb *b, int field, const void *data, size_t n) {
    pb_varint(b, ((uint64_t)field << 3) | 2);
    pb_varint(b, n);
    pb_put(b, data, n);
}
static void pb_str(Pb *b, int field, const char *s) { pb_bytes(b, field, s, strlen(s)); }
// Appends the message sub as field `field` of b, and frees sub.
static void pb_msg(Pb *b, int field, Pb *sub) {
    pb_bytes(b, field, sub->p, sub->n);
    free(sub->p);
    *sub = (Pb){0};
}

enum { T_FLOAT = 1 };
enum { A_INT = 2, A_INTS = 7 };

static void attr_int(Pb *node, const char *name, int64_t v) {
    Pb a = {0};
    pb_str(&a, 1, name);
    pb_int(&a, 3, v);
    pb_int(&a, 20, A_INT);
    pb_msg(node, 5, &a);
}
static void attr_ints(Pb *node, const char *name, const int64_t *v, int n) {
    Pb a = {0};
    pb_str(&a, 1, name);
    for (int i = 0; i < n; i++) pb_int(&a, 8, v[i]);
    pb_int(&a, 20, A_INTS);
    pb_msg(node, 5, &a);
}

// A node of op_type with up to three inputs (NULL ends the list) and one output. The caller adds
// attributes to the returned message, then end_node appends it to the graph.
static Pb begin_node(const char *op_type, const char *name, const char *in0, const char *in1,
                     const char *in2, const char *out) {
    Pb n = {0};
    const char *ins[3] = {in0, in1, in2};
    for (int i = 0; i < 3 && ins[i]; i++) pb_str(&n, 1, ins[i]);
    pb_str(&n, 2, out);
    pb_str(&n, 3, name);
    pb_str(&n, 4, op_type);
    return n;
}
static void end_node(Pb *graph, Pb *node) { pb_msg(graph, 1, node); }

static void initializer(Pb *graph, const char *name, const int64_t *dims, int ndim, const float *data) {
    Pb t = {0};
    size_t count = 1;
    for (int i = 0; i < ndim; i++) {
        pb_int(&t, 1, dims[i]);
        count *= (size_t)dims[i];
    }
    pb_int(&t, 2, T_FLOAT);
    pb_str(&t, 8, name);
    // raw_data is little-endian; so is every machine ctrain builds for (x86-64, aarch64).
    pb_bytes(&t, 9, data, count * sizeof(float));
    pb_msg(graph, 5, &t);
}

// ValueInfoProto of a float tensor; a dimension < 0 is symbolic, named by params[i].
static void value_info(Pb *graph, int field, const char *name, const int64_t *dims, const char *const *params,
                       int ndim) {
    Pb shape = {0};
    for (int i = 0; i < ndim; i++) {
        Pb d = {0};
        if (dims[i] >= 0) pb_int(&d, 1, dims[i]);
        else pb_str(&d, 2, params[i]);
        pb_msg(&shape, 1, &d);
    }
    Pb tensor = {0};
    pb_int(&tensor, 1, T_FLOAT);
    pb_msg(&tensor, 2, &shape);
    Pb type = {0};
    pb_msg(&type, 1, &tensor);
    Pb vi = {0};
    pb_str(&vi, 1, name);
    pb_msg(&vi, 2, &type);
    pb_msg(graph, field, &vi);
}

// The module path of a state entry without its last component ("layer1.0.conv1.weight" -> "layer1.0.conv1").
static void module_of(const ResNet *m, int entry, char *out, size_t len) {
    snprintf(out, len, "%s", m->entries[entry].name);
    char *dot = strrchr(out, '.');
    if (dot) *dot = 0;
}

// Conv weight [K, C, R, S] (OIHW) and bias [K] with the BatchNorm bn folded in.
static void fold_conv_bn(const ResNet *m, const Op *conv, const Op *bn, float *w_oihw, float *bias) {
    const StateEntry *we = &m->entries[conv->w];
    int K = conv->K, C = conv->C / (conv->groups > 1 ? conv->groups : 1), R = conv->R, S = conv->S;  // C per group
    krsc_to_oihw(w_oihw, m->params + we->offset, K, C, R, S);
    const float *gamma = m->params + m->entries[bn->w].offset;
    const float *beta = m->params + m->entries[bn->b].offset;
    const float *mean = m->bufs + m->entries[bn->rm].offset;
    const float *var = m->bufs + m->entries[bn->rv].offset;
    size_t per_k = (size_t)C * R * S;
    for (int k = 0; k < K; k++) {
        // The eval forward computes gamma * (x - mean) / sqrt(var + eps) + beta in float; doing the
        // fold in double and rounding once keeps the folded graph within float rounding of it.
        double scale = (double)gamma[k] / sqrt((double)var[k] + ONNX_BN_EPS);
        for (size_t i = 0; i < per_k; i++) w_oihw[k * per_k + i] = (float)(w_oihw[k * per_k + i] * scale);
        bias[k] = (float)((double)beta[k] - (double)mean[k] * scale);
    }
}

uint8_t *onnx_encode_resnet(const ResNet *m, int H, int W, const char *producer_version,
                            const char *doc, const char *const *meta_keys,
                            const char *const *meta_vals, int n_meta, size_t *size) {
    TensorDim *dims = ct_alloc(sizeof(TensorDim) * (size_t)m->n_tensors);
    if (resnet_shapes(m, H, W, dims) != 0)
        ct_die("ONNX export: a %dx%d input is too small for %s; give a larger --input-size", H, W, m->arch);
    free(dims);

    // Tensor names by slot: the producing op's module path (a folded conv's output carries its BN's
    // name), "input" and "logits" at the ends.
    typedef char Name[64];
    Name *slot = ct_zalloc(sizeof(Name) * (size_t)m->n_tensors);
    snprintf(slot[0], sizeof slot[0], "input");
    for (int i = 0; i < m->n_ops; i++) snprintf(slot[m->ops[i].out], sizeof slot[0], "%s", m->ops[i].name);
    snprintf(slot[m->n_tensors - 1], sizeof slot[0], "logits");

    Pb g = {0};
    char nm[96], wname[96], bname[96], pre[64];
    for (int i = 0; i < m->n_ops; i++) {
        const Op *op = &m->ops[i];
        switch (op->kind) {
            case OP_CONV: {
                const Op *bn = NULL;
                for (int j = i + 1; j < m->n_ops && !bn; j++)
                    if (m->ops[j].kind == OP_BN && m->ops[j].in == op->out) bn = &m->ops[j];
                if (!bn) ct_die("ONNX export: conv %s of %s has no BatchNorm to fold", op->name, m->arch);
                module_of(m, op->w, pre, sizeof pre);
                snprintf(wname, sizeof wname, "%s.weight", pre);
                snprintf(bname, sizeof bname, "%s.bias", pre);
                const int groups = op->groups > 1 ? op->groups : 1;  // ONNX Conv's group: weights [K, C/group, R, S]
                float *w = ct_alloc(sizeof(float) * (size_t)op->K * (op->C / groups) * op->R * op->S);
                float *b = ct_alloc(sizeof(float) * (size_t)op->K);
                fold_conv_bn(m, op, bn, w, b);
                int64_t wd[4] = {op->K, op->C / groups, op->R, op->S}, bd[1] = {op->K};
                initializer(&g, wname, wd, 4, w);
                initializer(&g, bname, bd, 1, b);
                free(w);
                free(b);
                // The conv writes the BN's output slot (the BN node disappears); with a fused ReLU
                // the conv's result gets a name of its own first.
                const char *out = slot[bn->out];
                if (bn->relu) {
                    snprintf(nm, sizeof nm, "%s.pre_relu", bn->name);
                    out = nm;
                }
                Pb n = begin_node("Conv", op->name, slot[op->in], wname, bname, out);
                int64_t k[2] = {op->R, op->S}, st[2] = {op->stride, op->stride};
                int64_t pads[4] = {op->pad, op->pad, op->pad, op->pad}, dil[2] = {1, 1};
                attr_ints(&n, "kernel_shape", k, 2);
                attr_ints(&n, "strides", st, 2);
                attr_ints(&n, "pads", pads, 4);
                attr_ints(&n, "dilations", dil, 2);
                attr_int(&n, "group", groups);
                end_node(&g, &n);
                if (bn->relu) {
                    char rname[96];
                    snprintf(rname, sizeof rname, "%s.relu", bn->name);
                    Pb r = begin_node("Relu", rname, nm, NULL, NULL, slot[bn->out]);
                    end_node(&g, &r);
                }
                break;
            }
            case OP_BLUR: {
                // BlurPool's fixed blur is a depthwise Conv: group = C, weight [C, 1, 3, 3] of
                // [1 2 1]^T [1 2 1] / 16 (exact in float), no bias, stride 1, pads 1.
                snprintf(wname, sizeof wname, "%s.filter", op->name);
                float *w = ct_alloc(sizeof(float) * (size_t)op->C * 9);
                for (int c = 0; c < op->C; c++)
                    for (int r = 0; r < 3; r++)
                        for (int s = 0; s < 3; s++) w[c * 9 + r * 3 + s] = (float)((r == 1 ? 2 : 1) * (s == 1 ? 2 : 1)) / 16.0f;
                int64_t wd[4] = {op->C, 1, 3, 3};
                initializer(&g, wname, wd, 4, w);
                free(w);
                Pb n = begin_node("Conv", op->name, slot[op->in], wname, NULL, slot[op->out]);
                int64_t k[2] = {3, 3}, st[2] = {1, 1}, pads[4] = {1, 1, 1, 1}, dil[2] = {1, 1};
                attr_ints(&n, "kernel_shape", k, 2);
                attr_ints(&n, "strides", st, 2);
                attr_ints(&n, "pads", pads, 4);
                attr_ints(&n, "dilations", dil, 2);
                attr_int(&n, "group", op->C);
                end_node(&g, &n);
                break;
            }
            case OP_BN: break;  // folded into its conv above
            case OP_RELU: {
                Pb n = begin_node("Relu", op->name, slot[op->in], NULL, NULL, slot[op->out]);
                end_node(&g, &n);
                break;
            }
            case OP_MAXPOOL: {
                Pb n = begin_node("MaxPool", op->name, slot[op->in], NULL, NULL, slot[op->out]);
                int64_t k[2] = {op->R, op->S}, st[2] = {op->stride, op->stride};
                int64_t pads[4] = {op->pad, op->pad, op->pad, op->pad};
                attr_ints(&n, "kernel_shape", k, 2);
                attr_ints(&n, "strides", st, 2);
                attr_ints(&n, "pads", pads, 4);
                end_node(&g, &n);
                break;
            }
            case OP_ADD: {
                const char *out = slot[op->out];
                if (op->relu) {
                    snprintf(nm, sizeof nm, "%s.pre_relu", op->name);
                    out = nm;
                }
                Pb n = begin_node("Add", op->name, slot[op->in], slot[op->in2], NULL, out);
                end_node(&g, &n);
                if (op->relu) {
                    char rname[96];
                    snprintf(rname, sizeof rname, "%s.relu", op->name);
                    Pb r = begin_node("Relu", rname, nm, NULL, NULL, slot[op->out]);
                    end_node(&g, &r);
                }
                break;
            }
            case OP_AVGPOOL: {
                // ctrain's [N, C] mean is GlobalAveragePool's [N, C, 1, 1] flattened from axis 1.
                snprintf(nm, sizeof nm, "%s.nchw", op->name);
                Pb n = begin_node("GlobalAveragePool", op->name, slot[op->in], NULL, NULL, nm);
                end_node(&g, &n);
                char fname[96];
                snprintf(fname, sizeof fname, "%s.flatten", op->name);
                Pb f = begin_node("Flatten", fname, nm, NULL, NULL, slot[op->out]);
                attr_int(&f, "axis", 1);
                end_node(&g, &f);
                break;
            }
            case OP_FC: {
                const StateEntry *we = &m->entries[op->w], *be = &m->entries[op->b];
                initializer(&g, we->name, we->shape, 2, m->params + we->offset);
                initializer(&g, be->name, be->shape, 1, m->params + be->offset);
                Pb n = begin_node("Gemm", op->name, slot[op->in], we->name, be->name, slot[op->out]);
                attr_int(&n, "transB", 1);
                end_node(&g, &n);
                break;
            }
            default: ct_die("ONNX export: op %s of %s has kind %d, which has no ONNX mapping", op->name, m->arch, op->kind);
        }
    }
    pb_str(&g, 2, m->arch);
    int64_t in_dims[4] = {-1, m->in_channels, H, W}, out_dims[2] = {-1, m->num_classes};
    const char *in_params[4] = {"N", NULL, NULL, NULL}, *out_params[2] = {"N", NULL};
    value_info(&g, 11, "input", in_dims, in_params, 4);
    value_info(&g, 12, "logits", out_dims, out_params, 2);
    free(slot);

    Pb model = {0};
    pb_int(&model, 1, ONNX_IR_VERSION);
    pb_str(&model, 2, "ctrain");
    pb_str(&model, 3, producer_version ? producer_version : "");
    if (doc) pb_str(&model, 6, doc);
    pb_msg(&model, 7, &g);
    Pb opset = {0};
    pb_str(&opset, 1, "");  // the default domain, ai.onnx
    pb_int(&opset, 2, ONNX_OPSET);
    pb_msg(&model, 8, &opset);
    for (int i = 0; i < n_meta; i++) {
        Pb kv = {0};
        pb_str(&kv, 1, meta_keys[i]);
        pb_str(&kv, 2, meta_vals[i]);
        pb_msg(&model, 14, &kv);
    }
    *size = model.n;
    return model.p;
}

void onnx_write_resnet(const char *path, const ResNet *m, int H, int W, const char *producer_version,
                       const char *doc, const char *const *meta_keys, const char *const *meta_vals,
                       int n_meta) {
    size_t n = 0;
    uint8_t *buf = onnx_encode_resnet(m, H, W, producer_version, doc, meta_keys, meta_vals, n_meta, &n);
    AtomicFile af = ct_atomic_open(path);
    ct_atomic_write(&af, buf, n);
    ct_atomic_commit(&af);
    free(buf);
}
