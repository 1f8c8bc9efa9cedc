// Safetensors reading and writing (https://github.com/huggingface/safetensors format):
//   8 bytes little-endian u64 header size N, N bytes of JSON header
//   {"name": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, ..., "__metadata__": {str: str}}
//   then the data section; offsets are relative to its start.
//
// Two layers:
// - generic: parse/open a file into a tensor table (st_parse never exits: every problem is an
//   error string naming the tensor, key or byte offset; for fuzzing and tests), and write a list
//   of tensors atomically. The header is untrusted and parsed strictly with jansson: one JSON
//   object starting at byte 8, padded only with spaces, no duplicate keys, every entry's dtype,
//   shape and data_offsets present and well typed, sizes matching the shapes, the tensors tiling
//   the data section exactly (no overlap, hole or unclaimed byte), __metadata__ string -> string.
// - ResNet state: torchvision state_dict names and layouts (conv OIHW in the file, KRSC in memory;
//   running_mean/var F32; num_batches_tracked I64 scalar), strict like load_state_dict(strict=True):
//   a missing, unexpected, mis-shaped or wrongly typed tensor is an error naming it.
#pragma once
#include <stddef.h>
#include <stdint.h>

#include "nn/resnet.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { ST_F32 = 0, ST_F64, ST_F16, ST_BF16, ST_I64, ST_I32, ST_I16, ST_I8, ST_U8, ST_BOOL, ST_NDTYPES } StDtype;
const char *st_dtype_name(int dtype);  // "F32", ...
size_t st_dtype_size(int dtype);

#define ST_MAX_DIMS 8

typedef struct {
    char *name;
    int dtype;                 // StDtype
    int ndim;
    int64_t shape[ST_MAX_DIMS];
    size_t count;              // product of shape (1 for a scalar)
    const uint8_t *data;       // points into the file's buffer (may be unaligned: use memcpy)
    size_t nbytes;
} StTensor;

typedef struct {
    uint8_t *buf;              // whole file (owned when opened with st_open)
    size_t size;
    int owned;
    int n;
    StTensor *t;
    int n_meta;
    char **meta_key, **meta_val;  // __metadata__ (string -> string)
} StFile;

// Parse a safetensors image in memory (buf is borrowed and must outlive f). Returns NULL on
// success, else a malloc'd message (caller frees); f is then empty and needs no st_close.
char *st_parse(const uint8_t *buf, size_t size, StFile *f);
// Read and parse a file. NULL on success, else a malloc'd message that starts with the path.
char *st_open(const char *path, StFile *f);
void st_close(StFile *f);
const StTensor *st_find(const StFile *f, const char *name);
const char *st_meta(const StFile *f, const char *key);  // NULL if absent
// Copy a tensor out as float32 (F32, F64, F16, BF16 converted); NULL on success, else error text.
char *st_to_f32(const StTensor *t, float *dst, size_t count);

// Writing. Tensors are written in the given order; data is raw little-endian of the dtype.
typedef struct {
    const char *name;
    int dtype;
    int ndim;
    int64_t shape[ST_MAX_DIMS];
    const void *data;
} StWrite;
// Atomic write (ct_atomic_*); dies naming the path on I/O failure. meta may be NULL, else
// n_meta key/value pairs.
void st_write(const char *path, const StWrite *ts, int n, const char *const *meta_keys,
              const char *const *meta_vals, int n_meta);

// ResNet state. Save writes every state entry under its torchvision name (params as F32 in torch
// layout, running stats F32, num_batches_tracked I64 scalar); extra tensors (e.g. optimizer state
// of a checkpoint) may be appended. Load is strict: every entry of m present with the exact dtype
// and shape, no tensor that m does not have (besides names starting with one of allow_prefix,
// e.g. "optim." for checkpoints; may be NULL). The one exception is torch's own: a missing
// num_batches_tracked loads as 0, as BatchNorm's load_state_dict accepts state_dicts saved before
// the counter existed (older torchvision weights).
void st_save_resnet(const char *path, const ResNet *m, const StWrite *extra, int n_extra,
                    const char *const *meta_keys, const char *const *meta_vals, int n_meta);
// Non-exiting: NULL on success, else a malloc'd message naming the tensor. m is only modified
// when the whole file checks out.
char *st_load_resnet_from(const StFile *f, ResNet *m, const char *allow_prefix);
// The same, except that m's entries whose names start with keep_prefix (e.g. "fc." to fine-tune
// on other classes) are neither required nor loaded: m keeps its own values, whatever the file
// holds under those names.
char *st_load_resnet_except(const StFile *f, ResNet *m, const char *allow_prefix, const char *keep_prefix);
// Convenience: open + load; dies with "PATH: message" on any error.
void st_load_resnet(const char *path, ResNet *m);

#ifdef __cplusplus
}
#endif
