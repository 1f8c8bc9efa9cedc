// GPU twin of dist/gradsync.h: a rank's device gradients averaged over the ranks bucket by
// bucket while its backward is still running.
//
// The executor calls the ready callback after ENQUEUING each op's gradient work on the compute
// stream (kernels/model_cuda.h), so a finished bucket is marked by an event recorded there. A
// communication thread per rank waits for that event, and moves the bucket through the transport:
// today host staging (a copy to pinned host memory on a communication stream, the rank-order
// host allreduce of dist/comm.h, the mean copied back); NCCL will replace the middle, not the
// structure. gpu_gradsync_wait makes the compute stream wait for the last copy back, so the
// optimizer step enqueued after it sees the averaged gradients. The result is the same bits on
// every rank (and the same as the CPU ranks' average of the same gradients).
#pragma once
#include <stddef.h>

#include "dist/comm.h"
#include "kernels/kernels.h"
#include "nn/resnet.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct GpuGradSync GpuGradSync;

// dgrads: the rank's device gradient buffer (m->n_params floats) on `device`; compute: the stream
// backward runs on. Buckets as gradsync_plan. Starts the communication thread.
GpuGradSync *gpu_gradsync_create(Comm *c, const ResNet *m, float *dgrads, size_t bucket_bytes, int device,
                                 ct_stream_t compute);
void gpu_gradsync_free(GpuGradSync *s);
void gpu_gradsync_begin(GpuGradSync *s);
// The executor's GradReadyFn (ctx = the GpuGradSync).
void gpu_gradsync_ready(void *ctx, size_t n);
// Queues the rest, waits until every bucket is averaged and copied back, and orders the compute
// stream after those copies. Returns 0, or -1 when a collective failed (comm error mode 1).
int gpu_gradsync_wait(GpuGradSync *s);
int gpu_gradsync_buckets(const GpuGradSync *s);

#ifdef __cplusplus
}
#endif
