// GPU twin of dist/gradsync.h: a rank's device gradients averaged over the ranks bucket by
// bucket while its backward is still running.
//
// The executor calls the ready callback after ENQUEUING each op's gradient work on the compute
// stream (nn/model_cuda.h), so a finished bucket is marked by an event recorded there. A
// communication thread per rank makes a communication stream wait for that event and averages the
// bucket there: with NCCL, an in-place ncclAvg on the device buffer; without it, host staging (a
// copy to pinned host memory, the rank-order allreduce of dist/comm.h, the mean copied back).
// gpu_gradsync_wait makes the compute stream wait for the communication stream, so the optimizer
// step enqueued after it sees the averaged gradients, the same bits on every rank.
#pragma once
#include <stddef.h>

#include "dist/comm.h"
#include "dist/nccl.h"
#include "kernels/kernels.h"  // ct_stream_t

#ifdef __cplusplus
extern "C" {
#endif

typedef struct GpuGradSync GpuGradSync;

// dgrads: the rank's device gradient buffer (n_params floats) on `device`; compute: the stream
// backward runs on. Buckets as gradsync_plan over bounds[0..n_bounds) (only read during the
// call). Transport: NCCL when nccl_comm is not NULL (an in-place ncclAvg on the communication
// stream, nothing through the host), else host staging over c. Starts the communication thread.
GpuGradSync *gpu_gradsync_create(Comm *c, const size_t *bounds, size_t n_bounds, size_t n_params, float *dgrads,
                                 size_t bucket_bytes, int device, ct_stream_t compute, const NcclLib *nccl,
                                 void *nccl_comm);
void gpu_gradsync_free(GpuGradSync *s);
void gpu_gradsync_begin(GpuGradSync *s);
// The executor's ready callback (ctx = the GpuGradSync; the shape of nn/resnet.h's GradReadyFn).
void gpu_gradsync_ready(void *ctx, size_t n);
// Queues the rest, waits until every bucket is averaged and copied back, and orders the compute
// stream after those copies. Returns 0, or -1 when a collective failed (comm error mode 1).
int gpu_gradsync_wait(GpuGradSync *s);
int gpu_gradsync_buckets(const GpuGradSync *s);

#ifdef __cplusplus
}
#endif
