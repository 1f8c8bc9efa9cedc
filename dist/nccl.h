// NCCL, loaded at run time (dlopen): ctrain links no NCCL and needs none for one rank or CPU
// ranks. $NCCL_LIBRARY names the library to load, else libnccl.so.2 from the usual search path.
//
// Only the handful of calls the GPU ranks use, declared here with NCCL's ABI (nccl.h 2.x: the
// 128-byte unique id, ncclResult_t/ncclDataType_t/ncclRedOp_t values) so no header is needed at
// build time either. Streams are passed as void * (cudaStream_t). Every call returns 0 or -1 with
// NCCL's own error string (and the call) in err.
#pragma once
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    char internal[128];
} NcclId;

typedef struct NcclLib NcclLib;

// The library (loaded once per process), or NULL with the reason in err.
const NcclLib *nccl_load(char *err, size_t errlen);
// "2.28.3 (/usr/lib/x86_64-linux-gnu/libnccl.so.2)"
const char *nccl_describe(const NcclLib *lib);

int nccl_unique_id(const NcclLib *lib, NcclId *id, char *err, size_t errlen);
// Collective initialisation of several local ranks from one thread (ncclGroupStart/End around
// ncclCommInitRank): before the call for ranks[k], set_device(ctx, k) selects the GPU of that
// local rank (the device of its buffers and streams; with several nodes the global rank says
// nothing about it).
int nccl_init_ranks(const NcclLib *lib, void **comms, int n_local, int world, const int *ranks, const NcclId *id,
                    void (*set_device)(void *ctx, int local_rank), void *ctx, char *err, size_t errlen);
// In place, on the stream: buf = mean over ranks of buf (ncclAvg over fp32).
int nccl_allreduce_mean_f32(const NcclLib *lib, void *comm, float *buf, size_t n, void *stream, char *err,
                            size_t errlen);
void nccl_destroy(const NcclLib *lib, void *comm);

#ifdef __cplusplus
}
#endif
