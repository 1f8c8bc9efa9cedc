// C API of the CUDA kernels: the GPU twins of nn/layers.h. Same argument order as the CPU layer,
// plus the activation dtype and a stream last. Included by plain C host code (nn/, dist/, the
// trainer), so it uses no CUDA header: streams are the runtime's opaque struct pointer, bf16
// values are uint16_t bits. Kernels are leaves: this header includes nothing of ctrain's.
//
// Conventions
// - NHWC activations, KRSC conv weights, as on the CPU.
// - dtype says how activations and conv/linear operands are stored: CT_F32 (debugging, ~1e-5 of the
//   CPU reference) or CT_BF16 (default on GPU, ~1e-2). Accumulation is always fp32; master weights,
//   optimizer state and BN statistics are fp32.
// - Reductions that feed weights have a fixed order (no float atomics): bit-identical reruns.
// - The same .cu sources run on a real GPU (nvcc) and on the CPU through kernels/emu (g++).
#pragma once
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct CUstream_st *ct_stream_t;  // == cudaStream_t
typedef enum { CT_F32 = 0, CT_BF16 = 1 } CtDtype;

// A convolution's dimensions (no bias, dilation 1), shared with the CPU layers of nn/layers.h; it
// lives here because kernels include nothing above them. nn/layers.h's conv_shape() and
// conv_shape_g() build one with its dimensions checked.
// Groups (ResNeXt's 3x3): input channel block g (C/groups channels) feeds only output block g
// (K/groups channels); the weights are then [K, R, S, C/groups] (KRSC with C/groups), torch's
// [K, C/groups, R, S] in files. groups 0 (a positional initializer that stops before it) means 1.
typedef struct {
    int N, H, W, C;  // input
    int K, R, S;     // output channels, kernel rows, kernel columns
    int stride, pad; // same in both dimensions
    int P, Q;        // output rows, columns: (H + 2*pad - R) / stride + 1, likewise Q
    int groups;      // 1 (or 0): a dense convolution; C and K are multiples of it
} ConvShape;
static inline int conv_groups(const ConvShape *s) { return s->groups > 1 ? s->groups : 1; }

// ---------------------------------------------------------------------------------------------
// Convolution and linear as implicit GEMM (kernels/conv.cu, kernels/linear.cu).
// Storage: activations (in, out, din, dout of a conv; in, din of a linear) and the weights passed
// in (`w`: the caller's dtype copy of the fp32 master weights) hold dt elements. Weight and bias
// gradients (dw, db) are ALWAYS fp32 (they feed the fp32 master weights); the linear layer's
// output (logits) and its incoming gradient dout are fp32 too (the losses take fp32 logits),
// and its bias b is fp32. Backward functions overwrite their outputs, like the CPU ones.
// Engines (kernels/conv.cu's table, in fallback order; docs/HACKING.md "Conv engines"): wgmma
// (Hopper, compute 9.0; bf16, the shapes v2 takes, both BN epilogues in v2's order), v2 (mma.sync,
// 128x128 tiles: bf16 with channel counts multiples of 8 and 16-byte aligned pointers, both BN
// epilogues; the default, CT_CONV_AUTO, for bf16), v1 (mma.sync, 128x64 tiles: any bf16 dense
// convolution, cp.async where the channels allow, element gathers otherwise; also the linear
// forward) and generic (fp32 math over fp32 or bf16 storage, any shape, grouped ones included; the
// linear backward, whose dout is fp32). Each says what it takes; a call runs the engine it names
// (the GPU executor passes its ExecOptions' conv engine) where that engine takes the GEMM, else the
// first engine after it in the table that does: fp32 reaches the generic engine whatever is asked,
// grouped convolutions (groups > 1) v2's block-diagonal path where it takes them (bf16, Cg and Kg 4
// or multiples of 8 up to 64, ...: docs/GROUPED.md) and the generic engine otherwise (the _ex entry
// points say which ran), and the fused BN epilogues (conv2d_forward_stats_gpu,
// conv2d_backward_data_bn_gpu, _tail_gpu) run nothing where neither v2 (its grouped path
// included) nor wgmma is reached. Kernels never read the environment.
// Determinism: no atomics; the weight gradient's reduction over N*P*Q is split in a number of
// parts fixed by the shape, partials are summed in order: bit-identical reruns on any GPU.

// Scratch (device floats) conv2d_backward_weight_gpu needs for its split partials; 0 means none
// (work may then be NULL). Depends only on the shape.
size_t conv2d_gpu_work_floats(const ConvShape *s);
void conv2d_forward_gpu(const ConvShape *s, void *out, const void *in, const void *w, CtDtype dt,
                        ct_stream_t stream);
void conv2d_backward_data_gpu(const ConvShape *s, void *din, const void *dout, const void *w,
                              CtDtype dt, ct_stream_t stream);
void conv2d_backward_weight_gpu(const ConvShape *s, float *dw, const void *dout, const void *in,
                                float *work, CtDtype dt, ct_stream_t stream);
// The data gradient added in place: din = round(float(din) + the gradient), one rounding from fp32
// in the epilogue (every engine), so a second contribution to a gradient slot needs no scratch
// and no add pass. The CPU twin: conv2d_backward_data into a float buffer, then add (nn/model_cpu.c).
void conv2d_backward_data_acc_gpu(const ConvShape *s, void *din, const void *dout, const void *w,
                                  CtDtype dt, ct_stream_t stream);
// out[N,O] (fp32) = in[N,I] w[O,I]^T + b[O] (b fp32, may be NULL).
void linear_forward_gpu(float *out, const void *in, const void *w, const float *b, int N, int I,
                        int O, CtDtype dt, ct_stream_t stream);
// din (dt, may be NULL), dw (fp32), db (fp32, may be NULL) from dout[N,O] (fp32).
void linear_backward_gpu(void *din, float *dw, float *db, const float *dout, const void *in,
                         const void *w, int N, int I, int O, CtDtype dt, ct_stream_t stream);

// Tests and benchmarks: the same with an explicit engine (CtConvAlgo), which runs where it takes
// the GEMM, else the next engine in the fallback order wgmma -> v2 -> v1 -> generic. Returns the
// engine that ran (the data gradient: the one furthest down the order that ran a stride phase).
// CT_CONV_AUTO is v2 (the default stays v2 until silicon has measured wgmma and v1: docs/HACKING.md).
// CT_CONV_TC (v1) with dt == CT_F32 is a fatal error; v2 and wgmma asked on fp32 reach generic.
typedef enum { CT_CONV_AUTO = 0, CT_CONV_GENERIC = 1, CT_CONV_TC = 2, CT_CONV_TC2 = 3, CT_CONV_WGMMA = 4 } CtConvAlgo;
int conv2d_forward_gpu_ex(const ConvShape *s, void *out, const void *in, const void *w, CtDtype dt,
                          ct_stream_t stream, int algo);
int conv2d_backward_data_gpu_ex(const ConvShape *s, void *din, const void *dout, const void *w,
                                CtDtype dt, ct_stream_t stream, int algo);
int conv2d_backward_data_acc_gpu_ex(const ConvShape *s, void *din, const void *dout, const void *w,
                                    CtDtype dt, ct_stream_t stream, int algo);
int conv2d_backward_weight_gpu_ex(const ConvShape *s, float *dw, const void *dout, const void *in,
                                  float *work, CtDtype dt, ct_stream_t stream, int algo);
// The engine table, observable (tests/emu_conv_engines.c): engine i of conv_engine_count() in fallback order, its name (as --conv-engine spells it; "generic") and
// CtConvAlgo; conv_engine_supports: engine i's own verdict on a pass (CtConvPass) of s in dtype dt,
// with its BN epilogue (epilogue != 0: the forward's statistics, the data gradient's BN backward)
// or without, for 16-byte aligned operands; conv_engine_for: the name of the engine the entry
// points run for that pass when `algo` is asked (what they return), NULL where an epilogue is asked
// and nothing would run. Planned by the dispatcher itself, launching nothing (on the current
// device: v2's tables and wgmma depend on it).
typedef enum { CT_CONV_FWD = 0, CT_CONV_DGRAD = 1, CT_CONV_WGRAD = 2 } CtConvPass;
int conv_engine_count(void);
const char *conv_engine_name(int i);
int conv_engine_algo(int i);
const char *conv_engine_algo_name(int algo);  // NULL for CT_CONV_AUTO or an unknown value
int conv_engine_supports(int i, int pass, const ConvShape *s, CtDtype dt, int epilogue);
const char *conv_engine_for(int pass, const ConvShape *s, CtDtype dt, int algo, int epilogue);
// Channel padding (kernels/conv_pad.cu; CPU twins nn/pad.h): out[r, c] = in[r, c] for c < C, 0 for
// C <= c < Cpad, over `rows` rows; and back (the first C of Cpad channels, fp32 gradients).
void conv_pad_channels_gpu(void *out, const void *in, size_t rows, int C, int Cpad, CtDtype dt,
                           ct_stream_t stream);
void conv_unpad_channels_gpu(float *out, const float *in, size_t rows, int Cpad, int C, ct_stream_t stream);
int linear_forward_gpu_ex(float *out, const void *in, const void *w, const float *b, int N, int I,
                          int O, CtDtype dt, ct_stream_t stream, int algo);

// ---------------------------------------------------------------------------------------------
// Batch norm, pooling, elementwise, losses, optimizer (kernels/batchnorm.cu, pool.cu,
// elementwise.cu, loss.cu, sgd.cu).
// Activation tensors (x, y, dy, dx, pool in/out, normalised input) are `void *` holding dtype
// elements; BN parameters, statistics and gradients, logits, losses and the optimizer state are
// always fp32. All pointers are device pointers unless said otherwise. Nothing here synchronises:
// scalar results (loss, hit counts) are written to device memory for the caller to read back.

// Batch norm over M = N*H*W rows of C channels. `work` is a device scratch of at least
// batchnorm_gpu_work_floats(M, C) floats (per-chunk partial sums): the batch statistics and
// dgamma/dbeta are reduced over fixed row chunks in a fixed order, so results are bit-identical
// run to run (no float atomics).
size_t batchnorm_gpu_work_floats(int M, int C);
void batchnorm_forward_train_gpu(void *y, float *save_mean, float *save_invstd, float *running_mean,
                                 float *running_var, const void *x, const float *gamma,
                                 const float *beta, int M, int C, float momentum, float eps, int relu,
                                 float *work, CtDtype dt, ct_stream_t stream);
void batchnorm_forward_eval_gpu(void *y, const void *x, const float *gamma, const float *beta,
                                const float *running_mean, const float *running_var, int M, int C,
                                float eps, int relu, CtDtype dt, ct_stream_t stream);
// y: forward output when relu was fused (its zeros mask dy), NULL otherwise. dx may alias dy.
// dgamma, dbeta are overwritten (fp32).
void batchnorm_backward_gpu(void *dx, float *dgamma, float *dbeta, const void *dy, const void *x,
                            const void *y, const float *gamma, const float *save_mean,
                            const float *save_invstd, int M, int C, float *work, CtDtype dt,
                            ct_stream_t stream);
// A residual block's tail in one pass (twins of nn/layers.h's batchnorm_add_*): y = bn(x) + res
// [relu], the BN output never stored; backward: g = dy masked by y > 0 (y NULL: no ReLU), dres = g
// (res_acc: dres += g, accumulated in place), dx, dgamma, dbeta of g. dx or dres may alias dy.
// relu_mask (may be NULL): with ReLU, bf16 and C a multiple of 8, the train forwards also write
// bit k of byte (r * C + c) / 8 = (y[r][c + k] > 0) for c a multiple of 8 (M * C / 8 bytes), for a
// backward that needs the mask but not y (conv2d_backward_data_tail_gpu); they return 1 if they
// wrote it, 0 (nothing written) otherwise.
int batchnorm_add_forward_train_gpu(void *y, float *save_mean, float *save_invstd, float *running_mean,
                                    float *running_var, const void *x, const void *res, const float *gamma,
                                    const float *beta, int M, int C, float momentum, float eps, int relu,
                                    uint8_t *relu_mask, float *work, CtDtype dt, ct_stream_t stream);
// BN statistics gathered by the convolution before it (the forward epilogue of engine v2, or of
// wgmma in v2's order; bf16 only):
// conv2d_forward_stats_gpu convolves as conv2d_forward_gpu does (the same output bits) and writes
// per 128-row tile and output channel {sum, m2} of the stored values (conv2d_gpu_stats_floats(M, K)
// floats, M = N*P*Q); it returns 0 and runs nothing when the shape or algo (CtConvAlgo: v2 and
// wgmma run it) sends the convolution to another engine. batchnorm_add_forward_train_tiles_gpu is
// then the train forward without its statistics pass (`tiles` at the start of `work`, which must hold
// batchnorm_gpu_work_floats(M, C)). nn/batchnorm.c has the CPU twins.
size_t conv2d_gpu_stats_floats(int M, int C);
int conv2d_forward_stats_gpu(const ConvShape *s, void *out, float *stats, const void *in, const void *w, CtDtype dt,
                             ct_stream_t st, int algo);
int batchnorm_add_forward_train_tiles_gpu(void *y, float *save_mean, float *save_invstd, float *running_mean,
                                          float *running_var, const void *x, const void *res, const float *tiles,
                                          const float *gamma, const float *beta, int M, int C, float momentum,
                                          float eps, int relu, uint8_t *relu_mask, float *work, CtDtype dt,
                                          ct_stream_t stream);
// A tail whose residual is itself a BN's output (the shortcut's BN and bn3 of a downsampling
// block): batchnorm_stats_train_gpu computes that BN's train statistics only (from tiles, or a
// sums pass when tiles is NULL: save_mean, save_invstd, running statistics), and
// batchnorm_add_bn_forward_train_gpu is batchnorm_add_forward_train(_tiles)_gpu with res = that BN
// applied to rx on the fly with rb's {mean, invstd, gamma, beta} (its output, rounded as if stored,
// is never written): the same output bits as the two passes.
typedef struct {
    const float *mean, *invstd, *gamma, *beta;
} BnAffine;
void batchnorm_stats_train_gpu(float *save_mean, float *save_invstd, float *running_mean, float *running_var,
                               const void *x, const float *tiles, const float *gamma, int M, int C, float momentum,
                               float eps, float *work, CtDtype dt, ct_stream_t stream);
int batchnorm_add_bn_forward_train_gpu(void *y, float *save_mean, float *save_invstd, float *running_mean,
                                       float *running_var, const void *x, const float *tiles, const void *rx,
                                       BnAffine rb, const float *gamma, const float *beta, int M, int C,
                                       float momentum, float eps, int relu, uint8_t *relu_mask, float *work,
                                       CtDtype dt, ct_stream_t stream);
// BN backward reductions in the data-gradient epilogue (engine v2, or wgmma with v2's bits; bf16,
// stride 1 or 2): for a conv
// whose input was y = relu(bn(x)), conv2d_backward_data_bn_gpu writes din = the gradient masked by
// the ReLU it recomputes from x, gamma, beta, mean and invstd (y is not read), and per tile of 128
// GEMM rows and channel {sum g, sum g (x - mean)}: conv2d_gpu_dgrad_bn_tiles(s) tiles of 2 * C
// floats. At stride 1 the tiles are the input's 128-row tiles; at stride 2 the data gradient runs
// once per stride phase (ph, pw) in row-major order, each over its pixels (image, row, column of
// the phase grid), and each phase's rows are cut into tiles of their own. It returns 0 and runs
// nothing where the shape, dtype or algo (CtConvAlgo: v2 and wgmma run it) send it elsewhere.
// batchnorm_backward_tiles_gpu is then the BN backward without its reduction pass (the tiles at the start of work, ntiles of
// them; dy the masked din). CPU twins: nn/layers.h batchnorm_relu_grad_tiles (on the rows in that
// order), batchnorm_backward_tiles.
#define CONV_BN_MAX_PHASES 4
int conv2d_gpu_dgrad_bn_tiles(const ConvShape *s);
int conv2d_backward_data_bn_gpu(const ConvShape *s, void *din, float *tiles, const void *dout, const void *w,
                                const void *x, const float *gamma, const float *beta, const float *mean,
                                const float *invstd, CtDtype dt, ct_stream_t st, int algo);
// The same for a conv whose input is a residual block's output y = relu(bn(x) + res) (the block
// tail), as the last contribution to its gradient: din = round(din + the gradient) (acc) or the
// gradient, masked by y > 0 (y = the conv's input, read in the epilogue), and the tiles of the tail
// BN's input x. din is then also the residual's gradient. CPU twin: batchnorm_tail_grad_tiles.
// mask (may be NULL): the tail forward's relu_mask, read instead of y (1 bit per element, not 16).
int conv2d_backward_data_tail_gpu(const ConvShape *s, void *din, int acc, float *tiles, const void *dout,
                                  const void *w, const void *y, const uint8_t *mask, const void *x, const float *mean,
                                  CtDtype dt, ct_stream_t st, int algo);
void batchnorm_backward_tiles_gpu(void *dx, float *dgamma, float *dbeta, const void *dy, const void *x,
                                  const float *tiles, int ntiles, const float *gamma, const float *save_mean,
                                  const float *save_invstd, int M, int C, float *work, CtDtype dt,
                                  ct_stream_t stream);
void batchnorm_add_forward_eval_gpu(void *y, const void *x, const void *res, const float *gamma,
                                    const float *beta, const float *running_mean, const float *running_var,
                                    int M, int C, float eps, int relu, CtDtype dt, ct_stream_t stream);
void batchnorm_add_backward_gpu(void *dx, void *dres, int res_acc, float *dgamma, float *dbeta, const void *dy,
                                const void *x, const void *y, const float *gamma, const float *save_mean,
                                const float *save_invstd, int M, int C, float *work, CtDtype dt,
                                ct_stream_t stream);

// Elementwise (dx may alias dy; y may alias a or x).
void relu_forward_gpu(void *y, const void *x, size_t n, CtDtype dt, ct_stream_t stream);
void relu_backward_gpu(void *dx, const void *dy, const void *y, size_t n, CtDtype dt, ct_stream_t stream);
void add_forward_gpu(void *y, const void *a, const void *b, size_t n, int relu, CtDtype dt,
                     ct_stream_t stream);
void add_inplace_gpu(void *y, const void *x, size_t n, CtDtype dt, ct_stream_t stream);
// Stochastic depth (CPU twin: nn/drop_path.h drop_path_apply): y[n, :] = scale[n] * x[n, :] over N
// rows of `row` elements, in fp32, stored in dt; scale a DEVICE array of N floats. Forward and
// backward alike (dx = scale * dy); y may be x.
void drop_path_gpu(void *y, const void *x, const float *scale, int N, size_t row, CtDtype dt, ct_stream_t stream);
// out = (in / 255 - mean[c]) / std[c]; mean and std are DEVICE arrays of C floats.
void normalize_u8_gpu(void *out, const uint8_t *in, size_t pixels, int C, const float *mean,
                      const float *std, CtDtype dt, ct_stream_t stream);
// fp32 <-> bf16 (round to nearest even, like __float2bfloat16_rn). bf16 is raw uint16_t bits.
void f32_to_bf16_gpu(uint16_t *out, const float *in, size_t n, ct_stream_t stream);
void bf16_to_f32_gpu(float *out, const uint16_t *in, size_t n, ct_stream_t stream);
// *flag (a DEVICE int) = 1 when any of x[0, n) is inf or NaN; left as it was otherwise (the
// caller zeroes it first). The twin of all_finite: 4 bytes come back instead of the whole array.
void any_nonfinite_gpu(const float *x, size_t n, int *flag, ct_stream_t stream);
// Copy between dtypes: out (dt_out) = in (dt_in); a plain copy when they match.
void convert_act_gpu(void *out, CtDtype dt_out, const void *in, CtDtype dt_in, size_t n,
                     ct_stream_t stream);

// Pooling. Max pool: padding never wins, ties go to the first element in window order;
// backward is the gather form (one thread per input element, no atomics). vec: 16-byte vectors of
// channels where C and the pointers allow (the GPU executor passes ExecOptions.maxpool_vector), 0:
// one element per thread everywhere (the same results; a comparison).
void maxpool_forward_gpu(void *out, const void *in, int N, int H, int W, int C, int k, int stride,
                         int pad, int P, int Q, int vec, CtDtype dt, ct_stream_t stream);
void maxpool_backward_gpu(void *din, const void *dout, const void *in, int N, int H, int W, int C,
                          int k, int stride, int pad, int P, int Q, int vec, CtDtype dt, ct_stream_t stream);
// The max pool after y = relu(bn(x)) (the stem) with that BN folded in. maxpool_forward_bn_gpu
// pools y computed on the fly from x and bn's {mean, invstd, gamma, beta} (the BN's apply pass's
// operations and rounding: the same bits as pooling the stored y, which is never written).
// maxpool_backward_bn_gpu: din = the pooled gradient masked by y > 0 (y = in, or recomputed from x
// and bn when in is NULL), and per 128-row tile and channel {sum g, sum g (x - bn.mean)} in tiles
// (conv2d_gpu_stats_floats(N*H*W, C) floats) for batchnorm_backward_tiles_gpu. With y stored it
// returns 0, having run nothing, unless C and the pointers allow 16-byte vectors; without, it always
// runs. CPU twins: the BN's forward, maxpool_*, then batchnorm_tail_grad_tiles.
void maxpool_forward_bn_gpu(void *out, const void *x, BnAffine bn, int N, int H, int W, int C, int k, int stride,
                            int pad, int P, int Q, int vec, CtDtype dt, ct_stream_t stream);
int maxpool_backward_bn_gpu(void *din, float *tiles, const void *dout, const void *in, const void *x, BnAffine bn,
                            int N, int H, int W, int C, int k, int stride, int pad, int P, int Q, int vec, CtDtype dt,
                            ct_stream_t stream);
void avgpool_forward_gpu(void *out, const void *in, int N, int HW, int C, CtDtype dt, ct_stream_t stream);
void avgpool_backward_gpu(void *din, const void *dout, int N, int HW, int C, CtDtype dt,
                          ct_stream_t stream);
// BlurPool's fixed 3x3 blur [1 2 1]^T [1 2 1] / 16, stride 1, zero padding 1, per channel
// (kernels/blur.cu; twins of nn/blur.h). out, in [N,H,W,C]; the backward is the same blur of dout.
void blur3x3_forward_gpu(void *out, const void *in, int N, int H, int W, int C, CtDtype dt, ct_stream_t stream);
void blur3x3_backward_gpu(void *din, const void *dout, int N, int H, int W, int C, CtDtype dt,
                          ct_stream_t stream);

// Losses on fp32 logits [N,K], multi-block: rows spread over blocks, each row's loss and hit
// written to `work` (device, loss_workspace_bytes(N)), then summed by one block in a fixed order
// (deterministic, no atomics). *loss (device) receives the mean loss, *correct (device, may be
// NULL) the argmax hit count. Same gradient conventions as the CPU: softmax_xent overwrites
// dlogits, kd_loss accumulates into it. softmax_xent_mix_gpu is softmax_xent_mix's twin (soft
// target lam * s(labels) + (1 - lam) * s(labels_b); hits against the dominant label).
size_t loss_workspace_bytes(int N);
void softmax_xent_mix_gpu(float *dlogits, const float *logits, const int32_t *labels, const int32_t *labels_b,
                          float lam, int N, int K, float smoothing, float grad_scale, void *work, float *loss,
                          int *correct, ct_stream_t stream);
void softmax_xent_gpu(float *dlogits, const float *logits, const int32_t *labels, int N, int K,
                      float smoothing, float grad_scale, void *work, float *loss, int *correct,
                      ct_stream_t stream);
// bce_mix's twin (timm's BinaryCrossEntropy on the same soft target; threshold < 0: none).
void bce_mix_gpu(float *dlogits, const float *logits, const int32_t *labels, const int32_t *labels_b, float lam,
                 int N, int K, float smoothing, float threshold, int sum_classes, float grad_scale, void *work,
                 float *loss, int *correct, ct_stream_t stream);
void kd_loss_gpu(float *dlogits, const float *logits, const float *teacher_logits, int N, int K,
                 float temperature, float grad_scale, void *work, float *loss, ct_stream_t stream);
// *count (device) = number of rows whose label is among the k largest logits (CPU tie rule).
void topk_correct_gpu(const float *logits, const int32_t *labels, int N, int K, int k, void *work,
                      int *count, ct_stream_t stream);

// SGD over the flat fp32 buffers (nn/sgd.h's sgd_update_range per element, PyTorch's order).
// decay[i] != 0 applies weight decay wd to element i (NULL: every element); first != 0 initialises
// the momentum buffer with d. params_bf16 (may be NULL) receives the updated weights as bf16.
void sgd_step_gpu(float *params, const float *grads, float *buf, const uint8_t *decay, size_t n,
                  float lr, float momentum, float wd, int nesterov, int first, uint16_t *params_bf16,
                  ct_stream_t stream);

// LARS (nn/lars.h) over parameter tensors given as ranges of the flat buffers. A tensor's squared
// norm is summed in double over CT_LARS_CHUNKS contiguous chunks of ceil(count / CT_LARS_CHUNKS)
// elements, each in element order, then the chunks in order: the CPU (nn/lars.c) sums the same
// way, so both backends take bit-identical steps.
#define CT_LARS_CHUNKS 256
typedef struct {
    size_t offset, count;
    int skip;  // BN parameter or bias: no trust ratio, no weight decay
} CtLarsTensor;
// norms[2 t] = |w_t|, norms[2 t + 1] = |g_t| (device memory, 2 * n_tensors doubles); then
// v = momentum v + lr trust (g + wd w) (skipped tensors: v = momentum v + lr g), w -= v.
void lars_step_gpu(float *params, const float *grads, float *buf, const CtLarsTensor *tensors, int n_tensors,
                   double *norms, float lr, float momentum, float wd, float eta, uint16_t *params_bf16,
                   ct_stream_t stream);

// AdamW (torch.optim.AdamW) and LAMB (timm's Lamb): the scalars of one step, computed on the
// host in double by nn/optim.c's optim_adam_args and rounded to float where torch rounds its
// Python floats, so both backends and the reference use the same ones.
typedef struct {
    float lr, wd;               // the step's rate; weight decay of the decayed elements
    float beta1, beta2;         // (float) beta
    float omb1, omb2;           // (float)(1 - beta), the difference taken in double
    float decay_factor;         // adamw: (float)(1 - lr wd)
    float neg_step_size;        // adamw: (float)-(lr / (1 - beta1^step))
    float bc1;                  // lamb: (float)(1 - beta1^step)
    float bc2_sqrt;             // (float)sqrt(1 - beta2^step)
    float eps;
    double max_grad_norm;       // lamb: gradients divided by max(|g| / this, 1) (0: no clipping)
} CtAdamArgs;

// AdamW over the flat fp32 buffers (nn/adamw.c's adamw_update per element, unfused like it: the
// same bits). decay[i] != 0 decays element i (NULL: every element). Per element, decayed first:
//   p = p * decay_factor; m = beta1 m + omb1 g; v = beta2 v + (omb2 g) g;
//   p = p + (neg_step_size m) / (sqrt(v) / bc2_sqrt + eps)
void adamw_step_gpu(float *params, const float *grads, float *exp_avg, float *exp_avg_sq, const uint8_t *decay,
                    size_t n, const CtAdamArgs *a, uint16_t *params_bf16, ct_stream_t stream);

// LAMB (nn/lamb.c's lamb_update: the same bits) over parameter tensors as ranges of the flat
// buffers (`skip`: not decayed, hence not adapted). norms: device memory, 3 doubles a tensor.
// Squared norms are summed as LARS's are (CT_LARS_CHUNKS chunks in order). Three launches: the
// gradients' norms (for the global clip), the moments with the norms of w and of the update
// u = (m / bc1) / (sqrt(v) / bc2_sqrt + eps) (+ wd w), then w = w + (-lr) (u trust).
void lamb_step_gpu(const CtLarsTensor *tensors, int n_tensors, float *params, const float *grads, float *exp_avg,
                   float *exp_avg_sq, double *norms, const CtAdamArgs *a, uint16_t *params_bf16, ct_stream_t stream);

// EMA of the weights (kernels/ema.cu), the twins of nn/ema.h: ema += (1 - decay) * (w - ema) per
// element, unfused like the CPU (bit-identical); the swap exchanges a and b and, when a_bf16 is not
// NULL, refreshes that bf16 copy of a (the live weights' operand copy) in the same pass.
void ema_update_gpu(float *ema, const float *w, size_t n, float decay, ct_stream_t stream);
void ema_swap_gpu(float *a, float *b, size_t n, uint16_t *a_bf16, ct_stream_t stream);

// ---------------------------------------------------------------------------------------------
// Cost accounting (tools/bench_gpu_cost.c; kernels/cost.cu). Only the emulated build counts
// (ct_cost_available() == 1); on a real GPU these do nothing. While enabled, every kernel that runs
// leaves a record: the warp-level mma.sync m16n8k16 instructions it issued (4096 FLOPs each), the
// global-memory bytes it requested through cp.async and kernels/act.cuh's accessors (plain
// pointer dereferences in kernels are NOT seen), and the distinct bytes those requests touched.
// Device-to-device copies and memsets leave a record too (grid and block 0).
// ct_cost_tag labels the following launches (the GPU executor's profiler marks ops with it).
typedef struct {
    char name[160];    // demangled kernel symbol (or the launch site's spelling)
    char symbol[160];  // mangled symbol, "" when unknown (joins nvcc's per-kernel resources)
    unsigned grid[3], block[3];
    size_t dyn_smem;
    int tag_op, tag_part;  // last ct_cost_tag before the launch (-1, 0 initially)
    unsigned long long mma;                   // mma.sync m16n8k16 per warp (not per thread)
    unsigned long long rd_bytes, wr_bytes;    // requested (counted paths)
    unsigned long long rd_unique, wr_unique;  // distinct bytes of those requests
    unsigned long long accesses;              // counted requests
} CtCostLaunch;
int ct_cost_available(void);
void ct_cost_enable(int on);  // on: forgets earlier records and starts counting
void ct_cost_tag(int op, int part);
size_t ct_cost_count(void);
int ct_cost_get(size_t i, CtCostLaunch *out);  // 0 when i is out of range
// Plans that change with the batch, so the cost tool can price their workspace traffic at a batch
// it did not run: BN's row chunks of partial sums for M rows (kernels/batchnorm.cu), and the
// split count of a weight-gradient GEMM on engine algo (CtConvAlgo; CT_CONV_AUTO: the default)
// (conv.cu's table).
int batchnorm_gpu_chunks(int M);
int conv2d_gpu_wgrad_splits(int algo, int M, int N, int K);

#ifdef __cplusplus
}
#endif
