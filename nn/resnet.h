// ResNet family as DATA: a flat list of ops over numbered tensor slots, a table of the state
// entries (torchvision state_dict names and shapes) and the host copy of the state.
//
// Both executors walk the plan lowered from this op list (nn/plan.h): nn/model_cpu.c on the CPU,
// nn/model_cuda.cu on the GPU.
// Nothing here computes; this file only describes the network, its shapes and its initialisation.
//
// Architectures (torchvision-exact names and init):
//   resnet18/34  BasicBlock [2,2,2,2] / [3,4,6,3], 7x7/2 stem + 3x3/2 maxpool, 64..512 channels
//   resnet50/101/152  Bottleneck (expansion 4, v1.5: stride on the 3x3) [3,4,6,3]/[3,4,23,3]/[3,8,36,3]
//   resnext50_32x4d, resnext101_32x8d, resnext101_64x4d  the Bottleneck with a grouped 3x3:
//     groups G and width_per_group D give conv1/conv2 width = int(planes * D / 64) * G
//     (resnext50_32x4d's layer1: 128 channels in 32 groups of 4), conv3 still planes * 4
//   wide_resnet50_2, wide_resnet101_2  the Bottleneck with width_per_group 128: twice resnet50/101's
//     conv1/conv2 width (groups 1)
//   resnet20/32/44/56/110  CIFAR style: 3x3/1 stem conv of 16 channels, no maxpool, three stages of
//     16/32/64 channels with n = (depth-2)/6 BasicBlocks each, first block of stages 2 and 3 has
//     stride 2; a projection shortcut (1x1 conv + BN, named downsample.0/.1 like torchvision)
//     wherever the shape changes. Names: conv1, bn1, layer1..layer3, fc.
//
// Memory layouts
// - params: ONE flat fp32 buffer. Conv weights are KRSC in memory (OIHW in files), BN gamma/beta,
//   fc weight [O,I] and bias [O] as in PyTorch.
// - The param offsets follow the order in which backward PRODUCES the gradients (fc first, stem
//   conv last), so grads, momentum and params share one layout and a prefix [0, n) of the
//   gradient buffer is final as soon as backward has passed the op whose grad_done is n: buckets
//   can be reduced while backward continues.
// - Every parameter tensor starts at a multiple of RESNET_PARAM_ALIGN (8) elements, with zeros in
//   the gaps: 32 bytes in fp32 and 16 in the GPU's bf16 copy, which its convs' vectorised weight
//   loads need. Only fc.bias's count (the class count) can leave a gap, so 1000-class models have
//   none; n_params is the padded size (what every flat array holds), resnet_param_count the real
//   number of parameters (what logs print). The gaps hold zero in params, grads and momentum and
//   belong to the op before them (its grad_done includes them). Builds before this padding wrote
//   the tensors back to back; resnet_params_unpack reads that layout (old checkpoints).
// - bufs: BN running_mean/running_var (fp32, flat); counts: BN num_batches_tracked (int64, one per BN).
#pragma once
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

enum { RESNET_PARAM_ALIGN = 8 };  // elements; see "Memory layouts" above

typedef enum {
    OP_CONV = 0,  // out = conv(in, w)                          (no bias; Op.groups channel groups)
    OP_BN,        // out = bn(in) [+ relu]                       (training: batch stats)
    OP_RELU,      // out = max(0, in)                           (not emitted: ReLUs are fused into BN/ADD)
    OP_MAXPOOL,   // out = maxpool(in, k, stride, pad)
    OP_ADD,       // out = in + in2 [+ relu]                    (residual junction)
    OP_AVGPOOL,   // out[N,C] = global mean of in[N,H,W,C]      (out has H = W = 1)
    OP_FC,        // out[N,O] = in[N,I] w^T + b
    OP_BLUR,      // out = blur3x3(in), BlurPool's fixed depthwise filter (nn/blur.h; no parameters)
    OP_DROP_PATH, // out[n] = keep[n] / (1 - drop) * in[n] in training, in in eval (stochastic depth,
                  // nn/drop_path.h): on a block's residual branch, after its last BN, before the ADD
} OpKind;

typedef struct {
    int kind;      // OpKind
    int in, in2;   // input tensor slots (in2: second operand of OP_ADD, else -1)
    int out;       // output tensor slot (every op writes a new slot; slots are never reused in the graph)
    int relu;      // OP_BN / OP_ADD: ReLU fused on the output
    // OP_CONV: C -> K channels, R x S kernel. OP_MAXPOOL: R = S = kernel size. stride/pad for both.
    int C, K, R, S, stride, pad;
    int groups;    // OP_CONV: channel groups (1: dense; ResNeXt's conv2: 32 or 64), weights [K, R, S, C/groups]
    // State entries (indices into ResNet.entries), -1 when unused:
    //   OP_CONV: weight = w. OP_BN: weight = w, bias = b, running_mean = rm, running_var = rv,
    //   num_batches_tracked = nbt. OP_FC: weight = w, bias = b.
    int w, b, rm, rv, nbt;
    // After this op's backward, grads[0, grad_done) are final (monotone over the reversed op list).
    size_t grad_done;
    char name[48];  // module path, e.g. "layer1.0.bn2" (diagnostics)
    // OP_DROP_PATH: the branch's drop probability (timm's linear rule, ResNet.drop_path) and the
    // block's index over the whole network (0-based, timm's net_block_idx), which keys its draws.
    double drop;
    int drop_block;
} Op;

typedef enum {
    ENTRY_PARAM = 0,  // fp32 in params (and at the same offset in grads / momentum)
    ENTRY_BUF,        // fp32 in bufs (running_mean, running_var)
    ENTRY_COUNT,      // int64 in counts (num_batches_tracked; torch shape [] = scalar)
} EntryKind;

typedef struct {
    char name[64];      // torchvision state_dict key, e.g. "layer1.0.conv1.weight"
    int kind;           // EntryKind
    int ndim;           // torch ndim (0 for num_batches_tracked)
    int64_t shape[4];   // torch shape: conv OIHW [K,C,R,S], BN [C], fc weight [O,I], fc bias [O]
    int is_conv;        // 1: conv weight, stored KRSC in memory, OIHW in files
    size_t offset;      // into params (ENTRY_PARAM), bufs (ENTRY_BUF) or counts (ENTRY_COUNT)
    size_t count;       // number of elements
    int no_decay;       // BN weight/bias or a bias: excluded from weight decay when asked
} StateEntry;

typedef struct {
    int C;  // channels of the slot (the spatial size depends on the input; see resnet_shapes)
} TensorSlot;

typedef struct {
    char arch[32];     // "resnet18", "resnet20", "resnext101_32x8d", ...
    int depth;
    int cifar;         // 1: CIFAR-style family (3x3 stem, no maxpool)
    int bottleneck;    // 1: Bottleneck blocks (resnet50/101/152, ResNeXt, Wide ResNet)
    int groups;        // the Bottleneck's 3x3 groups (ResNeXt: 32 or 64; else 1)
    int width_per_group; // torchvision's base width (64; ResNeXt 4 or 8; Wide ResNet 128)
    int in_channels;   // input image channels (1 or 3, any >= 1 works)
    int num_classes;

    int n_ops;
    Op *ops;
    int n_tensors;     // slot 0 is the (normalised, float) input, slot n_tensors-1 the logits
    TensorSlot *tensors;
    int n_entries;     // in torchvision state_dict order (named_parameters/buffers order)
    StateEntry *entries;

    size_t n_params, n_bufs, n_counts;  // n_params: the padded flat size (resnet_param_count: the real one)
    float *params;     // [n_params], host, owned
    float *bufs;       // [n_bufs], host, owned
    int64_t *counts;   // [n_counts], host, owned

    // Linear probe (--freeze-backbone): only fc trains. Both executors then run every BN in eval
    // mode in the training forward too (running statistics and counts untouched), stop backward
    // after fc (no backbone gradients are computed), and the optimizers update only the prefix
    // [0, resnet_trainable(m)) of params, which the backward-order layout makes exactly fc.
    int freeze_backbone;

    // BlurPool (--blurpool; FFCV's apply_blurpool): an OP_BLUR before every conv with stride > 1
    // and at least 16 input channels. resnet18/34: layer2-4's .0.conv1 and .0.downsample.0;
    // resnet50+: .0.conv2 and .0.downsample.0; resnet20..110: layer2/3's .0.conv1 and
    // .0.downsample.0 (never the stem: its 1 or 3 channels are below 16). A block's conv1 and
    // downsample.0 read the same tensor, so they share one blur of it (torch blurs it twice; the
    // values are the same). Part of the architecture: checkpoints and model files record it.
    int blurpool;

    // Stochastic depth (--drop-path RATE, timm's drop_path_rate): block b of B (counted over all
    // stages) drops its residual branch per sample with probability RATE * b / (B - 1), as timm's
    // ResNet (make_blocks) does: an OP_DROP_PATH op after the branch's last BN of every block whose
    // probability is > 0 (not the first). A training setting, not part of the architecture: the
    // ops have no state, model files and checkpoints hold the same tensors; eval is the identity.
    double drop_path;
} ResNet;

// Parameters the optimizer updates: the fc prefix when the backbone is frozen, else n_params.
size_t resnet_trainable(const ResNet *m);

// Build the graph and the tables for arch (a name of resnet_arch_list())
// and allocate the host state (params zero, running_var 1, running_mean 0, counts 0).
// Returns NULL if the name is not one of those (callers name the flag in their error).
ResNet *resnet_create(const char *arch, int in_channels, int num_classes);
// The same with BlurPool's blurs inserted when blurpool != 0 (see ResNet.blurpool).
ResNet *resnet_create_ex(const char *arch, int in_channels, int num_classes, int blurpool);
// The same with stochastic depth at rate drop_path in [0, 1) (see ResNet.drop_path; 0: none).
ResNet *resnet_create_dp(const char *arch, int in_channels, int num_classes, int blurpool, double drop_path);
void resnet_free(ResNet *m);
// 1 if arch is a known name. resnet_arch_list() is a comma-separated list for help/errors.
int resnet_arch_valid(const char *arch);
const char *resnet_arch_list(void);
// "conv", "batchnorm", "relu", "maxpool", "add", "avgpool", "fc", "blur", "drop_path" for an OpKind; "?" otherwise.
const char *resnet_op_kind_name(int kind);

// How many times ops [0, n_ops) read slot s: as an op's input, or as an ADD's second operand (an ADD
// of a slot with itself counts twice). The plan's fusions, the executors' liveness and BN folding
// all ask this one question: a slot read once can be consumed in place.
int resnet_slot_readers(const ResNet *m, int s, int n_ops);

// How the executors run the graph (which BN runs with the ADD after it, which kernels gather a BN's
// statistics) is decided by the lowered plan, nn/plan.h, from the graph and the execution options.

// torchvision initialisation drawn from util/rng.h keyed on (seed, entry index):
// conv kaiming_normal_(mode=fan_out, nonlinearity=relu): N(0, 2/(K*R*S));
// BN weight 1, bias 0, running stats 0/1, num_batches_tracked 0;
// Linear: weight and bias U(-1/sqrt(fan_in), 1/sqrt(fan_in)) (PyTorch's default);
// zero_init_residual: the last BN weight of every block (bn2 Basic, bn3 Bottleneck) is 0.
void resnet_init(ResNet *m, uint64_t seed, int zero_init_residual);

// Shape of every slot (per sample; the batch N multiplies) for an input of H x W: fills
// dims[n_tensors]. Returns 0, or -1 if some slot would have a spatial size < 1 (input too small).
typedef struct {
    int H, W, C;
} TensorDim;
int resnet_shapes(const ResNet *m, int H, int W, TensorDim *dims);

// How backward announces finished gradients: both executors (nn/model_cpu.h, nn/model_cuda.h)
// call ready(ctx, n) after each op that produced parameter gradients, and from then on
// grads[0, n) are final (n = that op's grad_done; n grows to m->n_params). dist/ cannot see this
// type (it may not include nn/): its receivers, gradsync_ready and gpu_gradsync_ready, are plain
// functions of this shape, and the trainer hands them over.
typedef void (*GradReadyFn)(void *ctx, size_t n);

// The n values an executor's ready callback reports, in order: the grad_done of every op with
// parameters, walking the ops backwards (only fc's with m->freeze_backbone). dist/gradsync.h cuts its buckets at these numbers.
// Writes up to max values to out, returns how many there are (max 0: count only).
size_t resnet_grad_boundaries(const ResNet *m, size_t *out, size_t max);
// The same in a new array (free it); *n gets the count.
size_t *resnet_grad_boundaries_alloc(const ResNet *m, size_t *n);

// Entry lookup by torchvision name; -1 if absent.
int resnet_find_entry(const ResNet *m, const char *name);
// Number of real parameters (sum of the ENTRY_PARAM counts; n_params less the padding), e.g.
// 11,689,512 for resnet18: what a log or --help calls the parameter count.
size_t resnet_param_count(const ResNet *m);
// dst [n_params] = the parameters of packed, a flat array in the unpadded layout of builds before
// the padding (the same backward order, tensors back to back, resnet_param_count floats); the
// gaps become zero. A file's flat array of resnet_param_count != n_params floats is in that layout.
void resnet_params_unpack(const ResNet *m, float *dst, const float *packed);
// Zeroes the gaps between the tensors of a flat [n_params] array (the tensors are untouched).
void resnet_zero_padding(const ResNet *m, float *flat);

// Conv weight layout conversions (dims of the torch tensor: K out, C in, R x S kernel).
void oihw_to_krsc(float *dst, const float *src, int K, int C, int R, int S);
void krsc_to_oihw(float *dst, const float *src, int K, int C, int R, int S);

// Print the op list and entry table (debugging).
void resnet_print(const ResNet *m, FILE *f);

#ifdef __cplusplus
}
#endif
