// ONNX export of a ResNet's evaluation graph, written as protobuf by hand (no ONNX library).
//
// The graph (opset 17, IR version 8):
//   input "input"  float [N, C, H, W] (NCHW; N is the dynamic dimension "N"), already normalised
//   Conv (BatchNorm folded in: weight and bias) [Relu] ... MaxPool ... Add [Relu] ...
//   GlobalAveragePool, Flatten, Gemm (transB = 1)
//   output "logits" float [N, num_classes]
// BatchNorm folding uses the running statistics (eval mode, eps 1e-5), computed in double and
// rounded once: w'[k] = w[k] * g[k] / sqrt(v[k] + eps), b'[k] = beta[k] - m[k] * g[k] / sqrt(v[k] + eps).
// Normalisation is NOT in the graph: the caller records it in metadata_props (mean, std, sizes).
// Conv weights are KRSC in ctrain's memory and OIHW in the file.
#pragma once
#include "nn/resnet.h"

#ifdef __cplusplus
extern "C" {
#endif

#define ONNX_OPSET 17
#define ONNX_IR_VERSION 8
#define ONNX_BN_EPS 1e-5

// Serialises m's eval graph for an H x W input as an ONNX ModelProto into a malloc'd buffer
// (*size bytes; free it). meta: n_meta key/value pairs for metadata_props; doc: the model's
// doc_string (may be NULL). Dies (naming the op) if the op list has a shape this writer does not
// know (a conv not followed by its BatchNorm).
uint8_t *onnx_encode_resnet(const ResNet *m, int H, int W, const char *producer_version,
                            const char *doc, const char *const *meta_keys,
                            const char *const *meta_vals, int n_meta, size_t *size);
// The same written atomically to path (ct_atomic_open/commit); dies naming path on I/O failure.
void onnx_write_resnet(const char *path, const ResNet *m, int H, int W, const char *producer_version,
                       const char *doc, const char *const *meta_keys, const char *const *meta_vals,
                       int n_meta);

#ifdef __cplusplus
}
#endif
