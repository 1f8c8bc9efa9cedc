// Bucketed, overlapped averaging of device gradients over ranks (see kernels/gradsync_cuda.h).
// Host code only (no kernels): the CUDA runtime's events and streams around dist/comm.h.
#include <pthread.h>
#include <string.h>

#include "dist/gradsync.h"
#include "kernels/common.cuh"
#include "kernels/gradsync_cuda.h"

#define CK(call)                                                                                 \
    do {                                                                                         \
        cudaError_t err_ = (call);                                                               \
        if (err_ != cudaSuccess) ct_die("cuda: %s: %s (%s:%d)", #call, cudaGetErrorString(err_), \
                                        __FILE__, __LINE__);                                     \
    } while (0)

struct GpuGradSync {
    Comm *c;
    const NcclLib *nccl;
    void *ncomm;  // NULL: host staging
    float *dgrads;      // device
    float *host;        // pinned staging, n_params floats
    Bucket *b;
    int nb, device;
    cudaStream_t compute, comm;
    cudaEvent_t *ready;  // per bucket: recorded on the compute stream when backward has enqueued it
    cudaEvent_t uploaded;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int queued, done, failed, quit;
};

static void *comm_thread(void *arg) {
    GpuGradSync *s = (GpuGradSync *)arg;
    CK(cudaSetDevice(s->device));  // the current device is per host thread
    const int R = comm_size(s->c);
    pthread_mutex_lock(&s->mu);
    for (;;) {
        while (!s->quit && s->done == s->queued) pthread_cond_wait(&s->cv, &s->mu);
        if (s->quit) break;
        const int i = s->done;
        const Bucket bk = s->b[i];
        int skip = s->failed;
        pthread_mutex_unlock(&s->mu);
        int rc = 0;
        if (!skip && s->ncomm) {
            char err[512];
            CK(cudaStreamWaitEvent(s->comm, s->ready[i], 0));
            if (nccl_allreduce_mean_f32(s->nccl, s->ncomm, s->dgrads + bk.lo, bk.hi - bk.lo, s->comm, err, sizeof err))
                ct_die("rank %d: gradient bucket %d of %d: %s", comm_rank(s->c), i + 1, s->nb, err);
        } else if (!skip && R > 1) {
            size_t n = bk.hi - bk.lo;
            float *h = s->host + bk.lo;
            CK(cudaStreamWaitEvent(s->comm, s->ready[i], 0));
            CK(cudaMemcpyAsync(h, s->dgrads + bk.lo, n * sizeof(float), cudaMemcpyDeviceToHost, s->comm));
            CK(cudaStreamSynchronize(s->comm));
            rc = comm_allreduce_f32(s->c, h, n);
            if (!rc) {
                for (size_t k = 0; k < n; k++) h[k] /= (float)R;  // the same mean as the CPU ranks'
                CK(cudaMemcpyAsync(s->dgrads + bk.lo, h, n * sizeof(float), cudaMemcpyHostToDevice, s->comm));
            }
        }
        pthread_mutex_lock(&s->mu);
        if (rc) s->failed = 1;
        s->done++;
        pthread_cond_broadcast(&s->cv);
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

GpuGradSync *gpu_gradsync_create(Comm *c, const ResNet *m, float *dgrads, size_t bucket_bytes, int device,
                                 ct_stream_t compute, const NcclLib *nccl, void *nccl_comm) {
    GpuGradSync *s = (GpuGradSync *)ct_zalloc(sizeof *s);
    s->c = c;
    s->nccl = nccl;
    s->ncomm = nccl_comm;
    s->dgrads = dgrads;
    s->device = device;
    s->compute = (cudaStream_t)compute;
    s->nb = gradsync_plan(m, bucket_bytes, NULL, 0);
    s->b = (Bucket *)ct_alloc(s->nb * sizeof(Bucket));
    gradsync_plan(m, bucket_bytes, s->b, s->nb);
    CK(cudaSetDevice(device));
    CK(cudaMallocHost((void **)&s->host, (m->n_params ? m->n_params : 1) * sizeof(float)));
    CK(cudaStreamCreateWithFlags(&s->comm, cudaStreamNonBlocking));
    s->ready = (cudaEvent_t *)ct_alloc(s->nb * sizeof(cudaEvent_t));
    for (int i = 0; i < s->nb; i++) CK(cudaEventCreateWithFlags(&s->ready[i], cudaEventDisableTiming));
    CK(cudaEventCreateWithFlags(&s->uploaded, cudaEventDisableTiming));
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    s->queued = s->done = s->nb;  // idle until gpu_gradsync_begin
    if (pthread_create(&s->thread, NULL, comm_thread, s)) ct_die("gpu_gradsync: cannot start the communication thread");
    return s;
}

void gpu_gradsync_free(GpuGradSync *s) {
    if (!s) return;
    pthread_mutex_lock(&s->mu);
    s->quit = 1;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    pthread_join(s->thread, NULL);
    if (s->ncomm) nccl_destroy(s->nccl, s->ncomm);
    for (int i = 0; i < s->nb; i++) cudaEventDestroy(s->ready[i]);
    cudaEventDestroy(s->uploaded);
    cudaStreamDestroy(s->comm);
    cudaFreeHost(s->host);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    free(s->ready);
    free(s->b);
    free(s);
}

void gpu_gradsync_begin(GpuGradSync *s) {
    pthread_mutex_lock(&s->mu);
    if (s->done != s->nb) ct_die("gpu_gradsync_begin: the previous step's gradients were never waited for");
    s->queued = s->done = 0;
    s->failed = 0;
    pthread_mutex_unlock(&s->mu);
}

// Marks buckets [queued, q) ready: an event on the compute stream after the work enqueued so far.
static void queue_to(GpuGradSync *s, int q) {
    pthread_mutex_lock(&s->mu);
    for (int i = s->queued; i < q; i++) CK(cudaEventRecord(s->ready[i], s->compute));
    if (q > s->queued) {
        s->queued = q;
        pthread_cond_broadcast(&s->cv);
    }
    pthread_mutex_unlock(&s->mu);
}

void gpu_gradsync_ready(void *ctx, size_t n) {
    GpuGradSync *s = (GpuGradSync *)ctx;
    int q = s->queued;  // only this (the backward) thread moves it
    while (q < s->nb && s->b[q].hi <= n) q++;
    if (q != s->queued) queue_to(s, q);
}

int gpu_gradsync_wait(GpuGradSync *s) {
    queue_to(s, s->nb);
    pthread_mutex_lock(&s->mu);
    while (s->done < s->nb) pthread_cond_wait(&s->cv, &s->mu);
    int failed = s->failed;
    pthread_mutex_unlock(&s->mu);
    // Every copy back was enqueued on the comm stream; the optimizer (compute stream) waits for them.
    CK(cudaEventRecord(s->uploaded, s->comm));
    CK(cudaStreamWaitEvent(s->compute, s->uploaded, 0));
    return failed ? -1 : 0;
}

int gpu_gradsync_buckets(const GpuGradSync *s) { return s->nb; }
