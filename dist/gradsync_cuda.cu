// Bucketed, overlapped averaging of device gradients over ranks (see dist/gradsync_cuda.h).
// Host code only (no kernels): the CUDA runtime's events and streams around dist/bucketq.h's
// communication thread, with NCCL or dist/comm.h as the transport.
#include <string.h>

#include "dist/bucketq.h"
#include "dist/gradsync.h"
#include "dist/gradsync_cuda.h"
#include "kernels/common.cuh"
#include "kernels/mutable.h"

struct GpuGradSync {
    Comm *c;
    const NcclLib *nccl;
    void *ncomm;  // NULL: host staging
    float *dgrads;      // device
    float *host;        // pinned staging, n_params floats
    Bucket *b;
    int nb, device, released;
    cudaStream_t compute, comm;
    cudaEvent_t *ready;  // per bucket: recorded on the compute stream when backward has enqueued it
    cudaEvent_t uploaded;
    BucketQueue *q;
};

static void on_comm_thread(void *ctx) { CT_CUDA_CHECK(cudaSetDevice(((GpuGradSync *)ctx)->device)); }

// The communication thread's work on bucket i: wait (on the comm stream) for backward to have
// produced it, then average it in place.
static int reduce_bucket(void *ctx, int i) {
    GpuGradSync *s = (GpuGradSync *)ctx;
    const int R = comm_size(s->c);
    const Bucket bk = s->b[i];
    const size_t n = bk.hi - bk.lo;
    if (R == 1) return 0;
    CT_MUTABLE("ready") CT_CUDA_CHECK(cudaStreamWaitEvent(s->comm, s->ready[i], 0));
    if (s->ncomm) {
        char err[512];
        if (nccl_allreduce_mean_f32(s->nccl, s->ncomm, s->dgrads + bk.lo, n, s->comm, err, sizeof err))
            ct_die("rank %d: gradient bucket %d of %d: %s", comm_rank(s->c), i + 1, s->nb, err);
        return 0;
    }
    float *h = s->host + bk.lo;
    CT_CUDA_CHECK(cudaMemcpyAsync(h, s->dgrads + bk.lo, n * sizeof(float), cudaMemcpyDeviceToHost, s->comm));
    CT_MUTABLE("staging-sync") CT_CUDA_CHECK(cudaStreamSynchronize(s->comm));
    if (comm_allreduce_f32(s->c, h, n)) return -1;
    for (size_t k = 0; k < n; k++) h[k] /= (float)R;  // the same mean as the CPU ranks'
    CT_CUDA_CHECK(cudaMemcpyAsync(s->dgrads + bk.lo, h, n * sizeof(float), cudaMemcpyHostToDevice, s->comm));
    return 0;
}

GpuGradSync *gpu_gradsync_create(Comm *c, const size_t *bounds, size_t n_bounds, size_t n_params, float *dgrads,
                                 size_t bucket_bytes, int device, ct_stream_t compute, const NcclLib *nccl,
                                 void *nccl_comm) {
    GpuGradSync *s = (GpuGradSync *)ct_zalloc(sizeof *s);
    s->c = c;
    s->nccl = nccl;
    s->ncomm = nccl_comm;
    s->dgrads = dgrads;
    s->device = device;
    s->compute = (cudaStream_t)compute;
    s->b = gradsync_plan_alloc(bounds, n_bounds, n_params, bucket_bytes, &s->nb);
    CT_CUDA_CHECK(cudaSetDevice(device));
    CT_CUDA_CHECK(cudaMallocHost((void **)&s->host, (n_params ? n_params : 1) * sizeof(float)));
    CT_CUDA_CHECK(cudaStreamCreateWithFlags(&s->comm, cudaStreamNonBlocking));
    s->ready = (cudaEvent_t *)ct_alloc(s->nb * sizeof(cudaEvent_t));
    for (int i = 0; i < s->nb; i++) CT_CUDA_CHECK(cudaEventCreateWithFlags(&s->ready[i], cudaEventDisableTiming));
    CT_CUDA_CHECK(cudaEventCreateWithFlags(&s->uploaded, cudaEventDisableTiming));
    s->q = bucketq_create(s->nb, reduce_bucket, s, on_comm_thread);
    return s;
}

void gpu_gradsync_free(GpuGradSync *s) {
    if (!s) return;
    bucketq_free(s->q);
    if (s->ncomm) nccl_destroy(s->nccl, s->ncomm);
    for (int i = 0; i < s->nb; i++) cudaEventDestroy(s->ready[i]);
    cudaEventDestroy(s->uploaded);
    cudaStreamDestroy(s->comm);
    cudaFreeHost(s->host);
    free(s->ready);
    free(s->b);
    free(s);
}

void gpu_gradsync_begin(GpuGradSync *s) {
    bucketq_begin(s->q);
    s->released = 0;
}

// Buckets [released, upto) are complete in the work enqueued so far: mark that point on the
// compute stream, then hand them to the thread.
static void release_to(GpuGradSync *s, int upto) {
    for (; s->released < upto; s->released++) CT_CUDA_CHECK(cudaEventRecord(s->ready[s->released], s->compute));
    bucketq_release(s->q, upto);
}

void gpu_gradsync_ready(void *ctx, size_t n) {
    GpuGradSync *s = (GpuGradSync *)ctx;
    int q = s->released;
    while (q < s->nb && s->b[q].hi <= n) q++;
    release_to(s, q);
}

int gpu_gradsync_wait(GpuGradSync *s) {
    release_to(s, s->nb);
    int rc = bucketq_wait(s->q);
    // Every copy back / NCCL call was enqueued on the comm stream; the optimizer (compute stream)
    // waits for them.
    CT_CUDA_CHECK(cudaEventRecord(s->uploaded, s->comm));
    CT_MUTABLE("uploaded") CT_CUDA_CHECK(cudaStreamWaitEvent(s->compute, s->uploaded, 0));
    return rc;
}

int gpu_gradsync_buckets(const GpuGradSync *s) { return s->nb; }
